#pragma once

#include <cuda_runtime_api.h>

// Launches one kernel on `stream` that keeps the device busy for about `seconds`.
cudaError_t monet_test_spin(double seconds, cudaStream_t stream);
