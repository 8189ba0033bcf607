/* test_cuda_sleep.c — sleep and wake of a ResourceAwarePool over DEVICE_VMM on a real GPU: kernels'
 * bytes survive at the same addresses, the device's free memory (cudaMemGetInfo) rises by what the
 * pool held while asleep, sleep waits for a kernel still running on the stream that used a block
 * (its event, opened from another thread once the pool refuses calls), discard mode, a pool over
 * plain DEVICE refuses, and a wake the device refuses stays asleep and can be retried. Every test
 * skips, saying why, where no device is usable; tests/c/test_sleep.c runs the logic over HOST_VMM.
 */
#include "../c/rap_test.h"
#include "../c/shared_helpers.h"
#include "kernels.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <rap/cuda.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rapi_vmm_fail_map_at(long nth);   /* platforms/vmm.c: a map refused, as by another process */

#define MiB ((size_t)1 << 20)

static size_t device_free(void) {
  size_t f = 0, t = 0;
  RAP_CHECK(cudaMemGetInfo(&f, &t) == cudaSuccess);
  return f;
}

static size_t mapped(rap_allocator *platform) {
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(platform, &s));
  return s.actual_bytes;
}

static void backup_keeps_bytes(const char *spec) {
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *pool = make_or_skip(rm, "pool", spec);
  rap_allocator *vmm = rap_allocator_parent(pool);
  rap_resource *r = NULL;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r));
  cudaStream_t s = rap_resource_cuda_stream(r);
  size_t sizes[] = {1000, 5 * MiB + 3, 40 * MiB, 256, 300 * MiB};
  enum { N = sizeof sizes / sizeof sizes[0] };
  void *p[N];
  for (int i = 0; i < N; i++) {
    RAP_CHECK_OK(rap_allocate(pool, &p[i], sizes[i], r));
    RAP_CHECK(gpu_fill(s, p[i], sizes[i], 0x30 + i) == 0);   /* queued: sleep waits for them */
  }
  size_t held = mapped(vmm), before = device_free();
  for (int cycle = 0; cycle < 2; cycle++) {
    RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
    RAP_CHECK_EQ(mapped(vmm), 0);
    size_t asleep = device_free();
    RAP_CHECK(asleep >= before + held / 100 * 99);   /* at least 99 % of it went back */
    RAP_CHECK_OK(rap_allocator_wake(pool));
    for (int i = 0; i < N; i++) RAP_CHECK(gpu_all_bytes(p[i], sizes[i], 0x30 + i));
  }
  RAP_CHECK(gpu_fill(s, p[2], sizes[2], 0x77) == 0);   /* the same pointers take kernels' writes */
  RAP_CHECK_OK(rap_resource_synchronize(r));
  RAP_CHECK(gpu_all_bytes(p[2], sizes[2], 0x77));
  for (int i = 0; i < N; i++) RAP_CHECK_OK(rap_deallocate(pool, p[i], r));
  RAP_CHECK_OK(rap_resource_destroy(r));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(CudaSleep, BackupKeepsKernelsBytesAndGivesTheMemoryBack) {
  backup_keeps_bytes("ResourceAwarePool(DEVICE_VMM, initial_size=64MiB)");
}

/* The same over a platform made to export (no other process maps it: sleep is allowed). */
RAP_TEST(CudaSleep, AnExportingPlatformSleepsWhenNoOtherProcessMapsIt) {
  backup_keeps_bytes("ResourceAwarePool(DeviceVmm(export=posix), initial_size=64MiB)");
}

typedef struct prober {
  rap_allocator *top;
  gpu_gate *g;
} prober;

static void *probe_then_open(void *arg) {
  prober *pr = arg;
  int unknown = 0;
  while (rap_deallocate(pr->top, &unknown, NULL) != RAP_ERR_BUSY) sched_yield();
  gpu_gate_open(pr->g);
  return NULL;
}

RAP_TEST(CudaSleep, WaitsForTheStreamsKernelNotTheDevice) {
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *top = make_or_skip(rm, "ts", "ThreadSafe(ResourceAwarePool(DEVICE_VMM, "
                                              "initial_size=8MiB))");
  rap_resource *r = NULL;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r));
  gpu_gate *g = NULL;
  RAP_CHECK(gpu_gate_create(&g) == 0);
  void *live = NULL, *gone = NULL;
  RAP_CHECK_OK(rap_allocate(top, &live, 4 * MiB, r));
  RAP_CHECK_OK(rap_allocate(top, &gone, 2 * MiB, r));
  RAP_CHECK(gpu_fill(rap_resource_cuda_stream(r), live, 4 * MiB, 0x11) == 0);
  RAP_CHECK(gpu_gated_fill(rap_resource_cuda_stream(r), g, live, 4 * MiB, 0x5a) == 0);
  RAP_CHECK_OK(rap_deallocate(top, gone, r));   /* pending on the busy stream */
  prober pr = {top, g};
  pthread_t t;
  RAP_CHECK(pthread_create(&t, NULL, probe_then_open, &pr) == 0);
  RAP_CHECK_OK(rap_allocator_sleep(top, RAP_SLEEP_BACKUP));
  pthread_join(t, NULL);
  RAP_CHECK_OK(rap_allocator_wake(top));
  RAP_CHECK(gpu_all_bytes(live, 4 * MiB, 0x5a));   /* the gated kernel's bytes were backed up */
  RAP_CHECK_OK(rap_deallocate(top, live, r));
  gpu_gate_destroy(g);
  RAP_CHECK_OK(rap_resource_destroy(r));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(CudaSleep, DiscardAndRefusals) {
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *pool = make_or_skip(rm, "pool", "ResourceAwarePool(DEVICE_VMM, initial_size=32MiB)");
  rap_allocator *vmm = rap_allocator_parent(pool);
  rap_resource *r = NULL;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r));
  void *a = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &a, 20 * MiB, r));
  RAP_CHECK(gpu_fill(rap_resource_cuda_stream(r), a, 20 * MiB, 1) == 0);
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_DISCARD));
  RAP_CHECK_EQ(mapped(vmm), 0);
  RAP_CHECK_OK(rap_allocator_wake(pool));
  RAP_CHECK(gpu_fill(rap_resource_cuda_stream(r), a, 20 * MiB, 2) == 0);
  RAP_CHECK_OK(rap_resource_synchronize(r));
  RAP_CHECK(gpu_all_bytes(a, 20 * MiB, 2));
  /* The device refuses memory at wake: the pool stays asleep, its backup kept; a retry works. */
  RAP_CHECK(gpu_fill(rap_resource_cuda_stream(r), a, 20 * MiB, 3) == 0);
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  rapi_vmm_fail_map_at(1);
  int st = rap_allocator_wake(pool);
  rapi_vmm_fail_map_at(0);
  RAP_CHECK_STATUS(st, RAP_ERR_NOMEM);
  RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 1);
  RAP_CHECK_EQ(mapped(vmm), 0);
  RAP_CHECK_OK(rap_allocator_wake(pool));
  RAP_CHECK(gpu_all_bytes(a, 20 * MiB, 3));
  RAP_CHECK_OK(rap_deallocate(pool, a, r));
  /* Plain DEVICE cannot unmap and keep addresses. */
  rap_allocator *plain = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "plain", "ResourceAwarePool(DEVICE)", &plain));
  RAP_CHECK_STATUS(rap_allocator_sleep(plain, RAP_SLEEP_BACKUP), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "growable platform");
  RAP_CHECK_OK(rap_resource_destroy(r));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Bytes that differ everywhere, so that a run copied to the wrong place shows. */
static void pattern(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 29 + i * 7 + (i >> 12));
}

/* Runs that cross the ring's slots and lie apart (freed blocks between them), with no thread
 * (RAP_SLEEP_THREADS=0: the caller copies alone), three and the default: the unprepared sleep
 * copies through the pinned ring into a pageable backup; the backup and the ring are counted; a
 * prepared (pinned) backup still serves; RAP_SLEEP_RELEASE gives the backup back. */
RAP_TEST(CudaSleep, TheStagedBackupKeepsEveryByteInItsPlace) {
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *pool = make_or_skip(rm, "pool", "ResourceAwarePool(DEVICE_VMM, initial_size=64MiB)");
  rap_allocator *vmm = rap_allocator_parent(pool);
  size_t sizes[] = {3 * MiB + 5, 1 * MiB, 19 * MiB + 4097, 2 * MiB, 777, 1 * MiB, 33 * MiB};
  enum { N = sizeof sizes / sizeof sizes[0] };
  void *p[N];
  size_t live = 0;
  unsigned char *want = malloc(64 * MiB), *got = malloc(64 * MiB);
  RAP_CHECK(want != NULL && got != NULL);
  for (int i = 0; i < N; i++) RAP_CHECK_OK(rap_allocate(pool, &p[i], sizes[i], NULL));
  for (int i = 1; i < N; i += 2) RAP_CHECK_OK(rap_deallocate(pool, p[i], NULL));   /* gaps */
  for (int i = 0; i < N; i += 2) {
    pattern(want, sizes[i], (unsigned)i);
    RAP_CHECK(cudaMemcpy(p[i], want, sizes[i], cudaMemcpyHostToDevice) == cudaSuccess);
    live += sizes[i];
  }
  static const char *threads[] = {"0", "3", NULL, "prepare"};
  for (int t = 0; t < 4; t++) {
    if (t == 3) {
      RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_PREPARE));   /* pinned from here */
    } else if (threads[t] != NULL) {
      setenv("RAP_SLEEP_THREADS", threads[t], 1);
    } else {
      unsetenv("RAP_SLEEP_THREADS");
    }
    RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
    RAP_CHECK_EQ(mapped(vmm), 0);
    rap_stats ps, vs;
    RAP_CHECK_OK(rap_allocator_stats(pool, &ps));
    RAP_CHECK_OK(rap_allocator_stats(vmm, &vs));
    RAP_CHECK(ps.backup_bytes >= live);
    RAP_CHECK(vs.backup_bytes > 0);   /* the ring, made at the first sleep and kept */
    RAP_CHECK_OK(rap_allocator_wake(pool));
    for (int i = 0; i < N; i += 2) {
      pattern(want, sizes[i], (unsigned)i);
      RAP_CHECK(cudaMemcpy(got, p[i], sizes[i], cudaMemcpyDeviceToHost) == cudaSuccess);
      RAP_CHECK(memcmp(got, want, sizes[i]) == 0);
    }
    if (t == 1) {   /* given back, and made again by the next sleep */
      RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_RELEASE));
      RAP_CHECK_OK(rap_allocator_stats(pool, &ps));
      RAP_CHECK_EQ(ps.backup_bytes, 0);
    }
  }
  unsetenv("RAP_SLEEP_THREADS");
  for (int i = 0; i < N; i += 2) RAP_CHECK_OK(rap_deallocate(pool, p[i], NULL));
  free(want);
  free(got);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
