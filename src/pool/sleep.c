/* sleep.c — a pool gives its physical memory back and keeps its addresses (rap_allocator_sleep).
 *
 * The pool's parent is a growable platform (rapi_resizable): every chunk is one of its live
 * allocations, which it can unmap and map again at the same addresses. Sleep first gives back what
 * no pointer refers to (wholly free chunks, free tails: they are unreserved, not kept), then in
 * BACKUP mode copies each run of touching used blocks into one host buffer, in address order, and
 * suspends every chunk. Wake resumes the chunks and copies the runs back in the same order. Free
 * and pending bytes are never copied; block records never move, so the pool's state is as it was.
 * Over an exporting platform the pool first takes its chunks out of the table importers read, and
 * refuses while another process maps some of them; a wake publishes the new memory once its bytes
 * are back (rapi_bp_hold).
 * Invariant: while asleep no chunk is mapped and the backup holds the live bytes (BACKUP).
 */
#include "pool/pool.h"

#include <stdio.h>

int rapi_bp_can_sleep(rapi_bp *bp) {
  const rapi_resizable *z = bp->resizable;
  if (z != NULL && z->suspend != NULL) return RAP_OK;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_allocator_sleep('%s'): sleep unmaps memory and keeps "
                   "its addresses, which needs a growable platform (HOST_VMM, DEVICE_VMM) as the "
                   "pool's parent; '%s' (%s) cannot", rap_allocator_name(bp->self),
                   rap_allocator_name(bp->parent), rap_allocator_strategy(bp->parent));
}

int rapi_bp_asleep_refusal(rapi_bp *bp, const char *fn) {
  return rapi_fail(RAP_ERR_BUSY, "%s('%s'): the pool is asleep (rap_allocator_sleep): its memory "
                   "is given back until rap_allocator_wake", fn, rap_allocator_name(bp->self));
}

void rapi_bp_backup_free(rapi_bp *bp) {
  if (bp->backup.host != NULL) bp->resizable->backup_free(bp->parent, &bp->backup);
}

/* The next run of touching used blocks, in address order: at[0] the chunk, at[1] the block
 * where the walk goes on (NULL: the chunk's first). */
static bool next_run(rapi_runs *runs, rapi_run *out) {
  for (rapi_chunk *c = runs->at[0]; c != NULL; c = runs->at[0] = c->next, runs->at[1] = NULL) {
    rapi_block *b = runs->at[1] != NULL ? runs->at[1] : c->first;
    while (b != NULL && b->state != RAPI_USED) b = b->next;
    if (b == NULL) continue;
    *out = (rapi_run){b->ptr, 0};
    for (; b != NULL && b->state == RAPI_USED; b = b->next) out->size += b->size;
    runs->at[1] = b;
    if (b == NULL) runs->at[0] = c->next;
    return true;
  }
  return false;
}

static size_t live_bytes(const rapi_bp *bp) {
  size_t n = 0;
  for (rapi_chunk *c = bp->chunks; c != NULL; c = c->next)
    for (rapi_block *b = c->first; b != NULL; b = b->next)
      if (b->state == RAPI_USED) n += b->size;
  return n;
}

/* Copies each run of touching used blocks to (to_host) or from the backup, packed in address
 * order; done when it returns. */
static int copy_runs(rapi_bp *bp, bool to_host) {
  rapi_runs runs = {live_bytes(bp), next_run, {bp->chunks, NULL}};
  return bp->resizable->copy(bp->parent, &bp->backup, &runs, to_host);
}

/* Suspends every chunk, first to last; stops at the first failure and sets *failed to that chunk
 * (the caller resumes it and those before it). */
static int suspend_all(rapi_bp *bp, rapi_chunk **failed) {
  const rapi_resizable *z = bp->resizable;
  for (rapi_chunk *c = bp->chunks; c != NULL; c = c->next) {
    int st = z->suspend(bp->parent, c->base);
    if (st != RAP_OK) {
      *failed = c;
      return st;
    }
  }
  return RAP_OK;
}

/* Maps every chunk from the first to last (included) again, after a failure: best effort, each
 * failure logged (the pool keeps its records; a chunk that could not come back stays unmapped). */
static void resume_to(rapi_bp *bp, rapi_chunk *last) {
  for (rapi_chunk *c = bp->chunks; c != NULL; c = c->next) {
    if (bp->resizable->resume(bp->parent, c->base) != RAP_OK)
      rap_log(RAP_LOG_ERROR, "%s: undoing a failed sleep: %s", rap_allocator_name(bp->self),
              rap_last_error());
    if (c == last) break;
  }
}

int rapi_bp_hold(rapi_bp *bp, int how) {
  const rapi_resizable *z = bp->resizable;
  if (z->hold == NULL || how == RAPI_HOLD_NOTICE)
    return z->hold == NULL ? RAP_OK : z->hold(bp->parent, NULL, how);
  for (rapi_chunk *c = bp->chunks; c != NULL; c = c->next) {
    int st = z->hold(bp->parent, c->base, how);
    if (st == RAP_OK || how == RAPI_UNHOLD) continue;
    char why[640];
    snprintf(why, sizeof why, "%s", rap_last_error());
    for (rapi_chunk *d = bp->chunks; d != c; d = d->next) (void)z->hold(bp->parent, d->base, RAPI_UNHOLD);
    return rapi_fail(st, "rap_allocator_sleep('%s'): %s. The pool stays awake and whole",
                     rap_allocator_name(bp->self), why);
  }
  return RAP_OK;
}

int rapi_bp_prepare(rapi_bp *bp) {
  size_t live = live_bytes(bp);
  return live > 0 ? bp->resizable->backup_reserve(bp->parent, &bp->backup, live, true) : RAP_OK;
}

int rapi_bp_sleep(rapi_bp *bp, int mode) {
  rapi_bp_release(bp, false);   /* what no pointer refers to goes back for good */
  int st = RAP_OK;
  size_t live = live_bytes(bp);
  if (mode == RAP_SLEEP_BACKUP && live > 0) {
    st = bp->resizable->backup_reserve(bp->parent, &bp->backup, live, false);
    if (st == RAP_OK) st = copy_runs(bp, true);
    if (st != RAP_OK) return st;
  }
  rapi_chunk *failed = NULL;
  rapi_bp_notify_chunks(bp, RAP_SEGMENT_UNMAP);   /* before the unmaps: registrants let go */
  st = suspend_all(bp, &failed);
  if (st != RAP_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", rap_last_error());
    resume_to(bp, failed);
    rapi_bp_holes_filled(bp);   /* the resumes mapped the pieces inside free blocks too */
    rapi_bp_notify_chunks(bp, RAP_SEGMENT_MAP);
    if (mode == RAP_SLEEP_BACKUP && copy_runs(bp, false) != RAP_OK)
      rap_log(RAP_LOG_ERROR, "%s: restoring after a failed sleep: %s", rap_allocator_name(bp->self),
              rap_last_error());
    return rapi_fail(st, "rap_allocator_sleep('%s'): %s; the pool stays awake%s",
                     rap_allocator_name(bp->self), why,
                     mode == RAP_SLEEP_BACKUP ? ", its contents restored"
                                              : " (discard: what was given back is not restored)");
  }
  bp->asleep = mode == RAP_SLEEP_BACKUP ? RAPI_ASLEEP_BACKUP : RAPI_ASLEEP_DISCARD;
  if (RAPI_UNLIKELY(rapi_log_on(RAP_LOG_DEBUG)))
    rap_log(RAP_LOG_DEBUG, "%s: asleep (%s), %zu chunks unmapped", rap_allocator_name(bp->self),
            mode == RAP_SLEEP_BACKUP ? "backup" : "discard", bp->chunk_count);
  return RAP_OK;
}

/* Puts every chunk back to sleep after a failed wake; a chunk that will not unmap stays mapped,
 * which wastes memory but loses nothing (the backup is still whole). */
static void resleep(rapi_bp *bp) {
  for (rapi_chunk *c = bp->chunks; c != NULL; c = c->next)
    if (bp->resizable->suspend(bp->parent, c->base) != RAP_OK)
      rap_log(RAP_LOG_WARN, "%s: after a failed wake: %s", rap_allocator_name(bp->self),
              rap_last_error());
}

int rapi_bp_wake(rapi_bp *bp) {
  if (bp->asleep < RAPI_ASLEEP_BACKUP)
    return rapi_fail(RAP_ERR_INVALID, "rap_allocator_wake('%s'): the pool is not asleep",
                     rap_allocator_name(bp->self));
  int st = RAP_OK;
  for (rapi_chunk *c = bp->chunks; c != NULL && st == RAP_OK; c = c->next)
    st = bp->resizable->resume(bp->parent, c->base);
  if (st == RAP_OK && bp->asleep == RAPI_ASLEEP_BACKUP) st = copy_runs(bp, false);
  if (st != RAP_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", rap_last_error());
    resleep(bp);
    return rapi_fail(st, "rap_allocator_wake('%s'): %s; the pool stays asleep with its contents "
                     "kept, and wake may be tried again", rap_allocator_name(bp->self), why);
  }
  bp->asleep = RAPI_AWAKE;
  rapi_bp_holes_filled(bp);   /* the resumes mapped the pieces inside free blocks too */
  rapi_bp_notify_chunks(bp, RAP_SEGMENT_MAP);
  (void)rapi_bp_hold(bp, RAPI_UNHOLD);   /* importers open the new memory from now */
  return RAP_OK;
}
