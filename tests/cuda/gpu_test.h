/* gpu_test.h — the GPU tests' spelling: one test source for the CUDA and the HIP build.
 *
 * GPU_TEST(Platform, X) is CudaPlatform.X in a CUDA build and HipPlatform.X in a HIP build; the
 * runtime's calls are spelled gpu* (src/resources/gpu_runtime.h). A test skips with
 * "no CUDA device: <why>" or "no HIP device: <why>" where none is usable. With RAP_TEST_SMALL set
 * (scripts/device-run.sh sets it under compute-sanitizer, where every launch and API call costs
 * far more), the long loops run a tenth of their rounds: gpu_test_rounds(n).
 */
#ifndef RAP_GPU_TEST_H
#define RAP_GPU_TEST_H

#include "../c/rap_test.h"
#include "resources/gpu_runtime.h"

#include <stdlib.h>
#include <string.h>

#define GPU_CAT_(a, b) a##b
#define GPU_CAT(a, b) GPU_CAT_(a, b)
#define GPU_TEST_(suite, name) RAP_TEST(suite, name)
#define GPU_TEST(suite, name) GPU_TEST_(GPU_CAT(GPU_TITLE, suite), name)
#define GPU_SKIP_NO_DEVICE() RAP_SKIP("no " GPU_NAME " device: %s", rap_last_error())

/* n, or a tenth of it (at least 1) when RAP_TEST_SMALL is set and not 0. */
static inline int gpu_test_rounds(int n) {
  const char *v = getenv("RAP_TEST_SMALL");
  if (v == NULL || *v == '\0' || strcmp(v, "0") == 0) return n;
  return n / 10 > 0 ? n / 10 : 1;
}

#endif
