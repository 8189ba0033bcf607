/* resource_aware_pending.c — the ResourceAwarePool's pending memory coming back: fences (one event
 * per resource per batch), their polling, the drain of passed blocks to the free index, host waits
 * for every fence, and cross_resource=wait's device-side waits.
 *
 * A block deallocated on r carries r's open batch number; one event recorded later on r fences the
 * whole batch, and once it has completed (and every use of the block has passed) the block is free
 * for any resource. Nothing here is on the pair's way but fence_or_poll's rare calls.
 *
 * Offers the other three files what resource_aware_pool.h declares under its name; calls none of
 * them.
 */
#include "strategies/resource_aware_pool.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- uses --------------------------------------------------------------------------------------- */

void rapi_ra_free_uses_slow(ra_pool *p, ra_block *b) {
  for (rapi_use *u = b->uses, *next; u != NULL; u = next) {
    next = u->next;
    if (per_block(u->rs)) u->rs->r->ops->use_drop(u->rs->r, u->token);
    u->rs->uses_out--;
    rapi_slab_free(&p->use_recs, u);
  }
  b->uses = NULL;
}

bool rapi_ra_uses_passed(const ra_block *b) {
  for (const rapi_use *u = b->uses; u != NULL; u = u->next)
    if (per_block(u->rs) ? u->rs->r->ops->use_passed(u->rs->r, u->token) != 1 : !passed(u->rs, u->batch))
      return false;
  return true;
}

/* The uses of b on the per-block resource rs that ended for good (an export its importer closed,
 * or its exporter revoked), dropped while b lives on: a block exported again and again keeps only
 * the uses that may still hold it. */
void rapi_ra_drop_uses_over(ra_pool *p, ra_block *b, rstate *rs) {
  for (rapi_use **pp = &b->uses, *u; (u = *pp) != NULL;) {
    if (u->rs != rs || rs->r->ops->use_over(rs->r, u->token) != 1) {
      pp = &u->next;
      continue;
    }
    *pp = u->next;
    rs->r->ops->use_drop(rs->r, u->token);
    rs->uses_out--;
    rapi_slab_free(&p->use_recs, u);
  }
}

bool rapi_ra_has_per_block_use(const ra_block *b) {
  for (const rapi_use *u = b->uses; u != NULL; u = u->next)
    if (per_block(u->rs)) return true;
  return false;
}

/* ---- fences ------------------------------------------------------------------------------------- */

/* Records one event on rs covering every block that carries its open batch. Not while rs captures
 * a graph: the event would be a node of the graph, and its batch stays open until the capture
 * ends (its blocks stay rs's meanwhile). */
int rapi_ra_fence_open(ra_pool *p, rstate *rs) {
  if (rs->clock.sync || !rs->clock.dirty || rs_capturing(rs)) return RAP_OK;
  uint64_t batch = rs->clock.open;
  int st = rapi_clock_fence(&rs->clock, rs->r, p->bp.self, rs->open_count);
  if (st != RAP_OK) return st;
  if (RAPI_UNLIKELY(rapi_log_on(RAP_LOG_DEBUG)))
    rap_log(RAP_LOG_DEBUG, "%s: fenced batch %llu (%zu pending blocks) on %s resource #%llu",
            rap_allocator_name(p->bp.self), (unsigned long long)batch, rs->open_count,
            rs->r->ops->kind, (unsigned long long)rs->r->id);
  rs->open_count = 0;
  return RAP_OK;
}

/* ---- polling ------------------------------------------------------------------------------------ */

/* b, pending on rs, has passed (its batch and every use): free for every resource, merged. */
void rapi_ra_make_ready(ra_pool *p, rstate *rs, ra_block *b) {
  drop_pending(p, rs, b);
  RAPI_TRACE("ready", p->bp.self, rs->r, b->base.ptr, b->base.size, ",\"pb\":%zu", rs->pending_bytes);
  free_uses(p, b);
  b->owner = NULL;
  rapi_bp_make_free(&p->bp, &b->base);
}

/* Returns every pending block of rs whose owner batch and uses have passed to the free index. */
void rapi_ra_drain(ra_pool *p, rstate *rs) {
  ra_block *b = rs->fifo_head;
  while (b != NULL && passed(rs, b->batch)) {
    ra_block *next = b->fifo_next;
    if (rapi_ra_uses_passed(b)) rapi_ra_make_ready(p, rs, b);
    /* else it waits on a use elsewhere; blocks behind it need not */
    b = next;
  }
}

/* A resource whose events fail (a stream in error) keeps its pending blocks, is logged, and does
 * not stop the others from coming back; the first failure is returned for callers that care. */
int rapi_ra_poll_all(ra_pool *p, bool record) {
  int first = RAP_OK;
  for (rstate *rs = p->by_key; rs != NULL; rs = rs->hh.next) {
    int st = record ? rapi_ra_fence_open(p, rs) : RAP_OK;
    if (st == RAP_OK) st = rapi_ra_query_fences(rs);
    if (st != RAP_OK) {
      rap_log(RAP_LOG_WARN, "%s: polling a %s resource failed: %s", rap_allocator_name(p->bp.self),
              rs->r->ops->kind, rap_last_error());
      if (first == RAP_OK) first = st;
    }
  }
  for (rstate *rs = p->by_key; rs != NULL; rs = rs->hh.next) rapi_ra_drain(p, rs);
  return first;
}

/* Host-side wait for every fence: before out of memory, at teardown and before sleep. The locks
 * this thread holds are let go while it waits (rapi_host_wait), so the pool may change meanwhile:
 * each round polls afresh and waits for one resource's newest fence. No bound on rounds: each one
 * either waits for real work to pass or sets a resource aside, so without new frees from other
 * threads it ends after at most two rounds a resource. A queue's own work cannot wait for that
 * queue, nor for a queue that has waits of its own queued (rapi_host_wait: BUSY): such a resource
 * is set aside for this call, and its blocks stay pending. */
int rapi_ra_wait_all(ra_pool *p) {
  uint64_t call = ++p->wait_all_calls;   /* marks the resources set aside by this call */
  for (;;) {
    int st = rapi_ra_poll_all(p, true);
    if (st != RAP_OK) return st;
    rstate *rs = p->by_key;
    while (rs != NULL && (rs->clock.fences.count == 0 || rs->r == rapi_current_queue ||
                          rs->set_aside == call))
      rs = rs->hh.next;
    if (rs == NULL) return RAP_OK;
    uintptr_t key = rs->key;   /* rs may be gone once the wait let this thread's locks go */
    st = rapi_host_wait(rapi_clock_newest(&rs->clock));
    if (st == RAP_ERR_BUSY) {
      HASH_FIND(hh, p->by_key, &key, sizeof key, rs);
      if (rs != NULL) rs->set_aside = call;
    } else if (st != RAP_OK) {
      return st;
    }
  }
}

/* ---- cross_resource=wait -------------------------------------------------------------------- */

/* Makes rs wait for one event: queued on rs where the kinds allow, else on the host (with this
 * thread's locks let go, which sets *host_waited: the caller must start over). */
static int wait_event(ra_pool *p, rstate *rs, rapi_event *ev, bool *host_waited) {
  int st = rs->r->ops->wait(rs->r, ev);
  if (RAPI_UNLIKELY(rapi_tracing()) && st >= 0)
    rapi_trace("wait", p->bp.self, rs->r, NULL, 0, ",\"on\":%llu,\"host\":%s", (unsigned long long)ev->r->id,
               st == RAPI_HOST_WAIT ? "true" : "false");
  if (RAPI_UNLIKELY(rapi_log_on(RAP_LOG_DEBUG)) && st >= 0)
    rap_log(RAP_LOG_DEBUG, "cross_resource=wait: %s resource #%llu waits for %s resource #%llu %s",
            rs->r->ops->kind, (unsigned long long)rs->r->id, ev->r->ops->kind,
            (unsigned long long)ev->r->id, st == RAPI_HOST_WAIT ? "on the host" : "(queued)");
  if (st >= 0) p->waits++;
  if (st != RAPI_HOST_WAIT) return st;
  p->host_waits++;
  *host_waited = true;
  return rapi_host_wait(ev);
}

/* Makes rs wait for batch of o's: its event (the open batch fenced first), queued on rs or waited
 * for on the host (*host_waited). */
static int wait_batch(ra_pool *p, rstate *rs, rstate *o, uint64_t batch, bool *host_waited) {
  int st = batch == o->clock.open ? rapi_ra_fence_open(p, o) : RAP_OK;   /* the pool's own fence */
  rapi_event *ev = NULL;
  if (st == RAP_OK) st = rapi_clock_event(&o->clock, batch, &ev);
  if (st == RAP_OK && ev != NULL) st = wait_event(p, rs, ev, host_waited);
  return st;
}

/* Makes rs wait until owner's batch and every use of b have passed. After a host wait it returns
 * at once: b may have changed hands meanwhile. RAP_ERR_BUSY: the wait would be for the queue whose
 * work this thread is running. */
int rapi_ra_wait_for_block(ra_pool *p, rstate *rs, rstate *owner, ra_block *b, bool *host_waited) {
  int st = RAP_OK;
  if (owner != rs && !passed(owner, b->batch) && rs_capturing(owner)) return RAP_ERR_BUSY;
  for (rapi_use *u = b->uses; u != NULL; u = u->next)
    if (!per_block(u->rs) && u->rs != rs && !passed(u->rs, u->batch) && rs_capturing(u->rs))
      return RAP_ERR_BUSY;
  if (owner != rs && !passed(owner, b->batch)) st = wait_batch(p, rs, owner, b->batch, host_waited);
  for (rapi_use *u = b->uses; u != NULL && st == RAP_OK && !*host_waited; u = u->next)
    if (!per_block(u->rs) && u->rs != rs && !passed(u->rs, u->batch))
      st = wait_batch(p, rs, u->rs, u->batch, host_waited);
  return st;
}

/* Finds the pending block that fits and was freed first, among every owner's oldest (rs's own
 * blocks count only if they have uses: the others it could take already): the one whose work is
 * most likely done, so the wait is the shortest. */
ra_block *rapi_ra_find_waitable(ra_pool *p, rstate *rs, size_t size, rstate **owner) {
  ra_block *best = NULL;
  for (rstate *o = p->by_key; o != NULL; o = o->hh.next) {
    unsigned n = 0;
    for (ra_block *f = o->fifo_head; f != NULL && n < 64; f = f->fifo_next, n++) {
      if (f->base.size < size || (o == rs && f->uses == NULL) || rapi_ra_has_per_block_use(f) ||
          !rapi_bp_may_cut(&p->bp, f->base.size, size))
        continue;
      if (best == NULL || f->seq < best->seq) {
        best = f;
        *owner = o;
      }
      break;
    }
  }
  return best;
}
