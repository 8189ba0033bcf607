/* test_memory_info.c — how much memory there is (rap_allocator_memory_info) and limits as a share
 * of it (SizeLimiter limit=N%), on the host; without a GPU, the device answers say why.
 */
#include "test_util.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

RAP_TEST(MemoryInfo, HostIsThePhysicalMemoryOrTheControlGroupsLimit) {
  rap_manager *rm = tu_manager();
  rap_allocator *host, *pool;
  RAP_CHECK_OK(rap_allocator_get(rm, "HOST", &host));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "p", "ThreadSafe(QuickPool(HOST))", &pool));
  size_t f = 0, t = 0, f2 = 0, t2 = 0;
  RAP_CHECK_OK(rap_allocator_memory_info(host, &f, &t));
  RAP_CHECK_OK(rap_allocator_memory_info(pool, &f2, &t2));   /* the bottom of its chain: HOST */
  size_t phys = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGE_SIZE);
  RAP_CHECK(t > 0 && t <= phys);
  RAP_CHECK(f > 0 && f <= t);
  RAP_CHECK_EQ(t2, t);
  RAP_CHECK_STATUS(rap_allocator_memory_info(NULL, &f, &t), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_memory_info(host, NULL, &t), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "rap_allocator_memory_info");
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* limit=N% is N % of the host's total: a tiny share is a few hundred KiB, and the limiter refuses
 * what would pass it with its own sentence. */
RAP_TEST(MemoryInfo, SizeLimiterTakesAShareOfTheMemory) {
  rap_manager *rm = tu_manager();
  rap_allocator *host, *lim;
  RAP_CHECK_OK(rap_allocator_get(rm, "HOST", &host));
  size_t f = 0, t = 0;
  RAP_CHECK_OK(rap_allocator_memory_info(host, &f, &t));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "lim", "SizeLimiter(HOST, limit=0.001%)", &lim));
  size_t limit = (size_t)((double)t * 0.001 / 100.0);
  void *a = NULL, *b = NULL;
  RAP_CHECK_OK(rap_allocate(lim, &a, limit - 4096, NULL));
  RAP_CHECK_STATUS(rap_allocate(lim, &b, 8192, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "would pass the limit of");
  RAP_CHECK_OK(rap_allocate(lim, &b, 4096, NULL));   /* exactly up to the share */
  RAP_CHECK_OK(rap_deallocate(lim, a, NULL));
  RAP_CHECK_OK(rap_deallocate(lim, b, NULL));
  /* Half: made, and it holds what the share allows. */
  rap_allocator *half;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "half", "SizeLimiter(HOST, limit=50%)", &half));
  RAP_CHECK_STATUS(rap_allocate(half, &a, t / 2 + 1, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "would pass the limit of");
  /* Shares that are no share. */
  const char *bad[] = {"SizeLimiter(HOST, limit=0%)", "SizeLimiter(HOST, limit=150%)",
                       "SizeLimiter(HOST, limit=half%)", "SizeLimiter(HOST, limit=%)"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    rap_allocator *x;
    char name[16];
    snprintf(name, sizeof name, "bad%zu", i);
    RAP_CHECK_STATUS(rap_allocator_make_spec(rm, name, bad[i], &x), RAP_ERR_INVALID);
    RAP_CHECK_STR(rap_last_error(), "at most 100 followed by %");
  }
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Where no GPU is usable, a share of DEVICE and the stream-ordered allocator say why. */
RAP_TEST(MemoryInfo, WithoutAGpuTheDeviceAnswersSayWhy) {
  rap_manager *rm = tu_manager();
  rap_allocator *dev, *x;
  if (rap_allocator_get(rm, "DEVICE", &dev) == RAP_OK) {
    RAP_CHECK_OK(rap_manager_destroy(rm));
    RAP_SKIP("a GPU is usable here: the CUDA tests cover the device");
  }
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "d", "SizeLimiter(DEVICE, limit=50%)", &x),
                   RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "DEVICE");
  int st = rap_allocator_make_spec(rm, "so", "StreamOrdered(device=0)", &x);
  RAP_CHECK_EQ(st, RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "'so' (StreamOrdered): ");
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "pin", "Pinned(mapped=1)", &x), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "'pin' (Pinned): ");
  rap_allocator *host;
  void *p, *d;
  RAP_CHECK_OK(rap_allocator_get(rm, "HOST", &host));
  RAP_CHECK_OK(rap_allocate(host, &p, 64, NULL));
  RAP_CHECK(rap_device_pointer(host, p, &d) != RAP_OK);   /* no device can address HOST memory */
  RAP_CHECK_STATUS(rap_device_pointer(NULL, p, &d), RAP_ERR_INVALID);
  RAP_CHECK_OK(rap_deallocate(host, p, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
