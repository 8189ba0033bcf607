/* hip.h — HIP streams as rap resources. Include only where the HIP runtime headers are.
 *
 * rap/cuda.h for HIP, name for name: a hip resource wraps a hipStream_t; the null stream (0) and
 * hipStreamPerThread are valid. Two resources that wrap the same stream are the same stream of
 * execution to every pool. The HIP platform macro (__HIP_PLATFORM_AMD__ or __HIP_PLATFORM_NVIDIA__)
 * comes with the package (rap.pc, find_package(rap)). In a build without HIP these return
 * RAP_ERR_UNSUPPORTED.
 */
#ifndef RAP_HIP_H
#define RAP_HIP_H

#include <hip/hip_runtime_api.h>
#include <rap/rap.h>

#ifdef __cplusplus
extern "C" {
#endif
RAP_API_BEGIN

int rap_resource_create_hip(rap_manager *rm, hipStream_t s, rap_resource **out);   /* caller owns s */
int rap_resource_create_hip_stream(rap_manager *rm, rap_resource **out);   /* creates and owns one */
hipStream_t rap_resource_hip_stream(const rap_resource *r);                /* 0 if r is not hip */
/* A graph capture of r's stream begun and ended through rap (hipStreamBeginCapture/EndCapture),
 * so that pools know of it: while it runs, allocating or freeing on r through a pool is refused
 * with RAP_ERR_BUSY and a sentence (its blocks would stay in the graph and be handed out again);
 * StreamOrdered, alone or under ThreadSafe or SizeLimiter, serves it (graph memory nodes). */
int rap_resource_hip_begin_capture(rap_resource *r, hipStreamCaptureMode mode);
int rap_resource_hip_end_capture(rap_resource *r, hipGraph_t *graph);

RAP_API_END
#ifdef __cplusplus
}
#endif
#endif /* RAP_HIP_H */
