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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void random_trace(const char *wl, const pdesc *peers, size_t npeers) {
  trace t;
  size_t total = opt.quick ? 20000 : 200000;
  if (make_trace(&t, total, 1000, 256, 4u << 20) != 0) {
    SKIP(wl, "out of host memory for the trace");
    return;
  }
  char cas[40];
  snprintf(cas, sizeof cas, "%zu ops", t.nops);
  for (size_t k = 0; k < npeers; k++) {
    bench_peer p;
    if (open_peer(wl, &peers[k], &p) != 0) continue;
    if (p.track_peak) p.track_peak(p.ctx, 1);
    double t0 = now_ns();
    int st = run_trace(&p, &t);
    double cold = (now_ns() - t0) / (double)t.nallocs;
    sync_device();
    if (p.track_peak) p.track_peak(p.ctx, 0);
    if (st != 0) {
      peer_failed(wl, &p, "the trace");
      p.destroy(p.ctx);
      continue;
    }
    size_t held_now = 0, held_peak = 0;
    int have_held = p.held && p.held(p.ctx, &held_now, &held_peak) == 0;
    double samples[64];
    int n = 0;
    for (int r = 0; r < opt.reps && st == 0; r++, n++) {
      t0 = now_ns();
      st = run_trace(&p, &t);
      samples[r] = (now_ns() - t0) / (double)t.nallocs;
      sync_device();
    }
    if (st != 0) peer_failed(wl, &p, "the trace");
    else add_row(wl, cas, p.name, "ns/pair", samples, n, k == 0);
    add_one(wl, cas, p.name, "ns/pair first", cold, k == 0);
    if (have_held) add_one(wl, cas, p.name, "held/live", (double)held_peak / (double)t.peak_live, k == 0);
    p.destroy(p.ctx);
    progress("  (%s) %s done", wl, p.name);
  }
  progress("  (%s) trace: %zu ops, %zu allocations, peak live %.1f MiB", wl, t.nops, t.nallocs,
           (double)t.peak_live / 1048576.0);
  free(t.ops);
  free(t.ptrs);
}

/* ---- the workloads' peers --------------------------------------------------------------------- */

void wl_b(void) {
  static const pdesc peers[] = {
      {P_RAP, "rap ResourceAwarePool", "ResourceAwarePool(DEVICE, initial_size=1MiB, next_size=1MiB)", 0},
      {P_RAP, "rap QuickPool", "QuickPool(DEVICE, initial_size=1MiB, next_size=1MiB)", 0},
      {P_RAP, "rap DynamicPoolList", "DynamicPoolList(DEVICE, initial_size=1MiB, next_size=1MiB)", 0},
      {P_RAP, "rap StreamOrdered", "StreamOrdered(pool=new, release_threshold=max)", 0},
      /* over the growable platform (issue 13): one chunk that grows at its end, 2 MiB granules */
      {P_RAP, "rap ResourceAwarePool DEVICE_VMM", "ResourceAwarePool(DEVICE_VMM, initial_size=2MiB, next_size=2MiB)", 0},
      {P_RAP, "rap QuickPool DEVICE_VMM", "QuickPool(DEVICE_VMM, initial_size=2MiB, next_size=2MiB)", 0},
      {P_RAP, "rap DynamicPoolList DEVICE_VMM", "DynamicPoolList(DEVICE_VMM, initial_size=2MiB, next_size=2MiB)", 0},
      {P_ASYNC_DEFAULT, 0, 0, 0}, {P_ASYNC_FRESH, 0, 0, 0}, {P_CUB, 0, 0, 0}, {P_TORCH, 0, 0, 0},
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
      {P_RAP, "rap DynamicPoolList HOST_VMM", "DynamicPoolList(HOST_VMM, initial_size=2MiB, next_size=2MiB)", 1},
      {P_MALLOC, 0, 0, 0}, {P_MIMALLOC, 0, 0, 0},
  };
  random_trace("b-host", peers, sizeof peers / sizeof *peers);
}
