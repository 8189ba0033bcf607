/* cuda.h — CUDA streams as rap resources. Include only where the CUDA runtime headers are.
 *
 * A cuda resource wraps a cudaStream_t: the legacy default stream (0) and cudaStreamPerThread are
 * valid. Two resources that wrap the same stream are the same stream of execution to every pool.
 * In a build without CUDA these return RAP_ERR_UNSUPPORTED.
 */
#ifndef RAP_CUDA_H
#define RAP_CUDA_H

#include <cuda_runtime_api.h>
#include <rap/rap.h>

#ifdef __cplusplus
extern "C" {
#endif
RAP_API_BEGIN

int rap_resource_create_cuda(rap_manager *rm, cudaStream_t s, rap_resource **out);  /* caller owns s */
int rap_resource_create_cuda_stream(rap_manager *rm, rap_resource **out);   /* creates and owns one */
cudaStream_t rap_resource_cuda_stream(const rap_resource *r);               /* 0 if r is not cuda */
/* A graph capture of r's stream begun and ended through rap (cudaStreamBeginCapture/EndCapture),
 * so that pools know of it: while it runs, allocating or freeing on r through a pool is refused
 * with RAP_ERR_BUSY and a sentence (its blocks would stay in the graph and be handed out again);
 * StreamOrdered, alone or under ThreadSafe or SizeLimiter, serves it (graph memory nodes). */
int rap_resource_cuda_begin_capture(rap_resource *r, enum cudaStreamCaptureMode mode);
int rap_resource_cuda_end_capture(rap_resource *r, cudaGraph_t *graph);

RAP_API_END
#ifdef __cplusplus
}
#endif
#endif /* RAP_CUDA_H */
