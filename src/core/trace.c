/* trace.c — the event trace: one JSON object per line for everything the allocators do.
 *
 * One trace per process: RAP_TRACE=FILE opens it when the first manager is made, rap_trace_start
 * and rap_trace_stop open and close it from code. Each line is formatted on the caller's stack and
 * written under one mutex (a leaf: no other lock is taken under it), so lines never interleave
 * and a stop cannot close the file under a writer. Starts and stops are serialised by a second
 * mutex, held while a file is closed and the next opened: the old file is closed (flushed) before
 * the new one is truncated, so a file reopened never gets an earlier cycle's buffer written past
 * its end, and a stop returns with the file whole. Each start or stop begins a new generation; a
 * line formatted in one generation is not written in another. Lines go into one buffer that only
 * ever holds whole lines and reaches the file by write(2) when full, at a flush, at a stop and
 * when the process dies of a fatal signal (abort(), a crash: the handler writes the buffer and
 * hands the signal on), so the file ends with a whole line and every event before the signal. A
 * child made by fork() does not trace (it drops the parent's buffer and file). With
 * RAP_TRACE_MAX_ENTRIES=N set when the trace starts, the trace is a ring of the last N lines in
 * memory instead, and the file is rewritten with the header and the ring at a flush, at an
 * out-of-memory event, at a stop, at exit and at a fatal signal: it can be left on. Times are
 * nanoseconds of the monotonic clock since the trace began; threads are numbered in the order they first traced. Off, the only cost is
 * the branch on rapi_slow in the entry points (and on rapi_tracing_on at the pools' rare events).
 * docs/trace.md lists the events and their fields.
 */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime */
#include "rap_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int rapi_slow;
int rapi_tracing_on;
_Thread_local unsigned rapi_trace_depth;

static pthread_mutex_t control_lock = PTHREAD_MUTEX_INITIALIZER;   /* start, stop; before trace_lock */
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static int trace_fd = -1;       /* under trace_lock; read by the fatal-signal handler */
static char trace_buf[1 << 16]; /* whole lines only, not yet written */
static size_t trace_len;        /* under trace_lock; stored with release after the bytes */
static bool trace_failed;       /* under trace_lock: a write failed since the start */
static bool trace_regular;      /* under trace_lock: the file is a regular one (not /dev/null, a pipe) */
typedef struct ring_slot {
  char *line;
  uint32_t len, cap;
} ring_slot;
static ring_slot *ring;         /* under trace_lock: RAP_TRACE_MAX_ENTRIES lines, or NULL */
static size_t ring_n, ring_next, ring_count;   /* under trace_lock: size, next slot, lines held */
static size_t ring_header_len;  /* under trace_lock: the header's bytes, first in trace_buf */
static uint64_t trace_t0;       /* written under trace_lock, read atomically */
static uint64_t trace_gen;      /* written under trace_lock, read atomically: bumped at each start and stop */
static unsigned next_thread;    /* atomic */
static _Thread_local unsigned thread_no;   /* 0: not numbered yet */

/* The debug level (RAP_DEBUG) lives here, beside the word it is folded into. */
int rapi_debug;

void rapi_debug_read_env(void) {
  const char *v = getenv("RAP_DEBUG");
  int level = v != NULL && v[0] >= '0' && v[0] <= '9' ? atoi(v) : 0;
  if (level != rapi_debug_level()) __atomic_store_n(&rapi_debug, level, __ATOMIC_RELAXED);
  rapi_slow_update();
}

void rapi_slow_update(void) {
  int v = (rapi_debug_level() > 0) | (rapi_tracing() << 1);
  __atomic_store_n(&rapi_slow, v, __ATOMIC_RELAXED);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Appends s to buf as a JSON string's contents, within cap; returns the new length. */
static size_t put_escaped(char *buf, size_t len, size_t cap, const char *s) {
  for (; s != NULL && *s != '\0' && len + 7 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      buf[len++] = '\\';
      buf[len++] = (char)c;
    } else if (c < 0x20) {
      len += (size_t)snprintf(buf + len, cap - len, "\\u%04x", c);
    } else {
      buf[len++] = (char)c;
    }
  }
  return len;
}

/* Writes n bytes whole (through EINTR and short writes); false when the file refused them. */
static bool write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

/* The ring's file: the header (first in trace_buf) and the ring's lines, oldest first, replacing
 * what the file held. No lock taken: the caller holds trace_lock, or is the fatal-signal handler. */
static bool dump_ring(size_t header_len) {
  if (trace_fd < 0) return false;
  if (trace_regular && (ftruncate(trace_fd, 0) != 0 || lseek(trace_fd, 0, SEEK_SET) != 0)) return false;
  bool ok = write_all(trace_fd, trace_buf, header_len);
  for (size_t i = 0; ok && i < ring_count; i++) {
    const ring_slot *s = &ring[(ring_next + ring_n - ring_count + i) % ring_n];
    ok = write_all(trace_fd, s->line, s->len);
  }
  return ok;
}

/* Under trace_lock: the buffer to the file, or the ring's file rewritten. */
static void flush_locked(void) {
  if (ring != NULL) {
    if (trace_fd >= 0 && !dump_ring(ring_header_len)) trace_failed = true;
    return;
  }
  if (trace_fd >= 0 && trace_len > 0 && !write_all(trace_fd, trace_buf, trace_len)) trace_failed = true;
  __atomic_store_n(&trace_len, 0, __ATOMIC_RELEASE);
}

static void write_line(const char *line, size_t len, uint64_t gen, bool dump) {
  pthread_mutex_lock(&trace_lock);
  if (trace_fd >= 0 && gen == trace_gen && ring != NULL) {
    ring_slot *s = &ring[ring_next];
    if (s->cap < len) {
      char *grown = rapi_realloc(s->line, len);
      if (grown != NULL) s->line = grown, s->cap = (uint32_t)len;
    }
    if (s->cap >= len) {   /* else out of host memory: the line is left out */
      memcpy(s->line, line, len);
      s->len = (uint32_t)len;
      ring_next = (ring_next + 1) % ring_n;
      if (ring_count < ring_n) ring_count++;
    }
    if (dump && !dump_ring(ring_header_len)) trace_failed = true;
  } else if (trace_fd >= 0 && gen == trace_gen) {
    if (trace_len + len > sizeof trace_buf) flush_locked();
    memcpy(trace_buf + trace_len, line, len);
    __atomic_store_n(&trace_len, trace_len + len, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&trace_lock);
}

/* ---- a fatal signal, a fork --------------------------------------------------------------------
 * The handler takes no lock (a thread may have died holding it): it writes the whole lines the
 * buffer holds (trace_len is stored after their bytes), puts back the handler that was there
 * before and raises the signal again. */
static const int fatal_signals[] = {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE};
static struct sigaction old_actions[sizeof fatal_signals / sizeof fatal_signals[0]];

static void on_fatal_signal(int sig) {
  for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++)   /* a fault in here ends it */
    if (fatal_signals[i] == sig) sigaction(sig, &old_actions[i], NULL);
  int fd = __atomic_load_n(&trace_fd, __ATOMIC_ACQUIRE);
  size_t len = __atomic_load_n(&trace_len, __ATOMIC_ACQUIRE);
  if (fd >= 0 && ring != NULL) (void)dump_ring(ring_header_len);
  else if (fd >= 0 && len > 0) (void)write_all(fd, trace_buf, len);
  raise(sig);
}

static void before_fork(void) {
  pthread_mutex_lock(&control_lock);
  pthread_mutex_lock(&trace_lock);
}

static void after_fork_parent(void) {
  pthread_mutex_unlock(&trace_lock);
  pthread_mutex_unlock(&control_lock);
}

/* The child shares the parent's file: it drops what the parent had not written yet and stops. */
static void after_fork_child(void) {
  if (trace_fd >= 0) close(trace_fd);
  trace_fd = -1;
  trace_len = 0;
  ring_count = 0;
  trace_gen++;
  rapi_tracing_on = 0;
  rapi_slow_update();
  pthread_mutex_unlock(&trace_lock);
  pthread_mutex_unlock(&control_lock);
}

static void flush_at_exit(void) { (void)rap_trace_flush(); }

/* Once, at the first start (under control_lock). */
static void install_handlers(void) {
  static bool done;
  if (done) return;
  done = true;
  atexit(flush_at_exit);   /* a trace never stopped keeps its last lines */
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_NODEFER;
    if (sigaction(fatal_signals[i], NULL, &old_actions[i]) == 0 && old_actions[i].sa_handler == SIG_DFL)
      sigaction(fatal_signals[i], &sa, NULL);   /* a handler the program set is left alone */
  }
}

static size_t put_u64(char *buf, size_t len, uint64_t v) {
  char tmp[20];
  int n = 0;
  do tmp[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  while (n > 0) buf[len++] = tmp[--n];
  return len;
}

static size_t put_str(char *buf, size_t len, const char *s) {
  size_t n = strlen(s);
  memcpy(buf + len, s, n);
  return len + n;
}

/* Formatted by hand: snprintf made a traced call five times slower. The fixed part of a line is
 * at most ~230 bytes beside the name (escaped, cut at 256) and the extra fields. */
void rapi_trace(const char *ev, const rap_allocator *a, const rap_resource *r, const void *p,
                size_t n, const char *fmt, ...) {
  char line[8192];   /* a stack of 32 frames with their modules' paths fits, and Python's beside it */
  size_t len = 0;
  if (thread_no == 0) thread_no = __atomic_add_fetch(&next_thread, 1, __ATOMIC_RELAXED);
  /* The generation first: a start publishes t0 before it, so t is measured from this file's t0. */
  uint64_t gen = __atomic_load_n(&trace_gen, __ATOMIC_ACQUIRE);
  uint64_t t0 = __atomic_load_n(&trace_t0, __ATOMIC_RELAXED), t = now_ns();
  len = put_str(line, len, "{\"t\":");
  len = put_u64(line, len, t > t0 ? t - t0 : 0);
  len = put_str(line, len, ",\"th\":");
  len = put_u64(line, len, thread_no);
  len = put_str(line, len, ",\"ev\":\"");
  len = put_str(line, len, ev);
  len = put_str(line, len, "\",\"a\":\"");
  len = put_escaped(line, len, len + 256, a != NULL ? a->name : "");
  line[len++] = '"';
  /* The calls carry their depth (0: the user's); what a pool does inside one does not. */
  if (strcmp(ev, "alloc") == 0 || strcmp(ev, "dealloc") == 0 || strcmp(ev, "refused") == 0 ||
      strcmp(ev, "oom") == 0) {
    len = put_str(line, len, ",\"d\":");
    len = put_u64(line, len, rapi_trace_depth);
  }
  if (r != NULL) {
    len = put_str(line, len, ",\"r\":");
    len = put_u64(line, len, r->id);
    len = put_str(line, len, ",\"rk\":\"");
    len = put_str(line, len, r->ops->kind);
    line[len++] = '"';
  } else {
    len = put_str(line, len, ",\"r\":null");
  }
  if (p != NULL) {
    static const char hex[] = "0123456789abcdef";
    uintptr_t v = (uintptr_t)p;
    int digits = 1;
    while (digits < 16 && (v >> (4 * digits)) != 0) digits++;
    len = put_str(line, len, ",\"p\":\"0x");
    for (int i = digits; i-- > 0;) line[len++] = hex[(v >> (4 * i)) & 15];
    line[len++] = '"';
  }
  len = put_str(line, len, ",\"n\":");
  len = put_u64(line, len, n);
  size_t cap = sizeof line - 2;
  if (rapi_trace_depth == 0 && strcmp(ev, "alloc") == 0) {
    len = rapi_trace_stack(line, len, cap);
    len = rapi_trace_pystack(line, len, cap - 512);   /* room left for the fields that follow */
  }
  if (fmt != NULL) {
    va_list ap;
    va_start(ap, fmt);
    int extra = vsnprintf(line + len, cap - len, fmt, ap);
    va_end(ap);
    if (extra > 0) len += (size_t)extra < cap - len ? (size_t)extra : 0;   /* too long: left out */
  }
  line[len++] = '}';
  line[len++] = '\n';
  write_line(line, len, gen, strcmp(ev, "oom") == 0);   /* a ring is written out at out of memory */
}

/* The first line says what the file is; its length. */
static size_t header(char *buf, size_t cap) {
  int n = snprintf(buf, cap, "{\"t\":0,\"ev\":\"trace\",\"version\":\"%s\",\"clock\":\"monotonic ns\"}\n",
                   rap_version());
  return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* Takes the open trace out (under control_lock); the caller closes it. */
/* Takes the open trace out (under control_lock), its buffer written; the caller closes the file.
 * *failed: a write to it failed. */
static int take_trace_file(bool *failed) {
  pthread_mutex_lock(&trace_lock);
  flush_locked();
  int fd = trace_fd;
  __atomic_store_n(&trace_fd, -1, __ATOMIC_RELEASE);
  for (size_t i = 0; i < ring_n; i++) free(ring[i].line);
  free(ring);
  ring = NULL;
  ring_n = ring_next = ring_count = 0;
  *failed = trace_failed;
  trace_failed = false;
  __atomic_store_n(&trace_gen, trace_gen + 1, __ATOMIC_RELEASE);
  __atomic_store_n(&rapi_tracing_on, 0, __ATOMIC_RELAXED);
  rapi_slow_update();   /* under the lock: a start and a stop racing leave it as the last one set */
  pthread_mutex_unlock(&trace_lock);
  return fd;
}

/* path with "%p" replaced by the process id, followed by "-rank<R>" where the environment has
 * RANK=R (torchrun and other launchers set it; letters, digits, '_' and '-' only), and "%%" by
 * "%": several processes given one path each keep their own trace. */
static int expand_path(const char *path, char *out, size_t cap) {
  size_t n = 0;
  for (const char *c = path; *c != '\0'; c++) {
    char piece[64];
    const char *add = piece;
    if (c[0] == '%' && c[1] == 'p') {
      const char *rank = getenv("RANK");
      bool ok = rank != NULL && *rank != '\0' && strlen(rank) < 24;
      for (const char *r = ok ? rank : ""; *r; r++)
        ok = ok && ((*r >= '0' && *r <= '9') || (*r >= 'a' && *r <= 'z') || (*r >= 'A' && *r <= 'Z') ||
                    *r == '_' || *r == '-');
      snprintf(piece, sizeof piece, "%ld%s%s", (long)getpid(), ok ? "-rank" : "", ok ? rank : "");
      c++;
    } else if (c[0] == '%' && c[1] == '%') {
      add = "%";
      c++;
    } else {
      piece[0] = *c;
      piece[1] = '\0';
    }
    size_t len = strlen(add);
    if (n + len >= cap) return rapi_fail(RAP_ERR_INVALID, "rap_trace_start: path '%s' is too long", path);
    memcpy(out + n, add, len);
    n += len;
  }
  out[n] = '\0';
  return RAP_OK;
}

/* The file is opened without truncating it, so that a path that cannot be opened refuses with the
 * trace already open untouched; it is truncated once the old trace (maybe the same file) is closed. */
/* RAP_TRACE_MAX_ENTRIES: 0 where unset (the whole trace goes to the file), else lines 1 to 1e8. */
static int ring_entries(size_t *entries) {
  *entries = 0;
  const char *max = getenv("RAP_TRACE_MAX_ENTRIES");
  if (max == NULL || *max == '\0') return RAP_OK;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(max, &end, 10);
  if (*end != '\0' || errno != 0 || v == 0 || v > 100000000ull || *max == '-')
    return rapi_fail(RAP_ERR_INVALID, "rap_trace_start: RAP_TRACE_MAX_ENTRIES is a number of lines from "
                     "1 to 100000000, not '%s'; nothing was changed", max);
  *entries = (size_t)v;
  return RAP_OK;
}

/* What can refuse comes first (the ring's size and memory, the file's open), so that a refused
 * start changes nothing: a trace already open goes on. */
int rap_trace_start(const char *path) {
  if (path == NULL || *path == '\0') return rapi_fail(RAP_ERR_INVALID, "rap_trace_start: path is empty");
  char name[4096];
  if (expand_path(path, name, sizeof name) != RAP_OK) return RAP_ERR_INVALID;
  path = name;
  size_t entries;
  int status = ring_entries(&entries), frames = 0;
  if (status == RAP_OK) status = rapi_trace_stack_read_env(&frames);
  if (status != RAP_OK) return status;
  ring_slot *slots = entries ? rapi_calloc(entries, sizeof *slots) : NULL;
  if (entries && slots == NULL)
    return rapi_fail(RAP_ERR_NOMEM, "rap_trace_start: out of host memory for a ring of %zu lines; "
                     "nothing was changed", entries);
  pthread_mutex_lock(&control_lock);
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    int why = errno;
    pthread_mutex_unlock(&control_lock);
    free(slots);
    return rapi_fail(RAP_ERR_BACKEND, "rap_trace_start: cannot open '%s' for writing (%s); nothing "
                     "was changed", path, strerror(why));
  }
  /* The open trace ends before the file is truncated: it may be this very file. */
  bool failed;
  int old = take_trace_file(&failed);
  if (old >= 0) close(old);
  struct stat st;
  bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (regular && ftruncate(fd, 0) != 0) {
    int why = errno;
    close(fd);
    pthread_mutex_unlock(&control_lock);
    free(slots);
    return rapi_fail(RAP_ERR_BACKEND, "rap_trace_start: cannot truncate '%s' (%s); tracing is off", path,
                     strerror(why));
  }
  install_handlers();
  rapi_trace_stack_set(frames);
  pthread_mutex_lock(&trace_lock);
  trace_len = header(trace_buf, sizeof trace_buf);
  ring = slots;
  ring_n = entries;
  ring_next = ring_count = 0;
  ring_header_len = trace_len;
  trace_regular = regular;
  __atomic_store_n(&trace_fd, fd, __ATOMIC_RELEASE);
  if (ring != NULL && !dump_ring(ring_header_len)) trace_failed = true;   /* the file says what it is */
  __atomic_store_n(&trace_t0, now_ns(), __ATOMIC_RELAXED);
  __atomic_store_n(&trace_gen, trace_gen + 1, __ATOMIC_RELEASE);
  __atomic_store_n(&rapi_tracing_on, 1, __ATOMIC_RELAXED);
  rapi_slow_update();
  pthread_mutex_unlock(&trace_lock);
  pthread_mutex_unlock(&control_lock);
  return RAP_OK;
}

int rap_trace_stop(void) {
  pthread_mutex_lock(&control_lock);
  bool bad;
  int fd = take_trace_file(&bad);
  if (fd >= 0 && close(fd) != 0) bad = true;
  pthread_mutex_unlock(&control_lock);
  return bad ? rapi_fail(RAP_ERR_BACKEND, "rap_trace_stop: writing the trace failed") : RAP_OK;
}

int rap_trace_active(void) { return rapi_tracing() ? 1 : 0; }

int rap_trace_flush(void) {
  pthread_mutex_lock(&trace_lock);
  flush_locked();
  bool bad = trace_failed;
  pthread_mutex_unlock(&trace_lock);
  return bad ? rapi_fail(RAP_ERR_BACKEND, "rap_trace_flush: writing the trace failed") : RAP_OK;
}

static void close_at_exit(void) { (void)rap_trace_stop(); }

/* RAP_TRACE, once per process: later managers trace into the same file. A file that cannot be
 * opened is a warning, not a failed manager. */
void rapi_trace_read_env(void) {
  static int done;   /* atomic */
  if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL)) return;
  const char *path = getenv("RAP_TRACE");
  if (path == NULL || *path == '\0') return;
  if (rap_trace_start(path) != RAP_OK) {
    rap_log(RAP_LOG_WARN, "RAP_TRACE: %s; tracing is off", rap_last_error());
    return;
  }
  atexit(close_at_exit);
}
