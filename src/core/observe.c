/* observe.c — segment observers: rap_allocator_observe, rap_allocator_unobserve, and the
 * notification pools and growable platforms send when a segment is mapped, grows, shrinks or goes.
 *
 * Each allocator's list is made at its first observe (under one process-wide lock taken only
 * then) and read with one atomic load by every notification, so an allocator nobody ever observed
 * pays a load and a branch where it maps or unmaps. The list has its own mutex, held while callbacks run:
 * unobserve waits for a callback under way, so after it returns the callback is never called
 * again. A thread inside a callback is marked, and observe or unobserve from there is refused.
 */
#include "rap_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct observer {
  rap_segment_fn fn;
  void *user;
} observer;

struct rapi_observers {
  pthread_mutex_t m;
  observer *v;
  size_t n, cap;
  int device;
};

static pthread_mutex_t make_lock = PTHREAD_MUTEX_INITIALIZER;
/* The locks this thread holds, innermost first (rapi_lock in rap_internal.h): every layer takes
 * them, and a host-side wait (events/) lets them go. Defined here, in the base, beside the other
 * per-thread state of a call. */
_Thread_local rapi_held *rapi_held_top;
static _Thread_local const rap_allocator *notifying;   /* the allocator whose callbacks run here */

/* The device a's memory is on: what its owner says, else its chain's platform: -1 for memory every
 * device reaches (host, pinned, managed), else the lowest device granted. */
static int device_of(const rap_allocator *a) {
  if (a->segments != NULL && a->segments->device != RAPI_SEGMENT_DEVICE_OF_PARENT)
    return a->segments->device;
  const rap_allocator *root = a;
  while (root->parent != NULL) root = root->parent;
  if (root != a && root->segments != NULL && root->segments->device != RAPI_SEGMENT_DEVICE_OF_PARENT)
    return root->segments->device;
  uint64_t ok = __atomic_load_n(&root->devices_ok, __ATOMIC_RELAXED);
  return ok == UINT64_MAX || ok == 0 ? -1 : __builtin_ctzll(ok);
}

static struct rapi_observers *list_of(rap_allocator *a) {
  struct rapi_observers *l = __atomic_load_n(&a->observers, __ATOMIC_ACQUIRE);
  if (l != NULL) return l;
  pthread_mutex_lock(&make_lock);
  l = a->observers;
  if (l == NULL && (l = rapi_calloc(1, sizeof *l)) != NULL) {
    pthread_mutex_init(&l->m, NULL);
    l->device = device_of(a);
    __atomic_store_n(&a->observers, l, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&make_lock);
  return l;
}

typedef struct subscription {
  rap_allocator *a;
  struct rapi_observers *l;
  rap_segment_fn fn;
  void *user;
  int status;
} subscription;

static int find(const struct rapi_observers *l, rap_segment_fn fn, const void *user) {
  for (size_t i = 0; i < l->n; i++)
    if (l->v[i].fn == fn && l->v[i].user == user) return (int)i;
  return -1;
}

/* Runs under the owner's lock (its walk), so no notification comes between it and the replay. */
static void subscribe(void *arg) {
  subscription *s = arg;
  struct rapi_observers *l = s->l;
  pthread_mutex_lock(&l->m);
  if (find(l, s->fn, s->user) >= 0) {
    s->status = rapi_fail(RAP_ERR_EXISTS, "rap_allocator_observe('%s'): that callback with that "
                          "user pointer observes it already", rap_allocator_name(s->a));
  } else if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 4;
    observer *v = rapi_malloc(cap * sizeof *v);
    if (v == NULL) {
      s->status = rapi_fail(RAP_ERR_NOMEM, "rap_allocator_observe('%s'): out of host memory",
                            rap_allocator_name(s->a));
    } else {
      if (l->n) memcpy(v, l->v, l->n * sizeof *v);
      free(l->v);
      l->v = v;
      l->cap = cap;
    }
  }
  if (s->status == RAP_OK) l->v[l->n++] = (observer){s->fn, s->user};
  pthread_mutex_unlock(&l->m);
}

/* Under the owner's lock as a notification is, and under the list's lock as a notification's
 * callbacks are: an unobserve that returned has taken the subscription out, and the replay stops. */
static void replay(void *arg, int kind, void *base, size_t size, void *addr, size_t bytes) {
  subscription *s = arg;
  if (s->status != RAP_OK) return;
  rap_segment_event ev = {kind, base, size, addr, bytes, s->l->device, 1};
  pthread_mutex_lock(&s->l->m);
  if (find(s->l, s->fn, s->user) >= 0) {
    const rap_allocator *outer = notifying;
    notifying = s->a;
    s->fn(&ev, s->user);
    notifying = outer;
  }
  pthread_mutex_unlock(&s->l->m);
}

static int refused_inside(const rap_allocator *a, const char *fn) {
  return rapi_fail(RAP_ERR_BUSY, "%s('%s'): called from a segment callback of that allocator; "
                   "subscribe or unsubscribe outside it", fn, rap_allocator_name(a));
}

int rap_allocator_observe(rap_allocator *a, rap_segment_fn fn, void *user) {
  if (a == NULL || fn == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_allocator_observe: allocator or callback is NULL");
  if (notifying == a) return refused_inside(a, "rap_allocator_observe");
  if (a->segments == NULL)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_allocator_observe('%s'): a %s has no segments of its "
                     "own; observe the pool or the growable platform (DEVICE_VMM, HOST_VMM) it "
                     "passes calls to", a->name, a->strategy->name);
  struct rapi_observers *l = list_of(a);
  if (l == NULL)
    return rapi_fail(RAP_ERR_NOMEM, "rap_allocator_observe('%s'): out of host memory", a->name);
  subscription s = {a, l, fn, user, RAP_OK};
  a->segments->walk(a, a->segments_ctx, subscribe, replay, &s);
  return s.status;
}

int rap_allocator_unobserve(rap_allocator *a, rap_segment_fn fn, void *user) {
  if (a == NULL || fn == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_allocator_unobserve: allocator or callback is NULL");
  if (notifying == a) return refused_inside(a, "rap_allocator_unobserve");
  struct rapi_observers *l = __atomic_load_n(&a->observers, __ATOMIC_ACQUIRE);
  int i = -1;
  if (l != NULL) {
    pthread_mutex_lock(&l->m);   /* waits for a callback under way on another thread */
    if ((i = find(l, fn, user)) >= 0) l->v[i] = l->v[--l->n];
    pthread_mutex_unlock(&l->m);
  }
  if (i < 0)
    return rapi_fail(RAP_ERR_NOT_FOUND, "rap_allocator_unobserve('%s'): that callback with that "
                     "user pointer does not observe it", a->name);
  return RAP_OK;
}

void rapi_segment_notify_slow(rap_allocator *a, int kind, void *base, size_t size, void *addr,
                              size_t bytes) {
  struct rapi_observers *l = a->observers;
  rap_segment_event ev = {kind, base, size, addr, bytes, l->device, 0};
  pthread_mutex_lock(&l->m);
  const rap_allocator *outer = notifying;
  notifying = a;
  for (size_t i = 0; i < l->n; i++) l->v[i].fn(&ev, l->v[i].user);
  notifying = outer;
  pthread_mutex_unlock(&l->m);
}

void rapi_observers_free(rap_allocator *a) {
  struct rapi_observers *l = a->observers;
  if (l == NULL) return;
  a->observers = NULL;
  pthread_mutex_destroy(&l->m);
  free(l->v);
  free(l);
}
