/* manager.c — the manager: allocators by name, their life cycle, and the public entry points.
 *
 * Allocators form a forest: each one has at most one parent, and a parent outlives its children
 * (creation order is kept, so destroying newest-first is children-first). Registry operations take
 * the manager's lock; allocate and deallocate never do, they go straight to the strategy's table.
 */
#include "rap_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- manager --------------------------------------------------------------------------------- */

int rap_manager_create(rap_manager **out) {
  if (out == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_manager_create: out is NULL");
  rapi_debug_read_env();
  rapi_trace_read_env();
  /* The thread guard's membarrier registration (milliseconds in a process with threads): here, once
   * per process, rather than in the first allocation that changes a pool's thread. */
  (void)rapi_membarrier_ready();
  rap_manager *rm = rapi_calloc(1, sizeof *rm);
  if (rm == NULL) return rapi_fail(RAP_ERR_NOMEM, "rap_manager_create: out of host memory");
  if (pthread_mutex_init(&rm->lock, NULL) != 0) {
    free(rm);
    return rapi_fail(RAP_ERR_BACKEND, "rap_manager_create: pthread_mutex_init failed");
  }
  rm->host.ops = &rapi_host_resource_ops;
  rm->host.rm = rm;
  rm->host.id = 0;
  rm->host.key = (uintptr_t)&rm->host;
  rapi_event_pool_init(&rm->host);
  rm->next_resource_id = 1;
  *out = rm;
  return RAP_OK;
}

static size_t live_blocks(rap_allocator *a, size_t *bytes, size_t *pending) {
  rap_stats s;
  memset(&s, 0, sizeof s);
  if (a->strategy->stats(a->state, &s) != RAP_OK) return 0;
  *bytes = s.current_bytes;
  if (pending) *pending = s.pending_count;
  return s.allocation_count;
}

/* An allocator that may hand out its parent's memory without asking (a pool, a cache, a plan: any
 * strategy that is not a pass-through) counts as a holder on every allocator under it, so that
 * sleep can refuse where memory would be handed out unmapped (rap_allocator_sleep). */
static void count_holder(rap_allocator *a, int delta) {
  if (a->strategy->flags & RAP_STRATEGY_PASS_THROUGH) return;
  for (rap_allocator *y = a->parent; y != NULL; y = y->parent)
    __atomic_add_fetch(&y->holders, (size_t)(ptrdiff_t)delta, __ATOMIC_RELAXED);
}

/* Unlinked first, so nobody finds it while its teardown waits (which may let the manager's lock
 * go, see rapi_host_wait); its parent counts it until the chunks went back. */
static void unlink_and_free(rap_allocator *a) {
  rap_manager *rm = a->rm;
  HASH_DEL(rm->by_name, a);
  for (rap_allocator **pp = &rm->allocators; *pp; pp = &(*pp)->next)
    if (*pp == a) {
      *pp = a->next;
      break;
    }
  a->strategy->fini(a, a->state);
  rapi_observers_free(a);   /* after fini: its chunks' unmaps were told */
  if (a->parent) a->parent->children--;
  count_holder(a, -1);
  free(a->state);
  free(a->name);
  free(a);
}

/* Every resource is synchronized (call-scoped: its newest event waited for) before any pool goes (work queued on a leaked block still writes
 * into memory that is there), then allocators go children first, then the resources. */
int rap_manager_destroy(rap_manager *rm) {
  if (rm == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_manager_destroy: manager is NULL");
  if (rapi_current_queue != NULL && rapi_current_queue->rm == rm)
    return rapi_fail(RAP_ERR_BUSY, "rap_manager_destroy: a manager cannot be destroyed from the work "
                     "of one of its own queues");
  for (rap_resource *r = rm->resources; r != NULL; r = r->next)
    if (rapi_resource_wait_done(r) != RAP_OK)
      rap_log(RAP_LOG_WARN, "rap_manager_destroy: synchronizing a %s resource failed: %s",
              r->ops->kind, rap_last_error());
  rapi_ipc_manager_fini(rm);   /* blocks of other processes: their queued work has passed */
  bool leaked = false;
  while (rm->allocators != NULL) {
    rap_allocator *a = rm->allocators;   /* newest first: children before parents */
    size_t bytes = 0, blocks = live_blocks(a, &bytes, NULL);
    if (blocks > 0) {
      char sz[32];
      rapi_format_size(sz, sizeof sz, bytes);
      rap_log(RAP_LOG_WARN, "allocator '%s' (%s) leaked %zu block%s, %s", a->name,
              a->strategy->name, blocks, blocks == 1 ? "" : "s", sz);
      leaked = true;
    }
    unlink_and_free(a);
  }
  while (rm->resources != NULL) {
    rap_resource *r = rm->resources;
    rapi_resource_unlink(rm, r);
    if (r->ops->close) r->ops->close(r);
    rapi_resource_unref(r);
  }
  for (rapi_strategy_entry *e = rm->custom; e != NULL;) {
    rapi_strategy_entry *next = e->next;
    free(e);
    e = next;
  }
  rapi_event_pool_fini(&rm->host, NULL);
  pthread_mutex_destroy(&rm->lock);
  free(rm);
  if (leaked)
    return rapi_fail(RAP_ERR_BUSY, "rap_manager_destroy: blocks were still live; the log names them");
  return RAP_OK;
}

/* ---- strategies ------------------------------------------------------------------------------ */

static const rap_strategy *find_strategy(rap_manager *rm, const char *name) {
  for (rapi_strategy_entry *e = rm->custom; e != NULL; e = e->next)
    if (strcasecmp(e->strategy->name, name) == 0) return e->strategy;
  return rapi_registry_builtin(name);
}

int rap_strategy_register(rap_manager *rm, const rap_strategy *s) {
  if (rm == NULL || s == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_strategy_register: manager or strategy is NULL");
  if (s->version < 1 || s->version > RAP_STRATEGY_VERSION)
    return rapi_fail(RAP_ERR_UNSUPPORTED,
                     "rap_strategy_register: strategy table version %d, this rap speaks 1 to %d",
                     s->version, RAP_STRATEGY_VERSION);
  if (s->name == NULL || s->name[0] == '\0' || s->init == NULL || s->fini == NULL ||
      s->allocate == NULL || s->deallocate == NULL || s->stats == NULL || s->owns == NULL)
    return rapi_fail(RAP_ERR_INVALID,
                     "rap_strategy_register: a strategy needs a name and init, fini, allocate, "
                     "deallocate, stats and owns");
  pthread_mutex_lock(&rm->lock);
  if (find_strategy(rm, s->name) != NULL) {
    pthread_mutex_unlock(&rm->lock);
    return rapi_fail(RAP_ERR_EXISTS, "rap_strategy_register: a strategy named '%s' exists", s->name);
  }
  rapi_strategy_entry *e = rapi_malloc(sizeof *e);
  if (e == NULL) {
    pthread_mutex_unlock(&rm->lock);
    return rapi_fail(RAP_ERR_NOMEM, "rap_strategy_register: out of host memory");
  }
  e->strategy = s;
  e->next = rm->custom;
  rm->custom = e;
  pthread_mutex_unlock(&rm->lock);
  return RAP_OK;
}

/* ---- allocators ------------------------------------------------------------------------------ */

static rap_allocator *lookup(rap_manager *rm, const char *name) {
  rap_allocator *a = NULL;
  HASH_FIND_STR(rm->by_name, name, a);
  return a;
}

/* Every sentence about one allocator of a make starts "'name' (Strategy): ", as the option
 * sentences do; a strategy's init names itself by its bare name, which is rewritten here. */
static int one_prefix(int st, const char *name, const char *owner) {
  const char *e = rap_last_error();
  size_t n = strlen(name);
  if (strncmp(e, name, n) != 0 || e[n] != ':' || e[n + 1] != ' ') return st;
  char rest[512];
  snprintf(rest, sizeof rest, "%s", e + n + 2);
  return rapi_fail(st, "%s: %s", owner, rest);
}

/* Builds, initialises and links one allocator; the lock is held. */
static int create_locked(rap_manager *rm, const char *name, const rap_strategy *s,
                         rap_allocator *parent, const char *options, rap_allocator **out) {
  rap_options opts;
  char owner[RAPI_NAME_MAX + 64];   /* option sentences name the allocator and its strategy */
  snprintf(owner, sizeof owner, "'%s' (%s)", name, s->name);
  int st = rapi_options_parse(options, owner, &opts);
  if (st != RAP_OK) return st;
  rap_allocator *a = rapi_calloc(1, sizeof *a);
  void *state = rapi_calloc(1, s->state_size ? s->state_size : 1);
  char *dup = rapi_strdup(name);
  if (a == NULL || state == NULL || dup == NULL) {
    free(a);
    free(state);
    free(dup);
    rapi_options_free(&opts);
    return rapi_fail(RAP_ERR_NOMEM, "rap_allocator_make('%s'): out of host memory", name);
  }
  a->strategy = s;
  a->state = state;
  a->rm = rm;
  a->parent = parent;
  a->name = dup;
  a->alignment = 1;
  /* Host memory serves every device's streams; a device platform narrows this in its init, and
   * everything above it inherits the platform's (rap_allocator_set_peer_access changes them all). */
  a->devices_ok = parent != NULL ? __atomic_load_n(&parent->devices_ok, __ATOMIC_RELAXED) : ~(uint64_t)0;
  a->platform = parent != NULL ? parent->platform : NULL;   /* a platform's init sets its own */
  st = s->init(a, state, &opts);
  /* Only a platform whose record allows it (CUDA's own graph-aware allocator), reached through
   * wrappers that keep no blocks, may serve a capturing stream: a pool's blocks would stay in the
   * graph and be handed out again. */
  a->capture_ok = parent == NULL ? a->platform != NULL && a->platform->capture_ok
                                 : parent->capture_ok && (s->flags & RAP_STRATEGY_PASS_THROUGH) != 0;
  if (st == RAP_OK) {
    st = rapi_options_check_unused(&opts);
    if (st != RAP_OK) s->fini(a, state);
  } else if (st == RAP_ERR_INVALID) {
    st = rapi_options_misspelt(&opts) != RAP_OK ? RAP_ERR_INVALID : one_prefix(st, name, owner);
  } else {
    st = one_prefix(st, name, owner);
  }
  rapi_options_free(&opts);
  if (st != RAP_OK) {
    free(state);
    free(dup);
    free(a);
    return st;
  }
  a->seq = rm->next_seq++;
  a->next = rm->allocators;
  rm->allocators = a;
  bool added;
  RAPI_HASH_TRY(added, HASH_ADD_KEYPTR(hh, rm->by_name, a->name, strlen(a->name), a));
  if (!added) {
    rm->allocators = a->next;
    s->fini(a, state);
    free(state);
    free(dup);
    free(a);
    return rapi_fail(RAP_ERR_NOMEM, "rap_allocator_make('%s'): out of host memory", name);
  }
  if (parent) parent->children++;
  count_holder(a, 1);
  *out = a;
  return RAP_OK;
}

static int get_locked(rap_manager *rm, const char *name, rap_allocator **out) {
  rap_allocator *a = lookup(rm, name);
  if (a != NULL) {
    *out = a;
    return RAP_OK;
  }
  const rap_strategy *platform = NULL;
  char opts[64];
  int st = rapi_registry_platform(name, &platform, opts, sizeof opts);
  if (st != RAP_OK) return st;
  return create_locked(rm, name, platform, NULL, opts, out);
}

int rap_allocator_get(rap_manager *rm, const char *name, rap_allocator **out) {
  if (rm == NULL || name == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_allocator_get: manager, name or out is NULL");
  pthread_mutex_lock(&rm->lock);
  int st = get_locked(rm, name, out);
  pthread_mutex_unlock(&rm->lock);
  return st;
}

static RAPI_NOINLINE int unknown_strategy(rap_manager *rm, const char *name, const char *strategy) {
  char known[256];
  rapi_registry_names(known, sizeof known);
  bool custom = rm->custom != NULL;
  const char *near = rapi_registry_closest(strategy);
  if (near != NULL)
    return rapi_fail(RAP_ERR_NOT_FOUND, "rap_allocator_make('%s'): no strategy named '%s' \xe2\x80\x94 "
                     "did you mean '%s'?", name, strategy, near);
  return rapi_fail(RAP_ERR_NOT_FOUND, "rap_allocator_make('%s'): no strategy named '%s' (built in: "
                   "%s%s)", name, strategy, known, custom ? "; and those registered" : "");
}

/* Two names that answer to one RAP_ALLOCATOR_<NAME> variable ("a-b" and "a_b", "pool" and "Pool")
 * would both be replaced by it: the second is refused. */
static int env_twin(rap_manager *rm, const char *name) {
  char mine[RAPI_NAME_MAX + 16], theirs[RAPI_NAME_MAX + 16];
  rapi_env_var(name, mine, sizeof mine);
  for (rap_allocator *a = rm->allocators; a != NULL; a = a->next) {
    rapi_env_var(a->name, theirs, sizeof theirs);
    if (strcmp(mine, theirs) == 0)
      return rapi_fail(RAP_ERR_EXISTS, "rap_allocator_make: the name '%s' and the allocator '%s' "
                       "would both answer to the environment variable %s", name, a->name, mine);
  }
  return RAP_OK;
}

int rapi_allocator_make_direct(rap_manager *rm, const char *name, const char *strategy,
                               const char *parent, const char *options, rap_allocator **out) {
  if (rm == NULL || name == NULL || strategy == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_allocator_make: manager, name, strategy or out is NULL");
  size_t len = strlen(name);
  if (len == 0 || len >= RAPI_NAME_MAX)
    return rapi_fail(RAP_ERR_INVALID, "rap_allocator_make: a name has 1 to %d characters",
                     RAPI_NAME_MAX - 1);
  pthread_mutex_lock(&rm->lock);
  int st;
  const rap_strategy *s;
  rap_allocator *p = NULL;
  const rap_strategy *platform;
  char scratch[64];
  if (lookup(rm, name) != NULL ||
      rapi_registry_platform(name, &platform, scratch, sizeof scratch) != RAP_ERR_NOT_FOUND) {
    st = rapi_fail(RAP_ERR_EXISTS, "rap_allocator_make: the name '%s' is taken%s", name,
                   lookup(rm, name) ? "" : " by a platform allocator");
  } else if ((st = env_twin(rm, name)) != RAP_OK) {
    /* the sentence names both */
  } else if ((s = find_strategy(rm, strategy)) == NULL) {
    st = unknown_strategy(rm, name, strategy);
  } else if (parent == NULL && (s->flags & RAP_STRATEGY_NEEDS_PARENT)) {
    st = rapi_fail(RAP_ERR_INVALID, "rap_allocator_make('%s'): %s needs a parent allocator", name,
                   s->name);
  } else if (parent != NULL && (st = get_locked(rm, parent, &p)) != RAP_OK) {
    if (st == RAP_ERR_NOT_FOUND)
      rapi_fail(st, "rap_allocator_make('%s'): no allocator named '%s' to use as parent", name,
                parent);
  } else {
    st = create_locked(rm, name, s, p, options, out);
  }
  pthread_mutex_unlock(&rm->lock);
  return st;
}

int rap_allocator_destroy(rap_allocator *a) {
  if (a == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_allocator_destroy: allocator is NULL");
  rap_manager *rm = a->rm;
  rapi_held held;
  rapi_lock(&rm->lock, &held);
  /* Children first: an allocator with none is not under a wrapper that others may be calling. Its
   * blocks are read inside its thread guard, as any call into a plain pool is: another thread
   * inside it (a queue's work freeing into it, say) makes the destroy BUSY rather than a read of
   * what that thread is changing, and once in, nobody else gets in while the pool goes. */
  int mode = a->children > 0 ? 0 : rapi_guard_enter(a, "rap_allocator_destroy");
  if (mode < 0) {
    rapi_unlock(&held);
    return rapi_fail(RAP_ERR_BUSY, "rap_allocator_destroy('%s'): another thread is inside this %s "
                     "at the same time; destroy it once no thread uses it", a->name,
                     a->strategy->name);
  }
  size_t bytes = 0, pending = 0, blocks = a->children > 0 ? 0 : live_blocks(a, &bytes, &pending);
  int st = RAP_OK;
  if (a->children > 0)
    st = rapi_fail(RAP_ERR_BUSY, "rap_allocator_destroy('%s'): %zu allocator%s still use%s it",
                   a->name, a->children, a->children == 1 ? "" : "s", a->children == 1 ? "s" : "");
  else if (rap_allocator_is_asleep(a))
    st = rapi_fail(RAP_ERR_BUSY, "rap_allocator_destroy('%s'): it is asleep; wake it first "
                   "(rap_allocator_wake), or destroy the manager, which frees a sleeping pool", a->name);
  else if (blocks > 0)
    st = rapi_fail(RAP_ERR_BUSY, "rap_allocator_destroy('%s'): %zu block%s still live", a->name,
                   blocks, blocks == 1 ? " is" : "s are");
  else if (pending > 0 && rapi_current_queue != NULL)
    /* Teardown waits for pending blocks; a queue's work cannot wait for its own queue (the blocks
     * may be pending on it), so the pool must go from elsewhere. */
    st = rapi_fail(RAP_ERR_BUSY, "rap_allocator_destroy('%s'): %zu block%s still pending, and a "
                   "queue's own work cannot wait for them", a->name, pending, pending == 1 ? " is" : "s are");
  else
    unlink_and_free(a);   /* inside the guard to the end: a is gone */
  if (st != RAP_OK && mode > 0) rapi_guard_leave(a, mode);
  rapi_unlock(&held);
  return st;
}

static int owns(rap_allocator *a, void *ptr) { return a->strategy->owns(a->state, ptr) ? 1 : 0; }

/* fn(a, arg) under the lock of the ThreadSafe above a, if any: for the manager's own calls into an
 * allocator, which must not race with callers going through that wrapper. */
static int guarded(rap_allocator *a, int (*fn)(rap_allocator *, void *), void *arg) {
  if (a->guard_lock == NULL) return fn(a, arg);
  rapi_held held;
  rapi_lock(a->guard_lock, &held);
  int st = fn(a, arg);
  rapi_unlock(&held);
  return st;
}

/* Newest first: a pool's block can share its address with the chunk it came from. Allocators whose
 * owns is safe on any thread (every built-in one but FixedPool: a seqlock read of a pool's map, a
 * locked platform map) are asked directly, so find never touches what other threads are changing;
 * the others only under the lock of a ThreadSafe above them. */
int rap_allocator_find(rap_manager *rm, const void *ptr, rap_allocator **out) {
  if (rm == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_allocator_find: manager or out is NULL");
  if (ptr == NULL) return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_allocator_find: pointer is NULL");
  rapi_held held;
  rapi_lock(&rm->lock, &held);
  rap_allocator *found = NULL;
  for (rap_allocator *a = rm->allocators; a != NULL && found == NULL; a = a->next) {
    bool direct = (a->strategy->flags & RAP_STRATEGY_CONCURRENT_OWNS) != 0;
    if ((direct ? owns(a, (void *)ptr) : guarded(a, owns, (void *)ptr)) == 1) found = a;
  }
  rapi_unlock(&held);
  if (found == NULL)
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_allocator_find: no allocator owns %p", ptr);
  *out = found;
  return RAP_OK;
}


static int gone(rap_allocator *a, void *r) {
  return a->strategy->version >= 2 && a->strategy->resource_gone != NULL
             ? a->strategy->resource_gone(a->state, r, 0) : RAP_OK;
}
static int forget(rap_allocator *a, void *r) {
  if (a->strategy->version >= 2 && a->strategy->resource_gone != NULL)
    (void)a->strategy->resource_gone(a->state, r, 1);
  rap_resource_unwatch(r, a);
  return RAP_OK;
}

static unsigned depth(const rap_allocator *a) {
  unsigned d = 0;
  for (a = a->parent; a != NULL; a = a->parent) d++;
  return d;
}
static unsigned deepest(const rap_resource *r) {
  unsigned d = 0;
  for (const rapi_watch *w = r->watchers; w != NULL; w = w->next)
    if (depth(w->a) > d) d = depth(w->a);
  return d;
}

/* Synchronizes r (a call-scoped one: waits for its newest event, its stream maybe gone), so that
 * everything it was used for has passed; refuses while r owns live blocks
 * (asking every pool that knows r before changing any) or an open import of another process's
 * block was given r (its close would use r), then every such pool drops r. Pools that
 * never saw r are not touched: other threads may be using them. The memory of r stays while a
 * wait queued elsewhere may still look at its events. */
int rap_resource_destroy(rap_resource *r) {
  if (r == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_resource_destroy: resource is NULL");
  rap_manager *rm = r->rm;
  if (r == &rm->host)
    return rapi_fail(RAP_ERR_INVALID, "rap_resource_destroy: the host resource belongs to the manager");
  if (r == rapi_current_queue)
    return rapi_fail(RAP_ERR_BUSY, "rap_resource_destroy: a resource cannot be destroyed from its "
                     "own work");
  int st = rapi_ipc_resource_busy(r);
  if (st == RAP_OK) st = rapi_resource_wait_done(r);   /* call-scoped: its newest event */
  if (st != RAP_OK) return st;
  rapi_held held;
  rapi_lock(&rm->lock, &held);
  /* The watch list changes only under the manager's lock, except that a pool first seeing r adds
   * itself: using r while destroying it is the caller's race, as with any handle. */
  /* Wrappers before what they wrap, asked and told: a ThreadCache gives its cached blocks of r
   * back to its parent first, so the parent answers for r's live blocks alone. */
  for (unsigned d = deepest(r) + 1; d-- > 0 && st == RAP_OK;)
    for (rapi_watch *w = r->watchers; w != NULL && st == RAP_OK; w = w->next)
      if (depth(w->a) == d) st = guarded(w->a, gone, r);   /* under a ThreadSafe: its lock */
  while (st == RAP_OK && r->watchers != NULL) {
    rapi_watch *first = r->watchers;
    for (rapi_watch *w = r->watchers; w != NULL; w = w->next)
      if (depth(w->a) > depth(first->a)) first = w;
    (void)guarded(first->a, forget, r);
  }
  rapi_unlock(&held);
  if (st != RAP_OK) return st;
  rapi_resource_unlink(rm, r);
  if (r->ops->close) r->ops->close(r);
  rapi_resource_unref(r);
  return RAP_OK;
}


/* ---- peer access ----------------------------------------------------------------------------- */

static const rap_allocator *root_of(const rap_allocator *a) {
  while (a->parent != NULL) a = a->parent;
  return a;
}

/* The platform does the device's part through its record (CUDA's peer access, a pool's or a
 * mapping's access descriptors: platforms/platform.c); then every allocator over that platform
 * takes the new set of devices, under the manager's lock, so that allocators made meanwhile
 * inherit it too. */
int rap_allocator_set_peer_access(rap_allocator *a, int device, int enable) {
  if (a == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_allocator_set_peer_access: allocator is NULL");
  if (device < 0)
    return rapi_fail(RAP_ERR_INVALID, "rap_allocator_set_peer_access('%s'): device %d is not a "
                     "device number", a->name, device);
  rap_allocator *root = (rap_allocator *)root_of(a);
  int owner = -1;
  int st = rapi_platform_peer_access(root, device, enable != 0, &owner);
  if (st != RAP_OK || owner < 0 || device == owner) return st;
  uint64_t bit = rapi_device_bit(device);
  pthread_mutex_lock(&a->rm->lock);
  uint64_t mask = __atomic_load_n(&root->devices_ok, __ATOMIC_RELAXED);
  mask = enable ? mask | bit : mask & ~bit;
  for (rap_allocator *x = a->rm->allocators; x != NULL; x = x->next)
    if (root_of(x) == root) __atomic_store_n(&x->devices_ok, mask, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&a->rm->lock);
  return RAP_OK;
}

/* Whether NCCL can register ptr's memory: its allocator's platform record answers
 * (platforms/registrable.c). */
int rap_pointer_registrable(rap_manager *rm, const void *ptr) {
  if (rm == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_pointer_registrable: manager is NULL");
  rap_allocator *a = NULL;
  if (rap_allocator_find(rm, ptr, &a) != RAP_OK) {
    /* Not a block's start (a tensor's view, a bucket inside a block): the growable platform whose
     * reserved range holds it answers for its memory. */
    rapi_held held;
    rapi_lock(&rm->lock, &held);
    for (rap_allocator *x = rm->allocators; x != NULL && a == NULL; x = x->next)
      if (rapi_platform_in_range(x, ptr)) a = x;
    rapi_unlock(&held);
  }
  if (a == NULL)
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_pointer_registrable: no allocator of this "
                     "manager handed out %p", ptr);
  char who[64];
  snprintf(who, sizeof who, "rap_pointer_registrable: %p", ptr);
  return rapi_platform_registrable(a, who);
}
