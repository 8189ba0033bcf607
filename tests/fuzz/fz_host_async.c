/* fz_host_async.c — the library's host_async.c, built for the fuzz programs with two additions:
 *  - its waits go through rap_fuzz_cond_wait (fuzz_driver.c), so the driver learns the moment the
 *    host blocks inside a pool call (an out-of-memory wait, a host-side cross-resource wait) and can
 *    let every queue run instead of deadlocking: reproducibly, since the block itself is;
 *  - a queue made with fz_queue_instrument logs the waits a pool queues on it (cross_resource=wait),
 *    so the driver can tell a queue that will drain at once from one held behind another queue;
 *  - the driver can tell which queue the host waits for (fz_queue_of), and forget a destroyed
 *    queue's logged waits (fz_queue_forget).
 * The library's own archive member is not linked into the fuzz programs: this file defines
 * rap_resource_create_host_async first.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>
int rap_fuzz_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
#define pthread_cond_wait rap_fuzz_cond_wait
#include "../../src/resources/host_async.c"
#undef pthread_cond_wait

void fz_queue_instrument(rap_resource *r);
void fz_queue_forget_waits(void);
void fz_queue_forget(rap_resource *r);
int  fz_queue_waits(rap_resource *r, rap_resource *const *queues, int n, unsigned *mask,
                    bool (*blocked)(rap_resource *target, uint64_t seq));
uint64_t fz_queue_submitted(rap_resource *r);
extern size_t fz_unheld_waits;   /* waits on events held by nothing, seen through (the report) */
int  fz_queue_of(const pthread_cond_t *c, rap_resource *const *queues, int n);

/* Waits queued by pools, in the calling (driver) thread only. */
enum { FZ_WAIT_LOG = 256 };
static struct {
  rap_resource *waiter, *target;
  uint64_t seq;
} wait_log[FZ_WAIT_LOG];
static int wait_count;

static int fz_wait(rap_resource *r, rapi_event *e) {
  if (e->r != r && wait_count < FZ_WAIT_LOG) {
    wait_log[wait_count].waiter = r;
    wait_log[wait_count].target = e->r;
    wait_log[wait_count].seq = e->seq;
    wait_count++;
  }
  return ha_wait(r, e);
}

static const rapi_resource_ops fz_ops = {
    .kind = "host_async",
    .synchronize = ha_synchronize,
    .close = ha_close,
    .destroy = ha_destroy,
    .submit = ha_submit,
    .record = ha_record,
    .query = ha_query,
    .event_synchronize = ha_event_synchronize,
    .event_release = ha_event_release,
    .wait = fz_wait,
};

void fz_queue_instrument(rap_resource *r) { r->ops = &fz_ops; }

/* Called when every queue has run everything, and between inputs. */
void fz_queue_forget_waits(void) { wait_count = 0; }

/* r has been destroyed: after it ran everything, so the waits on its events are done. */
void fz_queue_forget(rap_resource *r) {
  int k = 0;
  for (int i = 0; i < wait_count; i++)
    if (wait_log[i].waiter != r && wait_log[i].target != r) wait_log[k++] = wait_log[i];
  wait_count = k;
}

/* i+1 if c is the condition the host waits on for queues[i] to make progress, else 0. Compares
 * addresses only. */
int fz_queue_of(const pthread_cond_t *c, rap_resource *const *queues, int n) {
  for (int i = 0; i < n; i++)
    if (queues[i] != NULL && c == &((host_async *)queues[i])->done) return i + 1;
  return 0;
}

size_t fz_unheld_waits;

/* The jobs submitted to r so far: a job submitted now is job number fz_queue_submitted(r) after
 * it, and an event recorded now completes once that many jobs have. */
uint64_t fz_queue_submitted(rap_resource *r) {
  host_async *q = (host_async *)r;
  pthread_mutex_lock(&q->lock);
  uint64_t n = q->submitted;
  pthread_mutex_unlock(&q->lock);
  return n;
}

/* Sets bit i+1 of *mask for every queues[i] whose event a wait logged on r has not reached and is
 * held from (blocked: a closed gate, or a wait that may not complete, among the jobs before it),
 * and forgets r's logged waits. An event that has not completed but is held by nothing is waited
 * for here: a pool may wait on an event it recorded before its queue got a gate, and that event
 * completes by itself, so r is not held by it (asking only "done now?" made the answer a race).
 * Returns the number of jobs on r that have not finished. */
int fz_queue_waits(rap_resource *r, rap_resource *const *queues, int n, unsigned *mask,
                   bool (*blocked)(rap_resource *target, uint64_t seq)) {
  *mask = 0;
  int k = 0;
  for (int i = 0; i < wait_count; i++) {
    if (wait_log[i].waiter != r) {
      wait_log[k++] = wait_log[i];
      continue;
    }
    if (wait_log[i].target->ops != &fz_ops) continue;
    host_async *t = (host_async *)wait_log[i].target;
    pthread_mutex_lock(&t->lock);
    bool done = t->completed >= wait_log[i].seq;
    pthread_mutex_unlock(&t->lock);
    if (!done && !blocked(wait_log[i].target, wait_log[i].seq)) {
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_sec += 20;   /* held by nothing: far sooner; past it, counted as held */
      pthread_mutex_lock(&t->lock);
      while (t->completed < wait_log[i].seq &&
             pthread_cond_timedwait(&t->done, &t->lock, &until) != ETIMEDOUT) {
      }
      done = t->completed >= wait_log[i].seq;
      pthread_mutex_unlock(&t->lock);
      fz_unheld_waits += done;
    }
    for (int j = 0; j < n && !done; j++)
      if (queues[j] == wait_log[i].target) *mask |= 1u << (j + 1);
  }
  wait_count = k;
  host_async *q = (host_async *)r;
  pthread_mutex_lock(&q->lock);
  int jobs = (int)(q->submitted - q->completed);
  pthread_mutex_unlock(&q->lock);
  return jobs;
}
