/* resource_aware_pool.h — what the ResourceAwarePool's two files share: its records, its
 * per-resource state, and the pending-block operations both need inline.
 *
 * resource_aware_pool.c is the strategy (allocate, deallocate, record, stats, check, life cycle,
 * sleep); resource_aware_pending.c is what brings pending memory back (fences, polling, host waits,
 * cross_resource=wait). The second calls nothing in the first.
 * Invariant: a pending block sits in its owner's FIFO, and in its owner's pending index exactly
 * when it has no uses and is not the owner's hot block (the one freed last); FIFO tags never
 * decrease.
 */
#ifndef RAP_RESOURCE_AWARE_POOL_H
#define RAP_RESOURCE_AWARE_POOL_H

#include "events/fence_ring.h"
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
  uint64_t tag;                      /* pending: the owner's batch number */
  uint64_t seq;                      /* pending: deallocation order across owners */
} ra_block;
_Static_assert(sizeof(ra_block) <= 120, "the ResourceAwarePool's block record stays within 120 bytes");

/* Every block of this pool's engine is an ra_block (rapi_bp_init was given its size): the one
 * place where the engine's record becomes the pool's. */
static inline ra_block *ra_of(rapi_block *b) { return (ra_block *)b; }
static inline const ra_block *ra_of_const(const rapi_block *b) { return (const ra_block *)b; }

typedef struct rapi_use {
  rstate *rs;
  uint64_t tag;                   /* rs's batch at the block's deallocation */
  struct rapi_use *next;
} rapi_use;

struct rstate {
  rap_resource *r;
  uintptr_t key;
  bool sync;                      /* the host: every point of it has passed */
  uint64_t open, done;            /* batches <= done have passed; open is not fenced yet */
  bool open_dirty;                /* something carries the open batch number */
  size_t open_count;              /* pending blocks of the open batch */
  unsigned ticks;                 /* deallocations, to poll now and then */
  rapi_fence_ring fences;         /* recorded batches not known to have passed */
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
  rstate *last;                   /* the resource of the last call: the hot path's lookup */
  rstate *recent[RA_RECENT];      /* the last few looked up in the hash: streams taking turns */
  unsigned recent_next;
  rstate *by_key;                 /* uthash on key */
  rapi_slab use_recs;
  rapi_bp bp;                     /* its free index last */
} ra_pool;

/* ---- batches and uses ------------------------------------------------------------------------ */

static inline bool passed(const rstate *rs, uint64_t tag) { return rs->sync || tag <= rs->done; }

/* A resource whose uses are fenced per block, not per batch (the ipc resource of an exporting
 * platform: platforms/ipc.c): a use of it carries its token in tag, is asked whether it passed,
 * and is never waited for. */
static inline bool per_block(const rstate *rs) { return rs->r->ops->use_passed != NULL; }

static inline bool capturing(const rstate *rs) {
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
  rs->open_count += b->tag == rs->open;
  p->bp.pending_bytes += b->base.size;
  p->bp.pending_count++;
}

/* ---- lent bytes ---------------------------------------------------------------------------------
 * A block freed on r takes its free neighbours into its pending block (merge_pending): those bytes
 * are lent to r's block, not freed by r, and sit at its two ends. The block keeps how many in its
 * record's requested field (the user's bytes while used, 0 while free or pending without any):
 * two counts of the pool's alignment, the front's in the high half. r's own takes from the front
 * shrink them; another resource that would otherwise grow or wait takes an end back (take_lent).
 * Counting fewer than there are is always safe: those bytes then wait for r's batch, as r's do.
 * Invariant: a pending block with lent bytes has no uses, and they add up to at most its size
 * (all of it, counted at its end, where its owner has taken every byte it freed). */
#define RA_LENT_HALF (sizeof(size_t) * 4)
#define RA_LENT_MAX ((((size_t)1) << RA_LENT_HALF) - 1)

static inline unsigned lent_shift(const ra_pool *p) { return (unsigned)__builtin_ctzll(p->bp.alignment); }
/* The bytes lent at the front and at the end, from a pending block's requested field. */
static inline size_t lent_lo(const ra_pool *p, size_t lent) { return (lent >> RA_LENT_HALF) << lent_shift(p); }
static inline size_t lent_hi(const ra_pool *p, size_t lent) { return (lent & RA_LENT_MAX) << lent_shift(p); }
/* An end too large to count (over 2^32 alignments on a 64-bit host) is counted as none. */
static inline void set_lent(const ra_pool *p, ra_block *b, size_t lo, size_t hi) {
  lo >>= lent_shift(p);
  hi >>= lent_shift(p);
  b->base.requested = ((lo <= RA_LENT_MAX ? lo : 0) << RA_LENT_HALF) | (hi <= RA_LENT_MAX ? hi : 0);
}

/* Takes b out of the pending state (and its lent bytes with it: the caller reads them first);
 * returns the FIFO position it held. */
static inline ra_block *drop_pending(ra_pool *p, rstate *rs, ra_block *b) {
  ra_block *at = b->fifo_prev;
  b->base.requested = 0;
  fifo_remove(rs, b);
  if (b == rs->hot) rs->hot = NULL;
  else if (b->uses == NULL) rapi_index_remove(&rs->pending, &b->base);
  rs->pending_bytes -= b->base.size;
  if (b->uses != NULL) rs->pending_uses_bytes -= b->base.size;
  rs->pending_count--;
  rs->open_count -= b->tag == rs->open;
  p->bp.pending_bytes -= b->base.size;
  p->bp.pending_count--;
  return at;
}

/* Most blocks have no uses: the test inline, the walk (and an export's drop) out of line. */
void rapi_ra_free_uses_slow(ra_pool *p, ra_block *b);
static inline void free_uses(ra_pool *p, ra_block *b) {
  if (RAPI_UNLIKELY(b->uses != NULL)) rapi_ra_free_uses_slow(p, b);
}

/* ---- resource_aware_pending.c ---------------------------------------------------------------- */

bool       rapi_ra_uses_passed(const ra_block *b);       /* every use of b has passed */
bool       rapi_ra_has_per_block_use(const ra_block *b);
int        rapi_ra_fence_open(ra_pool *p, rstate *rs);   /* one event for rs's open batch */
void       rapi_ra_drain(ra_pool *p, rstate *rs);        /* passed pending blocks to the free index */
int        rapi_ra_poll_all(ra_pool *p, bool record);    /* every resource: fence, query, drain */
int        rapi_ra_wait_all(ra_pool *p);                 /* host wait for every fence */
/* cross_resource=wait: rs waits for owner's batch and b's uses; the oldest fitting pending block */
int        rapi_ra_wait_for_block(ra_pool *p, rstate *rs, rstate *owner, ra_block *b, bool *host_waited);
ra_block  *rapi_ra_find_waitable(ra_pool *p, rstate *rs, size_t size, rstate **owner);

/* Moves rs->done past every fence that has completed, oldest first. */
static inline int rapi_ra_query_fences(rstate *rs) {
  return rapi_fence_ring_query(&rs->fences, rs->r, &rs->done);
}

#endif
