/* size_limiter.c — SizeLimiter: refuses requests that would take its live bytes past `limit`.
 *
 * It passes every request, with its resource, to the parent and tracks what it handed out, so
 * that it knows the live bytes exactly. `limit` is a size, or a share of the memory under the
 * platform at the bottom of the chain (limit=50%: half the device's, or the host's). A refusal is RAP_ERR_NOMEM, as a parent running dry: a
 * pool above it reacts as it would to a real shortage, releasing free chunks and retrying once.
 */
#include "rap_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct limiter {
  size_t limit;
  size_t inflight;   /* bytes asked of the parent and not answered yet: a pool below may let
                        this allocator's lock go while it waits (rapi_host_wait) */
} limiter;

static int limiter_raw_alloc(rapi_tracked *p, void **out, size_t bytes, rap_resource *r) {
  limiter *l = p->impl;
  if (bytes > l->limit || p->current + l->inflight > l->limit - bytes) {
    char want[32], lim[32], live[32];
    rapi_format_size(want, sizeof want, bytes);
    rapi_format_size(lim, sizeof lim, l->limit);
    rapi_format_size(live, sizeof live, p->current);
    return rapi_fail(RAP_ERR_NOMEM, "%s: %s more would pass the limit of %s (%s live)",
                     rap_allocator_name(p->self), want, lim, live);
  }
  l->inflight += bytes;
  int st = rap_allocate(rap_allocator_parent(p->self), out, bytes, r);
  l->inflight -= bytes;
  return st;
}

static int limiter_raw_free(rapi_tracked *p, void *ptr, size_t bytes, rap_resource *r) {
  (void)bytes;
  return rap_deallocate(rap_allocator_parent(p->self), ptr, r);
}

/* limit=N% (N a number up to 100, decimals allowed): N % of the memory under the parent's platform
 * (rap_allocator_memory_info's total), taken once, when the limiter is made. */
static int percent_limit(rap_allocator *self, rap_options *opts, size_t *limit, bool *is_percent) {
  const char *v = NULL;
  *is_percent = false;
  int st = rap_options_get_string(opts, "limit", &v);
  size_t len = v != NULL ? strlen(v) : 0;
  if (st != RAP_OK || len == 0 || v[len - 1] != '%') return st;
  *is_percent = true;
  char *end = NULL;
  double pct = strtod(v, &end);
  if (end != v + len - 1 || !(pct > 0) || pct > 100)
    return rapi_fail(RAP_ERR_INVALID, "%s: option 'limit' as a share of memory is a number above 0 "
                     "and at most 100 followed by %%, such as 50%%, not '%s'", rap_allocator_name(self), v);
  size_t free_bytes = 0, total = 0;
  st = rap_allocator_memory_info(rap_allocator_parent(self), &free_bytes, &total);
  if (st != RAP_OK)
    return rapi_fail(st, "%s: limit=%s needs the size of the memory under '%s': %s",
                     rap_allocator_name(self), v, rap_allocator_name(rap_allocator_parent(self)),
                     rap_last_error());
  *limit = (size_t)((double)total * pct / 100.0);
  return RAP_OK;
}

static int limiter_init(rap_allocator *self, void *state, rap_options *opts) {
  size_t limit = 0;
  bool is_percent;
  int st = percent_limit(self, opts, &limit, &is_percent);
  if (st == RAP_OK && !is_percent) st = rap_options_get_size(opts, "limit", &limit);
  if (st != RAP_OK) return st;
  if (limit == 0)
    return rapi_fail(RAP_ERR_INVALID, "%s: SizeLimiter needs option 'limit', a size above zero or a "
                     "share of the memory such as 50%%",
                     rap_allocator_name(self));
  limiter *l = rapi_malloc(sizeof *l);
  if (l == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(self));
  l->limit = limit;
  l->inflight = 0;
  return rapi_tracked_init(state, self, l, limiter_raw_alloc, limiter_raw_free, true,
                           rap_allocator_alignment(rap_allocator_parent(self)));
}

const rap_strategy rapi_size_limiter_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "SizeLimiter",
    .flags = RAP_STRATEGY_NEEDS_PARENT | RAP_STRATEGY_CONCURRENT_OWNS | RAP_STRATEGY_PASS_THROUGH,
    .state_size = sizeof(rapi_tracked),
    .init = limiter_init,
    RAPI_TRACKED_METHODS,
};
