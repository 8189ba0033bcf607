/* test_cuda_ipc.c — memory across processes on a GPU: the two-process race detector. This process
 * allocates blocks of a ResourceAwarePool over DeviceVmm(export=posix) or StreamOrdered(pool=new,
 * export=posix) on its stream, a kernel
 * writes each block's tag, and it hands the descriptor to another process (ipc_cuda_peer.c), which
 * reads the block on its own stream after a random time and closes it there; this process runs
 * ahead, frees each block at once and allocates the next. A block reused before the importer's
 * work passed shows as foreign bytes in the importer's copies. CUDA only; skips without a device.
 * The protocol's host side is tested in CI by test_ipc.c (HostVmm); the StreamOrdered cases here
 * drive that file's importer (ipc_peer.c: import and close, no reads of device memory).
 */
#include "../c/ipc_driver.h"
#include "../c/rap_test.h"
#include "kernels.h"

#include <cuda_runtime_api.h>
#include <rap/cuda.h>
#include <rap/strategy.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool import_on_host;   /* the importer imports and closes with no resource */
static bool sleep_first;      /* the pool sleeps and wakes between the first export and its send */
static int import_second = -1; /* >= 0: the importer uses every other block on this device */

/* importer: the device of the importer's stream and kernels, or -1 for this process's current one
 * (the exporter's). */
static void race_on(const char *spec, int steps, size_t size, int importer) {
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
  char arg[32], dev[16], second[16];
  snprintf(arg, sizeof arg, "%zu", size);
  int device = importer;
  if (device < 0) RAP_CHECK(cudaGetDevice(&device) == cudaSuccess);
  snprintf(dev, sizeof dev, "%d", device);
  char path[4096];
  peer_path(path, sizeof path, "rap_ipc_cuda_peer", RAP_IPC_CUDA_PEER);
  snprintf(second, sizeof second, "%d", import_second);
  char *argv[] = {path, arg, dev, import_on_host ? "host" : "stream", import_second >= 0 ? second : NULL, NULL};
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
    if (sleep_first && k == 0) {   /* nothing imported yet: the pool sleeps */
      RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
      RAP_CHECK_OK(rap_allocator_wake(pool));
    }
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

static void race(const char *spec, int steps, size_t size) {
  import_on_host = false;   /* every entry sets the importer's modes (a failed case leaves them) */
  import_second = -1;
  sleep_first = false;
  race_on(spec, steps, size, -1);
}

/* A descriptor made before a sleep opens the woken memory: the mappings a block was exported from
 * are made again by the wake, and shared at once (the platform shares a mapping at its first
 * export, not as it grows), so the importer maps them as it would have before the sleep. */
RAP_TEST(CudaIpc, ADescriptorMadeBeforeASleepOpensTheWokenMemory) {
  import_on_host = false;
  import_second = -1;
  sleep_first = true;
  race_on("ResourceAwarePool(DeviceVmm(export=posix, reserve=8GiB), initial_size=4MiB, next_size=2MiB)",
          6, (size_t)4 << 20, -1);
  sleep_first = false;
}

RAP_TEST(CudaIpc, TwoProcessesOneGpuNoBlockReusedBeforeTheImporterPassed) {
  race("ResourceAwarePool(DeviceVmm(export=posix, reserve=8GiB), initial_size=4MiB, next_size=2MiB)", 24, (size_t)4 << 20);
}

RAP_TEST(CudaIpc, AutoExportFallsBackToPosixWhereFabricIsRefused) {
  race("ResourceAwarePool(DeviceVmm(export=auto, reserve=8GiB), initial_size=4MiB, next_size=2MiB)", 12, (size_t)1 << 20);
}

/* export=fabric: the importer maps each piece through its fabric handle (no descriptor of the
 * exporter's), the route that also crosses nodes; it needs an IMEX channel, and skips where the
 * driver refuses fabric memory (RAP_LOG_LEVEL=info in the importer says when it fell back to the
 * POSIX descriptor). */
RAP_TEST(CudaIpc, FabricExportWhereTheMachineMakesFabricMemory) {
  const char *spec = "ResourceAwarePool(DeviceVmm(export=fabric, reserve=8GiB), initial_size=4MiB, "
                     "next_size=2MiB)";
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *a = NULL;
  int st = rap_allocator_make_spec(rm, "probe", spec, &a);
  if (st != RAP_OK && st != RAP_ERR_UNSUPPORTED) {
    char why[512];
    snprintf(why, sizeof why, "%s", rap_last_error());
    RAP_CHECK_OK(rap_manager_destroy(rm));
    RAP_SKIP("fabric memory is refused here (no IMEX channel?): %s", why);
  }
  RAP_CHECK_OK(rap_manager_destroy(rm));
  race(spec, 12, (size_t)2 << 20);
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

/* ---- StreamOrdered(pool=new, export=posix): CUDA's pool IPC under the same protocol ------------ */

#define SO_POOL "ResourceAwarePool(StreamOrdered(pool=new, export=posix), initial_size=4MiB, next_size=2MiB)"
#define MIB ((size_t)1 << 20)

RAP_TEST(CudaIpc, StreamOrderedTwoProcessesOneGpuNoBlockReusedBeforeTheImporterPassed) {
  race(SO_POOL, 24, (size_t)4 << 20);
}

RAP_TEST(CudaIpc, StreamOrderedTwoProcessesOnTheSecondGpu) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    (void)cudaGetLastError();
    RAP_SKIP("needs two GPUs");
  }
  RAP_CHECK(cudaSetDevice(1) == cudaSuccess);
  race("ResourceAwarePool(StreamOrdered(device=1, pool=new, export=posix), initial_size=4MiB, "
       "next_size=2MiB)", 16, (size_t)2 << 20);
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
}

/* Across two GPUs: the exporter's pool on device pool_dev (platform, with options: StreamOrdered or
 * DeviceVmm), the importer's stream and kernels on device importer, which reads and writes the
 * memory over the peer link: the import gives the importer's device access (an imported pool, or
 * an imported mapping, is accessible from its memory's device only). on_host: each block is
 * imported and closed with no resource (the host's), by a thread whose current device is importer.
 * second >= 0: every other block is used on that device instead. */
static void across(const char *platform, const char *options, int pool_dev, int importer, bool on_host,
                   int second) {
  int n = 0, can = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    (void)cudaGetLastError();
    RAP_SKIP("needs two GPUs");
  }
  int far = second >= 0 ? second : importer;
  if (cudaDeviceCanAccessPeer(&can, far, pool_dev) != cudaSuccess || !can) {
    (void)cudaGetLastError();
    RAP_SKIP("device %d cannot access device %d's memory (no peer link)", far, pool_dev);
  }
  char spec[192];
  snprintf(spec, sizeof spec, "ResourceAwarePool(%s(device=%d, %s), initial_size=4MiB, next_size=2MiB)",
           platform, pool_dev, options);
  RAP_CHECK(cudaSetDevice(pool_dev) == cudaSuccess);
  import_on_host = on_host;
  import_second = second;
  sleep_first = false;
  race_on(spec, 16, (size_t)2 << 20, importer);
  import_on_host = false;
  import_second = -1;
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
}

static void across_gpus(const char *platform, const char *options, int pool_dev, int importer, bool on_host) {
  across(platform, options, pool_dev, importer, on_host, -1);
}

#define SO_OPTIONS "pool=new, export=posix"
RAP_TEST(CudaIpc, StreamOrderedImportedOnTheOtherGpu) { across_gpus("StreamOrdered", SO_OPTIONS, 1, 0, false); }
RAP_TEST(CudaIpc, StreamOrderedImportedOnTheOtherGpuMirrored) { across_gpus("StreamOrdered", SO_OPTIONS, 0, 1, false); }

/* Imported on the host by a process whose kernels run on the other device: the imported pool is
 * made accessible to the importing thread's current device. */
RAP_TEST(CudaIpc, StreamOrderedImportedOnTheHostOfTheOtherGpu) { across_gpus("StreamOrdered", SO_OPTIONS, 0, 1, true); }

/* DeviceVmm's mappings, likewise: each is mapped here with access for its memory's device and for
 * the importer's (its stream's, or the importing thread's current device); a mapping made for an
 * earlier block gives a later device access when a block in it is used there. */
#define VMM_OPTIONS "export=posix, reserve=8GiB"
RAP_TEST(CudaIpc, DeviceVmmImportedOnTheOtherGpu) { across_gpus("DeviceVmm", VMM_OPTIONS, 1, 0, false); }
RAP_TEST(CudaIpc, DeviceVmmImportedOnTheOtherGpuMirrored) { across_gpus("DeviceVmm", VMM_OPTIONS, 0, 1, false); }
RAP_TEST(CudaIpc, DeviceVmmImportedOnTheHostOfTheOtherGpu) { across_gpus("DeviceVmm", VMM_OPTIONS, 0, 1, true); }

/* One importer on both devices: the even blocks on the memory's device 0 (a mapping made for one
 * gives device 0 alone access), every odd block on device 1, most in a mapping made already. */
RAP_TEST(CudaIpc, DeviceVmmImportedOnBothGpus) { across("DeviceVmm", VMM_OPTIONS, 0, 0, false, 1); }
RAP_TEST(CudaIpc, DeviceVmmImportedOnTheHostOfBothGpus) { across("DeviceVmm", VMM_OPTIONS, 0, 0, true, 1); }

/* Two blocks of one chunk (one allocation of CUDA's pool, imported once by the peer): each freed
 * block stays pending until the peer closed it, and the last close gives the imported allocation
 * back before the exporter's pool can; an importer that ends without closing gives its blocks
 * back at the next poll. */
RAP_TEST(CudaIpc, StreamOrderedFreeWaitsForTheImportersClose) {
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *pool = make_or_skip(rm, "so", SO_POOL);
  void *a = NULL, *b = NULL, *c = NULL, *x = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &a, MIB, NULL));
  RAP_CHECK_OK(rap_allocate(pool, &b, MIB, NULL));
  rap_ipc_desc da, db, dc;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &da));
  RAP_CHECK_OK(rap_ipc_export(pool, b, &db));
  peer p;
  peer_start(&p);
  unsigned long long ia = import(&p, &da, "host"), ib = import(&p, &db, "host");
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK(pending_after_poll(pool) >= MIB);
  RAP_CHECK_OK(rap_allocate(pool, &x, MIB, NULL));
  RAP_CHECK(x != a);   /* never handed out again meanwhile */
  PEER_OK(&p, "close %llu host", ia);
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK(pending_after_poll(pool) >= MIB);
  PEER_OK(&p, "close %llu host", ib);   /* the last of its allocation: freed there first */
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  /* The same allocation imported again after the peer gave it back. */
  RAP_CHECK_OK(rap_allocate(pool, &c, MIB, NULL));
  RAP_CHECK_OK(rap_ipc_export(pool, c, &dc));
  (void)import(&p, &dc, "host");
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK(pending_after_poll(pool) >= MIB);
  peer_end(&p, false);   /* ends without closing: its context, and its import, went with it */
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  RAP_CHECK_OK(rap_deallocate(pool, x, NULL));
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(CudaIpcBadInput, StreamOrderedRefusesWhatCannotCross) {
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *pool = make_or_skip(rm, "so", SO_POOL);
  void *a = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &a, MIB, NULL));
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
  rap_stats before = stats(pool);
  peer p;
  peer_start(&p);
  char h[129];
  rap_ipc_desc t = d;   /* truncated */
  memset(t.bytes + 40, 0, 24);
  hex(&t, h);
  PEER_ERR(&p, "RAP_ERR_INVALID", "check does not match", "import %s host", h);
  rap_ipc_desc f = d;   /* forged: another offset, the check made to match */
  uint64_t off, check;
  memcpy(&off, f.bytes + 32, 8);
  off += 4096;
  memcpy(f.bytes + 32, &off, 8);
  check = fnv(f.bytes, 48);
  memcpy(f.bytes + 48, &check, 8);
  hex(&f, h);
  PEER_ERR(&p, "RAP_ERR_INVALID", "forged", "import %s host", h);
  void *q = NULL;   /* this process */
  RAP_CHECK_STATUS(rap_ipc_import(rm, &d, NULL, &q), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "exported by this process");
  hex(&d, h);   /* a CPU queue cannot order a device free */
  PEER_ERR(&p, "RAP_ERR_INVALID", "CUDA stream or on the host", "import %s async", h);
  unsigned long long i = import(&p, &d, "host");
  PEER_ERR(&p, "RAP_ERR_BUSY", "imported already", "import %s host", h);
  PEER_OK(&p, "close %llu host", i);
  PEER_ERR(&p, "RAP_ERR_UNKNOWN_POINTER", "closed already", "close %llu host", i);
  same_stats(before, stats(pool));
  /* Revoked before anyone imported it. */
  void *r = NULL;
  rap_ipc_desc dr;
  RAP_CHECK_OK(rap_allocate(pool, &r, MIB, NULL));
  RAP_CHECK_OK(rap_ipc_export(pool, r, &dr));
  RAP_CHECK_OK(rap_ipc_revoke(pool, &dr));
  hex(&dr, h);
  PEER_ERR(&p, "RAP_ERR_NOT_FOUND", "revoked", "import %s host", h);
  RAP_CHECK_OK(rap_deallocate(pool, r, NULL));
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  /* StreamOrdered itself, and a pool made without export=. */
  rap_allocator *platform = rap_allocator_parent(pool), *plain = NULL;
  void *y = NULL, *z = NULL;
  RAP_CHECK_OK(rap_allocate(platform, &y, MIB, NULL));
  RAP_CHECK_STATUS(rap_ipc_export(platform, y, &d), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "ResourceAwarePool over it");
  RAP_CHECK_OK(rap_deallocate(platform, y, NULL));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "plain", "ResourceAwarePool(StreamOrdered(pool=new))", &plain));
  RAP_CHECK_OK(rap_allocate(plain, &z, MIB, NULL));
  RAP_CHECK_STATUS(rap_ipc_export(plain, z, &d), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "pool=new, export=posix");
  RAP_CHECK_OK(rap_deallocate(plain, z, NULL));
  rap_allocator *bad = NULL;
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "bad", "StreamOrdered(export=posix)", &bad), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "needs pool=new");
  /* A destroyed pool. */
  rap_allocator *gone = make_or_skip(rm, "gone", SO_POOL);
  void *g = NULL;
  rap_ipc_desc dg;
  RAP_CHECK_OK(rap_allocate(gone, &g, MIB, NULL));
  RAP_CHECK_OK(rap_ipc_export(gone, g, &dg));
  RAP_CHECK_OK(rap_deallocate(gone, g, NULL));
  rap_allocator *gone_platform = rap_allocator_parent(gone);
  RAP_CHECK_OK(rap_allocator_destroy(gone));
  RAP_CHECK_OK(rap_allocator_destroy(gone_platform));
  hex(&dg, h);
  PEER_ERR(&p, "RAP_ERR_NOT_FOUND", "", "import %s host", h);
  peer_end(&p, true);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* CUDA's pool IPC ends the importing process inside the driver on allocations above about 5 GiB
 * (driver 580): a StreamOrdered pool exports from allocations of at most 4 GiB — the largest
 * imports in another process and is closed there — and refuses a block of a larger one, its pool
 * unchanged. */
RAP_TEST(CudaIpcBadInput, StreamOrderedExportsAllocationsOfAtMostFourGiB) {
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess || free_bytes < ((size_t)12 << 30))
    RAP_SKIP("needs a GPU with 12 GiB free");
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *four = make_or_skip(rm, "four", "ResourceAwarePool(StreamOrdered(pool=new, export=posix), "
                                                  "initial_size=4GiB, next_size=2MiB)");
  rap_allocator *six = make_or_skip(rm, "six", "ResourceAwarePool(StreamOrdered(pool=new, export=posix), "
                                                 "initial_size=6GiB, next_size=2MiB)");
  void *a = NULL, *b = NULL;
  RAP_CHECK_OK(rap_allocate(four, &a, MIB, NULL));
  RAP_CHECK_OK(rap_allocate(six, &b, MIB, NULL));
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(four, a, &d));
  peer p;
  peer_start(&p);
  PEER_OK(&p, "close %llu host", import(&p, &d, "host"));
  peer_end(&p, true);
  rap_stats before = stats(six);
  RAP_CHECK_STATUS(rap_ipc_export(six, b, &d), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "at most 4 GiB");
  same_stats(before, stats(six));
  RAP_CHECK_OK(rap_deallocate(four, a, NULL));
  RAP_CHECK_OK(rap_deallocate(six, b, NULL));
  RAP_CHECK_EQ(pending_after_poll(four), 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
