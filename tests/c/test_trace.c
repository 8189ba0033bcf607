/* test_trace.c — the event trace and rap-trace, from the outside.
 *
 * Every kind of event appears, with the fields docs/trace.md promises, when a ResourceAwarePool
 * over a SizeLimiter is driven through a pending block on a gated queue, its reuse, a fence, the
 * block coming back, a cross-resource wait, growth, a release, a refused free and an out of memory;
 * start and stop answer bad input with a sentence and stop writing; a trace replayed through the
 * spec that made it gives the same peak held and peak live (the round trip), and rap-trace's plot
 * writes an SVG and an HTML page naming every series.
 */
#define _POSIX_C_SOURCE 200809L   /* popen, getpid */

#include "gate.h"
#include "test_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef RAP_TRACE_TOOL
#error "RAP_TRACE_TOOL: the path of rap-trace, from tests/CMakeLists.txt"
#endif

static void temp_path(char *buf, size_t cap, const char *what) {
  const char *dir = getenv("TMPDIR");
  snprintf(buf, cap, "%s/rap-test-%ld-%s", dir && *dir ? dir : "/tmp", (long)getpid(), what);
}

/* The whole file; NULL if it cannot be read. */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf != NULL) buf[fread(buf, 1, (size_t)n, f)] = '\0';
  fclose(f);
  return buf;
}

/* The first line of text holding every one of the fragments (NULL-terminated), copied into line. */
static bool find_line(const char *text, char *line, size_t cap, ...) {
  for (const char *s = text; s != NULL && *s != '\0';) {
    const char *end = strchr(s, '\n');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    snprintf(line, cap, "%.*s", (int)len, s);
    va_list ap;
    va_start(ap, cap);
    bool all = true;
    for (const char *frag; all && (frag = va_arg(ap, const char *)) != NULL;) all = strstr(line, frag) != NULL;
    va_end(ap);
    if (all) return true;
    s = end ? end + 1 : NULL;
  }
  line[0] = '\0';
  return false;
}

#define HAS_LINE(text, ...)                                                                        \
  do {                                                                                             \
    char line_[768];                                                                               \
    if (!find_line(text, line_, sizeof line_, __VA_ARGS__, (const char *)NULL))                    \
      rap_test_fail(__FILE__, __LINE__, "no trace line holds every one of: %s", #__VA_ARGS__);     \
  } while (0)

/* A closed trace file, read back: NULL (and a failed check) unless it is one header and whole
 * lines with no NUL byte. The caller frees it. */
static char *read_whole_lines(const char *path, size_t *lines) {
  FILE *f = fopen(path, "rb");
  RAP_CHECK(f != NULL);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)n + 1);
  RAP_CHECK(text != NULL);
  size_t len = fread(text, 1, (size_t)n, f);
  fclose(f);
  text[len] = '\0';
  if (strlen(text) != len) rap_test_fail(__FILE__, __LINE__, "%s holds a NUL byte at %zu of %zu", path, strlen(text), len);
  if (strncmp(text, "{\"t\":0,\"ev\":\"trace\",", 20) != 0) rap_test_fail(__FILE__, __LINE__, "%s does not begin with its header", path);
  *lines = 0;
  for (const char *l = text; *l != '\0'; (*lines)++) {
    const char *end = strchr(l, '\n');
    if (end == NULL || strncmp(l, "{\"t\":", 5) != 0 || end[-1] != '}' || memchr(l + 1, '{', (size_t)(end - l - 1)) != NULL)
      rap_test_fail(__FILE__, __LINE__, "%s holds a line that is not whole: %.*s", path, (int)(end ? end - l : 80), l);
    if (l != text && strncmp(l, "{\"t\":0,\"ev\":\"trace\"", 19) == 0)
      rap_test_fail(__FILE__, __LINE__, "%s holds a second header", path);
    l = end + 1;
  }
  return text;
}

RAP_TEST(Trace, WritesEveryKindOfEvent) {
  char path[256];
  temp_path(path, sizeof path, "events.jsonl");
  rap_manager *rm = tu_manager();
  rap_allocator *pool, *waiter;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "traced", "ResourceAwarePool(SizeLimiter(HOST, limit=1MiB), "
                                       "initial_size=64KiB, next_size=64KiB)", &pool));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "waits", "ResourceAwarePool(HOST, initial_size=64KiB, "
                                       "next_size=64KiB, cross_resource=wait, wait_above=0)", &waiter));
  rap_resource *host, *q, *q2;
  RAP_CHECK_OK(rap_resource_host(rm, &host));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q2));
  gate g;
  gate_init(&g);
  RAP_CHECK_OK(rap_trace_start(path));

  RAP_CHECK_OK(rap_resource_submit(q, gate_job, &g));   /* q is busy until the gate opens */
  void *a = NULL, *b = NULL, *c = NULL, *big = NULL, *w = NULL, *w2 = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &a, 40000, q));
  RAP_CHECK_OK(rap_deallocate(pool, a, q));                 /* pending on q */
  RAP_CHECK_OK(rap_allocate(pool, &b, 40000, q));           /* q takes it back: reuse */
  RAP_CHECK(b == a);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));              /* pending again */
  RAP_CHECK_OK(rap_allocate(pool, &c, 40000, host));        /* another resource: the pool grows */
  RAP_CHECK(c != b);
  RAP_CHECK_OK(rap_release(pool));                          /* fences q's batch */
  gate_open(&g);
  RAP_CHECK_OK(rap_resource_synchronize(q));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_OK(rap_release(pool));                          /* b comes back (ready); chunks go */
  int dummy;
  RAP_CHECK_STATUS(rap_deallocate(pool, &dummy, NULL), RAP_ERR_UNKNOWN_POINTER);   /* refused */
  RAP_CHECK_STATUS(rap_allocate(pool, &big, 4 << 20, q), RAP_ERR_NOMEM);          /* oom */
  /* A cross-resource wait: q2 takes what q freed, behind a wait. */
  gate g2;
  gate_init(&g2);
  RAP_CHECK_OK(rap_resource_submit(q, gate_job, &g2));
  RAP_CHECK_OK(rap_allocate(waiter, &w, 60000, q));
  RAP_CHECK_OK(rap_deallocate(waiter, w, q));
  RAP_CHECK_OK(rap_allocate(waiter, &w2, 60000, q2));
  RAP_CHECK(w2 == w);
  gate_open(&g2);
  RAP_CHECK_OK(rap_deallocate(waiter, w2, q2));
  RAP_CHECK_OK(rap_trace_stop());

  char *text = slurp(path);
  RAP_CHECK(text != NULL);
  char qid[32], q2id[32], ap[32], bytes[32];
  /* Resource ids: q and q2 are the first two created resources of this manager, #1 and #2. */
  snprintf(qid, sizeof qid, "\"r\":1,\"rk\":\"host_async\"");
  snprintf(q2id, sizeof q2id, "\"r\":2,\"rk\":\"host_async\"");
  snprintf(ap, sizeof ap, "\"p\":\"%p\"", a);
  snprintf(bytes, sizeof bytes, "\"n\":%d", 40000);
  RAP_CHECK(strncmp(text, "{\"t\":0,\"ev\":\"trace\",\"version\":\"", 31) == 0);
  HAS_LINE(text, "\"ev\":\"alloc\"", "\"a\":\"traced\"", "\"d\":0", qid, ap, bytes);
  HAS_LINE(text, "\"ev\":\"dealloc\"", "\"a\":\"traced\"", "\"d\":0", qid, ap);
  HAS_LINE(text, "\"ev\":\"dealloc\"", "\"a\":\"traced\"", "\"d\":0", "\"r\":null", ap);
  HAS_LINE(text, "\"ev\":\"pending\"", "\"a\":\"traced\"", qid, ap, "\"pb\":");
  HAS_LINE(text, "\"ev\":\"reuse\"", "\"a\":\"traced\"", qid, ap, "\"pb\":");
  HAS_LINE(text, "\"ev\":\"fence\"", "\"a\":\"traced\"", qid, "\"batch\":");
  HAS_LINE(text, "\"ev\":\"ready\"", "\"a\":\"traced\"", qid, ap, "\"pb\":0");
  HAS_LINE(text, "\"ev\":\"grow\"", "\"a\":\"traced\"", "\"held\":");
  HAS_LINE(text, "\"ev\":\"release\"", "\"a\":\"traced\"", "\"held\":");
  HAS_LINE(text, "\"ev\":\"alloc\"", "\"a\":\"traced/SizeLimiter\"", "\"d\":1");   /* the pool asking */
  HAS_LINE(text, "\"ev\":\"refused\"", "\"a\":\"traced\"", "\"status\":\"RAP_ERR_UNKNOWN_POINTER\"");
  HAS_LINE(text, "\"ev\":\"oom\"", "\"a\":\"traced\"", qid, "\"n\":4194304");
  HAS_LINE(text, "\"ev\":\"wait\"", "\"a\":\"waits\"", q2id, "\"on\":1");
  /* Every line is one object, with a time. */
  size_t lines = 0;
  for (const char *l = text; *l; l = strchr(l, '\n') + 1, lines++) {
    RAP_CHECK(l[0] == '{' && strncmp(l, "{\"t\":", 5) == 0);
    const char *end = strchr(l, '\n');
    RAP_CHECK(end != NULL && end[-1] == '}');
  }
  RAP_CHECK(lines > 20);
  free(text);
  remove(path);
  RAP_CHECK_OK(rap_resource_destroy(q));   /* its worker is done with the gates after this */
  RAP_CHECK_OK(rap_resource_destroy(q2));
  gate_destroy(&g);
  gate_destroy(&g2);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Trace, StartAndStopAnswerWithSentences) {
  RAP_CHECK_OK(rap_trace_stop());   /* none open */
  RAP_CHECK_STATUS(rap_trace_start(NULL), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_trace_start("/nonexistent-dir/x.jsonl"), RAP_ERR_BACKEND);
  RAP_CHECK_STR(rap_last_error(), "cannot open '/nonexistent-dir/x.jsonl' for writing (No such file or "
                                  "directory)");
  char first[256], second[256];
  temp_path(first, sizeof first, "first.jsonl");
  temp_path(second, sizeof second, "second.jsonl");
  rap_manager *rm = tu_manager();
  rap_allocator *a = tu_make(rm, "qp", "QuickPool", "HOST", NULL);
  RAP_CHECK_OK(rap_trace_start(first));
  void *p = tu_alloc(a, 100);
  RAP_CHECK_OK(rap_trace_start(second));   /* the first is closed, the second takes over */
  RAP_CHECK_OK(rap_deallocate(a, p, NULL));
  RAP_CHECK_OK(rap_trace_flush());
  RAP_CHECK_OK(rap_trace_stop());
  RAP_CHECK_OK(rap_trace_start("/dev/null"));   /* not a regular file: nothing to truncate */
  p = tu_alloc(a, 100);
  RAP_CHECK_OK(rap_deallocate(a, p, NULL));
  RAP_CHECK_OK(rap_trace_stop());
  p = tu_alloc(a, 100);   /* not traced */
  RAP_CHECK_OK(rap_deallocate(a, p, NULL));
  char *one = slurp(first), *two = slurp(second);
  RAP_CHECK(one != NULL && two != NULL);
  RAP_CHECK(strstr(one, "\"ev\":\"alloc\",\"a\":\"qp\"") != NULL);
  RAP_CHECK(strstr(one, "\"ev\":\"dealloc\"") == NULL);
  RAP_CHECK(strstr(two, "\"ev\":\"dealloc\",\"a\":\"qp\"") != NULL);
  RAP_CHECK(strstr(two, "\"ev\":\"alloc\"") == NULL);
  free(one);
  free(two);
  remove(first);
  remove(second);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* rap_trace_start on the file already open begins it afresh: the earlier lines, flushed or still
 * buffered (more than a stdio buffer holds, so both), are not written after the truncation. */
RAP_TEST(Trace, StartOnTheOpenFileBeginsItAfresh) {
  char path[256], pp[48];
  temp_path(path, sizeof path, "restart.jsonl");
  rap_manager *rm = tu_manager();
  rap_allocator *a = tu_make(rm, "qp", "QuickPool", "HOST", NULL);
  RAP_CHECK_OK(rap_trace_start(path));
  for (int i = 0; i < 1000; i++) RAP_CHECK_OK(rap_deallocate(a, tu_alloc(a, 64), NULL));
  RAP_CHECK_OK(rap_trace_start(path));
  void *p = tu_alloc(a, 100);
  RAP_CHECK_OK(rap_deallocate(a, p, NULL));
  RAP_CHECK_OK(rap_trace_stop());
  snprintf(pp, sizeof pp, "\"p\":\"%p\"", p);
  size_t lines = 0;
  char *text = read_whole_lines(path, &lines);
  RAP_CHECK_EQ(lines, 3);   /* the header, the allocation, the deallocation */
  RAP_CHECK_STR(text, "\"ev\":\"alloc\",\"a\":\"qp\"");
  RAP_CHECK_STR(text, pp);
  free(text);
  remove(path);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A start refused (RAP_TRACE_MAX_ENTRIES that is no number, a file that cannot be opened) changes
 * nothing: the trace already open goes on, and the file it was given keeps what it held. */
RAP_TEST(Trace, ARefusedStartChangesNothing) {
  char open_one[256], other[256];
  temp_path(open_one, sizeof open_one, "kept-open.jsonl");
  temp_path(other, sizeof other, "not-truncated.txt");
  FILE *f = fopen(other, "w");
  RAP_CHECK(f != NULL);
  fputs("what the file held\n", f);
  RAP_CHECK(fclose(f) == 0);
  rap_manager *rm = tu_manager();
  rap_allocator *a = tu_make(rm, "qp", "QuickPool", "HOST", NULL);
  RAP_CHECK_OK(rap_trace_start(open_one));
  void *p = tu_alloc(a, 100);
  setenv("RAP_TRACE_MAX_ENTRIES", "lots", 1);
  int st = rap_trace_start(other);
  unsetenv("RAP_TRACE_MAX_ENTRIES");
  RAP_CHECK_STATUS(st, RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "nothing was changed");
  RAP_CHECK_STATUS(rap_trace_start("/nonexistent-dir/x.jsonl"), RAP_ERR_BACKEND);
  RAP_CHECK_OK(rap_deallocate(a, p, NULL));   /* still traced, into the first file */
  RAP_CHECK_OK(rap_trace_stop());
  char *one = slurp(open_one), *two = slurp(other);
  RAP_CHECK(one != NULL && two != NULL);
  RAP_CHECK(strstr(one, "\"ev\":\"alloc\",\"a\":\"qp\"") != NULL);
  RAP_CHECK(strstr(one, "\"ev\":\"dealloc\",\"a\":\"qp\"") != NULL);
  RAP_CHECK(strcmp(two, "what the file held\n") == 0);
  free(one);
  free(two);
  remove(open_one);
  remove(other);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* "%p" in the path is the process id, with "-rank<R>" where RANK is set; "%%" is "%". */
RAP_TEST(Trace, PercentPIsTheProcessAndItsRank) {
  char pattern[256], want[300];
  temp_path(pattern, sizeof pattern, "pid-%p-100%%.jsonl");   /* rap-test-<pid>-pid-%p-100%%.jsonl */
  const char *saved = getenv("RANK");
  char *keep = saved ? strdup(saved) : NULL;
  unsetenv("RANK");
  RAP_CHECK_OK(rap_trace_start(pattern));
  RAP_CHECK_OK(rap_trace_stop());
  temp_path(want, 256, "");
  snprintf(want + strlen(want), sizeof want - strlen(want), "pid-%ld-100%%.jsonl", (long)getpid());
  FILE *f = fopen(want, "r");
  RAP_CHECK(f != NULL);
  fclose(f);
  remove(want);
  setenv("RANK", "3", 1);
  RAP_CHECK_OK(rap_trace_start(pattern));
  RAP_CHECK_OK(rap_trace_stop());
  temp_path(want, 256, "");
  snprintf(want + strlen(want), sizeof want - strlen(want), "pid-%ld-rank3-100%%.jsonl", (long)getpid());
  f = fopen(want, "r");
  if (keep) setenv("RANK", keep, 1);
  else unsetenv("RANK");
  free(keep);
  RAP_CHECK(f != NULL);
  fclose(f);
  remove(want);
}

static int run_tool(const char *cmd, char *out, size_t cap);

/* A traced process that aborts leaves whole lines, every event before the abort among them: more
 * than the trace's buffer holds is written (some of it reached the file before), then abort(). */
RAP_TEST(Trace, AbortLeavesWholeLinesAndEveryEvent) {
  char path[256];
  temp_path(path, sizeof path, "abort.jsonl");
  enum { PAIRS = 3000 };   /* about 330 KB of lines */
  pid_t child = fork();
  RAP_CHECK(child >= 0);
  if (child == 0) {
    rap_manager *rm;
    rap_allocator *a;
    if (rap_manager_create(&rm) != RAP_OK ||
        rap_allocator_make(rm, "qp", "QuickPool", "HOST", NULL, &a) != RAP_OK || rap_trace_start(path) != RAP_OK)
      _exit(3);
    for (int i = 0; i < PAIRS; i++) {
      void *p;
      if (rap_allocate(a, &p, 64 + (size_t)i, NULL) != RAP_OK || rap_deallocate(a, p, NULL) != RAP_OK) _exit(4);
    }
    abort();
  }
  int status = 0;
  RAP_CHECK(waitpid(child, &status, 0) == child);
  RAP_CHECK(!(WIFEXITED(status) && (WEXITSTATUS(status) == 3 || WEXITSTATUS(status) == 4)));
  RAP_CHECK(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0));
  size_t lines = 0;
  char *text = read_whole_lines(path, &lines);
  size_t allocs = 0, deallocs = 0;
  for (const char *l = text; (l = strstr(l, "\"a\":\"qp\",\"d\":0")) != NULL; l++) {
    const char *start = l;
    while (start > text && start[-1] != '\n') start--;
    allocs += strncmp(strstr(start, "\"ev\":\""), "\"ev\":\"alloc\"", 12) == 0;
    deallocs += strncmp(strstr(start, "\"ev\":\""), "\"ev\":\"dealloc\"", 14) == 0;
  }
  free(text);
  RAP_CHECK_EQ(allocs, PAIRS);
  RAP_CHECK_EQ(deallocs, PAIRS);
  RAP_CHECK(lines >= 1 + 2 * PAIRS);   /* the header, the calls, the pool's growth */
  remove(path);
}

/* At teardown a pool's chunks go back as its release: a "release" line down to nothing held, and
 * the parent's deallocation one level below the user's calls, so a clean program's trace ends
 * with no user call on HOST. */
RAP_TEST(Trace, TeardownIsThePoolsRelease) {
  char path[256], cmd[600], out[4096];
  temp_path(path, sizeof path, "teardown.jsonl");
  RAP_CHECK_OK(rap_trace_start(path));
  rap_manager *rm = tu_manager();
  rap_allocator *a, *fixed;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "QuickPool(HOST, initial_size=64KiB)", &a));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "fixed", "FixedPool(HOST, object_size=64)", &fixed));
  void *p = tu_alloc(a, 1000);
  RAP_CHECK_OK(rap_deallocate(a, p, NULL));
  p = tu_alloc(fixed, 64);
  RAP_CHECK_OK(rap_deallocate(fixed, p, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));   /* the chunks are still held: they go back here */
  RAP_CHECK_OK(rap_trace_stop());
  char *text = slurp(path);
  RAP_CHECK(text != NULL);
  HAS_LINE(text, "\"ev\":\"release\"", "\"a\":\"pool\"", "\"held\":0");
  HAS_LINE(text, "\"ev\":\"dealloc\"", "\"a\":\"HOST\"", "\"d\":1");
  RAP_CHECK(strstr(text, "\"a\":\"HOST\",\"d\":0") == NULL);
  free(text);
  snprintf(cmd, sizeof cmd, "%s summary %s", RAP_TRACE_TOOL, path);
  RAP_CHECK_EQ(run_tool(cmd, out, sizeof out), 0);
  RAP_CHECK_STR(out, "'HOST': 0 user calls");
  RAP_CHECK_STR(out, "'pool': 2 user calls");
  remove(path);
}

/* RAP_TRACE_MAX_ENTRIES=N: the file holds the header and the last N lines, rewritten at a flush, at
 * out of memory and at the stop, never more; a bad value is refused with a sentence. */
RAP_TEST(Trace, RingOfTheLastEntries) {
  char path[256], last[64];
  temp_path(path, sizeof path, "ring.jsonl");
  rap_manager *rm = tu_manager();
  rap_allocator *a, *lim;
  RAP_CHECK_OK(rap_allocator_make(rm, "qp", "QuickPool", "HOST", "initial_size=1MiB", &a));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "lim", "SizeLimiter(HOST, limit=1KiB)", &lim));
  setenv("RAP_TRACE_MAX_ENTRIES", "lots", 1);
  RAP_CHECK_STATUS(rap_trace_start(path), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "RAP_TRACE_MAX_ENTRIES is a number of lines from 1 to 100000000, not 'lots'");
  setenv("RAP_TRACE_MAX_ENTRIES", "100", 1);
  int st = rap_trace_start(path);
  unsetenv("RAP_TRACE_MAX_ENTRIES");
  RAP_CHECK_OK(st);
  void *p = NULL;
  for (int i = 0; i < 5000; i++) {
    p = tu_alloc(a, 64 + (size_t)i);
    RAP_CHECK_OK(rap_deallocate(a, p, NULL));
  }
  size_t lines = 0;
  char *text = read_whole_lines(path, &lines);   /* nothing written yet but the header */
  free(text);
  RAP_CHECK_EQ(lines, 0 + 1);
  RAP_CHECK_OK(rap_trace_flush());
  text = read_whole_lines(path, &lines);
  RAP_CHECK_EQ(lines, 1 + 100);
  snprintf(last, sizeof last, "\"ev\":\"dealloc\",\"a\":\"qp\",\"d\":0,\"r\":null,\"p\":\"%p\"", p);
  const char *tail = strrchr(text, '{');   /* the last line */
  RAP_CHECK(tail != NULL && strstr(tail, last) != NULL);
  RAP_CHECK(strstr(text, "\"n\":5013}") == NULL && strstr(text, "\"n\":5014}") != NULL);   /* the first kept: i = 4950 */
  free(text);
  void *big;
  RAP_CHECK_STATUS(rap_allocate(lim, &big, 4096, NULL), RAP_ERR_NOMEM);   /* out of memory: written */
  text = read_whole_lines(path, &lines);
  RAP_CHECK_EQ(lines, 1 + 100);
  RAP_CHECK_STR(text, "\"ev\":\"oom\",\"a\":\"lim\"");
  free(text);
  RAP_CHECK_OK(rap_trace_stop());
  text = read_whole_lines(path, &lines);
  RAP_CHECK_EQ(lines, 1 + 100);
  free(text);
  remove(path);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* An out-of-memory handler's own calls are the user's (depth 0): what it frees shows in a replay. */
static void *oom_spare;
static int free_spare(rap_allocator *a, size_t bytes, rap_resource *r, int attempt, void *user) {
  (void)bytes, (void)r, (void)attempt;
  rap_allocator *pool = user;
  (void)a;
  if (oom_spare == NULL) return 0;
  int st = rap_deallocate(pool, oom_spare, NULL);
  oom_spare = NULL;
  return st == RAP_OK;
}

RAP_TEST(Trace, OutOfMemoryHandlerCallsAreTheUsers) {
  char path[256];
  temp_path(path, sizeof path, "oom.jsonl");
  rap_manager *rm = tu_manager();
  rap_allocator *pool;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "lim", "QuickPool(SizeLimiter(HOST, limit=70KiB), "
                                       "initial_size=32KiB, next_size=32KiB)", &pool));
  RAP_CHECK_OK(rap_allocator_set_oom_handler(pool, free_spare, pool));
  void *a, *b;
  RAP_CHECK_OK(rap_allocate(pool, &a, 30000, NULL));
  RAP_CHECK_OK(rap_allocate(pool, &oom_spare, 30000, NULL));
  char spare[32];
  snprintf(spare, sizeof spare, "\"p\":\"%p\"", oom_spare);
  RAP_CHECK_OK(rap_trace_start(path));
  RAP_CHECK_OK(rap_allocate(pool, &b, 30000, NULL));   /* the handler frees the spare, then it fits */
  RAP_CHECK_OK(rap_trace_stop());
  char *text = slurp(path);
  RAP_CHECK(text != NULL);
  HAS_LINE(text, "\"ev\":\"dealloc\"", "\"a\":\"lim\"", "\"d\":0", spare);
  free(text);
  remove(path);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Runs a command; its standard output in out. */
static int run_tool(const char *cmd, char *out, size_t cap) {
  FILE *f = popen(cmd, "r");
  if (f == NULL) return -1;
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = '\0';
  return pclose(f);
}

static size_t json_field(const char *json, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *at = strstr(json, k);
  return at ? (size_t)strtoull(at + strlen(k), NULL, 10) : (size_t)-1;
}

#define RT_SPEC "ResourceAwarePool(HOST, initial_size=256KiB, next_size=256KiB)"

/* The fill colour of the plot's legend entry whose text begins with label, or "" without one. */
static void legend_fill(const char *svg, const char *label, char *out, size_t cap) {
  char needle[128];
  snprintf(needle, sizeof needle, ">%s (peak", label);
  out[0] = '\0';
  const char *at = strstr(svg, needle), *line = at, *f = NULL;
  if (at == NULL) return;
  while (line > svg && line[-1] != '\n') line--;
  for (const char *q = line; (q = strstr(q, "fill=\"")) != NULL && q < at; q++) f = q + 6;
  if (f == NULL) return;
  size_t n = strcspn(f, "\"");
  if (n >= cap) n = cap - 1;
  memcpy(out, f, n);
  out[n] = '\0';
}

/* A random run over the host and three queues with nothing queued on them (every event has passed
 * when the pool asks, as in a replay): its peaks, replayed through the same spec, are the same. */
RAP_TEST(Trace, ReplayThroughTheSameSpecGivesTheSameHeldAndLive) {
  char path[200], svg[200], html[200], cmd[2048], out[4096];
  temp_path(path, sizeof path, "roundtrip.jsonl");
  temp_path(svg, sizeof svg, "roundtrip.svg");
  temp_path(html, sizeof html, "roundtrip.html");
  rap_manager *rm = tu_manager();
  rap_allocator *a;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "rt", RT_SPEC, &a));
  rap_resource *res[4];
  RAP_CHECK_OK(rap_resource_host(rm, &res[0]));
  for (int i = 1; i < 4; i++) RAP_CHECK_OK(rap_resource_create_host_async(rm, &res[i]));
  enum { SLOTS = 64, OPS = 4000 };
  void *p[SLOTS] = {0};
  int on[SLOTS];
  uint64_t seed = 7;
  RAP_CHECK_OK(rap_trace_start(path));
  for (int i = 0; i < OPS; i++) {
    unsigned k = (unsigned)(tu_rand(&seed) % SLOTS);
    if (p[k] == NULL) {
      on[k] = (int)(tu_rand(&seed) % 4);
      size_t bytes = 64 + (size_t)(tu_rand(&seed) % (24 * 1024));
      RAP_CHECK_OK(rap_allocate(a, &p[k], bytes, res[on[k]]));
    } else {
      RAP_CHECK_OK(rap_deallocate(a, p[k], tu_rand(&seed) % 2 ? res[on[k]] : NULL));
      p[k] = NULL;
    }
  }
  rap_stats top = tu_stats(a), bottom = tu_stats(rap_allocator_parent(a));
  for (int k = 0; k < SLOTS; k++)
    if (p[k] != NULL) RAP_CHECK_OK(rap_deallocate(a, p[k], NULL));
  RAP_CHECK_OK(rap_trace_stop());

  snprintf(cmd, sizeof cmd, "%s replay %s --spec '%s' --allocator rt --json", RAP_TRACE_TOOL, path, RT_SPEC);
  RAP_CHECK_EQ(run_tool(cmd, out, sizeof out), 0);
  RAP_CHECK_EQ(json_field(out, "peak_live"), top.high_watermark);
  RAP_CHECK_EQ(json_field(out, "peak_held"), bottom.high_watermark);
  RAP_CHECK_EQ(json_field(out, "failed"), 0);
  RAP_CHECK_EQ(json_field(out, "skipped"), 0);
  RAP_CHECK(json_field(out, "calls") >= OPS);
  /* Through another pool, the same calls: the live figure is the trace's, whatever the pool. */
  snprintf(cmd, sizeof cmd, "%s replay %s --spec 'QuickPool(HOST)' --allocator rt --json", RAP_TRACE_TOOL, path);
  RAP_CHECK_EQ(run_tool(cmd, out, sizeof out), 0);
  RAP_CHECK_EQ(json_field(out, "peak_live"), top.high_watermark);
  /* The summary and the pictures. */
  snprintf(cmd, sizeof cmd, "%s summary %s", RAP_TRACE_TOOL, path);
  RAP_CHECK_EQ(run_tool(cmd, out, sizeof out), 0);
  RAP_CHECK_STR(out, "'rt': ");
  snprintf(cmd, sizeof cmd, "%s plot %s -o %s && %s plot %s -o %s --title 'a round trip'", RAP_TRACE_TOOL,
           path, svg, RAP_TRACE_TOOL, path, html);
  RAP_CHECK_EQ(run_tool(cmd, out, sizeof out), 0);
  char *s = slurp(svg), *h = slurp(html);
  RAP_CHECK(s != NULL && h != NULL);
  RAP_CHECK(strncmp(s, "<svg", 4) == 0);
  RAP_CHECK_STR(s, "live, host (peak");
  RAP_CHECK_STR(s, "live, host_async #1 (peak");
  RAP_CHECK_STR(s, "held by 'rt' (peak");
  /* Each queue's pending band has a colour of its own: its queue's, the live band's, lighter (the
   * host's frees never pend). */
  char pend[4][16], live[4][16];
  for (int i = 1; i < 4; i++) {
    char label[64];
    snprintf(label, sizeof label, "pending, host_async #%d", i);
    legend_fill(s, label, pend[i], sizeof pend[i]);
    snprintf(label, sizeof label, "live, host_async #%d", i);
    legend_fill(s, label, live[i], sizeof live[i]);
    if (pend[i][0] == '\0' || live[i][0] == '\0')
      rap_test_fail(__FILE__, __LINE__, "the plot's legend has no live or pending band for queue %d", i);
    RAP_CHECK(strcmp(pend[i], live[i]) == 0);
    for (int j = 1; j < i; j++)
      if (strcmp(pend[i], pend[j]) == 0)
        rap_test_fail(__FILE__, __LINE__, "the pending bands of queues %d and %d share the colour %s",
                      j, i, pend[i]);
  }
  RAP_CHECK(strncmp(h, "<!DOCTYPE html>", 15) == 0);
  RAP_CHECK_STR(h, "<title>a round trip</title>");
  RAP_CHECK_STR(h, "</svg>");
  free(s);
  free(h);
  /* Bad use: a sentence and a nonzero exit. */
  snprintf(cmd, sizeof cmd, "%s replay %s 2>&1", RAP_TRACE_TOOL, path);
  RAP_CHECK(run_tool(cmd, out, sizeof out) != 0);
  RAP_CHECK_STR(out, "replay wants --spec SPEC");
  snprintf(cmd, sizeof cmd, "%s replay %s --spec 'Nope(HOST)' 2>&1", RAP_TRACE_TOOL, path);
  RAP_CHECK(run_tool(cmd, out, sizeof out) != 0);
  RAP_CHECK_STR(out, "no strategy named 'Nope'");
  FILE *bad = fopen(path, "w");   /* a damaged trace: a resource id no manager makes */
  RAP_CHECK(bad != NULL);
  fputs("{\"t\":1,\"th\":1,\"ev\":\"alloc\",\"a\":\"rt\",\"d\":0,\"r\":4000000000000,"
        "\"rk\":\"cuda\",\"p\":\"0x1000\",\"n\":64}\n", bad);
  fclose(bad);
  snprintf(cmd, sizeof cmd, "%s replay %s --spec '%s' 2>&1", RAP_TRACE_TOOL, path, RT_SPEC);
  RAP_CHECK(run_tool(cmd, out, sizeof out) != 0);
  RAP_CHECK_STR(out, "resource id 4000000000000 in the trace is past any real one");
  snprintf(cmd, sizeof cmd, "%s summary /nonexistent.jsonl 2>&1", RAP_TRACE_TOOL);
  RAP_CHECK(run_tool(cmd, out, sizeof out) != 0);
  RAP_CHECK_STR(out, "cannot open '/nonexistent.jsonl'");
  remove(path);
  remove(svg);
  remove(html);
  for (int i = 1; i < 4; i++) RAP_CHECK_OK(rap_resource_destroy(res[i]));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- start and stop while threads allocate ------------------------------------------------------
 * Four threads allocate and free through a ThreadCache and a ThreadSafe over ResourceAwarePools on
 * two host_async queues while a fifth cycles the trace between two files, A and B, and the test's
 * own thread cycles it on a third, C, reading C back after each of its stops. Then, every thread
 * joined, one last cycle on A. A file read back after a stop returned holds whole lines, no NUL
 * byte and one header; A holds exactly its last cycle: the header, the user's allocation and
 * deallocation and what the pools did for them, nothing of an earlier cycle. */
typedef struct cyc_shared {
  rap_allocator *pools[2];
  rap_resource *qs[2];
  const char *paths[2];
  int stop;     /* atomic: the test's thread is done cycling */
  int failed;   /* atomic: the status of a call that did not answer RAP_OK */
} cyc_shared;

typedef struct cyc_thread {
  cyc_shared *sh;
  int i;
} cyc_thread;

static void cyc_fail_with(cyc_shared *sh, int st) { __atomic_store_n(&sh->failed, st, __ATOMIC_RELAXED); }
#define cyc_fail(sh) cyc_fail_with((sh), -1000 - __LINE__)

static void *cyc_allocate(void *arg) {
  cyc_thread *t = arg;
  cyc_shared *sh = t->sh;
  rap_allocator *a = sh->pools[t->i % 2];
  rap_resource *q = sh->qs[(t->i / 2) % 2];
  uint64_t seed = 11u + (uint64_t)t->i;
  void *live[16] = {0};
  for (int n = 0; n < 2000 || !__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE); n++) {
    unsigned k = (unsigned)(tu_rand(&seed) % 16);
    int st;
    if (live[k] == NULL) {
      st = rap_allocate(a, &live[k], 16 + (size_t)(tu_rand(&seed) % 4000), q);
    } else {
      st = rap_deallocate(a, live[k], (n & 1) ? q : NULL);
      live[k] = NULL;
    }
    if (st != RAP_OK) cyc_fail_with(sh, st);
  }
  for (int k = 0; k < 16; k++)
    if (live[k] != NULL && rap_deallocate(a, live[k], q) != RAP_OK) cyc_fail(sh);
  return NULL;
}

static void *cyc_trace(void *arg) {
  cyc_shared *sh = arg;
  while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
    if (rap_trace_start(sh->paths[0]) != RAP_OK || rap_trace_stop() != RAP_OK ||
        rap_trace_start(sh->paths[1]) != RAP_OK || rap_trace_stop() != RAP_OK)
      cyc_fail(sh);
  }
  return NULL;
}

RAP_TEST(Trace, StartAndStopWhileThreadsAllocate) {
  char a_path[256], b_path[256], c_path[256], ap[48];
  temp_path(a_path, sizeof a_path, "cycle-a.jsonl");
  temp_path(b_path, sizeof b_path, "cycle-b.jsonl");
  temp_path(c_path, sizeof c_path, "cycle-c.jsonl");
  rap_manager *rm = tu_manager();
  cyc_shared sh = {.paths = {a_path, b_path}};
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "tc", "ThreadCache(ResourceAwarePool(HOST))", &sh.pools[0]));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "ts", "ThreadSafe(ResourceAwarePool(HOST))", &sh.pools[1]));
  for (int i = 0; i < 2; i++) RAP_CHECK_OK(rap_resource_create_host_async(rm, &sh.qs[i]));
  pthread_t th[5];
  cyc_thread ct[4];
  for (int i = 0; i < 4; i++) {
    ct[i] = (cyc_thread){&sh, i};
    RAP_CHECK(pthread_create(&th[i], NULL, cyc_allocate, &ct[i]) == 0);
  }
  RAP_CHECK(pthread_create(&th[4], NULL, cyc_trace, &sh) == 0);
  size_t lines = 0;
  for (int i = 0; i < 100; i++) {
    RAP_CHECK_OK(rap_trace_start(c_path));
    for (int k = 0; k < 50; k++) RAP_CHECK_OK(rap_deallocate(sh.pools[1], tu_alloc(sh.pools[1], 64), NULL));
    RAP_CHECK_OK(rap_trace_stop());
    free(read_whole_lines(c_path, &lines));
  }
  __atomic_store_n(&sh.stop, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < 5; i++) RAP_CHECK(pthread_join(th[i], NULL) == 0);
  int failed = __atomic_load_n(&sh.failed, __ATOMIC_RELAXED);
  if (failed != 0)
    rap_test_fail(__FILE__, __LINE__, "a thread's call failed: %s", failed <= -1000 ? "a trace start or stop" : rap_status_name(failed));
  free(read_whole_lines(b_path, &lines));

  /* The last cycle, on A. */
  RAP_CHECK_OK(rap_trace_start(a_path));
  void *p = tu_alloc(sh.pools[1], 100);
  RAP_CHECK_OK(rap_deallocate(sh.pools[1], p, NULL));
  RAP_CHECK_OK(rap_trace_stop());
  snprintf(ap, sizeof ap, "\"p\":\"%p\"", p);
  char *text = read_whole_lines(a_path, &lines);
  size_t calls = 0;
  for (char *l = strchr(text, '\n') + 1; *l != '\0';) {
    char *end = strchr(l, '\n');
    *end = '\0';
    if (strstr(l, "\"a\":\"tc") != NULL) rap_test_fail(__FILE__, __LINE__, "a line of an earlier cycle: %s", l);
    if (strstr(l, "\"d\":0") != NULL) {
      calls++;
      RAP_CHECK_STR(l, ap);
    }
    l = end + 1;
  }
  free(text);
  RAP_CHECK_EQ(calls, 2);   /* the allocation and the deallocation */
  remove(a_path);
  remove(b_path);
  remove(c_path);
  for (int i = 0; i < 2; i++) RAP_CHECK_OK(rap_resource_destroy(sh.qs[i]));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
