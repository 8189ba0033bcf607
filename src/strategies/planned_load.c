/* planned_load.c — reads a plan file (rap-trace plan writes it; docs/trace.md has the format) for
 * the Planned strategy, and cuts the arena into cells.
 *
 * Every line is checked: the header, the counts, each entry's stream, sizes and place (inside the
 * arena, aligned), and a checksum over the domain's lines, so a damaged or hand-broken file is a
 * status with a sentence naming the line, never a plan that hands out the wrong bytes. Where two
 * placed entries overlap in the arena the plan is still taken: the strategy never hands out a
 * cell in use, so such a plan only misses. What is read is bounded (plan_file.h): only a regular
 * file is read (a FIFO, a device or a directory is refused before a byte is read, and opening never
 * waits), no larger than RAPI_PLAN_MAX_FILE and no further than its size when opened, a line at a
 * time of at most RAPI_PLAN_MAX_LINE bytes.
 */
#define _POSIX_C_SOURCE 200809L   /* O_CLOEXEC */
#include "planned.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct reader {
  FILE *f;
  const char *path, *who;
  unsigned long lineno;
  uint64_t sum;
  uint64_t left;    /* bytes of the file, as it was opened, not read yet */
  int st;           /* RAP_OK, or the status of a line refused by next_line (the sentence is set) */
  char line[RAPI_PLAN_MAX_LINE + 1];
} reader;

static int bad(reader *rd, const char *what) {
  return rapi_fail(RAP_ERR_INVALID, "%s: plan file '%s', line %lu: %s", rd->who, rd->path,
                   rd->lineno, what);
}

/* The next line that is not a comment or blank, without its newline, folded into the checksum;
 * NULL at the end of the file, or with rd->st set where the line is refused: longer than
 * RAPI_PLAN_MAX_LINE, holding a NUL byte, or past the bytes the file held when it was opened. */
static char *next_line(reader *rd) {
  while (rd->st == RAP_OK) {
    size_t len = 0;
    int c = 0;
    while (len < RAPI_PLAN_MAX_LINE && c != '\n' && (c = getc(rd->f)) != EOF) rd->line[len++] = (char)c;
    if (len == 0) {
      if (ferror(rd->f)) rd->st = bad(rd, "the file cannot be read further");
      return NULL;
    }
    rd->lineno++;
    if (rd->line[len - 1] != '\n' && len == RAPI_PLAN_MAX_LINE && getc(rd->f) != EOF) {
      char what[96];
      snprintf(what, sizeof what, "the line is longer than %u bytes: not a plan file", RAPI_PLAN_MAX_LINE);
      rd->st = bad(rd, what);
    } else if (len > rd->left) {
      rd->st = bad(rd, "the file grew while it was read (is it being written?)");
    } else if (memchr(rd->line, '\0', len) != NULL) {
      rd->st = bad(rd, "the line holds a NUL byte: not a plan file");
    }
    if (rd->st != RAP_OK) return NULL;
    rd->left -= len;
    if (rd->line[0] == '#' || rd->line[0] == '\n') continue;
    if (strncmp(rd->line, "end ", 4) != 0)
      for (size_t i = 0; i < len; i++) rd->sum = (rd->sum ^ (unsigned char)rd->line[i]) * 1099511628211ull;
    if (rd->line[len - 1] == '\n') len--;
    rd->line[len] = '\0';
    return rd->line;
  }
  return NULL;
}

/* A line expected and not there: the sentence of the line next_line refused, or what. */
static int missing(reader *rd, const char *what) { return rd->st != RAP_OK ? rd->st : bad(rd, what); }

/* "key N": N, or -1 with the sentence set. */
static int keyed(reader *rd, const char *key, uint64_t max, uint64_t *out) {
  char *l = next_line(rd);
  size_t k = strlen(key);
  if (l == NULL) return missing(rd, "the file ends inside a domain"), -1;
  if (strncmp(l, key, k) != 0 || l[k] != ' ') {
    char what[96];
    snprintf(what, sizeof what, "'%s N' expected", key);
    return bad(rd, what), -1;
  }
  char *end;
  errno = 0;
  unsigned long long v = strtoull(l + k + 1, &end, 10);
  if (errno != 0 || end == l + k + 1 || *end != '\0' || v > max) {
    char what[96];
    snprintf(what, sizeof what, "'%s' is not a number up to %llu", key, (unsigned long long)max);
    return bad(rd, what), -1;
  }
  *out = v;
  return 0;
}

/* One field of an entry line: a number, or '-' (RAPI_PLAN_NONE) where dash is allowed. */
static int field(char **s, int dash, uint64_t *out) {
  while (**s == ' ') (*s)++;
  if (dash && **s == '-' && ((*s)[1] == ' ' || (*s)[1] == '\0')) {
    (*s)++;
    *out = RAPI_PLAN_NONE;
    return 0;
  }
  if (**s < '0' || **s > '9') return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(*s, &end, 10);
  if (errno != 0 || (*end != ' ' && *end != '\0')) return -1;
  *s = end;
  *out = v;
  return 0;
}

static int entry_line(reader *rd, const rapi_plan *p, rapi_plan_entry *e) {
  char *s = next_line(rd);
  if (s == NULL) return missing(rd, "the file ends before the domain's last entry");
  uint64_t stream, start, end;
  if (field(&s, 0, &stream) || field(&s, 0, &e->min) || field(&s, 0, &e->max) || field(&s, 1, &e->off) ||
      field(&s, 0, &start) || field(&s, 1, &end) || *s != '\0')
    return bad(rd, "an entry is 'STREAM MIN MAX OFFSET|- START END|-'");
  if (stream >= p->streams) return bad(rd, "the entry's stream is not below 'streams'");
  if (e->min > e->max) return bad(rd, "the entry's MIN is above its MAX");
  if (e->off != RAPI_PLAN_NONE) {
    uint64_t size = e->max == 0 ? p->alignment : (e->max + p->alignment - 1) & ~(p->alignment - 1);
    if (e->max > UINT64_MAX / 2 || e->off % p->alignment != 0 || e->off > p->arena || size > p->arena - e->off)
      return bad(rd, "the entry's place is not aligned inside the arena");
  }
  e->stream = (uint32_t)stream;
  return RAP_OK;
}

/* The domain that starts at the "rap-plan 1" just read; keep says whether it is the one asked. */
static int read_domain(reader *rd, rapi_plan *p, int keep) {
  uint64_t streams, alignment, arena, n;
  if (keyed(rd, "streams", RAPI_PLAN_MAX_STREAMS, &streams) ||
      keyed(rd, "alignment", RAPI_PLAN_MAX_ALIGNMENT, &alignment) ||
      keyed(rd, "arena", RAPI_PLAN_MAX_ARENA, &arena) || keyed(rd, "entries", RAPI_PLAN_MAX_ENTRIES, &n))
    return RAP_ERR_INVALID;
  if (!rapi_is_pow2(alignment)) return bad(rd, "'alignment' is not a power of two");
  if (n == 0) return bad(rd, "a domain has no entries");
  rapi_plan q = {NULL, (size_t)n, (size_t)streams, 0, alignment, arena};
  if (keep && (q.e = rapi_calloc((size_t)n, sizeof *q.e)) == NULL)
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for a plan of %llu entries", rd->who,
                     (unsigned long long)n);
  for (uint64_t i = 0; i < n; i++) {
    rapi_plan_entry scratch;
    int st = entry_line(rd, &q, keep ? &q.e[i] : &scratch);
    if (st != RAP_OK) {
      free(q.e);
      return st;
    }
  }
  uint64_t sum = rd->sum;
  char *l = next_line(rd);
  char *end = NULL;
  unsigned long long want = l != NULL && strncmp(l, "end ", 4) == 0 ? strtoull(l + 4, &end, 16) : 0;
  if (end == NULL || *end != '\0' || end == l + 4) {
    free(q.e);
    return missing(rd, "'end CHECKSUM' expected after the last entry");
  }
  if (want != sum) {
    free(q.e);
    return bad(rd, "the checksum does not match the domain's lines: the file was changed or cut");
  }
  if (keep) *p = q;
  return RAP_OK;
}

static int by_value(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return (a > b) - (a < b);
}

static uint32_t cell_of(const uint64_t *b, size_t n, uint64_t v) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (b[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return (uint32_t)lo;
}

/* Cells: the arena cut at every placed entry's start and end. */
static int make_cells(rapi_plan *p, const char *who) {
  uint64_t *b = rapi_malloc((2 * p->n + 1) * sizeof *b);
  if (b == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for the plan's cells", who);
  size_t m = 0;
  for (size_t i = 0; i < p->n; i++) {
    const rapi_plan_entry *e = &p->e[i];
    if (e->off == RAPI_PLAN_NONE) continue;
    b[m++] = e->off;
    b[m++] = e->off + (e->max == 0 ? p->alignment : rapi_align_up(e->max, p->alignment));
  }
  qsort(b, m, sizeof *b, by_value);
  size_t u = 0;
  for (size_t i = 0; i < m; i++)
    if (u == 0 || b[u - 1] != b[i]) b[u++] = b[i];
  for (size_t i = 0; i < p->n; i++) {
    rapi_plan_entry *e = &p->e[i];
    if (e->off == RAPI_PLAN_NONE) continue;
    e->c0 = cell_of(b, u, e->off);
    e->c1 = cell_of(b, u, e->off + (e->max == 0 ? p->alignment : rapi_align_up(e->max, p->alignment)));
  }
  p->ncells = u > 0 ? u - 1 : 0;
  free(b);
  return RAP_OK;
}

static const char *file_kind(mode_t m) {
  return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* Opens the plan file for rd: a regular file of at most RAPI_PLAN_MAX_FILE bytes. The open does
 * not wait (O_NONBLOCK: a FIFO without a writer would block it; on a regular file the flag does
 * nothing), and what it opened is looked at before a byte is read. */
static int open_plan(reader *rd) {
  int fd = open(rd->path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return rapi_fail(errno == ENOENT ? RAP_ERR_NOT_FOUND : RAP_ERR_INVALID,
                     "%s: cannot open the plan file '%s': %s", rd->who, rd->path, strerror(errno));
  struct stat sb;
  int st = RAP_OK;
  if (fstat(fd, &sb) != 0)
    st = rapi_fail(RAP_ERR_INVALID, "%s: cannot look at the plan file '%s': %s", rd->who, rd->path,
                   strerror(errno));
  else if (!S_ISREG(sb.st_mode))
    st = rapi_fail(RAP_ERR_INVALID, "%s: the plan file '%s' is %s, not a regular file: a plan is the "
                   "file rap-trace plan wrote", rd->who, rd->path, file_kind(sb.st_mode));
  else if ((uint64_t)sb.st_size > RAPI_PLAN_MAX_FILE)
    st = rapi_fail(RAP_ERR_INVALID, "%s: the plan file '%s' holds %llu bytes: more than a plan file "
                   "may (%llu)", rd->who, rd->path, (unsigned long long)sb.st_size, RAPI_PLAN_MAX_FILE);
  else if ((rd->f = fdopen(fd, "r")) == NULL)
    st = rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory to read the plan file '%s'", rd->who, rd->path);
  if (st != RAP_OK) {
    close(fd);
    return st;
  }
  rd->left = (uint64_t)sb.st_size;
  return RAP_OK;
}

int rapi_plan_load(const char *path, const char *domain, const char *who, rapi_plan *out) {
  reader rd = {NULL, path, who, 0, 0, 0, RAP_OK, ""};
  int st = open_plan(&rd);
  if (st != RAP_OK) return st;
  rapi_plan p = {0};
  int found = 0, domains = 0;
  char first[RAPI_NAME_MAX] = "";
  char *l;
  while (st == RAP_OK && (l = next_line(&rd)) != NULL) {
    if (strcmp(l, "rap-plan 1") != 0) {
      st = bad(&rd, strncmp(l, "rap-plan ", 9) == 0 ? "a plan of another version (this rap reads 'rap-plan 1')"
                                                    : "'rap-plan 1' expected: not a plan file");
      break;
    }
    rd.sum = 1469598103934665603ull;
    for (const char *c = l; *c; c++) rd.sum = (rd.sum ^ (unsigned char)*c) * 1099511628211ull;
    rd.sum = (rd.sum ^ '\n') * 1099511628211ull;
    l = next_line(&rd);
    if (l == NULL || strncmp(l, "domain ", 7) != 0 || l[7] == '\0') {
      st = missing(&rd, "'domain NAME' expected");
      break;
    }
    int keep = !found && (domain == NULL ? domains == 0 : strcmp(l + 7, domain) == 0);
    if (domains++ == 0) snprintf(first, sizeof first, "%s", l + 7);
    st = read_domain(&rd, &p, keep);
    found |= keep && st == RAP_OK;
  }
  if (st == RAP_OK) st = rd.st;
  fclose(rd.f);
  if (st == RAP_OK && domains == 0)
    st = rapi_fail(RAP_ERR_INVALID, "%s: the plan file '%s' holds no plan", who, path);
  if (st == RAP_OK && domain == NULL && domains > 1)
    st = rapi_fail(RAP_ERR_INVALID, "%s: the plan file '%s' holds %d domains: name one with "
                   "domain=NAME (the first is '%s')", who, path, domains, first);
  if (st == RAP_OK && !found)
    st = rapi_fail(RAP_ERR_NOT_FOUND, "%s: the plan file '%s' has no domain '%s'", who, path, domain);
  if (st == RAP_OK) st = make_cells(&p, who);
  if (st != RAP_OK) {
    free(p.e);
    return st;
  }
  *out = p;
  return RAP_OK;
}

void rapi_plan_free(rapi_plan *p) {
  free(p->e);
  memset(p, 0, sizeof *p);
}
