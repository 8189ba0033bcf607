/* block_pool.c — blocks: taken, split and merged; a miss, a release and the coalesce heuristics.
 *
 * The machinery under QuickPool and ResourceAwarePool. This file decides when memory comes and
 * goes; chunks.c does it for chunks (new, grown in place, ends and whole chunks given back) and
 * pieces.c for the pieces inside free blocks. Its statistics and the invariant walker are in
 * check.c. Invariants, checked by rapi_bp_check:
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
      char *lo, *hi;
      if (rapi_bp_pieces_in(bp, b->ptr, b->size, RAPI_PIECES_UNMAPPED, &lo, &hi))
        visit(arg, RAP_SEGMENT_HOLE, c->base, c->size, lo, (size_t)(hi - lo));
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
   * and shrink at their ends (chunks.c). The direct parent only: a wrapper between would not pass
   * resize on. */
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
   * any whole piece (see punch_in in pieces.c for when a default waits). 0 turns it off. */
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

void rapi_bp_unfree(rapi_bp *bp, rapi_block *b) {
  RAPI_ASSERT(b->state == RAPI_FREE);
  rapi_bp_unindex_free(bp, b);
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

/* Over a growable parent the free block that ends a chunk is its tail, which growth joins: another
 * free block that fits serves first (smallest classes first; the tail counts among the blocks
 * looked at, so a few chunks' tails are stepped over), and the tail only when none does. Cut from
 * the tail while a hole would do, a block lands where the size of the tail decided: small while
 * the pool grows, the whole of a free range in a later step, so a repeated step is not placed as
 * the step before (docs/DESIGN.md, "The tail last"). Not where free pieces go back (unmap_free):
 * there the peak decides, and the tail last doubled the maps of a step on two traces. */
static bool not_a_tail(const void *ctx, const rapi_block *b, size_t size) {
  (void)ctx;
  (void)size;
  return b->next != NULL;
}
static RAPI_NOINLINE rapi_block *before_the_tail(rapi_bp *bp, rapi_block *tail, size_t size) {
  rapi_block *b = rapi_index_find_if(&bp->free, size, 8, not_a_tail, NULL);
  return b != NULL ? b : tail;
}

rapi_block *rapi_bp_find_free(rapi_bp *bp, size_t size) {
  rapi_block *b = bp->list ? rapi_list_find(&bp->free, size) : rapi_index_find(&bp->free, size);
  if (RAPI_UNLIKELY(b != NULL && b->next == NULL) && bp->resizable != NULL && !bp->list &&
      bp->unmap_free == SIZE_MAX)
    b = before_the_tail(bp, b, size);
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
  rapi_bp_releasable_add(bp, b, -1);
  size_t old_size = b->size;
  rapi_block *rem = rapi_bp_split(bp, b, size);
  if (RAPI_UNLIKELY(b->holes) && rem != NULL) rapi_bp_holes_left(bp, rem);
  if (rem) {
    /* The remainder takes b's index entry (its neighbours were not free: no merge). */
    rem->state = RAPI_FREE;
    rapi_bp_free_replace(bp, b, old_size, rem);
  } else {
    rapi_bp_free_remove(bp, b);
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
      rapi_bp_free_remove(bp, n);
      rapi_bp_absorb_next(bp, b);
    } else {
      size_t n_size = n->size;
      b->size += n_size;
      b->state = RAPI_FREE;
      rapi_bp_free_replace(bp, n, n_size, b);
      b->size -= n_size;
      rapi_bp_absorb_next(bp, b);
      rapi_bp_releasable_add(bp, b, 1);
      return b;
    }
  }
  b->state = RAPI_FREE;
  if (entry != NULL) rapi_bp_free_replace(bp, entry, entry_size, b);
  else rapi_bp_free_insert(bp, b);
  rapi_bp_releasable_add(bp, b, 1);
  return b;
}

/* ---- a miss and a release: when chunks come and go (chunks.c makes and changes them) ---------- */

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

/* A miss over a resizable parent, at the end of the newest chunk: its last block serves it if that
 * is free and fits (the index's search can pass over such a block), else the chunk grows in place
 * (chunks.c) and its last block, grown or new, serves it. */
static int take_at_end(rapi_bp *bp, size_t size, rapi_block **out) {
  rapi_block *b = bp->chunks->last;
  int st;
  if (b->state == RAPI_FREE && b->size >= size) {   /* no mapping */
    if (b->holes && (st = rapi_bp_fill_slow(bp, b, size)) != RAP_OK) return st;
    rapi_bp_unindex_free(bp, b);
  } else if ((st = rapi_bp_grow_in_place(bp, size, &b)) != RAP_OK) {
    return st;
  } else if (b->holes && (st = rapi_bp_fill_slow(bp, b, size)) != RAP_OK) {
    rapi_bp_index_free(bp, b);   /* kept free, grown: the next request may fit */
    return st;
  }
  rapi_block *rem = rapi_bp_split(bp, b, size);   /* the remainder keeps the mark */
  if (b->holes && rem != NULL) rapi_bp_holes_left(bp, rem);
  b->holes = 0;
  if (rem) rapi_bp_index_free(bp, rem);
  *out = b;
  return RAP_OK;
}

int rapi_bp_grow_for(rapi_bp *bp, size_t size, rapi_block **out) {
  rapi_block *b = NULL;
  /* In place first: where it works, the pool stays one chunk and nothing need be released. */
  if (bp->resizable != NULL && bp->chunks != NULL && take_at_end(bp, size, out) == RAP_OK)
    return RAP_OK;
  /* Coalesce on a miss: wholly free chunks that together hold the request, but none of which
   * fits it, go back first, so the pool trades them for one chunk instead of holding both. */
  if (bp->releasable_usable >= size) rapi_bp_release(bp, false);
  int st = grow(bp, size, &b);
  if (st == RAP_ERR_NOMEM && (bp->releasable_chunks > 0 || bp->resizable != NULL)) {
    /* The first try held chunks, so it asked for max(next_size, size): ask for that again, even
     * if the release leaves no chunk (where grow would use the larger initial_size). Over a
     * resizable parent the release also gives back the free ends of chunks that stay. */
    rapi_bp_release(bp, true);
    st = rapi_bp_grow_exact(bp, rapi_align_up(size > bp->next_size ? size : bp->next_size,
                                              bp->alignment), &b);
  }
  if (st != RAP_OK) return st;
  rapi_block *rem = rapi_bp_split(bp, b, size);
  if (rem) rapi_bp_index_free(bp, rem);
  *out = b;
  return RAP_OK;
}

size_t rapi_bp_release(rapi_bp *bp, bool inside) {
  rapi_bp_flush(bp, false);
  size_t released = rapi_bp_release_whole_chunks(bp);
  if (bp->resizable != NULL)
    for (rapi_chunk *c = bp->chunks; c != NULL; c = c->next) released += rapi_bp_trim_tail(bp, c, 0);
  if (bp->unmap_free != SIZE_MAX || (inside && bp->resizable != NULL)) {   /* and inside free blocks */
    size_t held = bp->actual;
    rapi_bp_punch_all(bp);
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

/* The bytes of the pool's chunks, mapped or not: what releasable_bytes is a share of (holes inside
 * free blocks are not held, but a chunk free whole with holes is releasable whole). */
static size_t chunk_bytes(const rapi_bp *bp) { return bp->actual + bp->unmapped; }

static bool heuristic_fires(const rapi_bp *bp) {
  const rapi_heuristic *h = &bp->heuristic;
  if (h->kind == RAPI_H_PERCENT)
    return h->value == 100 ? bp->releasable_bytes == chunk_bytes(bp)
                           : (double)bp->releasable_bytes * 100.0 >= (double)h->value * (double)chunk_bytes(bp);
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

/* Out of line: it runs when a heuristic fires, rarely, and inlined it would keep
 * rapi_bp_after_free, on the deallocation path, from being inlined there. */
static RAPI_NOINLINE void coalesce(rapi_bp *bp) {
  size_t want = coalesce_target(bp);
  if (bp->releasable_chunks == 0 || (bp->releasable_chunks == 1 && want >= bp->releasable_usable))
    return;
  if (bp->resizable != NULL && bp->releasable_chunks == 1 && want > 0 && rapi_bp_shrink_free_chunk(bp, want))
    return;
  /* Whole chunks only: want was worked out from the chunks that stay, free ends included. */
  rapi_bp_flush(bp, false);
  rapi_bp_release_whole_chunks(bp);
  rapi_block *b;
  if (want > 0 && rapi_bp_grow_exact(bp, want, &b) == RAP_OK) rapi_bp_index_free(bp, b);
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
  if ((double)(bp->releasable_bytes + tail) * 100.0 < (double)h->value * (double)chunk_bytes(bp)) return;
  size_t keep = start;
  if (h->hwm) {
    size_t target = bp->used_hwm > bp->initial_size ? bp->used_hwm : bp->initial_size;
    size_t elsewhere = bp->usable - c->usable;
    if (target > elsewhere + start) keep = target - elsewhere;
  }
  rapi_bp_trim_tail(bp, c, keep);
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
