/* trace_plot.c — a memory timeline of a trace (rap-trace plot).
 *
 * Per resource, live bytes (the user's calls) and pending bytes (what ResourceAwarePools hold for
 * it, from the levels their pending/ready/reuse lines carry), stacked; over them, a line per pool
 * for what it holds from its parent (grow/release). Time runs left to right, split into one slice
 * per column: each column shows the live and pending series at the instant their stacked sum was
 * largest in its slice, and each pool's line at its largest, so no peak is lost however long the
 * trace, and the stack never adds bytes that two series held at different instants. SVG alone, or
 * an HTML page with the SVG inline and a table of peaks.
 */
#include "trace_plot.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { COLS = 1000, W = 1280, H = 560, ML = 90, MR = 330, MT = 50, MB = 60, MAX_SERIES = 24 };

typedef struct series {
  int kind;          /* 0 live, 1 pending (of a resource), 2 held (of a pool) */
  int64_t r;         /* live/pending: the resource */
  int a;             /* held: the pool */
  uint64_t now, peak;
  uint64_t col[COLS];
  char label[96];
} series;

typedef struct plot {
  series s[MAX_SERIES];
  int n;
  uint64_t span;     /* ns */
} plot;

static const char *const palette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                      "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

static series *find(plot *pl, int kind, int64_t r, int a, const trace *t, const te *e) {
  for (int i = 0; i < pl->n; i++)
    if (pl->s[i].kind == kind && pl->s[i].r == r && pl->s[i].a == a) return &pl->s[i];
  if (pl->n == MAX_SERIES) return NULL;
  series *s = &pl->s[pl->n++];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->r = r;
  s->a = a;
  const char *rk = e->r >= 0 && e->rk < t->nkinds ? t->kinds[e->rk] : "host";
  if (kind == 2) snprintf(s->label, sizeof s->label, "held by '%s'", t->names[a]);
  else if (r == 0) snprintf(s->label, sizeof s->label, "%s, host", kind ? "pending" : "live");
  else snprintf(s->label, sizeof s->label, "%s, %s #%lld", kind ? "pending" : "live", rk, (long long)r);
  return s;
}


static size_t column(const plot *pl, uint64_t t) {
  size_t c = (size_t)((double)t / (double)pl->span * (COLS - 1));
  return c < COLS ? c : COLS - 1;
}

/* Per column: the stacked series (live, pending) at the instant their sum was largest, so the
 * stack never shows bytes two series held at different instants; a pool's line at its largest.
 * A column without events carries the values the previous one ended with. */
typedef struct columns {
  uint64_t best[COLS];                  /* the largest stacked sum seen in the column */
  uint64_t at_best[COLS][MAX_SERIES];   /* every series at that instant */
  uint64_t end[COLS][MAX_SERIES];       /* every series at the column's last event */
  uint64_t held_max[COLS][MAX_SERIES];  /* a pool's line: its largest value in the column */
  uint8_t had[COLS];
} columns;

static void record(plot *pl, columns *cs, uint64_t t) {
  size_t c = column(pl, t);
  uint64_t total = 0;
  for (int i = 0; i < pl->n; i++)
    if (pl->s[i].kind < 2) total += pl->s[i].now;
  if (!cs->had[c] || total >= cs->best[c]) {
    cs->best[c] = total;
    for (int i = 0; i < pl->n; i++) cs->at_best[c][i] = pl->s[i].now;
  }
  for (int i = 0; i < pl->n; i++) {
    cs->end[c][i] = pl->s[i].now;
    if (pl->s[i].kind == 2 && pl->s[i].now > cs->held_max[c][i]) cs->held_max[c][i] = pl->s[i].now;
  }
  cs->had[c] = 1;
}

static void fill(plot *pl, const columns *cs) {
  uint64_t carry[MAX_SERIES] = {0};
  for (size_t c = 0; c < COLS; c++) {
    uint64_t carried = 0;
    for (int i = 0; i < pl->n; i++)
      if (pl->s[i].kind < 2) carried += carry[i];
    bool use_carry = !cs->had[c] || carried > cs->best[c];
    for (int i = 0; i < pl->n; i++) {
      uint64_t v = use_carry ? carry[i] : cs->at_best[c][i];
      if (pl->s[i].kind == 2) {   /* a line: the largest of what it came in with and reached */
        v = carry[i];
        if (cs->had[c] && cs->held_max[c][i] > v) v = cs->held_max[c][i];
      }
      pl->s[i].col[c] = v;
      if (cs->had[c]) carry[i] = cs->end[c][i];
    }
  }
}

/* Whether allocator b is a (or, a >= 0, one of the chain under it: "a/QuickPool", ...), so that a
 * plot of one allocator draws its own pools' lines and pending bytes, and no other's. */
static bool in_chain(const trace *t, int a, int b) {
  if (a < 0 || a == b) return true;
  size_t n = strlen(t->names[a]);
  return strncmp(t->names[b], t->names[a], n) == 0 && t->names[b][n] == '/';
}

static int build(plot *pl, const trace *t, int a) {
  memset(pl, 0, sizeof *pl);
  pl->span = t->ev[t->n - 1].t ? t->ev[t->n - 1].t : 1;
  columns *cs = calloc(1, sizeof *cs);
  pmap sizes = {0}, owner = {0};
  if (cs == NULL) return -1;
  for (size_t i = 0; i < t->n; i++) {
    const te *e = &t->ev[i];
    series *s = NULL;
    uint64_t v = 0;
    if ((e->kind == TE_ALLOC || e->kind == TE_DEALLOC) && e->d == 0 && !e->skip && (a < 0 || e->a == a)) {
      int64_t r = e->r;
      if (e->kind == TE_ALLOC) {
        pmap_put(&sizes, e->p, e->n);
        pmap_put(&owner, e->p, (uint64_t)(r < 0 ? 0 : r) + 1);
        if ((s = find(pl, 0, r < 0 ? 0 : r, -1, t, e)) != NULL) v = s->now + e->n;
      } else {
        uint64_t n = 0, o = 0;
        if (!pmap_del(&sizes, e->p, &n)) continue;
        pmap_del(&owner, e->p, &o);
        if ((s = find(pl, 0, (int64_t)(o - 1), -1, t, e)) != NULL) v = s->now - n;
      }
    } else if ((e->kind == TE_PENDING || e->kind == TE_READY || e->kind == TE_REUSE) && in_chain(t, a, e->a)) {
      s = find(pl, 1, e->r < 0 ? 0 : e->r, -1, t, e);
      v = e->level;
    } else if ((e->kind == TE_GROW || e->kind == TE_RELEASE) && in_chain(t, a, e->a)) {
      s = find(pl, 2, -1, e->a, t, e);
      v = e->level;
    }
    if (s == NULL) continue;
    s->now = v;
    if (v > s->peak) s->peak = v;
    record(pl, cs, e->t);
  }
  fill(pl, cs);
  free(cs);
  pmap_free(&sizes);
  pmap_free(&owner);
  return 0;
}

static void human(char *buf, size_t cap, double bytes) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (bytes >= 1024 && i < 4) bytes /= 1024, i++;
  snprintf(buf, cap, bytes >= 100 || i == 0 ? "%.0f %s" : "%.1f %s", bytes, u[i]);
}

static double nice_step(double range, int ticks) {
  double raw = range / ticks, p = 1;
  while (p * 10 <= raw) p *= 10;
  while (p > raw) p /= 10;
  double m = raw / p;
  return p * (m < 2 ? 2 : m < 5 ? 5 : 10);
}

static void esc(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else fputc(*s, f);
  }
}

/* A resource's colour, shared by its live and its pending band (lighter): the resources in the
 * order their live bands come, then those with pending bytes and no live band. */
static int resource_colour(const plot *pl, int64_t r) {
  int n = 0;
  for (int kind = 0; kind < 2; kind++)
    for (int i = 0; i < pl->n; i++) {
      const series *s = &pl->s[i];
      if (s->kind != kind) continue;
      bool seen = false;
      for (int j = 0; j < pl->n && kind == 1 && !seen; j++)
        seen = pl->s[j].kind == 0 && pl->s[j].r == s->r;
      if (seen) continue;
      if (s->r == r) return n;
      n++;
    }
  return n;
}

static void svg(FILE *f, const plot *pl, const char *title) {
  double pw = W - ML - MR, ph = H - MT - MB;
  /* The top: the stack of live and pending, or the highest pool line. */
  double top = 1;
  for (size_t c = 0; c < COLS; c++) {
    double stack = 0;
    for (int i = 0; i < pl->n; i++) {
      if (pl->s[i].kind < 2) stack += (double)pl->s[i].col[c];
      else if ((double)pl->s[i].col[c] > top) top = (double)pl->s[i].col[c];
    }
    if (stack > top) top = stack;
  }
  double unit = 1;
  while (top / unit >= 1024 && unit < 1099511627776.0) unit *= 1024;
  double step = nice_step(top / unit, 5) * unit;
  top = step * (double)(long)((top + step - 1) / step);
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
  fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n<text x=\"%d\" y=\"28\" "
             "font-size=\"16\">", W, H, ML);
  esc(f, title);
  fprintf(f, "</text>\n");
  for (double y = 0; y <= top + 1; y += step) {   /* the y axis */
    double py = MT + ph - y / top * ph;
    char lab[32];
    human(lab, sizeof lab, y);
    fprintf(f, "<line x1=\"%d\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
               "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
            ML, ML + pw, py, py, ML - 6, py + 4, lab);
  }
  double span_s = (double)pl->span * 1e-9, xs = nice_step(span_s, 8);
  const char *xu = span_s >= 2 ? "s" : "ms";
  double xm = span_s >= 2 ? 1 : 1000;
  for (double x = 0; x <= span_s * 1.0001; x += xs) {   /* the x axis */
    double px = ML + x / span_s * pw;
    fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.0f\" stroke=\"#eee\"/>"
               "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%g %s</text>\n",
            px, px, MT, MT + ph, px, MT + ph + 18, x * xm, xu);
  }
  fprintf(f, "<text x=\"%.0f\" y=\"%d\" text-anchor=\"middle\">time since the trace began</text>\n",
          ML + pw / 2, H - 14);
  /* Stacked areas: live of each resource, then pending of each, bottom up. */
  double *base = calloc(COLS, sizeof *base);
  if (base == NULL) return;
  int pools = 0, legend = 0;
  for (int kind = 0; kind < 3; kind++) {
    for (int i = 0; i < pl->n; i++) {
      const series *s = &pl->s[i];
      if (s->kind != kind) continue;
      const char *col = palette[(kind == 2 ? 6 + pools++ : resource_colour(pl, s->r)) % 10];
      if (kind < 2) {
        fprintf(f, "<path fill=\"%s\" fill-opacity=\"%s\" stroke=\"none\" d=\"", col, kind ? "0.35" : "0.85");
        for (size_t c = 0; c < COLS; c++)
          fprintf(f, "%s%.1f,%.1f", c ? " L" : "M", ML + (double)c / (COLS - 1) * pw,
                  MT + ph - (base[c] + (double)s->col[c]) / top * ph);
        for (size_t c = COLS; c-- > 0;)
          fprintf(f, " L%.1f,%.1f", ML + (double)c / (COLS - 1) * pw, MT + ph - base[c] / top * ph);
        fprintf(f, " Z\"/>\n");
        for (size_t c = 0; c < COLS; c++) base[c] += (double)s->col[c];
      } else {
        fprintf(f, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"2\" d=\"", col);
        for (size_t c = 0; c < COLS; c++)
          fprintf(f, "%s%.1f,%.1f", c ? " L" : "M", ML + (double)c / (COLS - 1) * pw,
                  MT + ph - (double)s->col[c] / top * ph);
        fprintf(f, "\"/>\n");
      }
      char pk[32];
      human(pk, sizeof pk, (double)s->peak);
      double ly = MT + 10 + legend * 20;
      fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"%s\" fill=\"%s\" fill-opacity=\"%s\"/>"
                 "<text x=\"%.0f\" y=\"%.0f\">",
              ML + pw + 16, ly - 9, kind == 2 ? "3" : "12", col, kind == 1 ? "0.35" : "0.85",
              ML + pw + 36, ly + 2);
      esc(f, s->label);
      fprintf(f, " (peak %s)</text>\n", pk);
      legend++;
    }
  }
  free(base);
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#888\"/>\n",
          ML, MT, pw, ph);
  fprintf(f, "</svg>\n");
}

int trace_plot(const trace *t, const plot_opts *o) {
  int a = -1;
  if (o->allocator != NULL && (a = trace_name(t, o->allocator)) < 0) {
    fprintf(stderr, "rap-trace: the trace has no allocator '%s'\n", o->allocator);
    return 1;
  }
  size_t len = strlen(o->out);
  int html = len > 5 && strcmp(o->out + len - 5, ".html") == 0;
  if (!html && !(len > 4 && strcmp(o->out + len - 4, ".svg") == 0)) {
    fprintf(stderr, "rap-trace: -o names a .svg or .html file, not '%s'\n", o->out);
    return 1;
  }
  plot *pl = malloc(sizeof *pl);
  if (pl == NULL || build(pl, t, a) != 0) {
    free(pl);
    fprintf(stderr, "rap-trace: out of memory\n");
    return 1;
  }
  FILE *f = fopen(o->out, "w");
  if (f == NULL) {
    free(pl);
    fprintf(stderr, "rap-trace: cannot write '%s': %s\n", o->out, strerror(errno));
    return 1;
  }
  char title[256];
  snprintf(title, sizeof title, "%s", o->title ? o->title : "rap: memory over time");
  if (html) {
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>");
    esc(f, title);
    fprintf(f, "</title><style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 12px;"
               "text-align:right}th{text-align:left}</style></head><body>\n");
  }
  svg(f, pl, title);
  if (html) {
    fprintf(f, "<p>Each column shows live and pending at the instant their sum was largest within its slice "
               "of time, and each pool's line at its largest. "
               "Live: bytes the user holds, per resource. Pending: bytes freed on a resource whose "
               "work may still use them. Held: what each pool holds from its parent.</p>\n"
               "<table><tr><th>series</th><th>peak</th><th>at the end</th></tr>\n");
    for (int i = 0; i < pl->n; i++) {
      char pk[32], now[32];
      human(pk, sizeof pk, (double)pl->s[i].peak);
      human(now, sizeof now, (double)pl->s[i].now);
      fprintf(f, "<tr><th>");
      esc(f, pl->s[i].label);
      fprintf(f, "</th><td>%s</td><td>%s</td></tr>\n", pk, now);
    }
    fprintf(f, "</table>\n<p>%zu events, %.3f s.</p></body></html>\n", t->n, (double)pl->span * 1e-9);
  }
  int n = pl->n;
  uint64_t span = pl->span;
  free(pl);
  long size = ftell(f);
  if (fclose(f) != 0) {
    fprintf(stderr, "rap-trace: writing '%s' failed\n", o->out);
    return 1;
  }
  char sz[32];
  human(sz, sizeof sz, (double)(size > 0 ? size : 0));
  printf("rap-trace: wrote %s (%s): %d series of %s%s%s over %.3f s\n", o->out, sz, n, a >= 0 ? "'" : "",
         a >= 0 ? t->names[a] : "every allocator", a >= 0 ? "'" : "", (double)span * 1e-9);
  return 0;
}
