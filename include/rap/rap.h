/* rap.h — the public C API of rap: memory-pool strategies for GPU and host memory.
 *
 * Every function returns an int status: 0 (RAP_OK) or a negative RAP_ERR_* code, with a sentence in
 * rap_last_error(); out-params are untouched on error. Nouns (platform allocator, strategy,
 * allocator, resource, event, block, chunk, state) are defined in docs/DESIGN.md.
 */
#ifndef RAP_RAP_H
#define RAP_RAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Export: the library is built with hidden visibility; what these headers declare between
 * RAP_API_BEGIN and RAP_API_END is its whole exported interface. */
#if defined(__GNUC__)
#define RAP_API_BEGIN _Pragma("GCC visibility push(default)")
#define RAP_API_END _Pragma("GCC visibility pop")
#else
#define RAP_API_BEGIN
#define RAP_API_END
#endif
RAP_API_BEGIN

#define RAP_VERSION_MAJOR 0
#define RAP_VERSION_MINOR 1
#define RAP_VERSION_PATCH 0
const char *rap_version(void);   /* the library's "MAJOR.MINOR.PATCH", which may differ from the macros
                                    a program was compiled with */

/* ---------------------------------------------------------------------------------------------
 * Status codes: one list, which also generates rap_status_name and rap_strerror.
 * ------------------------------------------------------------------------------------------- */
#define RAP_STATUS_LIST(X)                                                                         \
  X(RAP_OK, 0, "success")                                                                          \
  X(RAP_ERR_INVALID, -1, "invalid argument")                                                       \
  X(RAP_ERR_NOMEM, -2, "out of memory")                                                            \
  X(RAP_ERR_NOT_FOUND, -3, "no such name")                                                         \
  X(RAP_ERR_EXISTS, -4, "name already exists")                                                     \
  X(RAP_ERR_BUSY, -5, "still in use: live blocks, children or queued work")                        \
  X(RAP_ERR_UNSUPPORTED, -6, "not supported by this build, this machine or this allocator")        \
  X(RAP_ERR_WRONG_RESOURCE, -7, "the block is owned by another resource")                          \
  X(RAP_ERR_UNKNOWN_POINTER, -8, "pointer was not handed out by this allocator or is not live")    \
  X(RAP_ERR_BACKEND, -9, "the platform runtime (CUDA, HIP, threads) reported an error")         \
  X(RAP_ERR_CORRUPT, -10, "an internal invariant of the allocator is broken")

#define RAP_STATUS_ENUM_(name, value, text) name = value,
typedef enum rap_status { RAP_STATUS_LIST(RAP_STATUS_ENUM_) } rap_status;
#undef RAP_STATUS_ENUM_

const char *rap_status_name(int status);   /* "RAP_ERR_NOMEM"; "RAP_ERR_UNKNOWN_STATUS" otherwise */
const char *rap_strerror(int status);      /* static text for the code */
const char *rap_last_error(void);          /* thread-local sentence about the last failure */

/* ---------------------------------------------------------------------------------------------
 * Logging: the library prints nothing except through this logger. The default handler writes to
 * stderr messages at or above RAP_LOG_LEVEL (env: error, warn, info, debug, off; default warn).
 * ------------------------------------------------------------------------------------------- */
typedef enum rap_log_level {
  RAP_LOG_DEBUG = 0, RAP_LOG_INFO = 1, RAP_LOG_WARN = 2, RAP_LOG_ERROR = 3, RAP_LOG_OFF = 4
} rap_log_level;
typedef void (*rap_log_fn)(int level, const char *message, void *user);
int  rap_log_set_handler(rap_log_fn fn, void *user);   /* NULL restores the stderr handler */
int  rap_log_set_level(int level);
int  rap_log_get_level(void);

/* ---------------------------------------------------------------------------------------------
 * Event trace: every allocate, deallocate, pending block, fence, block become free, cross-resource
 * wait, growth, release and out of memory of every allocator, one JSON object per line (JSON
 * Lines; docs/trace.md has the fields). RAP_TRACE=FILE in the environment starts it when the first
 * manager is made; `rap-trace` replays and plots a trace. Off, it costs one branch per call.
 * ------------------------------------------------------------------------------------------- */
int  rap_trace_start(const char *path);   /* truncates path ("%p": the pid); closes one open first */
int  rap_trace_stop(void);                /* flushes and closes; RAP_OK if none was open */
int  rap_trace_flush(void);               /* what was traced so far reaches the file */
int  rap_trace_active(void);              /* 1 while a trace is open, else 0 */
/* An interpreter's frames for this thread's user allocations (rap.torch passes Python's): each
 * alloc line at depth 0 carries "pystack":frames until it is set again; NULL sets none. frames:
 * "FILE:LINE FUNCTION" lines joined by '\n', innermost first, kept valid by the caller until then. */
int  rap_trace_set_pystack(const char *frames);

/* ---------------------------------------------------------------------------------------------
 * Handles.
 * ------------------------------------------------------------------------------------------- */
typedef struct rap_manager rap_manager;       /* registry of strategies, allocators and resources */
typedef struct rap_allocator rap_allocator;   /* borrowed handle, owned by its manager */
typedef struct rap_resource rap_resource;     /* a stream of execution */

/* ---------------------------------------------------------------------------------------------
 * Manager.
 * ------------------------------------------------------------------------------------------- */
int  rap_manager_create(rap_manager **out);
int  rap_manager_destroy(rap_manager *rm);    /* always destroys; RAP_ERR_BUSY if blocks leaked */

/* ---------------------------------------------------------------------------------------------
 * Allocators. Platform names: "HOST"; with CUDA or HIP "DEVICE", "DEVICE::N", "PINNED", "UM".
 * Options: space- or comma-separated key=value; sizes accept B, KiB, MiB, GiB (and KB, MB, GB).
 * ------------------------------------------------------------------------------------------- */
int  rap_allocator_get(rap_manager *rm, const char *name, rap_allocator **out);
int  rap_allocator_make(rap_manager *rm, const char *name, const char *strategy,
                        const char *parent, const char *options, rap_allocator **out);
int  rap_allocator_make_spec(rap_manager *rm, const char *name, const char *spec, rap_allocator **out);
     /* "ThreadSafe(ResourceAwarePool(SizeLimiter(DEVICE, limit=8GiB), initial_size=1GiB))":
        inner allocators are named "name/ResourceAwarePool", "name/ResourceAwarePool/SizeLimiter".
        RAP_ALLOCATOR_<NAME>=spec in the environment replaces the spec, or a rap_allocator_make. */
/* The pool rap's integrations (rap.torch, rap_cupy, rap.numba, rap.cuda_core, rap-bench's "rap
 * default") make for a CUDA device when the user names none; "{device}" stands for the device
 * number. One growable range per device that other processes may import, NCCL may register and
 * rap_allocator_sleep may put to sleep; streams wait for each other's memory past 512 MiB held.
 * Where the driver refuses that platform (RAP_ERR_UNSUPPORTED: no virtual memory management or no
 * POSIX handles, a HIP build), they make RAP_FALLBACK_DEVICE_SPEC: the same pool over cudaMalloc
 * chunks, which does neither export nor sleep. */
#define RAP_DEFAULT_DEVICE_SPEC                                                                    \
  "ResourceAwarePool(DeviceVmm(device={device}, export=posix), initial_size=64MiB, next_size=32MiB, " \
  "heuristic=never, cross_resource=wait, wait_above=512MiB, wait_pending_above=512MiB)"
#define RAP_FALLBACK_DEVICE_SPEC                                                                   \
  "ResourceAwarePool(DEVICE::{device}, initial_size=64MiB, next_size=32MiB, heuristic=never, "     \
  "cross_resource=wait, wait_above=512MiB, wait_pending_above=512MiB)"
int  rap_spec_check(const char *spec);   /* RAP_OK when rap_allocator_make_spec could make spec: names,
                                           options and values checked (device specs without a
                                           device); no pool memory is taken */
int  rap_allocator_destroy(rap_allocator *a);   /* RAP_ERR_BUSY while it has live blocks or children */
int  rap_allocator_find(rap_manager *rm, const void *ptr, rap_allocator **out);
const char *rap_allocator_name(const rap_allocator *a);
const char *rap_allocator_strategy(const rap_allocator *a);
rap_allocator *rap_allocator_parent(const rap_allocator *a);   /* NULL for platform allocators */

/* ---------------------------------------------------------------------------------------------
 * Blocks. r NULL = the host resource on allocate, the owning resource on deallocate.
 * Zero bytes gives a unique, valid, non-NULL pointer that must be deallocated like any other.
 * ------------------------------------------------------------------------------------------- */
int  rap_allocate(rap_allocator *a, void **out, size_t bytes, rap_resource *r);
int  rap_deallocate(rap_allocator *a, void *ptr, rap_resource *r);   /* ptr NULL: RAP_OK, no-op */
int  rap_release(rap_allocator *a);          /* give every wholly free chunk back to the parent */
int  rap_allocator_check(rap_allocator *a);  /* walk the invariants: RAP_OK or the first broken one */
int  rap_record_resource(rap_allocator *a, void *ptr, rap_resource *r);
int  rap_pointer_resource(rap_allocator *a, const void *ptr, rap_resource **out);

/* Out of memory: when rap_allocate(a, ...) is about to answer RAP_ERR_NOMEM (a's own recovery, such
 * as a pool's release and retry, already done), fn(a, bytes, r, attempt, user) is called on the
 * allocating thread, attempt 1, 2, ...: it may free memory (deallocate, release, on a or others)
 * and returns nonzero to have the request tried again, zero to let RAP_ERR_NOMEM through, with the
 * allocator's own sentence. r is the resource asked for (NULL: the host). fn NULL removes it. Set
 * it on the allocator the program calls: fn also runs when a pool above asks a, under any lock of
 * a wrapper above. Set it before other threads use a. */
typedef int (*rap_oom_handler)(rap_allocator *a, size_t bytes, rap_resource *r, int attempt,
                               void *user);
int  rap_allocator_set_oom_handler(rap_allocator *a, rap_oom_handler fn, void *user);

/* ---------------------------------------------------------------------------------------------
 * Statistics. Bytes are as requested unless named aligned or actual.
 * ------------------------------------------------------------------------------------------- */
/* rap_stats grows at its end and never changes what is already there. Every call says how many
 * bytes its caller's rap_stats has: rap_allocator_stats and rap_allocator_resource_stats are macros
 * that pass sizeof *(out) to the _sized calls, so a program built against an older header gets the
 * fields its struct has and nothing is written past it, and one built against a newer header than
 * the library it runs with finds the fields that library does not know zeroed. */
typedef struct rap_stats {
  size_t current_bytes, high_watermark;        /* live user bytes now / at peak */
  size_t actual_bytes, actual_high_watermark;  /* bytes held from the parent */
  size_t releasable_bytes, free_bytes, pending_bytes, largest_free_block;
  size_t allocation_count, block_count, pending_count, chunk_count;
  size_t used_bytes;                           /* aligned bytes of live blocks */
  size_t cached_bytes, cached_count;           /* free blocks held by per-thread caches (ThreadCache) */
  size_t waits, host_waits;                    /* cross_resource=wait: waits for another resource's
                                                  block (queued on the asker), and of them those
                                                  made on the host (ResourceAwarePool) */
  size_t maps, unmaps;                         /* calls that took memory from the system or gave
                                                  it back, made by the platform under this
                                                  allocator since it was made: cudaMalloc/cudaFree,
                                                  malloc/free, and a growable platform's maps and
                                                  unmaps of physical memory (one per mapping) */
  size_t backup_bytes;                         /* host memory kept for sleep's backup: a
                                                  ResourceAwarePool's (made by its first BACKUP
                                                  sleep or RAP_SLEEP_PREPARE, kept after wake for
                                                  the next; RAP_SLEEP_RELEASE gives it back), a
                                                  DEVICE_VMM platform's pinned staging ring */
} rap_stats;
/* size: the caller's sizeof(rap_stats), at least one field; RAP_ERR_INVALID below that. */
int  rap_allocator_stats_sized(rap_allocator *a, rap_stats *out, size_t size);
int  rap_allocator_resource_stats_sized(rap_allocator *a, rap_resource *r, rap_stats *out,
                                        size_t size);
/* Called as functions (no macro: a binary built before the sizes were), these fill the fields up to
 * cached_count, the layout they had then. */
int  (rap_allocator_stats)(rap_allocator *a, rap_stats *out);
int  (rap_allocator_resource_stats)(rap_allocator *a, rap_resource *r, rap_stats *out);
#define rap_allocator_stats(a, out) rap_allocator_stats_sized((a), (out), sizeof *(out))
#define rap_allocator_resource_stats(a, r, out)                                                    \
  rap_allocator_resource_stats_sized((a), (r), (out), sizeof *(out))
/* The high-water marks of a's statistics (high_watermark, actual_high_watermark, and per resource)
 * start again from the current values, as torch.cuda.reset_peak_memory_stats does. Counters that
 * steer a pool's own heuristics are not touched. RAP_ERR_UNSUPPORTED for a strategy without it. */
int  rap_allocator_reset_peaks(rap_allocator *a);
/* The memory under a's platform (the bottom of its chain): for HOST and PINNED the host's physical
 * memory (a control group's lower limit, if one is set) and what is available of it; for DEVICE,
 * DEVICE::N and UM the device's total and free memory. */
int  rap_allocator_memory_info(rap_allocator *a, size_t *free_bytes, size_t *total_bytes);
/* Device memory is used by its own device's streams only: a call with a resource of another device
 * is RAP_ERR_INVALID until that device is given access to the memory under a's chain (enable 1),
 * through CUDA's peer access (DEVICE::N), the pool's access (StreamOrdered) or the mappings'
 * (DEVICE_VMM); every allocator over the same platform follows. enable 0 refuses the device's
 * streams again (for DEVICE::N, CUDA's peer mapping between the two devices stays: other memory
 * may rely on it). RAP_ERR_UNSUPPORTED where the devices have no peer path or the memory is host
 * memory; RAP_OK, nothing to do, for pinned and managed memory, which every device reaches. */
int  rap_allocator_set_peer_access(rap_allocator *a, int device, int enable);
/* The address a kernel uses for a block of a: the block itself for DEVICE and UM memory, the
 * device's mapping of it for PINNED and Pinned(mapped=1) memory; RAP_ERR_INVALID for memory a
 * device cannot address (HOST). */
int  rap_device_pointer(rap_allocator *a, const void *ptr, void **out);

/* ---------------------------------------------------------------------------------------------
 * Sleep and wake: a ResourceAwarePool over a growable platform (DEVICE_VMM, HOST_VMM), alone or
 * under ThreadSafe, gives its physical memory back and keeps every address. Sleep waits for the
 * work of the resources that used its blocks (their events, never a device synchronize), copies
 * the live blocks to host memory (BACKUP; DISCARD copies nothing) and unmaps its chunks; free and
 * pending memory is never copied. While asleep, allocate, deallocate and record answer
 * RAP_ERR_BUSY, and so does destroy. Wake maps the chunks again and restores the live bytes: when
 * it returns the copies are done. A failed sleep leaves the pool awake, a failed wake leaves it
 * asleep with its backup intact: both may be tried again. Other allocators over the same platform
 * are not touched (docs/DESIGN.md).
 * ------------------------------------------------------------------------------------------- */
typedef enum rap_sleep_mode {
  RAP_SLEEP_BACKUP = 0,    /* live bytes kept in host memory (DEVICE_VMM: pageable, copied
                              through a small pinned ring by a few threads, RAP_SLEEP_THREADS) */
  RAP_SLEEP_DISCARD = 1,   /* nothing kept: the bytes after wake are undefined */
  RAP_SLEEP_PREPARE = 2,   /* no sleep: makes the backup for what is live now (DEVICE_VMM: pinned,
                              which later sleeps copy straight into); the pool stays awake */
  RAP_SLEEP_RELEASE = 3    /* no sleep: gives back the host memory an awake pool keeps for its
                              backup (rap_stats.backup_bytes); the next BACKUP sleep makes it again */
} rap_sleep_mode;
int  rap_allocator_sleep(rap_allocator *a, int mode);
int  rap_allocator_wake(rap_allocator *a);
int  rap_allocator_is_asleep(const rap_allocator *a);   /* 1 asleep, 0 awake (NULL: 0) */

/* ---------------------------------------------------------------------------------------------
 * Memory across processes (Linux). A block of a ResourceAwarePool over an exporting platform
 * (DeviceVmm(export=posix|fabric|auto), HostVmm(export=posix), StreamOrdered(pool=new,
 * export=posix)) is described by a descriptor of 64 bytes that the program sends however it likes
 * (a pipe, a socket, a file); another process
 * imports it (the pool's memory opened once per process through pidfd_getfd, which needs ptrace
 * permission over the exporter: docs/DESIGN.md), uses it on r and closes it. Each descriptor is
 * imported once; the exporter's free keeps the block pending until it was closed and the work the
 * importer queued on r before the close has passed, or the importer has ended. A descriptor that
 * will never be imported is taken back by its exporter with rap_ipc_revoke.
 * ------------------------------------------------------------------------------------------- */
typedef struct rap_ipc_desc { unsigned char bytes[64]; } rap_ipc_desc;
int  rap_ipc_export(rap_allocator *a, void *ptr, rap_ipc_desc *out);
int  rap_ipc_import(rap_manager *rm, const rap_ipc_desc *desc, rap_resource *r, void **out);
int  rap_ipc_close(rap_manager *rm, void *ptr, rap_resource *r);   /* r NULL: the import's */
int  rap_ipc_revoke(rap_allocator *a, const rap_ipc_desc *desc);   /* exporter: one nobody imported */

/* ---------------------------------------------------------------------------------------------
 * Segment observers: whoever registered a pool's memory elsewhere (NCCL's ncclCommRegister, an
 * RDMA registration) follows it. fn(ev, user) is called for each chunk of a pool (QuickPool,
 * DynamicPoolList, ResourceAwarePool) or each mapping of a growable platform (DEVICE_VMM,
 * HOST_VMM) when it is mapped or grows (after) and before it shrinks or is unmapped (a sleep, a
 * release, the allocator's destroy), so that a registrant can deregister first; a pool over a
 * growable platform tells HOLE before free pages inside a chunk go (at rap_release, and with
 * piece= before it would map past its peak) and FILL after they are mapped again. rap never unmaps memory without telling its observers. observe replays a MAP (replay 1) for every segment there
 * is, and a HOLE (replay 1) for each range of a chunk whose free pages went. fn runs under the allocator's lock, on the thread that mapped or unmapped: it must not call
 * into the allocator's chain (observe and unobserve from fn are RAP_ERR_BUSY; to ask whether the
 * memory is registrable there, use rap_allocator_registrable(a), which takes no lock, not
 * rap_pointer_registrable, which looks the pointer up under the locks fn runs under). After
 * unobserve returns fn is not called again. RAP_ERR_UNSUPPORTED for an allocator without segments
 * of its own (wrappers, DEVICE: observe the pool or the platform), RAP_ERR_EXISTS for (fn, user)
 * twice.
 * ------------------------------------------------------------------------------------------- */
typedef enum rap_segment_kind {
  RAP_SEGMENT_MAP = 1,      /* a new segment [base, base + size) */
  RAP_SEGMENT_GROW = 2,     /* the segment grew at its end by [addr, addr + bytes): size is the new size */
  RAP_SEGMENT_SHRINK = 3,   /* [addr, addr + bytes) at the segment's end is about to go; size is still
                               the old size (if less went, a GROW of what stayed follows) */
  RAP_SEGMENT_UNMAP = 4,    /* the whole segment is about to go */
  RAP_SEGMENT_HOLE = 5,     /* pages of [addr, addr + bytes), inside the segment, may be unmapped
                               after this (a pool giving back free pages; the segment stays) */
  RAP_SEGMENT_FILL = 6      /* [addr, addr + bytes), inside the segment, is mapped again */
} rap_segment_kind;
typedef struct rap_segment_event {
  int kind;                 /* rap_segment_kind */
  void *base;               /* the segment's first byte */
  size_t size;              /* its size: after MAP and GROW, before SHRINK and UNMAP */
  void *addr;               /* the bytes this event is about (MAP, UNMAP: the whole segment) */
  size_t bytes;
  int device;               /* the device the memory is on, -1 for host memory */
  int replay;               /* 1: a MAP (or a chunk's HOLE) replayed by rap_allocator_observe */
} rap_segment_event;
typedef void (*rap_segment_fn)(const rap_segment_event *ev, void *user);
int  rap_allocator_observe(rap_allocator *a, rap_segment_fn fn, void *user);
int  rap_allocator_unobserve(rap_allocator *a, rap_segment_fn fn, void *user);
/* RAP_OK when ptr's memory is made as NCCL's ncclMemAlloc makes it, so that NCCL can register it
 * (ncclCommRegister, ncclCommWindowRegister): device memory of a DeviceVmm(export=posix|fabric|
 * auto) at the bottom of its allocator's chain. Otherwise RAP_ERR_UNSUPPORTED with a sentence that
 * says what the memory is and which spec makes registrable memory; RAP_ERR_UNKNOWN_POINTER for a
 * pointer no allocator of rm handed out. */
int  rap_pointer_registrable(rap_manager *rm, const void *ptr);
int  rap_allocator_registrable(rap_allocator *a);   /* the same for the memory a hands out */

/* ---------------------------------------------------------------------------------------------
 * Resources (streams of execution). The host resource is borrowed from the manager.
 * ------------------------------------------------------------------------------------------- */
int  rap_resource_host(rap_manager *rm, rap_resource **out);
int  rap_resource_create_host_async(rap_manager *rm, rap_resource **out);   /* a CPU work queue */
int  rap_resource_submit(rap_resource *r, void (*fn)(void *), void *arg);  /* enqueue work on r */
int  rap_resource_synchronize(rap_resource *r);   /* wait until r's queued work has finished */
int  rap_resource_destroy(rap_resource *r);   /* synchronizes r first; not the host resource */
/* Call-scoped: r's stream may be destroyed as soon as any call given r has returned (RMM's rule
 * for its resources). Pools then record every event they need on r before such a call returns,
 * and never touch r's stream later; destroying r (or the manager) waits for the last event
 * recorded on r instead of synchronizing the stream. Costs one event record per free on r. Set it
 * before any allocator has seen r (RAP_ERR_BUSY after); not the host resource. StreamOrdered is
 * the exception: a free that names no resource frees on the block's own stream (cudaFreeAsync),
 * so free its blocks naming a live stream, as rap.hpp's memory_resource does. */
int  rap_resource_set_call_scoped(rap_resource *r, int on);
int  rap_resource_call_scoped(const rap_resource *r);   /* 1 if set, else 0 */
const char *rap_resource_kind(const rap_resource *r);   /* "host", "host_async", "cuda", ... */

RAP_API_END
#ifdef __cplusplus
}
#endif
#endif /* RAP_RAP_H */
