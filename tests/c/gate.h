/* gate.h — work for host_async resources that waits until the test opens a gate: a resource made
 * busy on purpose, with no sleeps. Also a job that writes a byte pattern, for race detection.
 */
#ifndef RAP_TEST_GATE_H
#define RAP_TEST_GATE_H

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

typedef struct gate {
  pthread_mutex_t m;
  pthread_cond_t c;
  bool open;
  int passed;    /* jobs that went through */
  int waiting;   /* jobs waiting at the gate now */
} gate;

static inline void gate_init(gate *g) {
  pthread_mutex_init(&g->m, NULL);
  pthread_cond_init(&g->c, NULL);
  g->open = false;
  g->passed = 0;
  g->waiting = 0;
}

static inline void gate_open(gate *g) {
  pthread_mutex_lock(&g->m);
  g->open = true;
  pthread_cond_broadcast(&g->c);
  pthread_mutex_unlock(&g->m);
}

/* Whether a job waits at the gate, closed: its queue cannot move until the gate opens. */
static inline bool gate_holding(gate *g) {
  pthread_mutex_lock(&g->m);
  bool held = !g->open && g->waiting > 0;
  pthread_mutex_unlock(&g->m);
  return held;
}

static inline int gate_passed(gate *g) {
  pthread_mutex_lock(&g->m);
  int n = g->passed;
  pthread_mutex_unlock(&g->m);
  return n;
}

/* Submit with rap_resource_submit(r, gate_job, &g): the resource is busy until gate_open. */
static inline void gate_job(void *arg) {
  gate *g = arg;
  pthread_mutex_lock(&g->m);
  g->waiting++;
  while (!g->open) pthread_cond_wait(&g->c, &g->m);
  g->waiting--;
  g->passed++;
  pthread_mutex_unlock(&g->m);
}

static inline void gate_destroy(gate *g) {
  pthread_cond_destroy(&g->c);
  pthread_mutex_destroy(&g->m);
}

typedef struct fill {
  void *ptr;
  size_t bytes;
  int value;
} fill;

static inline void fill_job(void *arg) {
  fill *f = arg;
  memset(f->ptr, f->value, f->bytes);
}

static inline bool all_bytes(const void *p, size_t n, int value) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    if (c[i] != (unsigned char)value) return false;
  return true;
}

#endif /* RAP_TEST_GATE_H */
