/* monet's allocator as C functions, exported by libmonet.so. They match PyTorch's pluggable
 * allocator (torch.cuda.memory.CUDAPluggableAllocator("libmonet.so", "monet_malloc",
 * "monet_free")), and serve any other C or C++ program too.
 *
 * device: a CUDA device index, or -1 for host memory. stream: the CUDA stream the memory is
 * used on (NULL for the default stream, and for host memory). On a request the budget cannot
 * hold, monet_malloc throws c10::OutOfMemoryError when called from C++ (which PyTorch reports
 * as torch.cuda.OutOfMemoryError); monet_try_malloc returns NULL instead. A size of 0 gives
 * NULL, and monet_free(NULL, ...) does nothing. Freeing a pointer monet did not hand out (or
 * freed already) throws std::invalid_argument, and a device index that is not there
 * std::out_of_range, each with a message saying so, and so does the first call for a malformed
 * MONET_* variable (monet::ConfigError, as monet::install() throws): from C, where nothing can
 * catch them, the program ends with that message. */
#ifndef MONET_C_API_H_
#define MONET_C_API_H_

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st* cudaStream_t;

void* monet_malloc(ssize_t size, int device, cudaStream_t stream);
void monet_free(void* ptr, ssize_t size, int device, cudaStream_t stream);
void* monet_try_malloc(size_t size, int device, cudaStream_t stream);
/* The block at ptr is also used on stream: it is reused only after that stream's work is done.
 * A pointer monet did not hand out throws std::invalid_argument, as monet_free does. */
void monet_record_stream(void* ptr, int device, cudaStream_t stream);
/* Bytes allocated and reserved on device now, and the budget (0: none). */
void monet_memory_info(int device, size_t* allocated, size_t* reserved, size_t* budget);

#ifdef __cplusplus
}
#endif

#endif /* MONET_C_API_H_ */
