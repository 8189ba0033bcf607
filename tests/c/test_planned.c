/* test_planned.c — rap-trace plan's placement (tools/trace_plan.c) and the Planned strategy.
 *
 * Plans are made from traces the tests write: a tiny iteration whose places are worked out by
 * hand, and a longer seeded workload whose second run is served by the plan of its first. The
 * strategy runs over a ResourceAwarePool on host_async queues; the cross-stream case holds the
 * queue that freed a place behind a gate, with no sleeps. A plan file that is no regular file, or
 * holds endless lines, is read in a child of its own with a deadline: before the reader was
 * bounded it blocked or read until memory ran out.
 */
#define _GNU_SOURCE   /* fork, alarm, mkfifo, ftruncate under -std=c11 */
#include "gate.h"
#include "rap_testing.h"   /* the Fault calls */
#include "stall.h"
#include "test_util.h"
#include "trace_plan.h"   /* tools/: the planner itself, and plan_file.h: the bounds of a plan */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void tp_path(char *buf, size_t cap, const char *what) {
  const char *dir = getenv("TMPDIR");
  snprintf(buf, cap, "%s/rap-plan-%ld-%s", dir && *dir ? dir : "/tmp", (long)getpid(), what);
}

/* ---- writing traces ----------------------------------------------------------------------- */

typedef struct tw {
  FILE *f;
  uint64_t t;
  const char *name;   /* the allocator's ("torch") */
} tw;

static void tw_open(tw *w, const char *path) {
  w->f = fopen(path, "w");
  RAP_CHECK(w->f != NULL);
  w->t = 0;
  w->name = "torch";
  fprintf(w->f, "{\"t\":0,\"ev\":\"trace\",\"version\":\"0.1.0\",\"clock\":\"monotonic ns\"}\n");
}

static void tw_alloc(tw *w, int r, uint64_t p, uint64_t n) {
  fprintf(w->f, "{\"t\":%llu,\"th\":1,\"ev\":\"alloc\",\"a\":\"%s\",\"d\":0,\"r\":%d,\"rk\":\"cuda\","
          "\"p\":\"0x%llx\",\"n\":%llu}\n", (unsigned long long)++w->t, w->name, r, (unsigned long long)p,
          (unsigned long long)n);
}

static void tw_free(tw *w, int r, uint64_t p) {
  fprintf(w->f, "{\"t\":%llu,\"th\":1,\"ev\":\"dealloc\",\"a\":\"%s\",\"d\":0,\"r\":%d,\"rk\":\"cuda\","
          "\"p\":\"0x%llx\",\"n\":0}\n", (unsigned long long)++w->t, w->name, r, (unsigned long long)p);
}

static void tw_step(tw *w) { fprintf(w->f, "{\"t\":%llu,\"ev\":\"step\"}\n", (unsigned long long)++w->t); }

/* The tiny iteration: A (1000 B) and B (300 B) live together, A goes, C (500 B) comes, B and C
 * go. In allocations: A lives [0, 2), B [1, 3), C [2, 3). Aligned to 256: 1024, 512, 512. By size,
 * best fit: A at 0, B above it at 1024 (they meet), C in the gap A left at 0 (it meets only B).
 * The arena is 1536 bytes, what A and B need together: no plan holds less. */
static void tiny_iteration(tw *w, int r, uint64_t base) {
  tw_alloc(w, r, base + 0x1000, 1000);
  tw_alloc(w, r, base + 0x2000, 300);
  tw_free(w, r, base + 0x1000);
  tw_alloc(w, r, base + 0x3000, 500);
  tw_free(w, r, base + 0x2000);
  tw_free(w, r, base + 0x3000);
}

/* Plans the trace at trace_path into plan_path; d is kept for the caller to look at and free. */
static void make_plan(const char *trace_path, const char *plan_path, plan_domain *d) {
  trace t;
  char err[512];
  RAP_CHECK(trace_load(trace_path, &t, err, sizeof err) == 0);
  plan_opts o = {256, 0, 0};
  int a = trace_name(&t, "torch");
  RAP_CHECK(a >= 0);
  int rc = plan_build(&t, a, &o, d, err, sizeof err);
  trace_free(&t);
  if (rc != 0) rap_test_fail(__FILE__, __LINE__, "plan_build: %s", err);
  FILE *f = fopen(plan_path, "w");
  RAP_CHECK(f != NULL);
  RAP_CHECK(plan_write(f, d, 1) == 0);
  RAP_CHECK(fclose(f) == 0);
}

static void tiny_plan(const char *trace_path, const char *plan_path, plan_domain *d, int two_streams) {
  tw w;
  tw_open(&w, trace_path);
  for (int it = 0; it < 3; it++) {
    tw_step(&w);
    if (two_streams) {   /* A on stream 1, then B, at the same place, on stream 2 */
      tw_alloc(&w, 1, 0x10000 + 0x100 * (uint64_t)it, 1024);
      tw_free(&w, 1, 0x10000 + 0x100 * (uint64_t)it);
      tw_alloc(&w, 2, 0x20000 + 0x100 * (uint64_t)it, 1024);
      tw_free(&w, 2, 0x20000 + 0x100 * (uint64_t)it);
    } else {
      tiny_iteration(&w, 1, 0x100000 * (uint64_t)(it + 1));
    }
  }
  RAP_CHECK(fclose(w.f) == 0);
  make_plan(trace_path, plan_path, d);
}

RAP_TEST(PlanBuild, TinyIterationHasExactPlaces) {
  char tp[256], pp[256];
  tp_path(tp, sizeof tp, "tiny.jsonl");
  tp_path(pp, sizeof pp, "tiny.plan");
  plan_domain d;
  tiny_plan(tp, pp, &d, 0);
  RAP_CHECK(d.by_steps);
  RAP_CHECK_EQ(d.n, 3);
  RAP_CHECK_EQ(d.iterations, 2);
  RAP_CHECK_EQ(d.placed, 3);
  RAP_CHECK_EQ(d.e[0].start, 0);
  RAP_CHECK_EQ(d.e[0].end, 2);
  RAP_CHECK_EQ(d.e[1].end, 3);
  RAP_CHECK_EQ(d.e[2].start, 2);
  RAP_CHECK_EQ(d.e[2].end, 3);
  RAP_CHECK_EQ(d.e[0].offset, 0);
  RAP_CHECK_EQ(d.e[1].offset, 1024);
  RAP_CHECK_EQ(d.e[2].offset, 0);
  RAP_CHECK_EQ(d.arena, 1536);
  RAP_CHECK_EQ(d.live_peak, 1536);
  plan_domain_free(&d);
  unlink(tp);
  unlink(pp);
}

/* Without step lines the period is found: a prefix of blocks that never go, then the iteration
 * ten times. The prefix is not in the plan, and the places are the tiny iteration's. */
RAP_TEST(PlanBuild, PeriodFoundAfterAPrefix) {
  uint64_t sig[200];
  for (size_t i = 0; i < 37; i++) sig[i] = 1000 + i;
  for (size_t i = 37; i < 200; i++) sig[i] = 7 + (i - 37) % 23;
  size_t start = 0;
  RAP_CHECK_EQ(plan_period(sig, NULL, 200, &start), 23);
  RAP_CHECK_EQ(start, 37);
  for (size_t i = 0; i < 200; i++) sig[i] = 1000 + i;   /* nothing repeats */
  RAP_CHECK_EQ(plan_period(sig, NULL, 200, &start), 0);

  char tp[256], pp[256];
  tp_path(tp, sizeof tp, "period.jsonl");
  tp_path(pp, sizeof pp, "period.plan");
  tw w;
  tw_open(&w, tp);
  for (uint64_t i = 0; i < 5; i++) tw_alloc(&w, 1, 0x900000 + i * 0x1000, 4096 * (i + 3));
  for (int it = 0; it < 10; it++) tiny_iteration(&w, 1, 0x100000 * (uint64_t)(it + 1));
  RAP_CHECK(fclose(w.f) == 0);
  plan_domain d;
  make_plan(tp, pp, &d);
  RAP_CHECK(!d.by_steps);
  RAP_CHECK_EQ(d.n, 3);
  RAP_CHECK_EQ(d.first, 5);
  RAP_CHECK_EQ(d.iterations, 10);
  RAP_CHECK_EQ(d.e[0].offset, 0);
  RAP_CHECK_EQ(d.e[1].offset, 1024);
  RAP_CHECK_EQ(d.e[2].offset, 0);
  RAP_CHECK_EQ(d.arena, 1536);
  plan_domain_free(&d);
  unlink(tp);
  unlink(pp);
}

/* A period seen once and two thirds of it again, after more work that does not repeat than a
 * period, is no repetition: the planner refuses with a sentence rather than plan a trace (serving,
 * say) whose next run nothing says will follow it. */
RAP_TEST(PlanBuild, OneIterationIsRefused) {
  char tp[256];
  tp_path(tp, sizeof tp, "once.jsonl");
  tw w;
  tw_open(&w, tp);
  for (uint64_t i = 0; i < 16; i++) {   /* sixteen allocations that do not repeat, */
    tw_alloc(&w, 1, 0x900000 + i * 0x1000, 50000 + i * 256);
    tw_free(&w, 1, 0x900000 + i * 0x1000);
  }
  for (uint64_t i = 0; i < 20; i++) {   /* then twelve sizes, and the first eight of them again */
    tw_alloc(&w, 1, 0x100000 + i * 0x1000, 1000 + (i % 12) * 256);
    tw_free(&w, 1, 0x100000 + i * 0x1000);
  }
  RAP_CHECK(fclose(w.f) == 0);
  trace t;
  char err[512] = "";
  RAP_CHECK(trace_load(tp, &t, err, sizeof err) == 0);
  plan_opts o = {256, 0, 0};
  int a = trace_name(&t, "torch");
  RAP_CHECK(a >= 0);
  plan_domain d;
  RAP_CHECK(plan_build(&t, a, &o, &d, err, sizeof err) != 0);
  if (strstr(err, "one iteration") == NULL) rap_test_fail(__FILE__, __LINE__, "refused with: %s", err);
  trace_free(&t);
  plan_domain_free(&d);
  unlink(tp);
}

/* ---- what the planner writes, Planned reads ------------------------------------------------ */

/* Three iterations between step lines, each allocating `together` blocks of n bytes (live at
 * once, freed within the iteration) on each of `streams` resources in turn, for allocator name. */
static void edge_trace(const char *path, const char *name, int streams, uint64_t n, int together) {
  tw w;
  tw_open(&w, path);
  w.name = name;
  for (int it = 0; it < 3; it++) {
    tw_step(&w);
    for (int r = 1; r <= streams; r++) {
      uint64_t base = 0x100000000ull * (uint64_t)(it + 1) + 0x10000ull * (uint64_t)r;
      for (int k = 0; k < together; k++) tw_alloc(&w, r, base + 0x100 * (uint64_t)k, n);
      for (int k = 0; k < together; k++) tw_free(&w, r, base + 0x100 * (uint64_t)k);
    }
  }
  RAP_CHECK(fclose(w.f) == 0);
}

/* plan_build on the trace's only allocator: 0 with the plan written to plan_path (and d kept, to
 * free), or -1 with the planner's sentence in err. */
static int edge_plan(const char *trace_path, const char *plan_path, plan_domain *d, char *err, size_t cap) {
  trace t;
  RAP_CHECK(trace_load(trace_path, &t, err, cap) == 0);
  RAP_CHECK_EQ(t.nnames, 1);
  plan_opts o = {256, 0, 0};
  int rc = plan_build(&t, 0, &o, d, err, cap);
  trace_free(&t);
  if (rc != 0) return rc;
  FILE *f = fopen(plan_path, "w");
  RAP_CHECK(f != NULL);
  RAP_CHECK(plan_write(f, d, 1) == 0);
  RAP_CHECK(fclose(f) == 0);
  return 0;
}

/* Planned's reader on a plan file, through rap_spec_check (as a make would read it). */
static int planned_reads(const char *plan_path) {
  char spec[600];
  snprintf(spec, sizeof spec, "Planned(HOST, plan=%s)", plan_path);
  return rap_spec_check(spec);
}

/* At each bound Planned's reader checks (plan_file.h), the planner writes what the reader takes
 * and refuses, with a sentence, what it would refuse: 255 streams and 256; the largest block an
 * arena holds and the next; blocks of 2^63 bytes, whose sums wrapped (an arena smaller than its
 * blocks; UBSan: a signed overflow); two blocks whose arena passes the bound; a name of the most
 * bytes and one more; an empty name. */
RAP_TEST(PlanBuild, WritesOnlyWhatPlannedReads) {
  char tp[256], pp[256], err[512];
  tp_path(tp, sizeof tp, "edge.jsonl");
  tp_path(pp, sizeof pp, "edge.plan");
  static char long_name[RAPI_PLAN_MAX_NAME + 2];
  memset(long_name, 'n', RAPI_PLAN_MAX_NAME);
  long_name[RAPI_PLAN_MAX_NAME] = '\0';
  const uint64_t biggest = RAPI_PLAN_MAX_ARENA & ~255ull;   /* 2^62 - 256 at alignment 256 */
  static const struct {
    int streams;
    uint64_t n;
    int together, longer;
    const char *name, *says;   /* says: NULL where the plan is written and read */
  } edges[] = {
      {RAPI_PLAN_MAX_STREAMS, 1000, 1, 0, "torch", NULL},
      {RAPI_PLAN_MAX_STREAMS + 1, 1000, 1, 0, "torch", "uses more than 255 resources (streams): a plan holds at most 255"},
      {1, RAPI_PLAN_MAX_ARENA & ~255ull, 1, 0, "torch", NULL},
      {1, (RAPI_PLAN_MAX_ARENA & ~255ull) + 1, 1, 0, "torch", "recurs with 4611686018427387649 bytes: more than a plan's arena holds"},
      {1, 1ull << 62, 1, 0, "torch", "more than a plan's arena holds (4611686018427387903 bytes"},
      {1, 1ull << 63, 2, 0, "torch", "recurs with 9223372036854775808 bytes"},
      {1, 1ull << 61, 2, 0, "torch", "need an arena of more than 4611686018427387903 bytes"},
      {2, 1ull << 61, 1, 0, "torch", NULL},   /* one at a time: they share the place */
      {1, 1000, 1, 0, NULL, NULL},            /* the longest name */
      {1, 1000, 1, 1, NULL, "is 1025 bytes: a plan's domain name is at most 1024"},
      {1, 1000, 1, 0, "", "an allocator of the trace has an empty name"},
  };
  for (size_t k = 0; k < sizeof edges / sizeof *edges; k++) {
    long_name[RAPI_PLAN_MAX_NAME] = edges[k].longer ? 'n' : '\0';
    edge_trace(tp, edges[k].name ? edges[k].name : long_name, edges[k].streams, edges[k].n, edges[k].together);
    plan_domain d;
    unlink(pp);
    int rc = edge_plan(tp, pp, &d, err, sizeof err);
    if (edges[k].says != NULL) {
      if (rc == 0) {
        int st = planned_reads(pp);
        rap_test_fail(__FILE__, __LINE__, "edge %zu: a plan was written (Planned answers %s: %s)", k,
                      rap_status_name(st), st != RAP_OK ? rap_last_error() : "");
      }
      RAP_CHECK_STR(err, edges[k].says);
      RAP_CHECK(access(pp, F_OK) != 0);
      continue;
    }
    if (rc != 0) rap_test_fail(__FILE__, __LINE__, "edge %zu refused: %s", k, err);
    RAP_CHECK_EQ(d.streams, (size_t)edges[k].streams);
    if (edges[k].n == biggest) RAP_CHECK_EQ(d.arena, biggest);
    if (edges[k].n == 1ull << 61) RAP_CHECK_EQ(d.arena, 1ull << 61);
    plan_domain_free(&d);
    int st = planned_reads(pp);
    if (st != RAP_OK) rap_test_fail(__FILE__, __LINE__, "edge %zu: Planned refuses the plan: %s", k, rap_last_error());
  }
  unlink(tp);
  unlink(pp);
}

/* ---- serving ------------------------------------------------------------------------------------ */

typedef struct pf {
  rap_manager *rm;
  rap_allocator *a;
  rap_resource *q1, *q2;
  gate g;
  char tp[256], pp[256];
} pf;

static void pf_setup(pf *f, int two_streams) {
  tp_path(f->tp, sizeof f->tp, "serve.jsonl");
  tp_path(f->pp, sizeof f->pp, "serve.plan");
  plan_domain d;
  tiny_plan(f->tp, f->pp, &d, two_streams);
  plan_domain_free(&d);
  f->rm = tu_manager();
  char spec[600];
  snprintf(spec, sizeof spec, "Planned(ResourceAwarePool(HOST, initial_size=64KiB, next_size=64KiB), "
           "plan=%s)", f->pp);
  RAP_CHECK_OK(rap_allocator_make_spec(f->rm, "planned", spec, &f->a));
  RAP_CHECK_OK(rap_resource_create_host_async(f->rm, &f->q1));
  RAP_CHECK_OK(rap_resource_create_host_async(f->rm, &f->q2));
  gate_init(&f->g);
}

static void pf_teardown(pf *f) {
  gate_open(&f->g);
  RAP_CHECK_OK(rap_allocator_check(f->a));
  RAP_CHECK_OK(rap_manager_destroy(f->rm));
  gate_destroy(&f->g);
  unlink(f->tp);
  unlink(f->pp);
}

static void *on(pf *f, size_t n, rap_resource *r) {
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(f->a, &p, n, r));
  return p;
}

/* One tiny iteration on q1; a, b, c: its blocks. */
static void run_tiny(pf *f, char **a, char **b, char **c) {
  *a = on(f, 1000, f->q1);
  *b = on(f, 300, f->q1);
  RAP_CHECK_OK(rap_deallocate(f->a, *a, f->q1));
  *c = on(f, 500, f->q1);
  RAP_CHECK_OK(rap_deallocate(f->a, *b, f->q1));
  RAP_CHECK_OK(rap_deallocate(f->a, *c, f->q1));
}

RAP_TEST(Planned, ServesAnIterationInOrder) {
  pf f;
  pf_setup(&f, 0);
  char *a, *b, *c;
  /* The first iteration finds its place in the plan: A goes to the parent, B and C are served. */
  run_tiny(&f, &a, &b, &c);
  char *base = b - 1024;
  RAP_CHECK(c == base);
  for (int it = 0; it < 3; it++) {
    run_tiny(&f, &a, &b, &c);
    RAP_CHECK(a == base);
    RAP_CHECK(b == base + 1024);
    RAP_CHECK(c == base);
  }
  a = on(&f, 1000, f.q1);
  RAP_CHECK(a == base);
  rap_stats s = tu_stats(f.a);
  RAP_CHECK_EQ(s.current_bytes, 1000);
  RAP_CHECK_EQ(s.allocation_count, 1);
  RAP_CHECK_EQ(s.high_watermark, 1300);
  rap_allocator *owner = NULL;
  RAP_CHECK_OK(rap_allocator_find(f.rm, a, &owner));
  RAP_CHECK(owner == f.a);
  rap_resource *r = NULL;
  RAP_CHECK_OK(rap_pointer_resource(f.a, a, &r));
  RAP_CHECK(r == f.q1);
  /* A planned block belongs to its queue; freed twice it is unknown. */
  RAP_CHECK_STATUS(rap_deallocate(f.a, a, f.q2), RAP_ERR_WRONG_RESOURCE);
  RAP_CHECK_OK(rap_deallocate(f.a, a, NULL));
  RAP_CHECK_STATUS(rap_deallocate(f.a, a, f.q1), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_STR(rap_last_error(), "not a live block");
  pf_teardown(&f);
}

/* What the plan did not foresee goes to the parent, and the plan goes on: an extra request in
 * the middle of an iteration, and a block freed later than the trace freed it (its place is
 * still in use when the next entry wants it: that one goes to the parent, never on top of it). */
RAP_TEST(Planned, AMissFallsBackToTheParent) {
  pf f;
  pf_setup(&f, 0);
  char *a, *b, *c;
  run_tiny(&f, &a, &b, &c);
  char *base = b - 1024;
  a = on(&f, 1000, f.q1);
  char *x = on(&f, 777, f.q1);   /* not in the plan */
  RAP_CHECK(x < base || x >= base + 1536);
  b = on(&f, 300, f.q1);
  RAP_CHECK(a == base && b == base + 1024);
  c = on(&f, 500, f.q1);   /* A is still live where C would go */
  RAP_CHECK(c < base || c >= base + 1536);
  RAP_CHECK_EQ(tu_stats(f.a).allocation_count, 4);
  RAP_CHECK_OK(rap_deallocate(f.a, a, f.q1));
  RAP_CHECK_OK(rap_deallocate(f.a, b, f.q1));
  RAP_CHECK_OK(rap_deallocate(f.a, c, f.q1));
  RAP_CHECK_OK(rap_deallocate(f.a, x, f.q1));
  RAP_CHECK_OK(rap_allocator_check(f.a));
  run_tiny(&f, &a, &b, &c);   /* in step again */
  RAP_CHECK(a == base && b == base + 1024 && c == base);
  /* A request of another size at the cursor, then requests that never match: the cursor gets
   * lost, waits for the iteration's first entry, and serves again once it is in step. */
  for (int i = 0; i < 8; i++) {
    x = on(&f, 4000 + (size_t)i, f.q1);
    RAP_CHECK(x < base || x >= base + 1536);
    RAP_CHECK_OK(rap_deallocate(f.a, x, f.q1));
  }
  run_tiny(&f, &a, &b, &c);
  run_tiny(&f, &a, &b, &c);
  RAP_CHECK(a == base && b == base + 1024 && c == base);
  pf_teardown(&f);
}

/* A place freed on q2 while q2 is still busy is given to q1 at once, behind a wait queued on q1:
 * q1's work on it runs only after q2's (a late fill on q2, then q1's own: q1's bytes win). */
RAP_TEST(Planned, CrossStreamReuseWaitsForTheOtherQueue) {
  pf f;
  pf_setup(&f, 1);
  void *p = on(&f, 1024, f.q1);   /* the first iteration: A from the parent, B from the plan */
  RAP_CHECK_OK(rap_deallocate(f.a, p, f.q1));
  char *b = on(&f, 1024, f.q2);
  fill late = {b, 1024, 0xAA};
  RAP_CHECK_OK(rap_resource_submit(f.q2, gate_job, &f.g));
  RAP_CHECK_OK(rap_resource_submit(f.q2, fill_job, &late));
  RAP_CHECK_OK(rap_deallocate(f.a, b, f.q2));
  char *a = on(&f, 1024, f.q1);   /* A's place is B's */
  RAP_CHECK(a == b);
  fill mine = {a, 1024, 0x55};
  RAP_CHECK_OK(rap_resource_submit(f.q1, fill_job, &mine));
  gate_open(&f.g);
  RAP_CHECK_OK(rap_resource_synchronize(f.q1));
  RAP_CHECK_OK(rap_resource_synchronize(f.q2));
  RAP_CHECK_EQ(gate_passed(&f.g), 1);
  RAP_CHECK(all_bytes(a, 1024, 0x55));
  RAP_CHECK_OK(rap_deallocate(f.a, a, f.q1));
  /* A queue that still owns a planned block cannot go. */
  b = on(&f, 1024, f.q2);
  RAP_CHECK_STATUS(rap_resource_destroy(f.q2), RAP_ERR_BUSY);
  RAP_CHECK_OK(rap_deallocate(f.a, b, f.q2));
  RAP_CHECK_OK(rap_resource_destroy(f.q2));
  f.q2 = NULL;
  pf_teardown(&f);
}

/* A planned block also used on q2 (rap_record_resource): its place waits for q2 as well. */
RAP_TEST(Planned, ARecordedUseIsWaitedFor) {
  pf f;
  pf_setup(&f, 0);
  char *a, *b, *c;
  run_tiny(&f, &a, &b, &c);
  a = on(&f, 1000, f.q1);
  RAP_CHECK_OK(rap_record_resource(f.a, a, f.q2));
  fill late = {a, 1000, 0xAA};
  RAP_CHECK_OK(rap_resource_submit(f.q2, gate_job, &f.g));
  RAP_CHECK_OK(rap_resource_submit(f.q2, fill_job, &late));
  b = on(&f, 300, f.q1);
  RAP_CHECK_OK(rap_deallocate(f.a, a, f.q1));
  c = on(&f, 500, f.q1);   /* A's place: behind a wait for q2 queued on q1 */
  RAP_CHECK(c == a);
  fill mine = {c, 500, 0x55};
  RAP_CHECK_OK(rap_resource_submit(f.q1, fill_job, &mine));
  gate_open(&f.g);
  RAP_CHECK_OK(rap_resource_synchronize(f.q1));
  RAP_CHECK_OK(rap_resource_synchronize(f.q2));
  RAP_CHECK(all_bytes(c, 500, 0x55));
  RAP_CHECK_OK(rap_deallocate(f.a, b, f.q1));
  RAP_CHECK_OK(rap_deallocate(f.a, c, f.q1));
  pf_teardown(&f);
}

/* A plan file that is missing, not a plan, cut short or changed is refused with a sentence. */
RAP_TEST(Planned, BadPlanFilesAreRefused) {
  char tp[256], pp[256], bad[256], spec[700];
  tp_path(tp, sizeof tp, "bad.jsonl");
  tp_path(pp, sizeof pp, "bad.plan");
  tp_path(bad, sizeof bad, "broken.plan");
  plan_domain d;
  tiny_plan(tp, pp, &d, 0);
  plan_domain_free(&d);
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "p", "Planned(HOST)", &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "plan=FILE");
  snprintf(spec, sizeof spec, "Planned(HOST, plan=%s.nothing)", pp);
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "p", spec, &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "cannot open the plan file");
  snprintf(spec, sizeof spec, "Planned(HOST, plan=%s, domain=nobody)", pp);
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "p", spec, &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "no domain 'nobody'");
  /* The good file, then broken copies of it. */
  FILE *f = fopen(pp, "r");
  RAP_CHECK(f != NULL);
  char text[4096];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = '\0';
  static const struct { const char *from, *to, *says; } breaks[] = {
      {"rap-plan 1", "rap-plan 9", "another version"},
      {"rap-plan 1", "hello", "not a plan file"},
      {"\n0 1000 1000 0 ", "\n0 1000 1000 1 ", "not aligned"},
      {"\n0 1000 1000 0 ", "\n0 1000 1000 128 ", "not aligned"},
      {"\n0 300 300 1024 ", "\n0 300 300 0 ", "checksum"},
      {"\n0 300 300 1024 ", "\n7 300 300 1024 ", "stream"},
      {"entries 3", "entries 4", "an entry is"},
      {"\nend ", "\nned ", "'end CHECKSUM' expected"},
  };
  for (size_t k = 0; k < sizeof breaks / sizeof *breaks; k++) {
    const char *at = strstr(text, breaks[k].from);
    RAP_CHECK(at != NULL);
    f = fopen(bad, "w");
    RAP_CHECK(f != NULL);
    fprintf(f, "%.*s%s%s", (int)(at - text), text, breaks[k].to, at + strlen(breaks[k].from));
    fclose(f);
    snprintf(spec, sizeof spec, "Planned(HOST, plan=%s)", bad);
    RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "p", spec, &a), RAP_ERR_INVALID);
    RAP_CHECK_STR(rap_last_error(), breaks[k].says);
  }
  f = fopen(bad, "w");   /* cut in the middle */
  RAP_CHECK(f != NULL);
  fwrite(text, 1, len / 2, f);
  fclose(f);
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "p", spec, &a), RAP_ERR_INVALID);
  RAP_CHECK_OK(rap_manager_destroy(rm));
  unlink(tp);
  unlink(pp);
  unlink(bad);
}

/* ---- a plan file read with bounds ------------------------------------------------------------- */

#define PROMPT_S 5   /* a refusal takes microseconds; before the bounds these ran until killed */

/* rap_spec_check(spec) in a child of its own, given PROMPT_S seconds: its status, and its sentence
 * in said. The test fails where it did not return in time (a read that blocks, or never ends). */
static int spec_check_promptly(const char *spec, char *said, size_t cap) {
  int fds[2];
  RAP_CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  RAP_CHECK(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    alarm(PROMPT_S);
    int st = rap_spec_check(spec);
    char buf[2048];
    int len = snprintf(buf, sizeof buf, "%d %s", st, st != RAP_OK ? rap_last_error() : "");
    if (len > (int)sizeof buf - 1) len = (int)sizeof buf - 1;
    _exit(write(fds[1], buf, (size_t)len) == len ? 0 : 1);
  }
  close(fds[1]);
  size_t got = 0;
  ssize_t r;
  while (got + 1 < cap && (r = read(fds[0], said + got, cap - 1 - got)) > 0) got += (size_t)r;
  said[got] = '\0';
  close(fds[0]);
  int status = 0;
  RAP_CHECK(waitpid(pid, &status, 0) == pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    rap_test_fail(__FILE__, __LINE__, "rap_spec_check(\"%s\") did not return within %d s", spec, PROMPT_S);
  char *rest = NULL;
  long st = strtol(said, &rest, 10);
  memmove(said, rest + (*rest == ' '), strlen(rest + (*rest == ' ')) + 1);
  return (int)st;
}

/* A plan that is no regular file is refused before a byte is read, and opening it does not wait:
 * /dev/zero (read until memory ran out), a FIFO nothing writes (the open blocked rap_spec_check),
 * a directory, and a sparse file larger than any plan (16 GiB of zeros). */
RAP_TEST(Planned, APlanThatIsNoRegularFileIsRefusedPromptly) {
  char fifo[256], dir[256], sparse[256], spec[700], said[2048];
  tp_path(fifo, sizeof fifo, "fifo.plan");
  tp_path(dir, sizeof dir, "dir.plan");
  tp_path(sparse, sizeof sparse, "sparse.plan");
  unlink(fifo);
  RAP_CHECK(mkfifo(fifo, 0600) == 0);
  RAP_CHECK(mkdir(dir, 0700) == 0);
  FILE *f = fopen(sparse, "w");
  RAP_CHECK(f != NULL);
  RAP_CHECK(ftruncate(fileno(f), (off_t)RAPI_PLAN_MAX_FILE + 1) == 0);
  RAP_CHECK(fclose(f) == 0);
  const struct { const char *path, *says; } cases[] = {
      {"/dev/zero", "is a character device, not a regular file"},
      {fifo, "is a FIFO, not a regular file"},
      {dir, "is a directory, not a regular file"},
      {sparse, "holds 17179869185 bytes: more than a plan file may (17179869184)"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    snprintf(spec, sizeof spec, "Planned(HOST, plan=%s)", cases[k].path);
    RAP_CHECK_EQ(spec_check_promptly(spec, said, sizeof said), RAP_ERR_INVALID);
    RAP_CHECK_STR(said, cases[k].path);
    RAP_CHECK_STR(said, cases[k].says);
  }
  unlink(fifo);
  rmdir(dir);
  unlink(sparse);
}

/* A line of a plan is at most RAPI_PLAN_MAX_LINE bytes, its newline included: a comment of that
 * length before a good plan is read, one byte more is refused naming the line, as is a line that
 * never ends, and a NUL byte. */
RAP_TEST(Planned, APlanLineIsBounded) {
  char tp[256], pp[256], bad[256], spec[700], said[2048];
  tp_path(tp, sizeof tp, "lines.jsonl");
  tp_path(pp, sizeof pp, "lines.plan");
  tp_path(bad, sizeof bad, "lines-bad.plan");
  plan_domain d;
  tiny_plan(tp, pp, &d, 0);
  plan_domain_free(&d);
  FILE *f = fopen(pp, "r");
  RAP_CHECK(f != NULL);
  static char text[4096];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = '\0';
  static const struct { size_t comment; int nul; int st; const char *says; } cases[] = {
      {RAPI_PLAN_MAX_LINE, 0, RAP_OK, ""},
      {RAPI_PLAN_MAX_LINE + 1, 0, RAP_ERR_INVALID, "line 1: the line is longer than 4096 bytes"},
      {(size_t)1 << 20, 0, RAP_ERR_INVALID, "line 1: the line is longer than 4096 bytes"},
      {16, 1, RAP_ERR_INVALID, "line 1: the line holds a NUL byte"},
  };
  snprintf(spec, sizeof spec, "Planned(HOST, plan=%s)", bad);
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    f = fopen(bad, "w");
    RAP_CHECK(f != NULL);
    fputc('#', f);   /* a comment of cases[k].comment bytes with its newline, then the plan */
    for (size_t i = 1; i + 1 < cases[k].comment; i++) fputc(cases[k].nul && i == 8 ? '\0' : 'x', f);
    fputc('\n', f);
    fputs(text, f);
    RAP_CHECK(fclose(f) == 0);
    RAP_CHECK_EQ(spec_check_promptly(spec, said, sizeof said), cases[k].st);
    RAP_CHECK_STR(said, cases[k].says);
  }
  unlink(tp);
  unlink(pp);
  unlink(bad);
}

/* ---- a plan from one run serves a second --------------------------------------------------- */

#define RUN_N 40      /* allocations an iteration */
#define RUN_ITERS 6

/* One seeded workload: RUN_N allocations an iteration of sizes fixed by position, each freed a
 * number of allocations later also fixed by position (some in the next iteration), after a prefix
 * of blocks that live on. do_alloc/do_free make it a trace (run 1) or real calls (run 2). */
typedef struct workload {
  void (*alloc)(struct workload *, size_t slot, size_t n);
  void (*free)(struct workload *, size_t slot);
  tw w;
  pf *f;
  void *ptr[RUN_N * (RUN_ITERS + 1) + 8];
  size_t sizes[RUN_N * (RUN_ITERS + 1) + 8];
  char *lo, *hi;   /* run 2: the range of the last iteration's blocks */
  int last;
} workload;

static void run_workload(workload *wl) {
  size_t due[RUN_N * (RUN_ITERS + 1) + 8];
  size_t slot = 0, pending = 0;
  size_t slots[RUN_N * (RUN_ITERS + 1) + 8];
  wl->last = 0;
  for (size_t i = 0; i < 4; i++) wl->alloc(wl, slot++, 65536 * (i + 1));   /* lives on */
  for (int it = 0; it < RUN_ITERS; it++) {
    wl->last = it == RUN_ITERS - 1;
    for (size_t k = 0; k < RUN_N; k++) {
      for (size_t j = 0; j < pending;) {   /* what is due before this allocation */
        if (due[j] <= (size_t)it * RUN_N + k) {
          wl->free(wl, slots[j]);
          slots[j] = slots[--pending];
          due[j] = due[pending];
        } else {
          j++;
        }
      }
      uint64_t h = (k + 1) * 0x9E3779B97F4A7C15ull;
      wl->alloc(wl, slot, 256 + (h >> 40) % 20000);
      slots[pending] = slot++;
      due[pending++] = (size_t)it * RUN_N + k + 1 + (h >> 20) % 12;
    }
  }
  for (size_t j = 0; j < pending; j++) wl->free(wl, slots[j]);
  for (size_t i = 0; i < 4; i++) wl->free(wl, i);
}

static void wl_trace_alloc(workload *wl, size_t slot, size_t n) { tw_alloc(&wl->w, 1, 0x1000 * (slot + 1), n); }
static void wl_trace_free(workload *wl, size_t slot) { tw_free(&wl->w, 1, 0x1000 * (slot + 1)); }

static void real_alloc(workload *wl, size_t slot, size_t n) {
  wl->ptr[slot] = on(wl->f, n, wl->f->q1);
  wl->sizes[slot] = n;
  if (wl->last) {
    char *p = wl->ptr[slot];
    if (wl->lo == NULL || p < wl->lo) wl->lo = p;
    if (p + n > wl->hi) wl->hi = p + n;
  }
}

static void real_free(workload *wl, size_t slot) { RAP_CHECK_OK(rap_deallocate(wl->f->a, wl->ptr[slot], wl->f->q1)); }

RAP_TEST(Planned, APlanFromOneRunServesASecond) {
  static workload wl;
  memset(&wl, 0, sizeof wl);
  pf f;
  tp_path(f.tp, sizeof f.tp, "run1.jsonl");
  tp_path(f.pp, sizeof f.pp, "run1.plan");
  tw_open(&wl.w, f.tp);
  wl.alloc = wl_trace_alloc;
  wl.free = wl_trace_free;
  run_workload(&wl);
  RAP_CHECK(fclose(wl.w.f) == 0);
  plan_domain d;
  make_plan(f.tp, f.pp, &d);
  RAP_CHECK_EQ(d.n, RUN_N);
  RAP_CHECK_EQ(d.placed, RUN_N);
  RAP_CHECK(d.arena <= d.live_peak + d.live_peak / 10);
  uint64_t arena = d.arena;
  plan_domain_free(&d);
  /* Run 2, through the plan: the last iteration lies inside one arena. */
  f.rm = tu_manager();
  char spec[600];
  snprintf(spec, sizeof spec, "Planned(ResourceAwarePool(HOST, initial_size=64KiB, next_size=64KiB), "
           "plan=%s)", f.pp);
  RAP_CHECK_OK(rap_allocator_make_spec(f.rm, "planned", spec, &f.a));
  RAP_CHECK_OK(rap_resource_create_host_async(f.rm, &f.q1));
  RAP_CHECK_OK(rap_resource_create_host_async(f.rm, &f.q2));
  gate_init(&f.g);
  wl.f = &f;
  wl.alloc = real_alloc;
  wl.free = real_free;
  run_workload(&wl);
  RAP_CHECK(wl.lo != NULL);
  if ((uint64_t)(wl.hi - wl.lo) > arena) rap_test_fail(__FILE__, __LINE__, "the last iteration spans %zu bytes, the arena is %llu", (size_t)(wl.hi - wl.lo), (unsigned long long)arena);
  pf_teardown(&f);
}

/* A second thread's check while the first is inside the pool (asking the parent for a block the
 * plan does not place) is refused by the thread guard, as every other call is: it would read the
 * live map mid-change. */
RAP_TEST(Planned, CheckFromASecondThreadIsRefusedByTheGuard) {
  char tp[256], pp[256], spec[600];
  tp_path(tp, sizeof tp, "guard.jsonl");
  tp_path(pp, sizeof pp, "guard.plan");
  plan_domain d;
  tiny_plan(tp, pp, &d, 0);
  plan_domain_free(&d);
  rap_manager *rm = tu_manager();
  RAP_CHECK_OK(rap_strategy_register(rm, &stall_strategy));
  snprintf(spec, sizeof spec, "Planned(Stall(HOST), plan=%s)", pp);
  rap_allocator *a = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "planned", spec, &a));
  void *mine = tu_alloc(a, 4000);   /* the main thread is the pool's owner */
  stall_arm();
  stall_caller c = {a, 5000, NULL, -100};
  pthread_t t;
  RAP_CHECK(pthread_create(&t, NULL, stall_call, &c) == 0);
  gate_job(&stall_arrived);   /* the thread is inside Planned, waiting in its parent */
  RAP_CHECK_STATUS(rap_allocator_check(a), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "another thread is inside");
  gate_open(&stall_gate);
  RAP_CHECK(pthread_join(t, NULL) == 0);
  RAP_CHECK_OK(c.st);
  RAP_CHECK_OK(rap_allocator_check(a));
  RAP_CHECK_OK(rap_deallocate(a, c.p, NULL));
  RAP_CHECK_OK(rap_deallocate(a, mine, NULL));
  gate_destroy(&stall_gate);
  gate_destroy(&stall_arrived);
  RAP_CHECK_OK(rap_manager_destroy(rm));
  unlink(tp);
  unlink(pp);
}

/* The parent refuses the arena once (a passing refusal: here the Fault strategy's): that
 * iteration goes to the parent, and the next one's first entry asks for the arena again, so the
 * plan serves from then on. */
RAP_TEST(Planned, APassingRefusalOfTheArenaDoesNotEndThePlan) {
  char tp[256], pp[256], spec[700];
  tp_path(tp, sizeof tp, "refused.jsonl");
  tp_path(pp, sizeof pp, "refused.plan");
  plan_domain d;
  tiny_plan(tp, pp, &d, 0);
  plan_domain_free(&d);
  rap_manager *rm = tu_manager();
  snprintf(spec, sizeof spec, "Planned(Fault(ResourceAwarePool(HOST, initial_size=64KiB, "
           "next_size=64KiB)), plan=%s)", pp);
  pf f = {.rm = rm};
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "planned", spec, &f.a));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &f.q1));
  rap_allocator *fault = NULL;
  RAP_CHECK_OK(rap_allocator_get(rm, "planned/Fault", &fault));
  /* The first iteration: A goes to the parent (the cursor finds its place), then B's entry asks
   * for the arena: the second request, refused. */
  RAP_CHECK_OK(rap_fault_configure(fault, "fail_at=2"));
  char *a, *b, *c;
  run_tiny(&f, &a, &b, &c);
  size_t before = 0, after = 0;
  RAP_CHECK_OK(rap_fault_requests(fault, &before));
  for (int it = 0; it < 3; it++) run_tiny(&f, &a, &b, &c);
  RAP_CHECK_OK(rap_fault_requests(fault, &after));
  RAP_CHECK_EQ(after - before, 1);   /* the arena, once; every block of the plan from it */
  RAP_CHECK(b == a + 1024 && c == a);
  RAP_CHECK_OK(rap_allocator_check(f.a));
  RAP_CHECK_OK(rap_manager_destroy(rm));
  unlink(tp);
  unlink(pp);
}

/* ---- call-scoped queues (rap_resource_set_call_scoped) ------------------------------------------ */

/* Calls with the queue after rap_host_async_end (the pool must make none: its stream is gone). */
static size_t after_end(rap_resource *r) {
  rap_host_async_view v;
  RAP_CHECK_OK(rap_host_async_view_of(r, &v));
  return v.after_end;
}

/* Waits until r has run everything submitted to it, without using r's queue (it may have ended). */
static void ran_all(rap_resource *r) {
  rap_host_async_view v;
  RAP_CHECK_OK(rap_host_async_view_of(r, &v));
  bool reached = false;
  RAP_CHECK_OK(rap_host_async_wait_until(r, v.submitted, 30, &reached));
  RAP_CHECK(reached);
}

/* The two-stream plan (one place: stream 1's block, then stream 2's) with q2, the owner of the
 * place, call-scoped; q1 takes the place after it. The first request (q1's) finds the iteration
 * and goes to the parent; the second, q's, gets the place: returned. */
static char *scoped_owner_setup(pf *f, rap_resource **u) {
  pf_setup(f, 1);
  RAP_CHECK_OK(rap_resource_set_call_scoped(f->q2, 1));
  RAP_CHECK_OK(rap_resource_create_host_async(f->rm, u));
  RAP_CHECK_OK(rap_resource_set_call_scoped(*u, 1));
  void *p = on(f, 1024, f->q1);
  RAP_CHECK_OK(rap_deallocate(f->a, p, f->q1));
  return on(f, 1024, f->q2);
}

/* q1 takes b's place again, behind a wait queued for the work that still uses it (late, held by
 * the gate): q1's own bytes must win once all of it ran. */
static void taken_after_the_late_work(pf *f, char *b, rap_resource *late_q) {
  char *a = on(f, 1024, f->q1);
  RAP_CHECK(a == b);
  fill mine = {a, 1024, 0x55};
  RAP_CHECK_OK(rap_resource_submit(f->q1, fill_job, &mine));
  gate_open(&f->g);
  RAP_CHECK_OK(rap_resource_synchronize(f->q1));
  ran_all(late_q);
  RAP_CHECK_EQ(gate_passed(&f->g), 1);
  RAP_CHECK(all_bytes(a, 1024, 0x55));
  RAP_CHECK_OK(rap_deallocate(f->a, a, f->q1));
}

/* Planned's side of BlockMovedToAnotherStreamAfterItsOwnWent: a planned block of q (call-scoped),
 * whose stream went, is used on u (call-scoped too: the use fenced when recorded), u's stream goes
 * as well, and the block is freed naming no resource. Neither queue is used again; the place is
 * given to q1 behind a wait for u's recorded use; the pool goes on. */
RAP_TEST(CallScoped, BlockMovedToAnotherStreamAfterItsOwnWentPlanned) {
  pf f;
  rap_resource *u;
  char *b = scoped_owner_setup(&f, &u);
  RAP_CHECK_OK(rap_host_async_end(f.q2));
  fill late = {b, 1024, 0xAA};
  RAP_CHECK_OK(rap_resource_submit(u, gate_job, &f.g));   /* u's work using b */
  RAP_CHECK_OK(rap_resource_submit(u, fill_job, &late));
  RAP_CHECK_STATUS(rap_deallocate(f.a, b, u), RAP_ERR_WRONG_RESOURCE);
  RAP_CHECK_OK(rap_record_resource(f.a, b, u));
  RAP_CHECK_OK(rap_host_async_end(u));
  RAP_CHECK_OK(rap_deallocate(f.a, b, NULL));
  RAP_CHECK_EQ(after_end(f.q2), 0);
  RAP_CHECK_EQ(after_end(u), 0);
  taken_after_the_late_work(&f, b, u);
  RAP_CHECK_OK(rap_release(f.a));
  RAP_CHECK_OK(rap_allocator_check(f.a));
  RAP_CHECK_EQ(after_end(f.q2), 0);
  RAP_CHECK_EQ(after_end(u), 0);
  RAP_CHECK_OK(rap_resource_destroy(f.q2));   /* waits for newest events, not for the queues */
  RAP_CHECK_OK(rap_resource_destroy(u));
  void *p = on(&f, 1024, f.q1);
  RAP_CHECK_OK(rap_deallocate(f.a, p, f.q1));
  f.q2 = NULL;
  pf_teardown(&f);
}

/* A planned block of q (call-scoped), also used on u, freed on q while q's work on it is held by
 * the gate, then q's stream ended: the free fenced q's batch then, so that nothing later (q1
 * taking the place, release, check, q's destroy, the manager's end) uses q's queue, and q1's
 * work on the place waits for q's. */
RAP_TEST(CallScoped, PlannedBlockFreedOnItsQueueThenTheQueueEnded) {
  pf f;
  rap_resource *u;
  char *b = scoped_owner_setup(&f, &u);
  RAP_CHECK_OK(rap_record_resource(f.a, b, u));
  fill late = {b, 1024, 0xAA};
  RAP_CHECK_OK(rap_resource_submit(f.q2, gate_job, &f.g));   /* q's work using b */
  RAP_CHECK_OK(rap_resource_submit(f.q2, fill_job, &late));
  RAP_CHECK_OK(rap_deallocate(f.a, b, f.q2));
  RAP_CHECK_OK(rap_host_async_end(f.q2));
  RAP_CHECK_OK(rap_host_async_end(u));
  RAP_CHECK_OK(rap_release(f.a));
  RAP_CHECK_OK(rap_allocator_check(f.a));
  RAP_CHECK_EQ(after_end(f.q2), 0);
  RAP_CHECK_EQ(after_end(u), 0);
  taken_after_the_late_work(&f, b, f.q2);
  RAP_CHECK_OK(rap_release(f.a));
  RAP_CHECK_OK(rap_allocator_check(f.a));
  RAP_CHECK_EQ(after_end(f.q2), 0);
  RAP_CHECK_EQ(after_end(u), 0);
  RAP_CHECK_OK(rap_resource_destroy(f.q2));
  RAP_CHECK_OK(rap_resource_destroy(u));
  void *p = on(&f, 1024, f.q1);
  RAP_CHECK_OK(rap_deallocate(f.a, p, f.q1));
  f.q2 = NULL;
  pf_teardown(&f);
}
