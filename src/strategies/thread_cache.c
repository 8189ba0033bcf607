/* thread_cache.c — ThreadCache: a thread-safe wrapper whose allocate and deallocate take no shared
 * lock in the common case.
 *
 * Each thread that uses an instance gets its own cache of free blocks, binned by resource and size
 * class (four classes per power of two above four alignment units, so a request is rounded up by at
 * most a quarter). A block freed on resource r goes to the freeing thread's bin for r and serves
 * that thread's next request on r of its class: r's stream order makes the reuse safe, exactly as a
 * pool's own reuse of a block pending on r, so no event is needed. Nothing cached for r is ever
 * handed to another resource: a bin only serves its resource, and a block leaves the caches by being
 * deallocated on r in the parent, which applies the pending rule from there on.
 *
 * What is shared, and when it is touched:
 * - `lock`, around the parent (the wrapped pool), the record slab and the writes of `map`: only when
 *   a thread's bin is empty (refill, a few blocks at once), when a cache passes its bounds (flush, a
 *   batch at once), for blocks above `max_size`, and for the cold calls (stats, check, release, ...).
 * - `map`, pointer -> record, for every block that came through a cache: written under `lock`,
 *   read by deallocate without any lock (the map's seqlock read).
 * - a record's `state`, changed by compare-and-swap: LIVE while the user holds the block.
 * - a cache's `xfree`, a lock-free list: a block freed by another thread than the one whose cache
 *   handed it out is pushed there (one compare-and-swap) and the owner takes the whole list back
 *   when its bins run dry (mimalloc's thread-delayed free, for the producer/consumer case).
 * - a cache's own `spin`, taken by whoever walks all caches (check, release, out of memory, a
 *   resource's or the allocator's end), who then waits for the cache's thread to be out; that
 *   thread enters its cache with a store to `busy` and takes the spin only while a walker is there
 *   (cache_enter, thread_cache.h). It is a leaf: nothing else is taken, and the parent is never
 *   called, while it is held.
 *
 * Thread ends (thread_cache_caches.c, which keeps the caches): a process-wide thread-specific key
 * runs at a thread's exit and flushes every cache of that thread to its parent; the cache stays,
 * abandoned, for the next thread that comes (blocks still live from it are freed through it as
 * from any other thread's cache). Process-wide, under `registry`, are only the lists that link
 * threads to caches: taken when a thread first uses an instance, at thread exit and when an
 * instance goes, never on the hot path.
 */
#include "strategies/thread_cache.h"

#include <stdio.h>
#include <string.h>

static uint64_t next_id = 1;   /* atomic: instances' ids, never reused */

/* ---- classes --------------------------------------------------------------------------------- */

/* Units of align: 1, 2, 3, 4, then four classes per power of two (5, 6, 7, 8, 10, 12, 14, 16, ...).
 * With v = units - 1 (bytes >= 1) and k the top bit of v | 4, the class is 4(k - 2) + (v >> (k - 2)):
 * below 8 units that is v, and above, four per power of two. No branch: an OR, a bit scan, a
 * shift and an add. */
static RAPI_INLINE unsigned class_of(const thread_cache *t, size_t bytes) {
  size_t v = (bytes - 1) >> t->shift;
  unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)(v | 4));
  return 4u * (k - 2u) + (unsigned)(v >> (k - 2u));
}

static size_t class_units(unsigned cls) {
  if (cls < 4) return cls + 1;
  unsigned k = (cls - 4) / 4 + 2, j = (cls - 4) % 4;
  return ((size_t)1 << k) + ((size_t)(j + 1) << (k - 2));
}

/* ---- the parent, under the lock ---------------------------------------------------------------- */

/* Under lock: a block no cache keeps (no record: past max_size, a class the parent refuses, or a
 * thread without a cache), counted in uncached while it lives. */
static int uncached_allocate(thread_cache *t, void **out, size_t bytes, rap_resource *r) {
  int st = rap_allocate(t->inner, out, bytes, r);
  t->uncached += st == RAP_OK;
  return st;
}

/* Under lock: a pointer with no record goes to the parent. One the parent takes back that never
 * came through here (a caller's mistake) leaves the count at zero. */
static int uncached_deallocate(thread_cache *t, void *ptr, rap_resource *r) {
  int st = rap_deallocate(t->inner, ptr, r);
  t->uncached -= st == RAP_OK && t->uncached > 0;
  return st;
}

static RAPI_NOINLINE int locked_allocate(thread_cache *t, void **out, size_t bytes, rap_resource *r) {
  int st;
  TC_LOCKED(st, t, uncached_allocate(t, out, bytes, r));
  if (st == RAP_ERR_NOMEM) {   /* what the caches hold may be what is missing */
    rapi_tc_flush_all(t, NULL);
    TC_LOCKED(st, t, uncached_allocate(t, out, bytes, r));
  }
  return st;
}

/* Under lock: t watches r, so that r's destroy flushes the caches' blocks for it first. */
static int watch(thread_cache *t, rap_resource *r) { return rapi_watch_set_add(&t->watched, r, t->self); }

static RAPI_NOINLINE void watch_forget(thread_cache *t, rap_resource *r) {
  rapi_watch_set_forget(&t->watched, r, t->self);
}

/* Under lock: up to want blocks of class cls on r from the parent, each with its record in the map,
 * chained through next; the count made. The first failure's status is in *st when none was made. */
static size_t refill_locked(thread_cache *t, tc_cache *c, unsigned cls, rap_resource *r, size_t want,
                            tc_rec **out, int *st) {
  size_t got = 0;
  *st = watch(t, r);
  if (*st != RAP_OK) return 0;
  for (; got < want; got++) {
    if (rapi_map_reserve(&t->map) != RAP_OK) {
      *st = rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(t->self));
      break;
    }
    tc_rec *rec = rapi_slab_alloc(&t->recs);
    if (rec == NULL) {
      *st = rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(t->self));
      break;
    }
    void *p = NULL;
    *st = rap_allocate(t->inner, &p, t->cls_size[cls], r);
    if (*st != RAP_OK) {
      rapi_slab_free(&t->recs, rec);
      break;
    }
    rec->ptr = p;
    rec->r = r;
    rec->owner = c;
    rec->cls = cls;
    rec->next = *out;
    __atomic_store_n(&rec->state, TC_CACHED, __ATOMIC_RELAXED);   /* owns may look at any time */
    __atomic_store_n(&rec->recorded, 0, __ATOMIC_RELAXED);
    rapi_map_insert(&t->map, p, rec);
    *out = rec;
  }
  return got;
}

/* ---- allocate and deallocate ------------------------------------------------------------------- */

/* While the pool under it sleeps every cache is walked, so every call comes the slow way here. */
static RAPI_NOINLINE int asleep(const thread_cache *t, const char *fn) {
  return rapi_fail(RAP_ERR_BUSY, "%s('%s'): the pool under it is asleep (rap_allocator_sleep): its "
                   "memory is given back until rap_allocator_wake", fn, rap_allocator_name(t->self));
}

/* Everything but the inline hit. First a hit the inline path does not look for (a way or a slot
 * not the first); then, the calling thread's bin for (r, cls) being empty, blocks other threads
 * freed, then a few blocks from the parent (the first is the answer, the rest go to the bin). No bin lends to another class:
 * a block that served a smaller class would come back to its own and leave the smaller one dry
 * for good, so that the thread would keep missing on a workload that repeats itself. */
static RAPI_NOINLINE int allocate_miss(thread_cache *t, void **out, size_t bytes, rap_resource *r) {
  if (RAPI_UNLIKELY(__atomic_load_n(&t->asleep, __ATOMIC_ACQUIRE))) return asleep(t, "rap_allocate");
  if (r == NULL) r = t->host;
  /* A call-scoped resource's blocks go by uncached: one cached for it would reach the parent later,
   * on a call that is not one with r, whose stream may be gone by then. */
  if (RAPI_UNLIKELY(bytes - 1 >= t->max_size || r->call_scoped))
    return locked_allocate(t, out, bytes, r);
  tc_cache *c = rapi_tc_cache_get(t);
  if (c == NULL) return locked_allocate(t, out, bytes, r);
  rapi_tc_publish(t, c);   /* for the inline hit next time */
  unsigned cls = class_of(t, bytes);
  tc_rec *surplus = NULL, *rec = NULL;
  if (RAPI_LIKELY(cache_enter(c))) {   /* a hit the inline path does not look for: another slot */
    tc_slot *s = slot_find(c, r);
    if (s != NULL && s->bins[cls].head != NULL) {
      rec = bin_pop(t, c, &s->bins[cls], cls);
      __atomic_store_n(&rec->state, TC_LIVE, __ATOMIC_RELAXED);
      *out = rec->ptr;
      cache_leave(c);
      return RAP_OK;
    }
    cache_leave(c);
  }
  /* Half a bin at once for small classes (a sixteenth of the cache's bytes at most), so that a
   * thread meets the lock seldom: a thread that starts cold makes a bin's worth of misses, not four
   * times as many. Past a sixteenth, a thread working over every class of 256 B..64 KiB would fetch
   * more than its cache_bytes and trim what it had just fetched. */
  size_t want = t->cap_bytes / 16 / t->cls_size[cls], half = t->cap_blocks / 2;
  want = want < 1 ? 1 : want > half ? (half < 1 ? 1 : half) : want;
  spin_lock(c);
  c->misses++;
  rapi_tc_drain_xfree(t, c, &surplus);
  tc_slot *s = rapi_tc_slot_assign(t, c, r, &surplus);
  if (s->bins[cls].head == NULL) rapi_tc_withdraw(t, c, s, cls, want);   /* others' surplus */
  if (s->bins[cls].head != NULL) rec = bin_pop(t, c, &s->bins[cls], cls);   /* others' frees filled it */
  if (c->bytes > t->cap_bytes) rapi_tc_trim(t, c, s, cls, &surplus);   /* what came back may be a lot */
  rapi_tc_deposit(t, &surplus);
  spin_unlock(c);
  rapi_tc_flush_batch(t, &surplus);
  if (rec != NULL) {
    __atomic_store_n(&rec->state, TC_LIVE, __ATOMIC_RELAXED);
    *out = rec->ptr;
    return RAP_OK;
  }
  int st;
  size_t n;
  tc_rec *got = NULL;
  TC_LOCKED(n, t, refill_locked(t, c, cls, r, want, &got, &st));
  if (n == 0 && st == RAP_ERR_NOMEM) {
    rapi_tc_flush_all(t, NULL);
    TC_LOCKED(n, t, refill_locked(t, c, cls, r, 1, &got, &st));
  }
  if (n == 0)   /* a parent that refuses the class (a FixedPool's object size) may take the request */
    return st == RAP_ERR_INVALID ? locked_allocate(t, out, bytes, r) : st;
  rec = got;
  got = got->next;
  if (got != NULL) {
    spin_lock(c);
    s = rapi_tc_slot_assign(t, c, r, &surplus);
    for (tc_rec *x = got, *next; x != NULL; x = next) {
      next = x->next;
      bin_push(t, c, s, x);
    }
    if (c->bytes > t->cap_bytes) rapi_tc_trim(t, c, s, cls, &surplus);
    rapi_tc_deposit(t, &surplus);
    spin_unlock(c);
    rapi_tc_flush_batch(t, &surplus);
  }
  __atomic_store_n(&rec->state, TC_LIVE, __ATOMIC_RELAXED);
  *out = rec->ptr;
  return RAP_OK;
}

/* The hit, about 35 instructions: the calling thread's cache is in the instance's table at its
 * thread pointer, the request is one the caches take (1 B to max_size), no walker is in the cache,
 * its first slot serves r, and the bin of the class has a block. Anything else (a cache not in the
 * table, another slot, an empty bin, a walker) goes to allocate_miss with the arguments as they came, so that the hit saves no register. */
static int tc_allocate(void *state, void **out, size_t bytes, rap_resource *r) {
  thread_cache *t = state;
  uintptr_t tp = rapi_self_thread(), its;
  tc_cache *c = cache_by_tp(t, tp, &its);
  if (RAPI_LIKELY(its == tp && bytes - 1 < t->max_size)) {
    rap_resource *on = r != NULL ? r : t->host;
    if (RAPI_LIKELY(cache_enter(c))) {
      if (RAPI_LIKELY(c->slots[0].r == on)) {
        unsigned cls = class_of(t, bytes);
        tc_bin *b = &c->first_bins[cls];
        tc_rec *rec = b->head;
        if (RAPI_LIKELY(rec != NULL)) {
          b->head = rec->next;
          b->n--;
          c->bytes -= t->cls_size[cls];
          __atomic_store_n(&rec->state, TC_LIVE, __ATOMIC_RELAXED);
          *out = rec->ptr;
          cache_leave(c);
          return RAP_OK;
        }
      }
      cache_leave(c);
    }
  }
  return allocate_miss(t, out, bytes, r);
}

/* The sentence for a pointer that has a record here but is not a live block. */
static RAPI_NOINLINE int not_live(const thread_cache *t, const char *fn, const void *ptr) {
  return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "%s('%s'): %p is not a live block (freed twice?)", fn,
                   rap_allocator_name(t->self), ptr);
}

/* A block that needs the parent's judgement (freed on another resource than its own, or recorded
 * on others): it leaves the caches, if the parent takes it. */
static RAPI_NOINLINE int deallocate_uncached(thread_cache *t, tc_rec *rec, void *ptr, rap_resource *r) {
  int expect = TC_LIVE;
  if (!__atomic_compare_exchange_n(&rec->state, &expect, TC_GOING, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_RELAXED))
    return not_live(t, "rap_deallocate", ptr);
  rapi_held held;
  tc_lock(t, &held);
  int st = rap_deallocate(t->inner, ptr, r);
  if (st == RAP_OK) {
    rapi_map_remove(&t->map, ptr);
    rapi_slab_free(&t->recs, rec);
  } else {
    __atomic_store_n(&rec->state, TC_LIVE, __ATOMIC_RELEASE);
  }
  tc_unlock(t, &held);
  return st;
}

/* Under mine's spin: the slot of mine where the calling thread keeps a block of another thread's
 * cache itself, or NULL: mine has a slot for the block's resource, that slot's bin of the class is
 * under half its bound (so the thread will hand the block out again soon) and mine has room for
 * its bytes. */
static tc_slot *adopting_slot(const thread_cache *t, tc_cache *mine, const tc_rec *rec) {
  tc_slot *s = slot_find(mine, rec->r);
  bool room = s != NULL && s->bins[rec->cls].n < t->cap_blocks / 2 &&
              mine->bytes + t->cls_size[rec->cls] <= t->cap_bytes;
  return room ? s : NULL;
}

/* Another thread's cache handed the block out. A thread that allocates what it frees (larson's
 * chains, a worker that takes over blocks another thread made) keeps it while its own bin of the
 * class is short; otherwise it goes back to that cache, which takes it back when its bins run dry
 * (a producer's blocks from its consumers, xmalloc), or here when that thread has ended. mine: the
 * calling thread's cache of t, or NULL. */
static RAPI_NOINLINE int deallocate_foreign(thread_cache *t, tc_rec *rec, void *ptr, tc_cache *mine) {
  int expect = TC_LIVE;
  if (!__atomic_compare_exchange_n(&rec->state, &expect, TC_XFREED, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_RELAXED))
    return not_live(t, "rap_deallocate", ptr);
  tc_cache *owner = rec->owner;
  if (mine != NULL) {
    spin_lock(mine);
    tc_slot *s = adopting_slot(t, mine, rec);
    if (s != NULL) {
      rec->owner = mine;
      __atomic_store_n(&rec->state, TC_CACHED, __ATOMIC_RELAXED);
      bin_push(t, mine, s, rec);
      spin_unlock(mine);
      return RAP_OK;
    }
    spin_unlock(mine);
  }
  tc_cache *me = __atomic_load_n(&owner->abandoned, __ATOMIC_ACQUIRE) ? rapi_tc_cache_get(t) : NULL;
  if (me == NULL) {   /* the owner takes it back when its bins run dry */
    if (RAPI_UNLIKELY(rapi_tc_xpush_hook != NULL)) rapi_tc_xpush_hook();
    tc_rec *head = __atomic_load_n(&owner->xfree, __ATOMIC_RELAXED);
    do rec->next = head;
    while (!__atomic_compare_exchange_n(&owner->xfree, &head, rec, true, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED));
    /* The owner may have ended between the look and the push, its list already drained: then no
     * one would come for what is on it, and this thread gives it to the parent. (The exit drains
     * with a release after marking the cache abandoned; the push acquires: one of the two sees the
     * other.) */
    if (RAPI_UNLIKELY(__atomic_load_n(&owner->abandoned, __ATOMIC_ACQUIRE))) {
      tc_rec *left = NULL;
      spin_lock(owner);   /* the walks of the list hold it; an adopter would drain it itself */
      if (__atomic_load_n(&owner->abandoned, __ATOMIC_RELAXED))
        left = __atomic_exchange_n(&owner->xfree, NULL, __ATOMIC_ACQ_REL);
      spin_unlock(owner);
      rapi_tc_flush_batch(t, &left);
    }
    return RAP_OK;
  }
  tc_rec *surplus = NULL;
  spin_lock(me);
  rec->owner = me;
  __atomic_store_n(&rec->state, TC_CACHED, __ATOMIC_RELAXED);
  tc_slot *s = rapi_tc_slot_assign(t, me, rec->r, &surplus);
  bin_push(t, me, s, rec);
  rapi_tc_trim(t, me, s, rec->cls, &surplus);
  rapi_tc_deposit(t, &surplus);
  spin_unlock(me);
  rapi_tc_flush_batch(t, &surplus);
  return RAP_OK;
}

/* A block of c freed by c's thread, c entered: into its bin, unless it is not live or its slot
 * went to other resources. spun: c is held by its spin (a walker was there), not by cache_enter. */
static RAPI_INLINE int free_into(thread_cache *t, tc_cache *c, tc_rec *rec, void *ptr, bool spun) {
  if (RAPI_UNLIKELY(__atomic_load_n(&rec->state, __ATOMIC_RELAXED) != TC_LIVE)) {
    if (spun) spin_unlock(c);
    else cache_leave(c);
    return not_live(t, "rap_deallocate", ptr);
  }
  tc_slot *s = c->slots[0].r == rec->r ? &c->slots[0] : slot_find(c, rec->r);
  if (RAPI_UNLIKELY(s == NULL)) {
    if (spun) spin_unlock(c);
    else cache_leave(c);
    return deallocate_uncached(t, rec, ptr, rec->r);   /* its slot went to other resources */
  }
  __atomic_store_n(&rec->state, TC_CACHED, __ATOMIC_RELAXED);
  bin_push(t, c, s, rec);
  if (RAPI_UNLIKELY(s->bins[rec->cls].n > t->cap_blocks || c->bytes > t->cap_bytes)) {
    tc_rec *surplus = NULL;
    rapi_tc_trim(t, c, s, rec->cls, &surplus);
    c->trims++;
    rapi_tc_deposit(t, &surplus);
    if (spun) spin_unlock(c);
    else cache_leave(c);
    rapi_tc_flush_batch(t, &surplus);
    return RAP_OK;
  }
  if (spun) spin_unlock(c);
  else cache_leave(c);
  return RAP_OK;
}

/* A walker holds c: wait for it under the spin. */
static RAPI_NOINLINE int free_into_spun(thread_cache *t, tc_cache *c, tc_rec *rec, void *ptr) {
  spin_lock(c);
  return free_into(t, c, rec, ptr, true);
}

/* Everything but the inline free: a block not cached, freed on another resource or recorded on
 * one, of another thread's cache, not live, whose slot is not the first, not in its home slot of
 * the map (or the map changing), or a walker in the cache. */
static RAPI_NOINLINE int deallocate_slow(thread_cache *t, void *ptr, rap_resource *r) {
  if (RAPI_UNLIKELY(__atomic_load_n(&t->asleep, __ATOMIC_ACQUIRE))) return asleep(t, "rap_deallocate");
  tc_rec *rec = rapi_map_get_shared(&t->map, ptr);
  if (RAPI_UNLIKELY(rec == NULL)) {   /* not cached: above max_size, or not ours */
    int st;
    TC_LOCKED(st, t, uncached_deallocate(t, ptr, r));
    return st;
  }
  if ((r != NULL && r != rec->r) | __atomic_load_n(&rec->recorded, __ATOMIC_RELAXED))
    return deallocate_uncached(t, rec, ptr, r);
  /* The block's cache is the caller's when it records the caller's thread pointer, as the inline
   * free tests: the thread's ways (my_cache) keep four instances, and a thread using more would
   * send its own block to its own list of other threads' frees. */
  tc_cache *c = rec->owner;
  if (__atomic_load_n(&c->tp, __ATOMIC_RELAXED) != rapi_self_thread())
    return deallocate_foreign(t, rec, ptr, my_cache(t));
  if (!cache_enter(c)) return free_into_spun(t, c, rec, ptr);
  return free_into(t, c, rec, ptr, false);
}

/* Past its bounds after a free into c (entered): the surplus goes back to the parent. */
static RAPI_NOINLINE int free_trim(thread_cache *t, tc_cache *c, tc_slot *s, unsigned cls) {
  tc_rec *surplus = NULL;
  rapi_tc_trim(t, c, s, cls, &surplus);
  c->trims++;
  rapi_tc_deposit(t, &surplus);
  cache_leave(c);
  rapi_tc_flush_batch(t, &surplus);
  return RAP_OK;
}

/* The inline free, about 50 instructions, a third of them the map's lookup: a block of the
 * calling thread's cache (the cache's thread pointer is the caller's), live, freed on its own resource (or NULL) and recorded on no
 * other, whose resource has the cache's first slot, goes to the front of its bin. */
static int tc_deallocate(void *state, void *ptr, rap_resource *r) {
  thread_cache *t = state;
  tc_rec *rec = rapi_map_get_home_shared(&t->map, ptr);
  if (RAPI_LIKELY(rec != NULL)) {
    tc_cache *c = rec->owner;   /* one of t's caches: the caller's if its thread pointer is */
    rap_resource *on = rec->r;
    if (RAPI_LIKELY(__atomic_load_n(&c->tp, __ATOMIC_RELAXED) == rapi_self_thread() &&
                    (r == NULL || r == on) &&
                    !__atomic_load_n(&rec->recorded, __ATOMIC_RELAXED) && cache_enter(c))) {
      if (RAPI_LIKELY(__atomic_load_n(&rec->state, __ATOMIC_RELAXED) == TC_LIVE &&
                      c->slots[0].r == on)) {
        unsigned cls = rec->cls;
        tc_bin *b = &c->first_bins[cls];
        __atomic_store_n(&rec->state, TC_CACHED, __ATOMIC_RELAXED);
        rec->next = b->head;
        b->head = rec;
        size_t n = ++b->n;
        size_t bytes = c->bytes += t->cls_size[cls];
        if (RAPI_UNLIKELY(n > t->cap_blocks || bytes > t->cap_bytes))
          return free_trim(t, c, &c->slots[0], cls);
        cache_leave(c);
        return RAP_OK;
      }
      cache_leave(c);
    }
  }
  return deallocate_slow(t, ptr, r);
}

/* ---- the cold calls ---------------------------------------------------------------------------- */

/* Under lock: what the caches hold (for r only, unless NULL), other threads' frees and the blocks
 * on their way back to the parent included; in *live, the blocks with a record that a user holds.
 * Every block that came through a cache has its record in the map until the parent has it back,
 * and the map and the parent change together under the lock: so a block a thread is handing back
 * (a trim, an evicted slot, a thread's end) counts as cached here while the parent still counts it
 * live, and the two figures agree at every moment. */
static void cached_sum_locked(thread_cache *t, rap_resource *r, size_t *bytes, size_t *blocks,
                              size_t *live) {
  *bytes = *blocks = *live = 0;
  const tc_rec *rec;
  for (size_t i = 0; (rec = rapi_map_next(&t->map, &i)) != NULL;) {
    int st = __atomic_load_n(&rec->state, __ATOMIC_ACQUIRE);
    if (r != NULL && rec->r != r) continue;
    if (st == TC_CACHED || st == TC_XFREED) {
      *bytes += t->cls_size[rec->cls];
      *blocks += 1;
    } else {
      *live += 1;   /* TC_LIVE, or TC_GOING: the parent has not taken it back yet */
    }
  }
}

static void see_through(rap_stats *out, size_t bytes, size_t blocks) {
  out->current_bytes -= bytes < out->current_bytes ? bytes : out->current_bytes;
  out->used_bytes -= bytes < out->used_bytes ? bytes : out->used_bytes;
  out->allocation_count -= blocks < out->allocation_count ? blocks : out->allocation_count;
  out->cached_bytes += bytes;
  out->cached_count += blocks;
}

/* The parent's figures (of r, unless NULL), with the cached blocks moved from live to cached;
 * the allocator's live blocks are its own, those it handed out (rapi_stats_own). */
static int stats_through(thread_cache *t, rap_resource *r, rap_stats *out) {
  size_t bytes = 0, blocks = 0, live = 0;
  rapi_held held;
  rapi_lock(&t->lock, &held);
  int st = r == NULL ? rap_allocator_stats(t->inner, out) : rap_allocator_resource_stats(t->inner, r, out);
  if (st == RAP_OK) cached_sum_locked(t, r, &bytes, &blocks, &live);
  live += t->uncached;
  rapi_unlock(&held);
  if (st != RAP_OK) return st;
  see_through(out, bytes, blocks);
  if (r == NULL) rapi_stats_own(out, live);
  return RAP_OK;
}

static int tc_stats(void *state, rap_stats *out) { return stats_through(state, NULL, out); }

static int tc_reset_peaks(void *state) {
  thread_cache *t = state;
  int st;
  RAPI_LOCKED(st, &t->lock, rap_allocator_reset_peaks(t->inner));
  return st;
}

static int tc_resource_stats(void *state, rap_resource *r, rap_stats *out) {
  return stats_through(state, r, out);
}

static int tc_owns(void *state, const void *ptr) {
  thread_cache *t = state;
  tc_rec *rec = rapi_map_get_shared(&t->map, ptr);
  if (rec != NULL) return __atomic_load_n(&rec->state, __ATOMIC_RELAXED) == TC_LIVE;
  if (t->inner->strategy->flags & RAP_STRATEGY_CONCURRENT_OWNS)
    return t->inner->strategy->owns(t->inner->state, ptr);
  int st;
  RAPI_LOCKED(st, &t->lock, t->inner->strategy->owns(t->inner->state, ptr));
  return st;
}

static int tc_release(void *state) {
  thread_cache *t = state;
  rapi_tc_flush_all(t, NULL);
  int st;
  RAPI_LOCKED(st, &t->lock, rap_release(t->inner));
  return st;
}

/* Every cached block is where its record says: in the map under its pointer, in the bin of its
 * class in a slot of its resource, of the cache it names, and the caches' counts add up. */
static int tc_check(void *state) {
  thread_cache *t = state;
  const char *name = rap_allocator_name(t->self);
  int st = RAP_OK;
  pthread_mutex_lock(&t->list_lock);
  rapi_tc_walk_begin(t);
  for (tc_cache *c = t->caches; c != NULL && st == RAP_OK; c = c->inst_next) {
    size_t bytes = 0, blocks = 0;
    for (int i = 0; i < TC_SLOTS && st == RAP_OK; i++) {
      tc_slot *s = &c->slots[i];
      for (unsigned k = 0; k < t->ncls && st == RAP_OK; k++) {
        size_t n = 0;
        if (s->r == NULL && s->bins[k].head != NULL)
          st = rapi_fail(RAP_ERR_CORRUPT, "%s: an unused slot of a thread's cache holds blocks", name);
        for (tc_rec *x = s->bins[k].head; x != NULL && st == RAP_OK; x = x->next, n++) {
          int now = __atomic_load_n(&x->state, __ATOMIC_RELAXED);
          if (x->cls != k || x->r != s->r || x->owner != c || now != TC_CACHED ||
              rapi_map_get_shared(&t->map, x->ptr) != x)
            st = rapi_fail(RAP_ERR_CORRUPT, "%s: cached block %p is misfiled (class %u in bin %u, "
                           "state %d)", name, x->ptr, x->cls, k, now);
          if (n > s->bins[k].n) break;
        }
        if (st == RAP_OK && n != s->bins[k].n)
          st = rapi_fail(RAP_ERR_CORRUPT, "%s: a bin counts %zu blocks and holds %zu", name,
                         s->bins[k].n, n);
        bytes += n * t->cls_size[k];
        blocks += n;
      }
    }
    if (st == RAP_OK && bytes != c->bytes)
      st = rapi_fail(RAP_ERR_CORRUPT, "%s: a thread's cache counts %zu bytes and holds %zu in %zu "
                     "blocks", name, c->bytes, bytes, blocks);
  }
  size_t depot_bytes = 0;   /* the depots, as the bins: filed, cached, in the map, counted */
  for (int i = 0; i < TC_DEPOT_RES && st == RAP_OK; i++) {
    rap_resource *r = __atomic_load_n(&t->depot_r[i], __ATOMIC_ACQUIRE);
    for (unsigned k = 0; k < t->ncls && st == RAP_OK; k++) {
      const tc_depot *d = &t->depots[(size_t)i * t->ncls + k];
      size_t n = 0;
      for (tc_rec *x = d->head; x != NULL && st == RAP_OK && n <= d->n; x = x->next, n++)
        if (x->cls != k || x->r != r || __atomic_load_n(&x->state, __ATOMIC_RELAXED) != TC_CACHED ||
            rapi_map_get_shared(&t->map, x->ptr) != x)
          st = rapi_fail(RAP_ERR_CORRUPT, "%s: shared block %p is misfiled (class %u, depot %u)",
                         name, x->ptr, x->cls, k);
      if (st == RAP_OK && n != d->n)
        st = rapi_fail(RAP_ERR_CORRUPT, "%s: shared blocks counted %zu, held %zu", name, d->n, n);
      depot_bytes += n * t->cls_size[k];
    }
  }
  if (st == RAP_OK && depot_bytes != __atomic_load_n(&t->depot_bytes, __ATOMIC_RELAXED))
    st = rapi_fail(RAP_ERR_CORRUPT, "%s: shared blocks count %zu bytes and hold %zu", name,
                   __atomic_load_n(&t->depot_bytes, __ATOMIC_RELAXED), depot_bytes);
  rapi_tc_walk_end(t);
  pthread_mutex_unlock(&t->list_lock);
  if (st == RAP_OK) RAPI_LOCKED(st, &t->lock, rap_allocator_check(t->inner));
  return st;
}

static int tc_record(void *state, void *ptr, rap_resource *r) {
  thread_cache *t = state;
  tc_rec *rec = rapi_map_get_shared(&t->map, ptr);
  if (rec != NULL && __atomic_load_n(&rec->state, __ATOMIC_RELAXED) != TC_LIVE)
    return not_live(t, "rap_record_resource", ptr);
  rapi_held held;
  rapi_lock(&t->lock, &held);
  int st = rap_record_resource(t->inner, ptr, r);
  if (st == RAP_OK && rec != NULL && r != rec->r) __atomic_store_n(&rec->recorded, 1, __ATOMIC_RELAXED);
  rapi_unlock(&held);
  return st;
}

static int tc_pointer_resource(void *state, const void *ptr, rap_resource **out) {
  thread_cache *t = state;
  tc_rec *rec = rapi_map_get_shared(&t->map, ptr);
  if (rec != NULL && __atomic_load_n(&rec->state, __ATOMIC_RELAXED) != TC_LIVE)
    return not_live(t, "rap_pointer_resource", ptr);
  int st;
  RAPI_LOCKED(st, &t->lock, rap_pointer_resource(t->inner, ptr, out));
  return st;
}

/* Under lock: r's blocks that are cached or on their way back to the parent. */
static size_t cached_of(thread_cache *t, rap_resource *r) {
  size_t bytes, blocks, live;
  cached_sum_locked(t, r, &bytes, &blocks, &live);
  return blocks;
}

/* Asked (commit 0): the wrapper answers for the parent too, counting the caches' blocks of r as the
 * free blocks they are: BUSY while r owns a live block (nothing changes), else the caches' blocks
 * for r go back to the parent, pending on r there, so that the parent, asked next, agrees. Blocks
 * of r that another thread is handing back at that moment (its trim, an evicted slot, its end)
 * are waited for: they reach the parent as soon as that thread has the lock, which is let go
 * between the looks. Told (commit 1): r is forgotten. */
static int tc_resource_gone(void *state, rap_resource *r, int commit) {
  thread_cache *t = state;
  if (!commit) {
    rap_stats s;
    memset(&s, 0, sizeof s);
    size_t blocks = 0;
    rapi_held held;
    rapi_lock(&t->lock, &held);
    int st = rap_allocator_resource_stats(t->inner, r, &s);
    if (st == RAP_OK) blocks = cached_of(t, r);
    rapi_unlock(&held);
    if (st != RAP_OK) return st;
    if (s.allocation_count > blocks) {
      size_t live = s.allocation_count - blocks;
      return rapi_fail(RAP_ERR_BUSY, "rap_resource_destroy: the resource still owns %zu live block%s "
                       "of '%s'", live, live == 1 ? "" : "s", rap_allocator_name(t->self));
    }
  }
  for (;;) {
    rapi_tc_flush_all(t, r);
    size_t left;
    RAPI_LOCKED(left, &t->lock, cached_of(t, r));
    if (left == 0 || commit) break;
    if (RAPI_UNLIKELY(rapi_tc_transit_hook != NULL)) rapi_tc_transit_hook();
    sched_yield();
  }
  if (commit) {
    /* A parent that does not track resources let r go with blocks of it live: they belong to the
     * host from now on, so that freeing them never looks at r again. */
    rap_resource *host = &rap_allocator_manager(t->self)->host;
    rapi_held held;
    rapi_lock(&t->lock, &held);
    tc_rec *rec;
    for (size_t i = 0; (rec = rapi_map_next(&t->map, &i)) != NULL;)
      if (rec->r == r) rec->r = host;
    watch_forget(t, r);
    rapi_unlock(&held);
  }
  return RAP_OK;
}

static int tc_sleep(void *state, int mode) { return rapi_tc_sleep(state, mode); }
static int tc_wake(void *state) { return rapi_tc_wake(state); }

/* ---- init and fini ------------------------------------------------------------------------------ */

static int tc_init(rap_allocator *self, void *state, rap_options *opts) {
  thread_cache *t = state;
  const char *name = rap_allocator_name(self);
  t->self = self;
  t->inner = rap_allocator_parent(self);
  t->host = &rap_allocator_manager(self)->host;
  t->align = rap_allocator_alignment(t->inner);
  if (t->align == 0) t->align = 1;
  t->max_size = 1 << 20;
  t->cap_bytes = 4 << 20;
  uint64_t blocks = 16;
  int st;
  if ((st = rap_options_get_size(opts, "max_size", &t->max_size)) != RAP_OK ||
      (st = rap_options_get_size(opts, "cache_bytes", &t->cap_bytes)) != RAP_OK ||
      (st = rap_options_get_uint(opts, "cache_blocks", &blocks)) != RAP_OK)
    return st;
  t->depot_cap_bytes = t->cap_bytes > SIZE_MAX / 4 ? SIZE_MAX : 4 * t->cap_bytes;
  if ((st = rap_options_get_size(opts, "shared_bytes", &t->depot_cap_bytes)) != RAP_OK) return st;
  if (!rapi_is_pow2(t->align))
    return rapi_fail(RAP_ERR_INVALID, "%s: the parent's alignment %zu is not a power of two", name,
                     t->align);
  if (blocks == 0 || blocks > (1u << 20))
    return rapi_fail(RAP_ERR_INVALID, "%s: cache_blocks must be 1 to 1048576, not %llu", name,
                     (unsigned long long)blocks);
  t->cap_blocks = (size_t)blocks;
  t->shift = (unsigned)__builtin_ctzll((unsigned long long)t->align);
  /* Classes up to max_size, at most TC_MAX_CLASSES of them. */
  size_t units = t->max_size == 0 ? 0 : (t->max_size - 1) / t->align + 1;
  unsigned last = units == 0 ? 0 : class_of(t, t->max_size);
  if (units == 0 || last >= TC_MAX_CLASSES || units > ((size_t)1 << 40))
    return rapi_fail(RAP_ERR_INVALID, "%s: max_size must be from 1 B to %zu times the alignment "
                     "(%zu)", name, class_units(TC_MAX_CLASSES - 1), t->align);
  t->ncls = last + 1;
  for (unsigned k = 0; k < t->ncls; k++) t->cls_size[k] = class_units(k) << t->shift;
  t->id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
  t->profile = rapi_log_on(RAP_LOG_DEBUG);   /* the lock's figures in the debug line at the end */
  for (size_t i = 0; i < (1u << TC_TP_BITS); i++) t->by_tp[i] = &rapi_tc_nobody;
  if (pthread_mutex_init(&t->lock, NULL) != 0)
    return rapi_fail(RAP_ERR_BACKEND, "%s: pthread_mutex_init failed", name);
  if (pthread_mutex_init(&t->list_lock, NULL) != 0) {
    pthread_mutex_destroy(&t->lock);
    return rapi_fail(RAP_ERR_BACKEND, "%s: pthread_mutex_init failed", name);
  }
  if (rapi_map_init(&t->map) != RAP_OK) {
    pthread_mutex_destroy(&t->list_lock);
    pthread_mutex_destroy(&t->lock);
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", name);
  }
  t->depots = rapi_calloc((size_t)TC_DEPOT_RES * t->ncls, sizeof *t->depots);
  if (t->depots == NULL) {
    rapi_map_fini(&t->map);
    pthread_mutex_destroy(&t->list_lock);
    pthread_mutex_destroy(&t->lock);
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", name);
  }
  rapi_slab_init(&t->recs, (sizeof(tc_rec) + 63) & ~(size_t)63, 256);
  rap_allocator_set_alignment(self, t->align);
  /* The manager's own calls into the allocators below take the same lock (as under ThreadSafe). */
  for (rap_allocator *a = t->inner; a != NULL; a = a->parent)
    if (a->guard_lock == NULL) a->guard_lock = &t->lock;
  return RAP_OK;
}

/* Nobody calls the instance any more: every cache goes back to the parent and is unlinked from its
 * thread, if that thread still runs. */
static void tc_fini(rap_allocator *self, void *state) {
  thread_cache *t = state;
  size_t caches, misses, trims;
  rapi_tc_caches_free(t, &caches, &misses, &trims);
  if (rapi_log_on(RAP_LOG_DEBUG))
    rap_log(RAP_LOG_DEBUG, "%s: %zu thread cache%s; bins ran dry %zu times, caches were trimmed %zu "
            "times; the lock taken %llu times on the slow ways, waited for %.3f ms, held %.3f ms "
            "(longest %.1f us)", rap_allocator_name(self), caches, caches == 1 ? "" : "s", misses,
            trims, (unsigned long long)t->lock_n, (double)t->lock_wait_ns / 1e6,
            (double)t->lock_hold_ns / 1e6, (double)t->lock_hold_max_ns / 1e3);
  rapi_watch_set_clear(&t->watched, t->self);
  for (rap_allocator *a = t->inner; a != NULL; a = a->parent)
    if (a->guard_lock == &t->lock) a->guard_lock = NULL;
  free(t->depots);
  rapi_slab_destroy(&t->recs);
  rapi_map_fini(&t->map);
  pthread_mutex_destroy(&t->list_lock);
  pthread_mutex_destroy(&t->lock);
}

const rap_strategy rapi_thread_cache_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "ThreadCache",
    .flags = RAP_STRATEGY_NEEDS_PARENT | RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(thread_cache),
    .init = tc_init,
    .fini = tc_fini,
    .allocate = tc_allocate,
    .deallocate = tc_deallocate,
    .stats = tc_stats,
    .owns = tc_owns,
    .release = tc_release,
    .check = tc_check,
    .record_resource = tc_record,
    .pointer_resource = tc_pointer_resource,
    .resource_stats = tc_resource_stats,
    .resource_gone = tc_resource_gone,
    .reset_peaks = tc_reset_peaks,
    .sleep = tc_sleep,
    .wake = tc_wake,
};
