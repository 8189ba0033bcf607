/* ptr_map.c — the pools' map from a live block's address to its record.
 *
 * Open addressing with linear probing over {key, record} pairs, at most half full, deletion by
 * backward shift (no tombstones), so a lookup is one multiply and, almost always, one probe in
 * one cache line. The table only grows, doubling when it passes half full. Measured against
 * uthash on the pair path it took the map's share from about 175 to about 40 instructions per
 * allocate+free (docs/DESIGN.md); uthash keeps the registries, where no hot path goes.
 */
#include "rap_internal.h"

#include <stdlib.h>

#define RAPI_MAP_MIN 64

static int resize(rapi_ptr_map *m, size_t cap) {
  rapi_map_slot *slots = rapi_calloc(cap, sizeof *slots);
  if (slots == NULL) return RAP_ERR_NOMEM;
  rapi_map_slot *old = m->slots;
  size_t old_cap = m->mask ? m->mask + 1 : 0;
  m->slots = slots;
  m->mask = cap - 1;
  m->shift = (unsigned)(64 - __builtin_ctzll((unsigned long long)cap));
  for (size_t i = 0; i < old_cap; i++) {
    if (old[i].key == 0) continue;
    size_t j = rapi_map_home(m, old[i].key);
    while (slots[j].key != 0) j = (j + 1) & m->mask;
    slots[j] = old[i];
  }
  free(old);
  return RAP_OK;
}

int rapi_map_init(rapi_ptr_map *m) {
  m->slots = NULL;
  m->mask = 0;
  m->count = 0;
  return resize(m, RAPI_MAP_MIN);
}

void rapi_map_fini(rapi_ptr_map *m) {
  free(m->slots);
  m->slots = NULL;
  m->mask = 0;
  m->count = 0;
}

int rapi_map_grow(rapi_ptr_map *m) { return resize(m, (m->mask + 1) * 2); }

void rapi_map_remove_at(rapi_ptr_map *m, size_t i) {
  /* Backward shift: pull later entries of the run into the hole when their home allows it. */
  size_t hole = i;
  for (size_t j = (i + 1) & m->mask; m->slots[j].key != 0; j = (j + 1) & m->mask) {
    size_t home = rapi_map_home(m, m->slots[j].key);
    /* j may move to hole if home is not in the cyclic range (hole, j]. */
    if (((j - home) & m->mask) >= ((j - hole) & m->mask)) {
      m->slots[hole] = m->slots[j];
      hole = j;
    }
  }
  m->slots[hole].key = 0;
  m->slots[hole].block = NULL;
  m->count--;
}
