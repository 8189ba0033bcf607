/* rap_test.c — the C half of the test shim: the registry of test bodies and the jump out of a
 * failed check. The jump stays inside C frames: rap_test_run sets it, the body's check takes it.
 */
#include "rap_test.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
  const char *suite, *name, *file;
  int line;
  rap_test_fn fn;
  rap_test_pfn pfn;      /* parameterised: pfn(param) instead of fn() */
  const void *param;
} entry;

static entry *entries;
static size_t count, cap;
static jmp_buf *current_jump;
static char *current_msg;
static size_t current_cap;
static const char *fail_file;
static int fail_line;

static void add(entry e) {
  if (count == cap) {
    cap = cap ? cap * 2 : 64;
    entries = realloc(entries, cap * sizeof *entries);
    if (entries == NULL) abort();
  }
  entries[count++] = e;
}

void rap_test_register(const char *suite, const char *name, rap_test_fn fn, const char *file, int line) {
  add((entry){suite, name, file, line, fn, NULL, NULL});
}

void rap_test_register_param(const char *suite, const char *name, const char *label, rap_test_pfn fn,
                             const void *param, const char *file, int line) {
  size_t n = strlen(name) + strlen(label) + 2;
  char *full = malloc(n);   /* lives as long as the registry */
  if (full == NULL) abort();
  snprintf(full, n, "%s/%s", name, label);
  add((entry){suite, full, file, line, NULL, fn, param});
}

size_t rap_test_count(void) { return count; }

void rap_test_get(size_t i, const char **suite, const char **name, rap_test_fn *fn, const char **file,
                  int *line) {
  *suite = entries[i].suite;
  *name = entries[i].name;
  *fn = entries[i].fn;
  *file = entries[i].file;
  *line = entries[i].line;
}

void rap_test_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(current_msg, current_cap, fmt, ap);
  va_end(ap);
  fail_file = file;
  fail_line = line;
  longjmp(*current_jump, 1);
}

void rap_test_skip(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(current_msg, current_cap, fmt, ap);
  va_end(ap);
  longjmp(*current_jump, 2);
}

static int run(rap_test_fn fn, rap_test_pfn pfn, const void *param, char *msg, size_t msg_cap,
               const char **file, int *line) {
  jmp_buf jump;
  current_jump = &jump;
  current_msg = msg;
  current_cap = msg_cap;
  msg[0] = '\0';
  int r = setjmp(jump);
  if (r == 0) {
    if (pfn) pfn(param);
    else fn();
  }
  current_jump = NULL;
  *file = fail_file;
  *line = fail_line;
  return r;
}

int rap_test_run(rap_test_fn fn, char *msg, size_t msg_cap, const char **file, int *line) {
  return run(fn, NULL, NULL, msg, msg_cap, file, line);
}

int rap_test_run_at(size_t i, char *msg, size_t msg_cap, const char **file, int *line) {
  return run(entries[i].fn, entries[i].pfn, entries[i].param, msg, msg_cap, file, line);
}

bool rap_test_contains(const char *haystack, const char *needle) {
  return haystack != NULL && needle != NULL && strstr(haystack, needle) != NULL;
}

/* Under AddressSanitizer and ThreadSanitizer a huge malloc aborts the process unless
 * allocator_may_return_null is set; the tests ask for sizes near SIZE_MAX on purpose and expect
 * RAP_ERR_NOMEM, as from glibc. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "allocator_may_return_null=1"; }
