/* platform_options.c — the options of the platforms made with a strategy's name and options
 * (Pinned, StreamOrdered, HostVmm, DeviceVmm), each declared once: a table per platform of its
 * keys and their kinds, in the order they are read, with the rule across them. The platform's init
 * reads its options through its table (rapi_platform_options), and rap_spec_check reads a spec's
 * with the same call where no device is there to make the platform: a value is read, and refused,
 * by one piece of code with one sentence; and the checks of the growable platforms' sizes
 * against what their backend maps, shared by both. Compiled into every build, as those names
 * resolve in every build.
 */
#include "platforms/platform_options.h"

#include <string.h>

static const rapi_option_def pinned[RAPI_PINNED_OPTIONS] = {
    [RAPI_PINNED_PORTABLE] = {"portable", RAPI_OPT_BIT},
    [RAPI_PINNED_MAPPED] = {"mapped", RAPI_OPT_BIT},
    [RAPI_PINNED_WRITE_COMBINED] = {"write_combined", RAPI_OPT_BIT},
    [RAPI_PINNED_DEVICE] = {"device", RAPI_OPT_UINT},
};

static const rapi_option_def stream_ordered[RAPI_SO_OPTIONS] = {
    [RAPI_SO_DEVICE] = {"device", RAPI_OPT_UINT},
    [RAPI_SO_POOL] = {"pool", RAPI_OPT_POOL},
    [RAPI_SO_THRESHOLD] = {"release_threshold", RAPI_OPT_THRESHOLD},
    [RAPI_SO_EXPORT] = {"export", RAPI_OPT_EXPORT_POSIX},
    [RAPI_SO_FOLLOW] = {"follow_event_dependencies", RAPI_OPT_BIT},
    [RAPI_SO_OPPORTUNISTIC] = {"allow_opportunistic", RAPI_OPT_BIT},
    [RAPI_SO_INTERNAL] = {"allow_internal_dependencies", RAPI_OPT_BIT},
    [RAPI_SO_PEERS] = {"peers", RAPI_OPT_PEERS},
};

/* HostVmm reads peers= only to refuse it with a sentence of its own (its memory is the host's). */
static const rapi_option_def host_vmm[RAPI_VMM_OPTIONS] = {
    [RAPI_VMM_RESERVE] = {"reserve", RAPI_OPT_SIZE},
    [RAPI_VMM_GRANULARITY] = {"granularity", RAPI_OPT_SIZE},
    [RAPI_VMM_PIECE] = {"piece", RAPI_OPT_SIZE},
    [RAPI_VMM_EXPORT] = {"export", RAPI_OPT_EXPORT_POSIX},
    [RAPI_VMM_PEERS] = {"peers", RAPI_OPT_TEXT},
};

static const rapi_option_def device_vmm[RAPI_VMM_OPTIONS] = {
    [RAPI_VMM_DEVICE] = {"device", RAPI_OPT_UINT},
    [RAPI_VMM_RESERVE] = {"reserve", RAPI_OPT_SIZE},
    [RAPI_VMM_GRANULARITY] = {"granularity", RAPI_OPT_SIZE},
    [RAPI_VMM_PIECE] = {"piece", RAPI_OPT_SIZE},
    [RAPI_VMM_EXPORT] = {"export", RAPI_OPT_EXPORT},
    [RAPI_VMM_PEERS] = {"peers", RAPI_OPT_PEERS},
};

/* StreamOrdered's rule across options: only a pool it makes has a shareable handle. */
static int stream_ordered_check(const char *who, const rapi_option_value *v) {
  const char *pool = v[RAPI_SO_POOL].text;
  if (v[RAPI_SO_EXPORT].u == 0 || (pool != NULL && strcmp(pool, "new") == 0)) return RAP_OK;
  return rapi_fail(RAP_ERR_INVALID, "%s: export=posix needs pool=new: the device's default pool is "
                   "made with no shareable handle type, so no other process can open it", who);
}

_Static_assert(RAPI_SO_OPTIONS <= RAPI_OPTIONS_MAX && RAPI_VMM_OPTIONS <= RAPI_OPTIONS_MAX &&
               RAPI_PINNED_OPTIONS <= RAPI_OPTIONS_MAX, "a values array holds every table's");
const rapi_option_table rapi_pinned_options = {pinned, RAPI_PINNED_OPTIONS, NULL};
const rapi_option_table rapi_stream_ordered_options = {stream_ordered, RAPI_SO_OPTIONS,
                                                       stream_ordered_check};
const rapi_option_table rapi_host_vmm_options = {host_vmm, RAPI_VMM_OPTIONS, NULL};
const rapi_option_table rapi_device_vmm_options = {device_vmm, RAPI_VMM_OPTIONS, NULL};

/* export=: the handle types a platform makes (0 none, 1 posix, 2 fabric, 3 auto); a device's
 * mappings take all four, a host's or a pool's posix and none only. */
static int export_mode(const char *who, const char *text, bool device, uint64_t *mode) {
  *mode = 0;
  if (strcmp(text, "none") == 0) return RAP_OK;
  if (strcmp(text, "posix") == 0) *mode = 1;
  else if (device && strcmp(text, "fabric") == 0) *mode = 2;
  else if (device && strcmp(text, "auto") == 0) *mode = 3;
  else
    return rapi_fail(RAP_ERR_INVALID, "%s: option 'export' must be %s, not '%s'", who,
                     device ? "posix, fabric, auto or none" : "posix or none", text);
  return RAP_OK;
}

/* A value given as text, checked as its kind says. */
static int read_text(const char *who, const char *key, rapi_option_kind kind, rapi_option_value *v) {
  size_t size = 0;
  switch (kind) {
  case RAPI_OPT_POOL:
    if (strcmp(v->text, "default") == 0 || strcmp(v->text, "new") == 0) return RAP_OK;
    return rapi_fail(RAP_ERR_INVALID, "%s: option '%s' is 'default' (the device's) or 'new', not "
                     "'%s'", who, key, v->text);
  case RAPI_OPT_THRESHOLD:
    if (strcmp(v->text, "max") == 0) {
      v->u = UINT64_MAX;
      return RAP_OK;
    }
    if (rapi_parse_size(v->text, &size) != RAP_OK)
      return rapi_fail(RAP_ERR_INVALID, "%s: option '%s' is a size or 'max', not '%s'", who, key,
                       v->text);
    v->u = size;
    return RAP_OK;
  case RAPI_OPT_PEERS: {
    const char *at = v->text;
    int device = 0, st = 1;
    if (strcmp(v->text, "all") == 0) return RAP_OK;
    while (st == 1) st = rapi_peers_next(who, v->text, &at, &device);
    return st;
  }
  case RAPI_OPT_EXPORT:
  case RAPI_OPT_EXPORT_POSIX:
    return export_mode(who, v->text, kind == RAPI_OPT_EXPORT, &v->u);
  default:
    return RAP_OK;
  }
}

static int read_one(rap_options *opts, const rapi_option_def *d, rapi_option_value *v) {
  size_t size = 0;
  int st = RAP_OK;
  memset(v, 0, sizeof *v);
  if (d->key == NULL) return RAP_OK;
  v->given = rapi_options_given(opts, d->key);
  switch (d->kind) {
  case RAPI_OPT_UINT:
    return rap_options_get_uint(opts, d->key, &v->u);
  case RAPI_OPT_BIT:
    st = rap_options_get_uint(opts, d->key, &v->u);
    if (st == RAP_OK && v->u > 1)
      return rapi_fail(RAP_ERR_INVALID, "%s: option '%s' is 0 or 1", opts->owner, d->key);
    return st;
  case RAPI_OPT_SIZE:
    st = rap_options_get_size(opts, d->key, &size);
    v->u = size;
    return st;
  default:
    st = rap_options_get_string(opts, d->key, &v->text);
    if (st != RAP_OK || v->text == NULL) return st;
    return read_text(opts->owner, d->key, d->kind, v);
  }
}

int rapi_platform_options(rap_options *opts, const rapi_option_table *t, rapi_option_value *values) {
  int st = RAP_OK;
  for (size_t i = 0; i < t->count && st == RAP_OK; i++)
    st = read_one(opts, &t->options[i], &values[i]);
  if (st == RAP_OK && t->check != NULL) st = t->check(opts->owner, values);
  return st;
}

/* ---- the sizes of the growable platforms, shared by HostVmm and DeviceVmm ------------------- */

void rapi_vmm_sizes_of(const rapi_option_value *o, rapi_vmm_sizes *out) {
  memset(out, 0, sizeof *out);
  out->reserve = (size_t)o[RAPI_VMM_RESERVE].u;
  out->granularity = (size_t)o[RAPI_VMM_GRANULARITY].u;
  out->piece = (size_t)o[RAPI_VMM_PIECE].u;
  out->has_reserve = o[RAPI_VMM_RESERVE].given;
  out->has_granularity = o[RAPI_VMM_GRANULARITY].given;
}

int rapi_vmm_check_piece(rap_allocator *self, size_t piece, size_t granularity, bool exporting) {
  const char *who = rap_allocator_name(self);
  if (piece == 0) return RAP_OK;
  if (exporting)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: option 'piece' (pages given back from inside "
                     "allocations) cannot go with export=: other processes map whole mappings", who);
  if (!rapi_is_pow2(piece) || piece % granularity != 0 || piece > ((size_t)1 << 40))
    return rapi_fail(RAP_ERR_INVALID, "%s: option 'piece' must be 0 or a power of two, a multiple "
                     "of the granularity (%zu) and at most 1TiB, not %zu", who, granularity, piece);
  return RAP_OK;
}

int rapi_vmm_check_sizes(rap_allocator *self, size_t least, size_t *reserve, size_t granularity) {
  const char *who = rap_allocator_name(self);
  char sz[32];
  rapi_format_size(sz, sizeof sz, least);
  if (!rapi_is_pow2(granularity) || granularity % least != 0 || granularity > ((size_t)1 << 40))
    return rapi_fail(RAP_ERR_INVALID, "%s: option 'granularity' must be a power of two, a multiple "
                     "of %s (the least this platform maps) and at most 1TiB, not %zu", who, sz,
                     granularity);
  if (*reserve == 0 || *reserve > ((size_t)1 << 56))
    return rapi_fail(RAP_ERR_INVALID, "%s: option 'reserve' must be between 1 byte and 64PiB, not "
                     "%zu", who, *reserve);
  *reserve = rapi_align_up(*reserve, granularity);
  return RAP_OK;
}
