/* block_pool.c — chunks, blocks, splitting, merging and the coalesce heuristics.
 *
 * The machinery under QuickPool and ResourceAwarePool; its statistics and the invariant walker
 * are in check.c. Invariants, checked by rapi_bp_check:
 * blocks tile each chunk in address order; a block is in exactly one of {free index, used map,
 * a pending list}; two free blocks are never neighbours; every counter equals what a walk finds.
 */
#include "pool/pool.h"

_Static_assert(sizeof(rapi_block) <= 80, "the engine's block record stays within 80 bytes");

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RAPI_BLOCKS_PER_SLAB 512

/* ---- options ---------------------------------------------------------------------------------- */

static int parse_heuristic(rapi_bp *bp, const char *text) {
  static const struct {
    const char *name;
    rapi_heuristic_kind kind;
    bool hwm;
  } names[] = {
      {"percent_releasable", RAPI_H_PERCENT, false}, {"percent_releasable_hwm", RAPI_H_PERCENT, true},
      {"blocks_releasable", RAPI_H_BLOCKS, false},   {"blocks_releasable_hwm", RAPI_H_BLOCKS, true},
  };
  const char *who = rap_allocator_name(bp->self);
  if (strcmp(text, "never") == 0) {
    bp->heuristic.kind = RAPI_H_NEVER;
    return RAP_OK;
  }
  const char *colon = strchr(text, ':');
  size_t len = colon ? (size_t)(colon - text) : strlen(text);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (strlen(names[i].name) != len || strncmp(names[i].name, text, len) != 0) continue;
    char *end = NULL;
    errno = 0;
    unsigned long long v = colon && colon[1] >= '0' && colon[1] <= '9' ? strtoull(colon + 1, &end, 10) : 0;
    if (end == NULL || *end != '\0' || errno == ERANGE)
      return rapi_fail(RAP_ERR_INVALID, "%s: option 'heuristic' needs a number after '%s:', as in "
                       "%s:75", who, names[i].name, names[i].name);
    if (names[i].kind == RAPI_H_PERCENT && v > 100)
      return rapi_fail(RAP_ERR_INVALID, "%s: option 'heuristic': a percentage is 0 to 100, not %llu",
                       who, v);
    if (names[i].kind == RAPI_H_BLOCKS && v == 0)
      return rapi_fail(RAP_ERR_INVALID, "%s: option 'heuristic': blocks_releasable needs at least 1",
                       who);
    bp->heuristic.kind = names[i].kind;
    bp->heuristic.hwm = names[i].hwm;
    bp->heuristic.value = v;
    if (names[i].kind == RAPI_H_PERCENT && v == 0) bp->heuristic.kind = RAPI_H_NEVER;
    return RAP_OK;
  }
  return rapi_fail(RAP_ERR_INVALID, "%s: option 'heuristic' is one of percent_releasable:P, "
                   "percent_releasable_hwm:P, blocks_releasable:N, blocks_releasable_hwm:N or never, "
                   "not '%s'", who, text);
}

/* Segment observers (core/observe.c): a pool's segments are its chunks, walked under the lock its
 * calls run under (a wrapper's above it; a plain pool is its caller's). A pool asleep has none
 * mapped: it replays nothing, and tells observers when it sleeps and wakes. */
static void bp_walk(rap_allocator *a, void *ctx, void (*locked)(void *arg),
                    void (*visit)(void *arg, int kind, void *base, size_t size, void *addr,
                                  size_t bytes),
                    void *arg) {
  rapi_bp *bp = ctx;
  rapi_held held = {0};
  if (a->guard_lock != NULL) rapi_lock(a->guard_lock, &held);
  locked(arg);
  /* Chunks are mapped until the sleep unmaps them (it tells observers first): a pool on its way
   * to sleep (RAPI_SLEEPING, which may yet fail and wake) replays them. */
  for (rapi_chunk *c = bp->chunks; c != NULL && bp->asleep < RAPI_ASLEEP_BACKUP; c = c->next) {
    visit(arg, RAP_SEGMENT_MAP, c->base, c->size, c->base, c->size);
    /* Free pages given back inside it (unmap_free): a HOLE for the whole pieces of each block with
     * holes, as the pool told when they went, so that a late observer knows them too. */
    for (rapi_block *b = c->first; c->unmapped != 0 && b != NULL; b = b->next) {
      if (!b->holes) continue;
      size_t piece = bp->resizable->piece;
      char *lo = (char *)rapi_align_up((uintptr_t)b->ptr, piece);
      char *hi = (char *)((uintptr_t)(b->ptr + b->size) & ~(uintptr_t)(piece - 1));
      if (hi > lo) visit(arg, RAP_SEGMENT_HOLE, c->base, c->size, lo, (size_t)(hi - lo));
    }
  }
  if (a->guard_lock != NULL) rapi_unlock(&held);
}

static const rapi_segments bp_segments = {bp_walk, RAPI_SEGMENT_DEVICE_OF_PARENT};

void rapi_bp_notify_chunks(rapi_bp *bp, int kind) {
  for (rapi_chunk *c = bp->chunks; c != NULL; c = c->next)
    rapi_segment_notify(bp->self, kind, c->base, c->size, c->base, c->size);
}

int rapi_bp_init(rapi_bp *bp, rap_allocator *self, rap_options *opts, bool list, size_t record_size) {
  bp->self = self;
  bp->list = list;
  bp->parent = rap_allocator_parent(self);
  bp->alignment = 256;
  bp->initial_size = (size_t)512 << 20;
  bp->next_size = (size_t)1 << 20;
  const char *heuristic = "percent_releasable_hwm:100";
  int st = rap_options_get_size(opts, "initial_size", &bp->initial_size);
  if (st == RAP_OK) st = rap_options_get_size(opts, "next_size", &bp->next_size);
  if (st == RAP_OK) st = rap_options_get_size(opts, "alignment", &bp->alignment);
  if (st == RAP_OK) st = rap_options_get_string(opts, "heuristic", &heuristic);
  bp->max_split = SIZE_MAX;
  if (st == RAP_OK && rapi_options_given(opts, "max_split")) {
    st = rap_options_get_size(opts, "max_split", &bp->max_split);
    if (st == RAP_OK && bp->max_split == 0)
      return rapi_fail(RAP_ERR_INVALID, "%s: option 'max_split' must be a size above 0 (leave it "
                       "out for no limit)", rap_allocator_name(self));
  }
  bp->unmap_given = rapi_options_given(opts, "unmap_free");
  size_t unmap_free = 0;
  if (st == RAP_OK) st = rap_options_get_size(opts, "unmap_free", &unmap_free);
  if (st != RAP_OK) return st;
  if (!rapi_is_pow2(bp->alignment) || bp->alignment > ((size_t)1 << 30))
    return rapi_fail(RAP_ERR_INVALID, "%s: option 'alignment' must be a power of two up to 1GiB, "
                     "not %zu", rap_allocator_name(self), bp->alignment);
  if (bp->initial_size > SIZE_MAX / 4 || bp->next_size > SIZE_MAX / 4)
    return rapi_fail(RAP_ERR_INVALID, "%s: options 'initial_size' and 'next_size' must be below "
                     "a quarter of the address space", rap_allocator_name(self));
  st = parse_heuristic(bp, heuristic);
  if (st != RAP_OK) return st;
  bp->parent_alignment = rap_allocator_alignment(bp->parent);
  if (bp->parent_alignment == 0) bp->parent_alignment = 1;
  /* A growable parent (HOST_VMM, DEVICE_VMM) whose granules keep the pool's alignment: chunks grow
   * and shrink at their ends (grow_in_place, trim_tail). The direct parent only: a wrapper between
   * would not pass resize on. */
  const rapi_resizable *rz = bp->parent->resizable;
  if (rz != NULL && rz->granularity >= bp->alignment) bp->resizable = rz;
  /* A chunk that grows in place has one free tail that every growth joins: a small request that
   * may not cut it would grow the chunk again and again. */
  if (bp->resizable != NULL && bp->max_split != SIZE_MAX)
    return rapi_fail(RAP_ERR_INVALID, "%s: option 'max_split' is for pools of separate chunks; over "
                     "'%s' the chunk grows in place and its free tail is one block that a small "
                     "request must be able to cut (give memory back with piece= and unmap_free= "
                     "instead)", rap_allocator_name(self), rap_allocator_name(bp->parent));
  /* unmap_free: pieces inside free blocks go back where the parent maps in pieces; by default
   * any whole piece (see punch for when a default waits). 0 turns it off. */
  bp->unmap_free = SIZE_MAX;
  if (bp->resizable != NULL && rz->piece != 0 && (!bp->unmap_given || unmap_free != 0))
    bp->unmap_free = bp->unmap_given ? (unmap_free > rz->piece ? unmap_free : rz->piece) : rz->piece;
  else if (bp->unmap_given && unmap_free != 0)
    return rapi_fail(RAP_ERR_INVALID, "%s: option 'unmap_free' needs a parent that maps in pieces "
                     "(HostVmm or DeviceVmm made with piece=), not '%s'", rap_allocator_name(self),
                     rap_allocator_name(bp->parent));
  bp->max_request = SIZE_MAX / 4;
  if (rapi_map_init(&bp->used) != RAP_OK)
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(self));
  bp->record_size = record_size;
  rapi_slab_init(&bp->block_recs, record_size, RAPI_BLOCKS_PER_SLAB);
  rapi_slab_init(&bp->chunk_recs, sizeof(rapi_chunk), 64);
  rap_allocator_set_alignment(self, bp->alignment);
  self->segments = &bp_segments;
  self->segments_ctx = bp;
  return RAP_OK;
}

/* The chunks go back as the pool's release (in a trace: "release" lines, and the parent's
 * deallocations one level below the user's calls), not as calls of the user's. */
void rapi_bp_fini(rapi_bp *bp) {
  rapi_trace_depth++;
  for (rapi_chunk *c = bp->chunks; c != NULL; c = c->next) {
    if (!bp->asleep) rapi_segment_notify(bp->self, RAP_SEGMENT_UNMAP, c->base, c->size, c->base, c->size);
    if (rap_deallocate(bp->parent, c->base, NULL) != RAP_OK)
      rap_log(RAP_LOG_WARN, "%s: returning a chunk of %zu bytes to '%s' failed: %s",
              rap_allocator_name(bp->self), c->size, rap_allocator_name(bp->parent),
              rap_last_error());
    bp->actual -= c->size;
    RAPI_TRACE("release", bp->self, NULL, c->base, c->size, ",\"held\":%zu", bp->actual);
  }
  rapi_trace_depth--;
  rapi_map_fini(&bp->used);
  rapi_slab_destroy(&bp->block_recs);
  rapi_slab_destroy(&bp->chunk_recs);
  bp->chunks = NULL;
}

int rapi_bp_round(rapi_bp *bp, size_t bytes, size_t *out) {
  if (RAPI_UNLIKELY(bytes > bp->max_request)) {
    return rapi_fail(RAP_ERR_NOMEM, "%s: a request of %zu bytes is larger than any pool can hold",
                     rap_allocator_name(bp->self), bytes);
  }
  *out = bytes == 0 ? bp->alignment : rapi_align_up(bytes, bp->alignment);
  return RAP_OK;
}

/* ---- the free index, with the releasable counters ------------------------------------------ */

static inline void free_insert(rapi_bp *bp, rapi_block *b) {
  if (RAPI_UNLIKELY(bp->list)) rapi_list_insert(&bp->free, b);
  else rapi_index_insert(&bp->free, b);
}

static inline void free_remove(rapi_bp *bp, rapi_block *b) {
  if (RAPI_UNLIKELY(bp->list)) rapi_list_remove(&bp->free, b);
  else rapi_index_remove(&bp->free, b);
}

static inline void free_replace(rapi_bp *bp, rapi_block *old, size_t old_size, rapi_block *nb) {
  if (RAPI_UNLIKELY(bp->list)) rapi_list_replace(&bp->free, old, old_size, nb);
  else rapi_index_replace(&bp->free, old, old_size, nb);
}

static inline void releasable_add(rapi_bp *bp, const rapi_block *b, int sign) {
  if (!rapi_bp_whole_chunk(b)) return;
  bp->releasable_bytes += (size_t)sign * b->chunk->size;
  bp->releasable_usable += (size_t)sign * b->chunk->usable;
  bp->releasable_chunks += (size_t)sign;
}

static void index_free(rapi_bp *bp, rapi_block *b) {
  b->state = RAPI_FREE;
  free_insert(bp, b);
  releasable_add(bp, b, 1);
}

static void unindex_free(rapi_bp *bp, rapi_block *b) {
  free_remove(bp, b);
  releasable_add(bp, b, -1);
}

void rapi_bp_unfree(rapi_bp *bp, rapi_block *b) {
  RAPI_ASSERT(b->state == RAPI_FREE);
  unindex_free(bp, b);
}

/* ---- pieces inside free blocks (a parent made with piece=: unmap_free) --------------------------
 * When the pool is about to map past its peak (before_mapping), and on a release, every free block
 * whose inside holds whole pieces of at least unmap_free bytes gives them back to the parent, and
 * is marked as having holes; the mark goes with its bytes through merges and splits, and
 * whoever takes bytes out of a block with holes maps their pieces again first. Only free blocks
 * ever have holes: the ResourceAwarePool maps a free block with holes whole again before a
 * pending one takes it in, so handing out used or pending memory needs no check. The pool's
 * actual bytes count mapped memory: a chunk's unmapped bytes are taken off. */

static void sync_before_unmap(rapi_bp *bp);

/* Where the whole pieces inside [ptr, ptr + size) lie. */
static bool inside(const rapi_bp *bp, const char *ptr, size_t size, char **lo, char **hi) {
  size_t piece = bp->resizable->piece;
  *lo = (char *)rapi_align_up((uintptr_t)ptr, piece);
  *hi = (char *)((uintptr_t)(ptr + size) & ~(uintptr_t)(piece - 1));
  return *hi > *lo && (size_t)(*hi - *lo) >= bp->unmap_free;
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
  sync_before_unmap(bp);
  rapi_segment_notify(bp->self, RAP_SEGMENT_HOLE, c->base, c->size, lo, (size_t)(hi - lo));
  size_t bytes = 0;
  int st = bp->resizable->unmap_inside(bp->parent, lo, hi, &bytes);
  if (st != RAP_OK)
    rap_log(RAP_LOG_WARN, "%s: giving back free pages inside a chunk of '%s' failed: %s",
            rap_allocator_name(bp->self), rap_allocator_name(bp->parent), rap_last_error());
  if (bytes == 0) {   /* nothing went (all gone before, or the first failed): as it was */
    if (!b->holes)
      rapi_segment_notify(bp->self, RAP_SEGMENT_FILL, c->base, c->size, lo, (size_t)(hi - lo));
    return;
  }
  b->holes = 1;
  c->unmapped += bytes;
  bp->actual -= bytes;
}

static RAPI_NOINLINE void punch(rapi_bp *bp, rapi_block *b) { punch_in(bp, b, b->ptr, b->size); }

/* Whether b lies wholly in [keep_lo, keep_hi) of skip's chunk: about to be mapped and taken. */
static bool kept(const rapi_block *b, const rapi_block *skip, const char *keep_lo, const char *keep_hi) {
  return skip != NULL && keep_lo != NULL && b->chunk == skip->chunk && b->ptr >= keep_lo &&
         b->ptr + b->size <= keep_hi;
}

/* Every free block large enough gives its pieces back; of skip, the block about to be taken,
 * only what lies outside [keep_lo, keep_hi) (keep_lo NULL: none of it), and none of a free block
 * wholly inside that range (a span of blocks about to be joined). */
static RAPI_NOINLINE void punch_all(rapi_bp *bp, rapi_block *skip, char *keep_lo, char *keep_hi) {
  if (skip != NULL && keep_lo != NULL) {   /* skip's bytes outside what is about to be taken */
    if (keep_lo > skip->ptr) punch_in(bp, skip, skip->ptr, (size_t)(keep_lo - skip->ptr));
    if (keep_hi < skip->ptr + skip->size) punch_in(bp, skip, keep_hi, (size_t)(skip->ptr + skip->size - keep_hi));
  }
  if (bp->list) {
    for (rapi_block *b = bp->free.heads[0][0]; b != NULL; b = b->link_next)
      if (b != skip && b->size >= bp->unmap_free && !kept(b, skip, keep_lo, keep_hi)) punch(bp, b);
    return;
  }
  for (unsigned fl = 0; fl < RAPI_FL_COUNT; fl++) {
    if (!(bp->free.fl_bitmap & ((uint64_t)1 << fl))) continue;
    for (unsigned sl = 0; sl < RAPI_SL_COUNT; sl++)
      for (rapi_block *b = bp->free.heads[fl][sl]; b != NULL; b = b->link_next)
        if (b != skip && b->size >= bp->unmap_free && !kept(b, skip, keep_lo, keep_hi)) punch(bp, b);
  }
}
/* Before the pool maps `more` bytes (growth, or pieces mapped again): where that would take what
 * it holds past its peak, the free pieces go back first, so the peak rises only by what the live
 * bytes need. Below the peak nothing goes back, and nothing costs a call. */
static inline void before_mapping(rapi_bp *bp, size_t more, rapi_block *skip, char *keep_lo,
                                  char *keep_hi) {
  if (bp->unmap_free != SIZE_MAX && bp->actual + more > bp->actual_hwm)
    punch_all(bp, skip, keep_lo, keep_hi);
}

/* The pieces that the size bytes from b's start lie in, within b's chunk. */
static void fill_range(const rapi_bp *bp, const rapi_block *b, size_t size, char **lo, char **hi) {
  const rapi_chunk *c = b->chunk;
  size_t piece = bp->resizable->piece;
  *lo = (char *)((uintptr_t)b->ptr & ~(uintptr_t)(piece - 1));
  *hi = (char *)rapi_align_up((uintptr_t)(b->ptr + size), piece);
  if (*lo < c->base) *lo = c->base;   /* a piece is never shared by two chunks: they are mappings */
  if (*hi > c->base + c->size) *hi = c->base + c->size;
}

bool rapi_bp_fill_passes_peak(const rapi_bp *bp, const rapi_block *b, size_t size) {
  if (!b->holes) return false;
  char *lo, *hi;
  fill_range(bp, b, size, &lo, &hi);
  return bp->actual + bp->resizable->unmapped_inside(bp->parent, lo, hi) > bp->actual_hwm;
}

int rapi_bp_fill_slow(rapi_bp *bp, rapi_block *b, size_t size) {
  rapi_chunk *c = b->chunk;
  char *lo, *hi;
  fill_range(bp, b, size, &lo, &hi);
  before_mapping(bp, (size_t)(hi - lo), b, lo, hi);
  size_t bytes = 0;
  int st = bp->resizable->map_inside(bp->parent, lo, hi, &bytes);
  /* A failure undoes its maps, but a piece whose undoing was refused stays mapped: held again. */
  c->unmapped -= bytes;
  bp->actual += bytes;
  if (bp->actual > bp->actual_hwm) bp->actual_hwm = bp->actual;
  if (st != RAP_OK || bytes == 0) return st;
  rapi_segment_notify(bp->self, RAP_SEGMENT_FILL, c->base, c->size, lo, (size_t)(hi - lo));
  return RAP_OK;
}

/* A chunk's end went back (c->size is the new size): its unmapped pieces there went with it,
 * which actual, lowered by every byte of the end, did not count as mapped. Also after a resume,
 * which maps every piece of the chunk again. */
static void holes_cut(rapi_bp *bp, rapi_chunk *c) {
  if (c->unmapped == 0) return;
  size_t stay = bp->resizable->unmapped_inside(bp->parent, c->base, c->base + c->size);
  bp->actual += c->unmapped - stay;
  c->unmapped = stay;
}

void rapi_bp_holes_filled(rapi_bp *bp) {
  for (rapi_chunk *c = bp->chunks; c != NULL; c = c->next) {
    if (c->unmapped == 0) continue;
    holes_cut(bp, c);   /* what the parent still has unmapped (a resume that failed half way) */
    if (c->unmapped == 0)
      for (rapi_block *b = c->first; b != NULL; b = b->next) b->holes = 0;
  }
  if (bp->actual > bp->actual_hwm) bp->actual_hwm = bp->actual;
}

/* ---- blocks ----------------------------------------------------------------------------------- */

rapi_block *rapi_bp_split_slow(rapi_bp *bp, rapi_block *b, size_t size) {
  rapi_block *rem = rapi_slab_alloc(&bp->block_recs);
  if (rem == NULL) return NULL;   /* no record: the block stays whole, which is still correct */
  rem->requested = 0;
  if (bp->record_size > sizeof *rem) memset(rem + 1, 0, bp->record_size - sizeof *rem);
  rem->ptr = b->ptr + size;
  rem->size = b->size - size;
  rem->holes = b->holes;
  rem->chunk = b->chunk;
  rem->prev = b;
  rem->next = b->next;
  if (b->next) b->next->prev = rem;
  else b->chunk->last = rem;
  b->next = rem;
  b->size = size;
  bp->block_count++;
  return rem;
}

rapi_block *rapi_bp_find_free(rapi_bp *bp, size_t size) {
  rapi_block *b = bp->list ? rapi_list_find(&bp->free, size) : rapi_index_find(&bp->free, size);
  /* The best fit is refused whole: a larger block would be refused too. */
  if (RAPI_UNLIKELY(bp->max_split != SIZE_MAX) && b != NULL && !rapi_bp_may_cut(bp, b->size, size))
    return NULL;
  return b;
}

rapi_block *rapi_bp_take_free(rapi_bp *bp, size_t size) {
  rapi_block *b = rapi_bp_find_free(bp, size);
  return b != NULL ? rapi_bp_take_this(bp, b, size) : NULL;
}

rapi_block *rapi_bp_take_this(rapi_bp *bp, rapi_block *b, size_t size) {
  if (RAPI_UNLIKELY(b->holes) && rapi_bp_fill_slow(bp, b, size) != RAP_OK) return NULL;
  releasable_add(bp, b, -1);
  size_t old_size = b->size;
  rapi_block *rem = rapi_bp_split(bp, b, size);
  if (rem) {
    /* The remainder takes b's index entry (its neighbours were not free: no merge). */
    rem->state = RAPI_FREE;
    free_replace(bp, b, old_size, rem);
  } else {
    free_remove(bp, b);
  }
  b->holes = 0;
  return b;
}

int rapi_bp_reserve_slow(rapi_bp *bp) {
  if (rapi_map_grow(&bp->used) == RAP_OK) return RAP_OK;
  return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for the pointer map",
                   rap_allocator_name(bp->self));
}

int rapi_bp_reserve_after_grow(rapi_bp *bp, rapi_block *b) {
  if (RAPI_LIKELY(rapi_map_has_room(&bp->used))) return RAP_OK;
  int st = rapi_bp_reserve_slow(bp);
  if (st != RAP_OK) {
    b->state = RAPI_USED;   /* taken, never handed out: it goes back as a used block would */
    rapi_bp_make_free(bp, b);
  }
  return st;
}


void rapi_bp_absorb_next(rapi_bp *bp, rapi_block *b) {
  RAPI_ASSERT(b->next != NULL && b->next->chunk == b->chunk && b->ptr + b->size == b->next->ptr);
  rapi_block *n = b->next;
  b->size += n->size;
  b->holes |= n->holes;
  b->next = n->next;
  if (n->next) n->next->prev = b;
  else b->chunk->last = b;
  rapi_slab_free(&bp->block_recs, n);
  bp->block_count--;
}

/* Merges b with its free neighbours and indexes the result. A free neighbour's index entry is
 * reused for the merged block (in place when its class holds), so the common case costs no
 * bitmap update. Neither neighbour was a whole chunk, since b lies beside it. */
/* Preconditions are asserted here and on other slow paths (RAP_DEBUG=1), not on the pair's path,
 * where even a cold branch changes what the compiler inlines. */
rapi_block *rapi_bp_make_free(rapi_bp *bp, rapi_block *b) {
  RAPI_ASSERT(b->state != RAPI_FREE);
  rapi_block *entry = NULL;
  size_t entry_size = 0;
  if (b->prev && b->prev->state == RAPI_FREE) {
    rapi_block *p = b->prev;
    entry = p;
    entry_size = p->size;
    rapi_bp_absorb_next(bp, p);
    b = p;
  }
  rapi_block *n = b->next;
  if (n && n->state == RAPI_FREE) {
    if (entry != NULL) {
      free_remove(bp, n);
      rapi_bp_absorb_next(bp, b);
    } else {
      size_t n_size = n->size;
      b->size += n_size;
      b->state = RAPI_FREE;
      free_replace(bp, n, n_size, b);
      b->size -= n_size;
      rapi_bp_absorb_next(bp, b);
      releasable_add(bp, b, 1);
      return b;
    }
  }
  b->state = RAPI_FREE;
  if (entry != NULL) free_replace(bp, entry, entry_size, b);
  else free_insert(bp, b);
  releasable_add(bp, b, 1);
  return b;
}

/* ---- chunks ----------------------------------------------------------------------------------- */

int rapi_bp_grow_exact(rapi_bp *bp, size_t usable, rapi_block **out) {
  RAPI_ASSERT(usable > 0 && usable % bp->alignment == 0);
  /* A resizable parent maps whole granules: the chunk uses all it maps. */
  if (bp->resizable != NULL) usable = rapi_align_up(usable, bp->resizable->granularity);
  size_t pad = bp->parent_alignment >= bp->alignment ? 0 : bp->alignment - bp->parent_alignment;
  size_t request = usable + pad;
  if (bp->resizable != NULL) before_mapping(bp, request, NULL, NULL, NULL);
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

static int grow(rapi_bp *bp, size_t size, rapi_block **out) {
  size_t least = bp->chunk_count == 0 ? bp->initial_size : bp->next_size;
  size_t usable = rapi_align_up(size > least ? size : least, bp->alignment);
  int st = rapi_bp_grow_exact(bp, usable, out);
  if (st == RAP_ERR_NOMEM && bp->chunk_count == 0 && least > size) {
    /* The user's option sized the chunk that did not fit: the sentence names it. */
    char want[32], why[400];
    rapi_format_size(want, sizeof want, usable);
    snprintf(why, sizeof why, "%s", rap_last_error());
    rapi_fail(st, "%s: the pool's first chunk, %s from its option initial_size, does not fit in '%s' "
              "(%s); a smaller initial_size would start it", rap_allocator_name(bp->self), want,
              rap_allocator_name(bp->parent), why);
  }
  return st;
}

/* ---- chunks that grow and shrink at their ends (a resizable parent: HOST_VMM, DEVICE_VMM) ------
 * The newest chunk asks the parent for more bytes right after its end. They join the chunk's last
 * block if that is free (a request that fits only across the old end is served at once), else
 * they become a new free block after it: either way one chunk, whose free space merges across
 * what would have been a chunk boundary. Giving back works the other way: the free pages at the
 * end of a chunk go back by range (trim_tail), as whole mappings of the parent. */

static void note_resize(rapi_bp *bp, rapi_chunk *c, size_t bytes, const char *ev) {
  bool grew = bytes > c->size;
  size_t delta = grew ? bytes - c->size : c->size - bytes;
  const char *end = c->base + (grew ? c->size : bytes);
  if (grew) {
    c->usable += delta;
    bp->actual += delta;
    bp->usable += delta;
    if (bp->actual > bp->actual_hwm) bp->actual_hwm = bp->actual;
  } else {
    c->usable -= delta;
    bp->actual -= delta;
    bp->usable -= delta;
  }
  c->size = bytes;
  RAPI_TRACE(ev, bp->self, NULL, end, delta, ",\"held\":%zu", bp->actual);
  if (RAPI_UNLIKELY(rapi_log_on(RAP_LOG_DEBUG))) {
    char sz[32], held[32];
    rapi_format_size(sz, sizeof sz, delta);
    rapi_format_size(held, sizeof held, bp->actual);
    rap_log(RAP_LOG_DEBUG, "%s: %s %s at the end of its chunk %p in '%s' (%s held)",
            rap_allocator_name(bp->self), grew ? "mapped" : "gave back", sz, (void *)c->base,
            rap_allocator_name(bp->parent), held);
  }
}

static int grow_in_place(rapi_bp *bp, size_t size, rapi_block **out) {
  rapi_chunk *c = bp->chunks;
  rapi_block *last = c->last;
  size_t have = last->state == RAPI_FREE ? last->size : 0;
  if (have >= size) {   /* the index's search can pass over a last block that fits: no mapping */
    int st = last->holes ? rapi_bp_fill_slow(bp, last, size) : RAP_OK;
    if (st != RAP_OK) return st;
    unindex_free(bp, last);
    rapi_block *rem = rapi_bp_split(bp, last, size);   /* the remainder keeps the mark */
    last->holes = 0;
    if (rem) index_free(bp, rem);
    *out = last;
    return RAP_OK;
  }
  size_t need = size - have;
  size_t add = need > bp->next_size ? need : bp->next_size;
  add = rapi_align_up(add, bp->resizable->granularity);
  /* The record first, so that nothing needs undoing once the parent has mapped. */
  rapi_block *b = have ? last : rapi_slab_alloc(&bp->block_recs);
  if (b == NULL) return RAP_ERR_NOMEM;
  size_t bytes = c->size;
  before_mapping(bp, add, have ? last : NULL, NULL, NULL);
  int st = add > SIZE_MAX / 4 - c->size ? RAP_ERR_NOMEM
                                          : bp->resizable->resize(bp->parent, c->base, &bytes, c->size + add);
  if (st != RAP_OK || bytes <= c->size) {
    if (!have) rapi_slab_free(&bp->block_recs, b);
    return st != RAP_OK ? st : RAP_ERR_NOMEM;
  }
  size_t added = bytes - c->size;
  if (have) {
    unindex_free(bp, b);   /* before the chunk changes: it may have been a whole free chunk */
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
  if (b->holes && (st = rapi_bp_fill_slow(bp, b, size)) != RAP_OK) {
    index_free(bp, b);   /* kept free, grown: the next request may fit */
    return st;
  }
  rapi_block *rem = rapi_bp_split(bp, b, size);
  b->holes = 0;
  if (rem) index_free(bp, rem);
  *out = b;
  return RAP_OK;
}

/* Before memory goes back to a resizable parent: a pool whose frees no event fences lets the
 * parent wait for queued work first (a device's unmap would not, where cudaFree does). */
static void sync_before_unmap(rapi_bp *bp) {
  if (!bp->fenced && bp->resizable != NULL && bp->resizable->sync_before_unmap != NULL)
    bp->resizable->sync_before_unmap(bp->parent);
}

/* Observers hear of a shrink before the parent unmaps: the bytes past keep (rounded up as the
 * parent rounds) may go. Where the parent kept more (whole mappings only), what stayed is told
 * as a GROW after. */
static void shrink_told(rapi_bp *bp, rapi_chunk *c, size_t keep) {
  size_t k = rapi_align_up(keep, bp->resizable->granularity);
  if (k < c->size) rapi_segment_notify(bp->self, RAP_SEGMENT_SHRINK, c->base, c->size, c->base + k, c->size - k);
}

static void stayed_told(rapi_bp *bp, rapi_chunk *c, size_t keep, size_t now) {
  size_t k = rapi_align_up(keep, bp->resizable->granularity);
  if (k < c->size && now > k)
    rapi_segment_notify(bp->self, RAP_SEGMENT_GROW, c->base, now, c->base + k, now - k);
}

/* Gives back what c maps past keep bytes (rounded up to the granularity, and never the start of
 * its last block): only the free pages at its end. Returns the bytes given back. */
static size_t trim_tail(rapi_bp *bp, rapi_chunk *c, size_t keep) {
  rapi_block *last = c->last;
  if (last->state != RAPI_FREE || last == c->first) return 0;
  size_t start = rapi_align_up((size_t)(last->ptr - c->base), bp->resizable->granularity);
  if (keep < start) keep = start;
  if (keep >= c->size) return 0;
  size_t bytes = c->size;
  sync_before_unmap(bp);
  shrink_told(bp, c, keep);
  if (bp->resizable->resize(bp->parent, c->base, &bytes, keep) != RAP_OK)
    rap_log(RAP_LOG_WARN, "%s: giving back the end of a chunk to '%s' failed: %s",
            rap_allocator_name(bp->self), rap_allocator_name(bp->parent), rap_last_error());
  stayed_told(bp, c, keep, bytes);
  if (bytes >= c->size) return 0;
  size_t cut = c->size - bytes;
  unindex_free(bp, last);   /* not a whole chunk: the counters of releasable chunks stay */
  last->size -= cut;
  note_resize(bp, c, bytes, "release");
  holes_cut(bp, c);
  if (last->size > 0) {
    index_free(bp, last);
  } else {
    c->last = last->prev;
    c->last->next = NULL;
    rapi_slab_free(&bp->block_recs, last);
    bp->block_count--;
  }
  return cut;
}

int rapi_bp_grow_for(rapi_bp *bp, size_t size, rapi_block **out) {
  rapi_block *b = NULL;
  /* In place first: where it works, the pool stays one chunk and nothing need be released. */
  if (bp->resizable != NULL && bp->chunks != NULL && grow_in_place(bp, size, out) == RAP_OK)
    return RAP_OK;
  /* Coalesce on a miss: wholly free chunks that together hold the request, but none of which
   * fits it, go back first, so the pool trades them for one chunk instead of holding both. */
  if (bp->releasable_usable >= size) rapi_bp_release(bp);
  int st = grow(bp, size, &b);
  if (st == RAP_ERR_NOMEM && (bp->releasable_chunks > 0 || bp->resizable != NULL)) {
    /* The first try held chunks, so it asked for max(next_size, size): ask for that again, even
     * if the release leaves no chunk (where grow would use the larger initial_size). Over a
     * resizable parent the release also gives back the free ends of chunks that stay. */
    rapi_bp_release(bp);
    st = rapi_bp_grow_exact(bp, rapi_align_up(size > bp->next_size ? size : bp->next_size,
                                              bp->alignment), &b);
  }
  if (st != RAP_OK) return st;
  rapi_block *rem = rapi_bp_split(bp, b, size);
  if (rem) index_free(bp, rem);
  *out = b;
  return RAP_OK;
}

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
  bp->usable -= c->usable;
  bp->chunk_count--;
  RAPI_TRACE("release", bp->self, NULL, c->base, c->size, ",\"held\":%zu", bp->actual);
  bp->block_count--;
  rapi_slab_free(&bp->block_recs, c->first);
  rapi_slab_free(&bp->chunk_recs, c);
}

/* Every wholly free chunk goes back to the parent. */
static size_t release_whole_chunks(rapi_bp *bp) {
  size_t released = 0;
  if (bp->releasable_chunks > 0) sync_before_unmap(bp);
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
    unindex_free(bp, b);
    released += c->size;
    drop_chunk(bp, c);
  }
  return released;
}

size_t rapi_bp_release(rapi_bp *bp) {
  rapi_bp_flush(bp, false);
  size_t released = release_whole_chunks(bp);
  if (bp->resizable != NULL)
    for (rapi_chunk *c = bp->chunks; c != NULL; c = c->next) released += trim_tail(bp, c, 0);
  if (bp->unmap_free != SIZE_MAX) {   /* and the pieces inside free blocks */
    size_t held = bp->actual;
    punch_all(bp, NULL, NULL, NULL);
    released += held - bp->actual;
  }
  return released;
}

/* ---- the coalesce heuristics ------------------------------------------------------------------
 * A heuristic is evaluated only when a deallocation left a whole chunk free, from counters kept
 * up to date, so the test costs a few compares. Firing releases every wholly free chunk and takes
 * one chunk back: of the released size, or (the _hwm variants) of what the peak of used bytes
 * needs beyond the chunks still held, never below initial_size. It fires only when that changes
 * something, so it can never fire twice in a row on the same state, and it never recurses. */

static bool heuristic_fires(const rapi_bp *bp) {
  const rapi_heuristic *h = &bp->heuristic;
  if (h->kind == RAPI_H_PERCENT)
    return h->value == 100 ? bp->releasable_bytes == bp->actual
                           : (double)bp->releasable_bytes * 100.0 >= (double)h->value * (double)bp->actual;
  if (h->kind == RAPI_H_BLOCKS) return bp->releasable_chunks >= h->value;
  return false;
}

/* The usable size of the one chunk a firing heuristic takes back. */
static size_t coalesce_target(const rapi_bp *bp) {
  size_t want = bp->releasable_usable;
  if (bp->heuristic.hwm) {
    size_t target = bp->used_hwm > bp->initial_size ? bp->used_hwm : bp->initial_size;
    size_t kept = bp->usable - bp->releasable_usable;
    want = target > kept ? rapi_align_up(target - kept, bp->alignment) : 0;
    if (want > bp->releasable_usable) want = bp->releasable_usable;
  }
  return want;
}

/* A resizable pool's one wholly free chunk shrinks in place to want bytes, rather than going back
 * whole and being mapped again. */
static bool shrink_free_chunk(rapi_bp *bp, size_t want) {
  rapi_chunk *c = bp->chunks;
  while (c != NULL && !(c->first->state == RAPI_FREE && rapi_bp_whole_chunk(c->first))) c = c->next;
  if (c == NULL) return false;
  size_t bytes = c->size;
  sync_before_unmap(bp);
  shrink_told(bp, c, want);
  if (bp->resizable->resize(bp->parent, c->base, &bytes, want) != RAP_OK)
    rap_log(RAP_LOG_WARN, "%s: shrinking a free chunk in '%s' failed: %s", rap_allocator_name(bp->self),
            rap_allocator_name(bp->parent), rap_last_error());
  stayed_told(bp, c, want, bytes);
  if (bytes >= c->size) return false;
  rapi_block *b = c->first;
  unindex_free(bp, b);
  b->size -= c->size - bytes;
  note_resize(bp, c, bytes, "release");
  holes_cut(bp, c);
  index_free(bp, b);
  return true;
}

/* Out of line: it runs when a heuristic fires, rarely, and inlined it would keep
 * rapi_bp_after_free, on the deallocation path, from being inlined there. */
static RAPI_NOINLINE void coalesce(rapi_bp *bp) {
  size_t want = coalesce_target(bp);
  if (bp->releasable_chunks == 0 || (bp->releasable_chunks == 1 && want >= bp->releasable_usable))
    return;
  if (bp->resizable != NULL && bp->releasable_chunks == 1 && want > 0 && shrink_free_chunk(bp, want))
    return;
  /* Whole chunks only: want was worked out from the chunks that stay, free ends included. */
  rapi_bp_flush(bp, false);
  release_whole_chunks(bp);
  rapi_block *b;
  if (want > 0 && rapi_bp_grow_exact(bp, want, &b) == RAP_OK) index_free(bp, b);
}

static bool nothing_to_coalesce(const rapi_bp *bp, size_t free_chunks) {
  return rapi_bp_nothing_to_coalesce(bp, free_chunks);
}

/* The strategy's deferred block (flush_deferred): it knows what the block is. Out of line, so that
 * QuickPool's flush stays small enough to be inlined on its deallocation path. */
static RAPI_NOINLINE void flush_to_strategy(rapi_bp *bp, rapi_block *d) { bp->flush_deferred(bp, d); }

void rapi_bp_flush(rapi_bp *bp, bool heuristic) {
  rapi_block *d = bp->deferred;
  if (d == NULL) return;
  bp->deferred = NULL;
  if (RAPI_UNLIKELY(bp->flush_deferred != NULL)) {
    flush_to_strategy(bp, d);
    return;
  }
  rapi_block *merged = rapi_bp_make_free(bp, d);
  if (heuristic) rapi_bp_after_free(bp, merged);
}

/* A resizable pool's heuristic on a free block at a chunk's end: percent_releasable counts the
 * free pages there as releasable, and the _hwm variant keeps what the peak of used bytes needs.
 * blocks_releasable counts whole chunks only and never trims. Out of line, so that the test in
 * rapi_bp_after_free, on the deallocation path, stays small enough to be inlined there. */
static RAPI_NOINLINE void trim_by_heuristic(rapi_bp *bp, rapi_block *last) {
  const rapi_heuristic *h = &bp->heuristic;
  rapi_chunk *c = last->chunk;
  if (h->kind != RAPI_H_PERCENT || last->state != RAPI_FREE) return;
  size_t start = rapi_align_up((size_t)(last->ptr - c->base), bp->resizable->granularity);
  if (start >= c->size) return;
  size_t tail = c->size - start;
  if ((double)(bp->releasable_bytes + tail) * 100.0 < (double)h->value * (double)bp->actual) return;
  size_t keep = start;
  if (h->hwm) {
    size_t target = bp->used_hwm > bp->initial_size ? bp->used_hwm : bp->initial_size;
    size_t elsewhere = bp->usable - c->usable;
    if (target > elsewhere + start) keep = target - elsewhere;
  }
  trim_tail(bp, c, keep);
}

void rapi_bp_after_free(rapi_bp *bp, rapi_block *merged) {
  if (RAPI_LIKELY(!rapi_bp_whole_chunk(merged))) {
    if (RAPI_UNLIKELY(bp->resizable != NULL) && merged->next == NULL) trim_by_heuristic(bp, merged);
    return;
  }
  if (bp->heuristic.kind == RAPI_H_NEVER) return;
  if (nothing_to_coalesce(bp, bp->releasable_chunks)) return;
  if (heuristic_fires(bp)) coalesce(bp);
}
