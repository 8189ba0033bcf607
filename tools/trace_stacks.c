/* trace_stacks.c — where the memory was allocated (rap-trace stacks).
 *
 * A trace written with RAP_TRACE_STACK=N carries on each user's alloc line the caller's innermost
 * frames, "MODULE+0xADDR ...". The user's allocations (one allocator's, or all) are grouped by
 * stack; each group's live bytes are followed over the trace, and the groups are printed by their
 * peak, largest first, with their count and bytes in all. Frames are named by addr2line (binutils)
 * where it is on the PATH and the module still exists: function and file:line; otherwise they are
 * printed as written. addr2line is run without a shell, the module and addresses as arguments.
 * A line may carry an interpreter's frames too ("pystack": "FILE:LINE FUNCTION" lines, innermost
 * first; rap.torch writes Python's): a group is one pair of the two, its Python frames printed
 * after its C frames (which are the inner ones).
 */
#define _POSIX_C_SOURCE 200809L
#include "trace_stacks.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef struct group {
  uint32_t site;     /* 1 + its index in t->sites */
  size_t count;
  uint64_t bytes, live, peak;
} group;

static int by_peak(const void *x, const void *y) {
  const group *a = x, *b = y;
  if (a->peak != b->peak) return a->peak < b->peak ? 1 : -1;
  return (a->bytes < b->bytes) - (a->bytes > b->bytes);
}

static void human(char *buf, size_t cap, double bytes) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (bytes >= 1024 && i < 4) bytes /= 1024, i++;
  snprintf(buf, cap, i == 0 ? "%.0f %s" : "%.2f %s", bytes, u[i]);
}

/* addr2line -f -C -e MODULE ADDR: the function and file:line of one frame, in out ("" if it is
 * not there to ask, or knows nothing). ADDR is a return address: the call is the byte before. */
static void name_frame(const char *module, unsigned long long addr, char *out, size_t cap) {
  out[0] = '\0';
  if (access(module, R_OK) != 0) return;
  char a[32];
  snprintf(a, sizeof a, "0x%llx", addr > 0 ? addr - 1 : addr);
  char *argv[] = {"addr2line", "-f", "-C", "-e", (char *)module, a, NULL};
  int fds[2];
  if (pipe(fds) != 0) return;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int st = posix_spawnp(&pid, "addr2line", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  char got[1024];
  size_t n = 0;
  ssize_t r;
  while (st == 0 && n + 1 < sizeof got && (r = read(fds[0], got + n, sizeof got - 1 - n)) > 0) n += (size_t)r;
  close(fds[0]);
  if (st != 0) return;
  waitpid(pid, NULL, 0);
  got[n] = '\0';
  char *nl = strchr(got, '\n');
  if (nl == NULL || strncmp(got, "??", 2) == 0) return;
  *nl = '\0';
  char *where = nl + 1, *end = strchr(where, '\n');
  if (end != NULL) *end = '\0';
  snprintf(out, cap, "%s at %s", got, where);
}

static void print_stack(const char *s) {
  while (*s != '\0') {
    size_t len = strcspn(s, " ");
    char frame[1024];
    snprintf(frame, sizeof frame, "%.*s", (int)(len < sizeof frame ? len : sizeof frame - 1), s);
    char *plus = strrchr(frame, '+'), named[1200];
    named[0] = '\0';
    if (plus != NULL && plus[1] == '0' && plus[2] == 'x') {
      *plus = '\0';
      name_frame(frame, strtoull(plus + 1, NULL, 16), named, sizeof named);
      *plus = '+';
    }
    printf("      %s\n", named[0] ? named : frame);
    s += len;
    while (*s == ' ') s++;
  }
}

/* Prints the first frame of a "pystack" (JSON-escaped as written, frames cut by an escaped
 * newline) as "FUNCTION at FILE:LINE"; returns where the next frame begins. */
static const char *print_pyframe(const char *s) {
  char frame[1024];
  size_t n = 0;
  for (; *s != '\0' && !(s[0] == '\\' && s[1] == 'n'); s++) {
    char c = *s;
    if (c == '\\' && s[1] != '\0') {   /* \" \\ and \u00XX: what rap's writer escapes */
      c = *++s;
      if (c == 'u' && strspn(s + 1, "0123456789abcdefABCDEF") >= 4) {
        char hex[5] = {s[1], s[2], s[3], s[4], '\0'};
        c = (char)strtol(hex, NULL, 16);
        s += 4;
      }
    }
    if (n + 1 < sizeof frame) frame[n++] = c;
  }
  frame[n] = '\0';
  char *sp = strrchr(frame, ' ');
  if (sp != NULL) *sp = '\0';
  printf("      %s at %s [python]\n", sp != NULL ? sp + 1 : "?", frame);
  return s[0] == '\\' ? s + 2 : s;
}

static void print_site(const trace *t, trace_site site) {
  if (site.stack != 0) print_stack(t->stacks[site.stack - 1]);
  for (const char *s = site.pystack != 0 ? t->stacks[site.pystack - 1] : ""; *s != '\0';) s = print_pyframe(s);
}

int trace_stacks(const trace *t, const char *allocator, size_t top) {
  int a = -1;
  if (allocator != NULL && (a = trace_name(t, allocator)) < 0) {
    fprintf(stderr, "rap-trace: the trace has no allocator '%s'\n", allocator);
    return 1;
  }
  if (t->nsites == 0) {
    fprintf(stderr, "rap-trace: the trace has no stacks: write it with RAP_TRACE_STACK=N (frames, 1 "
                    "to 32) set beside RAP_TRACE, or, for Python's frames under rap.torch, "
                    "RAP_TRACE_PYTHON_STACK=N\n");
    return 1;
  }
  group *g = calloc(t->nsites, sizeof *g);
  kmap sizes = {0}, stacks = {0};
  if (g == NULL) {
    fprintf(stderr, "rap-trace: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < t->nsites; i++) g[i].site = (uint32_t)i + 1;
  size_t without = 0;
  for (size_t i = 0; i < t->n; i++) {
    const te *e = &t->ev[i];
    if ((e->kind != TE_ALLOC && e->kind != TE_DEALLOC) || e->d != 0 || e->skip || (a >= 0 && e->a != a))
      continue;
    uint64_t n = 0, s = 0;
    if (e->kind == TE_ALLOC) {
      if (e->site == 0) {
        without++;
        continue;
      }
      group *x = &g[e->site - 1];
      if (kmap_put(&sizes, e->p, e->a, 0, e->n) != 0 || kmap_put(&stacks, e->p, e->a, 0, e->site) != 0) {
        fprintf(stderr, "rap-trace: out of memory\n");
        kmap_free(&sizes);
        kmap_free(&stacks);
        free(g);
        return 1;
      }
      x->count++;
      x->bytes += e->n;
      x->live += e->n;
      if (x->live > x->peak) x->peak = x->live;
    } else if (kmap_del(&sizes, e->p, e->a, 0, &n) && kmap_del(&stacks, e->p, e->a, 0, &s)) {
      g[s - 1].live -= n;
    }
  }
  kmap_free(&sizes);
  kmap_free(&stacks);
  qsort(g, t->nsites, sizeof *g, by_peak);
  printf("allocations of %s by where they were made (%zu stacks), by peak live bytes:\n",
         a >= 0 ? t->names[a] : "every allocator", t->nsites);
  for (size_t i = 0; i < t->nsites && i < top; i++) {
    char pk[32], all[32];
    human(pk, sizeof pk, (double)g[i].peak);
    human(all, sizeof all, (double)g[i].bytes);
    printf("  #%zu peak live %s, %zu allocation%s, %s in all\n", i + 1, pk, g[i].count,
           g[i].count == 1 ? "" : "s", all);
    print_site(t, t->sites[g[i].site - 1]);
  }
  if (without) printf("  (%zu allocations carry no stack)\n", without);
  free(g);
  return 0;
}
