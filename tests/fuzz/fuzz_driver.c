/* fuzz_driver.c — decodes bytes into operations on a pool built from a random spec, runs them on
 * the library and on the model (model.c), and aborts on any difference.
 *
 * Input: 6 bytes of configuration, then operations of one opcode byte and up to four argument bytes
 * (missing bytes read as 0). The pool is QuickPool, DynamicPoolList or ResourceAwarePool over HOST,
 * with up to two wrappers outside it (ThreadSafe, SizeLimiter, Fault) and one inside (Fault,
 * SizeLimiter, ThreadSafe), built with rap_allocator_make_spec. Resources are the host and three
 * host_async queues; a queue is made busy by a closed gate and runs when the input says so, so a run
 * is the same every time. When the host blocks inside a pool call (the pool waits for pending
 * events before reporting out of memory, or a host-side cross-resource wait), its host_wait hook
 * (src/rap_testing.h) lets every queue run, and the model is told.
 *
 * Lifecycle (configuration bit 0x80 of byte 4; inputs without it decode as before): the pool may
 * also be a FixedPool (over HOST or over the pool) or one pool over another, and opcode bytes from
 * 0xE0 are lifecycle operations: destroy a queue (refused exactly while it owns a live block; else
 * a fresh queue takes its slot), busy or not, its gate opened first or by the hook (which then
 * opens only the gates that queue waits behind); destroy the whole allocator chain and build it
 * again (refused while blocks are live); let one queue run alone, so that waits queued on a queue
 * outlive it; and two scenarios of the contract, "lend" (a use outlives the owner) and "wait on"
 * (a queued cross-resource wait outlives the queue it waits for).
 *
 * ThreadCache (configuration byte 1's bits 4-7 equal to 8 and byte 3's bits 6-7 clear, a pattern no
 * input of the corpus had before ThreadCache came; byte 0 / 3 picks where and how): a ThreadCache
 * outermost or right over the pool, with the default bounds or small ones (cache_bytes=64KiB,
 * cache_blocks=2, max_size=4KiB) so that trims and flushes come within short inputs. The model
 * counts a cached request as its class from the ThreadCache down, and the pool's figures hold the
 * cached blocks besides; wrappers above it
 * count the request. A Fault or SizeLimiter under the ThreadCache sees refills, not requests: its
 * refusals are read from it, and a SizeLimiter's refusal can be met from the cache only.
 *
 * Checked after every operation: each status against the model (or, where the model cannot know,
 * that out of memory came with a parent refusal and changed nothing), no two live blocks overlap,
 * alignment, the hand-out rule of §3.1 (model.h), current_bytes and allocation_count exactly,
 * pending bytes at least what has not passed, per-resource figures, rap_allocator_check on every
 * allocator in the chain, each pool's chunks equal to what its parent holds for it, each block's
 * fill pattern before it is freed, and a clean teardown. A queue that should have run everything
 * but has not after FZ_STUCK_SECONDS is a failure too (a wait queued on a destroyed queue's event).
 *
 * The growable platform's host analogue (rap_fuzz_vmm: rap_fuzz_replay --vmm, or RAP_FUZZ_VMM=1 in
 * the environment of rap_fuzz): every input decodes as usual, but the platform at the bottom is a
 * HostVmm with 64 KiB granules in place of HOST, so a pool right over it grows its chunk in place
 * and gives free tail pages back, and the same checks hold (the platform's live bytes are the
 * pool's chunks, grown and trimmed).
 */
#include "model.h"

#include "../c/gate.h"

#include <rap/rap.h>
#include <rap/strategy.h>
#include "rap_testing.h"   /* the Fault calls, the host_async hooks and views */

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int fz_queue_waits(rap_resource *r, rap_resource *const *queues, int n, unsigned *mask,
                   bool (*blocked)(rap_resource *target, uint64_t seq));
uint64_t fz_queue_submitted(rap_resource *r);
extern size_t fz_unheld_waits;
void fz_wait_queued(void *ctx, rap_resource *r, rap_resource *target, uint64_t point);
void fz_queue_forget_waits(void);
void fz_queue_forget(rap_resource *r);
void fz_report(FILE *out);

enum { K_QUICK, K_DPL, K_RAP, K_FIXED, K_COUNT };
static const char *const kind_names[K_COUNT] = {"QuickPool", "DynamicPoolList", "ResourceAwarePool",
                                                "FixedPool"};
enum { W_NONE, W_THREADSAFE, W_LIMITER, W_FAULT };
enum { FZ_STUCK_SECONDS = 20 };   /* far more than any queue here needs once its gates are open */
/* ThreadCache in the stack: byte 1's bits 4-7 equal to FZ_TC_B1 and byte 3's bits 6-7 clear, bits
 * that nothing else reads: no input of the corpus had that pattern when ThreadCache came, so each
 * decodes as it did. */
enum { FZ_TC_B1 = 8 };
/* Nonzero: HostVmm ("fzvmm", made on demand like HOST) in HOST's place (replay.c sets it). */
int rap_fuzz_vmm;
#define FZ_VMM_NAME "fzvmm"
#define FZ_VMM_OPTIONS "reserve=4GiB granularity=64KiB"

static const char *platform_name(void) { return rap_fuzz_vmm ? FZ_VMM_NAME : "HOST"; }

/* Operations run, per strategy (and ResourceAwarePool with cross_resource=wait), for the report. */
static size_t ops_run[K_COUNT + 1], inputs_run[K_COUNT + 1], host_blocks;
/* Lifecycle, for the report: inputs, pools over pools, queue destroys done and refused, chains
 * destroyed and built again, chain destroys refused. */
static size_t lc_inputs, lc_stacked, lc_destroyed, lc_refused, lc_rebuilt, lc_chain_refused;
/* Of the queues destroyed: with another queue's wait queued on them, with uses recorded on them,
 * leaving a block pending for a use that has not passed. */
static size_t lc_waited_on, lc_with_uses, lc_orphans, cross_waits;
/* ThreadCache, for the report: inputs and operations; allocations served from the cache;
 * deallocations after which the cache held less (a trim); out of memory with blocks
 * cached (all given back); unpassed hazards found cached; resource destroys that took cached blocks
 * back; requests a FixedPool under it refused as larger than its objects once rounded. */
static size_t tc_inputs, tc_ops, tc_hits, tc_trims, tc_oom_flushes, tc_cached_hazards,
    tc_destroy_flushes, tc_fixed_invalid;

typedef struct gate_node {
  gate g;
  uint64_t job;   /* its queue's job number: an event recorded with a seq below it runs before it */
  struct gate_node *next;
} gate_node;

typedef struct wrapper {
  rap_allocator *a;
  int kind;            /* W_* */
  size_t limit;        /* SizeLimiter */
  size_t fail_left;    /* Fault: the model's count of failures still configured */
  size_t requests;     /* Fault: requests seen, as of the last look */
  bool below_tc;       /* under the ThreadCache: it sees refills, not the user's requests */
} wrapper;

typedef struct run {
  const uint8_t *data;
  size_t size, pos;
  int kind;            /* of the pool under test (the outermost pool) */
  bool lifecycle;      /* configuration bit: lifecycle operations and configurations */
  size_t object_size;  /* FixedPool */
  char spec[640];
  rap_manager *rm;
  rap_allocator *top, *pool, *lower, *host_platform;   /* lower: a pool under the pool, or NULL */
  rap_allocator *chain[8];
  int nchain;
  wrapper outer[2];    /* outermost first */
  int nouter;
  wrapper inner;       /* between the pool (or the pool under it) and HOST; kind W_NONE if none */
  size_t olim, ilim;   /* the SizeLimiters' limits, outside and inside */
  bool cross_wait;
  rap_allocator *tc;   /* the ThreadCache, or NULL */
  int tc_index;        /* its place in chain */
  bool tc_over_pool;   /* its parent is the pool: its per-resource figures mean something */
  size_t tc_max_size, tc_cap, tc_refill;   /* its max_size and cache_bytes options; a refill's most */
  rap_resource *res[FZ_RES];   /* 0: the host; 1..FZ_QUEUES: queues */
  gate_node *gates[FZ_RES];
  model m;
  size_t align;
  uintptr_t freed[8];
  unsigned nfreed, seed;
  bool in_call, blocked, precise, trace;
  unsigned blocked_set;   /* the queues the hook let run */
  int op;
  const char *opname;
} run;

static run R;
static pthread_t fz_main;
static bool event_blocked(rap_resource *t, uint64_t seq);

/* ---- failure ------------------------------------------------------------------------------- */

__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "\nrap fuzz: MISMATCH at op %d (%s): ", R.op, R.opname ? R.opname : "setup");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n  spec: %s\n  last error: %s\n", R.spec, rap_last_error());
  if (R.trace) m_dump(&R.m, stderr);
  abort();
}

#define EXPECT(cond, ...) \
  do {                    \
    if (!(cond)) fail(__VA_ARGS__); \
  } while (0)

static void expect_status(int got, int want, const char *call) {
  if (got != want) fail("%s returned %s, the model says %s", call, rap_status_name(got), rap_status_name(want));
  if (got != RAP_OK && rap_last_error()[0] == '\0') fail("%s failed with no sentence in rap_last_error()", call);
}

/* ---- the host-block hook, queues and gates ----------------------------------------------------- */

static const unsigned ALL_QUEUES = ((1u << FZ_RES) - 1u) & ~1u;

static void open_gates(int q) {
  for (gate_node *g = R.gates[q]; g != NULL; g = g->next) gate_open(&g->g);
}

static void free_gates(int q) {
  for (gate_node *g = R.gates[q], *next; g != NULL; g = next) {
    next = g->next;
    gate_destroy(&g->g);
    free(g);
  }
  R.gates[q] = NULL;
}

/* The host_wait hook (src/rap_testing.h): every wait of the host for a host_async queue comes here,
 * and again until the queue reaches the point. Inside a pool call the host is about to wait for a
 * queue: let every queue run (R.precise: only the queue it waits for and what that one waits for,
 * so that the others keep their order). No wait of the driver's own thread may take long, since
 * every gate it waits behind is open: one in which the queue finishes no job for FZ_STUCK_SECONDS
 * is reported. */
static void host_wait(void *ctx, rap_resource *r, uint64_t point) {
  (void)ctx;
  bool reached = false;
  if (!pthread_equal(pthread_self(), fz_main)) {
    rap_host_async_wait_until(r, point, FZ_STUCK_SECONDS, &reached);
    return;
  }
  int k = 0;
  for (int q = 1; q <= FZ_QUEUES && k == 0; q++)
    if (R.res[q] == r) k = q;
  if (R.in_call) {
    unsigned set = ALL_QUEUES;
    if (R.precise && k > 0) set = m_fwd_closure(&R.m, k);
    if (!R.blocked || (set & ~R.blocked_set) != 0) {
      R.blocked = true;
      for (int q = 1; q <= FZ_QUEUES; q++)
        if ((set & ~R.blocked_set) >> q & 1u) open_gates(q);
      R.blocked_set |= set;
    }
  }
  rap_host_async_view before, after;
  expect_status(rap_host_async_view_of(r, &before), RAP_OK, "rap_host_async_view_of");
  expect_status(rap_host_async_wait_until(r, point, FZ_STUCK_SECONDS, &reached), RAP_OK,
                "rap_host_async_wait_until");
  expect_status(rap_host_async_view_of(r, &after), RAP_OK, "rap_host_async_view_of");
  if (!reached && after.completed == before.completed)
    fail("the host has waited %d s for %s%d, which should have run everything by then (every gate "
         "it waits behind is open)", FZ_STUCK_SECONDS, k > 0 ? "queue " : "an unknown queue ", k);
}

static const rap_host_async_hooks hooks = {.host_wait = host_wait, .wait_queued = fz_wait_queued};

static void sync_queue(int q) {
  open_gates(q);
  expect_status(rap_resource_synchronize(R.res[q]), RAP_OK, "rap_resource_synchronize");
  free_gates(q);
}

/* Every queue in set runs everything (but `gone`, a queue destroyed meanwhile, whose gates ran);
 * a queue outside set that only waited for them is idle too. */
static void pass_queues(unsigned set, int gone) {
  for (int q = 1; q <= FZ_QUEUES; q++)
    if ((set >> q & 1u) && q != gone) open_gates(q);
  for (int q = 1; q <= FZ_QUEUES; q++)
    if (set >> q & 1u) {
      if (q != gone) sync_queue(q);
      else free_gates(q);
    }
  m_passed_set(&R.m, set);
  for (int q = 1; q <= FZ_QUEUES; q++)
    if (!(set >> q & 1u) && q != gone && !m_busy(&R.m, q))
      expect_status(rap_resource_synchronize(R.res[q]), RAP_OK, "rap_resource_synchronize");
  if (set == ALL_QUEUES) fz_queue_forget_waits();
}

static void pass_set(unsigned set) { pass_queues(set, 0); }

static void call_begin(void) {
  R.in_call = true;
  R.blocked = false;
  R.blocked_set = 0;
}

/* Returns whether the host blocked; if so, every queue it let run has run everything. */
static bool call_end(void) {
  R.in_call = false;
  R.precise = false;
  if (!R.blocked) return false;
  host_blocks++;
  pass_set(R.blocked_set);
  return true;
}

/* ---- reading the input ------------------------------------------------------------------------ */

static unsigned byte(void) { return R.pos < R.size ? R.data[R.pos++] : 0u; }

static size_t size_arg(void) {
  unsigned b = byte(), c = byte();
  unsigned v = (b >> 3) | (c << 5);
  switch (b & 7u) {
  case 0: return 0;
  case 1: return 1 + v % 64;
  case 2: return 1 + v % 1024;
  case 3: return 1 + v % 8192;
  case 4: return 1 + (size_t)v * 37 % 65536;
  case 5: return 1 + (size_t)v * 131 % (512 * 1024);
  case 6: return (size_t)(v % 64 + 1) * 4096;
  default: {
    static const size_t special[] = {SIZE_MAX, SIZE_MAX / 2, SIZE_MAX / 4 + 1, (size_t)1 << 20,
                                     ((size_t)1 << 20) + 1, (size_t)2 << 20, 256, 255};
    return special[v % 8];
  }
  }
}

/* ---- building the pool ------------------------------------------------------------------------ */

static bool is_pool(const char *strategy) {
  for (int k = 0; k < K_COUNT; k++)
    if (strcmp(strategy, kind_names[k]) == 0) return true;
  return false;
}

/* Makes the chain from R.spec and finds its levels: wrappers outside the pool, the pool, a pool
 * under it, a wrapper inside, HOST. Run at the start and after the chain was destroyed. */
static void make_chain(void) {
  R.nchain = R.nouter = 0;
  R.pool = R.lower = R.host_platform = R.tc = NULL;
  memset(R.outer, 0, sizeof R.outer);
  memset(&R.inner, 0, sizeof R.inner);
  rap_allocator *vmm = NULL;
  if (rap_fuzz_vmm && rap_allocator_get(R.rm, FZ_VMM_NAME, &vmm) != RAP_OK)   /* made again after a destroy */
    expect_status(rap_allocator_make(R.rm, FZ_VMM_NAME, "HostVmm", NULL, FZ_VMM_OPTIONS, &vmm), RAP_OK,
                  "rap_allocator_make(HostVmm)");
  expect_status(rap_allocator_make_spec(R.rm, "fz", R.spec, &R.top), RAP_OK, "rap_allocator_make_spec");
  for (rap_allocator *a = R.top; a != NULL; a = rap_allocator_parent(a)) {
    EXPECT(R.nchain < 8, "the chain is too long");
    R.chain[R.nchain++] = a;
    const char *s = rap_allocator_strategy(a);
    int w = strcmp(s, "ThreadSafe") == 0 ? W_THREADSAFE : strcmp(s, "SizeLimiter") == 0 ? W_LIMITER
          : strcmp(s, "Fault") == 0 ? W_FAULT : W_NONE;
    if (is_pool(s)) {
      if (R.pool == NULL) R.pool = a;
      else R.lower = a;
    } else if (strcmp(s, "HOST") == 0 || strcmp(s, "HostVmm") == 0) {
      R.host_platform = a;
    } else if (strcmp(s, "ThreadCache") == 0) {
      R.tc = a;
      R.tc_index = R.nchain - 1;
    } else if (R.pool == NULL) {
      R.outer[R.nouter++] = (wrapper){a, w, R.olim, 0, 0, R.tc != NULL};
    } else {
      R.inner = (wrapper){a, w, R.ilim, 0, 0, false};
    }
  }
  EXPECT(R.pool != NULL && R.host_platform != NULL, "the spec did not build a pool over HOST");
  EXPECT(strcmp(rap_allocator_strategy(R.pool), kind_names[R.kind]) == 0, "the pool is a %s, not a %s",
         rap_allocator_strategy(R.pool), kind_names[R.kind]);
  R.align = rap_allocator_alignment(R.pool);
  EXPECT(rap_allocator_alignment(R.top) == R.align, "the top reports alignment %zu, the pool %zu",
         rap_allocator_alignment(R.top), R.align);
  R.tc_over_pool = R.tc != NULL && rap_allocator_parent(R.tc) == R.pool;
}

/* The model's pool after make_chain: m_init or m_reset_pool, then what the ThreadCache caches. */
static void model_tc(void) { R.m.tc_max = R.tc != NULL ? R.tc_max_size : 0; }

static void set_spec(const char *spec) {
  size_t len = strlen(spec);
  if (len >= sizeof R.spec) len = sizeof R.spec - 1;
  memcpy(R.spec, spec, len);
  R.spec[len] = '\0';
}

static void build(void) {
  unsigned b0 = byte(), b1 = byte(), b2 = byte(), b3 = byte(), b4 = byte(), b5 = byte();
  static const char *const initial[] = {"4KiB", "16KiB", "64KiB", "256KiB", "1MiB", "1KiB", "512", "2MiB"};
  static const char *const next[] = {"256", "1KiB", "4KiB", "64KiB", "1MiB", "16KiB", "0", "8KiB"};
  static const char *const align[] = {NULL, "16", "64", "256", "4096", "1", "8", "512"};
  static const char *const heur[] = {NULL, "never", "percent_releasable:0", "percent_releasable:50",
                                     "percent_releasable:100", "blocks_releasable:1",
                                     "blocks_releasable_hwm:2", "percent_releasable_hwm:75"};
  static const size_t outer_limit[] = {4096, 65536, 1 << 20, 16 << 20};
  static const size_t inner_limit[] = {256 << 10, 1 << 20, 4 << 20, 64 << 20};
  /* Lifecycle configurations: a FixedPool's object size and objects per chunk; the chunk sizes
   * of a pool under the pool. */
  static const size_t object_size[] = {16, 64, 100, 256, 1000, 4096, 65536, 1};
  static const unsigned per_chunk[] = {64, 1, 7, 1024};
  static const char *const lower_initial[] = {"256KiB", "1MiB", "4MiB", "64KiB"};
  static const char *const lower_next[] = {"1MiB", "64KiB", "0", "4MiB"};
  int base = (int)(b0 % 3);
  R.lifecycle = b4 >> 7 & 1u;
  int shape = R.lifecycle ? (int)(b2 >> 2 & 3u) : 0;   /* 0 one pool, 1 FixedPool, 2-3 pool over pool */
  R.kind = shape == 1 ? K_FIXED : base;
  bool wait = base == K_RAP && (b4 >> 6 & 1u);
  int o1 = (int)(b1 & 3u), o2 = (int)(b1 >> 2 & 3u), in = (int)(b2 & 3u);
  /* ThreadCache: byte 0 / 3 (what byte 0 % 3 leaves) says outermost or over the pool, and small
   * bounds or the defaults. */
  bool tc = (b1 >> 4) == FZ_TC_B1 && (b3 >> 6) == 0u, tc_top = (b0 / 3u) & 1u, tc_small = (b0 / 3u) >> 1 & 1u;
  const char *tc_opts = tc_small ? ", cache_bytes=64KiB, cache_blocks=2, max_size=4KiB" : "";
  R.tc_max_size = tc_small ? 4096 : (size_t)1 << 20;
  R.tc_cap = tc_small ? 65536 : (size_t)4 << 20;
  R.tc_refill = tc_small ? 1 : 8;   /* a refill takes half a bin (cache_blocks / 2), at least one */
  size_t olim = outer_limit[b5 & 3u], ilim = inner_limit[b5 >> 2 & 3u];

  char inner[128], pool[320], lower[448], tmp[sizeof R.spec + 64];
  const char *plat = platform_name();
  if (in == W_FAULT) snprintf(inner, sizeof inner, "Fault(%s)", plat);
  else if (in == W_LIMITER) snprintf(inner, sizeof inner, "SizeLimiter(%s, limit=%zu)", plat, ilim);
  else if (in == W_THREADSAFE) snprintf(inner, sizeof inner, "ThreadSafe(%s)", plat);
  else snprintf(inner, sizeof inner, "%s", plat);
  if (shape >= 2) {   /* the pool under test over another kind of pool */
    snprintf(lower, sizeof lower, "%s(%s, initial_size=%s, next_size=%s%s)",
             kind_names[(base + shape - 1) % 3], inner, lower_initial[b5 >> 4 & 3u],
             lower_next[b5 >> 6 & 3u], (base + shape - 1) % 3 == K_RAP ? ", cross_resource=wait" : "");
    snprintf(inner, sizeof inner, "%s", "");
  }
  const char *parent = shape >= 2 ? lower : inner;
  int n = snprintf(pool, sizeof pool, "%s(%s, initial_size=%s, next_size=%s", kind_names[base], parent,
                   initial[b3 & 7u], next[b3 >> 3 & 7u]);
  if (align[b4 & 7u]) n += snprintf(pool + n, sizeof pool - (size_t)n, ", alignment=%s", align[b4 & 7u]);
  if (heur[b4 >> 3 & 7u]) n += snprintf(pool + n, sizeof pool - (size_t)n, ", heuristic=%s", heur[b4 >> 3 & 7u]);
  if (wait) n += snprintf(pool + n, sizeof pool - (size_t)n, ", cross_resource=wait");
  snprintf(pool + n, sizeof pool - (size_t)n, ")");
  if (shape == 1) {   /* a FixedPool over HOST, or over the pool */
    R.object_size = object_size[b2 >> 4 & 7u];
    snprintf(R.spec, sizeof R.spec, "FixedPool(%s, object_size=%zu, objects_per_chunk=%u)",
             b2 >> 7 ? pool : inner, R.object_size, per_chunk[b5 >> 4 & 3u]);
  } else {
    snprintf(R.spec, sizeof R.spec, "%s", pool);
  }
  if (tc && !tc_top) {
    snprintf(tmp, sizeof tmp, "ThreadCache(%s%s)", R.spec, tc_opts);
    set_spec(tmp);
  }
  const int outers[2] = {o2, o1};   /* innermost first */
  for (int i = 0; i < 2; i++) {
    if (outers[i] == W_THREADSAFE) snprintf(tmp, sizeof tmp, "ThreadSafe(%s)", R.spec);
    else if (outers[i] == W_LIMITER) snprintf(tmp, sizeof tmp, "SizeLimiter(%s, limit=%zu)", R.spec, olim);
    else if (outers[i] == W_FAULT) snprintf(tmp, sizeof tmp, "Fault(%s)", R.spec);
    else continue;
    size_t len = strlen(tmp);
    if (len >= sizeof R.spec) len = sizeof R.spec - 1;
    memcpy(R.spec, tmp, len);
    R.spec[len] = '\0';
  }
  if (tc && tc_top) {
    snprintf(tmp, sizeof tmp, "ThreadCache(%s%s)", R.spec, tc_opts);
    set_spec(tmp);
  }

  expect_status(rap_manager_create(&R.rm), RAP_OK, "rap_manager_create");
  R.olim = olim;
  R.ilim = ilim;
  R.cross_wait = wait && R.kind == K_RAP;
  make_chain();
  m_init(&R.m, R.kind == K_RAP, R.cross_wait, R.align);
  model_tc();
  expect_status(rap_resource_host(R.rm, &R.res[0]), RAP_OK, "rap_resource_host");
  for (int q = 1; q <= FZ_QUEUES; q++) {
    expect_status(rap_resource_create_host_async(R.rm, &R.res[q]), RAP_OK, "rap_resource_create_host_async");
  }
}

/* ---- looking at the library --------------------------------------------------------------------- */

static rap_stats stats(rap_allocator *a) {
  rap_stats s;
  memset(&s, 0, sizeof s);
  expect_status(rap_allocator_stats(a, &s), RAP_OK, "rap_allocator_stats");
  return s;
}

static size_t fault_requests(rap_allocator *f) {
  size_t n = 0;
  expect_status(rap_fault_requests(f, &n), RAP_OK, "rap_fault_requests");
  return n;
}

/* A Fault's refusals since the last look, for one whose requests the model cannot foresee (the
 * pool's growth, a ThreadCache's refills): it fails the first fail_left requests it sees. */
static size_t fault_failures(wrapper *w, const char *where) {
  if (w->kind != W_FAULT) return 0;
  size_t now = fault_requests(w->a), seen = now - w->requests;
  size_t failed = seen < w->fail_left ? seen : w->fail_left;
  if (R.trace && seen > 0)
    fprintf(stderr, "  %s Fault: %zu requests, %zu refused, %zu refusals left\n", where, seen, failed,
            w->fail_left - failed);
  w->fail_left -= failed;
  w->requests = now;
  return failed;
}

/* The inner Fault's refusals since the last look, and those of a Fault under the ThreadCache. */
static size_t inner_failures(void) {
  size_t failed = fault_failures(&R.inner, "inner");
  for (int i = 0; i < R.nouter; i++)
    if (R.outer[i].below_tc) failed += fault_failures(&R.outer[i], "outer (under the ThreadCache)");
  return failed;
}

static unsigned char pattern(unsigned seed, size_t i) { return (unsigned char)(seed * 167u + i * 13u + 1u); }

static void fill_block(m_block *b) {
  unsigned char *p = (unsigned char *)b->p;
  size_t head = b->n < 256 ? b->n : 256;
  for (size_t i = 0; i < head; i++) p[i] = pattern(b->seed, i);
  for (size_t i = b->n > 256 ? b->n - 256 : head; i < b->n; i++) p[i] = pattern(b->seed, i);
}

static void check_pattern(int slot) {
  const m_block *b = &R.m.slot[slot];
  const unsigned char *p = (const unsigned char *)b->p;
  size_t head = b->n < 256 ? b->n : 256;
  for (size_t i = 0; i < head; i++)
    EXPECT(p[i] == pattern(b->seed, i), "block %p (slot %d, %zu bytes) lost byte %zu", (void *)b->p, slot, b->n, i);
  for (size_t i = b->n > 256 ? b->n - 256 : head; i < b->n; i++)
    EXPECT(p[i] == pattern(b->seed, i), "block %p (slot %d, %zu bytes) lost byte %zu", (void *)b->p, slot, b->n, i);
}

static void check_chain(void) {
  for (int i = 0; i < R.nchain; i++)
    EXPECT(rap_allocator_check(R.chain[i]) == RAP_OK, "rap_allocator_check('%s') failed",
           rap_allocator_name(R.chain[i]));
}

static rap_stats tc_stats(void) {
  rap_stats s;
  memset(&s, 0, sizeof s);
  return R.tc != NULL ? stats(R.tc) : s;
}

/* The live figures level i of the chain (0: the top) must show: above a ThreadCache the bytes
 * asked for; at it their classes, cached blocks left out; under it (the pool included) the classes
 * and the cached blocks. A ThreadSafe shows what it wraps. Without a ThreadCache all are the
 * bytes asked for. */
static void expected_live(int i, const rap_stats *c, size_t *bytes, size_t *count) {
  while (i < R.nchain - 1 && strcmp(rap_allocator_strategy(R.chain[i]), "ThreadSafe") == 0) i++;
  *count = R.m.count;
  if (R.tc == NULL || i < R.tc_index) {
    *bytes = R.m.current;
  } else if (i == R.tc_index) {
    *bytes = R.m.counted;
  } else {
    *bytes = R.m.counted + c->cached_bytes;
    *count += c->cached_count;
  }
}

/* Whether used_bytes of the live view (the ThreadCache's, or the pool's) may be compared before and
 * after a call. A ThreadCache takes its cached blocks' classes off its parent's used_bytes, but the
 * parent counts a block's real size (a FixedPool's stride; a ResourceAwarePool's whole pending
 * block, reused for a smaller class), so the figure moves as the caches fill and empty (a finding,
 * see README.md): under a ThreadCache only current_bytes and allocation_count are compared. */
static bool tc_used_exact(void) { return R.tc == NULL; }

static int res_index(const rap_resource *r) {
  for (int i = 0; i < FZ_RES; i++)
    if (R.res[i] == r) return i;
  return -1;
}

/* Under a ThreadCache: marks each hazard that has not passed and whose first byte starts a block
 * the pool holds live that is no live block of the model: a block in a cache, which is not pending
 * in the pool (it will be once the cache gives it back). The cache holds it for its own resource,
 * or (a refill carved it out of a pending range) for a resource that may have it. */
static void mark_cached(void) {
  for (int i = 0; i < R.m.nhz; i++) {
    m_hazard *h = &R.m.hz[i];
    h->cached = false;
    if (R.tc == NULL || m_hazard_passed(&R.m, h) || m_find_live(&R.m, h->lo) >= 0) continue;
    rap_resource *who = NULL;
    if (rap_pointer_resource(R.pool, (void *)h->lo, &who) != RAP_OK) continue;
    h->cached = true;
    tc_cached_hazards++;
    int r = res_index(who);
    EXPECT(r >= 0 && (r == h->owner || (h->ents >> r & 1u) || R.m.cross_wait),
           "[%#lx, %#lx), pending on queues %#x, is cached for resource %d", (unsigned long)h->lo,
           (unsigned long)h->hi, h->ents, r);
  }
}

/* After every operation. */
static void verify(void) {
  check_chain();
  rap_stats t = stats(R.top), p = stats(R.pool), h = stats(R.host_platform), c = tc_stats();
  size_t want_bytes, want_count;
  for (int i = 0; i < R.nchain; i++) {   /* every level from the top to the pool */
    rap_stats s = i == 0 ? t : R.chain[i] == R.pool ? p : stats(R.chain[i]);
    expected_live(i, &c, &want_bytes, &want_count);
    const char *who = i == 0 ? "the top" : R.chain[i] == R.pool ? "the pool" : rap_allocator_strategy(R.chain[i]);
    EXPECT(s.current_bytes == want_bytes && s.allocation_count == want_count,
           "%s counts %zu blocks of %zu bytes, the model %zu of %zu", who, s.allocation_count,
           s.current_bytes, want_count, want_bytes);
    if (R.chain[i] == R.pool) break;
  }
  if (R.tc != NULL)
    EXPECT((c.cached_bytes == 0) == (c.cached_count == 0) && c.cached_bytes >= c.cached_count * R.align &&
           c.cached_bytes <= c.cached_count * m_tc_class(R.align, R.m.tc_max),
           "the ThreadCache holds %zu blocks of %zu bytes in its caches (its classes are %zu to %zu bytes)",
           c.cached_count, c.cached_bytes, R.align, m_tc_class(R.align, R.m.tc_max));
  EXPECT(p.high_watermark >= p.current_bytes && p.actual_high_watermark >= p.actual_bytes,
         "a high watermark is below the current figure");
  EXPECT(p.used_bytes + p.free_bytes + p.pending_bytes <= p.actual_bytes,
         "used %zu + free %zu + pending %zu bytes exceed the %zu held", p.used_bytes, p.free_bytes,
         p.pending_bytes, p.actual_bytes);
  EXPECT(p.largest_free_block <= p.free_bytes, "largest free block %zu > free bytes %zu",
         p.largest_free_block, p.free_bytes);
  rap_stats below = p;   /* the pool that takes its chunks from HOST (through the inner wrapper) */
  if (R.lower != NULL) {
    below = stats(R.lower);
    EXPECT(below.current_bytes == p.actual_bytes && below.allocation_count == p.chunk_count,
           "the pool under the pool holds %zu blocks of %zu bytes, the pool has %zu chunks of %zu",
           below.allocation_count, below.current_bytes, p.chunk_count, p.actual_bytes);
    EXPECT(below.used_bytes + below.free_bytes + below.pending_bytes <= below.actual_bytes,
           "under the pool: used %zu + free %zu + pending %zu bytes exceed the %zu held", below.used_bytes,
           below.free_bytes, below.pending_bytes, below.actual_bytes);
    EXPECT(below.pending_count == 0, "the pool under the pool, which only the host uses, has %zu pending "
           "blocks", below.pending_count);
  }
  /* A growable platform maps whole granules (so at least what it hands out), except where a pool
   * right over it gave pages back from inside free blocks: those stay addresses of its allocation,
   * not memory the pool holds. */
  size_t held = h.actual_bytes < h.current_bytes ? h.actual_bytes : h.current_bytes;
  EXPECT(held == below.actual_bytes, "HOST holds %zu bytes for the pool, the pool says %zu", held,
         below.actual_bytes);
  if (R.inner.kind == W_FAULT || R.inner.kind == W_LIMITER)
    EXPECT(stats(R.inner.a).current_bytes == below.actual_bytes, "the inner %s holds %zu bytes, the pool %zu",
           rap_allocator_strategy(R.inner.a), stats(R.inner.a).current_bytes, below.actual_bytes);
  if (!R.m.resource_aware) {
    EXPECT(p.pending_count == 0 && p.pending_bytes == 0, "a %s has pending blocks", kind_names[R.kind]);
    return;
  }
  /* Under a ThreadCache the pool's pending bytes may fall short of the model's by what the caches
   * hold: a refill may carve blocks for a cache out of a range pending on the same resource (or
   * one that waits for it), and the model does not see those blocks (it sees the one handed out). */
  mark_cached();
  size_t slack = c.cached_bytes;
  size_t must = m_unpassed_bytes(&R.m, -1);
  EXPECT(p.pending_bytes + slack >= must, "%zu bytes are pending%s, but %zu have not passed", p.pending_bytes,
         slack ? " (and some of the cached ones may have been)" : "", must);
  size_t pending = 0, cached = 0;
  for (int r = 0; r < FZ_RES; r++) {
    rap_stats s;
    expect_status(rap_allocator_resource_stats(R.pool, R.res[r], &s), RAP_OK, "rap_allocator_resource_stats");
    size_t cur = 0, cnt = 0;
    for (int i = 0; i < FZ_SLOTS; i++)
      if (R.m.slot[i].live && R.m.slot[i].owner == r) {
        cur += R.m.slot[i].cnt;
        cnt++;
      }
    if (R.tc_over_pool) {   /* the ThreadCache's own view of r, and the pool's with r's cached blocks */
      rap_stats v;
      expect_status(rap_allocator_resource_stats(R.tc, R.res[r], &v), RAP_OK, "rap_allocator_resource_stats");
      EXPECT(v.current_bytes == cur && v.allocation_count == cnt,
             "the ThreadCache: resource %d holds %zu blocks of %zu bytes, the model %zu of %zu", r,
             v.allocation_count, v.current_bytes, cnt, cur);
      EXPECT(s.current_bytes == cur + v.cached_bytes && s.allocation_count == cnt + v.cached_count,
             "the pool: resource %d holds %zu blocks of %zu bytes, the model %zu of %zu and %zu cached of %zu",
             r, s.allocation_count, s.current_bytes, cnt, cur, v.cached_count, v.cached_bytes);
      cached += v.cached_bytes;
    } else if (R.tc != NULL) {   /* the cached blocks of r: what the pool holds beyond the model */
      EXPECT(s.current_bytes >= cur && s.allocation_count >= cnt,
             "resource %d holds %zu blocks of %zu bytes, the model at least %zu of %zu", r,
             s.allocation_count, s.current_bytes, cnt, cur);
      cached += s.current_bytes - cur;
    } else {
      EXPECT(s.current_bytes == cur && s.allocation_count == cnt,
             "resource %d holds %zu blocks of %zu bytes, the model %zu of %zu", r, s.allocation_count,
             s.current_bytes, cnt, cur);
    }
    /* Under a ThreadCache with cross_resource=wait, a refill may carve a block for x out of a range
     * pending on r (x waits for r); given back, it is pending on x: only the total holds (above). */
    size_t mine = R.tc != NULL && R.m.cross_wait ? 0 : m_unpassed_bytes(&R.m, r);
    EXPECT(s.pending_bytes + slack >= mine, "resource %d has %zu bytes pending, but %zu have not passed", r,
           s.pending_bytes, mine);
    pending += s.pending_bytes;
  }
  EXPECT(cached == c.cached_bytes, "the resources' cached blocks come to %zu bytes, the ThreadCache's to %zu",
         cached, c.cached_bytes);
  /* Blocks pending on a destroyed queue (kept for a use that has not passed) may be nobody's. */
  EXPECT(R.m.orphans ? pending <= p.pending_bytes : pending == p.pending_bytes,
         "resources hold %zu pending bytes, the pool %zu", pending, p.pending_bytes);
  if (p.pending_count == 0 && c.cached_count == 0) m_drop_hazards(&R.m);
}

/* Every live block: its bytes, its owner, the allocator that owns it. */
static void deep_check(void) {
  for (int i = 0; i < FZ_SLOTS; i++) {
    const m_block *b = &R.m.slot[i];
    if (!b->live) continue;
    check_pattern(i);
    rap_resource *owner = NULL;
    expect_status(rap_pointer_resource(R.top, (void *)b->p, &owner), RAP_OK, "rap_pointer_resource");
    EXPECT(owner == R.res[R.m.resource_aware ? b->owner : 0], "block %p: owner is not resource %d",
           (void *)b->p, b->owner);
    rap_allocator *found = NULL;
    expect_status(rap_allocator_find(R.rm, (void *)b->p, &found), RAP_OK, "rap_allocator_find");
    EXPECT(found == R.top, "rap_allocator_find gives '%s' for a block of the top", rap_allocator_name(found));
  }
}

/* ---- operations ------------------------------------------------------------------------------- */

static int pick_live(unsigned hint) {
  int live = 0;
  for (int i = 0; i < FZ_SLOTS; i++) live += R.m.slot[i].live;
  if (live == 0) return -1;
  int k = (int)(hint % (unsigned)live);
  for (int i = 0; i < FZ_SLOTS; i++)
    if (R.m.slot[i].live && k-- == 0) return i;
  return -1;
}

/* Returns the slot of the new block, or -1. */
static int op_allocate(unsigned hint, unsigned rsel, size_t n) {
  int slot = -1;
  for (int i = 0; i < FZ_SLOTS && slot < 0; i++)
    if (!R.m.slot[(hint + (unsigned)i) % FZ_SLOTS].live) slot = (int)((hint + (unsigned)i) % FZ_SLOTS);
  if (slot < 0) return -1;
  if (R.kind == K_FIXED && n > R.object_size) n %= R.object_size + 1;   /* a FixedPool's objects only */
  int x = rsel % 5 < 2 ? 0 : (int)(rsel % 5) - 1;   /* 0: NULL, 1: the host, 2..4: queues */
  rap_resource *r = rsel % 5 == 0 ? NULL : R.res[x];
  /* What the ThreadCache and the pool count for it: n, or its class when the ThreadCache caches it
   * (then a refill asks the parent for the class). */
  size_t asked = m_tc_count(&R.m, n);
  bool via_cache = R.m.tc_max > 0 && n > 0 && n <= R.m.tc_max;
  /* A FixedPool under a ThreadCache refuses a class larger than its objects (RAP_ERR_INVALID); the
   * ThreadCache then asks it for the request itself, uncached, counted at its size. A SizeLimiter
   * between them may refuse the class first (out of memory). */
  bool too_big = via_cache && R.kind == K_FIXED && asked > R.object_size;
  if (too_big) {
    asked = n;
    via_cache = false;
  }

  /* What the wrappers outside the pool will say, outermost first. Those under a ThreadCache see
   * its refills: a SizeLimiter there refuses the class when even with every cache given back it
   * would pass the limit, and then only a block from the cache can answer. */
  int want = RAP_OK;
  bool may_fail = R.inner.kind == W_LIMITER, must_hit = false, above_refused = false;
  for (int i = 0; i < R.nouter && want == RAP_OK; i++) {
    wrapper *w = &R.outer[i];
    if (w->below_tc) {
      if (w->kind == W_LIMITER && (asked > w->limit || R.m.counted > w->limit - asked)) {
        if (via_cache) must_hit = true;
        else want = RAP_ERR_NOMEM;
      }
      continue;
    }
    if (w->kind == W_LIMITER && (n > w->limit || R.m.current > w->limit - n)) want = RAP_ERR_NOMEM;
    if (w->kind == W_FAULT) {
      size_t before = fault_requests(w->a);
      EXPECT(before == w->requests, "the outer Fault saw %zu requests, the model %zu", before, w->requests);
      w->requests++;
      if (w->fail_left > 0) {
        w->fail_left--;
        want = RAP_ERR_NOMEM;
      }
    }
    above_refused = want != RAP_OK;
  }
  if (want == RAP_OK && n > SIZE_MAX / 4) want = RAP_ERR_NOMEM;   /* no pool can hold it */
  for (int i = 0; i < R.nouter && too_big; i++)
    if (R.outer[i].below_tc && R.outer[i].kind == W_LIMITER) may_fail = true;

  rap_stats before = stats(R.pool), tcb = tc_stats();
  void *sentinel = &before, *p = sentinel;
  call_begin();
  int st = rap_allocate(R.top, &p, n, r);
  bool blocked = call_end();
  size_t refused = inner_failures();
  for (int i = 0; i < R.nouter; i++)
    if (R.outer[i].kind == W_FAULT && !R.outer[i].below_tc)
      EXPECT(fault_requests(R.outer[i].a) == R.outer[i].requests, "the outer Fault saw a request the model did not");
  if (want == RAP_OK && st == RAP_ERR_NOMEM && (may_fail || refused > 0 || must_hit)) want = RAP_ERR_NOMEM;
  if (st == RAP_OK && too_big) tc_fixed_invalid++;   /* taken uncached, for the report */
  expect_status(st, want, "rap_allocate");
  if (st != RAP_OK) {
    EXPECT(p == sentinel, "a failed rap_allocate wrote its out-param");
    if (R.tc != NULL) {   /* the pool's figures may change: out of memory gives the caches back */
      rap_stats tca = stats(R.tc);
      EXPECT(tca.current_bytes == tcb.current_bytes && tca.allocation_count == tcb.allocation_count &&
             (tca.used_bytes == tcb.used_bytes || !tc_used_exact()), "a failed rap_allocate changed the live blocks");
      if (st == RAP_ERR_NOMEM && !above_refused) {
        EXPECT(tca.cached_count == 0, "out of memory with %zu blocks still cached (%zu before): a "
               "ThreadCache gives every cache back before it fails", tca.cached_count, tcb.cached_count);
        tc_oom_flushes += tcb.cached_count > 0;
      }
      return -1;
    }
    rap_stats after = stats(R.pool);
    EXPECT(after.current_bytes == before.current_bytes && after.allocation_count == before.allocation_count &&
           after.used_bytes == before.used_bytes, "a failed rap_allocate changed the live blocks");
    return -1;
  }
  uintptr_t a = (uintptr_t)p;
  size_t cnt = n;
  if (R.tc != NULL) {   /* what the ThreadCache counts for it: one of the sizes the model allows */
    rap_stats tca = stats(R.tc), pa = stats(R.pool);
    cnt = tca.current_bytes - tcb.current_bytes;
    EXPECT(tca.allocation_count == tcb.allocation_count + 1 && cnt == asked, "the ThreadCache counts %zu "
           "blocks of %zu bytes, %zu of %zu before: a request of %zu bytes, the model says %zu more",
           tca.allocation_count, tca.current_bytes, tcb.allocation_count, tcb.current_bytes, n, asked);
    bool hit = pa.allocation_count == before.allocation_count && pa.current_bytes == before.current_bytes &&
               tca.cached_count + 1 == tcb.cached_count;
    EXPECT(hit || !must_hit, "%zu bytes did not come from the cache (it held %zu blocks, now %zu; the pool "
           "%zu, now %zu), and a SizeLimiter under the ThreadCache refuses %zu more", n, tcb.cached_count,
           tca.cached_count, before.allocation_count, pa.allocation_count, asked);
    EXPECT(tca.cached_count + 1 <= tcb.cached_count + R.tc_refill, "a refill left %zu more blocks cached: "
           "it asks for %zu at most and hands one out", tca.cached_count - tcb.cached_count, R.tc_refill);
    tc_hits += hit;
  }
  if (R.trace) fprintf(stderr, "  slot %d: %p, %zu bytes (%zu counted) on resource %d%s\n", slot, p, n, cnt, x,
                       blocked ? " (host waited)" : "");
  EXPECT(p != NULL && p != sentinel, "rap_allocate gave no pointer");
  EXPECT(a % R.align == 0, "%p is not aligned to %zu", p, R.align);
  int other = m_overlapping_live(&R.m, a, a + (cnt ? cnt : 1));
  EXPECT(other < 0, "%p (%zu bytes) overlaps live block %p (%zu bytes)", p, cnt, (void *)R.m.slot[other].p,
         R.m.slot[other].cnt);
  unsigned waits = 0, queued = 0;
  char why[256];
  EXPECT(m_check_handout(&R.m, x, a, a + m_extent(&R.m, cnt), blocked, &waits, why, sizeof why) == 0, "%s", why);
  if (x > 0 && R.m.resource_aware) {
    int jobs = fz_queue_waits(R.res[x], R.res + 1, FZ_QUEUES, &queued, event_blocked);
    /* Under a ThreadCache a wait on w also covers what w waits for: a refill may have carved a
     * cached block for w out of a range pending on q (w then waits for q), and once given back the
     * block is pending on w alone, so the pool waits for w. */
    unsigned covered = queued;
    for (int w = 1; w <= FZ_QUEUES && R.tc != NULL; w++)
      if (queued >> w & 1u) covered |= m_fwd_closure(&R.m, w);
    EXPECT((waits & ~covered) == 0, "%p was handed to queue %d without a wait for queues %#x", p, x,
           waits & ~covered);
    EXPECT(R.m.cross_wait || queued == 0, "queue %d waits for another queue without cross_resource=wait", x);
    m_add_deps(&R.m, x, queued);
    cross_waits += queued != 0;
    if (!m_busy(&R.m, x) && jobs > 0) sync_queue(x);   /* waits whose events completed: let them run */
  }
  m_consume(&R.m, a, cnt);
  m_allocated(&R.m, slot, a, n, cnt, x, ++R.seed);
  fill_block(&R.m.slot[slot]);
  return slot;
}

static void deallocate_slot(int slot, unsigned mode) {
  m_block *b = &R.m.slot[slot];
  int owner = R.m.resource_aware ? b->owner : 0, rid = -1;
  switch (mode % 4) {
  case 0: rid = -1; break;                                  /* NULL: the owner */
  case 1: rid = b->owner; break;                            /* the owner, by name */
  case 2: rid = b->owner == 0 ? 1 : b->owner % FZ_QUEUES + 1; break;   /* another resource */
  default: rid = 0; break;                                  /* the host */
  }
  int want = R.m.resource_aware && rid >= 0 && rid != owner ? RAP_ERR_WRONG_RESOURCE : RAP_OK;
  check_pattern(slot);
  if (R.trace) fprintf(stderr, "  slot %d (%#lx) on resource %d\n", slot, (unsigned long)b->p, rid);
  rap_stats bp = stats(R.pool), bt = stats(R.top), tcb = tc_stats();
  call_begin();
  int st = rap_deallocate(R.top, (void *)b->p, rid < 0 ? NULL : R.res[rid]);
  call_end();
  inner_failures();
  expect_status(st, want, "rap_deallocate");
  if (st != RAP_OK) {
    rap_stats ap = stats(R.pool), at = stats(R.top);
    EXPECT(memcmp(&bp, &ap, sizeof bp) == 0 && memcmp(&bt, &at, sizeof bt) == 0,
           "a refused rap_deallocate changed the statistics");
    return;
  }
  if (R.tc != NULL) {   /* a free never takes the caches past their bound (nor past where they were):
                        * the thread's cache_bytes and the shared blocks' (4 x cache_bytes) */
    rap_stats tca = stats(R.tc);
    size_t bound = tcb.cached_bytes > 5 * R.tc_cap ? tcb.cached_bytes : 5 * R.tc_cap;
    EXPECT(tca.cached_bytes <= bound, "after a free the ThreadCache holds %zu bytes in its caches (%zu "
           "before), past 5 x cache_bytes=%zu", tca.cached_bytes, tcb.cached_bytes, R.tc_cap);
    tc_trims += tca.cached_bytes < tcb.cached_bytes;
  }
  R.freed[R.nfreed++ % 8] = b->p;
  m_deallocated(&R.m, slot);
}

static void op_deallocate(unsigned hint, unsigned mode) {
  int slot = pick_live(hint);
  if (slot >= 0) deallocate_slot(slot, mode);
}

static void record_slot(int slot, int rid) {
  int want = rid < 0 ? RAP_ERR_INVALID : R.m.resource_aware ? RAP_OK : RAP_ERR_UNSUPPORTED;
  if (R.trace) fprintf(stderr, "  slot %d on resource %d\n", slot, rid);
  rap_stats before = stats(R.pool);
  call_begin();
  int st = rap_record_resource(R.top, (void *)R.m.slot[slot].p, rid < 0 ? NULL : R.res[rid]);
  call_end();
  expect_status(st, want, "rap_record_resource");
  rap_stats after = stats(R.pool);
  EXPECT(memcmp(&before, &after, sizeof before) == 0, "rap_record_resource changed the statistics");
  if (st == RAP_OK) m_record(&R.m, slot, rid);
}

static void op_record(unsigned hint, unsigned rsel) {
  int slot = pick_live(hint);
  if (slot >= 0) record_slot(slot, (int)(rsel % 5) - 1);   /* -1: NULL */
}

static void op_busy(unsigned q) {
  q = q % FZ_QUEUES + 1;
  if (R.trace) fprintf(stderr, "  queue %u\n", q);
  gate_node *g = malloc(sizeof *g);
  EXPECT(g != NULL, "out of memory");
  gate_init(&g->g);
  g->next = R.gates[q];
  R.gates[q] = g;
  expect_status(rap_resource_submit(R.res[q], gate_job, &g->g), RAP_OK, "rap_resource_submit");
  g->job = fz_queue_submitted(R.res[q]);
  m_busy_gate(&R.m, (int)q);
}

/* Whether an event of queue t that completes with its job seq may be held: a closed gate among
 * the jobs before it, or t waits for a busy queue (such a wait may come before it). Every gate
 * in R.gates is closed between pool calls (a pool call that opened some passes them at its end). */
static bool event_blocked(rap_resource *t, uint64_t seq) {
  for (int q = 1; q <= FZ_QUEUES; q++) {
    if (R.res[q] != t) continue;
    for (const gate_node *g = R.gates[q]; g != NULL; g = g->next)
      if (g->job <= seq) return true;
    return R.m.q[q].deps != 0;
  }
  return true;
}

static void op_release(unsigned which) {
  rap_allocator *a = which & 1u ? R.pool : R.top;
  if (R.lower != NULL && (which & 6u) == 6u) a = R.lower;
  call_begin();
  int st = rap_release(a);
  call_end();
  inner_failures();
  expect_status(st, RAP_OK, "rap_release");
  if (R.tc != NULL && a == R.top) {
    rap_stats c = stats(R.tc);
    EXPECT(c.cached_count == 0 && c.cached_bytes == 0, "rap_release left %zu blocks of %zu bytes cached",
           c.cached_count, c.cached_bytes);
  }
}

static void op_bad(unsigned kind, unsigned hint) {
  rap_stats bp = stats(R.pool), bt = stats(R.top);
  char local[64];
  void *ptr = NULL;
  int want = RAP_ERR_UNKNOWN_POINTER;
  bool pointer_resource = false;
  switch (kind % 6) {
  case 0:
  case 4: {   /* an interior pointer */
    int slot = pick_live(hint);
    if (slot < 0 || R.m.slot[slot].n < 2) return;
    ptr = (char *)R.m.slot[slot].p + 1 + hint % (R.m.slot[slot].n - 1);
    pointer_resource = kind % 6 == 4;
    break;
  }
  case 1:
  case 5: {   /* a double free, unless the pool has handed the address out again */
    if (R.nfreed == 0) return;
    uintptr_t p = R.freed[hint % (R.nfreed < 8 ? R.nfreed : 8)];
    if (m_find_live(&R.m, p) >= 0) return;
    ptr = (void *)p;
    pointer_resource = kind % 6 == 5;
    break;
  }
  case 2: ptr = local + 16; break;   /* foreign */
  default: ptr = NULL; want = RAP_OK; break;
  }
  call_begin();
  int st;
  if (pointer_resource) {
    rap_resource *out = (rap_resource *)&local;
    st = rap_pointer_resource(R.top, ptr, &out);
    EXPECT(st != RAP_OK || ptr == NULL, "rap_pointer_resource answered for a dead pointer");
    EXPECT(out == (rap_resource *)&local, "a failed rap_pointer_resource wrote its out-param");
  } else {
    st = rap_deallocate(R.top, ptr, NULL);
  }
  call_end();
  expect_status(st, want, pointer_resource ? "rap_pointer_resource" : "rap_deallocate");
  rap_stats ap = stats(R.pool), at = stats(R.top);
  EXPECT(memcmp(&bp, &ap, sizeof bp) == 0 && memcmp(&bt, &at, sizeof bt) == 0,
         "a refused call changed the statistics");
}

static void op_fault(unsigned target, unsigned k) {
  wrapper *faults[3];
  int n = 0;
  for (int i = 0; i < R.nouter; i++)
    if (R.outer[i].kind == W_FAULT) faults[n++] = &R.outer[i];
  if (R.inner.kind == W_FAULT) faults[n++] = &R.inner;
  if (n == 0) return;
  wrapper *w = faults[target % (unsigned)n];
  k %= 4;
  char cfg[64];
  snprintf(cfg, sizeof cfg, "reset fail_next=%u", k);
  expect_status(rap_fault_configure(w->a, cfg), RAP_OK, "rap_fault_configure");
  w->fail_left = k;
}

/* ---- lifecycle --------------------------------------------------------------------------------- */

/* Destroys the host (refused) or a queue. The destroy synchronizes the queue: with `open` its
 * gates (and those of what it waits for) are opened first; without, the hook opens them when the
 * host blocks, and only those, so another queue with a wait queued on this one stays behind its
 * gate and its wait outlives the queue. */
static void op_destroy_queue(unsigned which, unsigned how) {
  if (which % 8 == 7) {
    expect_status(rap_resource_destroy(R.res[0]), RAP_ERR_INVALID, "rap_resource_destroy(host)");
    return;
  }
  int q = (int)(which % FZ_QUEUES) + 1;
  if (R.trace) fprintf(stderr, "  queue %d%s\n", q, how & 1u ? ", its gates opened first" : "");
  if (how & 1u) pass_set(m_fwd_closure(&R.m, q));
  unsigned set = m_fwd_closure(&R.m, q);   /* what synchronizing q makes pass */
  int want = m_owns_live(&R.m, q) ? RAP_ERR_BUSY : RAP_OK;
  /* The live blocks, seen from the ThreadCache if there is one: a destroy that goes on first gives
   * the caches' blocks of q back to the pool (so the pool's own figures change). */
  rap_stats bp = stats(R.tc != NULL ? R.tc : R.pool), bq, bc = tc_stats(), bcq;
  memset(&bq, 0, sizeof bq);
  memset(&bcq, 0, sizeof bcq);
  if (R.m.resource_aware)
    expect_status(rap_allocator_resource_stats(R.pool, R.res[q], &bq), RAP_OK, "rap_allocator_resource_stats");
  if (R.tc_over_pool)
    expect_status(rap_allocator_resource_stats(R.tc, R.res[q], &bcq), RAP_OK, "rap_allocator_resource_stats");
  bool waited_on = false, uses = false, orphans = R.m.orphans;
  for (int r = 1; r <= FZ_QUEUES; r++) waited_on |= r != q && (R.m.q[r].queued >> q & 1u);
  for (int i = 0; i < FZ_SLOTS; i++) uses |= R.m.slot[i].live && (R.m.slot[i].uses >> q & 1u);
  for (int i = 0; i < R.m.nhz; i++) uses |= R.m.hz[i].owner != q && (R.m.hz[i].ents >> q & 1u);
  rap_resource *old = R.res[q];
  call_begin();
  R.precise = true;
  int st = rap_resource_destroy(old);
  R.in_call = R.precise = false;
  if (R.blocked) {
    host_blocks++;
    set |= R.blocked_set;
  }
  if (R.trace) fprintf(stderr, "  %s%s\n", rap_status_name(st), R.blocked ? " (host waited)" : "");
  expect_status(st, want, "rap_resource_destroy");
  if (st == RAP_OK) {
    lc_destroyed++;
    pass_queues(set, q);   /* q's gates ran: it was synchronized and its worker joined */
    fz_queue_forget(old);
    m_queue_destroyed(&R.m, q);
    lc_waited_on += waited_on;
    lc_with_uses += uses;
    for (int i = 0; i < R.m.nhz && !orphans; i++)
      if (R.m.hz[i].owner == FZ_DEAD && !m_hazard_passed(&R.m, &R.m.hz[i])) {
        lc_orphans++;
        orphans = true;
      }
    if (R.tc != NULL) {   /* the caches gave q's blocks back */
      rap_stats ac = stats(R.tc);
      if (R.tc_over_pool)
        EXPECT(ac.cached_bytes + bcq.cached_bytes == bc.cached_bytes && ac.cached_count + bcq.cached_count ==
               bc.cached_count, "the ThreadCache held %zu blocks in its caches, %zu of them for queue %d, and "
               "after its destroy %zu", bc.cached_count, bcq.cached_count, q, ac.cached_count);
      else   /* its per-resource figures are its parent's, a wrapper's: only the total is known */
        EXPECT(ac.cached_bytes <= bc.cached_bytes && ac.cached_count <= bc.cached_count, "the ThreadCache held "
               "%zu blocks in its caches, and after queue %d's destroy %zu", bc.cached_count, q, ac.cached_count);
      tc_destroy_flushes += ac.cached_count < bc.cached_count;
    }
    expect_status(rap_resource_create_host_async(R.rm, &R.res[q]), RAP_OK, "rap_resource_create_host_async");
  } else {
    lc_refused++;
    pass_set(set);
    rap_stats aq;
    if (R.m.resource_aware) {
      expect_status(rap_allocator_resource_stats(R.pool, R.res[q], &aq), RAP_OK, "rap_allocator_resource_stats");
      bool same = aq.current_bytes == bq.current_bytes && aq.allocation_count == bq.allocation_count &&
                  aq.used_bytes == bq.used_bytes;
      /* A ThreadCache right over the pool answers for it, and a refused destroy changes nothing.
       * One over a wrapper (whose per-resource figures say nothing) cannot tell: it gives the
       * caches' blocks of q back before the pool refuses, so the pool then holds q's live blocks
       * alone (a finding, see README.md). */
      size_t cur = 0, cnt = 0;
      for (int i = 0; i < FZ_SLOTS; i++)
        if (R.m.slot[i].live && R.m.slot[i].owner == q) {
          cur += R.m.slot[i].cnt;
          cnt++;
        }
      bool flushed = R.tc != NULL && !R.tc_over_pool && aq.current_bytes == cur && aq.allocation_count == cnt;
      EXPECT(same || flushed, "a refused rap_resource_destroy changed queue %d's blocks (%zu of %zu bytes, "
             "%zu used; before %zu of %zu, %zu used)", q, aq.allocation_count, aq.current_bytes, aq.used_bytes,
             bq.allocation_count, bq.current_bytes, bq.used_bytes);
    }
    if (R.tc_over_pool) {
      rap_stats acq;
      expect_status(rap_allocator_resource_stats(R.tc, R.res[q], &acq), RAP_OK, "rap_allocator_resource_stats");
      EXPECT(acq.cached_count == bcq.cached_count && acq.cached_bytes == bcq.cached_bytes, "a refused "
             "rap_resource_destroy changed the caches: %zu blocks for queue %d, %zu before", acq.cached_count, q,
             bcq.cached_count);
    }
  }
  rap_stats ap = stats(R.tc != NULL ? R.tc : R.pool);
  EXPECT(ap.current_bytes == bp.current_bytes && ap.allocation_count == bp.allocation_count &&
         (ap.used_bytes == bp.used_bytes || (!tc_used_exact() && !(st != RAP_OK && R.tc_over_pool))), "rap_resource_destroy changed the live blocks "
         "(%zu blocks of %zu bytes, %zu used; before %zu of %zu, %zu used)", ap.allocation_count, ap.current_bytes,
         ap.used_bytes, bp.allocation_count, bp.current_bytes, bp.used_bytes);
}

/* Contract item 2 as a scenario: a block is recorded on another queue r, r gets busy, the block is
 * freed on its owner, and the owner is destroyed (the use instead, for a block of the host). */
static void op_lend(unsigned hint, unsigned how) {
  int slot = pick_live(hint);
  if (slot < 0) return;
  int owner = R.m.slot[slot].owner, r = (owner + (int)(how % 2)) % FZ_QUEUES + 1;
  if (r == owner) r = r % FZ_QUEUES + 1;
  record_slot(slot, r);
  R.m.now++;
  op_busy((unsigned)r - 1);
  R.m.now++;
  verify();
  deallocate_slot(slot, 0);
  R.m.now++;
  verify();
  op_destroy_queue((unsigned)(owner > 0 ? owner : r) - 1, how >> 1);
}

static void op_pass_one(unsigned which);

/* Contract item 3 as a scenario, with cross_resource=wait (elsewhere: pass one): queue q frees a
 * block larger than any free one while busy; queue x, busy behind a gate, asks for that size and
 * queues a wait for q's event behind its gate (or the pool grows, below wait_above); then q may be
 * destroyed, its event still awaited. */
static void op_wait_on(unsigned which, unsigned how) {
  if (!R.m.cross_wait) {
    op_pass_one(which);
    return;
  }
  int q = (int)(which % FZ_QUEUES) + 1, x = q % FZ_QUEUES + 1;
  size_t n = stats(R.pool).largest_free_block + 1 + (how & 15u) * 64;
  if (n > ((size_t)1 << 20)) return;   /* big blocks cost much under the sanitizers */
  op_busy((unsigned)q - 1);
  R.m.now++;
  int slot = op_allocate(which, (unsigned)q + 1, n);
  verify();
  if (slot < 0) return;
  R.m.now++;
  deallocate_slot(slot, 0);
  verify();
  R.m.now++;
  op_busy((unsigned)x - 1);
  R.m.now++;
  op_allocate(which + 1, (unsigned)x + 1, n);
  if (how & 16u) {
    verify();
    R.m.now++;
    op_destroy_queue((unsigned)q - 1, how >> 5);
  }
}

/* Lets queue q (and what it waits for) run everything, and no other. */
static void op_pass_one(unsigned which) { pass_set(m_fwd_closure(&R.m, (int)(which % FZ_QUEUES) + 1)); }

static void all_stats(rap_stats *out) {
  for (int i = 0; i < R.nchain; i++) out[i] = stats(R.chain[i]);
}

/* Destroys the allocator chain, outermost first, and builds it again: refused while blocks are
 * live (and for an allocator with a child, always), and then nothing changes. `how`: free every
 * block first (one time in four); destroy HOST too. */
static void op_chain(unsigned which, unsigned how) {
  if (how % 4 == 0) {
    for (int i = 0; i < FZ_SLOTS; i++) {
      if (!R.m.slot[i].live) continue;
      check_pattern(i);
      call_begin();
      int st = rap_deallocate(R.top, (void *)R.m.slot[i].p, NULL);
      call_end();
      inner_failures();
      expect_status(st, RAP_OK, "rap_deallocate");
      R.freed[R.nfreed++ % 8] = R.m.slot[i].p;
      m_deallocated(&R.m, i);
    }
    verify();
  }
  rap_stats before[8], after[8];
  if (R.nchain > 1) {   /* an allocator under another */
    rap_allocator *a = R.chain[1 + which % (unsigned)(R.nchain - 1)];
    all_stats(before);
    expect_status(rap_allocator_destroy(a), RAP_ERR_BUSY, "rap_allocator_destroy(an allocator with a child)");
    all_stats(after);
    EXPECT(memcmp(before, after, (size_t)R.nchain * sizeof before[0]) == 0,
           "a refused rap_allocator_destroy('%s') changed the statistics", rap_allocator_name(a));
  }
  if (R.m.count > 0) {
    all_stats(before);
    expect_status(rap_allocator_destroy(R.top), RAP_ERR_BUSY, "rap_allocator_destroy(with live blocks)");
    all_stats(after);
    EXPECT(memcmp(before, after, (size_t)R.nchain * sizeof before[0]) == 0,
           "a refused rap_allocator_destroy(top) changed the statistics");
    deep_check();
    lc_chain_refused++;
    return;
  }
  bool host_too = how >> 2 & 1u;
  rap_allocator *host = R.host_platform;
  call_begin();   /* a ResourceAwarePool's teardown waits for its pending blocks: the hook runs the queues */
  for (int i = 0; i < R.nchain; i++) {
    if (R.chain[i] == host && !host_too) break;
    expect_status(rap_allocator_destroy(R.chain[i]), RAP_OK, "rap_allocator_destroy");
  }
  call_end();
  if (!host_too) {
    rap_stats h = stats(host);
    EXPECT(h.current_bytes == 0 && h.allocation_count == 0,
           "HOST still holds %zu blocks of %zu bytes once the chain is gone", h.allocation_count, h.current_bytes);
  }
  make_chain();
  m_reset_pool(&R.m, R.kind == K_RAP, R.cross_wait, R.align);
  model_tc();
  lc_rebuilt++;
}

/* ---- one input ---------------------------------------------------------------------------------- */

static void finish(void) {
  R.opname = "teardown";
  pass_set(ALL_QUEUES);
  verify();
  deep_check();
  for (int i = 0; i < FZ_SLOTS; i++) {
    if (!R.m.slot[i].live) continue;
    check_pattern(i);
    expect_status(rap_deallocate(R.top, (void *)R.m.slot[i].p, NULL), RAP_OK, "rap_deallocate");
    m_deallocated(&R.m, i);
  }
  if (R.tc != NULL) {   /* the caches' blocks go back (pending on idle queues), then the pool can */
    expect_status(rap_release(R.top), RAP_OK, "rap_release(the top, over the ThreadCache)");
    rap_stats c = stats(R.tc);
    EXPECT(c.cached_count == 0 && c.cached_bytes == 0, "rap_release left %zu blocks of %zu bytes cached",
           c.cached_count, c.cached_bytes);
  }
  pass_set(ALL_QUEUES);
  expect_status(rap_release(R.pool), RAP_OK, "rap_release");
  if (R.lower != NULL) expect_status(rap_release(R.lower), RAP_OK, "rap_release(the pool under the pool)");
  verify();
  rap_stats p = stats(R.pool);
  EXPECT(p.pending_count == 0 && p.pending_bytes == 0, "%zu blocks still pending with every queue idle",
         p.pending_count);
  EXPECT(p.chunk_count == 0 && p.actual_bytes == 0, "an empty pool keeps %zu chunks after rap_release",
         p.chunk_count);
  if (R.lower != NULL) {
    rap_stats l = stats(R.lower);
    EXPECT(l.chunk_count == 0 && l.actual_bytes == 0,
           "an empty pool under the pool keeps %zu chunks after rap_release", l.chunk_count);
  }
  expect_status(rap_manager_destroy(R.rm), RAP_OK, "rap_manager_destroy");
  for (int q = 1; q <= FZ_QUEUES; q++) free_gates(q);
}

static const char *const op_names[21] = {"allocate", "allocate", "allocate", "allocate", "deallocate",
                                         "deallocate", "record_resource", "busy", "pass", "release",
                                         "bad", "fault", "check", "pass all", "allocate on a queue",
                                         "deallocate", "destroy queue", "destroy chain", "pass one",
                                         "lend", "wait on"};

/* An opcode: the low four bits, as ever; with the lifecycle bit, bytes from 0xE0 are lifecycle
 * operations (of 32: 12 destroy a queue, 4 the chain, 8 let one queue run, 4 lend, 4 wait on). */
static unsigned opcode(void) {
  unsigned raw = byte();
  if (!R.lifecycle || raw < 0xE0) return raw % 16;
  raw &= 31u;
  return raw < 12 ? 16 : raw < 16 ? 17 : raw < 24 ? 18 : raw < 28 ? 19 : 20;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  memset(&R, 0, sizeof R);
  R.data = data;
  R.size = size;
  R.trace = getenv("RAP_FUZZ_TRACE") != NULL;
  if (getenv("RAP_FUZZ_VMM") != NULL) rap_fuzz_vmm = 1;
  fz_queue_forget_waits();
  fz_main = pthread_self();
  rap_host_async_set_hooks(&hooks);
  build();
  inputs_run[R.kind]++;
  if (R.m.cross_wait) inputs_run[K_COUNT]++;
  lc_inputs += R.lifecycle;
  lc_stacked += R.lower != NULL;
  tc_inputs += R.tc != NULL;
  if (R.trace) fprintf(stderr, "spec: %s\n", R.spec);
  for (R.op = 0; R.pos < R.size && R.op < 4000; R.op++) {
    unsigned code = opcode();
    R.opname = op_names[code];
    R.m.now++;
    unsigned a = byte(), b = byte();
    if (R.trace) fprintf(stderr, "op %d: %s %u %u\n", R.op, R.opname, a, b);
    switch (code) {
    case 0: case 1: case 2: case 3: op_allocate(a, b, size_arg()); break;
    case 14: op_allocate(a, 2 + b % 3, size_arg()); break;
    case 4: case 5: case 15: op_deallocate(a, b); break;
    case 6: op_record(a, b); break;
    case 7: op_busy(a); break;
    case 8: pass_set(m_pass_closure(&R.m, (int)(a % FZ_QUEUES) + 1)); break;
    case 9: op_release(a); break;
    case 10: op_bad(a, b); break;
    case 11: op_fault(a, b); break;
    case 12: deep_check(); break;
    case 16: op_destroy_queue(a, b); break;
    case 17: op_chain(a, b); break;
    case 18: op_pass_one(a); break;
    case 19: op_lend(a, b); break;
    case 20: op_wait_on(a, b); break;
    default: pass_set(ALL_QUEUES); break;
    }
    verify();
    ops_run[R.kind]++;
    if (R.m.cross_wait) ops_run[K_COUNT]++;
    tc_ops += R.tc != NULL;
  }
  finish();
  memset(&R, 0, sizeof R);
  return 0;
}

#ifdef RAP_FUZZER_MAIN
__attribute__((destructor)) static void report_at_exit(void) { fz_report(stderr); }
#endif

void fz_report(FILE *out) {
  fprintf(out, "rap fuzz: operations per strategy: QuickPool %zu (%zu inputs), DynamicPoolList %zu (%zu), "
          "ResourceAwarePool %zu (%zu; %zu of them cross_resource=wait), FixedPool %zu (%zu); "
          "host waited %zu times, queued a cross-resource wait %zu times (%zu on an event not yet "
          "reached but held by nothing)\n",
          ops_run[K_QUICK], inputs_run[K_QUICK], ops_run[K_DPL], inputs_run[K_DPL], ops_run[K_RAP],
          inputs_run[K_RAP], ops_run[K_COUNT], ops_run[K_FIXED], inputs_run[K_FIXED], host_blocks,
          cross_waits, fz_unheld_waits);
  fprintf(out, "rap fuzz: lifecycle: %zu inputs (%zu with a pool over a pool); queues destroyed %zu "
          "(%zu with a wait queued on them, %zu with uses, %zu leaving a block pending on a busy use), "
          "refused %zu; chains destroyed and rebuilt %zu, refused %zu\n", lc_inputs, lc_stacked,
          lc_destroyed, lc_waited_on, lc_with_uses, lc_orphans, lc_refused, lc_rebuilt, lc_chain_refused);
  fprintf(out, "rap fuzz: ThreadCache: %zu inputs, %zu operations; %zu allocations from the cache, %zu "
          "frees that trimmed it, %zu out-of-memory flushes, %zu destroys that took cached blocks back, %zu "
          "cached hazards seen, %zu requests a FixedPool took uncached (their class too large)\n", tc_inputs, tc_ops, tc_hits, tc_trims, tc_oom_flushes, tc_destroy_flushes, tc_cached_hazards,
          tc_fixed_invalid);
}
