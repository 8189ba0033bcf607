/* platform_options.h — the platforms' options, each declared once (platform_options.c): one table
 * per platform of its keys and their kinds, through which its init reads its options and with
 * which rap_spec_check (manager/spec.c) checks a spec without a device, each value read and
 * refused by the same code and sentence; the growable platforms' sizes, checked alike for both.
 * Also peers=, parsed in one place (platform.c).
 */
#ifndef RAP_PLATFORM_OPTIONS_H
#define RAP_PLATFORM_OPTIONS_H

#include "rap_internal.h"

typedef enum rapi_option_kind {
  RAPI_OPT_UINT,                   /* a number */
  RAPI_OPT_BIT,                    /* 0 or 1 */
  RAPI_OPT_SIZE,                   /* 64, 4KiB, 1GiB */
  RAPI_OPT_TEXT,                   /* any text, the init's to judge */
  RAPI_OPT_POOL,                   /* default (the device's) or new */
  RAPI_OPT_THRESHOLD,              /* a size, or max (UINT64_MAX) */
  RAPI_OPT_PEERS,                  /* all, or device numbers joined by '+' */
  RAPI_OPT_EXPORT,                 /* posix, fabric, auto or none: the mode 1, 2, 3 or 0 */
  RAPI_OPT_EXPORT_POSIX            /* posix or none: 1 or 0 */
} rapi_option_kind;

typedef struct rapi_option_def {
  const char *key;                 /* NULL: a place the platform does not use */
  rapi_option_kind kind;
} rapi_option_def;

/* One option as read: whether it was written, and its value (u: a number, bit, size, threshold or
 * export mode, 0 where absent; text: the text of the other kinds, NULL where absent). */
typedef struct rapi_option_value {
  bool given;
  uint64_t u;
  const char *text;
} rapi_option_value;

/* A platform's options in the order they are read (the values' order), and the rule across them
 * (who: for the sentence), or NULL. */
#define RAPI_OPTIONS_MAX 8
typedef struct rapi_option_table {
  const rapi_option_def *options;
  size_t count;
  int (*check)(const char *who, const rapi_option_value *values);
} rapi_option_table;

/* The places of each platform's options in its values. HostVmm and DeviceVmm share theirs. */
enum { RAPI_PINNED_PORTABLE, RAPI_PINNED_MAPPED, RAPI_PINNED_WRITE_COMBINED, RAPI_PINNED_DEVICE,
       RAPI_PINNED_OPTIONS };
enum { RAPI_SO_DEVICE, RAPI_SO_POOL, RAPI_SO_THRESHOLD, RAPI_SO_EXPORT, RAPI_SO_FOLLOW,
       RAPI_SO_OPPORTUNISTIC, RAPI_SO_INTERNAL, RAPI_SO_PEERS, RAPI_SO_OPTIONS };
enum { RAPI_VMM_DEVICE, RAPI_VMM_RESERVE, RAPI_VMM_GRANULARITY, RAPI_VMM_PIECE, RAPI_VMM_EXPORT,
       RAPI_VMM_PEERS, RAPI_VMM_OPTIONS };

/* ---- platform_options.c ---------------------------------------------------------------------- */
extern const rapi_option_table rapi_pinned_options;           /* Pinned (cuda_platform.c) */
extern const rapi_option_table rapi_stream_ordered_options;   /* StreamOrdered */
extern const rapi_option_table rapi_host_vmm_options;         /* HostVmm (vmm.c) */
extern const rapi_option_table rapi_device_vmm_options;       /* DeviceVmm (vmm_device.c) */
/* Reads every option of t from opts into values (t->count of them), each as its kind says, then
 * the rule across them: RAP_OK, or the first refusal with a sentence naming opts->owner. */
int  rapi_platform_options(rap_options *opts, const rapi_option_table *t, rapi_option_value *values);

/* The sizes of the growable platforms (HostVmm, DeviceVmm), shared so that their options read
 * alike: reserve=, granularity= and piece= as read through the table, and whether the first two
 * were given (every value written is used, and checked: none stands for "absent"). */
typedef struct rapi_vmm_sizes {
  size_t reserve, granularity, piece;
  bool has_reserve, has_granularity;
} rapi_vmm_sizes;
void rapi_vmm_sizes_of(const rapi_option_value *o, rapi_vmm_sizes *out);
/* Checks a granularity against the backend's least one (a power of two, a multiple of it) and
 * rounds the reserve up to it: RAP_ERR_INVALID with a sentence for a bad value. */
int  rapi_vmm_check_sizes(rap_allocator *self, size_t least, size_t *reserve, size_t granularity);
/* Checks piece= against the granularity (0, or a power of two and a multiple of it) and refuses it
 * on an exporting platform, whose mappings importers hold: RAP_ERR_INVALID or UNSUPPORTED. */
int  rapi_vmm_check_piece(rap_allocator *self, size_t piece, size_t granularity, bool exporting);

/* ---- platform.c: peers= ------------------------------------------------------------------------
 * A list of peers ("1+3": device numbers, at most 4096, joined by '+'; "all" is the caller's to
 * tell): reads the device at *at (text itself at first) and moves past it; 1 and *device, 0 after
 * the last, or RAP_ERR_INVALID with a sentence naming who. */
int  rapi_peers_next(const char *who, const char *text, const char **at, int *device);
/* peers= of a device platform (its value, or NULL where absent): grants each device, or every one
 * that can reach owner's memory for "all". The platform's record must be set. */
int  rapi_gpu_peers_option(rap_allocator *self, int owner, const char *peers);

#endif /* RAP_PLATFORM_OPTIONS_H */
