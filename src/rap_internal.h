/* rap_internal.h — what the library's files share, grouped by the file that defines it.
 *
 * Public types are completed here. Internal non-static names are rapi_<module>_<verb>.
 * Nothing here is installed.
 */
#ifndef RAP_INTERNAL_H
#define RAP_INTERNAL_H

#include <rap/rap.h>
#include <rap/strategy.h>

#include <pthread.h>
#include <stdlib.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* uthash keyed by pointers: a multiplicative hash beats the default Jenkins hash on this key.
 * Keys of any other length (the manager's name map) get FNV-1a over exactly keylen bytes. */
#define HASH_FUNCTION(keyptr, keylen, hashv)                                                       \
  do {                                                                                             \
    if ((keylen) == sizeof(uintptr_t)) {                                                           \
      uintptr_t k_;                                                                                \
      memcpy(&k_, (const void *)(keyptr), sizeof k_);                                              \
      k_ ^= k_ >> 29;                                                                              \
      k_ *= UINT64_C(0xbf58476d1ce4e5b9);                                                          \
      (hashv) = (unsigned)(k_ >> 32);                                                              \
    } else {                                                                                       \
      const unsigned char *s_ = (const unsigned char *)(const void *)(keyptr);                     \
      unsigned h_ = 2166136261u;                                                                   \
      for (size_t i_ = 0; i_ < (size_t)(keylen); i_++) h_ = (h_ ^ s_[i_]) * 16777619u;             \
      (hashv) = h_;                                                                                \
    }                                                                                              \
  } while (0)
/* uthash never aborts here: a failed table allocation sets rapi_hash_oom, and callers check it.
 * With nonfatal OOM uthash rolls a failed add back, so the dance is one macro: RAPI_HASH_TRY(ok,
 * HASH_ADD(...)) sets ok to whether the item went in (the table is unchanged otherwise). */
extern _Thread_local int rapi_hash_oom;
#define RAPI_HASH_TRY(ok, ...)                                                                     \
  do {                                                                                             \
    rapi_hash_oom = 0;                                                                             \
    __VA_ARGS__;                                                                                   \
    (ok) = !rapi_hash_oom;                                                                         \
  } while (0)
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (rapi_hash_oom = 1)
/* ---- core/host_mem.c: the seam for the library's own host allocations ----------------------
 * Everything rap allocates for itself goes through these (uthash too), so that a test can fail
 * the N-th call: rapi_host_fail_at(N, keep_failing), per thread; 0 turns it off. */
void *rapi_malloc(size_t bytes);
void *rapi_calloc(size_t n, size_t size);
void *rapi_realloc(void *p, size_t bytes);
char *rapi_strdup(const char *s);
char *rapi_strndup(const char *s, size_t n);
void  rapi_host_fail_at(long nth, bool keep_failing);
unsigned long rapi_host_allocs(void);   /* calls through the seam on this thread so far */
/* A test's seam in ThreadCache: called, when set, between a free from another thread reading that
 * the block's owner lives and pushing the block onto the owner's list. */
extern void (*rapi_tc_xpush_hook)(void);
#define uthash_malloc(sz) rapi_malloc(sz)
#define uthash_free(ptr, sz) free(ptr)
#include <uthash.h>

#if defined(__GNUC__)
#define RAPI_LIKELY(x) __builtin_expect(!!(x), 1)
#define RAPI_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define RAPI_NOINLINE __attribute__((noinline))
#define RAPI_INLINE inline __attribute__((always_inline))
#else
#define RAPI_INLINE inline
#define RAPI_LIKELY(x) (x)
#define RAPI_UNLIKELY(x) (x)
#define RAPI_NOINLINE
#endif

#define RAPI_NAME_MAX 256
#define RAPI_STR_(x) #x
#define RAPI_STR(x) RAPI_STR_(x)

/* ---- helpers ---------------------------------------------------------------------------------- */
static inline size_t rapi_align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }
static inline bool rapi_is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }


/* ---- core/status.c --------------------------------------------------------------------------- */
int  rapi_fail(int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void rapi_format_size(char *buf, size_t cap, size_t bytes);   /* "256 MiB", "1.5 KiB", "17 B" */
void rapi_log_read_env(void);   /* RAP_LOG_LEVEL again (tests); warns about a value that is no level */
static inline bool rapi_log_on(int level) { return level >= rap_log_get_level(); }

/* ---- core/trace.c (the level), core/allocator.c (the checks): debug levels -------------------
 * RAP_DEBUG in the environment, read when the first manager is made: 1 checks the preconditions
 * the code states with RAPI_ASSERT (a broken one is logged as an error and the public call it
 * happened in answers RAP_ERR_CORRUPT naming it); 2 also runs the allocator's invariant walker
 * (rap_allocator_check) after every public call on it, which then answers the walker's status if
 * the call left the allocator broken. Off (0), each costs one predictable branch. */
extern int rapi_debug;
void rapi_debug_read_env(void);
void rapi_assert_failed(const char *file, int line, const char *cond)
#if defined(__GNUC__)
    __attribute__((cold, noinline))
#endif
    ;
static inline int rapi_debug_level(void) { return __atomic_load_n(&rapi_debug, __ATOMIC_RELAXED); }
#define RAPI_ASSERT(cond)                                                                          \
  do {                                                                                             \
    if (RAPI_UNLIKELY(rapi_debug_level() > 0) && !(cond))                                         \
      rapi_assert_failed(__FILE__, __LINE__, #cond);                                               \
  } while (0)

/* ---- core/trace.c: the event trace -----------------------------------------------------------
 * rapi_slow is what the hot entry points test: nonzero when a debug level is set or a trace is
 * open, which sends every public call on an allocator through the checked path. A traced call
 * runs one level deeper (rapi_trace_depth): 0 is the user's call, 1 a pool asking its parent. */
extern int rapi_slow;
extern int rapi_tracing_on;
extern _Thread_local unsigned rapi_trace_depth;
static inline int  rapi_slow_calls(void) { return __atomic_load_n(&rapi_slow, __ATOMIC_RELAXED); }
static inline bool rapi_tracing(void) { return __atomic_load_n(&rapi_tracing_on, __ATOMIC_RELAXED); }
void rapi_slow_update(void);   /* after the debug level or the trace changed */
/* core/trace_stack.c: RAP_TRACE_STACK=N, the caller's frames on a user's alloc line. The checked
 * entry sets rapi_trace_caller (where rap_allocate returns to: the user's frame) before it traces. */
extern _Thread_local const void *rapi_trace_caller;
int    rapi_trace_stack_read_env(int *depth);   /* at a start: the frames asked for, or RAP_ERR_INVALID */
void   rapi_trace_stack_set(int depth);         /* once the start can no longer fail */
size_t rapi_trace_stack(char *line, size_t len, size_t cap);   /* appends ,"stack":"..." */
size_t rapi_trace_pystack(char *line, size_t len, size_t cap); /* ,"pystack":"..." (rap_trace_set_pystack) */
void rapi_trace_read_env(void);
/* One line: {"t":ns,"th":thread,"ev":ev,"a":name,"d":depth,"r":id,"rk":kind,"p":ptr,"n":n...};
 * r may be NULL ("r":null), p NULL (no "p"); fmt, if not NULL, adds fields (",\"k\":%zu"). */
void rapi_trace(const char *ev, const rap_allocator *a, const rap_resource *r, const void *p,
                size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7), cold, noinline))
#endif
    ;
#define RAPI_TRACE(...)                                                                            \
  do {                                                                                             \
    if (RAPI_UNLIKELY(rapi_tracing())) rapi_trace(__VA_ARGS__);                                    \
  } while (0)

/* ---- core/options.c -------------------------------------------------------------------------- */
typedef struct rapi_option {
  char *key, *value;
  bool used;
} rapi_option;
#define RAPI_OPTIONS_ASKED 16
struct rap_options {
  rapi_option *items;
  size_t count;
  const char *owner;   /* strategy name, for sentences */
  unsigned asked;      /* the keys init asked for, given or not: what a misspelt key is matched to */
  char asked_keys[RAPI_OPTIONS_ASKED][32];
};
int  rapi_options_parse(const char *text, const char *owner, rap_options *out);
int  rapi_options_add(rap_options *opts, const char *key, size_t klen, const char *value, size_t vlen);
int  rapi_options_check_unused(const rap_options *opts);
int  rapi_options_misspelt(const rap_options *opts);
size_t rapi_edit_distance(const char *a, const char *b);
/* Whether the key was written (and marks it read). A strategy tells "absent" by this, never by a
 * value of the option's own type standing for it: every value a user writes is used or refused. */
bool rapi_options_given(rap_options *opts, const char *key);
void rapi_options_free(rap_options *opts);
int  rapi_parse_size(const char *text, size_t *out);   /* RAP_OK or RAP_ERR_INVALID, no sentence */

/* ---- core/slab.c: fixed-size records from malloc'd slabs, never freed one by one ----------- */
typedef struct rapi_slab {
  void *free_list;
  void *slabs;           /* singly linked list of slab allocations */
  size_t object_size, per_slab, live;
} rapi_slab;
void  rapi_slab_init(rapi_slab *s, size_t object_size, size_t per_slab);
void *rapi_slab_alloc_slow(rapi_slab *s);
void  rapi_slab_destroy(rapi_slab *s);
static inline void *rapi_slab_alloc(rapi_slab *s) {
  void *p = s->free_list;
  if (RAPI_UNLIKELY(p == NULL)) return rapi_slab_alloc_slow(s);
  s->free_list = *(void **)p;
  s->live++;
  return p;
}
static inline void rapi_slab_free(rapi_slab *s, void *p) {
  *(void **)p = s->free_list;
  s->free_list = p;
  s->live--;
}

/* ---- core/ptr_map.c: live pointer -> its record (core/ptr_map.h) ---------------------------- */
#include "core/ptr_map.h"

/* ---- the types every layer shares: an allocator (core/allocator.c answers for any of them), a
 * resource and its events (events/, resources/), the manager (manager/) ------------------- */
#include "core/resizable.h"   /* a growable parent's contract: resize, sleep's backup, pieces */

/* The platform contract: what the memory at the bottom of a chain is and what it can do. A
 * platform's init fills one in (in its own state) and points self->platform at it; every
 * allocator made over it inherits that pointer at creation, as it inherits devices_ok (children go
 * before their parents, so it never dangles). platforms/platform.c and memory_info.c answer
 * memory info, peer access and device addresses from it, and the manager reads capture_ok: a new
 * platform fills one in and nothing else changes. A root that sets none (a user's strategy without
 * a parent) has NULL: its memory is unknown, and the questions say so. */
typedef enum rapi_memory {
  RAPI_MEMORY_HOST = 1,            /* pageable host memory: HOST, HOST_VMM */
  RAPI_MEMORY_DEVICE,              /* one device's memory: DEVICE::N, DEVICE_VMM, StreamOrdered */
  RAPI_MEMORY_PINNED,              /* page-locked host memory every device reaches: PINNED, Pinned */
  RAPI_MEMORY_MANAGED              /* memory that migrates, every device reaches it: UM */
} rapi_memory;
typedef enum rapi_source {
  RAPI_SOURCE_PLAIN = 0,           /* one runtime call an allocation (malloc, cudaMalloc, ...) */
  RAPI_SOURCE_VMM,                 /* mappings in a reserved range (HOST_VMM, DEVICE_VMM) */
  RAPI_SOURCE_STREAM_ORDERED       /* CUDA's stream-ordered pools (StreamOrdered) */
} rapi_source;
typedef struct rapi_platform {
  rap_allocator *root;             /* the platform allocator itself; NULL in a record that every
                                      instance shares (HOST's: nothing is asked of it) */
  rapi_memory memory;
  rapi_source source;
  int device;                      /* the device the memory is on (or whose context made it), -1 for
                                      host memory */
  bool capture_ok;                 /* it may serve a stream capturing a CUDA graph (StreamOrdered:
                                      CUDA makes its allocations the graph's memory nodes) */
  /* What it can do; NULL where the memory kind answers (host or device memory info, the block's
   * own address for device and managed memory). peer is asked only for device memory, after the
   * dispatcher checked that the device exists and has a path to this one. */
  int (*memory_info)(rap_allocator *root, size_t *free_bytes, size_t *total_bytes);
  int (*peer)(rap_allocator *root, int device, int enable);
  int (*device_pointer)(rap_allocator *a, const void *ptr, void **out);
  struct rapi_vmm *vmm;            /* a growable platform's engine, or NULL */
  const struct rapi_platform_export *exporter;   /* memory across processes (below), or NULL */
} rapi_platform;
/* A record's export entry (HostVmm, DeviceVmm, StreamOrdered): how platforms/ipc.c reaches the
 * platform, never by its symbols. options: what makes it export, for sentences; state: its shared
 * state, NULL without export=; locate: where a block a pool over it exports lies, or a sentence. */
struct rapi_ipc_place;   /* platforms/vmm.h */
typedef struct rapi_platform_export {
  const char *options;
  struct rapi_ipc_export *(*state)(rap_allocator *root);
  int (*locate)(rap_allocator *root, void *ptr, size_t bytes, struct rapi_ipc_place *out);
} rapi_platform_export;

/* The thread guard's limit: a pool handed from thread to thread this often is shared on purpose,
 * and its bias ends (allocator.c); each change of owner before it has a mark of its own. */
#define RAPI_GUARD_HANDOVERS 64
#define RAPI_GUARD_UNBIASED ((uintptr_t)1)   /* no thread's word: nobody is the owner again */

struct rap_allocator {
  const rap_strategy *strategy;   /* hot fields first */
  void *state;
  rap_manager *rm;
  uint64_t devices_ok;            /* atomic: the devices whose streams may use this memory, as bits:
                                     all for host memory, the device and the peers granted access
                                     for device memory (its platform record decides; see
                                     rap_allocator_set_peer_access in manager.c) */
  /* One thread at a time inside a plain pool (allocator.c, "the thread guard"): */
  uintptr_t owner;                /* atomic: the thread the guard is biased to with the slot of its
                                     mark in busy (rapi_guard_word), 0 before any, or
                                     RAPI_GUARD_UNBIASED */
  unsigned busy_slot;             /* atomic: the owner's slot (as in owner), for its way out */
  int gate;                       /* atomic: a thread not the owner is inside, or taking over */
  unsigned handovers;             /* under gate: changes of owner so far (the bias ends at a limit) */
  unsigned char busy[RAPI_GUARD_HANDOVERS];   /* atomic each: the owner that has this slot is
                                     inside a call; each change of owner takes a new slot */
  pthread_mutex_t *guard_lock;    /* the lock of the nearest ThreadSafe or ThreadCache above, or
                                     NULL: the manager takes it for its own calls into this
                                     allocator (find, a resource's destroy), and the thread guard
                                     stands aside under it */
  rap_allocator *parent;
  char *name;
  size_t alignment;
  size_t children;
  int guard_warned;               /* atomic: the guard said once that a free waited its turn */
  size_t holders;                 /* atomic: allocators over it, at any depth, that hand out its
                                     memory without asking it (not RAP_STRATEGY_PASS_THROUGH) */
  uint64_t seq;                   /* creation order: children are always newer than parents */
  rap_allocator *next;            /* manager's list, newest first */
  rap_oom_handler oom;            /* atomic; rap_allocator_set_oom_handler */
  void *oom_user;
  bool counts_calls;              /* a platform whose stats count its maps and unmaps (rap_stats'
                                     maps, unmaps: set by the tracked body, platforms/tracked.c) */
  bool capture_ok;                /* StreamOrdered, alone or under pass-through wrappers only: it
                                     may serve a resource that is capturing a graph */
  const rapi_resizable *resizable;   /* a growable platform's contract, set by its init; or NULL */
  const rapi_platform *platform;  /* the chain's platform record, inherited (above); or NULL */
  int asleep;                     /* atomic: rap_allocator_sleep was called on it, or on an
                                     allocator above it, and no wake since (destroy refuses) */
  struct rapi_observers *observers;   /* atomic: rap_allocator_observe's list, made at the first */
  const struct rapi_segments *segments;   /* set by an owner of segments (pools, growable
                                             platforms) at init: how observers replay them */
  void *segments_ctx;
  UT_hash_handle hh;              /* manager's name map */
};

/* ---- core/observe.c: segment observers (rap_allocator_observe) --------------------------------
 * An owner of segments sets a->segments at init; walk takes the lock its notifications run under,
 * calls locked(arg) (which subscribes), visits every segment there is (kind RAP_SEGMENT_MAP; a pool
 * with free pages given back follows a chunk's MAP with a RAP_SEGMENT_HOLE for each range of them),
 * and lets the lock go.
 * rapi_segment_notify tells a's observers (one atomic load when there are none). */
typedef struct rapi_segments {
  void (*walk)(rap_allocator *a, void *ctx, void (*locked)(void *arg),
               void (*visit)(void *arg, int kind, void *base, size_t size, void *addr, size_t bytes),
               void *arg);
  int device;                     /* the device the segments are on, -1 for the host; or
                                     RAPI_SEGMENT_DEVICE_OF_PARENT: the chain's root decides */
} rapi_segments;
#define RAPI_SEGMENT_DEVICE_OF_PARENT (-2)
void rapi_segment_notify_slow(rap_allocator *a, int kind, void *base, size_t size, void *addr,
                              size_t bytes);
static inline void rapi_segment_notify(rap_allocator *a, int kind, void *base, size_t size,
                                       void *addr, size_t bytes) {
  if (RAPI_UNLIKELY(__atomic_load_n(&a->observers, __ATOMIC_ACQUIRE) != NULL))
    rapi_segment_notify_slow(a, kind, base, size, addr, bytes);
}
void rapi_observers_free(rap_allocator *a);   /* the allocator goes (after its fini) */

/* ---- core/allocator.c: the thread guard of plain pools ---------------------------------------
 * A plain pool's allocate, deallocate, release and record_resource run inside RAPI_GUARDED: the
 * thread the guard is biased to (the owner) stores its mark (busy), checks it is still the owner
 * and runs; any other thread goes through rapi_guard_slow (the gate, membarrier, or RAP_ERR_BUSY
 * with the sentence; nothing at all under a ThreadSafe or ThreadCache). docs/DESIGN.md says why. */
enum { RAPI_GUARD_OWNER = 1, RAPI_GUARD_GATE = 2, RAPI_GUARD_NONE = 3 };   /* how a call came in */
int rapi_guard_slow(rap_allocator *a, uintptr_t me, const char *fn);   /* a mode, or a status */
/* membarrier(2): registered once (false where the kernel has none), then every running thread of
 * the process passes a full memory barrier before rapi_membarrier returns. ThreadCache's caches
 * use it the same way. */
bool rapi_membarrier_ready(void);
void rapi_membarrier(void);
static RAPI_INLINE uintptr_t rapi_self_thread(void) {
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && (defined(__x86_64__) || defined(__aarch64__))
  return (uintptr_t)__builtin_thread_pointer();
#else
  return (uintptr_t)pthread_self();
#endif
}
/* The owner word: the owner's thread in the low bits, the slot of its mark in busy in the top six
 * (user space pointers leave them clear on the 64-bit targets). A thread's mark is written by that
 * thread alone: a thread taken over between its read of the owner and its mark (preempted there)
 * writes its own slot when it goes on, never the next owner's. Where a pointer has no room (32-bit)
 * there is one slot and no pool is biased but under a wrapper, whose lock orders every call. */
#if UINTPTR_MAX > 0xffffffffu
#define RAPI_GUARD_CAN_BIAS 1
#define RAPI_GUARD_SLOT_SHIFT 58
static RAPI_INLINE uintptr_t rapi_guard_word(uintptr_t me, unsigned slot) {
  return (me & (((uintptr_t)1 << RAPI_GUARD_SLOT_SHIFT) - 1)) | (uintptr_t)slot << RAPI_GUARD_SLOT_SHIFT;
}
static RAPI_INLINE unsigned rapi_guard_slot(uintptr_t word) { return (unsigned)(word >> RAPI_GUARD_SLOT_SHIFT); }
static RAPI_INLINE bool rapi_guard_mine(uintptr_t word, uintptr_t me) {
  return ((word ^ me) << (64 - RAPI_GUARD_SLOT_SHIFT)) == 0;
}
#else
#define RAPI_GUARD_CAN_BIAS 0
static RAPI_INLINE uintptr_t rapi_guard_word(uintptr_t me, unsigned slot) { (void)slot; return me; }
static RAPI_INLINE unsigned rapi_guard_slot(uintptr_t word) { (void)word; return 0; }
static RAPI_INLINE bool rapi_guard_mine(uintptr_t word, uintptr_t me) { return word == me; }
#endif
/* The owner's way in, second half: given the owner word read first (seen), true when this thread
 * is the owner and is now inside (its mark stored, still the owner after it); false, with nothing
 * left stored, for everyone else. */
static RAPI_INLINE bool rapi_guard_owner_mark(rap_allocator *a, uintptr_t me, uintptr_t seen) {
  if (RAPI_UNLIKELY(!rapi_guard_mine(seen, me))) return false;
  unsigned char *mark = &a->busy[rapi_guard_slot(seen)];
  __atomic_store_n(mark, 1, __ATOMIC_RELAXED);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);   /* the other half of the barrier is membarrier's */
  if (RAPI_LIKELY(__atomic_load_n(&a->owner, __ATOMIC_ACQUIRE) == seen)) return true;
  __atomic_store_n(mark, 0, __ATOMIC_RELEASE);   /* taken over while coming in: its own mark only */
  return false;
}
static RAPI_INLINE bool rapi_guard_owner_in(rap_allocator *a, uintptr_t me) {
  return rapi_guard_owner_mark(a, me, __atomic_load_n(&a->owner, __ATOMIC_RELAXED));
}
/* The owner's way out: its slot is read again rather than carried across the call (it changes
 * only when another thread takes the pool over, never while the owner is inside). */
static RAPI_INLINE void rapi_guard_owner_out(rap_allocator *a) {
  __atomic_store_n(&a->busy[__atomic_load_n(&a->busy_slot, __ATOMIC_RELAXED)], 0, __ATOMIC_RELEASE);
}
/* The mode to leave with (rapi_guard_leave), or RAP_ERR_BUSY. */
static RAPI_INLINE int rapi_guard_enter(rap_allocator *a, const char *fn) {
  uintptr_t me = rapi_self_thread();
  if (RAPI_LIKELY(rapi_guard_owner_in(a, me))) return RAPI_GUARD_OWNER;
  return rapi_guard_slow(a, me, fn);
}
static RAPI_INLINE void rapi_guard_leave(rap_allocator *a, int mode) {
  if (RAPI_LIKELY(mode == RAPI_GUARD_OWNER)) rapi_guard_owner_out(a);
  else if (mode == RAPI_GUARD_GATE) __atomic_store_n(&a->gate, 0, __ATOMIC_RELEASE);
}
/* st = call, inside a's guard (the calls off the hot path). */
#define RAPI_GUARDED(st, a, fn, call)                                                              \
  do {                                                                                             \
    rap_allocator *g_ = (a);                                                                       \
    int m_ = rapi_guard_enter(g_, (fn));                                                           \
    if (RAPI_UNLIKELY(m_ < 0)) {                                                                   \
      (st) = m_;                                                                                   \
      break;                                                                                       \
    }                                                                                              \
    (st) = (call);                                                                                 \
    rapi_guard_leave(g_, m_);                                                                      \
  } while (0)
/* The hot entry points (allocate, deallocate): defines `decl name params` that runs body args
 * inside the guard of the allocator self (an expression of the parameters, read again after the
 * body rather than kept in a register across it). The owner's way is the body between two stores
 * and a check, with no mode carried across the call; everyone else goes to name_guarded, out of
 * line, so that its registers and its copy of the body cost the owner's way nothing. */
#define RAPI_GUARDED_ENTRY(decl, name, fn, self, body, params, args)                               \
  static RAPI_NOINLINE int name##_guarded params {                                                 \
    rap_allocator *g_ = (self);                                                                    \
    int m_ = rapi_guard_slow(g_, rapi_self_thread(), (fn));                                        \
    if (RAPI_UNLIKELY(m_ < 0)) return m_;                                                          \
    int st_ = body args;                                                                           \
    rapi_guard_leave(g_, m_);                                                                      \
    return st_;                                                                                    \
  }                                                                                                \
  decl name params {                                                                               \
    if (RAPI_LIKELY(rapi_guard_owner_in((self), rapi_self_thread()))) {                            \
      int st_ = body args;                                                                         \
      rapi_guard_owner_out(self);                                                                  \
      return st_;                                                                                  \
    }                                                                                              \
    return name##_guarded args;                                                                    \
  }

/* An event marks a point in a resource's queue; query says whether everything before it ran.
 * Events come from the resource's own free list: the hot path never creates or destroys one. */
typedef struct rapi_event rapi_event;
struct rapi_event {
  rap_resource *r;
  uint64_t seq;              /* host_async: position in the queue */
  void *handle;              /* cuda, hip: the cudaEvent_t or hipEvent_t */
  rapi_event *next_free;
};

typedef struct rapi_resource_ops {
  const char *kind;
  int  (*synchronize)(rap_resource *r);
  void (*close)(rap_resource *r);      /* stops the resource (worker, owned stream); may be NULL */
  void (*destroy)(rap_resource *r);    /* frees r itself, once nothing refers to it any more */
  int  (*submit)(rap_resource *r, void (*fn)(void *), void *arg);
  /* Events. record NULL: the resource is synchronous and every point of it has passed. */
  int  (*record)(rap_resource *r, rapi_event **out);
  int  (*query)(rapi_event *e);        /* 1 complete, 0 not yet, < 0 a status */
  int  (*event_synchronize)(rapi_event *e);   /* RAP_ERR_BUSY: the caller is the one to wait for */
  void (*event_release)(rapi_event *e);
  /* Makes r's later work wait for e without blocking the host: RAP_OK when queued, RAPI_HOST_WAIT
   * where the kinds allow no such wait (the caller then waits on the host: rapi_host_wait). */
  int  (*wait)(rap_resource *r, rapi_event *e);
  /* Uses fenced per block, not per batch (the ipc resource: platforms/ipc.c); NULL for every other
   * kind. A pool that records a block on such a resource gets a token for that block from bind
   * (ptr, its bytes), asks passed(token) (1 passed, 0 not yet) where it would query a batch's
   * event, never waits for it, and calls drop(token) when the use record goes. over(token) says,
   * without a system call, whether the use has ended for good (1): the pool then drops the use of
   * a block that lives on, so that a block bound again and again keeps only the uses that may
   * still hold it. */
  int  (*use_bind)(rap_resource *r, void *ptr, size_t bytes, uint64_t *token);
  int  (*use_passed)(rap_resource *r, uint64_t token);
  void (*use_drop)(rap_resource *r, uint64_t token);
  int  (*use_over)(rap_resource *r, uint64_t token);
} rapi_resource_ops;
#define RAPI_HOST_WAIT 1

/* A pool that keeps state for a resource, so that destroying the resource visits it alone. */
typedef struct rapi_watch {
  rap_allocator *a;
  struct rapi_watch *next;
} rapi_watch;

/* Lifetime: the manager's list holds one reference, and so does everything that may still look
 * at the resource's events after it was destroyed (a wait queued on another resource, a host wait
 * with locks let go); the memory goes when the last reference does. */
struct rap_resource {
  const rapi_resource_ops *ops;
  rap_manager *rm;
  uint64_t id;
  uintptr_t key;                   /* stream identity: equal keys are one stream of execution */
  int capturing;                   /* atomic: a graph capture begun through rap is under way (read
                                      by every call with a resource: on the line of rm and key) */
  uint64_t devbit;                 /* a GPU stream's device as a bit (1 << device, devices 0..63);
                                      0 for the host and CPU queues: checked against an allocator's
                                      devices_ok by every call with a resource */
  rap_resource *prev, *next;       /* manager's list of created resources */
  pthread_mutex_t event_lock;      /* the free list of events and the watch list */
  rapi_event *free_events;
  size_t events_created;
  int refs;                        /* atomic */
  int waits_queued;                /* atomic: host_async waits queued here and not yet run */
  rapi_watch *watchers;            /* pools with state for this resource */
  int call_scoped;                 /* its stream may be gone once a call with it returned: pools
                                      fence at each call, nothing touches the stream later */
  pthread_mutex_t newest_lock;     /* call_scoped: a record and newest change together */
  rapi_event *newest;              /* call_scoped: the event recorded on it last, or NULL */
};

/* ---- locks a thread holds, for waits that must let them go --------------------------------
 * Wrapper locks (ThreadSafe, the tracked pass-through body) and the manager's lock are taken with
 * rapi_lock, which notes them on a per-thread stack. A pool that must block the host for another
 * resource's event (rapi_host_wait) lets every noted lock go while it waits and takes them back
 * after, outermost first: work on that resource may itself need those locks (a queue's work
 * freeing through the same ThreadSafe), and holding them would deadlock. The pool starts over
 * after such a wait, since others may have changed it meanwhile. */
typedef struct rapi_held {
  pthread_mutex_t *m;
  struct rapi_held *below;
} rapi_held;
extern _Thread_local rapi_held *rapi_held_top;
static inline void rapi_lock(pthread_mutex_t *m, rapi_held *h) {
  pthread_mutex_lock(m);
  h->m = m;
  h->below = rapi_held_top;
  rapi_held_top = h;
}
static inline void rapi_unlock(rapi_held *h) {
  rapi_held_top = h->below;
  pthread_mutex_unlock(h->m);
}
/* st = call, made with m held (rapi_lock): the wrappers' way into what they wrap. */
#define RAPI_LOCKED(st, m, call)                                                                   \
  do {                                                                                             \
    rapi_held held_;                                                                               \
    rapi_lock((m), &held_);                                                                        \
    (st) = (call);                                                                                 \
    rapi_unlock(&held_);                                                                           \
  } while (0)

/* ---- events/event_pool.c --------------------------------------------------------------------- */
void rapi_event_pool_init(rap_resource *r);
rapi_event *rapi_event_pool_get(rap_resource *r);   /* NULL: caller must create one */
void rapi_event_pool_put(rap_resource *r, rapi_event *e);
void rapi_event_pool_fini(rap_resource *r, void (*destroy_handle)(void *));
/* Blocks the host until e has completed, with every lock of this thread let go meanwhile (above).
 * e may be recycled by others during the wait: a copy is waited on, and its resource is kept.
 * RAP_ERR_BUSY, from a queue's work: e is of that queue (it would wait for itself), or of another
 * queue that has waits of its own queued (they may be for this queue: both would hang). */
int  rapi_host_wait(const rapi_event *e);
/* Every record of an event on r goes through here: on a call-scoped r it becomes r's newest. */
int  rapi_resource_record(rap_resource *r, rapi_event **out);
/* *copy: a point of r past all its work that rap knows of, to wait on (rapi_host_wait): an event
 * recorded now and given back at once (a copy stays good to wait on, as rapi_host_wait's does);
 * on a call-scoped r, whose stream may be gone, a copy of its newest event. *any false: none. */
int  rapi_resource_mark(rap_resource *r, rapi_event *copy, bool *any);
/* Waits on the host until r's work has passed: synchronizes r, or, call-scoped, waits for its
 * newest event (its stream is never touched). */
int  rapi_resource_wait_done(rap_resource *r);
void rapi_resource_ref(rap_resource *r);
void rapi_resource_unref(rap_resource *r);
/* A strategy's set of the resources it watches, each once (the host is never added): add watches r
 * the first time it comes; forget unwatches it and takes it out; clear forgets them all. */
typedef struct rapi_watch_set {
  rap_resource **r;
  size_t n, cap;
} rapi_watch_set;
int  rapi_watch_set_add(rapi_watch_set *s, rap_resource *r, rap_allocator *self);
void rapi_watch_set_forget(rapi_watch_set *s, rap_resource *r, rap_allocator *self);
void rapi_watch_set_clear(rapi_watch_set *s, rap_allocator *self);
/* The host_async queue whose work function this thread is running, or NULL (defined with the
 * thread guard in core/allocator.c, the lowest layer that asks; resources/host_async.c sets it). */
extern _Thread_local rap_resource *rapi_current_queue;

typedef struct rapi_strategy_entry {
  const rap_strategy *strategy;
  struct rapi_strategy_entry *next;
} rapi_strategy_entry;

struct rap_manager {
  pthread_mutex_t lock;            /* registry operations only; never taken on the hot path */
  rap_allocator *allocators;       /* newest first */
  rap_allocator *by_name;          /* uthash on name */
  rapi_strategy_entry *custom;     /* strategies registered at run time */
  rap_resource host;               /* the one synchronous host resource */
  rap_resource *resources;         /* created resources */
  uint64_t next_seq, next_resource_id;
  struct rapi_ipc_importer *ipc;   /* pools of other processes opened here (platforms/ipc_import.c) */
};

/* ---- platforms/platform.c: the questions the platform record answers -----------------------
 * devices_ok bits: 1 << device for devices 0..63 (a device past 63 is never refused). */
static inline uint64_t rapi_device_bit(int device) {
  return device >= 0 && device < 64 ? (uint64_t)1 << device : 0;
}
/* Gives (enable 1) or takes back (0) device's access to the memory under a's chain; RAP_OK and
 * nothing done where every device reaches it already (pinned, managed). Sets *owner to the device
 * the memory is on, or -1 for memory every device reaches. */
int  rapi_platform_peer_access(rap_allocator *a, int device, int enable, int *owner);
bool rapi_platform_in_range(const rap_allocator *x, const void *ptr);   /* x growable, ptr in its range */
/* registrable.c: OK where NCCL can register a's memory (a DeviceVmm made with export=), else a
 * status and a sentence that starts with who. */
int  rapi_platform_registrable(rap_allocator *a, const char *who);

/* ---- platforms/ipc_import.c: what the manager's destroy calls, after its resources are synchronized:
 * closes every block and pool this manager imported from other processes. */
void rapi_ipc_manager_fini(rap_manager *rm);
/* What rap_resource_destroy asks first: RAP_ERR_BUSY, naming the block, while an import given r
 * is open (a close without a resource uses r); else RAP_OK. */
int  rapi_ipc_resource_busy(rap_resource *r);

/* ---- resources/resource.c: the manager's list of created resources ------------------------- */
void rapi_resource_link(rap_manager *rm, rap_resource *r);
void rapi_resource_unlink(rap_manager *rm, rap_resource *r);

/* ---- manager/manager.c: make one allocator, no environment override (spec.c is the front door,
 * rap_allocator_make included, and builds chains from this) --------------------------------- */
int  rapi_allocator_make_direct(rap_manager *rm, const char *name, const char *strategy,
                                const char *parent, const char *options, rap_allocator **out);

/* ---- manager/registry.c: the built-in strategies and platform allocators ------------------- */
const rap_strategy *rapi_registry_builtin(const char *name);
/* Platform allocator by name: fills *strategy and the options text; RAP_ERR_NOT_FOUND if none. */
int  rapi_registry_platform(const char *name, const rap_strategy **strategy, char *opts, size_t cap);
void rapi_registry_names(char *buf, size_t cap);   /* the built-in strategies, for sentences */
const char *rapi_registry_closest(const char *name); /* a built-in one slip from name, or NULL */
void rapi_env_var(const char *name, char *var, size_t cap);   /* RAP_ALLOCATOR_<NAME> of a name */

/* ---- platforms/tracked.c: the tracked pass-through body ---------------------------------------
 * Allocators that hand out raw memory from somewhere else and track every live pointer: the
 * platform allocators (HOST, the CUDA ones: their raw operations are malloc, cudaMalloc, ...) and
 * the wrappers Fault and SizeLimiter (theirs pass the request to the parent). One body: a locked map
 * pointer -> record, the statistics, and two raw operations; safe for concurrent callers. A table
 * takes every method from RAPI_TRACKED_METHODS, so all of them answer the optional calls alike. */
typedef struct rapi_prec {
  void *ptr;
  size_t bytes;
} rapi_prec;
typedef struct rapi_tracked rapi_tracked;
struct rapi_tracked {
  pthread_mutex_t lock;
  rapi_ptr_map map;                /* live pointer -> its rapi_prec */
  rapi_slab recs;
  size_t current, hwm, count, actual, actual_hwm;
  size_t raw_allocs, raw_frees;    /* calls to the backend that succeeded (rap_stats' maps) */
  /* r is passed through by wrappers (Fault, SizeLimiter) and ignored by real platforms. */
  int (*raw_alloc)(rapi_tracked *p, void **out, size_t bytes, rap_resource *r);
  int (*raw_free)(rapi_tracked *p, void *ptr, size_t bytes, rap_resource *r);
  rap_allocator *self;
  void *impl;   /* the backend's own state */
  bool pass_through;   /* a wrapper (Fault, SizeLimiter): zero bytes go to the parent as zero */
};
/* The one init: impl is the backend's state (freed with the allocator, also when init fails);
 * pass_through for wrappers; alignment is what every pointer it returns is aligned to. */
int  rapi_tracked_init(rapi_tracked *p, rap_allocator *self, void *impl,
                       int (*raw_alloc)(rapi_tracked *, void **, size_t, rap_resource *),
                       int (*raw_free)(rapi_tracked *, void *, size_t, rap_resource *),
                       bool pass_through, size_t alignment);
void rapi_tracked_fini(rap_allocator *self, void *state);
int  rapi_tracked_allocate(void *state, void **out, size_t bytes, rap_resource *r);
int  rapi_tracked_deallocate(void *state, void *ptr, rap_resource *r);
int  rapi_tracked_stats(void *state, rap_stats *out);
int  rapi_tracked_reset_peaks(void *state);
int  rapi_tracked_owns(void *state, const void *ptr);
int  rapi_tracked_check(void *state);
int  rapi_tracked_record_resource(void *state, void *ptr, rap_resource *r);
int  rapi_tracked_pointer_resource(void *state, const void *ptr, rap_resource **out);
int  rapi_tracked_release(void *state);   /* wrappers: release the parent; platforms: nothing */
#define RAPI_TRACKED_METHODS                                                                       \
  .fini = rapi_tracked_fini, .allocate = rapi_tracked_allocate,                                    \
  .deallocate = rapi_tracked_deallocate, .stats = rapi_tracked_stats, .owns = rapi_tracked_owns,   \
  .release = rapi_tracked_release, .check = rapi_tracked_check,                                    \
  .record_resource = rapi_tracked_record_resource,                                                 \
  .pointer_resource = rapi_tracked_pointer_resource, .reset_peaks = rapi_tracked_reset_peaks

/* ---- strategies, one table each -------------------------------------------------------------- */
extern const rap_strategy rapi_quick_pool_strategy;
/* quick_pool.c's methods, shared with DynamicPoolList, which differs only in its free index. */
void rapi_quick_pool_fini(rap_allocator *self, void *state);
int  rapi_quick_pool_allocate(void *state, void **out, size_t bytes, rap_resource *r);
int  rapi_quick_pool_deallocate(void *state, void *ptr, rap_resource *r);
int  rapi_quick_pool_release(void *state);
int  rapi_quick_pool_stats(void *state, rap_stats *out);
int  rapi_quick_pool_reset_peaks(void *state);
int  rapi_quick_pool_owns(void *state, const void *ptr);
int  rapi_quick_pool_check(void *state);
extern const rap_strategy rapi_fault_strategy;
extern const rap_strategy rapi_resource_aware_pool_strategy;
/* A wrapper's figures (ThreadSafe, ThreadCache): out holds its inner allocator's, own the blocks
 * live through the wrapper, which it counts itself. Those are its live blocks, whatever else the
 * inner holds (a platform or a pool shared with other allocators: docs/DESIGN.md). The byte
 * figures stay the inner's, which are the wrapper's own while the inner holds nothing for others;
 * a wrapper keeps no sizes, so where the inner does, its live bytes are zero with no block of its
 * own live, and the inner's, a bound from above, with some. */
static inline void rapi_stats_own(rap_stats *out, size_t own) {
  if (own == 0 && out->allocation_count > 0) out->current_bytes = out->used_bytes = 0;
  out->allocation_count = own;
}
extern const rap_strategy rapi_thread_safe_strategy;
extern const rap_strategy rapi_thread_cache_strategy;
extern const rap_strategy rapi_size_limiter_strategy;
extern const rap_strategy rapi_fixed_pool_strategy;
extern const rap_strategy rapi_dynamic_pool_list_strategy;
extern const rap_strategy rapi_planned_strategy;           /* planned.c: Planned(plan=FILE) */
extern const rap_strategy rapi_stream_ordered_strategy;   /* platforms/stream_ordered.c */
extern const rap_strategy rapi_host_vmm_strategy;         /* platforms/vmm.c: HostVmm */
extern const rap_strategy rapi_device_vmm_strategy;       /* platforms/vmm_device.c: DeviceVmm */
/* ---- platforms/tracked.c (HOST), platforms/cuda_platform.c (or no_gpu_platform.c) ---------- */
extern const rap_strategy rapi_host_platform;
extern const rap_strategy rapi_pinned_strategy;   /* Pinned(portable, mapped, write_combined) */
extern const rap_strategy rapi_cuda_platform;   /* DEVICE, DEVICE::N, PINNED, UM; or HIP's */
extern const rapi_resource_ops rapi_host_resource_ops;
/* platforms/memory_info.c: the host's physical memory (or its control group's lower limit) and
 * what is available of it. */
int  rapi_host_memory_info(size_t *free_bytes, size_t *total_bytes);

/* ---- resources/gpu_device.c (no_cuda.c where there is no GPU backend): the devices ----------- */
bool rapi_cuda_compiled(void);
/* The device count, or RAP_ERR_UNSUPPORTED saying why none is usable (no driver, a driver too old,
 * no device). */
int  rapi_cuda_devices(const char *who, int *count);
/* RAP_OK if device N is there, else UNSUPPORTED (none usable) or NOT_FOUND, with a sentence naming
 * self. */
int  rapi_gpu_device_exists(rap_allocator *self, uint64_t device);
/* A device's free and total memory; a sentence starting with who if the runtime fails. */
int  rapi_gpu_device_memory(const char *who, int device, size_t *free_bytes, size_t *total_bytes);
/* RAP_OK if device's streams can be given own's memory (a peer path), else UNSUPPORTED. */
int  rapi_gpu_can_access_peer(const char *who, int device, int own);
/* Memory across processes, CUDA only: a bus id's device here, a device's PCI bus id; interprocess
 * events, recorded by an importer (cuda_resource.c), opened once and queried (1, 0 or a status). */
int  rapi_gpu_device_by_bus_id(const char *bus_id, int *device);
int  rapi_gpu_bus_id(int device, char *bus_id, size_t cap);
int  rapi_gpu_ipc_event_record(rap_resource *r, unsigned char handle[64], void **event);
int  rapi_gpu_ipc_event_synchronize(void *event);
void rapi_gpu_ipc_event_destroy(void *event);
int  rapi_gpu_ipc_event_query(const unsigned char handle[64], void **opened);
void rapi_gpu_ipc_event_close(void *opened);

#endif /* RAP_INTERNAL_H */
