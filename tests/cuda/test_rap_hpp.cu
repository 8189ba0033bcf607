// test_rap_hpp.cu — rap.hpp's CUDA part, compiled by nvcc: rap::memory_resource satisfies CCCL's
// cuda::mr resource concepts (checked at compile time, so a CI build without a GPU checks them),
// stream-ordered blocks come back to their own stream at once and to another only once the first
// has passed the free (a gated kernel holds it), a type-erased cuda::mr reference
// reaches the pool, and Thrust takes a device_vector's storage and a sort's temporary storage from
// rap. Tests skip with "no CUDA device: <why>" where none is usable.
#include <rap/rap.hpp>

#include "kernels.h"

#include <gtest/gtest.h>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/sort.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#if !RAP_HPP_CUDA || !RAP_HPP_THRUST
#error "rap.hpp did not find CCCL and Thrust under nvcc"
#endif

// The concept checks: CCCL 3.1 and later name the stream-ordered concept resource and the
// synchronous one synchronous_resource; CCCL 3.0 named them async_resource and resource.
using device = cuda::mr::device_accessible;
#if RAP_HPP_CCCL_NEW_NAMES
static_assert(cuda::mr::resource<rap::memory_resource>);
static_assert(cuda::mr::resource_with<rap::memory_resource, device>);
static_assert(cuda::mr::synchronous_resource_with<rap::memory_resource, device>);
using device_ref = cuda::mr::resource_ref<device>;
#else
static_assert(cuda::mr::async_resource<rap::memory_resource>);
static_assert(cuda::mr::async_resource_with<rap::memory_resource, device>);
static_assert(cuda::mr::resource_with<rap::memory_resource, device>);
using device_ref = cuda::mr::async_resource_ref<device>;
#endif
static_assert(cuda::has_property<rap::memory_resource, device>);
using host = cuda::mr::host_accessible;
#if RAP_HPP_CCCL_NEW_NAMES
static_assert(cuda::mr::resource_with<rap::pinned_memory_resource, host, device>);
static_assert(std::is_constructible_v<cuda::mr::resource_ref<host, device>, rap::pinned_memory_resource &>);
static_assert(!std::is_constructible_v<cuda::mr::resource_ref<host, device>, rap::memory_resource &>);
#else
static_assert(cuda::mr::async_resource_with<rap::pinned_memory_resource, host, device>);
#endif
static_assert(!cuda::has_property<rap::memory_resource, cuda::mr::host_accessible>,
              "device memory is not claimed to be host memory");
static_assert(std::is_constructible_v<device_ref, rap::memory_resource &>);
static_assert(std::is_copy_constructible_v<rap::memory_resource>, "CCCL copies resources");

namespace {

constexpr size_t MiB = size_t{1} << 20;

class CppCuda : public testing::Test {
 protected:
  void SetUp() override {
    try {
      (void)m_.allocator("DEVICE");
    } catch (const rap::error &e) {
      if (e.status() != RAP_ERR_UNSUPPORTED) throw;
      GTEST_SKIP() << "no CUDA device: " << e.sentence();
    }
    pool_ = rap::allocator(m_, "pool", "ResourceAwarePool(DEVICE, initial_size=64MiB)");
  }
  rap::stats stats() const { return pool_.stats(); }

  rap::manager m_;   // first: it goes last
  rap::allocator pool_;
};

// Work queued on a stream that cannot finish until the test opens the gate (the gated kernel of
// kernels.cu, spinning on a flag in mapped pinned memory). Declared after everything that may wait
// for the stream (memory resources, pools, stream resources), it goes first: it opens the gate
// and waits for the streams it held, so that a failed check never leaves a kernel spinning.
class gate {
 public:
  gate() { ok_ = gpu_gate_create(&g_) == 0; }
  gate(const gate &) = delete;
  gate &operator=(const gate &) = delete;
  ~gate() {
    if (!ok_) return;
    open();
    for (cudaStream_t s : held_) (void)cudaStreamSynchronize(s);
    gpu_gate_destroy(g_);
  }
  bool ok() const { return ok_; }
  // Enqueues on s a kernel that writes p[0..n) once the gate opens.
  bool hold(cudaStream_t s, void *p, size_t n) {
    held_.push_back(s);
    return gpu_gated_fill(s, g_, p, n, 7) == 0;
  }
  void open() { gpu_gate_open(g_); }

 private:
  gpu_gate *g_ = nullptr;
  bool ok_ = false;
  std::vector<cudaStream_t> held_;
};

bool overlap(const void *a, const void *b, size_t n) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + n && y < x + n;
}

// A block freed on s1 while s1's work still uses it goes back to s1 at once (stream order makes that
// safe), is kept from s2 while that work runs, and goes to s2 once s1 has passed the free. The pool
// holds one 1 MiB chunk and grows by 1 MiB, so s2's requests are served by the freed block or by a
// new chunk, nothing else.
TEST_F(CppCuda, MemoryResourceIsStreamOrdered) {
  rap::resource s1 = rap::resource::cuda_stream(m_);
  rap::resource s2 = rap::resource::cuda_stream(m_);
  rap::allocator tight(m_, "tight", "ResourceAwarePool(DEVICE, initial_size=1MiB, next_size=1MiB)");
  rap::memory_resource mr(m_, tight);
  cuda::stream_ref r1(s1.stream()), r2(s2.stream());
  gate g;
  ASSERT_TRUE(g.ok()) << "gpu_gate_create failed";
  void *p = mr.allocate(r1, MiB, 256);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(tight.owner(p), mr.resource_of(r1));
  ASSERT_TRUE(g.hold(s1.stream(), p, MiB)) << "the gated kernel did not launch";
  mr.deallocate(r1, p, MiB, 256);
  EXPECT_EQ(tight.stats().current_bytes, 0u);
  void *again = mr.allocate(r1, MiB, 256);   // its own stream takes it back, work still queued
  EXPECT_EQ(again, p);
  mr.deallocate(r1, again, MiB, 256);
  const size_t held_before = tight.stats().actual_bytes;
  void *q = mr.allocate(r2, MiB, 256);   // s1's kernel may still write p: s2 must not get it
  ASSERT_NE(q, nullptr);
  EXPECT_FALSE(overlap(q, p, MiB)) << "s2 got " << q << ", within the block at " << p
                                   << " that s1's queued kernel still uses";
  EXPECT_EQ(tight.stats().actual_bytes, held_before + MiB);   // a new chunk served s2
  g.open();
  ASSERT_EQ(cudaStreamSynchronize(s1.stream()), cudaSuccess);
  void *later = mr.allocate(r2, MiB, 256);   // s1 has passed the free: p may go to s2 now
  EXPECT_EQ(later, p) << "the pool did not give s2 the block s1 had passed";
  EXPECT_EQ(tight.stats().actual_bytes, held_before + MiB);   // and it did not grow for it
  mr.deallocate(r2, later, MiB, 256);
  mr.deallocate(r2, q, MiB, 256);
  EXPECT_EQ(tight.stats().current_bytes, 0u);
  tight.check();
  ASSERT_EQ(cudaStreamSynchronize(s2.stream()), cudaSuccess);
}

// RMM's rule, as RmmOverRap.StreamOrderedReuseOnTheSameStream meets it: a stream given to the
// memory_resource may be destroyed as soon as a call with it has returned. A block freed on s while
// s's gated kernel still writes it, a buffer of s moved to s2 (freed there after s went), s
// destroyed: the pool goes on, keeps the block from s2 while the kernel runs, gives it back once the
// kernel has passed, and the memory_resource's end waits for s's last event, not for s.
TEST_F(CppCuda, AStreamMayGoOnceACallWithItReturned) {
  // Room for q without growing: a cudaMalloc or cudaFree while the gated kernel runs may wait for
  // it (compute-sanitizer makes them synchronous), and the kernel would end at its timeout.
  rap::allocator tight(m_, "tight", "ResourceAwarePool(DEVICE, initial_size=4MiB, next_size=1MiB)");
  gpu_gate *g = nullptr;
  ASSERT_EQ(gpu_gate_create(&g), 0);
  struct opener {   // opens the gate whatever happens, and waits for the kernel
    gpu_gate *g;
    ~opener() {
      gpu_gate_open(g);
      (void)cudaDeviceSynchronize();
      gpu_gate_destroy(g);
    }
  } o{g};
  rap::resource s2 = rap::resource::cuda_stream(m_);
  cuda::stream_ref r2(s2.stream());
  rap::memory_resource mr(m_, tight);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  void *p = mr.allocate(cuda::stream_ref(s), MiB, 256);
  void *moved = mr.allocate(cuda::stream_ref(s), MiB / 4, 256);
  EXPECT_EQ(rap_resource_call_scoped(mr.resource_of(cuda::stream_ref(s)).get()), 1);
  cudaEvent_t filled = nullptr;   // the test's own mark of the kernel's end
  ASSERT_EQ(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(gpu_gated_fill(s, g, p, MiB, 7), 0);
  ASSERT_EQ(cudaEventRecord(filled, s), cudaSuccess);
  mr.deallocate(cuda::stream_ref(s), p, MiB, 256);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);   // its kernel still waits at the gate
  mr.deallocate(r2, moved, MiB / 4, 256);         // device_buffer::set_stream, then freed
  void *q = mr.allocate(r2, MiB, 256);
  // Under compute-sanitizer a call above waits for the kernel, which then ends at its timeout: p
  // is free by then, and taking it is right.
  if (cudaEventQuery(filled) != cudaSuccess)
    EXPECT_FALSE(overlap(q, p, MiB)) << "s2 got the block that s's kernel still writes";
  (void)cudaGetLastError();   // cudaErrorNotReady is no error
  ASSERT_EQ(cudaEventDestroy(filled), cudaSuccess);
  mr.deallocate(r2, q, MiB, 256);
  tight.release();
  tight.check();
  gpu_gate_open(g);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  tight.release();
  EXPECT_EQ(tight.stats().pending_count, 0u);
  EXPECT_EQ(tight.stats().current_bytes, 0u);
  tight.check();
}

TEST_F(CppCuda, MemoryResourceCopiesShareThePoolAndTheStreams) {
  rap::resource s1 = rap::resource::cuda_stream(m_);
  rap::resource s2 = rap::resource::cuda_stream(m_);
  {
    rap::memory_resource mr(m_, pool_);
    cuda::stream_ref r1(s1.stream()), r2(s2.stream());
    // Freed on another stream than its own (RMM's set_stream): pending on both, not refused.
    void *moved = mr.allocate(r1, 2 * MiB, 256);
    ASSERT_EQ(cudaMemsetAsync(moved, 1, 2 * MiB, s1.stream()), cudaSuccess);
    mr.deallocate(r2, moved, 2 * MiB, 256);
    EXPECT_EQ(stats().current_bytes, 0u);   // refused, it would still be live
    pool_.check();
    rap::memory_resource copy = mr;   // copies share the pool and the streams' resources
    EXPECT_TRUE(copy == mr);
    EXPECT_EQ(copy.resource_of(r1), mr.resource_of(r1));

    void *sync = mr.allocate_sync(4096, 256);
    EXPECT_EQ(stats().current_bytes, 4096u);
    ASSERT_EQ(cudaMemset(sync, 0, 4096), cudaSuccess);
    mr.deallocate_sync(sync, 4096, 256);
    EXPECT_EQ(stats().current_bytes, 0u);
    ASSERT_EQ(cudaStreamSynchronize(s1.stream()), cudaSuccess);
  }   // the streams' rap resources go with the last copy
  pool_.check();
}

// The body, apart so that the test can report a rap::error it throws with its sentence. The
// allocator is not named "pinned": a name that answers to the same RAP_ALLOCATOR_<NAME> variable
// as the PINNED platform's is refused (RAP_ERR_EXISTS), as CppManager.ANameOfAPlatformInOtherCase
// shows on the host.
void pinned_round_trip(rap::manager &m) {
  rap::allocator pinned(m, "pinned_pool", "QuickPool(PINNED, initial_size=1MiB)");
  rap::resource s = rap::resource::cuda_stream(m);
  rap::pinned_memory_resource mr(m, pinned);
  cuda::stream_ref st(s.stream());
  auto *p = static_cast<int *>(mr.allocate(st, 4096, 256));
  p[0] = 41;   // host-accessible
  p[1] = 5;
  auto *d = static_cast<int *>(pinned.device_pointer(p));   // the address a kernel uses
  ASSERT_EQ(cudaMemsetAsync(d + 1, 0, 4, s.stream()), cudaSuccess);
  s.synchronize();
  EXPECT_EQ(p[0], 41);
  EXPECT_EQ(p[1], 0);
  mr.deallocate(st, p, 4096, 256);
  EXPECT_EQ(pinned.stats().current_bytes, 0u);
  s.synchronize();
}

TEST_F(CppCuda, PinnedResourceServesTheHostAndTheDevice) {
  try {
    pinned_round_trip(m_);
  } catch (const rap::error &e) {
    ADD_FAILURE() << "rap::error: " << e.what();
  }
}

TEST_F(CppCuda, EachResourceKeepsItsOwnStreamsAcrossThreads) {
  rap::allocator shared(m_, "shared", "ThreadSafe(ResourceAwarePool(DEVICE, initial_size=16MiB))");
  std::vector<rap::resource> streams;   // they go after the memory resources below
  for (int t = 0; t < 4; t++) streams.push_back(rap::resource::cuda_stream(m_));
  {
    rap::memory_resource a(m_, pool_), b(m_, shared);
    cuda::stream_ref st(cudaStream_t{});
    for (int i = 0; i < 3; i++) {   // alternating: a thread's remembered stream is per resource
      void *pa = a.allocate(st, 4096, 256);
      void *pb = b.allocate(st, 4096, 256);
      EXPECT_EQ(pool_.owner(pa), a.resource_of(st));
      EXPECT_EQ(shared.owner(pb), b.resource_of(st));
      EXPECT_NE(a.resource_of(st), b.resource_of(st));
      a.deallocate(st, pa, 4096, 256);
      b.deallocate(st, pb, 4096, 256);
    }
    std::vector<std::thread> threads;
    std::vector<int> ok(streams.size(), 0);
    for (size_t t = 0; t < streams.size(); t++)
      threads.emplace_back([&, t] {
        cuda::stream_ref mine(streams[t].stream());
        rap::memory_resource copy = b;   // copies on other threads share the map
        int good = 1;
        for (int i = 0; i < 200; i++) {
          size_t n = 1024 * (1 + i % 7);
          void *p = (i % 2 ? copy : b).allocate(mine, n, 256);
          good &= shared.owner(p) == b.resource_of(mine);
          copy.deallocate(mine, p, n, 256);
        }
        ok[t] = good;
      });
    for (auto &th : threads) th.join();
    for (size_t t = 0; t < ok.size(); t++) EXPECT_EQ(ok[t], 1) << "thread " << t;
    EXPECT_EQ(shared.stats().current_bytes, 0u);
    for (auto &r : streams) r.synchronize();
  }
  ASSERT_EQ(cudaStreamSynchronize(cudaStream_t{}), cudaSuccess);
}

TEST_F(CppCuda, AResourceThatOutlivesItsManagerTouchesNothing) {
  std::optional<rap::memory_resource> mr;
  cuda::stream_ref st(cudaStream_t{});
  void *p = nullptr;
  int level = rap_log_get_level();
  {
    rap::manager other;
    mr.emplace(other, other.make_spec("p", "ResourceAwarePool(DEVICE, initial_size=1MiB)"));
    p = mr->allocate(st, 256, 256);
    ASSERT_EQ(cudaStreamSynchronize(cudaStream_t{}), cudaSuccess);
    rap_log_set_level(RAP_LOG_OFF);   // its end reports the live block as leaked
  }
  rap_log_set_level(level);
  mr->deallocate(st, p, 256, 256);   // the manager took the pool: nothing to do, nothing touched
  try {
    (void)mr->allocate(st, 256, 256);
    ADD_FAILURE() << "a resource whose manager is gone allocated";
  } catch (const rap::error &e) {
    EXPECT_EQ(e.status(), RAP_ERR_INVALID);
    EXPECT_NE(std::string(e.sentence()).find("manager is gone"), std::string::npos) << e.sentence();
  }
  mr.reset();   // its stream resources went with the manager: not destroyed twice
}

TEST_F(CppCuda, TypeErasedReferenceReachesThePool) {
  rap::resource s = rap::resource::cuda_stream(m_);
  rap::memory_resource mr(m_, pool_);
  device_ref ref(mr);
  cuda::stream_ref st(s.stream());
#if RAP_HPP_CCCL_NEW_NAMES
  void *p = ref.allocate(st, 3 * MiB, 256);
#else
  void *p = ref.allocate_async(3 * MiB, 256, st);
#endif
  EXPECT_EQ(stats().current_bytes, 3 * MiB);
  EXPECT_EQ(m_.find(p), pool_);
#if RAP_HPP_CCCL_NEW_NAMES
  ref.deallocate(st, p, 3 * MiB, 256);
#else
  ref.deallocate_async(p, 3 * MiB, 256, st);
#endif
  EXPECT_EQ(stats().current_bytes, 0u);
  s.synchronize();
}

TEST_F(CppCuda, MemoryResourceRefusesAnAlignmentThePoolDoesNotGive) {
  rap::allocator small(m_, "small", "QuickPool(DEVICE, alignment=256, initial_size=1MiB)");
  rap::memory_resource mr(m_, small);
  cuda::stream_ref st(cudaStream_t{});
  void *first = mr.allocate(st, 256, 256);   // the chunk's start is aligned more than that
  try {
    void *p = mr.allocate(st, 256, size_t{1} << 16);   // the next block is 256 bytes further
    mr.deallocate(st, p, 256, size_t{1} << 16);
    ADD_FAILURE() << "a block at " << p << " was given for an alignment of 64 KiB";
  } catch (const rap::error &e) {
    EXPECT_EQ(e.status(), RAP_ERR_INVALID);
    EXPECT_NE(std::string(e.sentence()).find("alignment"), std::string::npos) << e.sentence();
  }
  EXPECT_EQ(small.stats().allocation_count, 1u);   // the refused block went back
  mr.deallocate(st, first, 256, 256);
  ASSERT_EQ(cudaStreamSynchronize(cudaStream_t{}), cudaSuccess);
}

TEST_F(CppCuda, ThrustVectorAndSortTakeMemoryFromRap) {
  rap::resource s = rap::resource::cuda_stream(m_);
  const int n = 1 << 20;
  std::vector<int> host(n);
  std::iota(host.begin(), host.end(), 0);
  std::reverse(host.begin(), host.end());
  {
    rap::thrust_allocator<int> alloc(pool_, s);
    thrust::device_vector<int, rap::thrust_allocator<int>> v(host.begin(), host.end(), alloc);
    EXPECT_EQ(stats().current_bytes, n * sizeof(int));
    EXPECT_EQ(m_.find(thrust::raw_pointer_cast(v.data())), pool_);
    pool_.reset_peaks();
    thrust::sort(thrust::cuda::par_nosync(alloc).on(alloc.stream()), v.begin(), v.end());
    // The sort's temporary storage came from the pool: the peak rose above the vector alone.
    EXPECT_GT(stats().high_watermark, n * sizeof(int));
    ASSERT_EQ(cudaStreamSynchronize(alloc.stream()), cudaSuccess);
    std::vector<int> back(n);
    thrust::copy(v.begin(), v.end(), back.begin());
    EXPECT_TRUE(std::is_sorted(back.begin(), back.end()));
    EXPECT_EQ(back.front(), 0);
    EXPECT_EQ(back.back(), n - 1);
  }
  EXPECT_EQ(stats().current_bytes, 0u);   // the vector's block went back on its stream
  s.synchronize();
  pool_.check();
}

}  // namespace
