/* test_strategy_v2.c — what strategy tables of version 2 and the debug levels add for a strategy
 * written outside the library: watching resources and being told when one goes (resource_gone),
 * version 1 tables still accepted, and RAP_DEBUG reaching a custom strategy's check.
 *
 * Tracker hands out its parent's memory and counts, per resource, the blocks live on it; it
 * watches every resource it sees, refuses that resource's destroy while it owns blocks there, and
 * forgets it when it goes.
 */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <rap/strategy.h>
#include <stdlib.h>
#include <string.h>

void rapi_debug_read_env(void);
void rapi_assert_failed(const char *file, int line, const char *cond);

enum { TR_MAX = 8 };
typedef struct tracker {
  rap_allocator *self, *parent;
  rap_resource *res[TR_MAX];
  size_t live[TR_MAX];
  void *ptrs[64];
  rap_resource *owner[64];
  size_t current, count;
  int gone_asked, gone_told;
  bool broken;               /* check answers CORRUPT: the debug walker must see it */
  bool old;                  /* a version 1 table: watches, but has no resource_gone to be told
                                that a resource went, so its fini leaves the watch list alone */
} tracker;

static int tr_init(rap_allocator *self, void *state, rap_options *opts) {
  (void)opts;
  tracker *t = state;
  t->self = self;
  t->parent = rap_allocator_parent(self);
  rap_allocator_set_alignment(self, rap_allocator_alignment(t->parent));
  return RAP_OK;
}

static void tr_fini(rap_allocator *self, void *state) {
  tracker *t = state;
  for (int i = 0; i < TR_MAX; i++)
    if (t->res[i] != NULL && !t->old) rap_resource_unwatch(t->res[i], self);
}

static int tr_init_old(rap_allocator *self, void *state, rap_options *opts) {
  ((tracker *)state)->old = true;
  return tr_init(self, state, opts);
}

static int slot_of(tracker *t, rap_resource *r, bool add) {
  for (int i = 0; i < TR_MAX; i++)
    if (t->res[i] == r) return i;
  if (!add) return -1;
  for (int i = 0; i < TR_MAX; i++)
    if (t->res[i] == NULL) {
      int st = rap_resource_watch(r, t->self);
      if (st != RAP_OK) return -1;
      t->res[i] = r;
      return i;
    }
  return -1;
}

static int tr_allocate(void *state, void **out, size_t bytes, rap_resource *r) {
  tracker *t = state;
  int i = slot_of(t, r, true), k = -1;
  for (int j = 0; j < 64 && k < 0; j++)
    if (t->ptrs[j] == NULL) k = j;
  if (i < 0 || k < 0) return rap_error_set(RAP_ERR_NOMEM, "tracker: full");
  int st = rap_allocate(t->parent, out, bytes, NULL);
  if (st != RAP_OK) return st;
  t->ptrs[k] = *out;
  t->owner[k] = r;
  t->live[i]++;
  t->count++;
  return RAP_OK;
}

static int tr_deallocate(void *state, void *ptr, rap_resource *r) {
  tracker *t = state;
  (void)r;
  for (int j = 0; j < 64; j++)
    if (t->ptrs[j] == ptr) {
      int i = slot_of(t, t->owner[j], false);
      if (i >= 0) t->live[i]--;
      t->ptrs[j] = NULL;
      t->count--;
      return rap_deallocate(t->parent, ptr, NULL);
    }
  return rap_error_set(RAP_ERR_UNKNOWN_POINTER, "tracker: %p is not live", ptr);
}

static int tr_stats(void *state, rap_stats *out) {
  out->allocation_count = ((tracker *)state)->count;
  return RAP_OK;
}

static int tr_owns(void *state, const void *ptr) {
  tracker *t = state;
  for (int j = 0; j < 64; j++)
    if (t->ptrs[j] == ptr) return 1;
  return 0;
}

static int tr_check(void *state) {
  return ((tracker *)state)->broken ? rap_error_set(RAP_ERR_CORRUPT, "tracker: broken on purpose")
                                    : RAP_OK;
}

static int tr_gone(void *state, rap_resource *r, int commit) {
  tracker *t = state;
  int i = slot_of(t, r, false);
  if (!commit) {
    t->gone_asked++;
    if (i >= 0 && t->live[i] > 0)
      return rap_error_set(RAP_ERR_BUSY, "tracker: %zu blocks live on the resource", t->live[i]);
    return RAP_OK;
  }
  t->gone_told++;
  if (i >= 0) t->res[i] = NULL;
  return RAP_OK;
}

static const rap_strategy tracker_v2 = {
    .version = RAP_STRATEGY_VERSION, .name = "Tracker", .flags = RAP_STRATEGY_NEEDS_PARENT,
    .state_size = sizeof(tracker), .init = tr_init, .fini = tr_fini, .allocate = tr_allocate,
    .deallocate = tr_deallocate, .stats = tr_stats, .owns = tr_owns, .check = tr_check,
    .resource_gone = tr_gone,
};

/* The counters live in the allocator's state, which the test reaches through a global copy of the
 * pointer the strategy's init saw. */
static tracker *last_tracker;
static int tr_init_keep(rap_allocator *self, void *state, rap_options *opts) {
  last_tracker = state;
  return tr_init(self, state, opts);
}

RAP_TEST(StrategyV2, ResourceGoneIsAskedThenTold) {
  RAP_CHECK(RAP_STRATEGY_VERSION >= 2);
  rap_strategy s = tracker_v2;
  s.name = "Tracker2";
  s.init = tr_init_keep;
  rap_manager *rm = tu_manager();
  RAP_CHECK_OK(rap_strategy_register(rm, &s));
  rap_allocator *a = tu_make(rm, "t", "Tracker2", "HOST", NULL);
  rap_resource *q, *other;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &other));
  void *p;
  RAP_CHECK_OK(rap_allocate(a, &p, 64, q));
  RAP_CHECK_STATUS(rap_resource_destroy(q), RAP_ERR_BUSY);   /* asked, refused, nothing told */
  RAP_CHECK_STR(rap_last_error(), "tracker: 1 blocks live");
  RAP_CHECK_EQ(last_tracker->gone_asked, 1);
  RAP_CHECK_EQ(last_tracker->gone_told, 0);
  RAP_CHECK_OK(rap_resource_destroy(other));
  RAP_CHECK_EQ(last_tracker->gone_asked, 1);   /* a resource it never watched: not asked */
  RAP_CHECK_OK(rap_deallocate(a, p, q));
  RAP_CHECK_OK(rap_resource_destroy(q));       /* asked, then told */
  RAP_CHECK_EQ(last_tracker->gone_asked, 2);
  RAP_CHECK_EQ(last_tracker->gone_told, 1);
  RAP_CHECK_OK(rap_allocator_check(a));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A table of version 1 ends before resource_gone: it registers, and destroys never read past it. */
typedef struct v1_table {   /* rap_strategy as version 1 laid it out */
  int version;
  const char *name;
  unsigned flags;
  size_t state_size;
  int (*init)(rap_allocator *, void *, rap_options *);
  void (*fini)(rap_allocator *, void *);
  int (*allocate)(void *, void **, size_t, rap_resource *);
  int (*deallocate)(void *, void *, rap_resource *);
  int (*stats)(void *, rap_stats *);
  int (*owns)(void *, const void *);
  int (*release)(void *);
  int (*check)(void *);
  int (*record_resource)(void *, void *, rap_resource *);
  int (*pointer_resource)(void *, const void *, rap_resource **);
  int (*resource_stats)(void *, rap_resource *, rap_stats *);
} v1_table;

RAP_TEST(StrategyV2, VersionOneTablesStillRegister) {
  v1_table *v1 = malloc(sizeof *v1);   /* exactly as long as a version 1 table: ASan sees overreads */
  *v1 = (v1_table){1, "OldTracker", RAP_STRATEGY_NEEDS_PARENT, sizeof(tracker), tr_init_old, tr_fini,
                   tr_allocate, tr_deallocate, tr_stats, tr_owns, NULL, tr_check, NULL, NULL, NULL};
  rap_manager *rm = tu_manager();
  RAP_CHECK_OK(rap_strategy_register(rm, (const rap_strategy *)v1));
  rap_allocator *a = tu_make(rm, "old", "OldTracker", "HOST", NULL);
  rap_resource *q;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  void *p;
  RAP_CHECK_OK(rap_allocate(a, &p, 64, q));   /* watches q */
  RAP_CHECK_OK(rap_deallocate(a, p, q));
  RAP_CHECK_OK(rap_resource_destroy(q));      /* version 1: the slot past its end is not read */
  RAP_CHECK_OK(rap_manager_destroy(rm));
  free(v1);
}

/* RAP_DEBUG=2 walks a custom strategy's invariants after a public call; =1 turns a broken stated
 * precondition into RAP_ERR_CORRUPT naming it. The level is read when a manager is made. */
RAP_TEST(StrategyV2, DebugLevelsReachCustomStrategies) {
  rap_strategy s = tracker_v2;
  s.name = "Tracker3";
  s.init = tr_init_keep;
  setenv("RAP_DEBUG", "2", 1);
  rap_manager *rm = tu_manager();
  unsetenv("RAP_DEBUG");
  RAP_CHECK_OK(rap_strategy_register(rm, &s));
  rap_allocator *a = tu_make(rm, "t", "Tracker3", "HOST", NULL);
  rap_resource *host;
  RAP_CHECK_OK(rap_resource_host(rm, &host));
  void *p;
  RAP_CHECK_OK(rap_allocate(a, &p, 64, host));
  last_tracker->broken = true;
  RAP_CHECK_STATUS(rap_deallocate(a, p, host), RAP_ERR_CORRUPT);   /* the walker after the call */
  RAP_CHECK_STR(rap_last_error(), "tracker: broken on purpose");
  last_tracker->broken = false;
  RAP_CHECK_OK(rap_allocate(a, &p, 64, host));
  rapi_assert_failed("somewhere.c", 7, "a stated precondition");   /* as a failed RAPI_ASSERT */
  RAP_CHECK_STATUS(rap_deallocate(a, p, host), RAP_ERR_CORRUPT);
  RAP_CHECK_STR(rap_last_error(), "precondition broken at somewhere.c:7: a stated precondition");
  TU_EXPECT(a, allocation_count, 0);   /* the call itself ran: CORRUPT reports, it undoes nothing */
  rapi_debug_read_env();   /* RAP_DEBUG unset: off again */
  last_tracker->broken = true;
  RAP_CHECK_OK(rap_allocate(a, &p, 64, host));   /* off: no walker */
  last_tracker->broken = false;
  RAP_CHECK_OK(rap_deallocate(a, p, host));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
