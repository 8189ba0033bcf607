/* ptr_map.c — the map from a live pointer to its record: pools' blocks, FixedPool's slots, the
 * tracked pass-through body's platform allocations.
 *
 * Open addressing with linear probing over {key, record} pairs, at most half full, deletion by
 * backward shift (no tombstones), so a lookup is one multiply and, almost always, one probe in
 * one cache line. The table only grows, doubling when it passes half full. Measured against
 * uthash on the pair path it took the map's share from about 175 to about 40 instructions per
 * allocate+free (docs/DESIGN.md); uthash keeps the registries, where no hot path goes.
 *
 * The owning thread reads and writes it plainly; rap_allocator_find on another thread reads it
 * with rapi_map_contains_shared (seqlock, see rap_internal.h). Each table carries its own size
 * for such readers, and a table that growth replaced stays, chained to its successor, until the
 * map goes: the retired tables add up to less than the live one.
 */
#include "rap_internal.h"

#include <sched.h>
#include <stdlib.h>

#define RAPI_MAP_MIN 64

static int resize(rapi_ptr_map *m, size_t cap) {
  rapi_map_table *t = rapi_calloc(1, sizeof *t + cap * sizeof(rapi_map_slot));
  if (t == NULL) return RAP_ERR_NOMEM;
  t->mask = cap - 1;
  t->shift = (unsigned)(64 - __builtin_ctzll((unsigned long long)cap));
  t->retired = m->table;
  rapi_map_slot *old = m->slots;
  size_t old_cap = m->mask ? m->mask + 1 : 0;
  for (size_t i = 0; i < old_cap; i++) {
    if (old[i].key == 0) continue;
    size_t j = (size_t)((old[i].key * UINT64_C(0x9E3779B97F4A7C15)) >> t->shift) & t->mask;
    while (t->slots[j].key != 0) j = (j + 1) & t->mask;
    t->slots[j] = old[i];   /* t is not published yet */
  }
  rapi_map_write_begin(m);
  __atomic_store_n(&m->table, t, __ATOMIC_RELEASE);
  m->slots = t->slots;
  m->mask = t->mask;
  m->shift = t->shift;
  rapi_map_write_end(m);
  return RAP_OK;
}

int rapi_map_init(rapi_ptr_map *m) {
  m->slots = NULL;
  m->mask = 0;
  m->count = 0;
  m->seq = 0;
  m->table = NULL;
  return resize(m, RAPI_MAP_MIN);
}

void rapi_map_fini(rapi_ptr_map *m) {
  for (rapi_map_table *t = m->table, *next; t != NULL; t = next) {
    next = t->retired;
    free(t);
  }
  m->table = NULL;
  m->slots = NULL;
  m->mask = 0;
  m->count = 0;
}

int rapi_map_grow(rapi_ptr_map *m) { return resize(m, (m->mask + 1) * 2); }

void rapi_map_remove_at(rapi_ptr_map *m, size_t i) {
  /* Backward shift: pull later entries of the run into the hole when their home allows it. Only a
   * move can make a reader on another thread miss a key: the seqlock covers moves alone. */
  size_t hole = i;
  bool moving = false;
  for (size_t j = (i + 1) & m->mask; m->slots[j].key != 0; j = (j + 1) & m->mask) {
    size_t home = rapi_map_home(m, m->slots[j].key);
    /* j may move to hole if home is not in the cyclic range (hole, j]. */
    if (((j - home) & m->mask) >= ((j - hole) & m->mask)) {
      if (!moving) rapi_map_write_begin(m);
      moving = true;
      rapi_map_set(&m->slots[hole], m->slots[j].key, m->slots[j].value);
      hole = j;
    }
  }
  rapi_map_set(&m->slots[hole], 0, NULL);
  if (moving) rapi_map_write_end(m);
  m->count--;
}

/* A seqlock read: a snapshot taken while no change was under way and none began before it ended.
 * The record of ptr, or NULL; a removal stores the key first, so a reader may meet a key whose
 * record is already gone: that reads as absent. */
void *rapi_map_get_shared_slow(const rapi_ptr_map *m, const void *ptr) {
  uintptr_t key = (uintptr_t)ptr;
  if (key == 0) return NULL;
  for (unsigned tries = 0;; tries++) {
    if (tries >= 64) sched_yield();   /* the owner is busy changing it: let it get on */
    unsigned s1 = __atomic_load_n(&m->seq, __ATOMIC_ACQUIRE);
    if (s1 & 1) continue;
    const rapi_map_table *t = __atomic_load_n(&m->table, __ATOMIC_ACQUIRE);
    void *found = NULL;
    if (t != NULL) {
      size_t i = (size_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> t->shift) & t->mask;
      for (size_t n = 0; n <= t->mask; n++, i = (i + 1) & t->mask) {
        uintptr_t k = __atomic_load_n(&t->slots[i].key, __ATOMIC_RELAXED);
        if (k == 0) break;
        if (k == key) {
          found = __atomic_load_n(&t->slots[i].value, __ATOMIC_RELAXED);
          break;
        }
      }
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&m->seq, __ATOMIC_RELAXED) == s1) return found;
  }
}

bool rapi_map_contains_shared(const rapi_ptr_map *m, const void *ptr) {
  return rapi_map_get_shared(m, ptr) != NULL;
}
