/* gpu_runtime.h — one source, two spellings: the GPU runtime as rap's CUDA and HIP backends call it.
 *
 * cuda_platform.c, cuda_resource.c and the GPU tests are written once against the names below;
 * a build compiles them for CUDA, or, with RAP_HAVE_HIP, for HIP (on AMD, or with
 * __HIP_PLATFORM_NVIDIA__ over the CUDA runtime). A build has one GPU backend. Where the runtimes
 * differ the difference is here, said once: HIP has no hipMallocHost (hipHostMalloc), no stream
 * handle apart from 0 for the legacy default stream, and ROCm 5.2 no hipStreamGetDevice; and in
 * cuda_resource.c, HIP 5.2 has no working hipLaunchHostFunc.
 */
#ifndef RAP_GPU_RUNTIME_H
#define RAP_GPU_RUNTIME_H

#if RAP_HAVE_HIP
/* A kernel source (hipcc, or nvcc over HIP's NVIDIA headers) takes the whole runtime. */
#if defined(__HIP__) || defined(__CUDACC__)
#include <hip/hip_runtime.h>
#else
#include <hip/hip_runtime_api.h>
#endif
#include <rap/hip.h>
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__)
#define RAP_GPU_AMD 1   /* the ROCm runtime; otherwise HIP is a header over the CUDA runtime */
#endif

#define GPU_NAME "HIP"       /* in sentences: "no HIP device is usable here" */
#define GPU_KIND "hip"       /* rap_resource_kind() */
#define GPU_PREFIX "hip"     /* runtime calls named in sentences: GPU_PREFIX "Malloc" */
#define GPU_TITLE Hip        /* test suites: HipPlatform, HipResourceAwarePool, ... */
#define GPU_MALLOC_HOST "hipHostMalloc"
#define GPU_FREE_HOST "hipHostFree"

#define gpu_resource_create rap_resource_create_hip
#define gpu_resource_create_stream rap_resource_create_hip_stream
#define gpu_resource_stream rap_resource_hip_stream
#define gpu_resource_begin_capture rap_resource_hip_begin_capture
#define gpu_resource_end_capture rap_resource_hip_end_capture

typedef hipError_t gpuError_t;
typedef hipStream_t gpuStream_t;
typedef hipEvent_t gpuEvent_t;
#define gpuSuccess hipSuccess
#define gpuErrorNotReady hipErrorNotReady
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuErrorInsufficientDriver hipErrorInsufficientDriver
#define gpuStreamPerThread hipStreamPerThread
#define gpuStreamLegacy ((hipStream_t)0)   /* HIP's null stream is the legacy default stream */
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuMemAttachGlobal hipMemAttachGlobal
#define gpuMemcpyDefault hipMemcpyDefault
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuHostAllocMapped hipHostMallocMapped
#define gpuHostAllocPortable hipHostMallocPortable
#define gpuHostAllocWriteCombined hipHostMallocWriteCombined
#define gpuHostGetDevicePointer hipHostGetDevicePointer
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDevice hipGetDevice
#define gpuSetDevice hipSetDevice
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuDriverGetVersion hipDriverGetVersion
#define gpuGetLastError hipGetLastError
#define gpuGetErrorString hipGetErrorString
#define gpuMalloc hipMalloc
#define gpuMallocHost(p, n) hipHostMalloc((p), (n), hipHostMallocDefault)
#define gpuMallocManaged hipMallocManaged
#define gpuHostAlloc hipHostMalloc
#define gpuFree hipFree
#define gpuFreeHost hipHostFree
#define gpuMemcpy hipMemcpy
#define gpuMemGetInfo hipMemGetInfo
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamBeginCapture hipStreamBeginCapture
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuStreamIsCapturing hipStreamIsCapturing
#define gpuStreamCaptureStatusNone hipStreamCaptureStatusNone
typedef hipStreamCaptureStatus gpuStreamCaptureStatus;
typedef hipStreamCaptureMode gpuStreamCaptureMode;
typedef hipGraph_t gpuGraph_t;
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventRecord hipEventRecord
#define gpuEventQuery hipEventQuery
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventDestroy hipEventDestroy
#define gpuFuncAttributes hipFuncAttributes
#define gpuFuncGetAttributes(attr, fn) hipFuncGetAttributes((attr), (const void *)(fn))

/* The device a stream belongs to. ROCm 5.2 has only hipGetStreamDeviceId (-1 for a bad handle);
 * over the CUDA runtime hipStream_t is cudaStream_t, and CUDA answers. */
#if RAP_GPU_AMD
static inline hipError_t gpu_stream_device(hipStream_t s, int *device) {
  int d = hipGetStreamDeviceId(s);
  if (d < 0) return hipErrorInvalidHandle;
  *device = d;
  return hipSuccess;
}
#else
static inline hipError_t gpu_stream_device(hipStream_t s, int *device) {
  return hipCUDAErrorTohipError(cudaStreamGetDevice(s, device));
}
#endif

#else /* CUDA */
#include <cuda_runtime_api.h>
#include <rap/cuda.h>

#define GPU_NAME "CUDA"
#define GPU_KIND "cuda"
#define GPU_PREFIX "cuda"
#define GPU_TITLE Cuda
#define GPU_MALLOC_HOST "cudaMallocHost"
#define GPU_FREE_HOST "cudaFreeHost"

#define gpu_resource_create rap_resource_create_cuda
#define gpu_resource_create_stream rap_resource_create_cuda_stream
#define gpu_resource_stream rap_resource_cuda_stream
#define gpu_resource_begin_capture rap_resource_cuda_begin_capture
#define gpu_resource_end_capture rap_resource_cuda_end_capture

typedef cudaError_t gpuError_t;
typedef cudaStream_t gpuStream_t;
typedef cudaEvent_t gpuEvent_t;
#define gpuSuccess cudaSuccess
#define gpuErrorNotReady cudaErrorNotReady
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuErrorInsufficientDriver cudaErrorInsufficientDriver
#define gpuStreamPerThread cudaStreamPerThread
#define gpuStreamLegacy cudaStreamLegacy
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuMemAttachGlobal cudaMemAttachGlobal
#define gpuMemcpyDefault cudaMemcpyDefault
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuHostAllocMapped cudaHostAllocMapped
#define gpuHostAllocPortable cudaHostAllocPortable
#define gpuHostAllocWriteCombined cudaHostAllocWriteCombined
#define gpuHostGetDevicePointer cudaHostGetDevicePointer
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDevice cudaGetDevice
#define gpuSetDevice cudaSetDevice
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuDriverGetVersion cudaDriverGetVersion
#define gpuGetLastError cudaGetLastError
#define gpuGetErrorString cudaGetErrorString
#define gpuMalloc cudaMalloc
#define gpuMallocHost cudaMallocHost
#define gpuMallocManaged cudaMallocManaged
#define gpuHostAlloc cudaHostAlloc
#define gpuFree cudaFree
#define gpuFreeHost cudaFreeHost
#define gpuMemcpy cudaMemcpy
#define gpuMemGetInfo cudaMemGetInfo
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamBeginCapture cudaStreamBeginCapture
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuStreamIsCapturing cudaStreamIsCapturing
#define gpuStreamCaptureStatusNone cudaStreamCaptureStatusNone
typedef enum cudaStreamCaptureStatus gpuStreamCaptureStatus;
typedef enum cudaStreamCaptureMode gpuStreamCaptureMode;
typedef cudaGraph_t gpuGraph_t;
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventRecord cudaEventRecord
#define gpuEventQuery cudaEventQuery
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventDestroy cudaEventDestroy
#define gpuFuncAttributes cudaFuncAttributes
#define gpuFuncGetAttributes cudaFuncGetAttributes
#define gpu_stream_device cudaStreamGetDevice
#endif

#endif /* RAP_GPU_RUNTIME_H */
