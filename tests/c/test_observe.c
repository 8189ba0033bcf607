/* test_observe.c — segment observers (rap_allocator_observe) over HOST_VMM, where unmapped pages
 * fault: a callback told of an UNMAP or SHRINK touches every byte about to go, so a notification
 * that came after the unmap would crash the test. Also the replay for a late subscriber,
 * unsubscribing, errors, threads, and rap_pointer_registrable's refusals on the host.
 */
#include "rap_test.h"

#include <pthread.h>
#include <rap/rap.h>
#include <string.h>

#define KiB ((size_t)1024)
#define MiB (KiB * KiB)

typedef struct seen {
  int n;
  rap_segment_event ev[64];
  int touched;   /* UNMAP and SHRINK events whose bytes were all still writable */
} seen;

static void record(const rap_segment_event *ev, void *user) {
  seen *s = user;
  if (s->n < 64) s->ev[s->n] = *ev;
  s->n++;
  if (ev->kind == RAP_SEGMENT_UNMAP || ev->kind == RAP_SEGMENT_SHRINK) {
    memset(ev->addr, 0x5A, ev->bytes);   /* faults if the pages were gone already */
    s->touched++;
  }
}

static int count(const seen *s, int kind) {
  int n = 0;
  for (int i = 0; i < s->n && i < 64; i++) n += s->ev[i].kind == kind;
  return n;
}

RAP_TEST(Observe, PlatformTellsMapsAndUnmapsBeforeTheyHappen) {
  rap_manager *rm;
  rap_allocator *vmm;
  seen s = {0};
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "vmm", "HostVmm(reserve=64MiB, granularity=64KiB)", &vmm));
  RAP_CHECK_OK(rap_allocator_observe(vmm, record, &s));
  RAP_CHECK_EQ(s.n, 0);   /* nothing mapped yet: nothing replayed */
  void *p;
  RAP_CHECK_OK(rap_allocate(vmm, &p, 100 * KiB, NULL));
  RAP_CHECK_EQ(s.n, 1);
  RAP_CHECK_EQ(s.ev[0].kind, RAP_SEGMENT_MAP);
  RAP_CHECK(s.ev[0].base == p && s.ev[0].size == 128 * KiB && s.ev[0].addr == p);
  RAP_CHECK_EQ(s.ev[0].device, -1);
  RAP_CHECK_EQ(s.ev[0].replay, 0);
  RAP_CHECK_OK(rap_deallocate(vmm, p, NULL));
  RAP_CHECK_EQ(s.n, 2);
  RAP_CHECK_EQ(s.ev[1].kind, RAP_SEGMENT_UNMAP);
  RAP_CHECK(s.ev[1].base == p && s.ev[1].bytes == 128 * KiB);
  RAP_CHECK_EQ(s.touched, 1);   /* written in the callback: still mapped then */
  RAP_CHECK_OK(rap_allocator_unobserve(vmm, record, &s));
  RAP_CHECK_OK(rap_allocate(vmm, &p, 100 * KiB, NULL));
  RAP_CHECK_OK(rap_deallocate(vmm, p, NULL));
  RAP_CHECK_EQ(s.n, 2);   /* unsubscribed: never called again */
  RAP_CHECK_STATUS(rap_allocator_unobserve(vmm, record, &s), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "does not observe");
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A pool over HOST_VMM: its chunk is mapped, grows in place, gives its free end back (SHRINK,
 * touched before it goes) and goes at the destroy (UNMAP, touched). */
RAP_TEST(Observe, PoolTellsGrowShrinkAndReleaseOfItsChunk) {
  rap_manager *rm;
  rap_allocator *pool;
  seen s = {0};
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "QuickPool(HostVmm(reserve=64MiB, granularity=64KiB), "
                                       "initial_size=64KiB, next_size=64KiB, heuristic=never)", &pool));
  RAP_CHECK_OK(rap_allocator_observe(pool, record, &s));
  void *a, *b;
  RAP_CHECK_OK(rap_allocate(pool, &a, 64 * KiB, NULL));
  RAP_CHECK_EQ(s.n, 1);
  RAP_CHECK_EQ(s.ev[0].kind, RAP_SEGMENT_MAP);
  RAP_CHECK(s.ev[0].base == a && s.ev[0].size == 64 * KiB);
  RAP_CHECK_OK(rap_allocate(pool, &b, 128 * KiB, NULL));   /* grows the chunk in place */
  RAP_CHECK_EQ(s.n, 2);
  RAP_CHECK_EQ(s.ev[1].kind, RAP_SEGMENT_GROW);
  RAP_CHECK(s.ev[1].base == a && s.ev[1].size == 192 * KiB);
  RAP_CHECK(s.ev[1].addr == (char *)a + 64 * KiB && s.ev[1].bytes == 128 * KiB);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_release(pool));   /* the free end goes back: told first */
  RAP_CHECK_EQ(count(&s, RAP_SEGMENT_SHRINK), 1);
  const rap_segment_event *sh = &s.ev[s.n - 1];
  RAP_CHECK_EQ(sh->kind, RAP_SEGMENT_SHRINK);
  RAP_CHECK(sh->base == a && sh->size == 192 * KiB && sh->addr == (char *)a + 64 * KiB &&
            sh->bytes == 128 * KiB);
  RAP_CHECK_EQ(s.touched, 1);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_allocator_destroy(pool));   /* the chunk goes: UNMAP, touched before */
  RAP_CHECK_EQ(s.ev[s.n - 1].kind, RAP_SEGMENT_UNMAP);
  RAP_CHECK(s.ev[s.n - 1].base == a && s.ev[s.n - 1].size == 64 * KiB);
  RAP_CHECK_EQ(s.touched, 2);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A late subscriber gets every segment there is as a replayed MAP, then the live events; a
 * release of whole chunks is told before the parent gets them back. */
RAP_TEST(Observe, LateSubscriberGetsAReplay) {
  rap_manager *rm;
  rap_allocator *pool, *vmm, *lim;
  seen s = {0}, t = {0};
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "vmm", "HostVmm(reserve=64MiB, granularity=64KiB)", &vmm));
  /* Over a wrapper the pool sees no resizable parent: its chunks are separate allocations. */
  RAP_CHECK_OK(rap_allocator_make(rm, "lim", "SizeLimiter", "vmm", "limit=32MiB", &lim));
  RAP_CHECK_OK(rap_allocator_make(rm, "pool", "ResourceAwarePool", "lim",
                                  "initial_size=64KiB next_size=64KiB heuristic=never", &pool));
  void *p[3];
  for (int i = 0; i < 3; i++) RAP_CHECK_OK(rap_allocate(pool, &p[i], 64 * KiB, NULL));
  RAP_CHECK_OK(rap_allocator_observe(pool, record, &s));
  RAP_CHECK_OK(rap_allocator_observe(vmm, record, &t));
  RAP_CHECK_EQ(s.n, 3);
  RAP_CHECK_EQ(t.n, 3);
  for (int i = 0; i < 3; i++) {
    RAP_CHECK(s.ev[i].kind == RAP_SEGMENT_MAP && s.ev[i].replay == 1 && s.ev[i].size == 64 * KiB);
    RAP_CHECK(t.ev[i].kind == RAP_SEGMENT_MAP && t.ev[i].replay == 1);
  }
  for (int i = 0; i < 3; i++) RAP_CHECK_OK(rap_deallocate(pool, p[i], NULL));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(count(&s, RAP_SEGMENT_UNMAP), 3);
  RAP_CHECK_EQ(count(&t, RAP_SEGMENT_UNMAP), 3);
  RAP_CHECK_EQ(s.touched + t.touched, 6);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

static rap_allocator *inner;
static int inner_status;

static void calls_back(const rap_segment_event *ev, void *user) {
  (void)ev;
  (void)user;
  inner_status = rap_allocator_observe(inner, record, NULL);
}

RAP_TEST(Observe, BadInput) {
  rap_manager *rm;
  rap_allocator *vmm, *safe, *host;
  seen s = {0}, s2 = {0};
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "vmm", "HostVmm(reserve=16MiB, granularity=64KiB)", &vmm));
  RAP_CHECK_STATUS(rap_allocator_observe(NULL, record, &s), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_observe(vmm, NULL, &s), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_unobserve(vmm, NULL, &s), RAP_ERR_INVALID);
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "safe", "ThreadSafe(QuickPool(HOST))", &safe));
  RAP_CHECK_STATUS(rap_allocator_observe(safe, record, &s), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "observe the pool");
  RAP_CHECK_OK(rap_allocator_get(rm, "HOST", &host));
  RAP_CHECK_STATUS(rap_allocator_observe(host, record, &s), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_OK(rap_allocator_observe(vmm, record, &s));
  RAP_CHECK_STATUS(rap_allocator_observe(vmm, record, &s), RAP_ERR_EXISTS);
  RAP_CHECK_OK(rap_allocator_observe(vmm, record, &s2));   /* the same callback, another user */
  RAP_CHECK_OK(rap_allocator_unobserve(vmm, record, &s2));
  /* From inside a callback of the same allocator: refused, and the callback still ran. */
  inner = vmm;
  inner_status = RAP_OK;
  RAP_CHECK_OK(rap_allocator_observe(vmm, calls_back, NULL));
  void *p;
  RAP_CHECK_OK(rap_allocate(vmm, &p, 1, NULL));
  RAP_CHECK_EQ(inner_status, RAP_ERR_BUSY);
  RAP_CHECK_OK(rap_allocator_unobserve(vmm, calls_back, NULL));
  RAP_CHECK_OK(rap_deallocate(vmm, p, NULL));
  RAP_CHECK_EQ(s.n, 2);   /* record saw the map and the unmap */
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Subscribing and unsubscribing on one thread while another maps and unmaps through a ThreadSafe
 * pool over the platform (TSan runs this): no callback after its unobserve returned. */
typedef struct churn {
  rap_allocator *vmm;
  int rounds;
  int late;      /* calls seen after unobserve returned */
  int active;    /* atomic: 1 while subscribed */
} churn;

static void counts(const rap_segment_event *ev, void *user) {
  (void)ev;
  churn *c = user;
  if (!__atomic_load_n(&c->active, __ATOMIC_ACQUIRE)) __atomic_add_fetch(&c->late, 1, __ATOMIC_RELAXED);
}

static void *subscriber(void *arg) {
  churn *c = arg;
  for (int i = 0; i < c->rounds; i++) {
    __atomic_store_n(&c->active, 1, __ATOMIC_RELEASE);
    if (rap_allocator_observe(c->vmm, counts, c) != RAP_OK) break;
    if (rap_allocator_unobserve(c->vmm, counts, c) != RAP_OK) break;
    __atomic_store_n(&c->active, 0, __ATOMIC_RELEASE);
  }
  return NULL;
}

RAP_TEST(Observe, SubscribersComeAndGoWhileAnotherThreadMaps) {
  rap_manager *rm;
  rap_allocator *vmm, *pool, *quick;
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "vmm", "HostVmm(reserve=64MiB, granularity=64KiB)", &vmm));
  RAP_CHECK_OK(rap_allocator_make(rm, "pool", "QuickPool", "vmm",
                                  "initial_size=64KiB next_size=64KiB heuristic=never", &quick));
  RAP_CHECK_OK(rap_allocator_make(rm, "safe", "ThreadSafe", "pool", "", &pool));
  churn c = {vmm, 2000, 0, 0};
  pthread_t t;
  RAP_CHECK(pthread_create(&t, NULL, subscriber, &c) == 0);
  for (int i = 0; i < 2000; i++) {
    void *p;
    RAP_CHECK_OK(rap_allocate(pool, &p, 64 * KiB, NULL));
    RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
    RAP_CHECK_OK(rap_release(pool));   /* the chunk goes back: an unmap each round */
  }
  pthread_join(t, NULL);
  RAP_CHECK_EQ(c.late, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Observe, RegistrableRefusesMemoryNcclCannotRegister) {
  rap_manager *rm;
  rap_allocator *pool, *vmm_pool;
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "ResourceAwarePool(HOST, initial_size=1MiB)", &pool));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "hv", "ResourceAwarePool(HostVmm(reserve=16MiB, export=posix), "
                                       "initial_size=2MiB)", &vmm_pool));
  void *p, *q;
  RAP_CHECK_OK(rap_allocate(pool, &p, 4096, NULL));
  RAP_CHECK_OK(rap_allocate(vmm_pool, &q, 4096, NULL));
  RAP_CHECK_STATUS(rap_pointer_registrable(rm, p), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "DeviceVmm(export=posix)");
  RAP_CHECK_STR(rap_last_error(), "'pool'");
  RAP_CHECK_STATUS(rap_pointer_registrable(rm, q), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "host memory");
  /* A pointer inside a block (a view, a bucket) is the same memory: the platform's range answers. */
  RAP_CHECK_STATUS(rap_pointer_registrable(rm, (char *)q + 1024), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "host memory");
  int x;
  RAP_CHECK_STATUS(rap_pointer_registrable(rm, &x), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_STATUS(rap_pointer_registrable(NULL, p), RAP_ERR_INVALID);
  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  RAP_CHECK_OK(rap_deallocate(vmm_pool, q, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
