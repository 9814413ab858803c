// The name torch gives a dtype in Python, for what monet says to people (logs, the predictor's
// state): "float32", "bfloat16", "int64".
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

namespace monet::kernels {

inline std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kLong:
      return "int64";
    case at::kInt:
      return "int32";
    default:
      return c10::toString(t);
  }
}

}  // namespace monet::kernels
