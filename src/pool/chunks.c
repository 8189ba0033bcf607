/* chunks.c — chunks from the parent: a new one, the newest grown in place, ends and whole chunks
 * given back.
 *
 * A chunk is one allocation of the parent that blocks tile. Over a growable parent (HOST_VMM,
 * DEVICE_VMM) the newest chunk grows at its end and any chunk gives its free end back by range.
 * Offers block_pool.c, which decides when (a miss, a release, the heuristics): a new chunk
 * (rapi_bp_grow_exact), the newest grown in place (rapi_bp_grow_in_place), a free end given back
 * (rapi_bp_trim_tail), the one wholly free chunk shrunk (rapi_bp_shrink_free_chunk), and every
 * wholly free chunk given back (rapi_bp_release_whole_chunks). Blocks are split and merged there.
 */
#include "pool/pool.h"

#include <string.h>

/* ---- a new chunk ------------------------------------------------------------------------------ */

int rapi_bp_grow_exact(rapi_bp *bp, size_t usable, rapi_block **out) {
  RAPI_ASSERT(usable > 0 && usable % bp->alignment == 0);
  /* A resizable parent maps whole granules: the chunk uses all it maps. */
  if (bp->resizable != NULL) usable = rapi_align_up(usable, bp->resizable->granularity);
  size_t pad = bp->parent_alignment >= bp->alignment ? 0 : bp->alignment - bp->parent_alignment;
  size_t request = usable + pad;
  if (bp->resizable != NULL) rapi_bp_before_mapping(bp, request, NULL, NULL, NULL);
  void *base = NULL;
  int st = rap_allocate(bp->parent, &base, request, NULL);
  if (st != RAP_OK) return st;
  /* Records only once the parent answered: a parent pool may let the locks above go while it
   * waits, and a check meanwhile must not count half-made records. */
  rapi_chunk *c = rapi_slab_alloc(&bp->chunk_recs);
  rapi_block *b = c ? rapi_slab_alloc(&bp->block_recs) : NULL;
  if (b == NULL) {
    if (c) rapi_slab_free(&bp->chunk_recs, c);
    if (rap_deallocate(bp->parent, base, NULL) != RAP_OK)
      rap_log(RAP_LOG_WARN, "%s: giving a chunk back failed: %s", rap_allocator_name(bp->self),
              rap_last_error());
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for block records",
                     rap_allocator_name(bp->self));
  }
  memset(c, 0, sizeof *c);
  memset(b, 0, bp->record_size);
  c->base = base;
  c->size = request;
  c->usable = usable;
  c->first = b;
  c->last = b;
  c->next = bp->chunks;
  if (bp->chunks) bp->chunks->prev = c;
  bp->chunks = c;
  b->ptr = (char *)rapi_align_up((uintptr_t)base, bp->alignment);
  b->size = usable;
  b->chunk = c;
  b->state = RAPI_FREE;
  bp->actual += request;
  bp->usable += usable;
  if (bp->actual > bp->actual_hwm) bp->actual_hwm = bp->actual;
  if (bp->actual > bp->map_peak) bp->map_peak = bp->actual;
  bp->chunk_count++;
  RAPI_TRACE("grow", bp->self, NULL, base, request, ",\"held\":%zu", bp->actual);
  rapi_segment_notify(bp->self, RAP_SEGMENT_MAP, base, request, base, request);
  if (RAPI_UNLIKELY(rapi_log_on(RAP_LOG_DEBUG))) {
    char sz[32], held[32];
    rapi_format_size(sz, sizeof sz, request);
    rapi_format_size(held, sizeof held, bp->actual);
    rap_log(RAP_LOG_DEBUG, "%s: grew by a chunk of %s from '%s' (%zu chunks, %s held)",
            rap_allocator_name(bp->self), sz, rap_allocator_name(bp->parent), bp->chunk_count, held);
  }
  bp->block_count++;
  *out = b;
  return RAP_OK;
}

/* ---- chunks given back whole ------------------------------------------------------------------ */

static void drop_chunk(rapi_bp *bp, rapi_chunk *c) {
  if (RAPI_UNLIKELY(rapi_log_on(RAP_LOG_DEBUG))) {
    char sz[32];
    rapi_format_size(sz, sizeof sz, c->size);
    rap_log(RAP_LOG_DEBUG, "%s: gave a chunk of %s back to '%s'", rap_allocator_name(bp->self), sz,
            rap_allocator_name(bp->parent));
  }
  if (c->prev) c->prev->next = c->next;
  else bp->chunks = c->next;
  if (c->next) c->next->prev = c->prev;
  bp->actual -= c->size - c->unmapped;   /* its unmapped pieces were not counted */
  bp->unmapped -= c->unmapped;
  bp->usable -= c->usable;
  bp->chunk_count--;
  RAPI_TRACE("release", bp->self, NULL, c->base, c->size, ",\"held\":%zu", bp->actual);
  bp->block_count--;
  rapi_slab_free(&bp->block_recs, c->first);
  rapi_slab_free(&bp->chunk_recs, c);
}

size_t rapi_bp_release_whole_chunks(rapi_bp *bp) {
  size_t released = 0;
  if (bp->releasable_chunks > 0) rapi_bp_sync_before_unmap(bp);
  for (rapi_chunk *c = bp->chunks, *next; c != NULL; c = next) {
    next = c->next;
    rapi_block *b = c->first;
    if (b->state != RAPI_FREE || !rapi_bp_whole_chunk(b)) continue;
    rapi_segment_notify(bp->self, RAP_SEGMENT_UNMAP, c->base, c->size, c->base, c->size);
    if (rap_deallocate(bp->parent, c->base, NULL) != RAP_OK) {
      rap_log(RAP_LOG_WARN, "%s: the parent '%s' refused a chunk back: %s",
              rap_allocator_name(bp->self), rap_allocator_name(bp->parent), rap_last_error());
      if (bp->resizable == NULL)   /* kept, whole: its observers hear of it again */
        rapi_segment_notify(bp->self, RAP_SEGMENT_MAP, c->base, c->size, c->base, c->size);
      /* A growable parent may have unmapped part of it before it failed: the pool lets the chunk
       * go rather than hand out pages that may be gone (the platform unmaps the rest at its end). */
      if (bp->resizable == NULL) continue;
      rap_log(RAP_LOG_WARN, "%s: the chunk at %p is dropped and stays with '%s'",
              rap_allocator_name(bp->self), (void *)c->base, rap_allocator_name(bp->parent));
    }
    rapi_bp_unindex_free(bp, b);
    released += c->size;
    drop_chunk(bp, c);
  }
  return released;
}

/* ---- chunks that grow and shrink at their ends (a resizable parent: HOST_VMM, DEVICE_VMM) -------
 * The newest chunk asks the parent for more bytes right after its end. They join the chunk's last
 * block if that is free (a request that fits only across the old end is served at once), else
 * they become a new free block after it: either way one chunk, whose free space merges across
 * what would have been a chunk boundary. Giving back works the other way: the free pages at the
 * end of a chunk go back by range (rapi_bp_trim_tail), as whole mappings of the parent. */

static void note_resize(rapi_bp *bp, rapi_chunk *c, size_t bytes, const char *ev) {
  bool grew = bytes > c->size;
  size_t delta = grew ? bytes - c->size : c->size - bytes;
  const char *end = c->base + (grew ? c->size : bytes);
  if (grew) {
    c->usable += delta;
    bp->actual += delta;
    bp->usable += delta;
    if (bp->actual > bp->actual_hwm) bp->actual_hwm = bp->actual;
    if (bp->actual > bp->map_peak) bp->map_peak = bp->actual;
  } else {
    c->usable -= delta;
    bp->actual -= delta;
    bp->usable -= delta;
  }
  c->size = bytes;
  RAPI_TRACE(ev, bp->self, NULL, end, delta, ",\"held\":%zu,\"in_place\":true", bp->actual);
  if (RAPI_UNLIKELY(rapi_log_on(RAP_LOG_DEBUG))) {
    char sz[32], held[32];
    rapi_format_size(sz, sizeof sz, delta);
    rapi_format_size(held, sizeof held, bp->actual);
    rap_log(RAP_LOG_DEBUG, "%s: %s %s at the end of its chunk %p in '%s' (%s held)",
            rap_allocator_name(bp->self), grew ? "mapped" : "gave back", sz, (void *)c->base,
            rap_allocator_name(bp->parent), held);
  }
}

int rapi_bp_grow_in_place(rapi_bp *bp, size_t size, rapi_block **out) {
  rapi_chunk *c = bp->chunks;
  rapi_block *last = c->last;
  size_t have = last->state == RAPI_FREE ? last->size : 0;
  RAPI_ASSERT(have < size);
  size_t need = size - have;
  /* Beyond what the request lacks, a growth adds next_size, or a 32nd of what the pool holds where
   * that is less (at least a granule): the free end a growth leaves stays a small part of what a
   * small pool holds (docs/DESIGN.md, "Growth in proportion"). */
  size_t step = bp->actual / RAPI_GROW_SHARE;
  if (step > bp->next_size) step = bp->next_size;
  size_t add = need > step ? need : step;
  add = rapi_align_up(add, bp->resizable->granularity);
  /* The record first, so that nothing needs undoing once the parent has mapped. */
  rapi_block *b = have ? last : rapi_slab_alloc(&bp->block_recs);
  if (b == NULL) return RAP_ERR_NOMEM;
  size_t bytes = c->size;
  rapi_bp_before_mapping(bp, add, have ? last : NULL, NULL, NULL);
  int st = add > SIZE_MAX / 4 - c->size ? RAP_ERR_NOMEM
                                          : bp->resizable->resize(bp->parent, c->base, &bytes, c->size + add);
  if (st != RAP_OK || bytes <= c->size) {
    if (!have) rapi_slab_free(&bp->block_recs, b);
    return st != RAP_OK ? st : RAP_ERR_NOMEM;
  }
  size_t added = bytes - c->size;
  if (have) {
    rapi_bp_unindex_free(bp, b);   /* before the chunk changes: it may have been a whole free chunk */
    b->size += added;
  } else {
    memset(b, 0, bp->record_size);
    b->ptr = last->ptr + last->size;
    b->size = added;
    b->chunk = c;
    b->prev = last;
    last->next = b;
    c->last = b;
    bp->block_count++;
  }
  note_resize(bp, c, bytes, "grow");
  rapi_segment_notify(bp->self, RAP_SEGMENT_GROW, c->base, c->size, c->base + c->size - added, added);
  b->state = RAPI_FREE;
  *out = b;
  return RAP_OK;
}

/* Where a shrink that keeps `keep` bytes of c ends: the parent unmaps whole mappings only, so a
 * mapping the line crosses stays, mapped or not (a release may have unmapped it inside a free
 * block, and told it as a hole: it must not be told back as grown). */
static size_t shrink_line(const rapi_bp *bp, const rapi_chunk *c, size_t keep) {
  size_t k = rapi_align_up(keep, bp->resizable->granularity);
  char *lo = c->base + k, *hi = lo + 1;
  if (k < c->size && bp->resizable->pieces != NULL &&
      bp->resizable->pieces(bp->parent, &lo, &hi, RAPI_PIECES_MEETING) && lo < c->base + k)
    k = (size_t)(hi - c->base);
  return k;
}

/* Observers hear of a shrink before the parent unmaps: the bytes past k (shrink_line) go. Where
 * the parent kept more (an unmap failed), what stayed is told as a GROW after. */
static void shrink_told(rapi_bp *bp, rapi_chunk *c, size_t k) {
  if (k < c->size) rapi_segment_notify(bp->self, RAP_SEGMENT_SHRINK, c->base, c->size, c->base + k, c->size - k);
}

static void stayed_told(rapi_bp *bp, rapi_chunk *c, size_t k, size_t now) {
  if (k < c->size && now > k)
    rapi_segment_notify(bp->self, RAP_SEGMENT_GROW, c->base, now, c->base + k, now - k);
}

size_t rapi_bp_trim_tail(rapi_bp *bp, rapi_chunk *c, size_t keep) {
  rapi_block *last = c->last;
  if (last->state != RAPI_FREE || last == c->first) return 0;
  size_t start = rapi_align_up((size_t)(last->ptr - c->base), bp->resizable->granularity);
  if (keep < start) keep = start;
  if (keep >= c->size) return 0;
  size_t bytes = c->size, k = shrink_line(bp, c, keep);
  rapi_bp_sync_before_unmap(bp);
  shrink_told(bp, c, k);
  if (bp->resizable->resize(bp->parent, c->base, &bytes, keep) != RAP_OK)
    rap_log(RAP_LOG_WARN, "%s: giving back the end of a chunk to '%s' failed: %s",
            rap_allocator_name(bp->self), rap_allocator_name(bp->parent), rap_last_error());
  stayed_told(bp, c, k, bytes);
  if (bytes >= c->size) return 0;
  size_t cut = c->size - bytes;
  rapi_bp_unindex_free(bp, last);   /* not a whole chunk: the counters of releasable chunks stay */
  last->size -= cut;
  note_resize(bp, c, bytes, "release");
  rapi_bp_holes_cut(bp, c);
  if (last->size > 0) {
    rapi_bp_index_free(bp, last);
  } else {
    c->last = last->prev;
    c->last->next = NULL;
    rapi_slab_free(&bp->block_recs, last);
    bp->block_count--;
  }
  return cut;
}

bool rapi_bp_shrink_free_chunk(rapi_bp *bp, size_t want) {
  rapi_chunk *c = bp->chunks;
  while (c != NULL && !(c->first->state == RAPI_FREE && rapi_bp_whole_chunk(c->first))) c = c->next;
  if (c == NULL) return false;
  size_t bytes = c->size, k = shrink_line(bp, c, want);
  rapi_bp_sync_before_unmap(bp);
  shrink_told(bp, c, k);
  if (bp->resizable->resize(bp->parent, c->base, &bytes, want) != RAP_OK)
    rap_log(RAP_LOG_WARN, "%s: shrinking a free chunk in '%s' failed: %s", rap_allocator_name(bp->self),
            rap_allocator_name(bp->parent), rap_last_error());
  stayed_told(bp, c, k, bytes);
  if (bytes >= c->size) return false;
  rapi_block *b = c->first;
  rapi_bp_unindex_free(bp, b);
  b->size -= c->size - bytes;
  note_resize(bp, c, bytes, "release");
  rapi_bp_holes_cut(bp, c);
  rapi_bp_index_free(bp, b);
  return true;
}
