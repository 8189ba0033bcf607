/* event_pool.c — each resource's free list of events, and the host-side wait.
 *
 * An event is taken from its resource's list when recorded and put back when no pending block
 * needs it; the backend creates one only when the list is empty, so after warm-up recording costs
 * the backend's record call alone. The list is locked: one resource may serve pools on many threads.
 */
#include "rap_internal.h"

#include <stdlib.h>

void rapi_event_pool_init(rap_resource *r) {
  pthread_mutex_init(&r->event_lock, NULL);
  r->free_events = NULL;
  r->events_created = 0;
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
  pthread_mutex_destroy(&r->event_lock);
}

int rapi_event_wait_host(rap_resource *waiter, rapi_event *e) {
  (void)waiter;
  return e->r->ops->event_synchronize(e);
}
