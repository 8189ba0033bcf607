/* fixed_pool.c — FixedPool: objects of one size in constant time.
 *
 * Chunks of objects_per_chunk slots come from the parent. Each chunk keeps a stack of its free
 * slot numbers; chunks with a free slot sit on a list, so allocate pops a slot in O(1). Live
 * pointers are found through the pointer map (core/ptr_map.c) of slot records that live in the
 * chunk's host-side header, so deallocate is O(1) too, a double or foreign free is a status, not
 * a crash, and rap_allocator_find may ask from any thread.
 * Invariant: a slot is either on its chunk's free stack or in the live map, never both.
 */
#include "rap_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct fp_chunk fp_chunk;

typedef struct fp_slot {
  char *ptr;
  fp_chunk *chunk;
  size_t requested;
} fp_slot;

struct fp_chunk {
  char *base;
  uint32_t nfree;
  fp_chunk *prev, *next;            /* all chunks */
  fp_chunk *avail_prev, *avail_next; /* chunks with a free slot */
  bool on_avail;
  uint32_t *free_stack;
  fp_slot *slots;
};

typedef struct fixed_pool {
  rap_allocator *self, *parent;
  size_t object_size, stride, per_chunk;
  fp_chunk *chunks, *avail;
  rapi_ptr_map live;                /* live slots by address */
  size_t current, hwm, count, chunk_count, actual, actual_hwm;
} fixed_pool;

static void avail_push(fixed_pool *fp, fp_chunk *c) {
  c->on_avail = true;
  c->avail_prev = NULL;
  c->avail_next = fp->avail;
  if (fp->avail) fp->avail->avail_prev = c;
  fp->avail = c;
}

static void avail_remove(fixed_pool *fp, fp_chunk *c) {
  if (c->avail_prev) c->avail_prev->avail_next = c->avail_next;
  else fp->avail = c->avail_next;
  if (c->avail_next) c->avail_next->avail_prev = c->avail_prev;
  c->on_avail = false;
}

static int fp_init(rap_allocator *self, void *state, rap_options *opts) {
  fixed_pool *fp = state;
  uint64_t per = 1024;
  int st = rap_options_get_size(opts, "object_size", &fp->object_size);
  if (st == RAP_OK) st = rap_options_get_uint(opts, "objects_per_chunk", &per);
  if (st != RAP_OK) return st;
  if (fp->object_size == 0 || fp->object_size > ((size_t)1 << 40))
    return rapi_fail(RAP_ERR_INVALID, "%s: FixedPool needs option 'object_size', a size above zero",
                     rap_allocator_name(self));
  if (per == 0 || per > UINT32_MAX)
    return rapi_fail(RAP_ERR_INVALID, "%s: option 'objects_per_chunk' must be 1 to %u",
                     rap_allocator_name(self), UINT32_MAX);
  fp->self = self;
  fp->parent = rap_allocator_parent(self);
  size_t pa = rap_allocator_alignment(fp->parent);
  size_t align = pa < 16 ? pa : 16;
  if (align == 0) align = 1;
  fp->stride = rapi_align_up(fp->object_size, align);
  fp->per_chunk = (size_t)per;
  if (fp->stride > SIZE_MAX / fp->per_chunk)
    return rapi_fail(RAP_ERR_INVALID, "%s: object_size times objects_per_chunk overflows",
                     rap_allocator_name(self));
  rap_allocator_set_alignment(self, align);
  if (rapi_map_init(&fp->live) != RAP_OK)
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(self));
  return RAP_OK;
}

static void free_chunk(fixed_pool *fp, fp_chunk *c) {
  if (c->prev) c->prev->next = c->next;
  else fp->chunks = c->next;
  if (c->next) c->next->prev = c->prev;
  if (c->on_avail) avail_remove(fp, c);
  if (rap_deallocate(fp->parent, c->base, NULL) != RAP_OK)
    rap_log(RAP_LOG_WARN, "%s: the parent refused a chunk back: %s", rap_allocator_name(fp->self),
            rap_last_error());
  fp->actual -= fp->stride * fp->per_chunk;
  fp->chunk_count--;
  free(c->free_stack);
  free(c->slots);
  free(c);
}

static void fp_fini(rap_allocator *self, void *state) {
  (void)self;
  fixed_pool *fp = state;
  rapi_trace_depth++;   /* the chunks go back as the pool's doing, not the user's calls */
  while (fp->chunks) free_chunk(fp, fp->chunks);
  rapi_trace_depth--;
  rapi_map_fini(&fp->live);
}

static RAPI_NOINLINE int grow(fixed_pool *fp) {
  fp_chunk *c = rapi_calloc(1, sizeof *c);
  uint32_t *stack = c ? rapi_malloc(fp->per_chunk * sizeof *stack) : NULL;
  fp_slot *slots = stack ? rapi_calloc(fp->per_chunk, sizeof *slots) : NULL;
  if (slots == NULL) {
    free(c);
    free(stack);
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for slot records", rap_allocator_name(fp->self));
  }
  void *base;
  int st = rap_allocate(fp->parent, &base, fp->stride * fp->per_chunk, NULL);
  if (st != RAP_OK) {
    free(c);
    free(stack);
    free(slots);
    return st;
  }
  c->base = base;
  c->free_stack = stack;
  c->slots = slots;
  c->nfree = (uint32_t)fp->per_chunk;
  for (size_t i = 0; i < fp->per_chunk; i++) {
    stack[i] = (uint32_t)(fp->per_chunk - 1 - i);
    slots[i].ptr = c->base + i * fp->stride;
    slots[i].chunk = c;
  }
  c->next = fp->chunks;
  if (fp->chunks) fp->chunks->prev = c;
  fp->chunks = c;
  avail_push(fp, c);
  fp->chunk_count++;
  fp->actual += fp->stride * fp->per_chunk;
  if (fp->actual > fp->actual_hwm) fp->actual_hwm = fp->actual;
  return RAP_OK;
}

static RAPI_INLINE int fp_allocate_body(void *state, void **out, size_t bytes, rap_resource *r) {
  fixed_pool *fp = state;
  (void)r;
  if (RAPI_UNLIKELY(bytes > fp->object_size))
    return rapi_fail(RAP_ERR_INVALID, "%s: %zu bytes is more than the object size, %zu",
                     rap_allocator_name(fp->self), bytes, fp->object_size);
  if (RAPI_UNLIKELY(rapi_map_reserve(&fp->live) != RAP_OK))
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for the pointer map",
                     rap_allocator_name(fp->self));
  if (RAPI_UNLIKELY(fp->avail == NULL)) {
    int st = grow(fp);
    if (st != RAP_OK) return st;
  }
  fp_chunk *c = fp->avail;
  fp_slot *s = &c->slots[c->free_stack[c->nfree - 1]];
  rapi_map_insert(&fp->live, s->ptr, s);
  if (--c->nfree == 0) avail_remove(fp, c);
  s->requested = bytes;
  fp->current += bytes;
  fp->count++;
  if (fp->current > fp->hwm) fp->hwm = fp->current;
  *out = s->ptr;
  return RAP_OK;
}

/* The table's entry points: the bodies inside the thread guard. */
RAPI_GUARDED_ENTRY(static int, fp_allocate, "rap_allocate", ((fixed_pool *)state)->self,
                   fp_allocate_body, (void *state, void **out, size_t bytes, rap_resource *r),
                   (state, out, bytes, r))

static RAPI_INLINE int fp_deallocate_body(void *state, void *ptr, rap_resource *r) {
  fixed_pool *fp = state;
  (void)r;
  fp_slot *s = rapi_map_find(&fp->live, ptr);
  if (RAPI_UNLIKELY(s == NULL))
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_deallocate('%s'): %p is not a live object "
                     "(double free, interior or foreign pointer)", rap_allocator_name(fp->self), ptr);
  rapi_map_remove(&fp->live, ptr);
  fp_chunk *c = s->chunk;
  c->free_stack[c->nfree++] = (uint32_t)(s - c->slots);
  if (!c->on_avail) avail_push(fp, c);
  fp->current -= s->requested;
  fp->count--;
  return RAP_OK;
}

RAPI_GUARDED_ENTRY(static int, fp_deallocate, "rap_deallocate", ((fixed_pool *)state)->self,
                   fp_deallocate_body, (void *state, void *ptr, rap_resource *r), (state, ptr, r))

static RAPI_INLINE int fp_release_body(void *state) {
  fixed_pool *fp = state;
  for (fp_chunk *c = fp->chunks, *next; c != NULL; c = next) {
    next = c->next;
    if (c->nfree == fp->per_chunk) free_chunk(fp, c);
  }
  return RAP_OK;
}

static int fp_release(void *state) {
  int st;
  RAPI_GUARDED(st, ((fixed_pool *)state)->self, "rap_release", fp_release_body(state));
  return st;
}

static int fp_reset_peaks(void *state) {
  fixed_pool *fp = state;
  fp->hwm = fp->current;
  fp->actual_hwm = fp->actual;
  return RAP_OK;
}

static int fp_stats(void *state, rap_stats *out) {
  fixed_pool *fp = state;
  size_t free_slots = 0, releasable = 0;
  for (fp_chunk *c = fp->chunks; c != NULL; c = c->next) {
    free_slots += c->nfree;
    if (c->nfree == fp->per_chunk) releasable += fp->stride * fp->per_chunk;
  }
  out->current_bytes = fp->current;
  out->high_watermark = fp->hwm;
  out->actual_bytes = fp->actual;
  out->actual_high_watermark = fp->actual_hwm;
  out->releasable_bytes = releasable;
  out->free_bytes = free_slots * fp->stride;
  out->largest_free_block = free_slots ? fp->stride : 0;
  out->allocation_count = fp->count;
  out->block_count = fp->count;
  out->chunk_count = fp->chunk_count;
  out->used_bytes = fp->count * fp->stride;
  return RAP_OK;
}

static int fp_owns(void *state, const void *ptr) {   /* from any thread: a seqlock read */
  return rapi_map_contains_shared(&((fixed_pool *)state)->live, ptr);
}

static int fp_check_body(void *state) {
  fixed_pool *fp = state;
  size_t used = 0, chunks = 0, requested = 0;
  for (fp_chunk *c = fp->chunks; c != NULL; c = c->next) {
    chunks++;
    if (c->nfree > fp->per_chunk || c->on_avail != (c->nfree > 0))
      return rapi_fail(RAP_ERR_CORRUPT, "%s: a chunk counts %u free slots", rap_allocator_name(fp->self), c->nfree);
    used += fp->per_chunk - c->nfree;
    for (size_t i = 0; i < fp->per_chunk; i++)   /* live slots: those the map finds */
      if (rapi_map_find(&fp->live, c->slots[i].ptr) == &c->slots[i]) requested += c->slots[i].requested;
  }
  if (chunks != fp->chunk_count || used != fp->count || fp->live.count != used ||
      requested != fp->current)
    return rapi_fail(RAP_ERR_CORRUPT, "%s: %zu objects in chunks, %zu in the map, %zu counted",
                     rap_allocator_name(fp->self), used, fp->live.count, fp->count);
  return RAP_OK;
}

static int fp_check(void *state) {
  int st;
  RAPI_GUARDED(st, ((fixed_pool *)state)->self, "rap_allocator_check", fp_check_body(state));
  return st;
}

const rap_strategy rapi_fixed_pool_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "FixedPool",
    .flags = RAP_STRATEGY_NEEDS_PARENT | RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(fixed_pool),
    .init = fp_init,
    .fini = fp_fini,
    .allocate = fp_allocate,
    .deallocate = fp_deallocate,
    .stats = fp_stats,
    .reset_peaks = fp_reset_peaks,
    .owns = fp_owns,
    .release = fp_release,
    .check = fp_check,
};
