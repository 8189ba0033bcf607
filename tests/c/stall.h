/* stall.h — Stall, a pass-through strategy for tests of threads meeting in a pool: once armed,
 * its next allocate says it has arrived (stall_arrived) and waits on a gate (stall_gate) before it
 * asks its parent, so that a thread is inside the pools above it for as long as the test wants. No
 * sleeps. Register it with rap_strategy_register(rm, &stall_strategy).
 */
#ifndef RAP_TEST_STALL_H
#define RAP_TEST_STALL_H

#include "gate.h"

#include <rap/strategy.h>
#include <string.h>

typedef struct stall {
  rap_allocator *parent;
} stall;

static gate stall_gate;          /* opened by the test */
static gate stall_arrived;       /* opened by Stall when a thread is inside it */
static int stall_armed;          /* atomic */

static int stall_init(rap_allocator *self, void *state, rap_options *opts) {
  (void)opts;
  ((stall *)state)->parent = rap_allocator_parent(self);
  rap_allocator_set_alignment(self, rap_allocator_alignment(rap_allocator_parent(self)));
  return RAP_OK;
}
static void stall_fini(rap_allocator *self, void *state) {
  (void)self;
  (void)state;
}
static int stall_allocate(void *state, void **out, size_t bytes, rap_resource *r) {
  if (__atomic_exchange_n(&stall_armed, 0, __ATOMIC_ACQ_REL)) {
    gate_open(&stall_arrived);
    gate_job(&stall_gate);
  }
  return rap_allocate(((stall *)state)->parent, out, bytes, r);
}
static int stall_deallocate(void *state, void *ptr, rap_resource *r) {
  return rap_deallocate(((stall *)state)->parent, ptr, r);
}
static int stall_stats(void *state, rap_stats *out) {
  (void)state;
  memset(out, 0, sizeof *out);
  return RAP_OK;
}
static int stall_owns(void *state, const void *ptr) {
  (void)state;
  (void)ptr;
  return 0;
}

static const rap_strategy stall_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "Stall",
    .flags = RAP_STRATEGY_NEEDS_PARENT,
    .state_size = sizeof(stall),
    .init = stall_init,
    .fini = stall_fini,
    .allocate = stall_allocate,
    .deallocate = stall_deallocate,
    .stats = stall_stats,
    .owns = stall_owns,
};

/* A call through a pool over Stall, for a thread of its own: stall_call allocates bytes from a. */
typedef struct stall_caller {
  rap_allocator *a;
  size_t bytes;
  void *p;
  int st;
} stall_caller;

static inline void *stall_call(void *arg) {
  stall_caller *c = arg;
  c->st = rap_allocate(c->a, &c->p, c->bytes, NULL);
  return NULL;
}

/* Arms Stall: the next allocate through it stops at the gate (both gates made anew). */
static inline void stall_arm(void) {
  gate_init(&stall_gate);
  gate_init(&stall_arrived);
  __atomic_store_n(&stall_armed, 1, __ATOMIC_RELEASE);
}

#endif /* RAP_TEST_STALL_H */
