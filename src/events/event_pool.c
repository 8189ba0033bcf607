/* event_pool.c — each resource's free list of events, its lifetime, the newest event of a
 * call-scoped resource, and the host-side wait.
 *
 * An event is taken from its resource's list when recorded and put back when no pending block
 * needs it; the backend creates one only when the list is empty, so after warm-up recording costs
 * the backend's record call alone. The list is locked: one resource may serve pools on many threads.
 *
 * A resource's memory (and so its events) lives as long as anything may still look at them: a
 * wait queued on another resource for one of its events, or a host wait in progress, holds a
 * reference, so destroying a resource never leaves such a wait reading freed memory.
 */
#include "rap_internal.h"

#include <stdlib.h>

void rapi_event_pool_init(rap_resource *r) {
  pthread_mutex_init(&r->event_lock, NULL);
  r->free_events = NULL;
  r->events_created = 0;
  r->refs = 1;   /* the manager's */
  r->waits_queued = 0;
  r->watchers = NULL;
  r->call_scoped = 0;
  r->newest = NULL;
  pthread_mutex_init(&r->newest_lock, NULL);
}

rapi_event *rapi_event_pool_get(rap_resource *r) {
  pthread_mutex_lock(&r->event_lock);
  rapi_event *e = r->free_events;
  if (e) r->free_events = e->next_free;
  pthread_mutex_unlock(&r->event_lock);
  return e;
}

void rapi_event_pool_put(rap_resource *r, rapi_event *e) {
  pthread_mutex_lock(&r->event_lock);
  e->next_free = r->free_events;
  r->free_events = e;
  pthread_mutex_unlock(&r->event_lock);
}

void rapi_event_pool_fini(rap_resource *r, void (*destroy_handle)(void *)) {
  for (rapi_event *e = r->free_events, *next; e != NULL; e = next) {
    next = e->next_free;
    if (destroy_handle) destroy_handle(e->handle);
    free(e);
  }
  r->free_events = NULL;
  for (rapi_watch *w = r->watchers, *next; w != NULL; w = next) {
    next = w->next;
    free(w);
  }
  r->watchers = NULL;
  r->newest = NULL;
  pthread_mutex_destroy(&r->newest_lock);
  pthread_mutex_destroy(&r->event_lock);
}

/* ---- a call-scoped resource: its stream may be gone between calls --------------------------
 * Its events outlive the stream (CUDA lets an event recorded on a destroyed stream complete), so
 * the last one recorded stands for all of its work rap knows of: every record on it is made and
 * noted under newest_lock, so that newest is the last in stream order even when threads record
 * at once. The event's memory stays until r's does (events only go back to r's free list). */

int rapi_resource_record(rap_resource *r, rapi_event **out) {
  if (RAPI_LIKELY(!r->call_scoped)) return r->ops->record(r, out);
  pthread_mutex_lock(&r->newest_lock);
  int st = r->ops->record(r, out);
  if (st == RAP_OK) r->newest = *out;
  pthread_mutex_unlock(&r->newest_lock);
  return st;
}

static bool newest_copy(rap_resource *r, rapi_event *copy) {
  pthread_mutex_lock(&r->newest_lock);
  bool any = r->newest != NULL;
  if (any) *copy = *r->newest;
  pthread_mutex_unlock(&r->newest_lock);
  return any;
}

int rapi_resource_mark(rap_resource *r, rapi_event *copy, bool *any) {
  *any = false;
  if (r->ops->record == NULL) return RAP_OK;
  if (r->call_scoped) {
    *any = newest_copy(r, copy);
    return RAP_OK;
  }
  rapi_event *ev = NULL;
  int st = rapi_resource_record(r, &ev);
  if (st != RAP_OK) return st;
  *copy = *ev;
  r->ops->event_release(ev);
  *any = true;
  return RAP_OK;
}

int rapi_resource_wait_done(rap_resource *r) {
  if (!r->call_scoped) return r->ops->synchronize(r);
  rapi_event copy;
  return newest_copy(r, &copy) ? r->ops->event_synchronize(&copy) : RAP_OK;
}

void rapi_resource_ref(rap_resource *r) { __atomic_fetch_add(&r->refs, 1, __ATOMIC_RELAXED); }

void rapi_resource_unref(rap_resource *r) {
  if (__atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) == 0) r->ops->destroy(r);
}

/* ---- which pools know a resource --------------------------------------------------------- */

int rap_resource_watch(rap_resource *r, rap_allocator *a) {
  if (r == NULL || a == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_resource_watch: resource or allocator is NULL");
  if (r == &r->rm->host) return RAP_OK;
  rapi_watch *w = rapi_malloc(sizeof *w);
  if (w == NULL) return rapi_fail(RAP_ERR_NOMEM, "rap_resource_watch: out of host memory");
  w->a = a;
  pthread_mutex_lock(&r->event_lock);
  w->next = r->watchers;
  r->watchers = w;
  pthread_mutex_unlock(&r->event_lock);
  return RAP_OK;
}

void rap_resource_unwatch(rap_resource *r, rap_allocator *a) {
  if (r == NULL || r == &r->rm->host) return;
  rapi_watch *gone = NULL;
  pthread_mutex_lock(&r->event_lock);
  for (rapi_watch **pp = &r->watchers; *pp != NULL; pp = &(*pp)->next)
    if ((*pp)->a == a) {
      gone = *pp;
      *pp = gone->next;
      break;
    }
  pthread_mutex_unlock(&r->event_lock);
  free(gone);
}

int rapi_watch_set_add(rapi_watch_set *s, rap_resource *r, rap_allocator *self) {
  if (r == &r->rm->host) return RAP_OK;
  for (size_t i = 0; i < s->n; i++)
    if (s->r[i] == r) return RAP_OK;
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 8;
    rap_resource **grown = rapi_realloc(s->r, cap * sizeof *grown);
    if (grown == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(self));
    s->r = grown;
    s->cap = cap;
  }
  int st = rap_resource_watch(r, self);
  if (st == RAP_OK) s->r[s->n++] = r;
  return st;
}

void rapi_watch_set_forget(rapi_watch_set *s, rap_resource *r, rap_allocator *self) {
  for (size_t i = 0; i < s->n; i++)
    if (s->r[i] == r) {
      s->r[i] = s->r[--s->n];
      rap_resource_unwatch(r, self);
      return;
    }
}

void rapi_watch_set_clear(rapi_watch_set *s, rap_allocator *self) {
  while (s->n > 0) rapi_watch_set_forget(s, s->r[0], self);
  free(s->r);
  s->r = NULL;
  s->cap = 0;
}

/* ---- the host-side wait ------------------------------------------------------------------- */

static void relock(rapi_held *h) {
  if (h == NULL) return;
  relock(h->below);   /* outermost first, the order they were taken in */
  pthread_mutex_lock(h->m);
}

int rapi_host_wait(const rapi_event *e) {
  rapi_event copy = *e;
  rap_resource *r = copy.r;
  /* A queue's work may not block on a queue that itself waits for something: it may be waiting
   * for this very queue, and then neither moves. (Its own queue says BUSY in event_synchronize.) */
  if (rapi_current_queue != NULL && r != rapi_current_queue &&
      __atomic_load_n(&r->waits_queued, __ATOMIC_ACQUIRE) > 0)
    return rapi_fail(RAP_ERR_BUSY, "a queue's work cannot wait for a %s resource that has waits of "
                     "its own queued", r->ops->kind);
  rapi_resource_ref(r);
  for (rapi_held *h = rapi_held_top; h != NULL; h = h->below) pthread_mutex_unlock(h->m);
  int st = r->ops->event_synchronize(&copy);
  relock(rapi_held_top);
  rapi_resource_unref(r);
  return st;
}
