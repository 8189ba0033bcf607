/* rap_testing.h — calls for rap's own tests: not installed, and not part of the API (rap.h).
 *
 * The Fault strategy (strategies/fault.c) is registered like any strategy and takes its options at
 * make time from a spec; these calls change them on a live one, which only tests need. They stay
 * exported from the shared library so that a test may link either library.
 */
#ifndef RAP_TESTING_H
#define RAP_TESTING_H

#include <rap/rap.h>

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
 * host_async queue to reach a point that one has not reached (a queued wait). */
typedef struct rap_host_async_view {
  size_t unfinished;
  bool host_blocked, worker_blocked;
} rap_host_async_view;
int  rap_host_async_view_of(rap_resource *r, rap_host_async_view *out);

/* The thread guard's membarrier registration, without making it: 1 registered, -1 the kernel has
 * none, 0 not asked yet (rap_manager_create asks). */
int  rap_guard_membarrier_state(void);

RAP_API_END
#ifdef __cplusplus
}
#endif
#endif /* RAP_TESTING_H */
