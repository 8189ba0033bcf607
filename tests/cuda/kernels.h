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
/* A counter in device memory, and a kernel that adds to it: enqueued on s, it waits about hold_ns
 * (a window for another stream's wrongful write to land), then counts the 4-byte words of
 * p[0..n) (n a multiple of 4) that are not value in every byte. */
int  gpu_counter_create(unsigned long long **out);
int  gpu_counter_read(const unsigned long long *c, unsigned long long *out);   /* synchronous */
void gpu_counter_destroy(unsigned long long *c);
int  gpu_count_foreign(gpuStream_t s, const void *p, size_t n, int value, unsigned hold_ns,
                       unsigned long long *foreign);

#ifdef __cplusplus
}
#endif
#endif
