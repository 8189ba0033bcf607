/* stress.c — many threads over ThreadSafe and ThreadCache stacks and shared queues, with fixed seeds;
 * not a benchmark.
 *
 *   rap_stress [--threads N] [--ops N] [--seed S]         host_async queues (ctest: stress.host)
 *   rap_stress_cuda [--threads N] [--ops N] [--seed S]    CUDA streams and kernels (label cuda)
 *
 * THREADS threads (16) share four resources (host_async queues, or CUDA streams) and six stacks:
 * four ThreadSafe ones (ResourceAwarePool over a SizeLimiter, ResourceAwarePool with
 * cross_resource=wait, and on the host DynamicPoolList over QuickPool and QuickPool over Fault) and
 * two ThreadCache ones with small bounds, so that caches trim, flush and take other threads' frees
 * back all the time (on the host ThreadCache over a ResourceAwarePool over a SizeLimiter, and over a
 * QuickPool; on CUDA over a ResourceAwarePool, and over one with cross_resource=wait). Each
 * thread allocates random sizes on the host or on a queue, on a random stack; the block is written
 * with the thread's byte and a tag: by the thread itself for the host, by a job (a kernel) queued
 * on the owning queue otherwise. Before it is freed the block is checked the same way: at once on
 * the host, by a job queued on the owner otherwise, so the check runs after the free and only the
 * pool's pending rule keeps the memory from being handed out before it. Some blocks are also read
 * on a second queue and recorded there (rap_record_resource), some are freed by another thread
 * (a mailbox), some on the wrong resource first (RAP_ERR_WRONG_RESOURCE, nothing changes); frees
 * go with and without a resource; threads release their stack now and then, and queue slow work so
 * that queues fall behind. Threads that end give their caches back (the blocks they posted are
 * freed by the main thread, through an adopted cache). Any failed check, any unexpected status, or
 * a stack whose books do not close at the end (nothing live, pending or cached after its release)
 * fails the run. Prints the operation count and the time.
 */
#define _POSIX_C_SOURCE 200809L

#include "stress.h"

#include <rap/rap.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define STRESS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define STRESS_SANITIZED 1
#endif
#endif
#ifndef STRESS_SANITIZED
#define STRESS_SANITIZED 0
#endif

enum { MAX_THREADS = 64, QUEUES = 4, STACKS = 6, MAX_LIVE = 48, MAILBOX = 64 };
#define MAX_BYTES ((size_t)256 * 1024)

/* Under ASan and TSan every byte costs: the CI run stays well under a minute. */
#define DEFAULT_OPS (STRESS_SANITIZED ? 3000 : 20000)

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rap stress: FAILED: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (last error on this thread: %s)\n", rap_last_error());
  abort();
}

static void expect(int got, int want, const char *call) {
  if (got != want) die("%s returned %s, expected %s", call, rap_status_name(got), rap_status_name(want));
}

/* ---- the pattern ------------------------------------------------------------------------------- */

static void write_block(unsigned char *p, size_t n, uint32_t tag, unsigned char byte) {
  memset(p, byte, n);
  unsigned char hdr[8];
  memcpy(hdr, &tag, 4);
  memcpy(hdr + 4, &tag, 4);
  memcpy(p, hdr, n < 8 ? n : 8);
}

static bool block_ok(const unsigned char *p, size_t n, uint32_t tag, unsigned char byte) {
  unsigned char hdr[8];
  memcpy(hdr, &tag, 4);
  memcpy(hdr + 4, &tag, 4);
  size_t h = n < 8 ? n : 8;
  if (memcmp(p, hdr, h) != 0) return false;
  uint64_t word = UINT64_C(0x0101010101010101) * byte;
  size_t i = h;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    if (w != word) return false;
  }
  for (; i < n; i++)
    if (p[i] != byte) return false;
  return true;
}

/* ---- the host backend: jobs on host_async queues ----------------------------------------------- */

static atomic_ullong host_errors;

typedef struct latch {
  pthread_mutex_t m;
  pthread_cond_t c;
  bool done;
  atomic_int refs;
} latch;

typedef struct hjob {
  unsigned char *p;
  size_t n;
  uint32_t tag;
  unsigned char byte;
  latch *after;
} hjob;

static void latch_put(latch *l) {
  if (atomic_fetch_sub(&l->refs, 1) != 1) return;
  pthread_cond_destroy(&l->c);
  pthread_mutex_destroy(&l->m);
  free(l);
}

static void fill_job(void *arg) {
  hjob *j = arg;
  write_block(j->p, j->n, j->tag, j->byte);
  free(j);
}

static void check_job(void *arg) {
  hjob *j = arg;
  if (j->after != NULL) {   /* wait until the writer's queue has got this far */
    pthread_mutex_lock(&j->after->m);
    while (!j->after->done) pthread_cond_wait(&j->after->c, &j->after->m);
    pthread_mutex_unlock(&j->after->m);
    latch_put(j->after);
  }
  if (!block_ok(j->p, j->n, j->tag, j->byte)) {
    atomic_fetch_add(&host_errors, 1);
    fprintf(stderr, "rap stress: block %p (%zu bytes, tag %#x) was overwritten\n", (void *)j->p, j->n, j->tag);
  }
  free(j);
}

static void signal_job(void *arg) {
  latch *l = arg;
  pthread_mutex_lock(&l->m);
  l->done = true;
  pthread_cond_broadcast(&l->c);
  pthread_mutex_unlock(&l->m);
  latch_put(l);
}

static void lag_job(void *arg) {
  (void)arg;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 50000L);
}

static hjob *new_job(const void *p, size_t n, uint32_t tag, unsigned char byte) {
  hjob *j = malloc(sizeof *j);
  if (j == NULL) die("out of host memory");
  *j = (hjob){(unsigned char *)p, n, tag, byte, NULL};
  return j;
}

static int host_init(rap_manager *rm, rap_resource **res, int n, const char **why) {
  (void)why;
  for (int i = 0; i < n; i++) expect(rap_resource_create_host_async(rm, &res[i]), RAP_OK, "rap_resource_create_host_async");
  return 0;
}

static int host_fill(rap_resource *r, void *p, size_t n, uint32_t tag, unsigned char byte) {
  return rap_resource_submit(r, fill_job, new_job(p, n, tag, byte));
}

static int host_check(rap_resource *r, const void *p, size_t n, uint32_t tag, unsigned char byte) {
  return rap_resource_submit(r, check_job, new_job(p, n, tag, byte));
}

static int host_check_after(rap_resource *reader, rap_resource *writer, const void *p, size_t n,
                            uint32_t tag, unsigned char byte) {
  hjob *j = new_job(p, n, tag, byte);
  if (writer != NULL) {
    latch *l = malloc(sizeof *l);
    if (l == NULL) die("out of host memory");
    pthread_mutex_init(&l->m, NULL);
    pthread_cond_init(&l->c, NULL);
    l->done = false;
    atomic_init(&l->refs, 2);
    j->after = l;
    int st = rap_resource_submit(writer, signal_job, l);
    if (st != RAP_OK) return st;
  }
  return rap_resource_submit(reader, check_job, j);
}

static int host_lag(rap_resource *r) { return rap_resource_submit(r, lag_job, NULL); }
static unsigned long long host_errors_fn(void) { return atomic_load(&host_errors); }
static void host_fini(void) {}

__attribute__((unused)) static const stress_backend host_backend = {"host_async", host_init, host_fill, host_check,
                                            host_check_after, host_lag, host_errors_fn, host_fini};

/* ---- the run ----------------------------------------------------------------------------------- */

typedef struct stack_def {
  const char *spec;
  bool resource_aware;
  bool limited;   /* RAP_ERR_NOMEM is allowed */
} stack_def;

__attribute__((unused)) static const stack_def host_stacks[STACKS] = {
    {"ThreadSafe(ResourceAwarePool(SizeLimiter(HOST, limit=512MiB), initial_size=4MiB, next_size=1MiB))", true, true},
    {"ThreadSafe(ResourceAwarePool(HOST, initial_size=1MiB, next_size=512KiB, cross_resource=wait, "
     "heuristic=blocks_releasable:2))", true, false},
    {"ThreadSafe(DynamicPoolList(QuickPool(HOST, initial_size=8MiB), initial_size=1MiB, next_size=256KiB))", false, false},
    {"ThreadSafe(QuickPool(Fault(HOST), initial_size=2MiB, alignment=512))", false, false},
    {"ThreadCache(ResourceAwarePool(SizeLimiter(HOST, limit=512MiB), initial_size=4MiB, next_size=1MiB), "
     "cache_bytes=256KiB, cache_blocks=4, max_size=64KiB)", true, true},
    {"ThreadCache(QuickPool(HOST, initial_size=2MiB), cache_bytes=64KiB, cache_blocks=2, max_size=4KiB)", false,
     false},
};

__attribute__((unused)) static const stack_def cuda_stacks[STACKS] = {
    {"ThreadSafe(ResourceAwarePool(SizeLimiter(DEVICE, limit=1GiB), initial_size=64MiB, next_size=16MiB))", true, true},
    {"ThreadSafe(ResourceAwarePool(DEVICE, initial_size=16MiB, next_size=8MiB, cross_resource=wait, "
     "heuristic=blocks_releasable:2))", true, false},
    {"ThreadSafe(ResourceAwarePool(UM, initial_size=16MiB, next_size=8MiB))", true, false},
    {"ThreadSafe(ResourceAwarePool(PINNED, initial_size=16MiB, next_size=8MiB, cross_resource=wait))", true, false},
    {"ThreadCache(ResourceAwarePool(DEVICE, initial_size=16MiB, next_size=8MiB), cache_bytes=1MiB, "
     "cache_blocks=4, max_size=64KiB)", true, false},
    {"ThreadCache(ResourceAwarePool(SizeLimiter(DEVICE, limit=1GiB), initial_size=16MiB, next_size=8MiB, "
     "cross_resource=wait), cache_bytes=256KiB, cache_blocks=2, max_size=16KiB)", true, true},
};

typedef struct blk {
  void *p;
  size_t n;
  uint32_t tag;
  unsigned char byte;
  int stack, rid;   /* rid -1: the host */
} blk;

static const stress_backend *B;
static const stack_def *defs;
static bool cuda;
static rap_allocator *stacks[STACKS];
static rap_resource *res[QUEUES], *host_res;
static int threads = 16;
static long ops = DEFAULT_OPS;
static uint64_t seed = 20241122;
static atomic_ullong ops_done, nomem_seen, wrong_seen, records, mailed, cached_peak;

static pthread_mutex_t mail_lock = PTHREAD_MUTEX_INITIALIZER;
static blk mailbox[MAILBOX];
static int mail_count;

static uint64_t rnd(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * UINT64_C(2685821657736338717);
}

static size_t random_size(uint64_t r) {
  unsigned k = (unsigned)(r % 100);
  if (k < 5) return (size_t)(r >> 8) % 64;                 /* tiny, zero included */
  if (k < 70) return 1 + (size_t)(r >> 8) % 4096;
  if (k < 95) return 4096 + (size_t)(r >> 8) % (60 * 1024);
  return 64 * 1024 + (size_t)(r >> 8) % (MAX_BYTES - 64 * 1024);
}

static rap_resource *rid_res(int rid) { return rid < 0 ? host_res : res[rid]; }

static void check_now_or_queue(const blk *b) {
  if (b->rid < 0) {
    if (!block_ok(b->p, b->n, b->tag, b->byte))
      die("host block %p (%zu bytes, tag %#x) was overwritten", b->p, b->n, b->tag);
  } else {
    expect(B->check(res[b->rid], b->p, b->n, b->tag, b->byte), RAP_OK, "check");
  }
}

static void free_block(const blk *b, uint64_t r) {
  rap_allocator *a = stacks[b->stack];
  check_now_or_queue(b);
  if (defs[b->stack].resource_aware && r % 29 == 0) {   /* the wrong resource: refused, no change */
    rap_resource *wrong = b->rid < 0 ? res[0] : b->rid == 0 ? host_res : res[(b->rid + 1) % QUEUES];
    expect(rap_deallocate(a, b->p, wrong), RAP_ERR_WRONG_RESOURCE, "rap_deallocate(wrong resource)");
    atomic_fetch_add(&wrong_seen, 1);
  }
  expect(rap_deallocate(a, b->p, r & 2 ? NULL : rid_res(b->rid)), RAP_OK, "rap_deallocate");
  atomic_fetch_add(&ops_done, 1);
}

static void *worker(void *arg) {
  int tid = (int)(intptr_t)arg;
  uint64_t s = seed * 7919u + (uint64_t)tid * 104729u + 1;
  unsigned char byte = (unsigned char)(0x21 + tid * 7);
  blk live[MAX_LIVE];
  int nlive = 0;
  uint32_t serial = 0;
  for (long i = 0; i < ops; i++) {
    uint64_t r = rnd(&s);
    if (nlive < MAX_LIVE && (nlive == 0 || r % 100 < 52)) {
      blk b;
      b.stack = (int)(r >> 40) % STACKS;
      const stack_def *d = &defs[b.stack];
      b.rid = cuda ? (int)((r >> 20) % QUEUES) : d->resource_aware ? (int)((r >> 20) % (QUEUES + 1)) - 1 : -1;
      b.n = random_size(rnd(&s));
      b.tag = (uint32_t)tid << 24 | (++serial & 0xffffffu);
      b.byte = byte;
      int st = rap_allocate(stacks[b.stack], &b.p, b.n, b.rid < 0 ? (r & 4 ? NULL : host_res) : res[b.rid]);
      atomic_fetch_add(&ops_done, 1);
      if (st == RAP_ERR_NOMEM && d->limited) {
        atomic_fetch_add(&nomem_seen, 1);
        continue;
      }
      expect(st, RAP_OK, "rap_allocate");
      if (b.rid < 0) write_block(b.p, b.n, b.tag, b.byte);
      else expect(B->fill(res[b.rid], b.p, b.n, b.tag, b.byte), RAP_OK, "fill");
      if (d->resource_aware && r % 9 == 0) {   /* read on another queue, recorded there */
        int q2 = (int)((r >> 30) % QUEUES);
        if (q2 == b.rid) q2 = (q2 + 1) % QUEUES;
        expect(B->check_after(res[q2], b.rid < 0 ? NULL : res[b.rid], b.p, b.n, b.tag, b.byte), RAP_OK,
               "check_after");
        expect(rap_record_resource(stacks[b.stack], b.p, res[q2]), RAP_OK, "rap_record_resource");
        atomic_fetch_add(&records, 1);
      }
      live[nlive++] = b;
    } else {
      int k = (int)((r >> 16) % (uint64_t)nlive);
      blk b = live[k];
      live[k] = live[--nlive];
      bool posted = false;
      if (r % 19 == 0) {   /* another thread frees it */
        pthread_mutex_lock(&mail_lock);
        if (mail_count < MAILBOX) {
          mailbox[mail_count++] = b;
          posted = true;
        }
        pthread_mutex_unlock(&mail_lock);
      }
      if (posted) atomic_fetch_add(&mailed, 1);
      else free_block(&b, r);
    }
    if (r % 23 == 0) {   /* free a block some other thread posted */
      blk b;
      bool got = false;
      pthread_mutex_lock(&mail_lock);
      if (mail_count > 0) {
        b = mailbox[--mail_count];
        got = true;
      }
      pthread_mutex_unlock(&mail_lock);
      if (got) free_block(&b, r >> 8);
    }
    if (r % 97 == 0) expect(B->lag(res[(r >> 12) % QUEUES]), RAP_OK, "lag");
    if (i % 499 == 498) {
      rap_allocator *a = stacks[(r >> 24) % STACKS];
      rap_stats st;   /* what the caches hold just before a release gives it all back */
      expect(rap_allocator_stats(a, &st), RAP_OK, "rap_allocator_stats");
      for (unsigned long long peak = atomic_load(&cached_peak); st.cached_bytes > peak;)
        if (atomic_compare_exchange_weak(&cached_peak, &peak, st.cached_bytes)) break;
      expect(rap_release(a), RAP_OK, "rap_release");
      atomic_fetch_add(&ops_done, 1);
    }
  }
  for (int k = 0; k < nlive; k++) free_block(&live[k], (uint64_t)k);
  return NULL;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
#ifdef RAP_STRESS_CUDA
  cuda = true;
#endif
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--ops") == 0 && i + 1 < argc) ops = atol(argv[++i]);
    else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: %s [--threads N] [--ops N-per-thread] [--seed S]\n", argv[0]);
      return 2;
    }
  }
  if (threads < 1 || threads > MAX_THREADS) threads = 16;
#ifdef RAP_STRESS_CUDA
  B = &stress_cuda_backend;
  defs = cuda_stacks;
#else
  B = &host_backend;
  defs = host_stacks;
#endif
  rap_manager *rm;
  expect(rap_manager_create(&rm), RAP_OK, "rap_manager_create");
  expect(rap_resource_host(rm, &host_res), RAP_OK, "rap_resource_host");
  const char *why = NULL;
  if (B->init(rm, res, QUEUES, &why) != 0) {
    printf("rap stress (%s): skipped: %s\n", B->name, why ? why : "no device");
    rap_manager_destroy(rm);
    return 77;
  }
  for (int k = 0; k < STACKS; k++) {
    char name[16];
    snprintf(name, sizeof name, "stack%d", k);
    expect(rap_allocator_make_spec(rm, name, defs[k].spec, &stacks[k]), RAP_OK, "rap_allocator_make_spec");
  }
  double t0 = now();
  pthread_t t[MAX_THREADS];
  for (int i = 0; i < threads; i++)
    if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) != 0) die("pthread_create");
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  for (int k = 0; k < mail_count; k++) free_block(&mailbox[k], (uint64_t)k);
  for (int q = 0; q < QUEUES; q++) expect(rap_resource_synchronize(res[q]), RAP_OK, "rap_resource_synchronize");
  double secs = now() - t0;
  unsigned long long errors = B->errors();
  for (int k = 0; k < STACKS; k++) {
    expect(rap_release(stacks[k]), RAP_OK, "rap_release");
    expect(rap_allocator_check(stacks[k]), RAP_OK, "rap_allocator_check");
    rap_stats st;
    expect(rap_allocator_stats(stacks[k], &st), RAP_OK, "rap_allocator_stats");
    if (st.current_bytes != 0 || st.allocation_count != 0 || st.pending_count != 0 || st.cached_bytes != 0 ||
        st.cached_count != 0)
      die("%s: %zu blocks of %zu bytes live, %zu pending, %zu cached (%zu bytes) at the end", defs[k].spec,
          st.allocation_count, st.current_bytes, st.pending_count, st.cached_count, st.cached_bytes);
  }
  unsigned long long n = atomic_load(&ops_done);
  printf("rap stress (%s): %d threads, %llu operations in %.2f s (%.0f ops/s); %llu records, %llu "
         "cross-thread frees, %llu wrong-resource frees refused, %llu out of memory, at most %llu bytes cached "
         "before a release; %llu failed checks\n",
         B->name, threads, n, secs, (double)n / secs, atomic_load(&records), atomic_load(&mailed),
         atomic_load(&wrong_seen), atomic_load(&nomem_seen), atomic_load(&cached_peak), errors);
  expect(rap_manager_destroy(rm), RAP_OK, "rap_manager_destroy");
  B->fini();
  return errors == 0 ? 0 : 1;
}
