/* test_thread_cache_stress.c — ThreadCache under threads: eight threads on their own queues and
 * on the host handing blocks around while a checker walks the allocator; short-lived threads whose
 * caches are abandoned and adopted; the pending rule with a gated queue. No sleeps; bounded, fixed
 * seeds (test_thread_cache.c has the single steps of the contract).
 */
#define _GNU_SOURCE   /* syscall(SYS_gettid) in watchdog.h */

#include "gate.h"
#include "test_util.h"
#include "thread_cache_util.h"
#include "watchdog.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- stress: eight threads, their queues and the host, blocks handed around --------------------- */

enum { ST_THREADS = 8, ST_RING = 24, ST_OPS = 5000, ST_BOX = 16 };
#define ST_MAX (16 * KiB)
#define ST_SPEC "ThreadCache(" RAP16 ", max_size=16KiB, cache_bytes=256KiB, cache_blocks=8)"

/* A block's pattern: a 64-bit tag at both ends and one byte everywhere between. Written and checked
 * from the CPU for host blocks, by jobs on the block's queue for queue blocks. */
typedef struct blk {
  void *p;
  size_t n;
  rap_resource *r;    /* NULL: the host */
  uint64_t tag;
} blk;

static unsigned char tag_byte(uint64_t tag) { return (unsigned char)(tag % 251 + 1); }

static void pattern_write(const blk *b) {
  memset(b->p, tag_byte(b->tag), b->n);
  if (b->n >= 8) memcpy(b->p, &b->tag, 8);
  if (b->n >= 16) memcpy((char *)b->p + b->n - 8, &b->tag, 8);
}

static bool pattern_intact(const blk *b) {
  const unsigned char *c = b->p;
  size_t lo = b->n >= 8 ? 8 : 0, hi = b->n >= 16 ? b->n - 8 : b->n;
  uint64_t t;
  if (b->n >= 8 && (memcpy(&t, c, 8), t != b->tag)) return false;
  if (b->n >= 16 && (memcpy(&t, c + b->n - 8, 8), t != b->tag)) return false;
  if (hi <= lo) return true;
  return c[lo] == tag_byte(b->tag) && (hi - lo == 1 || memcmp(c + lo, c + lo + 1, hi - lo - 1) == 0);
}

static atomic_int job_errors;

typedef struct pattern_job {
  blk b;
  bool check;
} pattern_job;

static void pattern_job_run(void *arg) {
  pattern_job *j = arg;
  if (j->check) {
    if (!pattern_intact(&j->b)) atomic_fetch_add(&job_errors, 1);
  } else {
    pattern_write(&j->b);
  }
  free(j);
}

typedef struct st_shared st_shared;
typedef struct st_thread {
  st_shared *sh;
  unsigned id;
  rap_resource *q;
  pthread_mutex_t box_lock;
  blk box[ST_BOX];
  unsigned nbox;
  tu_report rep;
} st_thread;

struct st_shared {
  rap_manager *rm;
  rap_allocator *tc;
  rap_resource *host;
  st_thread th[ST_THREADS];
  _Atomic(void *) latest[ST_THREADS];
  atomic_int producers;
  gate checked;   /* opened by the checker once it has walked the allocator once */
};

/* Writes the pattern: directly for host blocks, as work on the block's queue otherwise. */
static void blk_write(tu_report *rep, const blk *b) {
  if (b->r == NULL) {
    pattern_write(b);
    return;
  }
  pattern_job *j = malloc(sizeof *j);
  EXPECT_TRUE(rep, j != NULL);
  if (j == NULL) return;
  *j = (pattern_job){*b, false};
  EXPECT_ST(rep, rap_resource_submit(b->r, pattern_job_run, j), RAP_OK);
}

/* Checks the pattern (queue blocks: by work on their queue, ordered before the free) and frees the
 * block, on its owner named, or with NULL. */
static void blk_free_in(rap_allocator *tc, rap_resource *host, tu_report *rep, const blk *b,
                        bool name_owner) {
  if (b->r == NULL) {
    EXPECT_TRUE(rep, pattern_intact(b));
  } else {
    pattern_job *j = malloc(sizeof *j);
    EXPECT_TRUE(rep, j != NULL);
    if (j != NULL) {
      *j = (pattern_job){*b, true};
      EXPECT_ST(rep, rap_resource_submit(b->r, pattern_job_run, j), RAP_OK);
    }
  }
  EXPECT_ST(rep, rap_deallocate(tc, b->p, name_owner ? (b->r ? b->r : host) : NULL), RAP_OK);
}

static void blk_free(st_shared *sh, tu_report *rep, const blk *b, bool name_owner) {
  blk_free_in(sh->tc, sh->host, rep, b, name_owner);
}

static void drain_box(st_thread *t) {
  blk got[ST_BOX];
  pthread_mutex_lock(&t->box_lock);
  unsigned n = t->nbox;
  memcpy(got, t->box, n * sizeof *got);
  t->nbox = 0;
  pthread_mutex_unlock(&t->box_lock);
  for (unsigned i = 0; i < n; i++) blk_free(t->sh, &t->rep, &got[i], i % 2 == 0);
}

static bool post_box(st_thread *to, const blk *b) {
  pthread_mutex_lock(&to->box_lock);
  bool room = to->nbox < ST_BOX;
  if (room) to->box[to->nbox++] = *b;
  pthread_mutex_unlock(&to->box_lock);
  return room;
}

static size_t st_size(uint64_t *rng) {
  unsigned k = (unsigned)(tu_rand(rng) % 100);
  if (k < 70) return 1 + (size_t)(tu_rand(rng) % 1024);
  if (k < 95) return 1025 + (size_t)(tu_rand(rng) % (ST_MAX - 1024));
  return ST_MAX + 1 + (size_t)(tu_rand(rng) % (32 * KiB));   /* above max_size */
}

static void *st_worker(void *arg) {
  st_thread *t = arg;
  st_shared *sh = t->sh;
  tu_report *rep = &t->rep;
  uint64_t rng = 0x9e3779b97f4a7c15ull + t->id;
  blk ring[ST_RING];
  memset(ring, 0, sizeof ring);
  uint64_t seq = 0;
  for (unsigned op = 0; op < ST_OPS; op++) {
    /* Halfway, each worker waits for the checker's first round: however the threads are
     * scheduled, it walks the allocator while blocks are live and changing hands. */
    if (op == ST_OPS / 2) gate_job(&sh->checked);
    drain_box(t);
    blk *b = &ring[tu_rand(&rng) % ST_RING];
    if (b->p == NULL) {
      b->n = st_size(&rng);
      b->r = tu_rand(&rng) % 2 ? t->q : NULL;
      b->tag = ((uint64_t)t->id << 48) | ++seq;
      int st = rap_allocate(sh->tc, &b->p, b->n, b->r);
      EXPECT_ST(rep, st, RAP_OK);
      if (st != RAP_OK) {
        b->p = NULL;
        continue;
      }
      blk_write(rep, b);
      atomic_store(&sh->latest[t->id], b->p);
      continue;
    }
    unsigned action = (unsigned)(tu_rand(&rng) % 10);
    if (action == 6 || action == 7) {   /* to another thread, which frees it */
      st_thread *to = &sh->th[(t->id + 1 + tu_rand(&rng) % (ST_THREADS - 1)) % ST_THREADS];
      if (post_box(to, b)) {
        b->p = NULL;
        continue;
      }
    } else if (action == 8) {   /* asked about, refused on the wrong resource, kept */
      rap_resource *r = NULL;
      rap_allocator *found = NULL;
      EXPECT_ST(rep, rap_pointer_resource(sh->tc, b->p, &r), RAP_OK);
      EXPECT_TRUE(rep, r == (b->r ? b->r : sh->host));
      EXPECT_ST(rep, rap_allocator_find(sh->rm, b->p, &found), RAP_OK);
      EXPECT_TRUE(rep, found == sh->tc);
      rap_resource *wrong = sh->th[(t->id + 1) % ST_THREADS].q;
      EXPECT_ST(rep, rap_deallocate(sh->tc, b->p, wrong), RAP_ERR_WRONG_RESOURCE);
      continue;
    } else if (action == 9) {   /* used on another queue too */
      EXPECT_ST(rep, rap_record_resource(sh->tc, b->p, sh->th[(t->id + 3) % ST_THREADS].q), RAP_OK);
    }
    blk_free(sh, rep, b, action % 2 == 0);
    b->p = NULL;
  }
  for (unsigned i = 0; i < ST_RING; i++)
    if (ring[i].p != NULL) blk_free(sh, rep, &ring[i], i % 2 == 0);
  atomic_store(&sh->latest[t->id], NULL);
  atomic_fetch_sub(&sh->producers, 1);
  for (;;) {   /* others may still post here until every thread finished its ring */
    bool last = atomic_load(&sh->producers) == 0;
    drain_box(t);
    if (last) break;
    sched_yield();
  }
  return NULL;
}

typedef struct st_checker {
  st_shared *sh;
  tu_report rep;
  unsigned rounds;
} st_checker;

static void *st_check_thread(void *arg) {
  st_checker *c = arg;
  st_shared *sh = c->sh;
  tu_report *rep = &c->rep;
  for (unsigned i = 0; atomic_load(&sh->producers) > 0 && i < 200000; i++) {
    EXPECT_ST(rep, rap_allocator_check(sh->tc), RAP_OK);
    rap_stats s;
    EXPECT_ST(rep, rap_allocator_stats(sh->tc, &s), RAP_OK);
    EXPECT_TRUE(rep, s.current_bytes <= s.actual_bytes);
    EXPECT_ST(rep, rap_allocator_resource_stats(sh->tc, sh->host, &s), RAP_OK);
    EXPECT_ST(rep, rap_allocator_resource_stats(sh->tc, sh->th[i % ST_THREADS].q, &s), RAP_OK);
    for (unsigned k = 0; k < ST_THREADS; k++) {   /* changing hands while we ask */
      void *p = atomic_load(&sh->latest[k]);
      rap_allocator *found = NULL;
      if (p == NULL) continue;
      int st = rap_allocator_find(sh->rm, p, &found);
      EXPECT_TRUE(rep, st == RAP_OK || st == RAP_ERR_UNKNOWN_POINTER);
    }
    if (i % 4 == 3) EXPECT_ST(rep, rap_release(sh->tc), RAP_OK);
    c->rounds = i + 1;
    if (i == 0) gate_open(&sh->checked);   /* the workers may go past halfway now */
    sched_yield();
  }
  gate_open(&sh->checked);   /* already open: the first round always runs (producers > 0) */
  return NULL;
}

/* Eight workers and a checker thread that walks every cache (check, release) while they run. */
static void stress_eight(void) {
  static st_shared sh;   /* static: threads may still read it if a check ends the body */
  memset(&sh, 0, sizeof sh);
  atomic_store(&job_errors, 0);
  sh.rm = tu_manager();
  RAP_CHECK_OK(rap_allocator_make_spec(sh.rm, "tc", ST_SPEC, &sh.tc));
  RAP_CHECK_OK(rap_resource_host(sh.rm, &sh.host));
  atomic_init(&sh.producers, ST_THREADS);
  gate_init(&sh.checked);
  for (unsigned i = 0; i < ST_THREADS; i++) {
    sh.th[i].sh = &sh;
    sh.th[i].id = i;
    pthread_mutex_init(&sh.th[i].box_lock, NULL);
    RAP_CHECK_OK(rap_resource_create_host_async(sh.rm, &sh.th[i].q));
    atomic_init(&sh.latest[i], NULL);
  }
  static st_checker chk;
  chk = (st_checker){&sh, {0, 0, 0}, 0};
  pthread_t threads[ST_THREADS], checker;
  for (unsigned i = 0; i < ST_THREADS; i++)
    RAP_CHECK(pthread_create(&threads[i], NULL, st_worker, &sh.th[i]) == 0);
  RAP_CHECK(pthread_create(&checker, NULL, st_check_thread, &chk) == 0);
  for (unsigned i = 0; i < ST_THREADS; i++) pthread_join(threads[i], NULL);
  pthread_join(checker, NULL);
  for (unsigned i = 0; i < ST_THREADS; i++) tu_check_reports("thread", &sh.th[i].rep, 1);
  tu_check_reports("checker", &chk.rep, 1);
  RAP_CHECK(chk.rounds > 0);
  RAP_CHECK_EQ(gate_passed(&sh.checked), ST_THREADS);   /* every worker waited for it halfway */
  for (unsigned i = 0; i < ST_THREADS; i++) RAP_CHECK_OK(rap_resource_synchronize(sh.th[i].q));
  RAP_CHECK_EQ(atomic_load(&job_errors), 0);   /* no block had two owners */
  rap_stats s = tu_stats(sh.tc);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.allocation_count, 0);
  TU_CHECK(sh.tc);
  RAP_CHECK_OK(rap_release(sh.tc));
  s = tu_stats(sh.tc);
  RAP_CHECK_EQ(s.cached_bytes, 0);
  RAP_CHECK_EQ(s.cached_count, 0);
  TU_EXPECT(rap_allocator_parent(sh.tc), allocation_count, 0);
  for (unsigned i = 0; i < ST_THREADS; i++) {
    RAP_CHECK_OK(rap_resource_destroy(sh.th[i].q));
    pthread_mutex_destroy(&sh.th[i].box_lock);
  }
  gate_destroy(&sh.checked);
  destroy_clean(sh.rm);
}

RAP_TEST(ThreadCache, StressEightThreadsHandingBlocksAround) { stress_eight(); }

/* The same where the kernel has no membarrier: each thread then takes its cache's spin on every
 * call instead of entering with a store (the seam makes the caches made meanwhile so). */
extern bool rapi_tc_spin_only;
RAP_TEST(ThreadCache, StressEightThreadsWithoutMembarrier) {
  rapi_tc_spin_only = true;
  stress_eight();
  rapi_tc_spin_only = false;
}

/* ---- stress: short-lived threads --------------------------------------------------------------- */

enum { SL_ROUNDS = 8, SL_PRODUCERS = 3, SL_BLOCKS = 48, SL_BOX = 32 };

typedef struct sl_shared {
  rap_allocator *tc;
  rap_resource *host, *q;
  pthread_mutex_t lock;   /* the box */
  pthread_cond_t cond;
  blk box[SL_BOX];
  unsigned nbox;
  bool done;              /* no producer comes any more */
  atomic_int checking;
  tu_report rep[SL_ROUNDS * SL_PRODUCERS], consumer_rep, checker_rep;
} sl_shared;

typedef struct sl_producer {
  sl_shared *sh;
  unsigned id;
} sl_producer;

/* Allocates on the host and on q, writes each block, frees a quarter itself and hands the rest to
 * the consumer, then ends: its cache goes back while the consumer frees its blocks. */
static void *sl_produce(void *arg) {
  sl_producer *pr = arg;
  sl_shared *sh = pr->sh;
  tu_report *rep = &sh->rep[pr->id];
  uint64_t rng = 31337 + pr->id;
  for (unsigned j = 0; j < SL_BLOCKS; j++) {
    blk b = {NULL, st_size(&rng), j % 3 == 0 ? sh->q : NULL, ((uint64_t)(pr->id + 100) << 48) | j};
    int st = rap_allocate(sh->tc, &b.p, b.n, b.r);
    EXPECT_ST(rep, st, RAP_OK);
    if (st != RAP_OK) continue;
    blk_write(rep, &b);
    if (j % 4 == 0) {
      blk_free_in(sh->tc, sh->host, rep, &b, j % 8 == 0);
      continue;
    }
    pthread_mutex_lock(&sh->lock);
    while (sh->nbox == SL_BOX) pthread_cond_wait(&sh->cond, &sh->lock);
    sh->box[sh->nbox++] = b;
    pthread_cond_broadcast(&sh->cond);
    pthread_mutex_unlock(&sh->lock);
  }
  return NULL;
}

static void *sl_consume(void *arg) {
  sl_shared *sh = arg;
  blk got[SL_BOX];
  for (unsigned k = 0;; k++) {
    pthread_mutex_lock(&sh->lock);
    while (sh->nbox == 0 && !sh->done) pthread_cond_wait(&sh->cond, &sh->lock);
    unsigned n = sh->nbox;
    bool last = sh->done && n == 0;
    memcpy(got, sh->box, n * sizeof *got);
    sh->nbox = 0;
    pthread_cond_broadcast(&sh->cond);
    pthread_mutex_unlock(&sh->lock);
    if (last) break;
    for (unsigned i = 0; i < n; i++)
      blk_free_in(sh->tc, sh->host, &sh->consumer_rep, &got[i], (i + k) % 2 == 0);
  }
  return NULL;
}

static void *sl_check(void *arg) {
  sl_shared *sh = arg;
  tu_report *rep = &sh->checker_rep;
  for (unsigned i = 0; atomic_load(&sh->checking) && i < 200000; i++) {
    rap_stats s;
    EXPECT_ST(rep, rap_allocator_stats(sh->tc, &s), RAP_OK);
    EXPECT_ST(rep, rap_allocator_resource_stats(sh->tc, sh->q, &s), RAP_OK);
    EXPECT_ST(rep, rap_allocator_check(sh->tc), RAP_OK);
    if (i % 4 == 3) EXPECT_ST(rep, rap_release(sh->tc), RAP_OK);
    sched_yield();
  }
  return NULL;
}

/* Rounds of producers that start, hand their blocks to a long-lived consumer and end (their caches
 * abandoned, then adopted by the next round), with stats, check and release meanwhile. Once every
 * thread that used the allocator has ended, nothing is live and nothing is cached. */
RAP_TEST(ThreadCache, StressShortLivedThreads) {
  static sl_shared sh;   /* static: threads may still read it if a check ends the body */
  memset(&sh, 0, sizeof sh);
  atomic_store(&job_errors, 0);
  rap_manager *rm = tu_manager();
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "tc", ST_SPEC, &sh.tc));
  RAP_CHECK_OK(rap_resource_host(rm, &sh.host));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &sh.q));
  pthread_mutex_init(&sh.lock, NULL);
  pthread_cond_init(&sh.cond, NULL);
  atomic_init(&sh.checking, 1);
  pthread_t consumer, checker, prod[SL_PRODUCERS];
  static sl_producer prs[SL_ROUNDS * SL_PRODUCERS];
  RAP_CHECK(pthread_create(&consumer, NULL, sl_consume, &sh) == 0);
  RAP_CHECK(pthread_create(&checker, NULL, sl_check, &sh) == 0);
  for (unsigned round = 0; round < SL_ROUNDS; round++) {
    for (unsigned i = 0; i < SL_PRODUCERS; i++) {
      prs[round * SL_PRODUCERS + i] = (sl_producer){&sh, round * SL_PRODUCERS + i};
      RAP_CHECK(pthread_create(&prod[i], NULL, sl_produce, &prs[round * SL_PRODUCERS + i]) == 0);
    }
    for (unsigned i = 0; i < SL_PRODUCERS; i++) pthread_join(prod[i], NULL);
  }
  pthread_mutex_lock(&sh.lock);
  sh.done = true;
  pthread_cond_broadcast(&sh.cond);
  pthread_mutex_unlock(&sh.lock);
  pthread_join(consumer, NULL);
  atomic_store(&sh.checking, 0);
  pthread_join(checker, NULL);
  tu_check_reports("producer", sh.rep, SL_ROUNDS * SL_PRODUCERS);
  tu_check_reports("consumer", &sh.consumer_rep, 1);
  tu_check_reports("checker", &sh.checker_rep, 1);
  RAP_CHECK_OK(rap_resource_synchronize(sh.q));
  RAP_CHECK_EQ(atomic_load(&job_errors), 0);
  rap_stats s = tu_stats(sh.tc);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.allocation_count, 0);
  if (s.cached_bytes != 0 || s.cached_count != 0)
    rap_test_fail(__FILE__, __LINE__, "every thread that used the allocator ended, yet %zu blocks "
                  "(%zu bytes) are cached", s.cached_count, s.cached_bytes);
  TU_CHECK(sh.tc);
  RAP_CHECK_OK(rap_release(sh.tc));
  TU_EXPECT(rap_allocator_parent(sh.tc), allocation_count, 0);
  RAP_CHECK_OK(rap_resource_destroy(sh.q));
  destroy_clean(rm);
  pthread_cond_destroy(&sh.cond);
  pthread_mutex_destroy(&sh.lock);
}

/* ---- stress: the pending rule under threads --------------------------------------------------- */

enum { PS_ALLOCATORS = 3, PS_FREES = 1000, PS_ALLOCS = 1500, PS_RING = 12, PS_BOX = 8 };
#define PS_SPEC "ThreadCache(" RAP16 ", max_size=16KiB, cache_bytes=64KiB, cache_blocks=4)"

typedef struct ps_shared {
  rap_manager *rm;
  rap_allocator *tc;
  rap_resource *q1, *q2;
  pthread_mutex_t lock;   /* the spans freed on q1, and the box */
  span *freed;
  unsigned nfreed, capfreed;
  span box[PS_BOX];
  unsigned nbox;
  atomic_int freer_done;
  atomic_int violations;
  void *first_violation;
} ps_shared;

static void ps_add_freed(ps_shared *sh, void *p, size_t n) {
  pthread_mutex_lock(&sh->lock);
  if (sh->nfreed < sh->capfreed) sh->freed[sh->nfreed++] = (span){p, n};
  pthread_mutex_unlock(&sh->lock);
}

/* A block given to another resource than q1 must not overlap anything freed on q1. */
static void ps_check(ps_shared *sh, void *p, size_t n) {
  pthread_mutex_lock(&sh->lock);
  for (unsigned i = 0; i < sh->nfreed; i++)
    if (overlaps(p, n, sh->freed[i].p, sh->freed[i].n)) {
      if (atomic_fetch_add(&sh->violations, 1) == 0) sh->first_violation = p;
      break;
    }
  pthread_mutex_unlock(&sh->lock);
}

static size_t ps_size(uint64_t *rng) {
  unsigned k = (unsigned)(tu_rand(rng) % 20);
  return k == 0 ? 16 * KiB + 1 + (size_t)(tu_rand(rng) % (16 * KiB))
                : 1 + (size_t)(tu_rand(rng) % (k < 15 ? 1024 : 8192));
}

typedef struct ps_thread {
  ps_shared *sh;
  unsigned id;
  tu_report rep;
} ps_thread;

/* Frees on q1: blocks of q1 (here, or handed to allocator 0, which frees them on q1), and host
 * blocks recorded on q1. Each span is in the set before its free. */
static void *ps_freer(void *arg) {
  ps_thread *t = arg;
  ps_shared *sh = t->sh;
  tu_report *rep = &t->rep;
  uint64_t rng = 4242;
  for (unsigned i = 0; i < PS_FREES; i++) {
    size_t n = ps_size(&rng);
    void *p = NULL;
    unsigned kind = i % 4;
    int st = rap_allocate(sh->tc, &p, n, kind == 2 ? NULL : sh->q1);
    EXPECT_ST(rep, st, RAP_OK);
    if (st != RAP_OK) continue;
    if (kind == 2) {   /* a host block: it must not be q1's either */
      ps_check(sh, p, n);
      EXPECT_ST(rep, rap_record_resource(sh->tc, p, sh->q1), RAP_OK);
    }
    if (kind == 3) {
      pthread_mutex_lock(&sh->lock);
      bool room = sh->nbox < PS_BOX;
      if (room) sh->box[sh->nbox++] = (span){p, n};
      pthread_mutex_unlock(&sh->lock);
      if (room) continue;
    }
    ps_add_freed(sh, p, n);
    EXPECT_ST(rep, rap_deallocate(sh->tc, p, i % 2 ? sh->q1 : NULL), RAP_OK);
  }
  atomic_store(&sh->freer_done, 1);
  return NULL;
}

/* Frees, on q1, what the freer handed over; each span is in the set before its free. */
static void ps_drain(ps_shared *sh, tu_report *rep) {
  span got[PS_BOX];
  pthread_mutex_lock(&sh->lock);
  unsigned n = sh->nbox;
  memcpy(got, sh->box, n * sizeof *got);
  sh->nbox = 0;
  pthread_mutex_unlock(&sh->lock);
  for (unsigned k = 0; k < n; k++) {
    ps_add_freed(sh, got[k].p, got[k].n);
    EXPECT_ST(rep, rap_deallocate(sh->tc, got[k].p, k % 2 ? sh->q1 : NULL), RAP_OK);
  }
}

/* Allocates on q2 and on the host, keeps a ring, checks every block against the set. Allocator 0
 * also frees what the freer handed it, on q1; allocator 1 calls rap_release now and then. */
static void *ps_allocator(void *arg) {
  ps_thread *t = arg;
  ps_shared *sh = t->sh;
  tu_report *rep = &t->rep;
  uint64_t rng = 777 + t->id;
  span ring[PS_RING];
  rap_resource *owner[PS_RING];
  memset(ring, 0, sizeof ring);
  for (unsigned i = 0; i < PS_ALLOCS || (t->id == 0 && !atomic_load(&sh->freer_done)); i++) {
    if (t->id == 0) ps_drain(sh, rep);
    if (t->id == 1 && i % 50 == 49) EXPECT_ST(rep, rap_release(sh->tc), RAP_OK);
    unsigned k = (unsigned)(tu_rand(&rng) % PS_RING);
    if (ring[k].p != NULL) EXPECT_ST(rep, rap_deallocate(sh->tc, ring[k].p, owner[k]), RAP_OK);
    ring[k].p = NULL;
    ring[k].n = ps_size(&rng);
    owner[k] = i % 3 == 0 ? NULL : sh->q2;
    int st = rap_allocate(sh->tc, &ring[k].p, ring[k].n, owner[k]);
    EXPECT_ST(rep, st, RAP_OK);
    if (st != RAP_OK) ring[k].p = NULL;
    else ps_check(sh, ring[k].p, ring[k].n);
  }
  /* Allocator 0 stops only once the freer is done (no count bounds it: a bound let it stop while
   * a slow freer still boxed blocks that nobody then freed), so nothing comes after this drain. */
  if (t->id == 0) ps_drain(sh, rep);
  for (unsigned k = 0; k < PS_RING; k++)
    if (ring[k].p != NULL) EXPECT_ST(rep, rap_deallocate(sh->tc, ring[k].p, NULL), RAP_OK);
  return NULL;
}

/* q1 is held by a gate all along: while one thread frees blocks on it (some through another
 * thread, some host blocks recorded on it) and others allocate on q2 and on the host, with caches
 * given back by rap_release meanwhile, no block freed on q1 reaches anyone but q1. */
RAP_TEST(ThreadCache, StressPendingRuleWithAGatedQueue) {
  static ps_shared sh;
  memset(&sh, 0, sizeof sh);
  sh.rm = tu_manager();
  RAP_CHECK_OK(rap_allocator_make_spec(sh.rm, "tc", PS_SPEC, &sh.tc));
  RAP_CHECK_OK(rap_resource_create_host_async(sh.rm, &sh.q1));
  RAP_CHECK_OK(rap_resource_create_host_async(sh.rm, &sh.q2));
  pthread_mutex_init(&sh.lock, NULL);
  sh.capfreed = PS_FREES + PS_BOX;
  sh.freed = calloc(sh.capfreed, sizeof *sh.freed);
  RAP_CHECK(sh.freed != NULL);
  gate *g = malloc(sizeof *g);   /* leaked if the body fails */
  RAP_CHECK(g != NULL);
  gate_init(g);
  RAP_CHECK_OK(rap_resource_submit(sh.q1, gate_job, g));
  static ps_thread th[PS_ALLOCATORS + 1];
  pthread_t tid[PS_ALLOCATORS + 1];
  for (unsigned i = 0; i <= PS_ALLOCATORS; i++) {
    th[i] = (ps_thread){&sh, i, {0, 0, 0}};
    void *(*fn)(void *) = i == PS_ALLOCATORS ? ps_freer : ps_allocator;
    RAP_CHECK(pthread_create(&tid[i], NULL, fn, &th[i]) == 0);
  }
  for (unsigned i = 0; i <= PS_ALLOCATORS; i++) pthread_join(tid[i], NULL);
  for (unsigned i = 0; i <= PS_ALLOCATORS; i++) tu_check_reports("thread", &th[i].rep, 1);
  if (atomic_load(&sh.violations) != 0)
    rap_test_fail(__FILE__, __LINE__, "%d blocks overlapped memory freed on the busy q1 (the first "
                  "at %p)", atomic_load(&sh.violations), sh.first_violation);
  RAP_CHECK_EQ(gate_passed(g), 0);
  RAP_CHECK(sh.nfreed > PS_FREES / 2);
  /* Still closed: everything back in the parent, and once more from this thread. */
  RAP_CHECK_OK(rap_release(sh.tc));
  RAP_CHECK(tu_stats(sh.tc).pending_count >= 1);
  for (unsigned i = 0; i < 64; i++) {
    void *p = NULL;
    size_t n = 512 + 512 * (i % 8);
    RAP_CHECK_OK(rap_allocate(sh.tc, &p, n, i % 2 ? sh.q2 : NULL));
    ps_check(&sh, p, n);
    RAP_CHECK_OK(rap_deallocate(sh.tc, p, NULL));
  }
  RAP_CHECK_EQ(atomic_load(&sh.violations), 0);
  gate_open(g);
  RAP_CHECK_OK(rap_resource_synchronize(sh.q1));
  RAP_CHECK_OK(rap_resource_synchronize(sh.q2));
  TU_EXPECT(sh.tc, allocation_count, 0);
  TU_EXPECT(sh.tc, current_bytes, 0);
  TU_CHECK(sh.tc);
  RAP_CHECK_OK(rap_release(sh.tc));
  TU_EXPECT(sh.tc, pending_count, 0);
  TU_EXPECT(sh.tc, cached_bytes, 0);
  RAP_CHECK_OK(rap_resource_destroy(sh.q1));
  RAP_CHECK_OK(rap_resource_destroy(sh.q2));
  destroy_clean(sh.rm);
  pthread_mutex_destroy(&sh.lock);
  free(sh.freed);
  gate_destroy(g);
  free(g);
}
