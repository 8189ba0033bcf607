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
 *
 * Besides: a limit per device for CuPy's MemoryPool.set_limit and CUPY_GPU_MEMORY_LIMIT (checked
 * before each allocation against the pool's live bytes), and a pool of pinned host memory for
 * cupy.cuda.set_pinned_memory_allocator.
 */
#include "rap_glue.h"
#include "rap_cupy.h"

#include <rap/strategy.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

const rap_glue_config glue_cfg = {
    "cupy",
    "RAP_CUPY_SPEC",
    RAP_DEFAULT_DEVICE_SPEC,
    RAP_FALLBACK_DEVICE_SPEC,
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

/* ---- limits (CuPy's MemoryPool.set_limit and CUPY_GPU_MEMORY_LIMIT) ----------------------- */

#define MAX_DEVICES 256

/* A device's limit on the aligned bytes of its live blocks (0: none). state: 0 until the first
 * allocation or limit query reads CUPY_GPU_MEMORY_LIMIT, 1 after; rap_cupy_set_limit sets 1, so
 * that a limit set before the first allocation wins over the environment, as in CuPy. */
static _Atomic size_t limits[MAX_DEVICES];
static _Atomic int limit_state[MAX_DEVICES];

/* CUPY_GPU_MEMORY_LIMIT as CuPy reads it: a number of bytes, or a percentage of the device's
 * total memory ("50%"). 0 when unset, malformed (logged) or the memory is unknown. */
static size_t env_limit(int device) {
  const char *v = getenv("CUPY_GPU_MEMORY_LIMIT");
  if (v == NULL || *v == '\0') return 0;
  size_t len = strlen(v);
  char *end = NULL;
  if (v[len - 1] == '%') {
    double pct = strtod(v, &end);
    size_t free_bytes = 0, total = 0;
    if (end != v + len - 1 || !(pct >= 0) || pct > 100) {
      rap_log(RAP_LOG_ERROR, "rap_cupy: CUPY_GPU_MEMORY_LIMIT='%s': a percentage is a number from "
              "0 to 100 followed by %%; no limit", v);
      return 0;
    }
    if (glue_memory_info(device, &free_bytes, &total) != RAP_OK) {
      rap_log(RAP_LOG_ERROR, "rap_cupy: CUPY_GPU_MEMORY_LIMIT='%s' needs device %d's memory: %s; "
              "no limit", v, device, rap_last_error());
      return 0;
    }
    return (size_t)((double)total * pct / 100.0);
  }
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || v[0] == '-') {
    rap_log(RAP_LOG_ERROR, "rap_cupy: CUPY_GPU_MEMORY_LIMIT='%s' is neither a number of bytes nor "
            "a percentage such as 50%%; no limit", v);
    return 0;
  }
  return (size_t)n;
}

static size_t device_limit(int device) {
  if (device < 0 || device >= MAX_DEVICES) return 0;
  if (limit_state[device] == 0) {
    size_t l = env_limit(device);
    int unread = 0;
    if (atomic_compare_exchange_strong(&limit_state[device], &unread, 1)) limits[device] = l;
  }
  return limits[device];
}

RAP_EXPORT int rap_cupy_set_limit(int device, size_t bytes) {
  if (device < 0 || device >= MAX_DEVICES)
    return rap_error_set(RAP_ERR_INVALID, "rap_cupy: device %d cannot have a limit (0 to %d can)",
                         device, MAX_DEVICES - 1);
  limits[device] = bytes;
  limit_state[device] = 1;
  return RAP_OK;
}

RAP_EXPORT size_t rap_cupy_get_limit(int device) { return device_limit(device); }

RAP_EXPORT int rap_cupy_memory_info(int device, size_t *free_bytes, size_t *total_bytes) {
  return glue_memory_info(device, free_bytes, total_bytes);
}

RAP_EXPORT int rap_cupy_release_device(int device) { return glue_release_device(device); }

/* ---- allocation --------------------------------------------------------------------------- */

static void *do_malloc(size_t size, int device, cudaStream_t s) {
  void *p = NULL;
  size_t limit = device_limit(device);
  int st = glue_malloc_limited(&p, size, device, s, limit);
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

/* Memory across processes (rap_cupy.share/open): desc is a rap_ipc_desc (64 bytes). The device's
 * pool must be over an exporting platform (DeviceVmm(export=posix)); an import is used on stream
 * and closed on the stream it was used on. */
RAP_EXPORT int rap_cupy_ipc_export(void *ptr, int device, void *desc) {
  return glue_ipc_export(ptr, device, desc);
}

RAP_EXPORT int rap_cupy_ipc_import(const void *desc, int device, intptr_t stream, void **out) {
  return glue_ipc_import(desc, device, (cudaStream_t)stream, out);
}

RAP_EXPORT int rap_cupy_ipc_close(void *ptr, int device, intptr_t stream) {
  return glue_ipc_close(ptr, device, (cudaStream_t)stream);
}

/* A stream's owner is about to destroy it. Returns 1 when rap has a resource on it: rap then owns
 * the stream and destroys it once no block needs it; 0 when the caller should destroy it. */
RAP_EXPORT int rap_cupy_stream_retire(intptr_t stream) {
  int adopted = 0;
  return glue_stream_retire((cudaStream_t)stream, &adopted) == RAP_OK ? adopted : 0;
}

RAP_EXPORT int rap_cupy_empty_cache(void) { return glue_release(); }

/* rap_cupy.sleep and wake: the device's pool gives its memory back and takes it again
 * (DEVICE_VMM only; rap_allocator_sleep). */
RAP_EXPORT int rap_cupy_sleep(int device, int mode) { return glue_sleep(device, mode); }

RAP_EXPORT int rap_cupy_wake(int device) { return glue_wake(device); }

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

/* ---- pinned host memory (cupy.cuda.set_pinned_memory_allocator) -------------------------- */

static const char *pinned_spec(void) {
  const char *env = getenv("RAP_CUPY_PINNED_SPEC");
  return env != NULL && *env != '\0' ? env
                                     : "QuickPool(PINNED, initial_size=16MiB, next_size=2MiB, heuristic=never)";
}

RAP_EXPORT void *rap_cupy_pinned_malloc(size_t size) {
  void *p = NULL;
  int st = glue_pinned_malloc(&p, size, pinned_spec());
  if (st == RAP_OK) return p;
  rap_log(RAP_LOG_ERROR, "rap_cupy: cannot allocate %zu bytes of pinned host memory: %s: %s", size,
          rap_status_name(st), rap_last_error());
  return NULL;
}

RAP_EXPORT int rap_cupy_pinned_free(void *ptr) {
  int st = glue_pinned_free(ptr);
  if (st != RAP_OK)
    rap_log(RAP_LOG_ERROR, "rap_cupy: cannot free pinned %p: %s: %s", ptr, rap_status_name(st),
            rap_last_error());
  return st;
}

RAP_EXPORT int rap_cupy_pinned_release(void) { return glue_pinned_release(); }

RAP_EXPORT int rap_cupy_pinned_stat_values(size_t *out, size_t n) { return glue_pinned_stat_values(out, n); }

RAP_EXPORT const char *rap_cupy_pinned_spec(void) { return pinned_spec(); }
