/* queue_waits.c — the waits that pools queue on the driver's host_async queues (cross_resource=wait),
 * logged through the wait_queued hook of src/rap_testing.h, so that the driver can tell a queue
 * that will drain at once from one held behind another queue; and the queues' points, read with
 * rap_host_async_view_of. The host's own waits go through the host_wait hook (fuzz_driver.c).
 */
#include <rap/rap.h>
#include "rap_testing.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void fz_wait_queued(void *ctx, rap_resource *r, rap_resource *target, uint64_t point);
void fz_queue_forget_waits(void);
void fz_queue_forget(rap_resource *r);
int  fz_queue_waits(rap_resource *r, rap_resource *const *queues, int n, unsigned *mask,
                    bool (*blocked)(rap_resource *target, uint64_t seq));
uint64_t fz_queue_submitted(rap_resource *r);
extern size_t fz_unheld_waits;   /* waits on events held by nothing, seen through (the report) */

/* Waits queued by pools, in the calling (driver) thread only. */
enum { FZ_WAIT_LOG = 256 };
static struct {
  rap_resource *waiter, *target;
  uint64_t seq;
} wait_log[FZ_WAIT_LOG];
static int wait_count;

/* The wait_queued hook: queue r is to wait until target reaches point. */
void fz_wait_queued(void *ctx, rap_resource *r, rap_resource *target, uint64_t point) {
  (void)ctx;
  if (wait_count < FZ_WAIT_LOG) {
    wait_log[wait_count].waiter = r;
    wait_log[wait_count].target = target;
    wait_log[wait_count].seq = point;
    wait_count++;
  }
}

/* Called when every queue has run everything, and between inputs. */
void fz_queue_forget_waits(void) { wait_count = 0; }

/* r has been destroyed: after it ran everything, so the waits on its events are done. */
void fz_queue_forget(rap_resource *r) {
  int k = 0;
  for (int i = 0; i < wait_count; i++)
    if (wait_log[i].waiter != r && wait_log[i].target != r) wait_log[k++] = wait_log[i];
  wait_count = k;
}

size_t fz_unheld_waits;

static rap_host_async_view view(rap_resource *r) {
  rap_host_async_view v = {0};
  rap_host_async_view_of(r, &v);
  return v;
}

/* The jobs submitted to r so far: a job submitted now is job number fz_queue_submitted(r) after
 * it, and an event recorded now completes once that many jobs have. */
uint64_t fz_queue_submitted(rap_resource *r) { return view(r).submitted; }

/* Sets bit i+1 of *mask for every queues[i] whose event a wait logged on r has not reached and is
 * held from (blocked: a closed gate, or a wait that may not complete, among the jobs before it),
 * and forgets r's logged waits. An event that has not completed but is held by nothing is waited
 * for here: a pool may wait on an event it recorded before its queue got a gate, and that event
 * completes by itself, so r is not held by it (asking only "done now?" made the answer a race).
 * Waits on the host's events, or on any resource but the queues, are done. Returns the number of
 * jobs on r that have not finished. */
int fz_queue_waits(rap_resource *r, rap_resource *const *queues, int n, unsigned *mask,
                   bool (*blocked)(rap_resource *target, uint64_t seq)) {
  *mask = 0;
  int k = 0;
  for (int i = 0; i < wait_count; i++) {
    if (wait_log[i].waiter != r) {
      wait_log[k++] = wait_log[i];
      continue;
    }
    rap_resource *t = wait_log[i].target;
    int j = 0;
    while (j < n && queues[j] != t) j++;
    if (j == n) continue;
    bool done = view(t).completed >= wait_log[i].seq;
    if (!done && !blocked(t, wait_log[i].seq)) {
      /* Held by nothing: far sooner than 20 s; past it, counted as held. */
      rap_host_async_wait_until(t, wait_log[i].seq, 20, &done);
      fz_unheld_waits += done;
    }
    if (!done) *mask |= 1u << (j + 1);
  }
  wait_count = k;
  return (int)view(r).unfinished;
}
