/* test_hunt_release.c — a seeded random driver over a pool whose release gives back the inside of
 * its free blocks (HostVmm without piece=, the host twin of the default's DeviceVmm), with every
 * invariant a user can see checked after each step.
 *
 * Steps: allocations of every size class on the host and on two host_async queues (gated, so that
 * freed blocks stay pending), frees, records on another queue, releases, sleeps and wakes, maps
 * refused in the middle of a growth or a fill (the platform's test seam), a block of the platform's
 * own beside the pool (so that growth in place is refused), exports revoked later. After each:
 * rap_allocator_check on the pool and the platform; used + free + pending == held; the free
 * figures within the free bytes; what the pool holds is what the platform maps; every live block
 * keeps the stamps written into each of its pages; and what the pool's and the platform's
 * observers were told matches, granule by granule, what is mapped (a probe that does not fault:
 * process_vm_readv answers EFAULT on an unmapped page). Observers also check, in the callback, that
 * MAP, GROW and FILL name mapped memory and that UNMAP, SHRINK and HOLE come before the pages go.
 */
#define _GNU_SOURCE   /* process_vm_readv */
#include "gate.h"
#include "ipc_driver.h"
#include "test_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

void rapi_vmm_fail_map_at(long nth);   /* platforms/vmm.c: the nth map from now is refused */

enum { HR_SLOTS = 40, HR_QUEUES = 2, HR_MAX_GRANULES = 1024, HR_OWN = 4, HR_EXPORTS = 8 };

typedef struct hr_param {
  const char *label;
  const char *spec;   /* the pool over its platform */
  size_t gran, big;   /* the platform's granularity; the largest request */
  bool queues;        /* a ResourceAwarePool: requests on host_async queues, records, pending */
  bool sleeps;        /* rap_allocator_sleep and wake */
  bool cache;         /* a ThreadCache on top: the figures are the pool's under it */
  bool exports;       /* the platform exports: blocks exported and revoked */
  unsigned steps;
  uint64_t seed;
} hr_param;

#define HV64 "HostVmm(granularity=64KiB, reserve=24MiB)"
static const hr_param hr_params[] = {
    {"RAP_64KiB", "ResourceAwarePool(" HV64 ", initial_size=64KiB, next_size=192KiB, heuristic=never)",
     64 << 10, 1 << 20, true, true, false, false, 1200, 1},
    {"RAP_2MiB_odd", "ResourceAwarePool(HostVmm(granularity=2MiB, reserve=512MiB), initial_size=3MiB, "
     "next_size=5000000, heuristic=never)", 2 << 20, 24 << 20, true, true, false, false, 400, 2},
    {"RAP_hwm70", "ResourceAwarePool(" HV64 ", initial_size=1, next_size=100000, "
     "heuristic=percent_releasable_hwm:70)", 64 << 10, 1 << 20, true, true, false, false, 1500, 3},
    {"QuickPool_hwm50", "QuickPool(" HV64 ", initial_size=100000, next_size=70000, "
     "heuristic=percent_releasable_hwm:50)", 64 << 10, 1 << 20, false, false, false, false, 1500, 4},
    {"DynamicPoolList_p60", "DynamicPoolList(" HV64 ", initial_size=64KiB, next_size=64KiB, "
     "heuristic=percent_releasable:60)", 64 << 10, 1 << 20, false, false, false, false, 1200, 5},
    {"ThreadCache_RAP", "ThreadCache(ResourceAwarePool(" HV64 ", initial_size=64KiB, next_size=1MiB, "
     "heuristic=never))", 64 << 10, 1 << 20, true, true, true, false, 1200, 6},
    {"RAP_export", "ResourceAwarePool(HostVmm(export=posix, granularity=64KiB, reserve=24MiB), "
     "initial_size=64KiB, next_size=128KiB, heuristic=never)", 64 << 10, 1 << 20, true, true, false,
     true, 1000, 7},
};

/* ---- what observers were told, granule by granule -------------------------------------------- */

typedef struct hr_model {
  char *base;   /* the platform's range */
  size_t gran, granules;
  size_t top;   /* granules below it were ever told mapped */
  unsigned char told[2][HR_MAX_GRANULES];   /* [0] the pool's observer, [1] the platform's */
  int errors;
  char first[512];
} hr_model;

static bool hr_mapped(const void *p) {
  char b;
  struct iovec local = {&b, 1}, remote = {(void *)p, 1};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == 1;
}

static void hr_error(hr_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hr_error(hr_model *m, const char *fmt, ...) {
  if (m->errors++ > 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->first, sizeof m->first, fmt, ap);
  va_end(ap);
}

static const char *hr_kind(int k) {
  static const char *names[] = {"?", "MAP", "GROW", "SHRINK", "UNMAP", "HOLE", "FILL"};
  return k >= 1 && k <= 6 ? names[k] : "?";
}

static void hr_told(hr_model *m, int who, const rap_segment_event *ev) {
  size_t off = (size_t)((char *)ev->addr - m->base);
  if ((char *)ev->addr < m->base || off % m->gran != 0 || ev->bytes % m->gran != 0 ||
      off / m->gran + ev->bytes / m->gran > m->granules) {
    hr_error(m, "%s observer: %s of %p, %zu bytes: not whole granules of the range", who ? "platform" : "pool",
             hr_kind(ev->kind), ev->addr, ev->bytes);
    return;
  }
  bool now_mapped = ev->kind == RAP_SEGMENT_MAP || ev->kind == RAP_SEGMENT_GROW || ev->kind == RAP_SEGMENT_FILL;
  for (size_t g = off / m->gran, n = 0; n < ev->bytes / m->gran; g++, n++) {
    char *at = m->base + g * m->gran;
    if (!ev->replay && now_mapped && !hr_mapped(at))
      hr_error(m, "%s observer: %s names %p, which is not mapped", who ? "platform" : "pool",
               hr_kind(ev->kind), (void *)at);
    if (!ev->replay && !now_mapped && m->told[who][g] && !hr_mapped(at))
      hr_error(m, "%s observer: %s of %p came after the page went", who ? "platform" : "pool",
               hr_kind(ev->kind), (void *)at);
    m->told[who][g] = now_mapped;
    if (now_mapped && g + 1 > m->top) m->top = g + 1;
  }
}

static void hr_on_pool(const rap_segment_event *ev, void *user) { hr_told(user, 0, ev); }
static void hr_on_platform(const rap_segment_event *ev, void *user) { hr_told(user, 1, ev); }

/* ---- the driver's state ----------------------------------------------------------------------- */

typedef struct hr_block {
  char *ptr;
  size_t bytes;
  unsigned seed;
} hr_block;

typedef struct hr {
  const hr_param *P;
  rap_manager *rm;
  rap_allocator *top, *pool, *v;   /* what the user calls, the pool over the platform, the platform */
  rap_resource *q[HR_QUEUES];
  gate gates[64];
  int ngates, closed[HR_QUEUES];   /* closed[i]: index + 1 of a gate queue i waits at, or 0 */
  hr_block live[HR_SLOTS];
  hr_block own[HR_OWN];            /* blocks of the platform's own, beside the pool */
  rap_ipc_desc desc[HR_EXPORTS];
  bool sent[HR_EXPORTS];
  size_t own_bytes, stride;
  uint64_t rng;
  unsigned step, seeds;
  hr_model m;
} hr;

static void hr_stamp(hr *h, hr_block *b) {
  for (size_t off = 0; off < b->bytes; off += h->stride) ((unsigned char *)b->ptr)[off] = tu_byte(b->seed, off);
  if (b->bytes > 0) ((unsigned char *)b->ptr)[b->bytes - 1] = tu_byte(b->seed, b->bytes - 1);
}

static void hr_intact(hr *h, const hr_block *b, const char *what) {
  for (size_t off = 0; off < b->bytes; off += h->stride) {
    if (!hr_mapped(b->ptr + off))
      rap_test_fail(__FILE__, __LINE__, "step %u (%s): byte %zu of the live block %p (%zu bytes) is "
                    "not mapped", h->step, what, off, (void *)b->ptr, b->bytes);
    if (((unsigned char *)b->ptr)[off] != tu_byte(b->seed, off))
      rap_test_fail(__FILE__, __LINE__, "step %u (%s): byte %zu of the live block %p (%zu bytes) "
                    "changed", h->step, what, off, (void *)b->ptr, b->bytes);
  }
  if (b->bytes > 0 && ((unsigned char *)b->ptr)[b->bytes - 1] != tu_byte(b->seed, b->bytes - 1))
    rap_test_fail(__FILE__, __LINE__, "step %u (%s): the last byte of %p changed", h->step, what,
                  (void *)b->ptr);
}

/* ---- invariants after every step -------------------------------------------------------------- */

static bool hr_own_granule(const hr *h, const char *at) {
  for (int i = 0; i < HR_OWN; i++)
    if (h->own[i].ptr != NULL && at >= h->own[i].ptr && at < h->own[i].ptr + tu_align(h->own[i].bytes, h->P->gran))
      return true;
  return false;
}

static void hr_models_match(hr *h) {
  hr_model *m = &h->m;
  if (m->errors) rap_test_fail(__FILE__, __LINE__, "step %u: %s (%d errors)", h->step, m->first, m->errors);
  for (size_t g = 0; g < m->top; g++) {
    char *at = m->base + g * m->gran;
    bool mapped = hr_mapped(at);
    if (m->told[1][g] != mapped)
      rap_test_fail(__FILE__, __LINE__, "step %u: the platform's observer holds %p %s, it is %s",
                    h->step, (void *)at, m->told[1][g] ? "mapped" : "unmapped", mapped ? "mapped" : "not");
    if (m->told[0][g] != mapped && !hr_own_granule(h, at))
      rap_test_fail(__FILE__, __LINE__, "step %u: the pool's observer holds %p %s, it is %s",
                    h->step, (void *)at, m->told[0][g] ? "mapped" : "unmapped", mapped ? "mapped" : "not");
  }
}

static void hr_invariants(hr *h, bool contents) {
  RAP_CHECK_OK(rap_allocator_check(h->top));
  RAP_CHECK_OK(rap_allocator_check(h->pool));
  RAP_CHECK_OK(rap_allocator_check(h->v));
  rap_stats s = tu_stats(h->pool), v = tu_stats(h->v);
  if (!rap_allocator_is_asleep(h->pool)) {
    if (s.used_bytes + s.free_bytes + s.pending_bytes != s.actual_bytes)
      rap_test_fail(__FILE__, __LINE__, "step %u: used %zu + free %zu + pending %zu != held %zu", h->step,
                    s.used_bytes, s.free_bytes, s.pending_bytes, s.actual_bytes);
    RAP_CHECK(s.largest_free_block <= s.free_bytes);
    RAP_CHECK(s.releasable_bytes <= s.free_bytes);
    if (s.actual_bytes + h->own_bytes != v.actual_bytes)
      rap_test_fail(__FILE__, __LINE__, "step %u: the pool holds %zu (and its neighbour %zu), the "
                    "platform maps %zu", h->step, s.actual_bytes, h->own_bytes, v.actual_bytes);
  } else {
    RAP_CHECK_EQ(v.actual_bytes, h->own_bytes);
  }
  hr_models_match(h);
  if (!contents || rap_allocator_is_asleep(h->pool)) return;
  for (int i = 0; i < HR_SLOTS; i++)
    if (h->live[i].ptr != NULL) hr_intact(h, &h->live[i], "live");
  for (int i = 0; i < HR_OWN; i++)
    if (h->own[i].ptr != NULL) hr_intact(h, &h->own[i], "own");
}

/* ---- the steps -------------------------------------------------------------------------------- */

static size_t hr_size(hr *h) {
  uint64_t r = tu_rand(&h->rng);
  switch (r % 8) {
    case 0: return 0;
    case 1: case 2: return 1 + (size_t)(r >> 8) % 4096;
    case 3: case 4: return 1 + (size_t)(r >> 8) % h->P->gran;
    case 5: return h->P->gran / 2 + (size_t)(r >> 8) % (3 * h->P->gran);
    default: return 1 + (size_t)(r >> 8) % h->P->big;
  }
}

static rap_resource *hr_queue(hr *h) {
  if (!h->P->queues) return NULL;
  int i = (int)(tu_rand(&h->rng) % (HR_QUEUES + 1));
  return i == HR_QUEUES ? NULL : h->q[i];
}

static void hr_export(hr *h, int i);

static void hr_failed(hr *h, int st, const char *what) {
  if (st != RAP_ERR_NOMEM)
    rap_test_fail(__FILE__, __LINE__, "step %u: %s answered %s: %s", h->step, what, rap_status_name(st),
                  rap_last_error());
  if (rap_last_error()[0] == '\0')
    rap_test_fail(__FILE__, __LINE__, "step %u: %s answered RAP_ERR_NOMEM with no sentence", h->step, what);
}

static void hr_allocate(hr *h, int slot, long refuse_map) {
  hr_block *b = &h->live[slot];
  size_t bytes = hr_size(h);
  rap_resource *r = hr_queue(h);
  void *p = NULL;
  if (refuse_map) rapi_vmm_fail_map_at(refuse_map);
  int st = rap_allocate(h->top, &p, bytes, r);
  rapi_vmm_fail_map_at(0);
  if (st != RAP_OK) {
    hr_failed(h, st, "rap_allocate");
    return;
  }
  *b = (hr_block){p, bytes, ++h->seeds};
  hr_stamp(h, b);
}

static void hr_free(hr *h, int slot) {
  RAP_CHECK_OK(rap_deallocate(h->top, h->live[slot].ptr, NULL));
  h->live[slot].ptr = NULL;
}

static void hr_gate(hr *h, int qi) {
  if (h->closed[qi] != 0 || h->ngates == 64) return;
  gate *g = &h->gates[h->ngates++];
  gate_init(g);
  RAP_CHECK_OK(rap_resource_submit(h->q[qi], gate_job, g));
  h->closed[qi] = h->ngates;
}

static void hr_open(hr *h, int qi) {
  if (h->closed[qi] == 0) return;
  gate_open(&h->gates[h->closed[qi] - 1]);
  h->closed[qi] = 0;
}

static void hr_open_all(hr *h) {
  for (int i = 0; i < HR_QUEUES; i++) hr_open(h, i);
  for (int i = 0; h->P->queues && i < HR_QUEUES; i++) RAP_CHECK_OK(rap_resource_synchronize(h->q[i]));
}

static void hr_sleep(hr *h) {
  hr_open_all(h);   /* a sleep waits for the queues' work, and for exports to end */
  for (int i = 0; i < HR_EXPORTS; i++)
    if (h->sent[i]) hr_export(h, i);
  int mode = tu_rand(&h->rng) % 4 == 0 ? RAP_SLEEP_DISCARD : RAP_SLEEP_BACKUP;
  int st = rap_allocator_sleep(h->top, mode);
  if (st != RAP_OK) rap_test_fail(__FILE__, __LINE__, "step %u: sleep: %s", h->step, rap_last_error());
  hr_invariants(h, false);
  void *p = NULL;
  RAP_CHECK_STATUS(rap_allocate(h->top, &p, 1, NULL), RAP_ERR_BUSY);
  RAP_CHECK_OK(rap_release(h->top));
  RAP_CHECK_OK(rap_allocator_wake(h->top));
  if (mode == RAP_SLEEP_DISCARD)
    for (int i = 0; i < HR_SLOTS; i++)
      if (h->live[i].ptr != NULL) hr_stamp(h, &h->live[i]);
}

/* A block of the platform's own: the pool's chunk cannot grow past it. */
static void hr_own(hr *h, int i) {
  hr_block *b = &h->own[i];
  if (b->ptr != NULL) {
    RAP_CHECK_OK(rap_deallocate(h->v, b->ptr, NULL));
    h->own_bytes -= tu_align(b->bytes, h->P->gran);
    b->ptr = NULL;
    return;
  }
  size_t bytes = 1 + tu_rand(&h->rng) % (2 * h->P->gran);
  void *p = NULL;
  int st = rap_allocate(h->v, &p, bytes, NULL);
  if (st != RAP_OK) {
    hr_failed(h, st, "rap_allocate on the platform");
    return;
  }
  *b = (hr_block){p, bytes, ++h->seeds};
  h->own_bytes += tu_align(bytes, h->P->gran);
  hr_stamp(h, b);
}

static void hr_export(hr *h, int i) {
  if (h->sent[i]) {
    RAP_CHECK_OK(rap_ipc_revoke(h->top, &h->desc[i]));
    h->sent[i] = false;
    return;
  }
  int slot = (int)(tu_rand(&h->rng) % HR_SLOTS);
  if (h->live[slot].ptr == NULL) return;
  RAP_CHECK_OK(rap_ipc_export(h->top, h->live[slot].ptr, &h->desc[i]));
  h->sent[i] = true;
}

static void hr_step(hr *h) {
  uint64_t r = tu_rand(&h->rng);
  int slot = (int)((r >> 16) % HR_SLOTS), qi = (int)((r >> 24) % HR_QUEUES);
  unsigned op = (unsigned)(r % 100);
  if (op < 34) {
    if (h->live[slot].ptr == NULL) hr_allocate(h, slot, 0);
    else hr_free(h, slot);
  } else if (op < 60) {
    if (h->live[slot].ptr != NULL) hr_free(h, slot);
    else hr_allocate(h, slot, 0);
  } else if (op < 66) {
    if (h->live[slot].ptr == NULL) hr_allocate(h, slot, 1 + (long)((r >> 32) % 3));
  } else if (op < 74) {
    if (h->P->queues) hr_gate(h, qi);
  } else if (op < 81) {
    if (h->P->queues) hr_open(h, qi);
  } else if (op < 89) {
    RAP_CHECK_OK(rap_release(h->top));
  } else if (op < 92) {
    if (h->P->sleeps) hr_sleep(h);
  } else if (op < 95) {
    hr_own(h, (int)((r >> 32) % HR_OWN));
  } else if (op < 98) {
    if (h->P->queues && h->live[slot].ptr != NULL)
      RAP_CHECK_OK(rap_record_resource(h->top, h->live[slot].ptr, h->q[qi]));
  } else if (h->P->exports) {
    hr_export(h, (int)((r >> 32) % HR_EXPORTS));
  }
}

/* Where the platform's range starts: its first mapping goes there. */
static char *hr_range_base(rap_allocator *v) {
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(v, &p, 1, NULL));
  RAP_CHECK_OK(rap_deallocate(v, p, NULL));
  return p;
}

static void hr_start(hr *h, const hr_param *P) {
  memset(h, 0, sizeof *h);
  h->P = P;
  /* HR_SEED=N runs other seeds, for a longer hunt than the suite's. */
  const char *more = getenv("HR_SEED");
  h->rng = (P->seed + (more != NULL ? strtoull(more, NULL, 10) : 0)) * UINT64_C(0x9E3779B97F4A7C15) + 1;
  h->stride = P->gran >= ((size_t)1 << 20) ? (size_t)64 << 10 : 4096;
  h->rm = tu_manager();
  RAP_CHECK_OK(rap_allocator_make_spec(h->rm, "hunt", P->spec, &h->top));
  h->v = h->top;
  while (rap_allocator_parent(h->v) != NULL) h->v = rap_allocator_parent(h->v);
  h->pool = h->top;
  while (rap_allocator_parent(h->pool) != h->v) h->pool = rap_allocator_parent(h->pool);
  h->m.base = hr_range_base(h->v);
  h->m.gran = P->gran;
  /* Granules of the range (the reserve, from the spec's platform; the model holds at most 1024). */
  h->m.granules = P->gran == ((size_t)2 << 20) ? 256 : 384;
  for (int i = 0; P->queues && i < HR_QUEUES; i++) RAP_CHECK_OK(rap_resource_create_host_async(h->rm, &h->q[i]));
  RAP_CHECK_OK(rap_allocator_observe(h->pool, hr_on_pool, &h->m));
  RAP_CHECK_OK(rap_allocator_observe(h->v, hr_on_platform, &h->m));
}

static void hr_finish(hr *h) {
  hr_open_all(h);
  for (int i = 0; i < HR_EXPORTS; i++)
    if (h->sent[i]) RAP_CHECK_OK(rap_ipc_revoke(h->top, &h->desc[i]));
  for (int i = 0; i < HR_SLOTS; i++)
    if (h->live[i].ptr != NULL) hr_free(h, i);
  for (int i = 0; i < HR_OWN; i++)
    if (h->own[i].ptr != NULL) hr_own(h, i);
  hr_open_all(h);
  RAP_CHECK_OK(rap_release(h->top));
  hr_invariants(h, true);
  RAP_CHECK_EQ(tu_stats(h->pool).actual_bytes, 0);
  RAP_CHECK_EQ(tu_stats(h->v).actual_bytes, 0);
  RAP_CHECK_OK(rap_allocator_unobserve(h->pool, hr_on_pool, &h->m));
  RAP_CHECK_OK(rap_allocator_unobserve(h->v, hr_on_platform, &h->m));
  for (int i = 0; h->P->queues && i < HR_QUEUES; i++) RAP_CHECK_OK(rap_resource_destroy(h->q[i]));
  RAP_CHECK_OK(rap_manager_destroy(h->rm));
  for (int i = 0; i < h->ngates; i++) gate_destroy(&h->gates[i]);
}

RAP_TEST_P(HuntRelease, RandomStepsKeepEveryInvariant, hr_param, hr_params) {
  static hr h;
  hr_start(&h, param);
  const char *steps = getenv("HR_STEPS");
  unsigned n = steps != NULL ? (unsigned)strtoul(steps, NULL, 10) : param->steps;
  for (h.step = 1; h.step <= n; h.step++) {
    hr_step(&h);
    hr_invariants(&h, h.step % 8 == 0);
  }
  hr_finish(&h);
}

/* ---- targeted tests ---------------------------------------------------------------------------- */

#define G ((size_t)64 * 1024)

typedef struct hr_pool {
  const char *label;
  const char *strategy;
} hr_pool;

static const hr_pool hr_pools[] = {
    {"QuickPool", "QuickPool"}, {"DynamicPoolList", "DynamicPoolList"},
    {"ResourceAwarePool", "ResourceAwarePool"},
};

/* Granule by granule, what the pool's observer holds mapped is what is mapped. */
static void hr_told_is_mapped(hr_model *m, size_t not_the_pools, int line) {
  if (m->errors) rap_test_fail(__FILE__, line, "%s (%d errors)", m->first, m->errors);
  for (size_t g = 0; g < m->granules; g++)
    if (g != not_the_pools && m->told[0][g] != hr_mapped(m->base + g * m->gran))
      rap_test_fail(__FILE__, line, "granule %zu: the observer holds it %s, it is %s", g,
                    m->told[0][g] ? "mapped" : "unmapped", m->told[0][g] ? "not" : "mapped");
}

/* A heuristic's trim keeps what the peak of used bytes needs, and that line can fall inside a
 * mapping a release gave back: the mapping stays (whole mappings only), unmapped, and observers
 * must not hear of it as grown back. Chunk A (16 granules, one mapping) is cut in three, its ends
 * freed; a block of the platform's own after it makes the next growth a chunk B: d (7), b (8) and
 * c (7), each a mapping, none fitting A's free ends. The peak of used bytes is 26 granules, A holds
 * 16, so a trim of B keeps 10: inside b's mapping, which the release unmapped. */
RAP_TEST_P(HuntRelease, ATrimThatKeepsAHoleDoesNotTellItAsGrown, hr_pool, hr_pools) {
  rap_manager *rm = tu_manager();
  rap_allocator *v = tu_make(rm, "v", "HostVmm", NULL, "reserve=4MiB granularity=64KiB");
  char opts[160];
  snprintf(opts, sizeof opts, "initial_size=%zu next_size=%zu heuristic=percent_releasable_hwm:30", 16 * G, G);
  rap_allocator *pool = tu_make(rm, "pool", param->strategy, "v", opts);
  static hr_model m;
  memset(&m, 0, sizeof m);
  m.base = hr_range_base(v);
  m.gran = G;
  m.granules = 64;
  RAP_CHECK_OK(rap_allocator_observe(pool, hr_on_pool, &m));
  char *a1 = tu_alloc(pool, 6 * G), *a2 = tu_alloc(pool, 4 * G), *a3 = tu_alloc(pool, 6 * G);
  RAP_CHECK(a1 == m.base && a3 == a1 + 10 * G);
  char *x = tu_alloc(v, G);
  RAP_CHECK(x == m.base + 16 * G);
  RAP_CHECK_OK(rap_deallocate(pool, a1, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, a3, NULL));
  char *d = tu_alloc(pool, 7 * G), *b = tu_alloc(pool, 8 * G), *c = tu_alloc(pool, 7 * G);
  RAP_CHECK(d == m.base + 17 * G && b == d + 7 * G && c == b + 8 * G);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_release(pool));   /* b's mapping goes; c keeps the tail in place */
  RAP_CHECK(!hr_mapped(b));
  hr_told_is_mapped(&m, 16, __LINE__);
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));   /* the tail: the heuristic trims it to 10 */
  RAP_CHECK_OK(rap_deallocate(pool, a2, NULL));   /* and a call after it: a deferred free merged */
  TU_CHECK(pool);
  hr_told_is_mapped(&m, 16, __LINE__);
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes + G, tu_stats(v).actual_bytes);
  RAP_CHECK_OK(rap_allocator_unobserve(pool, hr_on_pool, &m));
  RAP_CHECK_OK(rap_deallocate(pool, d, NULL));
  RAP_CHECK_OK(rap_deallocate(v, x, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A block exported and freed waits, pending, for its importer's close: with no importer, sleep
 * cannot wait for it, and says so, naming the export and rap_ipc_revoke, not a queue. */
RAP_TEST(HuntRelease, ASleepRefusedForAnExportNobodyImportedSaysSo) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "ResourceAwarePool(HostVmm(export=posix, "
                                       "granularity=64KiB, reserve=4MiB), initial_size=64KiB)", &pool));
  char *x = tu_alloc(pool, G), *y = tu_alloc(pool, G);
  tu_fill(y, G, 3);
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(pool, x, &d));
  RAP_CHECK_OK(rap_deallocate(pool, x, NULL));
  RAP_CHECK_STATUS(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "rap_ipc_export");
  RAP_CHECK_STR(rap_last_error(), "rap_ipc_revoke");
  RAP_CHECK(!rap_allocator_is_asleep(pool));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_ipc_revoke(pool, &d));
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  RAP_CHECK_OK(rap_allocator_wake(pool));
  RAP_CHECK(tu_intact(y, G, 3));
  RAP_CHECK_OK(rap_deallocate(pool, y, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Requests near a quarter of the address space, and past it, over a growable platform whose
 * chunk has holes: refused with a sentence, nothing changed, the pool serving after. */
static const hr_param hr_huge[] = {
    {"ResourceAwarePool", "ResourceAwarePool(" HV64 ", initial_size=64KiB, next_size=1MiB)", G, 0,
     false, false, false, false, 0, 0},
    {"QuickPool", "QuickPool(" HV64 ", initial_size=64KiB, next_size=1MiB)", G, 0, false, false,
     false, false, 0, 0},
    {"ThreadCache", "ThreadCache(ResourceAwarePool(" HV64 ", initial_size=64KiB))", G, 0, false,
     false, false, false, 0, 0},
};

RAP_TEST_P(HuntRelease, HugeRequestsAreRefusedWithASentence, hr_param, hr_huge) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", param->spec, &pool));
  char *a = tu_alloc(pool, 4 * G), *b = tu_alloc(pool, G);
  tu_fill(b, G, 9);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_release(pool));   /* a hole below b */
  rap_stats before = tu_stats(pool);
  const size_t sizes[] = {SIZE_MAX / 4 - 1, SIZE_MAX / 4, SIZE_MAX / 4 + 1, SIZE_MAX / 2, SIZE_MAX - 4096,
                          SIZE_MAX, (size_t)24 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = NULL;
    RAP_CHECK_STATUS(rap_allocate(pool, &p, sizes[i], NULL), RAP_ERR_NOMEM);
    RAP_CHECK(p == NULL && rap_last_error()[0] != '\0');
    TU_CHECK(pool);
    rap_stats now = tu_stats(pool);
    RAP_CHECK_EQ(now.current_bytes, before.current_bytes);
    RAP_CHECK_EQ(now.used_bytes + now.free_bytes + now.pending_bytes, now.actual_bytes);
  }
  RAP_CHECK(tu_intact(b, G, 9));
  char *c = tu_alloc(pool, 4 * G);   /* the hole serves again */
  memset(c, 1, 4 * G);
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- an exporting platform, with the importer in another process ------------------------------ */

/* A descriptor made before a release opens after it, and reads what the exporter wrote; a block
 * freed while imported stays pending, and mapped, through releases, until the importer closed it. */
RAP_TEST(HuntRelease, AnExportOutlivesReleasesAroundIt) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "ResourceAwarePool(HostVmm(export=posix, "
                                       "reserve=64MiB, granularity=64KiB), initial_size=64KiB, "
                                       "next_size=64KiB)", &pool));
  uint64_t *x = tu_alloc(pool, 4 * G);
  char *y = tu_alloc(pool, 4 * G), *z = tu_alloc(pool, G);
  RAP_CHECK(y == (char *)x + 4 * G && z == y + 4 * G);
  x[0] = 0xC0FFEE;
  x[G / 8] = 0xBADCAFE;
  rap_ipc_desc dx;
  RAP_CHECK_OK(rap_ipc_export(pool, x, &dx));
  RAP_CHECK_OK(rap_deallocate(pool, y, NULL));
  RAP_CHECK_EQ(pending_after_poll(pool), 0);   /* a release: y's mapping goes */
  RAP_CHECK(!hr_mapped(y));
  peer p;
  peer_start(&p);
  unsigned long long i = import(&p, &dx, "host");   /* made before the release, opened after */
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 0", i), 0xC0FFEE);
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu %zu", i, G), 0xBADCAFE);
  RAP_CHECK_OK(rap_deallocate(pool, x, NULL));   /* freed while imported: pending */
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK(tu_stats(pool).pending_bytes >= 4 * G);
  RAP_CHECK(hr_mapped(x));
  PEER_OK(&p, "write %llu 16 %d", i, 0x5EED);
  RAP_CHECK_EQ(x[2], 0x5EED);   /* one memory, both sides */
  TU_CHECK(pool);
  PEER_OK(&p, "close %llu host", i);
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  TU_CHECK(pool);
  peer_end(&p, true);
  RAP_CHECK_OK(rap_release(pool));   /* the importer is gone: x's mappings go too */
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, G);
  char *w = tu_alloc(pool, 8 * G);   /* x and y again, mapped anew */
  RAP_CHECK(w == (char *)x);
  memset(w, 7, 8 * G);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, w, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, z, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
