/* demo.c — the main job of `make demo`: pools made by name, blocks handed out and returned, their
 * statistics, and the cost of an allocate+free pair through a QuickPool against its parent
 * (malloc on a machine without a GPU, cudaMalloc where one is usable); the pending rule on two
 * resources; and threads through ThreadSafe (one lock) against ThreadCache (per-thread caches).
 */
#define _POSIX_C_SOURCE 200809L
#include <rap/rap.h>
#ifdef RAP_HAVE_CUDA
#include <rap/cuda.h>
#endif

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                       \
  do {                                                                                    \
    int st_ = (call);                                                                     \
    if (st_ != RAP_OK) {                                                                  \
      fprintf(stderr, "demo: %s: %s: %s\n", #call, rap_status_name(st_), rap_last_error()); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

/* RAP_TRACE set: every call writes a line, so the timings measure the trace, and the timing loops
 * run a hundredth of their rounds (a full demo traced writes gigabytes). */
static bool traced;
static int rounds_of(int n) { return traced ? (n / 100 > 100 ? n / 100 : 100) : n; }

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median over 7 rounds of the mean ns per allocate+free pair on resource r. */
static double pair_ns_on(rap_allocator *a, size_t bytes, int iters, rap_resource *res) {
  double rounds[7];
  void *p;
  CHECK(rap_allocate(a, &p, bytes, res));   /* warm: the pool takes its chunk here */
  CHECK(rap_deallocate(a, p, res));
  for (int r = 0; r < 7; r++) {
    double t0 = now_ns();
    for (int i = 0; i < iters; i++) {
      CHECK(rap_allocate(a, &p, bytes, res));
      CHECK(rap_deallocate(a, p, res));
    }
    rounds[r] = (now_ns() - t0) / iters;
  }
  qsort(rounds, 7, sizeof rounds[0], cmp_double);
  return rounds[3];
}

static double pair_ns(rap_allocator *a, size_t bytes, int iters) {
  return pair_ns_on(a, bytes, iters, NULL);
}

static double malloc_pair_ns(size_t bytes, int iters) {
  double rounds[7];
  for (int r = 0; r < 7; r++) {
    double t0 = now_ns();
    for (int i = 0; i < iters; i++) {
      void *volatile p = malloc(bytes);
      if (p == NULL) exit(1);
      free(p);
    }
    rounds[r] = (now_ns() - t0) / iters;
  }
  qsort(rounds, 7, sizeof rounds[0], cmp_double);
  return rounds[3];
}

static void print_stats(rap_allocator *a) {
  rap_stats s;
  CHECK(rap_allocator_stats(a, &s));
  printf("  %-12s live %8zu B in %3zu block(s) | held %9zu B in %zu chunk(s) | free %9zu B, "
         "largest %9zu B\n", rap_allocator_name(a), s.current_bytes, s.allocation_count,
         s.actual_bytes, s.chunk_count, s.free_bytes, s.largest_free_block);
}

/* A gate: work queued on a resource that holds it busy until the demo opens it. */
typedef struct gate {
  pthread_mutex_t m;
  pthread_cond_t c;
  bool open;
} gate;

static void gate_job(void *arg) {
  gate *g = arg;
  pthread_mutex_lock(&g->m);
  while (!g->open) pthread_cond_wait(&g->c, &g->m);
  pthread_mutex_unlock(&g->m);
}

static void gate_open(gate *g) {
  pthread_mutex_lock(&g->m);
  g->open = true;
  pthread_cond_broadcast(&g->c);
  pthread_mutex_unlock(&g->m);
}

static void pending_line(rap_allocator *pool, rap_resource *r, const char *label) {
  rap_stats s;
  CHECK(rap_allocator_resource_stats(pool, r, &s));
  printf("       %s: %zu B live, %zu B pending", label, s.current_bytes, s.pending_bytes);
}

static void timeline(rap_manager *rm, const char *parent, bool gpu) {
  rap_allocator *pool;
  rap_resource *r1, *r2;
#ifdef RAP_HAVE_CUDA
  if (gpu) {
    CHECK(rap_resource_create_cuda_stream(rm, &r1));
    CHECK(rap_resource_create_cuda_stream(rm, &r2));
  }
#endif
  if (!gpu) {
    CHECK(rap_resource_create_host_async(rm, &r1));
    CHECK(rap_resource_create_host_async(rm, &r2));
  }
  const char *kind = rap_resource_kind(r1);
  CHECK(rap_allocator_make(rm, "rap-pool", "ResourceAwarePool", parent,
                           "initial_size=2MiB next_size=1MiB heuristic=never", &pool));
  printf("\n6. A ResourceAwarePool over %s, with two %s resources r1 and r2:\n", parent, kind);
  gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
  void *a, *b, *c, *d;
  CHECK(rap_allocate(pool, &a, 1 << 20, r1));
  CHECK(rap_resource_submit(r1, gate_job, &g));
  printf("  t0  r1 allocates A = %p and queues work on r1 that is still running\n", a);
  CHECK(rap_deallocate(pool, a, r1));
  printf("  t1  r1 frees A while its work is queued: A is pending on r1\n");
  pending_line(pool, r1, "r1");
  printf("\n       (2 MiB, not 1: A took in the free 1 MiB after it in the 2 MiB first chunk, as a\n"
         "        freed block does while one resource is all the pool has seen; it is r1's until\n"
         "        r1's work has passed the free)\n");
  CHECK(rap_allocate(pool, &b, 1 << 20, r2));
  printf("  t2  r2 allocates 1 MiB: B = %p, %s\n", b, b == a ? "A (a race!)" : "other memory than A");
  CHECK(rap_allocate(pool, &c, 1 << 20, r1));
  printf("  t3  r1 allocates 1 MiB: C = %p, %s\n", c,
         c == a ? "A again, at once: r1's own stream order makes it safe" : "other memory");
  CHECK(rap_deallocate(pool, c, r1));
  CHECK(rap_deallocate(pool, b, r2));
  printf("  t4  r1 frees C again; r2 frees B:\n");
  pending_line(pool, r1, "r1");
  pending_line(pool, r2, "r2");
  printf("\n");
  gate_open(&g);
  CHECK(rap_resource_synchronize(r1));
  CHECK(rap_allocate(pool, &d, 2 << 20, r2));
  printf("  t5  r1's work finishes; r2 asks for 2 MiB: D = %p, %s\n", d,
         d == a ? "the same chunk, which came back by itself" : "new memory");
  rap_stats s;
  CHECK(rap_allocator_stats(pool, &s));
  printf("       pool: %zu chunk(s), %zu B held, %zu B pending\n", s.chunk_count, s.actual_bytes,
         s.pending_bytes);
  CHECK(rap_deallocate(pool, d, r2));
  double same = pair_ns_on(pool, 4096, rounds_of(200000), r1);
  printf("  ns per allocate+free pair on r1 (same resource, no event, no driver call): %.1f\n", same);
  CHECK(rap_allocator_check(pool));
}

/* ---- 7. threads: each runs a ring of 8 blocks (256 B..64 KiB) for 50 ms ------------------------- */

typedef struct thr {
  rap_allocator *a;
  int *stop;   /* atomic: set once by the timer */
  long ops;
  int seed;
} thr;

static void *thr_main(void *arg) {
  thr *t = arg;
  void *ring[8] = {0};
  unsigned x = (unsigned)t->seed * 2654435761u + 1;
  for (long i = 0; !__atomic_load_n(t->stop, __ATOMIC_RELAXED); i++) {
    int k = (int)(i & 7);
    if (ring[k] != NULL) {
      CHECK(rap_deallocate(t->a, ring[k], NULL));
      t->ops++;
    }
    x = x * 1664525u + 1013904223u;
    CHECK(rap_allocate(t->a, &ring[k], (size_t)256 << (x >> 29 & 7), NULL));
    t->ops++;
  }
  for (int k = 0; k < 8; k++) CHECK(rap_deallocate(t->a, ring[k], NULL));
  return NULL;
}

static double mops(rap_allocator *a, int n) {
  pthread_t tid[8];
  thr t[8];
  int stop = 0;
  for (int i = 0; i < n; i++) {
    t[i] = (thr){a, &stop, 0, i};
    if (pthread_create(&tid[i], NULL, thr_main, &t[i]) != 0) exit(1);
  }
  double t0 = now_ns();
  struct timespec nap = {0, (traced ? 5 : 50) * 1000 * 1000};
  nanosleep(&nap, NULL);
  __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
  long ops = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(tid[i], NULL);
    ops += t[i].ops;
  }
  return (double)ops / ((now_ns() - t0) / 1e3);
}

static void threads(rap_manager *rm, const char *parent) {
  char spec[128];
  rap_allocator *ts, *tc;
  snprintf(spec, sizeof spec, "ThreadSafe(QuickPool(%s, initial_size=64MiB))", parent);
  CHECK(rap_allocator_make_spec(rm, "demo-ts", spec, &ts));
  snprintf(spec, sizeof spec, "ThreadCache(QuickPool(%s, initial_size=64MiB))", parent);
  CHECK(rap_allocator_make_spec(rm, "demo-tc", spec, &tc));
  printf("\n7. Threads sharing one pool, each allocating and freeing 256 B..32 KiB blocks for %d ms\n"
         "   (million operations per second over all threads):\n", traced ? 5 : 50);
  printf("  %-8s %22s %22s\n", "threads", "ThreadSafe (one lock)", "ThreadCache");
  for (int n = 1; n <= 4; n *= 2) printf("  %-8d %22.1f %22.1f\n", n, mops(ts, n), mops(tc, n));
  rap_stats s;
  CHECK(rap_allocator_stats(tc, &s));
  printf("   The threads ended and gave their caches back: %zu blocks cached, %zu live.\n",
         s.cached_count, s.allocation_count);
  CHECK(rap_allocator_destroy(ts));
  CHECK(rap_allocator_destroy(tc));
}

int main(void) {
  rap_manager *rm;
  rap_allocator *parent, *pool;
  const char *trace = getenv("RAP_TRACE");
  traced = trace != NULL && *trace != '\0';
  if (traced)
    printf("rap demo: tracing is on (RAP_TRACE=%s): every call writes a line to the trace, so the\n"
           "timings below measure the trace, not the pools, and their loops run a hundredth of\n"
           "their rounds. Unset RAP_TRACE to time the pools.\n\n", trace);
  CHECK(rap_manager_create(&rm));
  int gpu = rap_allocator_get(rm, "DEVICE", &parent) == RAP_OK;
  if (!gpu) {
    printf("rap demo: no usable GPU (%s); running on host memory\n\n", rap_last_error());
    CHECK(rap_allocator_get(rm, "HOST", &parent));
  } else {
    printf("rap demo: running on GPU memory (DEVICE)\n\n");
  }
  const char *parent_name = rap_allocator_name(parent);
  CHECK(rap_allocator_make(rm, "demo-pool", "QuickPool", parent_name,
                           "initial_size=16MiB next_size=4MiB", &pool));

  printf("1. A QuickPool over %s takes its first chunk lazily:\n", parent_name);
  print_stats(pool);
  void *blocks[8];
  for (int i = 0; i < 8; i++) CHECK(rap_allocate(pool, &blocks[i], (size_t)(i + 1) * 1000, NULL));
  printf("2. Eight blocks of 1000..8000 bytes carved from one chunk:\n");
  print_stats(pool);
  for (int i = 0; i < 8; i += 2) CHECK(rap_deallocate(pool, blocks[i], NULL));
  printf("3. Every other block returned: each lies between blocks still in use, so none merges;\n"
         "   the free space is in pieces and the largest is still the chunk's free end:\n");
  print_stats(pool);
  for (int i = 1; i < 8; i += 2) CHECK(rap_deallocate(pool, blocks[i], NULL));
  printf("4. The rest returned: each merges with its free neighbours, back to one free block the\n"
         "   size of the chunk, which stays for reuse:\n");
  print_stats(pool);
  CHECK(rap_allocator_check(pool));
  CHECK(rap_release(pool));
  printf("5. rap_release gives wholly free chunks back to %s:\n", parent_name);
  print_stats(pool);

  printf("\nns per allocate+free pair (median of 7 rounds)\n");
  printf("  %-10s %14s %14s %10s\n", "size", gpu ? "cudaMalloc" : "malloc", "QuickPool", "speed-up");
  static const size_t sizes[] = {64, 4096, 65536, 1 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    double base = gpu ? pair_ns(parent, sizes[i], 200) : malloc_pair_ns(sizes[i], rounds_of(200000));
    double qp = pair_ns(pool, sizes[i], rounds_of(200000));
    char label[32];
    if (sizes[i] >= 1 << 20) snprintf(label, sizeof label, "%zu MiB", sizes[i] >> 20);
    else if (sizes[i] >= 1024) snprintf(label, sizeof label, "%zu KiB", sizes[i] >> 10);
    else snprintf(label, sizeof label, "%zu B", sizes[i]);
    if (traced) printf("  %-10s %14.1f %14.1f %10s\n", label, base, qp, "(traced)");
    else printf("  %-10s %14.1f %14.1f %9.1fx\n", label, base, qp, base / qp);
  }
  timeline(rm, parent_name, gpu);
  threads(rm, parent_name);
  CHECK(rap_manager_destroy(rm));
  return 0;
}
