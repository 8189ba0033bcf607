/* rap_cupy.h — the C entry points of librap_cupy.so (CuPy's C allocator ABI over rap).
 * rap_cupy.py installs them; C callers may use them directly. */
#ifndef RAP_CUPY_H
#define RAP_CUPY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void    *rap_cupy_malloc(void *param, size_t size, int device);   /* CFunctionAllocator's malloc */
void     rap_cupy_free(void *param, void *ptr, int device);       /* CFunctionAllocator's free */
void    *rap_cupy_malloc_on(size_t size, int device, intptr_t stream);
void     rap_cupy_set_stream_source(void *fn, int takes_device);
void     rap_cupy_bind_stream(intptr_t stream);     /* this thread's allocations go to stream */
void     rap_cupy_unbind_stream(void);
intptr_t rap_cupy_current_stream(int device);
int      rap_cupy_record_stream(void *ptr, intptr_t stream);
intptr_t rap_cupy_pointer_stream(void *ptr, int device);
int      rap_cupy_stream_retire(intptr_t stream);
/* Memory across processes: desc is a rap_ipc_desc (64 bytes); see rap_ipc_export/import/close. */
int      rap_cupy_ipc_export(void *ptr, int device, void *desc);
int      rap_cupy_ipc_import(const void *desc, int device, intptr_t stream, void **out);
int      rap_cupy_ipc_close(void *ptr, int device, intptr_t stream);
int      rap_cupy_empty_cache(void);
int      rap_cupy_sleep(int device, int mode);   /* rap_allocator_sleep of the device's pool */
int      rap_cupy_wake(int device);
size_t   rap_cupy_release_graph_pools(void);
int      rap_cupy_stat_values(int device, int graph, size_t *out, size_t n);
int      rap_cupy_stat_count(void);
int      rap_cupy_spec(int device, char *buf, size_t cap);
const char *rap_cupy_last_error(void);

/* CuPy's MemoryPool surface: a limit per device on the aligned bytes of live blocks (0: none;
 * CUPY_GPU_MEMORY_LIMIT, bytes or "50%", is read at the device's first allocation unless a limit
 * was set before), the device's memory, one device's release. */
int      rap_cupy_set_limit(int device, size_t bytes);
size_t   rap_cupy_get_limit(int device);
int      rap_cupy_memory_info(int device, size_t *free_bytes, size_t *total_bytes);
int      rap_cupy_release_device(int device);

/* Pinned host memory from one pool (RAP_CUPY_PINNED_SPEC, default a QuickPool over PINNED). */
void    *rap_cupy_pinned_malloc(size_t size);       /* NULL on failure, logged */
int      rap_cupy_pinned_free(void *ptr);
int      rap_cupy_pinned_release(void);
int      rap_cupy_pinned_stat_values(size_t *out, size_t n);
const char *rap_cupy_pinned_spec(void);

#ifdef __cplusplus
}
#endif
#endif /* RAP_CUPY_H */
