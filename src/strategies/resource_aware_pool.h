/* resource_aware_pool.h — what the ResourceAwarePool's four files share: the rules, its records,
 * its per-resource state, and the pending-block operations they need inline.
 *
 * The rules, one line each, with the function that owns each:
 * - pending: a block freed on r is pending on r; r takes it back at once (its stream order makes
 *   that safe), another resource only once r has passed its batch (free_pending, add_pending).
 * - batch: blocks freed on r carry r's open batch; one event recorded later on r fences the whole
 *   batch, at once where fence_at (RAPI_EAGER_FENCE) blocks wait in it (fence_or_poll,
 *   rapi_ra_fence_open).
 * - call-scoped: r's stream may be gone once a call returns: fence_at is 1, so every free on r is
 *   fenced before it returns and never parked, and a use of r is fenced when recorded, its batch
 *   then kept (lookup_slow, ra_record_body); nothing later records on r (quiesce waits for its
 *   newest event).
 * - polling: fences are asked oldest first on misses and every RAPI_EAGER_FENCE-th free; what has
 *   passed goes back to the free index and merges (rapi_ra_poll_all, rapi_ra_drain).
 * - use: rap_record_resource adds a use on another resource; a pending block with uses is free only
 *   once its owner's batch and every use have passed, and is never split (ra_record, take_pending).
 * - hot block: the block freed last on a queue stays out of its owner's pending index, and the
 *   owner's next request of its size takes it whole (add_pending, rapi_ra_take_own_or_free).
 * - parked block: a free that changes nothing else waits in the engine's deferred slot; the
 *   owner's next request of its size takes it back, any other call first does the free (may_park,
 *   unpark, flush_parked).
 * - lent bytes: a freed block takes free neighbours into its pending block; those bytes are lent,
 *   and another resource that would grow or wait takes them back (merge_pending, take_lent).
 * - kept apart: one resource in grow mode: a block split off the hot block comes back alone, so
 *   that a stream's pair need not split and merge it every time (kept_apart).
 * - own joined: a miss joins the resource's own pending blocks with free neighbours before it grows
 *   (take_own_joined).
 * - poor fit: before cutting a request from a block over twice its size and a MiB larger while
 *   enough memory is pending, the pool polls first (poll_first).
 * - past peak: before mapping a free block's holes past the pool's peak, passed pending memory
 *   comes back first (past_peak).
 * - wait mode: cross_resource=wait queues a wait on the owner's fence instead of growing, above
 *   wait_above (rapi_ra_allocate_slow, rapi_ra_wait_for_block).
 * - a resource's end: its pending blocks become free, or pending on a resource that used them and
 *   has not passed that use (forget_resource, rehome).
 * - sleep: every fence waited for and every used block's resources fenced before the memory goes
 *   (quiesce).
 * Invariant: a pending block sits in its owner's FIFO, and in its owner's pending index exactly
 * when it has no uses and is not the owner's hot block; FIFO batches never decrease.
 *
 * The files, each calling only those after it: resource_aware_pool.c (the pair, and the table),
 * resource_aware_miss.c (what the pair does not serve), resource_aware_life.c (the table's other
 * entries), resource_aware_pending.c (uses, fences, polling, waits).
 */
#ifndef RAP_RESOURCE_AWARE_POOL_H
#define RAP_RESOURCE_AWARE_POOL_H

#include "events/batch_clock.h"
#include "pool/pool.h"

/* Pending blocks in one resource's open batch that make the pool fence the batch at once. */
#ifndef RAPI_EAGER_FENCE
#define RAPI_EAGER_FENCE 16
#endif

typedef struct rstate rstate;

#define RA_RECENT 4   /* resource states a lookup finds without the hash (four streams in turn) */

/* A block of this pool: the engine's record (72 B, first, so that the engine's functions take
 * &b->base and ra_of gives back the whole record) and what the ResourceAwarePool adds, 48 B: 120 B
 * in all, against 72 B for QuickPool's. */
typedef struct ra_block {
  rapi_block base;
  rstate *owner;                     /* used or pending: the owning resource's state */
  struct rapi_use *uses;             /* other resources it was recorded on (record_resource) */
  struct ra_block *fifo_prev, *fifo_next; /* pending: the owner's list in deallocation order */
  uint64_t batch;                    /* pending: the owner's batch (its clock's) */
  uint64_t seq;                      /* pending: deallocation order across owners */
} ra_block;
_Static_assert(sizeof(ra_block) <= 120, "the ResourceAwarePool's block record stays within 120 bytes");

/* Every block of this pool's engine is an ra_block (rapi_bp_init was given its size): the one
 * place where the engine's record becomes the pool's. */
static inline ra_block *ra_of(rapi_block *b) { return (ra_block *)b; }
static inline const ra_block *ra_of_const(const rapi_block *b) { return (const ra_block *)b; }

typedef struct rapi_use {
  rstate *rs;
  union {                         /* per_block(rs): the token rs gave; else rs's batch at the */
    uint64_t batch;               /* block's deallocation */
    uint64_t token;
  };
  struct rapi_use *next;
} rapi_use;

struct rstate {
  rap_resource *r;
  uintptr_t key;
  rapi_batch_clock clock;         /* its batches: open, passed, their fences (events/) */
  size_t open_count;              /* pending blocks of the open batch */
  unsigned ticks;                 /* deallocations, to poll now and then */
  unsigned fence_at;              /* open_count that fences: RAPI_EAGER_FENCE, 1 if call-scoped */
  uint64_t set_aside;             /* the wait_all call that may not wait for it (rapi_ra_wait_all) */
  ra_block *fifo_head, *fifo_tail;
  ra_block *hot;                  /* the last block freed here: pending, in the FIFO, not indexed */
  const ra_block *split_head;     /* the last hot block split for a smaller request, and what was */
  const ra_block *split_rem;      /* split off it: compared, never read (they may be stale) */
  /* used_count apart from used_bytes: beside it, GCC updates the two as one SSE pair, which costs
   * three instructions more on each half of the pair than two adds. */
  size_t current, hwm, used_bytes, pending_bytes, pending_count, used_count, uses_out;
  size_t pending_uses_bytes;      /* of pending_bytes, the blocks with uses (others' to wait for) */
  UT_hash_handle hh;
  /* Last, as the engine's free index in rapi_bp: 15 KiB that the pair does not touch, after the
   * fields it does (kept together in the first few cache lines). */
  rapi_index pending;             /* owned pending blocks without uses */
};

typedef struct ra_pool {          /* its own fields first, beside the engine's hot ones */
  bool cross_wait;
  size_t wait_above;              /* cross_resource=wait waits only once the pool holds this */
  size_t wait_pending_above;      /* ... and only while what the asker cannot take is above this */
  size_t waits, host_waits;       /* cross-resource waits made (queued or on the host), host ones */
  uint64_t free_seq;              /* deallocations so far: orders pending blocks across owners */
  uint64_t poor_polled;           /* free_seq at the last poll before a poor fit */
  uint64_t peak_polled;           /* free_seq at the last poll before mapping holes past the peak */
  uint64_t wait_all_calls;        /* rapi_ra_wait_all's calls so far */
  rstate *last;                   /* the resource of the last call: the hot path's lookup */
  rstate *recent[RA_RECENT];      /* the last few looked up in the hash: streams taking turns */
  unsigned recent_next;
  rstate *by_key;                 /* uthash on key */
  rapi_slab use_recs;
  rapi_bp bp;                     /* its free index last */
} ra_pool;

/* ---- batches and uses ------------------------------------------------------------------------ */

static inline bool passed(const rstate *rs, uint64_t batch) { return rapi_clock_passed(&rs->clock, batch); }

/* A resource whose uses are fenced per block, not per batch (the ipc resource of an exporting
 * platform: platforms/ipc.c): a use of it carries a token, not a batch, is asked whether it passed,
 * and is never waited for. */
static inline bool per_block(const rstate *rs) { return rs->r->ops->use_passed != NULL; }

/* A resource whose stream may be gone once a call with it returns (rap_resource_set_call_scoped). */
static inline bool scoped(const rstate *rs) { return rs->fence_at == 1; }

static inline bool rs_capturing(const rstate *rs) {
  return __atomic_load_n(&rs->r->capturing, __ATOMIC_RELAXED) != 0;
}

/* ---- pending blocks ------------------------------------------------------------------------- */

static inline void fifo_insert_after(rstate *rs, ra_block *at, ra_block *b) {
  b->fifo_prev = at;
  b->fifo_next = at ? at->fifo_next : rs->fifo_head;
  if (b->fifo_next) b->fifo_next->fifo_prev = b;
  else rs->fifo_tail = b;
  if (at) at->fifo_next = b;
  else rs->fifo_head = b;
}

static inline void fifo_remove(rstate *rs, ra_block *b) {
  if (b->fifo_prev) b->fifo_prev->fifo_next = b->fifo_next;
  else rs->fifo_head = b->fifo_next;
  if (b->fifo_next) b->fifo_next->fifo_prev = b->fifo_prev;
  else rs->fifo_tail = b->fifo_prev;
  b->fifo_prev = b->fifo_next = NULL;
}

/* hot: b is the block just deallocated; it stays out of the pending index, where the one it
 * replaces as rs->hot goes, so the common free-then-allocate-again pair skips the index. */
static inline void add_pending(ra_pool *p, rstate *rs, ra_block *b, ra_block *after, bool hot) {
  b->base.state = RAPI_PENDING;
  b->owner = rs;
  fifo_insert_after(rs, after, b);
  if (b->uses == NULL && hot) {
    if (rs->hot != NULL) rapi_index_insert(&rs->pending, &rs->hot->base);
    rs->hot = b;
  } else if (b->uses == NULL) {
    rapi_index_insert(&rs->pending, &b->base);
  }
  rs->pending_bytes += b->base.size;
  if (b->uses != NULL) rs->pending_uses_bytes += b->base.size;
  rs->pending_count++;
  rs->open_count += b->batch == rs->clock.open;
  p->bp.pending_bytes += b->base.size;
  p->bp.pending_count++;
}

/* ---- lent bytes ---------------------------------------------------------------------------------
 * A block freed on r takes its free neighbours into its pending block (merge_pending): those bytes
 * are lent to r's block, not freed by r, and sit at its two ends. The block keeps how many in its
 * record's lent field (a union with requested, the user's bytes while used; 0 while free or
 * pending without any): two counts of the pool's alignment, the front's in the high half. r's own
 * takes from the front shrink them; another resource that would otherwise grow or wait takes an
 * end back (take_lent).
 * Counting fewer than there are is always safe: those bytes then wait for r's batch, as r's do.
 * Invariant: a pending block with lent bytes has no uses, and they add up to at most its size
 * (all of it, counted at its end, where its owner has taken every byte it freed). */
#define RA_LENT_HALF (sizeof(size_t) * 4)
#define RA_LENT_MAX ((((size_t)1) << RA_LENT_HALF) - 1)

static inline unsigned lent_shift(const ra_pool *p) { return (unsigned)__builtin_ctzll(p->bp.alignment); }
/* The bytes lent at the front and at the end, from a pending block's lent field. */
static inline size_t lent_lo(const ra_pool *p, size_t lent) { return (lent >> RA_LENT_HALF) << lent_shift(p); }
static inline size_t lent_hi(const ra_pool *p, size_t lent) { return (lent & RA_LENT_MAX) << lent_shift(p); }
/* An end too large to count (over 2^32 alignments on a 64-bit host) is counted as none. */
static inline void set_lent(const ra_pool *p, ra_block *b, size_t lo, size_t hi) {
  lo >>= lent_shift(p);
  hi >>= lent_shift(p);
  b->base.lent = ((lo <= RA_LENT_MAX ? lo : 0) << RA_LENT_HALF) | (hi <= RA_LENT_MAX ? hi : 0);
}

/* Takes b out of the pending state (and its lent bytes with it: the caller reads them first);
 * returns the FIFO position it held. */
static inline ra_block *drop_pending(ra_pool *p, rstate *rs, ra_block *b) {
  ra_block *at = b->fifo_prev;
  b->base.lent = 0;
  fifo_remove(rs, b);
  if (b == rs->hot) rs->hot = NULL;
  else if (b->uses == NULL) rapi_index_remove(&rs->pending, &b->base);
  rs->pending_bytes -= b->base.size;
  if (b->uses != NULL) rs->pending_uses_bytes -= b->base.size;
  rs->pending_count--;
  rs->open_count -= b->batch == rs->clock.open;
  p->bp.pending_bytes -= b->base.size;
  p->bp.pending_count--;
  return at;
}

/* Most blocks have no uses: the test inline, the walk (and an export's drop) out of line. */
void rapi_ra_free_uses_slow(ra_pool *p, ra_block *b);
static inline void free_uses(ra_pool *p, ra_block *b) {
  if (RAPI_UNLIKELY(b->uses != NULL)) rapi_ra_free_uses_slow(p, b);
}

/* The lent bytes that a piece brings to the end of a block it joins on its far side: a free piece
 * all of its own, a pending one all of its own where every byte of it is lent, else its lent end
 * on that side (its other end is inside the merged block now: counted as the owner's). */
static inline size_t lent_of(const ra_pool *p, const rapi_block *nb, bool front) {
  if (nb->state == RAPI_FREE) return nb->size;
  size_t lo = lent_lo(p, nb->lent), hi = lent_hi(p, nb->lent);
  if (lo + hi >= nb->size) return nb->size;
  return front ? lo : hi;
}

/* The used map has room (rapi_bp_reserve before anything was taken): this cannot fail. */
static RAPI_INLINE int finish_allocate(ra_pool *p, rstate *rs, ra_block *b, size_t bytes, void **out) {
  rapi_bp_mark_used(&p->bp, &b->base, bytes);
  b->owner = rs;
  rs->current += bytes;
  rs->used_bytes += b->base.size;
  rs->used_count++;
  if (rs->current > rs->hwm) rs->hwm = rs->current;
  *out = b->base.ptr;
  return RAP_OK;
}

/* A parked block's free, done now where one is parked (see resource_aware_pool.c): through the
 * engine's flush, which calls the pair's flush_parked. */
static inline void unpark(ra_pool *p) {
  if (RAPI_UNLIKELY(p->bp.deferred != NULL)) rapi_bp_flush(&p->bp, false);
}

/* ---- resource_aware_miss.c ------------------------------------------------------------------- */

/* The better fit of rs's own pending blocks (the hot one whole first) and the free ones; NULL: a miss. */
ra_block  *rapi_ra_take_own_or_free(ra_pool *p, rstate *rs, size_t size);
/* The miss: poll, take own joined or lent memory, wait (wait mode), grow, host wait before OOM. */
int        rapi_ra_allocate_slow(ra_pool *p, rstate *rs, void **out, size_t bytes, size_t size);
/* Maps the free blocks' holes in [lo, end) again before they join a pending block; false: failed. */
bool       rapi_ra_fill_to_join(ra_pool *p, rapi_block *lo, rapi_block *end);

/* ---- resource_aware_life.c: the table's entries but allocate, deallocate, record ------------- */

int  rapi_ra_init(rap_allocator *self, void *state, rap_options *opts);   /* all but flush_deferred */
void rapi_ra_fini(rap_allocator *self, void *state);
int  rapi_ra_release(void *state);
int  rapi_ra_reset_peaks(void *state);
int  rapi_ra_stats(void *state, rap_stats *out);
int  rapi_ra_resource_stats(void *state, rap_resource *r, rap_stats *out);
int  rapi_ra_check(void *state);
int  rapi_ra_resource_gone(void *state, rap_resource *r, int commit);
int  rapi_ra_sleep(void *state, int mode);
int  rapi_ra_wake(void *state);

/* ---- resource_aware_pending.c ---------------------------------------------------------------- */

bool       rapi_ra_uses_passed(const ra_block *b);       /* every use of b has passed */
bool       rapi_ra_has_per_block_use(const ra_block *b);
void       rapi_ra_drop_uses_over(ra_pool *p, ra_block *b, rstate *rs);   /* per-block rs's, ended */
int        rapi_ra_fence_open(ra_pool *p, rstate *rs);   /* one event for rs's open batch */
void       rapi_ra_make_ready(ra_pool *p, rstate *rs, ra_block *b);   /* a passed one: free now */
void       rapi_ra_drain(ra_pool *p, rstate *rs);        /* passed pending blocks to the free index */
int        rapi_ra_poll_all(ra_pool *p, bool record);    /* every resource: fence, query, drain */
int        rapi_ra_wait_all(ra_pool *p);                 /* host wait for every fence */
/* cross_resource=wait: rs waits for owner's batch and b's uses; the oldest fitting pending block */
int        rapi_ra_wait_for_block(ra_pool *p, rstate *rs, rstate *owner, ra_block *b, bool *host_waited);
ra_block  *rapi_ra_find_waitable(ra_pool *p, rstate *rs, size_t size, rstate **owner);

/* Moves rs's clock past every fence that has completed, oldest first. */
static inline int rapi_ra_query_fences(rstate *rs) { return rapi_clock_query(&rs->clock, rs->r); }

#endif
