/* gpu_test.h — the GPU tests' spelling: one test source for the CUDA and the HIP build.
 *
 * GPU_TEST(Platform, X) is CudaPlatform.X in a CUDA build and HipPlatform.X in a HIP build; the
 * runtime's calls are spelled gpu* (src/resources/gpu_runtime.h). A test skips with
 * "no CUDA device: <why>" or "no HIP device: <why>" where none is usable.
 */
#ifndef RAP_GPU_TEST_H
#define RAP_GPU_TEST_H

#include "../c/rap_test.h"
#include "resources/gpu_runtime.h"

#define GPU_CAT_(a, b) a##b
#define GPU_CAT(a, b) GPU_CAT_(a, b)
#define GPU_TEST_(suite, name) RAP_TEST(suite, name)
#define GPU_TEST(suite, name) GPU_TEST_(GPU_CAT(GPU_TITLE, suite), name)
#define GPU_SKIP_NO_DEVICE() RAP_SKIP("no " GPU_NAME " device: %s", rap_last_error())

#endif
