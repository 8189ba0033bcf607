/* test_core.c — status codes, the manager's registry and names, platform allocators, Fault, and
 * the logger's leak report. Options are in test_options.c, custom strategies in
 * test_custom_strategy.c. */
#include "events/fence_ring.h"
#include "gate.h"
#include "rap_internal.h"
#include "rap_testing.h"
#include "test_util.h"

#include <rap/strategy.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

RAP_TEST(Status, NamesAndTextsComeFromOneList) {
  RAP_CHECK(strcmp(rap_status_name(RAP_OK), "RAP_OK") == 0);
  RAP_CHECK(strcmp(rap_status_name(RAP_ERR_NOMEM), "RAP_ERR_NOMEM") == 0);
  RAP_CHECK(strcmp(rap_status_name(RAP_ERR_CORRUPT), "RAP_ERR_CORRUPT") == 0);
  RAP_CHECK(strcmp(rap_status_name(12345), "RAP_ERR_UNKNOWN_STATUS") == 0);
  RAP_CHECK(strcmp(rap_strerror(RAP_ERR_NOMEM), "out of memory") == 0);
  RAP_CHECK(strlen(rap_strerror(-999)) > 0);
}

RAP_TEST(Status, VersionMatchesTheHeader) {
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", RAP_VERSION_MAJOR, RAP_VERSION_MINOR, RAP_VERSION_PATCH);
  RAP_CHECK(strcmp(rap_version(), want) == 0);
}

RAP_TEST(Manager, CreateAndDestroyEmpty) {
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK_OK(rap_manager_destroy(rm));
  RAP_CHECK_STATUS(rap_manager_create(NULL), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_manager_destroy(NULL), RAP_ERR_INVALID);
}

RAP_TEST(Host, AllocateFreeAndTrack) {
  rap_manager *rm;
  rap_allocator *host, *found;
  void *p, *q;
  rap_stats s;
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK_OK(rap_allocator_get(rm, "HOST", &host));
  RAP_CHECK(strcmp(rap_allocator_name(host), "HOST") == 0);
  RAP_CHECK_OK(rap_allocate(host, &p, 100, NULL));
  RAP_CHECK_OK(rap_allocate(host, &q, 0, NULL));
  RAP_CHECK(p != NULL && q != NULL && p != q);
  memset(p, 0xab, 100);
  RAP_CHECK_OK(rap_allocator_stats(host, &s));
  RAP_CHECK_EQ(s.current_bytes, 100);
  RAP_CHECK_EQ(s.allocation_count, 2);
  RAP_CHECK_OK(rap_allocator_find(rm, p, &found));
  RAP_CHECK(found == host);
  RAP_CHECK_STATUS(rap_deallocate(host, (char *)p + 1, NULL), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_OK(rap_deallocate(host, p, NULL));
  RAP_CHECK_STATUS(rap_deallocate(host, p, NULL), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_OK(rap_deallocate(host, q, NULL));
  RAP_CHECK_OK(rap_deallocate(host, NULL, NULL));
  RAP_CHECK_OK(rap_allocator_check(host));
  RAP_CHECK_STATUS(rap_allocate(host, &p, SIZE_MAX, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- names ---------------------------------------------------------------------------------- */

RAP_TEST(Manager, DuplicateNamesExist) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_make(rm, "pool", "QuickPool", "HOST", NULL);
  rap_allocator *again = pool;
  RAP_CHECK_STATUS(rap_allocator_make(rm, "pool", "QuickPool", "HOST", NULL, &again), RAP_ERR_EXISTS);
  RAP_CHECK_STR(rap_last_error(), "'pool'");
  RAP_CHECK(again == pool);
  RAP_CHECK_STATUS(rap_allocator_make(rm, "pool", "Fault", "HOST", NULL, &again), RAP_ERR_EXISTS);
  RAP_CHECK(tu_get(rm, "pool") == pool);
  RAP_CHECK(strcmp(rap_allocator_name(pool), "pool") == 0);
  /* Names are exact, but one that answers to the same RAP_ALLOCATOR_<NAME> variable is refused. */
  rap_allocator *upper = pool;
  RAP_CHECK_STATUS(rap_allocator_make(rm, "POOL", "QuickPool", "HOST", NULL, &upper), RAP_ERR_EXISTS);
  RAP_CHECK_STR(rap_last_error(), "RAP_ALLOCATOR_POOL");
  RAP_CHECK(upper == pool);
  RAP_CHECK_OK(rap_allocator_destroy(pool));   /* a destroyed name can be made again */
  pool = tu_make(rm, "pool", "QuickPool", "HOST", NULL);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Manager, PlatformNamesAreReserved) {
  static const char *const names[] = {"HOST", "DEVICE", "PINNED", "UM", "DEVICE::0", "DEVICE::3"};
  rap_manager *rm = tu_manager();
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    rap_allocator *a = NULL;
    RAP_CHECK_STATUS(rap_allocator_make(rm, names[i], "QuickPool", "HOST", NULL, &a), RAP_ERR_EXISTS);
    RAP_CHECK_STR(rap_last_error(), names[i]);
    RAP_CHECK(a == NULL);
  }
  rap_allocator *host = tu_get(rm, "HOST");
  RAP_CHECK(strcmp(rap_allocator_strategy(host), "HOST") == 0);
  RAP_CHECK_EQ(rap_allocator_alignment(host), 16);
  RAP_CHECK(tu_get(rm, "HOST") == host);   /* one per manager */
  rap_allocator *a = NULL;
  RAP_CHECK_STATUS(rap_allocator_get(rm, "host", &a), RAP_ERR_NOT_FOUND);   /* exact */
  RAP_CHECK_STATUS(rap_allocator_get(rm, "DEVICE::x", &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STATUS(rap_allocator_get(rm, "nothing", &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "nothing");
  RAP_CHECK(a == NULL);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Manager, NameLength) {
  rap_manager *rm = tu_manager();
  char name[300];
  memset(name, 'n', sizeof name);
  name[255] = '\0';
  rap_allocator *a = tu_make(rm, name, "QuickPool", "HOST", NULL);
  RAP_CHECK(tu_get(rm, name) == a);
  name[255] = 'n';
  name[256] = '\0';
  rap_allocator *b = NULL;
  RAP_CHECK_STATUS(rap_allocator_make(rm, name, "QuickPool", "HOST", NULL, &b), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_make(rm, "", "QuickPool", "HOST", NULL, &b), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_make(rm, NULL, "QuickPool", "HOST", NULL, &b), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_make(rm, "b", NULL, "HOST", NULL, &b), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_make(rm, "b", "QuickPool", "HOST", NULL, NULL), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_make(NULL, "b", "QuickPool", "HOST", NULL, &b), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_get(rm, NULL, &b), RAP_ERR_INVALID);
  RAP_CHECK(b == NULL);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Manager, UnknownStrategyOrParent) {
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  RAP_CHECK_STATUS(rap_allocator_make(rm, "a", "SlowPool", "HOST", NULL, &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "SlowPool");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "a", "QuickPool", "nowhere", NULL, &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "nowhere");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "a", "QuickPool", NULL, NULL, &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "parent");
  RAP_CHECK(a == NULL);
  RAP_CHECK_STATUS(rap_allocator_get(rm, "a", &a), RAP_ERR_NOT_FOUND);   /* nothing half-made */
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Manager, StrategyNamesIgnoreCase) {
  static const char *const spellings[] = {"QuickPool", "quickpool", "QUICKPOOL", "qUiCkPoOl"};
  rap_manager *rm = tu_manager();
  for (size_t i = 0; i < 4; i++) {
    char name[16];
    snprintf(name, sizeof name, "p%zu", i);
    rap_allocator *a = tu_make(rm, name, spellings[i], "HOST", NULL);
    RAP_CHECK(strcmp(rap_allocator_strategy(a), "QuickPool") == 0);
  }
  rap_allocator *f = tu_make(rm, "f", "fault", "HOST", NULL);
  RAP_CHECK(strcmp(rap_allocator_strategy(f), "Fault") == 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Manager, DestroyAndRecreateHost) {
  rap_manager *rm = tu_manager();
  rap_allocator *host = tu_get(rm, "HOST");
  void *p = tu_alloc(host, 10);
  RAP_CHECK_STATUS(rap_allocator_destroy(host), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "HOST");
  RAP_CHECK_OK(rap_deallocate(host, p, NULL));
  RAP_CHECK_OK(rap_allocator_destroy(host));
  host = tu_get(rm, "HOST");   /* made again on demand, empty */
  TU_EXPECT(host, allocation_count, 0);
  TU_EXPECT(host, high_watermark, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Without CUDA (or without a GPU) the device allocators say so; with one they work. */
RAP_TEST(Manager, DeviceIsUnsupportedOrWorks) {
  static const char *const names[] = {"DEVICE", "DEVICE::0", "PINNED", "UM"};
  rap_manager *rm = tu_manager();
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    rap_allocator *d = NULL;
    int st = rap_allocator_get(rm, names[i], &d);
    RAP_CHECK(st == RAP_OK || st == RAP_ERR_UNSUPPORTED);
    if (st == RAP_ERR_UNSUPPORTED) {
      RAP_CHECK(strlen(rap_last_error()) > 0);
      RAP_CHECK(d == NULL);
      RAP_CHECK_STATUS(rap_allocator_get(rm, names[i], &d), RAP_ERR_UNSUPPORTED);   /* not cached */
      rap_allocator *pool = NULL;
      RAP_CHECK_STATUS(rap_allocator_make(rm, "pool", "QuickPool", names[i], NULL, &pool),
                       RAP_ERR_UNSUPPORTED);
      RAP_CHECK(pool == NULL);
    } else {
      RAP_CHECK(d != NULL);
      RAP_CHECK(strcmp(rap_allocator_name(d), names[i]) == 0);
    }
  }
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Manager, ResourceOfAnotherManagerIsRefused) {
  rap_manager *rm = tu_manager(), *other = tu_manager();
  rap_allocator *pool = tu_make(rm, "pool", "QuickPool", "HOST", "initial_size=64KiB");
  rap_resource *foreign = NULL;
  rap_stats s;
  RAP_CHECK_OK(rap_resource_host(other, &foreign));
  void *p = NULL;
  RAP_CHECK_STATUS(rap_allocate(pool, &p, 10, foreign), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "another manager");
  RAP_CHECK(p == NULL);
  p = tu_alloc(pool, 10);
  RAP_CHECK_STATUS(rap_deallocate(pool, p, foreign), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_resource_stats(pool, foreign, &s), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_record_resource(pool, p, foreign), RAP_ERR_INVALID);
  TU_EXPECT(pool, allocation_count, 1);   /* the refused free changed nothing */
  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(other));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- Fault --------------------------------------------------------------------------------- */

RAP_TEST(Fault, FailNext) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = tu_make(rm, "f", "Fault", "HOST", "fail_next=2");
  RAP_CHECK(rap_allocator_parent(f) == tu_get(rm, "HOST"));
  void *p = NULL;
  for (int i = 0; i < 2; i++) {
    RAP_CHECK_STATUS(rap_allocate(f, &p, 64, NULL), RAP_ERR_NOMEM);
    RAP_CHECK_STR(rap_last_error(), "fail_next");
    RAP_CHECK(p == NULL);
  }
  p = tu_alloc(f, 64);
  void *q = tu_alloc(f, 64);
  RAP_CHECK_EQ(tu_requests(f), 4);
  TU_EXPECT(f, allocation_count, 2);
  TU_EXPECT(f, current_bytes, 128);
  RAP_CHECK_OK(rap_fault_configure(f, "fail_next=1"));
  void *r = NULL;
  RAP_CHECK_STATUS(rap_allocate(f, &r, 1, NULL), RAP_ERR_NOMEM);
  r = tu_alloc(f, 1);
  RAP_CHECK_EQ(tu_requests(f), 6);
  RAP_CHECK_OK(rap_deallocate(f, p, NULL));
  RAP_CHECK_OK(rap_deallocate(f, q, NULL));
  RAP_CHECK_OK(rap_deallocate(f, r, NULL));
  RAP_CHECK_STATUS(rap_deallocate(f, r, NULL), RAP_ERR_UNKNOWN_POINTER);   /* it tracks pointers */
  TU_CHECK(f);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Fault, FailAfter) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = tu_make(rm, "f", "Fault", "HOST", NULL);
  RAP_CHECK_OK(rap_fault_configure(f, "fail_after=2"));
  void *a = tu_alloc(f, 10), *b = tu_alloc(f, 10), *p = NULL;
  for (int i = 0; i < 3; i++) {   /* every later request fails, until reconfigured */
    RAP_CHECK_STATUS(rap_allocate(f, &p, 10, NULL), RAP_ERR_NOMEM);
    RAP_CHECK_STR(rap_last_error(), "fail_after");
  }
  RAP_CHECK_OK(rap_fault_configure(f, "reset"));
  p = tu_alloc(f, 10);
  RAP_CHECK_EQ(tu_requests(f), 6);
  RAP_CHECK_OK(rap_fault_configure(f, "reset fail_after=0"));
  void *q = NULL;
  RAP_CHECK_STATUS(rap_allocate(f, &q, 10, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_OK(rap_fault_configure(f, "fail_after=1 fail_next=1"));   /* fail_next goes first */
  RAP_CHECK_STATUS(rap_allocate(f, &q, 10, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "fail_next");
  q = tu_alloc(f, 10);
  RAP_CHECK_STATUS(rap_allocate(f, &p, 10, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "fail_after");
  void *all[] = {a, b, p, q};
  for (int i = 0; i < 4; i++) RAP_CHECK_OK(rap_deallocate(f, all[i], NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Fault, Budget) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = tu_make(rm, "f", "Fault", "HOST", "budget=1000");
  void *a = tu_alloc(f, 600), *b = tu_alloc(f, 400), *p = NULL;   /* exactly the budget */
  RAP_CHECK_STATUS(rap_allocate(f, &p, 1, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "budget");
  RAP_CHECK_OK(rap_deallocate(f, b, NULL));
  void *c = tu_alloc(f, 300);
  RAP_CHECK_STATUS(rap_allocate(f, &p, 101, NULL), RAP_ERR_NOMEM);
  void *d = tu_alloc(f, 100);
  RAP_CHECK_STATUS(rap_allocate(f, &p, SIZE_MAX, NULL), RAP_ERR_NOMEM);   /* no overflow */
  TU_EXPECT(f, current_bytes, 1000);
  RAP_CHECK_OK(rap_fault_configure(f, "budget=1KiB"));
  void *e = tu_alloc(f, 24);
  RAP_CHECK_STATUS(rap_allocate(f, &p, 1, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_OK(rap_fault_configure(f, "reset"));
  p = tu_alloc(f, 5000);
  void *all[] = {a, c, d, e, p};
  for (int i = 0; i < 5; i++) RAP_CHECK_OK(rap_deallocate(f, all[i], NULL));
  TU_CHECK(f);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Fault, ConfigureErrors) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = tu_make(rm, "f", "Fault", "HOST", "budget=100");
  rap_allocator *host = tu_get(rm, "HOST");
  rap_allocator *pool = tu_make(rm, "pool", "QuickPool", "HOST", NULL);
  size_t n = 77;
  RAP_CHECK_STATUS(rap_fault_configure(host, "reset"), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "not a Fault");
  RAP_CHECK_STATUS(rap_fault_configure(pool, "fail_next=1"), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "QuickPool");
  RAP_CHECK_STATUS(rap_fault_configure(NULL, "reset"), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_fault_requests(pool, &n), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_fault_requests(NULL, &n), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_fault_requests(f, NULL), RAP_ERR_INVALID);
  RAP_CHECK_EQ(n, 77);
  /* A bad string changes nothing, not even the keys before the bad one. */
  RAP_CHECK_STATUS(rap_fault_configure(f, "budget=5 fail_next=x"), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "fail_next");
  RAP_CHECK_STATUS(rap_fault_configure(f, "budget=5 fail_sometimes=1"), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "fail_sometimes");
  RAP_CHECK_STATUS(rap_fault_configure(f, "reset=1"), RAP_ERR_INVALID);
  void *p = tu_alloc(f, 100), *q = NULL;   /* budget still 100 */
  RAP_CHECK_STATUS(rap_allocate(f, &q, 1, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_OK(rap_fault_configure(f, NULL));   /* nothing to change */
  RAP_CHECK_OK(rap_fault_configure(f, ""));
  RAP_CHECK_OK(rap_deallocate(f, p, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Fault, OverAPool) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_make(rm, "pool", "QuickPool", "HOST", "initial_size=64KiB");
  rap_allocator *f = tu_make(rm, "f", "Fault", "pool", "fail_next=1");
  RAP_CHECK_EQ(rap_allocator_alignment(f), 256);   /* passes its parent's alignment on */
  void *p = NULL;
  RAP_CHECK_STATUS(rap_allocate(f, &p, 100, NULL), RAP_ERR_NOMEM);
  TU_EXPECT(pool, chunk_count, 0);   /* the failure never reached the pool */
  p = tu_alloc(f, 100);
  TU_EXPECT(pool, current_bytes, 100);
  rap_allocator *found = NULL;
  RAP_CHECK_OK(rap_allocator_find(rm, p, &found));
  RAP_CHECK(found == f);
  RAP_CHECK_OK(rap_deallocate(f, p, NULL));
  TU_EXPECT(pool, allocation_count, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- logging and leaks ------------------------------------------------------------------- */

static char log_text[4096];
static int log_messages;

static void collect(int level, const char *message, void *user) {
  (void)user;
  size_t used = strlen(log_text);
  snprintf(log_text + used, sizeof log_text - used, "[%d] %s\n", level, message);
  log_messages++;
}

RAP_TEST(Manager, LeaksAreReportedByNameAndSize) {
  int level = rap_log_get_level();
  RAP_CHECK_OK(rap_log_set_level(RAP_LOG_WARN));
  log_text[0] = '\0';
  log_messages = 0;
  RAP_CHECK_OK(rap_log_set_handler(collect, NULL));
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_make(rm, "leaky", "QuickPool", "HOST", "initial_size=64KiB");
  rap_allocator *clean = tu_make(rm, "clean", "QuickPool", "HOST", "initial_size=64KiB");
  rap_allocator *host = tu_get(rm, "HOST");
  (void)tu_alloc(pool, 1000);
  (void)tu_alloc(pool, 0);
  (void)tu_alloc(host, 100);
  RAP_CHECK_OK(rap_deallocate(clean, tu_alloc(clean, 10), NULL));
  int st = rap_manager_destroy(rm);
  RAP_CHECK_OK(rap_log_set_handler(NULL, NULL));
  RAP_CHECK_OK(rap_log_set_level(level));
  RAP_CHECK_STATUS(st, RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "log");
  RAP_CHECK_EQ(log_messages, 2);   /* the pool and HOST; the pool's chunk went back to HOST */
  RAP_CHECK_STR(log_text, "'leaky'");
  RAP_CHECK_STR(log_text, "2 blocks, 1000 B");
  RAP_CHECK_STR(log_text, "'HOST'");
  RAP_CHECK_STR(log_text, "1 block, 100 B");
  RAP_CHECK(!rap_test_contains(log_text, "clean"));
}

RAP_TEST(Manager, CleanTeardownLogsNothing) {
  int level = rap_log_get_level();
  RAP_CHECK_OK(rap_log_set_level(RAP_LOG_DEBUG));
  log_text[0] = '\0';
  log_messages = 0;
  RAP_CHECK_OK(rap_log_set_handler(collect, NULL));
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_make(rm, "pool", "QuickPool", "HOST", "initial_size=64KiB");
  RAP_CHECK_OK(rap_deallocate(pool, tu_alloc(pool, 10), NULL));
  log_text[0] = '\0';   /* the growth above is told at debug level; the teardown must say nothing */
  log_messages = 0;
  int st = rap_manager_destroy(rm);
  RAP_CHECK_OK(rap_log_set_handler(NULL, NULL));
  RAP_CHECK_OK(rap_log_set_level(level));
  RAP_CHECK_OK(st);
  RAP_CHECK_EQ(log_messages, 0);
}

RAP_TEST(Log, Levels) {
  int level = rap_log_get_level();
  RAP_CHECK(level >= RAP_LOG_DEBUG && level <= RAP_LOG_OFF);
  RAP_CHECK_STATUS(rap_log_set_level(RAP_LOG_OFF + 1), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_log_set_level(-1), RAP_ERR_INVALID);
  RAP_CHECK_EQ(rap_log_get_level(), level);
  RAP_CHECK_OK(rap_log_set_level(RAP_LOG_ERROR));
  RAP_CHECK_EQ(rap_log_get_level(), RAP_LOG_ERROR);
  RAP_CHECK_OK(rap_log_set_level(level));
}

/* Slabs: records of a cache line's size start on a line (ThreadCache's records, written by many
 * threads, share none); other sizes are packed as before. */
RAP_TEST(Slab, LineSizedRecordsStartOnALine) {
  rapi_slab lines, packed;
  rapi_slab_init(&lines, 64, 5);
  rapi_slab_init(&packed, 72, 5);
  for (int i = 0; i < 12; i++) {   /* three slabs each */
    void *a = rapi_slab_alloc(&lines), *b = rapi_slab_alloc(&packed);
    RAP_CHECK(a != NULL && b != NULL);
    RAP_CHECK_EQ((uintptr_t)a % 64, 0);
    RAP_CHECK_EQ((uintptr_t)b % sizeof(void *), 0);
    memset(a, 0xab, 64);   /* the whole record is the slab's (ASan checks) */
    memset(b, 0xcd, 72);
  }
  rapi_slab_destroy(&lines);
  rapi_slab_destroy(&packed);
}

/* Fence rings: fences pass oldest first; the order holds across the ring's end and its growth. */
RAP_TEST(FenceRing, PassesInOrderAcrossItsEndAndGrowth) {
  rap_manager *rm = tu_manager();
  rap_resource *q;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  rapi_fence_ring fr = {0};
  uint64_t done = 0;
  RAP_CHECK(rapi_fence_ring_newest(&fr) == NULL);
  RAP_CHECK(rapi_fence_ring_find(&fr, 1) == NULL);
  static gate g[3];
  for (int i = 0; i < 3; i++) gate_init(&g[i]);
  RAP_CHECK_OK(rap_resource_submit(q, gate_job, &g[0]));
  for (uint64_t b = 1; b <= 6; b++) RAP_CHECK_OK(rapi_fence_ring_record(&fr, q, b, NULL));
  RAP_CHECK_OK(rapi_fence_ring_query(&fr, q, &done));
  RAP_CHECK_EQ(done, 0);
  RAP_CHECK_EQ(fr.count, 6);
  gate_open(&g[0]);
  RAP_CHECK_OK(rap_resource_synchronize(q));
  RAP_CHECK_OK(rapi_fence_ring_query(&fr, q, &done));
  RAP_CHECK_EQ(done, 6);
  RAP_CHECK_EQ(fr.count, 0);
  RAP_CHECK_EQ(fr.head, 6);   /* the next fences wrap round the end of 8 */
  RAP_CHECK_OK(rap_resource_submit(q, gate_job, &g[1]));
  for (uint64_t b = 7; b <= 9; b++) RAP_CHECK_OK(rapi_fence_ring_record(&fr, q, b, NULL));
  RAP_CHECK_OK(rap_resource_submit(q, gate_job, &g[2]));
  for (uint64_t b = 10; b <= 16; b++) RAP_CHECK_OK(rapi_fence_ring_record(&fr, q, b, NULL));
  RAP_CHECK_EQ(fr.count, 10);
  RAP_CHECK_EQ(fr.cap, 16);
  rapi_event *e8 = rapi_fence_ring_find(&fr, 8), *e11 = rapi_fence_ring_find(&fr, 11);
  RAP_CHECK(e8 == fr.f[(fr.head + 1) % fr.cap].ev);    /* batch 8's own fence */
  RAP_CHECK(e11 == fr.f[(fr.head + 4) % fr.cap].ev);
  RAP_CHECK(rapi_fence_ring_newest(&fr) == fr.f[(fr.head + 9) % fr.cap].ev);
  RAP_CHECK(rapi_fence_ring_find(&fr, 17) == NULL);   /* not fenced yet */
  gate_open(&g[1]);
  RAP_CHECK_OK(rapi_host_wait(e8));
  RAP_CHECK_OK(rapi_fence_ring_query(&fr, q, &done));
  RAP_CHECK_EQ(done, 9);   /* the fences behind the closed gate stay */
  RAP_CHECK_EQ(fr.count, 7);
  gate_open(&g[2]);
  RAP_CHECK_OK(rap_resource_synchronize(q));
  RAP_CHECK_OK(rapi_fence_ring_query(&fr, q, &done));
  RAP_CHECK_EQ(done, 16);
  RAP_CHECK_EQ(fr.count, 0);
  RAP_CHECK_OK(rapi_fence_ring_record(&fr, q, 17, NULL));
  rapi_fence_ring_fini(&fr, q);   /* its event goes back to the queue */
  RAP_CHECK(fr.f == NULL && fr.count == 0 && fr.cap == 0);
  for (int i = 0; i < 3; i++) gate_destroy(&g[i]);
  RAP_CHECK_OK(rap_resource_destroy(q));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Until the view says want, or a bounded number of looks (then false): the waiter may not be there
 * yet. */
static bool view_until(rap_resource *r, bool host, bool want) {
  for (long i = 0; i < 100000000L; i++) {
    rap_host_async_view v;
    if (rap_host_async_view_of(r, &v) != RAP_OK) return false;
    if ((host ? v.host_blocked : v.worker_blocked) == want) return true;
    sched_yield();
  }
  return false;
}

static void *sync_thread(void *arg) { return (void *)(intptr_t)rap_resource_synchronize(arg); }

/* A host_async queue's view for tests: who waits for it, and for whom its worker waits. */
RAP_TEST(HostAsync, ViewSaysWhoWaits) {
  rap_manager *rm = tu_manager();
  rap_resource *q1, *q2;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q1));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q2));
  rap_host_async_view v;
  rap_resource *host;
  RAP_CHECK_OK(rap_resource_host(rm, &host));
  RAP_CHECK_STATUS(rap_host_async_view_of(host, &v), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_host_async_view_of(q1, NULL), RAP_ERR_INVALID);
  static gate g[2];
  for (int i = 0; i < 2; i++) gate_init(&g[i]);
  RAP_CHECK_OK(rap_resource_submit(q1, gate_job, &g[0]));
  RAP_CHECK_OK(rap_host_async_view_of(q1, &v));
  RAP_CHECK_EQ(v.unfinished, 1);
  RAP_CHECK(!v.host_blocked && !v.worker_blocked);
  pthread_t t;
  RAP_CHECK(pthread_create(&t, NULL, sync_thread, q1) == 0);
  RAP_CHECK(view_until(q1, true, true));   /* the synchronize waits at the gate */
  gate_open(&g[0]);
  void *st;
  pthread_join(t, &st);
  RAP_CHECK_EQ((int)(intptr_t)st, RAP_OK);
  RAP_CHECK_OK(rap_host_async_view_of(q1, &v));
  RAP_CHECK(v.unfinished == 0 && !v.host_blocked);
  /* q2's worker waits for q1's event (a queued wait): q2's view says so, q1's has no host waiter */
  RAP_CHECK_OK(rap_resource_submit(q1, gate_job, &g[1]));
  rapi_event *ev;
  RAP_CHECK_OK(q1->ops->record(q1, &ev));
  RAP_CHECK_OK(q2->ops->wait(q2, ev));
  RAP_CHECK(view_until(q2, false, true));
  RAP_CHECK_OK(rap_host_async_view_of(q1, &v));
  RAP_CHECK(!v.host_blocked && !v.worker_blocked && v.unfinished == 1);
  gate_open(&g[1]);
  RAP_CHECK_OK(rap_resource_synchronize(q2));
  RAP_CHECK_OK(rap_host_async_view_of(q2, &v));
  RAP_CHECK(v.unfinished == 0 && !v.worker_blocked);
  q1->ops->event_release(ev);
  for (int i = 0; i < 2; i++) gate_destroy(&g[i]);
  RAP_CHECK_OK(rap_resource_destroy(q1));
  RAP_CHECK_OK(rap_resource_destroy(q2));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
