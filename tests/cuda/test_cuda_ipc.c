/* test_cuda_ipc.c — memory across processes on a GPU: the two-process race detector. This process
 * allocates blocks of a ResourceAwarePool over DeviceVmm(export=posix) on its stream, a kernel
 * writes each block's tag, and it hands the descriptor to another process (ipc_cuda_peer.c), which
 * reads the block on its own stream after a random time and closes it there; this process runs
 * ahead, frees each block at once and allocates the next. A block reused before the importer's
 * work passed shows as foreign bytes in the importer's copies. CUDA only; skips without a device.
 * The protocol's host side is tested in CI by test_ipc.c (HostVmm).
 */
#include "../c/rap_test.h"
#include "../c/shared_helpers.h"
#include "kernels.h"

#include <cuda_runtime_api.h>
#include <rap/cuda.h>
#include <rap/strategy.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void race(const char *spec, int steps, size_t size) {
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *pool = make_or_skip(rm, "exporter", spec);
  rap_resource *r = NULL;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r));
  cudaStream_t s = rap_resource_cuda_stream(r);
  int in[2], out[2];
  RAP_CHECK(pipe(in) == 0 && pipe(out) == 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  char arg[32], dev[16];
  snprintf(arg, sizeof arg, "%zu", size);
  int device = 0;
  RAP_CHECK(cudaGetDevice(&device) == cudaSuccess);
  snprintf(dev, sizeof dev, "%d", device);
  char path[4096];
  peer_path(path, sizeof path, "rap_ipc_cuda_peer", RAP_IPC_CUDA_PEER);
  char *argv[] = {path, arg, dev, NULL};
  pid_t pid;
  RAP_CHECK(posix_spawn(&pid, path, &fa, NULL, argv, environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  for (int k = 0; k < steps; k++) {
    void *p = NULL;
    int tag = 1 + k % 250;
    RAP_CHECK_OK(rap_allocate(pool, &p, size, r));
    RAP_CHECK(gpu_fill(s, p, size, tag) == 0);
    /* The importer's stream does not wait for this one: the tag must be there when it reads. */
    RAP_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    rap_ipc_desc d;
    RAP_CHECK_OK(rap_ipc_export(pool, p, &d));
    RAP_CHECK(write(in[1], &d, sizeof d) == (ssize_t)sizeof d && write(in[1], &tag, sizeof tag) == 4);
    RAP_CHECK_OK(rap_deallocate(pool, p, r));   /* runs ahead: the next step may want it */
  }
  close(in[1]);
  char line[512] = "";
  FILE *f = fdopen(out[0], "r");
  RAP_CHECK(f != NULL && fgets(line, sizeof line, f) != NULL);
  fclose(f);
  int status = 0;
  RAP_CHECK(waitpid(pid, &status, 0) == pid);
  RAP_CHECK_STR(line, "foreign 0 of");   /* the importer's answer, or its error */
  RAP_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  rap_stats a;
  RAP_CHECK_OK(rap_allocator_stats(pool, &a));
  /* The exporter held at most twice what was in flight (every block until its close passed). */
  RAP_CHECK(a.actual_high_watermark <= 2 * (size_t)steps * size + ((size_t)2 << 20));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_OK(rap_allocator_stats(pool, &a));
  RAP_CHECK_EQ(a.pending_bytes, 0);   /* every close passed, or the importer has ended */
  RAP_CHECK_OK(rap_resource_destroy(r));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(CudaIpc, TwoProcessesOneGpuNoBlockReusedBeforeTheImporterPassed) {
  race("ResourceAwarePool(DeviceVmm(export=posix, reserve=8GiB), initial_size=4MiB, next_size=2MiB)", 24, (size_t)4 << 20);
}

RAP_TEST(CudaIpc, AutoExportFallsBackToPosixWhereFabricIsRefused) {
  race("ResourceAwarePool(DeviceVmm(export=auto, reserve=8GiB), initial_size=4MiB, next_size=2MiB)", 12, (size_t)1 << 20);
}

/* Two GPUs: the exporter's memory on device 1, read by the importer through its own mapping. */
RAP_TEST(CudaIpc, TwoProcessesOnTheSecondGpu) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    (void)cudaGetLastError();
    RAP_SKIP("needs two GPUs");
  }
  /* The exporter's stream and kernels are device 1's, as its memory. */
  RAP_CHECK(cudaSetDevice(1) == cudaSuccess);
  race("ResourceAwarePool(DeviceVmm(device=1, export=posix, reserve=8GiB), initial_size=4MiB, next_size=2MiB)", 16, (size_t)2 << 20);
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
}

RAP_TEST(CudaIpc, ExportedMemoryIsWhatNcclRegisters) {
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *pool = make_or_skip(rm, "nccl", "ResourceAwarePool(DeviceVmm(export=posix, "
                                     "granularity=64KiB, reserve=4GiB))");
  /* granularity= below the recommended one is raised to it. */
  RAP_CHECK(rap_allocator_alignment(rap_allocator_parent(pool)) >= ((size_t)2 << 20));
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &p, 1 << 20, NULL));
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(pool, p, &d));
  void *q = NULL;
  RAP_CHECK_STATUS(rap_ipc_import(rm, &d, NULL, &q), RAP_ERR_INVALID);   /* this process */
  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
