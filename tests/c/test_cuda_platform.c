/* test_cuda_platform.c — DEVICE, DEVICE::N, PINNED and UM on a real GPU, alone and under QuickPool.
 * Each test skips with a message where no CUDA device is usable, but the one that checks that the
 * message says why (no driver, a driver too old, no device).
 */
#include "rap_test.h"

#include <rap/cuda.h>

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

static rap_manager *manager_with(const char *platform, rap_allocator **out) {
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  int st = rap_allocator_get(rm, platform, out);
  if (st == RAP_ERR_UNSUPPORTED) {
    RAP_CHECK_OK(rap_manager_destroy(rm));
    RAP_SKIP("no CUDA device: %s", rap_last_error());
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
    RAP_CHECK(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice) == cudaSuccess);
    RAP_CHECK(cudaMemcpy(back, dev, n, cudaMemcpyDeviceToHost) == cudaSuccess);
  } else {
    memcpy(dev, host, n);
    RAP_CHECK(cudaDeviceSynchronize() == cudaSuccess);
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

RAP_TEST(CudaPlatform, DeviceRoundTrip) { platform_roundtrip("DEVICE", 1); }
RAP_TEST(CudaPlatform, Device0RoundTrip) { platform_roundtrip("DEVICE::0", 1); }
RAP_TEST(CudaPlatform, PinnedRoundTrip) { platform_roundtrip("PINNED", 0); }
RAP_TEST(CudaPlatform, ManagedRoundTrip) { platform_roundtrip("UM", 0); }

RAP_TEST(CudaPlatform, MissingDeviceIsNotFound) {
  rap_allocator *a;
  rap_manager *rm = manager_with("DEVICE", &a);
  RAP_CHECK_STATUS(rap_allocator_get(rm, "DEVICE::4000", &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "does not exist");
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(CudaPlatform, DeviceOutOfMemoryIsNomem) {
  rap_allocator *a;
  rap_manager *rm = manager_with("DEVICE", &a);
  void *p;
  RAP_CHECK_STATUS(rap_allocate(a, &p, (size_t)1 << 50, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "cudaMalloc");
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

RAP_TEST(CudaQuickPool, OverDevice) { pool_over("DEVICE", 1); }
RAP_TEST(CudaQuickPool, OverPinned) { pool_over("PINNED", 0); }
RAP_TEST(CudaQuickPool, OverManaged) { pool_over("UM", 0); }

/* Where no device is usable the sentence says why: no driver at all (which the runtime itself
 * reports as an insufficient driver), a driver older than the runtime, or no device. The platform
 * and a cuda resource say the same. */
RAP_TEST(CudaPlatform, UnusableSaysWhy) {
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  int driver = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaGetLastError();
  rap_allocator *a;
  rap_resource *r;
  int st_platform = rap_allocator_get(rm, "DEVICE", &a);
  char platform_sentence[512];
  snprintf(platform_sentence, sizeof platform_sentence, "%s", rap_last_error());
  int st_resource = rap_resource_create_cuda_stream(rm, &r);
  if (driver == 0) {
    RAP_CHECK_EQ(st_platform, RAP_ERR_UNSUPPORTED);
    RAP_CHECK(strstr(platform_sentence, "no CUDA driver is installed") != NULL);
    RAP_CHECK_EQ(st_resource, RAP_ERR_UNSUPPORTED);
    RAP_CHECK_STR(rap_last_error(), "no CUDA driver is installed");
  } else if (st_platform == RAP_ERR_UNSUPPORTED) {
    RAP_CHECK(strstr(platform_sentence, "older than the CUDA") != NULL ||
              strstr(platform_sentence, "no CUDA device is usable here (") != NULL);
  } else {
    RAP_CHECK_OK(st_platform);
    RAP_CHECK_OK(st_resource);
    RAP_CHECK_OK(rap_resource_destroy(r));
  }
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
