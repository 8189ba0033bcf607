/* rap_glue.c — per-device ResourceAwarePools and per-stream resources for framework allocators.
 *
 * Frameworks hand us (size, device, stream) and later the pointer; rap needs an allocator and a
 * resource. Each device gets one pool, made from a spec string the first time the device
 * allocates; each stream gets one cuda resource the first time it is seen, found again through a
 * uthash keyed by the stream handle with the last hit cached (the hot path is one compare).
 *
 * CUDA graphs. While a stream is being captured, nothing may query an event recorded in the
 * capture, and memory that captured kernels use must never go to anyone else while the graph
 * lives. So an allocation on a capturing stream comes from a QuickPool of its own, one per
 * (graph pool, stream), that only that capture allocates from; its blocks may be reused inside the
 * capture (stream order is graph order) and are never handed to eager work. A block of the main
 * pool freed while its stream is capturing is deferred until the capture ends, so that no event is
 * ever recorded into a capture. Two ways to know about captures:
 *  - the framework's own protocol (PyTorch's begin/end_allocate_to_pool and release_pool, through
 *    glue_begin_pool and friends): graph pools are the framework's pool ids, shared where it
 *    shares them, and given back when it releases them and their last block is freed;
 *  - otherwise each allocation asks CUDA whether its stream is capturing (one driver call), the
 *    graph pool is the capture's, and glue_release_graph_pools gives back those of ended captures
 *    with no live block, which the user calls once the graphs are destroyed.
 *
 * One mutex guards everything: frameworks call from several threads (PyTorch's autograd threads).
 */
#include "rap_glue.h"

#include <rap/cuda.h>
#include <rap/strategy.h>

#include <ctype.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int glue_hash_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (glue_hash_oom = 1)
#include <uthash.h>

typedef struct stream_ent {
  uintptr_t key;            /* the cudaStream_t */
  rap_resource *r;
  bool orphan;              /* its owner let go: rap destroys the stream once nothing needs it */
  UT_hash_handle hh;
} stream_ent;

#define DETECTED UINT64_MAX   /* gkey.b of a pool found by capture detection (a: the capture id) */

typedef struct gkey {
  unsigned long long a, b;  /* the framework's pool id, or (capture id, DETECTED) */
  uintptr_t stream;
} gkey;

typedef struct gpool {
  gkey key;
  rap_allocator *a;
  size_t live;              /* blocks handed out and not yet given back to a */
  bool released;            /* the framework let go of the pool: it goes once live is 0 */
  UT_hash_handle hh;
} gpool;

typedef struct mpool {      /* a framework pool id: references to it */
  unsigned long long a, b;
  long refs;
  struct mpool *next;
} mpool;

typedef struct active {     /* a capture (or context) allocating to a framework pool now */
  unsigned long long a, b;
  void *ctx;
  glue_filter_fn filter;
  void (*drop)(void *ctx);
  struct active *next;
} active;

typedef struct gptr {
  void *p;
  gpool *g;
  bool recorded;            /* used on another stream: never reused inside the capture */
  bool freed;               /* the framework freed it; it goes back with the pool */
  UT_hash_handle hh;
} gptr;

typedef struct deferred {
  void *p;
  cudaStream_t s;
  struct deferred *next;
} deferred;

typedef struct dev {
  rap_allocator *pool;
  stream_ent *streams, *last;
  gpool *gpools;
  gptr *gptrs;
  mpool *mpools;
  active *active;
  deferred *deferred;
  size_t ndeferred;
  unsigned long long graph_seq;
  /* Since the last glue_reset_accumulated: allocations served and their bytes (as requested), out
   * of memory answers, and what was live at the reset (frees are what went since). */
  size_t allocs, alloc_bytes, ooms, base_count, base_bytes;
  /* glue_set_memory_fraction's cap on the main pool's reserved bytes (0: none). */
  size_t limit;
  bool fell_back;   /* the pool was made from glue_cfg.fallback_spec */
} dev;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static rap_manager *rm;
static dev *devs;
static int ndev;
static bool inited, graphs = true, capture_seen, hooks;
static int init_status;

/* ---- set-up ------------------------------------------------------------------------------- */

static int init_locked(void) {
  if (inited) return init_status;
  inited = true;
  int st = rap_manager_create(&rm);
  if (st == RAP_OK) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
      (void)cudaGetLastError();
      st = rap_error_set(RAP_ERR_UNSUPPORTED, "%s: no CUDA device is usable (%s)", glue_cfg.prefix,
                         e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    } else if ((devs = calloc((size_t)n, sizeof *devs)) == NULL) {
      st = rap_error_set(RAP_ERR_NOMEM, "%s: out of host memory", glue_cfg.prefix);
    } else {
      ndev = n;
    }
  }
  const char *g = glue_cfg.graphs_env ? getenv(glue_cfg.graphs_env) : NULL;
  graphs = !(g != NULL && strcmp(g, "0") == 0);
  init_status = st;
  return st;
}

static bool name_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* A device platform's name at p, not followed by "::" (an explicit device): its length, or 0. */
static size_t bare_platform(const char *spec, const char *p) {
  static const char *const names[] = {"DEVICE_VMM", "DEVICE"};
  if (p != spec && name_char(p[-1])) return 0;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    size_t n = strlen(names[i]);
    if (strncmp(p, names[i], n) == 0 && !name_char(p[n]) && strncmp(p + n, "::", 2) != 0) return n;
  }
  return 0;
}

/* A strategy that takes its device as an option (StreamOrdered, DeviceVmm) at p, without device=
 * among its options: the length up to and with its '(', or 0. */
static size_t device_strategy(const char *spec, const char *p) {
  static const char *const names[] = {"StreamOrdered(", "DeviceVmm("};
  if (p != spec && name_char(p[-1])) return 0;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    size_t n = strlen(names[i]);
    if (strncasecmp(p, names[i], n) != 0) continue;
    const char *end = strchr(p + n, ')');
    for (const char *q = p + n; end != NULL && q < end; q++)
      if (strncmp(q, "device", 6) == 0 && (q == p + n || !name_char(q[-1])) && !name_char(q[6]))
        return 0;
    return n;
  }
  return 0;
}

/* The spec with "{device}" replaced by the device; a spec without it gets DEVICE::N and
 * DEVICE_VMM::N for every bare DEVICE and DEVICE_VMM, and device=N in StreamOrdered(...) and
 * DeviceVmm(...) that name none, so one RAP_*_SPEC serves every device. */
static int expand_spec(const char *spec, int device, char *buf, size_t cap) {
  bool placeholder = strstr(spec, "{device}") != NULL;
  size_t o = 0;
  for (const char *p = spec; *p != '\0';) {
    char tmp[32];
    const char *ins = NULL;
    size_t skip = 1;
    if (strncmp(p, "{device}", 8) == 0) {
      snprintf(tmp, sizeof tmp, "%d", device);
      ins = tmp;
      skip = 8;
    } else if (!placeholder && (skip = bare_platform(spec, p)) > 0) {
      snprintf(tmp, sizeof tmp, "%.*s::%d", (int)skip, p, device);
      ins = tmp;
    } else if (!placeholder && (skip = device_strategy(spec, p)) > 0) {
      snprintf(tmp, sizeof tmp, "%.*sdevice=%d%s", (int)skip, p, device, p[skip] == ')' ? "" : ", ");
      ins = tmp;
    } else {
      skip = 1;
    }
    size_t len = ins ? strlen(ins) : 1;
    if (o + len >= cap)
      return rap_error_set(RAP_ERR_INVALID, "%s: the allocator spec is too long", glue_cfg.prefix);
    memcpy(buf + o, ins ? ins : p, len);
    o += len;
    p += skip;
  }
  buf[o] = '\0';
  return RAP_OK;
}

/* The spec the user named in the environment, or NULL. */
static const char *user_spec(void) {
  const char *env = glue_cfg.spec_env ? getenv(glue_cfg.spec_env) : NULL;
  return env != NULL && *env != '\0' ? env : NULL;
}

static int build_spec(int device, char *buf, size_t cap) {
  const char *spec = user_spec();
  return expand_spec(spec != NULL ? spec : glue_cfg.default_spec, device, buf, cap);
}

static int get_dev(int device, dev **out) {
  int st = init_locked();
  if (st != RAP_OK) return st;
  if (device < 0 || device >= ndev)
    return rap_error_set(RAP_ERR_INVALID, "%s: device %d does not exist; there are %d",
                         glue_cfg.prefix, device, ndev);
  *out = &devs[device];
  return RAP_OK;
}

static int ensure_pool(int device, dev *d) {
  if (d->pool != NULL) return RAP_OK;
  char spec[1024], name[64];
  int st = build_spec(device, spec, sizeof spec);
  if (st != RAP_OK) return st;
  snprintf(name, sizeof name, "%s-cuda%d", glue_cfg.prefix, device);
  d->fell_back = false;
  st = rap_allocator_make_spec(rm, name, spec, &d->pool);
  /* The default's platform refused here (no virtual memory management, no POSIX handles): the
   * same pool over cudaMalloc chunks. A spec the user named is never replaced. */
  if (st == RAP_ERR_UNSUPPORTED && user_spec() == NULL && glue_cfg.fallback_spec != NULL) {
    rap_log(RAP_LOG_INFO, "%s: device %d: %s; its pool is made over cudaMalloc chunks instead, "
            "which neither export nor sleep", glue_cfg.prefix, device, rap_last_error());
    st = expand_spec(glue_cfg.fallback_spec, device, spec, sizeof spec);
    if (st == RAP_OK) st = rap_allocator_make_spec(rm, name, spec, &d->pool);
    d->fell_back = st == RAP_OK;
  }
  if (st == RAP_OK) rap_log(RAP_LOG_INFO, "%s: device %d allocates from %s", glue_cfg.prefix, device, spec);
  return st;
}

/* ---- streams ------------------------------------------------------------------------------ */

static int stream_resource(dev *d, int device, cudaStream_t s, stream_ent **out) {
  uintptr_t key = (uintptr_t)s;
  stream_ent *e = d->last;
  if (e != NULL && e->key == key) {
    *out = e;
    return RAP_OK;
  }
  HASH_FIND(hh, d->streams, &key, sizeof key, e);
  if (e == NULL) {
    /* The legacy and per-thread default streams belong to the current device. */
    int cur = device;
    if (cudaGetDevice(&cur) != cudaSuccess) cur = device;
    if (cur != device) (void)cudaSetDevice(device);
    rap_resource *r = NULL;
    int st = rap_resource_create_cuda(rm, s, &r);
    if (cur != device) (void)cudaSetDevice(cur);
    if (st != RAP_OK) return st;
    e = calloc(1, sizeof *e);
    if (e != NULL) {
      e->key = key;
      e->r = r;
      glue_hash_oom = 0;
      HASH_ADD(hh, d->streams, key, sizeof e->key, e);
    }
    if (e == NULL || glue_hash_oom) {
      free(e);
      (void)rap_resource_destroy(r);
      return rap_error_set(RAP_ERR_NOMEM, "%s: out of host memory for a stream", glue_cfg.prefix);
    }
  }
  d->last = e;
  *out = e;
  return RAP_OK;
}

static stream_ent *find_stream(dev *d, cudaStream_t s) {
  uintptr_t key = (uintptr_t)s;
  stream_ent *e = NULL;
  HASH_FIND(hh, d->streams, &key, sizeof key, e);
  return e;
}

/* Destroys orphaned streams that no block needs any more. */
static size_t reap_orphans(int device, dev *d) {
  size_t reaped = 0;
  stream_ent *e, *tmp;
  HASH_ITER(hh, d->streams, e, tmp) {
    if (!e->orphan) continue;
    rap_stats rs;
    if (d->pool != NULL && (rap_allocator_resource_stats(d->pool, e->r, &rs) != RAP_OK ||
                            rs.allocation_count > 0))
      continue;
    if (rap_resource_destroy(e->r) != RAP_OK) continue;   /* a use elsewhere still pends */
    int cur = device;
    if (cudaGetDevice(&cur) != cudaSuccess) cur = device;
    if (cur != device) (void)cudaSetDevice(device);
    (void)cudaStreamDestroy((cudaStream_t)e->key);
    if (cur != device) (void)cudaSetDevice(cur);
    HASH_DEL(d->streams, e);
    if (d->last == e) d->last = NULL;
    free(e);
    reaped++;
  }
  return reaped;
}

/* ---- capture ------------------------------------------------------------------------------ */

static bool capturing(cudaStream_t s, unsigned long long *id) {
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  unsigned long long cid = 0;
  cudaError_t e = cudaStreamGetCaptureInfo(s, &cs, &cid, NULL, NULL, NULL, NULL);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (id != NULL) *id = cid;
  return cs != cudaStreamCaptureStatusNone;
}

static int graph_alloc(int device, dev *d, void **out, size_t size, cudaStream_t s,
                       unsigned long long id1, unsigned long long id2) {
  gkey k;
  memset(&k, 0, sizeof k);
  k.a = id1;
  k.b = id2;
  k.stream = (uintptr_t)s;
  gpool *g = NULL;
  HASH_FIND(hh, d->gpools, &k, sizeof k, g);
  if (g == NULL) {
    char name[96], spec[160];
    snprintf(name, sizeof name, "%s-cuda%d-graph%llu", glue_cfg.prefix, device, ++d->graph_seq);
    snprintf(spec, sizeof spec,
             "QuickPool(DEVICE::%d, initial_size=2MiB, next_size=2MiB, heuristic=never)", device);
    rap_allocator *a = NULL;
    int st = rap_allocator_make_spec(rm, name, spec, &a);
    if (st != RAP_OK) return st;
    g = calloc(1, sizeof *g);
    if (g != NULL) {
      g->key = k;
      g->a = a;
      glue_hash_oom = 0;
      HASH_ADD(hh, d->gpools, key, sizeof g->key, g);
    }
    if (g == NULL || glue_hash_oom) {
      free(g);
      (void)rap_allocator_destroy(a);
      return rap_error_set(RAP_ERR_NOMEM, "%s: out of host memory for a graph pool", glue_cfg.prefix);
    }
    rap_log(RAP_LOG_INFO, "%s: graph pool (%llu, %llu) on stream %p allocates from %s",
            glue_cfg.prefix, id1, id2, (void *)s, name);
  }
  gptr *gp = calloc(1, sizeof *gp);
  if (gp == NULL) return rap_error_set(RAP_ERR_NOMEM, "%s: out of host memory", glue_cfg.prefix);
  /* Growing the pool calls cudaMalloc, which a global-mode capture forbids unless this thread
   * relaxes (as PyTorch's own allocator does): its addresses stay the graph's until release. */
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  void *p = NULL;
  int st = rap_allocate(g->a, &p, size, NULL);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  if (st != RAP_OK) {
    free(gp);
    return st;
  }
  gp->p = p;
  gp->g = g;
  glue_hash_oom = 0;
  HASH_ADD_PTR(d->gptrs, p, gp);
  if (glue_hash_oom) {
    (void)rap_deallocate(g->a, p, NULL);
    free(gp);
    return rap_error_set(RAP_ERR_NOMEM, "%s: out of host memory", glue_cfg.prefix);
  }
  g->live++;
  *out = p;
  return RAP_OK;
}

/* Gives g's memory back to CUDA; true when g is gone. */
static bool destroy_gpool(dev *d, gpool *g) {
  int st = rap_allocator_destroy(g->a);
  if (st != RAP_OK) {
    rap_log(RAP_LOG_WARN, "%s: a graph pool could not be given back: %s", glue_cfg.prefix,
            rap_last_error());
    return false;
  }
  HASH_DEL(d->gpools, g);
  free(g);
  return true;
}

/* *gone (if not NULL) says whether the block's pool went with it. */
static int graph_free(dev *d, gptr *gp, bool *gone) {
  gpool *g = gp->g;
  if (gone != NULL) *gone = false;
  if (gp->recorded && !g->released) {   /* another stream of the capture may use it: keep it */
    gp->freed = true;
    return RAP_OK;
  }
  int st = rap_deallocate(g->a, gp->p, NULL);
  if (st != RAP_OK) return st;
  g->live--;
  HASH_DEL(d->gptrs, gp);
  free(gp);
  if (g->released && g->live == 0) {
    bool went = destroy_gpool(d, g);
    if (gone != NULL) *gone = went;
  }
  return RAP_OK;
}

/* Blocks of g that the framework freed but that were kept for a use on another stream go back;
 * true when g went with them. */
static bool give_back_kept(dev *d, gpool *g) {
  gptr *gp, *tmp;
  HASH_ITER(hh, d->gptrs, gp, tmp) {
    if (gp->g != g || !gp->freed) continue;
    bool gone = false;
    gp->recorded = false;
    if (graph_free(d, gp, &gone) == RAP_OK && gone) return true;
  }
  return false;
}

/* Main-pool blocks freed during a capture of their stream, once the capture is over, and blocks
 * freed while the pool was asleep, once it is awake. */
static int process_deferred(dev *d) {
  int st = RAP_OK;
  if (rap_allocator_is_asleep(d->pool)) return RAP_OK;
  for (deferred **at = &d->deferred; *at != NULL;) {
    deferred *e = *at;
    if (capturing(e->s, NULL)) {
      at = &e->next;
      continue;
    }
    int s2 = rap_deallocate(d->pool, e->p, NULL);
    if (s2 != RAP_OK && st == RAP_OK) st = s2;
    *at = e->next;
    d->ndeferred--;
    free(e);
  }
  return st;
}

/* ---- the entry points --------------------------------------------------------------------- */

static int admit_locked(int device, size_t size, size_t limit);

/* An allocation from the main pool under the device's limit (glue_set_memory_fraction): refused
 * at once when the live bytes could not fit; otherwise it is made, and if it grew the pool's
 * reserved bytes past the limit it is undone (the block freed on its own stream, the stream
 * synchronized so that it is free at once, wholly free chunks given back) and tried once more
 * against the smaller pool, then refused. An allocation the pool serves without growing is never
 * refused, even when what it holds is above a limit set later. Out of memory: RAP_ERR_NOMEM. */
static int capped_alloc(int device, dev *d, void **out, size_t size, stream_ent *e) {
  int st = admit_locked(device, size, d->limit);
  for (int attempt = 0; st == RAP_OK; attempt++) {
    rap_stats before, after;
    void *p = NULL;
    st = rap_allocator_stats(d->pool, &before);
    if (st == RAP_OK) st = rap_allocate(d->pool, &p, size, e->r);
    if (st == RAP_OK) st = rap_allocator_stats(d->pool, &after);
    if (st != RAP_OK) {
      if (p != NULL) (void)rap_deallocate(d->pool, p, e->r);
      return st;
    }
    if (after.actual_bytes <= d->limit || after.actual_bytes <= before.actual_bytes) {
      *out = p;
      return RAP_OK;
    }
    st = rap_deallocate(d->pool, p, e->r);
    if (st == RAP_OK) st = rap_resource_synchronize(e->r);
    if (st == RAP_OK) st = rap_release(d->pool);
    if (st == RAP_OK && attempt > 0)
      st = rap_error_set(RAP_ERR_NOMEM, "%s: %zu bytes would take device %d's pool to %zu "
                         "reserved bytes, past its limit of %zu (the memory fraction)",
                         glue_cfg.prefix, size, device, after.actual_bytes, d->limit);
  }
  return st;
}

/* glue_malloc's body, with the lock held. */
static int malloc_locked(void **out, size_t size, int device, cudaStream_t s) {
  dev *d = NULL;
  int st = get_dev(device, &d);
  if (st == RAP_OK && d->deferred != NULL) (void)process_deferred(d);
  unsigned long long id = 0;
  active *to = NULL;
  if (st == RAP_OK && hooks)
    for (to = d->active; to != NULL && !to->filter(to->ctx, s);) to = to->next;
  if (st != RAP_OK) {
  } else if (to != NULL) {
    st = graph_alloc(device, d, out, size, s, to->a, to->b);
  } else if (!hooks && graphs && capturing(s, &id)) {
    capture_seen = true;
    st = graph_alloc(device, d, out, size, s, id, DETECTED);
  } else {
    stream_ent *e = NULL;
    st = ensure_pool(device, d);
    if (st == RAP_OK) st = stream_resource(d, device, s, &e);
    if (st == RAP_OK && d->limit != 0) st = capped_alloc(device, d, out, size, e);
    else if (st == RAP_OK) st = rap_allocate(d->pool, out, size, e->r);
  }
  if (d != NULL && st == RAP_OK) {
    d->allocs++;
    d->alloc_bytes += size;
  } else if (d != NULL && st == RAP_ERR_NOMEM) {
    d->ooms++;
  }
  return st;
}

int glue_malloc(void **out, size_t size, int device, cudaStream_t s) {
  pthread_mutex_lock(&lock);
  int st = malloc_locked(out, size, device, s);
  pthread_mutex_unlock(&lock);
  return st;
}

/* The limit's check and the allocation under one hold of the lock, so that two threads cannot
 * both be admitted past it. */
int glue_malloc_limited(void **out, size_t size, int device, cudaStream_t s, size_t limit) {
  pthread_mutex_lock(&lock);
  int st = limit != 0 ? admit_locked(device, size, limit) : RAP_OK;
  if (st == RAP_OK) st = malloc_locked(out, size, device, s);
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_free(void *ptr, int device) {
  if (ptr == NULL) return RAP_OK;
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  gptr *gp = NULL;
  if (st == RAP_OK && d->gptrs != NULL) HASH_FIND_PTR(d->gptrs, &ptr, gp);
  if (st != RAP_OK) {
  } else if (gp != NULL) {
    st = graph_free(d, gp, NULL);
  } else if (d->pool == NULL) {
    st = rap_error_set(RAP_ERR_UNKNOWN_POINTER, "%s: %p was not allocated on device %d",
                       glue_cfg.prefix, ptr, device);
  } else {
    rap_resource *owner = NULL;
    cudaStream_t s = NULL;
    bool defer = false;
    bool maybe = hooks ? d->active != NULL : capture_seen;
    if (maybe && rap_pointer_resource(d->pool, ptr, &owner) == RAP_OK) {
      s = rap_resource_cuda_stream(owner);
      defer = capturing(s, NULL);
    }
    /* A tensor dropped while the pool sleeps: its block goes back at the wake. */
    if (rap_allocator_is_asleep(d->pool)) defer = true;
    deferred *e = defer ? malloc(sizeof *e) : NULL;
    if (e != NULL) {
      e->p = ptr;
      e->s = s;
      e->next = d->deferred;
      d->deferred = e;
      d->ndeferred++;
    } else {
      st = rap_deallocate(d->pool, ptr, NULL);
    }
  }
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_record(void *ptr, cudaStream_t s) {
  pthread_mutex_lock(&lock);
  int st = init_locked();
  bool found = false;
  for (int i = 0; st == RAP_OK && i < ndev && !found; i++) {
    dev *d = &devs[i];
    gptr *gp = NULL;
    if (d->gptrs != NULL) HASH_FIND_PTR(d->gptrs, &ptr, gp);
    if (gp != NULL) {
      gp->recorded = true;
      found = true;
      break;
    }
    rap_resource *owner = NULL;
    if (d->pool == NULL || rap_pointer_resource(d->pool, ptr, &owner) != RAP_OK) continue;
    found = true;
    stream_ent *e = NULL;
    st = stream_resource(d, i, s, &e);
    if (st == RAP_OK) st = rap_record_resource(d->pool, ptr, e->r);
  }
  if (st == RAP_OK && !found)
    st = rap_error_set(RAP_ERR_UNKNOWN_POINTER, "%s: record_stream(%p): not a live block of rap",
                       glue_cfg.prefix, ptr);
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_release(void) {
  pthread_mutex_lock(&lock);
  int st = init_locked();
  for (int i = 0; st == RAP_OK && i < ndev; i++) {
    dev *d = &devs[i];
    if (d->deferred != NULL) (void)process_deferred(d);
    if (d->pool != NULL) st = rap_release(d->pool);
    (void)reap_orphans(i, d);
  }
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_release_graph_pools(size_t *released) {
  pthread_mutex_lock(&lock);
  size_t n = 0;
  int st = init_locked();
  for (int i = 0; st == RAP_OK && i < ndev; i++) {
    dev *d = &devs[i];
    gpool *g, *gt;
    HASH_ITER(hh, d->gpools, g, gt) {
      /* Pools of a framework's protocol go when the framework releases them; detected ones when
       * their capture has ended and nothing in them is live. */
      unsigned long long id = 0;
      if (g->key.b != DETECTED && !g->released) continue;
      if (g->key.b == DETECTED && capturing((cudaStream_t)g->key.stream, &id) && id == g->key.a)
        continue;
      g->released = true;
      if (give_back_kept(d, g)) {
        n++;
        continue;
      }
      if (g->live > 0) {
        if (g->key.b == DETECTED) g->released = false;
        continue;
      }
      n += destroy_gpool(d, g);
    }
  }
  pthread_mutex_unlock(&lock);
  if (released != NULL) *released = n;
  return st;
}

static void add_stats(size_t *out, const rap_stats *s) {
  out[GLUE_CURRENT] += s->current_bytes;
  out[GLUE_PEAK] += s->high_watermark;
  out[GLUE_RESERVED] += s->actual_bytes;
  out[GLUE_PEAK_RESERVED] += s->actual_high_watermark;
  out[GLUE_PENDING] += s->pending_bytes;
  out[GLUE_PENDING_COUNT] += s->pending_count;
  out[GLUE_FREE] += s->free_bytes;
  out[GLUE_RELEASABLE] += s->releasable_bytes;
  if (s->largest_free_block > out[GLUE_LARGEST_FREE]) out[GLUE_LARGEST_FREE] = s->largest_free_block;
  out[GLUE_ALLOCATIONS] += s->allocation_count;
  out[GLUE_BLOCKS] += s->block_count;
  out[GLUE_CHUNKS] += s->chunk_count;
  out[GLUE_USED] += s->used_bytes;
  out[GLUE_WAITS] += s->waits;
  out[GLUE_HOST_WAITS] += s->host_waits;
}

int glue_stat_values(int device, int graph, size_t *out, size_t n) {
  if (out == NULL || n < GLUE_NSTATS)
    return rap_error_set(RAP_ERR_INVALID, "%s: stats need room for %d values", glue_cfg.prefix,
                         (int)GLUE_NSTATS);
  memset(out, 0, n * sizeof *out);
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  if (st == RAP_OK) {
    rap_stats s;
    if (!graph && d->pool != NULL && (st = rap_allocator_stats(d->pool, &s)) == RAP_OK) add_stats(out, &s);
    for (gpool *g = d->gpools; graph && g != NULL && st == RAP_OK; g = g->hh.next)
      if ((st = rap_allocator_stats(g->a, &s)) == RAP_OK) add_stats(out, &s);
    out[GLUE_STREAMS] = HASH_COUNT(d->streams);
    out[GLUE_GRAPH_POOLS] = HASH_COUNT(d->gpools);
    out[GLUE_DEFERRED] = d->ndeferred;
    out[GLUE_ALLOCS_TOTAL] = d->allocs;
    out[GLUE_ALLOC_BYTES_TOTAL] = d->alloc_bytes;
    out[GLUE_OOMS] = d->ooms;
    out[GLUE_BASE_COUNT] = d->base_count;
    out[GLUE_BASE_BYTES] = d->base_bytes;
  }
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_pointer_stream(const void *ptr, int device, cudaStream_t *out) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  rap_resource *r = NULL;
  if (st == RAP_OK && d->pool == NULL)
    st = rap_error_set(RAP_ERR_UNKNOWN_POINTER, "%s: nothing allocated on device %d", glue_cfg.prefix, device);
  if (st == RAP_OK) st = rap_pointer_resource(d->pool, ptr, &r);
  if (st == RAP_OK) *out = rap_resource_cuda_stream(r);
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_stream_retire(cudaStream_t s, int *adopted) {
  pthread_mutex_lock(&lock);
  int st = init_locked();
  int found = 0;
  for (int i = 0; st == RAP_OK && i < ndev; i++) {
    stream_ent *e = find_stream(&devs[i], s);
    if (e == NULL) continue;
    e->orphan = true;
    found = 1;
    (void)reap_orphans(i, &devs[i]);
  }
  pthread_mutex_unlock(&lock);
  if (adopted != NULL) *adopted = found;
  return st;
}

int glue_spec(int device, char *buf, size_t cap) {
  pthread_mutex_lock(&lock);
  int st = devs != NULL && device >= 0 && device < ndev && devs[device].fell_back
               ? expand_spec(glue_cfg.fallback_spec, device, buf, cap)
               : build_spec(device, buf, cap);
  pthread_mutex_unlock(&lock);
  return st;
}

/* ---- a framework's graph-pool protocol ---------------------------------------------------- */

void glue_use_pool_hooks(int on) {
  pthread_mutex_lock(&lock);
  hooks = on != 0;
  pthread_mutex_unlock(&lock);
}

static mpool *find_mpool(dev *d, unsigned long long a, unsigned long long b, mpool ***at) {
  for (mpool **p = &d->mpools; *p != NULL; p = &(*p)->next)
    if ((*p)->a == a && (*p)->b == b) {
      if (at != NULL) *at = p;
      return *p;
    }
  return NULL;
}

int glue_begin_pool(int device, unsigned long long id1, unsigned long long id2, void *ctx,
                    glue_filter_fn filter, void (*drop)(void *ctx)) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  mpool *m = st == RAP_OK ? find_mpool(d, id1, id2, NULL) : NULL;
  active *x = st == RAP_OK ? calloc(1, sizeof *x) : NULL;
  if (st == RAP_OK && m == NULL && x != NULL && (m = calloc(1, sizeof *m)) != NULL) {
    m->a = id1;
    m->b = id2;
    m->next = d->mpools;
    d->mpools = m;
  }
  if (st == RAP_OK && (x == NULL || m == NULL)) {
    free(x);
    st = rap_error_set(RAP_ERR_NOMEM, "%s: out of host memory", glue_cfg.prefix);
  }
  if (st == RAP_OK) {
    m->refs++;
    x->a = id1;
    x->b = id2;
    x->ctx = ctx;
    x->filter = filter;
    x->drop = drop;
    x->next = d->active;
    d->active = x;
  }
  pthread_mutex_unlock(&lock);
  if (st != RAP_OK && drop != NULL) drop(ctx);
  return st;
}

int glue_end_pool(int device, unsigned long long id1, unsigned long long id2) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  active *x = NULL;
  for (active **p = st == RAP_OK ? &d->active : NULL; p != NULL && *p != NULL; p = &(*p)->next)
    if ((*p)->a == id1 && (*p)->b == id2) {
      x = *p;
      *p = x->next;
      break;
    }
  pthread_mutex_unlock(&lock);
  if (x != NULL && x->drop != NULL) x->drop(x->ctx);
  free(x);
  return st;
}

int glue_release_pool(int device, unsigned long long id1, unsigned long long id2) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  mpool **at = NULL;
  mpool *m = st == RAP_OK ? find_mpool(d, id1, id2, &at) : NULL;
  if (m != NULL && --m->refs <= 0) {
    *at = m->next;
    free(m);
    gpool *g, *gt;
    HASH_ITER(hh, d->gpools, g, gt) {
      if (g->key.a != id1 || g->key.b != id2) continue;
      g->released = true;
      if (!give_back_kept(d, g) && g->live == 0) (void)destroy_gpool(d, g);
    }
  }
  pthread_mutex_unlock(&lock);
  return st;
}

/* ---- a framework's pool surface: limits, one device's release, a pinned host pool ---------- */

static int admit_locked(int device, size_t size, size_t limit) {
  dev *d = NULL;
  rap_stats s;
  int st = get_dev(device, &d);
  if (st == RAP_OK) st = ensure_pool(device, d);
  if (st == RAP_OK) st = rap_allocator_stats(d->pool, &s);
  if (st == RAP_OK && (size > limit || s.used_bytes > limit - size))
    st = rap_error_set(RAP_ERR_NOMEM, "%s: %zu bytes more would pass the limit of %zu bytes on "
                       "device %d (%zu in use)", glue_cfg.prefix, size, limit, device, s.used_bytes);
  return st;
}

int glue_set_memory_fraction(int device, double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0))   /* NaN too */
    return rap_error_set(RAP_ERR_INVALID, "%s: a memory fraction must be in (0, 1] (above 0, at "
                         "most 1); %g is not", glue_cfg.prefix, fraction);
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  size_t free_b = 0, total = 0;
  if (st == RAP_OK) {
    int cur = device;
    cudaError_t e = cudaGetDevice(&cur);
    if (e == cudaSuccess && cur != device) e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaMemGetInfo(&free_b, &total);
    if (cur != device) (void)cudaSetDevice(cur);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      st = rap_error_set(RAP_ERR_BACKEND, "%s: the memory of device %d cannot be read: %s",
                         glue_cfg.prefix, device, cudaGetErrorString(e));
    }
  }
  if (st == RAP_OK) {
    /* 1: the whole device, which the pool cannot pass anyway: no cap, no cost per allocation. */
    double l = fraction * (double)total;
    d->limit = fraction == 1.0 ? 0 : l < 1.0 ? 1 : (size_t)l;
    if (d->limit != 0)
      rap_log(RAP_LOG_INFO, "%s: device %d's pool may reserve at most %zu bytes (%g of %zu)",
              glue_cfg.prefix, device, d->limit, fraction, total);
    else
      rap_log(RAP_LOG_INFO, "%s: device %d's pool has no cap (fraction 1)", glue_cfg.prefix, device);
  }
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_memory_limit(int device, size_t *limit) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  if (st == RAP_OK && limit != NULL) *limit = d->limit;
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_release_device(int device) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  if (st == RAP_OK && d->deferred != NULL) (void)process_deferred(d);
  if (st == RAP_OK && d->pool != NULL) st = rap_release(d->pool);
  if (st == RAP_OK) (void)reap_orphans(device, d);
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_memory_info(int device, size_t *free_bytes, size_t *total_bytes) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  if (st == RAP_OK) st = ensure_pool(device, d);
  if (st == RAP_OK) st = rap_allocator_memory_info(d->pool, free_bytes, total_bytes);
  pthread_mutex_unlock(&lock);
  return st;
}

static rap_allocator *pinned;   /* the pinned host pool, made at its first allocation */

int glue_pinned_malloc(void **out, size_t size, const char *spec) {
  pthread_mutex_lock(&lock);
  int st = init_locked();
  if (st == RAP_OK && pinned == NULL) {
    char name[64];
    snprintf(name, sizeof name, "%s-pinned", glue_cfg.prefix);
    st = rap_allocator_make_spec(rm, name, spec, &pinned);
    if (st == RAP_OK) rap_log(RAP_LOG_INFO, "%s: pinned host memory comes from %s", glue_cfg.prefix, spec);
  }
  if (st == RAP_OK) st = rap_allocate(pinned, out, size, NULL);
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_pinned_free(void *ptr) {
  if (ptr == NULL) return RAP_OK;
  pthread_mutex_lock(&lock);
  int st = pinned != NULL ? rap_deallocate(pinned, ptr, NULL)
                          : rap_error_set(RAP_ERR_UNKNOWN_POINTER, "%s: %p is not pinned memory "
                                          "of rap's", glue_cfg.prefix, ptr);
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_pinned_release(void) {
  pthread_mutex_lock(&lock);
  int st = pinned != NULL ? rap_release(pinned) : RAP_OK;
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_pinned_stat_values(size_t *out, size_t n) {
  if (out == NULL || n < GLUE_NSTATS)
    return rap_error_set(RAP_ERR_INVALID, "%s: stats need room for %d values", glue_cfg.prefix,
                         (int)GLUE_NSTATS);
  memset(out, 0, n * sizeof *out);
  pthread_mutex_lock(&lock);
  rap_stats s;
  int st = pinned != NULL ? rap_allocator_stats(pinned, &s) : RAP_OK;
  if (pinned != NULL && st == RAP_OK) add_stats(out, &s);
  pthread_mutex_unlock(&lock);
  return st;
}

/* ---- statistics in a framework's terms ------------------------------------------------------ */

/* The pool's and every graph pool's high-water marks start again from what they hold now. */
int glue_reset_peaks(int device) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  if (st == RAP_OK && d->pool != NULL) st = rap_allocator_reset_peaks(d->pool);
  for (gpool *g = st == RAP_OK ? d->gpools : NULL; g != NULL && st == RAP_OK; g = g->hh.next)
    st = rap_allocator_reset_peaks(g->a);
  pthread_mutex_unlock(&lock);
  return st;
}

/* Sleep and wake of a device's pool (rap_allocator_sleep): frees deferred by a capture that has
 * ended are done first; CUDA-graph pools stay as they are (their graphs may replay). */
int glue_sleep(int device, int mode) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  if (st == RAP_OK && d->pool == NULL)
    st = rap_error_set(RAP_ERR_INVALID, "%s: device %d has no pool yet: nothing to sleep",
                       glue_cfg.prefix, device);
  if (st == RAP_OK) {
    if (d->deferred != NULL) (void)process_deferred(d);
    st = rap_allocator_sleep(d->pool, mode);
  }
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_wake(int device) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  if (st == RAP_OK && d->pool == NULL)
    st = rap_error_set(RAP_ERR_INVALID, "%s: device %d has no pool: nothing to wake",
                       glue_cfg.prefix, device);
  if (st == RAP_OK) st = rap_allocator_wake(d->pool);
  if (st == RAP_OK && d->deferred != NULL) (void)process_deferred(d);
  pthread_mutex_unlock(&lock);
  return st;
}

/* The running totals start again at zero; what is live now is remembered, so that frees since can
 * be told from the totals and the live figures. */
int glue_reset_accumulated(int device) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  size_t count = 0, bytes = 0;
  rap_stats s;
  if (st == RAP_OK && d->pool != NULL && (st = rap_allocator_stats(d->pool, &s)) == RAP_OK) {
    count += s.allocation_count;
    bytes += s.current_bytes;
  }
  for (gpool *g = st == RAP_OK ? d->gpools : NULL; g != NULL && st == RAP_OK; g = g->hh.next)
    if ((st = rap_allocator_stats(g->a, &s)) == RAP_OK) {
      count += s.allocation_count;
      bytes += s.current_bytes;
    }
  if (st == RAP_OK) {
    d->allocs = d->alloc_bytes = d->ooms = 0;
    d->base_count = count;
    d->base_bytes = bytes;
  }
  pthread_mutex_unlock(&lock);
  return st;
}

/* ---- memory across processes: a tensor's block exported, imported, closed ---------------------
 * The device's pool must be over an exporting platform (DeviceVmm(export=posix), see
 * docs/integrations.md); otherwise rap_ipc_export says so. An import is the manager's, closed on
 * the stream given (the importer's work on it has passed before the exporter may reuse it). */
int glue_registrable(const void *ptr, int device) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  if (st == RAP_OK) st = ensure_pool(device, d);
  if (st == RAP_OK) st = ptr != NULL ? rap_pointer_registrable(rm, ptr) : rap_allocator_registrable(d->pool);
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_ipc_export(void *ptr, int device, void *desc) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  int st = get_dev(device, &d);
  if (st == RAP_OK && d->pool == NULL)
    st = rap_error_set(RAP_ERR_INVALID, "%s: device %d has no pool yet: nothing to share",
                       glue_cfg.prefix, device);
  if (st == RAP_OK) st = rap_ipc_export(d->pool, ptr, (rap_ipc_desc *)desc);
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_ipc_import(const void *desc, int device, cudaStream_t s, void **out) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  stream_ent *e = NULL;
  int st = get_dev(device, &d);
  if (st == RAP_OK) st = stream_resource(d, device, s, &e);
  if (st == RAP_OK) st = rap_ipc_import(rm, (const rap_ipc_desc *)desc, e->r, out);
  pthread_mutex_unlock(&lock);
  return st;
}

int glue_ipc_close(void *ptr, int device, cudaStream_t s) {
  pthread_mutex_lock(&lock);
  dev *d = NULL;
  stream_ent *e = NULL;
  int st = get_dev(device, &d);
  if (st == RAP_OK) st = stream_resource(d, device, s, &e);
  if (st == RAP_OK) st = rap_ipc_close(rm, ptr, e->r);
  pthread_mutex_unlock(&lock);
  return st;
}
