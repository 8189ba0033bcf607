/* test_cuda_pinned.c — host memory the device can see: Pinned(portable, mapped, write_combined)
 * under a pool, rap_device_pointer, and kernels that write and read mapped memory through the
 * device pointer while the host reads and writes it through its own. CUDA only; skips without a
 * device.
 */
#include "gpu_test.h"
#include "kernels.h"
#include "rap_internal.h"

#include <string.h>

#define KiB ((size_t)1024)

/* A block in the middle of a pool's chunk of mapped pinned memory: a kernel fills it through its
 * device address and the host sees the bytes; the host writes, a kernel copies it out to device
 * memory, and the copy holds the host's bytes. */
static void mapped_round_trip(const char *spec) {
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *pool;
  int st = rap_allocator_make_spec(rm, "mp", spec, &pool);
  if (st == RAP_ERR_UNSUPPORTED) {
    RAP_CHECK_OK(rap_manager_destroy(rm));
    GPU_SKIP_NO_DEVICE();
  }
  RAP_CHECK_OK(st);
  rap_resource *r;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r));
  cudaStream_t s = rap_resource_cuda_stream(r);
  void *first, *p, *dp, *dev;
  RAP_CHECK_OK(rap_allocate(pool, &first, 3 * KiB, r));   /* p is not at the chunk's start */
  RAP_CHECK_OK(rap_allocate(pool, &p, 64 * KiB, r));
  RAP_CHECK_OK(rap_device_pointer(pool, p, &dp));
  RAP_CHECK(cudaMalloc(&dev, 64 * KiB) == cudaSuccess);
  RAP_CHECK(gpu_fill(s, dp, 64 * KiB, 0xC3) == 0);
  RAP_CHECK_OK(rap_resource_synchronize(r));
  const unsigned char *h = p;
  size_t bad = 0;
  for (size_t i = 0; i < 64 * KiB; i++) bad += h[i] != 0xC3;
  RAP_CHECK_EQ(bad, 0);
  memset(p, 0x5D, 64 * KiB);
  RAP_CHECK(gpu_copy(s, dev, dp, 64 * KiB) == 0);
  RAP_CHECK_OK(rap_resource_synchronize(r));
  RAP_CHECK(gpu_all_bytes(dev, 64 * KiB, 0x5D));
  RAP_CHECK(cudaFree(dev) == cudaSuccess);
  RAP_CHECK_OK(rap_deallocate(pool, p, r));
  RAP_CHECK_OK(rap_deallocate(pool, first, r));
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_resource_destroy(r));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Pinned, MappedUnderAPoolKernelsReadAndWrite) {
  mapped_round_trip("QuickPool(Pinned(mapped=1), initial_size=1MiB)");
}
RAP_TEST(Pinned, PortableWriteCombinedMapped) {
  mapped_round_trip("ResourceAwarePool(Pinned(mapped=1, portable=1, write_combined=1), initial_size=1MiB)");
}
RAP_TEST(Pinned, PlainPinnedHasADeviceAddressToo) { mapped_round_trip("QuickPool(PINNED, initial_size=1MiB)"); }

RAP_TEST(Pinned, DevicePointerOfDeviceMemoryAndBadInput) {
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *dev, *host, *bad;
  if (rap_allocator_get(rm, "DEVICE", &dev) != RAP_OK) {
    RAP_CHECK_OK(rap_manager_destroy(rm));
    GPU_SKIP_NO_DEVICE();
  }
  void *p, *d;
  RAP_CHECK_OK(rap_allocate(dev, &p, 4096, NULL));
  RAP_CHECK_OK(rap_device_pointer(dev, p, &d));
  RAP_CHECK(d == p);
  RAP_CHECK_OK(rap_deallocate(dev, p, NULL));
  RAP_CHECK_OK(rap_allocator_get(rm, "HOST", &host));
  RAP_CHECK_OK(rap_allocate(host, &p, 64, NULL));
  RAP_CHECK_STATUS(rap_device_pointer(host, p, &d), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "a device cannot address");
  RAP_CHECK_OK(rap_deallocate(host, p, NULL));
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "b", "Pinned(mapped=2)", &bad), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'mapped' is 0 or 1");
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
