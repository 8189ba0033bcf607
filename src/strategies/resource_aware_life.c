/* resource_aware_life.c — the ResourceAwarePool's life cycle and its views: init and teardown,
 * rap_release, statistics (the pool's and one resource's), the invariant walker, a resource's end
 * (its pending blocks freed, or handed to a resource still using them), and sleep and wake (the
 * pool's work waited for; pool/sleep.c does the memory).
 *
 * Offers the pair (resource_aware_pool.c, which holds the strategy's table) the table's entries
 * below; calls resource_aware_pending.c, and nothing in the pair or the miss path (a parked block
 * is unparked through the engine's flush).
 */
#include "strategies/resource_aware_pool.h"

#include <stdlib.h>
#include <string.h>

/* ---- release, statistics, check ------------------------------------------------------------- */

static RAPI_INLINE int ra_release_body(void *state) {
  ra_pool *p = state;
  if (p->bp.asleep) return RAP_OK;   /* nothing is mapped; the chunks keep their addresses */
  unpark(p);
  int st = rapi_ra_poll_all(p, true);
  rapi_bp_release(&p->bp, true);
  return st;
}

int rapi_ra_release(void *state) {
  int st;
  RAPI_GUARDED(st, ((ra_pool *)state)->bp.self, "rap_release", ra_release_body(state));
  return st;
}

int rapi_ra_reset_peaks(void *state) {
  ra_pool *p = state;
  rapi_bp_reset_peaks(&p->bp);
  rstate *rs, *tmp;
  HASH_ITER(hh, p->by_key, rs, tmp) rs->hwm = rs->current;
  return RAP_OK;
}

int rapi_ra_stats(void *state, rap_stats *out) {
  unpark(state);
  rapi_bp_stats(&((ra_pool *)state)->bp, out);
  out->waits = ((ra_pool *)state)->waits;
  out->host_waits = ((ra_pool *)state)->host_waits;
  return RAP_OK;
}

/* A resource's view: its live and pending blocks, and what it could take without waiting (the
 * pool's free blocks and its own pending blocks). */
int rapi_ra_resource_stats(void *state, rap_resource *r, rap_stats *out) {
  ra_pool *p = state;
  unpark(p);
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
    if (b->batch < last || b->batch > rs->clock.open)
      return CORRUPT("%s: pending block %p is out of batch order", who, (void *)b->base.ptr);
    if ((b->fifo_next ? b->fifo_next->fifo_prev : rs->fifo_tail) != b)
      return CORRUPT("%s: a pending list is broken at %p", who, (void *)b->base.ptr);
    size_t lent = b->base.lent;
    if (lent != 0 && (b->uses != NULL || lent_lo(p, lent) + lent_hi(p, lent) > b->base.size))
      return CORRUPT("%s: pending block %p counts %zu + %zu lent bytes in %zu%s", who,
                     (void *)b->base.ptr, lent_lo(p, lent), lent_hi(p, lent), b->base.size,
                     b->uses != NULL ? " and has uses" : "");
    last = b->batch;
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

int rapi_ra_check(void *state) {
  int st;
  RAPI_GUARDED(st, ((ra_pool *)state)->bp.self, "rap_allocator_check", ra_check_body(state));
  return st;
}

/* ---- life cycle ----------------------------------------------------------------------------- */

int rapi_ra_init(rap_allocator *self, void *state, rap_options *opts) {
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
  return RAP_OK;
}

/* Drops rs: its events go back to its resource, and the resource stops listing this pool. */
static void forget(ra_pool *p, rstate *rs) {
  rapi_clock_fini(&rs->clock, rs->r);
  HASH_DELETE(hh, p->by_key, rs);
  if (p->last == rs) p->last = NULL;
  for (unsigned i = 0; i < RA_RECENT; i++)
    if (p->recent[i] == rs) p->recent[i] = NULL;
  rap_resource_unwatch(rs->r, p->bp.self);
  free(rs);
}

/* Teardown waits for every pending block's events, then the chunks go back to the parent. */
void rapi_ra_fini(rap_allocator *self, void *state) {
  ra_pool *p = state;
  unpark(p);   /* a block parked on a queue is waited for as pending */
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
  while (*pu != NULL && (per_block((*pu)->rs) || passed((*pu)->rs, (*pu)->batch))) pu = &(*pu)->next;
  rstate *to = NULL;
  if (*pu == NULL) {
    /* Only per-block uses are left: the block waits on that resource (synchronous, so its own
     * batch has passed), its uses kept, until they pass. */
    for (rapi_use *u = b->uses; u != NULL; u = u->next)
      if (per_block(u->rs)) to = u->rs;
    b->batch = 0;
  } else {
    rapi_use *u = *pu;
    *pu = u->next;
    to = u->rs;
    b->batch = u->batch;
    to->uses_out--;
    rapi_slab_free(&p->use_recs, u);
  }
  ra_block *after = to->fifo_tail;
  while (after != NULL && after->batch > b->batch) after = after->fifo_prev;
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
  unpark(p);
  rstate *rs = state_of(p, r);
  if (rs == NULL) return;
  RAPI_ASSERT(rs->used_count == 0);   /* resource_gone(commit 0) said so */
  rapi_clock_pass_all(&rs->clock);
  if (rs->uses_out > 0)
    for (rapi_chunk *c = p->bp.chunks; c != NULL; c = c->next)
      for (rapi_block *b = c->first; b != NULL; b = b->next) drop_uses_on(p, rs, ra_of(b));
  while (rs->fifo_head != NULL) {
    ra_block *b = rs->fifo_head;
    if (rapi_ra_uses_passed(b)) rapi_ra_make_ready(p, rs, b);
    else rehome(p, rs, b);
  }
  forget(p, rs);
  (void)rapi_ra_poll_all(p, false);   /* blocks that waited only on r's uses come back */
}

/* The strategy table's resource_gone: r is being destroyed (commit 0: may it go? commit 1: it went). */
int rapi_ra_resource_gone(void *state, rap_resource *r, int commit) {
  if (!commit) return resource_busy(state, r);
  forget_resource(state, r);
  return RAP_OK;
}

/* ---- sleep and wake (pool/sleep.c does the memory) ------------------------------------------- */

/* Pending blocks that wait for an export of theirs to end (a use of the ipc resource, which sleep
 * cannot wait for: its importer closes, or the exporter revokes). */
static size_t pending_on_exports(ra_pool *p) {
  size_t n = 0;
  for (rapi_chunk *c = p->bp.chunks; c != NULL; c = c->next)
    for (rapi_block *b = c->first; b != NULL; b = b->next)
      for (rapi_use *u = b->state == RAPI_PENDING ? ra_of(b)->uses : NULL; u != NULL; u = u->next)
        if (per_block(u->rs)) {
          n++;
          break;
        }
  return n;
}

/* Waits until nothing queued can touch the pool's memory: every pending block's fence (the blocks
 * become free), then a point past the work of each resource that owns or was recorded on a used
 * block: an event recorded now, or a call-scoped resource's newest (its stream may be gone; work
 * queued there after rap's last call with it is the caller's to finish). Events only: other work
 * on the device goes on. Host waits let this thread's locks go, so the points are all taken first
 * and the resources held meanwhile. */
static int quiesce(ra_pool *p) {
  for (rstate *rs = p->by_key; rs != NULL; rs = rs->hh.next)
    if (!rs->clock.sync && rs_capturing(rs))
      return rapi_fail(RAP_ERR_BUSY, "rap_allocator_sleep('%s'): %s resource #%llu is capturing a "
                       "graph, and sleep would record an event into it; sleep after the capture",
                       rap_allocator_name(p->bp.self), rs->r->ops->kind,
                       (unsigned long long)rs->r->id);
  int st = rapi_ra_wait_all(p);
  if (st != RAP_OK) return st;
  size_t exported = p->bp.pending_count > 0 ? pending_on_exports(p) : 0;
  if (exported > 0)
    return rapi_fail(RAP_ERR_BUSY, "rap_allocator_sleep('%s'): %zu freed blocks wait for their "
                     "exports (rap_ipc_export) to end: sleep once each importer closed its block, "
                     "and take back with rap_ipc_revoke a descriptor nobody will import",
                     rap_allocator_name(p->bp.self), exported);
  if (p->bp.pending_count > 0)
    return rapi_fail(RAP_ERR_BUSY, "rap_allocator_sleep('%s'): %zu blocks are still pending on "
                     "the queue whose work is calling; sleep from elsewhere",
                     rap_allocator_name(p->bp.self), p->bp.pending_count);
  size_t n = 0;
  for (rstate *rs = p->by_key; rs != NULL; rs = rs->hh.next) n += !rs->clock.sync;
  if (n == 0) return RAP_OK;
  rapi_event *ev = rapi_calloc(n, sizeof *ev);
  if (ev == NULL)
    return rapi_fail(RAP_ERR_NOMEM, "rap_allocator_sleep('%s'): out of host memory",
                     rap_allocator_name(p->bp.self));
  size_t k = 0;
  for (rstate *rs = p->by_key; rs != NULL && st == RAP_OK; rs = rs->hh.next) {
    if (rs->clock.sync || (rs->used_count == 0 && rs->uses_out == 0)) continue;
    bool any = false;
    if ((st = rapi_resource_mark(rs->r, &ev[k], &any)) == RAP_OK && any) rapi_resource_ref(ev[k++].r);
  }
  for (size_t i = 0; i < k; i++) {
    if (st == RAP_OK) st = rapi_host_wait(&ev[i]);
    rapi_resource_unref(ev[i].r);
  }
  free(ev);
  return st;
}

int rapi_ra_sleep(void *state, int mode) {
  ra_pool *p = state;
  unpark(p);
  if (p->bp.asleep)
    return rapi_fail(RAP_ERR_BUSY, "rap_allocator_sleep('%s'): the pool is asleep already%s",
                     rap_allocator_name(p->bp.self),
                     p->bp.asleep == RAPI_SLEEPING ? " (another sleep is waiting for its work)" : "");
  int st = rapi_bp_can_sleep(&p->bp);
  if (st != RAP_OK) return st;
  if (mode == RAP_SLEEP_PREPARE) {
    st = rapi_bp_hold(&p->bp, RAPI_HOLD_NOTICE);
    return st == RAP_OK ? rapi_bp_prepare(&p->bp) : st;
  }
  if (mode == RAP_SLEEP_RELEASE) {
    rapi_bp_backup_free(&p->bp);
    return RAP_OK;
  }
  /* An exporting platform: no other process may map a chunk from now, and none does. */
  if ((st = rapi_bp_hold(&p->bp, RAPI_HOLD)) != RAP_OK) return st;
  p->bp.asleep = RAPI_SLEEPING;   /* others are refused while this waits with its locks let go */
  p->last = NULL;
  st = quiesce(p);
  if (st == RAP_OK) st = rapi_bp_sleep(&p->bp, mode);
  if (st != RAP_OK) {
    p->bp.asleep = RAPI_AWAKE;
    (void)rapi_bp_hold(&p->bp, RAPI_UNHOLD);
  }
  return st;
}

int rapi_ra_wake(void *state) {
  ra_pool *p = state;
  if (p->bp.asleep == RAPI_SLEEPING)
    return rapi_fail(RAP_ERR_BUSY, "rap_allocator_wake('%s'): a sleep is still waiting for the "
                     "pool's work", rap_allocator_name(p->bp.self));
  return rapi_bp_wake(&p->bp);
}
