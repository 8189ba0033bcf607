/* cuda_resource.c — CUDA streams as resources, with pooled CUDA events.
 *
 * Events are created with timing off, on the stream's device, only when the resource's free list
 * is empty. A cuda resource waits for another cuda event on the device (cudaStreamWaitEvent); for
 * an event of a CPU queue it has no device-side wait, so the host waits instead. Work submitted
 * to it runs as a host function in stream order (cudaLaunchHostFunc).
 */
#include "rap_internal.h"

#include <rap/cuda.h>
#include <stdlib.h>

typedef struct cuda_res {
  rap_resource base;
  cudaStream_t stream;
  int device;
  bool owned;
} cuda_res;

static int cuda_error(const char *call, cudaError_t e) {
  (void)cudaGetLastError();
  return rapi_fail(RAP_ERR_BACKEND, "%s: %s", call, cudaGetErrorString(e));
}

static int cr_synchronize(rap_resource *r) {
  cudaError_t e = cudaStreamSynchronize(((cuda_res *)r)->stream);
  return e == cudaSuccess ? RAP_OK : cuda_error("cudaStreamSynchronize", e);
}

static int cr_submit(rap_resource *r, void (*fn)(void *), void *arg) {
  cudaError_t e = cudaLaunchHostFunc(((cuda_res *)r)->stream, fn, arg);
  return e == cudaSuccess ? RAP_OK : cuda_error("cudaLaunchHostFunc", e);
}

static int cr_record(rap_resource *r, rapi_event **out) {
  cuda_res *c = (cuda_res *)r;
  rapi_event *ev = rapi_event_pool_get(r);
  if (ev == NULL) {
    ev = rapi_calloc(1, sizeof *ev);
    if (ev == NULL) return rapi_fail(RAP_ERR_NOMEM, "cuda resource: out of host memory for an event");
    int saved = c->device;
    cudaError_t e = cudaGetDevice(&saved);
    if (e == cudaSuccess && saved != c->device) e = cudaSetDevice(c->device);
    cudaEvent_t h = NULL;
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&h, cudaEventDisableTiming);
    if (saved != c->device) (void)cudaSetDevice(saved);
    if (e != cudaSuccess) {
      free(ev);
      return cuda_error("cudaEventCreateWithFlags", e);
    }
    ev->r = r;
    ev->handle = h;
    __atomic_fetch_add(&r->events_created, 1, __ATOMIC_RELAXED);
  }
  cudaError_t e = cudaEventRecord((cudaEvent_t)ev->handle, c->stream);
  if (e != cudaSuccess) {
    rapi_event_pool_put(r, ev);
    return cuda_error("cudaEventRecord", e);
  }
  *out = ev;
  return RAP_OK;
}

static int cr_query(rapi_event *ev) {
  cudaError_t e = cudaEventQuery((cudaEvent_t)ev->handle);
  if (e == cudaSuccess) return 1;
  if (e == cudaErrorNotReady) return 0;
  return cuda_error("cudaEventQuery", e);
}

static int cr_event_synchronize(rapi_event *ev) {
  cudaError_t e = cudaEventSynchronize((cudaEvent_t)ev->handle);
  return e == cudaSuccess ? RAP_OK : cuda_error("cudaEventSynchronize", e);
}

static void cr_event_release(rapi_event *ev) { rapi_event_pool_put(ev->r, ev); }

static int cr_wait(rap_resource *r, rapi_event *ev) {
  if (ev->r->ops != r->ops) return RAPI_HOST_WAIT;   /* no device-side wait for a CPU queue */
  if (ev->r->key == r->key) return RAP_OK;
  cudaError_t e = cudaStreamWaitEvent(((cuda_res *)r)->stream, (cudaEvent_t)ev->handle, 0);
  return e == cudaSuccess ? RAP_OK : cuda_error("cudaStreamWaitEvent", e);
}

static void destroy_event_handle(void *h) { (void)cudaEventDestroy((cudaEvent_t)h); }

/* An owned stream goes at once (CUDA lets its queued work finish); the events stay while waits
 * queued elsewhere may still look at them. */
static void cr_close(rap_resource *r) {
  cuda_res *c = (cuda_res *)r;
  if (c->owned) {
    cudaError_t e = cudaStreamDestroy(c->stream);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      rap_log(RAP_LOG_WARN, "cuda resource: cudaStreamDestroy failed: %s", cudaGetErrorString(e));
    }
    c->owned = false;
  }
}

static void cr_destroy(rap_resource *r) {
  rapi_event_pool_fini(r, destroy_event_handle);
  free(r);
}

static const rapi_resource_ops cuda_ops = {
    .kind = "cuda",
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

static int create(rap_manager *rm, cudaStream_t s, bool owned, rap_resource **out, const char *fn) {
  if (rm == NULL || out == NULL) return rapi_fail(RAP_ERR_INVALID, "%s: manager or out is NULL", fn);
  int count = 0;
  if (rapi_cuda_devices(fn, &count) != RAP_OK) return RAP_ERR_UNSUPPORTED;
  cuda_res *c = rapi_calloc(1, sizeof *c);
  if (c == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", fn);
  cudaError_t e = cudaGetDevice(&c->device);
  if (e == cudaSuccess && owned) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e == cudaSuccess && s != NULL && s != cudaStreamPerThread && s != cudaStreamLegacy)
    e = cudaStreamGetDevice(s, &c->device);
  if (e != cudaSuccess) {
    free(c);
    return cuda_error(fn, e);
  }
  c->stream = s;
  c->owned = owned;
  c->base.ops = &cuda_ops;
  c->base.rm = rm;
  /* Stream identity: a real stream's handle; the special handles are per device. */
  uintptr_t h = (uintptr_t)s;
  c->base.key = h < 16 ? h + 1 + ((uintptr_t)c->device << 4) : h;
  rapi_event_pool_init(&c->base);
  rapi_resource_link(rm, &c->base);
  *out = &c->base;
  return RAP_OK;
}

int rap_resource_create_cuda(rap_manager *rm, cudaStream_t s, rap_resource **out) {
  return create(rm, s, false, out, "rap_resource_create_cuda");
}

int rap_resource_create_cuda_stream(rap_manager *rm, rap_resource **out) {
  return create(rm, NULL, true, out, "rap_resource_create_cuda_stream");
}

cudaStream_t rap_resource_cuda_stream(const rap_resource *r) {
  return r != NULL && r->ops == &cuda_ops ? ((const cuda_res *)r)->stream : NULL;
}
