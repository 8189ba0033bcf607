/* test_capture.c — pools and a resource that is capturing a graph: every pool, alone or under a
 * wrapper, refuses to allocate or free on it with RAP_ERR_BUSY and a sentence, changing nothing,
 * and serves it again once the capture ends; a ResourceAwarePool takes a block of a capturing
 * owner freed without a resource, pending, and records no event on the owner until the capture
 * ends. The flag is set here as rap_resource_cuda_begin_capture sets it, on a host_async queue, so
 * that the rule is proven where there is no GPU; the GPU tests capture a real stream
 * (tests/cuda/test_cuda_stream_ordered.c).
 */
#include "rap_internal.h"
#include "test_util.h"

#include <stdio.h>
#include <string.h>

RAP_TEST(Capture, PoolsRefuseACapturingResourceAndChangeNothing) {
  static const char *specs[] = {
      "QuickPool(HOST, initial_size=1MiB)",
      "DynamicPoolList(HOST, initial_size=1MiB)",
      "ResourceAwarePool(HOST, initial_size=1MiB)",
      "ThreadSafe(ResourceAwarePool(HOST, initial_size=1MiB))",
      "ThreadCache(ResourceAwarePool(HOST, initial_size=1MiB))",
      "SizeLimiter(QuickPool(HOST, initial_size=1MiB), limit=8MiB)",
      "SizeLimiter(HOST, limit=64MiB)",
  };
  rap_manager *rm = tu_manager();
  rap_resource *q;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    char name[16];
    snprintf(name, sizeof name, "p%zu", i);
    rap_allocator *a;
    RAP_CHECK_OK(rap_allocator_make_spec(rm, name, specs[i], &a));
    void *before, *p = NULL;
    RAP_CHECK_OK(rap_allocate(a, &before, 1000, q));
    rap_stats s0 = tu_stats(a);
    __atomic_store_n(&q->capturing, 1, __ATOMIC_RELEASE);   /* as begin_capture does */
    RAP_CHECK_STATUS(rap_allocate(a, &p, 1000, q), RAP_ERR_BUSY);
    RAP_CHECK_STR(rap_last_error(), "is capturing a graph");
    RAP_CHECK_STR(rap_last_error(), name);
    RAP_CHECK(p == NULL);
    RAP_CHECK_STATUS(rap_deallocate(a, before, q), RAP_ERR_BUSY);
    RAP_CHECK_STR(rap_last_error(), "is capturing a graph");
    rap_stats s1 = tu_stats(a);
    TU_STATS_EQ(s0, s1);
    RAP_CHECK_OK(rap_allocate(a, &p, 1000, NULL));   /* other resources are served */
    RAP_CHECK_OK(rap_deallocate(a, p, NULL));
    if (strcmp(specs[i], "ResourceAwarePool(HOST, initial_size=1MiB)") == 0) {
      /* Freed without a resource: pending on its capturing owner, and no event is recorded on the
       * owner while it captures (it would be a node of the graph), not even by a release. */
      size_t events = q->events_created;
      RAP_CHECK_OK(rap_deallocate(a, before, NULL));
      RAP_CHECK_EQ(tu_stats(a).pending_count, 1);
      RAP_CHECK_OK(rap_release(a));
      RAP_CHECK_EQ(q->events_created, events);
      RAP_CHECK_EQ(tu_stats(a).pending_count, 1);
      before = NULL;
    }
    __atomic_store_n(&q->capturing, 0, __ATOMIC_RELEASE);   /* as end_capture does */
    RAP_CHECK_OK(rap_allocate(a, &p, 1000, q));
    RAP_CHECK_OK(rap_deallocate(a, p, q));
    if (before != NULL) RAP_CHECK_OK(rap_deallocate(a, before, q));
    RAP_CHECK_OK(rap_release(a));   /* the capture over, its batch is fenced and comes back */
    RAP_CHECK_EQ(tu_stats(a).pending_count, 0);
    TU_CHECK(a);
  }
  RAP_CHECK_OK(rap_resource_destroy(q));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Without CUDA the capture calls say so; with CUDA, a resource that is no cuda stream is refused.
 * (rap/cuda.h needs CUDA's headers, which a host-only build lacks: the one call is declared here,
 * its mode an enum there.) */
int rap_resource_cuda_begin_capture(rap_resource *r, int mode);
RAP_TEST(Capture, BeginAndEndOnNoStream) {
  rap_manager *rm = tu_manager();
  rap_resource *q;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  int st = rap_resource_cuda_begin_capture(q, 0);
  RAP_CHECK(st == RAP_ERR_INVALID || st == RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "rap_resource_cuda_begin_capture");
  RAP_CHECK(q->capturing == 0);
  RAP_CHECK_OK(rap_resource_destroy(q));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
