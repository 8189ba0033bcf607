/* trace_read.c — reads a JSON Lines trace (trace_read.h). */
#define _POSIX_C_SOURCE 200809L   /* getline */
#include "trace_read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* uthash never exits here: a failed table allocation sets hash_oom and rolls the add back. */
static int hash_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (hash_oom = 1)
#include <uthash.h>

struct name_ix {
  UT_hash_handle hh;
  long i;
};

struct kmap_item {
  struct kmap_key {
    uint64_t p;
    uint32_t a, b;
  } key;
  uint64_t val;
  UT_hash_handle hh;
};

const char *const te_kind_names[TE_KINDS] = {"alloc", "dealloc", "refused", "oom", "pending",
                                             "ready", "reuse", "fence", "wait", "grow", "release",
                                             "step", "other"};

/* The index of a string in a table (arr, n, cap, index), added when new; -1 past max strings or out
 * of memory. */
static long intern_into(char ***arr, size_t *n, size_t *cap, struct name_ix **index, size_t max,
                        const char *s, size_t len) {
  struct name_ix *x = NULL;
  HASH_FIND(hh, *index, s, len, x);
  if (x != NULL) return x->i;
  if (*n >= max) return -1;
  if (*n == *cap) {
    size_t ncap = *cap ? *cap * 2 : 16;
    char **grown = realloc(*arr, ncap * sizeof *grown);
    if (grown == NULL) return -1;
    *arr = grown;
    *cap = ncap;
  }
  char *copy = malloc(len + 1);
  x = malloc(sizeof *x);
  if (copy == NULL || x == NULL) {
    free(copy);
    free(x);
    return -1;
  }
  memcpy(copy, s, len);
  copy[len] = '\0';
  x->i = (long)*n;
  hash_oom = 0;
  HASH_ADD_KEYPTR(hh, *index, copy, len, x);
  if (hash_oom) {
    free(copy);
    free(x);
    return -1;
  }
  (*arr)[*n] = copy;
  return (long)(*n)++;
}

/* The index of an allocator name; -1 past 65 535 names or out of memory. */
static int intern(trace *t, const char *s, size_t len) {
  return (int)intern_into(&t->names, &t->nnames, &t->names_cap, &t->name_index, 65535, s, len);
}

/* A string value starting after its opening quote: its end (the closing quote), escapes skipped
 * (names are kept escaped: they are only compared and printed back). */
static const char *string_end(const char *s) {
  for (; *s != '\0' && *s != '"'; s++)
    if (*s == '\\' && s[1] != '\0') s++;
  return *s == '"' ? s : NULL;
}

/* The index of a site (a pair of stacks) in t->sites, added when new; -1 out of memory. */
static long add_site(trace *t, trace_site site) {
  uint64_t key = (uint64_t)site.stack << 32 | site.pystack, *known = kmap_get(&t->site_index, key, 0, 0);
  if (known != NULL) return (long)*known;
  if (t->nsites >= 0xfffffffe) return -1;
  if (t->nsites == t->sites_cap) {
    size_t ncap = t->sites_cap ? t->sites_cap * 2 : 16;
    trace_site *grown = realloc(t->sites, ncap * sizeof *grown);
    if (grown == NULL) return -1;
    t->sites = grown;
    t->sites_cap = ncap;
  }
  if (kmap_put(&t->site_index, key, 0, 0, t->nsites) != 0) return -1;
  t->sites[t->nsites] = site;
  return (long)t->nsites++;
}

static int parse_line(trace *t, const char *s, te *e) {
  trace_site site = {0, 0};
  memset(e, 0, sizeof *e);
  e->r = -1;
  e->d = -1;
  e->kind = TE_OTHER;
  while (*s == ' ' || *s == '\t') s++;
  if (*s++ != '{') return -1;
  int have_ev = 0;
  for (;;) {
    while (*s == ' ' || *s == ',') s++;
    if (*s == '}') break;
    if (*s++ != '"') return -1;
    const char *key = s, *kend = string_end(s);
    if (kend == NULL) return -1;
    size_t klen = (size_t)(kend - key);
    s = kend + 1;
    while (*s == ' ') s++;
    if (*s++ != ':') return -1;
    while (*s == ' ') s++;
    const char *val = s, *vend;
    int str = *s == '"';
    if (str) {
      val = s + 1;
      vend = string_end(val);
      if (vend == NULL) return -1;
      s = vend + 1;
    } else {
      vend = s;
      while (*vend != '\0' && *vend != ',' && *vend != '}') vend++;
      s = vend;
    }
    size_t vlen = (size_t)(vend - val);
#define KEY(k) (klen == sizeof(k) - 1 && memcmp(key, k, klen) == 0)
    if (KEY("ev") && str) {
      have_ev = 1;
      for (int k = 0; k < TE_OTHER; k++)
        if (strlen(te_kind_names[k]) == vlen && memcmp(te_kind_names[k], val, vlen) == 0) e->kind = (uint8_t)k;
      if (vlen == 5 && memcmp(val, "trace", 5) == 0) e->kind = TE_KINDS;   /* the header */
    } else if (KEY("t")) {
      e->t = strtoull(val, NULL, 10);
    } else if (KEY("th")) {
      e->th = (uint32_t)strtoul(val, NULL, 10);
    } else if (KEY("a") && str) {
      int i = intern(t, val, vlen);
      if (i < 0) return -1;
      e->a = (uint16_t)i;
    } else if (KEY("d")) {
      e->d = (int8_t)strtol(val, NULL, 10);
    } else if (KEY("r")) {
      e->r = str || *val == 'n' ? -1 : (int64_t)strtoll(val, NULL, 10);
    } else if (KEY("rk") && str) {
      size_t i = 0;
      for (; i < t->nkinds; i++)
        if (strlen(t->kinds[i]) == vlen && memcmp(t->kinds[i], val, vlen) == 0) break;
      if (i == t->nkinds && t->nkinds < 16) {
        char *copy = malloc(vlen + 1);
        if (copy == NULL) return -1;
        memcpy(copy, val, vlen);
        copy[vlen] = '\0';
        t->kinds[t->nkinds++] = copy;
      }
      e->rk = (uint8_t)(i < 16 ? i : 0);
    } else if (KEY("p") && str) {
      e->p = strtoull(val, NULL, 16);
    } else if (KEY("n")) {
      e->n = strtoull(val, NULL, 10);
    } else if ((KEY("stack") || KEY("pystack")) && str) {   /* where the allocation was made */
      long i = intern_into(&t->stacks, &t->nstacks, &t->stacks_cap, &t->stack_index, 0xfffffffe, val, vlen);
      if (i < 0) return -1;
      *(KEY("stack") ? &site.stack : &site.pystack) = (uint32_t)i + 1;
    } else if (KEY("in_place")) {
      e->in_place = *val == 't';
    } else if (KEY("held") || KEY("pb")) {
      e->level = strtoull(val, NULL, 10);
    } else if (KEY("version") && str) {
      snprintf(t->version, sizeof t->version, "%.*s", (int)vlen, val);
    }
#undef KEY
  }
  if (site.stack != 0 || site.pystack != 0) {
    long i = add_site(t, site);
    if (i < 0) return -1;
    e->site = (uint32_t)i + 1;
  }
  return have_ev ? 0 : -1;
}

static int load_failed(trace *t, FILE *f, char *line, kmap *deallocs) {
  free(line);
  fclose(f);
  kmap_free(deallocs);
  trace_free(t);
  return -1;
}

/* A refused deallocation voids the 'dealloc' line of the same thread, allocator and pointer
 * written just before it: the last such line is kept by that key as the file is read. */
int trace_load(const char *path, trace *t, char *err, size_t cap) {
  memset(t, 0, sizeof *t);
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(err, cap, "cannot open '%s': %s", path, strerror(errno));
    return -1;
  }
  char *line = NULL;
  size_t lcap = 0;
  ssize_t len;
  kmap deallocs = {0};
  int first = 1;
  while ((len = getline(&line, &lcap, f)) > 0) {
    if (first && len >= 2 && (unsigned char)line[0] == 0x1f && (unsigned char)line[1] == 0x8b) {
      /* gzip's magic: bench/traces/ stores traces so */
      snprintf(err, cap, "'%s' is compressed with gzip: decompress it first (gzip -dc '%s' > "
               "trace.jsonl)", path, path);
      return load_failed(t, f, line, &deallocs);
    }
    first = 0;
    if (len <= 1) continue;
    te e;
    if (parse_line(t, line, &e) != 0) {
      t->bad_lines++;
      continue;
    }
    if (e.kind == TE_KINDS) continue;   /* the header */
    if (e.kind == TE_REFUSED) {
      uint64_t j;
      if (kmap_del(&deallocs, e.p, e.a, e.th, &j)) t->ev[j].skip = 1;
    }
    if (t->n == t->cap) {
      size_t ncap = t->cap ? t->cap * 2 : 4096;
      te *grown = realloc(t->ev, ncap * sizeof *grown);
      if (grown == NULL) {
        snprintf(err, cap, "out of memory reading '%s' (%zu events read)", path, t->n);
        return load_failed(t, f, line, &deallocs);
      }
      t->ev = grown;
      t->cap = ncap;
    }
    if (e.kind == TE_DEALLOC && kmap_put(&deallocs, e.p, e.a, e.th, t->n) != 0) {
      snprintf(err, cap, "out of memory reading '%s' (%zu events read)", path, t->n);
      return load_failed(t, f, line, &deallocs);
    }
    t->ev[t->n++] = e;
  }
  if (ferror(f)) {
    snprintf(err, cap, "reading '%s' failed: %s", path, strerror(errno));
    return load_failed(t, f, line, &deallocs);
  }
  if (t->n == 0) {
    snprintf(err, cap, "'%s' holds no events%s", path,
             t->bad_lines ? " (no line of it is a trace event)" : "");
    return load_failed(t, f, line, &deallocs);
  }
  free(line);
  fclose(f);
  kmap_free(&deallocs);
  return 0;
}

void trace_free(trace *t) {
  struct name_ix *x, *tmp;
  HASH_ITER(hh, t->name_index, x, tmp) {
    HASH_DEL(t->name_index, x);
    free(x);
  }
  HASH_ITER(hh, t->stack_index, x, tmp) {
    HASH_DEL(t->stack_index, x);
    free(x);
  }
  for (size_t i = 0; i < t->nstacks; i++) free(t->stacks[i]);
  free(t->stacks);
  free(t->sites);
  kmap_free(&t->site_index);
  for (size_t i = 0; i < t->nnames; i++) free(t->names[i]);
  for (size_t i = 0; i < t->nkinds; i++) free(t->kinds[i]);
  free(t->names);
  free(t->ev);
  memset(t, 0, sizeof *t);
}

int trace_name(const trace *t, const char *name) {
  struct name_ix *x = NULL;
  HASH_FIND(hh, t->name_index, name, strlen(name), x);
  return x != NULL ? x->i : -1;
}

/* ---- pointer map --------------------------------------------------------------------------- */

static size_t slot_of(const pmap *m, uint64_t key) {
  uint64_t h = key * 0x9e3779b97f4a7c15ull;
  size_t i = (size_t)(h >> 17) & (m->cap - 1);
  while (m->keys[i] != 0 && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
  return i;
}

int pmap_put(pmap *m, uint64_t key, uint64_t val) {
  if ((m->n + 1) * 2 > m->cap) {
    pmap old = *m;
    m->cap = old.cap ? old.cap * 2 : 1024;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->vals = calloc(m->cap, sizeof *m->vals);
    if (m->keys == NULL || m->vals == NULL) {
      free(m->keys);
      free(m->vals);
      *m = old;
      return -1;
    }
    m->n = 0;
    for (size_t i = 0; i < old.cap; i++)
      if (old.keys[i] != 0) pmap_put(m, old.keys[i], old.vals[i]);
    free(old.keys);
    free(old.vals);
  }
  size_t i = slot_of(m, key);
  if (m->keys[i] == 0) m->n++;
  m->keys[i] = key;
  m->vals[i] = val;
  return 0;
}

uint64_t *pmap_get(pmap *m, uint64_t key) {
  if (m->cap == 0 || key == 0) return NULL;
  size_t i = slot_of(m, key);
  return m->keys[i] == key ? &m->vals[i] : NULL;
}

/* Deletion with backward shift: the probe chains stay whole. */
int pmap_del(pmap *m, uint64_t key, uint64_t *val) {
  if (m->cap == 0 || key == 0) return 0;
  size_t i = slot_of(m, key);
  if (m->keys[i] != key) return 0;
  if (val) *val = m->vals[i];
  m->keys[i] = 0;
  m->n--;
  for (size_t j = (i + 1) & (m->cap - 1); m->keys[j] != 0; j = (j + 1) & (m->cap - 1)) {
    uint64_t k = m->keys[j], v = m->vals[j];
    m->keys[j] = 0;
    m->n--;
    size_t s = slot_of(m, k);
    m->keys[s] = k;
    m->vals[s] = v;
    m->n++;
  }
  return 1;
}

void pmap_free(pmap *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

int trace_room(void **v, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return 0;
  size_t ncap = *cap ? *cap * 2 : 1024;
  void *g = realloc(*v, ncap * size);
  if (g == NULL) return -1;
  *v = g;
  *cap = ncap;
  return 0;
}

/* ---- map by pointer, allocator and thread ------------------------------------------------ */

static struct kmap_key kmap_key(uint64_t p, uint32_t a, uint32_t b) {
  struct kmap_key k;
  memset(&k, 0, sizeof k);
  k.p = p;
  k.a = a;
  k.b = b;
  return k;
}

int kmap_put(kmap *m, uint64_t p, uint32_t a, uint32_t b, uint64_t val) {
  struct kmap_key k = kmap_key(p, a, b);
  struct kmap_item *it = NULL;
  HASH_FIND(hh, m->items, &k, sizeof k, it);
  if (it != NULL) {
    it->val = val;
    return 0;
  }
  if ((it = malloc(sizeof *it)) == NULL) return -1;
  it->key = k;
  it->val = val;
  hash_oom = 0;
  HASH_ADD(hh, m->items, key, sizeof k, it);
  if (hash_oom) {
    free(it);
    return -1;
  }
  m->n++;
  return 0;
}

uint64_t *kmap_get(kmap *m, uint64_t p, uint32_t a, uint32_t b) {
  struct kmap_key k = kmap_key(p, a, b);
  struct kmap_item *it = NULL;
  HASH_FIND(hh, m->items, &k, sizeof k, it);
  return it != NULL ? &it->val : NULL;
}

int kmap_del(kmap *m, uint64_t p, uint32_t a, uint32_t b, uint64_t *val) {
  struct kmap_key k = kmap_key(p, a, b);
  struct kmap_item *it = NULL;
  HASH_FIND(hh, m->items, &k, sizeof k, it);
  if (it == NULL) return 0;
  if (val) *val = it->val;
  HASH_DEL(m->items, it);
  free(it);
  m->n--;
  return 1;
}

void kmap_free(kmap *m) {
  struct kmap_item *it, *tmp;
  HASH_ITER(hh, m->items, it, tmp) {
    HASH_DEL(m->items, it);
    free(it);
  }
  m->n = 0;
}
