/* test_cuda_vmm.c — DEVICE_VMM on a real GPU: kernels write and read blocks across a chunk's
 * growth in place, rap_release unmaps the free tail (the device's free memory rises), and a
 * ResourceAwarePool over it keeps a block pending on a busy stream from another stream. CUDA
 * only; every test skips, saying why, where no device is usable. The engine's logic is tested on
 * the host too (tests/c/test_vmm.c, HOST_VMM).
 */
#include "../c/rap_test.h"
#include "../c/shared_helpers.h"
#include "kernels.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <rap/cuda.h>
#include <rap/strategy.h>   /* rap_allocator_alignment: the granularity */
#include <stdio.h>
#include <string.h>

#define MiB ((size_t)1 << 20)

static rap_manager *manager(void) {
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  return rm;
}

static rap_stats stats(rap_allocator *a) {
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(a, &s));
  return s;
}

RAP_TEST(CudaVmm, KernelsWriteAndReadAcrossAGrow) {
  rap_manager *rm = manager();
  rap_allocator *pool = make_or_skip(rm, "pool", "QuickPool(DEVICE_VMM, initial_size=2MiB, "
                                                 "next_size=2MiB, heuristic=never)");
  rap_allocator *vmm = rap_allocator_parent(pool);
  size_t g = rap_allocator_alignment(vmm);   /* the recommended granularity */
  RAP_CHECK(g >= MiB);
  rap_resource *r = NULL;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r));
  cudaStream_t s = rap_resource_cuda_stream(r);
  char *a, *b, *c, *d;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&a, g / 2, r));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&b, g / 2, r));   /* the first chunk is full */
  RAP_CHECK_OK(rap_allocate(pool, (void **)&c, 2 * g, r));   /* mapped after it */
  RAP_CHECK(b == a + g / 2 && c == b + g / 2);
  RAP_CHECK_EQ(stats(pool).chunk_count, 1);
  RAP_CHECK(gpu_fill(s, a, g / 2, 0xA1) == 0);
  RAP_CHECK(gpu_fill(s, b, g / 2, 0xB2) == 0);
  RAP_CHECK(gpu_fill(s, c, 2 * g, 0xC3) == 0);
  RAP_CHECK_OK(rap_resource_synchronize(r));
  RAP_CHECK(gpu_all_bytes(a, g / 2, 0xA1) && gpu_all_bytes(b, g / 2, 0xB2));
  RAP_CHECK(gpu_all_bytes(c, 2 * g, 0xC3));
  /* Freed, b and c are one free block across the old end: a kernel uses it whole. */
  RAP_CHECK_OK(rap_deallocate(pool, b, r));
  RAP_CHECK_OK(rap_deallocate(pool, c, r));
  size_t held = stats(pool).actual_bytes;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&d, g / 2 + 2 * g, r));
  RAP_CHECK(d == b);
  RAP_CHECK_EQ(stats(pool).actual_bytes, held);
  RAP_CHECK(gpu_fill(s, d, g / 2 + 2 * g, 0xD4) == 0);
  void *dev = NULL;
  RAP_CHECK(cudaMalloc(&dev, g / 2 + 2 * g) == cudaSuccess);
  RAP_CHECK(gpu_copy(s, dev, d, g / 2 + 2 * g) == 0);   /* a kernel reads it back */
  RAP_CHECK_OK(rap_resource_synchronize(r));
  RAP_CHECK(gpu_all_bytes(dev, g / 2 + 2 * g, 0xD4));
  RAP_CHECK(gpu_all_bytes(a, g / 2, 0xA1));
  RAP_CHECK(cudaFree(dev) == cudaSuccess);
  void *dp = NULL;
  RAP_CHECK_OK(rap_device_pointer(pool, d, &dp));
  RAP_CHECK(dp == d);
  RAP_CHECK_OK(rap_deallocate(pool, d, r));
  RAP_CHECK_OK(rap_deallocate(pool, a, r));
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_resource_destroy(r));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(CudaVmm, ReleaseUnmapsTheFreeTail) {
  rap_manager *rm = manager();
  rap_allocator *pool = make_or_skip(rm, "pool", "QuickPool(DEVICE_VMM, initial_size=2MiB, "
                                                 "heuristic=never)");
  rap_allocator *vmm = rap_allocator_parent(pool);
  size_t g = rap_allocator_alignment(vmm);
  char *a, *b;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&a, g, NULL));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&b, 256 * MiB, NULL));
  RAP_CHECK(b == a + g);
  RAP_CHECK(gpu_fill(0, a, g, 0x3C) == 0);
  RAP_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  size_t free_before = 0, free_after = 0, total = 0;
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  RAP_CHECK_EQ(stats(pool).actual_bytes, g);
  RAP_CHECK_EQ(stats(vmm).actual_bytes, g);
  RAP_CHECK(free_after >= free_before + 128 * MiB);   /* the device has the pages back */
  RAP_CHECK(gpu_all_bytes(a, g, 0x3C));             /* and what stays mapped is intact */
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* The default's release gives back the mappings inside free blocks, not only the free tail. A
 * block whose kernel (held by a gate) still writes it after its free is pending, so it stays
 * mapped at a release; once the stream passed, the next release unmaps it, the device has the
 * memory back, and a block taken there again is mapped again: kernels write and read it. */
RAP_TEST(CudaVmm, TheDefaultsReleaseGivesBackTheInsideOnceTheStreamPassed) {
  rap_manager *rm = manager();
  char spec[512];
  default_spec_on_0(spec, sizeof spec, "%s");
  rap_allocator *pool = make_or_skip(rm, "pool", spec);
  rap_allocator *vmm = rap_allocator_parent(pool);
  rap_resource *r = NULL;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r));
  cudaStream_t s = rap_resource_cuda_stream(r);
  gpu_gate *gate = NULL;
  RAP_CHECK(gpu_gate_create(&gate) == 0);
  char *a, *b, *c, *e;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&a, 64 * MiB, r));    /* the first mapping */
  RAP_CHECK_OK(rap_allocate(pool, (void **)&b, 256 * MiB, r));   /* grown in place: a second */
  RAP_CHECK_OK(rap_allocate(pool, (void **)&c, 32 * MiB, r));    /* and a third, at the top */
  RAP_CHECK(b == a + 64 * MiB && c == b + 256 * MiB);
  RAP_CHECK(gpu_fill(s, c, 32 * MiB, 0x3C) == 0);
  RAP_CHECK(gpu_gated_fill(s, gate, b, 256 * MiB, 0x11) == 0);
  RAP_CHECK_OK(rap_deallocate(pool, a, r));
  RAP_CHECK_OK(rap_deallocate(pool, b, r));
  RAP_CHECK_OK(rap_release(pool));   /* pending behind the gated kernel: nothing goes */
  RAP_CHECK_EQ(stats(vmm).actual_bytes, 352 * MiB);
  RAP_CHECK_OK(rap_allocator_check(pool));
  gpu_gate_open(gate);
  RAP_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  size_t free_before = 0, free_after = 0, total = 0;
  RAP_CHECK(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  RAP_CHECK_EQ(stats(pool).actual_bytes, 32 * MiB);
  RAP_CHECK_EQ(stats(vmm).actual_bytes, 32 * MiB);
  RAP_CHECK(free_after >= free_before + 256 * MiB);   /* the device has the pages back */
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&e, 300 * MiB, r));
  RAP_CHECK(e == a);
  RAP_CHECK_EQ(stats(vmm).actual_bytes, 352 * MiB);
  RAP_CHECK(gpu_fill(s, e, 300 * MiB, 0x22) == 0);
  RAP_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  RAP_CHECK(gpu_all_bytes(e, 300 * MiB, 0x22));
  RAP_CHECK(gpu_all_bytes(c, 32 * MiB, 0x3C));
  RAP_CHECK_OK(rap_deallocate(pool, e, r));
  RAP_CHECK_OK(rap_deallocate(pool, c, r));
  RAP_CHECK_OK(rap_allocator_check(pool));
  gpu_gate_destroy(gate);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* r1's kernel, held by a gate, still writes its block after the free: r2 must not be given it,
 * though it lies across the old end of the chunk, and r2's own block keeps r2's bytes. */
RAP_TEST(CudaVmm, ResourceAwarePoolKeepsAStreamsBlockAcrossTheOldEnd) {
  rap_manager *rm = manager();
  rap_allocator *pool = make_or_skip(rm, "rap", "ResourceAwarePool(DEVICE_VMM, initial_size=2MiB, "
                                                "next_size=2MiB, heuristic=never)");
  size_t g = rap_allocator_alignment(rap_allocator_parent(pool));
  rap_resource *r1 = NULL, *r2 = NULL;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r1));
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r2));
  gpu_gate *gate = NULL;
  RAP_CHECK(gpu_gate_create(&gate) == 0);
  char *a, *b, *c, *d;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&a, g / 2, r1));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&b, g / 2, r1));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&c, g, r1));   /* grown in place */
  RAP_CHECK(c == b + g / 2);
  RAP_CHECK(gpu_gated_fill(rap_resource_cuda_stream(r1), gate, b, g / 2 + g, 0x11) == 0);
  RAP_CHECK_OK(rap_deallocate(pool, b, r1));
  RAP_CHECK_OK(rap_deallocate(pool, c, r1));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&d, g / 2 + g, r2));
  RAP_CHECK(d != b);
  RAP_CHECK(gpu_fill(rap_resource_cuda_stream(r2), d, g / 2 + g, 0x22) == 0);
  RAP_CHECK_OK(rap_resource_synchronize(r2));
  gpu_gate_open(gate);
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  RAP_CHECK(gpu_all_bytes(d, g / 2 + g, 0x22));
  RAP_CHECK_OK(rap_release(pool));   /* polls: r1's block is free, and the tail goes back */
  rap_stats s = stats(pool);
  RAP_CHECK_EQ(s.pending_bytes, 0);
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_deallocate(pool, d, r2));
  RAP_CHECK_OK(rap_deallocate(pool, a, r1));
  gpu_gate_destroy(gate);
  RAP_CHECK_OK(rap_resource_destroy(r1));
  RAP_CHECK_OK(rap_resource_destroy(r2));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

typedef struct grow_job {
  rap_allocator *pool;
  void *p;
  int st;
} grow_job;

static void *grow_on_thread(void *arg) {
  grow_job *j = arg;
  j->st = rap_allocate(j->pool, &j->p, 64 * MiB, NULL);   /* this thread's first CUDA call */
  return NULL;
}

/* The driver's calls need a current context, which a thread that has made no runtime call yet
 * lacks: a miss on such a thread maps all the same. */
RAP_TEST(CudaVmm, GrowsFromAFreshThread) {
  rap_manager *rm = manager();
  rap_allocator *pool = make_or_skip(rm, "pool", "QuickPool(DEVICE_VMM, initial_size=2MiB, heuristic=never)");
  void *first = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &first, 2 * MiB, NULL));
  grow_job j = {pool, NULL, RAP_ERR_CORRUPT};
  pthread_t t;
  RAP_CHECK(pthread_create(&t, NULL, grow_on_thread, &j) == 0);
  RAP_CHECK(pthread_join(t, NULL) == 0);
  RAP_CHECK_OK(j.st);
  RAP_CHECK(j.p == (char *)first + 2 * MiB);
  RAP_CHECK(gpu_fill(0, j.p, 64 * MiB, 0x5A) == 0);
  RAP_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  RAP_CHECK(gpu_all_bytes(j.p, 64 * MiB, 0x5A));
  RAP_CHECK_OK(rap_deallocate(pool, j.p, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, first, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(CudaVmm, OptionsReserveAndNames) {
  rap_manager *rm = manager();
  rap_allocator *small = make_or_skip(rm, "small", "DeviceVmm(reserve=8MiB)");
  size_t g = rap_allocator_alignment(small);
  void *p = NULL, *q = NULL;
  RAP_CHECK_OK(rap_allocate(small, &p, 8 * MiB, NULL));
  RAP_CHECK_STATUS(rap_allocate(small, &q, 1, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "reserved range");
  RAP_CHECK_OK(rap_deallocate(small, p, NULL));
  rap_allocator *bad = NULL;
  char spec[96];
  snprintf(spec, sizeof spec, "DeviceVmm(granularity=%zu)", g + g / 2);
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "bad", spec, &bad), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'granularity'");
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "bad", "DeviceVmm(reserve=18446744073709551615)", &bad),
                   RAP_ERR_INVALID);   /* the largest size is used, and refused: not the default */
  RAP_CHECK_STR(rap_last_error(), "'reserve' must be between 1 byte and 64PiB");
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "bad", "DeviceVmm(granularity=18446744073709551615)", &bad),
                   RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'granularity' must be a power of two");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "bad", "DeviceVmm", NULL, "granularity=", &bad), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "option 'granularity' needs a size");
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "bad", "DeviceVmm(peers=x)", &bad), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "bad", "DeviceVmm(peers=4000)", &bad), RAP_ERR_NOT_FOUND);
  snprintf(spec, sizeof spec, "DeviceVmm(granularity=%zu, reserve=64MiB)", 2 * g);
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "big", spec, &bad));
  RAP_CHECK_EQ(rap_allocator_alignment(bad), 2 * g);
  rap_allocator *named = NULL;
  RAP_CHECK_OK(rap_allocator_get(rm, "DEVICE_VMM::0", &named));
  size_t free_bytes = 0, total = 0;
  RAP_CHECK_OK(rap_allocator_memory_info(named, &free_bytes, &total));
  RAP_CHECK(total > 0 && free_bytes <= total);
  int count = 0;
  RAP_CHECK(cudaGetDeviceCount(&count) == cudaSuccess);
  RAP_CHECK_STATUS(rap_allocator_make(rm, "nodev", "DeviceVmm", NULL, count == 1 ? "device=1" : "device=4096",
                                      &bad), RAP_ERR_NOT_FOUND);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* NCCL-registrable memory: a pool over DeviceVmm(export=posix) answers RAP_OK, one over a plain
 * DeviceVmm or DEVICE a sentence naming the spec; segment observers of the platform see device 0. */
static void note_device(const rap_segment_event *ev, void *user) { *(int *)user = ev->device; }

RAP_TEST(CudaVmm, RegistrableMemoryIsDeviceVmmWithExport) {
  rap_manager *rm = manager();
  rap_allocator *reg = make_or_skip(rm, "reg", "ResourceAwarePool(DeviceVmm(device=0, export=posix, "
                                    "reserve=1GiB), initial_size=2MiB)");
  rap_allocator *plain = NULL, *dev = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "plain", "ResourceAwarePool(DeviceVmm(device=0, reserve=1GiB), "
                                       "initial_size=2MiB)", &plain));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "dev", "ResourceAwarePool(DEVICE::0, initial_size=2MiB)", &dev));
  int device = -5;
  RAP_CHECK_OK(rap_allocator_observe(reg, note_device, &device));
  void *a, *b, *c;
  RAP_CHECK_OK(rap_allocate(reg, &a, 1 * MiB, NULL));
  RAP_CHECK_EQ(device, 0);
  RAP_CHECK_OK(rap_allocate(plain, &b, 1 * MiB, NULL));
  RAP_CHECK_OK(rap_allocate(dev, &c, 1 * MiB, NULL));
  RAP_CHECK_OK(rap_pointer_registrable(rm, a));
  RAP_CHECK_OK(rap_pointer_registrable(rm, (char *)a + 4096));
  RAP_CHECK_STATUS(rap_pointer_registrable(rm, b), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "without export=");
  RAP_CHECK_STATUS(rap_pointer_registrable(rm, c), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "DeviceVmm(export=posix)");
  RAP_CHECK_OK(rap_allocator_unobserve(reg, note_device, &device));
  RAP_CHECK_OK(rap_deallocate(reg, a, NULL));
  RAP_CHECK_OK(rap_deallocate(plain, b, NULL));
  RAP_CHECK_OK(rap_deallocate(dev, c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* DeviceVmm(piece=): on rap_release the whole pieces inside a large free block go back to the
 * device (its free memory rises, the platform maps less, the pool holds less; a free alone below
 * the peak gives nothing back) and are mapped again when the block is handed out, where a kernel writes and reads all of it. Observers of the platform hear of each
 * piece, before its unmap and after its map. The host runs the same engine (test_vmm_pieces.c). */
typedef struct piece_events {
  int map, unmap;
} piece_events;

static void count_pieces(const rap_segment_event *ev, void *user) {
  piece_events *pe = user;
  if (ev->replay) return;
  if (ev->kind == RAP_SEGMENT_MAP) pe->map++;
  if (ev->kind == RAP_SEGMENT_UNMAP) pe->unmap++;
}

RAP_TEST(CudaVmm, PiecesInsideAFreeBlockGoBackAndComeBack) {
  rap_manager *rm = manager();
  rap_allocator *pool = make_or_skip(rm, "pool", "ResourceAwarePool(DeviceVmm(piece=2MiB), "
                                                 "initial_size=136MiB, next_size=2MiB)");
  rap_allocator *vmm = rap_allocator_parent(pool);
  size_t g = rap_allocator_alignment(vmm);
  if (g != 2 * MiB) {
    RAP_CHECK_OK(rap_manager_destroy(rm));
    RAP_SKIP("the device's granularity is %zu, not the 2 MiB piece this test is sized for", g);
  }
  char *a, *big, *c, *again;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&a, g / 2, NULL));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&big, 64 * g, NULL));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&c, 7 * g / 2, NULL));   /* the chunk is full */
  RAP_CHECK(big == a + g / 2 && c == big + 64 * g);
  RAP_CHECK(gpu_fill(0, a, g / 2, 0x1A) == 0);
  RAP_CHECK(gpu_fill(0, big, 64 * g, 0x2B) == 0);
  RAP_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  piece_events pe = {0, 0};
  RAP_CHECK_OK(rap_allocator_observe(vmm, count_pieces, &pe));
  size_t mapped = stats(vmm).actual_bytes, held = stats(pool).actual_bytes;
  size_t free_before = 0, free_after = 0, total = 0;
  RAP_CHECK(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  RAP_CHECK_OK(rap_deallocate(pool, big, NULL));   /* the host resource: free at once */
  RAP_CHECK_EQ(stats(vmm).actual_bytes, mapped);   /* below the peak: kept */
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  RAP_CHECK_EQ(stats(vmm).actual_bytes, mapped - 63 * g);
  RAP_CHECK_EQ(stats(pool).actual_bytes, held - 63 * g);
  RAP_CHECK_EQ(pe.unmap, 63);
  RAP_CHECK(free_after >= free_before + 32 * g);   /* the device has the pages back */
  RAP_CHECK(gpu_all_bytes(a, g / 2, 0x1A));       /* what stays mapped is intact */
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&again, 64 * g, NULL));
  RAP_CHECK(again == big);
  RAP_CHECK_EQ(stats(vmm).actual_bytes, mapped);
  RAP_CHECK_EQ(stats(pool).actual_bytes, held);
  RAP_CHECK_EQ(pe.map, 63);   /* each piece its own mapping again, so it can go alone later */
  RAP_CHECK(gpu_fill(0, again, 64 * g, 0x3C) == 0);
  RAP_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  RAP_CHECK(gpu_all_bytes(again, 64 * g, 0x3C));
  RAP_CHECK(gpu_all_bytes(a, g / 2, 0x1A));
  RAP_CHECK_OK(rap_allocator_unobserve(vmm, count_pieces, &pe));
  RAP_CHECK_OK(rap_deallocate(pool, again, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A QuickPool tracks no streams: giving back needs a device synchronize, so it does so only when
 * unmap_free= asks, and then synchronizes first (queued work on the pages ends). */
RAP_TEST(CudaVmm, PiecesUnderAQuickPoolOnlyWhenAsked) {
  for (int asked = 0; asked < 2; asked++) {
    rap_manager *rm = manager();
    rap_allocator *pool = make_or_skip(rm, "pool", asked ? "QuickPool(DeviceVmm(piece=2MiB), "
                                                           "initial_size=40MiB, unmap_free=2MiB)"
                                                         : "QuickPool(DeviceVmm(piece=2MiB), "
                                                           "initial_size=40MiB)");
    rap_allocator *vmm = rap_allocator_parent(pool);
    size_t g = rap_allocator_alignment(vmm);
    if (g != 2 * MiB) {
      RAP_CHECK_OK(rap_manager_destroy(rm));
      RAP_SKIP("the device's granularity is %zu, not the 2 MiB piece this test is sized for", g);
    }
    char *a, *big, *c;
    RAP_CHECK_OK(rap_allocate(pool, (void **)&a, g / 2, NULL));
    RAP_CHECK_OK(rap_allocate(pool, (void **)&big, 16 * g, NULL));
    RAP_CHECK_OK(rap_allocate(pool, (void **)&c, 7 * g / 2, NULL));   /* the chunk is full */
    RAP_CHECK(gpu_fill(0, big, 16 * g, 0x4D) == 0);   /* queued: the synchronize waits for it */
    size_t mapped = stats(vmm).actual_bytes;
    RAP_CHECK_OK(rap_deallocate(pool, big, NULL));
    RAP_CHECK_OK(rap_release(pool));   /* no free end, no free chunk: only pieces could go */
    RAP_CHECK_OK(rap_allocator_check(pool));
    size_t now = stats(vmm).actual_bytes;
    if (asked) RAP_CHECK(now < mapped);
    else RAP_CHECK_EQ(now, mapped);
    RAP_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
    RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
    RAP_CHECK_OK(rap_manager_destroy(rm));
  }
}

/* At its peak a ResourceAwarePool over DeviceVmm(piece=) serves from memory it maps already: a
 * block freed on a busy stream does not join (and map) a free neighbour whose pieces went back,
 * and the stream's next request takes its own pending block, larger, rather than the free block
 * that fits better but would be mapped again. A gated kernel on the stream writes the pending block
 * after it was freed: the request on the same stream is served in its order, and the write that
 * follows lands last. The host runs the same engine (test_vmm_pieces.c, "AtThePeak..."). */
RAP_TEST(CudaVmm, AtThePeakMappedMemoryServesBeforeHoles) {
  rap_manager *rm = manager();
  rap_allocator *pool = make_or_skip(rm, "pool", "ResourceAwarePool(DeviceVmm(piece=2MiB), "
                                                 "initial_size=32MiB, next_size=2MiB)");
  rap_allocator *vmm = rap_allocator_parent(pool);
  size_t g = rap_allocator_alignment(vmm);
  if (g != 2 * MiB) {
    RAP_CHECK_OK(rap_manager_destroy(rm));
    RAP_SKIP("the device's granularity is %zu, not the 2 MiB piece this test is sized for", g);
  }
  rap_resource *r = NULL;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r));
  cudaStream_t s = rap_resource_cuda_stream(r);
  /* x (8 granules, on s) | f (4) | y (2) | z (2): the chunk is full */
  char *x, *f, *y, *z, *w, *p;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&x, 8 * g, r));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&f, 4 * g, NULL));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&y, 2 * g, NULL));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&z, 2 * g, NULL));
  RAP_CHECK(f == x + 8 * g && y == f + 4 * g && z == y + 2 * g);
  RAP_CHECK_OK(rap_deallocate(pool, f, NULL));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&w, 5 * g, NULL));   /* growth past the peak: f's go */
  RAP_CHECK_EQ(stats(pool).actual_bytes, 17 * g);
  RAP_CHECK_EQ(stats(vmm).actual_bytes, 17 * g);
  gpu_gate *gate = NULL;
  RAP_CHECK(gpu_gate_create(&gate) == 0);
  RAP_CHECK(gpu_gated_fill(s, gate, x, 8 * g, 0x5E) == 0);   /* s is busy with x */
  RAP_CHECK_OK(rap_deallocate(pool, x, r));
  RAP_CHECK_EQ(stats(pool).actual_bytes, 17 * g);   /* f stays apart, unmapped */
  RAP_CHECK_EQ(stats(pool).pending_bytes, 8 * g);
  RAP_CHECK_OK(rap_allocate(pool, (void **)&p, 4 * g, r));
  RAP_CHECK(p == x);   /* s's own pending block, in s's order */
  RAP_CHECK_EQ(stats(pool).actual_bytes, 17 * g);
  RAP_CHECK_EQ(stats(vmm).actual_bytes, 17 * g);
  RAP_CHECK(gpu_fill(s, p, 4 * g, 0x6F) == 0);
  gpu_gate_open(gate);
  RAP_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  RAP_CHECK(gpu_all_bytes(p, 4 * g, 0x6F));
  gpu_gate_destroy(gate);
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_deallocate(pool, p, r));
  RAP_CHECK_OK(rap_deallocate(pool, y, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, z, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, w, NULL));
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
