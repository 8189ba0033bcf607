/* test_many_queues.c — a ResourceAwarePool whose pending blocks sit on many host queues at once:
 * teardown and sleep wait for every queue's work, however many queues there are.
 *
 * Each queue holds a block freed on it at once while a job queued before the free still writes it
 * (the job waits at its own gate). The test opens a queue's gate only once a pool's host wait
 * blocks on that queue (the queue's view), so the pool must wait for the queues one by one; when
 * the call returns, no job may still be unfinished. No sleeps.
 */
#include "gate.h"
#include "rap_test.h"
#include "rap_testing.h"   /* the host_async view */

#include <rap/rap.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define NQ 72            /* more queues than a bound on wait rounds would cover */
#define BLOCK 4096

typedef struct qjob {
  gate g;
  char *block;
  atomic_bool *abandon;  /* set once the pool gave the memory back: the job must not write */
  atomic_int done;
} qjob;

static void write_job(void *arg) {
  qjob *j = arg;
  gate_job(&j->g);
  if (!atomic_load(j->abandon)) memset(j->block, 0x5a, BLOCK);
  atomic_store(&j->done, 1);
}

typedef struct many {
  rap_manager *rm;
  rap_allocator *pool;
  rap_resource *q[NQ];
  qjob job[NQ];
  atomic_bool abandon, returned;
  int status;
  int mode;              /* -1: destroy the pool; else sleep it with this mode */
} many;

static void many_setup(many *m, const char *spec) {
  memset(m, 0, sizeof *m);
  RAP_CHECK_OK(rap_manager_create(&m->rm));
  RAP_CHECK_OK(rap_allocator_make_spec(m->rm, "rap", spec, &m->pool));
  for (int k = 0; k < NQ; k++) {
    qjob *j = &m->job[k];
    gate_init(&j->g);
    j->abandon = &m->abandon;
    RAP_CHECK_OK(rap_resource_create_host_async(m->rm, &m->q[k]));
    RAP_CHECK_OK(rap_allocate(m->pool, (void **)&j->block, BLOCK, m->q[k]));
    RAP_CHECK_OK(rap_resource_submit(m->q[k], write_job, j));
    RAP_CHECK_OK(rap_deallocate(m->pool, j->block, m->q[k]));   /* pending: the job still writes */
  }
}

static void *call_thread(void *arg) {
  many *m = arg;
  m->status = m->mode < 0 ? rap_allocator_destroy(m->pool) : rap_allocator_sleep(m->pool, m->mode);
  atomic_store(&m->returned, true);
  return NULL;
}

/* Runs the call on a thread; opens each gate once a host wait blocks on its queue. Answers the
 * jobs still unfinished when the call returned (or -1: it did not return within a minute). */
static int run_call(many *m) {
  pthread_t t;
  RAP_CHECK(pthread_create(&t, NULL, call_thread, m) == 0);
  bool opened[NQ] = {false};
  time_t deadline = time(NULL) + 60;
  while (!atomic_load(&m->returned) && time(NULL) < deadline) {
    for (int k = 0; k < NQ; k++) {
      rap_host_async_view v;
      if (!opened[k] && rap_host_async_view_of(m->q[k], &v) == RAP_OK && v.host_blocked) {
        gate_open(&m->job[k].g);
        opened[k] = true;
      }
    }
    sched_yield();
  }
  int unfinished = -1;
  if (atomic_load(&m->returned)) {
    unfinished = 0;
    for (int k = 0; k < NQ; k++) unfinished += !atomic_load(&m->job[k].done);
  }
  atomic_store(&m->abandon, true);   /* whatever is left must not write memory given back */
  for (int k = 0; k < NQ; k++) gate_open(&m->job[k].g);
  pthread_join(t, NULL);
  return unfinished;
}

static void many_teardown(many *m) {
  for (int k = 0; k < NQ; k++) {
    RAP_CHECK_OK(rap_resource_synchronize(m->q[k]));
    RAP_CHECK_OK(rap_resource_destroy(m->q[k]));
    gate_destroy(&m->job[k].g);
  }
  RAP_CHECK_OK(rap_manager_destroy(m->rm));
}

/* The call (destroy or sleep) returns only once every queue's job has run; sleep then wakes. */
static void call_waits(const char *spec, int mode) {
  static many m;
  many_setup(&m, spec);
  m.mode = mode;
  int unfinished = run_call(&m);
  RAP_CHECK_OK(m.status);
  RAP_CHECK_EQ(unfinished, 0);   /* nothing given back while a queue's job still wrote it */
  if (mode >= 0) RAP_CHECK_OK(rap_allocator_wake(m.pool));
  many_teardown(&m);
}

RAP_TEST(ResourceAwarePool, DestroyWaitsForEveryQueueOfMany) {
  call_waits("ResourceAwarePool(HOST)", -1);
}

RAP_TEST(ResourceAwarePool, DestroyOverHostVmmWaitsForEveryQueueOfMany) {
  call_waits("ResourceAwarePool(HOST_VMM)", -1);
}

RAP_TEST(ResourceAwarePool, SleepWaitsForEveryQueueOfMany) {
  call_waits("ResourceAwarePool(HOST_VMM)", RAP_SLEEP_DISCARD);
}

RAP_TEST(ResourceAwarePool, SleepUnderThreadSafeWaitsForEveryQueueOfMany) {
  call_waits("ThreadSafe(ResourceAwarePool(HOST_VMM))", RAP_SLEEP_BACKUP);
}
