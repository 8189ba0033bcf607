/* kernels.h — GPU helpers for the CUDA and HIP tests, callable from C: a device-side gate that a
 * kernel spins on until the host opens it, and kernels that fill and check byte patterns. Spelled
 * through src/resources/gpu_runtime.h, like the tests that call them.
 */
#ifndef RAP_TEST_KERNELS_H
#define RAP_TEST_KERNELS_H

#include "resources/gpu_runtime.h"
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpu_gate gpu_gate;
int  gpu_gate_create(gpu_gate **out);        /* a flag in mapped pinned memory */
void gpu_gate_open(gpu_gate *g);
void gpu_gate_destroy(gpu_gate *g);
/* Enqueues on s: spin until g opens (or about 10 s pass), then fill p[0..n) with value. */
int  gpu_gated_fill(gpuStream_t s, gpu_gate *g, void *p, size_t n, int value);
int  gpu_fill(gpuStream_t s, void *p, size_t n, int value);
int  gpu_copy(gpuStream_t s, void *dst, const void *src, size_t n);   /* a kernel reads src */
/* Synchronous: 1 if every byte of p[0..n) equals value. */
int  gpu_all_bytes(const void *p, size_t n, int value);

#ifdef __cplusplus
}
#endif
#endif
