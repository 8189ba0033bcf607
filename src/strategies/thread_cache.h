/* thread_cache.h — what ThreadCache's two files share: the records, a thread's cache and its
 * slots and bins, the calling thread's ways to its caches, and the inline steps of the hot path.
 *
 * thread_cache.c is the strategy (allocate, deallocate, the cold calls, init and fini);
 * thread_cache_caches.c keeps the caches (finding or making a thread's cache, taking a slot, trims,
 * blocks on their way back to the parent, a thread's end). The second calls nothing in the first.
 * Locking rules are at the top of thread_cache.c.
 */
#ifndef RAP_THREAD_CACHE_H
#define RAP_THREAD_CACHE_H

#include "rap_internal.h"

#include <sched.h>

#define TC_SLOTS 8         /* resources one thread's cache keeps bins for at once */
#define TC_WAYS 4          /* instances a thread finds without any lock */
#define TC_MAX_CLASSES 96
#define TC_TP_BITS 10      /* an instance's table of threads' caches: 1024 entries, in pairs */

enum { TC_LIVE = 1, TC_CACHED, TC_XFREED, TC_GOING };

typedef struct tc_cache tc_cache;
typedef struct tc_rec {   /* one cache line each (the slab aligns them): no two threads share one */
  void *ptr;
  struct tc_rec *next;       /* in a bin, an xfree list or a batch being flushed */
  rap_resource *r;           /* allocated on; a cached block is pending on it */
  tc_cache *owner;           /* the cache it returns to */
  unsigned cls;
  int state;                 /* atomic: TC_LIVE, ... */
  int recorded;              /* atomic: used on another resource too (rap_record_resource) */
} tc_rec;

typedef struct tc_bin {
  tc_rec *head;
  size_t n;
} tc_bin;

typedef struct tc_slot {
  rap_resource *r;           /* NULL: unused */
  uint64_t used;             /* the cache's tick at its last use: the least recent goes first */
  tc_bin *bins;              /* one per class */
} tc_slot;

/* Blocks of one resource and class that threads' caches gave up (trims, evictions, a thread's
 * end), for any thread's next miss of that class on that resource: a cache's surplus goes here
 * before the parent, and a miss looks here before the parent, so that threads trade blocks
 * without the instance's lock (tcmalloc's transfer cache). Touched only by a thread inside its own
 * cache (entered or spun), so a walker, which holds every cache, sees no depot changing. */
/* Resources with depots at once, as many as a cache keeps bins for; others' surplus goes to the
 * parent. */
#define TC_DEPOT_RES TC_SLOTS
typedef struct tc_depot {
  int spin;                /* atomic: a leaf lock, held for a push or a pop */
  tc_rec *head;
  size_t n;
} tc_depot;

typedef struct thread_cache thread_cache;
typedef struct tc_thread tc_thread;
struct tc_cache {
  /* Its own thread's, on every call: kept off the lines other threads write. */
  uintptr_t tp;              /* atomic: its thread's pointer (rapi_self_thread), 0 when abandoned;
                                written only by that thread */
  int busy;                  /* atomic: its thread is inside, on its way without the spin */
  int walking;               /* atomic: another thread holds the spin and walks it (or slow_only) */
  int spin;                  /* atomic: the walkers' lock, and its thread's when walking is set */
  int slow_only;             /* no membarrier here: its thread always takes the spin */
  size_t bytes;              /* cached in the bins (their blocks: the bins' counts) */
  uint64_t tick;
  size_t misses, trims;      /* its thread's visits to the lock, for the debug log at the end */
  tc_slot slots[TC_SLOTS];
  /* The first slot's bins, inline: the hot paths find a bin at a fixed offset from the cache, with
   * no load of slots[0].bins between the cache and the block (the other slots' are one allocation). */
  tc_bin first_bins[TC_MAX_CLASSES];
  char gap1[64];
  /* Other threads': each free of a block this cache handed out reads abandoned and pushes. */
  tc_rec *xfree;             /* atomic: blocks freed by other threads */
  int abandoned;             /* atomic: its thread ended */
  char gap2[64];
  thread_cache *tc;
  tc_thread *thread;         /* the thread it belongs to, under registry; NULL when abandoned */
  tc_cache *inst_next;       /* the instance's list, under list_lock */
  tc_cache *thread_next;     /* the thread's list, under registry */
};

struct thread_cache {
  pthread_mutex_t lock;      /* the parent, the slab, the map's writes, the watch list */
  pthread_mutex_t list_lock; /* the list of caches */
  rap_allocator *self, *inner;
  rap_resource *host;        /* the manager's host resource: what a NULL resource means */
  uint64_t id;               /* never reused: a thread's ways hold ids, not pointers alone */
  rapi_ptr_map map;
  rapi_slab recs;
  tc_cache *caches;
  rapi_watch_set watched;   /* resources whose destroy must flush the caches first */
  size_t align;
  unsigned shift;            /* log2(align) */
  unsigned ncls;
  size_t max_size;           /* largest request cached: bigger ones go to the parent under the lock */
  size_t uncached;           /* live blocks handed out with no record (locked_allocate), under lock */
  size_t cap_bytes;          /* per thread */
  size_t cap_blocks;         /* per bin */
  size_t cls_size[TC_MAX_CLASSES];
  rap_resource *depot_r[TC_DEPOT_RES];   /* atomic: whose depots (NULL: free); cleared by walkers */
  tc_depot *depots;          /* TC_DEPOT_RES x ncls */
  size_t depot_bytes;        /* atomic: in every depot */
  size_t depot_cap_bytes;    /* shared_bytes: the bound of depot_bytes */
  size_t live_caches;        /* caches a running thread holds, under registry: at 0 the depots go back */
  int asleep;                /* atomic: the pool under it sleeps (rap_allocator_sleep through it):
                                every cache stays walked, so every call goes the slow way, which
                                refuses; set and cleared under a walk (rapi_tc_sleep) */
  /* The lock's use on the hot paths' slow ways (misses, flushes, uncached blocks), counted under it
   * when profile is set (debug logging on at init): for the debug line at the end. */
  bool profile;
  uint64_t lock_n, lock_wait_ns, lock_hold_ns, lock_hold_max_ns, lock_at_ns;
  /* atomic: threads' caches by their thread pointer, at its hash or the other entry of that pair;
   * &rapi_tc_nobody (thread pointer 0) where none. A hint for the hot paths only: an entry is used
   * only if the cache's tp is the caller's, so a stale or lost one costs a slow call, no more. */
  tc_cache *by_tp[1u << TC_TP_BITS];
};

/* ---- the lock on the slow ways ---------------------------------------------------------------- */

uint64_t rapi_tc_now_ns(void);
/* t->lock, as rapi_lock, with its wait and hold timed when t->profile is set. */
static inline void tc_lock(thread_cache *t, rapi_held *h) {
  if (RAPI_LIKELY(!t->profile)) {
    rapi_lock(&t->lock, h);
    return;
  }
  uint64_t t0 = rapi_tc_now_ns();
  rapi_lock(&t->lock, h);
  t->lock_at_ns = rapi_tc_now_ns();
  t->lock_n++;
  t->lock_wait_ns += t->lock_at_ns - t0;
}
static inline void tc_unlock(thread_cache *t, rapi_held *h) {
  if (RAPI_UNLIKELY(t->profile)) {
    uint64_t held = rapi_tc_now_ns() - t->lock_at_ns;
    t->lock_hold_ns += held;
    if (held > t->lock_hold_max_ns) t->lock_hold_max_ns = held;
  }
  rapi_unlock(h);
}
#define TC_LOCKED(st, t, call)                                                                     \
  do {                                                                                             \
    rapi_held held_;                                                                               \
    tc_lock((t), &held_);                                                                          \
    (st) = (call);                                                                                 \
    tc_unlock((t), &held_);                                                                        \
  } while (0)

/* ---- threads --------------------------------------------------------------------------------- */

struct tc_thread {
  uint64_t id[TC_WAYS];       /* the instances, most recently found first (0: none) */
  tc_cache *c[TC_WAYS];
  tc_cache *caches;          /* every cache of this thread, under registry */
  bool keyed;
};
/* The calling thread's ways to its caches. The default TLS model: linked into a program (librap.a)
 * the linker makes it an offset from the thread pointer; in librap.so it is a call to
 * __tls_get_addr. Initial-exec would make that an offset too, but it puts the library's whole TLS
 * (8 KiB, most of it the CUDA runtime's) in glibc's static reserve, which a librap.so loaded with
 * dlopen (Python's ctypes) cannot get. */
extern _Thread_local tc_thread rapi_tc_tls;
/* Tests only: runs while a batch is on its way to the parent; runs when a resource's end waits for
 * such a batch; caches made while set always take the spin (as where there is no membarrier). */
extern void (*rapi_tc_transit_hook)(void);
extern bool rapi_tc_spin_only;

/* A cache's spin: a leaf lock, never held while anything else is taken or the parent is called. */
void rapi_tc_spin_wait(int *spin);   /* contended: spins, then yields, until it has the spin */
static inline void spin_lock(tc_cache *c) {
  if (RAPI_UNLIKELY(__atomic_exchange_n(&c->spin, 1, __ATOMIC_ACQUIRE))) rapi_tc_spin_wait(&c->spin);
}
static inline void spin_unlock(tc_cache *c) { __atomic_store_n(&c->spin, 0, __ATOMIC_RELEASE); }

/* Its own thread's way into a cache, with no atomic read-modify-write: store busy, then see that
 * no walker is there. A walker (another thread that must read or change the cache: a release, a
 * check, a resource's end) takes the spin, sets walking, and makes every thread pass a full
 * barrier (membarrier(2)) before it looks at busy: so either it sees this thread's busy and waits
 * for it to leave, or this thread sees walking and goes the slow way, under the spin. Where there
 * is no membarrier, walking stays set and the thread always takes the spin. The guard of plain
 * pools (rap_internal.h) is built the same way. */
static inline bool cache_enter(tc_cache *c) {
  __atomic_store_n(&c->busy, 1, __ATOMIC_RELAXED);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);   /* the other half of the barrier is membarrier's */
  if (RAPI_LIKELY(__atomic_load_n(&c->walking, __ATOMIC_ACQUIRE) == 0)) return true;
  __atomic_store_n(&c->busy, 0, __ATOMIC_RELEASE);
  return false;
}
static inline void cache_leave(tc_cache *c) { __atomic_store_n(&c->busy, 0, __ATOMIC_RELEASE); }

extern tc_cache rapi_tc_nobody;   /* the empty entry of by_tp: no thread's */

static RAPI_INLINE size_t tp_home(uintptr_t tp) {
  return (size_t)(((uint64_t)tp * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - TC_TP_BITS));
}

/* The calling thread's cache of t (tp: its thread pointer) from the table, without TLS: the
 * thread pointer is one load in a shared library too, where a thread-local variable is a call to
 * __tls_get_addr that makes the hot path save every argument. *its is the cache's tp: not the
 * caller's where the table has none for it (then ask my_cache). */
static RAPI_INLINE tc_cache *cache_by_tp(const thread_cache *t, uintptr_t tp, uintptr_t *its) {
  size_t h = tp_home(tp);
  tc_cache *c = __atomic_load_n(&t->by_tp[h], __ATOMIC_ACQUIRE);
  *its = __atomic_load_n(&c->tp, __ATOMIC_RELAXED);
  if (RAPI_UNLIKELY(*its != tp)) {
    c = __atomic_load_n(&t->by_tp[h ^ 1], __ATOMIC_ACQUIRE);
    *its = __atomic_load_n(&c->tp, __ATOMIC_RELAXED);
  }
  return c;
}

/* The calling thread's cache of t, or NULL. The way found moves to the front, where the hot paths
 * look (only its own thread reads or writes a thread's ways). */
static inline tc_cache *my_cache(const thread_cache *t) {
  tc_thread *th = &rapi_tc_tls;
  uint64_t id = t->id;
  if (RAPI_LIKELY(th->id[0] == id)) return th->c[0];   /* a thread with one instance: one compare */
  for (int i = 1; i < TC_WAYS; i++)
    if (th->id[i] == id) {
      tc_cache *c = th->c[i];
      th->id[i] = th->id[0];
      th->c[i] = th->c[0];
      th->id[0] = id;
      th->c[0] = c;
      return c;
    }
  return NULL;
}

/* ---- slots and bins, under the cache's spin ---------------------------------------------------- */

static inline tc_slot *slot_find(tc_cache *c, rap_resource *r) {
  for (int i = 0; i < TC_SLOTS; i++)
    if (c->slots[i].r == r) {
      c->slots[i].used = ++c->tick;
      return &c->slots[i];
    }
  return NULL;
}

/* The newest block of a bin that has one, out of the cache's counts. */
static inline tc_rec *bin_pop(thread_cache *t, tc_cache *c, tc_bin *b, unsigned cls) {
  tc_rec *rec = b->head;
  b->head = rec->next;
  b->n--;
  c->bytes -= t->cls_size[cls];
  return rec;
}

static inline void bin_push(thread_cache *t, tc_cache *c, tc_slot *s, tc_rec *rec) {
  tc_bin *b = &s->bins[rec->cls];
  rec->next = b->head;
  b->head = rec;
  b->n++;
  c->bytes += t->cls_size[rec->cls];
}

/* ---- thread_cache_caches.c ---------------------------------------------------------------------- */

/* Under c's spin: a slot for r (the least recently used one's blocks go to *out). */
tc_slot  *rapi_tc_slot_assign(thread_cache *t, tc_cache *c, rap_resource *r, tc_rec **out);
/* Under c's spin: other threads' frees into c's bins (or *out). */
void      rapi_tc_drain_xfree(thread_cache *t, tc_cache *c, tc_rec **out);
/* Under c's spin: c back within its bounds, the surplus to *out. */
void      rapi_tc_trim(thread_cache *t, tc_cache *c, tc_slot *s, unsigned cls, tc_rec **out);
void      rapi_tc_flush_batch(thread_cache *t, tc_rec **batch);   /* to the parent, under lock */
/* Inside a cache of t (entered or spun): what of *list the depots take goes there, the rest stays. */
void      rapi_tc_deposit(thread_cache *t, tc_rec **list);
/* Under c's spin: up to want blocks of cls on s's resource from its depot into s's bin; how many. */
size_t    rapi_tc_withdraw(thread_cache *t, tc_cache *c, tc_slot *s, unsigned cls, size_t want);
void      rapi_tc_flush_all(thread_cache *t, rap_resource *r);    /* every cache's blocks (of r) */
/* Sleep and wake through the instance: every cache's blocks back to the pool first, then the pool
 * sleeps; while it sleeps every thread's call is refused on the slow way (t->asleep). */
int       rapi_tc_sleep(thread_cache *t, int mode);
int       rapi_tc_wake(thread_cache *t);
/* Under list_lock: every cache of t held by a walker (its spin taken, its thread out), and let go. */
void      rapi_tc_walk_begin(thread_cache *t);
void      rapi_tc_walk_end(thread_cache *t);
tc_cache *rapi_tc_cache_get(thread_cache *t);   /* the calling thread's cache, found or made */
void      rapi_tc_publish(thread_cache *t, tc_cache *c);   /* c (the caller's) into t's by_tp */
/* Every cache of t back to the parent, unlinked from its thread and freed; their counts summed. */
void      rapi_tc_caches_free(thread_cache *t, size_t *caches, size_t *misses, size_t *trims);

#endif
