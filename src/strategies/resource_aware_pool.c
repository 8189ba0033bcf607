/* resource_aware_pool.c — ResourceAwarePool: a QuickPool that knows which stream used each block.
 *
 * Every block is free, used or pending, and used and pending blocks have an owning resource. A
 * block deallocated on resource r is pending on r: r may take it back at once (its own stream
 * order makes that safe, with no event and no driver call), any other resource only once r has
 * passed the point of the deallocation (its batch). The rules, one line each with the function
 * that owns it, head resource_aware_pool.h.
 *
 * This file is the pair: the strategy's table, the resource lookup, allocate and deallocate, the
 * hot block and the parked block, the merge of a freed block with its neighbours, rap_record_resource.
 * What the pair does not serve goes to resource_aware_miss.c; the table's other entries are in
 * resource_aware_life.c; fences, polling and waits in resource_aware_pending.c. It offers the
 * others nothing but the table (they unpark a parked block through the engine's flush, which calls
 * flush_parked here).
 */
#include "strategies/resource_aware_pool.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- resources ------------------------------------------------------------------------------ */

/* Not the last call's resource: one of the few before it (streams taking turns: no hash lookup),
 * else the hash, else a new state. */
static RAPI_NOINLINE rstate *lookup_slow(ra_pool *p, rap_resource *r) {
  if (p->bp.asleep) return NULL;   /* the callers tell this from out of memory */
  unpark(p);   /* before a new state: how the parked block merges depends on how many there are */
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
    rs->fence_at = r->call_scoped ? 1 : RAPI_EAGER_FENCE;
    rapi_clock_init(&rs->clock, r);
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
static inline bool one_growing_resource(const ra_pool *p) {
  return !p->cross_wait && HASH_COUNT(p->by_key) == 1;
}

/* b, freed on owner and joined to no block before it, stays apart from next (see merge_pending). */
static RAPI_INLINE bool kept_apart(const ra_pool *p, const rstate *owner, const ra_block *b,
                                   const ra_block *next) {
  return next != NULL && b == owner->split_head && next == owner->split_rem && one_growing_resource(p);
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

static RAPI_NOINLINE bool fill_block_to_join(ra_pool *p, ra_block *nb) {
  return rapi_ra_fill_to_join(p, &nb->base, nb->base.next);
}

static inline bool ready_to_join(ra_pool *p, ra_block *nb) {
  return RAPI_LIKELY(!nb->base.holes) || fill_block_to_join(p, nb);
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

/* A call-scoped resource's fence failed while its call runs: left open, the batch would be fenced
 * later, on a stream that may be gone by then. Its stream is still there: synchronized, every
 * batch has passed, and its blocks come back now. Where even that fails (a stream in error), the
 * open batch is never fenced: its blocks stay pending, logged, and the stream is not touched again. */
static RAPI_NOINLINE void scoped_fence_failed(ra_pool *p, rstate *rs) {
  if (rs->r->ops->synchronize(rs->r) != RAP_OK) {
    rap_log(RAP_LOG_WARN, "%s: synchronizing a call-scoped %s resource failed: %s; the blocks freed "
            "on it stay pending", rap_allocator_name(p->bp.self), rs->r->ops->kind, rap_last_error());
    rs->clock.dirty = false;
    rs->open_count = 0;
    return;
  }
  rapi_clock_pass_all(&rs->clock);
  rs->open_count = 0;
  rapi_ra_drain(p, rs);
}

/* After a deallocation on rs. Many blocks waiting in the open batch (any, call-scoped): fence it now, so that by the
 * time memory is wanted the event has long completed. Otherwise, now and then, ask the oldest
 * fences: what has passed goes back to the free index and merges, so other resources find whole
 * blocks before they miss. A resource reusing one block over and over has no fence and never 16
 * pending blocks, so it still makes no driver call. A failure only delays reuse: it is logged. */
static RAPI_INLINE void fence_or_poll(ra_pool *p, rstate *rs) {
  int st = RAP_OK;
  if (rs->open_count >= rs->fence_at) {
    st = rapi_ra_fence_open(p, rs);
  } else if (rs->clock.fences.count > 0 && (++rs->ticks & (RAPI_EAGER_FENCE - 1)) == 0) {
    st = rapi_ra_query_fences(rs);
    if (st == RAP_OK) rapi_ra_drain(p, rs);
  }
  if (st != RAP_OK) {
    rap_log(RAP_LOG_WARN, "%s: fencing or polling a %s resource failed: %s",
            rap_allocator_name(p->bp.self), rs->r->ops->kind, rap_last_error());
    if (scoped(rs)) scoped_fence_failed(p, rs);
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
    unpark(p);
    b = rapi_ra_take_own_or_free(p, rs, size);
    if (RAPI_UNLIKELY(b == NULL)) return rapi_ra_allocate_slow(p, rs, out, bytes, size);
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
 * pending on its owner with the open batch and the owner's hot block; then fence or poll. A free
 * that does not name a call-scoped owner (NULL: rap.hpp frees a block so after recording the
 * stream it was freed on) is no call with the owner, whose stream may be gone: the block takes
 * the owner's last fenced batch, and its work after that is the caller's to have ordered before
 * the uses recorded (as RMM asks of a buffer moved to another stream). */
static RAPI_NOINLINE void free_pending(ra_pool *p, rstate *owner, ra_block *b, uint64_t seq,
                                       bool named) {
  char *ptr = b->base.ptr;
  size_t freed = b->base.size;
  if (b->uses == NULL) b = merge_pending(p, owner, b);
  b->seq = seq;
  b->batch = named || !scoped(owner) ? rapi_clock_stamp(&owner->clock) : owner->clock.open - 1;
  for (rapi_use *u = b->uses; u != NULL; u = u->next) {
    if (per_block(u->rs) || scoped(u->rs)) continue;   /* a token; a batch fenced when recorded */
    u->batch = rapi_clock_stamp(&u->rs->clock);
  }
  add_pending(p, owner, b, owner->fifo_tail, true);
  RAPI_TRACE("pending", p->bp.self, owner->r, ptr, freed, ",\"pb\":%zu", owner->pending_bytes);
  fence_or_poll(p, owner);
}

/* ---- the parked block ------------------------------------------------------------------------
 * The block freed last waits in the engine's deferred slot (state DEFERRED, its owner kept) when
 * nothing about its free has to happen at once (may_park). The owner's next request of its size
 * takes it back as it is (ra_allocate_body); anything else first does its free (unpark, in
 * resource_aware_pool.h: through the engine's flush, which calls flush_parked), on the state the
 * free left, so as it would have been done at once. The next call of any kind unparks it: every
 * entry point but owns, pointer_resource, check and reset_peaks, which change nothing it depends
 * on, and the engine's own flush where a parent or a host wait let this thread's locks go and
 * another thread parked a block meanwhile. */

/* The engine's flush of its deferred block (rapi_bp_flush): the parked block's free, done now (it
 * was parked with its seq, on a queue). */
static void flush_parked(rapi_bp *bp, rapi_block *parked) {
  ra_pool *p = (ra_pool *)(void *)((char *)bp - offsetof(ra_pool, bp));
  ra_block *b = ra_of(parked);
  b->base.state = RAPI_USED;   /* as its free found it */
  if (b->owner->clock.sync) free_now(p, b);
  else free_pending(p, b->owner, b, b->seq, true);
}

/* Whether b, just freed on owner without uses, may be parked: taken back by owner's next request
 * of its size or unparked at the next call, the pool ends as the free done now would leave it.
 * The host resource: unless the free may make a heuristic fire (as QuickPool defers) or may leave
 * a free block at the end of a chunk that grows in place (the heuristic's trim). A queue: when b
 * becomes the hot block (there is none), joins no neighbour (a next one it would be kept apart
 * from, as merge_pending keeps it, counts as none: a stream that switched to this size from the
 * remainder's parks its pair too), and its free neither fences (the open batch below
 * fence_at with it: never on a call-scoped owner) nor polls (no fence recorded); not while tracing, so that every free
 * of a traced run is a "pending" line. */
static RAPI_INLINE bool may_park(const ra_pool *p, const rstate *owner, const ra_block *b) {
  const rapi_block *prev = b->base.prev, *next = b->base.next;
  if (owner->clock.sync)
    return !rapi_bp_free_may_coalesce(&p->bp, &b->base) &&
           (RAPI_LIKELY(p->bp.resizable == NULL) ||
            (next != NULL && !(next->state == RAPI_FREE && next->next == NULL)));
  if (owner->hot != NULL || owner->clock.fences.count != 0 ||
      owner->open_count + 1 >= owner->fence_at || RAPI_UNLIKELY(rapi_tracing()))
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

/* A free with no parked block to unpark first (the pair's, where the allocation took it back). */
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
    if (!owner->clock.sync) {   /* what the free does now that the pair undoes not */
      b->seq = ++p->free_seq;
      (void)rapi_clock_stamp(&owner->clock);
    }
    b->base.state = RAPI_DEFERRED;
    p->bp.deferred = &b->base;
    return RAP_OK;
  }
  if (owner->clock.sync && b->uses == NULL) free_now(p, b);
  else free_pending(p, owner, b, ++p->free_seq, r != NULL);
  return RAP_OK;
}

/* The block parked before is unparked first (it changes no used block), out of line: the free
 * without one then keeps nothing across a call until its end. */
static RAPI_NOINLINE int ra_free_after_unpark(ra_pool *p, void *ptr, rap_resource *r) {
  rapi_bp_flush(&p->bp, false);
  return ra_free(p, ptr, r);
}

static RAPI_INLINE int ra_deallocate_body(void *state, void *ptr, rap_resource *r) {
  ra_pool *p = state;
  if (RAPI_UNLIKELY(p->bp.asleep)) return rapi_bp_asleep_refusal(&p->bp, "rap_deallocate");
  if (RAPI_UNLIKELY(p->bp.deferred != NULL)) return ra_free_after_unpark(p, ptr, r);
  return ra_free(p, ptr, r);
}

RAPI_GUARDED_ENTRY(static int, ra_deallocate, "rap_deallocate", ((ra_pool *)state)->bp.self,
                   ra_deallocate_body, (void *state, void *ptr, rap_resource *r), (state, ptr, r))

/* Each record on a per-block resource is a use of its own (an export per descriptor), with the
 * token the resource gives for this block; the block's uses there that ended go first. */
static int record_per_block(ra_pool *p, ra_block *b, rstate *rs) {
  rapi_ra_drop_uses_over(p, b, rs);
  rapi_use *u = rapi_slab_alloc(&p->use_recs);
  if (u == NULL)
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for a use record",
                     rap_allocator_name(p->bp.self));
  int st = rs->r->ops->use_bind(rs->r, b->base.ptr, b->base.requested, &u->token);
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

/* A use on a call-scoped resource covers its work queued before the record returns: fenced now,
 * as its stream may be gone by the block's free (free_pending keeps this batch). A record again
 * moves the use to a new fence. Not while its stream captures a graph: no event can be recorded. */
static RAPI_NOINLINE int fence_use(ra_pool *p, rapi_use *u) {
  rstate *rs = u->rs;
  if (rs_capturing(rs))
    return rapi_fail(RAP_ERR_BUSY, "rap_record_resource('%s'): call-scoped %s resource #%llu is "
                     "capturing a graph, and its use could be fenced only after its stream may be "
                     "gone; record the use after the capture", rap_allocator_name(p->bp.self),
                     rs->r->ops->kind, (unsigned long long)rs->r->id);
  uint64_t batch = rapi_clock_stamp(&rs->clock);
  int st = rapi_ra_fence_open(p, rs);
  if (st == RAP_OK) u->batch = batch;
  return st;
}

static RAPI_INLINE int ra_record_body(void *state, void *ptr, rap_resource *r) {
  ra_pool *p = state;
  unpark(p);
  ra_block *b = ra_of(rapi_bp_find_used(&p->bp, ptr));
  if (b == NULL) return rapi_bp_unknown_pointer(&p->bp, ptr, "rap_record_resource");
  rstate *rs = lookup(p, r);
  if (rs == NULL) return no_rstate(p, "rap_record_resource");
  if (per_block(rs)) return record_per_block(p, b, rs);
  if (rs->clock.sync || rs == b->owner) return RAP_OK;   /* already in order */
  rapi_use *u = b->uses;
  while (u != NULL && u->rs != rs) u = u->next;
  if (u != NULL) return scoped(rs) ? fence_use(p, u) : RAP_OK;
  u = rapi_slab_alloc(&p->use_recs);
  if (u == NULL)
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for a use record",
                     rap_allocator_name(p->bp.self));
  u->rs = rs;
  u->batch = 0;
  u->next = b->uses;
  b->uses = u;
  rs->uses_out++;
  int st = scoped(rs) ? fence_use(p, u) : RAP_OK;
  if (st != RAP_OK) {   /* not fenced: no use, rather than one that counts as passed */
    b->uses = u->next;
    rs->uses_out--;
    rapi_slab_free(&p->use_recs, u);
  }
  return st;
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


/* The life cycle's init (resource_aware_life.c), and the engine told how to flush a parked block. */
static int ra_init(rap_allocator *self, void *state, rap_options *opts) {
  int st = rapi_ra_init(self, state, opts);
  if (st == RAP_OK) ((ra_pool *)state)->bp.flush_deferred = flush_parked;
  return st;
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
    .fini = rapi_ra_fini,
    .allocate = ra_allocate,
    .deallocate = ra_deallocate,
    .stats = rapi_ra_stats,
    .owns = ra_owns,
    .release = rapi_ra_release,
    .check = rapi_ra_check,
    .record_resource = ra_record,
    .pointer_resource = ra_pointer_resource,
    .resource_stats = rapi_ra_resource_stats,
    .resource_gone = rapi_ra_resource_gone,
    .reset_peaks = rapi_ra_reset_peaks,
    .sleep = rapi_ra_sleep,
    .wake = rapi_ra_wake,
};
