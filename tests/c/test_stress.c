/* test_stress.c — the stack ThreadSafe(ResourceAwarePool(SizeLimiter(HOST))) built from one spec,
 * under 8 threads x 20 000 random operations with fixed seeds.
 *
 * Each thread owns two host_async queues, ra and rb. It allocates on the host or on ra; a host
 * block is filled and checked by the thread itself, an ra block only by work queued on ra (so the
 * pool's promise is what keeps it safe: memory freed on ra is not handed to anyone else before ra
 * has run the check). Some host blocks are also read by a job on rb and recorded on rb before they
 * are freed, so they must stay pending until rb has run it. Blocks are freed with their resource or
 * without one; now and then a thread releases the pool, asks for a block's resource, or frees on
 * the wrong resource on purpose. Every block carries a thread-specific byte and a serial number, so
 * a block handed to two owners at once is caught by whoever looks next. The only error allowed is
 * RAP_ERR_NOMEM from the limiter; at the end the pool is empty, its chunks gone back, and its check
 * clean. Threads destroy their queues while the others still run.
 * Two smaller tests follow: queues made and destroyed every round while others allocate and ask the
 * manager who owns a pointer, and one queue shared by two ThreadSafe pools on four threads.
 */
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  THREADS = 8,
  OPS = 20000,                        /* per thread; under ThreadSanitizer too (a few seconds) */
  LIVE = 48,                          /* blocks a thread holds at most */
  SMALL = 4096,
  LARGE = 65536,
};

#define STACK_SPEC                                                                                 \
  "ThreadSafe(ResourceAwarePool(SizeLimiter(HOST, limit=1536KiB),"                                 \
  " initial_size=1MiB, next_size=256KiB))"

static unsigned char reference[THREADS][LARGE];   /* each thread's byte, for memcmp */
static atomic_int job_errors;                     /* damaged blocks seen by queued work */

static unsigned char byte_of(unsigned id) { return (unsigned char)(0x31 + 29 * id); }

/* A block: the thread's byte everywhere, its serial in the first 8 bytes when it has them. */
static void fill(char *p, size_t n, unsigned id, uint64_t serial) {
  memset(p, byte_of(id), n);
  if (n >= sizeof serial) memcpy(p, &serial, sizeof serial);
}

static bool intact(const char *p, size_t n, unsigned id, uint64_t serial) {
  size_t skip = 0;
  if (n >= sizeof serial) {
    if (memcmp(p, &serial, sizeof serial) != 0) return false;
    skip = sizeof serial;
  }
  return memcmp(p + skip, reference[id], n - skip) == 0;
}

typedef struct job {
  char *p;
  size_t n;
  unsigned id;
  uint64_t serial;
  bool write;
} job;

static void job_run(void *arg) {
  job *j = arg;
  if (j->write) fill(j->p, j->n, j->id, j->serial);
  else if (!intact(j->p, j->n, j->id, j->serial)) atomic_fetch_add(&job_errors, 1);
  free(j);
}

typedef struct blk {
  char *p;
  size_t n;
  uint64_t serial;
  bool on_ra;        /* filled and checked by ra's work; otherwise by the thread */
} blk;

typedef struct worker {
  rap_manager *rm;
  rap_allocator *a;
  unsigned id;
  rap_resource *host, *ra, *rb;
  blk live[LIVE];
  uint64_t rng, serial;
  size_t allocs, frees, nomem, records, releases;
  int errors, first_status, first_line;
} worker;

static void fail(worker *w, int status, int line) {
  if (w->errors++ == 0) {
    w->first_status = status;
    w->first_line = line;
  }
}

#define EXPECT(w, expr, want)                                                                      \
  do {                                                                                             \
    int st_ = (expr);                                                                              \
    if (st_ != (want)) fail((w), st_, __LINE__);                                                   \
  } while (0)

static void submit(worker *w, rap_resource *r, blk *b, bool write) {
  job *j = malloc(sizeof *j);
  if (j == NULL) {
    fail(w, RAP_ERR_NOMEM, __LINE__);
    return;
  }
  *j = (job){b->p, b->n, w->id, b->serial, write};
  EXPECT(w, rap_resource_submit(r, job_run, j), RAP_OK);
}

static void allocate_one(worker *w, blk *b) {
  uint64_t r = tu_rand(&w->rng);
  size_t n = r % 8 == 0 ? SMALL + (size_t)(tu_rand(&w->rng) % (LARGE - SMALL))
                        : (size_t)(r >> 8) % (SMALL + 1);   /* one in eight large */
  unsigned mode = (unsigned)(tu_rand(&w->rng) % 3);   /* 0 host by NULL, 1 host by name, 2 ra */
  void *p = NULL;
  int st = rap_allocate(w->a, &p, n, mode == 0 ? NULL : mode == 1 ? w->host : w->ra);
  if (st == RAP_ERR_NOMEM) {
    w->nomem++;
    return;
  }
  if (st != RAP_OK || p == NULL) {
    fail(w, st, __LINE__);
    return;
  }
  w->allocs++;
  *b = (blk){p, n, ((uint64_t)w->id << 40) | ++w->serial, mode == 2};
  if (b->on_ra) {
    submit(w, w->ra, b, true);
    return;
  }
  fill(b->p, n, w->id, b->serial);
  if (n > 0 && tu_rand(&w->rng) % 8 == 0) {   /* rb reads it too: it stays pending until rb has */
    submit(w, w->rb, b, false);
    EXPECT(w, rap_record_resource(w->a, b->p, w->rb), RAP_OK);
    w->records++;
  }
}

static void free_one(worker *w, blk *b) {
  uint64_t r = tu_rand(&w->rng);
  if (r % 8 == 0) {   /* the owner, as the pool sees it */
    rap_resource *owner = NULL;
    EXPECT(w, rap_pointer_resource(w->a, b->p, &owner), RAP_OK);
    if (owner != (b->on_ra ? w->ra : w->host)) fail(w, RAP_OK, __LINE__);
  }
  if (b->on_ra) {
    if (r % 16 == 1) EXPECT(w, rap_deallocate(w->a, b->p, w->rb), RAP_ERR_WRONG_RESOURCE);
    submit(w, w->ra, b, false);   /* the last use on ra, then the block is pending on ra */
    EXPECT(w, rap_deallocate(w->a, b->p, (r >> 8) % 2 ? w->ra : NULL), RAP_OK);
  } else {
    if (!intact(b->p, b->n, w->id, b->serial)) fail(w, RAP_OK, __LINE__);
    EXPECT(w, rap_deallocate(w->a, b->p, (r >> 8) % 2 ? w->host : NULL), RAP_OK);
  }
  w->frees++;
  b->p = NULL;
}

static void *run(void *arg) {
  worker *w = arg;
  EXPECT(w, rap_resource_host(w->rm, &w->host), RAP_OK);
  EXPECT(w, rap_resource_create_host_async(w->rm, &w->ra), RAP_OK);
  EXPECT(w, rap_resource_create_host_async(w->rm, &w->rb), RAP_OK);
  if (w->errors) return NULL;
  for (unsigned op = 0; op < OPS; op++) {
    if (op % 1000 == 999) {
      EXPECT(w, rap_release(w->a), RAP_OK);
      w->releases++;
      continue;
    }
    blk *b = &w->live[tu_rand(&w->rng) % LIVE];
    if (b->p == NULL) allocate_one(w, b);
    else free_one(w, b);
  }
  for (unsigned k = 0; k < LIVE; k++)
    if (w->live[k].p != NULL) free_one(w, &w->live[k]);
  /* Once both queues have run their work and the pool has polled, nothing is pending on them. */
  EXPECT(w, rap_resource_synchronize(w->ra), RAP_OK);
  EXPECT(w, rap_resource_synchronize(w->rb), RAP_OK);
  EXPECT(w, rap_release(w->a), RAP_OK);
  EXPECT(w, rap_resource_destroy(w->ra), RAP_OK);
  EXPECT(w, rap_resource_destroy(w->rb), RAP_OK);
  return NULL;
}

RAP_TEST(Stress, EightThreadsOnAThreadSafeResourceAwareLimitedStack) {
  for (unsigned i = 0; i < THREADS; i++) memset(reference[i], byte_of(i), LARGE);
  atomic_store(&job_errors, 0);
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "stress", STACK_SPEC, &a));
  rap_allocator *pool = tu_get(rm, "stress/ResourceAwarePool");
  rap_allocator *lim = tu_get(rm, "stress/ResourceAwarePool/SizeLimiter");
  worker *w = calloc(THREADS, sizeof *w);
  RAP_CHECK(w != NULL);
  pthread_t th[THREADS];
  for (unsigned i = 0; i < THREADS; i++) {
    w[i].rm = rm;
    w[i].a = a;
    w[i].id = i;
    w[i].rng = 0x9e3779b97f4a7c15u * (i + 1);
    RAP_CHECK(pthread_create(&th[i], NULL, run, &w[i]) == 0);
  }
  for (unsigned i = 0; i < THREADS; i++) pthread_join(th[i], NULL);

  size_t allocs = 0, nomem = 0, records = 0;
  for (unsigned i = 0; i < THREADS; i++) {
    if (w[i].errors != 0)
      rap_test_fail(__FILE__, __LINE__, "thread %u: %d errors, the first %s at line %d", i,
                    w[i].errors, rap_status_name(w[i].first_status), w[i].first_line);
    RAP_CHECK_EQ(w[i].allocs, w[i].frees);
    allocs += w[i].allocs;
    nomem += w[i].nomem;
    records += w[i].records;
  }
  RAP_CHECK_EQ(atomic_load(&job_errors), 0);
  RAP_CHECK(allocs > (size_t)THREADS * OPS / 3);   /* the limiter refused only now and then */
  RAP_CHECK(records > 0);
  (void)nomem;   /* about 3 % of the requests: the limit is tight on purpose */

  RAP_CHECK_OK(rap_release(a));
  rap_stats s = tu_stats(a);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_EQ(s.pending_count, 0);
  RAP_CHECK_EQ(s.chunk_count, 0);
  RAP_CHECK_EQ(s.actual_bytes, 0);
  RAP_CHECK(s.high_watermark > 0);
  TU_EXPECT(lim, current_bytes, 0);
  TU_EXPECT(lim, allocation_count, 0);
  TU_EXPECT(tu_get(rm, "HOST"), allocation_count, 0);
  TU_CHECK(a);
  TU_CHECK(pool);
  TU_CHECK(lim);
  free(w);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- resources that come and go, and lookups from the side ------------------------------------
 * A stream per request is a common shape: each thread makes a queue, allocates on it, frees, and
 * destroys it, while the other threads keep allocating, and asks the manager which allocator owns
 * a pointer. Destroying a resource and finding an owner reach every allocator, including the pool
 * under the ThreadSafe wrapper, so they must go through the wrapper's lock too. */
enum { CHURN_THREADS = 4, CHURN_ROUNDS = 200 };   /* a queue (a thread) made and ended a round */

static _Atomic(void *) churn_last[CHURN_THREADS];   /* each thread's latest block, maybe freed */

typedef struct churner {
  rap_manager *rm;
  rap_allocator *a, *pool, *host;
  unsigned id;
  int errors, first_status, first_line;
} churner;

#define CHURN_EXPECT(c, expr, want)                                                                \
  do {                                                                                             \
    int st_ = (expr);                                                                              \
    if (st_ != (want) && (c)->errors++ == 0) {                                                     \
      (c)->first_status = st_;                                                                     \
      (c)->first_line = __LINE__;                                                                  \
    }                                                                                              \
  } while (0)

static void *churn(void *arg) {
  churner *c = arg;
  void *mine = NULL;   /* a HOST block: finding it walks past every other allocator */
  CHURN_EXPECT(c, rap_allocate(c->host, &mine, 16, NULL), RAP_OK);
  for (unsigned round = 0; round < CHURN_ROUNDS; round++) {
    rap_resource *q = NULL;
    void *p[4] = {0};
    rap_allocator *found = NULL;
    CHURN_EXPECT(c, rap_resource_create_host_async(c->rm, &q), RAP_OK);
    if (q == NULL) break;
    for (unsigned i = 0; i < 4; i++) {
      CHURN_EXPECT(c, rap_allocate(c->a, &p[i], 64 + 512 * i + c->id, i % 2 ? q : NULL), RAP_OK);
      if (p[i] != NULL) memset(p[i], (int)c->id, 64);
    }
    CHURN_EXPECT(c, rap_allocator_find(c->rm, p[1], &found), RAP_OK);
    if (found != c->a) CHURN_EXPECT(c, RAP_ERR_CORRUPT, RAP_OK);
    CHURN_EXPECT(c, rap_allocator_find(c->rm, mine, &found), RAP_OK);
    if (found != c->host) CHURN_EXPECT(c, RAP_ERR_CORRUPT, RAP_OK);
    /* A neighbour's latest block, live or just freed, changing hands while we ask: the wrapper or
     * the pool may own it, HOST where it is also the start of a chunk, or no one. */
    atomic_store(&churn_last[c->id], p[0]);
    void *theirs = atomic_load(&churn_last[(c->id + 1) % CHURN_THREADS]);
    if (theirs != NULL) {
      int st = rap_allocator_find(c->rm, theirs, &found);
      if (st != RAP_ERR_UNKNOWN_POINTER) CHURN_EXPECT(c, st, RAP_OK);
      if (st == RAP_OK && found != c->a && found != c->pool && found != c->host)
        CHURN_EXPECT(c, RAP_ERR_CORRUPT, RAP_OK);
    }
    for (unsigned i = 0; i < 4; i++) CHURN_EXPECT(c, rap_deallocate(c->a, p[i], NULL), RAP_OK);
    CHURN_EXPECT(c, rap_resource_synchronize(q), RAP_OK);
    CHURN_EXPECT(c, rap_release(c->a), RAP_OK);
    CHURN_EXPECT(c, rap_resource_destroy(q), RAP_OK);
  }
  CHURN_EXPECT(c, rap_deallocate(c->host, mine, NULL), RAP_OK);
  return NULL;
}

RAP_TEST(Stress, ResourcesComeAndGoWhileOthersAllocate) {
  for (unsigned i = 0; i < CHURN_THREADS; i++) atomic_store(&churn_last[i], NULL);
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  static const char *const churn_spec = "ThreadSafe(ResourceAwarePool(HOST, initial_size=1MiB))";
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "churn", churn_spec, &a));
  churner c[CHURN_THREADS];
  pthread_t th[CHURN_THREADS];
  for (unsigned i = 0; i < CHURN_THREADS; i++) {
    c[i] = (churner){rm, a, tu_get(rm, "churn/ResourceAwarePool"), tu_get(rm, "HOST"), i, 0, RAP_OK,
                     0};
    RAP_CHECK(pthread_create(&th[i], NULL, churn, &c[i]) == 0);
  }
  for (unsigned i = 0; i < CHURN_THREADS; i++) pthread_join(th[i], NULL);
  for (unsigned i = 0; i < CHURN_THREADS; i++)
    if (c[i].errors != 0)
      rap_test_fail(__FILE__, __LINE__, "thread %u: %d errors, the first %s at line %d", i,
                    c[i].errors, rap_status_name(c[i].first_status), c[i].first_line);
  RAP_CHECK_OK(rap_release(a));
  TU_EXPECT(a, allocation_count, 0);
  TU_EXPECT(a, pending_count, 0);
  TU_EXPECT(a, chunk_count, 0);
  TU_CHECK(a);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- one queue, two pools ----------------------------------------------------------------------
 * A stream may serve several pools from several threads: each ThreadSafe pool records its own
 * events on the shared queue, concurrently with the other. */
enum { SHARED_THREADS = 4, SHARED_OPS = 10000 };

typedef struct sharer {
  rap_allocator *a;
  rap_resource *q;
  unsigned id;
  int errors, first_status;
} sharer;

static void *share(void *arg) {
  sharer *s = arg;
  void *live[8] = {0};
  uint64_t rng = 77 + s->id;
  for (unsigned op = 0; op < SHARED_OPS; op++) {
    unsigned k = (unsigned)(tu_rand(&rng) % 8);
    int st;
    if (live[k] != NULL) {
      st = rap_deallocate(s->a, live[k], s->q);   /* pending on q */
      live[k] = NULL;
    } else {
      st = rap_allocate(s->a, &live[k], (size_t)(tu_rand(&rng) % 100000), s->q);
    }
    if (st == RAP_OK && op % 16 == 0) st = rap_release(s->a);   /* records an event on q */
    if (st != RAP_OK && s->errors++ == 0) s->first_status = st;
  }
  for (unsigned k = 0; k < 8; k++)
    if (rap_deallocate(s->a, live[k], NULL) != RAP_OK) s->errors++;
  return NULL;
}

RAP_TEST(Stress, OneQueueServesTwoPools) {
  rap_manager *rm = tu_manager();
  rap_allocator *pools[2] = {NULL, NULL};
  static const char *const pool_spec = "ThreadSafe(ResourceAwarePool(HOST, initial_size=1MiB))";
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "one", pool_spec, &pools[0]));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "two", pool_spec, &pools[1]));
  rap_resource *q = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  sharer sh[SHARED_THREADS];
  pthread_t th[SHARED_THREADS];
  for (unsigned i = 0; i < SHARED_THREADS; i++) {
    sh[i] = (sharer){pools[i % 2], q, i, 0, RAP_OK};
    RAP_CHECK(pthread_create(&th[i], NULL, share, &sh[i]) == 0);
  }
  for (unsigned i = 0; i < SHARED_THREADS; i++) pthread_join(th[i], NULL);
  for (unsigned i = 0; i < SHARED_THREADS; i++)
    if (sh[i].errors != 0)
      rap_test_fail(__FILE__, __LINE__, "thread %u: %d errors, the first %s", i, sh[i].errors,
                    rap_status_name(sh[i].first_status));
  RAP_CHECK_OK(rap_resource_synchronize(q));
  for (int i = 0; i < 2; i++) {
    RAP_CHECK_OK(rap_release(pools[i]));
    TU_EXPECT(pools[i], allocation_count, 0);
    TU_EXPECT(pools[i], pending_count, 0);
    TU_EXPECT(pools[i], chunk_count, 0);
    TU_CHECK(pools[i]);
  }
  RAP_CHECK_OK(rap_resource_destroy(q));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
