/* ptr_map.h — the map of live pointers (core/ptr_map.c, and inline here: its owner's lookups,
 * inserts and removals on the hot path, and the seqlock read other threads make). A part of
 * rap_internal.h, included from it where the helpers it uses are defined: include
 * rap_internal.h, not this file.
 */
#ifndef RAP_CORE_PTR_MAP_H
#define RAP_CORE_PTR_MAP_H

/* ---- core/ptr_map.c: live pointer -> its record, open addressing --------------------------
 * One map for every allocator that looks pointers up: pools (blocks), FixedPool (slots), the
 * tracked pass-through body (platform allocations). Written by its owner only (a pool's thread,
 * or under the tracked body's lock); other threads (rap_allocator_find) may ask whether a key
 * is there through rapi_map_contains_shared. Slots are stored atomically (plain stores on x86). An
 * insert fills an empty slot and a removal that moves nothing empties one: neither can make a
 * reader miss another key, so neither costs anything more. Only a removal that shifts entries back,
 * and growth, bump seq around the change (a seqlock), and a reader that overlapped one retries; a
 * table replaced by growth is kept until the map goes, so a late reader never reads freed memory. */
typedef struct rapi_map_slot {
  uintptr_t key;                     /* 0: empty */
  void *value;
} rapi_map_slot;
typedef struct rapi_map_table rapi_map_table;   /* the allocation behind slots, with its size */
struct rapi_map_table {
  size_t mask;
  unsigned shift;
  rapi_map_table *retired;           /* the table this one replaced */
  rapi_map_slot slots[];
};
typedef struct rapi_ptr_map {
  rapi_map_slot *slots;
  size_t mask, count;
  unsigned shift;
  unsigned seq;                      /* odd while a change is under way */
  rapi_map_table *table;
} rapi_ptr_map;
int  rapi_map_init(rapi_ptr_map *m);
void rapi_map_fini(rapi_ptr_map *m);
int  rapi_map_grow(rapi_ptr_map *m);
void rapi_map_remove_at(rapi_ptr_map *m, size_t i);
bool rapi_map_contains_shared(const rapi_ptr_map *m, const void *ptr);   /* from any thread */
void *rapi_map_get_shared_slow(const rapi_ptr_map *m, const void *ptr); /* the whole seqlock read */
/* The record of ptr, or NULL, from any thread: inline when no change is under way and ptr sits in
 * its home slot (almost always: the map is at most half full), else the whole read. */
static inline void *rapi_map_get_shared(const rapi_ptr_map *m, const void *ptr) {
  uintptr_t key = (uintptr_t)ptr;
  unsigned s1 = __atomic_load_n(&m->seq, __ATOMIC_ACQUIRE);
  const rapi_map_table *t = __atomic_load_n(&m->table, __ATOMIC_ACQUIRE);
  if (RAPI_LIKELY(t != NULL && key != 0 && (s1 & 1) == 0)) {
    size_t home = (size_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> t->shift) & t->mask;
    const rapi_map_slot *slot = &t->slots[home];
    if (RAPI_LIKELY(__atomic_load_n(&slot->key, __ATOMIC_RELAXED) == key)) {
      void *found = __atomic_load_n(&slot->value, __ATOMIC_RELAXED);
      __atomic_thread_fence(__ATOMIC_ACQUIRE);
      if (RAPI_LIKELY(__atomic_load_n(&m->seq, __ATOMIC_RELAXED) == s1)) return found;
    }
  }
  return rapi_map_get_shared_slow(m, ptr);
}
/* The first half of rapi_map_get_shared alone: the record of ptr (not NULL) when it sits in its
 * home slot and no change was under way, else NULL, which says nothing (ask rapi_map_get_shared).
 * It makes no call, so that a hot path that sends every other case out of line saves no register.
 * The map must be initialised (its table is never NULL). */
static inline void *rapi_map_get_home_shared(const rapi_ptr_map *m, const void *ptr) {
  uintptr_t key = (uintptr_t)ptr;
  unsigned s1 = __atomic_load_n(&m->seq, __ATOMIC_ACQUIRE);
  const rapi_map_table *t = __atomic_load_n(&m->table, __ATOMIC_ACQUIRE);
  /* shift is 64 - log2(capacity): the product's top bits are a slot's index already. */
  const rapi_map_slot *slot = &t->slots[(size_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> t->shift)];
  if (RAPI_UNLIKELY(__atomic_load_n(&slot->key, __ATOMIC_RELAXED) != key || key == 0)) return NULL;
  void *found = __atomic_load_n(&slot->value, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  return RAPI_LIKELY(__atomic_load_n(&m->seq, __ATOMIC_RELAXED) == s1 && (s1 & 1) == 0) ? found : NULL;
}
static inline void rapi_map_write_begin(rapi_ptr_map *m) {
  __atomic_store_n(&m->seq, m->seq + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
}
static inline void rapi_map_write_end(rapi_ptr_map *m) {
  __atomic_store_n(&m->seq, m->seq + 1, __ATOMIC_RELEASE);
}
static inline void rapi_map_set(rapi_map_slot *slot, uintptr_t key, void *value) {
  __atomic_store_n(&slot->key, key, __ATOMIC_RELAXED);
  __atomic_store_n(&slot->value, value, __ATOMIC_RELAXED);
}
static inline size_t rapi_map_home(const rapi_ptr_map *m, uintptr_t key) {
  return (size_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> m->shift) & m->mask;
}
/* The slot holding key, or the empty slot where it would go. */
static inline size_t rapi_map_probe(const rapi_ptr_map *m, uintptr_t key) {
  size_t i = rapi_map_home(m, key);
  while (m->slots[i].key != 0 && m->slots[i].key != key) i = (i + 1) & m->mask;
  return i;
}
static inline void *rapi_map_find(const rapi_ptr_map *m, const void *ptr) {
  uintptr_t key = (uintptr_t)ptr;
  if (RAPI_UNLIKELY(key == 0)) return NULL;
  return m->slots[rapi_map_probe(m, key)].value;
}
static inline bool rapi_map_has_room(const rapi_ptr_map *m) { return (m->count + 1) * 2 <= m->mask + 1; }
/* key must not be in the map, and the map must have room (rapi_map_has_room, or grow first). */
static inline void rapi_map_insert(rapi_ptr_map *m, const void *ptr, void *value) {
  rapi_map_slot *slot = &m->slots[rapi_map_probe(m, (uintptr_t)ptr)];
  __atomic_store_n(&slot->value, value, __ATOMIC_RELAXED);
  __atomic_store_n(&slot->key, (uintptr_t)ptr, __ATOMIC_RELAXED);
  m->count++;
}
/* Makes room for one more entry; RAP_ERR_NOMEM (no sentence) if the table could not grow. */
static inline int rapi_map_reserve(rapi_ptr_map *m) {
  return RAPI_LIKELY(rapi_map_has_room(m)) ? RAP_OK : rapi_map_grow(m);
}
/* Removes the entry in slot i, found by rapi_map_probe (so a lookup and its removal probe once). */
static inline void rapi_map_remove_slot(rapi_ptr_map *m, size_t i) {
  if (RAPI_LIKELY(m->slots[(i + 1) & m->mask].key == 0)) {   /* the end of its run: nothing moves */
    rapi_map_set(&m->slots[i], 0, NULL);
    m->count--;
    return;
  }
  rapi_map_remove_at(m, i);
}
static inline void rapi_map_remove(rapi_ptr_map *m, const void *ptr) {
  size_t i = rapi_map_probe(m, (uintptr_t)ptr);
  if (m->slots[i].key == 0) return;
  rapi_map_remove_slot(m, i);
}
/* The walk over every entry, in slot order, by its owner: the record of the first entry at slot *i
 * or after, *i moved past it, or NULL at the end (a record is never NULL: rapi_map_find's NULL
 * says absent). Start with *i = 0. Records may change during a walk, entries may not come or go
 * (a removal can move a later entry back over the slots walked). A map not made yet, or already
 * finished, has none. */
static inline void *rapi_map_next(const rapi_ptr_map *m, size_t *i) {
  for (; m->slots != NULL && *i <= m->mask; ++*i)
    if (m->slots[*i].key != 0) return m->slots[(*i)++].value;
  return NULL;
}

#endif /* RAP_CORE_PTR_MAP_H */
