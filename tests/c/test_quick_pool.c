/* test_quick_pool.c — QuickPool's behaviours. */
#include "rap_test.h"

#include <string.h>

RAP_TEST(QuickPool, Smoke) {
  rap_manager *rm;
  rap_allocator *pool;
  void *p;
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK_OK(rap_allocator_make(rm, "pool", "QuickPool", "HOST", "initial_size=1MiB", &pool));
  RAP_CHECK_OK(rap_allocate(pool, &p, 1000, NULL));
  memset(p, 1, 1000);
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
