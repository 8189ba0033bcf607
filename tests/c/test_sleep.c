/* test_sleep.c — sleep and wake of a ResourceAwarePool over HOST_VMM, the host analogue of
 * DEVICE_VMM: contents that survive bit-equal at the same addresses (backup), memory that really
 * goes back while asleep (the platform maps nothing, the kernel holds no page), discard mode,
 * sleep that waits for a queue's event before it copies, and every refusal: platforms that cannot
 * unmap, sleep twice, wake unasked, destroy while asleep, a backup the host cannot hold, a wake
 * the platform refuses (a retry then works). Pending states come from host_async queues held by
 * gates; no sleeps. tests/cuda/test_cuda_sleep.c runs the same over DEVICE_VMM.
 */
#define _DEFAULT_SOURCE 1   /* mincore */
#include "gate.h"
#include "rap_internal.h"   /* a resource's capturing flag, as test_capture.c sets it */
#include "test_util.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

void rapi_host_fail_at(long nth, bool keep_failing);   /* core/host_mem.c: the host seam */
void rapi_vmm_fail_map_at(long nth);                     /* platforms/vmm.c: a map refused */
void rapi_vmm_fail_unmap_at(long nth);                   /* and an unmap of a sleep */

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)
#define G (64 * KiB)

static rap_allocator *sleepy(rap_manager *rm, const char *pool_opts) {
  char opts[96];
  snprintf(opts, sizeof opts, "reserve=%zu granularity=%zu", 64 * MiB, G);
  tu_make(rm, "v", "HostVmm", NULL, opts);
  return tu_make(rm, "pool", "ResourceAwarePool", "v", pool_opts);
}

static size_t mapped(rap_manager *rm) { return tu_stats(tu_get(rm, "v")).actual_bytes; }

/* Pages of [p, p+n) the kernel holds (mincore: also valid on an inaccessible range). */
static size_t resident_pages(const void *p, size_t n) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t start = (uintptr_t)p & ~(page - 1);
  size_t len = (uintptr_t)p + n - start, count = (len + page - 1) / page, held = 0;
  unsigned char *vec = malloc(count);
  if (vec == NULL || mincore((void *)start, len, vec) != 0) {
    free(vec);
    return SIZE_MAX;
  }
  for (size_t i = 0; i < count; i++) held += vec[i] & 1;
  free(vec);
  return held;
}

RAP_TEST(Sleep, BackupKeepsEveryByteAtTheSameAddress) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = sleepy(rm, "initial_size=1MiB");
  size_t sizes[] = {1000, 3 * G + 5, 17, 200 * KiB, 2 * MiB, 1};
  enum { N = sizeof sizes / sizeof sizes[0] };
  char *p[N];
  for (unsigned i = 0; i < N; i++) {
    p[i] = tu_alloc(pool, sizes[i]);
    tu_fill(p[i], sizes[i], 10 + i);
  }
  /* A hole between live blocks: free memory is neither copied nor kept. */
  char *hole = tu_alloc(pool, 300 * KiB);
  RAP_CHECK_OK(rap_deallocate(pool, hole, NULL));
  rap_stats before = tu_stats(pool);
  RAP_CHECK(mapped(rm) >= 2 * MiB + 500 * KiB);   /* what the blocks and the hole need */
  RAP_CHECK(tu_stats(tu_get(rm, "v")).chunk_count > before.chunk_count);   /* grown in pieces */
  for (int cycle = 0; cycle < 3; cycle++) {
    RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
    RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 1);
    RAP_CHECK_EQ(mapped(rm), 0);   /* the platform maps nothing */
    for (unsigned i = 0; i < N; i++) RAP_CHECK_EQ(resident_pages(p[i], sizes[i]), 0);
    RAP_CHECK_EQ(tu_stats(pool).allocation_count, N);   /* the blocks are still live */
    RAP_CHECK_OK(rap_allocator_check(pool));
    RAP_CHECK_OK(rap_allocator_wake(pool));
    RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 0);
    /* Each chunk came back as one mapping. */
    RAP_CHECK_EQ(tu_stats(tu_get(rm, "v")).chunk_count, tu_stats(pool).chunk_count);
    for (unsigned i = 0; i < N; i++) RAP_CHECK(tu_intact(p[i], sizes[i], 10 + i));
    for (unsigned i = 0; i < N; i++) tu_fill(p[i], sizes[i], 20 + i + cycle);   /* writable */
    for (unsigned i = 0; i < N; i++) tu_fill(p[i], sizes[i], 10 + i);
  }
  rap_stats after = tu_stats(pool);
  RAP_CHECK_EQ(after.current_bytes, before.current_bytes);
  RAP_CHECK_EQ(after.allocation_count, before.allocation_count);
  /* The pool goes on as before: it allocates, frees and grows. */
  char *more = tu_alloc(pool, 4 * MiB);
  memset(more, 7, 4 * MiB);
  RAP_CHECK_OK(rap_deallocate(pool, more, NULL));
  for (unsigned i = 0; i < N; i++) RAP_CHECK_OK(rap_deallocate(pool, p[i], NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Sleep, DiscardGivesMemoryBackAndKeepsTheBlocks) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = sleepy(rm, "initial_size=1MiB");
  char *a = tu_alloc(pool, 500 * KiB), *b = tu_alloc(pool, 100);
  memset(a, 1, 500 * KiB);
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_DISCARD));
  RAP_CHECK_EQ(mapped(rm), 0);
  RAP_CHECK_EQ(resident_pages(a, 500 * KiB), 0);
  RAP_CHECK_OK(rap_allocator_wake(pool));
  memset(a, 2, 500 * KiB);   /* mapped again at the same address; the contents are not kept */
  memset(b, 3, 100);
  RAP_CHECK(all_bytes(a, 500 * KiB, 2));
  RAP_CHECK(mapped(rm) > 0);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  /* An empty pool sleeps too: its chunks go back for good. */
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  RAP_CHECK_EQ(mapped(rm), 0);
  RAP_CHECK_OK(rap_allocator_wake(pool));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Sleep, WhileAsleepCallsAreRefusedWithASentence) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = sleepy(rm, "initial_size=1MiB");
  rap_resource *q = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  char *a = tu_alloc(pool, 1000);
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  void *x = NULL;
  RAP_CHECK_STATUS(rap_allocate(pool, &x, 10, NULL), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "asleep");
  RAP_CHECK(x == NULL);
  RAP_CHECK_STATUS(rap_allocate(pool, &x, 10, q), RAP_ERR_BUSY);
  RAP_CHECK_STATUS(rap_deallocate(pool, a, NULL), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "asleep");
  RAP_CHECK_STATUS(rap_record_resource(pool, a, q), RAP_ERR_BUSY);
  RAP_CHECK_OK(rap_release(pool));   /* nothing to give: nothing is mapped */
  RAP_CHECK_STATUS(rap_allocator_sleep(pool, RAP_SLEEP_DISCARD), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "asleep already");
  RAP_CHECK_STATUS(rap_allocator_destroy(pool), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "wake it first");
  RAP_CHECK_OK(rap_allocator_wake(pool));
  RAP_CHECK_STATUS(rap_allocator_wake(pool), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "not asleep");
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_resource_destroy(q));
  RAP_CHECK_OK(rap_allocator_destroy(pool));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Sleep, OnlyAPoolOverAGrowablePlatformSleeps) {
  rap_manager *rm = tu_manager();
  RAP_CHECK_STATUS(rap_allocator_sleep(NULL, RAP_SLEEP_BACKUP), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_wake(NULL), RAP_ERR_INVALID);
  RAP_CHECK_EQ(rap_allocator_is_asleep(NULL), 0);
  rap_allocator *pool = sleepy(rm, "");
  RAP_CHECK_STATUS(rap_allocator_sleep(pool, 7), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "RAP_SLEEP_PREPARE");
  RAP_CHECK_STATUS(rap_allocator_sleep(tu_get(rm, "v"), RAP_SLEEP_BACKUP), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "platform does not sleep itself");
  rap_allocator *host = tu_make(rm, "host-pool", "ResourceAwarePool", "HOST", "");
  void *p = tu_alloc(host, 100);
  RAP_CHECK_STATUS(rap_allocator_sleep(host, RAP_SLEEP_BACKUP), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "growable platform");
  RAP_CHECK_STATUS(rap_allocator_wake(host), RAP_ERR_INVALID);   /* not asleep */
  RAP_CHECK_EQ(rap_allocator_is_asleep(host), 0);
  RAP_CHECK_OK(rap_deallocate(host, p, NULL));   /* nothing was changed */
  rap_allocator *quick = tu_make(rm, "quick", "QuickPool", "v", "");
  RAP_CHECK_STATUS(rap_allocator_sleep(quick, RAP_SLEEP_BACKUP), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "QuickPool strategy cannot sleep");
  rap_allocator *cache = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "cached", "ThreadCache(QuickPool(HOST_VMM))", &cache));
  RAP_CHECK_OK(rap_deallocate(cache, tu_alloc(cache, 100), NULL));   /* cached */
  RAP_CHECK_STATUS(rap_allocator_sleep(cache, RAP_SLEEP_BACKUP), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "QuickPool strategy cannot sleep");
  RAP_CHECK_EQ(rap_allocator_is_asleep(cache), 0);
  RAP_CHECK_OK(rap_deallocate(cache, tu_alloc(cache, 100), NULL));   /* served, awake */
  RAP_CHECK_OK(rap_allocator_make(rm, "over", "ThreadCache", "pool", NULL, &cache));
  RAP_CHECK_STATUS(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP), RAP_ERR_BUSY);   /* by its own name */
  RAP_CHECK_STR(rap_last_error(), "a ThreadCache settles its caches when asked itself");
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Through ThreadSafe: the chain sleeps as one, and its top cannot be destroyed while asleep. */
RAP_TEST(Sleep, AChainUnderThreadSafeSleepsAsOne) {
  rap_manager *rm = tu_manager();
  rap_allocator *top = NULL;
  char spec[160];
  snprintf(spec, sizeof spec, "ThreadSafe(ResourceAwarePool(HostVmm(reserve=%zu, granularity=%zu), "
           "initial_size=256KiB))", 32 * MiB, G);
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "ts", spec, &top));
  rap_allocator *inner = rap_allocator_parent(top), *v = rap_allocator_parent(inner);
  char *a = tu_alloc(top, 700 * KiB);
  tu_fill(a, 700 * KiB, 3);
  RAP_CHECK_OK(rap_allocator_sleep(top, RAP_SLEEP_BACKUP));
  RAP_CHECK_EQ(rap_allocator_is_asleep(top), 1);
  RAP_CHECK_EQ(rap_allocator_is_asleep(inner), 1);
  RAP_CHECK_EQ(rap_allocator_is_asleep(v), 0);   /* others may share the platform */
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 0);
  RAP_CHECK_STATUS(rap_allocator_destroy(top), RAP_ERR_BUSY);
  RAP_CHECK_OK(rap_allocator_wake(top));
  RAP_CHECK_EQ(rap_allocator_is_asleep(inner), 0);
  RAP_CHECK(tu_intact(a, 700 * KiB, 3));
  RAP_CHECK_OK(rap_deallocate(top, a, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Two pools over one platform: each sleeps alone, the other keeps its memory mapped. */
RAP_TEST(Sleep, PoolsOverOnePlatformSleepApart) {
  rap_manager *rm = tu_manager();
  rap_allocator *weights = sleepy(rm, "initial_size=1MiB");
  rap_allocator *cache = tu_make(rm, "cache", "ResourceAwarePool", "v", "initial_size=1MiB");
  char *w = tu_alloc(weights, 600 * KiB), *c = tu_alloc(cache, 600 * KiB);
  tu_fill(w, 600 * KiB, 1);
  tu_fill(c, 600 * KiB, 2);
  size_t both = mapped(rm);
  RAP_CHECK_OK(rap_allocator_sleep(cache, RAP_SLEEP_DISCARD));
  RAP_CHECK_EQ(mapped(rm), both / 2);
  RAP_CHECK(tu_intact(w, 600 * KiB, 1));   /* untouched */
  char *w2 = tu_alloc(weights, 300 * KiB);   /* and still serving */
  RAP_CHECK_OK(rap_allocator_sleep(weights, RAP_SLEEP_BACKUP));
  RAP_CHECK_EQ(mapped(rm), 0);
  RAP_CHECK_OK(rap_allocator_wake(weights));
  RAP_CHECK_OK(rap_allocator_wake(cache));
  RAP_CHECK(tu_intact(w, 600 * KiB, 1));
  RAP_CHECK_OK(rap_deallocate(weights, w, NULL));
  RAP_CHECK_OK(rap_deallocate(weights, w2, NULL));
  RAP_CHECK_OK(rap_deallocate(cache, c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- pending blocks and queued work: sleep waits for the queue's event ------------------------ */

typedef struct prober {
  rap_allocator *top;
  gate *g;
  int saw;
} prober;

/* Opens the gate only once the pool refuses calls, that is once sleep has begun to wait: it calls
 * in through ThreadSafe, whose lock sleep lets go while it waits. */
static void *probe_then_open(void *arg) {
  prober *pr = arg;
  int unknown = 0;
  while (rap_deallocate(pr->top, &unknown, NULL) != RAP_ERR_BUSY) sched_yield();
  pr->saw = strstr(rap_last_error(), "asleep") != NULL;
  gate_open(pr->g);
  return NULL;
}

RAP_TEST(Sleep, WaitsForTheQueuesEventsBeforeItCopies) {
  rap_manager *rm = tu_manager();
  rap_allocator *top = NULL;
  char spec[160];
  snprintf(spec, sizeof spec, "ThreadSafe(ResourceAwarePool(HostVmm(reserve=%zu, granularity=%zu), "
           "initial_size=1MiB))", 32 * MiB, G);
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "ts", spec, &top));
  rap_resource *q = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  gate g;
  gate_init(&g);
  /* live: written by the queue's work, after the gate; gone: freed on the queue, pending. */
  void *live = NULL, *gone = NULL;
  RAP_CHECK_OK(rap_allocate(top, &live, 256 * KiB, q));
  RAP_CHECK_OK(rap_allocate(top, &gone, 128 * KiB, q));
  memset(live, 1, 256 * KiB);
  fill f = {live, 256 * KiB, 0x5a};
  RAP_CHECK_OK(rap_resource_submit(q, gate_job, &g));
  RAP_CHECK_OK(rap_resource_submit(q, fill_job, &f));
  RAP_CHECK_OK(rap_deallocate(top, gone, q));
  RAP_CHECK(tu_stats(top).pending_count > 0);
  prober pr = {top, &g, 0};
  pthread_t t;
  RAP_CHECK(pthread_create(&t, NULL, probe_then_open, &pr) == 0);
  RAP_CHECK_OK(rap_allocator_sleep(top, RAP_SLEEP_BACKUP));
  pthread_join(t, NULL);
  RAP_CHECK_EQ(pr.saw, 1);
  RAP_CHECK_EQ(gate_passed(&g), 1);
  rap_stats s = tu_stats(top);
  RAP_CHECK_EQ(s.pending_count, 0);   /* pending became free, and was not kept */
  RAP_CHECK_EQ(tu_stats(rap_allocator_parent(rap_allocator_parent(top))).actual_bytes, 0);
  RAP_CHECK_OK(rap_allocator_wake(top));
  RAP_CHECK(all_bytes(live, 256 * KiB, 0x5a));   /* what the queue wrote, not what was there */
  RAP_CHECK_OK(rap_deallocate(top, live, q));
  RAP_CHECK_OK(rap_resource_destroy(q));
  gate_destroy(&g);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A resource capturing a graph: sleep would record an event into the capture; it refuses and the
 * pool stays awake. The flag is set as rap_resource_cuda_begin_capture sets it (test_capture.c). */
RAP_TEST(Sleep, RefusedWhileAResourceCapturesAGraph) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = sleepy(rm, "initial_size=1MiB");
  rap_resource *q = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  void *a = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &a, 1000, q));
  __atomic_store_n(&q->capturing, 1, __ATOMIC_RELEASE);
  RAP_CHECK_STATUS(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "capturing a graph");
  RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 0);
  __atomic_store_n(&q->capturing, 0, __ATOMIC_RELEASE);
  void *b = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &b, 10, q));   /* awake */
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  RAP_CHECK_OK(rap_allocator_wake(pool));
  RAP_CHECK_OK(rap_deallocate(pool, a, q));
  RAP_CHECK_OK(rap_deallocate(pool, b, q));
  RAP_CHECK_OK(rap_resource_destroy(q));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Threads allocate and free through ThreadSafe while another sleeps and wakes the pool over and
 * over: they are refused while it sleeps (never served memory that is unmapped), a free refused
 * is tried again later, and a block kept throughout keeps its bytes. (TSan runs this too.) */
typedef struct churn {
  rap_allocator *top;
  rap_resource *q;
  unsigned seed;
  int served, refused, errors;
} churn;

static void *churn_main(void *arg) {
  churn *c = arg;
  uint64_t rng = c->seed;
  /* Until served 300 times: once the sleeper is done the pool stays awake, so this ends. */
  while (c->served < 300 && c->errors == 0) {
    void *p = NULL;
    rap_resource *on = (tu_rand(&rng) & 1) ? c->q : NULL;
    int st = rap_allocate(c->top, &p, 64 + tu_rand(&rng) % (64 * KiB), on);
    if (st == RAP_ERR_BUSY) {
      c->refused++;
      continue;
    }
    if (st != RAP_OK) {
      c->errors++;
      continue;
    }
    c->served++;
    while ((st = rap_deallocate(c->top, p, on)) == RAP_ERR_BUSY) sched_yield();
    if (st != RAP_OK) c->errors++;
  }
  return NULL;
}

RAP_TEST(Sleep, ThreadsAreRefusedWhileItSleepsAndServedAfter) {
  rap_manager *rm = tu_manager();
  rap_allocator *top = NULL;
  char spec[160];
  snprintf(spec, sizeof spec, "ThreadSafe(ResourceAwarePool(HostVmm(reserve=%zu, granularity=%zu), "
           "initial_size=1MiB))", 64 * MiB, G);
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "ts", spec, &top));
  rap_resource *q = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  char *kept = tu_alloc(top, 300 * KiB);
  tu_fill(kept, 300 * KiB, 77);
  churn c[4];
  pthread_t t[4];
  for (unsigned i = 0; i < 4; i++) {
    c[i] = (churn){top, q, 1000 + i, 0, 0, 0};
    RAP_CHECK(pthread_create(&t[i], NULL, churn_main, &c[i]) == 0);
  }
  for (int cycle = 0; cycle < 40; cycle++) {
    RAP_CHECK_OK(rap_allocator_sleep(top, cycle % 3 ? RAP_SLEEP_BACKUP : RAP_SLEEP_PREPARE));
    if (cycle % 3) RAP_CHECK_OK(rap_allocator_wake(top));
    RAP_CHECK(tu_intact(kept, 300 * KiB, 77));
  }
  for (unsigned i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (unsigned i = 0; i < 4; i++) {
    RAP_CHECK_EQ(c[i].errors, 0);
    RAP_CHECK_EQ(c[i].served, 300);
  }
  RAP_CHECK_OK(rap_allocator_check(top));
  RAP_CHECK_OK(rap_deallocate(top, kept, NULL));
  RAP_CHECK_OK(rap_resource_destroy(q));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- faults ---------------------------------------------------------------------------------- */

RAP_TEST(Sleep, ABackupTheHostCannotHoldLeavesThePoolAwake) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = sleepy(rm, "initial_size=1MiB");
  char *a = tu_alloc(pool, 800 * KiB);
  tu_fill(a, 800 * KiB, 9);
  size_t held = mapped(rm);
  rapi_host_fail_at(1, true);
  int st = rap_allocator_sleep(pool, RAP_SLEEP_BACKUP);
  rapi_host_fail_at(0, false);
  RAP_CHECK_STATUS(st, RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "backup");
  RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 0);
  RAP_CHECK_EQ(mapped(rm), held);
  RAP_CHECK(tu_intact(a, 800 * KiB, 9));
  TU_CHECK(pool);
  char *b = tu_alloc(pool, 10);   /* awake: it serves */
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));   /* and sleeps once it can */
  RAP_CHECK_OK(rap_allocator_wake(pool));
  RAP_CHECK(tu_intact(a, 800 * KiB, 9));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* PREPARE makes the backup ahead: the sleep after it needs no host memory at all. */
RAP_TEST(Sleep, PrepareMakesTheBackupAhead) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = sleepy(rm, "initial_size=1MiB");
  char *a = tu_alloc(pool, 700 * KiB);
  tu_fill(a, 700 * KiB, 5);
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_PREPARE));
  RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 0);
  char *b = tu_alloc(pool, 10);   /* awake: it serves */
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  rapi_host_fail_at(1, true);
  int st = rap_allocator_sleep(pool, RAP_SLEEP_BACKUP);
  rapi_host_fail_at(0, false);
  RAP_CHECK_OK(st);
  RAP_CHECK_EQ(mapped(rm), 0);
  RAP_CHECK_OK(rap_allocator_wake(pool));
  RAP_CHECK(tu_intact(a, 700 * KiB, 5));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  rap_allocator *host = tu_make(rm, "host-pool", "ResourceAwarePool", "HOST", "");
  RAP_CHECK_STATUS(rap_allocator_sleep(host, RAP_SLEEP_PREPARE), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* The backup's host memory is counted (backup_bytes) and kept after wake for the next sleep;
 * RAP_SLEEP_RELEASE gives it back while the pool is awake (not while it holds the bytes), and the
 * next sleep makes it again. Through ThreadSafe the same. */
RAP_TEST(Sleep, TheKeptBackupIsCountedAndGivenBackOnRequest) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = sleepy(rm, "initial_size=1MiB"), *safe = NULL;
  char *a = tu_alloc(pool, 600 * KiB);
  tu_fill(a, 600 * KiB, 3);
  TU_EXPECT(pool, backup_bytes, 0);
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  size_t kept = tu_stats(pool).backup_bytes;
  RAP_CHECK(kept >= 600 * KiB);
  RAP_CHECK_STATUS(rap_allocator_sleep(pool, RAP_SLEEP_RELEASE), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "asleep already");
  RAP_CHECK_OK(rap_allocator_wake(pool));
  RAP_CHECK(tu_intact(a, 600 * KiB, 3));
  TU_EXPECT(pool, backup_bytes, kept);
  TU_EXPECT(tu_get(rm, "v"), backup_bytes, 0);   /* HostVmm stages nothing */
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_RELEASE));
  RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 0);
  TU_EXPECT(pool, backup_bytes, 0);
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_RELEASE));   /* nothing kept: nothing to do */
  RAP_CHECK_OK(rap_allocator_make(rm, "safe", "ThreadSafe", "pool", NULL, &safe));
  RAP_CHECK_OK(rap_allocator_sleep(safe, RAP_SLEEP_BACKUP));
  TU_EXPECT(safe, backup_bytes, kept);
  RAP_CHECK_OK(rap_allocator_wake(safe));
  RAP_CHECK(tu_intact(a, 600 * KiB, 3));
  RAP_CHECK_OK(rap_allocator_sleep(safe, RAP_SLEEP_RELEASE));
  RAP_CHECK_EQ(rap_allocator_is_asleep(safe), 0);
  TU_EXPECT(pool, backup_bytes, 0);
  RAP_CHECK_STATUS(rap_allocator_sleep(pool, 4), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "RAP_SLEEP_RELEASE (3)");
  RAP_CHECK_OK(rap_allocator_destroy(safe));
  /* Through a ThreadCache: release passes down as prepare does, with no settling and no mark. */
  rap_allocator *tc = NULL;
  void *b = NULL;
  RAP_CHECK_OK(rap_allocator_make(rm, "tc", "ThreadCache", "pool", NULL, &tc));
  RAP_CHECK_OK(rap_allocator_sleep(tc, RAP_SLEEP_BACKUP));
  RAP_CHECK_OK(rap_allocator_wake(tc));
  TU_EXPECT(pool, backup_bytes, kept);
  RAP_CHECK_OK(rap_allocator_sleep(tc, RAP_SLEEP_RELEASE));
  RAP_CHECK_EQ(rap_allocator_is_asleep(tc), 0);
  TU_EXPECT(pool, backup_bytes, 0);
  RAP_CHECK_OK(rap_allocate(tc, &b, 100, NULL));
  RAP_CHECK_OK(rap_deallocate(tc, b, NULL));
  RAP_CHECK(tu_intact(a, 600 * KiB, 3));
  RAP_CHECK_OK(rap_allocator_destroy(tc));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Sleep, AWakeThePlatformRefusesStaysAsleepAndCanBeRetried) {
  rap_manager *rm = tu_manager();
  /* Three chunks: the refusal comes after one or two were mapped again. */
  rap_allocator *pool = sleepy(rm, "initial_size=256KiB next_size=256KiB");
  char *p[3];
  void *blockers[3];
  for (int i = 0; i < 3; i++) {
    p[i] = tu_alloc(pool, 200 * KiB);
    tu_fill(p[i], 200 * KiB, 40 + i);
    blockers[i] = tu_alloc(tu_get(rm, "v"), G);   /* the next chunk cannot grow in place */
  }
  RAP_CHECK_EQ(tu_stats(pool).chunk_count, 3);
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  for (long nth = 1; nth <= 3; nth++) {
    /* The nth map fails: those mapped before it go back to sleep. */
    rapi_vmm_fail_map_at(nth);
    int st = rap_allocator_wake(pool);
    rapi_vmm_fail_map_at(0);
    RAP_CHECK_STATUS(st, RAP_ERR_NOMEM);
    RAP_CHECK_STR(rap_last_error(), "stays asleep");
    RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 1);
    RAP_CHECK_EQ(mapped(rm), 3 * G);   /* the blockers only */
    void *x = NULL;
    RAP_CHECK_STATUS(rap_allocate(pool, &x, 10, NULL), RAP_ERR_BUSY);
    TU_CHECK(pool);
  }
  RAP_CHECK_OK(rap_allocator_wake(pool));
  for (int i = 0; i < 3; i++) RAP_CHECK(tu_intact(p[i], 200 * KiB, 40 + i));
  for (int i = 0; i < 3; i++) RAP_CHECK_OK(rap_deallocate(pool, p[i], NULL));
  for (int i = 0; i < 3; i++) RAP_CHECK_OK(rap_deallocate(tu_get(rm, "v"), blockers[i], NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* An unmap that fails half way through a sleep: the chunks already given back are mapped again
 * and restored, and the pool is awake as before; a later sleep works. */
RAP_TEST(Sleep, AnUnmapThatFailsLeavesThePoolAwakeAndWhole) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = sleepy(rm, "initial_size=256KiB next_size=256KiB");
  char *p[3];
  void *blockers[3];
  for (int i = 0; i < 3; i++) {
    p[i] = tu_alloc(pool, 200 * KiB);
    tu_fill(p[i], 200 * KiB, 60 + i);
    blockers[i] = tu_alloc(tu_get(rm, "v"), G);
  }
  size_t held = mapped(rm);
  for (long nth = 1; nth <= 3; nth++) {
    rapi_vmm_fail_unmap_at(nth);
    int st = rap_allocator_sleep(pool, RAP_SLEEP_BACKUP);
    rapi_vmm_fail_unmap_at(0);
    RAP_CHECK_STATUS(st, RAP_ERR_BACKEND);
    RAP_CHECK_STR(rap_last_error(), "stays awake, its contents restored");
    RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 0);
    RAP_CHECK_EQ(mapped(rm), held);
    for (int i = 0; i < 3; i++) RAP_CHECK(tu_intact(p[i], 200 * KiB, 60 + i));
    char *x = tu_alloc(pool, 10);   /* awake: it serves */
    RAP_CHECK_OK(rap_deallocate(pool, x, NULL));
    TU_CHECK(pool);
  }
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  RAP_CHECK_OK(rap_allocator_wake(pool));
  for (int i = 0; i < 3; i++) RAP_CHECK(tu_intact(p[i], 200 * KiB, 60 + i));
  for (int i = 0; i < 3; i++) RAP_CHECK_OK(rap_deallocate(pool, p[i], NULL));
  for (int i = 0; i < 3; i++) RAP_CHECK_OK(rap_deallocate(tu_get(rm, "v"), blockers[i], NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* The manager always destroys: a sleeping pool, its backup and its reserved range go with it. */
RAP_TEST(Sleep, TheManagerFreesASleepingPool) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = sleepy(rm, "initial_size=1MiB");
  char *a = tu_alloc(pool, 100 * KiB);
  tu_fill(a, 100 * KiB, 1);
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  RAP_CHECK_STATUS(rap_manager_destroy(rm), RAP_ERR_BUSY);   /* a block leaked, as any */
}

/* A pool with an allocator over it that hands out its memory without asking it (a ThreadCache's
 * cached block, Planned's arena) refuses to sleep when asked by its own name: asleep, its memory
 * would be unmapped while the one over it kept handing it out. Nothing changes; once that
 * allocator is gone the pool sleeps. ThreadSafe over it passes every call through: no refusal. */
RAP_TEST(Sleep, APoolWithACacheOverItRefusesToSleepByItsOwnName) {
  rap_manager *rm = tu_manager();
  rap_allocator *cache = NULL, *pool = NULL, *safe = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "w", "ThreadCache(ResourceAwarePool(HOST_VMM))", &cache));
  RAP_CHECK_OK(rap_allocator_get(rm, "w/ResourceAwarePool", &pool));
  void *p = tu_alloc(cache, 1000);
  RAP_CHECK_OK(rap_deallocate(cache, p, NULL));   /* cached by the ThreadCache */
  RAP_CHECK_STATUS(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "rap_allocator_sleep('w/ResourceAwarePool'): 1 allocator made over "
                "it hands out its memory without asking it");
  RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 0);
  void *q = tu_alloc(cache, 1000);   /* the cached block, in memory still mapped */
  RAP_CHECK(q == p);
  memset(q, 7, 1000);
  RAP_CHECK_OK(rap_deallocate(cache, q, NULL));
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_PREPARE));   /* no unmap: allowed */
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_RELEASE));   /* nor here */
  RAP_CHECK_OK(rap_allocator_destroy(cache));
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_DISCARD));   /* nothing over it now */
  RAP_CHECK_OK(rap_allocator_wake(pool));
  RAP_CHECK_OK(rap_allocator_make(rm, "safe", "ThreadSafe", "w/ResourceAwarePool", NULL, &safe));
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_DISCARD));
  RAP_CHECK_OK(rap_allocator_wake(pool));
  RAP_CHECK_OK(rap_allocator_destroy(safe));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
