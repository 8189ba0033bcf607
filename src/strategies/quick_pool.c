/* quick_pool.c — QuickPool: a coalescing pool with O(1) good-fit lookup.
 *
 * Chunks come from the parent; blocks are carved from chunks and linked by address so that freed
 * neighbours merge in O(1). Free blocks are indexed by a two-level segregated-fit bitmap
 * (block_pool.c). QuickPool does not track resources: like Umpire's, it is for one stream of
 * execution, or for callers who order their streams themselves.
 * Invariant: a block is in exactly one of {free index, used map}; neighbours are never both free.
 */
#include "pool/pool.h"

static int quick_init(rap_allocator *self, void *state, rap_options *opts) {
  return rapi_bp_init(state, self, opts, false, sizeof(rapi_block));
}

void rapi_quick_pool_fini(rap_allocator *self, void *state) {
  (void)self;
  rapi_bp_fini(state);
}

/* A miss: grow by a chunk (rapi_bp_grow_for releases and retries once if the parent is dry). */
static RAPI_NOINLINE int quick_allocate_slow(rapi_bp *bp, void **out, size_t bytes, size_t size) {
  rapi_block *b = NULL;
  int st = rapi_bp_grow_for(bp, size, &b);
  if (st == RAP_OK) st = rapi_bp_reserve_after_grow(bp, b);
  if (st != RAP_OK) return st;
  rapi_bp_mark_used(bp, b, bytes);
  *out = b->ptr;
  return RAP_OK;
}

/* The hit path: the block freed last if it has the size (no split, no index), else two bit scans,
 * unlink, maybe split; then one insert into the pointer table, which was made room for before
 * anything was taken, so that running out of host memory changes nothing. */
static RAPI_INLINE int quick_allocate_body(void *state, void **out, size_t bytes, rap_resource *r) {
  rapi_bp *bp = state;
  (void)r;
  size_t size;
  int st = rapi_bp_round(bp, bytes, &size);
  if (RAPI_UNLIKELY(st != RAP_OK)) return st;
  if (RAPI_UNLIKELY((st = rapi_bp_reserve(bp)) != RAP_OK)) return st;
  rapi_block *b = bp->deferred;
  if (b != NULL && b->size == size) {
    bp->deferred = NULL;
  } else {
    rapi_bp_flush(bp, false);
    b = rapi_bp_take_free(bp, size);
  }
  if (RAPI_UNLIKELY(b == NULL)) return quick_allocate_slow(bp, out, bytes, size);
  rapi_bp_mark_used(bp, b, bytes);
  *out = b->ptr;
  return RAP_OK;
}

/* The table's allocate: the body inside the thread guard (also DynamicPoolList's). */
RAPI_GUARDED_ENTRY(int, rapi_quick_pool_allocate, "rap_allocate", ((rapi_bp *)state)->self,
                   quick_allocate_body, (void *state, void **out, size_t bytes, rap_resource *r),
                   (state, out, bytes, r))

static RAPI_INLINE int quick_deallocate_body(void *state, void *ptr, rap_resource *r) {
  rapi_bp *bp = state;
  (void)r;
  size_t slot;
  rapi_block *b = rapi_bp_find_used_slot(bp, ptr, &slot);
  if (RAPI_UNLIKELY(b == NULL)) return rapi_bp_unknown_pointer(bp, ptr, "rap_deallocate");
  rapi_bp_unmark_used(bp, b, slot);
  rapi_bp_flush(bp, true);   /* the block deferred before merges now */
  if (rapi_bp_free_may_coalesce(bp, b)) {
    rapi_bp_after_free(bp, rapi_bp_make_free(bp, b));
  } else {
    b->state = RAPI_DEFERRED;   /* it waits unmerged for a request of its size */
    bp->deferred = b;
  }
  return RAP_OK;
}

RAPI_GUARDED_ENTRY(int, rapi_quick_pool_deallocate, "rap_deallocate", ((rapi_bp *)state)->self,
                   quick_deallocate_body, (void *state, void *ptr, rap_resource *r), (state, ptr, r))

static RAPI_INLINE int quick_release_body(void *state) {
  rapi_bp_release(state, true);
  return RAP_OK;
}

int rapi_quick_pool_release(void *state) {
  int st;
  RAPI_GUARDED(st, ((rapi_bp *)state)->self, "rap_release", quick_release_body(state));
  return st;
}

int rapi_quick_pool_reset_peaks(void *state) {
  rapi_bp_reset_peaks(state);
  return RAP_OK;
}

int rapi_quick_pool_stats(void *state, rap_stats *out) {
  rapi_bp_stats(state, out);
  return RAP_OK;
}

/* Safe from any thread (rap_allocator_find): a seqlock read of the used map. */
int rapi_quick_pool_owns(void *state, const void *ptr) {
  return rapi_map_contains_shared(&((rapi_bp *)state)->used, ptr);
}

int rapi_quick_pool_check(void *state) {
  int st;
  RAPI_GUARDED(st, ((rapi_bp *)state)->self, "rap_allocator_check", rapi_bp_check(state));
  return st;
}

const rap_strategy rapi_quick_pool_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "QuickPool",
    .flags = RAP_STRATEGY_NEEDS_PARENT | RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(rapi_bp),
    .init = quick_init,
    .fini = rapi_quick_pool_fini,
    .allocate = rapi_quick_pool_allocate,
    .deallocate = rapi_quick_pool_deallocate,
    .stats = rapi_quick_pool_stats,
    .reset_peaks = rapi_quick_pool_reset_peaks,
    .owns = rapi_quick_pool_owns,
    .release = rapi_quick_pool_release,
    .check = rapi_quick_pool_check,
};
