/* resource.c — what every resource answers, whatever its kind, and the host resource itself: the
 * public entry points that go straight to a resource's table, and the manager's list of created
 * resources, which the kinds (host_async.c, cuda_resource.c) join when they are made. Destroying a
 * resource visits pools and so lives with the manager (manager/manager.c).
 */
#include "rap_internal.h"

void rapi_resource_link(rap_manager *rm, rap_resource *r) {
  pthread_mutex_lock(&rm->lock);
  r->id = rm->next_resource_id++;
  r->prev = NULL;
  r->next = rm->resources;
  if (rm->resources) rm->resources->prev = r;
  rm->resources = r;
  pthread_mutex_unlock(&rm->lock);
}

void rapi_resource_unlink(rap_manager *rm, rap_resource *r) {
  pthread_mutex_lock(&rm->lock);
  if (r->prev) r->prev->next = r->next;
  else rm->resources = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
  pthread_mutex_unlock(&rm->lock);
}

int rap_resource_host(rap_manager *rm, rap_resource **out) {
  if (rm == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_resource_host: manager or out is NULL");
  *out = &rm->host;
  return RAP_OK;
}

int rap_resource_synchronize(rap_resource *r) {
  if (r == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_resource_synchronize: resource is NULL");
  return r->ops->synchronize(r);
}

int rap_resource_submit(rap_resource *r, void (*fn)(void *), void *arg) {
  if (r == NULL || fn == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_resource_submit: resource or function is NULL");
  return r->ops->submit(r, fn, arg);
}

const char *rap_resource_kind(const rap_resource *r) { return r ? r->ops->kind : NULL; }

/* Before any pool has seen r (a pool fixes how it fences r when it first meets it); under the lock
 * that pools take to watch r. What it changes is in events/event_pool.c (rapi_resource_record). */
int rap_resource_set_call_scoped(rap_resource *r, int on) {
  if (r == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_resource_set_call_scoped: resource is NULL");
  if (r == &r->rm->host)
    return rapi_fail(RAP_ERR_INVALID, "rap_resource_set_call_scoped: the host resource runs every "
                     "call at once and has no stream to lose");
  pthread_mutex_lock(&r->event_lock);
  bool seen = r->watchers != NULL;
  if (!seen) r->call_scoped = on != 0;
  pthread_mutex_unlock(&r->event_lock);
  if (seen)
    return rapi_fail(RAP_ERR_BUSY, "rap_resource_set_call_scoped: %s resource #%llu has been seen "
                     "by an allocator already; set it before the resource's first use",
                     r->ops->kind, (unsigned long long)r->id);
  return RAP_OK;
}

int rap_resource_call_scoped(const rap_resource *r) { return r != NULL && r->call_scoped; }

/* The host resource runs work at once, in the caller's thread; its events have always passed. */
static int host_synchronize(rap_resource *r) {
  (void)r;
  return RAP_OK;
}
static void host_destroy(rap_resource *r) { (void)r; }
static int host_submit(rap_resource *r, void (*fn)(void *), void *arg) {
  (void)r;
  fn(arg);
  return RAP_OK;
}
static int host_query(rapi_event *e) {
  (void)e;
  return 1;
}
static int host_event_synchronize(rapi_event *e) {
  (void)e;
  return RAP_OK;
}
static int host_wait(rap_resource *r, rapi_event *e) {
  (void)r;
  (void)e;
  return RAPI_HOST_WAIT;   /* the host waits by blocking: it is the one stream that cannot queue */
}
const rapi_resource_ops rapi_host_resource_ops = {
    .kind = "host",
    .synchronize = host_synchronize,
    .close = NULL,
    .destroy = host_destroy,
    .submit = host_submit,
    .record = NULL,
    .query = host_query,
    .event_synchronize = host_event_synchronize,
    .event_release = NULL,
    .wait = host_wait,
};
