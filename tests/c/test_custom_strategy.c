/* test_custom_strategy.c — a strategy written outside the library, registered by name.
 *
 * Bump takes one region of `capacity` bytes from its parent at the first allocation and hands out
 * 16-byte-aligned pieces of it in order; when the last live piece is freed it starts over.
 */
#include "test_util.h"

#include <rap/strategy.h>
#include <stdio.h>
#include <string.h>

enum { BUMP_MAX_LIVE = 64 };

typedef struct bump {
  rap_allocator *self, *parent;
  size_t capacity, used, current, hwm;
  char *base;
  void *live[BUMP_MAX_LIVE];
  size_t live_bytes[BUMP_MAX_LIVE];
  size_t count;
} bump;

static int bump_fini_calls;

static int bump_init(rap_allocator *self, void *state, rap_options *opts) {
  bump *b = state;
  b->self = self;
  b->parent = rap_allocator_parent(self);
  b->capacity = 64 * 1024;
  int st = rap_options_get_size(opts, "capacity", &b->capacity);
  if (st != RAP_OK) return st;
  if (b->capacity == 0 || b->capacity % 16 != 0)
    return rap_error_set(RAP_ERR_INVALID, "%s: option 'capacity' must be a multiple of 16",
                         rap_allocator_name(self));
  rap_allocator_set_alignment(self, 16);
  return RAP_OK;
}

static void bump_fini(rap_allocator *self, void *state) {
  bump *b = state;
  (void)self;
  bump_fini_calls++;
  if (b->base) rap_deallocate(b->parent, b->base, NULL);
  b->base = NULL;
}

static int bump_allocate(void *state, void **out, size_t bytes, rap_resource *r) {
  bump *b = state;
  (void)r;
  size_t n = bytes == 0 ? 16 : (bytes + 15) / 16 * 16;
  if (bytes > b->capacity || n > b->capacity - b->used || b->count == BUMP_MAX_LIVE)
    return rap_error_set(RAP_ERR_NOMEM, "Bump '%s': %zu bytes do not fit in the %zu left",
                         rap_allocator_name(b->self), bytes, b->capacity - b->used);
  if (b->base == NULL) {
    void *base = NULL;
    int st = rap_allocate(b->parent, &base, b->capacity, NULL);
    if (st != RAP_OK) return st;
    b->base = base;
  }
  void *p = b->base + b->used;
  b->used += n;
  b->live[b->count] = p;
  b->live_bytes[b->count++] = bytes;
  b->current += bytes;
  if (b->current > b->hwm) b->hwm = b->current;
  *out = p;
  return RAP_OK;
}

static int bump_find(const bump *b, const void *ptr) {
  for (size_t i = 0; i < b->count; i++)
    if (b->live[i] == ptr) return (int)i;
  return -1;
}

static int bump_deallocate(void *state, void *ptr, rap_resource *r) {
  bump *b = state;
  (void)r;
  int i = bump_find(b, ptr);
  if (i < 0)
    return rap_error_set(RAP_ERR_UNKNOWN_POINTER, "Bump '%s': %p is not live",
                         rap_allocator_name(b->self), ptr);
  b->current -= b->live_bytes[i];
  b->count--;
  b->live[i] = b->live[b->count];
  b->live_bytes[i] = b->live_bytes[b->count];
  if (b->count == 0) b->used = 0;
  return RAP_OK;
}

static int bump_release(void *state) {
  bump *b = state;
  if (b->count > 0 || b->base == NULL) return RAP_OK;
  int st = rap_deallocate(b->parent, b->base, NULL);
  if (st == RAP_OK) b->base = NULL;
  return st;
}

static int bump_stats(void *state, rap_stats *out) {
  bump *b = state;
  out->current_bytes = b->current;
  out->high_watermark = b->hwm;
  out->actual_bytes = b->base ? b->capacity : 0;
  out->allocation_count = b->count;
  out->chunk_count = b->base ? 1 : 0;
  out->free_bytes = b->base ? b->capacity - b->used : 0;
  return RAP_OK;
}

static int bump_owns(void *state, const void *ptr) { return bump_find(state, ptr) >= 0; }

static const rap_strategy bump_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "Bump",
    .flags = RAP_STRATEGY_NEEDS_PARENT,
    .state_size = sizeof(bump),
    .init = bump_init,
    .fini = bump_fini,
    .allocate = bump_allocate,
    .deallocate = bump_deallocate,
    .stats = bump_stats,
    .owns = bump_owns,
    .release = bump_release,
};

static rap_manager *bump_manager(void) {
  rap_manager *rm = tu_manager();
  RAP_CHECK_OK(rap_strategy_register(rm, &bump_strategy));
  return rm;
}

RAP_TEST(CustomStrategy, WorksThroughMake) {
  rap_manager *rm = bump_manager();
  rap_allocator *host = tu_get(rm, "HOST");
  rap_allocator *b = tu_make(rm, "bump", "bump", "HOST", "capacity=4KiB");   /* any case */
  RAP_CHECK(strcmp(rap_allocator_strategy(b), "Bump") == 0);
  RAP_CHECK(rap_allocator_parent(b) == host);
  RAP_CHECK_EQ(rap_allocator_alignment(b), 16);
  TU_EXPECT(host, allocation_count, 0);   /* lazy, like the built-in pools */
  char *p1 = tu_alloc(b, 100), *p2 = tu_alloc(b, 10), *p3 = tu_alloc(b, 0);
  RAP_CHECK(p2 == p1 + 112 && p3 == p2 + 16);
  tu_fill(p1, 100, 1);
  rap_stats s = tu_stats(b);
  RAP_CHECK_EQ(s.current_bytes, 110);
  RAP_CHECK_EQ(s.allocation_count, 3);
  RAP_CHECK_EQ(s.actual_bytes, 4096);
  RAP_CHECK_EQ(s.free_bytes, 4096 - 144);
  TU_EXPECT(host, current_bytes, 4096);
  rap_allocator *found = NULL;
  RAP_CHECK_OK(rap_allocator_find(rm, p2, &found));
  RAP_CHECK(found == b);
  RAP_CHECK_OK(rap_allocator_find(rm, p1, &found));   /* p1 is also HOST's region: newest wins */
  RAP_CHECK(found == b);
  rap_resource *host_r = NULL, *r = NULL;
  RAP_CHECK_OK(rap_resource_host(rm, &host_r));
  RAP_CHECK_OK(rap_pointer_resource(b, p2, &r));   /* optional methods fall back */
  RAP_CHECK(r == host_r);
  RAP_CHECK_STATUS(rap_record_resource(b, p2, host_r), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_OK(rap_allocator_check(b));

  void *big = NULL;
  RAP_CHECK_STATUS(rap_allocate(b, &big, 5000, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "do not fit");
  RAP_CHECK_STATUS(rap_deallocate(b, p1 + 1, NULL), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_STR(rap_last_error(), "Bump 'bump'");
  RAP_CHECK_OK(rap_release(b));   /* live pieces: keeps its region */
  TU_EXPECT(host, allocation_count, 1);
  RAP_CHECK(tu_intact(p1, 100, 1));
  RAP_CHECK_OK(rap_deallocate(b, p1, NULL));
  RAP_CHECK_OK(rap_deallocate(b, p2, NULL));
  RAP_CHECK_OK(rap_deallocate(b, p3, NULL));
  RAP_CHECK_OK(rap_release(b));
  TU_EXPECT(host, allocation_count, 0);
  TU_EXPECT(b, chunk_count, 0);
  int before = bump_fini_calls;
  RAP_CHECK_OK(rap_allocator_destroy(b));
  RAP_CHECK_EQ(bump_fini_calls, before + 1);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(CustomStrategy, UnderAQuickPool) {
  rap_manager *rm = bump_manager();
  rap_allocator *b = tu_make(rm, "bump", "Bump", "HOST", "capacity=64KiB");
  rap_allocator *pool = tu_make(rm, "pool", "QuickPool", "bump", "initial_size=1KiB next_size=1KiB");
  void *p = tu_alloc(pool, 100), *q = tu_alloc(pool, 2000);
  RAP_CHECK((uintptr_t)p % 256 == 0 && (uintptr_t)q % 256 == 0);
  /* Bump aligns to 16, so each pool chunk carries 240 bytes of padding. */
  TU_EXPECT(pool, actual_bytes, tu_chunk(1024, 256) + tu_chunk(2048, 256));
  TU_EXPECT(b, current_bytes, tu_chunk(1024, 256) + tu_chunk(2048, 256));
  TU_EXPECT(b, allocation_count, 2);
  rap_allocator *found = NULL;
  RAP_CHECK_OK(rap_allocator_find(rm, q, &found));
  RAP_CHECK(found == pool);
  RAP_CHECK_STATUS(rap_allocator_destroy(b), RAP_ERR_BUSY);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, q, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));   /* pool first, then bump, then HOST */
}

RAP_TEST(CustomStrategy, RegistrationErrors) {
  rap_manager *rm = bump_manager();
  RAP_CHECK_STATUS(rap_strategy_register(rm, &bump_strategy), RAP_ERR_EXISTS);
  RAP_CHECK_STR(rap_last_error(), "Bump");
  rap_strategy t = bump_strategy;
  t.name = "BUMP";
  RAP_CHECK_STATUS(rap_strategy_register(rm, &t), RAP_ERR_EXISTS);   /* names ignore case */
  t.name = "quickpool";
  RAP_CHECK_STATUS(rap_strategy_register(rm, &t), RAP_ERR_EXISTS);   /* built-ins too */
  t.name = "Bump2";
  t.version = RAP_STRATEGY_VERSION + 1;
  RAP_CHECK_STATUS(rap_strategy_register(rm, &t), RAP_ERR_UNSUPPORTED);
  t.version = RAP_STRATEGY_VERSION;
  t.allocate = NULL;
  RAP_CHECK_STATUS(rap_strategy_register(rm, &t), RAP_ERR_INVALID);
  t.allocate = bump_strategy.allocate;
  t.name = "";
  RAP_CHECK_STATUS(rap_strategy_register(rm, &t), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_strategy_register(rm, NULL), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_strategy_register(NULL, &bump_strategy), RAP_ERR_INVALID);
  rap_allocator *a = NULL;
  RAP_CHECK_STATUS(rap_allocator_make(rm, "x", "Bump2", "HOST", NULL, &a), RAP_ERR_NOT_FOUND);
  /* Registration belongs to one manager. */
  rap_manager *other = tu_manager();
  RAP_CHECK_STATUS(rap_allocator_make(other, "x", "Bump", "HOST", NULL, &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_OK(rap_manager_destroy(other));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(CustomStrategy, OptionsAndParentAreChecked) {
  rap_manager *rm = bump_manager();
  rap_allocator *a = NULL;
  int before = bump_fini_calls;
  RAP_CHECK_STATUS(rap_allocator_make(rm, "x", "Bump", "HOST", "capacity=4KiB colour=red", &a),
                   RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "colour");
  RAP_CHECK_EQ(bump_fini_calls, before + 1);   /* init ran, so fini undoes it */
  RAP_CHECK_STATUS(rap_allocator_make(rm, "x", "Bump", "HOST", "capacity=100", &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "capacity");
  RAP_CHECK_EQ(bump_fini_calls, before + 1);   /* init failed: nothing to undo */
  RAP_CHECK_STATUS(rap_allocator_make(rm, "x", "Bump", NULL, NULL, &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "parent");
  RAP_CHECK(a == NULL);
  a = tu_make(rm, "x", "Bump", "HOST", NULL);   /* the name is still free */
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
