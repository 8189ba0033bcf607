/* rap_torch.h — the C entry points of librap_torch.so (PyTorch's pluggable allocator over rap).
 * rap_torch.py installs them; a C++ program may hand them to CUDAPluggableAllocator itself. */
#ifndef RAP_TORCH_H
#define RAP_TORCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void  *rap_torch_malloc(size_t size, int device, cudaStream_t stream);
void   rap_torch_free(void *ptr, size_t size, int device, cudaStream_t stream);
void   rap_torch_record_stream(void *ptr, cudaStream_t stream);   /* set_record_stream_fn */
void   rap_torch_empty_cache(void);                               /* set_reset_fn */
void   rap_torch_set_memory_fraction(double fraction, int device);   /* set_memory_fraction_fn; throws */
int    rap_torch_memory_fraction(int device, double fraction);      /* the same, as a status */
int    rap_torch_memory_limit(int device, size_t *limit);           /* bytes; 0: none */
size_t rap_torch_release_graph_pools(void);
int    rap_torch_stat_values(int device, int graph, size_t *out, size_t n);
int    rap_torch_stat_count(void);
int    rap_torch_reset_peaks(int device);         /* high-water marks start again */
int    rap_torch_reset_accumulated(int device);   /* running totals start again */
int    rap_torch_spec(int device, char *buf, size_t cap);
const char *rap_torch_last_error(void);
int    rap_torch_python_stack(int depth);    /* Python frames on traced allocations: 0 to 32 */
int    rap_torch_python_stack_depth(void);  /* the one set, else RAP_TRACE_PYTHON_STACK's */

void   rap_torch_use_pool_hooks(int on);   /* after handing PyTorch the three below */

#ifdef __cplusplus
}
#include <functional>
#include <utility>
/* For set_begin_allocate_to_pool, set_end_allocate_to_pool_fn and set_release_pool (C linkage,
 * C++ parameters: PyTorch's MempoolId_t and its capture filter). */
extern "C" void rap_torch_begin_allocate_to_pool(int device, std::pair<unsigned long long, unsigned long long> id,
                                                 std::function<bool(cudaStream_t)> filter);
extern "C" void rap_torch_end_allocate_to_pool(int device, std::pair<unsigned long long, unsigned long long> id);
extern "C" void rap_torch_release_pool(int device, std::pair<unsigned long long, unsigned long long> id);
#endif
#endif /* RAP_TORCH_H */
