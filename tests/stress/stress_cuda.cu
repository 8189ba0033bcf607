// stress_cuda.cu — the stress program's CUDA backend: four rap-owned CUDA streams, and kernels that
// write a block's pattern, check it (counting failures in mapped host memory), and spin a while.
#include "stress.h"

#include <rap/cuda.h>

#include <cuda_runtime_api.h>

namespace {

unsigned long long *errors_host = nullptr;   // mapped: kernels add, the host reads after a sync
unsigned long long *errors_dev = nullptr;

__global__ void fill_kernel(unsigned char *p, size_t n, uint32_t tag, unsigned char byte) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = i < 8 ? (unsigned char)(tag >> (8 * (i % 4))) : byte;
}

__global__ void check_kernel(const unsigned char *p, size_t n, uint32_t tag, unsigned char byte,
                             unsigned long long *errors) {
  bool bad = false;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    bad |= p[i] != (i < 8 ? (unsigned char)(tag >> (8 * (i % 4))) : byte);
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicAdd(errors, 1ull);
}

__global__ void spin_kernel(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

int grid(size_t n) {
  size_t blocks = (n + 255) / 256;
  return blocks < 1 ? 1 : blocks > 64 ? 64 : (int)blocks;
}

cudaStream_t stream(rap_resource *r) { return rap_resource_cuda_stream(r); }

int launched() { return cudaGetLastError() == cudaSuccess ? RAP_OK : RAP_ERR_BACKEND; }

int cuda_init(rap_manager *rm, rap_resource **res, int n, const char **why) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    *why = "no CUDA device";
    return -1;
  }
  if (cudaHostAlloc(&errors_host, sizeof *errors_host, cudaHostAllocMapped) != cudaSuccess ||
      cudaHostGetDevicePointer(&errors_dev, errors_host, 0) != cudaSuccess) {
    *why = "cudaHostAlloc(mapped) failed";
    return -1;
  }
  *errors_host = 0;
  // Load the kernels now: lazy loading while a stream is busy would serialise the streams.
  cudaFuncAttributes attr;
  (void)cudaFuncGetAttributes(&attr, fill_kernel);
  (void)cudaFuncGetAttributes(&attr, check_kernel);
  (void)cudaFuncGetAttributes(&attr, spin_kernel);
  for (int i = 0; i < n; i++)
    if (rap_resource_create_cuda_stream(rm, &res[i]) != RAP_OK) {
      *why = rap_last_error();
      return -1;
    }
  return 0;
}

int cuda_fill(rap_resource *r, void *p, size_t n, uint32_t tag, unsigned char byte) {
  if (n == 0) return RAP_OK;
  fill_kernel<<<grid(n), 256, 0, stream(r)>>>(static_cast<unsigned char *>(p), n, tag, byte);
  return launched();
}

int cuda_check(rap_resource *r, const void *p, size_t n, uint32_t tag, unsigned char byte) {
  if (n == 0) return RAP_OK;
  check_kernel<<<grid(n), 256, 0, stream(r)>>>(static_cast<const unsigned char *>(p), n, tag, byte, errors_dev);
  return launched();
}

int cuda_check_after(rap_resource *reader, rap_resource *writer, const void *p, size_t n, uint32_t tag,
                     unsigned char byte) {
  if (writer != nullptr) {
    cudaEvent_t e;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return RAP_ERR_BACKEND;
    bool ok = cudaEventRecord(e, stream(writer)) == cudaSuccess &&
              cudaStreamWaitEvent(stream(reader), e, 0) == cudaSuccess;
    cudaEventDestroy(e);   // released once the wait has used it
    if (!ok) return RAP_ERR_BACKEND;
  }
  return cuda_check(reader, p, n, tag, byte);
}

int cuda_lag(rap_resource *r) {
  spin_kernel<<<1, 1, 0, stream(r)>>>(200000);   // about 0.1 ms
  return launched();
}

unsigned long long cuda_errors() {
  cudaDeviceSynchronize();
  return errors_host ? *(volatile unsigned long long *)errors_host : 0;
}

void cuda_fini() {
  if (errors_host) cudaFreeHost(errors_host);
  errors_host = nullptr;
}

}  // namespace

extern "C" const stress_backend stress_cuda_backend = {"cuda", cuda_init, cuda_fill, cuda_check,
                                                       cuda_check_after, cuda_lag, cuda_errors, cuda_fini};
