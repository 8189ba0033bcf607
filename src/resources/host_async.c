/* host_async.c — a CPU work queue as a resource: one worker thread runs submitted work in order.
 *
 * Its events are positions in the queue: recording one notes how much was submitted, and it is
 * complete once the worker has finished that much. So pending memory behaves on a host_async
 * resource exactly as on a GPU stream, and tests can hold a queue busy with a gate, without sleeps.
 * Waiting on another resource's event is itself queued work, so the host never blocks for it;
 * that job holds a reference to the other resource, which may be destroyed before the job runs.
 * Work functions may call rap (pools included); the one thing they cannot do is wait for their own
 * queue to reach a point behind themselves: that answers RAP_ERR_BUSY instead of hanging.
 */
#include "rap_internal.h"
#include "rap_testing.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

typedef struct job {
  void (*fn)(void *);
  void *arg;
  struct job *next;
} job;

typedef struct host_async {
  rap_resource base;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t work, done;
  job *head, *tail;
  uint64_t submitted, completed;
  bool stopping;
  /* For rap_host_async_view (tests): threads outside every queue waiting here, and the furthest
   * point they wait for; and where this queue's worker waits for another queue (under lock, with a
   * reference the waiting job holds). */
  unsigned host_waiters;
  uint64_t host_wait_seq;
  rap_resource *worker_waits_on;
  uint64_t worker_wait_seq;
  /* rap_host_async_end (tests): the queue's owner ended it; uses of the queue since then. */
  bool ended;
  size_t after_end;
} host_async;

static const rapi_resource_ops host_async_ops;
static rap_host_async_hooks hooks;   /* tests only (rap_host_async_set_hooks); set while no queue exists */

static void *worker(void *arg) {
  host_async *q = arg;
  pthread_mutex_lock(&q->lock);
  for (;;) {
    while (q->head == NULL && !q->stopping) pthread_cond_wait(&q->work, &q->lock);
    if (q->head == NULL) break;
    job *j = q->head;
    pthread_mutex_unlock(&q->lock);
    rapi_current_queue = &q->base;
    j->fn(j->arg);
    rapi_current_queue = NULL;
    pthread_mutex_lock(&q->lock);
    q->head = j->next;
    if (q->head == NULL) q->tail = NULL;
    q->completed++;
    free(j);
    pthread_cond_broadcast(&q->done);
  }
  pthread_mutex_unlock(&q->lock);
  return NULL;
}

/* Under q's lock: a use of an ended queue (as of a destroyed stream's handle), counted and refused. */
static bool used_after_end(host_async *q, const char *fn) {
  if (RAPI_LIKELY(!q->ended)) return false;
  q->after_end++;
  pthread_mutex_unlock(&q->lock);
  rapi_fail(RAP_ERR_BACKEND, "%s: host_async resource #%llu's queue was ended "
            "(rap_host_async_end), as a stream destroyed under its resource", fn,
            (unsigned long long)q->base.id);
  return true;
}

static int ha_submit(rap_resource *r, void (*fn)(void *), void *arg) {
  host_async *q = (host_async *)r;
  job *j = rapi_malloc(sizeof *j);
  if (j == NULL) return rapi_fail(RAP_ERR_NOMEM, "rap_resource_submit: out of host memory");
  j->fn = fn;
  j->arg = arg;
  j->next = NULL;
  pthread_mutex_lock(&q->lock);
  if (used_after_end(q, "rap_resource_submit")) {
    free(j);
    return RAP_ERR_BACKEND;
  }
  if (q->tail) q->tail->next = j;
  else q->head = j;
  q->tail = j;
  q->submitted++;
  pthread_cond_signal(&q->work);
  pthread_mutex_unlock(&q->lock);
  return RAP_OK;
}

/* Waits until the queue has run seq jobs; seq 0 means everything submitted so far. Its own work
 * cannot wait for a point behind itself. */
static int wait_for(host_async *q, uint64_t seq, const char *fn) {
  pthread_mutex_lock(&q->lock);
  if (seq == 0) seq = q->submitted;
  if (rapi_current_queue == &q->base && q->completed < seq) {
    pthread_mutex_unlock(&q->lock);
    return rapi_fail(RAP_ERR_BUSY, "%s: a host_async queue's own work cannot wait for the queue "
                     "to pass itself", fn);
  }
  if (q->completed >= seq) {
    pthread_mutex_unlock(&q->lock);
    return RAP_OK;
  }
  host_async *worker = NULL;   /* the queue whose worker this is, if it is a host_async one */
  if (rapi_current_queue == NULL) {
    q->host_waiters++;
    if (seq > q->host_wait_seq) q->host_wait_seq = seq;
  } else if (rapi_current_queue->ops == &host_async_ops) {
    worker = (host_async *)rapi_current_queue;
  }
  pthread_mutex_unlock(&q->lock);
  if (worker != NULL) {   /* not nested in q's lock: two workers may wait for each other's queue */
    pthread_mutex_lock(&worker->lock);
    worker->worker_waits_on = &q->base;
    worker->worker_wait_seq = seq;
    pthread_mutex_unlock(&worker->lock);
  }
  /* A test's host_wait hook (rap_testing.h) waits in the library's place: it may let q run first. */
  bool hooked = rapi_current_queue == NULL && hooks.host_wait != NULL;
  pthread_mutex_lock(&q->lock);
  while (q->completed < seq) {
    if (!hooked) {
      pthread_cond_wait(&q->done, &q->lock);
      continue;
    }
    pthread_mutex_unlock(&q->lock);
    hooks.host_wait(hooks.ctx, &q->base, seq);
    pthread_mutex_lock(&q->lock);
  }
  if (rapi_current_queue == NULL && --q->host_waiters == 0) q->host_wait_seq = 0;
  pthread_mutex_unlock(&q->lock);
  if (worker != NULL) {
    pthread_mutex_lock(&worker->lock);
    worker->worker_waits_on = NULL;
    pthread_mutex_unlock(&worker->lock);
  }
  return RAP_OK;
}

static int ha_synchronize(rap_resource *r) {
  host_async *q = (host_async *)r;
  pthread_mutex_lock(&q->lock);
  if (used_after_end(q, "rap_resource_synchronize")) return RAP_ERR_BACKEND;
  pthread_mutex_unlock(&q->lock);
  return wait_for(q, 0, "rap_resource_synchronize");
}

static int ha_record(rap_resource *r, rapi_event **out) {
  host_async *q = (host_async *)r;
  rapi_event *e = rapi_event_pool_get(r);
  if (e == NULL) {
    e = rapi_calloc(1, sizeof *e);
    if (e == NULL) return rapi_fail(RAP_ERR_NOMEM, "host_async: out of host memory for an event");
    e->r = r;
    __atomic_fetch_add(&r->events_created, 1, __ATOMIC_RELAXED);
  }
  pthread_mutex_lock(&q->lock);
  if (used_after_end(q, "recording a host_async event")) {
    rapi_event_pool_put(r, e);
    return RAP_ERR_BACKEND;
  }
  e->seq = q->submitted;
  pthread_mutex_unlock(&q->lock);
  *out = e;
  return RAP_OK;
}

static int ha_query(rapi_event *e) {
  host_async *q = (host_async *)e->r;
  pthread_mutex_lock(&q->lock);
  int done = q->completed >= e->seq;
  pthread_mutex_unlock(&q->lock);
  return done;
}

static int ha_event_synchronize(rapi_event *e) {
  if (e->seq == 0) return RAP_OK;
  return wait_for((host_async *)e->r, e->seq, "waiting for a host_async event");
}

static void ha_event_release(rapi_event *e) { rapi_event_pool_put(e->r, e); }

/* A queued wait: the job blocks the worker, not the caller, until e completes. The job keeps a
 * copy of the event, so the pool may recycle e at once (a recycled CUDA event is only recorded
 * later, which makes the wait longer, never unsafe), and a reference to e's resource, which may be
 * destroyed before the job runs. */
static void run_wait(void *arg) {
  rapi_event *copy = arg;
  if (copy->r->ops->event_synchronize(copy) != RAP_OK)
    rap_log(RAP_LOG_WARN, "host_async: a queued wait for a %s event failed: %s", copy->r->ops->kind,
            rap_last_error());
  __atomic_sub_fetch(&rapi_current_queue->waits_queued, 1, __ATOMIC_RELEASE);
  rapi_resource_unref(copy->r);
  free(copy);
}

static int ha_wait(rap_resource *r, rapi_event *e) {
  if (e->r == r) return RAP_OK;   /* one queue is already in order */
  if (hooks.wait_queued != NULL) hooks.wait_queued(hooks.ctx, r, e->r, e->seq);
  rapi_event *copy = rapi_malloc(sizeof *copy);
  if (copy == NULL) return rapi_fail(RAP_ERR_NOMEM, "host_async: out of host memory for a wait");
  *copy = *e;
  rapi_resource_ref(e->r);
  __atomic_add_fetch(&r->waits_queued, 1, __ATOMIC_RELEASE);
  int st = ha_submit(r, run_wait, copy);
  if (st != RAP_OK) {
    __atomic_sub_fetch(&r->waits_queued, 1, __ATOMIC_RELEASE);
    rapi_resource_unref(e->r);
    free(copy);
  }
  return st;
}

/* The worker runs what is queued, then stops; the memory stays while references remain. */
static void ha_close(rap_resource *r) {
  host_async *q = (host_async *)r;
  pthread_mutex_lock(&q->lock);
  q->stopping = true;
  pthread_cond_signal(&q->work);
  pthread_mutex_unlock(&q->lock);
  pthread_join(q->thread, NULL);
}

static void ha_destroy(rap_resource *r) {
  host_async *q = (host_async *)r;
  pthread_cond_destroy(&q->work);
  pthread_cond_destroy(&q->done);
  pthread_mutex_destroy(&q->lock);
  rapi_event_pool_fini(r, NULL);
  free(q);
}

static const rapi_resource_ops host_async_ops = {
    .kind = "host_async",
    .synchronize = ha_synchronize,
    .close = ha_close,
    .destroy = ha_destroy,
    .submit = ha_submit,
    .record = ha_record,
    .query = ha_query,
    .event_synchronize = ha_event_synchronize,
    .event_release = ha_event_release,
    .wait = ha_wait,
};

/* Waiters leave only once the queue reached their point, so a waiter is still blocked exactly when
 * the furthest point of those still here is not reached. */
int rap_host_async_view_of(rap_resource *r, rap_host_async_view *out) {
  if (r == NULL || out == NULL || r->ops != &host_async_ops)
    return rapi_fail(RAP_ERR_INVALID,
                     "rap_host_async_view_of: not a host_async resource, or out is NULL");
  host_async *q = (host_async *)r;
  pthread_mutex_lock(&q->lock);
  out->unfinished = (size_t)(q->submitted - q->completed);
  out->submitted = q->submitted;
  out->completed = q->completed;
  out->host_blocked = q->host_waiters > 0 && q->completed < q->host_wait_seq;
  out->after_end = q->after_end;
  rap_resource *other = q->worker_waits_on;
  uint64_t seq = q->worker_wait_seq;
  if (other != NULL) rapi_resource_ref(other);   /* alive: the waiting job holds a reference */
  pthread_mutex_unlock(&q->lock);
  out->worker_blocked = false;
  if (other != NULL) {
    host_async *o = (host_async *)other;
    pthread_mutex_lock(&o->lock);
    out->worker_blocked = o->completed < seq;
    pthread_mutex_unlock(&o->lock);
    rapi_resource_unref(other);
  }
  return RAP_OK;
}

int rap_host_async_set_hooks(const rap_host_async_hooks *h) {
  static const rap_host_async_hooks none;
  hooks = h != NULL ? *h : none;
  return RAP_OK;
}

int rap_host_async_end(rap_resource *r) {
  if (r == NULL || r->ops != &host_async_ops)
    return rapi_fail(RAP_ERR_INVALID, "rap_host_async_end: not a host_async resource");
  host_async *q = (host_async *)r;
  pthread_mutex_lock(&q->lock);
  q->ended = true;
  pthread_mutex_unlock(&q->lock);
  return RAP_OK;
}

int rap_host_async_wait_until(rap_resource *r, uint64_t point, unsigned seconds, bool *reached) {
  if (r == NULL || reached == NULL || r->ops != &host_async_ops)
    return rapi_fail(RAP_ERR_INVALID,
                     "rap_host_async_wait_until: not a host_async resource, or reached is NULL");
  host_async *q = (host_async *)r;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += seconds;
  pthread_mutex_lock(&q->lock);
  while (q->completed < point && pthread_cond_timedwait(&q->done, &q->lock, &until) != ETIMEDOUT) {
  }
  *reached = q->completed >= point;
  pthread_mutex_unlock(&q->lock);
  return RAP_OK;
}

int rap_resource_create_host_async(rap_manager *rm, rap_resource **out) {
  if (rm == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_resource_create_host_async: manager or out is NULL");
  host_async *q = rapi_calloc(1, sizeof *q);
  if (q == NULL) return rapi_fail(RAP_ERR_NOMEM, "rap_resource_create_host_async: out of host memory");
  q->base.ops = &host_async_ops;
  q->base.rm = rm;
  q->base.key = (uintptr_t)q;
  rapi_event_pool_init(&q->base);
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->work, NULL);
  pthread_cond_init(&q->done, NULL);
  if (pthread_create(&q->thread, NULL, worker, q) != 0) {
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->done);
    pthread_mutex_destroy(&q->lock);
    rapi_event_pool_fini(&q->base, NULL);
    free(q);
    return rapi_fail(RAP_ERR_BACKEND, "rap_resource_create_host_async: pthread_create failed");
  }
  rapi_resource_link(rm, &q->base);
  *out = &q->base;
  return RAP_OK;
}
