/* rap_glue.h — what the PyTorch and CuPy allocators share: one ResourceAwarePool per device, one
 * rap resource per CUDA stream (made at its first use, found in O(1)), separate pools for memory
 * taken while a stream is being captured into a CUDA graph, and one lock around all of it.
 *
 * Each integration library compiles its own copy and defines glue_cfg. Every function returns a
 * rap status with rap_last_error() set on failure, like the library itself.
 */
#ifndef RAP_GLUE_H
#define RAP_GLUE_H

#include <cuda_runtime_api.h>
#include <rap/rap.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RAP_EXPORT __attribute__((visibility("default")))
#else
#define RAP_EXPORT
#endif

typedef struct rap_glue_config {
  const char *prefix;         /* "torch": pools are named torch-cuda0, torch-cuda0-graph1, ... */
  const char *spec_env;       /* "RAP_TORCH_SPEC": a spec string that replaces default_spec */
  const char *default_spec;   /* "{device}" is replaced by the device number */
  const char *fallback_spec;  /* made where default_spec is refused as unsupported (NULL: none) */
  const char *graphs_env;     /* "RAP_TORCH_GRAPHS": "0" turns capture detection off */
} rap_glue_config;

extern const rap_glue_config glue_cfg;   /* defined by each integration */

/* The values glue_stat_values writes, in this order (independent of rap_stats' layout). */
enum {
  GLUE_CURRENT, GLUE_PEAK, GLUE_RESERVED, GLUE_PEAK_RESERVED, GLUE_PENDING, GLUE_PENDING_COUNT,
  GLUE_FREE, GLUE_RELEASABLE, GLUE_LARGEST_FREE, GLUE_ALLOCATIONS, GLUE_BLOCKS, GLUE_CHUNKS,
  GLUE_USED, GLUE_STREAMS, GLUE_GRAPH_POOLS, GLUE_DEFERRED,
  /* Since the last glue_reset_accumulated (per device, graph pools included): allocations and
   * their bytes, out-of-memory answers, and the live count and bytes at that reset. */
  GLUE_ALLOCS_TOTAL, GLUE_ALLOC_BYTES_TOTAL, GLUE_OOMS, GLUE_BASE_COUNT, GLUE_BASE_BYTES,
  /* cross_resource=wait: waits a stream was made to do for another's block, and those on the
   * host (rap_stats' waits, host_waits). */
  GLUE_WAITS, GLUE_HOST_WAITS,
  GLUE_NSTATS
};

int  glue_malloc(void **out, size_t size, int device, cudaStream_t s);
int  glue_free(void *ptr, int device);                 /* on the owning stream; NULL is a no-op */
int  glue_record(void *ptr, cudaStream_t s);           /* ptr is also used on s */
int  glue_release(void);                               /* every device: poll, release free chunks */
int  glue_release_graph_pools(size_t *released);       /* pools of ended captures with no live block */
int  glue_stat_values(int device, int graph, size_t *out, size_t n);   /* n >= GLUE_NSTATS */
int  glue_pointer_stream(const void *ptr, int device, cudaStream_t *out);
int  glue_stream_retire(cudaStream_t s, int *adopted);  /* the stream's owner lets go of it */
int  glue_spec(int device, char *buf, size_t cap);      /* the spec a device's pool is (to be) made from */
int  glue_reset_peaks(int device);        /* high-water marks of the device's pools start again */
int  glue_reset_accumulated(int device);  /* running totals start again (see GLUE_ALLOCS_TOTAL) */
int  glue_sleep(int device, int mode);    /* the device's pool sleeps (rap_sleep_mode) */
int  glue_wake(int device);
/* Memory across processes: desc is a rap_ipc_desc (64 bytes); see rap_ipc_export/import/close. */
int  glue_ipc_export(void *ptr, int device, void *desc);
int  glue_ipc_import(const void *desc, int device, cudaStream_t s, void **out);
int  glue_ipc_close(void *ptr, int device, cudaStream_t s);
/* NCCL registration: RAP_OK when ptr's memory (ptr NULL: whatever the device's pool hands out;
 * the pool is made, lazily, without memory) is what NCCL can register (rap_pointer_registrable),
 * else RAP_ERR_UNSUPPORTED with rap's sentence. */
int  glue_registrable(const void *ptr, int device);

/* A framework's own graph-pool protocol (PyTorch's begin/end_allocate_to_pool and release_pool).
 * Once glue_use_pool_hooks(1) is called, captures are no longer detected per allocation: between
 * glue_begin_pool and glue_end_pool, an allocation on a stream that filter accepts comes from the
 * pool (id1, id2) (one QuickPool per stream); glue_release_pool drops one reference, and a pool
 * with no reference left is given back once its last block is freed. filter is called with the
 * lock held and must not call back; drop(ctx) is called when the entry ends. */
typedef int (*glue_filter_fn)(void *ctx, cudaStream_t s);
void glue_use_pool_hooks(int on);
int  glue_begin_pool(int device, unsigned long long id1, unsigned long long id2, void *ctx,
                     glue_filter_fn filter, void (*drop)(void *ctx));
int  glue_end_pool(int device, unsigned long long id1, unsigned long long id2);
int  glue_release_pool(int device, unsigned long long id1, unsigned long long id2);

/* A framework's pool surface (CuPy's MemoryPool). glue_malloc_limited: glue_malloc, but
 * RAP_ERR_NOMEM with a sentence when size more bytes would take the aligned bytes of the device's
 * live blocks past limit (0: none); the check and the allocation hold the lock together.
 * glue_release_device: glue_release for one device. glue_memory_info: the device's free and total
 * memory (rap_allocator_memory_info). */
int  glue_malloc_limited(void **out, size_t size, int device, cudaStream_t s, size_t limit);
int  glue_release_device(int device);
int  glue_memory_info(int device, size_t *free_bytes, size_t *total_bytes);

/* PyTorch's set_per_process_memory_fraction: the device's pool may reserve at most fraction x
 * the device's total memory (cudaMemGetInfo); an allocation that would grow it past that is
 * undone, the pool's free chunks are given back, it is tried once more, then RAP_ERR_NOMEM with a
 * sentence. 1 removes the cap. A fraction outside (0, 1] is RAP_ERR_INVALID (nothing changes).
 * glue_memory_limit: the limit in bytes (0: none). Graph pools are not counted. */
int  glue_set_memory_fraction(int device, double fraction);
int  glue_memory_limit(int device, size_t *limit);

/* Page-locked host memory from one pool, made from spec (over PINNED) at the first allocation;
 * its statistics in glue_stat_values' order. */
int  glue_pinned_malloc(void **out, size_t size, const char *spec);
int  glue_pinned_free(void *ptr);                       /* NULL is a no-op */
int  glue_pinned_release(void);                         /* wholly free chunks go back */
int  glue_pinned_stat_values(size_t *out, size_t n);    /* n >= GLUE_NSTATS */

#ifdef __cplusplus
}
#endif
#endif /* RAP_GLUE_H */
