/* allocator.c — what every allocator answers, whatever its strategy: the public entry points that
 * go straight to the allocator's table, and the accessors strategies use on themselves and their
 * parents. The base layer: strategies call these on their parents, nothing here calls upward.
 * Also the debug levels (RAP_DEBUG, rap_internal.h): with it off the entry points cost one branch
 * more; on, every public call on an allocator goes through debugged(), below.
 */
#include "rap_internal.h"
#include "rap_testing.h"   /* rap_guard_membarrier_state */

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

static _Thread_local char assert_failed[256];   /* the first broken precondition of this call */

void rapi_assert_failed(const char *file, int line, const char *cond) {
  const char *base = strrchr(file, '/');
  rap_log(RAP_LOG_ERROR, "RAP_DEBUG: %s:%d: precondition broken: %s", base ? base + 1 : file, line,
          cond);
  if (assert_failed[0] == '\0')
    snprintf(assert_failed, sizeof assert_failed, "%s:%d: %s", base ? base + 1 : file, line, cond);
}

/* A public call with the debug checks: preconditions broken inside it make it RAP_ERR_CORRUPT, and
 * at level 2 the allocator's invariants are walked after it. Nested calls (a pool asking its
 * parent) each check their own allocator; the first broken precondition is reported once. */
static RAPI_NOINLINE int debugged(rap_allocator *a, const char *fn, int st) {
  if (assert_failed[0] != '\0') {
    char what[256];
    memcpy(what, assert_failed, sizeof what);
    assert_failed[0] = '\0';
    return rapi_fail(RAP_ERR_CORRUPT, "%s('%s'): RAP_DEBUG: precondition broken at %s", fn, a->name,
                     what);
  }
  if (rapi_debug_level() >= 2 && a->strategy->check != NULL) {
    char saved[512];
    snprintf(saved, sizeof saved, "%s", rap_last_error());
    int chk = a->strategy->check(a->state);
    if (chk == RAP_ERR_BUSY) {   /* another thread is inside this plain pool: no walk now */
      if (st != RAP_OK) rapi_fail(st, "%s", saved);
      return st;
    }
    if (chk != RAP_OK) return chk;
    if (st != RAP_OK) rapi_fail(st, "%s", saved);   /* the call's own sentence stays */
  }
  return st;
}

const char *rap_allocator_name(const rap_allocator *a) { return a ? a->name : NULL; }
const char *rap_allocator_strategy(const rap_allocator *a) { return a ? a->strategy->name : NULL; }
rap_allocator *rap_allocator_parent(const rap_allocator *a) { return a ? a->parent : NULL; }
rap_manager *rap_allocator_manager(const rap_allocator *a) { return a ? a->rm : NULL; }
void rap_allocator_set_alignment(rap_allocator *self, size_t alignment) {
  if (self != NULL) self->alignment = alignment;
}
size_t rap_allocator_alignment(const rap_allocator *a) { return a ? a->alignment : 0; }

/* ---- the thread guard: one thread at a time inside a plain pool ------------------------------
 * A plain pool (QuickPool, DynamicPoolList, ResourceAwarePool, FixedPool) not under ThreadSafe or
 * ThreadCache serves one thread at a time, as Umpire's do; a second thread inside it at once is
 * answered RAP_ERR_BUSY with a sentence, before it touches anything, but for a free, which waits
 * its turn (waits_its_turn: nothing is lost by a caller that ignores a free's status). The guard
 * is biased to the thread that used the pool last (its owner): the owner's call stores its mark in
 * `busy`, checks it is still the owner and runs, with no atomic read-modify-write (one costs 10 ns
 * here, as much as the whole pair). Another thread takes the `gate` (a compare-exchange), makes
 * itself the owner, and makes every thread of the process pass a memory barrier (membarrier(2)):
 * after it, either the old owner's mark is seen (it is inside: the newcomer is refused and gives
 * ownership back) or the old owner sees the new one and goes the slow way itself, where the gate
 * refuses it. Handing a pool from thread to thread therefore costs a system call at each change
 * of thread, nothing while one thread keeps it; after RAPI_GUARD_HANDOVERS changes the bias ends
 * for good and every call takes the gate (a pool shared on purpose under the user's own lock).
 * Without membarrier every call takes the gate. The owner's part is inline in the strategies'
 * entry functions (RAPI_GUARDED, rap_internal.h), where it adds no call of its own; the rest is
 * here. */

_Thread_local rap_resource *rapi_current_queue;

static int membarrier_ok;   /* atomic: 0 unknown, 1 registered, -1 not available */

bool rapi_membarrier_ready(void) {
  int ok = __atomic_load_n(&membarrier_ok, __ATOMIC_ACQUIRE);
  if (ok == 0) {
    ok = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 ? 1 : -1;
    __atomic_store_n(&membarrier_ok, ok, __ATOMIC_RELEASE);
  }
  return ok > 0;
}

int rap_guard_membarrier_state(void) { return __atomic_load_n(&membarrier_ok, __ATOMIC_ACQUIRE); }

void rapi_membarrier(void) { (void)syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0); }

static RAPI_NOINLINE int two_threads(const char *fn, const rap_allocator *a) {
  return rapi_fail(RAP_ERR_BUSY, "%s('%s'): another thread is inside this %s at the same time; a "
                   "plain pool serves one thread at a time: wrap it in ThreadSafe(...) or "
                   "ThreadCache(...) to share it between threads, as in ThreadSafe(%s(...))", fn,
                   a->name, a->strategy->name, a->strategy->name);
}

/* A pool that changes thread RAPI_GUARD_HANDOVERS times is shared on purpose, under a lock of the
 * user's (a mutex around it, a runtime's allocator hook called from several threads): its bias
 * ends, and every call takes the gate (one compare-and-swap) instead of a membarrier per change of
 * thread. Until then each change gives the new owner a slot of busy of its own (rap_internal.h,
 * rapi_guard_word): the old owner may still be on its way in, between its read of the owner and
 * its mark, and the mark it writes when it goes on, and clears on finding it is no longer the
 * owner, must not be the new owner's. */

/* One try of everyone but the owner: the mode to leave with, or -1 where another thread is inside. */
static int guard_try(rap_allocator *a, uintptr_t me) {
  if (__atomic_load_n(&a->guard_lock, __ATOMIC_RELAXED) != NULL) {
    /* A wrapper above orders the threads: every call in is under its lock, which is the barrier a
     * change of owner needs. The pool is biased to this thread with a plain store, so that the
     * next calls from it take the owner's way (a wrapped pool used by one thread at a time pays
     * the slow way once per change of thread, not at every call). */
    uintptr_t old = __atomic_load_n(&a->owner, __ATOMIC_RELAXED);
    if (!rapi_guard_mine(old, me) && old != RAPI_GUARD_UNBIASED)   /* the slot stays: the lock orders */
      __atomic_store_n(&a->owner, rapi_guard_word(me, __atomic_load_n(&a->busy_slot, __ATOMIC_RELAXED)),
                       __ATOMIC_RELAXED);
    return RAPI_GUARD_NONE;
  }
  int open = 0;
  if (!__atomic_compare_exchange_n(&a->gate, &open, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    return -1;
  uintptr_t old = __atomic_load_n(&a->owner, __ATOMIC_RELAXED);
  if (!rapi_guard_mine(old, me) && old != RAPI_GUARD_UNBIASED && RAPI_GUARD_CAN_BIAS &&
      rapi_membarrier_ready()) {
    unsigned slot = ++a->handovers;   /* a slot no thread has written: 1 to RAPI_GUARD_HANDOVERS - 1 */
    uintptr_t next = slot >= RAPI_GUARD_HANDOVERS ? RAPI_GUARD_UNBIASED : rapi_guard_word(me, slot);
    __atomic_store_n(&a->owner, next, __ATOMIC_RELAXED);   /* only the gate's holder writes it */
    if (old != 0) rapi_membarrier();
    if (__atomic_load_n(&a->busy[rapi_guard_slot(old)], __ATOMIC_ACQUIRE) != 0) {
      __atomic_store_n(&a->owner, old, __ATOMIC_RELAXED);   /* the old owner is inside: its own */
      __atomic_store_n(&a->gate, 0, __ATOMIC_RELEASE);
      return -1;
    }
    if (next != RAPI_GUARD_UNBIASED) __atomic_store_n(&a->busy_slot, slot, __ATOMIC_RELAXED);
  }   /* without membarrier no pool is ever biased: every call comes through the gate */
  return RAPI_GUARD_GATE;
}

/* A free that meets another thread inside waits its turn: a caller that ignores a free's status
 * (most do) would lose the block. Not a queue's own work, though: a thread inside the pool may be
 * waiting on the host for that very queue (teardown, out of memory), and neither would move. The
 * pool says once that it is being shared without a wrapper. */
static bool waits_its_turn(rap_allocator *a, const char *fn) {
  if (rapi_current_queue != NULL || strcmp(fn, "rap_deallocate") != 0) return false;
  if (__atomic_load_n(&a->guard_warned, __ATOMIC_RELAXED) == 0 &&
      __atomic_exchange_n(&a->guard_warned, 1, __ATOMIC_RELAXED) == 0)
    rap_log(RAP_LOG_WARN, "rap_deallocate('%s'): another thread is inside this %s at the same time; "
            "the free waits its turn. A plain pool serves one thread at a time: wrap it in "
            "ThreadSafe(...) or ThreadCache(...) to share it between threads (said once per pool)",
            a->name, a->strategy->name);
  return true;
}

/* Everyone but the owner: the mode to leave with, or RAP_ERR_BUSY (a free waits instead). */
int rapi_guard_slow(rap_allocator *a, uintptr_t me, const char *fn) {
  for (;;) {
    int mode = guard_try(a, me);
    if (mode >= 0) return mode;
    if (!waits_its_turn(a, fn)) return two_threads(fn, a);
    sched_yield();
  }
}

/* ---- blocks: the hot entry points go straight to the strategy ------------------------------- */

static RAPI_NOINLINE int bad_call(const char *fn, const rap_allocator *a, const void *out,
                                  const rap_resource *r) {
  if (a == NULL) return rapi_fail(RAP_ERR_INVALID, "%s: allocator is NULL", fn);
  if (out == NULL) return rapi_fail(RAP_ERR_INVALID, "%s: out is NULL", fn);
  (void)r;
  return rapi_fail(RAP_ERR_INVALID, "%s('%s'): the resource belongs to another manager", fn,
                   a->name);
}

/* Out of memory with a handler set: it is asked, attempt after attempt, whether to try again. The
 * allocator's sentence is the one the caller sees when the handler gives up, whatever the handler
 * called meanwhile. */
static RAPI_NOINLINE int oom_retry(rap_allocator *a, void **out, size_t bytes, rap_resource *r) {
  int st = RAP_ERR_NOMEM;
  for (int attempt = 1; st == RAP_ERR_NOMEM; attempt++) {
    rap_oom_handler fn = __atomic_load_n(&a->oom, __ATOMIC_ACQUIRE);
    char sentence[512];
    snprintf(sentence, sizeof sentence, "%s", rap_last_error());
    unsigned depth = rapi_trace_depth;
    rapi_trace_depth = depth ? depth - 1 : 0;   /* the handler's own calls are at its caller's depth */
    bool again = fn != NULL && fn(a, bytes, r, attempt, a->oom_user);
    rapi_trace_depth = depth;
    if (!again) return rapi_fail(RAP_ERR_NOMEM, "%s", sentence);
    if (rapi_log_on(RAP_LOG_DEBUG))
      rap_log(RAP_LOG_DEBUG, "%s: out of memory for %zu bytes; the handler asks for attempt %d",
              a->name, bytes, attempt + 1);
    st = a->strategy->allocate(a->state, out, bytes, r);
  }
  return st;
}

/* The two hot entry points: one unlikely branch covers bad input, the debug levels and a handler
 * for out of memory alike, then the strategy. */
/* A pool asked to serve a resource that is capturing a graph (rap_resource_cuda_begin_capture). */
static RAPI_NOINLINE int capturing(const char *fn, const rap_allocator *a, const rap_resource *r) {
  return rapi_fail(RAP_ERR_BUSY, "%s('%s'): %s resource #%llu is capturing a graph, and a pool's "
                   "blocks would stay in the graph and be handed out again: allocate on it from "
                   "StreamOrdered (alone or under ThreadSafe or SizeLimiter), or after the capture "
                   "ends", fn, a->name, r->ops->kind, (unsigned long long)r->id);
}

static inline bool capture_refused(const rap_allocator *a, const rap_resource *r) {
  return r != NULL && __atomic_load_n(&r->capturing, __ATOMIC_RELAXED) && !a->capture_ok;
}

/* A stream of a device that has no access to a's memory (rap_allocator_set_peer_access). */
static inline uint64_t foreign_device(const rap_allocator *a, const rap_resource *r) {
  return r->devbit & ~__atomic_load_n(&a->devices_ok, __ATOMIC_RELAXED);
}

static RAPI_NOINLINE int wrong_device(const char *fn, const rap_allocator *a, const rap_resource *r) {
  int device = __builtin_ctzll(r->devbit);
  return rapi_fail(RAP_ERR_INVALID, "%s('%s'): %s resource #%llu is a stream of device %d, which has "
                   "no access to this memory: give it access first (rap_allocator_set_peer_access, or "
                   "peers= on the platform)", fn, a->name, r->ops->kind, (unsigned long long)r->id,
                   device);
}

/* Bad input, a debug level or a trace: the checked path. A traced call is written once it is
 * answered (its parent's growth inside it comes first); a deallocation is written before it runs
 * (so that a block handed out again right after never appears to be so while still live), with
 * a 'refused' line after it if it failed. */
static RAPI_NOINLINE int allocate_checked(rap_allocator *a, void **out, size_t bytes, rap_resource *r,
                                          const void *caller) {
  if (a == NULL || out == NULL || (r != NULL && r->rm != a->rm))
    return bad_call("rap_allocate", a, out, r);
  if (capture_refused(a, r)) return capturing("rap_allocate", a, r);
  if (r != NULL && foreign_device(a, r)) return wrong_device("rap_allocate", a, r);
  rapi_trace_depth++;
  int st = a->strategy->allocate(a->state, out, bytes, r);
  if (st == RAP_ERR_NOMEM && __atomic_load_n(&a->oom, __ATOMIC_RELAXED) != NULL)
    st = oom_retry(a, out, bytes, r);
  rapi_trace_depth--;
  if (rapi_tracing()) {
    rap_resource *on = r != NULL ? r : &a->rm->host;
    rapi_trace_caller = caller;   /* after the calls inside: theirs were written */
    if (st == RAP_OK) rapi_trace("alloc", a, on, *out, bytes, NULL);
    else if (st == RAP_ERR_NOMEM) rapi_trace("oom", a, on, NULL, bytes, NULL);
  }
  return debugged(a, "rap_allocate", st);
}

/* A resource the allocator must refuse or check first: another manager's, a capturing one, a
 * stream of a device without access: a branch each, none taken; the host resource (NULL) skips
 * them. */
static RAPI_INLINE bool resource_odd(const rap_allocator *a, const rap_resource *r) {
  return RAPI_UNLIKELY(r->rm != a->rm) ||
         RAPI_UNLIKELY(__atomic_load_n(&r->capturing, __ATOMIC_RELAXED) != 0) ||
         RAPI_UNLIKELY(foreign_device(a, r) != 0);
}

/* An allocator with a handler for out of memory takes the checked path, which runs it: the
 * strategy's call is then the last thing here (a jump, with nothing kept across it). Each test is
 * its own branch, all predicted not taken: about 12 instructions with the host resource. */
int rap_allocate(rap_allocator *a, void **out, size_t bytes, rap_resource *r) {
  if (RAPI_UNLIKELY(a == NULL) || RAPI_UNLIKELY(out == NULL))
    return allocate_checked(a, out, bytes, r, __builtin_return_address(0));
  if (r != NULL && resource_odd(a, r)) return allocate_checked(a, out, bytes, r, __builtin_return_address(0));
  if (RAPI_UNLIKELY(rapi_slow_calls() != 0) ||
      RAPI_UNLIKELY(__atomic_load_n(&a->oom, __ATOMIC_RELAXED) != NULL))
    return allocate_checked(a, out, bytes, r, __builtin_return_address(0));
  return a->strategy->allocate(a->state, out, bytes, r);
}

int rap_allocator_set_oom_handler(rap_allocator *a, rap_oom_handler fn, void *user) {
  if (a == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_allocator_set_oom_handler: allocator is NULL");
  a->oom_user = user;
  __atomic_store_n(&a->oom, fn, __ATOMIC_RELEASE);
  return RAP_OK;
}

static RAPI_NOINLINE int deallocate_checked(rap_allocator *a, void *ptr, rap_resource *r) {
  if (a == NULL || (r != NULL && r->rm != a->rm)) return bad_call("rap_deallocate", a, "", r);
  if (ptr == NULL) return RAP_OK;
  if (capture_refused(a, r)) return capturing("rap_deallocate", a, r);
  if (r != NULL && foreign_device(a, r)) return wrong_device("rap_deallocate", a, r);
  RAPI_TRACE("dealloc", a, r, ptr, 0, NULL);
  rapi_trace_depth++;
  int st = a->strategy->deallocate(a->state, ptr, r);
  rapi_trace_depth--;
  if (st != RAP_OK) RAPI_TRACE("refused", a, r, ptr, 0, ",\"status\":\"%s\"", rap_status_name(st));
  return debugged(a, "rap_deallocate", st);
}

int rap_deallocate(rap_allocator *a, void *ptr, rap_resource *r) {
  if (RAPI_UNLIKELY(a == NULL) || RAPI_UNLIKELY(ptr == NULL)) return deallocate_checked(a, ptr, r);
  if (r != NULL && resource_odd(a, r)) return deallocate_checked(a, ptr, r);
  if (RAPI_UNLIKELY(rapi_slow_calls() != 0)) return deallocate_checked(a, ptr, r);
  return a->strategy->deallocate(a->state, ptr, r);
}

int rap_release(rap_allocator *a) {
  if (a == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_release: allocator is NULL");
  int st = a->strategy->release ? a->strategy->release(a->state) : RAP_OK;
  return RAPI_UNLIKELY(rapi_debug_level() > 0) ? debugged(a, "rap_release", st) : st;
}

int rap_allocator_check(rap_allocator *a) {
  if (a == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_allocator_check: allocator is NULL");
  return a->strategy->check ? a->strategy->check(a->state) : RAP_OK;
}

int rap_record_resource(rap_allocator *a, void *ptr, rap_resource *r) {
  if (a == NULL || r == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_record_resource: allocator or resource is NULL");
  if (r->rm != a->rm) return bad_call("rap_record_resource", a, "", r);
  if (foreign_device(a, r)) return wrong_device("rap_record_resource", a, r);
  if (ptr == NULL)
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_record_resource('%s'): pointer is NULL", a->name);
  if (a->strategy->record_resource == NULL)
    return rapi_fail(RAP_ERR_UNSUPPORTED,
                     "rap_record_resource('%s'): %s does not track resources", a->name,
                     a->strategy->name);
  int st = a->strategy->record_resource(a->state, ptr, r);
  return RAPI_UNLIKELY(rapi_debug_level() > 0) ? debugged(a, "rap_record_resource", st) : st;
}

int rap_pointer_resource(rap_allocator *a, const void *ptr, rap_resource **out) {
  if (a == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_pointer_resource: allocator or out is NULL");
  if (a->strategy->pointer_resource != NULL) return a->strategy->pointer_resource(a->state, ptr, out);
  if (ptr == NULL || !a->strategy->owns(a->state, ptr))
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_pointer_resource('%s'): %p is not a live block",
                     a->name, ptr);
  *out = &a->rm->host;   /* strategies without resources hand every block to the host */
  return RAP_OK;
}

/* ---- statistics: the caller's rap_stats may be older (smaller) or newer (larger) than ours ---- */

/* The layout rap_allocator_stats had before callers said their size: fields up to cached_count. */
#define STATS_FIRST_LAYOUT (offsetof(rap_stats, cached_count) + sizeof(size_t))
_Static_assert(STATS_FIRST_LAYOUT == 15 * sizeof(size_t), "rap_stats changed before cached_count");

/* Copies the whole fields of s that fit in size bytes, zeroes what is beyond ours. */
static void stats_out(rap_stats *out, size_t size, const rap_stats *s) {
  size_t n = size < sizeof *s ? size / sizeof(size_t) * sizeof(size_t) : sizeof *s;
  memcpy(out, s, n);
  if (size > sizeof *s) memset((char *)out + sizeof *s, 0, size - sizeof *s);
}

/* maps and unmaps are the platform's, at the bottom of a's chain: the pools above it count none.
 * A strategy of the user's at the bottom is not asked again. */
static void platform_calls(rap_allocator *a, rap_stats *s) {
  rap_allocator *p = a;
  while (p->parent != NULL) p = p->parent;
  if (!p->counts_calls) return;
  rap_stats ps;
  memset(&ps, 0, sizeof ps);
  if (p->strategy->stats(p->state, &ps) != RAP_OK) return;
  s->maps = ps.maps;
  s->unmaps = ps.unmaps;
}

static int stats_size_ok(const char *fn, size_t size) {
  if (size >= sizeof(size_t)) return RAP_OK;
  return rapi_fail(RAP_ERR_INVALID, "%s: size %zu holds no field of rap_stats (sizeof(rap_stats) "
                   "is what to pass)", fn, size);
}

int rap_allocator_stats_sized(rap_allocator *a, rap_stats *out, size_t size) {
  if (a == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_allocator_stats: allocator or out is NULL");
  int st = stats_size_ok("rap_allocator_stats", size);
  if (st != RAP_OK) return st;
  rap_stats s;
  memset(&s, 0, sizeof s);
  st = a->strategy->stats(a->state, &s);
  if (st == RAP_OK) platform_calls(a, &s);
  if (st == RAP_OK) stats_out(out, size, &s);
  return st;
}

int (rap_allocator_stats)(rap_allocator *a, rap_stats *out) {
  return rap_allocator_stats_sized(a, out, STATS_FIRST_LAYOUT);
}

int rap_allocator_reset_peaks(rap_allocator *a) {
  if (a == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_allocator_reset_peaks: allocator is NULL");
  if (a->strategy->version < 3 || a->strategy->reset_peaks == NULL)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_allocator_reset_peaks('%s'): the %s strategy keeps "
                     "no high-water marks it can reset", a->name, a->strategy->name);
  return a->strategy->reset_peaks(a->state);
}

int rap_allocator_resource_stats_sized(rap_allocator *a, rap_resource *r, rap_stats *out,
                                       size_t size) {
  if (a == NULL || r == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID,
                     "rap_allocator_resource_stats: allocator, resource or out is NULL");
  int st = stats_size_ok("rap_allocator_resource_stats", size);
  if (st != RAP_OK) return st;
  if (r->rm != a->rm) return bad_call("rap_allocator_resource_stats", a, out, r);
  rap_stats s;
  memset(&s, 0, sizeof s);
  if (a->strategy->resource_stats != NULL) {
    st = a->strategy->resource_stats(a->state, r, &s);
  } else {
    /* Without resource tracking every block belongs to the host resource. */
    st = r == &a->rm->host ? a->strategy->stats(a->state, &s) : RAP_OK;
  }
  if (st == RAP_OK) platform_calls(a, &s);   /* the platform's, for every resource alike */
  if (st == RAP_OK) stats_out(out, size, &s);
  return st;
}

int (rap_allocator_resource_stats)(rap_allocator *a, rap_resource *r, rap_stats *out) {
  return rap_allocator_resource_stats_sized(a, r, out, STATS_FIRST_LAYOUT);
}

/* ---- sleep and wake: to the strategy's table; the flag on the chain is what destroy reads ----- */

/* The allocators from a down to the platform (not included: others may share it). */
static void mark_asleep(rap_allocator *a, int asleep) {
  for (; a != NULL && a->resizable == NULL; a = a->parent)
    __atomic_store_n(&a->asleep, asleep, __ATOMIC_RELEASE);
}

static int cannot_sleep(const char *fn, const rap_allocator *a) {
  if (a->resizable != NULL)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s('%s'): a platform does not sleep itself: put a "
                     "ResourceAwarePool over it and make that sleep", fn, a->name);
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s('%s'): the %s strategy cannot sleep (a "
                   "ResourceAwarePool over HOST_VMM or DEVICE_VMM can, alone or under ThreadSafe or "
                   "ThreadCache)",
                   fn, a->name, a->strategy->name);
}

/* The allocator the user asked to sleep, while its sleep runs on this thread: the holders between
 * it and an allocator under it settled what they hold first (a ThreadCache), and do not count. */
static _Thread_local const rap_allocator *sleep_top;

static size_t settled_over(const rap_allocator *a) {
  size_t n = 0;
  for (const rap_allocator *y = sleep_top; y != NULL; y = y->parent) {
    if (y == a) return n;
    n += !(y->strategy->flags & RAP_STRATEGY_PASS_THROUGH);
  }
  return 0;   /* not under it */
}

int rap_allocator_sleep(rap_allocator *a, int mode) {
  if (a == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_allocator_sleep: allocator is NULL");
  if (mode < RAP_SLEEP_BACKUP || mode > RAP_SLEEP_RELEASE)
    return rapi_fail(RAP_ERR_INVALID, "rap_allocator_sleep('%s'): mode %d is none of "
                     "RAP_SLEEP_BACKUP (0), RAP_SLEEP_DISCARD (1), RAP_SLEEP_PREPARE (2), "
                     "RAP_SLEEP_RELEASE (3)", a->name, mode);
  bool sleeps = mode == RAP_SLEEP_BACKUP || mode == RAP_SLEEP_DISCARD;   /* else no unmap */
  if (a->strategy->version < 4 || a->strategy->sleep == NULL)
    return cannot_sleep("rap_allocator_sleep", a);
  size_t holders = __atomic_load_n(&a->holders, __ATOMIC_RELAXED) - settled_over(a);
  if (holders > 0 && sleeps)
    return rapi_fail(RAP_ERR_BUSY, "rap_allocator_sleep('%s'): %zu allocator%s made over it hand%s "
                     "out its memory without asking it (a Planned, a pool, a ThreadCache asked past), "
                     "and would hand out unmapped memory while it sleeps; only ThreadSafe, SizeLimiter "
                     "and Fault pass every call through, and a ThreadCache settles its caches when "
                     "asked itself. Sleep the chain from its top, with nothing else over it", a->name,
                     holders, holders == 1 ? "" : "s", holders == 1 ? "s" : "");
  bool top = sleep_top == NULL;
  if (top) sleep_top = a;
  int st = a->strategy->sleep(a->state, mode);
  if (top) sleep_top = NULL;
  if (st == RAP_OK && sleeps) mark_asleep(a, 1);
  return RAPI_UNLIKELY(rapi_debug_level() > 0) ? debugged(a, "rap_allocator_sleep", st) : st;
}

int rap_allocator_wake(rap_allocator *a) {
  if (a == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_allocator_wake: allocator is NULL");
  if (a->strategy->version < 4 || a->strategy->wake == NULL)
    return cannot_sleep("rap_allocator_wake", a);
  int st = a->strategy->wake(a->state);
  if (st == RAP_OK) mark_asleep(a, 0);
  return RAPI_UNLIKELY(rapi_debug_level() > 0) ? debugged(a, "rap_allocator_wake", st) : st;
}

int rap_allocator_is_asleep(const rap_allocator *a) {
  return a != NULL && __atomic_load_n(&a->asleep, __ATOMIC_ACQUIRE) != 0;
}
