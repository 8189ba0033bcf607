/* rap_test.h — the shim that lets test bodies be written in C and run under GoogleTest.
 *
 * RAP_TEST(Suite, Name) { ... } defines a test that registers itself at load time; the C++ runner
 * (tests/runner.cpp) hands each one to GoogleTest by name. RAP_TEST_P(Suite, Name, type, params)
 * { ... } defines one body run over every element of a static array of parameter sets, each
 * registered as its own case "Suite.Name/label" and given `param` (a const type *); the type needs
 * a `label` member, a string that names the set. A failed check records file, line and a message
 * (with rap_last_error()) and ends the body; RAP_SKIP ends it as skipped. Checks end the body only
 * from the thread that runs it: worker threads must report back instead.
 */
#ifndef RAP_TEST_H
#define RAP_TEST_H

#include <rap/rap.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*rap_test_fn)(void);
typedef void (*rap_test_pfn)(const void *param);
void rap_test_register(const char *suite, const char *name, rap_test_fn fn, const char *file, int line);
/* Registers "name/label" running fn(param). */
void rap_test_register_param(const char *suite, const char *name, const char *label, rap_test_pfn fn,
                             const void *param, const char *file, int line);
void rap_test_fail(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4), noreturn))
#endif
    ;
void rap_test_skip(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2), noreturn))
#endif
    ;

/* For the runner: runs fn, returns 0 passed, 1 failed, 2 skipped, with the message in msg. */
int  rap_test_run(rap_test_fn fn, char *msg, size_t cap, const char **file, int *line);
int  rap_test_run_at(size_t i, char *msg, size_t cap, const char **file, int *line);
size_t rap_test_count(void);
/* *fn is NULL for a parameterised case: run it with rap_test_run_at. */
void rap_test_get(size_t i, const char **suite, const char **name, rap_test_fn *fn, const char **file,
                  int *line);

#define RAP_TEST(suite, name)                                                                      \
  static void suite##__##name(void);                                                               \
  __attribute__((constructor)) static void suite##__##name##__reg(void) {                          \
    rap_test_register(#suite, #name, suite##__##name, __FILE__, __LINE__);                         \
  }                                                                                                \
  static void suite##__##name(void)

#define RAP_TEST_P(suite, name, type, params)                                                      \
  static void suite##__##name(const type *param);                                                  \
  static void suite##__##name##__thunk(const void *p) { suite##__##name((const type *)p); }        \
  __attribute__((constructor)) static void suite##__##name##__reg(void) {                          \
    for (size_t i_ = 0; i_ < sizeof(params) / sizeof((params)[0]); i_++)                           \
      rap_test_register_param(#suite, #name, (params)[i_].label, suite##__##name##__thunk,         \
                              &(params)[i_], __FILE__, __LINE__);                                  \
  }                                                                                                \
  static void suite##__##name(const type *param)

#define RAP_CHECK(cond)                                                                            \
  do {                                                                                             \
    if (!(cond)) rap_test_fail(__FILE__, __LINE__, "check failed: %s", #cond);                    \
  } while (0)

#define RAP_CHECK_STATUS(expr, want)                                                               \
  do {                                                                                             \
    int got_ = (expr);                                                                             \
    if (got_ != (want))                                                                            \
      rap_test_fail(__FILE__, __LINE__, "%s returned %s, expected %s (last error: %s)", #expr,     \
                    rap_status_name(got_), rap_status_name(want), rap_last_error());              \
  } while (0)

#define RAP_CHECK_OK(expr) RAP_CHECK_STATUS(expr, RAP_OK)

#define RAP_CHECK_EQ(a, b)                                                                         \
  do {                                                                                             \
    unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);                 \
    if (a_ != b_)                                                                                  \
      rap_test_fail(__FILE__, __LINE__, "%s == %s failed: %llu vs %llu", #a, #b, a_, b_);         \
  } while (0)

#define RAP_CHECK_STR(haystack, needle)                                                            \
  do {                                                                                             \
    if (!rap_test_contains((haystack), (needle)))                                                  \
      rap_test_fail(__FILE__, __LINE__, "'%s' does not contain '%s'", (haystack), (needle));      \
  } while (0)

#define RAP_SKIP(...) rap_test_skip(__VA_ARGS__)

bool rap_test_contains(const char *haystack, const char *needle);

#ifdef __cplusplus
}
#endif
#endif /* RAP_TEST_H */
