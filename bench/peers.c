/* peers.c — the allocators rap-bench compares, behind bench_peer: malloc, mimalloc (loaded at run
 * time), rap's strategies, cudaMalloc, and cudaMallocAsync on the device's default pool and on a
 * fresh pool; then the peers by description (pdesc), which the workloads name and open_peer makes
 * on run_env.
 */
#include "bench.h"

#include <dlfcn.h>
#include <pthread.h>
#include <limits.h>
#include <rap/rap.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef RAP_BENCH_MIMALLOC_LINKED
#include <mimalloc.h>
#endif

#ifdef RAP_BENCH_CUDA
#include <cuda_runtime_api.h>
#include <rap/cuda.h>
#endif

/* ---- malloc ----------------------------------------------------------------------------------- */

static int m_alloc(void *ctx, void **p, size_t n, int s) {
  (void)ctx, (void)s;
  *p = malloc(n);
  return *p ? 0 : -1;
}

static int m_free(void *ctx, void *p, size_t n, int s) {
  (void)ctx, (void)n, (void)s;
  free(p);
  return 0;
}

static void m_destroy(void *ctx) { (void)ctx; }

int peer_malloc(bench_peer *p, char *why) {
  (void)why;
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "malloc (glibc)");
  p->thread_safe = 1;
  p->alloc = m_alloc;
  p->free = m_free;
  p->destroy = m_destroy;
  return 0;
}

/* ---- the ceiling: each thread's own stacks of blocks --------------------------------------------- */

/* Not an allocator anyone would ship: every thread keeps stacks of the blocks it freed, per
 * power-of-two class, and touches nothing another thread writes (malloc only when a stack is empty
 * or full). What it does per operation is what the fastest thread cache could do, so its scaling
 * over threads is the machine's own: the cores' clocks falling as more of them run, caches and
 * hyperthreads shared under the hypervisor. The threads workloads divide a pool's scaling by it. */
#define LC_CLASSES 28   /* up to 128 MiB: every size of (a) */
#define LC_CAP 32

typedef struct lc_stacks {
  void *v[LC_CLASSES][LC_CAP];
  unsigned n[LC_CLASSES];
  int keyed;
} lc_stacks;

static __thread lc_stacks lc;
static pthread_key_t lc_key;
static pthread_once_t lc_once = PTHREAD_ONCE_INIT;
static int lc_key_ok;

static void lc_flush(lc_stacks *s) {
  for (int c = 0; c < LC_CLASSES; c++)
    while (s->n[c] > 0) free(s->v[c][--s->n[c]]);
}

static void lc_exit(void *v) { lc_flush(v); }
static void lc_make_key(void) { lc_key_ok = pthread_key_create(&lc_key, lc_exit) == 0; }

static inline unsigned lc_class(size_t n) { return n <= 16 ? 4u : 64u - (unsigned)__builtin_clzll(n - 1); }

static int lc_alloc(void *ctx, void **p, size_t n, int s) {
  (void)ctx, (void)s;
  unsigned c = lc_class(n);
  if (c < LC_CLASSES && lc.n[c] > 0) {
    *p = lc.v[c][--lc.n[c]];
    return 0;
  }
  *p = malloc(c < LC_CLASSES ? (size_t)1 << c : n);
  return *p ? 0 : -1;
}

static int lc_free(void *ctx, void *p, size_t n, int s) {
  (void)ctx, (void)s;
  unsigned c = lc_class(n);
  if (c < LC_CLASSES && lc.n[c] < LC_CAP) {
    if (!lc.keyed) {   /* the thread's end gives its stacks back */
      pthread_once(&lc_once, lc_make_key);
      lc.keyed = lc_key_ok && pthread_setspecific(lc_key, &lc) == 0;
      if (!lc.keyed) {
        free(p);
        return 0;
      }
    }
    lc.v[c][lc.n[c]++] = p;
    return 0;
  }
  free(p);
  return 0;
}

static void lc_destroy(void *ctx) {
  (void)ctx;
  lc_flush(&lc);   /* the calling thread's; the workers' went back when they ended */
}

int peer_local(bench_peer *p, char *why) {
  (void)why;
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "per-thread stacks (the ceiling)");
  p->thread_safe = 1;
  p->alloc = lc_alloc;
  p->free = lc_free;
  p->destroy = lc_destroy;
  return 0;
}

/* ---- mimalloc ---------------------------------------------------------------------------------- */

/* mimalloc's own calls, found with dlsym; the library stays loaded until the process exits (the
 * heaps of threads that used it outlive any one peer). */
static struct {
  void *(*malloc)(size_t);
  void (*free)(void *);
  void (*collect)(bool force);   /* optional: returns what it can to the system */
} mim;
int have_mimalloc;
char mimalloc_note[320] = "not looked for";

/* Linked, the calls are direct, as in a program that uses mimalloc's API. */
#ifdef RAP_BENCH_MIMALLOC_LINKED
#define MIM_MALLOC mi_malloc
#define MIM_FREE mi_free
#else
#define MIM_MALLOC mim.malloc
#define MIM_FREE mim.free
#endif

static int mim_alloc(void *ctx, void **p, size_t n, int s) {
  (void)ctx, (void)s;
  *p = MIM_MALLOC(n);
  return *p ? 0 : -1;
}

static int mim_free(void *ctx, void *p, size_t n, int s) {
  (void)ctx, (void)n, (void)s;
  MIM_FREE(p);
  return 0;
}

static void mim_destroy(void *ctx) {
  (void)ctx;
  if (mim.collect) mim.collect(true);
}

int peer_mimalloc(bench_peer *p, char *why) {
  memset(p, 0, sizeof *p);
  if (mim.malloc == NULL) return snprintf(why, 160, "%.159s", mimalloc_note), -1;
  snprintf(p->name, sizeof p->name, "mimalloc");
  p->thread_safe = 1;
  p->alloc = mim_alloc;
  p->free = mim_free;
  p->destroy = mim_destroy;
  return 0;
}

#ifdef RAP_BENCH_MIMALLOC_LINKED
/* The static library, linked as a program that calls mi_malloc links it (MI_OVERRIDE off: glibc's
 * malloc stays the process's malloc, and the two are measured side by side). */
int mimalloc_load(void) {
  mim.malloc = mi_malloc;
  mim.free = mi_free;
  mim.collect = mi_collect;
  int ver = mi_version();   /* 20401 is 2.4.1 (before 2.1: 209 was 2.0.9) */
  snprintf(mimalloc_note, sizeof mimalloc_note, "%d.%d.%d (libmimalloc.a, linked)", ver / 10000,
           ver / 100 % 100, ver % 100);
  have_mimalloc = 1;
  return 0;
}
#else
/* dlopen(path), and mi_malloc and mi_free in it; 0, or -1 with why in mimalloc_note. */
static int mim_open(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return snprintf(mimalloc_note, sizeof mimalloc_note, "%s", dlerror()), -1;
  void *m = dlsym(h, "mi_malloc"), *f = dlsym(h, "mi_free"), *c = dlsym(h, "mi_collect");
  void *v = dlsym(h, "mi_version");
  if (m == NULL || f == NULL) {
    dlclose(h);
    return snprintf(mimalloc_note, sizeof mimalloc_note, "%s has no mi_malloc/mi_free", path), -1;
  }
  memcpy(&mim.malloc, &m, sizeof m);   /* object pointers to function pointers */
  memcpy(&mim.free, &f, sizeof f);
  memcpy(&mim.collect, &c, sizeof c);
  int ver = 0;
  if (v) {
    int (*version)(void);
    memcpy(&version, &v, sizeof v);
    ver = version();   /* 209 is 2.0.9; from 2.1, 20401 is 2.4.1 */
  }
  if (ver >= 10000) ver = ver / 10000 * 100 + ver / 100 % 100 % 10 * 10 + ver % 100 % 10;
  Dl_info info;
  const char *where = dladdr(m, &info) && info.dli_fname ? info.dli_fname : path;
  char real[PATH_MAX];
  if (realpath(where, real)) where = real;
  snprintf(mimalloc_note, sizeof mimalloc_note, "%d.%d.%d (%.280s)", ver / 100, ver / 10 % 10,
           ver % 10, where);
  have_mimalloc = 1;
  return 0;
}

int mimalloc_load(void) {
  char path[PATH_MAX + 32];
  const char *env = getenv("RAP_BENCH_MIMALLOC");
  if (env && *env) {
    struct stat st;
    if (stat(env, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(path, sizeof path, "%s/libmimalloc.so.2", env);
    else snprintf(path, sizeof path, "%s", env);
    if (mim_open(path) == 0) return 0;
    char why[sizeof mimalloc_note];
    snprintf(why, sizeof why, "RAP_BENCH_MIMALLOC: %.290s", mimalloc_note);
    snprintf(mimalloc_note, sizeof mimalloc_note, "%s", why);
    return -1;
  }
  /* A copy next to the executable that does not load (built for a newer C library, say) is the
   * reason given when the system has none either. */
  char exe[PATH_MAX], beside[sizeof mimalloc_note] = "";
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(path, sizeof path, "%s/libmimalloc.so.2", exe);
    if (access(path, F_OK) == 0) {
      if (mim_open(path) == 0) return 0;
      snprintf(beside, sizeof beside, "%s", mimalloc_note);
    }
  }
  if (mim_open("libmimalloc.so.2") == 0) return 0;
  if (beside[0]) snprintf(mimalloc_note, sizeof mimalloc_note, "%s", beside);
  else snprintf(mimalloc_note, sizeof mimalloc_note,
                "no libmimalloc.so.2 next to rap-bench or on the library path (Debian: "
                "libmimalloc2.0; RAP_BENCH_MIMALLOC=PATH names one)");
  return -1;
}
#endif

/* ---- tcmalloc (gperftools) --------------------------------------------------------------------- */

static struct {
  void *(*malloc)(size_t);
  void (*free)(void *);
} tcm;
int have_tcmalloc;
char tcmalloc_note[320] = "not looked for";

static int tcm_alloc(void *ctx, void **p, size_t n, int s) {
  (void)ctx, (void)s;
  *p = tcm.malloc(n);
  return *p ? 0 : -1;
}

static int tcm_free(void *ctx, void *p, size_t n, int s) {
  (void)ctx, (void)n, (void)s;
  tcm.free(p);
  return 0;
}

/* Loaded RTLD_LOCAL: its tc_malloc and tc_free serve the peer, glibc's malloc the rest. A copy next
 * to the executable (make device-build puts one there) comes first, then the system's. */
int tcmalloc_load(void) {
  const char *path = "libtcmalloc_minimal.so.4";
  char exe[PATH_MAX], beside[PATH_MAX + 32];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  void *h = NULL;
  if (len > 0) {
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(beside, sizeof beside, "%s/%s", exe, path);
    if (access(beside, F_OK) == 0) h = dlopen(beside, RTLD_NOW | RTLD_LOCAL);
  }
  if (h == NULL) h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    snprintf(tcmalloc_note, sizeof tcmalloc_note, "%s (Debian: libgoogle-perftools-dev)", dlerror());
    return -1;
  }
  void *m = dlsym(h, "tc_malloc"), *f = dlsym(h, "tc_free"), *v = dlsym(h, "tc_version");
  if (m == NULL || f == NULL) {
    dlclose(h);
    snprintf(tcmalloc_note, sizeof tcmalloc_note, "%s has no tc_malloc/tc_free", path);
    return -1;
  }
  memcpy(&tcm.malloc, &m, sizeof m);
  memcpy(&tcm.free, &f, sizeof f);
  const char *ver = "?";
  if (v) {
    const char *(*version)(int *, int *, const char **);
    memcpy(&version, &v, sizeof v);
    ver = version(NULL, NULL, NULL);
  }
  Dl_info info;
  const char *where = dladdr(m, &info) && info.dli_fname ? info.dli_fname : path;
  char real[PATH_MAX];
  if (realpath(where, real)) where = real;
  snprintf(tcmalloc_note, sizeof tcmalloc_note, "%.40s (%.260s)", ver, where);
  have_tcmalloc = 1;
  return 0;
}

static int peer_tcmalloc(bench_peer *p, char *why) {
  memset(p, 0, sizeof *p);
  if (tcm.malloc == NULL) return snprintf(why, 160, "%.159s", tcmalloc_note), -1;
  snprintf(p->name, sizeof p->name, "tcmalloc");
  p->thread_safe = 1;
  p->alloc = tcm_alloc;
  p->free = tcm_free;
  p->destroy = m_destroy;
  return 0;
}

/* ---- RMM --------------------------------------------------------------------------------------- */

#ifdef RAP_BENCH_RMM
const int have_rmm = 1;
const char rmm_note[] = RAP_BENCH_RMM;
#else
const int have_rmm = 0;
const char rmm_note[] = "this rap-bench was built without RMM's sources (bash scripts/fetch-peers.sh, then make "
                        "device-build)";
int peer_rmm(bench_peer *p, const bench_env *env, int kind, char *why) {
  (void)env, (void)kind;
  memset(p, 0, sizeof *p);
  return snprintf(why, 160, "%s", rmm_note), -1;
}
const char *peer_rmm_error(void) { return ""; }
#endif

#ifdef RAP_BENCH_UMPIRE
const int have_umpire = 1;
const char umpire_note[] = RAP_BENCH_UMPIRE;
#else
const int have_umpire = 0;
const char umpire_note[] = "this rap-bench was built without Umpire (bash scripts/fetch-peers.sh umpire, then "
                           "make device-build)";
int peer_umpire(bench_peer *p, const bench_env *env, int thread_safe, char *why) {
  (void)env, (void)thread_safe;
  memset(p, 0, sizeof *p);
  return snprintf(why, 160, "%s", umpire_note), -1;
}
#endif

/* ---- rap -------------------------------------------------------------------------------------- */

typedef struct rap_ctx {
  rap_manager *rm;
  rap_allocator *a;
  rap_resource *res[BENCH_STREAMS];
} rap_ctx;

static int r_alloc(void *ctx, void **p, size_t n, int s) {
  rap_ctx *c = ctx;
  return rap_allocate(c->a, p, n, c->res[s]);
}

static int r_free(void *ctx, void *p, size_t n, int s) {
  rap_ctx *c = ctx;
  (void)n;
  return rap_deallocate(c->a, p, c->res[s]);
}

static int r_record(void *ctx, void *p, int s) {
  rap_ctx *c = ctx;
  return rap_record_resource(c->a, p, c->res[s]);
}

static int r_held(void *ctx, size_t *now, size_t *peak) {
  rap_ctx *c = ctx;
  rap_stats st;
  int e = rap_allocator_stats(c->a, &st);
  if (e != RAP_OK) return e;
  *now = st.actual_bytes;
  *peak = st.actual_high_watermark;
  return 0;
}

static int r_calls(void *ctx, size_t *maps, size_t *unmaps) {
  rap_ctx *c = ctx;
  rap_stats st;
  int e = rap_allocator_stats(c->a, &st);
  if (e != RAP_OK) return e;
  *maps = st.maps;
  *unmaps = st.unmaps;
  return 0;
}

static void r_destroy(void *ctx) {
  rap_ctx *c = ctx;
  int st = rap_manager_destroy(c->rm);
  if (st != RAP_OK) fprintf(stderr, "rap-bench: rap_manager_destroy: %s\n", rap_status_name(st));
  free(c);
}

/* spec with every "{device}" (rap.h's default specs) made device 0, the device the bench runs on. */
static int device0_spec(const char *spec, char *buf, size_t cap) {
  size_t o = 0;
  for (const char *s = spec; *s != '\0';) {
    int dev = strncmp(s, "{device}", 8) == 0;
    if (o + 2 > cap) return -1;
    buf[o++] = dev ? '0' : *s;
    s += dev ? 8 : 1;
  }
  buf[o] = '\0';
  return 0;
}

int peer_rap(bench_peer *p, const bench_env *env, const char *label, const char *spec,
             int host_async, char *why) {
  memset(p, 0, sizeof *p);
  char spec0[1024];
  if (device0_spec(spec, spec0, sizeof spec0) != 0) return snprintf(why, 160, "the spec is too long"), -1;
  rap_ctx *c = calloc(1, sizeof *c);
  if (c == NULL) return snprintf(why, 160, "out of host memory"), -1;
  int st = rap_manager_create(&c->rm);
  if (st == RAP_OK) st = rap_allocator_make_spec(c->rm, "bench", spec0, &c->a);
  for (int s = 0; s < BENCH_STREAMS && st == RAP_OK; s++) {
#ifdef RAP_BENCH_CUDA
    if (env->have_gpu && env->streams[s] != NULL) {
      st = rap_resource_create_cuda(c->rm, (cudaStream_t)env->streams[s], &c->res[s]);
      continue;
    }
#endif
    (void)env;
    if (host_async && s > 0) st = rap_resource_create_host_async(c->rm, &c->res[s]);
    else st = rap_resource_host(c->rm, &c->res[s]);
  }
  if (st != RAP_OK) {
    snprintf(why, 160, "%s: %s", rap_status_name(st), rap_last_error());
    if (c->rm) rap_manager_destroy(c->rm);
    free(c);
    return -1;
  }
  snprintf(p->name, sizeof p->name, "%s", label);
  p->device_mem = strstr(spec, "DEVICE") != NULL || strncasecmp(spec, "StreamOrdered", 13) == 0;
  /* Strategy names match without regard to case; ThreadCache is thread-safe whatever is below it,
   * and StreamOrdered is (one lock, as CUDA's pool is). */
  p->thread_safe = strncasecmp(spec, "ThreadSafe", 10) == 0 || strncasecmp(spec, "ThreadCache", 11) == 0 ||
                   strncasecmp(spec, "StreamOrdered", 13) == 0;
  p->ctx = c;
  p->alloc = r_alloc;
  p->free = r_free;
  p->record = strstr(spec, "ResourceAwarePool") ? r_record : NULL;
  p->held = r_held;
  p->calls = r_calls;
  p->destroy = r_destroy;
  return 0;
}

/* ---- CUDA runtime peers ----------------------------------------------------------------------- */

#ifdef RAP_BENCH_CUDA

static int cuda_why(char *why, const char *call, cudaError_t e) {
  (void)cudaGetLastError();
  snprintf(why, 160, "%s: %s", call, cudaGetErrorString(e));
  return -1;
}

typedef struct cm_ctx {
  size_t now, peak;
} cm_ctx;

static int cm_alloc(void *ctx, void **p, size_t n, int s) {
  cm_ctx *c = ctx;
  (void)s;
  if (cudaMalloc(p, n) != cudaSuccess) return -1;
  c->now += n;
  if (c->now > c->peak) c->peak = c->now;
  return 0;
}

static int cm_free(void *ctx, void *p, size_t n, int s) {
  cm_ctx *c = ctx;
  (void)s;
  c->now -= n;
  return cudaFree(p) == cudaSuccess ? 0 : -1;
}

static int cm_held(void *ctx, size_t *now, size_t *peak) {
  cm_ctx *c = ctx;
  *now = c->now;
  *peak = c->peak;
  return 0;
}

static void plain_destroy(void *ctx) { free(ctx); }

int peer_cuda_malloc(bench_peer *p, const bench_env *env, char *why) {
  memset(p, 0, sizeof *p);
  if (!env->have_gpu) return snprintf(why, 160, "%s", env->no_gpu_reason), -1;
  cm_ctx *c = calloc(1, sizeof *c);
  if (c == NULL) return snprintf(why, 160, "out of host memory"), -1;
  snprintf(p->name, sizeof p->name, "cudaMalloc/cudaFree");
  p->device_mem = 1;
  p->thread_safe = 1;
  p->ctx = c;
  p->alloc = cm_alloc;
  p->free = cm_free;
  p->held = cm_held;
  p->destroy = plain_destroy;
  return 0;
}

typedef struct ca_ctx {
  cudaMemPool_t pool;
  int fresh;
  cudaStream_t streams[BENCH_STREAMS];
} ca_ctx;

static int ca_alloc(void *ctx, void **p, size_t n, int s) {
  ca_ctx *c = ctx;
  return cudaMallocFromPoolAsync(p, n, c->pool, c->streams[s]) == cudaSuccess ? 0 : -1;
}

static int ca_free(void *ctx, void *p, size_t n, int s) {
  ca_ctx *c = ctx;
  (void)n;
  return cudaFreeAsync(p, c->streams[s]) == cudaSuccess ? 0 : -1;
}

static int ca_held(void *ctx, size_t *now, size_t *peak) {
  ca_ctx *c = ctx;
  uint64_t a = 0, b = 0;
  if (cudaMemPoolGetAttribute(c->pool, cudaMemPoolAttrReservedMemCurrent, &a) != cudaSuccess ||
      cudaMemPoolGetAttribute(c->pool, cudaMemPoolAttrReservedMemHigh, &b) != cudaSuccess)
    return -1;
  *now = (size_t)a;
  *peak = (size_t)b;
  return 0;
}

static void ca_destroy(void *ctx) {
  ca_ctx *c = ctx;
  cudaDeviceSynchronize();
  if (c->fresh) cudaMemPoolDestroy(c->pool);
  else cudaMemPoolTrimTo(c->pool, 0);
  free(c);
}

static int ca_make(bench_peer *p, const bench_env *env, int fresh, char *why) {
  memset(p, 0, sizeof *p);
  if (!env->have_gpu) return snprintf(why, 160, "%s", env->no_gpu_reason), -1;
  ca_ctx *c = calloc(1, sizeof *c);
  if (c == NULL) return snprintf(why, 160, "out of host memory"), -1;
  cudaError_t e;
  if (fresh) {
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = env->device;
    e = cudaMemPoolCreate(&c->pool, &props);
    if (e != cudaSuccess) return free(c), cuda_why(why, "cudaMemPoolCreate", e);
  } else {
    e = cudaDeviceGetDefaultMemPool(&c->pool, env->device);
    if (e != cudaSuccess) return free(c), cuda_why(why, "cudaDeviceGetDefaultMemPool", e);
    cudaDeviceSynchronize();
    cudaMemPoolTrimTo(c->pool, 0);
  }
  uint64_t threshold = UINT64_MAX, zero = 0;
  e = cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  if (e == cudaSuccess) e = cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReservedMemHigh, &zero);
  if (e == cudaSuccess) e = cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrUsedMemHigh, &zero);
  if (e != cudaSuccess) {
    if (fresh) cudaMemPoolDestroy(c->pool);
    free(c);
    return cuda_why(why, "cudaMemPoolSetAttribute", e);
  }
  c->fresh = fresh;
  for (int s = 0; s < BENCH_STREAMS; s++) c->streams[s] = (cudaStream_t)env->streams[s];
  snprintf(p->name, sizeof p->name, fresh ? "cudaMallocAsync (new pool)" : "cudaMallocAsync (default pool)");
  p->device_mem = 1;
  p->thread_safe = 1;
  p->ctx = c;
  p->alloc = ca_alloc;
  p->free = ca_free;
  p->held = ca_held;
  p->destroy = ca_destroy;
  return 0;
}

int peer_cuda_async_default(bench_peer *p, const bench_env *env, char *why) {
  return ca_make(p, env, 0, why);
}

int peer_cuda_async_fresh(bench_peer *p, const bench_env *env, char *why) {
  return ca_make(p, env, 1, why);
}

#else /* no CUDA in this build */

static int no_cuda(bench_peer *p, char *why) {
  memset(p, 0, sizeof *p);
  snprintf(why, 160, "this rap-bench was built without CUDA");
  return -1;
}
int peer_cuda_malloc(bench_peer *p, const bench_env *env, char *why) { (void)env; return no_cuda(p, why); }
int peer_cuda_async_default(bench_peer *p, const bench_env *env, char *why) { (void)env; return no_cuda(p, why); }
int peer_cuda_async_fresh(bench_peer *p, const bench_env *env, char *why) { (void)env; return no_cuda(p, why); }
int peer_cub(bench_peer *p, const bench_env *env, char *why) { (void)env; return no_cuda(p, why); }
int bench_kernels_init(char *why) { snprintf(why, 160, "built without CUDA"); return -1; }
int bench_busy_kernel(void *stream, void *p, size_t n, unsigned ns) {
  (void)stream, (void)p, (void)n, (void)ns;
  return -1;
}

#endif

/* ---- peers by description: what the workloads name -------------------------------------------- */

static const char *pdesc_name(const pdesc *d) {
  switch (d->kind) {
  case P_MALLOC: return "malloc (glibc)";
  case P_MIMALLOC: return "mimalloc";
  case P_RAP: return d->label;
  case P_CUDA_MALLOC: return "cudaMalloc/cudaFree";
  case P_ASYNC_DEFAULT: return "cudaMallocAsync (default pool)";
  case P_ASYNC_FRESH: return "cudaMallocAsync (new pool)";
  case P_CUB: return "CUB CachingDeviceAllocator";
  case P_RMM_POOL: return "RMM pool_memory_resource";
  case P_RMM_ARENA: return "RMM arena_memory_resource";
  case P_RMM_BINNING: return "RMM binning_memory_resource";
  case P_RMM_ASYNC: return "RMM cuda_async_memory_resource";
  case P_RMM_CUDA: return "RMM cuda_memory_resource";
  case P_TCMALLOC: return "tcmalloc";
  case P_LOCAL: return "per-thread stacks (the ceiling)";
  case P_UMPIRE_QP: return "Umpire QuickPool";
  case P_UMPIRE_TS: return "Umpire ThreadSafe(QuickPool)";
  default: return "PyTorch caching allocator";
  }
}

static int make_peer(const pdesc *d, bench_peer *p, char *why) {
  switch (d->kind) {
  case P_MALLOC: return peer_malloc(p, why);
  case P_MIMALLOC: return peer_mimalloc(p, why);
  case P_RAP: return peer_rap(p, &run_env, d->label, d->spec, d->host_async, why);
  case P_CUDA_MALLOC: return peer_cuda_malloc(p, &run_env, why);
  case P_ASYNC_DEFAULT: return peer_cuda_async_default(p, &run_env, why);
  case P_ASYNC_FRESH: return peer_cuda_async_fresh(p, &run_env, why);
  case P_CUB: return peer_cub(p, &run_env, why);
  case P_RMM_POOL: return peer_rmm(p, &run_env, BENCH_RMM_POOL, why);
  case P_RMM_ARENA: return peer_rmm(p, &run_env, BENCH_RMM_ARENA, why);
  case P_RMM_BINNING: return peer_rmm(p, &run_env, BENCH_RMM_BINNING, why);
  case P_RMM_ASYNC: return peer_rmm(p, &run_env, BENCH_RMM_ASYNC, why);
  case P_RMM_CUDA: return peer_rmm(p, &run_env, BENCH_RMM_CUDA, why);
  case P_TCMALLOC: return peer_tcmalloc(p, why);
  case P_LOCAL: return peer_local(p, why);
  case P_UMPIRE_QP: return peer_umpire(p, &run_env, 0, why);
  case P_UMPIRE_TS: return peer_umpire(p, &run_env, 1, why);
  default:
    if (!run_env.have_gpu) return snprintf(why, 160, "%s", run_env.no_gpu_reason), -1;
    if (bench_torch_factory == NULL) return snprintf(why, 160, "not in this binary"), -1;
    return bench_torch_factory(&run_env, d->kind == P_TORCH_REC, p, why);
  }
}

/* RAP_BENCH_PEERS="A|B|...": only the peers whose names contain one of these, or are one of them
 * written "=NAME" (for a profile or a short run); the others are left out without a word. */
static int peer_wanted(const pdesc *d) {
  const char *want = getenv("RAP_BENCH_PEERS");
  if (want == NULL || *want == '\0') return 1;
  const char *name = d->kind == P_RAP ? d->label : pdesc_name(d);
  for (const char *w = want; *w;) {
    size_t n = strcspn(w, "|");
    if (*w == '=' && n - 1 == strlen(name) && strncmp(w + 1, name, n - 1) == 0) return 1;
    for (const char *h = name; n > 0 && *w != '=' && *h; h++)
      if (strncmp(h, w, n) == 0) return 1;
    w += n + (w[n] == '|');
  }
  return 0;
}

int open_peer_quietly(const pdesc *d, bench_peer *p) {
  char why[160] = "";
  return peer_wanted(d) && make_peer(d, p, why) == 0 ? 0 : -1;
}

int open_peer(const char *wl, const pdesc *d, bench_peer *p) {
  char why[160] = "";
  if (!peer_wanted(d)) return -1;
  if (make_peer(d, p, why) == 0) return 0;
  char what[96];
  snprintf(what, sizeof what, "(%s) %s", wl, pdesc_name(d));
  if (d->kind == P_TORCH || d->kind == P_TORCH_REC) {
    /* Said once, in main, when the binary has no PyTorch peer at all. */
    if (bench_torch_factory == NULL || !run_env.have_gpu) return -1;
  } else if (d->kind == P_MIMALLOC || d->kind == P_TCMALLOC) {
    return -1;   /* the only way it fails: no library, said once in main */
  } else if (d->kind >= P_RMM_POOL && d->kind <= P_RMM_CUDA && (!have_rmm || !run_env.have_gpu)) {
    return -1;   /* no RMM in this build, or no GPU: said once in main */
  } else if ((d->kind == P_UMPIRE_QP || d->kind == P_UMPIRE_TS) && (!have_umpire || !run_env.have_gpu)) {
    return -1;   /* likewise for Umpire */
  } else if (d->kind != P_MALLOC && d->kind != P_LOCAL && d->kind != P_RAP && !run_env.have_gpu) {
    return -1;   /* the device workloads as a whole are reported skipped */
  }
  SKIP(what, "%s", why);
  return -1;
}

void peer_failed(const char *wl, const bench_peer *p, const char *during) {
  char what[96];
  snprintf(what, sizeof what, "(%s) %s", wl, p->name);
  const char *e = strncmp(p->name, "RMM ", 4) == 0 ? peer_rmm_error() : rap_last_error();
  SKIP(what, "an allocation failed during %s: %s", during, e);
}
