/* options.c — parsing of option strings ("initial_size=1GiB, alignment=256") and sizes.
 *
 * Pairs are separated by spaces or commas; a key may stand alone (value NULL). Strategies read
 * their keys through rap_options_get_*; after init the manager refuses any key nobody read, so a
 * typo is an error that names the key, never a silently ignored setting. Whether a key was given
 * is asked with rapi_options_given, never read from a marker value: a value equal to a marker
 * (reserve=18446744073709551615) is used, or refused with a sentence, like any other.
 */
#include "rap_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int rapi_parse_size(const char *text, size_t *out) {
  if (text == NULL || !isdigit((unsigned char)*text)) return RAP_ERR_INVALID;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0) return RAP_ERR_INVALID;
  while (*end == ' ') end++;
  static const struct {
    const char *suffix;
    unsigned long long mult;
  } units[] = {
      {"", 1ULL},           {"B", 1ULL},           {"K", 1ULL << 10},     {"KiB", 1ULL << 10},
      {"KB", 1000ULL},      {"M", 1ULL << 20},     {"MiB", 1ULL << 20},   {"MB", 1000000ULL},
      {"G", 1ULL << 30},    {"GiB", 1ULL << 30},   {"GB", 1000000000ULL}, {"T", 1ULL << 40},
      {"TiB", 1ULL << 40},  {"TB", 1000000000000ULL},
  };
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcasecmp(end, units[i].suffix) == 0) {
      if (units[i].mult != 0 && v > (unsigned long long)SIZE_MAX / units[i].mult)
        return RAP_ERR_INVALID;
      *out = (size_t)(v * units[i].mult);
      return RAP_OK;
    }
  }
  return RAP_ERR_INVALID;
}

int rapi_options_add(rap_options *opts, const char *key, size_t klen, const char *value,
                     size_t vlen) {
  for (size_t i = 0; i < opts->count; i++)
    if (strlen(opts->items[i].key) == klen && strncmp(opts->items[i].key, key, klen) == 0)
      return rapi_fail(RAP_ERR_INVALID, "%s: option '%.*s' is given twice", opts->owner,
                       (int)klen, key);
  rapi_option *items = rapi_realloc(opts->items, (opts->count + 1) * sizeof *items);
  if (items == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory parsing options", opts->owner);
  opts->items = items;
  rapi_option *o = &items[opts->count];
  o->key = rapi_strndup(key, klen);
  o->value = value ? rapi_strndup(value, vlen) : NULL;
  o->used = false;
  if (o->key == NULL || (value && o->value == NULL)) {
    free(o->key);
    free(o->value);
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory parsing options", opts->owner);
  }
  opts->count++;
  return RAP_OK;
}

/* A lone word that is a size unit right after an option whose value is a bare number: the user
 * wrote "initial_size=64 MiB". */
static bool unit_after_number(const rap_options *opts, const char *word, size_t len) {
  const char *prev = opts->items[opts->count - 1].value;
  if (prev == NULL || *prev == '\0') return false;
  for (const char *c = prev; *c; c++)
    if (!isdigit((unsigned char)*c)) return false;
  char unit[8];
  if (len >= sizeof unit) return false;
  memcpy(unit, word, len);
  unit[len] = '\0';
  char number[24];
  snprintf(number, sizeof number, "1%s", unit);
  size_t v;
  return rapi_parse_size(number, &v) == RAP_OK;
}

int rapi_options_parse(const char *text, const char *owner, rap_options *out) {
  out->items = NULL;
  out->count = 0;
  out->owner = owner;
  out->asked = 0;
  if (text == NULL) return RAP_OK;
  const char *p = text;
  for (;;) {
    while (*p == ' ' || *p == ',' || *p == '\t') p++;
    if (*p == '\0') return RAP_OK;
    const char *key = p;
    while (*p && *p != '=' && *p != ' ' && *p != ',' && *p != '\t') p++;
    size_t klen = (size_t)(p - key);
    const char *value = NULL;
    size_t vlen = 0;
    if (*p == '=') {
      value = ++p;
      while (*p && *p != ' ' && *p != ',' && *p != '\t') p++;
      vlen = (size_t)(p - value);
    }
    int st = klen == 0 ? rapi_fail(RAP_ERR_INVALID, "%s: option string '%s' has a value with no key",
                                   owner, text)
             : value == NULL && out->count > 0 && unit_after_number(out, key, klen)
                 ? rapi_fail(RAP_ERR_INVALID, "%s: '%s=%s %.*s': a size takes its unit without a space "
                             "(%s=%s%.*s), since spaces separate options", owner,
                             out->items[out->count - 1].key, out->items[out->count - 1].value,
                             (int)klen, key, out->items[out->count - 1].key,
                             out->items[out->count - 1].value, (int)klen, key)
                 : rapi_options_add(out, key, klen, value, vlen);
    if (st != RAP_OK) {
      rapi_options_free(out);
      return st;
    }
  }
}

/* The keys a strategy asks for are the ones it knows: kept for the sentence about a key nobody
 * asked for. */
static void remember(rap_options *opts, const char *key) {
  if (strlen(key) >= sizeof opts->asked_keys[0]) return;
  for (unsigned i = 0; i < opts->asked; i++)
    if (strcmp(opts->asked_keys[i], key) == 0) return;
  if (opts->asked < RAPI_OPTIONS_ASKED) strcpy(opts->asked_keys[opts->asked++], key);
}

static rapi_option *find(rap_options *opts, const char *key) {
  if (opts == NULL) return NULL;
  remember(opts, key);
  for (size_t i = 0; i < opts->count; i++)
    if (strcmp(opts->items[i].key, key) == 0) {
      opts->items[i].used = true;
      return &opts->items[i];
    }
  return NULL;
}

bool rapi_options_given(rap_options *opts, const char *key) { return find(opts, key) != NULL; }

int rap_options_get_size(rap_options *opts, const char *key, size_t *out) {
  if (key == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "%s: key or out is NULL", __func__);
  rapi_option *o = find(opts, key);
  if (o == NULL) return RAP_OK;
  size_t v;
  if (o->value == NULL || rapi_parse_size(o->value, &v) != RAP_OK)
    return rapi_fail(RAP_ERR_INVALID,
                     "%s: option '%s' needs a size such as 4096, 64KiB or 1GiB, not '%s'",
                     opts->owner, key, o->value ? o->value : "");
  *out = v;
  return RAP_OK;
}

int rap_options_get_uint(rap_options *opts, const char *key, uint64_t *out) {
  if (key == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "%s: key or out is NULL", __func__);
  rapi_option *o = find(opts, key);
  if (o == NULL) return RAP_OK;
  char *end = NULL;
  errno = 0;
  unsigned long long v = o->value && isdigit((unsigned char)o->value[0])
                             ? strtoull(o->value, &end, 10) : 0;
  if (o->value == NULL || end == NULL || *end != '\0' || errno != 0)
    return rapi_fail(RAP_ERR_INVALID, "%s: option '%s' needs a whole number, not '%s'",
                     opts->owner, key, o->value ? o->value : "");
  *out = v;
  return RAP_OK;
}

int rap_options_get_string(rap_options *opts, const char *key, const char **out) {
  if (key == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "%s: key or out is NULL", __func__);
  rapi_option *o = find(opts, key);
  if (o == NULL) return RAP_OK;
  if (o->value == NULL || o->value[0] == '\0')
    return rapi_fail(RAP_ERR_INVALID, "%s: option '%s' needs a value", opts->owner, key);
  *out = o->value;
  return RAP_OK;
}

/* Levenshtein's distance between two short words (longer ones count as far apart). */
size_t rapi_edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return SIZE_MAX;
  size_t row[64];
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t sub = diag + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
      size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
      row[j] = sub < best ? sub : best;
      diag = up;
    }
  }
  return row[lb];
}

/* The asked key closest to key, if it is close enough to be what the user meant (at most one
 * edit in four letters, and at least one allowed). */
static const char *closest(const rap_options *opts, const char *key) {
  const char *best = NULL;
  size_t best_d = SIZE_MAX, allowed = strlen(key) / 4 > 0 ? strlen(key) / 4 : 1;
  if (allowed < 2 && strlen(key) >= 4) allowed = 2;
  for (unsigned i = 0; i < opts->asked; i++) {
    size_t d = rapi_edit_distance(key, opts->asked_keys[i]);
    if (d <= allowed && d < best_d) {
      best = opts->asked_keys[i];
      best_d = d;
    }
  }
  return best;
}

static int unknown(const rap_options *opts, const char *key) {
  const char *near = closest(opts, key);
  if (near != NULL)
    return rapi_fail(RAP_ERR_INVALID, "%s: unknown option '%s' \xe2\x80\x94 did you mean '%s'?",
                     opts->owner, key, near);
  if (opts->asked == 0)
    return rapi_fail(RAP_ERR_INVALID, "%s: unknown option '%s' (it takes no options)", opts->owner, key);
  char known[400];
  size_t n = 0;
  known[0] = '\0';
  for (unsigned i = 0; i < opts->asked && n < sizeof known; i++) {
    int w = snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", opts->asked_keys[i]);
    if (w < 0) break;
    n += (size_t)w;
  }
  return rapi_fail(RAP_ERR_INVALID, "%s: unknown option '%s' (its options: %s)", opts->owner, key,
                   known);
}

int rapi_options_check_unused(const rap_options *opts) {
  for (size_t i = 0; i < opts->count; i++)
    if (!opts->items[i].used) return unknown(opts, opts->items[i].key);
  return RAP_OK;
}

/* After a failed init: a key nobody read that is one slip from a key init asked for is the
 * likelier mistake ("limt" where SizeLimiter then says it needs "limit"), so it is named first. */
int rapi_options_misspelt(const rap_options *opts) {
  for (size_t i = 0; i < opts->count; i++)
    if (!opts->items[i].used && closest(opts, opts->items[i].key) != NULL)
      return unknown(opts, opts->items[i].key);
  return RAP_OK;
}

void rapi_options_free(rap_options *opts) {
  for (size_t i = 0; i < opts->count; i++) {
    free(opts->items[i].key);
    free(opts->items[i].value);
  }
  free(opts->items);
  opts->items = NULL;
  opts->count = 0;
}
