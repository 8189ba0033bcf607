/* host_mem.c — the one seam every host allocation of the library's own goes through.
 *
 * Records, maps, registries, events, queue nodes and names come from rapi_malloc and friends, so a
 * test can make the N-th of them fail (SQLite's and Lua's out-of-memory loops) and prove that every
 * failure is a status and changes nothing. The HOST platform's own bytes are user memory and do
 * not pass here: a Fault allocator fails those. The countdown is per thread, so a test on one
 * thread is not disturbed by queue workers or other threads.
 */
#include "rap_internal.h"

#include <stdlib.h>
#include <string.h>

static _Thread_local long countdown;   /* > 0: calls left before the failing one; 0: off */
static _Thread_local bool persist;     /* after the first failure, every later call fails too */
static _Thread_local bool failing;
static _Thread_local unsigned long calls;

void rapi_host_fail_at(long nth, bool keep_failing) {
  countdown = nth > 0 ? nth : 0;
  persist = keep_failing;
  failing = false;
}

unsigned long rapi_host_allocs(void) { return calls; }

static inline bool fail_now(void) {
  calls++;
  if (RAPI_LIKELY(countdown == 0 && !failing)) return false;
  if (failing) return persist;
  if (--countdown > 0) return false;
  failing = true;
  return true;
}

void *rapi_malloc(size_t bytes) { return fail_now() ? NULL : malloc(bytes); }

void *rapi_calloc(size_t n, size_t size) { return fail_now() ? NULL : calloc(n, size); }

void *rapi_realloc(void *p, size_t bytes) { return fail_now() ? NULL : realloc(p, bytes); }

char *rapi_strndup(const char *s, size_t n) {
  size_t len = strnlen(s, n);
  char *d = rapi_malloc(len + 1);
  if (d == NULL) return NULL;
  memcpy(d, s, len);
  d[len] = '\0';
  return d;
}

char *rapi_strdup(const char *s) { return rapi_strndup(s, strlen(s)); }
