/* test_cuda_platform.c — DEVICE, DEVICE::N, PINNED and UM on a real GPU, alone and under QuickPool.
 * Each test skips with a message where no device is usable, but the one that checks that the
 * message says why (no driver, a driver too old, no device). One source for CUDA and HIP: a HIP
 * build compiles it spelled for HIP (gpu_test.h), as suites HipPlatform and HipQuickPool.
 */
#include "gpu_test.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static rap_manager *manager_with(const char *platform, rap_allocator **out) {
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  int st = rap_allocator_get(rm, platform, out);
  if (st == RAP_ERR_UNSUPPORTED) {
    RAP_CHECK_OK(rap_manager_destroy(rm));
    GPU_SKIP_NO_DEVICE();
  }
  RAP_CHECK_OK(st);
  return rm;
}

/* Writes a pattern through the runtime and reads it back, so the memory is proven real. */
static void check_roundtrip(void *dev, size_t n, int on_device) {
  unsigned char host[4096], back[4096];
  if (n > sizeof host) n = sizeof host;
  for (size_t i = 0; i < n; i++) host[i] = (unsigned char)(i * 7 + 3);
  if (on_device) {
    RAP_CHECK(gpuMemcpy(dev, host, n, gpuMemcpyHostToDevice) == gpuSuccess);
    RAP_CHECK(gpuMemcpy(back, dev, n, gpuMemcpyDeviceToHost) == gpuSuccess);
  } else {
    memcpy(dev, host, n);
    RAP_CHECK(gpuDeviceSynchronize() == gpuSuccess);
    memcpy(back, dev, n);
  }
  RAP_CHECK(memcmp(host, back, n) == 0);
}

static void platform_roundtrip(const char *name, int on_device) {
  rap_allocator *a, *found;
  rap_manager *rm = manager_with(name, &a);
  void *p;
  RAP_CHECK_OK(rap_allocate(a, &p, 1 << 20, NULL));
  RAP_CHECK((uintptr_t)p % 256 == 0);
  check_roundtrip(p, 4096, on_device);
  RAP_CHECK_OK(rap_allocator_find(rm, p, &found));
  RAP_CHECK(found == a);
  RAP_CHECK_OK(rap_deallocate(a, p, NULL));
  RAP_CHECK_STATUS(rap_deallocate(a, p, NULL), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

GPU_TEST(Platform, DeviceRoundTrip) { platform_roundtrip("DEVICE", 1); }
GPU_TEST(Platform, Device0RoundTrip) { platform_roundtrip("DEVICE::0", 1); }
GPU_TEST(Platform, PinnedRoundTrip) { platform_roundtrip("PINNED", 0); }
GPU_TEST(Platform, ManagedRoundTrip) { platform_roundtrip("UM", 0); }

GPU_TEST(Platform, MissingDeviceIsNotFound) {
  rap_allocator *a;
  rap_manager *rm = manager_with("DEVICE", &a);
  RAP_CHECK_STATUS(rap_allocator_get(rm, "DEVICE::4000", &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "does not exist");
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

GPU_TEST(Platform, DeviceOutOfMemoryIsNomem) {
  rap_allocator *a;
  rap_manager *rm = manager_with("DEVICE", &a);
  void *p;
  RAP_CHECK_STATUS(rap_allocate(a, &p, (size_t)1 << 50, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), GPU_PREFIX "Malloc");
  /* The failure is not sticky: the next request works. */
  RAP_CHECK_OK(rap_allocate(a, &p, 4096, NULL));
  RAP_CHECK_OK(rap_deallocate(a, p, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

static void pool_over(const char *platform, int on_device) {
  rap_allocator *a, *pool;
  rap_manager *rm = manager_with(platform, &a);
  RAP_CHECK_OK(rap_allocator_make(rm, "pool", "QuickPool", platform, "initial_size=4MiB next_size=2MiB", &pool));
  void *p[64];
  for (int i = 0; i < 64; i++) {
    RAP_CHECK_OK(rap_allocate(pool, &p[i], (size_t)(i + 1) * 1000, NULL));
    RAP_CHECK((uintptr_t)p[i] % 256 == 0);
  }
  for (int i = 0; i < 64; i += 7) check_roundtrip(p[i], (size_t)(i + 1) * 1000, on_device);
  RAP_CHECK_OK(rap_allocator_check(pool));
  for (int i = 0; i < 64; i++) RAP_CHECK_OK(rap_deallocate(pool, p[i], NULL));
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_release(pool));
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(a, &s));
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

GPU_TEST(QuickPool, OverDevice) { pool_over("DEVICE", 1); }
GPU_TEST(QuickPool, OverPinned) { pool_over("PINNED", 0); }
GPU_TEST(QuickPool, OverManaged) { pool_over("UM", 0); }

/* Where no device is usable the sentence says why: no driver at all (which the runtime itself
 * reports as an insufficient driver), a driver older than the runtime, or no device; on AMD, no
 * /dev/kfd (the amdgpu driver), or one this user may not open. The platform and a resource say
 * the same. */
GPU_TEST(Platform, UnusableSaysWhy) {
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
#if RAP_GPU_AMD
  int driver = access("/dev/kfd", F_OK) == 0;
  const char *no_driver = "no AMD GPU driver is loaded (/dev/kfd does not exist)";
#else
  int driver = 0;
  (void)gpuDriverGetVersion(&driver);
  (void)gpuGetLastError();
  const char *no_driver = "no CUDA driver is installed";
#endif
  rap_allocator *a;
  rap_resource *r;
  int st_platform = rap_allocator_get(rm, "DEVICE", &a);
  char platform_sentence[512];
  snprintf(platform_sentence, sizeof platform_sentence, "%s", rap_last_error());
  int st_resource = gpu_resource_create_stream(rm, &r);
  if (driver == 0) {
    RAP_CHECK_EQ(st_platform, RAP_ERR_UNSUPPORTED);
    RAP_CHECK(strstr(platform_sentence, no_driver) != NULL);
    RAP_CHECK_EQ(st_resource, RAP_ERR_UNSUPPORTED);
    RAP_CHECK_STR(rap_last_error(), no_driver);
  } else if (st_platform == RAP_ERR_UNSUPPORTED) {
    RAP_CHECK(strstr(platform_sentence, "older than the CUDA") != NULL ||
              strstr(platform_sentence, "/dev/kfd is not open") != NULL ||
              strstr(platform_sentence, "no " GPU_NAME " device is usable here (") != NULL);
  } else {
    RAP_CHECK_OK(st_platform);
    RAP_CHECK_OK(st_resource);
    RAP_CHECK_OK(rap_resource_destroy(r));
  }
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
