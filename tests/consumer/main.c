/* main.c — an outside program: pools from an installed rap, every status checked. */
#include <rap/rap.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                \
  do {                                                                             \
    int st_ = (call);                                                              \
    if (st_ != RAP_OK) {                                                           \
      fprintf(stderr, "%s: %s (%s)\n", #call, rap_status_name(st_), rap_last_error()); \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

int main(void) {
  rap_manager *rm;
  rap_allocator *pool;
  void *p;
  CHECK(rap_manager_create(&rm));
  CHECK(rap_allocator_make(rm, "pool", "QuickPool", "HOST", "initial_size=1MiB", &pool));
  CHECK(rap_allocate(pool, &p, 4096, NULL));
  memset(p, 0, 4096);
  CHECK(rap_deallocate(pool, p, NULL));
  CHECK(rap_allocator_check(pool));
  CHECK(rap_manager_destroy(rm));
  printf("consumer: ok\n");
  return 0;
}
