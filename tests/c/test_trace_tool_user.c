/* test_trace_tool_user.c — rap-trace as a new user meets it in the first hour.
 *
 * What the first hour found: a plot of one allocator drew every other pool (and took its y axis
 * from theirs) and said nothing of what it wrote; a trace of identical allocate+free pairs was
 * refused a plan; a chunk grown in place ten times was counted as ten chunks; a replay's held/live
 * of 256 came from QuickPool's first chunk (512 MiB unless told) and nothing said so. Each is
 * run here on a trace written by hand, through the program itself.
 */
#define _POSIX_C_SOURCE 200809L   /* popen */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef RAP_TRACE_TOOL
#error "RAP_TRACE_TOOL: the path of rap-trace, from tests/CMakeLists.txt"
#endif

static void tu_path(char *buf, size_t cap, const char *what) {
  const char *dir = getenv("TMPDIR");
  snprintf(buf, cap, "%s/rap-user-%ld-%s", dir && *dir ? dir : "/tmp", (long)getpid(), what);
}

/* rap-trace with the arguments (a shell fragment): its exit status, both streams in out. */
static int tool(const char *args, char *out, size_t cap) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s %s 2>&1", RAP_TRACE_TOOL, args);
  FILE *p = popen(cmd, "r");
  RAP_CHECK(p != NULL);
  size_t n = fread(out, 1, cap - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static FILE *begin(char *path, size_t cap, const char *what) {
  tu_path(path, cap, what);
  FILE *f = fopen(path, "w");
  RAP_CHECK(f != NULL);
  fputs("{\"t\":0,\"ev\":\"trace\",\"version\":\"0.1.0\",\"clock\":\"monotonic ns\"}\n", f);
  return f;
}

/* A user's call (alloc/dealloc) of allocator a on the host. */
static void call(FILE *f, unsigned long long t, const char *ev, const char *a, unsigned long long p,
                 unsigned long long n) {
  fprintf(f, "{\"t\":%llu,\"th\":1,\"ev\":\"%s\",\"a\":\"%s\",\"d\":0,\"r\":0,\"rk\":\"host\",\"p\":\"0x%llx\","
             "\"n\":%llu}\n", t, ev, a, p, n);
}

/* A pool's chunk event: grow or release, held after it, in place or a whole chunk. */
static void chunk(FILE *f, unsigned long long t, const char *ev, const char *a, unsigned long long p,
                  unsigned long long n, unsigned long long held, int in_place) {
  fprintf(f, "{\"t\":%llu,\"th\":1,\"ev\":\"%s\",\"a\":\"%s\",\"r\":null,\"p\":\"0x%llx\",\"n\":%llu,"
             "\"held\":%llu%s}\n", t, ev, a, p, n, held, in_place ? ",\"in_place\":true" : "");
}

static long file_text(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  RAP_CHECK(f != NULL);
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fclose(f);
  return size;
}

/* Two pools, one of 1 GiB and one of 1 MiB: a plot of the small one draws its lines alone, on an
 * axis of its own size, and says what it wrote. */
RAP_TEST(TraceToolUser, PlotOfOneAllocatorDrawsItAloneAndSaysWhatItWrote) {
  char path[256], svg[256], args[768], out[4096];
  FILE *f = begin(path, sizeof path, "two-pools.jsonl");
  chunk(f, 10, "grow", "big", 0x100000000ull, 1ull << 30, 1ull << 30, 0);
  call(f, 20, "alloc", "big", 0x100000000ull, 512ull << 20);
  chunk(f, 30, "grow", "small", 0x7000000ull, 1ull << 20, 1ull << 20, 0);
  call(f, 40, "alloc", "small", 0x7000000ull, 64 << 10);
  call(f, 50, "dealloc", "small", 0x7000000ull, 0);
  call(f, 60, "dealloc", "big", 0x100000000ull, 0);
  fclose(f);
  tu_path(svg, sizeof svg, "small.svg");
  snprintf(args, sizeof args, "plot %s -o %s --allocator small", path, svg);
  RAP_CHECK_EQ(tool(args, out, sizeof out), 0);
  RAP_CHECK_STR(out, "rap-trace: wrote ");
  RAP_CHECK_STR(out, svg);
  RAP_CHECK_STR(out, "KiB)");   /* its size */
  static char pic[1 << 20];
  long size = file_text(svg, pic, sizeof pic);
  RAP_CHECK(size > 0 && (size_t)size < sizeof pic);
  RAP_CHECK_STR(pic, "held by 'small'");
  if (strstr(pic, "'big'") != NULL) rap_test_fail(__FILE__, __LINE__, "the plot of 'small' draws 'big'");
  if (strstr(pic, "GiB") != NULL) rap_test_fail(__FILE__, __LINE__, "the plot of 'small' has an axis in GiB");
  RAP_CHECK_STR(pic, "MiB");   /* its own top: 1 MiB held */
  /* Without --allocator both pools are drawn. */
  snprintf(args, sizeof args, "plot %s -o %s", path, svg);
  RAP_CHECK_EQ(tool(args, out, sizeof out), 0);
  file_text(svg, pic, sizeof pic);
  RAP_CHECK_STR(pic, "held by 'big'");
  RAP_CHECK_STR(pic, "held by 'small'");
  remove(svg);
  remove(path);
}

/* 4000 identical allocate+free pairs: an iteration of one allocation, planned. */
RAP_TEST(TraceToolUser, IdenticalPairsArePlanned) {
  char path[256], plan[256], args[768], out[4096];
  FILE *f = begin(path, sizeof path, "pairs.jsonl");
  unsigned long long t = 1;
  for (int i = 0; i < 4000; i++) {
    call(f, t++, "alloc", "pool", 0x5000, 4096);
    call(f, t++, "dealloc", "pool", 0x5000, 0);
  }
  fclose(f);
  tu_path(plan, sizeof plan, "pairs.plan");
  snprintf(args, sizeof args, "plan %s -o %s", path, plan);
  int st = tool(args, out, sizeof out);
  if (st != 0) rap_test_fail(__FILE__, __LINE__, "plan of identical pairs refused: %s", out);
  RAP_CHECK_STR(out, "plan of 'pool': 1 allocation an iteration");
  RAP_CHECK_STR(out, "4000 iterations");
  RAP_CHECK(access(plan, R_OK) == 0);
  /* The plan is one Planned reads, and serves the pairs from its arena. */
  char spec[512];
  snprintf(spec, sizeof spec, "Planned(QuickPool(HOST), plan=%s)", plan);
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", spec, &a));
  for (int i = 0; i < 100; i++) {
    void *p = NULL;
    RAP_CHECK_OK(rap_allocate(a, &p, 4096, NULL));
    RAP_CHECK_OK(rap_deallocate(a, p, NULL));
  }
  RAP_CHECK_OK(rap_allocator_destroy(a));
  RAP_CHECK_OK(rap_manager_destroy(rm));
  remove(plan);
  remove(path);
}

/* One chunk grown in place nine times (a growable platform): one chunk taken. */
RAP_TEST(TraceToolUser, SummaryCountsGrowthInPlaceApart) {
  char path[256], args[768], out[4096];
  FILE *f = begin(path, sizeof path, "in-place.jsonl");
  unsigned long long base = 0x200000000ull, mb = 1ull << 20, t = 1;
  chunk(f, t++, "grow", "pool", base, 2 * mb, 2 * mb, 0);
  for (unsigned long long i = 0; i < 10; i++) {
    call(f, t++, "alloc", "pool", base + i * 2 * mb, 2 * mb);
    if (i > 0) chunk(f, t++, "grow", "pool", base + (i + 1) * 2 * mb, 2 * mb, (i + 2) * 2 * mb, 1);
  }
  fclose(f);
  snprintf(args, sizeof args, "summary %s", path);
  RAP_CHECK_EQ(tool(args, out, sizeof out), 0);
  RAP_CHECK_STR(out, "1 chunk taken, grown in place 9 times");
  remove(path);
}

/* A trace that holds 4 KiB replayed through a QuickPool of the default first chunk: the replay says
 * that held/live is the first chunk's; where the pool grew past its first chunk it says nothing. */
RAP_TEST(TraceToolUser, ReplaySaysHeldIsTheFirstChunk) {
  char path[256], args[1024], out[4096];
  FILE *f = begin(path, sizeof path, "small.jsonl");
  unsigned long long t = 1;
  for (int i = 0; i < 8; i++) call(f, t++, "alloc", "pool", 0x10000ull + 0x10000ull * (unsigned)i, 64 << 10);
  for (int i = 0; i < 8; i++) call(f, t++, "dealloc", "pool", 0x10000ull + 0x10000ull * (unsigned)i, 0);
  fclose(f);
  snprintf(args, sizeof args, "replay %s --spec 'QuickPool(HOST)'", path);
  RAP_CHECK_EQ(tool(args, out, sizeof out), 0);
  RAP_CHECK_STR(out, "held/live 1024.000");
  RAP_CHECK_STR(out, "note: held is the first chunk (512.00 MiB)");
  RAP_CHECK_STR(out, "initial_size");
  snprintf(args, sizeof args, "replay %s --spec 'QuickPool(HOST, initial_size=64KiB, next_size=64KiB)'", path);
  RAP_CHECK_EQ(tool(args, out, sizeof out), 0);
  if (strstr(out, "note:") != NULL) rap_test_fail(__FILE__, __LINE__, "a pool that grew got the note: %s", out);
  snprintf(args, sizeof args, "replay %s --spec 'QuickPool(HOST)' --json", path);
  RAP_CHECK_EQ(tool(args, out, sizeof out), 0);
  RAP_CHECK_STR(out, "\"first_held\":5368");   /* 512 MiB and what alignment adds */
  remove(path);
}

/* The same from a trace rap wrote: a QuickPool over HOST_VMM grows its one chunk in place, and
 * its growth lines say so ("in_place":true). */
RAP_TEST(TraceToolUser, AGrowablePoolsChunkIsOneChunk) {
  char path[256], args[768], out[4096];
  tu_path(path, sizeof path, "vmm.jsonl");
  RAP_CHECK_OK(rap_trace_start(path));
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "vq", "QuickPool(HOST_VMM, initial_size=2MiB, next_size=2MiB)", &a));
  void *p[10];
  for (int i = 0; i < 10; i++) RAP_CHECK_OK(rap_allocate(a, &p[i], 2 << 20, NULL));
  for (int i = 0; i < 10; i++) RAP_CHECK_OK(rap_deallocate(a, p[i], NULL));
  RAP_CHECK_OK(rap_allocator_destroy(a));
  RAP_CHECK_OK(rap_manager_destroy(rm));
  RAP_CHECK_OK(rap_trace_stop());
  snprintf(args, sizeof args, "summary %s", path);
  RAP_CHECK_EQ(tool(args, out, sizeof out), 0);
  RAP_CHECK_STR(out, "'vq': 20 user calls, peak live 20.00 MiB, 1 chunk taken, grown in place 9 times");
  remove(path);
}

/* ---- RAP_TRACE_STACK: where each allocation was made -------------------------------------------- */

/* Allocates three blocks from a frame of its own (no tail call: its result is used after). */
__attribute__((noinline)) static int the_users_allocating_site(rap_allocator *a, void **p) {
  int st = RAP_OK;
  for (int i = 0; i < 3 && st == RAP_OK; i++) st = rap_allocate(a, &p[i], 4096, NULL);
  __asm__ volatile("" ::: "memory");
  return st;
}

RAP_TEST(TraceToolUser, StacksSayWhereTheMemoryWasAllocated) {
  char path[256], args[768], out[8192];
  tu_path(path, sizeof path, "stacks.jsonl");
  RAP_CHECK(setenv("RAP_TRACE_STACK", "33", 1) == 0);
  RAP_CHECK_STATUS(rap_trace_start(path), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "RAP_TRACE_STACK is a number of frames from 0 to 32, not '33'");
  RAP_CHECK(setenv("RAP_TRACE_STACK", "6", 1) == 0);
  RAP_CHECK_OK(rap_trace_start(path));
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "q", "ThreadSafe(QuickPool(HOST, initial_size=1MiB))", &a));
  void *p[3];
  RAP_CHECK_OK(the_users_allocating_site(a, p));
  for (int i = 0; i < 3; i++) RAP_CHECK_OK(rap_deallocate(a, p[i], NULL));
  RAP_CHECK_OK(rap_allocator_destroy(a));
  RAP_CHECK_OK(rap_manager_destroy(rm));
  RAP_CHECK_OK(rap_trace_stop());
  RAP_CHECK(unsetenv("RAP_TRACE_STACK") == 0);
  /* The user's alloc lines carry the stack; the pool's inside them do not. */
  static char text[1 << 16];
  file_text(path, text, sizeof text);
  int user = 0, inner = 0;
  for (char *l = strstr(text, "\"ev\":\"alloc\""); l != NULL; l = strstr(l + 1, "\"ev\":\"alloc\"")) {
    char *end = strchr(l, '\n'), *st = strstr(l, "\"stack\":\"");
    int has = st != NULL && st < end;
    if (strstr(l, "\"d\":0") != NULL && strstr(l, "\"d\":0") < end) user += has;
    else inner += has;
  }
  RAP_CHECK_EQ(user, 3);
  RAP_CHECK_EQ(inner, 0);
  snprintf(args, sizeof args, "stacks %s --allocator q", path);
  RAP_CHECK_EQ(tool(args, out, sizeof out), 0);
  RAP_CHECK_STR(out, "#1 peak live 12.00 KiB, 3 allocations, 12.00 KiB in all");
  if (system("command -v addr2line > /dev/null 2>&1") == 0)
    RAP_CHECK_STR(out, "the_users_allocating_site at ");   /* named, with its file and line */
  else
    RAP_CHECK_STR(out, "rap_host_tests+0x");
  /* A trace without stacks says how to write one. */
  char plain[256];
  FILE *f = begin(plain, sizeof plain, "no-stacks.jsonl");
  call(f, 1, "alloc", "pool", 0x5000, 64);
  fclose(f);
  snprintf(args, sizeof args, "stacks %s", plain);
  RAP_CHECK_EQ(tool(args, out, sizeof out), 1);
  RAP_CHECK_STR(out, "RAP_TRACE_STACK=N");
  remove(plain);
  remove(path);
}

/* ---- Python's frames (rap_trace_set_pystack, as rap.torch passes them) ---------------------- */

RAP_TEST(TraceToolUser, PythonFramesGroupAllocationsByWhereTheyWereMade) {
  char path[256], args[768], out[8192];
  tu_path(path, sizeof path, "pystack.jsonl");
  RAP_CHECK_EQ(rap_trace_active(), 0);
  RAP_CHECK_OK(rap_trace_start(path));
  RAP_CHECK_EQ(rap_trace_active(), 1);
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "q", "ThreadSafe(QuickPool(HOST, initial_size=1MiB))", &a));
  void *p[4];
  /* Two sites: one frame's path holds a quote and a backslash, which the line escapes. */
  RAP_CHECK_OK(rap_trace_set_pystack("/m/layer.py:7 Linear.forward\n/m/tr\"ain\\.py:12 step"));
  RAP_CHECK_OK(rap_allocate(a, &p[0], 4096, NULL));
  RAP_CHECK_OK(rap_allocate(a, &p[1], 4096, NULL));
  RAP_CHECK_OK(rap_trace_set_pystack("/m/data.py:30 load"));
  RAP_CHECK_OK(rap_allocate(a, &p[2], 1024, NULL));
  RAP_CHECK_OK(rap_trace_set_pystack(NULL));
  RAP_CHECK_OK(rap_allocate(a, &p[3], 64, NULL));
  /* Frames too long for one line are cut at a whole frame. */
  static char huge[40000];
  for (size_t n = 0; n + 40 < sizeof huge;)
    n += (size_t)snprintf(huge + n, sizeof huge - n, "%s/m/deep.py:%zu f", n ? "\n" : "", n);
  RAP_CHECK_OK(rap_trace_set_pystack(huge));
  void *q = NULL;
  RAP_CHECK_OK(rap_allocate(a, &q, 64, NULL));
  RAP_CHECK_OK(rap_trace_set_pystack(NULL));
  RAP_CHECK_OK(rap_deallocate(a, q, NULL));
  for (int i = 0; i < 4; i++) RAP_CHECK_OK(rap_deallocate(a, p[i], NULL));
  RAP_CHECK_OK(rap_allocator_destroy(a));
  RAP_CHECK_OK(rap_manager_destroy(rm));
  RAP_CHECK_OK(rap_trace_stop());
  RAP_CHECK_EQ(rap_trace_active(), 0);
  static char text[1 << 17];
  file_text(path, text, sizeof text);
  RAP_CHECK_STR(text, "\"pystack\":\"/m/layer.py:7 Linear.forward\\n/m/tr\\\"ain\\\\.py:12 step\"");
  /* Only the user's lines carry them (the pool's growth inside the first call does not). */
  int with = 0;
  for (char *l = strstr(text, "\"pystack\""); l != NULL; l = strstr(l + 1, "\"pystack\"")) with++;
  RAP_CHECK_EQ(with, 4);
  char *cut = strstr(text, "\"pystack\":\"/m/deep.py:0 f");
  RAP_CHECK(cut != NULL);
  char *end = strchr(cut, '\n');
  RAP_CHECK(end != NULL && end - cut < 8192 && end[-1] == '}' && end[-2] == '"' && end[-3] == 'f');
  snprintf(args, sizeof args, "stacks %s --allocator q --top 2", path);   /* not the long one */
  RAP_CHECK_EQ(tool(args, out, sizeof out), 0);
  RAP_CHECK_STR(out, "#1 peak live 8.00 KiB, 2 allocations, 8.00 KiB in all\n"
                     "      Linear.forward at /m/layer.py:7 [python]\n"
                     "      step at /m/tr\"ain\\.py:12 [python]\n");
  RAP_CHECK_STR(out, "#2 peak live 1.00 KiB, 1 allocation, 1.00 KiB in all\n"
                     "      load at /m/data.py:30 [python]\n");
  RAP_CHECK_STR(out, "(1 allocations carry no stack)");
  remove(path);
}
