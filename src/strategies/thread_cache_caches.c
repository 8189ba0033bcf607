/* thread_cache_caches.c — ThreadCache's caches: each thread's cache of an instance, found or made
 * (or adopted from a thread that ended), its slots per resource, its trims, blocks on their way back
 * to the parent, and a thread's end.
 *
 * A thread finds its cache of an instance among a few ways in thread-local storage, without any
 * lock; the process-wide registry, which links threads to their caches, is taken only when a
 * thread first uses an instance, at thread exit, and when an instance goes. A process-wide
 * thread-specific key runs at a thread's exit and gives its caches' blocks back to their parents;
 * a cache then stays, abandoned, for the next thread that comes.
 */
#include "strategies/thread_cache.h"

#include <stdio.h>
#include <time.h>

_Thread_local tc_thread rapi_tc_tls;
tc_cache rapi_tc_nobody;   /* tp 0: matches no thread */
static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static int exit_key_ok;
void (*rapi_tc_xpush_hook)(void);   /* tests only: runs between a foreign free's look and its push */
/* Tests only: runs while a batch is on its way to the parent, and when a resource's end waits for
 * such a batch. */
void (*rapi_tc_transit_hook)(void);
bool rapi_tc_spin_only;   /* tests only: caches made now take the spin always, as without membarrier */

static void thread_exit(void *arg);
static void make_exit_key(void) { exit_key_ok = pthread_key_create(&exit_key, thread_exit) == 0; }

void rapi_tc_spin_wait(int *spin) {
  for (unsigned n = 0;;) {
    while (__atomic_load_n(spin, __ATOMIC_RELAXED))
      if (++n > 64) sched_yield();
    if (!__atomic_exchange_n(spin, 1, __ATOMIC_ACQUIRE)) return;
  }
}

uint64_t rapi_tc_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- walkers ---------------------------------------------------------------------------------- */

void rapi_tc_walk_begin(thread_cache *t) {
  bool fence = false;
  for (tc_cache *c = t->caches; c != NULL; c = c->inst_next) {
    spin_lock(c);
    __atomic_store_n(&c->walking, 1, __ATOMIC_RELAXED);
    fence |= !c->slow_only;
  }
  if (!fence) return;   /* every thread takes the spin: nobody is inside without it */
  rapi_membarrier();
  for (tc_cache *c = t->caches; c != NULL; c = c->inst_next)
    for (unsigned n = 0; __atomic_load_n(&c->busy, __ATOMIC_ACQUIRE) != 0;)
      if (++n > 64) sched_yield();   /* its thread is inside for a few instructions */
}

void rapi_tc_walk_end(thread_cache *t) {
  int asleep = __atomic_load_n(&t->asleep, __ATOMIC_RELAXED);   /* asleep: walked for good */
  for (tc_cache *c = t->caches; c != NULL; c = c->inst_next) {
    __atomic_store_n(&c->walking, c->slow_only || asleep, __ATOMIC_RELEASE);
    spin_unlock(c);
  }
}

/* ---- flushing: blocks back to the parent ------------------------------------------------------ */

/* Deallocates a batch of records on their resources in the parent, under lock; the list is empty
 * after (its records are gone: a caller that goes on collecting starts from nothing). */
void rapi_tc_flush_batch(thread_cache *t, tc_rec **batch) {
  tc_rec *list = *batch;
  *batch = NULL;
  if (list == NULL) return;
  if (RAPI_UNLIKELY(rapi_tc_transit_hook != NULL)) rapi_tc_transit_hook();
  rapi_held held;
  tc_lock(t, &held);
  for (tc_rec *rec = list, *next; rec != NULL; rec = next) {
    next = rec->next;
    int st = rap_deallocate(t->inner, rec->ptr, rec->r);
    /* The parent refuses calls on r: r is capturing a graph, or r is a stream of a device whose
     * access to this memory was revoked after the block was freed on it. The user freed the block
     * on r all the same: without a resource it goes back to its owner in the parent, r, pending
     * there (unfenced until a capture ends). */
    if (st != RAP_OK && rec->r != NULL) st = rap_deallocate(t->inner, rec->ptr, NULL);
    if (st != RAP_OK) {
      /* Never dropped: the record stays, live, so that the block is seen (and named at the end)
       * rather than lost. */
      rap_log(RAP_LOG_ERROR, "%s: returning a cached block to '%s' failed, and it stays live: %s",
              rap_allocator_name(t->self), rap_allocator_name(t->inner), rap_last_error());
      __atomic_store_n(&rec->state, TC_LIVE, __ATOMIC_RELEASE);
      continue;
    }
    rapi_map_remove(&t->map, rec->ptr);
    rapi_slab_free(&t->recs, rec);
  }
  tc_unlock(t, &held);
}

/* Under c's spin: the chain from rec to the end of bin b moves to *out. */
static void take_chain(thread_cache *t, tc_cache *c, tc_bin *b, tc_rec *rec, tc_rec **out) {
  size_t bytes = 0, n = 0;
  for (tc_rec *next; rec != NULL; rec = next) {
    next = rec->next;
    bytes += t->cls_size[rec->cls];
    n++;
    rec->next = *out;
    *out = rec;
  }
  b->n -= n;
  c->bytes -= bytes;
}

/* Under c's spin: a whole bin to *out. */
static void take_bin(thread_cache *t, tc_cache *c, tc_bin *b, tc_rec **out) {
  tc_rec *all = b->head;
  b->head = NULL;
  take_chain(t, c, b, all, out);
}

/* Under c's spin: every bin of a slot to *out, and the slot freed. */
static void take_slot(thread_cache *t, tc_cache *c, tc_slot *s, tc_rec **out) {
  for (unsigned k = 0; k < t->ncls; k++)
    if (s->bins[k].n) take_bin(t, c, &s->bins[k], out);
  s->r = NULL;
}

/* Under c's spin: a slot for r, taking the least recently used one if all are in use; its blocks
 * go to *out, to be flushed after the spin is let go. */
tc_slot *rapi_tc_slot_assign(thread_cache *t, tc_cache *c, rap_resource *r, tc_rec **out) {
  tc_slot *s = slot_find(c, r);
  if (s != NULL) return s;
  tc_slot *victim = &c->slots[0];
  for (int i = 0; i < TC_SLOTS; i++) {
    if (c->slots[i].r == NULL) {
      victim = &c->slots[i];
      break;
    }
    if (c->slots[i].used < victim->used) victim = &c->slots[i];
  }
  if (victim->r != NULL) take_slot(t, c, victim, out);
  victim->r = r;
  victim->used = ++c->tick;
  return victim;
}

/* Under c's spin: the blocks other threads freed into c go to its bins (or to *out, for a resource
 * it keeps no slot for and cannot take one without flushing). */
void rapi_tc_drain_xfree(thread_cache *t, tc_cache *c, tc_rec **out) {
  tc_rec *list = __atomic_exchange_n(&c->xfree, NULL, __ATOMIC_ACQ_REL);
  for (tc_rec *rec = list, *next; rec != NULL; rec = next) {
    next = rec->next;
    __atomic_store_n(&rec->state, TC_CACHED, __ATOMIC_RELAXED);
    tc_slot *s = slot_find(c, rec->r);
    if (s == NULL) {
      rec->next = *out;
      *out = rec;
    } else {
      bin_push(t, c, s, rec);
    }
  }
}

/* Under c's spin: trims c back within its bounds; the surplus goes to *out. A bin over its count
 * keeps its newest half; a cache over its bytes gives up whole bins, largest classes first, until it
 * holds half its bound. */
void rapi_tc_trim(thread_cache *t, tc_cache *c, tc_slot *s, unsigned cls, tc_rec **out) {
  tc_bin *b = &s->bins[cls];
  if (b->n > t->cap_blocks) {
    size_t keep = t->cap_blocks / 2;
    if (keep == 0) {
      take_bin(t, c, b, out);
    } else {
      tc_rec *cut = b->head;   /* the last block kept */
      for (size_t i = 1; i < keep; i++) cut = cut->next;
      tc_rec *rest = cut->next;
      cut->next = NULL;
      take_chain(t, c, b, rest, out);
    }
  }
  for (unsigned k = t->ncls; k-- > 0 && c->bytes > t->cap_bytes / 2 && c->bytes > 0;)
    for (int i = 0; i < TC_SLOTS && c->bytes > t->cap_bytes / 2; i++)
      if (c->slots[i].r != NULL && c->slots[i].bins[k].n) take_bin(t, c, &c->slots[i].bins[k], out);
}

/* ---- depots ------------------------------------------------------------------------------------ */

static void depot_lock(tc_depot *d) {
  if (RAPI_UNLIKELY(__atomic_exchange_n(&d->spin, 1, __ATOMIC_ACQUIRE))) rapi_tc_spin_wait(&d->spin);
}
static void depot_unlock(tc_depot *d) { __atomic_store_n(&d->spin, 0, __ATOMIC_RELEASE); }

/* The index of r's depots, or -1; with make, a free one is taken for r where there is one. */
static int depot_of(thread_cache *t, rap_resource *r, bool make) {
  for (int i = 0; i < TC_DEPOT_RES; i++)
    if (__atomic_load_n(&t->depot_r[i], __ATOMIC_ACQUIRE) == r) return i;
  for (int i = 0; make && i < TC_DEPOT_RES; i++) {
    rap_resource *none = NULL;
    if (__atomic_compare_exchange_n(&t->depot_r[i], &none, r, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return i;
    if (none == r) return i;   /* another thread took it for r meanwhile */
  }
  return -1;
}

void rapi_tc_deposit(thread_cache *t, tc_rec **list) {
  if (t->depot_cap_bytes == 0) return;   /* shared_bytes=0: everything to the parent */
  tc_rec *keep = NULL;
  for (tc_rec *rec = *list, *next; rec != NULL; rec = next) {
    next = rec->next;
    size_t bytes = t->cls_size[rec->cls];
    int i = depot_of(t, rec->r, true);
    /* The bytes are reserved first, so that threads depositing at once never pass the bound. */
    if (i >= 0 && __atomic_add_fetch(&t->depot_bytes, bytes, __ATOMIC_RELAXED) <= t->depot_cap_bytes) {
      tc_depot *d = &t->depots[(size_t)i * t->ncls + rec->cls];
      depot_lock(d);
      rec->next = d->head;
      __atomic_store_n(&d->head, rec, __ATOMIC_RELAXED);   /* withdraw's hint reads it unlocked */
      d->n++;
      depot_unlock(d);
      continue;
    }
    if (i >= 0) __atomic_fetch_sub(&t->depot_bytes, bytes, __ATOMIC_RELAXED);
    rec->next = keep;
    keep = rec;
  }
  *list = keep;
}

size_t rapi_tc_withdraw(thread_cache *t, tc_cache *c, tc_slot *s, unsigned cls, size_t want) {
  int i = depot_of(t, s->r, false);
  if (i < 0) return 0;
  tc_depot *d = &t->depots[(size_t)i * t->ncls + cls];
  if (__atomic_load_n(&d->head, __ATOMIC_RELAXED) == NULL) return 0;   /* a hint: the pop decides */
  depot_lock(d);
  tc_rec *got = d->head, *last = NULL;
  size_t n = 0;
  for (tc_rec *x = got; x != NULL && n < want; x = x->next, n++) last = x;
  if (last != NULL) {
    __atomic_store_n(&d->head, last->next, __ATOMIC_RELAXED);
    d->n -= n;
    last->next = NULL;
  }
  depot_unlock(d);
  for (tc_rec *rec = got, *next; n > 0 && rec != NULL; rec = next) {
    next = rec->next;
    rec->owner = c;
    bin_push(t, c, s, rec);
  }
  __atomic_fetch_sub(&t->depot_bytes, n * t->cls_size[cls], __ATOMIC_RELAXED);
  return n;
}

/* Under a walk (every cache held, so no depot is in use): the depots' blocks of r (of every
 * resource, if r is NULL) to *out, and those resources' depots given up. */
static void take_depots(thread_cache *t, rap_resource *r, tc_rec **out) {
  for (int i = 0; i < TC_DEPOT_RES; i++) {
    rap_resource *di = __atomic_load_n(&t->depot_r[i], __ATOMIC_ACQUIRE);
    if (di == NULL || (r != NULL && di != r)) continue;
    for (unsigned k = 0; k < t->ncls; k++) {
      tc_depot *d = &t->depots[(size_t)i * t->ncls + k];
      depot_lock(d);
      for (tc_rec *rec = d->head, *next; rec != NULL; rec = next) {
        next = rec->next;
        rec->next = *out;
        *out = rec;
      }
      __atomic_fetch_sub(&t->depot_bytes, d->n * t->cls_size[k], __ATOMIC_RELAXED);
      __atomic_store_n(&d->head, NULL, __ATOMIC_RELAXED);
      d->n = 0;
      depot_unlock(d);
    }
    __atomic_store_n(&t->depot_r[i], NULL, __ATOMIC_RELEASE);
  }
}

/* Under c's spin: what other threads freed into c, and c's blocks for r (every block, if r is
 * NULL), to *out. */
static void take_cache(thread_cache *t, tc_cache *c, rap_resource *r, tc_rec **out) {
  rapi_tc_drain_xfree(t, c, out);
  for (int i = 0; i < TC_SLOTS; i++)
    if (c->slots[i].r != NULL && (r == NULL || c->slots[i].r == r)) take_slot(t, c, &c->slots[i], out);
}

/* Every cache's blocks (those for r only, unless r is NULL) back to the parent. */
void rapi_tc_flush_all(thread_cache *t, rap_resource *r) {
  tc_rec *out = NULL;
  pthread_mutex_lock(&t->list_lock);
  rapi_tc_walk_begin(t);
  for (tc_cache *c = t->caches; c != NULL; c = c->inst_next) take_cache(t, c, r, &out);
  take_depots(t, r, &out);
  rapi_tc_walk_end(t);
  pthread_mutex_unlock(&t->list_lock);
  rapi_tc_flush_batch(t, &out);
}

/* ---- sleep and wake ---------------------------------------------------------------------------- */

/* Under a walk: t marked asleep (or awake), and while asleep every cache's blocks and the depots
 * taken to the parent; the caches stay walked while t sleeps (rapi_tc_walk_end). */
static void mark_asleep(thread_cache *t, int asleep) {
  tc_rec *out = NULL;
  pthread_mutex_lock(&t->list_lock);
  rapi_tc_walk_begin(t);
  __atomic_store_n(&t->asleep, asleep, __ATOMIC_RELEASE);
  for (tc_cache *c = t->caches; asleep && c != NULL; c = c->inst_next) take_cache(t, c, NULL, &out);
  if (asleep) take_depots(t, NULL, &out);
  rapi_tc_walk_end(t);
  pthread_mutex_unlock(&t->list_lock);
  rapi_tc_flush_batch(t, &out);
}

/* Under lock: blocks with a record that no user holds (in a cache, or on their way to one or to
 * the parent: a refill or a trim another thread began before t was marked asleep). */
static size_t unsettled(thread_cache *t) {
  size_t n = 0;
  const tc_rec *rec;
  for (size_t i = 0; (rec = rapi_map_next(&t->map, &i)) != NULL;) {
    int st = __atomic_load_n(&rec->state, __ATOMIC_ACQUIRE);
    n += st == TC_CACHED || st == TC_XFREED;
  }
  return n;
}

/* Marked asleep first, so that no thread takes a block from a cache or the parent from now; then
 * what threads were handing over meanwhile is settled too, and the pool sleeps under the lock
 * (its waits let the lock go: threads meanwhile are refused by the mark). */
int rapi_tc_sleep(thread_cache *t, int mode) {
  int st = RAP_OK;
  if (mode == RAP_SLEEP_PREPARE || mode == RAP_SLEEP_RELEASE) {   /* no unmap: passed down */
    RAPI_LOCKED(st, &t->lock, rap_allocator_sleep(t->inner, mode));
    return st;
  }
  if (__atomic_load_n(&t->asleep, __ATOMIC_ACQUIRE))
    return rapi_fail(RAP_ERR_BUSY, "rap_allocator_sleep('%s'): the pool under it is asleep already",
                     rap_allocator_name(t->self));
  mark_asleep(t, 1);
  for (;;) {
    rapi_held held;
    tc_lock(t, &held);
    size_t left = unsettled(t);
    if (left == 0) st = rap_allocator_sleep(t->inner, mode);
    tc_unlock(t, &held);
    if (left == 0) break;
    rapi_tc_flush_all(t, NULL);
    sched_yield();
  }
  if (st != RAP_OK) mark_asleep(t, 0);
  return st;
}

int rapi_tc_wake(thread_cache *t) {
  int st;
  RAPI_LOCKED(st, &t->lock, rap_allocator_wake(t->inner));
  if (st == RAP_OK) mark_asleep(t, 0);
  return st;
}

/* ---- a thread's cache ------------------------------------------------------------------------ */

static void cache_free(tc_cache *c) {
  if (c == NULL) return;
  free(c->slots[1].bins);   /* one allocation for the bins of every slot but the first */
  free(c);
}

static tc_cache *cache_new(thread_cache *t) {
  tc_cache *c = rapi_calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  tc_bin *bins = rapi_calloc((size_t)(TC_SLOTS - 1) * t->ncls, sizeof *bins);
  if (bins == NULL) {
    free(c);
    return NULL;
  }
  c->slots[0].bins = c->first_bins;
  for (int i = 1; i < TC_SLOTS; i++) c->slots[i].bins = bins + (size_t)(i - 1) * t->ncls;
  c->tc = t;
  c->slow_only = rapi_tc_spin_only || !rapi_membarrier_ready();
  c->walking = c->slow_only || __atomic_load_n(&t->asleep, __ATOMIC_RELAXED);   /* under list_lock */
  return c;
}

/* The calling thread's cache of t, found or made (or adopted from a thread that ended); NULL when
 * no host memory is left for one, and the caller goes through the lock instead. */
RAPI_NOINLINE tc_cache *rapi_tc_cache_get(thread_cache *t) {
  tc_cache *c = my_cache(t);
  if (c != NULL) return c;
  pthread_once(&exit_once, make_exit_key);
  if (!exit_key_ok) return NULL;
  pthread_mutex_lock(&registry);
  for (c = rapi_tc_tls.caches; c != NULL && c->tc != t; c = c->thread_next) {}
  if (c == NULL) {
    if (!rapi_tc_tls.keyed) rapi_tc_tls.keyed = pthread_setspecific(exit_key, &rapi_tc_tls) == 0;
    if (rapi_tc_tls.keyed) {
      pthread_mutex_lock(&t->list_lock);
      for (c = t->caches; c != NULL && !__atomic_load_n(&c->abandoned, __ATOMIC_RELAXED); c = c->inst_next) {}
      if (c == NULL && (c = cache_new(t)) != NULL) {
        c->inst_next = t->caches;
        t->caches = c;
      }
      pthread_mutex_unlock(&t->list_lock);
    }
    if (c != NULL) {
      t->live_caches++;
      spin_lock(c);
      __atomic_store_n(&c->abandoned, 0, __ATOMIC_RELAXED);
      c->thread = &rapi_tc_tls;
      __atomic_store_n(&c->tp, rapi_self_thread(), __ATOMIC_RELEASE);
      spin_unlock(c);
      c->thread_next = rapi_tc_tls.caches;
      rapi_tc_tls.caches = c;
    }
  }
  pthread_mutex_unlock(&registry);
  if (c != NULL) {
    for (int w = TC_WAYS - 1; w > 0; w--) {   /* in front; the least recently found drops out */
      rapi_tc_tls.id[w] = rapi_tc_tls.id[w - 1];
      rapi_tc_tls.c[w] = rapi_tc_tls.c[w - 1];
    }
    rapi_tc_tls.id[0] = t->id;
    rapi_tc_tls.c[0] = c;
  }
  return c;
}

/* c, the calling thread's cache of t, into the pair of by_tp entries at its thread pointer's hash,
 * in an entry that no live thread of that pair holds; where both are held, nowhere (its thread
 * then finds it through its ways). */
void rapi_tc_publish(thread_cache *t, tc_cache *c) {
  uintptr_t tp = rapi_self_thread();
  size_t h = tp_home(tp) & ~(size_t)1;
  for (size_t i = h; i <= h + 1; i++) {
    tc_cache *e = __atomic_load_n(&t->by_tp[i], __ATOMIC_ACQUIRE);
    if (e == c) return;
    uintptr_t etp = __atomic_load_n(&e->tp, __ATOMIC_RELAXED);
    if (etp != 0 && (tp_home(etp) & ~(size_t)1) == h) continue;   /* a live thread's of this pair */
    if (__atomic_compare_exchange_n(&t->by_tp[i], &e, c, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
      return;
  }
}

/* At a thread's end: its caches go back to their parents and wait, abandoned, for another thread. */
static void thread_exit(void *arg) {
  tc_thread *th = arg;
  rapi_trace_depth++;   /* the flush is the library's call into the parents, not the user's */
  pthread_mutex_lock(&registry);
  for (tc_cache *c = th->caches, *next; c != NULL; c = next) {
    next = c->thread_next;
    thread_cache *t = c->tc;
    tc_rec *out = NULL;
    spin_lock(c);
    __atomic_store_n(&c->abandoned, 1, __ATOMIC_RELAXED);
    c->thread = NULL;
    c->thread_next = NULL;
    __atomic_store_n(&c->tp, 0, __ATOMIC_RELEASE);   /* its entries in by_tp match nobody now */
    take_cache(t, c, NULL, &out);
    /* While other threads of t run, what the shared lists take is theirs (larson's next thread of
     * a chain, a pool's next worker); the rest, and everything at the end of the last running
     * thread, goes back to the parent. That last end takes the shared lists back too: nobody is
     * inside a cache of t then (a new one is made under the registry, held here). */
    if (--t->live_caches > 0) rapi_tc_deposit(t, &out);
    spin_unlock(c);
    if (t->live_caches == 0) {   /* under list_lock, as a walker, so that no check reads them meanwhile */
      pthread_mutex_lock(&t->list_lock);
      take_depots(t, NULL, &out);
      pthread_mutex_unlock(&t->list_lock);
    }
    rapi_tc_flush_batch(t, &out);
  }
  th->caches = NULL;
  th->keyed = false;   /* a later destructor that allocates here gets a cache, and this, again */
  for (int i = 0; i < TC_WAYS; i++) th->id[i] = 0;
  pthread_mutex_unlock(&registry);
  rapi_trace_depth--;
}

/* Nobody calls the instance any more: every cache goes back to the parent and is unlinked from its
 * thread, if that thread still runs. */
void rapi_tc_caches_free(thread_cache *t, size_t *caches, size_t *misses, size_t *trims) {
  pthread_mutex_lock(&registry);
  rapi_tc_flush_all(t, NULL);
  *caches = *misses = *trims = 0;
  for (tc_cache *c = t->caches, *next; c != NULL; c = next) {
    next = c->inst_next;
    (*caches)++;
    *misses += c->misses;
    *trims += c->trims;
    if (c->thread != NULL)
      for (tc_cache **pp = &c->thread->caches; *pp != NULL; pp = &(*pp)->thread_next)
        if (*pp == c) {
          *pp = c->thread_next;
          break;
        }
    cache_free(c);
  }
  t->caches = NULL;
  pthread_mutex_unlock(&registry);
}
