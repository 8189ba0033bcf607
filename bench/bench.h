/* bench.h — what rap-bench's pieces share: the peer interface, the environment, results.
 *
 * A peer is one allocator under test (a rap strategy, malloc, cudaMallocAsync, CUB, PyTorch's
 * caching allocator) behind one small table of functions, so every workload drives every peer
 * through the same indirect call. Streams are named by index: 0 is the main stream, 1..4 are the
 * side streams; a peer that does not track streams ignores the index.
 */
#ifndef RAP_BENCH_H
#define RAP_BENCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BENCH_STREAMS 5   /* 0 = main, 1..4 = side streams */

typedef struct bench_env {
  int have_gpu;                 /* a CUDA device is usable */
  char no_gpu_reason[160];      /* why not, when it is not */
  void *streams[BENCH_STREAMS]; /* cudaStream_t, created non-blocking; NULL without a GPU */
  int device;
  char gpu_name[128];
  int driver_version, runtime_version;
} bench_env;

typedef struct bench_peer {
  char name[64];
  int device_mem;               /* 1: device memory, 0: host memory */
  int thread_safe;              /* concurrent callers allowed */
  void *ctx;
  int  (*alloc)(void *ctx, void **p, size_t n, int stream);
  int  (*free)(void *ctx, void *p, size_t n, int stream);
  /* p is also used on stream (PyTorch's record_stream); NULL: the peer has no such call. */
  int  (*record)(void *ctx, void *p, int stream);
  /* bytes held from the system now and at peak since the peer was made; NULL: unknown. */
  int  (*held)(void *ctx, size_t *now, size_t *peak);
  /* Peers that can only learn their peak by looking after each call do so while this is on;
   * NULL: the peak costs nothing to keep. */
  void (*track_peak)(void *ctx, int on);
  void (*destroy)(void *ctx);
} bench_peer;

/* Peers (peers.c). Each returns 0, or -1 with a sentence in why[160]. */
int peer_malloc(bench_peer *p, char *why);
/* spec: a rap spec, "QuickPool(HOST, alignment=16)"; the streams map to rap resources
 * (CUDA streams with a GPU, host_async queues without one when host_async is set). */
int peer_rap(bench_peer *p, const bench_env *env, const char *label, const char *spec,
             int host_async, char *why);
int peer_cuda_malloc(bench_peer *p, const bench_env *env, char *why);
int peer_cuda_async_default(bench_peer *p, const bench_env *env, char *why);
int peer_cuda_async_fresh(bench_peer *p, const bench_env *env, char *why);
/* peer_cub.cpp */
int peer_cub(bench_peer *p, const bench_env *env, char *why);
/* The PyTorch peer is a plugin, librap_bench_torch.so (peer_torch.cpp), built on the GPU machine
 * against the installed torch by bench/build-torch-peer.sh and loaded with --torch-plugin PATH (or
 * RAP_BENCH_TORCH_PLUGIN): rap-bench itself stays the same binary everywhere. The plugin exports
 *   int rap_bench_torch_factory(const bench_env *env, int with_record, bench_peer *p, char *why);
 * with_record: allocate through DataPtrs, so that record maps to recordStream. */
typedef int (*bench_torch_factory_fn)(const bench_env *env, int with_record, bench_peer *p, char *why);

/* kernels.cu: a kernel that keeps its stream busy for about ns nanoseconds and touches p[0..n). */
int bench_kernels_init(char *why);
int bench_busy_kernel(void *stream, void *p, size_t n, unsigned ns);

int rap_bench_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
