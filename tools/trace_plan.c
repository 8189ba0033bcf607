/* trace_plan.c — rap-trace plan: iterations found in a trace, and their recurring allocations
 * placed in one arena (trace_plan.h).
 *
 * Time is counted in allocations: an entry allocated at position s of the iteration and freed
 * before allocation e lives in [s, e) on a clock that wraps every period, so an entry freed in the
 * next iteration (a gradient set to None at the next zero_grad) wraps round. Two entries may share
 * an address only when those cyclic intervals do not meet. Placement is greedy: entries in one
 * order (by size, by lifetime, by area), each at the best-fitting (or lowest) gap left by the
 * entries already placed whose lifetimes meet its own; the order and fit with the smallest arena
 * win. It is quadratic in the entries of one iteration, which is thousands for a training step.
 * Every plan written is one the Planned strategy reads (the bounds of plan_file.h, shared with its
 * reader): a trace whose plan would pass one (more streams, entries or bytes than a plan holds, an
 * allocator without a name) is refused with a sentence, and sizes and sums are unsigned, checked
 * against RAPI_PLAN_MAX_ARENA before they could wrap.
 */
#define _POSIX_C_SOURCE 200809L   /* strdup */
#include "trace_plan.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct call {
  uint64_t size, free_at;   /* free_at: allocations made before its free, or PLAN_NONE */
  uint32_t stream;
} call;

static uint64_t sig_of(const call *c) { return c->size * 0x9E3779B97F4A7C15ull + c->stream + 1; }

/* x > k * y, where k * y may pass 64 bits. */
static int above_times(uint64_t x, uint64_t k, uint64_t y) {
  return k == 0 ? x > 0 : y <= UINT64_MAX / k && x > k * y;
}

/* An entry's bytes in the arena: its largest size rounded up to the alignment, one granule for
 * zero (as Planned's reader counts them). Placed entries are at most RAPI_PLAN_MAX_ARENA: no
 * wrap. */
static uint64_t granted(uint64_t max, uint64_t align) { return max == 0 ? align : (max + align - 1) & ~(align - 1); }

/* ---- the user's calls of one allocator ------------------------------------------------------ */

typedef struct calls {
  call *c;
  size_t n, cap;
  size_t *steps;            /* allocation counts at the step lines */
  size_t nsteps, steps_cap;
  int64_t ids[RAPI_PLAN_MAX_STREAMS];   /* resource ids, by first appearance */
  size_t nids;
} calls;

static int collect(const trace *t, int a, calls *cs, char *err, size_t cap) {
  pmap live = {0};   /* pointer -> index + 1 of its allocation */
  for (size_t i = 0; i < t->n; i++) {
    const te *e = &t->ev[i];
    if (e->kind == TE_STEP) {
      if (trace_room((void **)&cs->steps, &cs->steps_cap, cs->nsteps, sizeof *cs->steps) != 0) goto oom;
      cs->steps[cs->nsteps++] = cs->n;
      continue;
    }
    if ((e->kind != TE_ALLOC && e->kind != TE_DEALLOC) || e->d != 0 || e->skip || e->a != a) continue;
    if (e->kind == TE_DEALLOC) {
      uint64_t at;
      if (pmap_del(&live, e->p, &at)) cs->c[at - 1].free_at = cs->n;
      continue;
    }
    size_t s = 0;
    while (s < cs->nids && cs->ids[s] != e->r) s++;
    if (s == cs->nids) {
      if (cs->nids == RAPI_PLAN_MAX_STREAMS) {
        snprintf(err, cap, "allocator '%s' uses more than %u resources (streams): a plan holds at most %u "
                 "(Planned refuses more)", t->names[a], RAPI_PLAN_MAX_STREAMS, RAPI_PLAN_MAX_STREAMS);
        pmap_free(&live);
        return -1;
      }
      cs->ids[cs->nids++] = e->r;
    }
    if (trace_room((void **)&cs->c, &cs->cap, cs->n, sizeof *cs->c) != 0) goto oom;
    cs->c[cs->n] = (call){e->n, PLAN_NONE, (uint32_t)s};
    if (e->p != 0 && pmap_put(&live, e->p, cs->n + 1) != 0) goto oom;
    cs->n++;
  }
  pmap_free(&live);
  return 0;
oom:
  pmap_free(&live);
  snprintf(err, cap, "out of memory reading the calls of '%s'", t->names[a]);
  return -1;
}

/* ---- the period ------------------------------------------------------------------------------ */

/* The longest run of k where sig[k] == sig[k + d], at most one in five mismatching: the longest
 * stretch with a non-negative sum of +1 (match) and -4 (mismatch). */
static size_t run_at(const uint64_t *sig, size_t n, size_t d, size_t *start) {
  size_t m = n - d;
  int64_t *s = malloc((m + 1) * sizeof *s), *lo = malloc((m + 1) * sizeof *lo);
  int64_t *hi = malloc((m + 1) * sizeof *hi);
  size_t best = 0;
  if (s && lo && hi) {
    s[0] = 0;
    for (size_t k = 0; k < m; k++) s[k + 1] = s[k] + (sig[k] == sig[k + d] ? 1 : -4);
    lo[0] = s[0];
    for (size_t k = 1; k <= m; k++) lo[k] = s[k] < lo[k - 1] ? s[k] : lo[k - 1];
    hi[m] = s[m];
    for (size_t k = m; k-- > 0;) hi[k] = s[k] > hi[k + 1] ? s[k] : hi[k + 1];
    for (size_t i = 0, j = 0; i <= m && j <= m;) {   /* the widest i <= j with s[j] >= s[i] */
      if (lo[i] <= hi[j]) {
        if (j - i > best) {
          best = j - i;
          *start = i;
        }
        j++;
      } else {
        i++;
      }
    }
    /* The tolerance lets a run reach into what precedes the repetition (the blocks live before
     * the first iteration): it begins at the first of eight matches in a row. */
    for (size_t ok = 0; best > 0 && ok < 8;) {
      size_t k = *start + ok;
      if (k + d < n && sig[k] == sig[k + d]) {
        ok++;
        continue;
      }
      size_t skip = ok + 1 < best ? ok + 1 : best;
      *start += skip;
      best -= skip;
      ok = 0;
    }
  }
  free(s);
  free(lo);
  free(hi);
  return best;
}

typedef struct cand {
  uint64_t d, count;
} cand;

static int by_count(const void *x, const void *y) {
  const cand *a = x, *b = y;
  return a->count != b->count ? (a->count < b->count ? 1 : -1) : (a->d > b->d) - (a->d < b->d);
}

size_t plan_period(const uint64_t *sig, const uint64_t *life, size_t n, size_t *start) {
  enum { W = 8, CANDIDATES = 512 };
  if (n < 2 * W) return 0;
  /* Candidate shifts: distances between repeats of the same window of W signatures. */
  pmap last = {0}, counts = {0};
  for (size_t k = 0; k + W <= n; k++) {
    uint64_t h = 1469598103934665603ull;
    for (size_t j = 0; j < W; j++) h = (h ^ sig[k + j]) * 1099511628211ull;
    h |= 1;
    uint64_t *prev = pmap_get(&last, h);
    if (prev != NULL) {
      uint64_t d = k + 1 - *prev, *c = pmap_get(&counts, d);
      if (c != NULL) (*c)++;
      else if (pmap_put(&counts, d, 1) != 0) break;
    }
    if (pmap_put(&last, h, k + 1) != 0) break;
  }
  pmap_free(&last);
  cand *cs = malloc((counts.n + 1) * sizeof *cs);
  size_t nc = 0;
  for (size_t i = 0; cs != NULL && i < counts.cap; i++)
    if (counts.keys[i] != 0) cs[nc++] = (cand){counts.keys[i], counts.vals[i]};
  pmap_free(&counts);
  if (cs == NULL) return 0;
  qsort(cs, nc, sizeof *cs, by_count);
  size_t best_d = 0, best_run = 0, best_start = 0, best_frac = 0;
  for (size_t i = 0; i < nc && i < CANDIDATES; i++) {
    size_t d = cs[i].d, s = 0;
    if (d < 2 || 3 * d > 2 * n) continue;   /* half of it must repeat */
    size_t run = run_at(sig, n, d, &s);
    /* A period repeats at least half of itself. The one whose repetition spans the most of the
     * sequence (run + d: a layer repeated twelve times inside an iteration spans less than the
     * iterations do) wins; ties the shorter. */
    if (2 * run < d) continue;
    /* Where lifetimes are known, an iteration's allocations are freed within it (or the next):
     * the share of them that is, in twentieths, comes first, so that a loop inside the iteration
     * (what it allocates outlives it) loses to the iteration. */
    size_t frac = 0;
    for (size_t k = s; life != NULL && k < s + d && k < n; k++) frac += life[k] <= d;
    frac = life != NULL ? frac * 20 / d : 0;
    if (frac > best_frac ||
        (frac == best_frac && (run + d > best_run + best_d || (run + d == best_run + best_d && d < best_d)))) {
      best_frac = frac;
      best_d = d;
      best_run = run;
      best_start = s;
    }
  }
  free(cs);
  /* One signature over and over (a loop of identical allocate+free pairs): period 1, where no
   * longer one repeats. */
  if (best_d == 0 && n >= 2) {
    size_t s = 0, run = run_at(sig, n, 1, &s);
    if (2 * run >= n) best_d = 1, best_start = s;
  }
  *start = best_start;
  return best_d;
}

/* ---- placement ---------------------------------------------------------------------------- */

static int meet1(int64_t s1, int64_t e1, int64_t s2, int64_t e2) { return s1 < e2 && s2 < e1; }

/* Whether two lifetimes meet on the clock that wraps every p allocations. */
static int meet(const plan_entry *a, const plan_entry *b, int64_t p) {
  int64_t s1 = (int64_t)a->start, e1 = (int64_t)a->end, s2 = (int64_t)b->start, e2 = (int64_t)b->end;
  return meet1(s1, e1, s2, e2) || meet1(s1, e1, s2 + p, e2 + p) || meet1(s1, e1, s2 - p, e2 - p);
}

static const plan_entry *sort_e;
static uint64_t sort_align;
static uint64_t span(const plan_entry *e) { return (e->end - e->start); }
static uint64_t rsize(const plan_entry *e) { return granted(e->max, sort_align); }

#define TIE(x, y) ((x) != (y) ? ((x) < (y) ? 1 : -1) : 0)
static int by_size(const void *x, const void *y) {
  const plan_entry *a = &sort_e[*(const size_t *)x], *b = &sort_e[*(const size_t *)y];
  int c = TIE(rsize(a), rsize(b));
  if (c == 0) c = TIE(span(a), span(b));
  return c ? c : TIE(*(const size_t *)y, *(const size_t *)x);
}
static int by_span(const void *x, const void *y) {
  const plan_entry *a = &sort_e[*(const size_t *)x], *b = &sort_e[*(const size_t *)y];
  int c = TIE(span(a), span(b));
  if (c == 0) c = TIE(rsize(a), rsize(b));
  return c ? c : TIE(*(const size_t *)y, *(const size_t *)x);
}
static int by_area(const void *x, const void *y) {
  const plan_entry *a = &sort_e[*(const size_t *)x], *b = &sort_e[*(const size_t *)y];
  int c = TIE((double)rsize(a) * (double)span(a), (double)rsize(b) * (double)span(b));
  if (c == 0) c = TIE(rsize(a), rsize(b));
  return c ? c : TIE(*(const size_t *)y, *(const size_t *)x);
}

#define TOO_BIG UINT64_MAX   /* place(): the arena would pass RAPI_PLAN_MAX_ARENA */

/* Places the entries of order (m of them) into off[]; the arena's size, 0 out of memory, or
 * TOO_BIG. Each entry is at most RAPI_PLAN_MAX_ARENA bytes and every place found lies below the
 * arena so far, so no sum here passes 2^63. */
static uint64_t place(const plan_entry *e, int64_t p, const size_t *order, size_t m, uint64_t align,
                      int best_fit, uint64_t *off) {
  size_t *placed = malloc((m + 1) * sizeof *placed);   /* by offset */
  if (placed == NULL) return 0;
  size_t np = 0;
  uint64_t arena = 0;
  for (size_t k = 0; k < m; k++) {
    size_t i = order[k];
    uint64_t size = granted(e[i].max, align), top = 0, at = UINT64_MAX, gap_best = UINT64_MAX;
    for (size_t j = 0; j < np; j++) {
      const plan_entry *o = &e[placed[j]];
      if (!meet(&e[i], o, p)) continue;
      uint64_t lo = off[placed[j]], hi = lo + granted(o->max, align);
      if (lo >= top + size && lo - top < gap_best) {
        at = top;
        gap_best = lo - top;
        if (!best_fit) break;
      }
      if (hi > top) top = hi;
    }
    if (at == UINT64_MAX) at = top;
    if (size > RAPI_PLAN_MAX_ARENA - at) {
      free(placed);
      return TOO_BIG;
    }
    off[i] = at;
    if (at + size > arena) arena = at + size;
    size_t pos = np;
    while (pos > 0 && off[placed[pos - 1]] > at) pos--;
    memmove(&placed[pos + 1], &placed[pos], (np - pos) * sizeof *placed);
    placed[pos] = i;
    np++;
  }
  free(placed);
  return arena;
}

/* The most bytes of placed entries live at once (the arena can be no smaller). Counted modulo
 * 2^64: the changes wrap, the running sum is what is live, and that fits in the arena. */
static uint64_t live_peak(const plan_entry *e, size_t p, uint64_t align) {
  uint64_t *diff = calloc(p + 1, sizeof *diff);
  if (diff == NULL) return 0;
  for (size_t i = 0; i < p; i++) {
    if (e[i].offset == PLAN_NONE) continue;
    uint64_t sz = granted(e[i].max, align);
    diff[e[i].start] += sz;
    if (e[i].end <= p) {
      diff[e[i].end] -= sz;
    } else {
      diff[p] -= sz;
      diff[0] += sz;
      diff[e[i].end - p] -= sz;
    }
  }
  uint64_t cur = 0, peak = 0;
  for (size_t k = 0; k < p; k++) {
    cur += diff[k];
    if (cur > peak) peak = cur;
  }
  free(diff);
  return peak;
}

/* Places d's entries by the best of six orders and fits: 0, -1 out of memory, or -2 where every
 * one's arena would pass RAPI_PLAN_MAX_ARENA. */
static int place_all(plan_domain *d) {
  size_t *order = malloc((d->n + 1) * sizeof *order);
  uint64_t *off = malloc((d->n + 1) * sizeof *off), *best = malloc((d->n + 1) * sizeof *best);
  int rc = -1;
  if (order == NULL || off == NULL || best == NULL) goto out;
  size_t m = 0;
  for (size_t i = 0; i < d->n; i++)
    if (d->e[i].offset != PLAN_NONE) order[m++] = i;
  static int (*const cmp[3])(const void *, const void *) = {by_size, by_span, by_area};
  uint64_t arena = TOO_BIG;
  sort_e = d->e;
  sort_align = d->alignment;
  for (int c = 0; c < 3; c++) {
    qsort(order, m, sizeof *order, cmp[c]);
    for (int fit = 1; fit >= 0; fit--) {
      uint64_t a = place(d->e, (int64_t)d->n, order, m, d->alignment, fit, off);
      if (a == 0 && m > 0) goto out;
      if (a < arena) {
        arena = a;
        memcpy(best, off, d->n * sizeof *off);
        d->order = c == 0 ? (fit ? "size, best fit" : "size, first fit")
                   : c == 1 ? (fit ? "lifetime, best fit" : "lifetime, first fit")
                            : (fit ? "area, best fit" : "area, first fit");
      }
    }
  }
  if (m > 0 && arena == TOO_BIG) {
    rc = -2;
    goto out;
  }
  for (size_t k = 0; k < m; k++) d->e[order[k]].offset = best[order[k]];
  d->arena = m > 0 ? arena : 0;
  d->placed = m;
  d->live_peak = live_peak(d->e, d->n, d->alignment);
  rc = 0;
out:
  free(order);
  free(off);
  free(best);
  return rc;
}

/* ---- the plan of one allocator -------------------------------------------------------------- */

/* The iteration found by the period of cs's calls (no step lines): its first call *base, its
 * length *p and how many were seen; 0, or -1 with a sentence. */
static int by_period(const calls *cs, const char *name, const plan_opts *o, size_t *base, size_t *p,
                     size_t *iters, char *err, size_t cap) {
  uint64_t *sig = malloc((cs->n + 1) * sizeof *sig), *life = malloc((cs->n + 1) * sizeof *life);
  if (sig == NULL || life == NULL) {
    free(sig);
    free(life);
    snprintf(err, cap, "out of memory");
    return -1;
  }
  /* Two signatures: (size, stream), and (stream, lifetime) for sizes that follow the data (a
   * mixture of experts), where only the order of allocations and frees repeats. Each gives a
   * period; the one whose iteration frees more of what it allocates within a period wins. */
  size_t start = 0, best_frac = 0;
  *p = 0;
  for (size_t i = 0; i < cs->n; i++) life[i] = cs->c[i].free_at == PLAN_NONE ? PLAN_NONE : cs->c[i].free_at - i;
  for (int kind = 0; kind < 2; kind++) {
    for (size_t i = 0; i < cs->n; i++)
      sig[i] = kind == 0 ? sig_of(&cs->c[i]) : (life[i] + 1) * 0x9E3779B97F4A7C15ull + cs->c[i].stream + 1;
    size_t s0 = 0, d = plan_period(sig, life, cs->n, &s0), frac = 0;
    for (size_t i = s0; d > 0 && i < s0 + d && i < cs->n; i++) frac += life[i] <= d;
    frac = d > 0 ? frac * 20 / d : 0;
    if (d > 0 && (*p == 0 || frac > best_frac)) {
      *p = d;
      start = s0;
      best_frac = frac;
    }
  }
  free(life);
  free(sig);
  if (*p == 0) {
    snprintf(err, cap, "the %zu allocations of '%s' do not repeat: no iteration found (a trace of "
             "two or more iterations, or step lines, docs/trace.md)", cs->n, name);
    return -1;
  }
  *iters = (cs->n - start) / *p;
  /* A period seen once, late in a sequence that did other things for longer than a period
   * before it, is no repetition: nothing says a next run follows it (serving). One iteration and
   * a part after a short prefix (weights, a first step) is a run cut short, and planned. */
  if (*iters < 2 && start > *p) {
    snprintf(err, cap, "the %zu allocations of '%s' repeat only from allocation %zu on, and hold "
             "one iteration of that period (%zu allocations) at most: nothing repeats, so a plan "
             "would not serve a second run (serving with prompts of varying length is such a "
             "trace; the ResourceAwarePool alone serves it); record two or more iterations, or "
             "mark them with step lines (docs/trace.md)", cs->n, name, start, *p);
    return -1;
  }
  if (o->skip_iterations >= *iters) {
    snprintf(err, cap, "'%s' repeats %zu times; cannot skip %zu", name, *iters, o->skip_iterations);
    return -1;
  }
  *base = start + o->skip_iterations * *p;
  return 0;
}

/* Entry k of the iteration that starts at call base, p calls long: its sizes and lifetime, widened
 * by the iterations after it, and whether it is placed (offset 0 for now, or PLAN_NONE). */
static void make_entry(const calls *cs, size_t base, size_t p, size_t k, const plan_opts *o, int by_steps,
                       plan_entry *e) {
  const call *c = &cs->c[base + k];
  e->min = e->max = c->size;
  e->stream = c->stream;
  e->start = k;
  e->end = c->free_at == PLAN_NONE ? PLAN_NONE : c->free_at - base;
  /* The same allocation in the iterations after it (same place, same signature): its longest
   * lifetime, so that a later iteration's slower free does not make it miss. Where only its size
   * differs (within a factor of two, on the same stream, its neighbours the same: a size that
   * follows the data, as a mixture of experts' routed tokens do), its sizes widen to cover them. */
  for (size_t j = base + k + p; !by_steps && j < cs->n; j += p) {
    const call *later = &cs->c[j];
    if (later->free_at == PLAN_NONE || e->end == PLAN_NONE) break;
    if (sig_of(later) != sig_of(c)) {
      int nb = k > 0 && k + 1 < p && j + 1 < cs->n && sig_of(&cs->c[j - 1]) == sig_of(&cs->c[base + k - 1]) &&
               sig_of(&cs->c[j + 1]) == sig_of(&cs->c[base + k + 1]);
      int same_life = c->free_at != PLAN_NONE && later->free_at - j == c->free_at - (base + k);
      uint64_t ratio = same_life || nb ? (same_life ? 4 : 2) : 0;
      if (later->stream != c->stream || above_times(later->size, ratio, c->size) ||
          above_times(c->size, ratio, later->size))
        break;
      if (later->size < e->min) e->min = later->size;
      if (later->size > e->max) e->max = later->size;
    }
    if (later->free_at - (j - k) > e->end) e->end = later->free_at - (j - k);
  }
  /* A size that followed the data gets a quarter of its spread more room above (at most 2^64 - 1). */
  uint64_t more = (e->max - e->min) / 4;
  e->max = more > UINT64_MAX - e->max ? UINT64_MAX : e->max + more;
  int recurs = e->end != PLAN_NONE && e->end - e->start <= p && c->size > 0 &&
               (o->dynamic || e->max - e->min <= e->min / 2);
  e->offset = recurs ? 0 : PLAN_NONE;
}

/* What Planned's reader would refuse in a plan of allocator name with these options, said before
 * anything is built: 0, or -1 with a sentence. */
static int check_name_opts(const char *name, const plan_opts *o, char *err, size_t cap) {
  size_t len = strlen(name);
  if (len == 0) {
    snprintf(err, cap, "an allocator of the trace has an empty name: a plan's domain is named (Planned "
             "refuses 'domain' without a name)");
    return -1;
  }
  if (len > RAPI_PLAN_MAX_NAME) {
    snprintf(err, cap, "the name of allocator '%.32s...' is %zu bytes: a plan's domain name is at most %u "
             "(Planned reads a plan's line up to %u bytes)", name, len, RAPI_PLAN_MAX_NAME, RAPI_PLAN_MAX_LINE);
    return -1;
  }
  if (o->alignment == 0 || (o->alignment & (o->alignment - 1)) != 0 || o->alignment > RAPI_PLAN_MAX_ALIGNMENT) {
    snprintf(err, cap, "the alignment %llu is not a power of two up to %llu (what Planned reads)",
             (unsigned long long)o->alignment, RAPI_PLAN_MAX_ALIGNMENT);
    return -1;
  }
  return 0;
}

int plan_build(const trace *t, int a, const plan_opts *o, plan_domain *out, char *err, size_t cap) {
  memset(out, 0, sizeof *out);
  calls cs;
  memset(&cs, 0, sizeof cs);
  int rc = -1;
  const char *name = t->names[a];
  if (check_name_opts(name, o, err, cap) != 0 || collect(t, a, &cs, err, cap) != 0) goto out;
  size_t base = 0, p = 0, iters = 0;
  if (cs.nsteps >= 2 + o->skip_iterations) {
    /* Step lines: iteration j runs from step j to step j + 1. */
    base = cs.steps[o->skip_iterations];
    p = cs.steps[o->skip_iterations + 1] - base;
    iters = cs.nsteps - 1;
    out->by_steps = 1;
  } else if (by_period(&cs, name, o, &base, &p, &iters, err, cap) != 0) {
    goto out;
  }
  if (p == 0) {
    snprintf(err, cap, "the iteration of '%s' has no allocation", name);
    goto out;
  }
  if (p > RAPI_PLAN_MAX_ENTRIES) {
    snprintf(err, cap, "the iteration of '%s' holds %zu allocations: a plan holds at most %u (Planned "
             "refuses more)", name, p, RAPI_PLAN_MAX_ENTRIES);
    goto out;
  }
  out->e = calloc(p, sizeof *out->e);
  out->name = strdup(name);
  if (out->e == NULL || out->name == NULL) {
    snprintf(err, cap, "out of memory");
    goto out;
  }
  out->n = p;
  out->first = base;
  out->iterations = iters;
  out->alignment = o->alignment;
  for (size_t k = 0; k < p; k++) {
    plan_entry *e = &out->e[k];
    make_entry(&cs, base, p, k, o, out->by_steps, e);
    if (e->offset != PLAN_NONE && e->max > (RAPI_PLAN_MAX_ARENA & ~(o->alignment - 1))) {
      snprintf(err, cap, "allocation %zu of the iteration of '%s' recurs with %llu bytes: more than a "
               "plan's arena holds (%llu bytes, what Planned reads); is the trace damaged?", k, name,
               (unsigned long long)e->max, (unsigned long long)RAPI_PLAN_MAX_ARENA);
      goto out;
    }
  }
  out->streams = cs.nids;
  int placed = place_all(out);
  if (placed == -2)
    snprintf(err, cap, "the allocations of '%s' that recur need an arena of more than %llu bytes: more "
             "than a plan holds (what Planned reads); is the trace damaged?", name,
             (unsigned long long)RAPI_PLAN_MAX_ARENA);
  else if (placed != 0)
    snprintf(err, cap, "out of memory placing %zu entries", p);
  rc = placed == 0 ? 0 : -1;
out:
  if (rc != 0) plan_domain_free(out);
  free(cs.c);
  free(cs.steps);
  return rc;
}

void plan_domain_free(plan_domain *d) {
  free(d->e);
  free(d->name);
  memset(d, 0, sizeof *d);
}

/* ---- the file --------------------------------------------------------------------------------- */

typedef struct sum_out {
  FILE *f;
  uint64_t h;
  int bad;
} sum_out;

/* Writes a line, at most RAPI_PLAN_MAX_LINE bytes (what Planned reads), and folds it into the
 * checksum (FNV-1a over every line but comments). */
static void line(sum_out *s, int comment, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void line(sum_out *s, int comment, const char *fmt, ...) {
  char buf[RAPI_PLAN_MAX_LINE + 1];
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (len < 0 || (size_t)len > RAPI_PLAN_MAX_LINE) {
    s->bad = 1;
    return;
  }
  for (int i = 0; !comment && i < len; i++) s->h = (s->h ^ (unsigned char)buf[i]) * 1099511628211ull;
  if (fwrite(buf, 1, (size_t)len, s->f) != (size_t)len) s->bad = 1;
}

int plan_write(FILE *f, const plan_domain *d, size_t nd) {
  for (size_t k = 0; k < nd; k++) {
    const plan_domain *p = &d[k];
    sum_out s = {f, 1469598103934665603ull, 0};
    line(&s, 1, "# %s: %zu allocations an iteration (%s, %zu seen), %zu placed; arena %llu bytes for "
         "%llu live at most (%.4f); placed by %s\n", p->name, p->n,
         p->by_steps ? "step lines" : "period of the sequence", p->iterations, p->placed,
         (unsigned long long)p->arena, (unsigned long long)p->live_peak,
         p->live_peak ? (double)p->arena / (double)p->live_peak : 1.0, p->order ? p->order : "-");
    line(&s, 0, "rap-plan 1\n");
    line(&s, 0, "domain %s\n", p->name);
    line(&s, 0, "streams %zu\n", p->streams);
    line(&s, 0, "alignment %llu\n", (unsigned long long)p->alignment);
    line(&s, 0, "arena %llu\n", (unsigned long long)p->arena);
    line(&s, 0, "entries %zu\n", p->n);
    for (size_t i = 0; i < p->n; i++) {
      const plan_entry *e = &p->e[i];
      char off[24] = "-", end[24] = "-";
      if (e->offset != PLAN_NONE) snprintf(off, sizeof off, "%llu", (unsigned long long)e->offset);
      if (e->end != PLAN_NONE) snprintf(end, sizeof end, "%llu", (unsigned long long)e->end);
      line(&s, 0, "%u %llu %llu %s %llu %s\n", e->stream, (unsigned long long)e->min,
           (unsigned long long)e->max, off, (unsigned long long)e->start, end);
    }
    if (s.bad) return -1;
    fprintf(f, "end %016llx\n", (unsigned long long)s.h);
  }
  return ferror(f) ? -1 : 0;
}

int plan_check_file(const plan_domain *d, size_t nd, char *err, size_t cap) {
  /* Eight lines a domain of at most RAPI_PLAN_MAX_LINE bytes, and its entries' lines: at most
   * 2^16 domains of 2^26 entries, far below 2^64. */
  uint64_t most = 0;
  for (size_t k = 0; k < nd; k++) most += 8ull * RAPI_PLAN_MAX_LINE + (uint64_t)d[k].n * RAPI_PLAN_ENTRY_LINE;
  if (most <= RAPI_PLAN_MAX_FILE) return 0;
  snprintf(err, cap, "the plan of %zu domain%s could take %llu bytes: more than a plan file may hold "
           "(%llu bytes, what Planned reads); plan one allocator at a time (--allocator NAME)", nd,
           nd == 1 ? "" : "s", (unsigned long long)most, (unsigned long long)RAPI_PLAN_MAX_FILE);
  return -1;
}
