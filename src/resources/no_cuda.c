/* no_cuda.c — stands in for the GPU backends a build lacks; compiled into every build.
 *
 * Without CUDA, rap/cuda.h's functions say why they are missing; without HIP, rap/hip.h's do, so
 * a program written against either header links with any rap (they are exported like the API).
 * In a build with neither, the names DEVICE, PINNED and UM still resolve, and asking for one says
 * why it is missing.
 */
#include "rap_internal.h"

#if !RAP_HAVE_CUDA && !RAP_HAVE_HIP
bool rapi_cuda_compiled(void) { return false; }

static int no_cuda_init(rap_allocator *self, void *state, rap_options *opts) {
  (void)state;
  (void)opts;
  return rapi_fail(RAP_ERR_UNSUPPORTED,
                   "%s: rap was built without CUDA (RAP_WITH_CUDA=OFF or no toolkit found)",
                   rap_allocator_name(self));
}

const rap_strategy rapi_pinned_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "Pinned",
    .flags = RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(rapi_tracked),
    .init = no_cuda_init,
    RAPI_TRACKED_METHODS,
};

int rap_device_pointer(rap_allocator *a, const void *ptr, void **out) {
  if (a == NULL || ptr == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_device_pointer: allocator, pointer or out is NULL");
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_device_pointer('%s'): rap was built without CUDA",
                   rap_allocator_name(a));
}

int rapi_gpu_peer_access(rap_allocator *root, int device, int enable, int *owner) {
  (void)device;
  (void)enable;
  *owner = -1;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_allocator_set_peer_access('%s'): rap was built without "
                   "CUDA, so this is host memory: there is no device memory to share",
                   rap_allocator_name(root));
}

int rapi_gpu_peers_option(rap_allocator *self, int owner, rap_options *opts) {
  (void)self;
  (void)owner;
  (void)opts;
  return RAP_OK;
}

int rapi_gpu_memory_info(rap_allocator *platform, size_t *free_bytes, size_t *total_bytes) {
  (void)free_bytes;
  (void)total_bytes;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: rap was built without CUDA", rap_allocator_name(platform));
}

const rap_strategy rapi_cuda_platform = {
    .version = RAP_STRATEGY_VERSION,
    .name = "CUDA",
    .flags = RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(rapi_tracked),
    .init = no_cuda_init,
    RAPI_TRACKED_METHODS,
};
#endif

#if !RAP_HAVE_CUDA
/* rap/cuda.h's functions, for programs that include it against a build without CUDA. */
RAP_API_BEGIN
struct CUstream_st;
int rap_resource_create_cuda(rap_manager *rm, struct CUstream_st *s, rap_resource **out);
int rap_resource_create_cuda_stream(rap_manager *rm, rap_resource **out);
struct CUstream_st *rap_resource_cuda_stream(const rap_resource *r);

int rap_resource_create_cuda(rap_manager *rm, struct CUstream_st *s, rap_resource **out) {
  (void)rm;
  (void)s;
  (void)out;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_create_cuda: rap was built without CUDA");
}

int rap_resource_create_cuda_stream(rap_manager *rm, rap_resource **out) {
  (void)rm;
  (void)out;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_create_cuda_stream: rap was built without CUDA");
}

struct CUstream_st *rap_resource_cuda_stream(const rap_resource *r) {
  (void)r;
  return NULL;
}

struct CUgraph_st;
int rap_resource_cuda_begin_capture(rap_resource *r, int mode);   /* an enum in rap/cuda.h */
int rap_resource_cuda_end_capture(rap_resource *r, struct CUgraph_st **graph);

int rap_resource_cuda_begin_capture(rap_resource *r, int mode) {
  (void)r;
  (void)mode;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_cuda_begin_capture: rap was built without CUDA");
}

int rap_resource_cuda_end_capture(rap_resource *r, struct CUgraph_st **graph) {
  (void)r;
  (void)graph;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_cuda_end_capture: rap was built without CUDA");
}
RAP_API_END
#endif

#if !RAP_HAVE_HIP
/* rap/hip.h's functions, for programs that include it against a build without HIP
 * (RAP_WITH_HIP=ON builds it). hipStream_t is a pointer on both of HIP's platforms. */
RAP_API_BEGIN
struct ihipStream_t;
int rap_resource_create_hip(rap_manager *rm, struct ihipStream_t *s, rap_resource **out);
int rap_resource_create_hip_stream(rap_manager *rm, rap_resource **out);
struct ihipStream_t *rap_resource_hip_stream(const rap_resource *r);

int rap_resource_create_hip(rap_manager *rm, struct ihipStream_t *s, rap_resource **out) {
  (void)rm;
  (void)s;
  (void)out;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_create_hip: rap was built without HIP "
                   "(RAP_WITH_HIP=ON builds it)");
}

int rap_resource_create_hip_stream(rap_manager *rm, rap_resource **out) {
  (void)rm;
  (void)out;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_create_hip_stream: rap was built without HIP "
                   "(RAP_WITH_HIP=ON builds it)");
}

struct ihipStream_t *rap_resource_hip_stream(const rap_resource *r) {
  (void)r;
  return NULL;
}

struct ihipGraph;
int rap_resource_hip_begin_capture(rap_resource *r, int mode);   /* an enum in rap/hip.h */
int rap_resource_hip_end_capture(rap_resource *r, struct ihipGraph **graph);

int rap_resource_hip_begin_capture(rap_resource *r, int mode) {
  (void)r;
  (void)mode;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_hip_begin_capture: rap was built without HIP "
                   "(RAP_WITH_HIP=ON builds it)");
}

int rap_resource_hip_end_capture(rap_resource *r, struct ihipGraph **graph) {
  (void)r;
  (void)graph;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_hip_end_capture: rap was built without HIP "
                   "(RAP_WITH_HIP=ON builds it)");
}
RAP_API_END
#endif
