/* cuda_stream.c — the README's CUDA example: a ResourceAwarePool over device memory, a block used
 * and freed on a CUDA stream without synchronizing, and reused by the same stream at once.
 * Built where CUDA is (RAP_HAVE_CUDA); run on a machine with a GPU.
 */
#include <cuda_runtime.h>
#include <rap/cuda.h>
#include <rap/rap.h>
#include <stdio.h>

static int fail(int st) {
  fprintf(stderr, "%s: %s\n", rap_status_name(st), rap_last_error());
  return 1;
}

int main(void) {
  rap_manager *rm;
  rap_allocator *pool;
  rap_resource *r;
  cudaStream_t s;
  void *p, *q;
  if (cudaStreamCreate(&s) != cudaSuccess) {
    fprintf(stderr, "no usable GPU: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  int st = rap_manager_create(&rm);
  if (st != RAP_OK) return fail(st);
  st = rap_allocator_make_spec(rm, "pool", "ResourceAwarePool(DEVICE, initial_size=1GiB)", &pool);
  if (st == RAP_OK) st = rap_resource_create_cuda(rm, s, &r);   /* wraps s; we keep owning it */
  if (st == RAP_OK) st = rap_allocate(pool, &p, 64 << 20, r);
  if (st != RAP_OK) return fail(st);
  if (cudaMemsetAsync(p, 0, 64 << 20, s) != cudaSuccess) {   /* work queued on s uses p */
    fprintf(stderr, "cudaMemsetAsync: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  st = rap_deallocate(pool, p, r);                 /* no sync: p is pending on s */
  if (st == RAP_OK) st = rap_allocate(pool, &q, 64 << 20, r);   /* s may reuse it at once */
  if (st != RAP_OK) return fail(st);
  printf("the same block again on the same stream: %s\n", q == p ? "yes" : "no");
  st = rap_deallocate(pool, q, r);
  if (st == RAP_OK) st = rap_manager_destroy(rm);  /* synchronizes s, returns the memory */
  cudaStreamDestroy(s);
  return st == RAP_OK ? 0 : fail(st);
}
