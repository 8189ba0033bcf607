/* check.c — the block engine's statistics, its invariant walker (rapi_bp_check, which
 * rap_allocator_check and RAP_DEBUG=2 run) and the sentence for a pointer the pool does not know.
 *
 * Nothing here is on the pair's way: it reads the chunks, blocks, index and counters that
 * block_pool.c keeps; the only change is the statistics' merge of the deferred block
 * (rapi_bp_flush) and the reset of the peaks.
 */
#include "pool/pool.h"

#include <stdio.h>
#include <string.h>

/* ---- statistics, checks, diagnostics --------------------------------------------------------- */

void rapi_bp_reset_peaks(rapi_bp *bp) {
  bp->hwm = bp->current;
  bp->actual_hwm = bp->actual;
}

/* Pages inside free blocks given back (holes) are not held: free bytes are what is mapped, the
 * largest free block is the largest that serves without a map, and the releasable bytes are what
 * a release would give back (a wholly free chunk's holes went already). */
static size_t unmapped_releasable(const rapi_bp *bp) {
  size_t n = 0;
  for (const rapi_chunk *c = bp->chunks; c != NULL; c = c->next)
    if (c->first->state == RAPI_FREE && rapi_bp_whole_chunk(c->first)) n += c->unmapped;
  return n;
}

static size_t largest_whole(const rapi_bp *bp) {
  size_t most = 0;
  for (const rapi_chunk *c = bp->chunks; c != NULL; c = c->next)
    for (const rapi_block *b = c->first; b != NULL; b = b->next)
      if (b->state == RAPI_FREE && !b->holes && b->size > most) most = b->size;
  return most;
}

void rapi_bp_stats(rapi_bp *bp, rap_stats *out) {
  rapi_bp_flush(bp, false);   /* figures as if the deferred block had merged at once */
  size_t unmapped = bp->unmapped;
  out->current_bytes = bp->current;
  out->high_watermark = bp->hwm;
  out->actual_bytes = bp->actual;
  out->actual_high_watermark = bp->actual_hwm;
  out->releasable_bytes = bp->releasable_bytes - (unmapped != 0 ? unmapped_releasable(bp) : 0);
  out->free_bytes = bp->free.bytes - unmapped;
  out->pending_bytes = bp->pending_bytes;
  out->largest_free_block = unmapped != 0 ? largest_whole(bp)
                            : bp->list    ? rapi_list_largest(&bp->free)
                                          : rapi_index_largest(&bp->free);
  out->allocation_count = bp->allocation_count;
  out->block_count = bp->block_count;
  out->pending_count = bp->pending_count;
  out->chunk_count = bp->chunk_count;
  out->used_bytes = bp->used_bytes;
  out->backup_bytes = bp->backup.cap;   /* host memory, kept for the next sleep */
}

#define CORRUPT(...) rapi_fail(RAP_ERR_CORRUPT, __VA_ARGS__)

static int check_chunk(rapi_bp *bp, rapi_chunk *c, size_t sums[4], size_t counts[4],
                       size_t *requested) {
  const char *who = rap_allocator_name(bp->self);
  rapi_block *b = c->first;
  if (b == NULL || b->prev != NULL || b->chunk != c)
    return CORRUPT("%s: chunk %p does not start with its first block", who, (void *)c->base);
  if ((uintptr_t)b->ptr % bp->alignment != 0 || b->ptr < c->base ||
      (size_t)(b->ptr - c->base) + c->usable > c->size)
    return CORRUPT("%s: chunk %p: the first block %p is misplaced", who, (void *)c->base, (void *)b->ptr);
  size_t tiled = 0;
  if (c->last == NULL || c->last->next != NULL || c->last->chunk != c)
    return CORRUPT("%s: chunk %p does not end with its last block", who, (void *)c->base);
  for (; b != NULL; b = b->next) {
    if (b->next == NULL && b != c->last)
      return CORRUPT("%s: chunk %p: its last block is %p, not %p", who, (void *)c->base,
                     (void *)b->ptr, (void *)c->last->ptr);
    if (b->chunk != c) return CORRUPT("%s: block %p names another chunk", who, (void *)b->ptr);
    if (b->size == 0 || b->size % bp->alignment != 0)
      return CORRUPT("%s: block %p has size %zu, not a multiple of %zu", who, (void *)b->ptr,
                     b->size, bp->alignment);
    if (b->state > RAPI_DEFERRED || (b->state == RAPI_DEFERRED && b != bp->deferred))
      return CORRUPT("%s: block %p has state %d", who, (void *)b->ptr, b->state);
    if (b->next && (b->next->prev != b || b->next->ptr != b->ptr + b->size))
      return CORRUPT("%s: blocks %p and its successor do not touch", who, (void *)b->ptr);
    if (b->next && b->state == RAPI_FREE && b->next->state == RAPI_FREE)
      return CORRUPT("%s: free blocks %p and %p are neighbours but were not merged", who,
                     (void *)b->ptr, (void *)b->next->ptr);
    if (b->state == RAPI_USED) {
      if (rapi_bp_find_used(bp, b->ptr) != b)
        return CORRUPT("%s: used block %p is missing from the pointer map", who, (void *)b->ptr);
      if (b->requested > b->size)
        return CORRUPT("%s: block %p holds %zu requested bytes in %zu", who, (void *)b->ptr,
                       b->requested, b->size);
      *requested += b->requested;
    }
    if (b->holes && b->state != RAPI_FREE)
      return CORRUPT("%s: block %p has unmapped pieces but is not free (state %d)", who,
                     (void *)b->ptr, b->state);
    sums[b->state] += b->size;
    counts[b->state]++;
    tiled += b->size;
  }
  if (c->unmapped > c->size)
    return CORRUPT("%s: chunk %p: %zu of its %zu bytes unmapped", who, (void *)c->base, c->unmapped,
                   c->size);
  if (tiled != c->usable)
    return CORRUPT("%s: chunk %p: blocks tile %zu of %zu bytes", who, (void *)c->base, tiled, c->usable);
  return RAP_OK;
}

static int check_index(rapi_bp *bp, size_t *indexed, size_t *indexed_bytes) {
  const char *who = rap_allocator_name(bp->self);
  for (unsigned fl = 0; fl < RAPI_FL_COUNT; fl++)
    for (unsigned sl = 0; sl < RAPI_SL_COUNT; sl++) {
      bool bit = (bp->free.sl_bitmap[fl] >> sl) & 1u;
      if (bit != (bp->free.heads[fl][sl] != NULL) || (bp->free.sl_bitmap[fl] != 0) != ((bp->free.fl_bitmap >> fl) & 1u))
        return CORRUPT("%s: the free index bitmaps disagree with its lists", who);
      for (rapi_block *b = bp->free.heads[fl][sl]; b != NULL; b = b->link_next) {
        if (b->state != RAPI_FREE || b->fl != fl || b->sl != sl)
          return CORRUPT("%s: block %p is in the free index but is not free there", who, (void *)b->ptr);
        (*indexed)++;
        *indexed_bytes += b->size;
      }
    }
  return RAP_OK;
}

static int check_list(rapi_bp *bp, size_t *indexed, size_t *indexed_bytes) {
  const char *who = rap_allocator_name(bp->self);
  for (rapi_block *b = bp->free.heads[0][0]; b != NULL; b = b->link_next) {
    if (b->state != RAPI_FREE)
      return CORRUPT("%s: block %p is in the free list but is not free", who, (void *)b->ptr);
    if (b->link_next && (b->link_next->link_prev != b || b->link_next->ptr <= b->ptr))
      return CORRUPT("%s: the free list is out of address order at %p", who, (void *)b->ptr);
    (*indexed)++;
    *indexed_bytes += b->size;
  }
  return RAP_OK;
}

int rapi_bp_check(rapi_bp *bp) {
  const char *who = rap_allocator_name(bp->self);
  size_t sums[4] = {0, 0, 0, 0}, counts[4] = {0, 0, 0, 0}, requested = 0, chunks = 0, actual = 0;
  size_t rel_bytes = 0, rel_chunks = 0, unmapped = 0;
  for (rapi_chunk *c = bp->chunks; c != NULL; c = c->next) {
    if (c->next && c->next->prev != c) return CORRUPT("%s: the chunk list is broken", who);
    int st = check_chunk(bp, c, sums, counts, &requested);
    if (st != RAP_OK) return st;
    chunks++;
    actual += c->size - c->unmapped;
    unmapped += c->unmapped;
    if (c->first->state == RAPI_FREE && rapi_bp_whole_chunk(c->first)) {
      rel_bytes += c->size;
      rel_chunks++;
    }
  }
  size_t indexed = 0, indexed_bytes = 0;
  int st = bp->list ? check_list(bp, &indexed, &indexed_bytes) : check_index(bp, &indexed, &indexed_bytes);
  if (st != RAP_OK) return st;
  size_t total_blocks = counts[0] + counts[1] + counts[2] + counts[3];
  if (counts[RAPI_DEFERRED] != (bp->deferred != NULL))
    return CORRUPT("%s: the deferred block is not where the pool says", who);
  if (indexed != counts[RAPI_FREE] || indexed_bytes != sums[RAPI_FREE] || bp->free.count != indexed ||
      bp->free.bytes != indexed_bytes)
    return CORRUPT("%s: %zu free blocks (%zu bytes) in chunks, %zu (%zu bytes) in the index", who,
                   counts[RAPI_FREE], sums[RAPI_FREE], indexed, indexed_bytes);
  if (bp->used.count != counts[RAPI_USED] || bp->allocation_count != counts[RAPI_USED] ||
      bp->used_bytes != sums[RAPI_USED] || bp->current != requested)
    return CORRUPT("%s: %zu used blocks in chunks, %zu in the map, %zu counted", who,
                   counts[RAPI_USED], bp->used.count, bp->allocation_count);
  if (bp->pending_count != counts[RAPI_PENDING] || bp->pending_bytes != sums[RAPI_PENDING])
    return CORRUPT("%s: %zu pending blocks in chunks, %zu counted", who, counts[RAPI_PENDING],
                   bp->pending_count);
  if (chunks != bp->chunk_count || actual != bp->actual || total_blocks != bp->block_count ||
      bp->block_recs.live != total_blocks || bp->chunk_recs.live != chunks)
    return CORRUPT("%s: %zu chunks and %zu blocks found, %zu and %zu counted", who, chunks,
                   total_blocks, bp->chunk_count, bp->block_count);
  if (unmapped != bp->unmapped)
    return CORRUPT("%s: its chunks have %zu bytes unmapped, %zu counted", who, unmapped, bp->unmapped);
  size_t usable = 0, rel_usable = 0;
  for (rapi_chunk *c = bp->chunks; c != NULL; c = c->next) {
    usable += c->usable;
    if (c->first->state == RAPI_FREE && rapi_bp_whole_chunk(c->first)) rel_usable += c->usable;
  }
  if (rel_bytes != bp->releasable_bytes || rel_chunks != bp->releasable_chunks ||
      rel_usable != bp->releasable_usable || usable != bp->usable)
    return CORRUPT("%s: %zu releasable bytes found, %zu counted", who, rel_bytes, bp->releasable_bytes);
  return RAP_OK;
}

int rapi_bp_unknown_pointer(rapi_bp *bp, const void *ptr, const char *fn) {
  const char *who = rap_allocator_name(bp->self);
  const char *p = ptr;
  for (rapi_chunk *c = bp->chunks; c != NULL; c = c->next) {
    if (p < c->first->ptr || p >= c->first->ptr + c->usable) continue;
    for (rapi_block *b = c->first; b != NULL; b = b->next) {
      if (p < b->ptr || p >= b->ptr + b->size) continue;
      if (p == b->ptr)
        return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "%s('%s'): %p is already %s (double free?)", fn,
                         who, ptr, b->state == RAPI_PENDING ? "pending" : "free");
      return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "%s('%s'): %p points %zu bytes into the %s block %p",
                       fn, who, ptr, (size_t)(p - b->ptr),
                       b->state == RAPI_USED ? "used" : b->state == RAPI_PENDING ? "pending" : "free",
                       (void *)b->ptr);
    }
  }
  return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "%s('%s'): %p was not handed out by this allocator", fn,
                   who, ptr);
}
