/* dynamic_pool_list.c — DynamicPoolList: the list-based pool of Umpire's family.
 *
 * The same chunks, blocks, options, heuristics, statistics and bad-input behaviour as QuickPool
 * (it is the same block_pool.c underneath), but free blocks live in one address-ordered list
 * searched for best fit. Its operations cost O(free blocks), by design: it trades speed for the
 * smallest index and the tightest packing when there are few, large blocks. QuickPool's table
 * serves as its own: only the index differs, chosen at init.
 */
#include "pool/pool.h"

static int dpl_init(rap_allocator *self, void *state, rap_options *opts) {
  return rapi_bp_init(state, self, opts, true, sizeof(rapi_block));
}

const rap_strategy rapi_dynamic_pool_list_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "DynamicPoolList",
    .flags = RAP_STRATEGY_NEEDS_PARENT | RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(rapi_bp),
    .init = dpl_init,
    .fini = rapi_quick_pool_fini,
    .allocate = rapi_quick_pool_allocate,
    .deallocate = rapi_quick_pool_deallocate,
    .stats = rapi_quick_pool_stats,
    .reset_peaks = rapi_quick_pool_reset_peaks,
    .owns = rapi_quick_pool_owns,
    .release = rapi_quick_pool_release,
    .check = rapi_quick_pool_check,
};
