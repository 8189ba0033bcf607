/* resource_aware_pool.c — ResourceAwarePool: a QuickPool that knows which stream used each block.
 *
 * Every block is free, used or pending, and used and pending blocks have an owning resource. A
 * block deallocated on resource r is pending on r: r may take it back at once (its own stream
 * order makes that safe, with no event and no driver call), any other resource only once r has
 * passed the point of the deallocation. Those points are batches: blocks freed on r carry r's open
 * batch number, and one event recorded later on r fences the whole batch. Events are recorded
 * when some caller needs the memory back (a miss, rap_release, out of memory) or once a batch
 * holds RAPI_EAGER_FENCE blocks, and are polled head-first per resource on misses and now and then
 * on deallocation, so pending memory comes back without anyone asking for it
 * (resource_aware_pending.c). rap_record_resource adds uses on other resources, each fenced the
 * same way on its resource. The records and the invariant are in resource_aware_pool.h.
 */
#include "strategies/resource_aware_pool.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the parked block ------------------------------------------------------------------------
 * The block freed last waits in the engine's deferred slot (state DEFERRED, its owner kept) when
 * nothing about its free has to happen at once: on the host resource when the free cannot make a
 * heuristic fire or a chunk's end shrink; on a queue when it would become the owner's hot block
 * joined to no neighbour, with no fence to record or poll. The owner's next request of its size
 * takes it back as it is; anything else first settles it (settle_parked: the free done then, on
 * the state the free left, so as it would have been done at once). The next call of any kind
 * settles it: every entry point below but owns, pointer_resource, check and reset_peaks, which
 * change nothing it depends on, and the engine's flush (flush_parked) where a parent or a host
 * wait let this thread's locks go and another thread parked a block meanwhile. */
static RAPI_NOINLINE void settle_parked(ra_pool *p);
static inline void settle(ra_pool *p) {
  if (RAPI_UNLIKELY(p->bp.deferred != NULL)) settle_parked(p);
}

/* ---- resources ------------------------------------------------------------------------------ */

/* Not the last call's resource: one of the few before it (streams taking turns: no hash lookup),
 * else the hash, else a new state. */
static RAPI_NOINLINE rstate *lookup_slow(ra_pool *p, rap_resource *r) {
  if (p->bp.asleep) return NULL;   /* the callers tell this from out of memory */
  settle(p);   /* before a new state: how the parked block merges depends on how many there are */
  rstate *rs = NULL;
  for (unsigned i = 0; i < RA_RECENT; i++)
    if (p->recent[i] != NULL && p->recent[i]->key == r->key) {
      p->last = p->recent[i];
      return p->last;
    }
  HASH_FIND(hh, p->by_key, &r->key, sizeof r->key, rs);
  if (rs == NULL) {
    rs = rapi_calloc(1, sizeof *rs);
    if (rs == NULL) return NULL;
    rs->r = r;
    rs->key = r->key;
    rs->sync = r->ops->record == NULL;
    rs->open = 1;
    /* The resource learns of this pool, so that its destroy visits it (the host: a no-op). */
    if (rap_resource_watch(r, p->bp.self) != RAP_OK) {
      free(rs);
      return NULL;
    }
    bool added;
    RAPI_HASH_TRY(added, HASH_ADD(hh, p->by_key, key, sizeof rs->key, rs));
    if (!added) {
      rap_resource_unwatch(r, p->bp.self);
      free(rs);
      return NULL;
    }
  }
  p->recent[p->recent_next++ % RA_RECENT] = rs;
  p->last = rs;
  return rs;
}

/* A NULL lookup: asleep (p->last is NULL then, so every call comes here), or out of memory. */
static RAPI_NOINLINE int no_rstate(ra_pool *p, const char *fn) {
  if (p->bp.asleep) return rapi_bp_asleep_refusal(&p->bp, fn);
  return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for resource state",
                   rap_allocator_name(p->bp.self));
}

static inline rstate *lookup(ra_pool *p, rap_resource *r) {
  if (RAPI_LIKELY(p->last != NULL && p->last->key == r->key)) return p->last;
  return lookup_slow(p, r);
}

/* ---- pending blocks ------------------------------------------------------------------------- */

/* A piece split off a pending block that holds only lent bytes: free again, merged with its free
 * neighbours (a split-off record has no state yet: make_free wants one that is not free). */
static void give_back(ra_pool *p, ra_block *x) {
  x->base.state = RAPI_USED;
  x->base.requested = 0;
  x->owner = NULL;
  rapi_bp_make_free(&p->bp, &x->base);
}

/* rem is what is left of a pending block with lent bytes (lent, as the block counted them) once
 * its first cut bytes went to a user: the lent bytes at its front that the cut did not take stay
 * lent, and so do those at its end (all of rem, where the cut took every byte the owner freed:
 * such a remainder stays pending on the owner, as one that the owner's next request of its size
 * takes, and another resource takes it back as it would a lent end). */
static RAPI_NOINLINE void keep_lent(ra_pool *p, ra_block *rem, size_t lent, size_t cut) {
  size_t lo = lent_lo(p, lent), hi = lent_hi(p, lent);
  set_lent(p, rem, lo > cut ? lo - cut : 0, hi < rem->base.size ? hi : rem->base.size);
}

/* Hands a pending block of size >= size to a new user, splitting off a remainder that stays
 * pending on the same owner with the same batch, in the same place of the owner's FIFO: it never
 * becomes free for other resources before the owner has passed that batch (bytes lent to the block
 * stay lent: take_lent). */
static ra_block *take_pending(ra_pool *p, rstate *owner, ra_block *b, size_t size) {
  size_t lent = b->base.requested;   /* read before drop_pending clears it */
  ra_block *at = drop_pending(p, owner, b);
  char *ptr = b->base.ptr;
  size_t whole = b->base.size;
  /* A block with uses is handed out whole: a remainder would need the same uses. */
  ra_block *rem = b->uses == NULL ? ra_of(rapi_bp_split(&p->bp, &b->base, size)) : NULL;
  if (rem) {
    rem->tag = b->tag;
    rem->seq = b->seq;
    if (RAPI_UNLIKELY(lent != 0)) keep_lent(p, rem, lent, size);
    add_pending(p, owner, rem, at, false);
  }
  RAPI_TRACE("reuse", p->bp.self, owner->r, ptr, whole, ",\"pb\":%zu", owner->pending_bytes);
  free_uses(p, b);
  return rem;
}

/* Merges b, just deallocated on owner, with neighbours pending on the same owner without uses.
 * The merged block takes b's batch, the newest: a neighbour waits a little longer, never less, and
 * the owner's pending memory does not fragment while nothing polls (a CPU running ahead).
 * A free neighbour of at most four times b's size joins too, as QuickPool would merge it: to the
 * owner it is all as good as free, and kept apart the two kinds of pieces fragment (the fit rule,
 * docs/DESIGN.md). Those bytes are lent to the block, not the owner's: the owner takes them with
 * the block, and another resource that would grow or wait for want of free memory takes them
 * back (take_lent) without waiting for the owner's batch. The bound keeps a small free from
 * tying up a large free neighbour; a growable chunk's free end stays free, for growth in place and
 * for giving back. */
/* Grow mode, one resource known: a block split off the hot block comes back alone (merge_pending). */
static inline bool sole(const ra_pool *p) { return !p->cross_wait && HASH_COUNT(p->by_key) == 1; }

/* b, freed on owner and joined to no block before it, stays apart from next (see merge_pending). */
static RAPI_INLINE bool kept_apart(const ra_pool *p, const rstate *owner, const ra_block *b,
                                   const ra_block *next) {
  return next != NULL && b == owner->split_head && next == owner->split_rem && sole(p);
}

/* Whether b's neighbour nb joins it (see merge_pending). */
static RAPI_INLINE bool joins(const ra_pool *p, const rstate *owner, const ra_block *nb, size_t freed) {
  if (nb->base.state == RAPI_PENDING) return nb->owner == owner && nb->uses == NULL;
  return nb->base.state == RAPI_FREE && nb->base.size <= 4 * freed &&
         !(p->bp.resizable != NULL &&
           (&nb->base == nb->base.chunk->last ||
            (nb->base.holes && rapi_bp_fill_passes_peak(&p->bp, &nb->base, nb->base.size))));
}

static void take_in(ra_pool *p, rstate *owner, ra_block *nb) {
  if (nb->base.state == RAPI_PENDING) drop_pending(p, owner, nb);
  else rapi_bp_unfree(&p->bp, &nb->base);
}

/* Pending blocks never have unmapped pieces (unmap_free): the free blocks with holes in
 * [lo, end) are mapped again in one call over the whole span before any of it joins a pending
 * block (one at a time, a later mapping could go past the peak and give back the pieces of one
 * mapped before it); if that fails they stay free and apart (the status is logged). A deallocation
 * joins a free neighbour with holes only where mapping it stays within the pool's peak (joins):
 * past it, a free would raise what the pool holds, for bytes nobody asked for yet. */
static RAPI_NOINLINE bool fill_to_join(ra_pool *p, rapi_block *lo, rapi_block *end) {
  rapi_block *hi = lo;
  while (hi->next != end) hi = hi->next;
  if (rapi_bp_fill_slow(&p->bp, lo, (size_t)(hi->ptr + hi->size - lo->ptr)) != RAP_OK) {
    rap_log(RAP_LOG_WARN, "%s: mapping free pages again failed: %s", rap_allocator_name(p->bp.self),
            rap_last_error());
    return false;
  }
  for (rapi_block *x = lo; x != end; x = x->next) x->holes = 0;
  return true;
}

static RAPI_NOINLINE bool fill_block_to_join(ra_pool *p, ra_block *nb) {
  return fill_to_join(p, &nb->base, nb->base.next);
}

static inline bool ready_to_join(ra_pool *p, ra_block *nb) {
  return RAPI_LIKELY(!nb->base.holes) || fill_block_to_join(p, nb);
}

/* The lent bytes that a piece brings to the end of a block it joins on its far side: a free piece
 * all of its own, a pending one all of its own where every byte of it is lent, else its lent end
 * on that side (its other end is inside the merged block now: counted as the owner's). */
static inline size_t lent_of(const ra_pool *p, const rapi_block *nb, bool front) {
  if (nb->state == RAPI_FREE) return nb->size;
  size_t lo = lent_lo(p, nb->requested), hi = lent_hi(p, nb->requested);
  if (lo + hi >= nb->size) return nb->size;
  return front ? lo : hi;
}

static RAPI_INLINE ra_block *merge_pending(ra_pool *p, rstate *owner, ra_block *b) {
  size_t freed = b->base.size, lo = 0, hi = 0;
  bool merged = false;
  ra_block *prev = ra_of(b->base.prev);
  if (prev != NULL && joins(p, owner, prev, freed) && ready_to_join(p, prev)) {
    lo = lent_of(p, &prev->base, true);
    merged = true;
    take_in(p, owner, prev);
    rapi_bp_absorb_next(&p->bp, &prev->base);
    b = prev;
  }
  ra_block *next = ra_of(b->base.next);
  /* b was split off the hot block for a request of its size and comes back alone (one resource
   * only, as that is when the hot block takes in free neighbours): the next request of that size
   * takes it whole, where a stream allocating and freeing one size over and over would split and
   * merge its block every time. With several resources pending pieces merge as before: kept apart
   * there they fragment (the 4-stream trace holds 4 % more). */
  if (next != NULL && !kept_apart(p, owner, b, next) && joins(p, owner, next, freed) &&
      ready_to_join(p, next)) {
    hi = lent_of(p, &next->base, false);
    merged = true;
    take_in(p, owner, next);
    rapi_bp_absorb_next(&p->bp, &b->base);
  }
  if (merged) set_lent(p, b, lo, hi);   /* else b's field is 0 (rapi_bp_unmark_used) */
  return b;
}

/* After a deallocation on rs. Many blocks waiting in the open batch: fence it now, so that by the
 * time memory is wanted the event has long completed. Otherwise, now and then, ask the oldest
 * fences: what has passed goes back to the free index and merges, so other resources find whole
 * blocks before they miss. A resource reusing one block over and over has no fence and never 16
 * pending blocks, so it still makes no driver call. A failure only delays reuse: it is logged. */
static RAPI_INLINE void fence_or_poll(ra_pool *p, rstate *rs) {
  int st = RAP_OK;
  if (rs->open_count >= RAPI_EAGER_FENCE) {
    st = rapi_ra_fence_open(p, rs);
  } else if (rs->fences.count > 0 && (++rs->ticks & (RAPI_EAGER_FENCE - 1)) == 0) {
    st = rapi_ra_query_fences(rs);
    if (st == RAP_OK) rapi_ra_drain(p, rs);
  }
  if (st != RAP_OK)
    rap_log(RAP_LOG_WARN, "%s: fencing or polling a %s resource failed: %s",
            rap_allocator_name(p->bp.self), rs->r->ops->kind, rap_last_error());
}

/* ---- allocate and deallocate ---------------------------------------------------------------- */

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

/* Some resource has a recorded fence not yet known to have passed. */
static bool fenced_pending(const ra_pool *p) {
  for (const rstate *rs = p->by_key; rs != NULL; rs = rs->hh.next)
    if (rs->fences.count > 0) return true;
  return false;
}

/* A poor fit: the best block the caller can take now is over twice the request and a MiB larger,
 * while the pool holds enough pending memory to serve it once its batches have passed (another
 * resource's, or the caller's own, which merges with its free neighbours only then). Cutting the
 * request out of the large block would break up memory that a large request needs later (the pool
 * then grows for it), so the pool first fences and polls, as on a miss, and the caller looks
 * again. At most once per RAPI_EAGER_FENCE deallocations anywhere in the pool: each poll records
 * an event on every resource with an open batch. */
static RAPI_NOINLINE bool poll_first_slow(ra_pool *p, const rstate *rs, size_t size) {
  p->poor_polled = p->free_seq;
  /* For the caller's own pending memory, only when it is at least a MiB (the scale of the poor
   * fit's margin): a stream churning small blocks of its own reuses them in its order and records
   * no event, poor fit or not. */
  size_t own_floor = size > ((size_t)1 << 20) ? size : (size_t)1 << 20;
  if (p->bp.pending_bytes - rs->pending_bytes < size && rs->pending_bytes < own_floor) return false;
  (void)rapi_ra_poll_all(p, true);
  return true;
}

static inline bool poll_first(ra_pool *p, const rstate *rs, size_t size, size_t fit) {
  if (RAPI_LIKELY(p->bp.pending_bytes < size) || fit - size < ((size_t)1 << 20) ||
      fit / 2 < size || p->free_seq - p->poor_polled < RAPI_EAGER_FENCE)
    return false;
  return poll_first_slow(p, rs, size);
}

/* f, the free block that fits best, has holes (unmap_free). Where mapping them would pass the
 * pool's peak, pending memory whose batches have passed comes back first (it merges, and what
 * stays free gives its pieces back before anything is mapped): the caller looks again. The poll is
 * made at most once between two deallocations, so a second look takes f, or (own) r's fitting
 * pending block, which the pool maps already. */
enum { RA_TAKE_FREE, RA_LOOK_AGAIN, RA_TAKE_OWN };
static RAPI_NOINLINE int past_peak(ra_pool *p, rapi_block *f, size_t size, bool own) {
  if (!rapi_bp_fill_passes_peak(&p->bp, f, size)) return RA_TAKE_FREE;
  if (p->bp.pending_bytes > 0 && p->peak_polled != p->free_seq) {
    p->peak_polled = p->free_seq;
    (void)rapi_ra_poll_all(p, true);
    return RA_LOOK_AGAIN;
  }
  return own ? RA_TAKE_OWN : RA_TAKE_FREE;
}

/* The better fit of r's own pending blocks (reused with no event: r's stream order makes it safe)
 * and the free blocks, the pending one on a tie, and also where the free one's holes would be
 * mapped past the pool's peak (past_peak: memory the pool maps already serves before memory it
 * would map anew). Carving a small request out of a large pending block while a free one fits
 * better would chop up blocks that are about to merge back into whole
 * chunks, and the pool would grow for the next large request; preferring free memory over an
 * equally good pending block would let pending memory pile up on a stream the CPU runs ahead of. */
static ra_block *take_own_or_free(ra_pool *p, rstate *rs, size_t size) {
  ra_block *b = rs->hot;
  if (b != NULL && b->base.size == size) {   /* take_pending, for the hot block taken whole */
    drop_pending(p, rs, b);   /* a block with uses is never hot (add_pending): none to drop */
    RAPI_TRACE("reuse", p->bp.self, rs->r, b->base.ptr, size, ",\"pb\":%zu", rs->pending_bytes);
    return b;
  }
again:
  b = rs->hot;
  ra_block *ix = ra_of(rapi_index_find(&rs->pending, size));
  if (RAPI_UNLIKELY(p->bp.max_split != SIZE_MAX)) {   /* max_split=: blocks it may not cut */
    if (ix != NULL && !rapi_bp_may_cut(&p->bp, ix->base.size, size)) ix = NULL;
    if (b != NULL && !rapi_bp_may_cut(&p->bp, b->base.size, size)) b = NULL;
  }
  if (b == NULL || b->base.size < size || (ix != NULL && ix->base.size < b->base.size)) b = ix;
  if (b == NULL || b->base.size > size) {
    rapi_block *f = rapi_bp_find_free(&p->bp, size);
    if (f != NULL && (b == NULL || f->size < b->base.size)) {
      int how = RAPI_LIKELY(!f->holes) ? RA_TAKE_FREE : past_peak(p, f, size, b != NULL);
      if (how == RA_LOOK_AGAIN) goto again;
      if (how == RA_TAKE_FREE) {
        if (RAPI_UNLIKELY(poll_first(p, rs, size, f->size))) goto again;
        return ra_of(rapi_bp_take_this(&p->bp, f, size));
      }
    }
  }
  if (b != NULL && RAPI_UNLIKELY(poll_first(p, rs, size, b->base.size))) goto again;
  if (b != NULL) {
    bool hot = b == rs->hot;
    ra_block *rem = take_pending(p, rs, b, size);
    if (hot) {   /* see merge_pending: the pair that follows need not split it again */
      rs->split_head = b;
      rs->split_rem = rem;
    }
  }
  return b;
}

/* What rs cannot take without waiting: other resources' pending blocks, and its own that were
 * used elsewhere (record_resource). */
static inline size_t blocked_for(const ra_pool *p, const rstate *rs) {
  return p->bp.pending_bytes - rs->pending_bytes + rs->pending_uses_bytes;
}

static inline bool joinable(const rstate *rs, const rapi_block *b) {
  return b->state == RAPI_FREE ||
         (b->state == RAPI_PENDING && ra_of_const(b)->owner == rs && ra_of_const(b)->uses == NULL);
}

/* A miss of rs, before growing: one of rs's pending blocks that fits once joined with the free
 * blocks and rs's own pending blocks beside it. rs's stream order makes its pending memory as
 * good as free to rs, but a pending block merges only with pending neighbours and a free one only
 * with free ones, so a resource whose frees come back in steps (a CPU ahead of its stream) would
 * otherwise grow while holding enough memory in two kinds of pieces. The joined block carries the
 * newest batch of its pending parts: free bytes joined to it wait for that batch before another
 * resource may have them, which delays others, never endangers them. Scans at most 256 of rs's
 * pending blocks, oldest first. */
static ra_block *take_own_joined(ra_pool *p, rstate *rs, size_t size) {
  unsigned scanned = 0;
  rapi_block *lo = NULL, *hi = NULL;
  size_t best = SIZE_MAX;
  for (ra_block *rb = rs->fifo_head; rb != NULL && scanned < 256; rb = rb->fifo_next, scanned++) {
    if (rb->uses != NULL) continue;
    rapi_block *b = &rb->base;
    size_t total = b->size;
    rapi_block *l = b, *h = b;
    while (l->prev && joinable(rs, l->prev)) total += (l = l->prev)->size;
    while (h->next && joinable(rs, h->next)) total += (h = h->next)->size;
    if (total < size || (l == b && h == b) || total >= best || !rapi_bp_may_cut(&p->bp, total, size))
      continue;
    best = total;
    lo = l;
    hi = h;
    if (total == size) break;
  }
  if (lo != NULL) {
    uint64_t tag = 0, seq = 0;
    rapi_block *end = hi->next;
    bool holes = false;
    for (rapi_block *x = lo; x != end; x = x->next) holes |= x->state == RAPI_FREE && x->holes;
    if (RAPI_UNLIKELY(holes) && !fill_to_join(p, lo, end)) return NULL;
    /* Lent to the joined block: the free bytes at its ends and the lent ends of its end pieces. */
    size_t lent_front = 0, lent_back = 0;
    rapi_block *e = lo;
    for (; e->state == RAPI_FREE; e = e->next) lent_front += e->size;
    lent_front += lent_of(p, e, true);
    for (e = hi; e->state == RAPI_FREE; e = e->prev) lent_back += e->size;
    lent_back += lent_of(p, e, false);
    if (lent_front + lent_back >= best) lent_front = 0, lent_back = best;   /* every byte lent */
    for (rapi_block *x = lo; x != end; x = x->next) {
      if (x->state == RAPI_PENDING) {
        ra_block *rx = ra_of(x);
        if (rx->tag > tag) tag = rx->tag;
        if (rx->seq > seq) seq = rx->seq;
        drop_pending(p, rs, rx);
      } else {
        rapi_bp_unfree(&p->bp, x);
      }
    }
    while (lo->next != end) rapi_bp_absorb_next(&p->bp, lo);
    ra_block *joined = ra_of(lo);
    joined->tag = tag;
    joined->seq = seq;
    set_lent(p, joined, lent_front, lent_back);
    ra_block *at = rs->fifo_tail;   /* FIFO tags never decrease: after the last not newer */
    while (at != NULL && at->tag > tag) at = at->fifo_prev;
    add_pending(p, rs, joined, at, false);
    take_pending(p, rs, joined, size);
    return joined;
  }
  return NULL;
}

/* A miss of rs that would otherwise wait or grow: free bytes lent to another resource's pending
 * block (merge_pending) are free memory all the same. The smallest lent end that holds the request
 * (among each other resource's newest 256 pending blocks) is split off its block, which stays
 * pending as it was, and rs takes the request from it; what rs does not take is free again. NULL
 * when none fits, or with no host memory for a record (the pool is unchanged then). */
static RAPI_NOINLINE ra_block *take_lent(ra_pool *p, rstate *rs, size_t size) {
  ra_block *best = NULL;
  rstate *owner = NULL;
  size_t best_bytes = SIZE_MAX;
  bool front = false;
  for (rstate *o = p->by_key; o != NULL; o = o->hh.next) {
    if (o == rs || o->pending_bytes - o->pending_uses_bytes < size) continue;
    unsigned n = 0;
    for (ra_block *f = o->fifo_tail; f != NULL && n < 256; f = f->fifo_prev, n++) {
      if (f->base.requested == 0) continue;
      size_t lo = lent_lo(p, f->base.requested), hi = lent_hi(p, f->base.requested);
      if (lo >= size && lo < best_bytes && rapi_bp_may_cut(&p->bp, lo, size)) {
        best = f, owner = o, best_bytes = lo, front = true;
      }
      if (hi >= size && hi < best_bytes && rapi_bp_may_cut(&p->bp, hi, size)) {
        best = f, owner = o, best_bytes = hi, front = false;
      }
    }
  }
  if (best == NULL) return NULL;
  size_t lent = best->base.requested;
  size_t lo = lent_lo(p, lent), hi = lent_hi(p, lent);
  size_t at_byte = front ? lo : best->base.size - hi;   /* where the lent end begins or ends */
  bool hot = best == owner->hot;
  ra_block *at = drop_pending(p, owner, best);
  ra_block *give = best;
  if (at_byte != 0 && at_byte != best->base.size) {
    /* The lent end is split off; the record that keeps the rest goes back in best's place. */
    rapi_block *cut = rapi_bp_split(&p->bp, &best->base, at_byte);
    if (cut == NULL) {
      best->base.requested = lent;
      add_pending(p, owner, best, at, hot);
      return NULL;
    }
    ra_block *keep = front ? ra_of(cut) : best;
    give = front ? best : ra_of(cut);
    keep->tag = best->tag;
    keep->seq = best->seq;
    set_lent(p, keep, front ? 0 : lo, front ? hi : 0);
    add_pending(p, owner, keep, at, hot);
  }   /* else every byte of best was lent: it goes whole */
  give->base.state = RAPI_USED;   /* not free: give_back's merge must not take it in */
  give->owner = NULL;
  give->base.requested = 0;
  RAPI_TRACE("ready", p->bp.self, owner->r, give->base.ptr, give->base.size, ",\"pb\":%zu",
             owner->pending_bytes);
  rapi_block *extra = rapi_bp_split(&p->bp, &give->base, size);
  if (extra != NULL) give_back(p, ra_of(extra));
  return give;
}

/* A miss: poll, then (wait mode) take another resource's block behind a queued wait, then grow,
 * and before giving up wait on the host for every pending block. A host-side wait lets this
 * thread's locks go, so after one the pool is looked at afresh. */
static RAPI_NOINLINE int ra_allocate_slow(ra_pool *p, rstate *rs, void **out, size_t bytes,
                                           size_t size) {
  char saved[512] = "";
  bool waited_all = false;
  for (unsigned round = 0;; round++) {
    settle(p);   /* a host wait let this thread's locks go: another thread may have parked one */
    /* A host wait let this thread's locks go: others may have used the room made in the map. */
    int room = rapi_bp_reserve(&p->bp);
    if (room != RAP_OK) return room;
    /* The fences already recorded first: a recorded event costs a driver call, and where the
     * memory they bring back serves the request, the open batches need none yet. A failing
     * resource is logged; growing may still serve us. */
    ra_block *b = NULL;
    if (round == 0 && fenced_pending(p)) {
      (void)rapi_ra_poll_all(p, false);
      b = take_own_or_free(p, rs, size);
    }
    if (b == NULL) {
      (void)rapi_ra_poll_all(p, true);
      b = take_own_or_free(p, rs, size);
    }
    if (b == NULL && rs->pending_count > 0) b = take_own_joined(p, rs, size);
    if (b == NULL && p->bp.pending_bytes - rs->pending_bytes >= size) b = take_lent(p, rs, size);
    /* Waiting serializes the waiter behind the owner; below wait_above the pool grows instead, so
     * as many streams as that memory allows run side by side. Nor does it wait while what rs
     * cannot take is at most wait_pending_above: a stream that runs ahead of the others (a
     * collective's, FSDP's prefetch) keeps running ahead rather than queue behind work they
     * enqueued after their frees, and the pool grows by at most that much for them. */
    if (b == NULL && p->cross_wait && p->bp.actual + size > p->wait_above &&
        blocked_for(p, rs) > p->wait_pending_above && round < 8) {
      rstate *owner = NULL;
      ra_block *w = rapi_ra_find_waitable(p, rs, size, &owner);
      bool host_waited = false;
      int st = w != NULL ? rapi_ra_wait_for_block(p, rs, owner, w, &host_waited) : RAP_OK;
      if (host_waited && st == RAP_OK) continue;   /* w has passed; the pool may have changed */
      if (st == RAP_OK && w != NULL) {
        take_pending(p, owner, w, size);
        b = w;
      } else if (st != RAP_OK && st != RAP_ERR_BUSY) {
        return st;
      }   /* BUSY: w waits on the queue running this very call; grow instead */
    }
    if (b == NULL) {
      rapi_block *grown = NULL;
      int st = rapi_bp_grow_for(&p->bp, size, &grown);
      if (st == RAP_OK) st = rapi_bp_reserve_after_grow(&p->bp, grown);
      b = ra_of(grown);
      if (st == RAP_ERR_NOMEM && p->bp.pending_count > 0 && !waited_all) {
        snprintf(saved, sizeof saved, "%s", rap_last_error());
        waited_all = true;
        st = rapi_ra_wait_all(p);
        if (st != RAP_OK) return st;
        continue;   /* pending memory came back; the pool may also have changed meanwhile */
      }
      if (st == RAP_ERR_NOMEM && saved[0] != '\0') return rapi_fail(st, "%s", saved);
      if (st != RAP_OK) return st;
    }
    return finish_allocate(p, rs, b, bytes, out);
  }
}

/* Every allocation but the parked block's take-back: one compare finds the resource; its own
 * pending blocks first, then free ones, then the miss. */
static RAPI_NOINLINE int ra_allocate_other(ra_pool *p, void **out, size_t bytes, rap_resource *r) {
  rstate *rs = lookup(p, r ? r : &rap_allocator_manager(p->bp.self)->host);
  if (RAPI_UNLIKELY(rs == NULL)) return no_rstate(p, "rap_allocate");
  size_t size;
  int st = rapi_bp_round(&p->bp, bytes, &size);
  if (RAPI_UNLIKELY(st != RAP_OK)) return st;
  if (RAPI_UNLIKELY((st = rapi_bp_reserve(&p->bp)) != RAP_OK)) return st;
  ra_block *b = ra_of(p->bp.deferred);
  if (b != NULL && b->owner == rs && b->base.size == size) {   /* its own, as it was */
    p->bp.deferred = NULL;
  } else {
    settle(p);
    b = take_own_or_free(p, rs, size);
    if (RAPI_UNLIKELY(b == NULL)) return ra_allocate_slow(p, rs, out, bytes, size);
  }
  return finish_allocate(p, rs, b, bytes, out);
}

/* The pair's way: the block parked by the last call's resource, of the size asked, taken back;
 * no call, so that nothing is kept in saved registers. Everything else goes to ra_allocate_other
 * with the arguments as they came. */
static RAPI_INLINE int ra_allocate_body(void *state, void **out, size_t bytes, rap_resource *r) {
  ra_pool *p = state;
  ra_block *b = ra_of(p->bp.deferred);
  rstate *rs = p->last;
  if (b != NULL && rs != NULL && b->owner == rs && bytes - 1 < p->bp.max_request &&
      rs->key == (r != NULL ? r : &rap_allocator_manager(p->bp.self)->host)->key &&
      rapi_align_up(bytes, p->bp.alignment) == b->base.size && rapi_map_has_room(&p->bp.used)) {
    p->bp.deferred = NULL;
    return finish_allocate(p, rs, b, bytes, out);
  }
  return ra_allocate_other(p, out, bytes, r);
}

/* The table's entry points: the bodies inside the thread guard. */
RAPI_GUARDED_ENTRY(static int, ra_allocate, "rap_allocate", ((ra_pool *)state)->bp.self,
                   ra_allocate_body, (void *state, void **out, size_t bytes, rap_resource *r),
                   (state, out, bytes, r))

/* A free on the host resource, done now: free at once, merged, the heuristics run. */
static RAPI_NOINLINE void free_now(ra_pool *p, ra_block *b) {
  b->owner = NULL;
  rapi_bp_after_free(&p->bp, rapi_bp_make_free(&p->bp, &b->base));
}

/* A free on a queue (or of a block with uses), done now: b merges with its neighbours, becomes
 * pending on its owner with the open batch and the owner's hot block; then fence or poll. */
static RAPI_NOINLINE void free_pending(ra_pool *p, rstate *owner, ra_block *b, uint64_t seq) {
  char *ptr = b->base.ptr;
  size_t freed = b->base.size;
  if (b->uses == NULL) b = merge_pending(p, owner, b);
  b->seq = seq;
  b->tag = owner->open;
  owner->open_dirty = !owner->sync;
  for (rapi_use *u = b->uses; u != NULL; u = u->next) {
    if (per_block(u->rs)) continue;   /* its tag is its token */
    u->tag = u->rs->open;
    u->rs->open_dirty = true;
  }
  add_pending(p, owner, b, owner->fifo_tail, true);
  RAPI_TRACE("pending", p->bp.self, owner->r, ptr, freed, ",\"pb\":%zu", owner->pending_bytes);
  fence_or_poll(p, owner);
}

/* The parked block's free, done now (it was parked with its seq, on a queue). */
static void unpark(ra_pool *p, ra_block *b) {
  b->base.state = RAPI_USED;   /* as its free found it */
  if (b->owner->sync) free_now(p, b);
  else free_pending(p, b->owner, b, b->seq);
}

static RAPI_NOINLINE void settle_parked(ra_pool *p) {
  ra_block *b = ra_of(p->bp.deferred);
  p->bp.deferred = NULL;
  unpark(p, b);
}

/* The engine's flush of its deferred block (rapi_bp_flush): the parked block, settled. */
static void flush_parked(rapi_bp *bp, rapi_block *b) {
  unpark((ra_pool *)(void *)((char *)bp - offsetof(ra_pool, bp)), ra_of(b));
}

/* Whether b, just freed on owner without uses, may be parked: taken back by owner's next request
 * of its size or settled at the next call, the pool ends as the free done now would leave it.
 * The host resource: unless the free may make a heuristic fire (as QuickPool defers) or may leave
 * a free block at the end of a chunk that grows in place (the heuristic's trim). A queue: when b
 * becomes the hot block (there is none), joins no neighbour (a next one it would be kept apart
 * from, as merge_pending keeps it, counts as none: a stream that switched to this size from the
 * remainder's parks its pair too), and its free neither fences (the open batch below
 * RAPI_EAGER_FENCE with it) nor polls (no fence recorded); not while tracing, so that every free
 * of a traced run is a "pending" line. */
static RAPI_INLINE bool may_park(const ra_pool *p, const rstate *owner, const ra_block *b) {
  const rapi_block *prev = b->base.prev, *next = b->base.next;
  if (owner->sync)
    return !rapi_bp_free_may_coalesce(&p->bp, &b->base) &&
           (RAPI_LIKELY(p->bp.resizable == NULL) ||
            (next != NULL && !(next->state == RAPI_FREE && next->next == NULL)));
  if (owner->hot != NULL || owner->fences.count != 0 ||
      owner->open_count + 1 >= RAPI_EAGER_FENCE || RAPI_UNLIKELY(rapi_tracing()))
    return false;
  size_t freed = b->base.size;
  return (prev == NULL || !joins(p, owner, ra_of_const(prev), freed)) &&
         (next == NULL || kept_apart(p, owner, b, ra_of_const(next)) ||
          !joins(p, owner, ra_of_const(next), freed));
}

static RAPI_NOINLINE int wrong_resource(ra_pool *p, const void *ptr, const rstate *owner,
                                        const rap_resource *r) {
  return rapi_fail(RAP_ERR_WRONG_RESOURCE,
                   "rap_deallocate('%s'): %p belongs to %s resource #%llu, not to %s resource #%llu",
                   rap_allocator_name(p->bp.self), ptr, owner->r->ops->kind,
                   (unsigned long long)owner->r->id, r->ops->kind, (unsigned long long)r->id);
}

/* A free with no parked block to settle first (the pair's, where the allocation took it back). */
static RAPI_INLINE int ra_free(ra_pool *p, void *ptr, rap_resource *r) {
  size_t slot;
  ra_block *b = ra_of(rapi_bp_find_used_slot(&p->bp, ptr, &slot));
  if (RAPI_UNLIKELY(b == NULL)) return rapi_bp_unknown_pointer(&p->bp, ptr, "rap_deallocate");
  rstate *owner = b->owner;
  if (RAPI_UNLIKELY(r != NULL && r->key != owner->key)) return wrong_resource(p, ptr, owner, r);
  owner->current -= b->base.requested;
  owner->used_bytes -= b->base.size;
  owner->used_count--;
  rapi_bp_unmark_used(&p->bp, &b->base, slot);
  if (RAPI_LIKELY(b->uses == NULL) && may_park(p, owner, b)) {
    if (!owner->sync) {   /* what the free does now that the pair undoes not */
      b->seq = ++p->free_seq;
      owner->open_dirty = true;
    }
    b->base.state = RAPI_DEFERRED;
    p->bp.deferred = &b->base;
    return RAP_OK;
  }
  if (owner->sync && b->uses == NULL) free_now(p, b);
  else free_pending(p, owner, b, ++p->free_seq);
  return RAP_OK;
}

/* The block parked before is settled first (it changes no used block), out of line: the free
 * without one then keeps nothing across a call until its end. */
static RAPI_NOINLINE int ra_free_after_settle(ra_pool *p, void *ptr, rap_resource *r) {
  settle_parked(p);
  return ra_free(p, ptr, r);
}

static RAPI_INLINE int ra_deallocate_body(void *state, void *ptr, rap_resource *r) {
  ra_pool *p = state;
  if (RAPI_UNLIKELY(p->bp.asleep)) return rapi_bp_asleep_refusal(&p->bp, "rap_deallocate");
  if (RAPI_UNLIKELY(p->bp.deferred != NULL)) return ra_free_after_settle(p, ptr, r);
  return ra_free(p, ptr, r);
}

RAPI_GUARDED_ENTRY(static int, ra_deallocate, "rap_deallocate", ((ra_pool *)state)->bp.self,
                   ra_deallocate_body, (void *state, void *ptr, rap_resource *r), (state, ptr, r))

/* Each record on a per-block resource is a use of its own (an export per descriptor), with the
 * token the resource gives for this block. */
static int record_per_block(ra_pool *p, ra_block *b, rstate *rs) {
  rapi_use *u = rapi_slab_alloc(&p->use_recs);
  if (u == NULL)
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for a use record",
                     rap_allocator_name(p->bp.self));
  int st = rs->r->ops->use_bind(rs->r, b->base.ptr, b->base.requested, &u->tag);
  if (st != RAP_OK) {
    rapi_slab_free(&p->use_recs, u);
    return st;
  }
  u->rs = rs;
  u->next = b->uses;
  b->uses = u;
  rs->uses_out++;
  return RAP_OK;
}

static RAPI_INLINE int ra_record_body(void *state, void *ptr, rap_resource *r) {
  ra_pool *p = state;
  settle(p);
  ra_block *b = ra_of(rapi_bp_find_used(&p->bp, ptr));
  if (b == NULL) return rapi_bp_unknown_pointer(&p->bp, ptr, "rap_record_resource");
  rstate *rs = lookup(p, r);
  if (rs == NULL) return no_rstate(p, "rap_record_resource");
  if (per_block(rs)) return record_per_block(p, b, rs);
  if (rs->sync || rs == b->owner) return RAP_OK;   /* already in order */
  for (rapi_use *u = b->uses; u != NULL; u = u->next)
    if (u->rs == rs) return RAP_OK;
  rapi_use *u = rapi_slab_alloc(&p->use_recs);
  if (u == NULL)
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for a use record",
                     rap_allocator_name(p->bp.self));
  u->rs = rs;
  u->tag = 0;
  u->next = b->uses;
  b->uses = u;
  rs->uses_out++;
  return RAP_OK;
}

static int ra_record(void *state, void *ptr, rap_resource *r) {
  int st;
  RAPI_GUARDED(st, ((ra_pool *)state)->bp.self, "rap_record_resource", ra_record_body(state, ptr, r));
  return st;
}

static int ra_pointer_resource(void *state, const void *ptr, rap_resource **out) {
  ra_pool *p = state;
  ra_block *b = ptr ? ra_of(rapi_bp_find_used(&p->bp, ptr)) : NULL;
  if (b == NULL) return rapi_bp_unknown_pointer(&p->bp, ptr, "rap_pointer_resource");
  *out = b->owner->r;
  return RAP_OK;
}

static RAPI_INLINE int ra_release_body(void *state) {
  ra_pool *p = state;
  if (p->bp.asleep) return RAP_OK;   /* nothing is mapped; the chunks keep their addresses */
  settle(p);
  int st = rapi_ra_poll_all(p, true);
  rapi_bp_release(&p->bp);
  return st;
}

static int ra_release(void *state) {
  int st;
  RAPI_GUARDED(st, ((ra_pool *)state)->bp.self, "rap_release", ra_release_body(state));
  return st;
}

static int ra_reset_peaks(void *state) {
  ra_pool *p = state;
  rapi_bp_reset_peaks(&p->bp);
  rstate *rs, *tmp;
  HASH_ITER(hh, p->by_key, rs, tmp) rs->hwm = rs->current;
  return RAP_OK;
}

static int ra_stats(void *state, rap_stats *out) {
  settle(state);
  rapi_bp_stats(&((ra_pool *)state)->bp, out);
  out->waits = ((ra_pool *)state)->waits;
  out->host_waits = ((ra_pool *)state)->host_waits;
  return RAP_OK;
}

/* A resource's view: its live and pending blocks, and what it could take without waiting (the
 * pool's free blocks and its own pending blocks). */
static int ra_resource_stats(void *state, rap_resource *r, rap_stats *out) {
  ra_pool *p = state;
  settle(p);
  rstate *rs = NULL;
  HASH_FIND(hh, p->by_key, &r->key, sizeof r->key, rs);
  rapi_bp_stats(&p->bp, out);
  out->current_bytes = rs ? rs->current : 0;
  out->high_watermark = rs ? rs->hwm : 0;
  out->used_bytes = rs ? rs->used_bytes : 0;
  out->allocation_count = rs ? rs->used_count : 0;
  out->pending_bytes = rs ? rs->pending_bytes : 0;
  out->pending_count = rs ? rs->pending_count : 0;
  out->free_bytes += rs ? rs->pending.bytes + (rs->hot ? rs->hot->base.size : 0) : 0;
  size_t own = rs ? rapi_index_largest(&rs->pending) : 0;
  if (rs && rs->hot && rs->hot->base.size > own) own = rs->hot->base.size;
  if (own > out->largest_free_block) out->largest_free_block = own;
  return RAP_OK;
}

#define CORRUPT(...) rapi_fail(RAP_ERR_CORRUPT, __VA_ARGS__)

static int check_rstate(ra_pool *p, rstate *rs, size_t *pending, size_t *used, size_t *uses) {
  const char *who = rap_allocator_name(p->bp.self);
  size_t n = 0, bytes = 0, indexed = 0, with_uses = 0;
  uint64_t last = 0;
  for (ra_block *b = rs->fifo_head; b != NULL; b = b->fifo_next) {
    if (b->base.state != RAPI_PENDING || b->owner != rs)
      return CORRUPT("%s: block %p is in a pending list but is not pending there", who, (void *)b->base.ptr);
    if (b->tag < last || b->tag > rs->open)
      return CORRUPT("%s: pending block %p is out of batch order", who, (void *)b->base.ptr);
    if ((b->fifo_next ? b->fifo_next->fifo_prev : rs->fifo_tail) != b)
      return CORRUPT("%s: a pending list is broken at %p", who, (void *)b->base.ptr);
    size_t lent = b->base.requested;
    if (lent != 0 && (b->uses != NULL || lent_lo(p, lent) + lent_hi(p, lent) > b->base.size))
      return CORRUPT("%s: pending block %p counts %zu + %zu lent bytes in %zu%s", who,
                     (void *)b->base.ptr, lent_lo(p, lent), lent_hi(p, lent), b->base.size,
                     b->uses != NULL ? " and has uses" : "");
    last = b->tag;
    n++;
    bytes += b->base.size;
    indexed += b->uses == NULL && b != rs->hot;
    if (b->uses != NULL) with_uses += b->base.size;
  }
  if (with_uses != rs->pending_uses_bytes)
    return CORRUPT("%s: a resource's pending blocks with uses hold %zu bytes, it counts %zu", who,
                   with_uses, rs->pending_uses_bytes);
  if (n != rs->pending_count || bytes != rs->pending_bytes || indexed != rs->pending.count)
    return CORRUPT("%s: a resource lists %zu pending blocks (%zu indexed), counts %zu (%zu)", who, n,
                   indexed, rs->pending_count, rs->pending.count);
  *pending += n;
  *used += rs->used_count;
  *uses += rs->uses_out;
  return RAP_OK;
}

static int ra_check_body(void *state) {
  ra_pool *p = state;
  int st = rapi_bp_check(&p->bp);
  if (st != RAP_OK) return st;
  size_t pending = 0, used = 0, uses = 0, counted_uses = 0;
  for (rstate *rs = p->by_key; rs != NULL; rs = rs->hh.next)
    if ((st = check_rstate(p, rs, &pending, &used, &counted_uses)) != RAP_OK) return st;
  for (rapi_chunk *c = p->bp.chunks; c != NULL; c = c->next)
    for (rapi_block *b = c->first; b != NULL; b = b->next) {
      if (b->state != RAPI_FREE && ra_of(b)->owner == NULL)
        return CORRUPT("%s: block %p has no owner", rap_allocator_name(p->bp.self), (void *)b->ptr);
      for (rapi_use *u = ra_of(b)->uses; u != NULL; u = u->next) uses++;
    }
  if (pending != p->bp.pending_count || used != p->bp.allocation_count || uses != counted_uses ||
      uses != p->use_recs.live)
    return CORRUPT("%s: resources count %zu pending and %zu used blocks, the pool %zu and %zu",
                   rap_allocator_name(p->bp.self), pending, used, p->bp.pending_count,
                   p->bp.allocation_count);
  return RAP_OK;
}

static int ra_check(void *state) {
  int st;
  RAPI_GUARDED(st, ((ra_pool *)state)->bp.self, "rap_allocator_check", ra_check_body(state));
  return st;
}

/* ---- life cycle ----------------------------------------------------------------------------- */

static int ra_init(rap_allocator *self, void *state, rap_options *opts) {
  ra_pool *p = state;
  const char *cross = "grow";
  int st = rap_options_get_string(opts, "cross_resource", &cross);
  if (st != RAP_OK) return st;
  if (strcmp(cross, "grow") != 0 && strcmp(cross, "wait") != 0)
    return rapi_fail(RAP_ERR_INVALID, "%s: option 'cross_resource' is grow or wait, not '%s'",
                     rap_allocator_name(self), cross);
  p->cross_wait = cross[0] == 'w';
  p->poor_polled = (uint64_t)0 - RAPI_EAGER_FENCE;   /* the first poor fit may poll */
  p->peak_polled = (uint64_t)0 - 1;   /* the first hole past the peak may poll */
  bool has_wait_above = rapi_options_given(opts, "wait_above");
  st = rap_options_get_size(opts, "wait_above", &p->wait_above);
  if (st == RAP_OK) st = rap_options_get_size(opts, "wait_pending_above", &p->wait_pending_above);
  if (st != RAP_OK) return st;
  rapi_slab_init(&p->use_recs, sizeof(rapi_use), 64);
  st = rapi_bp_init(&p->bp, self, opts, false, sizeof(ra_block));
  if (st != RAP_OK) {
    rapi_slab_destroy(&p->use_recs);
    return st;
  }
  /* By default wait mode lets the pool fill its first chunk before it waits. */
  if (!has_wait_above) p->wait_above = p->bp.initial_size;
  p->bp.fenced = true;   /* a block is free only once its resources' events have passed */
  p->bp.flush_deferred = flush_parked;
  return RAP_OK;
}

/* Drops rs: its events go back to its resource, and the resource stops listing this pool. */
static void forget(ra_pool *p, rstate *rs) {
  rapi_fence_ring_fini(&rs->fences, rs->r);
  HASH_DELETE(hh, p->by_key, rs);
  if (p->last == rs) p->last = NULL;
  for (unsigned i = 0; i < RA_RECENT; i++)
    if (p->recent[i] == rs) p->recent[i] = NULL;
  rap_resource_unwatch(rs->r, p->bp.self);
  free(rs);
}

/* Teardown waits for every pending block's events, then the chunks go back to the parent. */
static void ra_fini(rap_allocator *self, void *state) {
  ra_pool *p = state;
  settle(p);   /* a block parked on a queue is waited for as pending */
  if (rapi_ra_wait_all(p) != RAP_OK)
    rap_log(RAP_LOG_WARN, "%s: waiting for pending blocks at teardown failed: %s",
            rap_allocator_name(self), rap_last_error());
  for (rapi_chunk *c = p->bp.chunks; c != NULL; c = c->next)
    for (rapi_block *b = c->first; b != NULL; b = b->next) ra_of(b)->uses = NULL;
  while (p->by_key != NULL) forget(p, p->by_key);
  rapi_slab_destroy(&p->use_recs);
  rapi_bp_backup_free(&p->bp);
  rapi_bp_fini(&p->bp);
}

static rstate *state_of(ra_pool *p, rap_resource *r) {
  rstate *rs = NULL;
  HASH_FIND(hh, p->by_key, &r->key, sizeof r->key, rs);
  return rs != NULL && rs->r == r ? rs : NULL;
}

static int resource_busy(ra_pool *p, rap_resource *r) {
  rstate *rs = state_of(p, r);
  if (rs == NULL || rs->used_count == 0) return RAP_OK;
  return rapi_fail(RAP_ERR_BUSY, "rap_resource_destroy: the resource still owns %zu live block%s of "
                   "'%s'", rs->used_count, rs->used_count == 1 ? "" : "s",
                   rap_allocator_name(p->bp.self));
}

/* Moves b, pending on a resource that is going away and whose own batch has passed, to the first
 * resource it was also used on that has not passed that use: it is pending there now, in batch
 * order in that resource's FIFO, exactly as if that resource had freed it. */
static void rehome(ra_pool *p, rstate *from, ra_block *b) {
  RAPI_ASSERT(b->uses != NULL && !rapi_ra_uses_passed(b));
  drop_pending(p, from, b);
  rapi_use **pu = &b->uses;
  while (*pu != NULL && (per_block((*pu)->rs) || passed((*pu)->rs, (*pu)->tag))) pu = &(*pu)->next;
  rstate *to = NULL;
  if (*pu == NULL) {
    /* Only per-block uses are left: the block waits on that resource (synchronous, so its own
     * batch has passed), its uses kept, until they pass. */
    for (rapi_use *u = b->uses; u != NULL; u = u->next)
      if (per_block(u->rs)) to = u->rs;
    b->tag = 0;
  } else {
    rapi_use *u = *pu;
    *pu = u->next;
    to = u->rs;
    b->tag = u->tag;
    to->uses_out--;
    rapi_slab_free(&p->use_recs, u);
  }
  ra_block *after = to->fifo_tail;
  while (after != NULL && after->tag > b->tag) after = after->fifo_prev;
  add_pending(p, to, b, after, false);
}

/* Drops b's uses on rs; a pending block left without uses goes into its owner's index. */
static void drop_uses_on(ra_pool *p, rstate *rs, ra_block *b) {
  for (rapi_use **pu = &b->uses; *pu != NULL;) {
    rapi_use *u = *pu;
    if (u->rs != rs) {
      pu = &u->next;
      continue;
    }
    *pu = u->next;
    rs->uses_out--;
    rapi_slab_free(&p->use_recs, u);
    if (b->uses == NULL && b->base.state == RAPI_PENDING) {
      b->owner->pending_uses_bytes -= b->base.size;
      if (b != b->owner->hot) rapi_index_insert(&b->owner->pending, &b->base);
    }
  }
}

/* r has been synchronized: every batch it recorded or left open has passed, and so has every use
 * recorded on it. Those uses are dropped; r's pending blocks become free, or, where another
 * resource's use has not passed, pending on that resource; then r's state goes. */
static void forget_resource(ra_pool *p, rap_resource *r) {
  settle(p);
  rstate *rs = state_of(p, r);
  if (rs == NULL) return;
  RAPI_ASSERT(rs->used_count == 0);   /* resource_gone(commit 0) said so */
  rs->done = rs->open;
  rs->open_dirty = false;
  if (rs->uses_out > 0)
    for (rapi_chunk *c = p->bp.chunks; c != NULL; c = c->next)
      for (rapi_block *b = c->first; b != NULL; b = b->next) drop_uses_on(p, rs, ra_of(b));
  while (rs->fifo_head != NULL) {
    ra_block *b = rs->fifo_head;
    if (rapi_ra_uses_passed(b)) {
      drop_pending(p, rs, b);
      RAPI_TRACE("ready", p->bp.self, rs->r, b->base.ptr, b->base.size, ",\"pb\":%zu", rs->pending_bytes);
      free_uses(p, b);
      b->owner = NULL;
      rapi_bp_make_free(&p->bp, &b->base);
    } else {
      rehome(p, rs, b);
    }
  }
  forget(p, rs);
  (void)rapi_ra_poll_all(p, false);   /* blocks that waited only on r's uses come back */
}

/* The strategy table's resource_gone: r is being destroyed (commit 0: may it go? commit 1: it went). */
static int ra_resource_gone(void *state, rap_resource *r, int commit) {
  if (!commit) return resource_busy(state, r);
  forget_resource(state, r);
  return RAP_OK;
}

/* ---- sleep and wake (pool/sleep.c does the memory) ------------------------------------------- */

/* Waits until nothing queued can touch the pool's memory: every pending block's fence (the blocks
 * become free), then one event recorded now on each resource that owns or was recorded on a used
 * block. Events only: other work on the device goes on. Host waits let this thread's locks go, so
 * the events are recorded first and the resources held meanwhile. */
static int quiesce(ra_pool *p) {
  for (rstate *rs = p->by_key; rs != NULL; rs = rs->hh.next)
    if (!rs->sync && capturing(rs))
      return rapi_fail(RAP_ERR_BUSY, "rap_allocator_sleep('%s'): %s resource #%llu is capturing a "
                       "graph, and sleep would record an event into it; sleep after the capture",
                       rap_allocator_name(p->bp.self), rs->r->ops->kind,
                       (unsigned long long)rs->r->id);
  int st = rapi_ra_wait_all(p);
  if (st != RAP_OK) return st;
  if (p->bp.pending_count > 0)
    return rapi_fail(RAP_ERR_BUSY, "rap_allocator_sleep('%s'): %zu blocks are still pending on "
                     "the queue whose work is calling; sleep from elsewhere",
                     rap_allocator_name(p->bp.self), p->bp.pending_count);
  size_t n = 0;
  for (rstate *rs = p->by_key; rs != NULL; rs = rs->hh.next) n += !rs->sync;
  if (n == 0) return RAP_OK;
  rapi_event **ev = rapi_calloc(n, sizeof *ev);
  if (ev == NULL)
    return rapi_fail(RAP_ERR_NOMEM, "rap_allocator_sleep('%s'): out of host memory",
                     rap_allocator_name(p->bp.self));
  size_t k = 0;
  for (rstate *rs = p->by_key; rs != NULL && st == RAP_OK; rs = rs->hh.next) {
    if (rs->sync || (rs->used_count == 0 && rs->uses_out == 0)) continue;
    if ((st = rs->r->ops->record(rs->r, &ev[k])) == RAP_OK) rapi_resource_ref(ev[k++]->r);
  }
  for (size_t i = 0; i < k; i++) {
    rap_resource *r = ev[i]->r;
    if (st == RAP_OK) st = rapi_host_wait(ev[i]);
    r->ops->event_release(ev[i]);
    rapi_resource_unref(r);
  }
  free(ev);
  return st;
}

static int ra_sleep(void *state, int mode) {
  ra_pool *p = state;
  settle(p);
  if (p->bp.asleep)
    return rapi_fail(RAP_ERR_BUSY, "rap_allocator_sleep('%s'): the pool is asleep already%s",
                     rap_allocator_name(p->bp.self),
                     p->bp.asleep == RAPI_SLEEPING ? " (another sleep is waiting for its work)" : "");
  int st = rapi_bp_can_sleep(&p->bp);
  if (st != RAP_OK || mode == RAP_SLEEP_PREPARE) return st == RAP_OK ? rapi_bp_prepare(&p->bp) : st;
  p->bp.asleep = RAPI_SLEEPING;   /* others are refused while this waits with its locks let go */
  p->last = NULL;
  st = quiesce(p);
  if (st == RAP_OK) st = rapi_bp_sleep(&p->bp, mode);
  if (st != RAP_OK) p->bp.asleep = RAPI_AWAKE;
  return st;
}

static int ra_wake(void *state) {
  ra_pool *p = state;
  if (p->bp.asleep == RAPI_SLEEPING)
    return rapi_fail(RAP_ERR_BUSY, "rap_allocator_wake('%s'): a sleep is still waiting for the "
                     "pool's work", rap_allocator_name(p->bp.self));
  return rapi_bp_wake(&p->bp);
}

static int ra_owns(void *state, const void *ptr) {
  return rapi_map_contains_shared(&((ra_pool *)state)->bp.used, ptr);   /* from any thread */
}

const rap_strategy rapi_resource_aware_pool_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "ResourceAwarePool",
    .flags = RAP_STRATEGY_NEEDS_PARENT | RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(ra_pool),
    .init = ra_init,
    .fini = ra_fini,
    .allocate = ra_allocate,
    .deallocate = ra_deallocate,
    .stats = ra_stats,
    .owns = ra_owns,
    .release = ra_release,
    .check = ra_check,
    .record_resource = ra_record,
    .pointer_resource = ra_pointer_resource,
    .resource_stats = ra_resource_stats,
    .resource_gone = ra_resource_gone,
    .reset_peaks = ra_reset_peaks,
    .sleep = ra_sleep,
    .wake = ra_wake,
};
