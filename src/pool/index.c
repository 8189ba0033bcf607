/* index.c — the two-level segregated-fit index of free blocks (TLSF's scheme, host-side records).
 *
 * A size maps to a first-level class (its highest set bit) and a second-level class (the next
 * RAPI_SL_LOG2 bits). Searching looks at the first few blocks of the request's own class (the
 * head is usually the block just freed there), then rounds the request up to the next class
 * boundary, so every block of the class found fits: two bit scans, no list walk. The rest of the
 * request's own class is walked (bounded) only when nothing larger exists, so a fit is not missed
 * before the pool grows.
 * A block is classed by size - 1, so a class holds (start, end] rather than [start, end): chunks
 * and requests are often powers of two, and this way a power-of-two block and what is left of it
 * after a small split share a class, which lets a split or merge update the index in place.
 */
#include "pool/pool.h"

#define RAPI_OWN_CLASS_SCAN 8
#define RAPI_FALLBACK_SCAN 40

static inline unsigned fls_size(size_t x) { return 63u - (unsigned)__builtin_clzll((unsigned long long)x); }

static inline void mapping(size_t s, unsigned *fl, unsigned *sl) {
  if (s < RAPI_SL_COUNT) {
    *fl = 0;
    *sl = (unsigned)s;
  } else {
    unsigned f = fls_size(s);
    *fl = f - RAPI_SL_LOG2 + 1;
    *sl = (unsigned)(s >> (f - RAPI_SL_LOG2)) - RAPI_SL_COUNT;
  }
}

void rapi_index_insert(rapi_index *ix, rapi_block *b) {
  unsigned fl, sl;
  mapping(b->size - 1, &fl, &sl);
  b->fl = (uint16_t)fl;
  b->sl = (uint16_t)sl;
  rapi_block *head = ix->heads[fl][sl];
  b->link_prev = NULL;
  b->link_next = head;
  if (head) head->link_prev = b;
  ix->heads[fl][sl] = b;
  ix->fl_bitmap |= UINT64_C(1) << fl;
  ix->sl_bitmap[fl] |= 1u << sl;
  ix->count++;
  ix->bytes += b->size;
}

static void unlink_entry(rapi_index *ix, rapi_block *b, size_t indexed_size) {
  unsigned fl = b->fl, sl = b->sl;
  if (b->link_prev) b->link_prev->link_next = b->link_next;
  else ix->heads[fl][sl] = b->link_next;
  if (b->link_next) b->link_next->link_prev = b->link_prev;
  b->link_prev = b->link_next = NULL;
  if (ix->heads[fl][sl] == NULL) {
    ix->sl_bitmap[fl] &= ~(1u << sl);
    if (ix->sl_bitmap[fl] == 0) ix->fl_bitmap &= ~(UINT64_C(1) << fl);
  }
  ix->count--;
  ix->bytes -= indexed_size;
}

void rapi_index_remove(rapi_index *ix, rapi_block *b) { unlink_entry(ix, b, b->size); }

void rapi_index_replace(rapi_index *ix, rapi_block *old, size_t old_size, rapi_block *nb) {
  unsigned fl, sl;
  mapping(nb->size - 1, &fl, &sl);
  if (fl != old->fl || sl != old->sl) {
    unlink_entry(ix, old, old_size);
    rapi_index_insert(ix, nb);
    return;
  }
  /* Same class: nb takes old's place in the list; the bitmaps do not change. */
  rapi_block *p = old->link_prev, *n = old->link_next;
  nb->fl = (uint16_t)fl;
  nb->sl = (uint16_t)sl;
  nb->link_prev = p;
  nb->link_next = n;
  if (p) p->link_next = nb;
  else ix->heads[fl][sl] = nb;
  if (n) n->link_prev = nb;
  if (old != nb) old->link_prev = old->link_next = NULL;
  ix->bytes += nb->size - old_size;
}

rapi_block *rapi_index_find(rapi_index *ix, size_t size) {
  /* The request's own class first, a few entries deep: its head is most often the block just
   * freed, and a fit there leaves the larger classes whole for larger requests. */
  unsigned fl0, sl0;
  mapping(size - 1, &fl0, &sl0);
  if (fl0 >= RAPI_FL_COUNT) return NULL;
  unsigned n = 0;
  rapi_block *b = ix->heads[fl0][sl0];
  for (; b != NULL && n < RAPI_OWN_CLASS_SCAN; b = b->link_next, n++)
    if (b->size >= size) return b;
  size_t s = size - 1;
  if (s >= RAPI_SL_COUNT) s += ((size_t)1 << (fls_size(s) - RAPI_SL_LOG2)) - 1;
  unsigned fl, sl;
  mapping(s, &fl, &sl);
  if (RAPI_LIKELY(fl < RAPI_FL_COUNT)) {
    uint32_t slmap = ix->sl_bitmap[fl] & (~0u << sl);
    if (slmap == 0) {
      uint64_t flmap = fl + 1 < 64 ? ix->fl_bitmap & (~UINT64_C(0) << (fl + 1)) : 0;
      if (flmap != 0) {
        fl = (unsigned)__builtin_ctzll(flmap);
        slmap = ix->sl_bitmap[fl];
      }
    }
    if (slmap != 0) return ix->heads[fl][(unsigned)__builtin_ctz(slmap)];
  }
  /* Nothing in a larger class: a block further down the request's own class may still fit. */
  for (; b != NULL && n < RAPI_FALLBACK_SCAN; b = b->link_next, n++)
    if (b->size >= size) return b;
  return NULL;
}

rapi_block *rapi_index_find_if(rapi_index *ix, size_t size, unsigned limit,
                               bool (*ok)(const void *ctx, const rapi_block *b, size_t size),
                               const void *ctx) {
  unsigned fl, sl;
  mapping(size - 1, &fl, &sl);
  for (; fl < RAPI_FL_COUNT; fl++, sl = 0) {
    if (!(ix->fl_bitmap & ((uint64_t)1 << fl))) continue;
    for (uint32_t slmap = ix->sl_bitmap[fl] & (~0u << sl); slmap != 0; slmap &= slmap - 1) {
      unsigned small = 0;   /* only the request's own class holds blocks too small: a few of them */
      for (rapi_block *b = ix->heads[fl][__builtin_ctz(slmap)]; b != NULL; b = b->link_next) {
        if (b->size < size) {
          if (++small == RAPI_FALLBACK_SCAN) break;
          continue;
        }
        if (ok(ctx, b, size)) return b;
        if (--limit == 0) return NULL;
      }
    }
  }
  return NULL;
}

size_t rapi_index_largest(const rapi_index *ix) {
  if (ix->fl_bitmap == 0) return 0;
  unsigned fl = fls_size(ix->fl_bitmap);
  unsigned sl = 31u - (unsigned)__builtin_clz(ix->sl_bitmap[fl]);
  size_t best = 0;
  for (const rapi_block *b = ix->heads[fl][sl]; b != NULL; b = b->link_next)
    if (b->size > best) best = b->size;
  return best;
}
