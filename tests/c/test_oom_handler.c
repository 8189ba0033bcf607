/* test_oom_handler.c — rap_allocator_set_oom_handler: a handler that frees memory and asks for
 * another attempt turns out of memory into a success; one that declines lets RAP_ERR_NOMEM through
 * with the allocator's own sentence; attempts are counted; a handler set on a pool runs after the
 * pool's own recovery; NULL removes it. The limit comes from a SizeLimiter, so every failure is
 * exact.
 */
#include "test_util.h"

#include <string.h>

#define KiB ((size_t)1024)

typedef struct oom_state {
  rap_allocator *owner;   /* frees held from here */
  void *held[4];
  int calls, last_attempt, give_up_at;
  size_t last_bytes;
  rap_resource *last_r;
  rap_allocator *last_a;
} oom_state;

/* Frees one held block per call, if any is left, and asks again until give_up_at. */
static int free_one(rap_allocator *a, size_t bytes, rap_resource *r, int attempt, void *user) {
  oom_state *s = user;
  s->calls++;
  s->last_attempt = attempt;
  s->last_bytes = bytes;
  s->last_r = r;
  s->last_a = a;
  for (int i = 0; i < 4; i++)
    if (s->held[i] != NULL) {
      RAP_CHECK_OK(rap_deallocate(s->owner, s->held[i], NULL));
      s->held[i] = NULL;
      break;
    }
  (void)rap_allocator_check(a);   /* the handler may call rap; the caller's sentence must survive */
  return attempt < s->give_up_at;
}

RAP_TEST(OomHandler, FreesAndRetries) {
  rap_manager *rm = tu_manager();
  rap_allocator *lim = tu_make(rm, "lim", "SizeLimiter", "HOST", "limit=1MiB");
  oom_state s = {.owner = lim, .give_up_at = 10};
  s.held[0] = tu_alloc(lim, 800 * KiB);
  RAP_CHECK_OK(rap_allocator_set_oom_handler(lim, free_one, &s));
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(lim, &p, 400 * KiB, NULL));
  RAP_CHECK(p != NULL);
  RAP_CHECK_EQ(s.calls, 1);
  RAP_CHECK_EQ(s.last_attempt, 1);
  RAP_CHECK_EQ(s.last_bytes, 400 * KiB);
  RAP_CHECK(s.last_r == NULL && s.last_a == lim);
  TU_EXPECT(lim, current_bytes, 400 * KiB);
  RAP_CHECK_OK(rap_deallocate(lim, p, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(OomHandler, DecliningKeepsTheAllocatorsSentence) {
  rap_manager *rm = tu_manager();
  rap_allocator *lim = tu_make(rm, "lim", "SizeLimiter", "HOST", "limit=1MiB");
  oom_state s = {.owner = lim, .give_up_at = 3};   /* nothing to free: asks twice, then gives up */
  void *keep = tu_alloc(lim, 900 * KiB);
  RAP_CHECK_OK(rap_allocator_set_oom_handler(lim, free_one, &s));
  void *p = &s;
  RAP_CHECK_STATUS(rap_allocate(lim, &p, 400 * KiB, NULL), RAP_ERR_NOMEM);
  RAP_CHECK(p == &s);   /* untouched */
  RAP_CHECK(strstr(rap_last_error(), "limit") != NULL);
  RAP_CHECK_EQ(s.calls, 3);
  RAP_CHECK_EQ(s.last_attempt, 3);
  TU_EXPECT(lim, current_bytes, 900 * KiB);
  /* Removed: the failure comes straight back. */
  RAP_CHECK_OK(rap_allocator_set_oom_handler(lim, NULL, NULL));
  RAP_CHECK_STATUS(rap_allocate(lim, &p, 400 * KiB, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_EQ(s.calls, 3);
  RAP_CHECK_OK(rap_deallocate(lim, keep, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* On a pool over the limiter: the pool first releases its free chunks and retries by itself; the
 * handler is asked only when that did not do, and freeing the pool's own block then does. */
RAP_TEST(OomHandler, OnAPoolAfterItsOwnRecovery) {
  rap_manager *rm = tu_manager();
  tu_make(rm, "lim", "SizeLimiter", "HOST", "limit=1MiB");
  rap_allocator *pool = tu_make(rm, "pool", "QuickPool", "lim", "initial_size=256KiB next_size=256KiB");
  oom_state s = {.owner = pool, .give_up_at = 10};
  s.held[0] = tu_alloc(pool, 200 * KiB);             /* the first chunk, 256 KiB */
  void *tmp = tu_alloc(pool, 600 * KiB);              /* a second chunk */
  RAP_CHECK_OK(rap_deallocate(pool, tmp, NULL));   /* wholly free: the pool's recovery gives it back */
  RAP_CHECK_OK(rap_allocator_set_oom_handler(pool, free_one, &s));
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &p, 700 * KiB, NULL));   /* fits once the 600 KiB chunk went */
  RAP_CHECK_EQ(s.calls, 0);
  void *q = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &q, 250 * KiB, NULL));   /* only once the held block is freed */
  RAP_CHECK_EQ(s.calls, 1);
  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, q, NULL));
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(OomHandler, BadInput) {
  RAP_CHECK_STATUS(rap_allocator_set_oom_handler(NULL, free_one, NULL), RAP_ERR_INVALID);
}
