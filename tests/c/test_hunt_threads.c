/* test_hunt_threads.c — many threads against one allocator through the public API, as a hostile
 * user would: ThreadCache and ThreadSafe over a ResourceAwarePool over HostVmm(granularity=2MiB)
 * (the host twin of the default device pool, whose release unmaps inside free blocks) and over HOST.
 *
 * Workers share one table of blocks: each allocates on its own host_async queue, another worker's,
 * a spare queue or the host, frees what any worker allocated (on its resource, and on a wrong one,
 * which must be refused), records blocks on other queues, runs out of host memory for records
 * (the seam's per-thread countdown), and ends now and then so that a new thread adopts its cache.
 * A chaos thread meanwhile releases, reads statistics, checks, resets peaks, sleeps and wakes,
 * destroys and makes the spare queues, and tries to destroy the allocator under them all. Every
 * block is stamped by work on its own queue (or by the host) and checked there before its free; a
 * block recorded on a second queue is written again there, so that a block handed out before that
 * work passed is caught; every new block is checked against every live one for overlap. After the
 * threads end: every stamp, rap_allocator_check, used + free + pending == held, the cached figures.
 * HT_ITERS and HT_SEED lengthen or vary a hunt.
 */
#define _GNU_SOURCE   /* pthread_rwlock_t under -std=c11 */
#include "gate.h"
#include "test_util.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void rapi_host_fail_at(long nth, bool keep_failing);   /* core/host_mem.c: the test seam */

enum { HT_WORKERS = 4, HT_SLOTS = 48, HT_SPARES = 2, HT_LIVES = 3, HT_PAT = 32 };

typedef struct ht_param {
  const char *label;
  const char *spec;
  bool cache;    /* a ThreadCache on top */
  bool sleeps;   /* the pool can sleep */
  size_t big;    /* the largest request */
  unsigned iters;
} ht_param;

#define HT_VMM "HostVmm(granularity=2MiB, reserve=2GiB)"
#define HT_RAPV "ResourceAwarePool(" HT_VMM ", initial_size=2MiB, next_size=2MiB, heuristic=never"
static const ht_param ht_params[] = {
    {"TC_RAP_HostVmm", "ThreadCache(" HT_RAPV "), cache_bytes=1MiB, cache_blocks=8)", true, true,
     3 << 20, 1500},
    {"TS_RAP_HostVmm_wait", "ThreadSafe(" HT_RAPV ", cross_resource=wait, wait_above=1MiB, "
     "wait_pending_above=1MiB))", false, true, 3 << 20, 1500},
    {"TC_RAP_HOST", "ThreadCache(ResourceAwarePool(HOST, initial_size=1MiB, next_size=1MiB), "
     "cache_bytes=256KiB, cache_blocks=4)", true, false, 2 << 20, 1500},
    {"TS_RAP_HOST", "ThreadSafe(ResourceAwarePool(HOST, initial_size=1MiB, next_size=1MiB))", false,
     false, 2 << 20, 1500},
};

typedef struct ht_slot {
  pthread_mutex_t m;
  char *ptr;
  size_t bytes;
  rap_resource *r;      /* the resource it was allocated on; NULL: the host */
  int spare;            /* r is spare queue this one; -1 otherwise */
  int rec_spare;        /* recorded on spare queue this one; -1 none */
  uint64_t stamp;       /* 0: not stamped (allocated while the pool went to sleep) */
  char *lptr;           /* ptr and bytes again, under live_m: what the overlap check reads */
  size_t lbytes;
} ht_slot;

typedef struct ht {
  const ht_param *P;
  rap_manager *rm;
  rap_allocator *top, *pool;
  rap_resource *q[HT_WORKERS];
  rap_resource *spare[HT_SPARES];
  pthread_rwlock_t spare_lock[HT_SPARES];   /* read: a worker uses it; write: the chaos remakes it */
  pthread_rwlock_t awake;                    /* read: a worker touches memory; write: sleep's flag */
  bool asleep;                               /* under awake and woke_m */
  pthread_mutex_t woke_m;                    /* a worker that met the sleep waits for the wake */
  pthread_cond_t woke;
  ht_slot slot[HT_SLOTS];
  pthread_mutex_t live_m;                    /* the ranges handed out */
  atomic_int errors, done;
  atomic_ulong stamps;
  atomic_ulong seen[8];   /* what the chaos thread did: sleeps, releases, remade spares, ... */
  char first[512];
  pthread_mutex_t first_m;
  uint64_t seed;
  unsigned iters;
} ht;

static void ht_error(ht *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ht_error(ht *h, const char *fmt, ...) {
  pthread_mutex_lock(&h->first_m);
  if (atomic_fetch_add(&h->errors, 1) == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->first, sizeof h->first, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_unlock(&h->first_m);
}

/* ---- stamps: up to HT_PAT bytes at each end of a block ---------------------------------------- */

typedef struct ht_job {
  ht *h;
  char *ptr;
  size_t bytes;
  uint64_t stamp;
  bool write;
} ht_job;

static void ht_pattern(unsigned char *pat, uint64_t stamp) {
  for (int i = 0; i < HT_PAT; i++) pat[i] = (unsigned char)(stamp >> (8 * (i % 8))) ^ (unsigned char)i;
}

static void ht_touch(ht *h, char *p, size_t bytes, uint64_t stamp, bool write) {
  unsigned char pat[HT_PAT];
  ht_pattern(pat, stamp);
  size_t n = bytes < 2 * HT_PAT ? bytes / 2 : HT_PAT;   /* the two ends never overlap */
  char *ends[2] = {p, p + bytes - n};
  for (int e = 0; e < 2; e++) {
    if (write) memcpy(ends[e], pat, n);
    else if (memcmp(ends[e], pat, n) != 0)
      ht_error(h, "block %p (%zu bytes): stamp %llx overwritten at its %s", (void *)p, bytes,
               (unsigned long long)stamp, e ? "end" : "start");
  }
}

static void ht_job_run(void *arg) {
  ht_job *j = arg;
  ht_touch(j->h, j->ptr, j->bytes, j->stamp, j->write);
  free(j);
}

/* Stamps or checks the block on r (a queue's work), or at once on the host. */
static void ht_on(ht *h, rap_resource *r, char *p, size_t bytes, uint64_t stamp, bool write) {
  if (stamp == 0 || bytes == 0) return;
  if (r == NULL) {
    ht_touch(h, p, bytes, stamp, write);
    return;
  }
  ht_job *j = malloc(sizeof *j);
  *j = (ht_job){h, p, bytes, stamp, write};
  int st = rap_resource_submit(r, ht_job_run, j);
  if (st != RAP_OK) {
    free(j);
    ht_error(h, "rap_resource_submit: %s (%s)", rap_status_name(st), rap_last_error());
  }
}

/* ---- no block handed out twice ----------------------------------------------------------------- */

static void ht_no_overlap(ht *h, int self, char *p, size_t bytes) {
  size_t n = bytes ? bytes : 1;
  pthread_mutex_lock(&h->live_m);
  for (int i = 0; i < HT_SLOTS; i++) {
    char *o = h->slot[i].lptr;
    size_t on = h->slot[i].lbytes ? h->slot[i].lbytes : 1;
    if (i != self && o != NULL && p < o + on && o < p + n)
      ht_error(h, "block %p (%zu bytes) handed out over live block %p (%zu bytes)", (void *)p, bytes,
               (void *)o, h->slot[i].lbytes);
  }
  pthread_mutex_unlock(&h->live_m);
}

static void ht_set(ht *h, ht_slot *s, char *p) {
  s->ptr = p;
  pthread_mutex_lock(&h->live_m);
  s->lptr = p;
  s->lbytes = s->bytes;
  pthread_mutex_unlock(&h->live_m);
}

/* ---- a worker's steps ------------------------------------------------------------------------- */

typedef struct ht_worker {
  ht *h;
  int id;
  uint64_t rng;
} ht_worker;

static size_t ht_size(ht_worker *w) {
  uint64_t r = tu_rand(&w->rng);
  switch (r % 8) {
    case 0: return 0;
    case 1: case 2: case 3: return 1 + (size_t)(r >> 8) % 2048;
    case 4: case 5: return 1 + (size_t)(r >> 8) % (256 << 10);
    case 6: return 1 + (size_t)(r >> 8) % (2 << 20);
    default: return 1 + (size_t)(r >> 8) % w->h->P->big;
  }
}

static void ht_allocate(ht_worker *w, int i, bool asleep) {
  ht *h = w->h;
  ht_slot *s = &h->slot[i];
  uint64_t r = tu_rand(&w->rng);
  int spare = -1;
  rap_resource *on = h->q[w->id];
  switch (r % 10) {
    case 0: case 1: on = NULL; break;
    case 2: on = h->q[(w->id + 1) % HT_WORKERS]; break;
    case 3: spare = (int)((r >> 8) % HT_SPARES); break;
    default: break;
  }
  if (spare >= 0) {
    pthread_rwlock_rdlock(&h->spare_lock[spare]);
    on = h->spare[spare];
  }
  size_t bytes = ht_size(w);
  bool fault = (r >> 16) % 16 == 0 && !getenv("HT_NOFAULT");
  if (fault) rapi_host_fail_at(1 + (long)((r >> 20) % 3), false);
  void *p = NULL;
  int st = rap_allocate(h->top, &p, bytes, on);
  if (fault) rapi_host_fail_at(0, false);
  atomic_fetch_add(&h->seen[st == RAP_OK ? 4 : st == RAP_ERR_BUSY ? 5 : 6], 1);
  if (st == RAP_OK) {
    ht_no_overlap(h, i, p, bytes);
    s->bytes = bytes;
    s->r = on;
    s->spare = spare;
    s->rec_spare = -1;
    s->stamp = asleep ? 0 : atomic_fetch_add(&h->stamps, 1) + 1;
    ht_set(h, s, p);
    ht_on(h, on, p, bytes, s->stamp, true);
  } else if (!(st == RAP_ERR_NOMEM && fault) && !(st == RAP_ERR_BUSY && asleep)) {
    ht_error(h, "rap_allocate(%zu) on %s: %s (%s)", bytes, on ? "a queue" : "the host",
             rap_status_name(st), rap_last_error());
  }
  if (spare >= 0) pthread_rwlock_unlock(&h->spare_lock[spare]);
}

/* A block recorded on spare queue k: written again there (a premature reuse is overwritten). */
static void ht_record(ht_worker *w, ht_slot *s, bool asleep) {
  ht *h = w->h;
  if (s->rec_spare >= 0 || s->spare >= 0 || asleep || getenv("HT_NOREC")) return;
  int k = (int)(tu_rand(&w->rng) % HT_SPARES);
  pthread_rwlock_rdlock(&h->spare_lock[k]);
  if (s->r != NULL) rap_resource_synchronize(s->r);   /* its own queue's stamp is written */
  int st = rap_record_resource(h->top, s->ptr, h->spare[k]);
  if (st == RAP_OK) {
    s->rec_spare = k;
    ht_on(h, h->spare[k], s->ptr, s->bytes, s->stamp, true);
  } else {
    ht_error(h, "rap_record_resource: %s (%s)", rap_status_name(st), rap_last_error());
  }
  pthread_rwlock_unlock(&h->spare_lock[k]);
}

static void ht_free(ht_worker *w, int i, bool asleep) {
  ht *h = w->h;
  ht_slot *s = &h->slot[i];
  uint64_t r = tu_rand(&w->rng);
  if (r % 6 == 0 && !getenv("HT_NOWRONG")) {   /* a wrong resource first: refused, nothing changes */
    rap_resource *wrong = s->r == h->q[w->id] ? h->q[(w->id + 1) % HT_WORKERS] : h->q[w->id];
    int st = rap_deallocate(h->top, s->ptr, wrong);
    if (st != RAP_ERR_WRONG_RESOURCE && !(st == RAP_ERR_BUSY && asleep))
      ht_error(h, "free of %p on a wrong resource: %s (%s)", (void *)s->ptr, rap_status_name(st),
               rap_last_error());
  }
  if (s->spare >= 0) pthread_rwlock_rdlock(&h->spare_lock[s->spare]);
  if (s->rec_spare < 0 && !asleep) ht_on(h, s->r, s->ptr, s->bytes, s->stamp, false);
  char *p = s->ptr;
  ht_set(h, s, NULL);
  bool fault = (r >> 8) % 16 == 0 && !getenv("HT_NOFAULT");
  if (fault) rapi_host_fail_at(1 + (long)((r >> 12) % 3), false);
  int st = rap_deallocate(h->top, p, (r >> 16) % 2 ? s->r : NULL);
  if (fault) rapi_host_fail_at(0, false);
  if (st != RAP_OK) {
    ht_set(h, s, p);   /* still live */
    if (!(st == RAP_ERR_NOMEM && fault) && !(st == RAP_ERR_BUSY && asleep))
      ht_error(h, "rap_deallocate(%p): %s (%s)", (void *)p, rap_status_name(st), rap_last_error());
  }
  if (s->spare >= 0) pthread_rwlock_unlock(&h->spare_lock[s->spare]);
}

static void ht_step(ht_worker *w) {
  ht *h = w->h;
  int i = (int)(tu_rand(&w->rng) % HT_SLOTS);
  ht_slot *s = &h->slot[i];
  pthread_mutex_lock(&s->m);
  pthread_rwlock_rdlock(&h->awake);
  bool asleep = h->asleep;
  if (s->ptr == NULL) {
    ht_allocate(w, i, asleep);
  } else if (tu_rand(&w->rng) % 5 == 0) {
    ht_record(w, s, asleep);
  } else {
    ht_free(w, i, asleep);
  }
  pthread_rwlock_unlock(&h->awake);
  pthread_mutex_unlock(&s->m);
  pthread_mutex_lock(&h->woke_m);   /* one step raced the sleep: no more until the wake */
  while (asleep && h->asleep) pthread_cond_wait(&h->woke, &h->woke_m);
  pthread_mutex_unlock(&h->woke_m);
}

static void *ht_worker_main(void *arg) {
  ht_worker *w = arg;
  for (unsigned n = 0; n < w->h->iters / HT_LIVES; n++) ht_step(w);
  return NULL;
}

/* ---- the chaos thread ------------------------------------------------------------------------- */

static void ht_expect(ht *h, int st, const char *what) {
  if (st != RAP_OK) ht_error(h, "%s: %s (%s)", what, rap_status_name(st), rap_last_error());
}

static void ht_remake_spare(ht *h, int k) {
  pthread_rwlock_wrlock(&h->spare_lock[k]);
  int st = rap_resource_destroy(h->spare[k]);
  atomic_fetch_add(&h->seen[st == RAP_OK ? 2 : 3], 1);
  if (st == RAP_OK) ht_expect(h, rap_resource_create_host_async(h->rm, &h->spare[k]), "remake a spare");
  else if (st != RAP_ERR_BUSY) ht_error(h, "rap_resource_destroy: %s (%s)", rap_status_name(st), rap_last_error());
  pthread_rwlock_unlock(&h->spare_lock[k]);
}

static void ht_sleep_wake(ht *h) {
  pthread_rwlock_wrlock(&h->awake);
  pthread_mutex_lock(&h->woke_m);
  h->asleep = true;
  pthread_mutex_unlock(&h->woke_m);
  pthread_rwlock_unlock(&h->awake);
  struct timespec t0, t1, t2;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int st = rap_allocator_sleep(h->top, RAP_SLEEP_BACKUP);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (st != RAP_OK && st != RAP_ERR_BUSY) ht_error(h, "sleep: %s (%s)", rap_status_name(st), rap_last_error());
  if (st == RAP_OK) ht_expect(h, rap_allocator_wake(h->top), "wake");
  atomic_fetch_add(&h->seen[st == RAP_OK ? 0 : 1], 1);
  clock_gettime(CLOCK_MONOTONIC, &t2);
  if (getenv("HT_VERBOSE"))
    fprintf(stderr, "sleep %s %.1f ms wake %.1f ms\n", rap_status_name(st), (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6,
            (t2.tv_sec - t1.tv_sec) * 1e3 + (t2.tv_nsec - t1.tv_nsec) / 1e6);
  pthread_rwlock_wrlock(&h->awake);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (getenv("HT_VERBOSE")) fprintf(stderr, "cleared after %.1f ms\n", (t1.tv_sec - t2.tv_sec) * 1e3 + (t1.tv_nsec - t2.tv_nsec) / 1e6);
  pthread_mutex_lock(&h->woke_m);
  h->asleep = false;
  pthread_cond_broadcast(&h->woke);
  pthread_mutex_unlock(&h->woke_m);
  pthread_rwlock_unlock(&h->awake);
}

static void *ht_chaos_main(void *arg) {
  ht *h = arg;
  uint64_t rng = h->seed * 7 + 3;
  while (!atomic_load(&h->done)) {
    uint64_t r = tu_rand(&rng);
    rap_stats s;
    const char *off = getenv("HT_CHAOS_OFF");
    if (off && strchr(off, (int)('0' + r % 8))) continue;
    switch (r % 8) {
      case 0: ht_expect(h, rap_release(h->top), "rap_release"); break;
      case 1: ht_expect(h, rap_allocator_stats(h->top, &s), "stats"); break;
      case 2: ht_expect(h, rap_allocator_check(h->top), "rap_allocator_check"); break;
      case 3: ht_expect(h, rap_allocator_reset_peaks(h->top), "reset_peaks"); break;
      case 4: ht_remake_spare(h, (int)((r >> 8) % HT_SPARES)); break;
      case 5:
        if (h->P->sleeps && (r >> 8) % 16 == 0) ht_sleep_wake(h);   /* a BACKUP copies every live byte */
        else if (h->P->sleeps && (r >> 8) % 16 == 1)   /* no sleep: a backup made or given back */
          ht_expect(h, rap_allocator_sleep(h->top, (r >> 12) % 2 ? RAP_SLEEP_PREPARE : RAP_SLEEP_RELEASE),
                    "sleep(PREPARE or RELEASE)");
        break;
      case 6: {
        int st = rap_allocator_destroy(h->top);   /* the chaos thread holds a block: busy */
        if (st != RAP_ERR_BUSY) ht_error(h, "rap_allocator_destroy under the workers: %s", rap_status_name(st));
        st = rap_allocator_destroy(h->pool);   /* the wrapper over it lives */
        if (st != RAP_ERR_BUSY) ht_error(h, "rap_allocator_destroy of the pool: %s", rap_status_name(st));
        break;
      }
      default: ht_expect(h, rap_allocator_resource_stats(h->top, h->q[(r >> 8) % HT_WORKERS], &s), "resource stats");
    }
  }
  return NULL;
}

/* ---- quiescent checks ------------------------------------------------------------------------- */

static void ht_quiescent(ht *h, size_t pinned) {
  for (int i = 0; i < HT_WORKERS; i++) RAP_CHECK_OK(rap_resource_synchronize(h->q[i]));
  for (int k = 0; k < HT_SPARES; k++) RAP_CHECK_OK(rap_resource_synchronize(h->spare[k]));
  if (h->errors) rap_test_fail(__FILE__, __LINE__, "%s (%d errors)", h->first, (int)h->errors);
  size_t live = pinned;
  for (int i = 0; i < HT_SLOTS; i++) {
    ht_slot *s = &h->slot[i];
    if (s->ptr == NULL) continue;
    live++;
    if (s->stamp != 0) ht_touch(h, s->ptr, s->bytes, s->stamp, false);
  }
  if (h->errors) rap_test_fail(__FILE__, __LINE__, "%s (%d errors)", h->first, (int)h->errors);
  RAP_CHECK_OK(rap_allocator_check(h->top));
  RAP_CHECK_OK(rap_allocator_check(h->pool));
  rap_stats t = tu_stats(h->top), p = tu_stats(h->pool);
  /* A chunk over HOST (malloc's 16-byte alignment) holds 256 - 16 bytes more, to align its start. */
  size_t pad = h->P->sleeps ? 0 : p.chunk_count * (256 - TU_HOST_ALIGN);
  if (p.used_bytes + p.free_bytes + p.pending_bytes + pad != p.actual_bytes)
    rap_test_fail(__FILE__, __LINE__, "used %zu + free %zu + pending %zu != held %zu", p.used_bytes,
                  p.free_bytes, p.pending_bytes, p.actual_bytes);
  RAP_CHECK_EQ(t.allocation_count, live);
  RAP_CHECK_EQ(t.used_bytes + t.cached_bytes, p.used_bytes);
  RAP_CHECK_EQ(t.allocation_count + t.cached_count, p.allocation_count);
  if (!h->P->cache) RAP_CHECK_EQ(t.cached_bytes, 0);
}

RAP_TEST_P(HuntThreads, HostileThreadsKeepEveryInvariant, ht_param, ht_params) {
  static ht h;
  memset(&h, 0, sizeof h);
  h.P = param;
  const char *iters = getenv("HT_ITERS"), *seed = getenv("HT_SEED");
  h.iters = iters != NULL ? (unsigned)strtoul(iters, NULL, 10) : param->iters;
  h.seed = seed != NULL ? strtoull(seed, NULL, 10) : 1;
  int level = rap_log_get_level();
  rap_log_set_level(RAP_LOG_ERROR);   /* a poll that ran out of host memory warns: expected here */
  h.rm = tu_manager();
  RAP_CHECK_OK(rap_allocator_make_spec(h.rm, "ht", param->spec, &h.top));
  h.pool = rap_allocator_parent(h.top);
  for (int i = 0; i < HT_WORKERS; i++) RAP_CHECK_OK(rap_resource_create_host_async(h.rm, &h.q[i]));
  for (int k = 0; k < HT_SPARES; k++) {
    RAP_CHECK_OK(rap_resource_create_host_async(h.rm, &h.spare[k]));
  }
  pthread_rwlockattr_t wp;   /* the chaos thread must not starve behind the workers' reads */
  pthread_rwlockattr_init(&wp);
  pthread_rwlockattr_setkind_np(&wp, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&h.awake, &wp);
  for (int k = 0; k < HT_SPARES; k++) pthread_rwlock_init(&h.spare_lock[k], &wp);
  pthread_mutex_init(&h.live_m, NULL);
  pthread_mutex_init(&h.first_m, NULL);
  pthread_mutex_init(&h.woke_m, NULL);
  pthread_cond_init(&h.woke, NULL);
  for (int i = 0; i < HT_SLOTS; i++) pthread_mutex_init(&h.slot[i].m, NULL);
  void *pin = tu_alloc(h.top, 100);
  pthread_t chaos;
  RAP_CHECK(pthread_create(&chaos, NULL, ht_chaos_main, &h) == 0);
  ht_worker w[HT_WORKERS];
  for (int life = 0; life < HT_LIVES; life++) {   /* workers end and new threads adopt their caches */
    pthread_t t[HT_WORKERS];
    for (int i = 0; i < HT_WORKERS; i++) {
      w[i] = (ht_worker){&h, i, h.seed * 1000 + (uint64_t)life * 10 + (uint64_t)i + 1};
      RAP_CHECK(pthread_create(&t[i], NULL, ht_worker_main, &w[i]) == 0);
    }
    for (int i = 0; i < HT_WORKERS; i++) pthread_join(t[i], NULL);
  }
  atomic_store(&h.done, 1);
  pthread_join(chaos, NULL);
  ht_quiescent(&h, 1);
  if (getenv("HT_VERBOSE"))
    fprintf(stderr, "%lu blocks; sleeps %lu (refused %lu); spares remade %lu (busy %lu); allocs %lu busy %lu other %lu\n",
            (unsigned long)h.stamps, (unsigned long)h.seen[0], (unsigned long)h.seen[1],
            (unsigned long)h.seen[2], (unsigned long)h.seen[3], (unsigned long)h.seen[4],
            (unsigned long)h.seen[5], (unsigned long)h.seen[6]);
  for (int i = 0; i < HT_SLOTS; i++) {   /* every block back, on its resource */
    ht_slot *s = &h.slot[i];
    if (s->ptr != NULL) RAP_CHECK_OK(rap_deallocate(h.top, s->ptr, s->r));
    s->ptr = NULL;
  }
  RAP_CHECK_OK(rap_deallocate(h.top, pin, NULL));
  ht_quiescent(&h, 0);
  for (int k = 0; k < HT_SPARES; k++) RAP_CHECK_OK(rap_resource_destroy(h.spare[k]));
  for (int i = 0; i < HT_WORKERS; i++) RAP_CHECK_OK(rap_resource_destroy(h.q[i]));
  RAP_CHECK_OK(rap_release(h.top));
  RAP_CHECK_EQ(tu_stats(h.pool).actual_bytes, 0);
  RAP_CHECK_OK(rap_manager_destroy(h.rm));
  rap_log_set_level(level);
}

/* ---- targeted: a thread outlives the manager ---------------------------------------------------- */

typedef struct ht_outlive {
  rap_allocator *a[2];
  rap_resource *q;
  gate go, end;
  int status;
} ht_outlive;

/* Fills its caches of both instances (blocks freed on the host and on q), lets the test go on, and
 * ends only when the test says so: after the manager, and with it both instances, is gone. */
static void *ht_outlive_main(void *arg) {
  ht_outlive *o = arg;
  for (int k = 0; k < 2 && o->status == RAP_OK; k++)
    for (int i = 0; i < 6 && o->status == RAP_OK; i++) {
      void *p = NULL;
      rap_resource *r = i % 2 ? o->q : NULL;
      o->status = rap_allocate(o->a[k], &p, 64 + 64 * (size_t)i, r);
      if (o->status == RAP_OK) o->status = rap_deallocate(o->a[k], p, r);
    }
  gate_open(&o->go);
  gate_job(&o->end);
  return NULL;
}

RAP_TEST(HuntThreads, AThreadWithCachesOutlivesTheManager) {
  for (int round = 0; round < 2; round++) {   /* round 1: the process-wide registry, used again */
    ht_outlive o = {.status = RAP_OK};
    gate_init(&o.go);
    gate_init(&o.end);
    rap_manager *rm = tu_manager();
    RAP_CHECK_OK(rap_allocator_make_spec(rm, "a", "ThreadCache(ResourceAwarePool(" HT_VMM "))", &o.a[0]));
    RAP_CHECK_OK(rap_allocator_make_spec(rm, "b", "ThreadCache(ResourceAwarePool(HOST))", &o.a[1]));
    RAP_CHECK_OK(rap_resource_create_host_async(rm, &o.q));
    pthread_t t;
    RAP_CHECK(pthread_create(&t, NULL, ht_outlive_main, &o) == 0);
    gate_job(&o.go);
    RAP_CHECK_OK(o.status);
    rap_stats s = tu_stats(o.a[0]);
    RAP_CHECK(s.cached_count > 0);
    RAP_CHECK_OK(rap_manager_destroy(rm));   /* the thread's caches go with their instances */
    gate_open(&o.end);
    pthread_join(t, NULL);   /* its end finds no cache of either */
    gate_destroy(&o.go);
    gate_destroy(&o.end);
  }
}
