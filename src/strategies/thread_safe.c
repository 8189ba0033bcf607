/* thread_safe.c — ThreadSafe: makes any allocator safe for concurrent callers.
 *
 * One mutex per ThreadSafe instance, taken around every call into the wrapped allocator (its
 * parent), statistics and checks included. Nothing is process-wide: two ThreadSafe pools never
 * contend with each other. Under that mutex it counts its live blocks, so that its statistics and
 * leak check answer for what went through it, not for what a shared parent holds for others. The
 * wrapper also guards the allocators below it (their `guard_lock`), so that the manager's own
 * calls into them (rap_allocator_find, rap_resource_destroy) take the same lock as the wrapper's
 * callers.
 */
#include "rap_internal.h"

typedef struct thread_safe {
  pthread_mutex_t lock;
  rap_allocator *inner;
  size_t live;   /* blocks handed out through this wrapper and not yet given back, under lock */
} thread_safe;

/* rapi_lock notes the lock on this thread's stack, so that a pool below that must block the host
 * for a resource lets it go meanwhile (rapi_host_wait): the resource's work may call in here. */
#define LOCKED(ts, call)                       \
  do {                                         \
    int st_;                                   \
    RAPI_LOCKED(st_, &(ts)->lock, (call));     \
    return st_;                                \
  } while (0)

static int ts_init(rap_allocator *self, void *state, rap_options *opts) {
  (void)opts;
  thread_safe *ts = state;
  ts->inner = rap_allocator_parent(self);
  if (pthread_mutex_init(&ts->lock, NULL) != 0)
    return rapi_fail(RAP_ERR_BACKEND, "%s: pthread_mutex_init failed", rap_allocator_name(self));
  rap_allocator_set_alignment(self, rap_allocator_alignment(ts->inner));
  /* The manager holds its lock here, as wherever guard_lock is read. */
  for (rap_allocator *a = ts->inner; a != NULL; a = a->parent)
    if (a->guard_lock == NULL) a->guard_lock = &ts->lock;
  return RAP_OK;
}

static void ts_fini(rap_allocator *self, void *state) {
  (void)self;
  thread_safe *ts = state;
  for (rap_allocator *a = ts->inner; a != NULL; a = a->parent)
    if (a->guard_lock == &ts->lock) a->guard_lock = NULL;
  pthread_mutex_destroy(&ts->lock);
}

/* Under the lock: the inner's call, and the count of live blocks after it. A pointer the inner
 * takes back that never came through here (a caller's mistake) leaves the count at zero. */
static int counted_allocate(thread_safe *ts, void **out, size_t bytes, rap_resource *r) {
  int st = rap_allocate(ts->inner, out, bytes, r);
  ts->live += st == RAP_OK;
  return st;
}

static int counted_deallocate(thread_safe *ts, void *ptr, rap_resource *r) {
  int st = rap_deallocate(ts->inner, ptr, r);
  if (RAPI_LIKELY(st == RAP_OK) && RAPI_LIKELY(ts->live > 0)) ts->live--;
  return st;
}

static int own_stats(thread_safe *ts, rap_stats *out) {
  int st = rap_allocator_stats(ts->inner, out);
  if (st == RAP_OK) rapi_stats_own(out, ts->live);
  return st;
}

static int ts_allocate(void *state, void **out, size_t bytes, rap_resource *r) {
  thread_safe *ts = state;
  LOCKED(ts, counted_allocate(ts, out, bytes, r));
}

static int ts_deallocate(void *state, void *ptr, rap_resource *r) {
  thread_safe *ts = state;
  LOCKED(ts, counted_deallocate(ts, ptr, r));
}

static int ts_stats(void *state, rap_stats *out) {
  thread_safe *ts = state;
  LOCKED(ts, own_stats(ts, out));
}

static int ts_owns(void *state, const void *ptr) {
  thread_safe *ts = state;
  LOCKED(ts, ts->inner->strategy->owns(ts->inner->state, ptr));
}

static int ts_release(void *state) {
  thread_safe *ts = state;
  LOCKED(ts, rap_release(ts->inner));
}

static int ts_check(void *state) {
  thread_safe *ts = state;
  LOCKED(ts, rap_allocator_check(ts->inner));
}

static int ts_record(void *state, void *ptr, rap_resource *r) {
  thread_safe *ts = state;
  LOCKED(ts, rap_record_resource(ts->inner, ptr, r));
}

static int ts_pointer_resource(void *state, const void *ptr, rap_resource **out) {
  thread_safe *ts = state;
  LOCKED(ts, rap_pointer_resource(ts->inner, ptr, out));
}

static int ts_reset_peaks(void *state) {
  thread_safe *ts = state;
  LOCKED(ts, rap_allocator_reset_peaks(ts->inner));
}

static int ts_sleep(void *state, int mode) {
  thread_safe *ts = state;
  LOCKED(ts, rap_allocator_sleep(ts->inner, mode));
}

static int ts_wake(void *state) {
  thread_safe *ts = state;
  LOCKED(ts, rap_allocator_wake(ts->inner));
}

static int ts_resource_stats(void *state, rap_resource *r, rap_stats *out) {
  thread_safe *ts = state;
  LOCKED(ts, rap_allocator_resource_stats(ts->inner, r, out));
}

const rap_strategy rapi_thread_safe_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "ThreadSafe",
    .flags = RAP_STRATEGY_NEEDS_PARENT | RAP_STRATEGY_CONCURRENT_OWNS | RAP_STRATEGY_PASS_THROUGH,
    .state_size = sizeof(thread_safe),
    .init = ts_init,
    .fini = ts_fini,
    .allocate = ts_allocate,
    .deallocate = ts_deallocate,
    .stats = ts_stats,
    .owns = ts_owns,
    .release = ts_release,
    .check = ts_check,
    .record_resource = ts_record,
    .pointer_resource = ts_pointer_resource,
    .resource_stats = ts_resource_stats,
    .reset_peaks = ts_reset_peaks,
    .sleep = ts_sleep,
    .wake = ts_wake,
};
