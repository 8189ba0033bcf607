/* trace_plans.c — a plan for a recorded trace's replay (the Planned rows of f..f6): rap-trace's
 * planner (tools/trace_plan.c) run on the trace's first share of its allocations, as a training
 * run's first iterations would make it, written to a temporary file that the Planned strategy
 * reads. Apart from bench/trace.c, whose own trace type has the planner's name.
 */
#include "bench.h"
#include "trace_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The trace as text in a temporary file (bench/traces/ keeps them compressed); path_out gets it. */
static int plain_copy(const char *path, char *path_out, size_t cap, char *why, size_t whylen) {
  snprintf(path_out, cap, "%s/rap-bench-trace.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  int fd = mkstemp(path_out);
  if (fd < 0) return snprintf(why, whylen, "cannot make a temporary file for the trace"), -1;
  close(fd);
  size_t n = strlen(path);
  char cmd[2300];
  if (n > 3 && strcmp(path + n - 3, ".gz") == 0)
    snprintf(cmd, sizeof cmd, "gzip -dc '%s' > '%s' 2>/dev/null", path, path_out);
  else
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, path_out);
  if (system(cmd) != 0) {
    unlink(path_out);
    return snprintf(why, whylen, "cannot read %s", path), -1;
  }
  return 0;
}

int bench_make_plan(const char *path, double share, char *plan_path, size_t cap, char *why,
                    size_t whylen) {
  char text[1024];
  if (plain_copy(path, text, sizeof text, why, whylen) != 0) return -1;
  trace t;
  char err[512];
  int rc = trace_load(text, &t, err, sizeof err);
  unlink(text);
  if (rc != 0) return snprintf(why, whylen, "%s", err), -1;
  /* The allocator with the most calls of its own (the recorders write one), and the event after
   * which share of its allocations are in. */
  size_t *calls = calloc(t.nnames ? t.nnames : 1, sizeof *calls);
  if (calls == NULL) {
    trace_free(&t);
    return snprintf(why, whylen, "out of host memory"), -1;
  }
  int a = -1;
  for (size_t i = 0; i < t.n; i++)
    if (t.ev[i].kind == TE_ALLOC && t.ev[i].d == 0 && ++calls[t.ev[i].a] > (a < 0 ? 0 : calls[a]))
      a = t.ev[i].a;
  size_t want = a < 0 ? 0 : (size_t)((double)calls[a] * share), seen = 0;
  free(calls);
  for (size_t i = 0; a >= 0 && i < t.n; i++)
    if (t.ev[i].kind == TE_ALLOC && t.ev[i].d == 0 && t.ev[i].a == a && ++seen > want) {
      t.n = i;   /* the prefix: what a run had done when its plan was made */
      break;
    }
  plan_domain d;
  memset(&d, 0, sizeof d);
  plan_opts o = {256, 0, 0};
  rc = a < 0 ? -1 : plan_build(&t, a, &o, &d, err, sizeof err);
  trace_free(&t);
  if (rc != 0) return snprintf(why, whylen, "%s", a < 0 ? "the trace has no allocation" : err), -1;
  snprintf(plan_path, cap, "%s/rap-bench-plan.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  int fd = mkstemp(plan_path);
  FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
  if (f == NULL) {
    if (fd >= 0) close(fd), unlink(plan_path);
    plan_domain_free(&d);
    return snprintf(why, whylen, "cannot make a temporary file for the plan"), -1;
  }
  int wr = plan_write(f, &d, 1);
  plan_domain_free(&d);
  if (fclose(f) != 0 || wr != 0) {
    unlink(plan_path);
    return snprintf(why, whylen, "writing the plan failed"), -1;
  }
  return 0;
}
