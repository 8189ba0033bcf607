/* fault.c — Fault: passes requests to its parent and fails them on demand, for tests.
 *
 * fail_next=N fails the next N requests; fail_after=N lets N more through, then fails every one
 * until reconfigured; fail_at=N fails only the N-th request from now (a transient failure, for
 * failing every point of a sequence in turn); budget=SIZE fails any request that would take this
 * allocator's live bytes above SIZE. A failure is RAP_ERR_NOMEM, as a real parent running dry
 * would give. Every live pointer is tracked, so the allocator also catches double and foreign frees.
 */
#include "rap_internal.h"
#include "rap_testing.h"

#include <stdlib.h>
#include <string.h>

typedef struct fault_impl {
  uint64_t fail_next, pass_left;   /* pass_left == UINT64_MAX: fail_after is off */
  uint64_t fail_at;                /* 0: off; else requests up to and including the one to fail */
  size_t budget;                   /* SIZE_MAX: no budget */
  size_t requests, failures;
  size_t inflight;                 /* asked of the parent, not answered yet (see SizeLimiter) */
} fault_impl;

static int fault_raw_alloc(rapi_tracked *p, void **out, size_t bytes, rap_resource *r) {
  fault_impl *f = p->impl;
  f->requests++;
  const char *why = NULL;
  bool at = f->fail_at > 0 && --f->fail_at == 0;
  if (at) {
    why = "fail_at";
  } else if (f->fail_next > 0) {
    f->fail_next--;
    why = "fail_next";
  } else if (f->pass_left == 0) {
    why = "fail_after";
  } else if (f->budget != SIZE_MAX && (bytes > f->budget || p->current + f->inflight > f->budget - bytes)) {
    why = "budget";
  }
  if (why != NULL) {
    f->failures++;
    return rapi_fail(RAP_ERR_NOMEM, "%s: request %zu of %zu bytes failed on purpose (%s)",
                     rap_allocator_name(p->self), f->requests, bytes, why);
  }
  if (f->pass_left != UINT64_MAX) f->pass_left--;
  f->inflight += bytes;
  int st = rap_allocate(rap_allocator_parent(p->self), out, bytes, r);
  f->inflight -= bytes;
  return st;
}

static int fault_raw_free(rapi_tracked *p, void *ptr, size_t bytes, rap_resource *r) {
  (void)bytes;
  return rap_deallocate(rap_allocator_parent(p->self), ptr, r);
}

static int apply(fault_impl *f, rap_options *opts) {
  for (size_t i = 0; i < opts->count; i++)
    if (strcmp(opts->items[i].key, "reset") == 0 && opts->items[i].value == NULL) {
      opts->items[i].used = true;
      f->fail_next = 0;
      f->pass_left = UINT64_MAX;
      f->budget = SIZE_MAX;
      f->fail_at = 0;
    }
  uint64_t next = f->fail_next, after = f->pass_left, at = f->fail_at;
  size_t budget = f->budget;
  int st = rap_options_get_uint(opts, "fail_next", &next);
  if (st == RAP_OK) st = rap_options_get_uint(opts, "fail_after", &after);
  if (st == RAP_OK) st = rap_options_get_uint(opts, "fail_at", &at);
  if (st == RAP_OK) st = rap_options_get_size(opts, "budget", &budget);
  if (st == RAP_OK) st = rapi_options_check_unused(opts);
  if (st != RAP_OK) return st;
  f->fail_next = next;
  f->pass_left = after;
  f->fail_at = at;
  f->budget = budget;
  return RAP_OK;
}

static int fault_init(rap_allocator *self, void *state, rap_options *opts) {
  fault_impl *f = rapi_calloc(1, sizeof *f);
  if (f == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(self));
  f->pass_left = UINT64_MAX;
  f->budget = SIZE_MAX;
  int st = apply(f, opts);
  if (st != RAP_OK) {
    free(f);
    return st;
  }
  return rapi_tracked_init(state, self, f, fault_raw_alloc, fault_raw_free, true,
                           rap_allocator_alignment(rap_allocator_parent(self)));
}

const rap_strategy rapi_fault_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "Fault",
    .flags = RAP_STRATEGY_NEEDS_PARENT | RAP_STRATEGY_CONCURRENT_OWNS | RAP_STRATEGY_PASS_THROUGH,
    .state_size = sizeof(rapi_tracked),
    .init = fault_init,
    RAPI_TRACKED_METHODS,
};

static int as_fault(rap_allocator *a, const char *fn, rapi_tracked **out) {
  if (a == NULL) return rapi_fail(RAP_ERR_INVALID, "%s: allocator is NULL", fn);
  if (a->strategy != &rapi_fault_strategy)
    return rapi_fail(RAP_ERR_INVALID, "%s: '%s' is a %s, not a Fault allocator", fn, a->name,
                     a->strategy->name);
  *out = a->state;
  return RAP_OK;
}

int rap_fault_configure(rap_allocator *a, const char *options) {
  rapi_tracked *p = NULL;
  int st = as_fault(a, "rap_fault_configure", &p);
  if (st != RAP_OK) return st;
  rap_options opts;
  st = rapi_options_parse(options, "Fault", &opts);
  if (st != RAP_OK) return st;
  pthread_mutex_lock(&p->lock);
  st = apply(p->impl, &opts);
  pthread_mutex_unlock(&p->lock);
  rapi_options_free(&opts);
  return st;
}

int rap_fault_requests(rap_allocator *a, size_t *out) {
  rapi_tracked *p = NULL;
  int st = as_fault(a, "rap_fault_requests", &p);
  if (st != RAP_OK) return st;
  if (out == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_fault_requests: out is NULL");
  pthread_mutex_lock(&p->lock);
  *out = ((fault_impl *)p->impl)->requests;
  pthread_mutex_unlock(&p->lock);
  return RAP_OK;
}
