// kernels.cu — the CUDA tests' kernels: a gated fill (spins on a host-written flag) and a check.
#include "kernels.h"

#include <cstdlib>
#include <vector>

struct gpu_gate {
  volatile int *flag;
};

__global__ void gated_fill(volatile int *flag, unsigned char *p, size_t n, unsigned char v) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    long long start = clock64();
    // About 10 s at 2 GHz: a test that forgets to open the gate fails instead of hanging.
    while (*flag == 0 && clock64() - start < 20000000000LL) __nanosleep(1000);
  }
  __syncthreads();
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = v;
}

__global__ void fill(unsigned char *p, size_t n, unsigned char v) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = v;
}

extern "C" int gpu_gate_create(gpu_gate **out) {
  // Load both kernels now: with lazy module loading, loading one while a gated kernel runs would
  // wait for that kernel, and the tests would measure the loader instead of the pool.
  cudaFuncAttributes attr;
  if (cudaFuncGetAttributes(&attr, gated_fill) != cudaSuccess ||
      cudaFuncGetAttributes(&attr, fill) != cudaSuccess)
    return -1;
  gpu_gate *g = static_cast<gpu_gate *>(std::malloc(sizeof *g));
  int *flag = nullptr;
  if (!g || cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped) != cudaSuccess) {
    std::free(g);
    return -1;
  }
  *flag = 0;
  g->flag = flag;
  *out = g;
  return 0;
}

extern "C" void gpu_gate_open(gpu_gate *g) {
  __atomic_store_n(const_cast<int *>(g->flag), 1, __ATOMIC_SEQ_CST);
}

extern "C" void gpu_gate_destroy(gpu_gate *g) {
  cudaFreeHost(const_cast<int *>(g->flag));
  std::free(g);
}

// One block spins: the fill itself uses a single block so the gate holds every byte back.
extern "C" int gpu_gated_fill(cudaStream_t s, gpu_gate *g, void *p, size_t n, int value) {
  gated_fill<<<1, 256, 0, s>>>(g->flag, static_cast<unsigned char *>(p), n, (unsigned char)value);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int gpu_fill(cudaStream_t s, void *p, size_t n, int value) {
  fill<<<64, 256, 0, s>>>(static_cast<unsigned char *>(p), n, (unsigned char)value);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int gpu_all_bytes(const void *p, size_t n, int value) {
  std::vector<unsigned char> h(n);
  if (cudaMemcpy(h.data(), p, n, cudaMemcpyDefault) != cudaSuccess) return 0;
  for (unsigned char c : h)
    if (c != (unsigned char)value) return 0;
  return 1;
}
