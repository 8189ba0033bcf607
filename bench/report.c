/* report.c — rap-bench's results and what it writes of them: the rows (one figure each: median,
 * minimum and maximum of its repetitions), the notes on what was skipped, a table per workload on
 * stdout, FILE.json and FILE.csv (read by bench/plot.py and bench/report.py), and the targets
 * rap-bench checks, read off the rows this run measured.
 */
#include "bench.h"

#include <math.h>
#include <rap/rap.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

/* ---- results ---------------------------------------------------------------------------------- */

typedef struct row {
  char wl[12], cas[40], peer[64], metric[20];
  double med, lo, hi;
  int n, ref;
} row;

typedef struct note {
  char what[96], text[240];
  int met;   /* targets: 1 met, 0 missed, -1 not measured */
} note;

static row *rows;
static size_t nrows, caprows;
static note skips[64], targets[32];
static size_t nskips, ntargets;

/* Grows by doubling; a full run makes a few hundred rows. */
void add_row(const char *wl, const char *cas, const char *peer, const char *metric,
             const double *v, int n, int ref) {
  if (n <= 0) return;
  if (nrows == caprows) {
    caprows = caprows ? caprows * 2 : 256;
    rows = realloc(rows, caprows * sizeof *rows);
    if (rows == NULL) abort();
  }
  row *r = &rows[nrows++];
  memset(r, 0, sizeof *r);
  snprintf(r->wl, sizeof r->wl, "%s", wl);
  snprintf(r->cas, sizeof r->cas, "%s", cas);
  snprintf(r->peer, sizeof r->peer, "%s", peer);
  snprintf(r->metric, sizeof r->metric, "%s", metric);
  sample_stats(v, n, &r->med, &r->lo, &r->hi);
  r->n = n;
  r->ref = ref;
}

void add_one(const char *wl, const char *cas, const char *peer, const char *metric, double v,
             int ref) {
  add_row(wl, cas, peer, metric, &v, 1, ref);
}

/* A linear scan of the rows (a few hundred in a full run); ratio_of does one per row written. */
static const row *find_row(const char *wl, const char *cas, const char *peer, const char *metric) {
  for (size_t i = 0; i < nrows; i++)
    if (!strcmp(rows[i].wl, wl) && !strcmp(rows[i].cas, cas) && !strcmp(rows[i].metric, metric) &&
        (peer ? !strcmp(rows[i].peer, peer) : rows[i].ref))
      return &rows[i];
  return NULL;
}

static double ratio_of(const row *r) {
  const row *ref = find_row(r->wl, r->cas, NULL, r->metric);
  return ref && ref->med != 0 ? r->med / ref->med : NAN;
}

static void add_note(note *list, size_t *n, size_t cap, int met, const char *what, const char *fmt,
                     va_list ap) {
  if (*n == cap) return;
  note *x = &list[(*n)++];
  snprintf(x->what, sizeof x->what, "%s", what);
  vsnprintf(x->text, sizeof x->text, fmt, ap);
  x->met = met;
}

void add_skip(const char *what, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add_note(skips, &nskips, 64, -1, what, fmt, ap);
  va_end(ap);
}

__attribute__((format(printf, 3, 4)))
static void add_target(int met, const char *what, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add_note(targets, &ntargets, 32, met, what, fmt, ap);
  va_end(ap);
}

#define TARGET(met, what, ...) add_target(met, what, __VA_ARGS__)

void report_fini(void) {
  free(rows);
  rows = NULL;
  nrows = caprows = 0;
}

/* ---- the table, the files, the targets -------------------------------------------------------- */

static const char *wl_title(const char *wl) {
  if (!strcmp(wl, "a")) return "(a) allocate+free pair, same size, same stream, device memory";
  if (!strcmp(wl, "b")) return "(b) random trace on 4 streams, 256 B..4 MiB, <= 1000 live, device memory";
  if (!strcmp(wl, "b-host")) return "(b-host) the same trace over host memory (4 host_async queues)";
  if (!strcmp(wl, "c")) return "(c) pair cost with N live blocks (256 B..4 KiB), device memory";
  if (!strcmp(wl, "c-host")) return "(c-host) pair cost with N live blocks, host memory";
  if (!strcmp(wl, "d")) return "(d) CPU running ahead of 4 busy streams (1 ms kernels, 64 MiB temporaries)";
  if (!strcmp(wl, "e")) return "(e) threads on thread-safe allocators, device memory, 256 B..64 KiB";
  if (!strcmp(wl, "e-host")) return "(e-host) threads on thread-safe allocators, host memory, 64 B..64 KiB";
  if (!strcmp(wl, "e-x"))
    return "(e-x) threads in a ring, each freeing the blocks of the one before it, device memory, 256 B..64 KiB";
  if (!strcmp(wl, "e-x-host"))
    return "(e-x-host) threads in a ring, each freeing the blocks of the one before it, host memory, 64 B..64 KiB";
  if (!strcmp(wl, "h")) return "(h) host: pairs of one size, host memory";
  if (!strcmp(wl, "v"))
    return "(v) CUDA virtual memory: each call per 2 MiB / 64 MiB (median = p50, us), and 1 GiB of misses";
  return wl;
}

void print_workload(FILE *f, const char *wl) {
  const row *ref = NULL;
  int any = 0;
  for (size_t j = 0; j < nrows; j++)
    if (!strcmp(rows[j].wl, wl)) {
      any = 1;
      if (rows[j].ref && !ref) ref = &rows[j];
    }
  if (!any) return;
  fprintf(f, "\n%s\n  ratio = median / median of %s\n", wl_title(wl), ref ? ref->peer : "-");
  fprintf(f, "  %-18s %-34s %-14s %12s %12s %12s %7s\n", "case", "allocator", "metric", "median", "min",
          "max", "ratio");
  for (size_t i = 0; i < nrows; i++) {
    const row *r = &rows[i];
    if (strcmp(r->wl, wl) != 0) continue;
    double q = ratio_of(r);
    char qs[16];
    if (isnan(q)) snprintf(qs, sizeof qs, "-");
    else snprintf(qs, sizeof qs, "%.2f", q);
    const char *fmt = r->med < 10 ? "  %-18s %-34s %-14s %12.3f %12.3f %12.3f %7s\n"
                                  : "  %-18s %-34s %-14s %12.1f %12.1f %12.1f %7s\n";
    fprintf(f, fmt, r->cas, r->peer, r->metric, r->med, r->lo, r->hi, qs);
  }
  fflush(f);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static void json_num(FILE *f, double v) {
  if (isnan(v) || isinf(v)) fputs("null", f);
  else fprintf(f, "%.6g", v);
}

static void machine_text(char *cpu, size_t cap) {
  snprintf(cpu, cap, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *c = strchr(line, ':');
      if (c) {
        c += 2;
        c[strcspn(c, "\n")] = 0;
        snprintf(cpu, cap, "%s", c);
      }
      break;
    }
  }
  fclose(f);
}

int write_outputs(const char *out, const char *started) {
  char base[512];
  snprintf(base, sizeof base, "%s", out);
  char *dot = strrchr(base, '.');
  if (dot && (!strcmp(dot, ".json") || !strcmp(dot, ".csv"))) *dot = 0;
  char path[600];
  snprintf(path, sizeof path, "%s.json", base);
  FILE *f = fopen(path, "w");
  if (f == NULL) return perror(path), -1;
  char cpu[160];
  machine_text(cpu, sizeof cpu);
  struct utsname u;
  uname(&u);
  fprintf(f, "{\n  \"tool\": \"rap-bench\",\n  \"rap_version\": \"%d.%d.%d\",\n  \"date\": ",
          RAP_VERSION_MAJOR, RAP_VERSION_MINOR, RAP_VERSION_PATCH);
  json_str(f, started);
  fprintf(f, ",\n  \"host\": {\"cpu\": ");
  json_str(f, cpu);
  fprintf(f, ", \"cores\": %ld, \"kernel\": ", sysconf(_SC_NPROCESSORS_ONLN));
  json_str(f, u.release);
  fprintf(f, "},\n  \"gpu\": ");
  if (run_env.have_gpu) {
    fprintf(f, "{\"name\": ");
    json_str(f, run_env.gpu_name);
    fprintf(f, ", \"driver_api\": %d, \"runtime\": %d}", run_env.driver_version,
            run_env.runtime_version);
  } else {
    fprintf(f, "null");
  }
  fprintf(f, ",\n  \"options\": {\"quick\": %d, \"reps\": %d, \"rep_ms\": %g, \"torch_peer\": %d, \"threads\": [",
          opt.quick, opt.reps, opt.rep_ms, bench_torch_factory != NULL);
  for (int i = 0; i < opt.nthreads; i++) fprintf(f, "%s%d", i ? ", " : "", opt.threads[i]);
  fprintf(f, "], \"mimalloc\": ");
  if (have_mimalloc) json_str(f, mimalloc_note);
  else fputs("null", f);
  fprintf(f, "},\n");
  fprintf(f, "  \"rows\": [\n");
  for (size_t i = 0; i < nrows; i++) {
    const row *r = &rows[i];
    fprintf(f, "    {\"workload\": ");
    json_str(f, r->wl);
    fprintf(f, ", \"case\": ");
    json_str(f, r->cas);
    fprintf(f, ", \"allocator\": ");
    json_str(f, r->peer);
    fprintf(f, ", \"metric\": ");
    json_str(f, r->metric);
    fprintf(f, ", \"median\": ");
    json_num(f, r->med);
    fprintf(f, ", \"min\": ");
    json_num(f, r->lo);
    fprintf(f, ", \"max\": ");
    json_num(f, r->hi);
    fprintf(f, ", \"reps\": %d, \"ref\": %s, \"ratio\": ", r->n, r->ref ? "true" : "false");
    json_num(f, ratio_of(r));
    fprintf(f, "}%s\n", i + 1 < nrows ? "," : "");
  }
  fprintf(f, "  ],\n  \"skipped\": [\n");
  for (size_t i = 0; i < nskips; i++) {
    fprintf(f, "    {\"what\": ");
    json_str(f, skips[i].what);
    fprintf(f, ", \"why\": ");
    json_str(f, skips[i].text);
    fprintf(f, "}%s\n", i + 1 < nskips ? "," : "");
  }
  fprintf(f, "  ],\n  \"targets\": [\n");
  for (size_t i = 0; i < ntargets; i++) {
    fprintf(f, "    {\"target\": ");
    json_str(f, targets[i].what);
    fprintf(f, ", \"measured\": ");
    json_str(f, targets[i].text);
    fprintf(f, ", \"met\": %s}%s\n", targets[i].met < 0 ? "null" : targets[i].met ? "true" : "false",
            i + 1 < ntargets ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  if (fclose(f) != 0) return perror(path), -1;
  snprintf(path, sizeof path, "%s.csv", base);
  f = fopen(path, "w");
  if (f == NULL) return perror(path), -1;
  fprintf(f, "workload,case,allocator,metric,median,min,max,reps,ratio\n");
  for (size_t i = 0; i < nrows; i++) {
    const row *r = &rows[i];
    fprintf(f, "%s,\"%s\",\"%s\",%s,%.6g,%.6g,%.6g,%d,", r->wl, r->cas, r->peer, r->metric, r->med,
            r->lo, r->hi, r->n);
    double q = ratio_of(r);
    if (!isnan(q)) fprintf(f, "%.4g", q);
    fputc('\n', f);
  }
  if (fclose(f) != 0) return perror(path), -1;
  return 0;
}

/* The targets rap-bench checks, read off the rows that this run measured. */
/* (s): sleep and wake against the plain copy of the same bytes, the first sleep against later
 * ones, what the device got back, discard mode's times; per size measured. */
static void sleep_targets(void) {
  static const char *sizes[] = {"1 GiB", "8 GiB", "32 GiB"};
  int any = 0;
  for (int i = 0; i < 3; i++) {
    char c[40], what[96];
    const char *gb = sizes[i];
#define ROW(fmt, peer, metric) (snprintf(c, sizeof c, fmt, gb), find_row("s", c, peer, metric))
    const row *sl = ROW("sleep %s", "rap", "GiB/s"), *wk = ROW("wake %s", "rap", "GiB/s");
    const row *d2h = ROW("copy d2h %s", "cudaMemcpyAsync", "GiB/s");
    const row *h2d = ROW("copy h2d %s", "cudaMemcpyAsync", "GiB/s");
    const row *first = ROW("sleep first %s", "rap", "GiB/s");
    const row *prepared = ROW("sleep first prepared %s", "rap", "GiB/s");
    const row *back = ROW("returned %s", "rap", "% of pool");
    const row *ds = ROW("sleep discard %s", "rap", "ms"), *dw = ROW("wake discard %s", "rap", "ms");
#undef ROW
    if (!sl) continue;
    any = 1;
    snprintf(what, sizeof what, "(s) %s: sleep >= 80%% of the copy to the host", gb);
    if (d2h) TARGET(sl->med >= 0.8 * d2h->med, what, "%.1f vs %.1f GiB/s", sl->med, d2h->med);
    snprintf(what, sizeof what, "(s) %s: wake >= 80%% of the copy to the device", gb);
    if (wk && h2d) TARGET(wk->med >= 0.8 * h2d->med, what, "%.1f vs %.1f GiB/s", wk->med, h2d->med);
    snprintf(what, sizeof what, "(s) %s: the first sleep, unprepared, >= 80%% of the copy to the host", gb);
    if (first && d2h)
      TARGET(first->med >= 0.8 * d2h->med, what, "%.1f vs %.1f GiB/s", first->med, d2h->med);
    snprintf(what, sizeof what, "(s) %s: the first sleep <= 1.1x a later one", gb);
    if (first) TARGET(sl->med <= 1.1 * first->med, what, "%.1f GiB/s first, %.1f later", first->med, sl->med);
    snprintf(what, sizeof what, "(s) %s: after RAP_SLEEP_PREPARE, the first sleep <= 1.1x a later one", gb);
    if (prepared)
      TARGET(sl->med <= 1.1 * prepared->med, what, "%.1f GiB/s first, %.1f later", prepared->med, sl->med);
    snprintf(what, sizeof what, "(s) %s: >= 99%% of the pool's memory returned", gb);
    if (back) TARGET(back->med >= 99, what, "%.1f %%", back->med);
    if (ds && dw && !strcmp(gb, "32 GiB"))
      TARGET(ds->med <= 50 && dw->med <= 50, "(s) 32 GiB: discard sleep and wake <= 50 ms each",
             "%.1f ms, %.1f ms", ds->med, dw->med);
  }
  if (!any) TARGET(-1, "(s) sleep and wake at the copy's speed", "not measured");
}

void check_targets(void) {
  sleep_targets();
  char buf[240];
  const char *rap = "rap ResourceAwarePool", *qp = "rap QuickPool";
  static const char *pair_cases[] = {"256 B", "64 KiB", "1 MiB", "64 MiB"};
  for (int w = 0; w < 2; w++) {
    const char *who = w ? qp : rap;
    double limit = w ? 60 : 100, worst = 0;
    int n = 0;
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < 4; i++) {
      const row *r = find_row("a", pair_cases[i], who, "ns/pair");
      if (!r) continue;
      n++;
      if (r->med > worst) worst = r->med;
      len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s %.0f ns", len ? ", " : "",
                              pair_cases[i], r->med);
    }
    char what[96];
    snprintf(what, sizeof what, "(a) %s pair on DEVICE <= %.0f ns", w ? "QuickPool" : "ResourceAwarePool", limit);
    if (n) TARGET(worst <= limit, what, "%s", buf);
    else TARGET(-1, what, "not measured (no GPU)");
  }
  const row *r = find_row("b", "200000 ops", rap, "ns/pair");
  const row *h = find_row("b", "200000 ops", rap, "held/live");
  if (r) TARGET(r->med <= 250, "(b) 4-stream trace, ResourceAwarePool <= 250 ns/pair", "%.0f ns/pair", r->med);
  else TARGET(-1, "(b) 4-stream trace, ResourceAwarePool <= 250 ns/pair", "not measured (no GPU, or a quick run)");
  if (h) TARGET(h->med <= 1.15, "(b) peak held / peak live <= 1.15 (ResourceAwarePool)", "%.3f", h->med);
  else TARGET(-1, "(b) peak held / peak live <= 1.15 (ResourceAwarePool)", "not measured");
  for (int w = 0; w < 2; w++) {
    const char *who = w ? qp : rap;
    const row *lo = find_row("c", "100 live", who, "ns/pair");
    const row *hi = find_row("c", "1000000 live", who, "ns/pair");
    char what[96];
    snprintf(what, sizeof what, "(c) %s: pair at 10^6 live <= 1.5x pair at 10^2", w ? "QuickPool" : "ResourceAwarePool");
    if (lo && hi)
      TARGET(hi->med <= 1.5 * lo->med, what, "%.0f ns / %.0f ns = %.2fx", hi->med, lo->med, hi->med / lo->med);
    else TARGET(-1, what, "not measured");
  }
  const char *d1 = "d1 400 x 64 MiB", *d2 = "d2 400 x 64 MiB";
  const row *async1 = find_row("d", d1, "cudaMallocAsync (new pool)", "peak held MiB");
  for (int w = 0; w < 2; w++) {
    const char *who = w ? "rap ResourceAwarePool grow" : "rap ResourceAwarePool wait";
    const row *m = find_row("d", d1, who, "peak held MiB");
    char what[96];
    snprintf(what, sizeof what, "(d1) %s holds no more than cudaMallocAsync", who + 4);
    if (m && async1)
      TARGET(m->med <= async1->med, what, "%.0f MiB vs %.0f MiB", m->med, async1->med);
    else TARGET(-1, what, "not measured");
  }
  const row *w2 = find_row("d", d2, "rap ResourceAwarePool wait", "peak held MiB");
  const row *t2 = find_row("d", d2, "rap ResourceAwarePool wait", "wall ms");
  /* (d1)'s wall time is the stream-ordered baseline, cudaMallocAsync's: rap's own (d1) with wait
   * could be as slow as its (d2) and would hide a serialization. */
  const row *t1 = find_row("d", d1, "cudaMallocAsync (new pool)", "wall ms");
  const row *w1 = find_row("d", d1, "rap ResourceAwarePool wait", "wall ms");
  if (w2) TARGET(w2->med <= 1024, "(d2) ResourceAwarePool wait holds <= 1 GiB", "%.0f MiB", w2->med);
  else TARGET(-1, "(d2) ResourceAwarePool wait holds <= 1 GiB", "not measured");
  if (t1 && t2)
    TARGET(t2->med <= 1.2 * t1->med, "(d2) wait: wall time within 1.2x of (d1)",
           "%.1f ms vs %.1f ms (d1, cudaMallocAsync) = %.2fx; rap wait's own (d1): %.1f ms", t2->med,
           t1->med, t2->med / t1->med, w1 ? w1->med : NAN);
  else TARGET(-1, "(d2) wait: wall time within 1.2x of (d1)", "not measured");
  static const char *host_cases[] = {"64 B", "256 B", "1 KiB", "4 KiB", "16 KiB", "64 KiB", "mixed 64 B..64 KiB"};
  double worst = 0;
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < 7; i++) {
    const row *q = find_row("h", host_cases[i], "rap QuickPool alignment=16", "ns/pair");
    const row *m = find_row("h", host_cases[i], "malloc (glibc)", "ns/pair");
    if (!q || !m) continue;
    double x = q->med / m->med;
    if (x > worst) worst = x;
    len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s %.2fx", len ? ", " : "", host_cases[i], x);
  }
  if (len) TARGET(worst <= 1.5, "(h) QuickPool(HOST, alignment=16) within 1.5x of malloc", "%s", buf);
  else TARGET(-1, "(h) QuickPool(HOST, alignment=16) within 1.5x of malloc", "not measured");
}

void print_summary(FILE *f) {
  if (nskips) {
    fprintf(f, "\nskipped:\n");
    for (size_t i = 0; i < nskips; i++) fprintf(f, "  %s: %s\n", skips[i].what, skips[i].text);
  }
  fprintf(f, "\ntargets:\n");
  for (size_t i = 0; i < ntargets; i++)
    fprintf(f, "  [%s] %s: %s\n", targets[i].met < 0 ? "n/a " : targets[i].met ? "met " : "MISS",
            targets[i].what, targets[i].text);
  fflush(f);
}
