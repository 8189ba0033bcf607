/* test_util.h — small helpers shared by the C test bodies: managers, stats, byte patterns, a PRNG.
 * Everything is static inline so that a file which uses only some of it compiles clean.
 */
#ifndef RAP_TEST_UTIL_H
#define RAP_TEST_UTIL_H

#include "rap_test.h"
#include "rap_testing.h"   /* the Fault calls */

#include <rap/strategy.h>   /* rap_allocator_alignment */

#include <stdint.h>
#include <string.h>

/* HOST promises malloc's alignment: 16. A pool of alignment A > 16 over HOST asks for a chunk of
 * usable + (A - 16) bytes, so that the first A-aligned address still leaves `usable` bytes. */
#define TU_HOST_ALIGN 16u

static inline size_t tu_chunk(size_t usable, size_t alignment) {
  return usable + (alignment > TU_HOST_ALIGN ? alignment - TU_HOST_ALIGN : 0);
}

static inline size_t tu_align(size_t n, size_t a) { return n == 0 ? a : (n + a - 1) / a * a; }

static inline rap_manager *tu_manager(void) {
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  return rm;
}

static inline rap_allocator *tu_make(rap_manager *rm, const char *name, const char *strategy,
                                     const char *parent, const char *options) {
  rap_allocator *a = NULL;
  RAP_CHECK_OK(rap_allocator_make(rm, name, strategy, parent, options, &a));
  RAP_CHECK(a != NULL);
  return a;
}

static inline rap_allocator *tu_get(rap_manager *rm, const char *name) {
  rap_allocator *a = NULL;
  RAP_CHECK_OK(rap_allocator_get(rm, name, &a));
  return a;
}

static inline rap_stats tu_stats(rap_allocator *a) {
  rap_stats s;
  memset(&s, 0xee, sizeof s);
  RAP_CHECK_OK(rap_allocator_stats(a, &s));
  return s;
}

static inline void *tu_alloc(rap_allocator *a, size_t bytes) {
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(a, &p, bytes, NULL));
  RAP_CHECK(p != NULL);
  return p;
}

static inline size_t tu_requests(rap_allocator *fault) {
  size_t n = 0;
  RAP_CHECK_OK(rap_fault_requests(fault, &n));
  return n;
}

/* ---- the behaviour suite's parameter sets -----------------------------------------------------
 * Every pool behaviour runs over {QuickPool, DynamicPoolList} x {HOST, Fault}: the pool's parent is
 * HOST itself, or "pf", a Fault allocator over HOST with no faults configured. A body written with
 * RAP_TEST_POOLS(Suite, Name) sees `param`; where a figure legitimately differs between the
 * strategies (DynamicPoolList is best fit, QuickPool good fit) it asks param->best_fit. */
typedef struct tu_pool {
  const char *label;
  const char *strategy;
  bool fault;      /* the parent is a Fault over HOST */
  bool best_fit;   /* DynamicPoolList: the smallest free block that fits, lowest address first */
} tu_pool;

__attribute__((unused)) static const tu_pool tu_pools[] = {
    {"QuickPool_HOST", "QuickPool", false, false},
    {"DynamicPoolList_HOST", "DynamicPoolList", false, true},
    {"QuickPool_Fault", "QuickPool", true, false},
    {"DynamicPoolList_Fault", "DynamicPoolList", true, true},
};

#define RAP_TEST_POOLS(suite, name) RAP_TEST_P(suite, name, tu_pool, tu_pools)

/* The allocator a pool of this parameter set sits on (made on first use). */
static inline rap_allocator *tu_parent(rap_manager *rm, const tu_pool *P) {
  rap_allocator *a = NULL;
  if (!P->fault) return tu_get(rm, "HOST");
  if (rap_allocator_get(rm, "pf", &a) == RAP_OK) return a;
  return tu_make(rm, "pf", "Fault", "HOST", NULL);
}

/* A pool of the parameter set's strategy over `parent`, or over tu_parent when parent is NULL. */
static inline rap_allocator *tu_pool_make(rap_manager *rm, const tu_pool *P, const char *name,
                                          const char *parent, const char *options) {
  if (parent == NULL) parent = rap_allocator_name(tu_parent(rm, P));
  return tu_make(rm, name, P->strategy, parent, options);
}

/* What a pool of `alignment` over `parent` asks for a chunk of `usable` bytes: the padding is the
 * difference between its alignment and what the parent promises (HOST and a Fault over it: 16). */
static inline size_t tu_chunk_on(rap_allocator *parent, size_t usable, size_t alignment) {
  size_t pa = rap_allocator_alignment(parent);
  return usable + (alignment > pa ? alignment - pa : 0);
}

/* One field of an allocator's stats: TU_EXPECT(pool, chunk_count, 3). */
#define TU_EXPECT(a, field, value) RAP_CHECK_EQ(tu_stats(a).field, (value))
#define TU_CHECK(a) RAP_CHECK_OK(rap_allocator_check(a))
#define TU_STATS_EQ(x, y) RAP_CHECK(memcmp(&(x), &(y), sizeof(rap_stats)) == 0)

/* A byte pattern that differs per block and per offset. */
static inline unsigned char tu_byte(unsigned seed, size_t i) {
  return (unsigned char)(seed * 131u + (unsigned)i * 7u + (unsigned)(i >> 8) + 1u);
}

static inline void tu_fill(void *p, size_t n, unsigned seed) {
  unsigned char *b = p;
  for (size_t i = 0; i < n; i++) b[i] = tu_byte(seed, i);
}

static inline bool tu_intact(const void *p, size_t n, unsigned seed) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != tu_byte(seed, i)) return false;
  return true;
}

/* xorshift64*: fixed seeds make every run the same. */
static inline uint64_t tu_rand(uint64_t *state) {
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * UINT64_C(2685821657736338717);
}


/* ---- reports from worker threads: a worker counts what went wrong, the body checks after ----- */
typedef struct tu_report {
  int errors, first_status, first_line;
} tu_report;

static inline void tu_report_error(tu_report *rep, int status, int line) {
  if (rep->errors++ == 0) {
    rep->first_status = status;
    rep->first_line = line;
  }
}

/* A status other than the one wanted; a broken condition reports RAP_ERR_CORRUPT. */
#define EXPECT_ST(rep, expr, want)                                                                 \
  do {                                                                                             \
    int st_ = (expr);                                                                              \
    if (st_ != (want)) tu_report_error((rep), st_, __LINE__);                                      \
  } while (0)
#define EXPECT_TRUE(rep, cond)                                                                     \
  do {                                                                                             \
    if (!(cond)) tu_report_error((rep), RAP_ERR_CORRUPT, __LINE__);                                \
  } while (0)

static inline void tu_check_reports(const char *who, const tu_report *reps, unsigned n) {
  for (unsigned i = 0; i < n; i++)
    if (reps[i].errors != 0)
      rap_test_fail(__FILE__, __LINE__, "%s %u: %d errors, the first %s at line %d", who, i,
                    reps[i].errors, rap_status_name(reps[i].first_status), reps[i].first_line);
}

/* The statistics of a on r, with every field poisoned first (a field left unwritten shows). */
static inline rap_stats tu_rstats(rap_allocator *a, rap_resource *r) {
  rap_stats s;
  memset(&s, 0xee, sizeof s);
  RAP_CHECK_OK(rap_allocator_resource_stats(a, r, &s));
  return s;
}

#endif /* RAP_TEST_UTIL_H */
