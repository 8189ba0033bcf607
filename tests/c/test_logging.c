/* test_logging.c — what rap says through its logger: at RAP_LOG_LEVEL=debug, growth, release,
 * fences and cross-resource waits each say something; a RAP_LOG_LEVEL that is no level is a
 * warning, not silence; a wrong-resource sentence names both resources by kind and id.
 */
#define _POSIX_C_SOURCE 200809L
#include "gate.h"
#include "test_util.h"

#include <rap/strategy.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rapi_log_read_env(void);   /* the internal hook: read RAP_LOG_LEVEL again */

typedef struct captured {
  char text[8192];
  size_t len;
  int warnings;
} captured;

static void capture(int level, const char *message, void *user) {
  captured *c = user;
  if (level == RAP_LOG_WARN) c->warnings++;
  int n = snprintf(c->text + c->len, sizeof c->text - c->len, "%s\n", message);
  if (n > 0 && c->len + (size_t)n < sizeof c->text) c->len += (size_t)n;
}

RAP_TEST(Logging, DebugLevelSaysWhatThePoolDoes) {
  static captured c;
  memset(&c, 0, sizeof c);
  RAP_CHECK_OK(rap_log_set_handler(capture, &c));
  int before = rap_log_get_level();
  RAP_CHECK_OK(rap_log_set_level(RAP_LOG_DEBUG));
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_make(rm, "pool", "ResourceAwarePool", "HOST",
                                "initial_size=64KiB next_size=64KiB heuristic=never "
                                "cross_resource=wait wait_above=1KiB");
  rap_resource *q1, *q2;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q1));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q2));
  gate g;
  gate_init(&g);
  RAP_CHECK_OK(rap_resource_submit(q1, gate_job, &g));
  void *x, *y;
  RAP_CHECK_OK(rap_allocate(pool, &x, 64 * 1024, q1));        /* grows: 64 KiB and 240 B of padding */
  RAP_CHECK_OK(rap_deallocate(pool, x, q1));                  /* pending on the busy q1 */
  RAP_CHECK_OK(rap_allocate(pool, &y, 64 * 1024, q2));        /* fences q1, q2 waits (queued) */
  gate_open(&g);
  RAP_CHECK_OK(rap_deallocate(pool, y, q2));
  RAP_CHECK_OK(rap_resource_synchronize(q2));
  RAP_CHECK_OK(rap_release(pool));                            /* the chunk goes back */
  RAP_CHECK_OK(rap_manager_destroy(rm));
  gate_destroy(&g);
  RAP_CHECK_OK(rap_log_set_level(before));
  RAP_CHECK_OK(rap_log_set_handler(NULL, NULL));
  RAP_CHECK_STR(c.text, "pool: grew by a chunk of 64.2 KiB from 'HOST' (1 chunks");
  RAP_CHECK_STR(c.text, "pool: fenced batch 1 (1 pending blocks) on host_async resource #1");
  RAP_CHECK_STR(c.text, "cross_resource=wait: host_async resource #2 waits for host_async resource #1 (queued)");
  RAP_CHECK_STR(c.text, "pool: gave a chunk of 64.2 KiB back to 'HOST'");
}

RAP_TEST(Logging, UnknownLevelIsAWarning) {
  static captured c;
  memset(&c, 0, sizeof c);
  int before = rap_log_get_level();
  RAP_CHECK_OK(rap_log_set_handler(capture, &c));
  setenv("RAP_LOG_LEVEL", "verbose", 1);
  rapi_log_read_env();
  unsetenv("RAP_LOG_LEVEL");
  RAP_CHECK_EQ(rap_log_get_level(), RAP_LOG_WARN);
  RAP_CHECK_OK(rap_log_set_level(before));
  RAP_CHECK_OK(rap_log_set_handler(NULL, NULL));
  RAP_CHECK_EQ(c.warnings, 1);
  RAP_CHECK_STR(c.text, "RAP_LOG_LEVEL='verbose' is not a level");
}

RAP_TEST(Logging, WrongResourceNamesBothResources) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_make(rm, "pool", "ResourceAwarePool", "HOST", "initial_size=64KiB");
  rap_resource *q1, *q2;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q1));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q2));
  void *x;
  RAP_CHECK_OK(rap_allocate(pool, &x, 100, q1));
  RAP_CHECK_STATUS(rap_deallocate(pool, x, q2), RAP_ERR_WRONG_RESOURCE);
  RAP_CHECK_STR(rap_last_error(), "belongs to host_async resource #1, not to host_async resource #2");
  RAP_CHECK_OK(rap_deallocate(pool, x, q1));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A sentence may be made from the last one (a caller that adds its context): the result is the
 * new words and the old sentence once, whole, with nothing left over from either. */
RAP_TEST(Logging, ASentenceMadeFromTheLastOneIsWhole) {
  RAP_CHECK_STATUS(rap_error_set(RAP_ERR_BACKEND, "the inner call failed: %s", "no such device"),
                   RAP_ERR_BACKEND);
  RAP_CHECK_STATUS(rap_error_set(RAP_ERR_BACKEND, "outer('%s'): %s", "x", rap_last_error()),
                   RAP_ERR_BACKEND);
  RAP_CHECK(strcmp(rap_last_error(), "outer('x'): the inner call failed: no such device") == 0);
  char longer[600];
  memset(longer, 'w', sizeof longer - 1);
  longer[sizeof longer - 1] = '\0';
  (void)rap_error_set(RAP_ERR_BACKEND, "%s", longer);   /* cut at the buffer's end */
  (void)rap_error_set(RAP_ERR_BACKEND, "again: %s", rap_last_error());
  RAP_CHECK(strncmp(rap_last_error(), "again: www", 10) == 0);
  RAP_CHECK(strspn(rap_last_error() + 7, "w") == strlen(rap_last_error()) - 7);
}
