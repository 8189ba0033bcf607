// kernels.cu — the busy kernel of workload (d): one block keeps its stream busy for a given time
// (read from the GPU's global timer) and writes one word in every 64 KiB of the temporary, so
// the memory is really used while the kernel runs.
#include "bench.h"

#include <cuda_runtime_api.h>
#include <cstdio>

__device__ static unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void busy(unsigned *p, size_t words, unsigned ns) {
  unsigned long long start = global_ns();
  for (size_t i = threadIdx.x * 16384u; i < words; i += (size_t)blockDim.x * 16384u) p[i] = (unsigned)i;
  while (global_ns() - start < ns) __nanosleep(2000);
}

extern "C" int bench_kernels_init(char *why) {
  // Load the kernel now: with lazy loading, the first launch would wait for busy streams.
  cudaFuncAttributes attr;
  cudaError_t e = cudaFuncGetAttributes(&attr, busy);
  if (e != cudaSuccess) {
    std::snprintf(why, 160, "cudaFuncGetAttributes(busy): %s", cudaGetErrorString(e));
    (void)cudaGetLastError();
    return -1;
  }
  return 0;
}

extern "C" int bench_busy_kernel(void *stream, void *p, size_t n, unsigned ns) {
  busy<<<1, 128, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<unsigned *>(p), n / sizeof(unsigned), ns);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
