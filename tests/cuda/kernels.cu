// kernels.cu — the GPU tests' kernels: a gated fill (spins on a host-written flag) and a check.
// One source for both backends: nvcc compiles it for CUDA, hipcc (-x hip) for HIP on AMD.
#include "kernels.h"

#include <cstdlib>
#include <vector>

struct gpu_gate {
  volatile int *flag;
};

// Waits a little without hammering the flag: about 1 us on NVIDIA; s_sleep's longest on AMD.
__device__ static void pause() {
#if defined(__HIP_PLATFORM_AMD__)
  __builtin_amdgcn_s_sleep(127);
#else
  __nanosleep(1000);
#endif
}

__global__ void gated_fill(volatile int *flag, unsigned char *p, size_t n, unsigned char v) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    long long start = clock64();
    // About 10 s at 2 GHz: a test that forgets to open the gate fails instead of hanging.
    while (*flag == 0 && clock64() - start < 20000000000LL) pause();
  }
  __syncthreads();
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = v;
}

__global__ void fill(unsigned char *p, size_t n, unsigned char v) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = v;
}

__global__ void copy(unsigned char *dst, const unsigned char *src, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

__global__ void count_foreign(const unsigned *p, size_t words, unsigned want, long long hold,
                              unsigned long long *foreign) {
  if (threadIdx.x == 0) {
    long long start = clock64();
    while (clock64() - start < hold) {
    }
  }
  __syncthreads();
  unsigned long long bad = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x)
    bad += p[i] != want;
  if (bad) atomicAdd(foreign, bad);
}

extern "C" int gpu_gate_create(gpu_gate **out) {
  // Load both kernels now: with lazy module loading, loading one while a gated kernel runs would
  // wait for that kernel, and the tests would measure the loader instead of the pool.
  gpuFuncAttributes attr;
  if (gpuFuncGetAttributes(&attr, gated_fill) != gpuSuccess ||
      gpuFuncGetAttributes(&attr, fill) != gpuSuccess)
    return -1;
  gpu_gate *g = static_cast<gpu_gate *>(std::malloc(sizeof *g));
  int *flag = nullptr;
  if (!g || gpuHostAlloc((void **)&flag, sizeof(int), gpuHostAllocMapped) != gpuSuccess) {
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
  (void)gpuFreeHost(const_cast<int *>(g->flag));
  std::free(g);
}

// One block spins: the fill itself uses a single block so the gate holds every byte back.
extern "C" int gpu_gated_fill(gpuStream_t s, gpu_gate *g, void *p, size_t n, int value) {
  gated_fill<<<1, 256, 0, s>>>(g->flag, static_cast<unsigned char *>(p), n, (unsigned char)value);
  return gpuGetLastError() == gpuSuccess ? 0 : -1;
}

extern "C" int gpu_fill(gpuStream_t s, void *p, size_t n, int value) {
  fill<<<64, 256, 0, s>>>(static_cast<unsigned char *>(p), n, (unsigned char)value);
  return gpuGetLastError() == gpuSuccess ? 0 : -1;
}

extern "C" int gpu_copy(gpuStream_t s, void *dst, const void *src, size_t n) {
  copy<<<64, 256, 0, s>>>(static_cast<unsigned char *>(dst), static_cast<const unsigned char *>(src), n);
  return gpuGetLastError() == gpuSuccess ? 0 : -1;
}

extern "C" int gpu_all_bytes(const void *p, size_t n, int value) {
  std::vector<unsigned char> h(n);
  if (gpuMemcpy(h.data(), p, n, gpuMemcpyDefault) != gpuSuccess) return 0;
  for (unsigned char c : h)
    if (c != (unsigned char)value) return 0;
  return 1;
}

extern "C" int gpu_counter_create(unsigned long long **out) {
  // Loaded now, for the reason gpu_gate_create gives.
  gpuFuncAttributes attr;
  if (gpuFuncGetAttributes(&attr, count_foreign) != gpuSuccess ||
      gpuFuncGetAttributes(&attr, fill) != gpuSuccess)
    return -1;
  void *c = nullptr;
  if (gpuMalloc(&c, sizeof(unsigned long long)) != gpuSuccess) return -1;
  const unsigned long long zero = 0;
  if (gpuMemcpy(c, &zero, sizeof zero, gpuMemcpyDefault) != gpuSuccess) {
    (void)gpuFree(c);
    return -1;
  }
  *out = static_cast<unsigned long long *>(c);
  return 0;
}

extern "C" int gpu_counter_read(const unsigned long long *c, unsigned long long *out) {
  return gpuMemcpy(out, c, sizeof *out, gpuMemcpyDefault) == gpuSuccess ? 0 : -1;
}

extern "C" void gpu_counter_destroy(unsigned long long *c) { (void)gpuFree(c); }

// About 2 cycles a nanosecond: only a window, not a measurement.
extern "C" int gpu_count_foreign(gpuStream_t s, const void *p, size_t n, int value, unsigned hold_ns,
                                 unsigned long long *foreign) {
  unsigned v = (unsigned char)value;
  count_foreign<<<32, 256, 0, s>>>(static_cast<const unsigned *>(p), n / 4, v * 0x01010101u,
                                   2LL * hold_ns, foreign);
  return gpuGetLastError() == gpuSuccess ? 0 : -1;
}
