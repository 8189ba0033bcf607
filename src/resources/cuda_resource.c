/* cuda_resource.c — CUDA streams as resources, with pooled CUDA events; in a HIP build, spelled
 * through gpu_runtime.h, HIP streams with pooled HIP events (resource kind "hip").
 *
 * Events are created with timing off, on the stream's device, only when the resource's free list
 * is empty. A cuda resource waits for another cuda event on the device (cudaStreamWaitEvent); for
 * an event of a CPU queue it has no device-side wait, so the host waits instead. Work submitted
 * to it runs as a host function in stream order (cudaLaunchHostFunc). HIP alike, call for call,
 * but for that last one (hipStreamAddCallback: see cr_submit). At the end, CUDA only: the
 * interprocess event an importer of memory across processes records for its close.
 */
#include "rap_internal.h"
#include "resources/gpu_runtime.h"

#include <stdlib.h>
#include <string.h>

typedef struct gpu_res {
  rap_resource base;
  gpuStream_t stream;
  int device;
  bool owned;
} gpu_res;

static int gpu_error(const char *call, gpuError_t e) {
  (void)gpuGetLastError();
  return rapi_fail(RAP_ERR_BACKEND, "%s: %s", call, gpuGetErrorString(e));
}

/* Calls on a stream run with the stream's device current: an event must be created on, and
 * recorded to, a stream of its own device, and the special handles (the legacy and per-thread
 * default streams) mean the current device's stream. The calling thread's current device is its
 * own business: it is switched only when it differs, and put back after. */
static gpuError_t enter_device(const gpu_res *c, int *saved) {
  gpuError_t e = gpuGetDevice(saved);
  if (e == gpuSuccess && *saved != c->device) e = gpuSetDevice(c->device);
  return e;
}

static void leave_device(const gpu_res *c, int saved) {
  if (saved != c->device && saved >= 0) (void)gpuSetDevice(saved);
}

static int cr_synchronize(rap_resource *r) {
  gpu_res *c = (gpu_res *)r;
  int saved = -1;
  gpuError_t e = enter_device(c, &saved);
  if (e == gpuSuccess) e = gpuStreamSynchronize(c->stream);
  leave_device(c, saved);
  return e == gpuSuccess ? RAP_OK : gpu_error(GPU_PREFIX "StreamSynchronize", e);
}

#if RAP_HAVE_HIP
/* HIP 5.2 declares hipLaunchHostFunc, but its runtime does not export it and its NVIDIA header does
 * not map it: the function goes through hipStreamAddCallback, whose callback also takes the stream
 * and its status. A record carries fn and arg to the callback, which frees it and calls fn. */
typedef struct host_call {
  void (*fn)(void *);
  void *arg;
} host_call;

static void run_host_call(hipStream_t s, hipError_t status, void *p) {
  (void)s;
  (void)status;   /* fn runs either way, as a cudaLaunchHostFunc function would */
  host_call hc = *(host_call *)p;
  free(p);
  hc.fn(hc.arg);
}

static int cr_submit(rap_resource *r, void (*fn)(void *), void *arg) {
  host_call *hc = rapi_malloc(sizeof *hc);
  if (hc == NULL)
    return rapi_fail(RAP_ERR_NOMEM, "hip resource: out of host memory for a host function");
  hc->fn = fn;
  hc->arg = arg;
  int saved = -1;
  hipError_t e = enter_device((gpu_res *)r, &saved);
  if (e == hipSuccess) e = hipStreamAddCallback(((gpu_res *)r)->stream, run_host_call, hc, 0);
  leave_device((gpu_res *)r, saved);
  if (e == hipSuccess) return RAP_OK;
  free(hc);
  return gpu_error("hipStreamAddCallback", e);
}
#else
static int cr_submit(rap_resource *r, void (*fn)(void *), void *arg) {
  int saved = -1;
  cudaError_t e = enter_device((gpu_res *)r, &saved);
  if (e == cudaSuccess) e = cudaLaunchHostFunc(((gpu_res *)r)->stream, fn, arg);
  leave_device((gpu_res *)r, saved);
  return e == cudaSuccess ? RAP_OK : gpu_error("cudaLaunchHostFunc", e);
}
#endif

static int cr_record(rap_resource *r, rapi_event **out) {
  gpu_res *c = (gpu_res *)r;
  int saved = -1;
  gpuError_t e = enter_device(c, &saved);
  if (e != gpuSuccess) {
    leave_device(c, saved);
    return gpu_error(GPU_PREFIX "SetDevice", e);
  }
  rapi_event *ev = rapi_event_pool_get(r);
  if (ev == NULL) {
    ev = rapi_calloc(1, sizeof *ev);
    gpuEvent_t h = NULL;
    e = ev == NULL ? gpuSuccess : gpuEventCreateWithFlags(&h, gpuEventDisableTiming);
    if (ev == NULL || e != gpuSuccess) {
      leave_device(c, saved);
      free(ev);
      if (ev == NULL)
        return rapi_fail(RAP_ERR_NOMEM, GPU_KIND " resource: out of host memory for an event");
      return gpu_error(GPU_PREFIX "EventCreateWithFlags", e);
    }
    ev->r = r;
    ev->handle = h;
    __atomic_fetch_add(&r->events_created, 1, __ATOMIC_RELAXED);
  }
  e = gpuEventRecord((gpuEvent_t)ev->handle, c->stream);
  leave_device(c, saved);
  if (e != gpuSuccess) {
    rapi_event_pool_put(r, ev);
    return gpu_error(GPU_PREFIX "EventRecord", e);
  }
  *out = ev;
  return RAP_OK;
}

static int cr_query(rapi_event *ev) {
  gpuError_t e = gpuEventQuery((gpuEvent_t)ev->handle);
  if (e == gpuSuccess) return 1;
  if (e == gpuErrorNotReady) return 0;
  return gpu_error(GPU_PREFIX "EventQuery", e);
}

static int cr_event_synchronize(rapi_event *ev) {
  gpuError_t e = gpuEventSynchronize((gpuEvent_t)ev->handle);
  return e == gpuSuccess ? RAP_OK : gpu_error(GPU_PREFIX "EventSynchronize", e);
}

static void cr_event_release(rapi_event *ev) { rapi_event_pool_put(ev->r, ev); }

static int cr_wait(rap_resource *r, rapi_event *ev) {
  if (ev->r->ops != r->ops) return RAPI_HOST_WAIT;   /* no device-side wait for a CPU queue */
  if (ev->r->key == r->key) return RAP_OK;
  int saved = -1;
  gpuError_t e = enter_device((gpu_res *)r, &saved);
  if (e == gpuSuccess) e = gpuStreamWaitEvent(((gpu_res *)r)->stream, (gpuEvent_t)ev->handle, 0);
  leave_device((gpu_res *)r, saved);
  return e == gpuSuccess ? RAP_OK : gpu_error(GPU_PREFIX "StreamWaitEvent", e);
}

static void destroy_event_handle(void *h) { (void)gpuEventDestroy((gpuEvent_t)h); }

/* An owned stream goes at once (CUDA and HIP let its queued work finish); the events stay while
 * waits queued elsewhere may still look at them. */
static void cr_close(rap_resource *r) {
  gpu_res *c = (gpu_res *)r;
  if (c->owned) {
    gpuError_t e = gpuStreamDestroy(c->stream);
    if (e != gpuSuccess) {
      (void)gpuGetLastError();
      rap_log(RAP_LOG_WARN, GPU_KIND " resource: " GPU_PREFIX "StreamDestroy failed: %s",
              gpuGetErrorString(e));
    }
    c->owned = false;
  }
}

static void cr_destroy(rap_resource *r) {
  rapi_event_pool_fini(r, destroy_event_handle);
  free(r);
}

static const rapi_resource_ops gpu_ops = {
    .kind = GPU_KIND,
    .synchronize = cr_synchronize,
    .close = cr_close,
    .destroy = cr_destroy,
    .submit = cr_submit,
    .record = cr_record,
    .query = cr_query,
    .event_synchronize = cr_event_synchronize,
    .event_release = cr_event_release,
    .wait = cr_wait,
};

static int create(rap_manager *rm, gpuStream_t s, bool owned, rap_resource **out, const char *fn) {
  if (rm == NULL || out == NULL) return rapi_fail(RAP_ERR_INVALID, "%s: manager or out is NULL", fn);
  int count = 0;
  if (rapi_cuda_devices(fn, &count) != RAP_OK) return RAP_ERR_UNSUPPORTED;
  gpu_res *c = rapi_calloc(1, sizeof *c);
  if (c == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", fn);
  gpuError_t e = gpuGetDevice(&c->device);
  if (e == gpuSuccess && owned) e = gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking);
  if (e == gpuSuccess && s != NULL && s != gpuStreamPerThread && s != gpuStreamLegacy)
    e = gpu_stream_device(s, &c->device);
  if (e != gpuSuccess) {
    free(c);
    return gpu_error(fn, e);
  }
  c->stream = s;
  c->owned = owned;
  c->base.ops = &gpu_ops;
  c->base.rm = rm;
  c->base.devbit = rapi_device_bit(c->device);   /* device memory of another device refuses it */
  /* Stream identity: a real stream's handle; the special handles are per device. */
  uintptr_t h = (uintptr_t)s;
  c->base.key = h < 16 ? h + 1 + ((uintptr_t)c->device << 4) : h;
  rapi_event_pool_init(&c->base);
  rapi_resource_link(rm, &c->base);
  *out = &c->base;
  return RAP_OK;
}

int gpu_resource_create(rap_manager *rm, gpuStream_t s, rap_resource **out) {
  return create(rm, s, false, out, "rap_resource_create_" GPU_KIND);
}

int gpu_resource_create_stream(rap_manager *rm, rap_resource **out) {
  return create(rm, NULL, true, out, "rap_resource_create_" GPU_KIND "_stream");
}

gpuStream_t gpu_resource_stream(const rap_resource *r) {
  return r != NULL && r->ops == &gpu_ops ? ((const gpu_res *)r)->stream : NULL;
}

int gpu_resource_begin_capture(rap_resource *r, gpuStreamCaptureMode mode) {
  const char *fn = "rap_resource_" GPU_KIND "_begin_capture";
  if (r == NULL || r->ops != &gpu_ops)
    return rapi_fail(RAP_ERR_INVALID, "%s: the resource is not a " GPU_KIND " resource", fn);
  if (__atomic_load_n(&r->capturing, __ATOMIC_ACQUIRE))
    return rapi_fail(RAP_ERR_BUSY, "%s: " GPU_KIND " resource #%llu is capturing already", fn,
                     (unsigned long long)r->id);
  gpuError_t e = gpuStreamBeginCapture(((gpu_res *)r)->stream, mode);
  if (e != gpuSuccess) return gpu_error(fn, e);
  __atomic_store_n(&r->capturing, 1, __ATOMIC_RELEASE);
  return RAP_OK;
}

int gpu_resource_end_capture(rap_resource *r, gpuGraph_t *graph) {
  const char *fn = "rap_resource_" GPU_KIND "_end_capture";
  if (r == NULL || r->ops != &gpu_ops || graph == NULL)
    return rapi_fail(RAP_ERR_INVALID, "%s: the resource is not a " GPU_KIND " resource, or graph is "
                     "NULL", fn);
  if (!__atomic_load_n(&r->capturing, __ATOMIC_ACQUIRE))
    return rapi_fail(RAP_ERR_INVALID, "%s: " GPU_KIND " resource #%llu is not capturing through rap",
                     fn, (unsigned long long)r->id);
  gpuError_t e = gpuStreamEndCapture(((gpu_res *)r)->stream, graph);
  if (e != gpuSuccess) {
    int st = gpu_error(fn, e);
    /* Ended with an error (invalidated), or still running (called from another thread in a
     * capture mode that forbids it): the flag follows what the stream says. */
    gpuStreamCaptureStatus cs = gpuStreamCaptureStatusNone;
    if (gpuStreamIsCapturing(((gpu_res *)r)->stream, &cs) != gpuSuccess) (void)gpuGetLastError();
    if (cs == gpuStreamCaptureStatusNone) __atomic_store_n(&r->capturing, 0, __ATOMIC_RELEASE);
    return st;
  }
  __atomic_store_n(&r->capturing, 0, __ATOMIC_RELEASE);
  return RAP_OK;
}

/* ---- memory across processes: an importer's close on a CUDA stream (platforms/ipc_import.c) ---
 * CUDA only (no_cuda.c answers for a HIP build): the exporter learns of the close from an
 * interprocess event (gpu_device.c opens and queries it there). */
#if RAP_HAVE_CUDA && !RAP_HAVE_HIP
static int ipc_fail(const char *call, cudaError_t e) {
  (void)cudaGetLastError();
  return rapi_fail(e == cudaErrorMemoryAllocation ? RAP_ERR_NOMEM : RAP_ERR_BACKEND, "rap_ipc: %s: %s",
                   call, cudaGetErrorString(e));
}

/* An interprocess event (made once, recorded again for later closes) recorded on r's stream,
 * with its stream's device current (put back after). */
int rapi_gpu_ipc_event_record(rap_resource *r, unsigned char handle[64], void **event) {
  cudaStream_t s = rap_resource_cuda_stream(r);
  int dev = 0, saved = 0;
  cudaError_t e = cudaStreamGetDevice(s, &dev);
  if (e != cudaSuccess) return ipc_fail("cudaStreamGetDevice", e);
  if ((e = cudaGetDevice(&saved)) == cudaSuccess) e = cudaSetDevice(dev);
  if (e != cudaSuccess) return ipc_fail("cudaSetDevice", e);
  if (*event == NULL) {
    cudaEvent_t ev;
    cudaIpcEventHandle_t h;
    e = cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming);
    if (e == cudaSuccess && (e = cudaIpcGetEventHandle(&h, ev)) != cudaSuccess) (void)cudaEventDestroy(ev);
    if (e == cudaSuccess) {
      memcpy(handle, &h, 64);
      *event = ev;
    }
  }
  if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)*event, s);
  (void)cudaSetDevice(saved);
  return e == cudaSuccess ? RAP_OK : ipc_fail("an interprocess event for rap_ipc_close", e);
}
#endif
