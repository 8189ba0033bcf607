/* trace_stack.c — the call stack of a user's allocation in the trace, when asked for.
 *
 * RAP_TRACE_STACK=N (1 to 32, read when a trace starts) adds to each user's `alloc` line the
 * innermost N frames of the caller's stack, above rap's own: `"stack":"MODULE+0xADDR ..."`, each
 * frame the file of the module it lies in (dladdr) and its address as that file's symbols give it
 * (the offset from the module's base, plus the lowest loaded address for an executable that is not
 * position-independent), so that `rap-trace stacks` can name it with addr2line in another process,
 * after this one is gone. backtrace(3) walks the stack; its first call loads libgcc, so the depth is
 * read, and the walk done once, at the start (never inside a signal handler or under the trace's
 * lock). Off (unset), nothing runs.
 *
 * A binding may add an interpreter's frames: rap_trace_set_pystack hands this thread's frames
 * (rap.torch gathers Python's before it takes any lock, since gathering can run Python code), and
 * each user's alloc line carries them as "pystack", cut at a whole frame where the line is full.
 */
#include "rap_internal.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <execinfo.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STACK_MAX = 32, OWN_FRAMES_MAX = 16 };

static int stack_depth;   /* atomic: 0 off, else the frames each alloc line carries */

int rapi_trace_stack_read_env(int *out) {
  const char *v = getenv("RAP_TRACE_STACK");
  int depth = 0;
  if (v != NULL && *v != '\0') {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (*end != '\0' || errno != 0 || n < 0 || n > STACK_MAX)
      return rapi_fail(RAP_ERR_INVALID, "rap_trace_start: RAP_TRACE_STACK is a number of frames from 0 "
                       "to %d, not '%s'; nothing was changed", STACK_MAX, v);
    depth = (int)n;
    void *warm[2];
    (void)backtrace(warm, 2);   /* loads the unwinder now, outside any lock */
  }
  *out = depth;
  return RAP_OK;
}

void rapi_trace_stack_set(int depth) { __atomic_store_n(&stack_depth, depth, __ATOMIC_RELAXED); }

/* The address of pc as the symbols of its module name it. */
static uintptr_t module_address(const Dl_info *info, uintptr_t pc) {
  const ElfW(Ehdr) *eh = info->dli_fbase;
  uintptr_t off = pc - (uintptr_t)info->dli_fbase;
  if (eh->e_type != ET_EXEC) return off;
  const ElfW(Phdr) *ph = (const ElfW(Phdr) *)((const char *)eh + eh->e_phoff);
  uintptr_t low = UINTPTR_MAX;
  for (int i = 0; i < eh->e_phnum; i++)
    if (ph[i].p_type == PT_LOAD && ph[i].p_vaddr < low) low = ph[i].p_vaddr;
  return low == UINTPTR_MAX ? pc : off + (low & ~(uintptr_t)0xfff);
}

_Thread_local const void *rapi_trace_caller;

size_t rapi_trace_stack(char *line, size_t len, size_t cap) {
  int depth = __atomic_load_n(&stack_depth, __ATOMIC_RELAXED);
  if (depth == 0) return len;
  void *pcs[STACK_MAX + OWN_FRAMES_MAX];
  int n = backtrace(pcs, depth + OWN_FRAMES_MAX);
  /* rap's own frames are the innermost: the user's is the one rap_allocate returns to. */
  int first = n;
  for (int i = 0; i < n && first == n; i++)
    if (pcs[i] == rapi_trace_caller) first = i;
  if (first == n) first = n < 3 ? n : 3;   /* not found: past this function, rapi_trace, the entry */
  static const char key[] = ",\"stack\":\"";
  if (len + sizeof key + 2 > cap) return len;
  memcpy(line + len, key, sizeof key - 1);
  len += sizeof key - 1;
  size_t start = len;
  for (int i = first; i < n && i < first + depth; i++) {
    Dl_info info;
    if (dladdr(pcs[i], &info) == 0 || info.dli_fname == NULL || info.dli_fbase == NULL) continue;
    char frame[64];
    int w = snprintf(frame, sizeof frame, "+0x%lx", (unsigned long)module_address(&info, (uintptr_t)pcs[i]));
    size_t fl = strlen(info.dli_fname);
    if (len + 1 + fl + (size_t)w + 2 > cap || strchr(info.dli_fname, '"') || strchr(info.dli_fname, ' ') ||
        strchr(info.dli_fname, '\\'))
      break;   /* no room, or a path the field cannot hold as it is */
    if (len > start) line[len++] = ' ';
    memcpy(line + len, info.dli_fname, fl);
    len += fl;
    memcpy(line + len, frame, (size_t)w);
    len += (size_t)w;
  }
  line[len++] = '"';
  return len;
}

static _Thread_local const char *pystack;   /* the caller's frames, or NULL */

int rap_trace_set_pystack(const char *frames) {
  pystack = frames != NULL && *frames != '\0' ? frames : NULL;
  return RAP_OK;
}

/* ,"pystack":"..." with the frames escaped for JSON, as many whole frames as fit below cap. */
size_t rapi_trace_pystack(char *line, size_t len, size_t cap) {
  const char *s = pystack;
  static const char key[] = ",\"pystack\":\"";
  if (s == NULL || len + sizeof key + 8 > cap) return len;
  size_t start = len, whole = 0;   /* whole: the length after the last complete frame */
  memcpy(line + len, key, sizeof key - 1);
  len += sizeof key - 1;
  for (;; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '\0' || c == '\n') whole = len;
    if (c == '\0' || len + 8 > cap) break;
    if (c == '"' || c == '\\') {
      line[len++] = '\\';
      line[len++] = (char)c;
    } else if (c == '\n') {
      line[len++] = '\\';
      line[len++] = 'n';
    } else if (c < 0x20) {
      len += (size_t)snprintf(line + len, cap - len, "\\u%04x", c);
    } else {
      line[len++] = (char)c;
    }
  }
  if (whole == 0) return start;   /* not one frame fits */
  line[whole++] = '"';
  return whole;
}
