/* rap_cupy.c — CuPy's C allocator ABI over rap's ResourceAwarePool.
 *
 *   cupy.cuda.memory.CFunctionAllocator(0, rap_cupy_malloc, rap_cupy_free, owner)
 *
 * CuPy's C ABI carries no stream: malloc(param, size, device), free(param, ptr, device). The
 * stream an allocation belongs to is found, in this order, from
 *   1. a stream bound to the calling thread with rap_cupy_bind_stream (rap_cupy.py's fallback,
 *      or a user who wants to pin one);
 *   2. a stream source: a C function of CuPy's that returns its current stream, handed over by
 *      rap_cupy.py from CuPy's Cython C-API table (cupy_backends.cuda.stream.__pyx_capi__), so
 *      arrays made under `with stream:` belong to that stream at the cost of a C call;
 *   3. otherwise the legacy default stream.
 * CuPy calls malloc with the GIL held, so the source (which reads a Python thread-local) may be
 * called. free needs no stream: rap finds the owner from the pointer.
 */
#include "rap_glue.h"
#include "rap_cupy.h"

#include <rap/strategy.h>

#include <dlfcn.h>
#include <stdbool.h>

const rap_glue_config glue_cfg = {
    "cupy",
    "RAP_CUPY_SPEC",
    "ResourceAwarePool(DEVICE::{device}, initial_size=64MiB, next_size=32MiB, heuristic=never)",
    "RAP_CUPY_GRAPHS",
};

typedef intptr_t (*source_void)(void);
typedef intptr_t (*source_device)(int);

static void *source;            /* CuPy's current-stream function */
static int source_takes_device;
static _Thread_local bool bound;
static _Thread_local intptr_t bound_stream;

/* CuPy's functions are declared `except? -1`: -1 may come with a Python error set. */
static void clear_python_error(void) {
  static int (*occurred)(void);
  static void (*clear)(void);
  if (clear == NULL) {
    *(void **)&occurred = dlsym(RTLD_DEFAULT, "PyErr_Occurred");
    *(void **)&clear = dlsym(RTLD_DEFAULT, "PyErr_Clear");
  }
  if (occurred != NULL && clear != NULL && occurred()) clear();
}

static cudaStream_t current_stream(int device) {
  if (bound) return (cudaStream_t)bound_stream;
  if (source != NULL) {
    intptr_t v = source_takes_device ? ((source_device)source)(device) : ((source_void)source)();
    if (v != -1) return (cudaStream_t)v;
    clear_python_error();
    rap_log(RAP_LOG_WARN, "rap_cupy: CuPy's current stream could not be read; using the default stream");
  }
  return (cudaStream_t)0;
}

static void *do_malloc(size_t size, int device, cudaStream_t s) {
  void *p = NULL;
  int st = glue_malloc(&p, size, device, s);
  if (st == RAP_OK) return p;
  rap_log(RAP_LOG_ERROR, "rap_cupy: cannot allocate %zu bytes on device %d (stream %p): %s: %s",
          size, device, (void *)s, rap_status_name(st), rap_last_error());
  return NULL;
}

RAP_EXPORT void *rap_cupy_malloc(void *param, size_t size, int device) {
  (void)param;
  return do_malloc(size, device, current_stream(device));
}

RAP_EXPORT void rap_cupy_free(void *param, void *ptr, int device) {
  (void)param;
  int st = glue_free(ptr, device);
  if (st != RAP_OK)
    rap_log(RAP_LOG_ERROR, "rap_cupy: cannot free %p on device %d: %s: %s", ptr, device,
            rap_status_name(st), rap_last_error());
}

/* Allocation on an explicit stream (for callers that know it). */
RAP_EXPORT void *rap_cupy_malloc_on(size_t size, int device, intptr_t stream) {
  return do_malloc(size, device, (cudaStream_t)stream);
}

/* fn: intptr_t fn(void) (takes_device 0) or intptr_t fn(int device) (1); NULL removes it. */
RAP_EXPORT void rap_cupy_set_stream_source(void *fn, int takes_device) {
  source_takes_device = takes_device;
  source = fn;
}

RAP_EXPORT void rap_cupy_bind_stream(intptr_t stream) {
  bound_stream = stream;
  bound = true;
}

RAP_EXPORT void rap_cupy_unbind_stream(void) { bound = false; }

/* The stream a new allocation on this thread would belong to now. */
RAP_EXPORT intptr_t rap_cupy_current_stream(int device) { return (intptr_t)current_stream(device); }

RAP_EXPORT int rap_cupy_record_stream(void *ptr, intptr_t stream) {
  return glue_record(ptr, (cudaStream_t)stream);
}

/* The stream that owns ptr; -1 if rap does not know ptr. */
RAP_EXPORT intptr_t rap_cupy_pointer_stream(void *ptr, int device) {
  cudaStream_t s = NULL;
  return glue_pointer_stream(ptr, device, &s) == RAP_OK ? (intptr_t)s : -1;
}

/* A stream's owner is about to destroy it. Returns 1 when rap has a resource on it: rap then owns
 * the stream and destroys it once no block needs it; 0 when the caller should destroy it. */
RAP_EXPORT int rap_cupy_stream_retire(intptr_t stream) {
  int adopted = 0;
  return glue_stream_retire((cudaStream_t)stream, &adopted) == RAP_OK ? adopted : 0;
}

RAP_EXPORT int rap_cupy_empty_cache(void) { return glue_release(); }

RAP_EXPORT size_t rap_cupy_release_graph_pools(void) {
  size_t n = 0;
  (void)glue_release_graph_pools(&n);
  return n;
}

RAP_EXPORT int rap_cupy_stat_values(int device, int graph, size_t *out, size_t n) {
  return glue_stat_values(device, graph, out, n);
}

RAP_EXPORT int rap_cupy_stat_count(void) { return GLUE_NSTATS; }

RAP_EXPORT int rap_cupy_spec(int device, char *buf, size_t cap) { return glue_spec(device, buf, cap); }

RAP_EXPORT const char *rap_cupy_last_error(void) { return rap_last_error(); }
