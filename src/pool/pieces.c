/* pieces.c — pieces inside free blocks, given back to the parent and mapped again (unmap_free).
 *
 * Over a parent made with piece= (HostVmm, DeviceVmm), a free block's whole pieces can go back
 * while the block stays: it is then marked as having holes. Over one made without it, a release
 * gives back the mappings growth made wholly inside free blocks the same way. Offers the others:
 * the sweep that gives them back (rapi_bp_make_room, which rapi_bp_before_mapping runs at the
 * peak, and rapi_bp_punch_all, which a release runs), the mapping again of what a taker needs
 * (rapi_bp_fill_slow), the counts after a chunk's end or a wake (rapi_bp_holes_cut,
 * rapi_bp_holes_filled), and the wait before anything goes back to a parent whose unmap does not
 * wait for queued work (rapi_bp_sync_before_unmap).
 */
#include "pool/pool.h"

/* When the pool is about to map past its peak (rapi_bp_before_mapping), and on a release, every
 * free block whose inside holds whole pieces of at least unmap_free bytes gives them back to the
 * parent, and is marked as having holes; the mark goes with its bytes through merges and splits,
 * and whoever takes bytes out of a block with holes maps their pieces again first. Only free blocks
 * ever have holes: the ResourceAwarePool maps a free block with holes whole again before a pending
 * one takes it in, so handing out used or pending memory needs no check. The pool's actual bytes
 * count mapped memory: a chunk's unmapped bytes are taken off. */

/* Before memory goes back to a resizable parent: a pool whose frees no event fences lets the
 * parent wait for queued work first (a device's unmap would not, where cudaFree does). */
void rapi_bp_sync_before_unmap(rapi_bp *bp) {
  if (!bp->fenced && bp->resizable != NULL && bp->resizable->sync_before_unmap != NULL)
    bp->resizable->sync_before_unmap(bp->parent);
}

bool rapi_bp_pieces_in(const rapi_bp *bp, const char *ptr, size_t size, int how, char **lo,
                       char **hi) {
  size_t piece = bp->resizable->piece;
  if (piece == 0) {   /* the parent's own mappings: it knows where they lie */
    *lo = (char *)ptr;
    *hi = (char *)ptr + size;
    return bp->resizable->pieces(bp->parent, lo, hi, how);
  }
  *lo = (char *)rapi_align_up((uintptr_t)ptr, piece);
  *hi = (char *)((uintptr_t)(ptr + size) & ~(uintptr_t)(piece - 1));
  return *hi > *lo;
}

/* Where the whole pieces inside [ptr, ptr + size) lie, if there are enough of them to go. */
static bool inside(const rapi_bp *bp, const char *ptr, size_t size, char **lo, char **hi) {
  return rapi_bp_pieces_in(bp, ptr, size, RAPI_PIECES_MAPPED, lo, hi) &&
         (bp->unmap_free == SIZE_MAX || (size_t)(*hi - *lo) >= bp->unmap_free);
}

/* The first run of mapped pieces in [at, hi), a range of whole pieces: [*lo, *hi); false if none. */
static bool mapped_run(const rapi_bp *bp, char *at, char *hi, char **lo, char **end) {
  const rapi_resizable *z = bp->resizable;
  if (z->piece != 0) {
    while (at < hi && z->unmapped_inside(bp->parent, at, at + z->piece) != 0) at += z->piece;
    *lo = *end = at;
    while (*end < hi && z->unmapped_inside(bp->parent, *end, *end + z->piece) == 0) *end += z->piece;
    return *end > *lo;
  }
  char *u_lo, *u_hi;
  if (!rapi_bp_pieces_in(bp, at, (size_t)(hi - at), RAPI_PIECES_MAPPED, lo, end)) return false;
  *end = rapi_bp_pieces_in(bp, *lo, (size_t)(hi - *lo), RAPI_PIECES_UNMAPPED, &u_lo, &u_hi) ? u_lo : hi;
  return true;
}

/* Observers were told [lo, hi) goes: the pieces there that stayed mapped (another process maps
 * them, an unmap failed, or nothing went) are told back as fills, run by run. */
static void stayed_mapped(rapi_bp *bp, rapi_chunk *c, char *lo, char *hi) {
  if (bp->resizable->unmapped_inside(bp->parent, lo, hi) == (size_t)(hi - lo)) return;
  char *at = lo, *from, *to;
  while (at < hi && mapped_run(bp, at, hi, &from, &to)) {
    rapi_segment_notify(bp->self, RAP_SEGMENT_FILL, c->base, c->size, from, (size_t)(to - from));
    at = to;
  }
}

/* The whole pieces inside [from, from + n), a part of the free block b, go back. */
static void punch_in(rapi_bp *bp, rapi_block *b, char *from, size_t n) {
  /* By default only where giving back needs no wait: a pool fenced by events, or a platform with
   * no sync before an unmap (a device synchronize for every free block would cost more than it
   * saves). */
  if (!bp->unmap_given && !bp->fenced && bp->resizable->sync_before_unmap != NULL) return;
  char *lo, *hi;
  if (!inside(bp, from, n, &lo, &hi)) return;
  rapi_chunk *c = b->chunk;
  rapi_bp_sync_before_unmap(bp);
  rapi_segment_notify(bp->self, RAP_SEGMENT_HOLE, c->base, c->size, lo, (size_t)(hi - lo));
  size_t bytes = 0;
  int st = bp->resizable->unmap_inside(bp->parent, lo, hi, &bytes);
  if (st != RAP_OK)
    rap_log(RAP_LOG_WARN, "%s: giving back free pages inside a chunk of '%s' failed: %s",
            rap_allocator_name(bp->self), rap_allocator_name(bp->parent), rap_last_error());
  stayed_mapped(bp, c, lo, hi);
  if (bytes == 0) return;   /* nothing went (all gone before, kept, or the first failed) */
  b->holes = 1;
  c->unmapped += bytes;
  bp->unmapped += bytes;
  bp->actual -= bytes;
}

static RAPI_NOINLINE void punch(rapi_bp *bp, rapi_block *b) { punch_in(bp, b, b->ptr, b->size); }

/* Whether b lies wholly in [keep_lo, keep_hi) of skip's chunk: about to be mapped and taken. */
static bool kept(const rapi_block *b, const rapi_block *skip, const char *keep_lo, const char *keep_hi) {
  return skip != NULL && keep_lo != NULL && b->chunk == skip->chunk && b->ptr >= keep_lo &&
         b->ptr + b->size <= keep_hi;
}

/* Free blocks of at least `least` bytes give their pieces back, largest first, until the pool maps
 * at most `keep` bytes (0: every free piece): skip's bytes outside [keep_lo, keep_hi) first, the
 * blocks inside that range never (they are about to be mapped and taken). */
static void give_back(rapi_bp *bp, size_t least, size_t keep, rapi_block *skip, char *keep_lo,
                      char *keep_hi) {
  if (skip != NULL && keep_lo != NULL) {   /* skip's bytes outside what is about to be taken */
    if (keep_lo > skip->ptr) punch_in(bp, skip, skip->ptr, (size_t)(keep_lo - skip->ptr));
    if (keep_hi < skip->ptr + skip->size) punch_in(bp, skip, keep_hi, (size_t)(skip->ptr + skip->size - keep_hi));
  }
  if (bp->list) {   /* DynamicPoolList: address order, no classes */
    for (rapi_block *b = bp->free.heads[0][0]; b != NULL && bp->actual > keep; b = b->link_next)
      if (b != skip && b->size >= least && !kept(b, skip, keep_lo, keep_hi)) punch(bp, b);
    return;
  }
  for (unsigned fl = RAPI_FL_COUNT; fl-- > 0 && bp->actual > keep;) {
    if (!(bp->free.fl_bitmap & ((uint64_t)1 << fl))) continue;
    for (unsigned sl = RAPI_SL_COUNT; sl-- > 0 && bp->actual > keep;)
      for (rapi_block *b = bp->free.heads[fl][sl]; b != NULL && bp->actual > keep; b = b->link_next)
        if (b != skip && b->size >= least && !kept(b, skip, keep_lo, keep_hi)) punch(bp, b);
  }
}

/* Every free piece (unmap_free); else, at a release over a parent with mappings of its own, every
 * mapping wholly inside a free block (unless unmap_free=0 said no): what a release of the free
 * tail alone would keep (docs/DESIGN.md, "A release gives back the inside too"). */
void rapi_bp_punch_all(rapi_bp *bp) {
  if (bp->unmap_free != SIZE_MAX) give_back(bp, bp->unmap_free, 0, NULL, NULL, NULL);
  else if (bp->resizable != NULL && !bp->unmap_given)
    give_back(bp, bp->resizable->granularity, 0, NULL, NULL, NULL);
}

/* Before mapping `more` bytes past the most the pool ever mapped: free blocks give their pieces
 * back, largest first, until the mapping stays within that peak (or nothing is left to give).
 * Only the deficit goes, not every free piece: what stays mapped serves the requests after this
 * one without a map (a training step that repeats maps again only what its peak moved), and the
 * largest blocks give the most bytes for the fewest calls. Out of line, so that the test of
 * rapi_bp_before_mapping stays small where it is inlined. */
RAPI_NOINLINE void rapi_bp_make_room(rapi_bp *bp, size_t more, rapi_block *skip, char *keep_lo,
                                     char *keep_hi) {
  give_back(bp, bp->unmap_free, bp->map_peak > more ? bp->map_peak - more : 0, skip, keep_lo, keep_hi);
}

/* The pieces that the size bytes from b's start lie in, within b's chunk. */
static void fill_range(const rapi_bp *bp, const rapi_block *b, size_t size, char **lo, char **hi) {
  const rapi_chunk *c = b->chunk;
  size_t piece = bp->resizable->piece;
  *lo = b->ptr;
  *hi = b->ptr + size;
  if (piece == 0) {   /* the parent's own mappings: every one that meets the range */
    (void)bp->resizable->pieces(bp->parent, lo, hi, RAPI_PIECES_MEETING);
  } else {
    *lo = (char *)((uintptr_t)*lo & ~(uintptr_t)(piece - 1));
    *hi = (char *)rapi_align_up((uintptr_t)*hi, piece);
  }
  if (*lo < c->base) *lo = c->base;   /* a piece is never shared by two chunks: they are mappings */
  if (*hi > c->base + c->size) *hi = c->base + c->size;
}

bool rapi_bp_fill_passes_peak(const rapi_bp *bp, const rapi_block *b, size_t size) {
  if (!b->holes) return false;
  char *lo, *hi;
  fill_range(bp, b, size, &lo, &hi);
  return bp->actual + bp->resizable->unmapped_inside(bp->parent, lo, hi) > bp->map_peak;
}

int rapi_bp_fill_slow(rapi_bp *bp, rapi_block *b, size_t size) {
  rapi_chunk *c = b->chunk;
  char *lo, *hi;
  fill_range(bp, b, size, &lo, &hi);
  rapi_bp_before_mapping(bp, (size_t)(hi - lo), b, lo, hi);
  size_t bytes = 0;
  int st = bp->resizable->map_inside(bp->parent, lo, hi, &bytes);
  /* A failure undoes its maps, but a piece whose undoing was refused stays mapped: held again. */
  c->unmapped -= bytes;
  bp->unmapped -= bytes;
  bp->actual += bytes;
  if (bp->actual > bp->actual_hwm) bp->actual_hwm = bp->actual;
  if (bp->actual > bp->map_peak) bp->map_peak = bp->actual;
  if (st != RAP_OK || bytes == 0) return st;
  rapi_segment_notify(bp->self, RAP_SEGMENT_FILL, c->base, c->size, lo, (size_t)(hi - lo));
  return RAP_OK;
}

void rapi_bp_holes_left(const rapi_bp *bp, rapi_block *rem) {
  if (bp->resizable->unmapped_inside(bp->parent, rem->ptr, rem->ptr + rem->size) == 0) rem->holes = 0;
}

void rapi_bp_holes_cut(rapi_bp *bp, rapi_chunk *c) {
  if (c->unmapped == 0) return;
  size_t stay = bp->resizable->unmapped_inside(bp->parent, c->base, c->base + c->size);
  bp->actual += c->unmapped - stay;
  bp->unmapped -= c->unmapped - stay;
  c->unmapped = stay;
}

void rapi_bp_holes_filled(rapi_bp *bp) {
  for (rapi_chunk *c = bp->chunks; c != NULL; c = c->next) {
    if (c->unmapped == 0) continue;
    rapi_bp_holes_cut(bp, c);   /* what the parent still has unmapped (a resume failed half way) */
    if (c->unmapped == 0)
      for (rapi_block *b = c->first; b != NULL; b = b->next) b->holes = 0;
  }
  if (bp->actual > bp->actual_hwm) bp->actual_hwm = bp->actual;
  if (bp->actual > bp->map_peak) bp->map_peak = bp->actual;
}
