/* vmm.h — the growable platforms' engine (vmm.c) and its backends: the host's (vmm.c: mmap,
 * mprotect, madvise) and the device's (vmm_device.c: CUDA's virtual memory management).
 *
 * The engine owns one reserved address range and a list of extents, each what one backend map
 * call made; it decides where an allocation goes and which extents a resize adds or gives back.
 * A backend only reserves, maps, unmaps and unreserves. Everything runs under the tracked body's
 * lock (tracked.c), which the engine's allocations are recorded in.
 */
#ifndef RAP_VMM_H
#define RAP_VMM_H

#include "rap_internal.h"
#include "platforms/platform_options.h"   /* and the sizes of HostVmm and DeviceVmm */

typedef struct rapi_vmm rapi_vmm;
typedef struct rapi_ipc_export rapi_ipc_export;   /* ipc.c: an exporting platform's shared state */

/* What an exporting platform keeps per mapping so that other processes can open it (ipc.c): the
 * file descriptor of its memory (a memfd on the host, CUDA's POSIX handle on the device), the
 * driver's handle (kept, not released after mapping), the fabric handle where one was asked for,
 * and its place in the shared table of mappings. Unused (fd -1) on a platform without export=. */
typedef struct rapi_vmm_share {
  int fd;
  unsigned slot;                   /* ipc.c: the mapping's row in the shared table */
  uint64_t serial;                 /* ipc.c: the row's serial, also while held */
  bool held;                       /* ipc.c: its row is kept from importers (a sleep under way,
                                      or a wake that has not copied back yet): serial 0 there */
  uint64_t handle;                 /* device: the CUmemGenericAllocationHandle */
  unsigned char fabric[64];        /* device, export=fabric: the CUmemFabricHandle */
  bool shared;                     /* device: fd and fabric made (at the first export that needs
                                      them: cuMemExportToShareableHandle costs about 0.6 ms) */
} rapi_vmm_share;

/* Each call fails with a status and a sentence naming the allocator. map makes [addr, addr+size)
 * readable and writable (size is a multiple of the granularity) and, on an exporting platform,
 * fills share; unmap gives back exactly a range that one map call made (with its share);
 * unreserve gives the whole range back (nothing mapped any more). */
typedef struct rapi_vmm_backend {
  int  (*map)(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share);
  int  (*unmap)(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share);
  void (*unreserve)(rapi_vmm *v);
  /* map and unmap also take a run of touching extents in one call, with no share (the host's
   * plain backend): pages inside an allocation go back and come again a run per call. */
  bool runs;
  /* An exporting backend whose map keeps only the handle (the device's): makes what another
   * process opens the mapping by (share->fd, fabric); NULL where map makes them (the host's). */
  int  (*share)(rapi_vmm *v, rapi_vmm_share *share, size_t size);
} rapi_vmm_backend;

typedef struct rapi_vmm_extent {
  char *addr;
  size_t size;
  bool asleep;                     /* unmapped by a sleeping pool: its addresses stay taken */
  bool fresh;                      /* mapped again by the resume under way (vmm.c) */
  bool exported;                   /* a block in it was exported: a wake shares it at once */
  rapi_vmm_share share;            /* an exporting platform's handles for this mapping */
  struct rapi_vmm_extent *prev, *next;   /* address order */
} rapi_vmm_extent;

struct rapi_vmm {
  const rapi_vmm_backend *ops;
  rap_allocator *self;
  char *base;                      /* the reserved range, aligned to granularity */
  size_t reserve, granularity;
  void *raw;                       /* what the backend reserved (host: the mapping, with slack) */
  size_t raw_size;
  int device;                      /* device backend: the device, and its allocation properties */
  uint64_t peers;                  /* device backend: other devices given access (bits), mapped
                                      with every extent (rapi_device_vmm_peer) */
  rapi_vmm_extent *first, *last;
  rapi_vmm_extent *hint;           /* the extent a range call last touched, where the next looks
                                      first (NULL: from the start) */
  size_t extents, mapped, mapped_hwm;   /* mapped: what is mapped now (asleep extents are not) */
  size_t piece;                    /* piece=: growth maps in pieces at multiples of this, which a
                                      pool may give back from inside a chunk; 0: one mapping per
                                      growth */
  size_t map_calls, unmap_calls;   /* backend calls made, for tests and the bench */
  void *copy;                      /* device backend: the streams backup and restore copy on, and
                                      the pinned ring a pageable backup is staged through
                                      (vmm_backup.c) */
  size_t ring_bytes;               /* device backend: the ring's pinned bytes (atomic; stats) */
  unsigned handle_types;           /* export=: RAPI_IPC_POSIX | RAPI_IPC_FABRIC, 0 for none */
  bool rdma;                       /* device, export=: gpuDirectRDMACapable asked of cuMemCreate */
  rapi_ipc_export *ipc;            /* export=: the shared table importers read (ipc.c) */
  rapi_resizable resizable;        /* what pools over this allocator see (rap_internal.h) */
  rapi_platform platform;          /* what the chain above inherits (rap_internal.h) */
  rapi_segments segments;          /* its mappings, for segment observers (core/observe.c) */
};

/* ---- vmm.c ----------------------------------------------------------------------------------- */
/* RAP_ERR_INVALID with a sentence when self was given a parent: a platform maps its own memory. */
int  rapi_vmm_no_parent(rap_allocator *self);
/* Starts the platform over a range the backend has reserved (v from rapi_malloc, filled in):
 * the tracked body, the alignment, the resizable contract. On failure the range is given back and
 * v freed. */
int  rapi_vmm_start(rap_allocator *self, void *state, rapi_vmm *v);
void rapi_vmm_fini(rap_allocator *self, void *state);
int  rapi_vmm_stats(void *state, rap_stats *out);
int  rapi_vmm_reset_peaks(void *state);

/* Sleep and wake of an allocation (rapi_resizable): the engine's, shared by both platforms. */
int  rapi_vmm_suspend(rap_allocator *a, void *ptr);
int  rapi_vmm_resume(rap_allocator *a, void *ptr);
int  rapi_vmm_hold(rap_allocator *a, void *ptr, int how);
/* A test's seam: the nth map from now (growth or a wake; 1: the next) on this thread fails with
 * RAP_ERR_NOMEM, as on a device whose memory another process took; 0 turns it off. */
void rapi_vmm_fail_map_at(long nth);
/* The same for the nth unmap of a sleep or of pages inside an allocation (a driver that fails
 * cuMemUnmap): RAP_ERR_BACKEND. */
void rapi_vmm_fail_unmap_at(long nth);
/* Pages inside live allocations (rapi_resizable.unmap_inside, map_inside, unmapped_inside). */
int  rapi_vmm_unmap_inside(rap_allocator *a, void *lo, void *hi, size_t *bytes);
int  rapi_vmm_map_inside(rap_allocator *a, void *lo, void *hi, size_t *bytes);
size_t rapi_vmm_unmapped_inside(rap_allocator *a, void *lo, void *hi);
bool rapi_vmm_pieces(rap_allocator *a, char **lo, char **hi, int how);
/* A test's and the bench's count of backend map and unmap calls made by platform a so far. */
int  rapi_vmm_calls(rap_allocator *a, size_t *maps, size_t *unmaps);

/* The tracked body's methods, but the engine's fini, stats and peaks (what is mapped). */
#define RAPI_VMM_METHODS                                                                           \
  .fini = rapi_vmm_fini, .allocate = rapi_tracked_allocate,                                        \
  .deallocate = rapi_tracked_deallocate, .stats = rapi_vmm_stats, .owns = rapi_tracked_owns,       \
  .release = rapi_tracked_release, .check = rapi_tracked_check,                                    \
  .record_resource = rapi_tracked_record_resource,                                                 \
  .pointer_resource = rapi_tracked_pointer_resource, .reset_peaks = rapi_vmm_reset_peaks

/* ---- vmm_device.c: DeviceVmm, or its stub in a build without CUDA ------------------------- */
extern const rap_strategy rapi_device_vmm_strategy;
/* stream_ordered.c, vmm_device.c: a peer's access to their memory (cudaMemPoolSetAccess; the
 * mappings' access descriptors, now and for every later mapping): their records' peer. */
int  rapi_stream_ordered_peer(rap_allocator *a, int device, int enable);
int  rapi_device_vmm_peer(rap_allocator *a, int device, int enable);

/* ---- vmm_backup.c: DeviceVmm's side of sleep and wake (CUDA builds) -------------------------- */
/* Makes v's device current on this thread (saved: the one that was), and back. */
int  rapi_device_vmm_enter(rapi_vmm *v, int *saved);
void rapi_device_vmm_leave(const rapi_vmm *v, int saved);
/* Sets v's backup and copy methods (rapi_resizable); fini, with the device current, destroys the
 * copy streams and gives the ring back. */
void rapi_device_backup_init(rapi_vmm *v);
void rapi_device_backup_fini(rapi_vmm *v);

/* ---- ipc.c: memory across processes (docs/DESIGN.md, "Memory across processes") ------------- */
#define RAPI_IPC_POSIX 1u                /* handle types an exporting platform makes */
#define RAPI_IPC_FABRIC 2u
#define RAPI_IPC_PIECE ((size_t)1 << 30) /* an exporting platform maps in pieces of at most this */
#define RAPI_IPC_HOST 1                  /* the kinds of exporting platform */
#define RAPI_IPC_DEVICE 2
#define RAPI_IPC_POOL 3                  /* StreamOrdered(pool=new, export=posix): CUDA's pool IPC */
/* Starts an exporting platform's shared state (after rapi_vmm_start); on failure nothing stays. */
int  rapi_ipc_export_start(rapi_vmm *v, int kind);
void rapi_ipc_export_stop(rapi_vmm *v);   /* the platform goes: importers are refused from now */
/* Where a block lies, said by the platform's export entry (rapi_platform_export.locate) when a
 * pool over it exports the block: its offset in the range (HostVmm, DeviceVmm), or a StreamOrdered
 * pool's allocation (its id, the block's offset there, cudaMemPoolExportPointer's data for it). A
 * pool's shared state is started with the descriptor of the pool's shareable handle (kept open by
 * the platform until after the stop). */
typedef struct rapi_ipc_place {
  uint64_t alloc, offset;
  unsigned char data[64];
} rapi_ipc_place;
int  rapi_ipc_pool_export_start(rap_allocator *self, int device, int pool_fd, rapi_ipc_export **out);
void rapi_ipc_pool_export_stop(rapi_ipc_export *x);
/* The importer's side of a pool (stream_ordered.c): open the exporter's pool from its handle (fd,
 * which the call does not close) and let it go; import an allocation; give the device of r's
 * stream access where it is another (granted: the devices given it, bits); free one imported here
 * on r's stream after the events given (r NULL: on the host, waited for). */
int  rapi_ipc_pool_open(int device, int fd, void **pool);
void rapi_ipc_pool_close(int device, void *pool);
int  rapi_ipc_pool_import(int device, void *pool, const unsigned char data[64], void **ptr);
int  rapi_ipc_pool_reach(int device, void *pool, rap_resource *r, uint64_t *granted);
int  rapi_ipc_pool_free(int device, void *ptr, rap_resource *r, void *const *events, unsigned n);
/* Every mapping made or given back by an exporting platform (vmm.c, under the platform's lock);
 * one a wake maps again is added held (published by the wake's unhold, once its bytes are back). */
int  rapi_ipc_extent_add(rapi_vmm *v, rapi_vmm_extent *e, bool held);
void rapi_ipc_extent_remove(rapi_vmm *v, rapi_vmm_extent *e);
void rapi_ipc_extent_shared(rapi_vmm *v, rapi_vmm_extent *e);   /* its row names fd and fabric */
/* rapi_resizable.hold for the extents in [lo, hi) of an exporting platform (under its lock),
 * walked from `from` (an extent at or below lo; NULL: the first), so that a release holding its
 * mappings one at a time does not walk the table from its start for each. */
int  rapi_ipc_hold(rapi_vmm *v, rapi_vmm_extent *from, char *lo, char *hi, int how);
/* The importer's side of a backend: reserve a range, map what an exporter's descriptor of one
 * mapping names at addr (fd: a descriptor this process owns, which the call does not close;
 * fabric: a device's fabric handle), give back. The host's is in ipc_import.c, the device's in
 * vmm_device.c. A device block is used on user, the device of the import's stream or else the
 * calling thread's current one (refused where it cannot reach device; reach: devices found able,
 * bits): a mapping gives it access with the memory's own device, or later (grant). */
int  rapi_ipc_device_reserve(int device, size_t size, size_t granularity, char **base);
void rapi_ipc_device_unreserve(char *base, size_t size);
int  rapi_ipc_device_user(int device, rap_resource *r, uint64_t *reach, int *user);
int  rapi_ipc_device_map(int device, int user, char *addr, size_t size, int fd, const unsigned char *fabric);
int  rapi_ipc_device_grant(int device, int user, char *addr, size_t size);
int  rapi_ipc_device_unmap(char *addr, size_t size);

#endif /* RAP_VMM_H */
