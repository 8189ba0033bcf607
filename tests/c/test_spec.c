/* test_spec.c — whole chains from one string (rap_allocator_make_spec) and the environment's
 * RAP_ALLOCATOR_<NAME> override. Good chains build every inner allocator, named after the outer
 * one, over the right parent, with the options of its level; a malformed spec is RAP_ERR_INVALID
 * with "column N" where it is a syntax error, an unknown name is RAP_ERR_NOT_FOUND, a taken name is
 * RAP_ERR_EXISTS, and after any failure nothing new is registered.
 */
#define _POSIX_C_SOURCE 200809L   /* setenv, unsetenv */

#include "rap_internal.h"   /* the manager's list of allocators, to count them */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rap_allocator *spec(rap_manager *rm, const char *name, const char *text) {
  rap_allocator *a = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, name, text, &a));
  RAP_CHECK(a != NULL);
  RAP_CHECK(strcmp(rap_allocator_name(a), name) == 0);
  return a;
}

/* The allocator called name exists, runs strategy and sits on parent. */
static rap_allocator *expect(rap_manager *rm, const char *name, const char *strategy,
                             rap_allocator *parent) {
  rap_allocator *a = tu_get(rm, name);
  if (strcmp(rap_allocator_strategy(a), strategy) != 0)
    rap_test_fail(__FILE__, __LINE__, "'%s' runs %s, not %s", name, rap_allocator_strategy(a),
                  strategy);
  if (rap_allocator_parent(a) != parent)
    rap_test_fail(__FILE__, __LINE__, "'%s' sits on '%s', not '%s'", name,
                  rap_allocator_name(rap_allocator_parent(a)), rap_allocator_name(parent));
  return a;
}

static void absent(rap_manager *rm, const char *name) {
  rap_allocator *a = NULL;
  if (rap_allocator_get(rm, name, &a) != RAP_ERR_NOT_FOUND)
    rap_test_fail(__FILE__, __LINE__, "'%s' is registered", name);
}

/* ---- good chains ------------------------------------------------------------------------------ */

RAP_TEST(Spec, ThreeLevels) {
  rap_manager *rm = tu_manager();
  rap_allocator *top =
      spec(rm, "stack", "ThreadSafe(ResourceAwarePool(SizeLimiter(HOST, limit=8MiB), initial_size=1MiB))");
  rap_allocator *host = tu_get(rm, "HOST");
  rap_allocator *lim = expect(rm, "stack/ResourceAwarePool/SizeLimiter", "SizeLimiter", host);
  rap_allocator *pool = expect(rm, "stack/ResourceAwarePool", "ResourceAwarePool", lim);
  RAP_CHECK(expect(rm, "stack", "ThreadSafe", pool) == top);
  /* Each level got its own options: a 1 MiB first chunk, under a limit of 8 MiB. */
  void *p = tu_alloc(top, 100);
  TU_EXPECT(lim, current_bytes, tu_chunk(1 << 20, 256));
  void *q = NULL;
  RAP_CHECK_STATUS(rap_allocate(top, &q, 8 << 20, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "limit of 8 MiB");
  RAP_CHECK_OK(rap_deallocate(top, p, NULL));
  TU_CHECK(top);
  RAP_CHECK_STATUS(rap_allocator_destroy(pool), RAP_ERR_BUSY);   /* the wrapper uses it */
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Spec, OptionsAtEveryLevel) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = spec(rm, "p",
                             "QuickPool(Fault(HOST, fail_next=1), initial_size=64KiB, next_size=4KiB,"
                             " alignment=512, heuristic=never)");
  rap_allocator *f = expect(rm, "p/Fault", "Fault", tu_get(rm, "HOST"));
  RAP_CHECK_EQ(rap_allocator_alignment(pool), 512);
  void *a = NULL;
  RAP_CHECK_STATUS(rap_allocate(pool, &a, 10, NULL), RAP_ERR_NOMEM);   /* fail_next=1 */
  RAP_CHECK_STR(rap_last_error(), "fail_next");
  a = tu_alloc(pool, 65536);
  RAP_CHECK((uintptr_t)a % 512 == 0);
  TU_EXPECT(f, current_bytes, tu_chunk(65536, 512));
  void *b = tu_alloc(pool, 10);   /* a next_size chunk */
  TU_EXPECT(f, current_bytes, tu_chunk(65536, 512) + tu_chunk(4096, 512));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  TU_EXPECT(pool, chunk_count, 2);   /* heuristic=never */
  /* Blanks around names, values and separators are allowed; strategy names ignore case and the
   * inner allocator is named as written. */
  rap_allocator *s = spec(rm, "s", "  threadsafe ( dynamicpoollist ( HOST ,initial_size = 4KiB ) )  ");
  rap_allocator *d = expect(rm, "s/dynamicpoollist", "DynamicPoolList", tu_get(rm, "HOST"));
  RAP_CHECK(rap_allocator_parent(s) == d);
  b = tu_alloc(s, 4096);
  TU_EXPECT(d, actual_bytes, tu_chunk(4096, 256));
  RAP_CHECK_OK(rap_deallocate(s, b, NULL));
  /* A heuristic's colon and a FixedPool's sizes pass through as values. */
  spec(rm, "h", "QuickPool(HOST, heuristic=percent_releasable:50)");
  rap_allocator *fp =
      spec(rm, "fp", "FixedPool(SizeLimiter(HOST, limit=1MiB), object_size=1KB, objects_per_chunk=8)");
  void *o = tu_alloc(fp, 1000);
  RAP_CHECK_EQ(tu_stats(tu_get(rm, "fp/SizeLimiter")).current_bytes, 8 * 1008);
  RAP_CHECK_OK(rap_deallocate(fp, o, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Spec, LeavesNameExistingAllocators) {
  rap_manager *rm = tu_manager();
  rap_allocator *base = tu_make(rm, "base", "QuickPool", "HOST", "initial_size=64KiB");
  rap_allocator *ts = spec(rm, "ts", "ThreadSafe(base)");
  RAP_CHECK(rap_allocator_parent(ts) == base);
  absent(rm, "ts/base");
  rap_allocator *t2 = spec(rm, "t2", "ThreadSafe(DynamicPoolList(base, initial_size=4KiB))");
  rap_allocator *d = expect(rm, "t2/DynamicPoolList", "DynamicPoolList", base);
  RAP_CHECK(rap_allocator_parent(t2) == d);
  void *p = tu_alloc(t2, 100);
  TU_EXPECT(base, allocation_count, 1);   /* d's chunk is a block of base */
  RAP_CHECK_OK(rap_deallocate(t2, p, NULL));
  /* Names with '/', '-', '.' and ':' are names; a platform name is made on first use. */
  tu_make(rm, "team-a/pool.v2", "QuickPool", "HOST", NULL);
  spec(rm, "w", "ThreadSafe(team-a/pool.v2)");
  RAP_CHECK(rap_allocator_parent(tu_get(rm, "w")) == tu_get(rm, "team-a/pool.v2"));
  RAP_CHECK_OK(rap_manager_destroy(rm));

  rm = tu_manager();
  spec(rm, "first", "QuickPool(HOST)");   /* HOST did not exist before */
  expect(rm, "first", "QuickPool", tu_get(rm, "HOST"));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- malformed specs ------------------------------------------------------------------------ */

typedef struct bad {
  const char *spec;
  int status;
  int column;        /* 0: not a syntax error, no column */
  const char *why;   /* part of the sentence */
} bad;

static const bad bads[] = {
    {"", RAP_ERR_INVALID, 1, "expected a strategy or allocator name"},
    {"   ", RAP_ERR_INVALID, 4, "expected a strategy or allocator name"},
    {"(HOST)", RAP_ERR_INVALID, 1, "expected a strategy or allocator name"},
    {"QuickPool(HOST", RAP_ERR_INVALID, 15, "expected ',' or ')'"},
    {"ThreadSafe(QuickPool(HOST)", RAP_ERR_INVALID, 27, "expected ',' or ')'"},
    {"QuickPool(HOST))", RAP_ERR_INVALID, 16, "unexpected text after the spec"},
    {"QuickPool(HOST) x", RAP_ERR_INVALID, 17, "unexpected text after the spec"},
    {"Quick Pool(HOST)", RAP_ERR_INVALID, 7, "unexpected text after the spec"},
    {"QuickPool(HOST, initial_size=)", RAP_ERR_INVALID, 30, "expected a value after '='"},
    {"QuickPool(HOST, initial_size= ,next_size=1MiB)", RAP_ERR_INVALID, 31, "expected a value"},
    {"QuickPool(HOST, =5)", RAP_ERR_INVALID, 17, "expected a parent allocator or key=value"},
    {"QuickPool(HOST,)", RAP_ERR_INVALID, 16, "expected a parent allocator or key=value"},
    {"QuickPool(,HOST)", RAP_ERR_INVALID, 11, "expected a parent allocator or key=value"},
    {"QuickPool((HOST))", RAP_ERR_INVALID, 11, "expected a parent allocator or key=value"},
    {"QuickPool(initial_size=1MiB, HOST)", RAP_ERR_INVALID, 30, "the parent comes before the options"},
    {"QuickPool(HOST, HOST)", RAP_ERR_INVALID, 17, "a strategy has one parent"},
    {"QuickPool(HOST, initial_size)", RAP_ERR_INVALID, 17, "a strategy has one parent"},
    {"QuickPool(HOST, initial_size=1MiB(2))", RAP_ERR_INVALID, 34, "expected ',' or ')'"},
    {"ThreadSafe(QuickPool(HOST, alignment=64) HOST)", RAP_ERR_INVALID, 42, "expected ',' or ')'"},
    {"HOST", RAP_ERR_INVALID, 1, "a spec names a strategy with its arguments"},
    {"QuickPool", RAP_ERR_INVALID, 1, "a spec names a strategy with its arguments"},
    {"QuickPool()", RAP_ERR_INVALID, 0, "needs a parent"},
    {"ThreadSafe(QuickPool(Bogus(HOST)))", RAP_ERR_NOT_FOUND, 0, "no strategy named 'Bogus'"},
    {"ThreadSafe(Bogus(QuickPool(HOST)))", RAP_ERR_NOT_FOUND, 0, "no strategy named 'Bogus'"},
    {"ThreadSafe(QuickPool(nosuch))", RAP_ERR_NOT_FOUND, 0, "nosuch"},
    {"ThreadSafe(QuickPool(HOST, bogus=1))", RAP_ERR_INVALID, 0, "bogus"},
    {"ThreadSafe(QuickPool(HOST, initial_size=lots))", RAP_ERR_INVALID, 0, "initial_size"},
    {"ThreadSafe(QuickPool(HOST), initial_size=1MiB)", RAP_ERR_INVALID, 0, "initial_size"},
    {"ThreadSafe(ThreadSafe(QuickPool(HOST)), x=1)", RAP_ERR_INVALID, 0, "'x'"},
    {"SizeLimiter(ResourceAwarePool(DynamicPoolList(HOST), cross_resource=maybe), limit=1MiB)",
     RAP_ERR_INVALID, 0, "cross_resource"},
    {"QuickPool(SizeLimiter(HOST), initial_size=1MiB)", RAP_ERR_INVALID, 0, "limit"},
};

/* Every name the chain could have made, for the check that none was left behind. */
static const char *const would_be[] = {
    "bad", "bad/QuickPool", "bad/ThreadSafe", "bad/ThreadSafe/QuickPool", "bad/Bogus",
    "bad/Bogus/QuickPool", "bad/QuickPool/Bogus", "bad/SizeLimiter/ResourceAwarePool",
    "bad/SizeLimiter/ResourceAwarePool/DynamicPoolList", "bad/QuickPool/SizeLimiter", "bad/HOST",
};

/* How many allocators the manager holds: the registry itself, so that "nothing was registered"
 * does not depend on guessing every name a chain could have made. */
static size_t registered(rap_manager *rm) {
  size_t n = 0;
  for (rap_allocator *a = rm->allocators; a != NULL; a = a->next) n++;
  return n;
}

RAP_TEST(Spec, MalformedSpecsRegisterNothing) {
  rap_manager *rm = tu_manager();
  tu_get(rm, "HOST");
  const size_t before = registered(rm);
  for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
    rap_allocator *a = (rap_allocator *)&rm;
    int st = rap_allocator_make_spec(rm, "bad", bads[i].spec, &a);
    if (st != bads[i].status)
      rap_test_fail(__FILE__, __LINE__, "'%s' gave %s, expected %s (%s)", bads[i].spec,
                    rap_status_name(st), rap_status_name(bads[i].status), rap_last_error());
    const char *err = rap_last_error();
    if (!rap_test_contains(err, bads[i].why))
      rap_test_fail(__FILE__, __LINE__, "'%s': '%s' does not say '%s'", bads[i].spec, err, bads[i].why);
    char col[32];
    snprintf(col, sizeof col, "column %d:", bads[i].column);
    if (bads[i].column != 0 && !rap_test_contains(err, col))
      rap_test_fail(__FILE__, __LINE__, "'%s': '%s' does not say '%s'", bads[i].spec, err, col);
    if (bads[i].column == 0 && rap_test_contains(err, "column"))
      rap_test_fail(__FILE__, __LINE__, "'%s': '%s' is not a syntax error", bads[i].spec, err);
    if (bads[i].column != 0 && !rap_test_contains(err, bads[i].spec))
      rap_test_fail(__FILE__, __LINE__, "'%s': '%s' does not quote the spec", bads[i].spec, err);
    RAP_CHECK(a == (rap_allocator *)&rm);
    for (size_t k = 0; k < sizeof would_be / sizeof would_be[0]; k++) absent(rm, would_be[k]);
    if (registered(rm) != before)
      rap_test_fail(__FILE__, __LINE__, "'%s' left %zu allocators behind", bads[i].spec,
                    registered(rm) - before);
  }
  TU_EXPECT(tu_get(rm, "HOST"), allocation_count, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Spec, NullArgumentsAndLongNames) {
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  RAP_CHECK_STATUS(rap_allocator_make_spec(NULL, "n", "QuickPool(HOST)", &a), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, NULL, "QuickPool(HOST)", &a), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "n", NULL, &a), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "n", "QuickPool(HOST)", NULL), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "", "QuickPool(HOST)", &a), RAP_ERR_INVALID);
  absent(rm, "n");
  /* A name of 250 characters fits; its inner allocator "<name>/QuickPool" does not. */
  char name[300];
  memset(name, 'n', sizeof name);
  name[250] = '\0';
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, name, "ThreadSafe(QuickPool(HOST))", &a),
                   RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "too long");
  absent(rm, name);
  rap_allocator *p = spec(rm, name, "QuickPool(HOST)");   /* no inner name needed */
  RAP_CHECK_OK(rap_allocator_destroy(p));
  name[250] = 'n';
  name[256] = '\0';
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, name, "QuickPool(HOST)", &a), RAP_ERR_INVALID);
  absent(rm, name);
  RAP_CHECK(a == NULL);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- names that already exist ---------------------------------------------------------------- */

RAP_TEST(Spec, TakenNamesExist) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_make(rm, "pool", "QuickPool", "HOST", NULL);
  rap_allocator *a = NULL;
  /* The outer name is taken: the inner level was made first, and is gone again. */
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "pool", "ThreadSafe(QuickPool(HOST))", &a),
                   RAP_ERR_EXISTS);
  RAP_CHECK_STR(rap_last_error(), "'pool'");
  absent(rm, "pool/QuickPool");
  RAP_CHECK(tu_get(rm, "pool") == pool);
  RAP_CHECK(strcmp(rap_allocator_strategy(pool), "QuickPool") == 0);
  /* An inner name is taken: nothing is made, the taken one is untouched. */
  rap_allocator *inner = tu_make(rm, "x/DynamicPoolList", "Fault", "HOST", NULL);
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "x", "ThreadSafe(DynamicPoolList(HOST))", &a),
                   RAP_ERR_EXISTS);
  RAP_CHECK_STR(rap_last_error(), "x/DynamicPoolList");
  absent(rm, "x");
  RAP_CHECK(tu_get(rm, "x/DynamicPoolList") == inner);
  /* Platform names are taken too. */
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "HOST", "QuickPool(HOST)", &a), RAP_ERR_EXISTS);
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "DEVICE", "QuickPool(HOST)", &a), RAP_ERR_EXISTS);
  RAP_CHECK(a == NULL);
  /* The same spec twice: the second is refused whole. */
  spec(rm, "twice", "ThreadSafe(ThreadSafe(HOST))");
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "twice", "ThreadSafe(ThreadSafe(HOST))", &a),
                   RAP_ERR_EXISTS);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A failed chain takes down only what it made: an existing allocator it names as a leaf stays,
 * even when its name looks like one the chain would have made. */
RAP_TEST(Spec, FailureKeepsExistingLeaves) {
  rap_manager *rm = tu_manager();
  rap_allocator *base = tu_make(rm, "t/base", "QuickPool", "HOST", NULL);
  rap_allocator *a = NULL;
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "t", "ThreadSafe(QuickPool(t/base), bogus=1)", &a),
                   RAP_ERR_INVALID);
  absent(rm, "t");
  absent(rm, "t/QuickPool");
  RAP_CHECK(tu_get(rm, "t/base") == base);
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "t", "ThreadSafe(ThreadSafe(t/base), bogus=1)", &a),
                   RAP_ERR_INVALID);
  absent(rm, "t/ThreadSafe");
  RAP_CHECK(tu_get(rm, "t/base") == base);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- the environment ------------------------------------------------------------------------ */

RAP_TEST(Spec, EnvironmentReplacesMake) {
  rap_manager *rm = tu_manager();
  RAP_CHECK(setenv("RAP_ALLOCATOR_MY_POOL", "QuickPool(HOST, initial_size=1MiB)", 1) == 0);
  rap_allocator *a = NULL;
  RAP_CHECK_OK(rap_allocator_make(rm, "my-pool", "DynamicPoolList", "HOST", NULL, &a));
  RAP_CHECK(strcmp(rap_allocator_strategy(a), "QuickPool") == 0);
  RAP_CHECK(strcmp(rap_allocator_name(a), "my-pool") == 0);
  RAP_CHECK(rap_allocator_parent(a) == tu_get(rm, "HOST"));
  void *p = tu_alloc(a, 10);
  TU_EXPECT(a, actual_bytes, tu_chunk(1 << 20, 256));   /* the environment's options */
  RAP_CHECK_OK(rap_deallocate(a, p, NULL));
  /* The same variable serves make_spec; names map '-', '.', '/' to '_' and letters to capitals, so
   * two names that map alike cannot live side by side: the second is refused, naming both. */
  rap_allocator *b = NULL;
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "My.Pool", "ThreadSafe(DynamicPoolList(HOST))", &b),
                   RAP_ERR_EXISTS);
  RAP_CHECK_STR(rap_last_error(), "RAP_ALLOCATOR_MY_POOL");
  RAP_CHECK_STR(rap_last_error(), "'my-pool'");
  RAP_CHECK_OK(rap_allocator_destroy(a));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "My.Pool", "ThreadSafe(DynamicPoolList(HOST))", &b));
  RAP_CHECK(strcmp(rap_allocator_strategy(b), "QuickPool") == 0);
  absent(rm, "My.Pool/DynamicPoolList");
  RAP_CHECK_OK(rap_allocator_destroy(b));
  RAP_CHECK_OK(rap_allocator_make(rm, "my/pool", "DynamicPoolList", "HOST", NULL, &b));
  RAP_CHECK(strcmp(rap_allocator_strategy(b), "QuickPool") == 0);
  RAP_CHECK_OK(rap_allocator_destroy(b));
  RAP_CHECK(unsetenv("RAP_ALLOCATOR_MY_POOL") == 0);
  /* Without the variable the program's own choice stands. */
  rap_allocator *c = tu_make(rm, "my_pool", "DynamicPoolList", "HOST", NULL);
  RAP_CHECK(strcmp(rap_allocator_strategy(c), "DynamicPoolList") == 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Sentences say what to fix: the variable a bad spec came from, the allocator an unknown option was
 * given to, the strategies there are, the exact name of a platform. */
RAP_TEST(Spec, SentencesNameWhatToFix) {
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  RAP_CHECK(setenv("RAP_ALLOCATOR_SCRATCH", "QuickPool(HOST, initail_size=1MiB)", 1) == 0);
  RAP_CHECK_STATUS(rap_allocator_make(rm, "scratch", "DynamicPoolList", "HOST", NULL, &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'initail_size'");
  RAP_CHECK_STR(rap_last_error(), "'scratch' (QuickPool)");
  RAP_CHECK_STR(rap_last_error(), "environment variable RAP_ALLOCATOR_SCRATCH");
  RAP_CHECK(unsetenv("RAP_ALLOCATOR_SCRATCH") == 0);
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "s", "ThreadSafe(QuickPool(HOST, bogus=1))", &a),
                   RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'s/QuickPool' (QuickPool): unknown option 'bogus'");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "q", "QuickPol", "HOST", NULL, &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "no strategy named 'QuickPol' \xe2\x80\x94 did you mean 'QuickPool'?");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "q", "Bogus", "HOST", NULL, &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "QuickPool, ");
  RAP_CHECK_STR(rap_last_error(), "ThreadCache");
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "h", "QuickPool(host)", &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "'HOST'");
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "h", "QuickPool(HOSTS)", &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "DEVICE::N");
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Spec, EnvironmentEdges) {
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  /* A malformed spec in the environment is refused like any other, and names its column. */
  RAP_CHECK(setenv("RAP_ALLOCATOR_BROKEN", "QuickPool(HOST", 1) == 0);
  RAP_CHECK_STATUS(rap_allocator_make(rm, "broken", "QuickPool", "HOST", NULL, &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "column 15");
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "broken", "QuickPool(HOST)", &a), RAP_ERR_INVALID);
  absent(rm, "broken");
  RAP_CHECK(unsetenv("RAP_ALLOCATOR_BROKEN") == 0);
  /* The environment wins even over a strategy the program could not have made. */
  RAP_CHECK(setenv("RAP_ALLOCATOR_FIXED", "DynamicPoolList(HOST, initial_size=4KiB)", 1) == 0);
  RAP_CHECK_OK(rap_allocator_make(rm, "fixed", "NoSuchStrategy", "nowhere", "what=ever", &a));
  RAP_CHECK(strcmp(rap_allocator_strategy(a), "DynamicPoolList") == 0);
  RAP_CHECK(unsetenv("RAP_ALLOCATOR_FIXED") == 0);
  /* An empty variable is no override. */
  RAP_CHECK(setenv("RAP_ALLOCATOR_EMPTY", "", 1) == 0);
  a = tu_make(rm, "empty", "DynamicPoolList", "HOST", NULL);
  RAP_CHECK(strcmp(rap_allocator_strategy(a), "DynamicPoolList") == 0);
  RAP_CHECK(unsetenv("RAP_ALLOCATOR_EMPTY") == 0);
  /* The variable of the name asked for replaces the whole chain; inner names are not looked up. */
  RAP_CHECK(setenv("RAP_ALLOCATOR_CHAIN_QUICKPOOL", "DynamicPoolList(HOST)", 1) == 0);
  spec(rm, "chain", "ThreadSafe(QuickPool(HOST))");
  expect(rm, "chain/QuickPool", "QuickPool", tu_get(rm, "HOST"));
  RAP_CHECK(unsetenv("RAP_ALLOCATOR_CHAIN_QUICKPOOL") == 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* rap_spec_check answers every malformed spec above as a make would: the same status, the same
 * reason, and for a syntax error the column with the spec quoted. */
RAP_TEST(Spec, CheckAnswersAsMakeWould) {
  for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
    int st = rap_spec_check(bads[i].spec);
    if (st != bads[i].status)
      rap_test_fail(__FILE__, __LINE__, "'%s' gave %s, expected %s", bads[i].spec,
                    rap_status_name(st), rap_status_name(bads[i].status));
    const char *err = rap_last_error();
    char col[32];
    snprintf(col, sizeof col, "column %d:", bads[i].column);
    if (!rap_test_contains(err, "rap_spec_check") || !rap_test_contains(err, bads[i].why) ||
        (bads[i].column != 0 && (!rap_test_contains(err, col) || !rap_test_contains(err, bads[i].spec))))
      rap_test_fail(__FILE__, __LINE__, "'%s': '%s' does not say rap_spec_check, '%s' (and for a "
                    "syntax error '%s' and the spec)", bads[i].spec, err, bads[i].why, col);
  }
  RAP_CHECK_OK(rap_spec_check("ThreadSafe(ResourceAwarePool(SizeLimiter(DEVICE::3, limit=50%), "
                              "initial_size=1GiB))"));
  RAP_CHECK_OK(rap_spec_check("  QuickPool( HOST ,initial_size = 1MiB )  "));
  RAP_CHECK_STATUS(rap_spec_check(NULL), RAP_ERR_INVALID);
  /* A long spec is quoted around the error. */
  char text[400];
  snprintf(text, sizeof text, "QuickPool(HOST, initial_size=%0300d", 7);
  RAP_CHECK_STATUS(rap_spec_check(text), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "column 330: expected ',' or ')'");
  RAP_CHECK_STR(rap_last_error(), "...");
}

/* A sentence of rap_spec_check names the part of the spec the user wrote, never the name the
 * check gave the chain it made ('spec', 'spec/QuickPool'): the outermost by its strategy, an inner
 * one by its strategy and the one it is under. */
RAP_TEST(Spec, CheckNamesThePartOfTheSpec) {
  static const bad said[] = {
      {"QuickPool(HOST, initial_size=banana)", RAP_ERR_INVALID, 0,
       "rap_spec_check: the spec's QuickPool: option 'initial_size' needs a size"},
      {"ThreadSafe(QuickPool(HOST, bogus=1))", RAP_ERR_INVALID, 0,
       "rap_spec_check: the spec's QuickPool (under ThreadSafe): unknown option 'bogus'"},
      {"ThreadSafe(QuickPool(SizeLimiter(HOST, limit=0x)))", RAP_ERR_INVALID, 0,
       "rap_spec_check: the spec's SizeLimiter (under QuickPool): option 'limit' needs a size"},
      {"Planned(HOST)", RAP_ERR_INVALID, 0, "rap_spec_check: the spec's Planned: plan=FILE is required"},
  };
  for (size_t i = 0; i < sizeof said / sizeof said[0]; i++) {
    int st = rap_spec_check(said[i].spec);
    if (st != said[i].status || !rap_test_contains(rap_last_error(), said[i].why) ||
        rap_test_contains(rap_last_error(), "'spec"))
      rap_test_fail(__FILE__, __LINE__, "'%s' gave %s '%s', expected %s with '%s'", said[i].spec,
                    rap_status_name(st), st ? rap_last_error() : "", rap_status_name(said[i].status),
                    said[i].why);
  }
}

/* The mistakes a new user makes, each refused by rap_spec_check with the status and sentence of
 * a make; device specs pass where no device is (their names and options are checked all the
 * same), and nothing stays made. */
RAP_TEST(Spec, CheckRefusesWhatMakeRefuses) {
  static const bad mistakes[] = {
      {"QuikPool(HOST)", RAP_ERR_NOT_FOUND, 0, "no strategy named 'QuikPool' \xe2\x80\x94 did you mean 'QuickPool'?"},
      {"QuickPool(host)", RAP_ERR_NOT_FOUND, 0, "platform names are exact: 'HOST'"},
      {"QuickPool(HOST, initial_size=64 MiB)", RAP_ERR_INVALID, 0, "takes its unit without a space"},
      {"QuickPool(HOST, foo=1)", RAP_ERR_INVALID, 0, "unknown option 'foo' (its options: initial_size"},
      {"QuickPool(HOST, alignment=3)", RAP_ERR_INVALID, 0, "'alignment' must be a power of two"},
      {"QuickPool(HOST, heuristic=sometimes)", RAP_ERR_INVALID, 0, "not 'sometimes'"},
      {"SizeLimiter(HOST, limt=1GiB)", RAP_ERR_INVALID, 0,
       "the spec's SizeLimiter: unknown option 'limt' \xe2\x80\x94 did you mean 'limit'?"},
      {"QuickPool()", RAP_ERR_INVALID, 0, "QuickPool needs a parent allocator"},
      {"QuickPool(HOST, initial_size=-1)", RAP_ERR_INVALID, 0, "not '-1'"},
      {"ResourceAwarePool(HOST, cross_resource=maybe)", RAP_ERR_INVALID, 0, "not 'maybe'"},
      {"QuickPool(DEVICE::x)", RAP_ERR_NOT_FOUND, 0, "DEVICE::N needs a device number"},
      {"StreamOrdered(pool=old)", RAP_ERR_INVALID, 0, "'pool' is 'default' (the device's) or 'new'"},
      {"StreamOrdered(release_threshold=soon)", RAP_ERR_INVALID, 0, "a size or 'max'"},
      {"QuickPool(StreamOrdered(devic=1))", RAP_ERR_INVALID, 0, "did you mean 'device'?"},
      {"QuickPool(DeviceVmm(peers=1+x))", RAP_ERR_INVALID, 0, "'peers' is 'all' or device numbers"},
      {"QuickPool(DeviceVmm(HOST))", RAP_ERR_INVALID, 0, "takes no parent ('HOST' was given)"},
      {"Pinned(mapped=2)", RAP_ERR_INVALID, 0, "option 'mapped' is 0 or 1"},
      {"ThreadCache(HOST, cache_blocks=0)", RAP_ERR_INVALID, 0, "the spec's ThreadCache: cache_blocks"},
  };
  for (size_t i = 0; i < sizeof mistakes / sizeof mistakes[0]; i++) {
    int st = rap_spec_check(mistakes[i].spec);
    if (st != mistakes[i].status || !rap_test_contains(rap_last_error(), mistakes[i].why) ||
        !rap_test_contains(rap_last_error(), "rap_spec_check: "))
      rap_test_fail(__FILE__, __LINE__, "'%s' gave %s '%s', expected %s with '%s'", mistakes[i].spec,
                    rap_status_name(st), st ? rap_last_error() : "", rap_status_name(mistakes[i].status),
                    mistakes[i].why);
  }
  static const char *const goods[] = {
      "QuickPool(DEVICE, initial_size=64GiB)",
      "ThreadCache(QuickPool(UM, alignment=512), max_size=64KiB)",
      "ResourceAwarePool(DEVICE::1, cross_resource=wait, wait_above=512MiB)",
      "QuickPool(StreamOrdered(device=1, pool=new, release_threshold=max, allow_opportunistic=0))",
      "QuickPool(DeviceVmm(device=0, reserve=1GiB, peers=1+2))",
      "DynamicPoolList(Pinned(mapped=1, portable=1))",
      "FixedPool(PINNED, object_size=64, objects_per_chunk=8)",
      "ThreadSafe(SizeLimiter(HOST_VMM, limit=1GiB))",
  };
  for (size_t i = 0; i < sizeof goods / sizeof goods[0]; i++)
    if (rap_spec_check(goods[i]) != RAP_OK)
      rap_test_fail(__FILE__, __LINE__, "'%s' was refused: %s", goods[i], rap_last_error());
}

/* A misspelt option is named before the sentence about the option it was meant to be, at make
 * and under any name. */
RAP_TEST(Spec, MisspeltOptionComesFirst) {
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  RAP_CHECK_STATUS(rap_allocator_make(rm, "lim", "SizeLimiter", "HOST", "limt=1GiB", &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'lim' (SizeLimiter): unknown option 'limt' \xe2\x80\x94 did you mean 'limit'?");
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "q", "QuickPool(HOST, initial_sise=1MiB)", &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "did you mean 'initial_size'?");
  /* One prefix for every sentence of a make: a strategy's own sentence takes the option's form. */
  RAP_CHECK_STATUS(rap_allocator_make(rm, "lim", "SizeLimiter", "HOST", NULL, &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'lim' (SizeLimiter): ");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "tc", "ThreadCache", "HOST", "cache_blocks=0", &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'tc' (ThreadCache): cache_blocks");
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Out of memory on a pool's first chunk names the pool and the option that sized it; a parent
 * with one child says so in the singular. */
RAP_TEST(Spec, FirstChunkAndBusyParentSentences) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = spec(rm, "pool", "QuickPool(SizeLimiter(HOST, limit=1MiB), initial_size=64MiB)");
  void *p = NULL;
  RAP_CHECK_STATUS(rap_allocate(pool, &p, 100, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "pool: the pool's first chunk, 64 MiB from its option initial_size, "
                "does not fit in 'pool/SizeLimiter'");
  TU_EXPECT(pool, chunk_count, 0);   /* nothing changed */
  TU_CHECK(pool);
  RAP_CHECK_STATUS(rap_allocator_destroy(tu_get(rm, "pool/SizeLimiter")), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "1 allocator still uses it");
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
