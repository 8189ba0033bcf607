/* rap_trace.c — rap-trace: what a trace written by RAP_TRACE says, replayed and drawn.
 *
 *   rap-trace summary TRACE                     events, allocators, resources, peaks
 *   rap-trace replay TRACE --spec SPEC [...]    the user's calls again, through any allocator
 *   rap-trace plot TRACE -o FILE.svg|FILE.html  a memory timeline (trace_plot.c)
 *   rap-trace plan TRACE -o PLAN                a placement of an iteration's allocations
 *                                               (trace_plan.c), for the Planned strategy
 *   rap-trace stacks TRACE                      allocations by the stack that made them
 *                                               (RAP_TRACE_STACK; trace_stacks.c)
 *
 * Replay takes the user's calls (depth 0) of one allocator (--allocator NAME; every allocator's by
 * default) and makes them, in the trace's order, on an allocator built from SPEC in a fresh
 * manager: the host resource stays the host, every other resource becomes a host_async queue (or,
 * with --resources cuda, a CUDA stream). No work runs on them, so every event the pool records has
 * passed when it asks: the replay shows what the pool holds when the streams keep up. It prints
 * peak live and peak held (what the bottom of the stack got from its platform) and ns per call.
 * It makes at most --max-resources resources (256 unless told), and says so when the trace has more.
 */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime */
#include "trace_read.h"
#include "trace_plot.h"
#include "trace_plan.h"
#include "trace_stacks.h"

#include <rap/rap.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int rap_resource_create_cuda_stream(rap_manager *rm, rap_resource **out);   /* rap/cuda.h */

static int usage(FILE *f) {
  fprintf(f,
          "usage: rap-trace summary TRACE\n"
          "       rap-trace replay TRACE --spec SPEC [--allocator NAME] [--resources host_async|cuda]\n"
          "                        [--max-resources N (256)] [--lag-us N] [--releases] [--json]\n"
          "       rap-trace plot TRACE -o FILE.svg|FILE.html [--allocator NAME] [--title TEXT]\n"
          "       rap-trace plan TRACE -o PLAN [--allocator NAME] [--alignment N (256)] [--skip N (0)]\n"
          "                        [--place-dynamic]\n"
          "       rap-trace stacks TRACE [--allocator NAME] [--top N (10)]\n"
          "       rap-trace --help | --version\n"
          "TRACE is a file written with RAP_TRACE=FILE (or rap_trace_start); docs/trace.md has its format.\n");
  return f == stderr ? 2 : 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void mib(char *buf, size_t cap, double bytes) { snprintf(buf, cap, "%.2f MiB", bytes / 1048576.0); }

/* A user's call of the allocator chosen (any, if a < 0). */
static int user_call(const te *e, int a) {
  return (e->kind == TE_ALLOC || e->kind == TE_DEALLOC) && e->d == 0 && !e->skip && (a < 0 || e->a == a);
}

/* ---- summary --------------------------------------------------------------------------------- */

/* One pass over the events, with each allocator's figures side by side and the sizes of live
 * blocks by allocator and pointer. */
typedef struct alloc_sum {
  size_t calls, live, peak, peak_held, grows, in_place;   /* in_place: growths at a chunk's end */
} alloc_sum;

static int summary(const trace *t) {
  size_t count[TE_KINDS] = {0};
  alloc_sum *sum = calloc(t->nnames ? t->nnames : 1, sizeof *sum);
  kmap sizes = {0};
  if (sum == NULL) {
    fprintf(stderr, "rap-trace: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < t->n; i++) {
    const te *e = &t->ev[i];
    count[e->kind]++;
    alloc_sum *s = &sum[e->a];
    if (user_call(e, e->a)) {
      s->calls++;
      uint64_t n = 0;
      if (e->kind == TE_ALLOC && kmap_get(&sizes, e->p, e->a, 0) == NULL) {
        if (kmap_put(&sizes, e->p, e->a, 0, e->n) != 0) {
          kmap_free(&sizes);
          free(sum);
          fprintf(stderr, "rap-trace: out of memory\n");
          return 1;
        }
        s->live += e->n;
      } else if (e->kind == TE_DEALLOC && kmap_del(&sizes, e->p, e->a, 0, &n)) {
        s->live -= n;
      }
      if (s->live > s->peak) s->peak = s->live;
    } else if (e->kind == TE_GROW || e->kind == TE_RELEASE) {
      s->grows += e->kind == TE_GROW && !e->in_place;
      s->in_place += e->kind == TE_GROW && e->in_place;
      if (e->level > s->peak_held) s->peak_held = e->level;
    }
  }
  kmap_free(&sizes);
  printf("trace: %zu events over %.3f s, written by rap %s%s\n", t->n,
         (double)t->ev[t->n - 1].t * 1e-9, t->version[0] ? t->version : "?",
         t->bad_lines ? " (some lines were not events)" : "");
  for (int k = 0; k < TE_KINDS; k++)
    if (count[k]) printf("  %-8s %zu\n", te_kind_names[k], count[k]);
  for (size_t a = 0; a < t->nnames; a++) {
    const alloc_sum *s = &sum[a];
    char l[32], h[32];
    mib(l, sizeof l, (double)s->peak);
    mib(h, sizeof h, (double)s->peak_held);
    printf("  '%s': %zu user calls, peak live %s", t->names[a], s->calls, l);
    if (s->grows || s->in_place) {
      printf(", %zu chunk%s taken", s->grows, s->grows == 1 ? "" : "s");
      if (s->in_place) printf(", grown in place %zu time%s", s->in_place, s->in_place == 1 ? "" : "s");
      printf(", peak held %s (held/live %.2f)", h, s->peak ? (double)s->peak_held / (double)s->peak : 0.0);
    }
    printf("\n");
  }
  free(sum);
  return 0;
}

/* ---- replay ---------------------------------------------------------------------------------- */

typedef struct replay_opts {
  const char *spec, *allocator, *resources;
  int json;
  size_t max_resources;
  uint64_t lag_ns;   /* --lag-us: a queue's work passes this long (trace time) after a free */
  int releases;      /* --releases: the allocator's release lines replayed as rap_release (an
                        empty_cache), and the peak held after the last one reported */
} replay_opts;

/* --lag-us: the streams behind the CPU. After each free on a queue, a gate is queued behind it
 * that opens once the trace's clock has moved lag_ns past the free; the pool's events recorded
 * meanwhile sit behind it, so its pending memory comes back as late as a GPU that far behind
 * would let it. When gates open, the replay waits until each queue has run past the last one
 * opened, up to its next gate, before its next call: the events behind them have then passed, as
 * a GPU's have by the time its events are seen passed, so a replay's figures do not hang on how
 * soon the queues' threads run (left to run on their own, a 1 µs lag gave one chunk or two from
 * run to run). One lock and one condition for every gate. Where the pool waits on the host for a
 * gated queue (out of memory, cross_resource=wait), the replay stops moving and no gate would
 * open: a gate that sees no call replayed for 50 ms opens itself, as a GPU catches up while its
 * CPU waits (the one place where the host's timing still shows in the figures). The gates live until the queues are gone. */
typedef struct lag_gate {
  uint64_t opens_at;
  int open, started, passed;     /* passed: the queue ran past it */
  struct lag_gate *next;         /* the next gate on the same queue, once there is one */
} lag_gate;

static pthread_mutex_t lag_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t lag_cv = PTHREAD_COND_INITIALIZER;
static uint64_t lag_progress;   /* calls replayed, under lag_mu */

static void lag_job(void *arg) {   /* on the queue's thread: waits for its gate */
  lag_gate *g = arg;
  pthread_mutex_lock(&lag_mu);
  g->started = 1;
  pthread_cond_broadcast(&lag_cv);
  uint64_t seen = lag_progress;
  while (!g->open) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    if (pthread_cond_timedwait(&lag_cv, &lag_mu, &ts) == ETIMEDOUT && !g->open) {
      if (lag_progress == seen) g->open = 1;   /* the replay waits on the host for this queue */
      seen = lag_progress;
    }
  }
  g->passed = 1;
  pthread_cond_broadcast(&lag_cv);
  pthread_mutex_unlock(&lag_mu);
}

/* A queue's gates in the order they were queued; the replay's queues side by side. */
typedef struct lag_queue {
  rap_resource *r;
  lag_gate **g;
  size_t head, n, cap;
} lag_queue;

typedef struct lag_fifo {
  lag_queue *q;
  size_t n, cap;
} lag_fifo;

/* Opens the gates whose time has come (now == UINT64_MAX: all of them) and waits until each queue
 * ran past the last one opened, up to its next gate: what the pool queued behind a gate (its
 * events) has then run, as a GPU's work has by the time its events are seen passed. Counts a call
 * replayed. */
static void lag_open_until(lag_fifo *f, uint64_t now) {
  pthread_mutex_lock(&lag_mu);
  lag_progress++;
  int opened = 0;
  for (size_t k = 0; k < f->n; k++) {
    lag_queue *q = &f->q[k];
    while (q->head < q->n && q->g[q->head]->opens_at <= now) {
      q->g[q->head++]->open = 1;
      opened = 1;
    }
  }
  if (opened) pthread_cond_broadcast(&lag_cv);
  for (size_t k = 0; opened && k < f->n; k++) {
    lag_queue *q = &f->q[k];
    lag_gate *last = q->head > 0 ? q->g[q->head - 1] : NULL;
    while (last != NULL && !(last->passed && (last->next == NULL || last->next->started)))
      pthread_cond_wait(&lag_cv, &lag_mu);
  }
  pthread_mutex_unlock(&lag_mu);
}

static void lag_free(lag_fifo *f) {   /* once no queue is left */
  for (size_t k = 0; k < f->n; k++) {
    for (size_t i = 0; i < f->q[k].n; i++) free(f->q[k].g[i]);
    free(f->q[k].g);
  }
  free(f->q);
}

static lag_queue *queue_for(lag_fifo *f, rap_resource *r) {
  for (size_t k = 0; k < f->n; k++)
    if (f->q[k].r == r) return &f->q[k];
  if (trace_room((void **)&f->q, &f->cap, f->n, sizeof *f->q) != 0) return NULL;
  f->q[f->n] = (lag_queue){r, NULL, 0, 0, 0};
  return &f->q[f->n++];
}

static int lag_after_free(lag_fifo *f, rap_resource *r, uint64_t t, uint64_t lag) {
  lag_queue *q = queue_for(f, r);
  if (q == NULL || trace_room((void **)&q->g, &q->cap, q->n, sizeof *q->g) != 0) return RAP_ERR_NOMEM;
  lag_gate *g = calloc(1, sizeof *g);
  if (g == NULL) return RAP_ERR_NOMEM;
  g->opens_at = t + lag;
  pthread_mutex_lock(&lag_mu);   /* the queue's thread reads next */
  if (q->n > 0) q->g[q->n - 1]->next = g;
  pthread_mutex_unlock(&lag_mu);
  int st = rap_resource_submit(r, lag_job, g);
  if (st != RAP_OK) {
    pthread_mutex_lock(&lag_mu);
    if (q->n > 0) q->g[q->n - 1]->next = NULL;
    pthread_mutex_unlock(&lag_mu);
    free(g);
    return st;
  }
  q->g[q->n++] = g;
  return RAP_OK;
}

static int fail(const char *what, int st) {
  fprintf(stderr, "rap-trace: %s: %s (%s)\n", what, rap_last_error(), rap_status_name(st));
  return 1;
}

/* The replay's resources, by the trace's resource ids: a map from id to the resource, so that what
 * it takes grows with the ids the trace uses, not with their values. */
typedef struct rmap {
  pmap ids;   /* id + 1 -> the index in r, + 1 */
  rap_resource **r;
  size_t n, cap;
} rmap;

/* The replay's resource for a trace's resource id (0: the host), made on first use; at most
 * o->max_resources others. */
static int resource_for(rap_manager *rm, const replay_opts *o, rmap *m, int64_t id, rap_resource **out) {
  if (id <= 0) return rap_resource_host(rm, out);
  if (id > (1 << 24)) {   /* no manager makes that many resources: a damaged trace */
    fprintf(stderr, "rap-trace: resource id %lld in the trace is past any real one\n", (long long)id);
    return RAP_ERR_INVALID;
  }
  uint64_t *at = pmap_get(&m->ids, (uint64_t)id + 1);
  if (at != NULL) {
    *out = m->r[*at - 1];
    return RAP_OK;
  }
  if (m->n >= o->max_resources) {
    fprintf(stderr, "rap-trace: the trace uses more than %zu resources besides the host; the replay "
                    "makes at most %zu (a thread or a stream each): --max-resources N raises it\n",
            o->max_resources, o->max_resources);
    return RAP_ERR_INVALID;
  }
  if (m->n == m->cap) {
    size_t ncap = m->cap ? m->cap * 2 : 16;
    rap_resource **grown = realloc(m->r, ncap * sizeof *grown);
    if (grown == NULL) return RAP_ERR_NOMEM;
    m->r = grown;
    m->cap = ncap;
  }
  rap_resource *r = NULL;
  int st = strcmp(o->resources, "cuda") == 0 ? rap_resource_create_cuda_stream(rm, &r)
                                              : rap_resource_create_host_async(rm, &r);
  if (st != RAP_OK) return st;
  if (pmap_put(&m->ids, (uint64_t)id + 1, m->n + 1) != 0) {
    rap_resource_destroy(r);
    return RAP_ERR_NOMEM;
  }
  m->r[m->n++] = r;
  *out = r;
  return RAP_OK;
}

/* Where the pool never held more than what it took at the first allocation, and that is well over
 * what the trace had live, held/live measures the pool's first chunk (its initial_size), not the
 * trace: say so, and how to size it. */
static void first_chunk_note(size_t peak_live, size_t peak_held, size_t first_held) {
  if (peak_live == 0 || first_held == 0 || peak_held > first_held || peak_held < 2 * peak_live) return;
  char f[32];
  mib(f, sizeof f, (double)first_held);
  printf("  note: held is the first chunk (%s), taken whole at the first allocation: a pool's\n"
         "        initial_size sets it (QuickPool, DynamicPoolList and ResourceAwarePool take 512 MiB\n"
         "        unless told), not this trace; initial_size in --spec sizes it, e.g.\n"
         "        'QuickPool(HOST, initial_size=1MiB)'\n", f);
}

static int replay(const trace *t, const replay_opts *o) {
  int a = -1;
  if (o->allocator != NULL && (a = trace_name(t, o->allocator)) < 0) {
    fprintf(stderr, "rap-trace: the trace has no allocator '%s'\n", o->allocator);
    return 1;
  }
  rap_manager *rm = NULL;
  rap_allocator *al = NULL;
  int st = rap_manager_create(&rm);
  if (st != RAP_OK) return fail("rap_manager_create", st);
  if ((st = rap_allocator_make_spec(rm, "replay", o->spec, &al)) != RAP_OK) {
    rap_manager_destroy(rm);
    return fail("the spec", st);
  }
  rap_allocator *root = al;
  while (rap_allocator_parent(root) != NULL) root = rap_allocator_parent(root);
  rmap rs = {{0}, NULL, 0, 0};
  size_t calls = 0, allocs = 0, skipped = 0, failed = 0, live = 0, peak_live = 0, first_held = 0;
  pmap ptrs = {0}, sizes = {0}, rids = {0};   /* rids: the resource id each block was allocated on */
  double loop = 0;
  int rc = 0;
  lag_fifo lag = {NULL, 0, 0};
  size_t released = 0, peak_after = 0;   /* --releases: how many, the peak held after the last */
  for (size_t i = 0; i < t->n && rc == 0; i++) {
    const te *e = &t->ev[i];
    if (o->releases && e->kind == TE_RELEASE && (a < 0 || e->a == a)) {
      if (o->lag_ns) lag_open_until(&lag, e->t);
      rap_stats now;
      if ((st = rap_release(al)) != RAP_OK || (st = rap_allocator_stats(root, &now)) != RAP_OK) {
        rc = fail("rap_release", st);
        break;
      }
      released++;
      peak_after = now.current_bytes;
      continue;
    }
    if (!user_call(e, a)) continue;
    if (e->kind == TE_ALLOC && e->p == 0) continue;   /* no allocation returns NULL: not a call */
    if (o->lag_ns) lag_open_until(&lag, e->t);
    rap_resource *r = NULL;
    if (e->r >= 0 && (st = resource_for(rm, o, &rs, e->r, &r)) != RAP_OK) {
      rc = st == RAP_ERR_INVALID ? 1 : fail("making a resource", st);
      break;
    }
    calls++;
    if (e->kind == TE_ALLOC) {
      uint64_t was, was_n = 0;   /* the pointer is live already: the trace lost its free */
      if (pmap_del(&ptrs, e->p, &was)) {
        pmap_del(&sizes, e->p, &was_n);
        pmap_del(&rids, e->p, NULL);
        live -= was_n;
        if (rap_deallocate(al, (void *)(uintptr_t)was, NULL) != RAP_OK) failed++;
      }
      void *p = NULL;
      double t0 = now_s();
      st = rap_allocate(al, &p, e->n, r);
      loop += now_s() - t0;
      if (st != RAP_OK) {
        failed++;
        continue;
      }
      if (allocs++ == 0) {   /* the first chunk, taken at the first allocation */
        rap_stats first;
        if (rap_allocator_stats(root, &first) == RAP_OK) first_held = first.current_bytes;
      }
      if (pmap_put(&ptrs, e->p, (uint64_t)(uintptr_t)p) != 0 || pmap_put(&sizes, e->p, e->n) != 0 ||
          (o->lag_ns && pmap_put(&rids, e->p, (uint64_t)(e->r + 1)) != 0)) {
        rc = fail("out of host memory", RAP_ERR_NOMEM);
        break;
      }
      live += e->n;
      if (live > peak_live) peak_live = live;
      rap_stats now;
      if (released > 0 && rap_allocator_stats(root, &now) == RAP_OK && now.current_bytes > peak_after)
        peak_after = now.current_bytes;
    } else {
      uint64_t p, n = 0;
      if (!pmap_del(&ptrs, e->p, &p)) {   /* allocated before the trace began, or failed here */
        skipped++;
        continue;
      }
      pmap_del(&sizes, e->p, &n);
      live -= n;
      uint64_t rid = 0;   /* a free with no resource is done on the block's own: that queue lags */
      rap_resource *lag_r = r;
      if (o->lag_ns && pmap_del(&rids, e->p, &rid) && e->r < 0 && rid > 1 &&
          (st = resource_for(rm, o, &rs, (int64_t)rid - 1, &lag_r)) != RAP_OK) {
        rc = fail("making a resource", st);
        break;
      }
      double t0 = now_s();
      st = rap_deallocate(al, (void *)(uintptr_t)p, r);
      loop += now_s() - t0;
      if (st != RAP_OK) failed++;
      if (o->lag_ns && lag_r != NULL && strcmp(rap_resource_kind(lag_r), "host_async") == 0 &&
          lag_after_free(&lag, lag_r, e->t, o->lag_ns) != RAP_OK) {
        rc = fail("queueing a lag gate", RAP_ERR_NOMEM);
        break;
      }
    }
  }
  lag_open_until(&lag, UINT64_MAX);
  rap_stats top, bottom;
  rap_allocator_stats(al, &top);
  rap_allocator_stats(root, &bottom);
  size_t peak_held = bottom.high_watermark, held_end = bottom.current_bytes;
  size_t chunks = top.chunk_count;
  /* What is still live at the end of the trace goes back, so the manager ends clean. */
  for (size_t i = 0; i < ptrs.cap; i++)
    if (ptrs.keys && ptrs.keys[i] != 0) rap_deallocate(al, (void *)(uintptr_t)ptrs.vals[i], NULL);
  pmap_free(&ptrs);
  pmap_free(&sizes);
  pmap_free(&rids);
  if (rc == 0) {
    double ns = calls ? loop * 1e9 / (double)calls : 0;
    if (o->json) {
      printf("{\"spec\":\"%s\",\"calls\":%zu,\"allocations\":%zu,\"failed\":%zu,\"skipped\":%zu,"
             "\"peak_live\":%zu,\"peak_held\":%zu,\"held_at_end\":%zu,\"chunks_at_end\":%zu,"
             "\"first_held\":%zu,\"releases\":%zu,\"peak_held_after_release\":%zu,\"ns_per_call\":%.1f}\n",
             o->spec, calls, allocs, failed, skipped, peak_live, peak_held, held_end, chunks, first_held,
             released, peak_after, ns);
    } else {
      char l[32], h[32], e[32];
      mib(l, sizeof l, (double)peak_live);
      mib(h, sizeof h, (double)peak_held);
      mib(e, sizeof e, (double)held_end);
      printf("replay of %zu calls%s%s%s through %s\n", calls, a >= 0 ? " of '" : "",
             a >= 0 ? t->names[a] : "", a >= 0 ? "'" : "", o->spec);
      printf("  peak live   %s\n  peak held   %s (held/live %.3f)\n  held at end %s, %zu chunks\n",
             l, h, peak_live ? (double)peak_held / (double)peak_live : 0.0, e, chunks);
      if (released > 0) {
        mib(h, sizeof h, (double)peak_after);
        printf("  peak held after the last of %zu releases %s\n", released, h);
      }
      printf("  %.1f ns per call (the allocator's calls alone)\n", ns);
      first_chunk_note(peak_live, peak_held, first_held);
      if (failed) printf("  %zu calls failed here (out of memory?): %s\n", failed, rap_last_error());
      if (skipped) printf("  %zu deallocations of blocks the replay never had were skipped\n", skipped);
    }
  }
  free(rs.r);
  pmap_free(&rs.ids);
  rap_manager_destroy(rm);
  lag_free(&lag);
  return rc;
}

/* ---- plan ------------------------------------------------------------------------------------ */

typedef struct plan_cli {
  const char *out, *allocator;
  plan_opts o;
} plan_cli;

/* One domain per allocator (the one named, or every allocator with calls of its own). */
static int plan(const trace *t, const plan_cli *c) {
  plan_domain *d = calloc(t->nnames ? t->nnames : 1, sizeof *d);
  char *has = calloc(t->nnames ? t->nnames : 1, 1);
  size_t nd = 0;
  int rc = 1;
  char err[512];
  if (d == NULL || has == NULL) {
    fprintf(stderr, "rap-trace: out of memory\n");
    goto out;
  }
  int only = -1;
  if (c->allocator != NULL && (only = trace_name(t, c->allocator)) < 0) {
    fprintf(stderr, "rap-trace: the trace has no allocator '%s'\n", c->allocator);
    goto out;
  }
  for (size_t i = 0; i < t->n; i++)
    if (t->ev[i].kind == TE_ALLOC && t->ev[i].d == 0) has[t->ev[i].a] = 1;
  for (size_t a = 0; a < t->nnames; a++) {
    if (!has[a] || (only >= 0 && (int)a != only)) continue;
    if (plan_build(t, (int)a, &c->o, &d[nd], err, sizeof err) != 0) {
      fprintf(stderr, "rap-trace: %s\n", err);
      goto out;
    }
    nd++;
  }
  if (nd == 0) {
    fprintf(stderr, "rap-trace: the trace has no user allocation to plan\n");
    goto out;
  }
  if (plan_check_file(d, nd, err, sizeof err) != 0) {
    fprintf(stderr, "rap-trace: %s\n", err);
    goto out;
  }
  /* Every refusal is said before the file is opened; a write that fails removes what it wrote. */
  FILE *f = fopen(c->out, "w");
  if (f == NULL) {
    fprintf(stderr, "rap-trace: cannot write '%s': %s\n", c->out, strerror(errno));
    goto out;
  }
  struct stat sb;
  int regular = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode);
  int wr = plan_write(f, d, nd), werr = errno;
  if (fclose(f) != 0 || wr != 0) {
    fprintf(stderr, "rap-trace: writing '%s' failed: %s%s\n", c->out, strerror(wr != 0 ? werr : errno),
            regular ? "; the part written is removed" : "");
    if (regular) remove(c->out);
    goto out;
  }
  for (size_t k = 0; k < nd; k++) {
    char ar[32], lp[32];
    mib(ar, sizeof ar, (double)d[k].arena);
    mib(lp, sizeof lp, (double)d[k].live_peak);
    printf("plan of '%s': %zu allocation%s an iteration (%s, %zu iterations), %zu placed on %zu "
           "stream%s\n  arena %s for %s live at most (%.4f), placed by %s\n", d[k].name, d[k].n,
           d[k].n == 1 ? "" : "s", d[k].by_steps ? "from step lines" : "the sequence's period", d[k].iterations, d[k].placed,
           d[k].streams, d[k].streams == 1 ? "" : "s", ar, lp,
           d[k].live_peak ? (double)d[k].arena / (double)d[k].live_peak : 1.0, d[k].order ? d[k].order : "-");
  }
  for (size_t k = 0; k < nd; k++)
    if (d[k].iterations < 2)
      printf("  note: '%s' was seen repeating %zu whole time%s; a plan serves what recurs (training "
             "iterations), and a trace of a few iterations is a safer base\n", d[k].name,
             d[k].iterations, d[k].iterations == 1 ? "" : "s");
  rc = 0;
out:
  for (size_t k = 0; k < nd; k++) plan_domain_free(&d[k]);
  free(d);
  free(has);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage(stderr);
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) return usage(stdout);
  if (strcmp(argv[1], "--version") == 0) {
    printf("rap-trace %s\n", rap_version());
    return 0;
  }
  const char *cmd = argv[1];
  if (argc < 3) return usage(stderr);
  const char *path = argv[2];
  replay_opts ro = {NULL, NULL, "host_async", 0, 256, 0, 0};
  plot_opts po = {NULL, NULL, NULL};
  plan_cli pc = {NULL, NULL, {256, 0, 0}};
  size_t top = 10;
  for (int i = 3; i < argc; i++) {
    const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(arg, "--json") == 0) {
      ro.json = 1;
      continue;
    }
    if (strcmp(arg, "--releases") == 0) {
      ro.releases = 1;
      continue;
    }
    if (strcmp(arg, "--place-dynamic") == 0) {
      pc.o.dynamic = 1;
      continue;
    }
    if (val == NULL) {
      fprintf(stderr, "rap-trace: %s wants a value\n", arg);
      return 2;
    }
    i++;
    if (strcmp(arg, "--spec") == 0) ro.spec = val;
    else if (strcmp(arg, "--allocator") == 0) ro.allocator = po.allocator = pc.allocator = val;
    else if (strcmp(arg, "--resources") == 0) ro.resources = val;
    else if (strcmp(arg, "--max-resources") == 0) {
      char *end;
      unsigned long long v = strtoull(val, &end, 10);
      if (*val == '\0' || *end != '\0' || v == 0 || v > 65536) {
        fprintf(stderr, "rap-trace: --max-resources is a number from 1 to 65536, not '%s'\n", val);
        return 2;
      }
      ro.max_resources = (size_t)v;
    }
    else if (strcmp(arg, "--lag-us") == 0) {
      char *end;
      unsigned long long v = strtoull(val, &end, 10);
      if (*val == '\0' || *end != '\0' || v > 60000000ULL) {
        fprintf(stderr, "rap-trace: --lag-us is a number of microseconds up to 60000000, not '%s'\n", val);
        return 2;
      }
      ro.lag_ns = (uint64_t)v * 1000;
    }
    else if (strcmp(arg, "-o") == 0) po.out = pc.out = val;
    else if (strcmp(arg, "--alignment") == 0 || strcmp(arg, "--skip") == 0) {
      char *end;
      unsigned long long v = strtoull(val, &end, 10);
      int align = arg[2] == 'a';
      if (*val == '\0' || *end != '\0' || (align && (v == 0 || (v & (v - 1)) != 0 || v > RAPI_PLAN_MAX_ALIGNMENT))) {
        fprintf(stderr, "rap-trace: %s is %s, not '%s'\n", arg,
                align ? "a power of two up to 1 GiB" : "a number of iterations", val);
        return 2;
      }
      if (align) pc.o.alignment = v;
      else pc.o.skip_iterations = (size_t)v;
    }
    else if (strcmp(arg, "--title") == 0) po.title = val;
    else if (strcmp(arg, "--top") == 0) {
      char *end;
      unsigned long long v = strtoull(val, &end, 10);
      if (*val == '\0' || *end != '\0' || v == 0 || v > 100000) {
        fprintf(stderr, "rap-trace: --top is a number from 1 to 100000, not '%s'\n", val);
        return 2;
      }
      top = (size_t)v;
    }
    else {
      fprintf(stderr, "rap-trace: unknown option '%s'\n", arg);
      return usage(stderr);
    }
  }
  if (strcmp(cmd, "summary") != 0 && strcmp(cmd, "replay") != 0 && strcmp(cmd, "plot") != 0 &&
      strcmp(cmd, "plan") != 0 && strcmp(cmd, "stacks") != 0) {
    fprintf(stderr, "rap-trace: unknown command '%s'\n", cmd);
    return usage(stderr);
  }
  if (strcmp(cmd, "replay") == 0 && ro.spec == NULL) {
    fprintf(stderr, "rap-trace: replay wants --spec SPEC (an allocator spec, e.g. 'QuickPool(HOST)')\n");
    return 2;
  }
  if (strcmp(cmd, "replay") == 0 && strcmp(ro.resources, "host_async") != 0 &&
      strcmp(ro.resources, "cuda") != 0) {
    fprintf(stderr, "rap-trace: --resources is host_async or cuda, not '%s'\n", ro.resources);
    return 2;
  }
  if (ro.lag_ns && strcmp(ro.resources, "host_async") != 0) {
    fprintf(stderr, "rap-trace: --lag-us holds host_async queues back; a CUDA stream runs no gate\n");
    return 2;
  }
  if (strcmp(cmd, "plan") == 0 && pc.out == NULL) {
    fprintf(stderr, "rap-trace: plan wants -o PLAN (the plan file to write)\n");
    return 2;
  }
  if (strcmp(cmd, "plot") == 0 && po.out == NULL) {
    fprintf(stderr, "rap-trace: plot wants -o FILE.svg or -o FILE.html\n");
    return 2;
  }
  trace t;
  char err[512];
  if (trace_load(path, &t, err, sizeof err) != 0) {
    fprintf(stderr, "rap-trace: %s\n", err);
    return 1;
  }
  int rc = strcmp(cmd, "summary") == 0 ? summary(&t)
           : strcmp(cmd, "replay") == 0 ? replay(&t, &ro)
           : strcmp(cmd, "plan") == 0   ? plan(&t, &pc)
           : strcmp(cmd, "stacks") == 0 ? trace_stacks(&t, pc.allocator, top)
                                        : trace_plot(&t, &po);
  trace_free(&t);
  return rc;
}
