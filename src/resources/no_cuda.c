/* no_cuda.c — stands in for the CUDA platform allocators in a build without CUDA.
 *
 * The names DEVICE, PINNED and UM still resolve, and asking for one says why it is missing.
 */
#include "rap_internal.h"

bool rapi_cuda_compiled(void) { return false; }

static int no_cuda_init(rap_allocator *self, void *state, rap_options *opts) {
  (void)state;
  (void)opts;
  return rapi_fail(RAP_ERR_UNSUPPORTED,
                   "%s: rap was built without CUDA (RAP_WITH_CUDA=OFF or no toolkit found)",
                   rap_allocator_name(self));
}

const rap_strategy rapi_cuda_platform = {
    .version = RAP_STRATEGY_VERSION,
    .name = "CUDA",
    .flags = RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(rapi_tracked),
    .init = no_cuda_init,
    RAPI_TRACKED_METHODS,
};

/* rap/cuda.h's functions, for programs that include it against a build without CUDA. */
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
