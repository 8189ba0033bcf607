/* vmm_backup.c — DEVICE_VMM's side of sleep and wake: the host memory that holds a sleeping pool's
 * bytes, and the copies to it and back (docs/DESIGN.md, "Sleep and wake", "The copies").
 *
 * Two kinds of backup. Pinned (cudaHostAlloc), made by RAP_SLEEP_PREPARE: the copies go straight
 * into it, in 64 MiB pieces round-robin over four streams of the platform's own. Pageable (mmap,
 * transparent huge pages asked for), made by a sleep otherwise: pinning costs about 3 GB/s, a
 * twentieth of the bus, so the copies go through a ring of a few small pinned slots, made once and
 * kept, the host's side done by a few threads that also prefault the backup (stage.c). One copy
 * at a time goes through a platform's streams and ring: two pools' sleeps take turns.
 */
#include "platforms/stage.h"
#include "platforms/vmm.h"

#if RAP_HAVE_CUDA && !RAP_HAVE_HIP
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23   /* Linux 5.14 */
#endif

#define COPY_LANES 4
#define COPY_PIECE ((size_t)64 << 20)   /* a pinned backup's cudaMemcpyAsync: at full speed */
#define RING_SLOTS 8u
#define RING_SLOT ((size_t)8 << 20)     /* a ring copy: near full speed; 64 MiB pinned in all, about
                                           20 ms of pinning, paid once a platform */
#define RING_PART ((size_t)2 << 20)     /* a thread's piece: one huge page */
#define HUGE_PAGE ((size_t)2 << 20)     /* a pageable backup's alignment and rounding */

typedef struct copy_lanes {
  rapi_vmm *v;
  cudaStream_t s[COPY_LANES];
  unsigned next;
  pthread_mutex_t mu;              /* one copy at a time through these streams and the ring */
  char *ring;                      /* RING_SLOTS * RING_SLOT pinned, made at the first staged copy */
  cudaEvent_t ev[RING_SLOTS];      /* each slot's mark */
} copy_lanes;

static pthread_mutex_t lanes_made = PTHREAD_MUTEX_INITIALIZER;   /* two pools' first sleeps */
static int populate = 1;   /* atomic: 0 once the kernel said it has no MADV_POPULATE_WRITE */

int rapi_device_vmm_enter(rapi_vmm *v, int *saved) {
  cudaError_t e = cudaGetDevice(saved);
  if (e == cudaSuccess) e = cudaSetDevice(v->device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return rapi_fail(RAP_ERR_BACKEND, "%s: cudaSetDevice(%d): %s", rap_allocator_name(v->self),
                     v->device, cudaGetErrorString(e));
  }
  return RAP_OK;
}

void rapi_device_vmm_leave(const rapi_vmm *v, int saved) {
  if (saved != v->device) (void)cudaSetDevice(saved);
}

static int rt_fail(rapi_vmm *v, const char *call, cudaError_t e) {
  (void)cudaGetLastError();
  return rapi_fail(e == cudaErrorMemoryAllocation ? RAP_ERR_NOMEM : RAP_ERR_BACKEND,
                   "%s: %s on device %d: %s", rap_allocator_name(v->self), call, v->device,
                   cudaGetErrorString(e));
}

static rapi_vmm *vmm_of(rap_allocator *a) { return ((rapi_tracked *)a->state)->impl; }

/* ---- the copy streams and the ring: made at the first sleep, kept until the platform goes ---- */

static int lanes_make(rapi_vmm *v, copy_lanes **out) {
  copy_lanes *l = rapi_calloc(1, sizeof *l);
  if (l == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(v->self));
  l->v = v;
  for (int i = 0; i < COPY_LANES; i++) {
    cudaError_t e = cudaStreamCreateWithFlags(&l->s[i], cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      while (i-- > 0) (void)cudaStreamDestroy(l->s[i]);
      free(l);
      return rt_fail(v, "cudaStreamCreateWithFlags", e);
    }
  }
  pthread_mutex_init(&l->mu, NULL);
  *out = l;
  return RAP_OK;
}

/* Device current; returns with the lanes' lock held. */
static int lanes_lock(rapi_vmm *v, copy_lanes **out) {
  int st = RAP_OK;
  pthread_mutex_lock(&lanes_made);
  if (v->copy == NULL) {
    copy_lanes *l = NULL;
    if ((st = lanes_make(v, &l)) == RAP_OK) v->copy = l;
  }
  pthread_mutex_unlock(&lanes_made);
  if (st != RAP_OK) return st;
  *out = v->copy;
  pthread_mutex_lock(&(*out)->mu);
  return RAP_OK;
}

/* The ring's pinned slots and their events, once; under the lanes' lock. */
static int ring_make(copy_lanes *l) {
  if (l->ring != NULL) return RAP_OK;
  void *h = NULL;
  cudaError_t e = cudaHostAlloc(&h, RING_SLOTS * RING_SLOT, cudaHostAllocPortable);
  if (e != cudaSuccess) return rt_fail(l->v, "cudaHostAlloc (the staging ring of a sleep's copies)", e);
  unsigned made = 0;
  while (made < RING_SLOTS &&
         (e = cudaEventCreateWithFlags(&l->ev[made], cudaEventDisableTiming)) == cudaSuccess)
    made++;
  if (made < RING_SLOTS) {
    int st = rt_fail(l->v, "cudaEventCreateWithFlags", e);
    while (made-- > 0) (void)cudaEventDestroy(l->ev[made]);
    (void)cudaFreeHost(h);
    return st;
  }
  l->ring = h;
  __atomic_store_n(&l->v->ring_bytes, RING_SLOTS * RING_SLOT, __ATOMIC_RELAXED);
  return RAP_OK;
}

void rapi_device_backup_fini(rapi_vmm *v) {
  copy_lanes *l = v->copy;
  if (l == NULL) return;
  for (int i = 0; i < COPY_LANES; i++) (void)cudaStreamDestroy(l->s[i]);
  if (l->ring != NULL) {
    for (unsigned i = 0; i < RING_SLOTS; i++) (void)cudaEventDestroy(l->ev[i]);
    if (cudaFreeHost(l->ring) != cudaSuccess) (void)cudaGetLastError();
  }
  pthread_mutex_destroy(&l->mu);
  free(l);
  v->copy = NULL;
}

/* ---- the backup: pinned (asked for) or pageable ------------------------------------------------ */

static size_t huge_round(size_t n) { return (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE; }

static int pinned_make(rapi_vmm *v, rapi_backup *bk, size_t bytes) {
  void *h = NULL;
  cudaError_t e = cudaHostAlloc(&h, bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    char sz[32];
    rapi_format_size(sz, sizeof sz, bytes);
    (void)cudaGetLastError();
    return rapi_fail(RAP_ERR_NOMEM, "%s: cudaHostAlloc(%s) for the backup of a sleeping pool: %s",
                     rap_allocator_name(v->self), sz, cudaGetErrorString(e));
  }
  *bk = (rapi_backup){h, bytes, bytes, RAPI_BACKUP_PINNED};
  return RAP_OK;
}

/* An address range aligned to a huge page, with no pages yet: the first copy into it prefaults
 * them, in parallel, as it goes (the slack around the alignment is given back at once). */
static int pageable_make(rapi_vmm *v, rapi_backup *bk, size_t bytes) {
  size_t len = huge_round(bytes), raw_len = len + HUGE_PAGE;
  char *raw = mmap(NULL, raw_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    char sz[32];
    rapi_format_size(sz, sizeof sz, bytes);
    return rapi_fail(RAP_ERR_NOMEM, "%s: mmap(%s) for the backup of a sleeping pool: %s",
                     rap_allocator_name(v->self), sz, strerror(errno));
  }
  char *host = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  if (host > raw) (void)munmap(raw, (size_t)(host - raw));
  if (raw + raw_len > host + len) (void)munmap(host + len, (size_t)(raw + raw_len - (host + len)));
  (void)madvise(host, len, MADV_HUGEPAGE);   /* where transparent huge pages are on; else 4 KiB */
  *bk = (rapi_backup){host, bytes, 0, RAPI_BACKUP_PAGEABLE};
  return RAP_OK;
}

static void device_backup_free(rap_allocator *a, rapi_backup *bk) {
  if (bk->host != NULL && bk->kind == RAPI_BACKUP_PINNED) {
    cudaError_t e = cudaFreeHost(bk->host);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      rap_log(RAP_LOG_WARN, "%s: cudaFreeHost of a backup: %s", rap_allocator_name(a),
              cudaGetErrorString(e));
    }
  } else if (bk->host != NULL && munmap(bk->host, huge_round(bk->cap)) != 0) {
    rap_log(RAP_LOG_WARN, "%s: munmap of a backup: %s", rap_allocator_name(a), strerror(errno));
  }
  *bk = (rapi_backup){0};
}

/* Pinned where asked (RAP_SLEEP_PREPARE), else pageable; what there was goes only once the new
 * one is made, so a failure keeps it. A pinned backup large enough serves an unprepared sleep. */
static int device_backup_reserve(rap_allocator *a, rapi_backup *bk, size_t bytes, bool pinned) {
  rapi_vmm *v = vmm_of(a);
  if (bk->cap >= bytes && (!pinned || bk->kind == RAPI_BACKUP_PINNED)) return RAP_OK;
  rapi_backup made;
  int st = RAP_OK;
  if (pinned) {
    int saved = 0;
    if ((st = rapi_device_vmm_enter(v, &saved)) != RAP_OK) return st;
    st = pinned_make(v, &made, bytes);
    rapi_device_vmm_leave(v, saved);
  } else {
    st = pageable_make(v, &made, bytes);
  }
  if (st != RAP_OK) return st;
  device_backup_free(a, bk);
  *bk = made;
  return RAP_OK;
}

/* ---- the copies -------------------------------------------------------------------------------- */

static int lanes_sync(copy_lanes *l) {
  int st = RAP_OK;
  for (int i = 0; i < COPY_LANES; i++) {
    cudaError_t e = cudaStreamSynchronize(l->s[i]);
    if (e != cudaSuccess && st == RAP_OK) st = rt_fail(l->v, "cudaStreamSynchronize (backup copies)", e);
  }
  return st;
}

/* Straight between the runs and a pinned backup: in pieces, one stream after another, so that
 * several copies are in flight at once; then the streams are waited for (theirs only). */
static int copy_pinned(copy_lanes *l, char *host, rapi_runs *runs, bool to_host) {
  int st = RAP_OK;
  for (rapi_run r; st == RAP_OK && runs->next(runs, &r); host += r.size)
    for (size_t off = 0; st == RAP_OK && off < r.size; off += COPY_PIECE) {
      size_t piece = r.size - off < COPY_PIECE ? r.size - off : COPY_PIECE;
      char *dev = r.ptr + off, *h = host + off;
      cudaError_t e = cudaMemcpyAsync(to_host ? h : dev, to_host ? dev : h, piece,
                                      to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                      l->s[l->next++ % COPY_LANES]);
      if (e != cudaSuccess) st = rt_fail(l->v, "cudaMemcpyAsync", e);
    }
  int fin = lanes_sync(l);
  return st != RAP_OK ? st : fin;
}

/* The ring's side of a staged copy (stage.h): slot i's copies go on stream i % COPY_LANES. */
static int ring_queue(void *ctx, unsigned slot, size_t off, char *dev, size_t n, bool to_host) {
  copy_lanes *l = ctx;
  char *h = l->ring + slot * RING_SLOT + off;
  cudaError_t e = cudaMemcpyAsync(to_host ? h : dev, to_host ? dev : h, n,
                                  to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                  l->s[slot % COPY_LANES]);
  return e == cudaSuccess ? RAP_OK : rt_fail(l->v, "cudaMemcpyAsync (through the staging ring)", e);
}

static int ring_mark(void *ctx, unsigned slot) {
  copy_lanes *l = ctx;
  cudaError_t e = cudaEventRecord(l->ev[slot], l->s[slot % COPY_LANES]);
  return e == cudaSuccess ? RAP_OK : rt_fail(l->v, "cudaEventRecord (a staging slot)", e);
}

static int ring_wait(void *ctx, unsigned slot) {
  copy_lanes *l = ctx;
  cudaError_t e = cudaEventSynchronize(l->ev[slot]);
  return e == cudaSuccess ? RAP_OK : rt_fail(l->v, "cudaEventSynchronize (a staging slot)", e);
}

static int ring_finish(void *ctx) { return lanes_sync(ctx); }

/* Pages of the backup made before the first copy into them, so that a host that cannot give them
 * answers with a status (where the kernel has MADV_POPULATE_WRITE) rather than a fault later. */
static int ring_prefault(void *ctx, void *p, size_t n) {
  copy_lanes *l = ctx;
  if (!__atomic_load_n(&populate, __ATOMIC_RELAXED)) return RAP_OK;   /* the copy faults them */
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = (uintptr_t)p & ~(page - 1), hi = ((uintptr_t)p + n + page - 1) & ~(page - 1);
  if (madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) == 0) return RAP_OK;
  if (errno == EINVAL) {
    __atomic_store_n(&populate, 0, __ATOMIC_RELAXED);
    return RAP_OK;
  }
  char sz[32];
  rapi_format_size(sz, sizeof sz, hi - lo);
  return rapi_fail(RAP_ERR_NOMEM, "%s: the host could not give %s of a sleeping pool's backup "
                   "(madvise MADV_POPULATE_WRITE: %s)", rap_allocator_name(l->v->self), sz,
                   strerror(errno));
}

static const rapi_stage_ops ring_ops = {ring_queue, ring_mark, ring_wait, ring_finish, ring_prefault};

static int copy_staged(copy_lanes *l, rapi_backup *bk, rapi_runs *runs, bool to_host) {
  int st = ring_make(l);
  if (st != RAP_OK) return st;
  rapi_stage sg = {&ring_ops, l, l->ring, RING_SLOTS, RING_SLOT, RING_PART, rapi_stage_threads()};
  st = rapi_stage_copy(&sg, bk->host, bk->touched, runs, to_host);
  if (st == RAP_OK && to_host && runs->total > bk->touched) bk->touched = runs->total;
  return st;
}

static int device_copy(rap_allocator *a, rapi_backup *bk, rapi_runs *runs, bool to_host) {
  rapi_vmm *v = vmm_of(a);
  int saved = 0;
  int st = rapi_device_vmm_enter(v, &saved);
  if (st != RAP_OK) return st;
  copy_lanes *l = NULL;
  if ((st = lanes_lock(v, &l)) == RAP_OK) {
    st = bk->kind == RAPI_BACKUP_PINNED ? copy_pinned(l, bk->host, runs, to_host)
                                        : copy_staged(l, bk, runs, to_host);
    pthread_mutex_unlock(&l->mu);
  }
  rapi_device_vmm_leave(v, saved);
  return st;
}

void rapi_device_backup_init(rapi_vmm *v) {
  v->resizable.backup_reserve = device_backup_reserve;
  v->resizable.backup_free = device_backup_free;
  v->resizable.copy = device_copy;
}
#endif
