/* quick_start.c — the README's example: a pool by name, one block, its statistics. */
#include <rap/rap.h>
#include <stdio.h>

#define CHECK(call)                                                                       \
  do {                                                                                    \
    int st_ = (call);                                                                     \
    if (st_ != RAP_OK) {                                                                  \
      fprintf(stderr, "%s: %s: %s\n", #call, rap_status_name(st_), rap_last_error());     \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

int main(void) {
  rap_manager *rm;
  rap_allocator *pool;
  rap_stats s;
  void *p;
  CHECK(rap_manager_create(&rm));
  CHECK(rap_allocator_make(rm, "my-pool", "QuickPool", "HOST", "initial_size=64MiB", &pool));
  CHECK(rap_allocate(pool, &p, 1000, NULL));
  CHECK(rap_allocator_stats(pool, &s));
  printf("live %zu bytes, held %zu bytes in %zu chunk(s)\n", s.current_bytes, s.actual_bytes,
         s.chunk_count);
  CHECK(rap_deallocate(pool, p, NULL));
  CHECK(rap_manager_destroy(rm));
  return 0;
}
