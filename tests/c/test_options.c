/* test_options.c — option strings: sizes, separators, unknown and repeated keys, bad values.
 *
 * A probe strategy, registered per test, reads the keys a..e as sizes, n as a whole number and s
 * as a string, and copies what it read to `seen`, so every parse is checked by value.
 */
#include "gate.h"
#include "test_util.h"

#include <rap/strategy.h>
#include <stdio.h>
#include <string.h>

static struct {
  size_t size[5];
  uint64_t n;
  char s[64];
} seen;

static int probe_init(rap_allocator *self, void *state, rap_options *opts) {
  (void)self;
  (void)state;
  static const char *const keys[] = {"a", "b", "c", "d", "e"};
  memset(&seen, 0, sizeof seen);
  for (int i = 0; i < 5; i++) {
    seen.size[i] = 7;   /* the default, left alone when the key is absent */
    int st = rap_options_get_size(opts, keys[i], &seen.size[i]);
    if (st != RAP_OK) return st;
  }
  seen.n = 9;
  int st = rap_options_get_uint(opts, "n", &seen.n);
  if (st != RAP_OK) return st;
  const char *s = "none";
  st = rap_options_get_string(opts, "s", &s);
  if (st != RAP_OK) return st;
  snprintf(seen.s, sizeof seen.s, "%s", s);
  return RAP_OK;
}
static void probe_fini(rap_allocator *self, void *state) {
  (void)self;
  (void)state;
}
static int probe_allocate(void *state, void **out, size_t bytes, rap_resource *r) {
  (void)state, (void)out, (void)bytes, (void)r;
  return rap_error_set(RAP_ERR_UNSUPPORTED, "Probe does not allocate");
}
static int probe_deallocate(void *state, void *ptr, rap_resource *r) {
  (void)state, (void)ptr, (void)r;
  return rap_error_set(RAP_ERR_UNKNOWN_POINTER, "Probe owns nothing");
}
static int probe_stats(void *state, rap_stats *out) {
  (void)state;
  memset(out, 0, sizeof *out);
  return RAP_OK;
}
static int probe_owns(void *state, const void *ptr) {
  (void)state, (void)ptr;
  return 0;
}

static const rap_strategy probe = {
    .version = RAP_STRATEGY_VERSION, .name = "Probe", .state_size = 8,
    .init = probe_init, .fini = probe_fini, .allocate = probe_allocate,
    .deallocate = probe_deallocate, .stats = probe_stats, .owns = probe_owns,
};

static rap_manager *probe_manager(void) {
  rap_manager *rm = tu_manager();
  RAP_CHECK_OK(rap_strategy_register(rm, &probe));
  return rm;
}

/* Makes a probe with `options`, checks the status, and destroys it again on success. */
static int probe_parse(rap_manager *rm, const char *options) {
  rap_allocator *a = NULL;
  int st = rap_allocator_make(rm, "probe", "Probe", NULL, options, &a);
  if (st == RAP_OK) RAP_CHECK_OK(rap_allocator_destroy(a));
  else RAP_CHECK(a == NULL);
  return st;
}

RAP_TEST(Options, SizesAndUnits) {
  rap_manager *rm = probe_manager();
  RAP_CHECK_OK(probe_parse(rm, "a=4096 b=64KiB c=1MiB d=1GiB e=1KB"));
  RAP_CHECK_EQ(seen.size[0], 4096);
  RAP_CHECK_EQ(seen.size[1], 65536);
  RAP_CHECK_EQ(seen.size[2], 1048576);
  RAP_CHECK_EQ(seen.size[3], 1073741824);
  RAP_CHECK_EQ(seen.size[4], 1000);
  RAP_CHECK_OK(probe_parse(rm, "a=17B b=3MB c=2GB d=0 e=1TiB"));
  RAP_CHECK_EQ(seen.size[0], 17);
  RAP_CHECK_EQ(seen.size[1], 3000000);
  RAP_CHECK_EQ(seen.size[2], 2000000000);
  RAP_CHECK_EQ(seen.size[3], 0);
  RAP_CHECK_EQ(seen.size[4], (size_t)1 << 40);
  RAP_CHECK_OK(probe_parse(rm, "a=4K b=2M c=3G d=1kib e=5mib"));   /* short and any-case units */
  RAP_CHECK_EQ(seen.size[0], 4096);
  RAP_CHECK_EQ(seen.size[1], 2u << 20);
  RAP_CHECK_EQ(seen.size[2], (size_t)3 << 30);
  RAP_CHECK_EQ(seen.size[3], 1024);
  RAP_CHECK_EQ(seen.size[4], 5u << 20);
  RAP_CHECK_OK(probe_parse(rm, NULL));   /* no options: every default stays */
  RAP_CHECK_EQ(seen.size[0], 7);
  RAP_CHECK_EQ(seen.n, 9);
  RAP_CHECK(strcmp(seen.s, "none") == 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Options, Separators) {
  rap_manager *rm = probe_manager();
  RAP_CHECK_OK(probe_parse(rm, "a=1,b=2, c=3 ,d=4\te=5"));
  for (int i = 0; i < 5; i++) RAP_CHECK_EQ(seen.size[i], i + 1);
  RAP_CHECK_OK(probe_parse(rm, "  ,, n=42 ,,  s=hello  ,"));
  RAP_CHECK_EQ(seen.n, 42);
  RAP_CHECK(strcmp(seen.s, "hello") == 0);
  RAP_CHECK_OK(probe_parse(rm, ""));
  RAP_CHECK_EQ(seen.size[0], 7);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* "a=64 MiB" is two options to the parser; the sentence says how to write it. A lone word after
 * a value that is not a bare number, or that is no unit, is an ordinary unknown key. */
RAP_TEST(Options, SpaceBeforeTheUnitIsExplained) {
  rap_manager *rm = probe_manager();
  RAP_CHECK_STATUS(probe_parse(rm, "n=1 a=64 MiB"), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'a=64 MiB': a size takes its unit without a space (a=64MiB)");
  RAP_CHECK_STATUS(probe_parse(rm, "b=1 kb"), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "(b=1kb)");
  RAP_CHECK_STATUS(probe_parse(rm, "s=x MiB"), RAP_ERR_INVALID);
  RAP_CHECK(strstr(rap_last_error(), "without a space") == NULL);
  RAP_CHECK_STATUS(probe_parse(rm, "a=64 banana"), RAP_ERR_INVALID);
  RAP_CHECK(strstr(rap_last_error(), "without a space") == NULL);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Options, UnknownKeyIsNamed) {
  rap_manager *rm = probe_manager();
  RAP_CHECK_STATUS(probe_parse(rm, "a=1 initail_size=4KiB"), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "initail_size");
  RAP_CHECK_STATUS(probe_parse(rm, "flag"), RAP_ERR_INVALID);   /* a key with no value */
  RAP_CHECK_STR(rap_last_error(), "flag");
  RAP_CHECK_STATUS(probe_parse(rm, "=5"), RAP_ERR_INVALID);
  RAP_CHECK(strlen(rap_last_error()) > 0);
  rap_allocator *gone = NULL;
  RAP_CHECK_STATUS(rap_allocator_get(rm, "probe", &gone), RAP_ERR_NOT_FOUND);
  /* The same for a built-in strategy. */
  rap_allocator *pool = NULL;
  RAP_CHECK_STATUS(rap_allocator_make(rm, "pool", "QuickPool", "HOST", "initial_size=1MiB bogus=3",
                                      &pool), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "bogus");
  RAP_CHECK(pool == NULL);
  RAP_CHECK_STATUS(rap_allocator_make(rm, "f", "Fault", "HOST", "fail_nxt=1", &pool), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "fail_nxt");
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Options, MalformedValuesNameTheKey) {
  static const struct {
    const char *options, *key;
  } bad[] = {
      {"a=12XB", "'a'"},  {"b=", "'b'"},       {"c", "'c'"},          {"d=KiB", "'d'"},
      {"e=-4", "'e'"},    {"a=1.5MiB", "'a'"}, {"b=4 KiB", "KiB"},    {"c=0x10", "'c'"},
      {"d=99999999999999999999", "'d'"},       {"e=17179869184GiB", "'e'"},
      {"n=4K", "'n'"},    {"n=-1", "'n'"},     {"n=", "'n'"},         {"n=1e3", "'n'"},
      {"s=", "'s'"},      {"s", "'s'"},
  };
  rap_manager *rm = probe_manager();
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    RAP_CHECK_STATUS(probe_parse(rm, bad[i].options), RAP_ERR_INVALID);
    RAP_CHECK_STR(rap_last_error(), bad[i].key);
  }
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Options, KeyGivenTwice) {
  rap_manager *rm = probe_manager();
  RAP_CHECK_STATUS(probe_parse(rm, "a=1 b=2 a=1"), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'a'");
  RAP_CHECK_STR(rap_last_error(), "twice");
  rap_allocator *pool = NULL;
  RAP_CHECK_STATUS(rap_allocator_make(rm, "pool", "QuickPool", "HOST",
                                      "alignment=256,initial_size=1MiB,alignment=512", &pool),
                   RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "alignment");
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Options, PoolOptionsTakeEffect) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_make(rm, "pool", "QuickPool", "HOST",
                                "initial_size=1MiB,next_size=64KiB alignment=512");
  void *a = tu_alloc(pool, 1);
  RAP_CHECK((uintptr_t)a % 512 == 0);
  TU_EXPECT(pool, actual_bytes, tu_chunk(1 << 20, 512));
  TU_EXPECT(pool, used_bytes, 512);
  void *b = tu_alloc(pool, (1 << 20) - 512);   /* fills the first chunk */
  void *c = tu_alloc(pool, 1);                 /* next_size */
  TU_EXPECT(pool, actual_bytes, tu_chunk(1 << 20, 512) + tu_chunk(65536, 512));
  RAP_CHECK_EQ(rap_allocator_alignment(pool), 512);
  RAP_CHECK(strcmp(rap_allocator_strategy(pool), "QuickPool") == 0);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Options, BadPoolSettings) {
  static const struct {
    const char *options, *key;
  } bad[] = {
      {"alignment=3", "alignment"},        {"alignment=0", "alignment"},
      {"alignment=2GiB", "alignment"},     {"alignment=384", "alignment"},
      {"initial_size=8EiB", "initial_size"}, {"initial_size=4611686018427387904", "initial_size"},
      {"next_size=10000000TiB", "next_size"}, {"initial_size=lots", "initial_size"},
  };
  rap_manager *rm = tu_manager();
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    rap_allocator *pool = NULL;
    RAP_CHECK_STATUS(rap_allocator_make(rm, "pool", "QuickPool", "HOST", bad[i].options, &pool),
                     RAP_ERR_INVALID);
    RAP_CHECK_STR(rap_last_error(), bad[i].key);
    RAP_CHECK(pool == NULL);
  }
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A value equal to what a strategy once used to mean "not given" is a value like any other:
 * wait_above=SIZE_MAX means the pool never waits (it grows), where leaving it out waits once the
 * first chunk is full. A block pending on a busy queue, asked for by another queue, shows which. */
RAP_TEST(Options, LargestValueIsUsedNotTakenForAbsent) {
  static const struct {
    const char *wait_above;
    bool waits;
  } cases[] = {{"", true}, {", wait_above=18446744073709551615", false}};
  rap_manager *rm = tu_manager();
  rap_resource *q, *q2;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q2));
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char spec[256];
    snprintf(spec, sizeof spec, "ResourceAwarePool(HOST, initial_size=64KiB, next_size=64KiB, "
             "cross_resource=wait%s)", cases[i].wait_above);
    rap_allocator *pool;
    RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", spec, &pool));
    gate g;
    gate_init(&g);
    RAP_CHECK_OK(rap_resource_submit(q, gate_job, &g));   /* q is busy until the gate opens */
    void *a = NULL, *b = NULL;
    RAP_CHECK_OK(rap_allocate(pool, &a, 60000, q));
    RAP_CHECK_OK(rap_deallocate(pool, a, q));               /* pending on q */
    RAP_CHECK_OK(rap_allocate(pool, &b, 60000, q2));
    if (cases[i].waits != (b == a))
      rap_test_fail(__FILE__, __LINE__, "%s: q2 %s q's pending block", spec, b == a ? "took" : "did not take");
    TU_EXPECT(pool, chunk_count, cases[i].waits ? 1 : 2);
    gate_open(&g);
    RAP_CHECK_OK(rap_resource_synchronize(q));
    RAP_CHECK_OK(rap_deallocate(pool, b, q2));
    RAP_CHECK_OK(rap_resource_synchronize(q2));
    RAP_CHECK_OK(rap_allocator_destroy(pool));
    gate_destroy(&g);
  }
  RAP_CHECK_OK(rap_resource_destroy(q));
  RAP_CHECK_OK(rap_resource_destroy(q2));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
