/* test_trace_tool.c — rap-trace on hostile and large traces.
 *
 * A trace tool reads what a year-long job writes, and whatever else it is given: its time must
 * grow linearly with the lines (many allocator names, many refused deallocations), its memory with
 * what the trace holds (not with the value of a resource id), the resources a replay makes are
 * capped with a sentence, and nothing read from a file it refuses is leaked (the ASan build sees a
 * leak as rap-trace's exit status). Each run's processor time and peak memory are its own child's
 * (wait4).
 */
#define _GNU_SOURCE   /* wait4 */

#include "test_util.h"
#include "trace_read.h"   /* tools/: the reader itself, for what a refused file leaves */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef RAP_TRACE_TOOL
#error "RAP_TRACE_TOOL: the path of rap-trace, from tests/CMakeLists.txt"
#endif

static void tt_path(char *buf, size_t cap, const char *what) {
  const char *dir = getenv("TMPDIR");
  snprintf(buf, cap, "%s/rap-tool-%ld-%s", dir && *dir ? dir : "/tmp", (long)getpid(), what);
}

typedef struct tool_run {
  int status;        /* the exit status; -1 if it did not exit */
  double seconds;    /* processor time, user and system: what load on the machine changes least */
  long max_rss_kib;  /* the child's peak resident memory */
  char out[4096];    /* what it wrote, both streams, the first 4 KiB */
} tool_run;

/* Runs rap-trace with the arguments (a shell fragment) in a child of its own. */
static void run_tool_measured(tool_run *r, const char *args) {
  char out_path[256], cmd[2048];
  tt_path(out_path, sizeof out_path, "tool-out.txt");
  snprintf(cmd, sizeof cmd, "exec %s %s > %s 2>&1", RAP_TRACE_TOOL, args, out_path);
  pid_t pid = fork();
  RAP_CHECK(pid >= 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  RAP_CHECK(wait4(pid, &status, 0, &ru) == pid);
  r->seconds = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
               (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  r->status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r->max_rss_kib = ru.ru_maxrss;
  FILE *f = fopen(out_path, "r");
  RAP_CHECK(f != NULL);
  r->out[fread(r->out, 1, sizeof r->out - 1, f)] = '\0';
  fclose(f);
  remove(out_path);
}

static FILE *trace_file(char *path, size_t cap, const char *what) {
  tt_path(path, cap, what);
  FILE *f = fopen(path, "w");
  RAP_CHECK(f != NULL);
  fputs("{\"t\":0,\"ev\":\"trace\",\"version\":\"0.1.0\",\"clock\":\"monotonic ns\"}\n", f);
  return f;
}

static void line(FILE *f, unsigned long long t, const char *ev, const char *a, long long r,
                 unsigned long long p, unsigned long long n, const char *extra) {
  fprintf(f, "{\"t\":%llu,\"th\":1,\"ev\":\"%s\",\"a\":\"%s\",\"d\":0,", t, ev, a);
  if (r < 0) fprintf(f, "\"r\":null");
  else fprintf(f, "\"r\":%lld,\"rk\":\"host_async\"", r);
  fprintf(f, ",\"p\":\"0x%llx\",\"n\":%llu%s}\n", p, n, extra ? extra : "");
}

/* A hostile trace must read about as fast as a plain one of as many lines: within four times its
 * processor time and a second, generous for a sanitizer build (both runs slow down alike), and
 * far below what the square of the lines took (here 18 s for the names and 11 s for
 * the refused lines, against 0.03 s for plain traces of as many lines). */
static void check_linear(const tool_run *hostile, const tool_run *plain, const char *what) {
  if (hostile->seconds > 4 * plain->seconds + 1.0)
    rap_test_fail(__FILE__, __LINE__, "%s took %.2f s, a plain trace of as many lines %.2f s", what,
                  hostile->seconds, plain->seconds);
}

/* 65 535 allocator names (the most a trace can have), each allocating once and freeing: a 20 MB
 * trace whose names were once looked up one by one for every line. */
RAP_TEST(TraceTool, ManyAllocatorNamesInLinearTime) {
  char path[256], plain_path[256], name[64], args[512];
  FILE *f = trace_file(path, sizeof path, "names.jsonl");
  FILE *plain = trace_file(plain_path, sizeof plain_path, "one-name.jsonl");
  enum { NAMES = 65535 };
  for (unsigned i = 0; i < NAMES; i++) line(plain, 2ull * i + 1, "alloc", "allocator-with-a-long-name-00000000", -1, 0x100000ull + 64ull * i, 64, NULL);
  for (unsigned i = 0; i < NAMES; i++) line(plain, 2ull * NAMES + i, "dealloc", "allocator-with-a-long-name-00000000", -1, 0x100000ull + 64ull * i, 0, NULL);
  RAP_CHECK(fclose(plain) == 0);
  for (unsigned i = 0; i < NAMES; i++) {
    snprintf(name, sizeof name, "allocator-with-a-long-name-%08u", i);
    line(f, 2ull * i + 1, "alloc", name, -1, 0x100000ull + 64ull * i, 64, NULL);
  }
  for (unsigned i = 0; i < NAMES; i++) {
    snprintf(name, sizeof name, "allocator-with-a-long-name-%08u", i);
    line(f, 2ull * NAMES + i, "dealloc", name, -1, 0x100000ull + 64ull * i, 0, NULL);
  }
  RAP_CHECK(fclose(f) == 0);
  tool_run r, base;
  snprintf(args, sizeof args, "summary %s", plain_path);
  run_tool_measured(&base, args);
  RAP_CHECK_EQ(base.status, 0);
  snprintf(args, sizeof args, "summary %s", path);
  run_tool_measured(&r, args);
  RAP_CHECK_EQ(r.status, 0);
  RAP_CHECK_STR(r.out, "trace: 131070 events");
  RAP_CHECK_STR(r.out, "'allocator-with-a-long-name-00000000': 2 user calls, peak live 0.00 MiB");
  check_linear(&r, &base, "the summary of 65 535 names");
  snprintf(args, sizeof args, "replay %s --spec 'QuickPool(HOST)' --allocator allocator-with-a-long-name-00065534 --json", path);
  run_tool_measured(&r, args);
  RAP_CHECK_EQ(r.status, 0);
  RAP_CHECK_STR(r.out, "\"calls\":2,\"allocations\":1,\"failed\":0,\"skipped\":0,\"peak_live\":64");
  check_linear(&r, &base, "a replay of one of 65 535 names");
  remove(path);
  remove(plain_path);
}

/* 200 000 refused deallocations of pointers never freed (each once made the reader look back
 * through every line before it), and one refused after a real deallocation, which voids it. */
RAP_TEST(TraceTool, ManyRefusedLinesInLinearTime) {
  char path[256], plain_path[256], args[512];
  FILE *f = trace_file(path, sizeof path, "refused.jsonl");
  FILE *plain = trace_file(plain_path, sizeof plain_path, "no-refused.jsonl");
  enum { REFUSED = 200000 };
  for (unsigned i = 0; i < REFUSED + 4; i++)
    line(plain, i + 1, "oom", "pool", -1, 0x900000ull + 16ull * i, 0, NULL);
  RAP_CHECK(fclose(plain) == 0);
  unsigned long long t = 1;
  line(f, t++, "alloc", "pool", 1, 0x5000, 100, NULL);
  line(f, t++, "dealloc", "pool", 2, 0x5000, 0, NULL);   /* the wrong resource: refused */
  line(f, t++, "refused", "pool", 2, 0x5000, 0, ",\"status\":\"RAP_ERR_WRONG_RESOURCE\"");
  for (unsigned i = 0; i < REFUSED; i++)
    line(f, t++, "refused", "pool", -1, 0x900000ull + 16ull * i, 0, ",\"status\":\"RAP_ERR_UNKNOWN_POINTER\"");
  line(f, t++, "dealloc", "pool", 1, 0x5000, 0, NULL);
  RAP_CHECK(fclose(f) == 0);
  tool_run r, base;
  snprintf(args, sizeof args, "summary %s", plain_path);
  run_tool_measured(&base, args);
  RAP_CHECK_EQ(base.status, 0);
  snprintf(args, sizeof args, "replay %s --spec 'QuickPool(HOST)' --json", path);
  run_tool_measured(&r, args);
  RAP_CHECK_EQ(r.status, 0);
  /* The refused deallocation is no call: the alloc and the last dealloc are. */
  RAP_CHECK_STR(r.out, "\"calls\":2,\"allocations\":1,\"failed\":0,\"skipped\":0,\"peak_live\":100");
  check_linear(&r, &base, "a replay of 200 000 refused lines");
  snprintf(args, sizeof args, "summary %s", path);
  run_tool_measured(&r, args);
  RAP_CHECK_EQ(r.status, 0);
  RAP_CHECK_STR(r.out, "refused  200001");
  RAP_CHECK_STR(r.out, "'pool': 2 user calls");
  remove(path);
  remove(plain_path);
}

/* A resource id of 2^24 (the largest a replay takes) costs what one resource costs; a trace with
 * more resources than the replay may make is refused with a sentence, not given a thread each. */
RAP_TEST(TraceTool, ResourcesAreMappedSparselyAndCapped) {
  char path[256], small_path[256], args[512];
  FILE *f = trace_file(path, sizeof path, "big-id.jsonl");
  line(f, 1, "alloc", "pool", 1 << 24, 0x5000, 100, NULL);
  line(f, 2, "dealloc", "pool", 1 << 24, 0x5000, 0, NULL);
  RAP_CHECK(fclose(f) == 0);
  f = trace_file(small_path, sizeof small_path, "small-id.jsonl");
  line(f, 1, "alloc", "pool", 1, 0x5000, 100, NULL);
  line(f, 2, "dealloc", "pool", 1, 0x5000, 0, NULL);
  RAP_CHECK(fclose(f) == 0);
  tool_run small, big;
  snprintf(args, sizeof args, "replay %s --spec 'QuickPool(HOST)' --json", small_path);
  run_tool_measured(&small, args);   /* the same replay on resource id 1 */
  RAP_CHECK_EQ(small.status, 0);
  snprintf(args, sizeof args, "replay %s --spec 'QuickPool(HOST)' --json", path);
  run_tool_measured(&big, args);
  RAP_CHECK_EQ(big.status, 0);
  RAP_CHECK_STR(big.out, "\"calls\":2,");
  /* A table indexed by the id would be 128 MiB at least. */
  if (big.max_rss_kib > small.max_rss_kib + 64 * 1024)
    rap_test_fail(__FILE__, __LINE__, "replaying one resource of id 2^24 took %ld KiB, of id 1 %ld KiB",
                  big.max_rss_kib, small.max_rss_kib);
  remove(small_path);

  f = trace_file(path, sizeof path, "many-ids.jsonl");
  enum { IDS = 2000 };
  for (unsigned i = 0; i < IDS; i++) line(f, i + 1, "alloc", "pool", 1 + 7 * i, 0x5000 + 64ull * i, 64, NULL);
  RAP_CHECK(fclose(f) == 0);
  snprintf(args, sizeof args, "replay %s --spec 'QuickPool(HOST)'", path);
  run_tool_measured(&big, args);
  RAP_CHECK_EQ(big.status, 1);
  RAP_CHECK_STR(big.out, "the trace uses more than 256 resources besides the host; the replay makes at most 256");
  RAP_CHECK_STR(big.out, "--max-resources N raises it");
  snprintf(args, sizeof args, "replay %s --spec 'QuickPool(HOST)' --max-resources 0", path);
  run_tool_measured(&big, args);
  RAP_CHECK_EQ(big.status, 2);
  RAP_CHECK_STR(big.out, "--max-resources is a number from 1 to 65536, not '0'");
  remove(path);
}

/* --lag-us holds each stream's freed memory back for that long in the trace's time, as a GPU behind
 * the CPU would: a block freed on stream 1 cannot serve stream 2 a moment later, so the pool grows
 * (a second chunk); on the block's own stream it serves again at once (one chunk). The option
 * takes host_async queues only, and a number. */
RAP_TEST(TraceTool, LagHoldsAStreamsFreedMemoryBack) {
  char path[256], args[640];
  const char *spec = "'ResourceAwarePool(HOST, initial_size=1MiB, next_size=1MiB, heuristic=never)'";
  for (int other = 0; other < 2; other++) {
    FILE *f = trace_file(path, sizeof path, "lag.jsonl");
    line(f, 1000, "alloc", "pool", 1, 0x100000, 1 << 20, NULL);
    line(f, 2000, "dealloc", "pool", -1, 0x100000, 0, NULL);   /* on its own stream */
    line(f, 3000, "alloc", "pool", 1 + other, 0x200000, 1 << 20, NULL);
    line(f, 4000, "dealloc", "pool", -1, 0x200000, 0, NULL);
    RAP_CHECK(fclose(f) == 0);
    tool_run r;
    snprintf(args, sizeof args, "replay %s --spec %s --lag-us 60000000 --json", path, spec);
    run_tool_measured(&r, args);
    RAP_CHECK_EQ(r.status, 0);
    RAP_CHECK_STR(r.out, other ? "\"chunks_at_end\":2," : "\"chunks_at_end\":1,");
    if (!other) {
      snprintf(args, sizeof args, "replay %s --spec %s --lag-us 5 --resources cuda", path, spec);
      run_tool_measured(&r, args);
      RAP_CHECK_EQ(r.status, 2);
      RAP_CHECK_STR(r.out, "--lag-us holds host_async queues back");
      snprintf(args, sizeof args, "replay %s --spec %s --lag-us soon", path, spec);
      run_tool_measured(&r, args);
      RAP_CHECK_EQ(r.status, 2);
      RAP_CHECK_STR(r.out, "--lag-us is a number of microseconds up to 60000000, not 'soon'");
    }
    if (other) {
      /* A pool that cannot grow waits on the host for stream 1's block: the replay does not hang
       * behind the closed gate (it opens once nothing is replayed for a while), and the block
       * serves stream 2. */
      snprintf(args, sizeof args, "replay %s --spec 'ResourceAwarePool(SizeLimiter(HOST, limit=1536KiB), "
               "initial_size=1MiB, next_size=1MiB, heuristic=never)' --lag-us 60000000 --json", path);
      run_tool_measured(&r, args);
      RAP_CHECK_EQ(r.status, 0);
      RAP_CHECK_STR(r.out, "\"failed\":0,");
      RAP_CHECK_STR(r.out, "\"chunks_at_end\":1,");
      if (r.seconds > 30) rap_test_fail(__FILE__, __LINE__, "the replay took %.1f s", r.seconds);
    }
    remove(path);
  }
}

/* --releases replays the allocator's release lines as rap_release (a process that called
 * empty_cache between two phases), and reports the peak held after the last one: a 4 MiB block
 * freed, a release, then 1 MiB: 4 MiB held at the peak, 1 MiB after the release. Without the
 * option the release is not replayed, so the 1 MiB comes from the chunk still held. */
RAP_TEST(TraceTool, ReleasesReplaysAReleaseAndPeaksAfterIt) {
  char path[256], args[640];
  const char *spec = "'QuickPool(HOST, initial_size=1MiB, next_size=1MiB, heuristic=never)'";
  FILE *f = trace_file(path, sizeof path, "releases.jsonl");
  line(f, 1000, "alloc", "pool", -1, 0x100000, 4 << 20, NULL);
  line(f, 2000, "dealloc", "pool", -1, 0x100000, 0, NULL);
  line(f, 3000, "release", "pool", -1, 0x100000, 4 << 20, ",\"held\":0");
  line(f, 4000, "alloc", "pool", -1, 0x200000, 1 << 20, NULL);
  line(f, 5000, "dealloc", "pool", -1, 0x200000, 0, NULL);
  RAP_CHECK(fclose(f) == 0);
  tool_run r;
  snprintf(args, sizeof args, "replay %s --spec %s --releases --json", path, spec);
  run_tool_measured(&r, args);
  RAP_CHECK_EQ(r.status, 0);
  /* HOST adds its alignment to each chunk: 4 MiB and 1 MiB and a few hundred bytes. */
  RAP_CHECK_STR(r.out, "\"peak_held\":41945");
  RAP_CHECK_STR(r.out, "\"releases\":1,\"peak_held_after_release\":10488");
  snprintf(args, sizeof args, "replay %s --spec %s --releases", path, spec);
  run_tool_measured(&r, args);
  RAP_CHECK_EQ(r.status, 0);
  RAP_CHECK_STR(r.out, "peak held after the last of 1 releases 1.00 MiB");
  snprintf(args, sizeof args, "replay %s --spec %s --json", path, spec);
  run_tool_measured(&r, args);
  RAP_CHECK_EQ(r.status, 0);
  RAP_CHECK_STR(r.out, "\"held_at_end\":41945");
  RAP_CHECK_STR(r.out, "\"releases\":0,\"peak_held_after_release\":0,");
  remove(path);
}

/* Three iterations between step lines of allocator a: in each, `together` blocks of n bytes live
 * at once on each of `streams` resources in turn. */
static void plan_trace(const char *path_what, char *path, size_t cap, const char *a, int streams,
                       unsigned long long n, int together) {
  FILE *f = trace_file(path, cap, path_what);
  unsigned long long t = 1;
  for (int it = 0; it < 3; it++) {
    fprintf(f, "{\"t\":%llu,\"ev\":\"step\"}\n", t++);
    for (int r = 1; r <= streams; r++) {
      unsigned long long base = 0x100000000ull * (unsigned long long)(it + 1) + 0x10000ull * (unsigned long long)r;
      for (int k = 0; k < together; k++) line(f, t++, "alloc", a, r, base + 0x100ull * (unsigned long long)k, n, NULL);
      for (int k = 0; k < together; k++) line(f, t++, "dealloc", a, r, base + 0x100ull * (unsigned long long)k, 0, NULL);
    }
  }
  RAP_CHECK(fclose(f) == 0);
}

/* rap-trace plan refuses, with status 1 and a sentence and no file written, a trace whose plan
 * the Planned strategy would refuse (it wrote such plans and said nothing): 256 streams (255 are
 * planned), blocks of 2^62 and 2^63 bytes (whose sums wrapped: "arena ... for 0.00 MiB live"),
 * an allocator without a name. */
RAP_TEST(TraceTool, PlanRefusesWhatPlannedWouldRefuse) {
  char path[256], plan[256], args[768];
  tt_path(plan, sizeof plan, "edge.plan");
  static const struct {
    const char *a;
    int streams;
    unsigned long long n;
    int together;
    const char *says;   /* NULL: planned */
  } cases[] = {
      {"pool", 255, 1000, 1, NULL},
      {"pool", 256, 1000, 1, "rap-trace: allocator 'pool' uses more than 255 resources (streams): a plan holds at most 255"},
      {"pool", 1, 1ull << 62, 1, "recurs with 4611686018427387904 bytes: more than a plan's arena holds"},
      {"pool", 1, 1ull << 63, 2, "recurs with 9223372036854775808 bytes: more than a plan's arena holds"},
      {"pool", 1, 1ull << 61, 2, "need an arena of more than 4611686018427387903 bytes"},
      {"", 1, 1000, 1, "rap-trace: an allocator of the trace has an empty name"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    plan_trace("edge.jsonl", path, sizeof path, cases[k].a, cases[k].streams, cases[k].n, cases[k].together);
    remove(plan);
    snprintf(args, sizeof args, "plan %s -o %s", path, plan);
    tool_run r;
    run_tool_measured(&r, args);
    if (cases[k].says == NULL) {
      RAP_CHECK_EQ(r.status, 0);
      RAP_CHECK_STR(r.out, "on 255 streams");
      RAP_CHECK(access(plan, F_OK) == 0);
      continue;
    }
    if (r.status != 1) rap_test_fail(__FILE__, __LINE__, "case %zu: status %d, said: %s", k, r.status, r.out);
    RAP_CHECK_STR(r.out, cases[k].says);
    RAP_CHECK(access(plan, F_OK) != 0);
  }
  remove(path);
  remove(plan);
}

/* A file of lines that name allocators but hold no event is refused with a sentence, and what was
 * read is freed: the reader leaves nothing behind (in the ASan build a leak fails this process). */
RAP_TEST(TraceTool, NoEventsIsASentenceAndNoLeak) {
  char path[256], args[512];
  tt_path(path, sizeof path, "no-events.jsonl");
  FILE *f = fopen(path, "w");
  RAP_CHECK(f != NULL);
  for (int i = 0; i < 100; i++) fprintf(f, "{\"a\":\"name-%d\",\"rk\":\"kind-%d\",\"t\":%d}\n", i, i % 20, i);
  RAP_CHECK(fclose(f) == 0);
  tool_run r;
  snprintf(args, sizeof args, "summary %s", path);
  run_tool_measured(&r, args);
  RAP_CHECK_EQ(r.status, 1);
  RAP_CHECK_STR(r.out, "holds no events (no line of it is a trace event)");
  trace t;
  char err[512];
  RAP_CHECK_EQ(trace_load(path, &t, err, sizeof err), -1);
  RAP_CHECK_STR(err, "holds no events");
  RAP_CHECK(t.names == NULL && t.nnames == 0 && t.nkinds == 0 && t.name_index == NULL && t.ev == NULL);
  remove(path);
}

/* A gzip-compressed trace (as bench/traces/ stores them) is named as such, with what to do. */
RAP_TEST(TraceTool, CompressedTraceIsASentence) {
  char path[256], args[512];
  tt_path(path, sizeof path, "compressed.jsonl.gz");
  FILE *f = fopen(path, "wb");
  RAP_CHECK(f != NULL);
  static const unsigned char gz[] = {0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0, 0x03, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  RAP_CHECK(fwrite(gz, 1, sizeof gz, f) == sizeof gz);
  RAP_CHECK(fclose(f) == 0);
  tool_run r;
  snprintf(args, sizeof args, "summary %s", path);
  run_tool_measured(&r, args);
  RAP_CHECK_EQ(r.status, 1);
  RAP_CHECK_STR(r.out, "is compressed with gzip: decompress it first (gzip -dc");
  remove(path);
}

/* --help and --version answer on standard output with status 0; a file that cannot be opened is
 * named with the reason. */
RAP_TEST(TraceTool, HelpVersionAndUnreadableFile) {
  tool_run r;
  run_tool_measured(&r, "--help");
  RAP_CHECK_EQ(r.status, 0);
  RAP_CHECK_STR(r.out, "usage: rap-trace summary TRACE");
  run_tool_measured(&r, "--version");
  RAP_CHECK_EQ(r.status, 0);
  char want[64];
  snprintf(want, sizeof want, "rap-trace %s\n", rap_version());
  RAP_CHECK_STR(r.out, want);
  run_tool_measured(&r, "summary /nonexistent-dir/trace.jsonl");
  RAP_CHECK_EQ(r.status, 1);
  RAP_CHECK_STR(r.out, "rap-trace: cannot open '/nonexistent-dir/trace.jsonl': No such file or directory");
}

/* --lag-us: once a gate's time has come, the replay's next call finds the pool's events behind it
 * passed. Stream 1 frees 16 blocks apart from each other (the pool fences them at the 16th, so
 * their event sits before the last gate) with 1 µs of lag; a millisecond later stream 2 asks for
 * one of their size: it is served from them, in every run, and the pool does not grow. With the
 * queues left to run on their own the call often came before the event had passed (one chunk in
 * 6 runs of 40). */
RAP_TEST(TraceTool, LagReplayGivesTheSameFiguresEveryTime) {
  char path[256], args[640];
  const char *spec = "'ResourceAwarePool(HOST, initial_size=2MiB, next_size=1MiB, heuristic=never)'";
  FILE *f = trace_file(path, sizeof path, "lag-same.jsonl");
  unsigned long long t = 1000;
  for (unsigned k = 0; k < 32; k++, t += 10) line(f, t, "alloc", "pool", 1, 0x100000 + 0x10000ull * k, 1 << 16, NULL);
  for (unsigned k = 0; k < 32; k += 2, t += 10) line(f, t, "dealloc", "pool", 1, 0x100000 + 0x10000ull * k, 0, NULL);
  line(f, 1000000, "alloc", "pool", 2, 0x900000, 1 << 16, NULL);
  line(f, 1001000, "dealloc", "pool", 2, 0x900000, 0, NULL);
  RAP_CHECK(fclose(f) == 0);
  snprintf(args, sizeof args, "replay %s --spec %s --lag-us 1 --json", path, spec);
  for (int run = 0; run < 10; run++) {
    tool_run r;
    run_tool_measured(&r, args);
    RAP_CHECK_EQ(r.status, 0);
    RAP_CHECK_STR(r.out, "\"chunks_at_end\":1,");
  }
  remove(path);
}

/* A trace that allocates a pointer again before its free (a free the trace lost, or a hostile
 * file), or allocates at pointer 0: the replay frees what it made for the first when the second
 * comes, so what it reports as live is what the trace says, and it ends with nothing left live in
 * its allocator (before, each such block was left there: the library warned of leaked blocks). */
RAP_TEST(TraceTool, ReplayOfAPointerAllocatedTwiceLeavesNothingLive) {
  char path[256], args[640];
  FILE *f = trace_file(path, sizeof path, "twice.jsonl");
  unsigned long long t = 1;
  for (int k = 0; k < 4; k++) {
    line(f, t++, "alloc", "pool", 1, 0x1000, 1 << 20, NULL);
    line(f, t++, "alloc", "pool", 1, 0x1000, 1 << 20, NULL);
    line(f, t++, "dealloc", "pool", 1, 0x1000, 0, NULL);
    line(f, t++, "alloc", "pool", 1, 0, 1 << 20, NULL);
  }
  RAP_CHECK(fclose(f) == 0);
  snprintf(args, sizeof args, "replay %s --spec 'QuickPool(HOST, initial_size=8MiB)' --json", path);
  tool_run r;
  run_tool_measured(&r, args);
  RAP_CHECK_EQ(r.status, 0);
  if (strstr(r.out, "leaked") != NULL) rap_test_fail(__FILE__, __LINE__, "the replay left blocks live: %s", r.out);
  RAP_CHECK_STR(r.out, "\"peak_live\":1048576,");
  remove(path);
}

/* A block on the largest resource id a trace line can carry (a damaged file: strtoll stops at
 * 2^63 - 1), then its free: plot gave the id back through id + 1 - 1 in signed arithmetic, an
 * overflow (the sanitizer build stopped there, status 1). */
RAP_TEST(TraceTool, PlotOfTheLargestResourceIdIsDrawn) {
  char path[256], svg[256], args[640];
  FILE *f = trace_file(path, sizeof path, "big-id.jsonl");
  line(f, 1, "alloc", "pool", 9223372036854775807LL, 0x1000, 4096, NULL);
  line(f, 2, "dealloc", "pool", 9223372036854775807LL, 0x1000, 0, NULL);
  fputs("{\"t\":3,\"th\":1,\"ev\":\"alloc\",\"a\":\"pool\",\"d\":0,\"r\":99999999999999999999,"
        "\"p\":\"0x2000\",\"n\":64}\n{\"t\":4,\"th\":1,\"ev\":\"dealloc\",\"a\":\"pool\",\"d\":0,"
        "\"r\":99999999999999999999,\"p\":\"0x2000\",\"n\":0}\n", f);
  RAP_CHECK(fclose(f) == 0);
  tt_path(svg, sizeof svg, "big-id.svg");
  snprintf(args, sizeof args, "plot %s -o %s", path, svg);
  tool_run r;
  run_tool_measured(&r, args);
  RAP_CHECK_EQ(r.status, 0);
  RAP_CHECK_STR(r.out, "wrote");
  remove(path);
  remove(svg);
}
