/* pool.h — the block engine that pool strategies extend: chunks from a parent, blocks that tile
 * them, the two-level segregated-fit index and the address-ordered free list, and, in each pool, the map (core/ptr_map.c) from a live
 * block's address to its record. QuickPool and DynamicPoolList use it as it is; the
 * ResourceAwarePool extends its block record by embedding it first (see rapi_block).
 * Depends on the base layer (rap_internal.h) only.
 */
#ifndef RAP_POOL_H
#define RAP_POOL_H

#include "rap_internal.h"

/* ---- pool/block_pool.c: blocks, the segregated-fit index, a miss, a release, the heuristics -----
 * The machinery QuickPool and ResourceAwarePool share (with chunks.c and pieces.c, below). A chunk
 * comes from the parent; blocks tile it in address order (prev/next), so freed neighbours merge in
 * O(1). Free blocks sit in a two-level segregated-fit index (TLSF): first level by power of two,
 * second level by 2^SL_LOG2 subdivisions, a bitmap at each level, so a fitting class is found with
 * two bit scans. All records live in host memory, from slabs. */
/* DEFERRED: the last block a QuickPool freed, kept unmerged and unindexed so that a request of
 * the same size takes it back with no split, no merge and no index update (a one-entry cache);
 * in a ResourceAwarePool, the block parked on the resource that freed it (flush_deferred). */
enum { RAPI_FREE = 0, RAPI_USED = 1, RAPI_PENDING = 2, RAPI_DEFERRED = 3 };
#define RAPI_SL_LOG2 5
#define RAPI_SL_COUNT (1u << RAPI_SL_LOG2)
#define RAPI_FL_COUNT (64 - RAPI_SL_LOG2 + 1)

typedef struct rapi_block rapi_block;
typedef struct rapi_chunk rapi_chunk;
/* The engine's block record: 72 B on a 64-bit target (eight words and the class and state), from
 * the pool's slab, never in the managed memory. A strategy that needs more per block embeds it
 * first in its own record and gives that record's size to rapi_bp_init: the engine hands records
 * out with the bytes after this one zeroed (the ResourceAwarePool's is 120 B). */
struct rapi_block {
  char *ptr;
  size_t size;                       /* aligned extent of the block */
  union {
    size_t requested;                /* used: the user's bytes */
    size_t lent;                     /* pending in a ResourceAwarePool: the bytes lent to it (0:
                                        none; strategies/resource_aware_pool.h packs the two ends) */
  };
  rapi_block *prev, *next;           /* address neighbours inside the chunk */
  rapi_block *link_prev, *link_next; /* index class list, or a resource's pending index */
  rapi_chunk *chunk;
  uint16_t fl, sl;                   /* index class while indexed */
  uint8_t state;
  uint8_t holes;                     /* free only: some pieces inside may be unmapped (unmap_free) */
};
struct rapi_chunk {
  char *base;                        /* what the parent returned */
  size_t size;                       /* bytes asked of the parent */
  size_t usable;                     /* bytes the blocks tile, from the first aligned address */
  size_t unmapped;                   /* bytes of pieces inside it given back (unmap_free) */
  rapi_block *first, *last;           /* last: where a resizable parent's growth lands */
  rapi_chunk *prev, *next;
};

typedef struct rapi_index {
  uint64_t fl_bitmap;
  uint32_t sl_bitmap[RAPI_FL_COUNT];
  rapi_block *heads[RAPI_FL_COUNT][RAPI_SL_COUNT];
  size_t count, bytes;
} rapi_index;
void        rapi_index_insert(rapi_index *ix, rapi_block *b);
void        rapi_index_remove(rapi_index *ix, rapi_block *b);
rapi_block *rapi_index_find(rapi_index *ix, size_t size);   /* a block of at least size, or NULL */
/* nb takes the index entry of old, which was indexed with old_size (nb may be old, resized): in
 * place when the class is unchanged, which is the common case of a split or a merge. */
void        rapi_index_replace(rapi_index *ix, rapi_block *old, size_t old_size, rapi_block *nb);
size_t      rapi_index_largest(const rapi_index *ix);
/* The first block of at least size, smallest classes first, for which ok(ctx, b, size) holds,
 * looking at no more than limit blocks that fit (and stepping over at most a few dozen too small in
 * the request's own class): a slow path's search for a block of a kind. */
rapi_block *rapi_index_find_if(rapi_index *ix, size_t size, unsigned limit,
                               bool (*ok)(const void *ctx, const rapi_block *b, size_t size),
                               const void *ctx);
/* pool/free_list.c: the same four operations over an address-ordered list (DynamicPoolList):
 * insert, best fit and largest cost O(free blocks) by design; the list head is heads[0][0]. */
void        rapi_list_insert(rapi_index *ix, rapi_block *b);
void        rapi_list_remove(rapi_index *ix, rapi_block *b);
rapi_block *rapi_list_find(rapi_index *ix, size_t size);
void        rapi_list_replace(rapi_index *ix, rapi_block *old, size_t old_size, rapi_block *nb);
size_t      rapi_list_largest(const rapi_index *ix);

typedef enum { RAPI_H_NEVER, RAPI_H_PERCENT, RAPI_H_BLOCKS } rapi_heuristic_kind;
typedef struct rapi_heuristic {
  rapi_heuristic_kind kind;
  bool hwm;
  uint64_t value;                    /* percent, or number of releasable chunks */
} rapi_heuristic;

typedef struct rapi_bp {
  rap_allocator *self, *parent;
  size_t alignment, initial_size, next_size, parent_alignment;
  size_t max_split;                  /* max_split=: blocks this large are not cut for smaller
                                        requests (SIZE_MAX: off); see rapi_bp_may_cut */
  rapi_heuristic heuristic;
  const rapi_resizable *resizable;   /* the parent's, when chunks can grow and shrink in place */
  bool fenced;                       /* its free blocks are past every use (events: the
                                        ResourceAwarePool): memory goes back without a sync */
  bool list;                         /* DynamicPoolList: free blocks in an address-ordered list */
  bool unmap_given;                  /* unmap_free= was given (else it waits for fenced or no sync) */
  size_t unmap_free;                 /* a free block with this many bytes of whole pieces inside
                                        gives them back (SIZE_MAX: never); actual counts mapped
                                        bytes only */
  rapi_ptr_map used;                 /* live blocks by address */
  rapi_block *deferred;              /* at most one block in state DEFERRED */
  /* NULL: the deferred block is free (QuickPool). Else the strategy's meaning of it: a flush
   * hands the block (already out of `deferred`) to this instead of freeing it (the
   * ResourceAwarePool's block parked on its resource, which is not free to every resource). */
  void (*flush_deferred)(struct rapi_bp *bp, rapi_block *b);
  rapi_chunk *chunks;
  rapi_slab block_recs, chunk_recs;
  size_t record_size;                /* of a block record, the engine's part first */
  size_t current, hwm, used_bytes, used_hwm, actual, actual_hwm;
  size_t unmapped;                   /* the chunks' unmapped bytes (holes): their c->unmapped summed */
  size_t map_peak;                   /* the most it ever mapped: giving pieces back keeps to it
                                        (actual_hwm is the user's: rap_allocator_reset_peaks) */
  size_t releasable_bytes, releasable_usable, releasable_chunks, pending_bytes, pending_count;
  size_t usable;                     /* bytes the chunks' blocks tile */
  size_t allocation_count, block_count, chunk_count;
  size_t max_request;
  uint8_t asleep;                    /* RAPI_AWAKE, or how it sleeps (pool/sleep.c) */
  rapi_backup backup;                /* host memory for live bytes while asleep, kept for the next */
  /* Last: the index is 15 KiB, and the fields above, which a pair reads and writes, then share a
   * few cache lines at the start of the pool instead of lying pages apart around it. */
  rapi_index free;
} rapi_bp;
/* record_size: sizeof(rapi_block), or of a strategy's record that embeds it first. */
int   rapi_bp_init(rapi_bp *bp, rap_allocator *self, rap_options *opts, bool list, size_t record_size);
void  rapi_bp_fini(rapi_bp *bp);
/* Tells the pool's segment observers kind (MAP, UNMAP) for every chunk (a sleep and a wake). */
void  rapi_bp_notify_chunks(rapi_bp *bp, int kind);
/* Rounds a request to the pool's block size; RAP_ERR_NOMEM for sizes no pool can hold. */
int   rapi_bp_round(rapi_bp *bp, size_t bytes, size_t *out);
/* From the free index, split; NULL also when the pieces of a block with holes could not be mapped
 * again (the block stays free and the status is in rap_last_error). */
rapi_block *rapi_bp_take_free(rapi_bp *bp, size_t size);
/* max_split=: whether a block of block_size bytes may serve a request of size bytes. A request
 * below max_split takes no block of max_split or more (a large block stays whole for the large
 * request that made it: activations, logits); a request of max_split or more takes a block at
 * most next_size larger. Off (always true) unless the option was given. */
static inline bool rapi_bp_may_cut(const rapi_bp *bp, size_t block_size, size_t size) {
  if (RAPI_LIKELY(bp->max_split == SIZE_MAX) || block_size == size) return true;
  return size < bp->max_split ? block_size < bp->max_split : block_size - size <= bp->next_size;
}
/* What take_free would take: the best fit; over a growable parent (without unmap_free), a chunk's
 * free tail only where no other free block fits (before_the_tail in block_pool.c). */
rapi_block *rapi_bp_find_free(rapi_bp *bp, size_t size);
rapi_block *rapi_bp_take_this(rapi_bp *bp, rapi_block *b, size_t size);   /* b from find_free */
/* A new chunk for a miss of size bytes, split, the remainder indexed free; if the parent is dry,
 * releases wholly free chunks and asks once more. */
int   rapi_bp_grow_for(rapi_bp *bp, size_t size, rapi_block **out);
/* Splits off what b has beyond size: the remainder, or NULL (too small to keep, or no record). */
rapi_block *rapi_bp_split_slow(rapi_bp *bp, rapi_block *b, size_t size);
static inline rapi_block *rapi_bp_split(rapi_bp *bp, rapi_block *b, size_t size) {
  return b->size - size < bp->alignment ? NULL : rapi_bp_split_slow(bp, b, size);
}
/* Makes room in the used map for one more block: called before a block is taken, so that the
 * insert of rapi_bp_mark_used cannot fail and running out of host memory changes nothing. */
int   rapi_bp_reserve_slow(rapi_bp *bp);
static inline int rapi_bp_reserve(rapi_bp *bp) {
  if (RAPI_LIKELY(rapi_map_has_room(&bp->used))) return RAP_OK;
  return rapi_bp_reserve_slow(bp);
}
/* Used map, then counters. Inline: it is on every pool's allocation path. */
static inline void rapi_bp_mark_used(rapi_bp *bp, rapi_block *b, size_t bytes) {
  rapi_map_insert(&bp->used, b->ptr, b);   /* room was made by rapi_bp_reserve */
  b->state = RAPI_USED;
  b->requested = bytes;
  bp->current += bytes;
  bp->used_bytes += b->size;
  bp->allocation_count++;
  if (bp->current > bp->hwm) bp->hwm = bp->current;
  if (bp->used_bytes > bp->used_hwm) bp->used_hwm = bp->used_bytes;
}
/* After growing: the parent may have let this thread's locks go while it waited, and others may
 * have used the map's room. Makes room again, or gives b (just grown, not yet used) back free. */
int   rapi_bp_reserve_after_grow(rapi_bp *bp, rapi_block *b);
/* Counters and used map: b was found at slot by rapi_bp_find_used_slot (one probe for both). */
static inline void rapi_bp_unmark_used(rapi_bp *bp, rapi_block *b, size_t slot) {
  rapi_map_remove_slot(&bp->used, slot);
  bp->current -= b->requested;
  bp->used_bytes -= b->size;
  bp->allocation_count--;
  b->requested = 0;
}
rapi_block *rapi_bp_make_free(rapi_bp *bp, rapi_block *b);   /* merge with free neighbours, index */
void  rapi_bp_absorb_next(rapi_bp *bp, rapi_block *b);        /* b takes in b->next's bytes */
void  rapi_bp_unfree(rapi_bp *bp, rapi_block *b);             /* a free block out of the index */
/* Wholly free chunks, free chunk ends and free pieces (unmap_free) go back; the bytes given back.
 * inside: also every mapping of a growable parent wholly inside a free block (a release the user
 * asked for, or one before growth fails: not one a miss makes on the pool's own path). */
size_t rapi_bp_release(rapi_bp *bp, bool inside);
void  rapi_bp_after_free(rapi_bp *bp, rapi_block *merged);   /* runs the coalesce heuristic */
void  rapi_bp_flush(rapi_bp *bp, bool heuristic);   /* merges the deferred block */
/* The O(1) part of coalesce's test: with one wholly free chunk, and nothing smaller to shrink to
 * (no _hwm, or no more held than initial_size), firing could change nothing. */
static inline bool rapi_bp_nothing_to_coalesce(const rapi_bp *bp, size_t free_chunks) {
  return free_chunks == 1 && (!bp->heuristic.hwm || bp->usable <= bp->initial_size);
}
/* Whether freeing b could make a heuristic fire: it would leave its whole chunk free, and the
 * quick test of rapi_bp_after_free would not rule firing out. Such a block is merged at once, so
 * heuristics run inside rap_deallocate only, never later inside an allocation. Here, inline: it is
 * on QuickPool's deallocation path. */
static inline bool rapi_bp_free_may_coalesce(const rapi_bp *bp, const rapi_block *b) {
  if (bp->heuristic.kind == RAPI_H_NEVER) return false;
  const rapi_block *p = b->prev, *n = b->next;
  bool whole = (p == NULL || (p->state == RAPI_FREE && p->prev == NULL)) &&
               (n == NULL || (n->state == RAPI_FREE && n->next == NULL));
  return whole && !rapi_bp_nothing_to_coalesce(bp, bp->releasable_chunks + 1);
}
void  rapi_bp_stats(rapi_bp *bp, rap_stats *out);
void  rapi_bp_reset_peaks(rapi_bp *bp);   /* the statistics' marks; used_hwm (heuristics) stays */
int   rapi_bp_check(rapi_bp *bp);
int   rapi_bp_unknown_pointer(rapi_bp *bp, const void *ptr, const char *fn);
static inline bool rapi_bp_whole_chunk(const rapi_block *b) { return b->prev == NULL && b->next == NULL; }
static inline rapi_block *rapi_bp_find_used(rapi_bp *bp, const void *ptr) { return rapi_map_find(&bp->used, ptr); }
/* The live block at ptr, or NULL; *slot: where the used map holds it (rapi_bp_unmark_used). */
static inline rapi_block *rapi_bp_find_used_slot(rapi_bp *bp, const void *ptr, size_t *slot) {
  if (RAPI_UNLIKELY(ptr == NULL)) return NULL;
  *slot = rapi_map_probe(&bp->used, (uintptr_t)ptr);
  return bp->used.slots[*slot].value;
}
/* The free index (an address-ordered list in DynamicPoolList) and the counters of releasable
 * chunks, which a free block covering its chunk whole adds to. Inline: the pair's path takes and
 * merges blocks through these, and chunks.c indexes the blocks it grows and shrinks. */
static inline void rapi_bp_free_insert(rapi_bp *bp, rapi_block *b) {
  if (RAPI_UNLIKELY(bp->list)) rapi_list_insert(&bp->free, b);
  else rapi_index_insert(&bp->free, b);
}
static inline void rapi_bp_free_remove(rapi_bp *bp, rapi_block *b) {
  if (RAPI_UNLIKELY(bp->list)) rapi_list_remove(&bp->free, b);
  else rapi_index_remove(&bp->free, b);
}
static inline void rapi_bp_free_replace(rapi_bp *bp, rapi_block *old, size_t old_size, rapi_block *nb) {
  if (RAPI_UNLIKELY(bp->list)) rapi_list_replace(&bp->free, old, old_size, nb);
  else rapi_index_replace(&bp->free, old, old_size, nb);
}
static inline void rapi_bp_releasable_add(rapi_bp *bp, const rapi_block *b, int sign) {
  if (!rapi_bp_whole_chunk(b)) return;
  bp->releasable_bytes += (size_t)sign * b->chunk->size;
  bp->releasable_usable += (size_t)sign * b->chunk->usable;
  bp->releasable_chunks += (size_t)sign;
}
static inline void rapi_bp_index_free(rapi_bp *bp, rapi_block *b) {   /* b becomes free, indexed */
  b->state = RAPI_FREE;
  rapi_bp_free_insert(bp, b);
  rapi_bp_releasable_add(bp, b, 1);
}
static inline void rapi_bp_unindex_free(rapi_bp *bp, rapi_block *b) {
  rapi_bp_free_remove(bp, b);
  rapi_bp_releasable_add(bp, b, -1);
}

/* ---- pool/chunks.c: chunks from the parent, grown and shrunk in place ---------------------------
 * block_pool.c decides when; these do it, keeping the counters, the trace and the observers. The
 * last three give memory back, waiting first where the parent's unmap would not
 * (rapi_bp_sync_before_unmap). */
/* A new chunk whose one free block, not indexed, tiles usable bytes (a resizable parent's
 * granularity rounds them up). */
int   rapi_bp_grow_exact(rapi_bp *bp, size_t usable, rapi_block **out);
/* The newest chunk maps more at its end, so that its last block, free, holds size bytes (it held
 * fewer), and beyond that next_size or a RAPI_GROW_SHARE-th of what the pool holds, the less:
 * *out is that block, grown or new after a used one, free and not indexed. */
#define RAPI_GROW_SHARE 32
int   rapi_bp_grow_in_place(rapi_bp *bp, size_t size, rapi_block **out);
/* Gives back what c maps past keep bytes (rounded up to the granularity, and never the start of
 * its last block): only the free pages at its end. Returns the bytes given back. */
size_t rapi_bp_trim_tail(rapi_bp *bp, rapi_chunk *c, size_t keep);
/* The one wholly free chunk shrinks in place to want bytes, rather than going back whole and
 * being mapped again: whether it did. */
bool  rapi_bp_shrink_free_chunk(rapi_bp *bp, size_t want);
size_t rapi_bp_release_whole_chunks(rapi_bp *bp);   /* every wholly free chunk; bytes given back */

/* ---- pool/pieces.c: pieces inside free blocks given back and mapped again (unmap_free) -------- */
/* Before memory goes back to a resizable parent: a pool whose frees no event fences lets the
 * parent wait for queued work first (DEVICE_VMM: a device synchronize). */
void  rapi_bp_sync_before_unmap(rapi_bp *bp);
/* Every free block large enough gives its pieces back (a release). */
void  rapi_bp_punch_all(rapi_bp *bp);
/* Where the whole pieces inside [ptr, ptr + size) lie: at multiples of piece= (mapped or not),
 * else the span of the parent's mappings there that are mapped or not (how: RAPI_PIECES_MAPPED
 * or _UNMAPPED); false if there is none. */
bool  rapi_bp_pieces_in(const rapi_bp *bp, const char *ptr, size_t size, int how, char **lo,
                        char **hi);
/* Before the pool maps `more` bytes (growth, or pieces mapped again): where that would take what
 * it maps past the most it ever mapped, free pieces go back first, largest blocks first, as many
 * as keep it there (rapi_bp_make_room; of skip, the block about to be taken, only what lies outside
 * [keep_lo, keep_hi), and none of a free block wholly inside that range), so the peak rises only by
 * what the live bytes need. Below
 * the peak nothing goes back, and nothing costs a call. */
void  rapi_bp_make_room(rapi_bp *bp, size_t more, rapi_block *skip, char *keep_lo, char *keep_hi);
static inline void rapi_bp_before_mapping(rapi_bp *bp, size_t more, rapi_block *skip, char *keep_lo,
                                          char *keep_hi) {
  if (bp->unmap_free != SIZE_MAX && bp->actual + more > bp->map_peak)
    rapi_bp_make_room(bp, more, skip, keep_lo, keep_hi);
}
/* Maps again the pieces of the size bytes from b's start (b has holes; size may run on over the
 * blocks after b in its chunk, whose free ones keep their pieces meanwhile): a status, b unchanged
 * on failure. */
int   rapi_bp_fill_slow(rapi_bp *bp, rapi_block *b, size_t size);
/* Whether mapping again the pieces of the size bytes from b's start would take what the pool maps
 * past its high-water mark (false for a block without holes). Walks the parent's pieces there: for
 * the slow paths that meet a block with holes. */
bool  rapi_bp_fill_passes_peak(const rapi_bp *bp, const rapi_block *b, size_t size);
/* What a taker left of a block with holes (it mapped every piece its bytes meet): the mark stays
 * only where a piece there is still unmapped, so that the largest free block counts it. */
void  rapi_bp_holes_left(const rapi_bp *bp, rapi_block *rem);
/* A chunk's end went back (c->size is the new size): its unmapped pieces there went with it,
 * which actual, lowered by every byte of the end, did not count as mapped. Also after a resume,
 * which maps every piece of the chunk again. */
void  rapi_bp_holes_cut(rapi_bp *bp, rapi_chunk *c);
/* After a wake mapped every piece again: no block has holes, the chunks count as mapped. */
void  rapi_bp_holes_filled(rapi_bp *bp);

/* ---- pool/sleep.c: a pool's chunks unmapped and mapped again in place ------------------------
 * For a pool directly over a growable platform whose pending blocks have all become free (the
 * caller waited for them). Sleep gives wholly free chunks and free tails back, copies runs of
 * touching used blocks to the backup (BACKUP), then suspends every chunk; wake resumes them and
 * copies back. A failed sleep leaves the pool awake and whole, a failed wake leaves it asleep with
 * its backup intact. SLEEPING: the caller is waiting for events before sleeping, and refuses calls
 * as a sleeping pool does. */
enum { RAPI_AWAKE = 0, RAPI_SLEEPING = 1, RAPI_ASLEEP_BACKUP = 2, RAPI_ASLEEP_DISCARD = 3 };
int   rapi_bp_can_sleep(rapi_bp *bp);   /* RAP_ERR_UNSUPPORTED, with a sentence, where it cannot */
int   rapi_bp_sleep(rapi_bp *bp, int mode);
int   rapi_bp_prepare(rapi_bp *bp);   /* the backup for what is live now; the pool stays awake */
int   rapi_bp_wake(rapi_bp *bp);   /* and publishes the chunks again (rapi_bp_hold) */
/* An exporting platform's table (rapi_resizable.hold): RAPI_HOLD keeps every chunk from other
 * processes, or answers RAP_ERR_BUSY naming the one that maps some (nothing changed);
 * RAPI_UNHOLD publishes them again; RAPI_HOLD_NOTICE tells importers that this pool sleeps. */
int   rapi_bp_hold(rapi_bp *bp, int how);
int   rapi_bp_asleep_refusal(rapi_bp *bp, const char *fn);   /* RAP_ERR_BUSY with a sentence */
void  rapi_bp_backup_free(rapi_bp *bp);

#endif /* RAP_POOL_H */
