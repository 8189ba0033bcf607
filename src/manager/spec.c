/* spec.c — a whole chain of allocators from one string, and overrides from the environment.
 *
 *   spec    := name [ "(" arg { "," arg } ")" ]
 *   arg     := spec | key "=" value
 * A name followed by arguments is a strategy; its one spec argument is its parent. A bare name is
 * an allocator that exists (or a platform name). Inner allocators are named after the outer one:
 * "pool", "pool/SizeLimiter", ... A malformed spec is RAP_ERR_INVALID with the column of the error,
 * and a failure anywhere leaves nothing registered. RAP_ALLOCATOR_<NAME>=spec in the environment
 * replaces what the program asked for, so pools can be reconfigured without rebuilding.
 * rap_spec_check makes a spec in a manager of its own, with device platforms standing in as HOST,
 * so that names, options and values are checked as a make would check them, without a device.
 */
#include "rap_internal.h"
#include "platforms/platform_options.h"   /* the device platforms' options */

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct node {
  char *name;               /* strategy, or the allocator a leaf names */
  bool leaf;
  struct node *parent;
  char *options;            /* "key=value key=value" */
  size_t options_len;
} node;

/* Nesting deeper than this is refused: the parser and the builder recurse once per level, and a
 * spec can come from the environment, so its depth must not decide the stack a thread needs. */
#define SPEC_MAX_DEPTH 64

typedef struct parser {
  const char *text, *p;
  char error[160];
  size_t error_at;          /* offset of the character the error is about */
  unsigned depth;
} parser;

static bool name_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == ':' || c == '-' || c == '.' || c == '/';
}

static void skip(parser *ps) {
  while (*ps->p == ' ' || *ps->p == '\t') ps->p++;
}

static node *fail_at(parser *ps, const char *what) {
  if (ps->error[0] == '\0') ps->error_at = (size_t)(ps->p - ps->text);
  if (ps->error[0] == '\0')
    snprintf(ps->error, sizeof ps->error, "column %zu: %s", (size_t)(ps->p - ps->text) + 1, what);
  return NULL;
}

static void free_node(node *n) {
  while (n != NULL) {
    node *parent = n->parent;
    free(n->name);
    free(n->options);
    free(n);
    n = parent;
  }
}

static bool append_option(node *n, const char *key, size_t klen, const char *value, size_t vlen) {
  size_t need = n->options_len + klen + vlen + 3;
  char *o = rapi_realloc(n->options, need);
  if (o == NULL) return false;
  n->options = o;
  n->options_len += (size_t)snprintf(o + n->options_len, need - n->options_len, "%s%.*s=%.*s",
                                     n->options_len ? " " : "", (int)klen, key, (int)vlen, value);
  return true;
}

static node *parse(parser *ps);

static bool parse_args(parser *ps, node *n) {
  for (;;) {
    skip(ps);
    const char *start = ps->p;
    while (name_char(*ps->p)) ps->p++;
    size_t len = (size_t)(ps->p - start);
    if (len == 0) return fail_at(ps, "expected a parent allocator or key=value"), false;
    skip(ps);
    if (*ps->p == '=') {
      ps->p++;
      skip(ps);
      const char *v = ps->p;
      while (*ps->p && *ps->p != ',' && *ps->p != ')' && *ps->p != '(') ps->p++;
      const char *vend = ps->p;
      while (vend > v && (vend[-1] == ' ' || vend[-1] == '\t')) vend--;
      if (vend == v) return fail_at(ps, "expected a value after '='"), false;
      if (!append_option(n, start, len, v, (size_t)(vend - v)))
        return fail_at(ps, "out of host memory"), false;
    } else {
      ps->p = start;   /* errors about the parent point at its first character */
      if (n->parent != NULL) return fail_at(ps, "a strategy has one parent"), false;
      if (n->options_len != 0) return fail_at(ps, "the parent comes before the options"), false;
      n->parent = parse(ps);
      if (n->parent == NULL) return false;
    }
    skip(ps);
    if (*ps->p == ',') {
      ps->p++;
      continue;
    }
    if (*ps->p == ')') {
      ps->p++;
      return true;
    }
    return fail_at(ps, "expected ',' or ')'"), false;
  }
}

static node *parse(parser *ps) {
  skip(ps);
  const char *start = ps->p;
  while (name_char(*ps->p)) ps->p++;
  if (ps->p == start) return fail_at(ps, "expected a strategy or allocator name");
  node *n = rapi_calloc(1, sizeof *n);
  if (n == NULL || (n->name = rapi_strndup(start, (size_t)(ps->p - start))) == NULL) {
    free(n);
    return fail_at(ps, "out of host memory");
  }
  skip(ps);
  if (*ps->p != '(') {
    n->leaf = true;
    return n;
  }
  if (ps->depth == SPEC_MAX_DEPTH) {
    free_node(n);
    return fail_at(ps, "allocators nest at most " RAPI_STR(SPEC_MAX_DEPTH) " levels deep");
  }
  ps->p++;
  skip(ps);
  if (*ps->p == ')') {
    ps->p++;
    return n;
  }
  ps->depth++;
  bool ok = parse_args(ps, n);
  ps->depth--;
  if (!ok) {
    free_node(n);
    return NULL;
  }
  return n;
}

/* Builds the chain innermost first; on failure destroys what it made, outermost first. */
static int build(rap_manager *rm, node *n, const char *name, rap_allocator **out) {
  if (n->leaf) return rap_allocator_get(rm, n->name, out);
  const char *parent_name = NULL;
  rap_allocator *parent = NULL;
  char inner[RAPI_NAME_MAX];
  if (n->parent != NULL) {
    if (n->parent->leaf) {
      snprintf(inner, sizeof inner, "%s", n->parent->name);
    } else if ((size_t)snprintf(inner, sizeof inner, "%s/%s", name, n->parent->name) >= sizeof inner) {
      return rapi_fail(RAP_ERR_INVALID, "rap_allocator_make_spec: the name '%s/%s' is too long",
                       name, n->parent->name);
    }
    int st = build(rm, n->parent, inner, &parent);
    if (st != RAP_OK) return st;
    parent_name = rap_allocator_name(parent);
  }
  int st = rapi_allocator_make_direct(rm, name, n->name, parent_name, n->options, out);
  if (st != RAP_OK && parent != NULL && !n->parent->leaf) {
    /* Destroy exactly what the inner levels made, outermost first; a leaf (an allocator that
     * existed before) ends the walk, whatever its name. */
    char saved[512];
    snprintf(saved, sizeof saved, "%s", rap_last_error());
    rap_allocator *a = parent;
    for (node *m = n->parent; m != NULL && !m->leaf && a != NULL; m = m->parent) {
      rap_allocator *next = a->parent;
      if (rap_allocator_destroy(a) != RAP_OK) break;
      a = next;
    }
    rapi_fail(st, "%s", saved);
  }
  return st;
}

/* Parses a whole spec: one strategy with its arguments and nothing after it. NULL with ps->error
 * set on failure. */
static node *parse_spec(parser *ps) {
  node *root = parse(ps);
  if (root == NULL) return NULL;
  skip(ps);
  if (*ps->p != '\0') {
    fail_at(ps, "unexpected text after the spec");
  } else if (root->leaf) {
    ps->p = ps->text;
    fail_at(ps, "a spec names a strategy with its arguments, as in QuickPool(HOST)");
  } else {
    return root;
  }
  free_node(root);
  return NULL;
}

/* RAP_ERR_INVALID with the parser's sentence. A long spec is quoted around the error only, so
 * that the column and the reason always fit in the sentence. */
static int spec_error(const parser *ps, const char *who) {
  const char *spec = ps->text;
  size_t len = strlen(spec), from = 0, shown = len;
  if (len > 64) {
    from = ps->error_at > 32 ? ps->error_at - 32 : 0;
    shown = len - from < 64 ? len - from : 64;
  }
  return rapi_fail(RAP_ERR_INVALID, "%s: '%s%.*s%s': %s", who, from > 0 ? "..." : "", (int)shown,
                   spec + from, from + shown < len ? "..." : "", ps->error);
}

static int make_from_spec(rap_manager *rm, const char *name, const char *spec, rap_allocator **out) {
  parser ps = {spec, spec, "", 0, 0};
  node *root = parse_spec(&ps);
  if (root == NULL) {
    char who[RAPI_NAME_MAX + 32];
    snprintf(who, sizeof who, "rap_allocator_make_spec('%s')", name);
    return spec_error(&ps, who);
  }
  int st = build(rm, root, name, out);
  free_node(root);
  return st;
}

/* ---- rap_spec_check: the whole make, without a device ----------------------------------------- */

/* The strategies and platforms that need a device to be made are checked by their options alone
 * (read through the table their inits read them through: platform_options.c) and stand in as HOST
 * for what is made over them. Everything else is made for real in a private manager: pools take
 * their first chunk lazily, so a check allocates no pool memory. */

/* The table of a platform that needs a device to be made, or NULL. */
static const rapi_option_table *device_options(const rap_strategy *s) {
  return s == &rapi_pinned_strategy           ? &rapi_pinned_options
         : s == &rapi_stream_ordered_strategy ? &rapi_stream_ordered_options
         : s == &rapi_device_vmm_strategy     ? &rapi_device_vmm_options
                                              : NULL;
}

static int check_device_options(const rap_strategy *s, const char *name, const char *options,
                                bool has_parent, const char *parent) {
  char owner[RAPI_NAME_MAX + 64];
  snprintf(owner, sizeof owner, "'%s' (%s)", name, s->name);
  if (s == &rapi_device_vmm_strategy && has_parent)
    return rapi_fail(RAP_ERR_INVALID, "%s: %s maps its own memory and takes no parent ('%s' was "
                     "given)", owner, s->name, parent);
  rap_options opts;
  int st = rapi_options_parse(options, owner, &opts);
  if (st != RAP_OK) return st;
  rapi_option_value values[RAPI_OPTIONS_MAX];
  st = rapi_platform_options(&opts, device_options(s), values);
  if (st == RAP_ERR_INVALID && rapi_options_misspelt(&opts) != RAP_OK) st = RAP_ERR_INVALID;
  if (st == RAP_OK) st = rapi_options_check_unused(&opts);
  rapi_options_free(&opts);
  return st;
}

/* build() for a check: device platforms and strategies become HOST once their names and options
 * passed, in any build: a spec is checked for the machine it will run on, which may have a GPU
 * where this one, or this build, has none. */
static int build_check(rap_manager *rm, node *n, const char *name, rap_allocator **out) {
  if (n->leaf) {
    const rap_strategy *platform = NULL;
    char opts[64];
    int st = rapi_registry_platform(n->name, &platform, opts, sizeof opts);
    if (st != RAP_OK) return st;
    bool device = platform == &rapi_cuda_platform || platform == &rapi_device_vmm_strategy;
    return rap_allocator_get(rm, device ? "HOST" : n->name, out);
  }
  const rap_strategy *s = rapi_registry_builtin(n->name);
  rap_allocator *parent = NULL;
  char inner[RAPI_NAME_MAX];
  if (n->parent != NULL) {
    if ((size_t)snprintf(inner, sizeof inner, "%s/%s", name, n->parent->name) >= sizeof inner)
      return rapi_fail(RAP_ERR_INVALID, "rap_allocator_make_spec: the name '%s/%s' is too long",
                       name, n->parent->name);
    int st = build_check(rm, n->parent, inner, &parent);
    if (st != RAP_OK) return st;
  }
  if (s != NULL && device_options(s) != NULL) {
    int st = check_device_options(s, name, n->options, parent != NULL,
                                  parent != NULL ? rap_allocator_name(parent) : "");
    return st != RAP_OK ? st : rap_allocator_get(rm, "HOST", out);
  }
  return rapi_allocator_make_direct(rm, name, n->name, parent != NULL ? rap_allocator_name(parent) : NULL,
                                    n->options, out);
}

/* The name rap_spec_check gives the chain it makes; its sentences name the spec's parts instead. */
#define CHECK_NAME "spec"

/* e with each name of the checked chain said as the user wrote it: "'spec' (QuickPool)" is "the
 * spec's QuickPool", "'spec/QuickPool/SizeLimiter' (SizeLimiter)" is "the spec's SizeLimiter
 * (under QuickPool)"; root is the outermost strategy, the one "spec/QuickPool" is under. */
static void name_the_spec(const char *e, const char *root, char *out, size_t cap) {
  static const char open[] = "'" CHECK_NAME;
  size_t n = 0;
  while (*e != '\0' && n + 1 < cap) {
    const char *end = strncmp(e, open, sizeof open - 1) == 0 ? e + sizeof open - 1 : NULL;
    const char *close = end != NULL && (*end == '\'' || *end == '/') ? strchr(end, '\'') : NULL;
    if (close == NULL) {
      out[n++] = *e++;
      continue;
    }
    /* what: the part's strategy (the name's last component); over: the one it is under. */
    const char *what = root, *over = NULL;
    int what_len = (int)strlen(root), over_len = 0;
    for (const char *c = end; c < close; c++) {
      if (*c != '/') continue;
      over = what, over_len = what_len;
      what = c + 1;
      what_len = (int)(strcspn(what, "/'"));
    }
    /* "Planned('spec')": the strategy written before the name goes too. */
    size_t wl = (size_t)what_len;
    bool wrapped = close[1] == ')' && n > wl && out[n - 1] == '(' && strncmp(out + n - 1 - wl, what, wl) == 0;
    if (wrapped) n -= wl + 1;
    int wrote = over == NULL ? snprintf(out + n, cap - n, "the spec's %s", root)
                             : snprintf(out + n, cap - n, "the spec's %.*s (under %.*s)", what_len, what,
                                        over_len, over);
    n = wrote < 0 || (size_t)wrote >= cap - n ? cap - 1 : n + (size_t)wrote;
    e = close + 1 + wrapped;
    /* make's " (Strategy)" after the name says what was said already. */
    if (e[0] == ' ' && e[1] == '(' && strncmp(e + 2, what, (size_t)what_len) == 0 && e[2 + what_len] == ')')
      e += 3 + what_len;
  }
  out[n] = '\0';
}

/* The spec is made as rap_allocator_make_spec would make it, in a manager of its own that is gone
 * when the answer is: every name, option and value is checked, and sentences are make's. */
int rap_spec_check(const char *spec) {
  if (spec == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_spec_check: spec is NULL");
  parser ps = {spec, spec, "", 0, 0};
  node *root = parse_spec(&ps);
  if (root == NULL) return spec_error(&ps, "rap_spec_check");
  rap_manager *rm = NULL;
  int st = rap_manager_create(&rm);
  if (st == RAP_OK) {
    rap_allocator *a = NULL;
    st = build_check(rm, root, CHECK_NAME, &a);
    if (st != RAP_OK) {
      /* The call is rap_spec_check's: make's own call name goes, and so does the name the check
       * gave the chain, which the user never wrote. */
      static const char made[] = "rap_allocator_make('" CHECK_NAME "'): ";
      char sentence[512];
      const char *e = rap_last_error();
      name_the_spec(strncmp(e, made, sizeof made - 1) == 0 ? e + sizeof made - 1 : e, root->name, sentence,
                    sizeof sentence);
      rapi_fail(st, "rap_spec_check: %s", sentence);
    }
    char saved[600];
    snprintf(saved, sizeof saved, "%s", rap_last_error());
    (void)rap_manager_destroy(rm);
    if (st != RAP_OK) rapi_fail(st, "%s", saved);
  }
  free_node(root);
  return st;
}

/* The spec in RAP_ALLOCATOR_<NAME> (registry.c makes the variable's name), or NULL. */
static const char *env_spec(const char *name, char *var, size_t cap) {
  rapi_env_var(name, var, cap);
  const char *v = getenv(var);
  return v != NULL && *v != '\0' ? v : NULL;
}

/* A chain made from the environment: a failure names the variable it came from. */
static int make_from_env(rap_manager *rm, const char *name, const char *var, const char *env,
                         rap_allocator **out) {
  int st = make_from_spec(rm, name, env, out);
  if (st == RAP_OK) return st;
  char sentence[768];
  snprintf(sentence, sizeof sentence, "%s", rap_last_error());
  return rapi_fail(st, "%s (the spec came from the environment variable %s)", sentence, var);
}

int rap_allocator_make_spec(rap_manager *rm, const char *name, const char *spec, rap_allocator **out) {
  if (rm == NULL || name == NULL || spec == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_allocator_make_spec: manager, name, spec or out is NULL");
  char var[RAPI_NAME_MAX + 16];
  const char *env = env_spec(name, var, sizeof var);
  if (env == NULL) return make_from_spec(rm, name, spec, out);
  rap_log(RAP_LOG_INFO, "allocator '%s': the environment replaces '%s' with '%s'", name, spec, env);
  return make_from_env(rm, name, var, env, out);
}

/* The front door of rap_allocator_make: RAP_ALLOCATOR_<NAME> replaces what the program asked for. */
int rap_allocator_make(rap_manager *rm, const char *name, const char *strategy, const char *parent,
                       const char *options, rap_allocator **out) {
  char var[RAPI_NAME_MAX + 16];
  const char *env = name != NULL && rm != NULL && out != NULL ? env_spec(name, var, sizeof var) : NULL;
  if (env == NULL) return rapi_allocator_make_direct(rm, name, strategy, parent, options, out);
  rap_log(RAP_LOG_INFO, "allocator '%s': made from the environment as '%s'", name, env);
  return make_from_env(rm, name, var, env, out);
}
