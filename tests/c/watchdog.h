/* watchdog.h — calls that may hang, run where a deadlock becomes a failed check, not a hung test.
 *
 * wd_start runs fn(arg) on a helper thread, wd_submit as work on a host_async queue; wd_finish waits
 * for it with a deadline (WD_SECONDS). If the deadline passes it opens every gate it was given, so
 * that whatever waits on them can finish, waits a little more, and answers false: the caller fails
 * its check. A call that never ends keeps its record (and the caller should keep its fixture):
 * they are leaked on purpose, never freed under a thread that may still use them.
 * wd_wait_asleep waits until the call has gone to sleep in the kernel (state S in
 * /proc/self/task/TID/stat) or has finished: a test opens a gate only once a call is blocked, so
 * the order of events is the same on every run, with no sleeps.
 */
#ifndef RAP_TEST_WATCHDOG_H
#define RAP_TEST_WATCHDOG_H

#include "gate.h"
#include "rap_test.h"

#include <rap/rap.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define WD_SECONDS 20        /* a call that takes longer has hung */
#define WD_AFTER_GATES 2     /* seconds it gets to finish once the gates are open */

typedef struct wd_call {
  pthread_mutex_t m;
  pthread_cond_t c;
  int (*fn)(void *);
  void *arg;
  int status;
  bool done;
  bool threaded;             /* wd_start: joined once done */
  pthread_t thread;
  atomic_int tid;            /* the thread running fn, once it has started */
} wd_call;

static inline pid_t wd_gettid(void) { return (pid_t)syscall(SYS_gettid); }

/* The scheduler state of a thread of this process: 'R', 'S', 'D', ... or '?' if unreadable. */
static inline char wd_thread_state(pid_t tid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return '?';
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return '?';
  buf[n] = '\0';
  char *paren = strrchr(buf, ')');   /* the name may hold spaces and parentheses */
  return paren != NULL && paren[1] == ' ' ? paren[2] : '?';
}

static inline void wd_body(wd_call *c) {
  atomic_store(&c->tid, (int)wd_gettid());
  int st = c->fn(c->arg);
  pthread_mutex_lock(&c->m);
  c->status = st;
  c->done = true;
  pthread_cond_broadcast(&c->c);
  pthread_mutex_unlock(&c->m);
}

static inline void *wd_thread(void *arg) {
  wd_body(arg);
  return NULL;
}

static inline void wd_job(void *arg) { wd_body(arg); }

static inline wd_call *wd_new(int (*fn)(void *), void *arg) {
  wd_call *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  pthread_mutex_init(&c->m, NULL);
  pthread_cond_init(&c->c, NULL);
  c->fn = fn;
  c->arg = arg;
  c->status = -1000;
  atomic_init(&c->tid, 0);
  return c;
}

/* fn(arg) on a new thread; NULL if the thread could not be made. */
static inline wd_call *wd_start(int (*fn)(void *), void *arg) {
  wd_call *c = wd_new(fn, arg);
  if (c == NULL) return NULL;
  c->threaded = true;
  if (pthread_create(&c->thread, NULL, wd_thread, c) != 0) {
    free(c);
    return NULL;
  }
  return c;
}

/* fn(arg) as work on q; NULL if it could not be submitted. */
static inline wd_call *wd_submit(rap_resource *q, int (*fn)(void *), void *arg) {
  wd_call *c = wd_new(fn, arg);
  if (c == NULL) return NULL;
  if (rap_resource_submit(q, wd_job, c) != RAP_OK) {
    free(c);
    return NULL;
  }
  return c;
}

static inline bool wd_is_done(wd_call *c) {
  pthread_mutex_lock(&c->m);
  bool done = c->done;
  pthread_mutex_unlock(&c->m);
  return done;
}

static inline double wd_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Until the call sleeps in the kernel (blocked on a lock, a condition or a join) or is done;
 * false if neither happened within WD_SECONDS. */
static inline bool wd_wait_asleep(wd_call *c) {
  double end = wd_now() + WD_SECONDS;
  while (wd_now() < end) {
    if (wd_is_done(c)) return true;
    int tid = atomic_load(&c->tid);
    if (tid != 0 && wd_thread_state((pid_t)tid) == 'S') return true;
    sched_yield();
  }
  return false;
}

static inline bool wd_timed_wait(wd_call *c, int seconds) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += seconds;
  pthread_mutex_lock(&c->m);
  int rc = 0;
  while (!c->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&c->c, &c->m, &ts);
  bool done = c->done;
  pthread_mutex_unlock(&c->m);
  return done;
}

/* Waits for the call. true: it finished in time, *status is fn's result and the record is gone.
 * false: it hung; every gate given is open now, and the record stays (leaked) if it still runs. */
static inline bool wd_finish(wd_call *c, gate *const *gates, int ngates, int *status) {
  bool in_time = wd_timed_wait(c, WD_SECONDS);
  if (!in_time) {
    for (int i = 0; i < ngates; i++)
      if (gates[i] != NULL) gate_open(gates[i]);
    if (!wd_timed_wait(c, WD_AFTER_GATES)) return false;   /* still stuck: leave it be */
  }
  if (status != NULL) *status = c->status;
  if (c->threaded) pthread_join(c->thread, NULL);
  pthread_cond_destroy(&c->c);
  pthread_mutex_destroy(&c->m);
  free(c);
  return in_time;
}

/* Fails the body (from the thread that runs it) unless the call finished in time. */
#define WD_FINISH(call, gates, ngates, status, what)                                               \
  do {                                                                                             \
    if (!wd_finish((call), (gates), (ngates), (status)))                                           \
      rap_test_fail(__FILE__, __LINE__, "%s hung: not done after %d s (watchdog)", (what),         \
                    WD_SECONDS);                                                                   \
  } while (0)

#endif /* RAP_TEST_WATCHDOG_H */
