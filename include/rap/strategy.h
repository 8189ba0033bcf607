/* strategy.h — writing a strategy of your own and registering it by name.
 *
 * A strategy is one method table (rap_strategy) plus per-instance state of state_size bytes, which
 * the manager allocates zeroed and hands to every method. Register it with rap_strategy_register;
 * from then on rap_allocator_make(rm, name, "YourStrategy", parent, options, &a) builds instances.
 * Methods return a status and set the error sentence with rap_error_set. docs/strategies.md has a
 * worked example.
 */
#ifndef RAP_STRATEGY_H
#define RAP_STRATEGY_H

#include <rap/rap.h>

#ifdef __cplusplus
extern "C" {
#endif
RAP_API_BEGIN

/* 2 appended resource_gone, 3 reset_peaks, 4 sleep and wake; tables of older versions are still
 * accepted (they end before what came later). */
#define RAP_STRATEGY_VERSION 4

typedef struct rap_options rap_options;   /* the parsed key=value list given at make time */

/* Flags of a strategy. */
#define RAP_STRATEGY_NEEDS_PARENT 0x1u    /* rap_allocator_make refuses a NULL parent */
/* owns may run on any thread while others call the instance (rap_allocator_find relies on it);
 * without this flag find asks owns only under the lock of a ThreadSafe above the instance. */
#define RAP_STRATEGY_CONCURRENT_OWNS 0x2u
/* Keeps no blocks: every block it hands out is one its parent handed out for that very call, and
 * its free gives it straight back (ThreadSafe, SizeLimiter, Fault). A stream capturing a CUDA graph
 * may use it wherever it may use the parent; without the flag the manager assumes a strategy keeps
 * blocks, which a graph would go on using after the capture. */
#define RAP_STRATEGY_PASS_THROUGH 0x4u

typedef struct rap_strategy {
  int version;              /* RAP_STRATEGY_VERSION */
  const char *name;         /* looked up case-insensitively */
  unsigned flags;
  size_t state_size;        /* bytes of per-instance state, zeroed before init */
  /* Required. init reads its options with rap_options_get_*; keys it never reads are refused. */
  int (*init)(rap_allocator *self, void *state, rap_options *opts);
  void (*fini)(rap_allocator *self, void *state);     /* return every chunk; blocks may be live */
  int (*allocate)(void *state, void **out, size_t bytes, rap_resource *r);
  int (*deallocate)(void *state, void *ptr, rap_resource *r);
  int (*stats)(void *state, rap_stats *out);
  int (*owns)(void *state, const void *ptr);          /* 1 if ptr is a live block of this instance */
  /* Optional (NULL: RAP_OK for release and check, RAP_ERR_UNSUPPORTED otherwise). */
  int (*release)(void *state);
  int (*check)(void *state);
  int (*record_resource)(void *state, void *ptr, rap_resource *r);
  int (*pointer_resource)(void *state, const void *ptr, rap_resource **out);
  int (*resource_stats)(void *state, rap_resource *r, rap_stats *out);
  /* Version 2, optional: a resource this instance watches (rap_resource_watch) is being destroyed.
   * commit 0: RAP_ERR_BUSY, with a sentence, while r still owns live blocks here, changing nothing;
   * commit 1: r has been synchronized, so everything it was used for has passed: drop every trace
   * of it (this cannot fail). Called under the lock of a ThreadSafe above the instance, if any. */
  int (*resource_gone)(void *state, rap_resource *r, int commit);
  /* Version 3, optional: the high-water marks that stats reports (high_watermark,
   * actual_high_watermark, and each resource's) become the current values. A wrapper resets what
   * its stats show, e.g. its inner allocator's. NULL: rap_allocator_reset_peaks answers
   * RAP_ERR_UNSUPPORTED. Called under the lock of a ThreadSafe above the instance, if any. */
  int (*reset_peaks)(void *state);
  /* Version 4, optional: rap_allocator_sleep (mode: a rap_sleep_mode) and rap_allocator_wake. A
   * wrapper passes them to what it wraps, under its lock. NULL: RAP_ERR_UNSUPPORTED. */
  int (*sleep)(void *state, int mode);
  int (*wake)(void *state);
} rap_strategy;

/* An instance that keeps state per resource watches it, so that destroying the resource calls its
 * resource_gone (and only its: pools that never saw a resource are not touched). Watching the host
 * resource, which is never destroyed, does nothing. RAP_ERR_NOMEM when out of host memory. */
int  rap_resource_watch(rap_resource *r, rap_allocator *self);
void rap_resource_unwatch(rap_resource *r, rap_allocator *self);

/* Registers a strategy with one manager; the table must outlive it. RAP_ERR_EXISTS on a name clash. */
int  rap_strategy_register(rap_manager *rm, const rap_strategy *strategy);

/* Options: each returns RAP_OK and leaves *out at its default when the key is absent, and
 * RAP_ERR_INVALID with a sentence naming the key when the value is malformed. */
int  rap_options_get_size(rap_options *opts, const char *key, size_t *out);   /* 64, 4KiB, 1GiB */
int  rap_options_get_uint(rap_options *opts, const char *key, uint64_t *out);
int  rap_options_get_string(rap_options *opts, const char *key, const char **out);

/* For methods: the manager and parent of the instance, and failure with a sentence. */
rap_manager   *rap_allocator_manager(const rap_allocator *a);
void           rap_allocator_set_alignment(rap_allocator *self, size_t alignment);
size_t         rap_allocator_alignment(const rap_allocator *a);  /* every pointer it returns is so aligned */
int            rap_error_set(int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void           rap_log(int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

RAP_API_END
#ifdef __cplusplus
}
#endif
#endif /* RAP_STRATEGY_H */
