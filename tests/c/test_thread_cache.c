/* test_thread_cache.c — ThreadCache from the outside: the wrapper that makes its parent safe for
 * concurrent callers and keeps, per thread, a cache of free blocks binned by resource and class.
 *
 * Options; size classes (four per power of two, at most a quarter more, counted by the stats;
 * max_size the largest request cached); hits that the inline paths leave out of line (a thread
 * over several instances and resources); the pending rule through the caches (a block freed on a
 * busy queue, or recorded on one, reaches no other resource, also once the caches gave it back);
 * bad frees; frees on other threads, also after the allocating thread ended, and after rap_release
 * took the owner's bins; stats that see through the caches; a thread's exit and rap_release giving
 * caches back; out of memory giving other threads' caches back; resource, allocator and manager
 * teardown while caches hold blocks. Stresses:
 * eight threads on their own queues and on the host handing blocks around while a checker walks
 * the allocator; short-lived threads whose caches are abandoned and adopted; the pending rule
 * with a gated queue. Threads that must stay alive between steps are workers that run one call at
 * a time for the body; busy queues are held by gates; no sleeps. Bounded, fixed seeds.
 */
#define _GNU_SOURCE   /* syscall(SYS_gettid) in watchdog.h */

#include "gate.h"
#include "test_util.h"
#include "watchdog.h"
#include "thread_cache_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- fixture: a ThreadCache, the host resource and three queues with a gate each --------------
 * Heap-allocated: a failed check ends the body and leaves it (and anything blocked on it) be. */
typedef struct fx {
  rap_manager *rm;
  rap_allocator *tc, *inner;
  rap_resource *host, *q[4];   /* q[1..3]; NULL once destroyed by the test */
  gate *g[4];
} fx;

static fx *fx_setup(const char *spec) {
  fx *x = calloc(1, sizeof *x);
  RAP_CHECK(x != NULL);
  x->rm = tu_manager();
  RAP_CHECK_OK(rap_allocator_make_spec(x->rm, "tc", spec, &x->tc));
  x->inner = rap_allocator_parent(x->tc);
  RAP_CHECK_OK(rap_resource_host(x->rm, &x->host));
  for (int i = 1; i <= 3; i++) {
    RAP_CHECK_OK(rap_resource_create_host_async(x->rm, &x->q[i]));
    x->g[i] = malloc(sizeof(gate));
    RAP_CHECK(x->g[i] != NULL);
    gate_init(x->g[i]);
  }
  return x;
}

static void fx_busy(fx *x, int i) { RAP_CHECK_OK(rap_resource_submit(x->q[i], gate_job, x->g[i])); }


static void fx_teardown(fx *x) {
  for (int i = 1; i <= 3; i++) gate_open(x->g[i]);
  for (int i = 1; i <= 3; i++)
    if (x->q[i] != NULL) RAP_CHECK_OK(rap_resource_synchronize(x->q[i]));
  TU_CHECK(x->tc);
  TU_EXPECT(x->tc, allocation_count, 0);
  TU_EXPECT(x->tc, current_bytes, 0);
  RAP_CHECK_OK(rap_release(x->tc));
  TU_EXPECT(x->tc, cached_bytes, 0);
  TU_EXPECT(x->tc, cached_count, 0);
  TU_EXPECT(x->inner, allocation_count, 0);
  destroy_clean(x->rm);
  for (int i = 1; i <= 3; i++) {
    gate_destroy(x->g[i]);
    free(x->g[i]);
  }
  free(x);
}

static void *fx_alloc(fx *x, size_t n, rap_resource *r) {
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(x->tc, &p, n, r));
  RAP_CHECK(p != NULL);
  return p;
}



/* Every field in which two stats differ, with both values, into buf; NULL if none. */
static const char *stats_diff(const rap_stats *a, const rap_stats *b, char *buf, size_t cap) {
  size_t used = 0;
  buf[0] = '\0';
#define TC_FIELD(f)                                                                                \
  if (a->f != b->f && used < cap)                                                                  \
    used += (size_t)snprintf(buf + used, cap - used, "%s" #f " %zu -> %zu", used ? ", " : "",     \
                             a->f, b->f);
  TC_FIELD(current_bytes) TC_FIELD(high_watermark) TC_FIELD(actual_bytes)
  TC_FIELD(actual_high_watermark) TC_FIELD(releasable_bytes) TC_FIELD(free_bytes)
  TC_FIELD(pending_bytes) TC_FIELD(largest_free_block) TC_FIELD(allocation_count)
  TC_FIELD(block_count) TC_FIELD(pending_count) TC_FIELD(chunk_count) TC_FIELD(used_bytes)
  TC_FIELD(cached_bytes) TC_FIELD(cached_count)
#undef TC_FIELD
  return used ? buf : NULL;
}

#define STATS_SAME(before, after, what)                                                            \
  do {                                                                                             \
    char buf_[600];                                                                                \
    const char *d_ = stats_diff(&(before), &(after), buf_, sizeof buf_);                          \
    if (d_ != NULL) rap_test_fail(__FILE__, __LINE__, "%s changed the stats: %s", (what), d_);    \
  } while (0)

/* ---- workers: threads that stay alive between the body's steps --------------------------------- */

typedef struct worker {
  pthread_t thread;
  pthread_mutex_t m;
  pthread_cond_t c;
  void (*fn)(void *);
  void *arg;
  bool posted, done, quit;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  pthread_mutex_lock(&w->m);
  for (;;) {
    while (!w->posted && !w->quit) pthread_cond_wait(&w->c, &w->m);
    if (!w->posted) break;
    w->posted = false;
    pthread_mutex_unlock(&w->m);
    w->fn(w->arg);
    pthread_mutex_lock(&w->m);
    w->done = true;
    pthread_cond_broadcast(&w->c);
  }
  pthread_mutex_unlock(&w->m);
  return NULL;
}

static worker *worker_start(void) {
  worker *w = calloc(1, sizeof *w);   /* leaked if a check fails while it runs */
  RAP_CHECK(w != NULL);
  pthread_mutex_init(&w->m, NULL);
  pthread_cond_init(&w->c, NULL);
  RAP_CHECK(pthread_create(&w->thread, NULL, worker_main, w) == 0);
  return w;
}

/* Runs fn(arg) on the worker's thread and waits for it (a hang fails the body after WD_SECONDS). */
static void worker_call(worker *w, void (*fn)(void *), void *arg) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += WD_SECONDS;
  pthread_mutex_lock(&w->m);
  w->fn = fn;
  w->arg = arg;
  w->done = false;
  w->posted = true;
  pthread_cond_broadcast(&w->c);
  int rc = 0;
  while (!w->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&w->c, &w->m, &ts);
  bool done = w->done;
  pthread_mutex_unlock(&w->m);
  if (!done) rap_test_fail(__FILE__, __LINE__, "a worker's call hung (watchdog: %d s)", WD_SECONDS);
}

/* The worker's thread ends (which gives its caches back) and is joined. */
static void worker_stop(worker *w) {
  pthread_mutex_lock(&w->m);
  w->quit = true;
  pthread_cond_broadcast(&w->c);
  pthread_mutex_unlock(&w->m);
  pthread_join(w->thread, NULL);
  pthread_cond_destroy(&w->c);
  pthread_mutex_destroy(&w->m);
  free(w);
}

/* What a worker (or the body itself) does: count blocks of n bytes on r, each filled with
 * tu_fill(seed + i); st is the first status that was not RAP_OK. */
enum { OPS_MAX = 64 };
typedef struct ops {
  rap_allocator *a;
  rap_resource *r;
  size_t n;
  unsigned count, seed;
  void *p[OPS_MAX];
  int st;
  rap_manager *rm;   /* if set, op_alloc asks rap_allocator_find about each block before writing */
  char why[160];     /* what that found wrong */
} ops;

static ops *ops_new(rap_allocator *a, rap_resource *r, size_t n, unsigned count, unsigned seed) {
  ops *o = calloc(1, sizeof *o);   /* leaked if a check fails: a worker may still use it */
  RAP_CHECK(o != NULL && count <= OPS_MAX);
  *o = (ops){.a = a, .r = r, .n = n, .count = count, .seed = seed, .st = RAP_OK};
  return o;
}

static void op_alloc(void *arg) {
  ops *o = arg;
  o->st = RAP_OK;
  for (unsigned i = 0; i < o->count; i++) {
    o->p[i] = NULL;
    int st = rap_allocate(o->a, &o->p[i], o->n, o->r);
    rap_allocator *found = NULL;
    if (st == RAP_OK && o->rm != NULL &&
        (rap_allocator_find(o->rm, o->p[i], &found) != RAP_OK || found != o->a)) {
      snprintf(o->why, sizeof o->why, "rap_allocate answered RAP_OK with %p, which it does not own",
               o->p[i]);
      o->p[i] = NULL;
      st = RAP_ERR_CORRUPT;
    }
    if (st == RAP_OK && o->p[i] != NULL) tu_fill(o->p[i], o->n, o->seed + i);
    else if (o->st == RAP_OK) o->st = st == RAP_OK ? RAP_ERR_CORRUPT : st;
  }
}

/* Frees every block on o->r (NULL: the owner), after checking its pattern. */
static void op_free(void *arg) {
  ops *o = arg;
  o->st = RAP_OK;
  for (unsigned i = 0; i < o->count; i++) {
    if (o->p[i] == NULL) continue;
    if (!tu_intact(o->p[i], o->n, o->seed + i) && o->st == RAP_OK) o->st = RAP_ERR_CORRUPT;
    int st = rap_deallocate(o->a, o->p[i], o->r);
    if (st != RAP_OK && o->st == RAP_OK) o->st = st;
    o->p[i] = NULL;
  }
}

/* Allocates and frees: the caller's cache keeps the blocks. */
static void op_cycle(void *arg) {
  ops *o = arg;
  op_alloc(o);
  int st = o->st;
  op_free(o);
  if (st != RAP_OK) o->st = st;
}

/* Frees one block and answers the status (for wrong-resource and double frees from a worker). */
typedef struct one_free {
  rap_allocator *a;
  void *p;
  rap_resource *r;
  int st;
} one_free;

static void op_one_free(void *arg) {
  one_free *f = arg;
  f->st = rap_deallocate(f->a, f->p, f->r);
}

static void run_ops(worker *w, void (*fn)(void *), ops *o) {
  if (w != NULL) worker_call(w, fn, o);
  else fn(o);
  RAP_CHECK_OK(o->st);
}

/* ---- options ------------------------------------------------------------------------------------ */

static void spec_refused(rap_manager *rm, const char *spec, const char *needle) {
  rap_allocator *a = NULL;
  int st = rap_allocator_make_spec(rm, "x", spec, &a);
  if (st != RAP_ERR_INVALID)
    rap_test_fail(__FILE__, __LINE__, "'%s' gave %s, expected RAP_ERR_INVALID", spec,
                  rap_status_name(st));
  if (!rap_test_contains(rap_last_error(), needle))
    rap_test_fail(__FILE__, __LINE__, "'%s': the sentence '%s' does not name '%s'", spec,
                  rap_last_error(), needle);
  RAP_CHECK(a == NULL);
  RAP_CHECK_STATUS(rap_allocator_get(rm, "x", &a), RAP_ERR_NOT_FOUND);
}

static void use_once(rap_allocator *a) {
  void *p = NULL, *q = NULL;
  RAP_CHECK_OK(rap_allocate(a, &p, 100, NULL));
  RAP_CHECK_OK(rap_allocate(a, &q, BIG, NULL));
  memset(p, 1, 100);
  memset(q, 2, BIG);
  RAP_CHECK_OK(rap_deallocate(a, p, NULL));
  RAP_CHECK_OK(rap_deallocate(a, q, NULL));
  TU_CHECK(a);
}

RAP_TEST(ThreadCache, OptionsAndSpecs) {
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL, *b = NULL, *c = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(
      rm, "a", "ThreadCache(ResourceAwarePool(HOST, alignment=16, initial_size=1MiB))", &a));
  RAP_CHECK(strcmp(rap_allocator_strategy(a), "ThreadCache") == 0);
  RAP_CHECK(strcmp(rap_allocator_name(rap_allocator_parent(a)), "a/ResourceAwarePool") == 0);
  RAP_CHECK_OK(rap_allocator_make_spec(
      rm, "b", "ThreadCache(QuickPool(HOST, initial_size=1MiB), cache_bytes=1MiB, cache_blocks=8, "
               "max_size=64KiB)", &b));
  RAP_CHECK_OK(rap_allocator_make(rm, "cp", "QuickPool", "HOST", "initial_size=1MiB", &c));
  RAP_CHECK_OK(rap_allocator_make(rm, "c", "threadcache", "cp", "max_size=4KiB,cache_blocks=1",
                                  &c));   /* names match without regard to case */
  use_once(a);
  use_once(b);
  use_once(c);
  spec_refused(rm, "ThreadCache(QuickPool(HOST), bogus=1)", "bogus");
  spec_refused(rm, "ThreadCache(QuickPool(HOST), max_size=0)", "max_size");
  spec_refused(rm, "ThreadCache(QuickPool(HOST), max_size=lots)", "max_size");
  spec_refused(rm, "ThreadCache(QuickPool(HOST), max_size=-1)", "max_size");
  spec_refused(rm, "ThreadCache(QuickPool(HOST), shared_bytes=lots)", "shared_bytes");
  spec_refused(rm, "ThreadCache(QuickPool(HOST), cache_bytes=12QiB)", "cache_bytes");
  spec_refused(rm, "ThreadCache(QuickPool(HOST), cache_bytes=-5)", "cache_bytes");
  spec_refused(rm, "ThreadCache(QuickPool(HOST), cache_blocks=0)", "cache_blocks");
  spec_refused(rm, "ThreadCache(QuickPool(HOST), cache_blocks=2.5)", "cache_blocks");
  spec_refused(rm, "ThreadCache(QuickPool(HOST), cache_blocks=many)", "cache_blocks");
  rap_allocator *x = NULL;
  RAP_CHECK_STATUS(rap_allocator_get(rm, "x/QuickPool", &x), RAP_ERR_NOT_FOUND);   /* none left */
  RAP_CHECK_STATUS(rap_allocator_make(rm, "x", "ThreadCache", NULL, NULL, &x), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "parent");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "x", "ThreadCache", "HOST", "cache_blocks=0", &x),
                   RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "cache_blocks");
  RAP_CHECK(x == NULL);
  destroy_clean(rm);
}

/* ---- size classes ------------------------------------------------------------------------------- */

/* The live bytes one block of n bytes counts, and what the caches hold once it is freed. */
typedef struct rounded {
  size_t live, cached_more;
} rounded;

static rounded round_of(rap_allocator *tc, size_t n) {
  rap_stats s0 = tu_stats(tc);
  void *p = tu_alloc(tc, n);
  rap_stats s1 = tu_stats(tc);
  RAP_CHECK_OK(rap_deallocate(tc, p, NULL));
  rap_stats s2 = tu_stats(tc);
  RAP_CHECK_EQ(s1.allocation_count, s0.allocation_count + 1);
  RAP_CHECK_EQ(s1.used_bytes - s0.used_bytes, tu_align(s1.current_bytes - s0.current_bytes, 16));
  RAP_CHECK_EQ(s2.current_bytes, s0.current_bytes);
  return (rounded){s1.current_bytes - s0.current_bytes, s2.cached_bytes - s1.cached_bytes};
}

/* Every size from 1 B to 4 KiB, then a few up to max_size (1 MiB by default) and above: a size up
 * to max_size counts its class, at least the request, at most a quarter more (above four alignment
 * units), four classes per power of two; it stays cached once freed; above max_size it counts the
 * request exactly and is not cached. Sizes ascend, so a freed block is never of a larger class than
 * the next request's. */
RAP_TEST(ThreadCache, RoundsUpToFourClassesPerPowerOfTwo) {
  rap_manager *rm = tu_manager();
  rap_allocator *tc = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "tc", "ThreadCache(" RAP16 ")", &tc));
  static size_t live[4097];
  for (size_t n = 1; n <= 4096; n++) {
    size_t r = live[n] = round_of(tc, n).live;
    size_t aligned = tu_align(n, 16);
    if (r < n || r % 16 != 0 || r > aligned + aligned / 4 || (n >= 64 && r > n + n / 4))
      rap_test_fail(__FILE__, __LINE__, "%zu bytes counted as %zu", n, r);
  }
  for (size_t lo = 64; lo < 4096; lo *= 2) {   /* the octave (lo, 2 lo] */
    size_t classes = 0;
    for (size_t n = lo + 1; n <= 2 * lo; n++)
      if (n == lo + 1 || live[n] != live[n - 1]) classes++;
    if (classes != 4)
      rap_test_fail(__FILE__, __LINE__, "(%zu, %zu] has %zu classes, not 4", lo, 2 * lo, classes);
  }
  static const size_t big[] = {64 * KiB + 1, 100000, 700000, MiB - 1, MiB};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
    RAP_CHECK_OK(rap_release(tc));
    rounded r = round_of(tc, big[i]);
    if (r.live < big[i] || r.live > big[i] + big[i] / 4 || r.cached_more != r.live)
      rap_test_fail(__FILE__, __LINE__, "%zu bytes counted as %zu, freed it added %zu cached bytes",
                    big[i], r.live, r.cached_more);
  }
  static const size_t above[] = {MiB + 1, 3 * MiB + 5};
  for (size_t i = 0; i < sizeof above / sizeof above[0]; i++) {
    rounded r = round_of(tc, above[i]);
    if (r.live != above[i] || r.cached_more != 0)
      rap_test_fail(__FILE__, __LINE__, "%zu bytes (above max_size) counted as %zu, freed it added "
                    "%zu cached bytes", above[i], r.live, r.cached_more);
  }
  RAP_CHECK_OK(rap_release(tc));
  TU_EXPECT(tc, cached_bytes, 0);
  TU_CHECK(tc);
  destroy_clean(rm);
}

/* max_size is the largest request cached, also where it is not a class of its own: with
 * max_size=1000, 1000 bytes are cached and 1001 bytes go to the parent as they are. */
RAP_TEST(ThreadCache, MaxSizeIsTheLargestCachedRequest) {
  rap_manager *rm = tu_manager();
  rap_allocator *tc = NULL, *tc64 = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "tc", "ThreadCache(" RAP16 ", max_size=1000)", &tc));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "tc64", "ThreadCache(" RAP16 ", max_size=64KiB)",
                                       &tc64));
  rounded r = round_of(tc64, 64 * KiB);
  RAP_CHECK_EQ(r.live, 64 * KiB);
  RAP_CHECK_EQ(r.cached_more, 64 * KiB);
  r = round_of(tc64, 64 * KiB + 1);
  RAP_CHECK_EQ(r.live, 64 * KiB + 1);
  RAP_CHECK_EQ(r.cached_more, 0);
  r = round_of(tc, 1000);
  RAP_CHECK(r.live >= 1000 && r.live <= 1250);
  RAP_CHECK_EQ(r.cached_more, r.live);
  r = round_of(tc, 1001);
  if (r.live != 1001 || r.cached_more != 0)
    rap_test_fail(__FILE__, __LINE__, "max_size=1000: a request of 1001 bytes counted as %zu and "
                  "freed added %zu cached bytes (expected 1001 and 0: above max_size, uncached)",
                  r.live, r.cached_more);
  RAP_CHECK_OK(rap_release(tc));
  RAP_CHECK_OK(rap_release(tc64));
  destroy_clean(rm);
}

/* A request is rounded to its own class also when a cached block of a larger class could serve it:
 * after a block of 1536 bytes was freed, a request of 1024 bytes (a class) counts at most 1280. */
RAP_TEST(ThreadCache, ReuseKeepsTheRoundingWithinAQuarter) {
  rap_manager *rm = tu_manager();
  rap_allocator *tc = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "tc", "ThreadCache(" RAP16 ")", &tc));
  RAP_CHECK_EQ(round_of(tc, 1536).live, 1536);   /* now cached */
  size_t live = round_of(tc, 1024).live;
  if (live > 1280)
    rap_test_fail(__FILE__, __LINE__, "a request of 1024 bytes counted %zu live bytes (more than "
                  "a quarter above its class)", live);
  RAP_CHECK_OK(rap_release(tc));
  destroy_clean(rm);
}

/* ---- hits that the inline path sends out of line ----------------------------------------------- */

/* The inline hit looks only at the thread's first way (instance) and its cache's first slot
 * (resource): one thread over six instances (more than it keeps ways for) and eight resources (as
 * many as a cache keeps slots for), interleaved, gets back on each resource the block it freed
 * there, from its cache: the parents give out nothing more after the first round, and every cache
 * stays consistent. */
RAP_TEST(ThreadCache, HitsBeyondTheFirstInstanceAndResource) {
  enum { INSTANCES = 6, RESOURCES = 8, ROUNDS = 3 };
  rap_manager *rm = tu_manager();
  rap_allocator *tc[INSTANCES];
  rap_resource *r[RESOURCES];
  void *last[INSTANCES][RESOURCES];
  r[0] = NULL;   /* the host resource */
  for (int j = 1; j < RESOURCES; j++) RAP_CHECK_OK(rap_resource_create_host_async(rm, &r[j]));
  for (int k = 0; k < INSTANCES; k++) {
    char name[16];
    snprintf(name, sizeof name, "tc%d", k);
    RAP_CHECK_OK(rap_allocator_make_spec(rm, name, "ThreadCache(" RAP16 ", max_size=64KiB)", &tc[k]));
  }
  /* Three instances fit the thread's ways (each found again in the one it has); six do not. */
  for (int used = 3; used <= INSTANCES; used += 3) {
    size_t parents = 0;
    for (int round = 0; round < ROUNDS; round++) {
      for (int j = 0; j < RESOURCES; j++)
        for (int k = 0; k < used; k++) {
          void *p = NULL;
          RAP_CHECK_OK(rap_allocate(tc[k], &p, 768, r[j]));
          if (round > 0 && p != last[k][j])
            rap_test_fail(__FILE__, __LINE__, "%d instances, round %d, instance %d, resource %d: "
                          "%p is not the block freed there last, %p", used, round, k, j, p,
                          last[k][j]);
          last[k][j] = p;
          RAP_CHECK_OK(rap_deallocate(tc[k], p, r[j]));
        }
      size_t given = 0;
      for (int k = 0; k < used; k++) {
        TU_CHECK(tc[k]);
        given += tu_stats(rap_allocator_parent(tc[k])).allocation_count;
      }
      if (round > 0) RAP_CHECK_EQ(given, parents);   /* every block came from a cache */
      parents = given;
    }
  }
  for (int k = 0; k < INSTANCES; k++) RAP_CHECK_EQ(tu_stats(tc[k]).allocation_count, 0);
  for (int j = 1; j < RESOURCES; j++) RAP_CHECK_OK(rap_resource_destroy(r[j]));
  destroy_clean(rm);
}

/* ---- stats see through the caches ------------------------------------------------------------- */

RAP_TEST(ThreadCache, StatsSeeThroughTheCaches) {
  fx *x = fx_setup(SPEC_64K);
  void *h[3], *q[2], *big;
  for (int i = 0; i < 3; i++) h[i] = fx_alloc(x, 1024, NULL);
  for (int i = 0; i < 2; i++) q[i] = fx_alloc(x, 3072, x->q[1]);
  big = fx_alloc(x, BIG, x->q[1]);
  RAP_CHECK_OK(rap_deallocate(x->tc, h[0], NULL));
  rap_stats s = tu_stats(x->tc), in = tu_stats(x->inner);
  RAP_CHECK_EQ(s.current_bytes, 2 * 1024 + 2 * 3072 + BIG);
  RAP_CHECK_EQ(s.used_bytes, 2 * 1024 + 2 * 3072 + BIG);
  RAP_CHECK_EQ(s.allocation_count, 5);
  RAP_CHECK(s.cached_count >= 1 && s.cached_bytes >= 1024);
  RAP_CHECK_EQ(in.current_bytes, s.current_bytes + s.cached_bytes);   /* the parent's live blocks */
  RAP_CHECK_EQ(in.allocation_count, s.allocation_count + s.cached_count);
  rap_stats rq = tu_rstats(x->tc, x->q[1]), rh = tu_rstats(x->tc, x->host);
  rap_stats iq = tu_rstats(x->inner, x->q[1]), ih = tu_rstats(x->inner, x->host);
  RAP_CHECK_EQ(rq.current_bytes, 2 * 3072 + BIG);
  RAP_CHECK_EQ(rq.allocation_count, 3);
  RAP_CHECK_EQ(rh.current_bytes, 2 * 1024);
  RAP_CHECK_EQ(rh.allocation_count, 2);
  RAP_CHECK(rh.cached_count >= 1);
  RAP_CHECK_EQ(iq.current_bytes, rq.current_bytes + rq.cached_bytes);
  RAP_CHECK_EQ(ih.current_bytes, rh.current_bytes + rh.cached_bytes);
  RAP_CHECK_EQ(rq.cached_bytes + rh.cached_bytes, s.cached_bytes);
  for (int i = 1; i < 3; i++) RAP_CHECK_OK(rap_deallocate(x->tc, h[i], NULL));
  for (int i = 0; i < 2; i++) RAP_CHECK_OK(rap_deallocate(x->tc, q[i], x->q[1]));
  RAP_CHECK_OK(rap_deallocate(x->tc, big, NULL));
  s = tu_stats(x->tc);
  in = tu_stats(x->inner);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.used_bytes, 0);
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK(s.cached_count >= 5);
  RAP_CHECK_EQ(s.cached_count, in.allocation_count);
  RAP_CHECK_EQ(s.cached_bytes, in.current_bytes);
  TU_CHECK(x->tc);
  RAP_CHECK_OK(rap_release(x->tc));
  s = tu_stats(x->tc);
  RAP_CHECK_EQ(s.cached_bytes, 0);
  RAP_CHECK_EQ(s.cached_count, 0);
  TU_EXPECT(x->inner, allocation_count, 0);
  TU_EXPECT(x->inner, chunk_count, 0);   /* the queues are idle: everything went back */
  fx_teardown(x);
}

/* ---- deallocation: owner, wrong resource, double and unknown frees ------------------------------ */

RAP_TEST(ThreadCache, DeallocateFindsOwnerAndRefusesBadFrees) {
  fx *x = fx_setup(SPEC_64K);
  worker *w = worker_start();
  void *sq = fx_alloc(x, 768, x->q[1]), *bq = fx_alloc(x, BIG, x->q[1]);
  void *sh = fx_alloc(x, 768, NULL), *bh = fx_alloc(x, BIG, NULL);
  void *blocks[4] = {sq, bq, sh, bh};
  size_t sizes[4] = {768, BIG, 768, BIG};
  rap_resource *owner[4] = {x->q[1], x->q[1], x->host, x->host};
  rap_resource *wrong[4] = {x->q[2], x->host, x->q[1], x->q[2]};
  for (int i = 0; i < 4; i++) tu_fill(blocks[i], sizes[i], 10 + i);
  for (int i = 0; i < 4; i++) {
    rap_allocator *found = NULL;
    rap_resource *r = NULL;
    RAP_CHECK_OK(rap_allocator_find(x->rm, blocks[i], &found));
    RAP_CHECK(found == x->tc);
    RAP_CHECK_OK(rap_pointer_resource(x->tc, blocks[i], &r));
    RAP_CHECK(r == owner[i]);
  }
  rap_stats before = tu_stats(x->tc);
  for (int i = 0; i < 4; i++) {   /* on this thread, then on another */
    RAP_CHECK_STATUS(rap_deallocate(x->tc, blocks[i], wrong[i]), RAP_ERR_WRONG_RESOURCE);
    one_free f = {x->tc, blocks[i], wrong[i], -1000};
    worker_call(w, op_one_free, &f);
    RAP_CHECK_STATUS(f.st, RAP_ERR_WRONG_RESOURCE);
  }
  rap_stats after = tu_stats(x->tc);
  STATS_SAME(before, after, "a free on the wrong resource");
  for (int i = 0; i < 4; i++) {   /* still live, still theirs, still usable */
    rap_resource *r = NULL;
    RAP_CHECK(tu_intact(blocks[i], sizes[i], 10 + i));
    RAP_CHECK_OK(rap_pointer_resource(x->tc, blocks[i], &r));
    RAP_CHECK(r == owner[i]);
    tu_fill(blocks[i], sizes[i], 20 + i);
    RAP_CHECK(tu_intact(blocks[i], sizes[i], 20 + i));
  }
  TU_CHECK(x->tc);
  /* r == NULL finds the owner; the owner named works too. */
  RAP_CHECK_OK(rap_deallocate(x->tc, sq, NULL));
  RAP_CHECK_OK(rap_deallocate(x->tc, bq, NULL));
  RAP_CHECK_OK(rap_deallocate(x->tc, sh, x->host));
  RAP_CHECK_OK(rap_deallocate(x->tc, bh, NULL));
  before = tu_stats(x->tc);
  RAP_CHECK_EQ(before.allocation_count, 0);
  for (int i = 0; i < 4; i++) {   /* a second free, here and on another thread */
    RAP_CHECK_STATUS(rap_deallocate(x->tc, blocks[i], NULL), RAP_ERR_UNKNOWN_POINTER);
    RAP_CHECK_STATUS(rap_deallocate(x->tc, blocks[i], owner[i]), RAP_ERR_UNKNOWN_POINTER);
    one_free f = {x->tc, blocks[i], NULL, -1000};
    worker_call(w, op_one_free, &f);
    RAP_CHECK_STATUS(f.st, RAP_ERR_UNKNOWN_POINTER);
  }
  after = tu_stats(x->tc);
  STATS_SAME(before, after, "a second free");
  /* A block freed on the owner by another thread, then a second time here. */
  void *t = fx_alloc(x, 768, x->q[1]);
  one_free f = {x->tc, t, NULL, -1000};
  worker_call(w, op_one_free, &f);
  RAP_CHECK_OK(f.st);
  RAP_CHECK_STATUS(rap_deallocate(x->tc, t, NULL), RAP_ERR_UNKNOWN_POINTER);
  /* Pointers it never handed out. */
  void *live = fx_alloc(x, 3072, NULL);
  char *foreign = malloc(64);
  int local = 0;
  RAP_CHECK(foreign != NULL);
  RAP_CHECK_STATUS(rap_deallocate(x->tc, foreign, NULL), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_STATUS(rap_deallocate(x->tc, (char *)live + 16, NULL), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_STATUS(rap_deallocate(x->tc, (char *)live + 16, x->host), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_STATUS(rap_deallocate(x->tc, &local, NULL), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_OK(rap_deallocate(x->tc, NULL, NULL));
  free(foreign);
  TU_EXPECT(x->tc, allocation_count, 1);
  RAP_CHECK_OK(rap_deallocate(x->tc, live, NULL));
  /* Zero bytes: unique, valid pointers, freed like any other. */
  void *z1 = fx_alloc(x, 0, NULL), *z2 = fx_alloc(x, 0, x->q[2]);
  RAP_CHECK(z1 != z2);
  RAP_CHECK_OK(rap_deallocate(x->tc, z1, NULL));
  RAP_CHECK_OK(rap_deallocate(x->tc, z2, NULL));
  TU_CHECK(x->tc);
  worker_stop(w);
  fx_teardown(x);
}

/* ---- the pending rule through the caches ------------------------------------------------------- */

/* Allocates count blocks of n bytes on r, each checked against the spans, keeps them in out. */
static void alloc_avoiding(fx *x, rap_resource *r, size_t n, unsigned count, const span *sp,
                           unsigned nsp, void **out) {
  for (unsigned i = 0; i < count; i++) {
    out[i] = fx_alloc(x, n, r);
    for (unsigned k = 0; k < nsp; k++)
      if (overlaps(out[i], n, sp[k].p, sp[k].n))
        rap_test_fail(__FILE__, __LINE__, "a block of %zu bytes on %s overlaps %p (%zu bytes), "
                      "freed on a queue that has not passed its free", n,
                      r == NULL ? "the host" : rap_resource_kind(r), sp[k].p, sp[k].n);
  }
}

static void free_all(fx *x, void **p, unsigned count) {
  for (unsigned i = 0; i < count; i++) RAP_CHECK_OK(rap_deallocate(x->tc, p[i], NULL));
}

/* Allocations on q2, q3 and the host, small, mid-sized and above max_size: none touches a span. */
static void round_avoiding(fx *x, const span *sp, unsigned nsp) {
  void *p[48];
  rap_resource *rs[3] = {x->q[2], x->q[3], NULL};
  for (int k = 0; k < 3; k++) {
    alloc_avoiding(x, rs[k], 768, 48, sp, nsp, p);
    free_all(x, p, 48);
    alloc_avoiding(x, rs[k], 3072, 16, sp, nsp, p);
    free_all(x, p, 16);
    alloc_avoiding(x, rs[k], BIG, 3, sp, nsp, p);
    free_all(x, p, 3);
  }
}

typedef struct avoid_job {
  fx *x;
  const span *sp;
  unsigned nsp;
  char failure[256];
} avoid_job;

/* round_avoiding on a worker: its own cache, nothing failed there by a check. */
static void op_avoid(void *arg) {
  avoid_job *j = arg;
  fx *x = j->x;
  rap_resource *rs[2] = {x->q[2], NULL};
  static const size_t sizes[3] = {768, 3072, BIG};
  j->failure[0] = '\0';
  for (int k = 0; k < 2; k++)
    for (int s = 0; s < 3; s++) {
      void *p[32];
      unsigned n = s == 2 ? 3 : 32;
      for (unsigned i = 0; i < n; i++) {
        p[i] = NULL;
        int st = rap_allocate(x->tc, &p[i], sizes[s], rs[k]);
        if (st != RAP_OK && j->failure[0] == '\0')
          snprintf(j->failure, sizeof j->failure, "rap_allocate: %s", rap_status_name(st));
        for (unsigned m = 0; p[i] != NULL && m < j->nsp; m++)
          if (overlaps(p[i], sizes[s], j->sp[m].p, j->sp[m].n) && j->failure[0] == '\0')
            snprintf(j->failure, sizeof j->failure, "another thread got %p (%zu bytes), which "
                     "overlaps %p freed on a busy queue", p[i], sizes[s], j->sp[m].p);
      }
      for (unsigned i = 0; i < n; i++)
        if (p[i] != NULL) (void)rap_deallocate(x->tc, p[i], NULL);
    }
}

/* q1 is busy. Blocks freed on it (more than a bin keeps, and one above max_size) reach neither q2,
 * q3, the host nor another thread - neither from the cache nor once rap_release gave them back to
 * the parent, which keeps them pending; q1 itself may take them. Once q1 passed, all is free. */
RAP_TEST(ThreadCache, BlockFreedOnABusyQueueReachesNoOtherResource) {
  fx *x = fx_setup("ThreadCache(" RAP16 ", max_size=64KiB, cache_blocks=4)");
  worker *w = worker_start();
  fx_busy(x, 1);
  span sp[24];
  unsigned nsp = 0;
  for (int i = 0; i < 12; i++) sp[nsp++] = (span){fx_alloc(x, 768, x->q[1]), 768};
  for (int i = 0; i < 8; i++) sp[nsp++] = (span){fx_alloc(x, 3072, x->q[1]), 3072};
  for (int i = 0; i < 2; i++) sp[nsp++] = (span){fx_alloc(x, BIG, x->q[1]), BIG};
  for (unsigned i = 0; i < nsp; i++)
    RAP_CHECK_OK(rap_deallocate(x->tc, sp[i].p, i % 2 ? x->q[1] : NULL));
  round_avoiding(x, sp, nsp);
  avoid_job *j = calloc(1, sizeof *j);
  RAP_CHECK(j != NULL);
  *j = (avoid_job){x, sp, nsp, ""};
  worker_call(w, op_avoid, j);
  if (j->failure[0] != '\0') rap_test_fail(__FILE__, __LINE__, "worker: %s", j->failure);
  RAP_CHECK_OK(rap_release(x->tc));   /* the caches give them back: pending on q1 in the parent */
  TU_EXPECT(x->tc, cached_count, 0);
  RAP_CHECK(tu_stats(x->tc).pending_count >= 1);
  RAP_CHECK(tu_rstats(x->tc, x->q[1]).pending_bytes >= 12 * 768);
  round_avoiding(x, sp, nsp);
  worker_call(w, op_avoid, j);
  if (j->failure[0] != '\0') rap_test_fail(__FILE__, __LINE__, "worker: %s", j->failure);
  void *own[12];   /* q1 itself may have them back */
  for (int i = 0; i < 12; i++) own[i] = fx_alloc(x, 768, x->q[1]);
  free_all(x, own, 12);
  gate_open(x->g[1]);
  RAP_CHECK_OK(rap_resource_synchronize(x->q[1]));
  RAP_CHECK_OK(rap_release(x->tc));
  TU_EXPECT(x->tc, pending_count, 0);
  TU_CHECK(x->tc);
  worker_stop(w);
  free(j);
  fx_teardown(x);
}

/* A block recorded on the busy q2 and freed on its owner (q1, or the host) is pending on q2 as well:
 * neither q1, the host nor q3 gets it, from the cache or from the parent, until q2 passes. */
RAP_TEST(ThreadCache, RecordedBlockIsPendingOnTheOtherResource) {
  fx *x = fx_setup("ThreadCache(" RAP16 ", max_size=64KiB, cache_blocks=4)");
  fx_busy(x, 2);
  span sp[4] = {{fx_alloc(x, 768, x->q[1]), 768}, {fx_alloc(x, 768, NULL), 768},
                {fx_alloc(x, BIG, x->q[1]), BIG}, {fx_alloc(x, 3072, x->q[3]), 3072}};
  for (int i = 0; i < 4; i++) RAP_CHECK_OK(rap_record_resource(x->tc, sp[i].p, x->q[2]));
  RAP_CHECK_OK(rap_deallocate(x->tc, sp[0].p, x->q[1]));
  RAP_CHECK_OK(rap_deallocate(x->tc, sp[1].p, NULL));
  RAP_CHECK_OK(rap_deallocate(x->tc, sp[2].p, NULL));
  RAP_CHECK_OK(rap_deallocate(x->tc, sp[3].p, x->q[3]));
  rap_resource *rs[3] = {x->q[1], NULL, x->q[3]};
  for (int pass = 0; pass < 2; pass++) {
    for (int k = 0; k < 3; k++) {
      void *p[40];
      alloc_avoiding(x, rs[k], 768, 40, sp, 4, p);
      free_all(x, p, 40);
      alloc_avoiding(x, rs[k], 3072, 12, sp, 4, p);
      free_all(x, p, 12);
      alloc_avoiding(x, rs[k], BIG, 2, sp, 4, p);
      free_all(x, p, 2);
    }
    RAP_CHECK_OK(rap_release(x->tc));   /* the second pass: the parent alone holds them */
  }
  RAP_CHECK(tu_stats(x->tc).pending_count >= 1);
  gate_open(x->g[2]);
  RAP_CHECK_OK(rap_resource_synchronize(x->q[2]));
  RAP_CHECK_OK(rap_release(x->tc));
  TU_EXPECT(x->tc, pending_count, 0);
  fx_teardown(x);
}

/* ---- threads: cross-thread frees, exits, release ----------------------------------------------- */

/* A worker allocates on the host and on q1, small and above max_size; this thread frees half while
 * the worker lives (they wait in its cache, counted as cached), the rest after it ended. */
RAP_TEST(ThreadCache, FreesOnOtherThreadsAlsoAfterTheOwnerEnded) {
  fx *x = fx_setup(SPEC_64K);
  worker *a = worker_start();
  ops *oh = ops_new(x->tc, NULL, 768, 16, 100), *oq = ops_new(x->tc, x->q[1], 3072, 16, 200);
  ops *ob = ops_new(x->tc, NULL, BIG, 2, 300);
  run_ops(a, op_alloc, oh);
  run_ops(a, op_alloc, oq);
  run_ops(a, op_alloc, ob);
  ops *half[3];
  for (int k = 0; k < 3; k++) {   /* the first halves, freed here */
    ops *o = k == 0 ? oh : k == 1 ? oq : ob;
    half[k] = ops_new(x->tc, k == 1 ? x->q[1] : NULL, o->n, o->count / 2, o->seed);
    memcpy(half[k]->p, o->p, o->count / 2 * sizeof(void *));
    memset(o->p, 0, o->count / 2 * sizeof(void *));
    run_ops(NULL, op_free, half[k]);
  }
  rap_stats s = tu_stats(x->tc), in = tu_stats(x->inner);
  RAP_CHECK_EQ(s.current_bytes, 8 * 768 + 8 * 3072 + BIG);
  RAP_CHECK_EQ(s.allocation_count, 17);
  RAP_CHECK(s.cached_count >= 16);   /* the 16 small blocks freed here wait for their owner */
  RAP_CHECK(s.cached_bytes >= 8 * 768 + 8 * 3072);
  RAP_CHECK_EQ(in.allocation_count, s.allocation_count + s.cached_count);
  RAP_CHECK_EQ(in.current_bytes, s.current_bytes + s.cached_bytes);
  TU_CHECK(x->tc);
  ops *again = ops_new(x->tc, NULL, 768, 8, 400);   /* the owner allocates and frees again */
  run_ops(a, op_cycle, again);
  void *freed = oh->p[8];   /* freed below, then once more */
  worker_stop(a);   /* the owner ends with 17 of its blocks live */
  TU_EXPECT(x->tc, allocation_count, 17);
  run_ops(NULL, op_free, oh);   /* the rest, on this thread, after the owner ended */
  oq->r = x->q[1];
  run_ops(NULL, op_free, oq);
  ob->r = x->host;
  run_ops(NULL, op_free, ob);
  s = tu_stats(x->tc);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_STATUS(rap_deallocate(x->tc, freed, NULL), RAP_ERR_UNKNOWN_POINTER);
  /* Another thread now: it works (adopting whatever the first one left). */
  worker *b = worker_start();
  ops *ob2 = ops_new(x->tc, x->q[1], 3072, 16, 500);
  run_ops(b, op_cycle, ob2);
  TU_CHECK(x->tc);
  worker_stop(b);
  free(oh), free(oq), free(ob), free(again), free(ob2);
  for (int k = 0; k < 3; k++) free(half[k]);
  fx_teardown(x);
}

static bool holds(const ops *o, const void *p) {
  for (unsigned i = 0; i < o->count; i++)
    if (o->p[i] == p) return true;
  return false;
}

/* A thread that frees blocks another thread's cache handed out keeps them while its own bin of the
 * class is under half its bound (cache_blocks=16: 8), and hands them out itself next; past that
 * they go back to the owner, which takes them back when its bin runs dry. (Every foreign free went
 * to the owner before: a thread that frees and allocates, as larson's, met the lock every time.) */
RAP_TEST(ThreadCache, ForeignFreesStayWithAThreadThatAllocatesAgain) {
  fx *x = fx_setup(SPEC_64K);
  worker *a = worker_start();
  ops *mine = ops_new(x->tc, NULL, 768, 1, 1), *theirs = ops_new(x->tc, NULL, 768, 16, 2);
  run_ops(NULL, op_cycle, mine);   /* this thread's cache: a few blocks in its bin of the class */
  unsigned own = (unsigned)tu_stats(x->tc).cached_count;
  RAP_CHECK(own >= 1 && own <= OPS_MAX);
  ops *held = ops_new(x->tc, NULL, 768, own, 5);
  run_ops(NULL, op_alloc, held);   /* ... taken out, live: its bin is empty */
  RAP_CHECK_EQ(tu_stats(x->tc).cached_count, 0);
  run_ops(a, op_alloc, theirs);    /* a's sixteen, live */
  void *kept[16];
  memcpy(kept, theirs->p, sizeof kept);
  run_ops(NULL, op_free, theirs);   /* freed here: kept until the bin holds 8, the rest go to a */
  rap_stats in = tu_stats(x->inner);
  ops *again = ops_new(x->tc, NULL, 768, 8, 3);
  run_ops(NULL, op_alloc, again);   /* this thread's bin: the eight kept, no parent call */
  unsigned adopted = 0;
  for (int i = 0; i < 16; i++) adopted += holds(again, kept[i]);
  RAP_CHECK_EQ(adopted, 8);
  RAP_CHECK_EQ(tu_stats(x->inner).allocation_count, in.allocation_count);
  ops *back = ops_new(x->tc, NULL, 768, 16 - adopted, 4);
  run_ops(a, op_alloc, back);   /* a's bin is dry: it takes the others back from its list */
  unsigned returned = 0;
  for (int i = 0; i < 16; i++) returned += holds(back, kept[i]);
  RAP_CHECK_EQ(returned, 16 - adopted);
  RAP_CHECK_EQ(tu_stats(x->inner).allocation_count, in.allocation_count);
  TU_CHECK(x->tc);
  run_ops(a, op_free, back);
  run_ops(NULL, op_free, again);
  run_ops(NULL, op_free, held);
  worker_stop(a);
  TU_EXPECT(x->tc, allocation_count, 0);
  free(mine), free(theirs), free(again), free(back), free(held);
  fx_teardown(x);
}

/* A cache's surplus is shared: a thread that frees more than its bins keep (cache_blocks=16 of a
 * class: a trim keeps 8) leaves the rest to the instance's shared blocks of that resource and
 * class, and another thread's miss takes them there before it asks the parent. At the end (and at
 * a resource's end) they go back to the parent; meanwhile they count as cached, and the check
 * walks them. */
RAP_TEST(ThreadCache, SurplusIsSharedWithOtherThreads) {
  fx *x = fx_setup(SPEC_64K);
  worker *a = worker_start(), *b = worker_start();
  ops *made = ops_new(x->tc, x->q[1], 768, 40, 1);
  run_ops(a, op_alloc, made);
  void *kept[40];
  memcpy(kept, made->p, sizeof kept);
  run_ops(a, op_free, made);   /* a's bin overflows: its surplus is shared */
  rap_stats s = tu_stats(x->tc), in = tu_stats(x->inner);
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_EQ(s.cached_count, 40);
  RAP_CHECK_EQ(in.allocation_count, 40);
  TU_CHECK(x->tc);
  ops *taken = ops_new(x->tc, x->q[1], 768, 8, 2);
  run_ops(b, op_alloc, taken);   /* b's misses: shared blocks, no parent call */
  unsigned shared = 0;
  for (unsigned i = 0; i < 8; i++)
    for (int k = 0; k < 40; k++) shared += taken->p[i] == kept[k];
  RAP_CHECK_EQ(shared, 8);
  RAP_CHECK_EQ(tu_stats(x->inner).allocation_count, in.allocation_count);
  ops *host = ops_new(x->tc, NULL, 768, 8, 3);
  run_ops(b, op_alloc, host);    /* another resource's shared blocks are not these */
  for (unsigned i = 0; i < 8; i++)
    for (int k = 0; k < 40; k++)
      if (host->p[i] == kept[k])
        rap_test_fail(__FILE__, __LINE__, "a block freed on q1 was handed out on the host: %p",
                      host->p[i]);
  TU_CHECK(x->tc);
  run_ops(b, op_free, taken);
  run_ops(b, op_free, host);
  RAP_CHECK_OK(rap_release(x->tc));   /* every cache and the shared blocks back to the parent */
  RAP_CHECK_EQ(tu_stats(x->tc).cached_count, 0);
  TU_EXPECT(x->inner, allocation_count, 0);
  worker_stop(a);
  worker_stop(b);
  free(made), free(taken), free(host);
  fx_teardown(x);
}

/* Shared blocks for every resource a cache keeps bins for (eight: a stream per GPU of a node, or
 * eight streams of one): each resource's surplus waits for another thread there, none goes to
 * the parent (the first four resources had shared lists, a fifth's surplus went to the parent). */
RAP_TEST(ThreadCache, SurplusIsSharedForEveryResourceACacheKeeps) {
  fx *x = fx_setup(SPEC_64K);
  enum { NR = 8 };
  rap_resource *r[NR];
  for (int i = 0; i < NR; i++) RAP_CHECK_OK(rap_resource_create_host_async(x->rm, &r[i]));
  worker *a = worker_start(), *b = worker_start();
  ops *made[NR], *taken[NR];
  for (int i = 0; i < NR; i++) {
    made[i] = ops_new(x->tc, r[i], 768, 40, 10 + (unsigned)i);
    run_ops(a, op_alloc, made[i]);
  }
  for (int i = 0; i < NR; i++) run_ops(a, op_free, made[i]);   /* every bin overflows */
  rap_stats in = tu_stats(x->inner);
  for (int i = 0; i < NR; i++) {
    taken[i] = ops_new(x->tc, r[i], 768, 8, 30 + (unsigned)i);
    run_ops(b, op_alloc, taken[i]);   /* b's misses on each resource: its shared blocks */
  }
  RAP_CHECK_EQ(tu_stats(x->inner).allocation_count, in.allocation_count);
  RAP_CHECK_EQ(tu_stats(x->inner).current_bytes, in.current_bytes);
  TU_CHECK(x->tc);
  for (int i = 0; i < NR; i++) run_ops(b, op_free, taken[i]);
  worker_stop(a);
  worker_stop(b);
  RAP_CHECK_OK(rap_release(x->tc));
  for (int i = 0; i < NR; i++) {
    RAP_CHECK_OK(rap_resource_destroy(r[i]));
    free(made[i]), free(taken[i]);
  }
  fx_teardown(x);
}

/* The owner of a block ends between another thread's free looking at it (alive) and pushing the
 * block onto its list (already drained by the exit): the freeing thread sees the end and gives the
 * block to the parent, so nothing waits on a list no thread will drain. The seam runs the owner's
 * end in that window. */
extern void (*rapi_tc_xpush_hook)(void);
typedef struct ending {
  rap_allocator *tc;
  void *p;
  gate allocated;   /* opened by the owner */
  gate go;          /* opened by the hook: the owner ends */
  pthread_t th;
} ending;
static ending the_ending;

static void *ending_owner(void *arg) {
  ending *e = arg;
  if (rap_allocate(e->tc, &e->p, 768, NULL) != RAP_OK) e->p = NULL;
  gate_open(&e->allocated);
  gate_job(&e->go);
  return NULL;
}

static void ending_in_the_window(void) {
  rapi_tc_xpush_hook = NULL;
  gate_open(&the_ending.go);
  pthread_join(the_ending.th, NULL);
}

RAP_TEST(ThreadCache, OwnerEndingWhileAnotherThreadFreesItsBlock) {
  fx *x = fx_setup(SPEC_64K);
  ending *e = &the_ending;
  *e = (ending){.tc = x->tc};
  gate_init(&e->allocated);
  gate_init(&e->go);
  RAP_CHECK(pthread_create(&e->th, NULL, ending_owner, e) == 0);
  gate_job(&e->allocated);
  RAP_CHECK(e->p != NULL);
  rapi_tc_xpush_hook = ending_in_the_window;
  RAP_CHECK_OK(rap_deallocate(x->tc, e->p, NULL));
  RAP_CHECK(rapi_tc_xpush_hook == NULL);   /* the free took the foreign path through the seam */
  rap_stats s = tu_stats(x->tc), in = tu_stats(x->inner);
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_EQ(s.cached_count, 0);
  RAP_CHECK_EQ(s.cached_bytes, 0);
  RAP_CHECK_EQ(in.allocation_count, 0);
  TU_CHECK(x->tc);
  gate_destroy(&e->allocated);
  gate_destroy(&e->go);
  fx_teardown(x);
}

/* A thread that ends gives its cache back: the cached figures drop by what it held (its own frees
 * and those other threads made into its cache), the live ones stay, the parent gets the bytes.
 * Without shared lists (shared_bytes=0): with them, the blocks wait there for the threads that go
 * on (ThreadCache.AThreadsEndSharesItsBlocksWhileOthersRun). */
RAP_TEST(ThreadCache, ExitingThreadGivesItsCacheBack) {
  fx *x = fx_setup("ThreadCache(" RAP16 ", max_size=64KiB, shared_bytes=0)");
  ops *mine = ops_new(x->tc, NULL, 1024, 8, 1);
  run_ops(NULL, op_cycle, mine);   /* this thread's cache: host blocks */
  worker *a = worker_start();
  ops *aq = ops_new(x->tc, x->q[1], 3072, 8, 2), *kept = ops_new(x->tc, x->q[1], 768, 4, 3);
  run_ops(a, op_cycle, aq);
  run_ops(a, op_alloc, kept);
  void *live = fx_alloc(x, 4096, x->q[2]);
  kept->r = NULL;
  run_ops(NULL, op_free, kept);   /* into a's cache, waiting for a */
  rap_stats s = tu_stats(x->tc), in = tu_stats(x->inner);
  rap_stats rq = tu_rstats(x->tc, x->q[1]), rh = tu_rstats(x->tc, x->host);
  RAP_CHECK(rq.cached_count >= 12);
  RAP_CHECK(rq.cached_bytes >= 8 * 3072 + 4 * 768);
  RAP_CHECK(rh.cached_count >= 8);
  worker_stop(a);
  rap_stats s2 = tu_stats(x->tc), in2 = tu_stats(x->inner);
  rap_stats rq2 = tu_rstats(x->tc, x->q[1]), rh2 = tu_rstats(x->tc, x->host);
  RAP_CHECK_EQ(rq2.cached_count, 0);
  RAP_CHECK_EQ(rq2.cached_bytes, 0);
  RAP_CHECK_EQ(rh2.cached_bytes, rh.cached_bytes);
  RAP_CHECK_EQ(rh2.cached_count, rh.cached_count);
  RAP_CHECK_EQ(s2.cached_bytes, s.cached_bytes - rq.cached_bytes);
  RAP_CHECK_EQ(s2.cached_count, s.cached_count - rq.cached_count);
  RAP_CHECK_EQ(s2.current_bytes, s.current_bytes);
  RAP_CHECK_EQ(s2.allocation_count, 1);
  RAP_CHECK_EQ(in2.current_bytes, in.current_bytes - rq.cached_bytes);
  TU_CHECK(x->tc);
  RAP_CHECK_OK(rap_deallocate(x->tc, live, NULL));
  free(mine), free(aq), free(kept);
  fx_teardown(x);
}

/* With shared lists (the default), a thread that ends while another thread of the instance runs
 * leaves its blocks there: still cached, taken by the next miss of their resource and class with
 * no call to the parent; rap_release gives them back. */
RAP_TEST(ThreadCache, AThreadsEndSharesItsBlocksWhileOthersRun) {
  fx *x = fx_setup(SPEC_64K);
  ops *mine = ops_new(x->tc, NULL, 1024, 1, 1);
  run_ops(NULL, op_cycle, mine);   /* this thread runs on with a cache of its own */
  worker *a = worker_start();
  ops *aq = ops_new(x->tc, x->q[1], 3072, 8, 2);
  run_ops(a, op_alloc, aq);
  void *made[8];
  memcpy(made, aq->p, sizeof made);
  run_ops(a, op_free, aq);         /* a's cache: these eight blocks of q1 */
  rap_stats s = tu_stats(x->tc), in = tu_stats(x->inner);
  worker_stop(a);
  rap_stats s2 = tu_stats(x->tc), in2 = tu_stats(x->inner);
  RAP_CHECK_EQ(s2.cached_count, s.cached_count);   /* shared, not back in the parent */
  RAP_CHECK_EQ(in2.allocation_count, in.allocation_count);
  TU_CHECK(x->tc);
  ops *taken = ops_new(x->tc, x->q[1], 3072, 4, 3);
  run_ops(NULL, op_alloc, taken);   /* this thread's misses on q1: a's blocks */
  unsigned from_a = 0;
  for (unsigned i = 0; i < 4; i++)
    for (int k = 0; k < 8; k++) from_a += taken->p[i] == made[k];
  RAP_CHECK_EQ(from_a, 4);
  RAP_CHECK_EQ(tu_stats(x->inner).allocation_count, in.allocation_count);
  run_ops(NULL, op_free, taken);
  RAP_CHECK_OK(rap_release(x->tc));
  RAP_CHECK_EQ(tu_stats(x->tc).cached_count, 0);
  TU_EXPECT(x->inner, allocation_count, 0);
  free(mine), free(aq), free(taken);
  fx_teardown(x);
}

/* Frees that reach a thread's cache after rap_release took its bins (so no bin of theirs is left),
 * then that thread misses and refills several blocks at once: every block comes back once, and
 * every later block has one owner - no free of a live block is refused, none is logged as failing,
 * no two live blocks overlap, and the parent's count is the live plus the cached. */
RAP_TEST(ThreadCache, ForeignFreesAfterAReleaseThenARefill) {
  fx *x = fx_setup(SPEC_64K);
  worker *a = worker_start();
  ops *ka = ops_new(x->tc, NULL, 768, 8, 1);
  run_ops(a, op_alloc, ka);   /* a's blocks, live */
  RAP_CHECK_OK(rap_release(x->tc));
  atomic_store(&warn_logs, 0);
  first_log[0] = '\0';
  RAP_CHECK_OK(rap_log_set_handler(count_log, NULL));
  run_ops(NULL, op_free, ka);   /* into a's cache, which holds no bin for the host now */
  ops *o[4];
  for (int k = 0; k < 4; k++) {   /* a misses: takes the frees back, then refills */
    o[k] = ops_new(x->tc, NULL, k % 2 ? 3072 : 1024, 16, 10 + 16 * k);
    o[k]->rm = x->rm;
    worker_call(a, op_alloc, o[k]);
  }
  int warnings = atomic_load(&warn_logs);
  RAP_CHECK_OK(rap_log_set_handler(NULL, NULL));
  for (int k = 0; k < 4; k++)
    if (o[k]->st != RAP_OK)
      rap_test_fail(__FILE__, __LINE__, "refill %d: %s (%s); %d warnings or errors logged, the "
                    "first: %s", k, rap_status_name(o[k]->st), o[k]->why, warnings, first_log);
  for (int k = 0; k < 4; k++)
    for (unsigned i = 0; i < 16; i++)
      for (int m = 0; m <= k; m++)
        for (unsigned j = 0; j < (m == k ? i : 16); j++)
          if (overlaps(o[k]->p[i], o[k]->n, o[m]->p[j], o[m]->n))
            rap_test_fail(__FILE__, __LINE__, "live blocks %p and %p overlap", o[k]->p[i],
                          o[m]->p[j]);
  if (warnings != 0)
    rap_test_fail(__FILE__, __LINE__, "%d warnings or errors logged, the first: %s", warnings,
                  first_log);
  rap_stats s = tu_stats(x->tc), in = tu_stats(x->inner);
  RAP_CHECK_EQ(s.allocation_count, 64);
  RAP_CHECK_EQ(in.allocation_count, s.allocation_count + s.cached_count);
  TU_CHECK(x->tc);
  for (int k = 0; k < 4; k++) run_ops(a, op_free, o[k]);
  for (int k = 0; k < 4; k++) run_ops(a, op_cycle, o[k]);
  worker_stop(a);
  for (int k = 0; k < 4; k++) free(o[k]);
  free(ka);
  fx_teardown(x);
}

/* rap_release gives every thread's cache back (a live thread's too), then releases the parent. */
RAP_TEST(ThreadCache, ReleaseFlushesEveryCache) {
  fx *x = fx_setup(SPEC_64K);
  worker *a = worker_start();
  ops *aq = ops_new(x->tc, x->q[1], 3072, 8, 1), *ah = ops_new(x->tc, NULL, 768, 8, 2);
  ops *mine = ops_new(x->tc, NULL, 1024, 8, 3);
  run_ops(a, op_cycle, aq);
  run_ops(a, op_cycle, ah);
  run_ops(NULL, op_cycle, mine);
  void *live = fx_alloc(x, 4096, NULL);
  RAP_CHECK(tu_stats(x->tc).cached_count >= 24);
  RAP_CHECK_OK(rap_release(x->tc));
  rap_stats s = tu_stats(x->tc);
  RAP_CHECK_EQ(s.cached_bytes, 0);
  RAP_CHECK_EQ(s.cached_count, 0);
  RAP_CHECK_EQ(s.current_bytes, 4096);
  TU_EXPECT(x->inner, allocation_count, 1);
  TU_EXPECT(x->inner, chunk_count, 1);   /* only the chunk of the live block stays */
  RAP_CHECK_OK(rap_deallocate(x->tc, live, NULL));
  RAP_CHECK_OK(rap_release(x->tc));
  TU_EXPECT(x->inner, chunk_count, 0);
  run_ops(a, op_cycle, aq);   /* the thread goes on as before */
  worker_stop(a);
  free(aq), free(ah), free(mine);
  fx_teardown(x);
}

/* ---- out of memory ------------------------------------------------------------------------------ */

typedef struct oom_param {
  const char *label;
  const char *spec;
  size_t a_size;   /* thread A fills the limit with blocks of this size and frees them */
  unsigned a_count;
} oom_param;

/* Four chunks of 256 KiB fit the limit, a fifth does not, nor 512 KiB more. */
#define OOM_PARENT                                                                                 \
  "QuickPool(SizeLimiter(HOST, limit=1100KiB), initial_size=256KiB, next_size=256KiB, alignment=16)"
static const oom_param oom_params[] = {
    {"CachedRequest", "ThreadCache(" OOM_PARENT ", cache_bytes=8MiB, cache_blocks=16)", 256 * KiB, 4},
    {"RequestAboveMaxSize",
     "ThreadCache(" OOM_PARENT ", cache_bytes=8MiB, cache_blocks=16, max_size=64KiB)", 64 * KiB, 16},
};

/* Thread A fills its cache with all the limit allows; B (this thread) then asks for 512 KiB, which
 * fits only once A's cache went back: B succeeds. A request past the limit is RAP_ERR_NOMEM. */
RAP_TEST_P(ThreadCache, OutOfMemoryFlushesOtherThreadsCaches, oom_param, oom_params) {
  rap_manager *rm = tu_manager();
  rap_allocator *tc = NULL, *limiter = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "tc", param->spec, &tc));
  RAP_CHECK_OK(rap_allocator_get(rm, "tc/QuickPool/SizeLimiter", &limiter));
  worker *a = worker_start();
  ops *fill = ops_new(tc, NULL, param->a_size, param->a_count, 1);
  run_ops(a, op_cycle, fill);
  RAP_CHECK_EQ(tu_stats(limiter).current_bytes, MiB);   /* the limit is as good as full */
  RAP_CHECK_EQ(tu_stats(tc).cached_bytes, MiB);         /* all in A's cache */
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(tc, &p, 512 * KiB, NULL));
  memset(p, 0x3c, 512 * KiB);
  RAP_CHECK(all_bytes(p, 512 * KiB, 0x3c));
  RAP_CHECK_EQ(tu_stats(tc).current_bytes, 512 * KiB);
  TU_CHECK(tc);
  void *q = NULL;
  RAP_CHECK_STATUS(rap_allocate(tc, &q, 2 * MiB, NULL), RAP_ERR_NOMEM);
  RAP_CHECK(q == NULL);
  RAP_CHECK(all_bytes(p, 512 * KiB, 0x3c));
  RAP_CHECK_OK(rap_deallocate(tc, p, NULL));
  run_ops(a, op_cycle, fill);   /* A goes on */
  worker_stop(a);
  TU_EXPECT(tc, allocation_count, 0);
  TU_CHECK(tc);
  RAP_CHECK_OK(rap_release(tc));
  TU_EXPECT(tc, cached_bytes, 0);
  free(fill);
  destroy_clean(rm);
}

/* ---- teardown: resources, the allocator, the manager ------------------------------------------- */

static int destroy_call(void *arg) { return rap_resource_destroy(arg); }

/* The caches of two threads hold blocks freed on q3 (also blocks freed there for the other thread),
 * and q3 is busy: destroying q3 waits for it and answers RAP_OK; the blocks went back. */
RAP_TEST(ThreadCache, ResourceDestroyWithCachedBlocks) {
  fx *x = fx_setup(SPEC_64K);
  worker *a = worker_start();
  ops *aq = ops_new(x->tc, x->q[3], 3072, 8, 1), *kept = ops_new(x->tc, x->q[3], 768, 2, 2);
  ops *mine = ops_new(x->tc, x->q[3], 1024, 8, 3), *mh = ops_new(x->tc, NULL, 768, 4, 4);
  run_ops(a, op_cycle, aq);
  run_ops(a, op_alloc, kept);
  run_ops(NULL, op_free, kept);   /* into a's cache */
  run_ops(NULL, op_cycle, mine);
  run_ops(NULL, op_cycle, mh);
  RAP_CHECK(tu_rstats(x->tc, x->q[3]).cached_count >= 18);
  rap_stats host_before = tu_rstats(x->tc, x->host);
  fx_busy(x, 3);
  wd_call *c = wd_start(destroy_call, x->q[3]);
  RAP_CHECK(c != NULL);
  RAP_CHECK(wd_wait_asleep(c));
  gate_open(x->g[3]);
  int st = -1;
  WD_FINISH(c, x->g, 4, &st, "rap_resource_destroy(q3)");
  RAP_CHECK_OK(st);
  x->q[3] = NULL;
  RAP_CHECK_EQ(gate_passed(x->g[3]), 1);   /* q3's work had finished */
  rap_stats s = tu_stats(x->tc), in = tu_stats(x->inner);
  RAP_CHECK_EQ(s.cached_bytes, host_before.cached_bytes);   /* only the host's blocks are left */
  RAP_CHECK_EQ(s.cached_count, host_before.cached_count);
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_EQ(in.allocation_count, s.cached_count);
  TU_CHECK(x->tc);
  aq->r = x->q[1];   /* both threads go on, on other queues */
  run_ops(a, op_cycle, aq);
  mine->r = x->q[2];
  run_ops(NULL, op_cycle, mine);
  worker_stop(a);
  free(aq), free(kept), free(mine), free(mh);
  fx_teardown(x);
}

/* q3 owns a live block, and caches hold blocks freed on q3: the destroy is refused, the block stays
 * live, q3's and usable; once freed (pending on q3 while q3 is busy) q3 can go. */
RAP_TEST(ThreadCache, ResourceDestroyRefusedWhileABlockIsLive) {
  fx *x = fx_setup(SPEC_64K);
  worker *a = worker_start();
  ops *aq = ops_new(x->tc, x->q[3], 3072, 8, 1), *mine = ops_new(x->tc, x->q[3], 1024, 8, 2);
  run_ops(a, op_cycle, aq);
  run_ops(NULL, op_cycle, mine);
  void *l = fx_alloc(x, 1024, x->q[3]);
  tu_fill(l, 1024, 7);
  rap_stats before = tu_stats(x->tc);
  RAP_CHECK_STATUS(rap_resource_destroy(x->q[3]), RAP_ERR_BUSY);
  rap_stats after = tu_stats(x->tc);
  RAP_CHECK_EQ(after.current_bytes, before.current_bytes);
  RAP_CHECK_EQ(after.allocation_count, before.allocation_count);
  RAP_CHECK_EQ(after.used_bytes, before.used_bytes);
  rap_resource *r = NULL;
  RAP_CHECK_OK(rap_pointer_resource(x->tc, l, &r));
  RAP_CHECK(r == x->q[3]);
  RAP_CHECK(tu_intact(l, 1024, 7));
  tu_fill(l, 1024, 8);
  TU_CHECK(x->tc);
  fx_busy(x, 3);   /* freed now, l is pending on q3 */
  RAP_CHECK_OK(rap_deallocate(x->tc, l, NULL));
  span sp = {l, 1024};
  void *p[32];
  alloc_avoiding(x, x->q[1], 1024, 32, &sp, 1, p);
  free_all(x, p, 32);
  run_ops(a, op_cycle, aq);   /* q3 still works for both threads */
  gate_open(x->g[3]);
  RAP_CHECK_OK(rap_resource_destroy(x->q[3]));
  x->q[3] = NULL;
  worker_stop(a);
  free(aq), free(mine);
  fx_teardown(x);
}

/* A refused destroy changes nothing, the caches' figures included (docs: a call that refuses
 * changes nothing). */
RAP_TEST(ThreadCache, RefusedResourceDestroyChangesNoStats) {
  fx *x = fx_setup(SPEC_64K);
  ops *mine = ops_new(x->tc, x->q[3], 1024, 8, 2);
  run_ops(NULL, op_cycle, mine);
  void *l = fx_alloc(x, 1024, x->q[3]);
  rap_stats before = tu_stats(x->tc), rbefore = tu_rstats(x->tc, x->q[3]);
  RAP_CHECK_STATUS(rap_resource_destroy(x->q[3]), RAP_ERR_BUSY);
  rap_stats after = tu_stats(x->tc), rafter = tu_rstats(x->tc, x->q[3]);
  STATS_SAME(before, after, "a refused rap_resource_destroy");
  STATS_SAME(rbefore, rafter, "a refused rap_resource_destroy (q3's figures)");
  RAP_CHECK_OK(rap_deallocate(x->tc, l, NULL));
  free(mine);
  fx_teardown(x);
}

/* The allocator goes while a living thread's cache holds blocks (some freed on the busy q1): refused
 * while one block is live, RAP_OK once none is, at once; the parent got everything back, keeps q1's
 * pending, and goes once q1 passed; the thread ends after it. */
RAP_TEST(ThreadCache, AllocatorDestroyWhileCachesHoldBlocks) {
  fx *x = fx_setup(SPEC_64K);
  worker *a = worker_start();
  ops *aq = ops_new(x->tc, x->q[1], 3072, 8, 1), *ah = ops_new(x->tc, NULL, 768, 8, 2);
  ops *mine = ops_new(x->tc, NULL, 1024, 8, 3);
  fx_busy(x, 1);
  run_ops(a, op_cycle, aq);
  run_ops(a, op_cycle, ah);
  run_ops(NULL, op_cycle, mine);
  void *l = fx_alloc(x, 1024, NULL);
  tu_fill(l, 1024, 9);
  RAP_CHECK_STATUS(rap_allocator_destroy(x->tc), RAP_ERR_BUSY);
  RAP_CHECK(tu_intact(l, 1024, 9));
  TU_EXPECT(x->tc, allocation_count, 1);
  TU_CHECK(x->tc);
  RAP_CHECK_OK(rap_deallocate(x->tc, l, NULL));
  RAP_CHECK_OK(rap_allocator_destroy(x->tc));
  TU_EXPECT(x->inner, allocation_count, 0);
  RAP_CHECK(tu_stats(x->inner).pending_count >= 1);   /* q1's, until q1 passes */
  TU_CHECK(x->inner);
  gate_open(x->g[1]);
  RAP_CHECK_OK(rap_allocator_destroy(x->inner));
  worker_stop(a);   /* its thread ends after the allocator went */
  for (int i = 1; i <= 3; i++) gate_open(x->g[i]);
  destroy_clean(x->rm);
  for (int i = 1; i <= 3; i++) {
    gate_destroy(x->g[i]);
    free(x->g[i]);
  }
  free(x);
  free(aq), free(ah), free(mine);
}

/* The manager goes while a living thread's cache holds blocks and nothing is live: RAP_OK and no
 * leak logged. With one block live, the leak names one block of 'tc' (the cached ones are none). */
RAP_TEST(ThreadCache, ManagerDestroyCountsOnlyLiveBlocks) {
  for (int leak = 0; leak < 2; leak++) {
    rap_manager *rm = tu_manager();
    rap_allocator *tc = NULL;
    rap_resource *q = NULL;
    RAP_CHECK_OK(rap_allocator_make_spec(rm, "tc", SPEC_64K, &tc));
    RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
    worker *a = worker_start();
    ops *aq = ops_new(tc, q, 3072, 8, 1), *ah = ops_new(tc, NULL, 768, 8, 2);
    ops *mine = ops_new(tc, NULL, 1024, 8, 3);
    run_ops(a, op_cycle, aq);
    run_ops(a, op_cycle, ah);
    run_ops(NULL, op_cycle, mine);
    RAP_CHECK(tu_stats(tc).cached_count >= 24);
    if (leak) (void)tu_alloc(tc, 1024);   /* never freed */
    int warnings = -1;
    int st = destroy_counted(rm, &warnings);
    if (!leak) {
      RAP_CHECK_OK(st);
      RAP_CHECK_EQ(warnings, 0);
    } else {
      RAP_CHECK_STATUS(st, RAP_ERR_BUSY);
      RAP_CHECK_STR(leak_log, "leaked 1 block,");
    }
    worker_stop(a);   /* its thread ends after the manager went */
    free(aq), free(ah), free(mine);
  }
}

/* ---- blocks on their way back: a thread hands cached blocks to the parent ---------------------- */

/* A thread caches blocks freed on a queue, then ends: its exit hands them to the parent. The seam
 * holds the exiting thread with its batch taken out of the cache and not yet given to the parent;
 * in that window the blocks are nobody's live blocks, so statistics count them as cached, the
 * queue (which owns no live block) can be destroyed, and so can the allocator. */
extern void (*rapi_tc_transit_hook)(void);
typedef struct transit {
  rap_allocator *tc;
  rap_resource *r;
  gate cached;     /* opened by the thread: its blocks are in its cache */
  gate in_window;  /* opened by the hook: the batch is on its way */
  gate resume;     /* the hook waits for it */
  pthread_t th;
} transit;
static transit the_transit;

static void *transit_thread(void *arg) {
  transit *t = arg;
  void *p[8];
  for (int i = 0; i < 8; i++)
    if (rap_allocate(t->tc, &p[i], 768, t->r) != RAP_OK) p[i] = NULL;
  for (int i = 0; i < 8; i++)
    if (p[i] != NULL) (void)rap_deallocate(t->tc, p[i], t->r);
  gate_open(&t->cached);
  return NULL;   /* its exit flushes the cache, through the seam */
}

static void transit_window(void) {
  rapi_tc_transit_hook = NULL;
  gate_open(&the_transit.in_window);
  gate_job(&the_transit.resume);
}

static void transit_resume(void) { gate_open(&the_transit.resume); }

static transit *transit_start(rap_allocator *tc, rap_resource *r) {
  transit *t = &the_transit;
  *t = (transit){.tc = tc, .r = r};
  gate_init(&t->cached);
  gate_init(&t->in_window);
  gate_init(&t->resume);
  rapi_tc_transit_hook = transit_window;
  RAP_CHECK(pthread_create(&t->th, NULL, transit_thread, t) == 0);
  gate_job(&t->cached);
  gate_job(&t->in_window);
  return t;
}

static void transit_end(transit *t) {
  gate_open(&t->resume);
  pthread_join(t->th, NULL);
  rapi_tc_transit_hook = NULL;
  gate_destroy(&t->cached);
  gate_destroy(&t->in_window);
  gate_destroy(&t->resume);
}

RAP_TEST(ThreadCache, BlocksOnTheirWayBackAreNotLive) {
  fx *x = fx_setup(SPEC_64K);
  transit *t = transit_start(x->tc, x->q[1]);
  /* Read in the window, checked once the thread has gone on (a failed check leaves nothing held). */
  rap_stats s = tu_stats(x->tc), rq = tu_rstats(x->tc, x->q[1]), in = tu_stats(x->inner);
  /* q1 owns no live block: its destroy waits for the batch to land, then goes. */
  rapi_tc_transit_hook = transit_resume;
  wd_call *c = wd_start(destroy_call, x->q[1]);
  int st = -1;
  gate *gates[] = {&t->resume};
  bool finished = c != NULL && wd_finish(c, gates, 1, &st);
  transit_end(t);
  RAP_CHECK(finished);
  RAP_CHECK_OK(st);
  RAP_CHECK_EQ(in.allocation_count, 8);       /* the parent has not had them back yet */
  RAP_CHECK_EQ(s.allocation_count, 0);        /* but none is live */
  RAP_CHECK_EQ(rq.allocation_count, 0);
  RAP_CHECK_EQ(s.cached_count, 8);
  RAP_CHECK_EQ(s.cached_bytes, 8 * 768);
  RAP_CHECK_EQ(s.current_bytes, 0);
  x->q[1] = NULL;
  TU_EXPECT(x->inner, allocation_count, 0);
  TU_CHECK(x->tc);
  fx_teardown(x);
}

static int allocator_destroy_call(void *arg) { return rap_allocator_destroy(arg); }

RAP_TEST(ThreadCache, AllocatorDestroyWhileAThreadEnds) {
  fx *x = fx_setup(SPEC_64K);
  transit *t = transit_start(x->tc, NULL);
  rap_stats s = tu_stats(x->tc);
  /* The destroy finds nothing live; it then waits for the ending thread to let its cache go. */
  wd_call *c = wd_start(allocator_destroy_call, x->tc);
  bool asleep = c != NULL && wd_wait_asleep(c);
  int st = -1;
  gate *gates[] = {&t->resume};
  gate_open(&t->resume);
  bool finished = c != NULL && wd_finish(c, gates, 1, &st);
  transit_end(t);
  RAP_CHECK(asleep && finished);
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_EQ(s.cached_count, 8);
  RAP_CHECK_OK(st);
  TU_EXPECT(x->inner, allocation_count, 0);
  TU_CHECK(x->inner);
  for (int i = 1; i <= 3; i++) gate_open(x->g[i]);
  destroy_clean(x->rm);
  for (int i = 1; i <= 3; i++) {
    gate_destroy(x->g[i]);
    free(x->g[i]);
  }
  free(x);
}
