/* no_cuda.c — stands in for the GPU backends a build lacks; compiled into every build.
 *
 * Without CUDA, rap/cuda.h's functions say why they are missing; without HIP, rap/hip.h's do, so
 * a program written against either header links with any rap (they are exported like the API).
 * In a build with neither, the questions about devices (gpu_device.c's) answer that there are
 * none, and those of memory across processes (CUDA's only) refuse in a HIP build too; the
 * platforms' side (DEVICE, PINNED and UM still resolve, and say why they are missing) is
 * platforms/no_gpu_platform.c.
 */
#include "rap_internal.h"

#if !RAP_HAVE_CUDA && !RAP_HAVE_HIP
/* gpu_device.c's questions, answered for a build without a device (no_gpu_platform.c has the
 * platforms' side). */
bool rapi_cuda_compiled(void) { return false; }

static int no_gpu(const char *who) {
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: rap was built without CUDA (RAP_WITH_CUDA=OFF or no "
                   "toolkit found)", who);
}

int rapi_cuda_devices(const char *who, int *count) {
  *count = 0;
  return no_gpu(who);
}

int rapi_gpu_device_exists(rap_allocator *self, uint64_t device) {
  (void)device;
  return no_gpu(rap_allocator_name(self));
}

int rapi_gpu_device_memory(const char *who, int device, size_t *free_bytes, size_t *total_bytes) {
  (void)device;
  (void)free_bytes;
  (void)total_bytes;
  return no_gpu(who);
}

int rapi_gpu_can_access_peer(const char *who, int device, int own) {
  (void)device;
  (void)own;
  return no_gpu(who);
}
#endif

#if !RAP_HAVE_CUDA || RAP_HAVE_HIP
/* gpu_device.c's side of memory across processes, which only a CUDA build has: a HIP build or one
 * without a device refuses device memory across processes, and host memory needs none of it. */
static int no_device_ipc(void) {
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc: device memory across processes needs a CUDA "
                   "build (DeviceVmm); HostVmm(export=posix) is the host's");
}
int rapi_gpu_device_by_bus_id(const char *bus_id, int *device) {
  (void)bus_id, (void)device;
  return no_device_ipc();
}
int rapi_gpu_bus_id(int device, char *bus_id, size_t cap) {
  (void)device, (void)bus_id, (void)cap;
  return no_device_ipc();
}
int rapi_gpu_ipc_event_record(rap_resource *r, unsigned char handle[64], void **event) {
  (void)r, (void)handle, (void)event;
  return no_device_ipc();
}
int rapi_gpu_ipc_event_synchronize(void *event) {
  (void)event;
  return RAP_OK;
}
void rapi_gpu_ipc_event_destroy(void *event) { (void)event; }
int rapi_gpu_ipc_event_query(const unsigned char handle[64], void **opened) {
  (void)handle, (void)opened;
  return no_device_ipc();
}
void rapi_gpu_ipc_event_close(void *opened) { (void)opened; }
#endif

#if !RAP_HAVE_CUDA
/* rap/cuda.h's functions, for programs that include it against a build without CUDA. */
RAP_API_BEGIN
struct CUstream_st;
int rap_resource_create_cuda(rap_manager *rm, struct CUstream_st *s, rap_resource **out);
int rap_resource_create_cuda_stream(rap_manager *rm, rap_resource **out);
struct CUstream_st *rap_resource_cuda_stream(const rap_resource *r);

int rap_resource_create_cuda(rap_manager *rm, struct CUstream_st *s, rap_resource **out) {
  (void)rm;
  (void)s;
  (void)out;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_create_cuda: rap was built without CUDA");
}

int rap_resource_create_cuda_stream(rap_manager *rm, rap_resource **out) {
  (void)rm;
  (void)out;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_create_cuda_stream: rap was built without CUDA");
}

struct CUstream_st *rap_resource_cuda_stream(const rap_resource *r) {
  (void)r;
  return NULL;
}

struct CUgraph_st;
int rap_resource_cuda_begin_capture(rap_resource *r, int mode);   /* an enum in rap/cuda.h */
int rap_resource_cuda_end_capture(rap_resource *r, struct CUgraph_st **graph);

int rap_resource_cuda_begin_capture(rap_resource *r, int mode) {
  (void)r;
  (void)mode;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_cuda_begin_capture: rap was built without CUDA");
}

int rap_resource_cuda_end_capture(rap_resource *r, struct CUgraph_st **graph) {
  (void)r;
  (void)graph;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_cuda_end_capture: rap was built without CUDA");
}
RAP_API_END
#endif

#if !RAP_HAVE_HIP
/* rap/hip.h's functions, for programs that include it against a build without HIP
 * (RAP_WITH_HIP=ON builds it). hipStream_t is a pointer on both of HIP's platforms. */
RAP_API_BEGIN
struct ihipStream_t;
int rap_resource_create_hip(rap_manager *rm, struct ihipStream_t *s, rap_resource **out);
int rap_resource_create_hip_stream(rap_manager *rm, rap_resource **out);
struct ihipStream_t *rap_resource_hip_stream(const rap_resource *r);

int rap_resource_create_hip(rap_manager *rm, struct ihipStream_t *s, rap_resource **out) {
  (void)rm;
  (void)s;
  (void)out;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_create_hip: rap was built without HIP "
                   "(RAP_WITH_HIP=ON builds it)");
}

int rap_resource_create_hip_stream(rap_manager *rm, rap_resource **out) {
  (void)rm;
  (void)out;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_create_hip_stream: rap was built without HIP "
                   "(RAP_WITH_HIP=ON builds it)");
}

struct ihipStream_t *rap_resource_hip_stream(const rap_resource *r) {
  (void)r;
  return NULL;
}

struct ihipGraph;
int rap_resource_hip_begin_capture(rap_resource *r, int mode);   /* an enum in rap/hip.h */
int rap_resource_hip_end_capture(rap_resource *r, struct ihipGraph **graph);

int rap_resource_hip_begin_capture(rap_resource *r, int mode) {
  (void)r;
  (void)mode;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_hip_begin_capture: rap was built without HIP "
                   "(RAP_WITH_HIP=ON builds it)");
}

int rap_resource_hip_end_capture(rap_resource *r, struct ihipGraph **graph) {
  (void)r;
  (void)graph;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_resource_hip_end_capture: rap was built without HIP "
                   "(RAP_WITH_HIP=ON builds it)");
}
RAP_API_END
#endif
