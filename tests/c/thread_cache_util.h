/* thread_cache_util.h — what the ThreadCache tests (test_thread_cache.c and
 * test_thread_cache_stress.c) share: the parent spec, a manager teardown that counts what it logs,
 * and an overlap test for blocks. */
#ifndef RAP_TEST_THREAD_CACHE_UTIL_H
#define RAP_TEST_THREAD_CACHE_UTIL_H

#include "test_util.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

/* The parent of most tests: alignment 16, so that classes in bytes are what the contract says.
 * 768, 1024, 3072 and 4096 bytes are classes (four per power of two); 100 KiB is above max_size. */
#define RAP16 "ResourceAwarePool(HOST, alignment=16, initial_size=1MiB, next_size=1MiB)"
#define SPEC_64K "ThreadCache(" RAP16 ", max_size=64KiB)"
#define BIG (100 * KiB)

static atomic_int warn_logs;
static char leak_log[512];    /* the last warning that names the allocator 'tc' */
static char first_log[512];   /* the first warning */

static void count_log(int level, const char *message, void *user) {
  (void)user;
  if (level < RAP_LOG_WARN) return;
  if (atomic_fetch_add(&warn_logs, 1) == 0) snprintf(first_log, sizeof first_log, "%s", message);
  if (strstr(message, "'tc'") != NULL) snprintf(leak_log, sizeof leak_log, "%s", message);
}

/* Destroys the manager with the log counted: the status, and how many warnings it logged. */
static int destroy_counted(rap_manager *rm, int *warnings) {
  atomic_store(&warn_logs, 0);
  leak_log[0] = first_log[0] = '\0';
  RAP_CHECK_OK(rap_log_set_handler(count_log, NULL));
  int st = rap_manager_destroy(rm);
  RAP_CHECK_OK(rap_log_set_handler(NULL, NULL));
  *warnings = atomic_load(&warn_logs);
  return st;
}

/* The manager goes; nothing leaked and nothing logged. */
static void destroy_clean(rap_manager *rm) {
  int warnings = 0;
  int st = destroy_counted(rm, &warnings);
  if (st != RAP_OK || warnings != 0)
    rap_test_fail(__FILE__, __LINE__, "rap_manager_destroy: %s with %d warnings, the first: %s",
                  rap_status_name(st), warnings, first_log);
}

static bool overlaps(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bn && y < x + an;
}

/* A block: where, and how many bytes. */
typedef struct span {
  void *p;
  size_t n;
} span;

#endif
