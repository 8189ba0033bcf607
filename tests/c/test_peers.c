/* test_peers.c — device memory refuses the streams of devices not given access to it: the check
 * every call with a resource makes, without a GPU. A CPU queue stands in for a stream of device 1
 * and the HOST platform for memory of device 0 (the fields a GPU platform and a GPU resource set);
 * the real thing, with kernels on two devices, is tests/cuda/test_cuda_peers.c. */
#include "rap_internal.h"
#include "test_util.h"

#include <string.h>

RAP_TEST(Peers, StreamOfAnotherDeviceIsRefused) {
  rap_manager *rm = tu_manager();
  rap_allocator *host;
  RAP_CHECK_OK(rap_allocator_get(rm, "HOST", &host));
  host->devices_ok = rapi_device_bit(0);   /* as DEVICE::0 sets it */
  rap_allocator *pool, *ts;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "ResourceAwarePool(HOST, initial_size=1MiB)", &pool));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "ts", "ThreadSafe(pool)", &ts));
  RAP_CHECK_EQ(pool->devices_ok, rapi_device_bit(0));   /* inherited from the platform */
  RAP_CHECK_EQ(ts->devices_ok, rapi_device_bit(0));
  rap_resource *q, *d0;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &d0));
  q->devbit = rapi_device_bit(1);    /* as a stream of device 1 */
  d0->devbit = rapi_device_bit(0);   /* and one of device 0 */
  void *p = NULL, *mine;
  RAP_CHECK_STATUS(rap_allocate(pool, &p, 64, q), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "is a stream of device 1, which has no access to this memory");
  RAP_CHECK(p == NULL);
  RAP_CHECK_STATUS(rap_allocate(ts, &p, 64, q), RAP_ERR_INVALID);
  RAP_CHECK_OK(rap_allocate(ts, &mine, 64, d0));
  RAP_CHECK_OK(rap_allocate(pool, &p, 64, NULL));   /* the host is every device's */
  RAP_CHECK_STATUS(rap_deallocate(pool, p, q), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_record_resource(pool, p, q), RAP_ERR_INVALID);
  RAP_CHECK_OK(rap_allocator_check(pool));   /* nothing changed */
  /* Host memory cannot be shared through peer access: the call says so and changes nothing. */
  RAP_CHECK_STATUS(rap_allocator_set_peer_access(pool, 1, 1), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "host memory");
  RAP_CHECK_EQ(pool->devices_ok, rapi_device_bit(0));
  pool->devices_ok |= rapi_device_bit(1);   /* as the call sets it for device memory */
  RAP_CHECK_OK(rap_record_resource(pool, p, q));
  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));   /* the host's block, also used on q */
  RAP_CHECK_OK(rap_allocate(pool, &p, 64, q));
  RAP_CHECK_OK(rap_deallocate(pool, p, q));
  RAP_CHECK_OK(rap_deallocate(ts, mine, d0));
  RAP_CHECK_OK(rap_resource_synchronize(q));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Host memory serves every device's streams; a device past 63 has no bit and is never refused. */
RAP_TEST(Peers, HostMemoryServesEveryDevice) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "QuickPool(HOST)", &pool));
  RAP_CHECK_EQ(pool->devices_ok, ~(uint64_t)0);
  RAP_CHECK_EQ(rapi_device_bit(64), 0);
  RAP_CHECK_EQ(rapi_device_bit(-1), 0);
  rap_resource *q;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  q->devbit = rapi_device_bit(63);
  void *p;
  RAP_CHECK_OK(rap_allocate(pool, &p, 64, q));
  RAP_CHECK_OK(rap_deallocate(pool, p, q));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
