/* thread_steps.h — worker threads that move in steps a test opens, with no sleeps: a worker
 * arrives at the end of its step and waits for the next (steps_arrive_and_wait); the test waits
 * until every worker arrived (steps_wait_all) and opens the next step (steps_open). One mutex and
 * one condition; the test and its threads share one steps value. Static inline, for the host and
 * the CUDA tests alike.
 */
#ifndef RAP_TEST_THREAD_STEPS_H
#define RAP_TEST_THREAD_STEPS_H

#include <pthread.h>

typedef struct steps {
  pthread_mutex_t m;
  pthread_cond_t c;
  int now, arrived, workers;
} steps;

#define STEPS_INIT(workers) {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, (workers)}

static inline void steps_reset(steps *s) {
  pthread_mutex_lock(&s->m);
  s->now = s->arrived = 0;
  pthread_mutex_unlock(&s->m);
}

static inline void steps_arrive_and_wait(steps *s, int next) {   /* a worker: this step done */
  pthread_mutex_lock(&s->m);
  s->arrived++;
  pthread_cond_broadcast(&s->c);
  while (s->now < next) pthread_cond_wait(&s->c, &s->m);
  pthread_mutex_unlock(&s->m);
}

static inline void steps_wait_all(steps *s) {   /* the test: every worker arrived */
  pthread_mutex_lock(&s->m);
  while (s->arrived < s->workers) pthread_cond_wait(&s->c, &s->m);
  s->arrived = 0;
  pthread_mutex_unlock(&s->m);
}

static inline void steps_open(steps *s, int next) {
  pthread_mutex_lock(&s->m);
  s->now = next;
  pthread_cond_broadcast(&s->c);
  pthread_mutex_unlock(&s->m);
}

#endif
