/* shared_helpers.h — small helpers that host and CUDA test files share: making a spec or skipping
 * where no device is usable, and finding a helper program the tests start. */
#ifndef RAP_TEST_SHARED_HELPERS_H
#define RAP_TEST_SHARED_HELPERS_H

#include "rap_test.h"

#include <rap/rap.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Makes spec, or skips (the manager destroyed) if no device is usable. */
static inline rap_allocator *make_or_skip(rap_manager *rm, const char *name, const char *spec) {
  rap_allocator *a = NULL;
  int st = rap_allocator_make_spec(rm, name, spec, &a);
  if (st == RAP_ERR_UNSUPPORTED) {
    char why[512];
    snprintf(why, sizeof why, "%s", rap_last_error());
    RAP_CHECK_OK(rap_manager_destroy(rm));
    RAP_SKIP("no CUDA device: %s", why);
  }
  RAP_CHECK_OK(st);
  return a;
}

/* RAP_DEFAULT_DEVICE_SPEC on device 0 ("{device}" made 0), inside wrap ("%s" for the spec). */
static inline void default_spec_on_0(char *buf, size_t cap, const char *wrap) {
  const char *d = RAP_DEFAULT_DEVICE_SPEC, *at = strstr(d, "{device}");
  RAP_CHECK(at != NULL);
  char spec[512];
  int n = snprintf(spec, sizeof spec, "%.*s0%s", (int)(at - d), d, at + strlen("{device}"));
  RAP_CHECK(n > 0 && (size_t)n < sizeof spec);
  n = snprintf(buf, cap, wrap, spec);
  RAP_CHECK(n > 0 && (size_t)n < cap);
}

/* A helper program: beside this test binary (a build carried to another machine keeps them
 * together), else where CMake built it. */
static inline void peer_path(char *buf, size_t cap, const char *name, const char *built) {
  ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
  if (n > 0) {
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash != NULL && (size_t)(slash + 1 - buf) + strlen(name) < cap) {
      strcpy(slash + 1, name);
      if (access(buf, X_OK) == 0) return;
    }
  }
  snprintf(buf, cap, "%s", built);
}

#endif
