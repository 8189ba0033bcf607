/* trace.c — (b): a random trace on 4 streams, log-uniform 256 B..4 MiB, <= 1000 live blocks,
 * 200 000 operations (20 000 with --quick), fixed seed; ns per pair (the first run, cold, and the
 * median of the timed runs) and peak held / peak live. b-host runs it over host memory, the
 * streams being host_async queues. Pools grow by 1 MiB chunks; the same pools over DEVICE_VMM
 * (HOST_VMM for b-host) grow their one chunk in place by 2 MiB granules.
 *
 * The trace is made once (a few MiB of operations) and replayed on every peer: a replay is one
 * indirect call per operation.
 */
#include "bench.h"

#include <rap/rap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct op {
  uint32_t slot;
  uint8_t alloc, stream;
  size_t size;
} op;

typedef struct trace {
  op *ops;
  size_t nops, nallocs, peak_live, slots;
  void **ptrs;
} trace;

static int make_trace(trace *t, size_t total_ops, size_t max_live, size_t lo, size_t hi) {
  memset(t, 0, sizeof *t);
  t->ops = malloc(total_ops * sizeof *t->ops);
  uint32_t *live = malloc(max_live * sizeof *live);     /* slots of live blocks */
  op *slot_op = malloc(max_live * sizeof *slot_op);     /* the allocation in each slot */
  t->ptrs = calloc(max_live, sizeof *t->ptrs);
  if (!t->ops || !live || !slot_op || !t->ptrs) return -1;
  uint32_t *free_slots = (uint32_t *)t->ptrs;           /* borrowed as a stack until the end */
  for (size_t i = 0; i < max_live; i++) free_slots[i] = (uint32_t)(max_live - 1 - i);
  size_t nfree = max_live, nlive = 0, live_bytes = 0;
  uint64_t seed = 0x5eed0001;
  while (t->nops + nlive < total_ops) {
    /* Allocate with probability 1 - live/max: the live count wanders around max/2. */
    int alloc = nlive == 0 || (nlive < max_live && uniform(&seed) >= (double)nlive / (double)max_live);
    op o;
    if (alloc) {
      o.slot = free_slots[--nfree];
      o.alloc = 1;
      o.stream = (uint8_t)(1 + splitmix(&seed) % 4);
      o.size = log_uniform(&seed, lo, hi);
      slot_op[o.slot] = o;
      live[nlive++] = o.slot;
      live_bytes += o.size;
      if (live_bytes > t->peak_live) t->peak_live = live_bytes;
      t->nallocs++;
    } else {
      size_t j = splitmix(&seed) % nlive;
      o = slot_op[live[j]];
      o.alloc = 0;
      live[j] = live[--nlive];
      free_slots[nfree++] = o.slot;
      live_bytes -= o.size;
    }
    t->ops[t->nops++] = o;
  }
  while (nlive > 0) {
    op o = slot_op[live[--nlive]];
    o.alloc = 0;
    t->ops[t->nops++] = o;
  }
  memset(t->ptrs, 0, max_live * sizeof *t->ptrs);
  t->slots = max_live;
  free(live);
  free(slot_op);
  return 0;
}

static int run_trace(bench_peer *p, trace *t) {
  for (size_t i = 0; i < t->nops; i++) {
    const op *o = &t->ops[i];
    if (o->alloc) {
      if (p->alloc(p->ctx, &t->ptrs[o->slot], o->size, o->stream) != 0) return -1;
    } else if (p->free(p->ctx, t->ptrs[o->slot], o->size, o->stream) != 0) {
      return -1;
    }
  }
  return 0;
}

/* Maps and unmaps of p so far, summed; 0 where p does not say. */
static size_t calls_now(const bench_peer *p, int *known) {
  size_t m = 0, u = 0;
  *known = p->calls != NULL && p->calls(p->ctx, &m, &u) == 0;
  return m + u;
}

/* The first run of t through a fresh peer, ns per pair (negative: the run failed). */
static double cold_run(bench_peer *p, trace *t) {
  double t0 = now_ns();
  int st = run_trace(p, t);
  double ns = (now_ns() - t0) / (double)t->nallocs;
  sync_device();
  return st == 0 ? ns : -1.0;
}

/* Cold runs through fresh peers before the one that stays, so that "ns/pair first" is a median:
 * a single first run on the GPU machine now and then takes tens of ms more (any peer, rap's over
 * cudaMalloc too: the driver's), which on a trace of a few thousand pairs is several µs a pair. */
enum { COLD_RUNS = 3 };
static int fresh_colds(const pdesc *d, trace *t, double *colds) {
  int n = 0;
  for (int k = 1; k < (opt.quick ? 1 : COLD_RUNS); k++) {
    bench_peer q;
    if (open_peer_quietly(d, &q) != 0) break;   /* open_peer below says why */
    double ns = cold_run(&q, t);
    q.destroy(q.ctx);
    if (ns < 0) break;
    colds[n++] = ns;
  }
  return n;
}

/* One peer's replays of t: first runs through fresh peers (fresh_colds), then a cold run through
 * the peer that stays (its ns per pair with theirs, the median as "ns/pair first"; its peak held
 * / peak live), then reps timed runs (ns per pair; held at its peak over all runs). Peers that
 * count their maps and unmaps (rap's) say how many they made per 1 000 pairs, in the first run
 * and after it. base: the row the others are compared with. */
static void replay_one(const char *wl, const char *cas, const pdesc *d, trace *t, int reps,
                       const char *what, int base) {
  double colds[COLD_RUNS];
  int ncold = fresh_colds(d, t, colds);
  bench_peer p;
  if (open_peer(wl, d, &p) != 0) return;
  if (p.track_peak) p.track_peak(p.ctx, 1);
  double cold = cold_run(&p, t);
  int st = cold < 0 ? -1 : 0;
  if (p.track_peak) p.track_peak(p.ctx, 0);
  if (st != 0) {
    peer_failed(wl, &p, what);
    p.destroy(p.ctx);
    return;
  }
  size_t held_now = 0, held_peak = 0;
  int have_held = p.held && p.held(p.ctx, &held_now, &held_peak) == 0, known;
  size_t calls0 = calls_now(&p, &known);
  double samples[64];
  int n = 0;
  for (int r = 0; r < reps && st == 0; r++, n++) {
    double t0 = now_ns();
    st = run_trace(&p, t);
    samples[r] = (now_ns() - t0) / (double)t->nallocs;
    sync_device();
  }
  size_t calls1 = calls_now(&p, &known), held_all = 0;
  if (st != 0) peer_failed(wl, &p, what);
  else if (n > 0) add_row(wl, cas, p.name, "ns/pair", samples, n, base);
  if (cold >= 0) colds[ncold++] = cold;
  if (ncold > 0) add_row(wl, cas, p.name, "ns/pair first", colds, ncold, base);
  if (have_held) add_one(wl, cas, p.name, "held/live", (double)held_peak / (double)t->peak_live, base);
  if (have_held && n > 0 && p.held(p.ctx, &held_now, &held_all) == 0)
    add_one(wl, cas, p.name, "held/live all runs", (double)held_all / (double)t->peak_live, base);
  if (known) {
    add_one(wl, cas, p.name, "maps/1000 first", 1000.0 * (double)calls0 / (double)t->nallocs, base);
    if (st == 0 && n > 0)
      add_one(wl, cas, p.name, "maps/1000 pairs", 1000.0 * (double)(calls1 - calls0) / ((double)n * (double)t->nallocs), base);
  }
  p.destroy(p.ctx);
  progress("  (%s) %s done", wl, p.name);
}

/* RAP_BENCH_EXTRA="LABEL=SPEC;LABEL=SPEC": rap pools to try beside the workload's own, replayed
 * after its first row (for an experiment; the labels get "rap " in front). */
static void replay_extra(const char *wl, const char *cas, trace *t, int reps, const char *what,
                         int host) {
  const char *env = getenv("RAP_BENCH_EXTRA");
  for (const char *e = env; e != NULL && *e != '\0';) {
    size_t len = strcspn(e, ";");
    const char *eq = memchr(e, '=', len);
    char label[64], spec[1024];
    if (eq != NULL && (size_t)(eq - e) < sizeof label - 4 && len - (size_t)(eq - e) < sizeof spec) {
      snprintf(label, sizeof label, "rap %.*s", (int)(eq - e), e);
      snprintf(spec, sizeof spec, "%.*s", (int)(len - (size_t)(eq - e) - 1), eq + 1);
      pdesc d = {P_RAP, label, spec, host};
      replay_one(wl, cas, &d, t, reps, what, 0);
    }
    e += len + (e[len] == ';');
  }
}

/* Replays t through every peer (replay_one), and RAP_BENCH_EXTRA's after the first; frees t. */
static void replay(const char *wl, const char *cas, const pdesc *peers, size_t npeers, trace *t,
                   int reps, const char *what) {
  for (size_t k = 0; k < npeers; k++) {
    replay_one(wl, cas, &peers[k], t, reps, what, k == 0);
    if (k == 0) replay_extra(wl, cas, t, reps, what, peers[0].host_async);
  }
  progress("  (%s) %s: %zu ops, %zu allocations, peak live %.1f MiB", wl, what, t->nops, t->nallocs,
           (double)t->peak_live / 1048576.0);
  free(t->ops);
  free(t->ptrs);
}

static void random_trace(const char *wl, const pdesc *peers, size_t npeers) {
  trace t;
  size_t total = opt.quick ? 20000 : 200000;
  if (make_trace(&t, total, 1000, 256, 4u << 20) != 0) {
    SKIP(wl, "out of host memory for the trace");
    return;
  }
  char cas[40];
  snprintf(cas, sizeof cas, "%zu ops", t.nops);
  replay(wl, cas, peers, npeers, &t, opt.reps, "the trace");
}

/* "rap default", first in (b) and the trace workloads: RAP_DEFAULT_DEVICE_SPEC (rap/rap.h), what
 * rap.torch, rap_cupy, rap.numba and rap.cuda_core make when the user names none (peer_rap makes
 * its "{device}" 0); "rap default over DEVICE": RAP_FALLBACK_DEVICE_SPEC, what they make where the
 * growable platform is refused (and the default until 2026-11-28). */

/* ---- the workloads' peers --------------------------------------------------------------------- */

void wl_b(void) {
  static const pdesc peers[] = {
      {P_RAP, "rap default", RAP_DEFAULT_DEVICE_SPEC, 0},
      {P_RAP, "rap default over DEVICE", RAP_FALLBACK_DEVICE_SPEC, 0},
      {P_RAP, "rap ResourceAwarePool", "ResourceAwarePool(DEVICE, initial_size=1MiB, next_size=1MiB)", 0},
      {P_RAP, "rap QuickPool", "QuickPool(DEVICE, initial_size=1MiB, next_size=1MiB)", 0},
      {P_RAP, "rap DynamicPoolList", "DynamicPoolList(DEVICE, initial_size=1MiB, next_size=1MiB)", 0},
      {P_RAP, "rap StreamOrdered", "StreamOrdered(pool=new, release_threshold=max)", 0},
      /* over the growable platform: one chunk that grows at its end, 2 MiB granules */
      {P_RAP, "rap ResourceAwarePool DEVICE_VMM", "ResourceAwarePool(DEVICE_VMM, initial_size=2MiB, next_size=2MiB)", 0},
      {P_RAP, "rap ResourceAwarePool DEVICE_VMM pieces", "ResourceAwarePool(DeviceVmm(piece=2MiB), initial_size=2MiB, next_size=2MiB)", 0},
      {P_RAP, "rap QuickPool DEVICE_VMM", "QuickPool(DEVICE_VMM, initial_size=2MiB, next_size=2MiB)", 0},
      {P_RAP, "rap DynamicPoolList DEVICE_VMM", "DynamicPoolList(DEVICE_VMM, initial_size=2MiB, next_size=2MiB)", 0},
      {P_ASYNC_DEFAULT, 0, 0, 0}, {P_ASYNC_FRESH, 0, 0, 0}, {P_CUB, 0, 0, 0}, {P_TORCH, 0, 0, 0},
      {P_RMM_POOL, 0, 0, 0}, {P_RMM_ARENA, 0, 0, 0}, {P_RMM_BINNING, 0, 0, 0}, {P_RMM_ASYNC, 0, 0, 0},
      {P_UMPIRE_QP, 0, 0, 0},
  };
  random_trace("b", peers, sizeof peers / sizeof *peers);
}

void wl_b_host(void) {
  static const pdesc peers[] = {
      {P_RAP, "rap ResourceAwarePool", "ResourceAwarePool(HOST, initial_size=1MiB, next_size=1MiB)", 1},
      {P_RAP, "rap QuickPool", "QuickPool(HOST, initial_size=1MiB, next_size=1MiB)", 1},
      {P_RAP, "rap DynamicPoolList", "DynamicPoolList(HOST, initial_size=1MiB, next_size=1MiB)", 1},
      {P_RAP, "rap ResourceAwarePool HOST_VMM", "ResourceAwarePool(HOST_VMM, initial_size=2MiB, next_size=2MiB)", 1},
      {P_RAP, "rap QuickPool HOST_VMM", "QuickPool(HOST_VMM, initial_size=2MiB, next_size=2MiB)", 1},
      {P_RAP, "rap ResourceAwarePool HOST_VMM pieces", "ResourceAwarePool(HostVmm(piece=2MiB), initial_size=2MiB, next_size=2MiB)", 1},
      {P_RAP, "rap DynamicPoolList HOST_VMM", "DynamicPoolList(HOST_VMM, initial_size=2MiB, next_size=2MiB)", 1},
      {P_MALLOC, 0, 0, 0}, {P_MIMALLOC, 0, 0, 0}, {P_TCMALLOC, 0, 0, 0},
  };
  random_trace("b-host", peers, sizeof peers / sizeof *peers);
}

/* ---- (f): a recorded trace ------------------------------------------------------------------ */

/* A rap event trace (docs/trace.md), as bench/record_torch_trace.py writes one from PyTorch's memory
 * history: its depth-0 alloc and dealloc lines become ops, each pointer a slot for as long as it is
 * live, each resource id a stream 1..4. A .gz file is read through gzip -dc. */
typedef struct slot_map {
  uint64_t *key;     /* 0: empty */
  uint32_t *slot;
  size_t cap;
} slot_map;

static size_t map_find(const slot_map *m, uint64_t k) {
  size_t i = (size_t)(k * 0x9E3779B97F4A7C15ull) & (m->cap - 1);
  while (m->key[i] != 0 && m->key[i] != k) i = (i + 1) & (m->cap - 1);
  return i;
}

static void map_erase(slot_map *m, size_t i) {   /* backward-shift deletion keeps probes whole */
  size_t j = i;
  for (;;) {
    m->key[i] = 0;
    for (;;) {
      j = (j + 1) & (m->cap - 1);
      if (m->key[j] == 0) return;
      size_t home = (size_t)(m->key[j] * 0x9E3779B97F4A7C15ull) & (m->cap - 1);
      if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) break;
    }
    m->key[i] = m->key[j];
    m->slot[i] = m->slot[j];
    i = j;
  }
}

static const char *field(const char *line, const char *name) {
  const char *f = strstr(line, name);
  return f ? f + strlen(name) : NULL;
}

static int load_trace(trace *t, const char *path, char *why, size_t whylen) {
  memset(t, 0, sizeof *t);
  size_t plen = strlen(path);
  FILE *f = fopen(path, "r");
  if (f == NULL) return snprintf(why, whylen, "cannot open %s", path), -1;
  fclose(f);
  int piped = plen > 3 && strcmp(path + plen - 3, ".gz") == 0;
  if (piped) {
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s' 2>/dev/null", path);
    f = popen(cmd, "r");
  } else {
    f = fopen(path, "r");
  }
  if (f == NULL) return snprintf(why, whylen, "cannot open %s", path), -1;
  slot_map m = {calloc(1u << 16, sizeof(uint64_t)), calloc(1u << 16, sizeof(uint32_t)), 1u << 16};
  size_t cap = 1u << 14, nfree = 0, live_bytes = 0, nlive = 0;
  uint32_t *free_slots = malloc(cap * sizeof *free_slots);
  size_t *slot_size = malloc(cap * sizeof *slot_size);
  t->ops = malloc(cap * sizeof *t->ops);
  size_t opcap = cap, skipped = 0;
  char line[4096];
  int bad = !m.key || !m.slot || !free_slots || !slot_size || !t->ops;
  while (!bad && fgets(line, sizeof line, f)) {
    const char *ev = field(line, "\"ev\":\"");
    const char *d = field(line, "\"d\":");
    if (ev == NULL || (d != NULL && *d != '0')) continue;
    int alloc = strncmp(ev, "alloc\"", 6) == 0;
    if (!alloc && strncmp(ev, "dealloc\"", 8) != 0) continue;
    const char *p = field(line, "\"p\":\"0x"), *n = field(line, "\"n\":"), *r = field(line, "\"r\":");
    if (p == NULL || n == NULL) continue;
    uint64_t key = strtoull(p, NULL, 16);
    if (key == 0) continue;
    if (t->nops == opcap) {
      op *o = realloc(t->ops, 2 * opcap * sizeof *o);
      if (o == NULL) { bad = 1; break; }
      t->ops = o;
      opcap *= 2;
    }
    if (nlive * 2 >= m.cap) {   /* keep the table at most half full */
      slot_map g = {calloc(2 * m.cap, sizeof(uint64_t)), calloc(2 * m.cap, sizeof(uint32_t)), 2 * m.cap};
      if (!g.key || !g.slot) { bad = 1; break; }
      for (size_t i = 0; i < m.cap; i++)
        if (m.key[i]) {
          size_t j = map_find(&g, m.key[i]);
          g.key[j] = m.key[i];
          g.slot[j] = m.slot[i];
        }
      free(m.key);
      free(m.slot);
      m = g;
    }
    size_t i = map_find(&m, key);
    op o;
    if (alloc) {
      if (m.key[i] == key) continue;   /* a pointer live twice: a damaged trace; keep the first */
      if (nfree == 0) {
        if (t->slots == cap) {
          uint32_t *fs = realloc(free_slots, 2 * cap * sizeof *fs);
          size_t *ss = fs ? realloc(slot_size, 2 * cap * sizeof *ss) : NULL;
          if (fs) free_slots = fs;
          if (ss == NULL) { bad = 1; break; }
          slot_size = ss;
          cap *= 2;
        }
        free_slots[nfree++] = (uint32_t)t->slots++;
      }
      o.slot = free_slots[--nfree];
      o.alloc = 1;
      long rid = r ? strtol(r, NULL, 10) : 0;
      o.stream = (uint8_t)(rid <= 0 ? 1 : 1 + (rid - 1) % 4);
      o.size = (size_t)strtoull(n, NULL, 10);
      m.key[i] = key;
      m.slot[i] = o.slot;
      slot_size[o.slot] = o.size;
      live_bytes += o.size;
      nlive++;
      if (live_bytes > t->peak_live) t->peak_live = live_bytes;
      t->nallocs++;
    } else {
      if (m.key[i] != key) { skipped++; continue; }   /* made before the trace began */
      o = (op){.slot = m.slot[i], .alloc = 0, .stream = 1, .size = slot_size[m.slot[i]]};
      for (size_t k = t->nops; k-- > 0;)   /* the free goes to the block's stream */
        if (t->ops[k].alloc && t->ops[k].slot == o.slot) { o.stream = t->ops[k].stream; break; }
      free_slots[nfree++] = o.slot;
      live_bytes -= o.size;
      nlive--;
      map_erase(&m, i);
    }
    t->ops[t->nops++] = o;
  }
  if (piped) pclose(f); else fclose(f);
  /* What is still live at the end is freed, so that every replay starts from an empty pool. */
  for (size_t i = 0; !bad && i < m.cap; i++) {
    if (m.key[i] == 0) continue;
    if (t->nops == opcap) {
      op *o = realloc(t->ops, 2 * opcap * sizeof *o);
      if (o == NULL) { bad = 1; break; }
      t->ops = o;
      opcap *= 2;
    }
    uint32_t s = m.slot[i];
    uint8_t stream = 1;
    for (size_t k = t->nops; k-- > 0;)
      if (t->ops[k].alloc && t->ops[k].slot == s) { stream = t->ops[k].stream; break; }
    t->ops[t->nops++] = (op){.slot = s, .alloc = 0, .stream = stream, .size = slot_size[s]};
  }
  free(m.key);
  free(m.slot);
  free(free_slots);
  free(slot_size);
  t->ptrs = bad ? NULL : calloc(t->slots ? t->slots : 1, sizeof *t->ptrs);
  if (bad || t->ptrs == NULL || t->nallocs == 0) {
    snprintf(why, whylen, bad ? "out of host memory reading %s" : "no allocations in %s", path);
    free(t->ops);
    free(t->ptrs);
    return -1;
  }
  (void)skipped;
  return 0;
}

static const char *trace_f_path(void) {
  const char *e = getenv("RAP_BENCH_TRACE_F");
  return e && *e ? e : "bench/traces/gpt2_small_step.jsonl.gz";
}

/* The Planned rows: the ResourceAwarePool of the rows above it, over the plain and the growable
 * platform, under the plan rap-trace plan makes of the trace (bench_make_plan): a recorded run
 * planned, the same run served, as a training job's later runs repeat its first.
 * RAP_BENCH_PLAN_SHARE=0.6 makes the plan from the first 60 % of the trace's allocations instead
 * (the reference iteration then is an earlier one, which may differ: GPT-2's first step does). */
#define PLAN_SHARE 1.0
static const char *const plan_parents[2][2] = {
    {"ResourceAwarePool(DEVICE, initial_size=64MiB, next_size=32MiB, heuristic=never)",
     "ResourceAwarePool(DEVICE_VMM, initial_size=2MiB, next_size=2MiB, heuristic=never)"},
    {"ResourceAwarePool(HOST, initial_size=64MiB, next_size=32MiB, heuristic=never)",
     "ResourceAwarePool(HOST_VMM, initial_size=2MiB, next_size=2MiB, heuristic=never)"},
};
static const char *const plan_labels[2] = {"rap Planned(ResourceAwarePool)",
                                           "rap Planned(ResourceAwarePool) %s_VMM"};

/* Replays a recorded trace through peers: peak held / peak live, ns per call (one run). The two
 * Planned rows (host: over HOST, else DEVICE) go in after rap's own pools, before StreamOrdered
 * and the peers; a trace the planner refuses (serving) has them skipped with its sentence. */
static void recorded_trace(const char *wl, const char *path, const pdesc *peers, size_t npeers,
                           int host) {
  trace t;
  char why[1200];
  if (load_trace(&t, path, why, sizeof why) != 0) {
    SKIP(wl, "%s (bench/record-traces.sh records it; run from the repository's root)", why);
    return;
  }
  char cas[64];
  snprintf(cas, sizeof cas, "recorded, %zu ops", t.nops);
  pdesc all[48];
  char specs[2][1400], labels[2][64], plan[1024] = "";
  size_t n = 0, at = npeers;
  for (size_t k = 0; k < npeers; k++)
    if (peers[k].kind != P_RAP || strstr(peers[k].spec, "StreamOrdered") != NULL) {
      at = k;
      break;
    }
  int planned = npeers + 2 <= sizeof all / sizeof *all;
  const char *sh = getenv("RAP_BENCH_PLAN_SHARE");
  double share = sh && atof(sh) > 0 && atof(sh) <= 1 ? atof(sh) : PLAN_SHARE;
  if (planned && bench_make_plan(path, share, plan, sizeof plan, why, sizeof why) != 0) {
    SKIP(wl, "rap Planned: no plan of this trace: %s", why);
    planned = 0;
  }
  for (size_t k = 0; k < at; k++) all[n++] = peers[k];
  for (int v = 0; planned && v < 2; v++) {
    snprintf(specs[v], sizeof specs[v], "Planned(%s, plan=%s)", plan_parents[host][v], plan);
    snprintf(labels[v], sizeof labels[v], plan_labels[v], host ? "HOST" : "DEVICE");
    all[n++] = (pdesc){P_RAP, labels[v], specs[v], host};
  }
  for (size_t k = at; k < npeers; k++) all[n++] = peers[k];
  /* Two runs after the first: a training loop's later steps, the pool warm (its steady state). */
  const char *rr = getenv("RAP_BENCH_TRACE_REPS");   /* more runs after the first, up to 64 */
  int reps = rr && atoi(rr) > 0 ? (atoi(rr) < 64 ? atoi(rr) : 64) : 2;
  replay(wl, cas, planned ? all : peers, planned ? n : npeers, &t, reps, "the recorded trace");
  if (plan[0] != '\0') unlink(plan);
}

/* Pools as rap_torch makes them (64 MiB, then 32 MiB chunks; and with max_split=128MiB), over the
 * growable platform by 2 MiB granules, and the peers. */
static const pdesc f_peers[] = {
    {P_RAP, "rap default", RAP_DEFAULT_DEVICE_SPEC, 0},
    {P_RAP, "rap default over DEVICE", RAP_FALLBACK_DEVICE_SPEC, 0},
    {P_RAP, "rap ResourceAwarePool", "ResourceAwarePool(DEVICE, initial_size=64MiB, next_size=32MiB, heuristic=never)", 0},
    {P_RAP, "rap QuickPool", "QuickPool(DEVICE, initial_size=64MiB, next_size=32MiB, heuristic=never)", 0},
    {P_RAP, "rap DynamicPoolList", "DynamicPoolList(DEVICE, initial_size=64MiB, next_size=32MiB, heuristic=never)", 0},
    {P_RAP, "rap ResourceAwarePool max_split", "ResourceAwarePool(DEVICE, initial_size=64MiB, next_size=32MiB, heuristic=never, max_split=128MiB)", 0},
    {P_RAP, "rap StreamOrdered", "StreamOrdered(pool=new, release_threshold=max)", 0},
    {P_RAP, "rap ResourceAwarePool DEVICE_VMM", "ResourceAwarePool(DEVICE_VMM, initial_size=2MiB, next_size=2MiB, heuristic=never)", 0},
    {P_RAP, "rap ResourceAwarePool DEVICE_VMM pieces", "ResourceAwarePool(DeviceVmm(piece=2MiB), initial_size=2MiB, next_size=2MiB, heuristic=never)", 0},
    {P_RAP, "rap QuickPool DEVICE_VMM", "QuickPool(DEVICE_VMM, initial_size=2MiB, next_size=2MiB, heuristic=never)", 0},
    {P_RAP, "rap DynamicPoolList DEVICE_VMM", "DynamicPoolList(DEVICE_VMM, initial_size=2MiB, next_size=2MiB, heuristic=never)", 0},
    {P_ASYNC_DEFAULT, 0, 0, 0}, {P_ASYNC_FRESH, 0, 0, 0}, {P_CUB, 0, 0, 0}, {P_TORCH, 0, 0, 0},
    {P_RMM_POOL, 0, 0, 0}, {P_RMM_ARENA, 0, 0, 0}, {P_RMM_BINNING, 0, 0, 0}, {P_RMM_ASYNC, 0, 0, 0},
    {P_UMPIRE_QP, 0, 0, 0},
};

static const pdesc f_host_peers[] = {
    {P_RAP, "rap ResourceAwarePool", "ResourceAwarePool(HOST, initial_size=64MiB, next_size=32MiB, heuristic=never)", 1},
    {P_RAP, "rap QuickPool", "QuickPool(HOST, initial_size=64MiB, next_size=32MiB, heuristic=never)", 1},
    {P_RAP, "rap DynamicPoolList", "DynamicPoolList(HOST, initial_size=64MiB, next_size=32MiB, heuristic=never)", 1},
    {P_RAP, "rap ResourceAwarePool max_split", "ResourceAwarePool(HOST, initial_size=64MiB, next_size=32MiB, heuristic=never, max_split=128MiB)", 1},
    {P_RAP, "rap ResourceAwarePool HOST_VMM", "ResourceAwarePool(HOST_VMM, initial_size=2MiB, next_size=2MiB, heuristic=never)", 1},
    {P_RAP, "rap ResourceAwarePool HOST_VMM pieces", "ResourceAwarePool(HostVmm(piece=2MiB), initial_size=2MiB, next_size=2MiB, heuristic=never)", 1},
    {P_RAP, "rap QuickPool HOST_VMM", "QuickPool(HOST_VMM, initial_size=2MiB, next_size=2MiB, heuristic=never)", 1},
    {P_RAP, "rap DynamicPoolList HOST_VMM", "DynamicPoolList(HOST_VMM, initial_size=2MiB, next_size=2MiB, heuristic=never)", 1},
    {P_MALLOC, 0, 0, 0},
};

#define NPEERS(p) (sizeof p / sizeof *p)

void wl_f(void) { recorded_trace("f", trace_f_path(), f_peers, NPEERS(f_peers), 0); }
void wl_f_host(void) { recorded_trace("f-host", trace_f_path(), f_host_peers, NPEERS(f_host_peers), 1); }

/* The harder traces of bench/record-traces.sh, each in bench/traces/ (RAP_BENCH_TRACES names
 * another folder). */
const bench_recorded bench_recorded_traces[BENCH_RECORDED] = {
    {"f1", "gpt2_ckpt.jsonl.gz", "GPT-2 medium training with activation checkpointing"},
    {"f2", "pipeline_1f1b.jsonl.gz", "two pipeline stages on two streams, 1F1B micro-batches"},
    {"f3", "moe_top2.jsonl.gz", "a mixture of experts, top-2 routing, sizes change every step"},
    {"f4", "gpt2_serve.jsonl.gz", "GPT-2 generate serving: varying batches and prompts, growing KV cache"},
    {"f5", "fsdp2_rank0.jsonl.gz", "rank 0 of FSDP2 on two GPUs"},
    {"f6", "ddp_rank0.jsonl.gz", "rank 0 of DDP on two GPUs"},
};

static void recorded_n(int k, int host) {
  const char *dir = getenv("RAP_BENCH_TRACES");
  char path[1024], wl[16];
  snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "bench/traces", bench_recorded_traces[k].file);
  snprintf(wl, sizeof wl, "%s%s", bench_recorded_traces[k].id, host ? "-host" : "");
  if (host) recorded_trace(wl, path, f_host_peers, NPEERS(f_host_peers), 1);
  else recorded_trace(wl, path, f_peers, NPEERS(f_peers), 0);
}

void wl_f1(void) { recorded_n(0, 0); }
void wl_f2(void) { recorded_n(1, 0); }
void wl_f3(void) { recorded_n(2, 0); }
void wl_f4(void) { recorded_n(3, 0); }
void wl_f5(void) { recorded_n(4, 0); }
void wl_f6(void) { recorded_n(5, 0); }
void wl_f1_host(void) { recorded_n(0, 1); }
void wl_f2_host(void) { recorded_n(1, 1); }
void wl_f3_host(void) { recorded_n(2, 1); }
void wl_f4_host(void) { recorded_n(3, 1); }
void wl_f5_host(void) { recorded_n(4, 1); }
void wl_f6_host(void) { recorded_n(5, 1); }
