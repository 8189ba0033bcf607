/* plan.c — (p) and (p-host): what the Planned strategy costs per allocate+free pair, against the
 * ResourceAwarePool it falls back to: a hit (the cursor's entry, its place free), a miss while in
 * step (not the cursor's entry: a look ahead, then the pool) and a miss while lost (the pool, the
 * cursor following). The plan is written here: one entry of 256 B, so 256 B pairs hit, 512 B pairs
 * miss, and the two alternating are a hit and an in-step miss per two pairs.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A plan of one 256-byte entry (docs/trace.md), with its checksum. */
static int write_plan(const char *path) {
  char body[256];
  int len = snprintf(body, sizeof body, "rap-plan 1\ndomain bench\nstreams 1\nalignment 256\narena 256\n"
                     "entries 1\n0 256 256 0 0 1\n");
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < len; i++) h = (h ^ (unsigned char)body[i]) * 1099511628211ull;
  FILE *f = fopen(path, "w");
  if (f == NULL) return -1;
  fprintf(f, "%send %016llx\n", body, (unsigned long long)h);
  return fclose(f);
}

typedef struct plan_arg {
  bench_peer *p;
  const size_t *sizes;   /* sizes[i & mask] */
  size_t mask;
} plan_arg;

static int plan_loop(void *arg, long iters) {
  plan_arg *a = arg;
  for (long i = 0; i < iters; i++) {
    void *ptr;
    size_t n = a->sizes[(size_t)i & a->mask];
    if (a->p->alloc(a->p->ctx, &ptr, n, 1) != 0 || a->p->free(a->p->ctx, ptr, n, 1) != 0) return -1;
  }
  return 0;
}

static void plan_pairs(const char *wl, const char *platform, int host) {
  char path[200], planned[600], pool[128];
  snprintf(path, sizeof path, "%s/rap-bench-%ld.plan", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (long)getpid());
  if (write_plan(path) != 0) {
    SKIP(wl, "cannot write %s", path);
    return;
  }
  snprintf(pool, sizeof pool, "ResourceAwarePool(%s, initial_size=1MiB)", platform);
  snprintf(planned, sizeof planned, "Planned(%s, plan=%s)", pool, path);
  const pdesc peers[] = {{P_RAP, "rap ResourceAwarePool", pool, host},
                         {P_RAP, "rap Planned", planned, host}};
  static const size_t hit[] = {256}, mixed[] = {256, 512}, lost[] = {512};
  static const struct { const char *cas; const size_t *sizes; size_t mask; } cases[] = {
      {"256 B (a hit)", hit, 0}, {"256 B, 512 B (a hit, a miss in step)", mixed, 1},
      {"512 B (a miss, lost)", lost, 0}};
  for (size_t k = 0; k < 2; k++) {
    bench_peer p;
    if (open_peer(wl, &peers[k], &p) != 0) continue;
    for (size_t c = 0; c < 3; c++) {
      double samples[64];
      plan_arg a = {&p, cases[c].sizes, cases[c].mask};
      int n = measure(plan_loop, &a, samples);
      if (n == 0) {
        peer_failed(wl, &p, cases[c].cas);
        break;
      }
      add_row(wl, cases[c].cas, p.name, "ns/pair", samples, n, k == 0);
    }
    p.destroy(p.ctx);
    progress("  (%s) %s done", wl, p.name);
  }
  unlink(path);
}

void wl_p(void) { plan_pairs("p", "DEVICE", 0); }
void wl_p_host(void) { plan_pairs("p-host", "HOST", 1); }
