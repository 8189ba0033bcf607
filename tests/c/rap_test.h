/* rap_test.h — the shim that lets test bodies be written in C and run under GoogleTest.
 *
 * RAP_TEST(Suite, Name) { ... } defines a test that registers itself at load time; the C++ runner
 * (tests/runner.cpp) hands each one to GoogleTest by name. A failed check records file, line and a
 * message (with rap_last_error()) and ends the body; RAP_SKIP ends it as skipped.
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
void rap_test_register(const char *suite, const char *name, rap_test_fn fn, const char *file, int line);
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
size_t rap_test_count(void);
void rap_test_get(size_t i, const char **suite, const char **name, rap_test_fn *fn, const char **file,
                  int *line);

#define RAP_TEST(suite, name)                                                                      \
  static void suite##__##name(void);                                                               \
  __attribute__((constructor)) static void suite##__##name##__reg(void) {                          \
    rap_test_register(#suite, #name, suite##__##name, __FILE__, __LINE__);                         \
  }                                                                                                \
  static void suite##__##name(void)

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
