/* test_handoff.c — cross_resource=wait with wait_pending_above: the record_stream hand-off stays
 * bounded (the asker waits, queued, once what it cannot take passes the bound), and streams that
 * take memory other streams still use (FSDP's all-gather and reduce-scatter streams, NCCL's) are
 * not made to wait below it: the pool grows for them instead. host_async queues held by gates the
 * test opens; no sleeps.
 */
#include "gate.h"
#include "rap_test.h"

#include <rap/rap.h>
#include <string.h>

#define KiB ((size_t)1024)
#define BLOCK (64 * KiB)
/* Every request misses the pool's free memory once its first chunk is used: each step is a miss. */
#define GROW "initial_size=64KiB next_size=64KiB heuristic=never alignment=16"  /* HOST: no padding */
#define POOL GROW " cross_resource=wait wait_above=0"

static rap_stats stats_of(rap_allocator *a) {
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(a, &s));
  return s;
}

/* steps hand-offs: a block allocated on main, used on side (record_resource), freed on main while
 * side is held by a closed gate, so none of them passes until the end. Returns the pool's peak. */
static size_t hand_off(const char *options, int steps, rap_stats *end) {
  rap_manager *rm;
  rap_allocator *pool;
  rap_resource *main_r, *side;
  gate g;
  gate_init(&g);
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK_OK(rap_allocator_make(rm, "pool", "ResourceAwarePool", "HOST", options, &pool));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &main_r));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &side));
  RAP_CHECK_OK(rap_resource_submit(side, gate_job, &g));
  fill fills[64];
  for (int i = 0; i < steps && i < 64; i++) {
    void *p;
    RAP_CHECK_OK(rap_allocate(pool, &p, BLOCK, main_r));
    fills[i] = (fill){p, BLOCK, i};
    RAP_CHECK_OK(rap_resource_submit(main_r, fill_job, &fills[i]));
    RAP_CHECK_OK(rap_record_resource(pool, p, side));
    RAP_CHECK_OK(rap_deallocate(pool, p, main_r));
  }
  *end = stats_of(pool);
  RAP_CHECK_EQ(gate_passed(&g), 0);   /* side is still held: nothing above waited on the host */
  gate_open(&g);
  RAP_CHECK_OK(rap_resource_synchronize(main_r));
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_manager_destroy(rm));
  gate_destroy(&g);
  return end->actual_high_watermark;
}

/* PyTorch's record_stream hand-off with the CPU ahead of the side stream: grow keeps every step's
 * block; wait with wait_pending_above keeps at most the bound, one block waited for and the one in
 * use, and its waits are queued on main (the host never blocks: the side's gate is closed until
 * after the loop). */
RAP_TEST(Handoff, WaitPendingAboveBoundsTheRecordStreamHandOff) {
  rap_stats s;
  size_t grown = hand_off(GROW, 32, &s);
  RAP_CHECK_EQ(grown, 32 * BLOCK);
  RAP_CHECK_EQ(s.waits, 0);
  size_t held = hand_off(POOL " wait_pending_above=256KiB", 32, &s);
  RAP_CHECK(held <= 256 * KiB + 2 * BLOCK);
  RAP_CHECK(held >= 256 * KiB);   /* it grew up to the bound before it waited */
  RAP_CHECK(s.waits > 0);
  RAP_CHECK_EQ(s.host_waits, 0);
  /* The default (0): the pool waits at once, as before wait_pending_above existed. */
  held = hand_off(POOL, 32, &s);
  RAP_CHECK(held <= 2 * BLOCK);
  RAP_CHECK_EQ(s.host_waits, 0);
}

/* FSDP's pattern: a collective's stream (comm) frees buffers that its queued work, still running,
 * uses; the compute stream then misses. Below the bound compute grows and runs on: it is not queued
 * behind comm's work (a job on compute finishes while comm is still held). Past the bound it waits
 * for comm's oldest block, so memory stays bounded. */
RAP_TEST(Handoff, StreamsAreNotMadeToWaitBelowTheBound) {
  rap_manager *rm;
  rap_allocator *pool;
  rap_resource *compute, *comm;
  gate g, mine;
  gate_init(&g);
  gate_init(&mine);
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK_OK(rap_allocator_make(rm, "pool", "ResourceAwarePool", "HOST",
                                  POOL " wait_pending_above=192KiB", &pool));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &compute));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &comm));
  RAP_CHECK_OK(rap_resource_submit(comm, gate_job, &g));   /* comm's collective runs on and on */
  void *bufs[4], *x, *y;
  for (int i = 0; i < 4; i++) RAP_CHECK_OK(rap_allocate(pool, &bufs[i], BLOCK, comm));
  for (int i = 0; i < 3; i++) RAP_CHECK_OK(rap_deallocate(pool, bufs[i], comm));
  RAP_CHECK_EQ(stats_of(pool).pending_bytes, 3 * BLOCK);   /* pending on comm, still used there */
  /* 192 KiB pending elsewhere is not above the bound: compute grows and is not made to wait. */
  RAP_CHECK_OK(rap_allocate(pool, &x, BLOCK, compute));
  rap_stats s = stats_of(pool);
  RAP_CHECK_EQ(s.waits, 0);
  RAP_CHECK_EQ(s.actual_bytes, 5 * BLOCK);
  RAP_CHECK_OK(rap_resource_submit(compute, gate_job, &mine));
  gate_open(&mine);
  RAP_CHECK_OK(rap_resource_synchronize(compute));   /* returns with comm still held */
  RAP_CHECK_EQ(gate_passed(&g), 0);
  /* One more buffer of comm's pending: above the bound now, compute waits (queued) for comm's
   * first, and the pool does not grow. */
  RAP_CHECK_OK(rap_deallocate(pool, bufs[3], comm));
  size_t before = stats_of(pool).actual_bytes;
  RAP_CHECK_OK(rap_allocate(pool, &y, BLOCK, compute));
  s = stats_of(pool);
  RAP_CHECK_EQ(s.waits, 1);
  RAP_CHECK_EQ(s.host_waits, 0);
  RAP_CHECK_EQ(s.actual_bytes, before);
  RAP_CHECK_EQ(gate_passed(&g), 0);   /* the wait is compute's, queued: the host went on */
  gate_open(&g);
  RAP_CHECK_OK(rap_resource_synchronize(compute));
  RAP_CHECK_OK(rap_deallocate(pool, x, compute));
  RAP_CHECK_OK(rap_deallocate(pool, y, compute));
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_manager_destroy(rm));
  gate_destroy(&g);
  gate_destroy(&mine);
}

RAP_TEST(Handoff, WaitPendingAboveIsASize) {
  rap_manager *rm;
  rap_allocator *pool;
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK_STATUS(rap_allocator_make(rm, "x", "ResourceAwarePool", "HOST",
                                      "cross_resource=wait wait_pending_above=lots", &pool),
                   RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "wait_pending_above");
  RAP_CHECK_OK(rap_spec_check("ResourceAwarePool(HOST, cross_resource=wait, wait_pending_above=1GiB)"));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
