/* resource_aware_miss.c — the ResourceAwarePool's way when the pair's does not serve: the best of a
 * resource's own pending blocks and the free ones (taken whole or cut, the remainder pending as it
 * was), polling first where cutting would break up memory a large request needs (a poor fit) or
 * mapping would pass the peak, a resource's own pending memory joined with free neighbours, bytes
 * lent to other resources' blocks taken back, cross_resource=wait, growth, and a host wait before
 * out of memory.
 *
 * Offers the pair (resource_aware_pool.c) rapi_ra_take_own_or_free, rapi_ra_allocate_slow and
 * rapi_ra_fill_to_join; calls resource_aware_pending.c, and nothing in the pair or the life cycle
 * (a parked block is unparked through the engine's flush).
 */
#include "strategies/resource_aware_pool.h"

#include <stdio.h>

/* ---- pending blocks ------------------------------------------------------------------------- */

/* A piece split off a pending block that holds only lent bytes: free again, merged with its free
 * neighbours (a split-off record has no state yet: make_free wants one that is not free). */
static void give_back(ra_pool *p, ra_block *x) {
  x->base.state = RAPI_USED;
  x->base.lent = 0;
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
  size_t lent = b->base.lent;   /* read before drop_pending clears it */
  ra_block *at = drop_pending(p, owner, b);
  char *ptr = b->base.ptr;
  size_t whole = b->base.size;
  /* A block with uses is handed out whole: a remainder would need the same uses. */
  ra_block *rem = b->uses == NULL ? ra_of(rapi_bp_split(&p->bp, &b->base, size)) : NULL;
  if (rem) {
    rem->batch = b->batch;
    rem->seq = b->seq;
    if (RAPI_UNLIKELY(lent != 0)) keep_lent(p, rem, lent, size);
    add_pending(p, owner, rem, at, false);
  }
  RAPI_TRACE("reuse", p->bp.self, owner->r, ptr, whole, ",\"pb\":%zu", owner->pending_bytes);
  free_uses(p, b);
  return rem;
}

/* Pending blocks never have unmapped pieces (unmap_free): the free blocks with holes in
 * [lo, end) are mapped again in one call over the whole span before any of it joins a pending
 * block (one at a time, a later mapping could go past the peak and give back the pieces of one
 * mapped before it); if that fails they stay free and apart (the status is logged). A deallocation
 * joins a free neighbour with holes only where mapping it stays within the pool's peak (joins):
 * past it, a free would raise what the pool holds, for bytes nobody asked for yet. */
RAPI_NOINLINE bool rapi_ra_fill_to_join(ra_pool *p, rapi_block *lo, rapi_block *end) {
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

/* ---- the miss ---------------------------------------------------------------------------------- */

/* Some resource has a recorded fence not yet known to have passed. */
static bool fenced_pending(const ra_pool *p) {
  for (const rstate *rs = p->by_key; rs != NULL; rs = rs->hh.next)
    if (rs->clock.fences.count > 0) return true;
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
 * pool's peak, a larger free block that the pool maps already serves instead (the fit is looser,
 * but no piece is unmapped elsewhere to map these: at the peak of a repeating step, taking the best
 * fit unmapped one block and mapped another of its size every step); failing that, pending memory
 * whose batches have passed comes back first (it merges, and what stays free gives its pieces back
 * before anything is mapped): the caller looks again. The poll is made at most once between two
 * deallocations, so a second look takes f, or (own) r's fitting pending block, which the pool maps
 * already. */
enum { RA_TAKE_FREE, RA_LOOK_AGAIN, RA_TAKE_OWN };
static bool mapped_enough(const void *bp, const rapi_block *b, size_t size) {
  return !b->holes || !rapi_bp_fill_passes_peak(bp, b, size);
}
static RAPI_NOINLINE int past_peak(ra_pool *p, rapi_block **fp, size_t size, bool own) {
  rapi_block *f = *fp;
  if (!rapi_bp_fill_passes_peak(&p->bp, f, size)) return RA_TAKE_FREE;
  rapi_block *m = rapi_index_find_if(&p->bp.free, size, 256, mapped_enough, &p->bp);
  if (m != NULL && rapi_bp_may_cut(&p->bp, m->size, size)) {   /* a larger free block, mapped */
    *fp = m;
    return RA_TAKE_FREE;
  }
  if (p->bp.pending_bytes > 0 && p->peak_polled != p->free_seq) {
    p->peak_polled = p->free_seq;
    (void)rapi_ra_poll_all(p, true);
    return RA_LOOK_AGAIN;
  }
  return own ? RA_TAKE_OWN : RA_TAKE_FREE;
}

/* The better fit of r's own pending blocks (reused with no event: r's stream order makes it safe)
 * and the free blocks, the pending one on a tie (below RA_TIE_BY_ADDRESS), and also where the
 * free one's holes would be mapped past the pool's peak (past_peak: memory the pool maps already
 * serves before memory it would map anew). Carving a small request out of a large pending block while a free one fits
 * better would chop up blocks that are about to merge back into whole
 * chunks, and the pool would grow for the next large request; preferring free memory over an
 * equally good pending block would let pending memory pile up on a stream the CPU runs ahead of. */
/* A large request (at least 32 MiB) whose own pending block and free block fit equally takes the
 * one at the lower address: a step repeated finds the last step's frees pending on its stream (the
 * first step found them free), and ties broken by state placed the step's large blocks elsewhere
 * each time, so that the range grew in later steps (docs/DESIGN.md, "The tail last"). At 16 MiB
 * it cost f1 (host replays); smaller ties keep the pending block. */
#define RA_TIE_BY_ADDRESS ((size_t)32 << 20)
static inline bool free_fits_better(const rapi_block *f, const ra_block *b, size_t size) {
  return b == NULL || f->size < b->base.size ||
         (size >= RA_TIE_BY_ADDRESS && f->size == b->base.size && f->ptr < b->base.ptr);
}

ra_block *rapi_ra_take_own_or_free(ra_pool *p, rstate *rs, size_t size) {
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
  if (b == NULL || b->base.size > size || size >= RA_TIE_BY_ADDRESS) {
    rapi_block *f = rapi_bp_find_free(&p->bp, size);
    if (f != NULL && free_fits_better(f, b, size)) {
      int how = RAPI_LIKELY(!f->holes) ? RA_TAKE_FREE : past_peak(p, &f, size, b != NULL);
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
    uint64_t batch = 0, seq = 0;
    rapi_block *end = hi->next;
    bool holes = false;
    for (rapi_block *x = lo; x != end; x = x->next) holes |= x->state == RAPI_FREE && x->holes;
    if (RAPI_UNLIKELY(holes) && !rapi_ra_fill_to_join(p, lo, end)) return NULL;
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
        if (rx->batch > batch) batch = rx->batch;
        if (rx->seq > seq) seq = rx->seq;
        drop_pending(p, rs, rx);
      } else {
        rapi_bp_unfree(&p->bp, x);
      }
    }
    while (lo->next != end) rapi_bp_absorb_next(&p->bp, lo);
    ra_block *joined = ra_of(lo);
    joined->batch = batch;
    joined->seq = seq;
    set_lent(p, joined, lent_front, lent_back);
    ra_block *at = rs->fifo_tail;   /* FIFO batches never decrease: after the last not newer */
    while (at != NULL && at->batch > batch) at = at->fifo_prev;
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
      if (f->base.lent == 0) continue;
      size_t lo = lent_lo(p, f->base.lent), hi = lent_hi(p, f->base.lent);
      if (lo >= size && lo < best_bytes && rapi_bp_may_cut(&p->bp, lo, size)) {
        best = f, owner = o, best_bytes = lo, front = true;
      }
      if (hi >= size && hi < best_bytes && rapi_bp_may_cut(&p->bp, hi, size)) {
        best = f, owner = o, best_bytes = hi, front = false;
      }
    }
  }
  if (best == NULL) return NULL;
  size_t lent = best->base.lent;
  size_t lo = lent_lo(p, lent), hi = lent_hi(p, lent);
  size_t at_byte = front ? lo : best->base.size - hi;   /* where the lent end begins or ends */
  bool hot = best == owner->hot;
  ra_block *at = drop_pending(p, owner, best);
  ra_block *give = best;
  if (at_byte != 0 && at_byte != best->base.size) {
    /* The lent end is split off; the record that keeps the rest goes back in best's place. */
    rapi_block *cut = rapi_bp_split(&p->bp, &best->base, at_byte);
    if (cut == NULL) {
      best->base.lent = lent;
      add_pending(p, owner, best, at, hot);
      return NULL;
    }
    ra_block *keep = front ? ra_of(cut) : best;
    give = front ? best : ra_of(cut);
    keep->batch = best->batch;
    keep->seq = best->seq;
    set_lent(p, keep, front ? 0 : lo, front ? hi : 0);
    add_pending(p, owner, keep, at, hot);
  }   /* else every byte of best was lent: it goes whole */
  give->base.state = RAPI_USED;   /* not free: give_back's merge must not take it in */
  give->owner = NULL;
  give->base.lent = 0;
  RAPI_TRACE("ready", p->bp.self, owner->r, give->base.ptr, give->base.size, ",\"pb\":%zu",
             owner->pending_bytes);
  rapi_block *extra = rapi_bp_split(&p->bp, &give->base, size);
  if (extra != NULL) give_back(p, ra_of(extra));
  return give;
}

/* A miss: poll, then (wait mode) take another resource's block behind a queued wait, then grow,
 * and before giving up wait on the host for every pending block. A host-side wait lets this
 * thread's locks go, so after one the pool is looked at afresh. */
RAPI_NOINLINE int rapi_ra_allocate_slow(ra_pool *p, rstate *rs, void **out, size_t bytes,
                                        size_t size) {
  char saved[512] = "";
  bool waited_all = false;
  for (unsigned round = 0;; round++) {
    unpark(p);   /* a host wait let this thread's locks go: another thread may have parked one */
    /* A host wait let this thread's locks go: others may have used the room made in the map. */
    int room = rapi_bp_reserve(&p->bp);
    if (room != RAP_OK) return room;
    /* The fences already recorded first: a recorded event costs a driver call, and where the
     * memory they bring back serves the request, the open batches need none yet. A failing
     * resource is logged; growing may still serve us. */
    ra_block *b = NULL;
    if (round == 0 && fenced_pending(p)) {
      (void)rapi_ra_poll_all(p, false);
      b = rapi_ra_take_own_or_free(p, rs, size);
    }
    if (b == NULL) {
      (void)rapi_ra_poll_all(p, true);
      b = rapi_ra_take_own_or_free(p, rs, size);
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

