/* examples/cuda_stream.c — a ResourceAwarePool over device memory: a block used and freed on a
 * CUDA stream without synchronizing, and reused by the same stream at once. rap makes the stream,
 * so that where no GPU is usable the program says why in rap's words. */
#include <cuda_runtime.h>
#include <rap/cuda.h>
#include <rap/rap.h>
#include <stdio.h>

static int fail(rap_manager *rm, int st) {
  fprintf(stderr, "%s: %s\n", rap_status_name(st), rap_last_error());
  if (rm != NULL) (void)rap_manager_destroy(rm);
  return 1;
}

int main(void) {
  rap_manager *rm;
  rap_allocator *pool;
  rap_resource *r;
  void *p, *q;
  int st = rap_manager_create(&rm);
  if (st != RAP_OK) return fail(NULL, st);
  st = rap_resource_create_cuda_stream(rm, &r);   /* without a GPU: UNSUPPORTED, saying why */
  if (st == RAP_OK)
    st = rap_allocator_make_spec(rm, "pool", "ResourceAwarePool(DEVICE, initial_size=1GiB)", &pool);
  if (st == RAP_OK) st = rap_allocate(pool, &p, 64 << 20, r);
  if (st != RAP_OK) return fail(rm, st);
  cudaStream_t s = rap_resource_cuda_stream(r);   /* rap owns it */
  cudaError_t e = cudaMemsetAsync(p, 0, 64 << 20, s);   /* work queued on s uses p */
  if (e != cudaSuccess) {
    fprintf(stderr, "cudaMemsetAsync: %s\n", cudaGetErrorString(e));
    return 1;
  }
  st = rap_deallocate(pool, p, r);   /* no sync: p is pending on s */
  if (st == RAP_OK) st = rap_allocate(pool, &q, 64 << 20, r);   /* s may reuse it at once; */
  if (st != RAP_OK) return fail(rm, st);                        /* another stream once s passed */
  printf("the same block again on the same stream: %s\n", q == p ? "yes" : "no");
  st = rap_deallocate(pool, q, r);
  if (st == RAP_OK) st = rap_manager_destroy(rm);   /* synchronizes s, gives the memory back */
  if (st != RAP_OK) return fail(NULL, st);
  return 0;
}
