/* gpu_device.c — the GPU devices themselves, for the resources and platforms that need them: how
 * many there are (or why none is usable), whether device N is there, its memory, and whether one
 * device can reach another's; for memory across processes, a device's PCI bus id and interprocess
 * events (CUDA only). One source spelled for CUDA or HIP (gpu_runtime.h), compiled in a build with
 * a GPU backend; no_cuda.c stands in where there is none.
 */
#include "rap_internal.h"
#include "resources/gpu_runtime.h"

#include <string.h>
#include <unistd.h>

bool rapi_cuda_compiled(void) { return true; }

/* How many devices there are, or RAP_ERR_UNSUPPORTED with a sentence that says why none is usable:
 * no driver at all (the runtime then reports an "insufficient driver", which reads as too old), a
 * driver older than the runtime rap was built with, or no device. On AMD the driver is the amdgpu
 * kernel module, which ROCm reaches through /dev/kfd. */
int rapi_cuda_devices(const char *who, int *count) {
  *count = 0;
  gpuError_t e = gpuGetDeviceCount(count);
  if (e == gpuSuccess && *count > 0) return RAP_OK;
  (void)gpuGetLastError();
#if RAP_GPU_AMD
  if (access("/dev/kfd", F_OK) != 0)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: no HIP device is usable here: no AMD GPU driver is "
                     "loaded (/dev/kfd does not exist)", who);
  if (access("/dev/kfd", R_OK | W_OK) != 0)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: no HIP device is usable here: /dev/kfd is not open "
                     "to this user (the render or video group)", who);
#else
  int driver = 0;
  (void)gpuDriverGetVersion(&driver);
  (void)gpuGetLastError();
  if (driver == 0)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: no " GPU_NAME " device is usable here: no CUDA "
                     "driver is installed (libcuda was not found)", who);
  if (e == gpuErrorInsufficientDriver)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: no " GPU_NAME " device is usable here: the driver "
                     "supports CUDA %d.%d, older than the CUDA %d.%d rap was built with; update the "
                     "driver", who, driver / 1000, driver % 1000 / 10, CUDART_VERSION / 1000,
                     CUDART_VERSION % 1000 / 10);
#endif
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: no " GPU_NAME " device is usable here (%s)", who,
                   e != gpuSuccess ? gpuGetErrorString(e) : "the driver found no device");
}

/* RAP_OK if device N is usable; else why not (no driver or device: UNSUPPORTED; past the count:
 * NOT_FOUND). */
int rapi_gpu_device_exists(rap_allocator *self, uint64_t device) {
  int count = 0;
  if (rapi_cuda_devices(rap_allocator_name(self), &count) != RAP_OK) return RAP_ERR_UNSUPPORTED;
  if (device >= (uint64_t)count)
    return rapi_fail(RAP_ERR_NOT_FOUND, "%s: device %llu does not exist; this machine has %d",
                     rap_allocator_name(self), (unsigned long long)device, count);
  return RAP_OK;
}

/* Device's free and total memory (cudaMemGetInfo there), the caller's current device kept. */
int rapi_gpu_device_memory(const char *who, int device, size_t *free_bytes, size_t *total_bytes) {
  int saved = device;
  gpuError_t e = gpuGetDevice(&saved);
  if (e == gpuSuccess && saved != device) e = gpuSetDevice(device);
  size_t f = 0, t = 0;
  if (e == gpuSuccess) e = gpuMemGetInfo(&f, &t);
  if (saved != device) (void)gpuSetDevice(saved);
  if (e != gpuSuccess) {
    (void)gpuGetLastError();
    return rapi_fail(RAP_ERR_BACKEND, "%s: " GPU_PREFIX "MemGetInfo on device %d: %s", who, device,
                     gpuGetErrorString(e));
  }
  *free_bytes = f;
  *total_bytes = t;
  return RAP_OK;
}

/* RAP_OK if device's streams can be given access to own's memory (a peer path between the two);
 * UNSUPPORTED with a sentence where there is none, and in a HIP build, which shares no memory
 * between devices in this release. */
int rapi_gpu_can_access_peer(const char *who, int device, int own) {
#if RAP_HAVE_HIP
  (void)device;
  (void)own;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_allocator_set_peer_access('%s'): access between devices "
                   "is CUDA only in this release", who);
#else
  int can = 0;
  cudaError_t e = cudaDeviceCanAccessPeer(&can, device, own);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return rapi_fail(RAP_ERR_BACKEND, "%s: cudaDeviceCanAccessPeer(%d, %d): %s", who, device, own,
                     cudaGetErrorString(e));
  }
  if (!can)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: device %d cannot reach device %d's memory: the two "
                     "have no peer path (cudaDeviceCanAccessPeer)", who, device, own);
  return RAP_OK;
#endif
}

/* ---- memory across processes: the device's side (platforms/ipc.c, ipc_import.c) ---------------
 * The PCI bus id, which names a device in every process, and interprocess events: an importer
 * records one on a CUDA resource (cuda_resource.c) and hands its handle (64 bytes) over, the
 * exporter opens it once and queries it. CUDA only: a HIP build has no device memory across
 * processes, and no_cuda.c answers for it. A failure is a sentence that starts with rap_ipc. */
#if RAP_HAVE_CUDA && !RAP_HAVE_HIP
static int ipc_fail(const char *call, cudaError_t e) {
  (void)cudaGetLastError();
  return rapi_fail(e == cudaErrorMemoryAllocation ? RAP_ERR_NOMEM : RAP_ERR_BACKEND, "rap_ipc: %s: %s",
                   call, cudaGetErrorString(e));
}

int rapi_gpu_device_by_bus_id(const char *bus_id, int *device) {
  cudaError_t e = cudaDeviceGetByPCIBusId(device, bus_id);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_import: the exporter's GPU (PCI bus %s) is not "
                     "visible to this process (CUDA_VISIBLE_DEVICES?): %s", bus_id,
                     cudaGetErrorString(e));
  }
  return RAP_OK;
}

int rapi_gpu_bus_id(int device, char *bus_id, size_t cap) {
  cudaError_t e = cudaDeviceGetPCIBusId(bus_id, (int)cap, device);
  return e == cudaSuccess ? RAP_OK : ipc_fail("cudaDeviceGetPCIBusId", e);
}

int rapi_gpu_ipc_event_synchronize(void *event) {
  cudaError_t e = cudaEventSynchronize((cudaEvent_t)event);
  return e == cudaSuccess ? RAP_OK : ipc_fail("cudaEventSynchronize", e);
}

void rapi_gpu_ipc_event_destroy(void *event) {
  if (event != NULL && cudaEventDestroy((cudaEvent_t)event) != cudaSuccess) (void)cudaGetLastError();
}

int rapi_gpu_ipc_event_query(const unsigned char handle[64], void **opened) {
  cudaError_t e = cudaSuccess;
  if (*opened == NULL) {
    cudaIpcEventHandle_t h;
    cudaEvent_t ev;
    memcpy(&h, handle, 64);
    if ((e = cudaIpcOpenEventHandle(&ev, h)) != cudaSuccess) return ipc_fail("cudaIpcOpenEventHandle", e);
    *opened = ev;
  }
  e = cudaEventQuery((cudaEvent_t)*opened);
  if (e == cudaSuccess) return 1;
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return 0;
  }
  return ipc_fail("cudaEventQuery (an importer's event)", e);
}

void rapi_gpu_ipc_event_close(void *opened) { rapi_gpu_ipc_event_destroy(opened); }
#endif
