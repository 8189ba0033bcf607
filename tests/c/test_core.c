/* test_core.c — status codes, options, the manager's registry, platform allocators and Fault. */
#include "rap_test.h"

#include <rap/strategy.h>
#include <stdint.h>
#include <string.h>

RAP_TEST(Status, NamesAndTextsComeFromOneList) {
  RAP_CHECK(strcmp(rap_status_name(RAP_OK), "RAP_OK") == 0);
  RAP_CHECK(strcmp(rap_status_name(RAP_ERR_NOMEM), "RAP_ERR_NOMEM") == 0);
  RAP_CHECK(strcmp(rap_status_name(RAP_ERR_CORRUPT), "RAP_ERR_CORRUPT") == 0);
  RAP_CHECK(strcmp(rap_status_name(12345), "RAP_ERR_UNKNOWN_STATUS") == 0);
  RAP_CHECK(strcmp(rap_strerror(RAP_ERR_NOMEM), "out of memory") == 0);
  RAP_CHECK(strlen(rap_strerror(-999)) > 0);
}

RAP_TEST(Manager, CreateAndDestroyEmpty) {
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK_OK(rap_manager_destroy(rm));
  RAP_CHECK_STATUS(rap_manager_create(NULL), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_manager_destroy(NULL), RAP_ERR_INVALID);
}

RAP_TEST(Host, AllocateFreeAndTrack) {
  rap_manager *rm;
  rap_allocator *host, *found;
  void *p, *q;
  rap_stats s;
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK_OK(rap_allocator_get(rm, "HOST", &host));
  RAP_CHECK(strcmp(rap_allocator_name(host), "HOST") == 0);
  RAP_CHECK_OK(rap_allocate(host, &p, 100, NULL));
  RAP_CHECK_OK(rap_allocate(host, &q, 0, NULL));
  RAP_CHECK(p != NULL && q != NULL && p != q);
  memset(p, 0xab, 100);
  RAP_CHECK_OK(rap_allocator_stats(host, &s));
  RAP_CHECK_EQ(s.current_bytes, 100);
  RAP_CHECK_EQ(s.allocation_count, 2);
  RAP_CHECK_OK(rap_allocator_find(rm, p, &found));
  RAP_CHECK(found == host);
  RAP_CHECK_STATUS(rap_deallocate(host, (char *)p + 1, NULL), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_OK(rap_deallocate(host, p, NULL));
  RAP_CHECK_STATUS(rap_deallocate(host, p, NULL), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_OK(rap_deallocate(host, q, NULL));
  RAP_CHECK_OK(rap_deallocate(host, NULL, NULL));
  RAP_CHECK_OK(rap_allocator_check(host));
  RAP_CHECK_STATUS(rap_allocate(host, &p, SIZE_MAX, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
