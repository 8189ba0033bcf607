/* free_list.c — DynamicPoolList's free blocks: one list in address order, searched for best fit.
 *
 * Insert walks to the block's place, find scans for the smallest block that fits (the lowest
 * address among equals), largest scans everything: O(free blocks) each, by design. In exchange
 * the index is one pointer, and with few large blocks best fit packs tightest. The list head is
 * heads[0][0] of the index, so the counters and the pool code are shared with the TLSF index.
 */
#include "pool/pool.h"

void rapi_list_insert(rapi_index *ix, rapi_block *b) {
  rapi_block *prev = NULL, *cur = ix->heads[0][0];
  while (cur != NULL && cur->ptr < b->ptr) {
    prev = cur;
    cur = cur->link_next;
  }
  b->link_prev = prev;
  b->link_next = cur;
  if (cur) cur->link_prev = b;
  if (prev) prev->link_next = b;
  else ix->heads[0][0] = b;
  ix->count++;
  ix->bytes += b->size;
}

void rapi_list_remove(rapi_index *ix, rapi_block *b) {
  if (b->link_prev) b->link_prev->link_next = b->link_next;
  else ix->heads[0][0] = b->link_next;
  if (b->link_next) b->link_next->link_prev = b->link_prev;
  b->link_prev = b->link_next = NULL;
  ix->count--;
  ix->bytes -= b->size;
}

void rapi_list_replace(rapi_index *ix, rapi_block *old, size_t old_size, rapi_block *nb) {
  /* Callers replace a block by an address neighbour (a split remainder, a merged block): no free
   * block lies between them, so nb's place in address order is old's place. */
  rapi_block *p = old->link_prev, *n = old->link_next;
  nb->link_prev = p;
  nb->link_next = n;
  if (p) p->link_next = nb;
  else ix->heads[0][0] = nb;
  if (n) n->link_prev = nb;
  if (old != nb) old->link_prev = old->link_next = NULL;
  ix->bytes += nb->size - old_size;
}

rapi_block *rapi_list_find(rapi_index *ix, size_t size) {
  rapi_block *best = NULL;
  for (rapi_block *b = ix->heads[0][0]; b != NULL; b = b->link_next) {
    if (b->size < size || (best != NULL && b->size >= best->size)) continue;
    best = b;
    if (b->size == size) break;   /* nothing fits better */
  }
  return best;
}

size_t rapi_list_largest(const rapi_index *ix) {
  size_t best = 0;
  for (const rapi_block *b = ix->heads[0][0]; b != NULL; b = b->link_next)
    if (b->size > best) best = b->size;
  return best;
}
