/* no_gpu_platform.c — the GPU platforms in a build without a GPU backend; compiled into every build.
 *
 * The names DEVICE, PINNED, UM and Pinned still resolve, so that a spec written for a GPU machine
 * reads the same here, and making one says why it is missing. Their tables carry the tracked
 * body's methods, never reached since init fails. The devices' side is resources/no_cuda.c.
 */
#include "rap_internal.h"

#if !RAP_HAVE_CUDA && !RAP_HAVE_HIP
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

const rap_strategy rapi_cuda_platform = {
    .version = RAP_STRATEGY_VERSION,
    .name = "CUDA",
    .flags = RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(rapi_tracked),
    .init = no_cuda_init,
    RAPI_TRACKED_METHODS,
};
#endif
