/* rap_testing.h — calls for rap's own tests: not installed, and not part of the API (rap.h).
 *
 * The Fault strategy (strategies/fault.c) is registered like any strategy and takes its options at
 * make time from a spec; these calls change them on a live one, which only tests need. They stay
 * exported from the shared library so that a test may link either library.
 */
#ifndef RAP_TESTING_H
#define RAP_TESTING_H

#include <rap/rap.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
RAP_API_BEGIN

/* The Fault strategy passes requests to its parent and fails them on demand with
 * RAP_ERR_NOMEM. Options (also at make time): fail_next=N fails the next N requests,
 * fail_after=N lets N more requests through and then fails every one, fail_at=N fails only the
 * N-th request from now, budget=SIZE fails any request that would take the live bytes above SIZE;
 * "reset" clears them all. */
int  rap_fault_configure(rap_allocator *fault, const char *options);
int  rap_fault_requests(rap_allocator *fault, size_t *out);   /* allocation requests seen so far */

/* A host_async queue as a test that holds queues with gates sees it, at one moment: unfinished
 * counts the jobs submitted and not yet run to their end; host_blocked says a thread outside every
 * queue waits for this queue to reach a point it has not reached (a pool waiting on the host for
 * an event, rap_resource_synchronize); worker_blocked says this queue's worker waits for another
 * host_async queue to reach a point that one has not reached (a queued wait). A point of a queue
 * is a count of its jobs: submitted counts those submitted so far, completed those run to their
 * end, and an event recorded when submitted was N completes once completed reaches N. */
typedef struct rap_host_async_view {
  size_t unfinished;
  bool host_blocked, worker_blocked;
  uint64_t submitted, completed;
  size_t after_end;   /* calls that used the queue after rap_host_async_end */
} rap_host_async_view;
int  rap_host_async_view_of(rap_resource *r, rap_host_async_view *out);

/* Ends queue r as a caller ends a CUDA stream that a call-scoped resource wraps, the resource
 * living on: work queued so far still runs and its events still answer (as CUDA events outlive
 * their stream), but every later use of the queue itself (submit, record, synchronize, a wait
 * queued on it) fails with RAP_ERR_BACKEND and counts in the view's after_end. */
int  rap_host_async_end(rap_resource *r);

/* The thread guard's membarrier registration, without making it: 1 registered, -1 the kernel has
 * none, 0 not asked yet (rap_manager_create asks). */
int  rap_guard_membarrier_state(void);

/* Hooks for a test that runs every queue only when it says so (the model-based fuzzer,
 * tests/fuzz): host_wait is called in place of each wait of a thread outside every queue for
 * queue r to reach point `point` (a pool's wait for an event, rap_resource_synchronize), with no
 * lock held, and again until r has reached it, so it may let r run and then wait itself (with
 * rap_host_async_wait_until); wait_queued is called when queue r queues a wait for an event of
 * another resource, target, recorded at its point `point` (a host_async target's event completes
 * once target reaches it). Either may be NULL. Set them while no host_async queue exists; NULL
 * hooks restore the library's own waits. */
typedef struct rap_host_async_hooks {
  void (*host_wait)(void *ctx, rap_resource *r, uint64_t point);
  void (*wait_queued)(void *ctx, rap_resource *r, rap_resource *target, uint64_t point);
  void *ctx;
} rap_host_async_hooks;
int  rap_host_async_set_hooks(const rap_host_async_hooks *hooks);

/* Waits until queue r reaches `point` or `seconds` have passed, whichever comes first, and says
 * which in *reached; the host_wait hook is not called. */
int  rap_host_async_wait_until(rap_resource *r, uint64_t point, unsigned seconds, bool *reached);

RAP_API_END
#ifdef __cplusplus
}
#endif
#endif /* RAP_TESTING_H */
