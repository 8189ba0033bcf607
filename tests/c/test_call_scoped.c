/* test_call_scoped.c — call-scoped resources (rap_resource_set_call_scoped): a stream that may be
 * destroyed as soon as a call with its resource returns, as RMM allows of the streams it is given.
 *
 * A host_async queue stands for the stream: rap_host_async_end ends it under its living resource,
 * as a caller destroys a CUDA stream that a rap resource wraps. Its queued work still runs and its
 * events still answer, as CUDA's do; any later use of the queue itself fails and is counted (the
 * view's after_end), so that a pool touching a dead stream is caught in every build. Busy queues
 * are held by gates the test opens; no sleeps.
 */
#define _GNU_SOURCE   /* syscall(SYS_gettid), for the watchdog */
#include "gate.h"
#include "rap_test.h"
#include "rap_testing.h"
#include "watchdog.h"

#include <rap/rap.h>
#include <stdint.h>
#include <string.h>

#define KiB ((size_t)1024)

typedef struct fixture {
  rap_manager *rm;
  rap_allocator *pool;
  rap_resource *q, *r2;   /* q: the call-scoped queue (when the test sets it) */
  gate g;
} fixture;

static void setup(fixture *f, const char *spec, bool scoped) {
  memset(f, 0, sizeof *f);
  RAP_CHECK_OK(rap_manager_create(&f->rm));
  RAP_CHECK_OK(rap_allocator_make_spec(f->rm, "pool", spec, &f->pool));
  RAP_CHECK_OK(rap_resource_create_host_async(f->rm, &f->q));
  RAP_CHECK_OK(rap_resource_create_host_async(f->rm, &f->r2));
  if (scoped) RAP_CHECK_OK(rap_resource_set_call_scoped(f->q, 1));
  gate_init(&f->g);
}

static size_t after_end(rap_resource *r) {
  rap_host_async_view v;
  RAP_CHECK_OK(rap_host_async_view_of(r, &v));
  return v.after_end;
}

/* Opens the gate and waits until q has run everything submitted to it (its completion count is
 * the event side of the queue: reading it is no use of the ended queue). */
static void let_q_finish(fixture *f) {
  gate_open(&f->g);
  rap_host_async_view v;
  RAP_CHECK_OK(rap_host_async_view_of(f->q, &v));
  bool reached = false;
  RAP_CHECK_OK(rap_host_async_wait_until(f->q, v.submitted, 30, &reached));
  RAP_CHECK(reached);
}

static size_t pending_on(rap_allocator *a, rap_resource *r) {
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_resource_stats(a, r, &s));
  return s.pending_count;
}

static int overlaps(const void *a, const void *b, size_t n) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + n && y < x + n;
}

/* The pool goes on for another queue: r2 allocates (away from kept, a block q's work may still
 * use, where given) and frees, the pool is released and checked. */
static void others_go_on(fixture *f, const void *kept) {
  void *p2;
  RAP_CHECK_OK(rap_allocate(f->pool, &p2, 4 * KiB, f->r2));
  if (kept != NULL) RAP_CHECK(!overlaps(kept, p2, 4 * KiB));
  RAP_CHECK_OK(rap_deallocate(f->pool, p2, f->r2));
  RAP_CHECK_OK(rap_release(f->pool));
  RAP_CHECK_OK(rap_allocator_check(f->pool));
}

/* The RMM case: a block freed on q while q's work (the gate) still runs, then q's stream ended.
 * The pool goes on: another queue allocates, the pool is released and checked, q's resource is
 * destroyed. Nothing may use q's queue after its end; the block comes back once the work passed. */
RAP_TEST(CallScoped, FreeThenEndTheQueueThePoolGoesOn) {
  fixture f;
  setup(&f, "ResourceAwarePool(HOST, initial_size=1MiB)", true);
  void *p, *p2;
  RAP_CHECK_OK(rap_resource_submit(f.q, gate_job, &f.g));
  RAP_CHECK_OK(rap_allocate(f.pool, &p, 4 * KiB, f.q));
  RAP_CHECK_OK(rap_deallocate(f.pool, p, f.q));
  RAP_CHECK_OK(rap_host_async_end(f.q));
  others_go_on(&f, p);   /* q's work may still use p */
  RAP_CHECK_EQ(pending_on(f.pool, f.q), 1);
  RAP_CHECK_EQ(after_end(f.q), 0);
  let_q_finish(&f);
  RAP_CHECK_OK(rap_release(f.pool));   /* polls: q's fence has passed */
  RAP_CHECK_EQ(pending_on(f.pool, f.q), 0);
  RAP_CHECK_EQ(after_end(f.q), 0);
  RAP_CHECK_OK(rap_resource_destroy(f.q));   /* waits for q's newest event, not for the queue */
  RAP_CHECK_OK(rap_allocate(f.pool, &p2, 4 * KiB, f.r2));
  RAP_CHECK_OK(rap_deallocate(f.pool, p2, f.r2));
  RAP_CHECK_OK(rap_allocator_check(f.pool));
  RAP_CHECK_OK(rap_manager_destroy(f.rm));
  gate_destroy(&f.g);
}

/* A fence that fails inside the free (here: the queue ended before the call, so recording on it
 * fails, and so does synchronizing it) leaves no batch open for a later call to fence on the
 * queue: allocations elsewhere, release, check and q's destroy use it no more; the block stays
 * pending (nothing says q's work passed), and the pool serves the others. */
RAP_TEST(CallScoped, AFenceThatFailsInTheFreeLeavesNothingForLater) {
  fixture f;
  setup(&f, "ResourceAwarePool(HOST, initial_size=1MiB)", true);
  void *p;
  RAP_CHECK_OK(rap_allocate(f.pool, &p, 4 * KiB, f.q));
  RAP_CHECK_OK(rap_host_async_end(f.q));
  RAP_CHECK_OK(rap_deallocate(f.pool, p, f.q));   /* the fence fails: logged, the free stands */
  size_t used = after_end(f.q);
  RAP_CHECK(used > 0);
  RAP_CHECK_EQ(pending_on(f.pool, f.q), 1);
  others_go_on(&f, p);
  RAP_CHECK_EQ(after_end(f.q), used);
  RAP_CHECK_OK(rap_resource_destroy(f.q));
  RAP_CHECK_OK(rap_allocator_check(f.pool));
  RAP_CHECK_OK(rap_manager_destroy(f.rm));
  gate_destroy(&f.g);
}

/* The model catches the crash's cause: without the flag the pool fences q's batch lazily, on the
 * queue, after its end (here at rap_release), and q's destroy synchronizes the ended queue. */
RAP_TEST(CallScoped, WithoutTheFlagThePoolUsesTheEndedQueue) {
  fixture f;
  setup(&f, "ResourceAwarePool(HOST, initial_size=1MiB)", false);
  void *p;
  RAP_CHECK_OK(rap_resource_submit(f.q, gate_job, &f.g));
  RAP_CHECK_OK(rap_allocate(f.pool, &p, 4 * KiB, f.q));
  RAP_CHECK_OK(rap_deallocate(f.pool, p, f.q));
  RAP_CHECK_OK(rap_host_async_end(f.q));
  (void)rap_release(f.pool);   /* its fence fails on the ended queue, logged */
  RAP_CHECK(after_end(f.q) > 0);
  let_q_finish(&f);
  RAP_CHECK_STATUS(rap_resource_destroy(f.q), RAP_ERR_BACKEND);
  RAP_CHECK_OK(rap_manager_destroy(f.rm));   /* logs that q could not be synchronized */
  gate_destroy(&f.g);
}

/* A use recorded on q (RMM frees a block on another stream than its own: record, then free on the
 * owner) covers q's work queued before the record: fenced then, so the owner's free, after q's end,
 * does not touch q's queue, and the block waits for q's work all the same. */
RAP_TEST(CallScoped, UseRecordedThenQueueEndedBeforeTheOwnersFree) {
  fixture f;
  setup(&f, "ResourceAwarePool(HOST, initial_size=1MiB)", true);
  void *p;
  RAP_CHECK_OK(rap_allocate(f.pool, &p, 4 * KiB, f.r2));
  RAP_CHECK_OK(rap_resource_submit(f.q, gate_job, &f.g));   /* q's work using p */
  RAP_CHECK_OK(rap_record_resource(f.pool, p, f.q));
  RAP_CHECK_OK(rap_host_async_end(f.q));
  RAP_CHECK_OK(rap_deallocate(f.pool, p, f.r2));
  others_go_on(&f, p);   /* q's use has not passed */
  RAP_CHECK_EQ(after_end(f.q), 0);
  let_q_finish(&f);
  RAP_CHECK_OK(rap_resource_synchronize(f.r2));
  RAP_CHECK_OK(rap_release(f.pool));
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(f.pool, &s));
  RAP_CHECK_EQ(s.pending_count, 0);
  RAP_CHECK_EQ(after_end(f.q), 0);
  RAP_CHECK_OK(rap_resource_destroy(f.q));
  RAP_CHECK_OK(rap_allocator_check(f.pool));
  RAP_CHECK_OK(rap_manager_destroy(f.rm));
  gate_destroy(&f.g);
}

/* rap.hpp's free of a block on another stream than its own: the use recorded on that stream, then
 * a free naming no resource. That is no call with the owner, q, whose stream is gone already: the
 * pool leaves q's queue alone, and the block waits for the recorded use. */
static void free_moved_block(const char *spec) {
  fixture f;
  setup(&f, spec, true);
  RAP_CHECK_OK(rap_resource_set_call_scoped(f.r2, 1));
  void *p, *p2;
  RAP_CHECK_OK(rap_allocate(f.pool, &p, 4 * KiB, f.q));
  RAP_CHECK_OK(rap_host_async_end(f.q));
  RAP_CHECK_OK(rap_resource_submit(f.r2, gate_job, &f.g));   /* r2's work using p */
  RAP_CHECK_STATUS(rap_deallocate(f.pool, p, f.r2), RAP_ERR_WRONG_RESOURCE);
  RAP_CHECK_OK(rap_record_resource(f.pool, p, f.r2));
  RAP_CHECK_OK(rap_deallocate(f.pool, p, NULL));
  RAP_CHECK_OK(rap_allocate(f.pool, &p2, 4 * KiB, NULL));
  RAP_CHECK(!overlaps(p, p2, 4 * KiB));   /* r2's use has not passed */
  RAP_CHECK_OK(rap_deallocate(f.pool, p2, NULL));
  RAP_CHECK_OK(rap_release(f.pool));
  RAP_CHECK_OK(rap_allocator_check(f.pool));
  RAP_CHECK_EQ(after_end(f.q), 0);
  gate_open(&f.g);
  RAP_CHECK_OK(rap_resource_synchronize(f.r2));
  RAP_CHECK_OK(rap_release(f.pool));
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(f.pool, &s));
  RAP_CHECK_EQ(s.pending_count, 0);
  RAP_CHECK_EQ(after_end(f.q), 0);
  RAP_CHECK_OK(rap_resource_destroy(f.q));
  RAP_CHECK_OK(rap_manager_destroy(f.rm));
  gate_destroy(&f.g);
}

RAP_TEST(CallScoped, BlockMovedToAnotherStreamAfterItsOwnWentResourceAwarePool) {
  free_moved_block("ResourceAwarePool(HOST, initial_size=1MiB)");
}

RAP_TEST(CallScoped, BlockMovedToAnotherStreamAfterItsOwnWentThreadCache) {
  free_moved_block("ThreadCache(ResourceAwarePool(HOST, initial_size=1MiB), max_size=64KiB)");
}

/* A ThreadCache keeps no block of a call-scoped resource: a cached one would reach the pool later,
 * on a call without q, and the pool would fence it on q's ended queue. */
RAP_TEST(CallScoped, ThreadCacheKeepsNothingOfTheQueue) {
  fixture f;
  setup(&f, "ThreadCache(ResourceAwarePool(HOST, initial_size=1MiB), max_size=64KiB)", true);
  RAP_CHECK_OK(rap_resource_submit(f.q, gate_job, &f.g));
  for (int i = 0; i < 8; i++) {
    void *p;
    RAP_CHECK_OK(rap_allocate(f.pool, &p, (size_t)(i + 1) * KiB, f.q));
    RAP_CHECK_OK(rap_deallocate(f.pool, p, f.q));
  }
  RAP_CHECK_OK(rap_host_async_end(f.q));
  others_go_on(&f, NULL);
  RAP_CHECK_EQ(after_end(f.q), 0);
  let_q_finish(&f);
  RAP_CHECK_OK(rap_resource_destroy(f.q));
  RAP_CHECK_OK(rap_release(f.pool));
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(f.pool, &s));
  RAP_CHECK_EQ(s.pending_count, 0);
  RAP_CHECK_OK(rap_allocator_check(f.pool));
  RAP_CHECK_OK(rap_manager_destroy(f.rm));
  gate_destroy(&f.g);
}

static int warnings;
static void count_warnings(int level, const char *message, void *user) {
  (void)message;
  (void)user;
  warnings += level >= RAP_LOG_WARN;
}

/* The manager's end waits for a call-scoped resource's newest event, not for its queue: it has
 * nothing to warn of (synchronizing the ended queue would fail, and say so). */
RAP_TEST(CallScoped, ManagerEndsWithTheQueueEnded) {
  fixture f;
  setup(&f, "ResourceAwarePool(HOST, initial_size=1MiB)", true);
  void *p;
  RAP_CHECK_OK(rap_resource_submit(f.q, gate_job, &f.g));
  RAP_CHECK_OK(rap_allocate(f.pool, &p, 4 * KiB, f.q));
  RAP_CHECK_OK(rap_deallocate(f.pool, p, f.q));
  RAP_CHECK_OK(rap_host_async_end(f.q));
  let_q_finish(&f);
  RAP_CHECK_EQ(after_end(f.q), 0);
  warnings = 0;
  RAP_CHECK_OK(rap_log_set_handler(count_warnings, NULL));
  int st = rap_manager_destroy(f.rm);
  RAP_CHECK_OK(rap_log_set_handler(NULL, NULL));
  RAP_CHECK_OK(st);
  RAP_CHECK_EQ(warnings, 0);
  gate_destroy(&f.g);
}

static int sleep_backup(void *pool) { return rap_allocator_sleep(pool, RAP_SLEEP_BACKUP); }

/* Until a thread outside every queue waits for q (the sleep's host wait) or the call is done;
 * false if neither came within the watchdog's deadline. */
static bool host_waits_for(rap_resource *q, wd_call *c) {
  double end = wd_now() + WD_SECONDS;
  while (wd_now() < end) {
    rap_host_async_view v;
    if (rap_host_async_view_of(q, &v) != RAP_OK) return false;
    if (v.host_blocked) return true;
    if (wd_is_done(c)) return false;
    sched_yield();
  }
  return false;
}

/* Sleep with q's stream gone: a block freed on q while q's work (the gate, then a fill of a block
 * q still owns) runs, then q ended. The sleep waits on the host for q's fence, and for q's newest
 * event in place of a point recorded on q now (its stream is gone): neither it nor wake, release
 * and the manager's end use q's queue, and the backup keeps what q's work wrote. */
RAP_TEST(CallScoped, SleepWithTheQueueEnded) {
  fixture f;
  setup(&f, "ResourceAwarePool(HostVmm(reserve=32MiB, granularity=64KiB), initial_size=1MiB)", true);
  void *live, *gone, *p2;
  RAP_CHECK_OK(rap_allocate(f.pool, &live, 256 * KiB, f.q));
  RAP_CHECK_OK(rap_allocate(f.pool, &gone, 128 * KiB, f.q));
  memset(live, 1, 256 * KiB);
  fill late = {live, 256 * KiB, 0x5a};
  RAP_CHECK_OK(rap_resource_submit(f.q, gate_job, &f.g));
  RAP_CHECK_OK(rap_resource_submit(f.q, fill_job, &late));
  RAP_CHECK_OK(rap_deallocate(f.pool, gone, f.q));
  RAP_CHECK_OK(rap_host_async_end(f.q));
  RAP_CHECK_EQ(pending_on(f.pool, f.q), 1);
  wd_call *c = wd_start(sleep_backup, f.pool);
  RAP_CHECK(c != NULL);
  bool waited = host_waits_for(f.q, c);   /* the gate opens only once the sleep waits for q */
  gate_open(&f.g);
  gate *gates[] = {&f.g};
  int st = -1000;
  WD_FINISH(c, gates, 1, &st, "rap_allocator_sleep");
  RAP_CHECK_OK(st);
  RAP_CHECK(waited);
  RAP_CHECK_EQ(gate_passed(&f.g), 1);
  RAP_CHECK_EQ(rap_allocator_is_asleep(f.pool), 1);
  RAP_CHECK_EQ(after_end(f.q), 0);
  RAP_CHECK_OK(rap_allocator_wake(f.pool));
  RAP_CHECK(all_bytes(live, 256 * KiB, 0x5a));   /* q's bytes, copied after q's work */
  RAP_CHECK_EQ(pending_on(f.pool, f.q), 0);
  RAP_CHECK_OK(rap_allocate(f.pool, &p2, 4 * KiB, f.r2));
  RAP_CHECK_OK(rap_deallocate(f.pool, p2, f.r2));
  RAP_CHECK_OK(rap_deallocate(f.pool, live, NULL));   /* no call with q: its stream is gone */
  RAP_CHECK_OK(rap_release(f.pool));
  RAP_CHECK_OK(rap_allocator_check(f.pool));
  RAP_CHECK_EQ(after_end(f.q), 0);
  RAP_CHECK_OK(rap_resource_destroy(f.q));
  RAP_CHECK_OK(rap_manager_destroy(f.rm));
  gate_destroy(&f.g);
}

RAP_TEST(CallScoped, SetBeforeFirstUseOnly) {
  fixture f;
  setup(&f, "ResourceAwarePool(HOST, initial_size=1MiB)", true);
  RAP_CHECK_EQ(rap_resource_call_scoped(f.q), 1);
  RAP_CHECK_EQ(rap_resource_call_scoped(f.r2), 0);
  rap_resource *host;
  RAP_CHECK_OK(rap_resource_host(f.rm, &host));
  RAP_CHECK_STATUS(rap_resource_set_call_scoped(host, 1), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_resource_set_call_scoped(NULL, 1), RAP_ERR_INVALID);
  void *p;
  RAP_CHECK_OK(rap_allocate(f.pool, &p, KiB, f.r2));
  RAP_CHECK_STATUS(rap_resource_set_call_scoped(f.r2, 1), RAP_ERR_BUSY);
  RAP_CHECK(rap_test_contains(rap_last_error(), "before the resource's first use"));
  RAP_CHECK_EQ(rap_resource_call_scoped(f.r2), 0);
  RAP_CHECK_OK(rap_deallocate(f.pool, p, f.r2));
  RAP_CHECK_OK(rap_manager_destroy(f.rm));
  gate_destroy(&f.g);
}
