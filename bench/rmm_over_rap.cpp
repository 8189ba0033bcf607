// rmm_over_rap.cpp — RMM 26.06 on rap: with a rap::memory_resource as the current device resource,
// RMM's containers (device_buffer, device_uvector, device_scalar) take their memory from a rap
// pool on their streams and give it back there. Built with RMM's sources where
// scripts/fetch-peers.sh placed them (bench/CMakeLists.txt, as rap_rmm_check); run on a GPU
// machine by bench/rmm-over-rap.sh. Without a usable device every case skips, saying why.
#include <rap/rap.hpp>

#include <rmm/cuda_stream_view.hpp>
#include <rmm/device_buffer.hpp>
#include <rmm/device_scalar.hpp>
#include <rmm/device_uvector.hpp>
#include <rmm/mr/per_device_resource.hpp>
#include <rmm/resource_ref.hpp>

#include <gtest/gtest.h>

#include <optional>
#include <vector>

static_assert(cuda::mr::resource_with<rap::memory_resource, cuda::mr::device_accessible>);
static_assert(std::is_constructible_v<rmm::device_async_resource_ref, rap::memory_resource &>);

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

class RmmOverRap : public testing::Test {
 protected:
  void SetUp() override {
    try {
      (void)m_.allocator("DEVICE");
    } catch (const rap::error &e) {
      if (e.status() != RAP_ERR_UNSUPPORTED) throw;
      GTEST_SKIP() << "no CUDA device: " << e.sentence();
    }
    pool_ = rap::allocator(m_, "pool", "ThreadSafe(ResourceAwarePool(DEVICE, initial_size=64MiB))");
    mr_.emplace(m_, pool_);
    stream_ = rap::resource::cuda_stream(m_);
  }
  void TearDown() override {
    if (!mr_) return;
    // The per-device map keeps a copy of the resource until it is reset; reset it before the
    // manager goes (the copy comes back here and goes with this statement).
    (void)rmm::mr::reset_current_device_resource();
    if (stream_.get() != nullptr) stream_.synchronize();
    mr_.reset();
    EXPECT_EQ(pool_.stats().current_bytes, 0u) << "a block RMM took was not given back";
    pool_.check();
  }
  rmm::cuda_stream_view sv() const { return rmm::cuda_stream_view(stream_.stream()); }

  rap::manager m_;   // first: it goes last
  rap::allocator pool_;
  std::optional<rap::memory_resource> mr_;
  rap::resource stream_;
};

TEST_F(RmmOverRap, DeviceBufferThroughTheRefSetter) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  (void)rmm::mr::set_current_device_resource_ref(rmm::device_async_resource_ref{*mr_});
#pragma GCC diagnostic pop
  {
    rmm::device_buffer buf(3 * MiB, sv());
    EXPECT_EQ(m_.find(buf.data()), pool_);
    EXPECT_EQ(pool_.stats().current_bytes, 3 * MiB);
    EXPECT_EQ(pool_.owner(buf.data()), mr_->resource_of(cuda::stream_ref(stream_.stream())));
    ASSERT_EQ(cudaMemsetAsync(buf.data(), 0xab, buf.size(), sv().value()), cudaSuccess);
    buf.resize(5 * MiB, sv());   // a new block from the pool, the bytes copied on the stream
    EXPECT_EQ(pool_.stats().current_bytes, 5 * MiB);
    std::vector<unsigned char> host(3 * MiB);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), buf.data(), host.size(), cudaMemcpyDeviceToHost,
                              sv().value()),
              cudaSuccess);
    sv().synchronize();
    EXPECT_EQ(host.front(), 0xab);
    EXPECT_EQ(host.back(), 0xab);
  }
  EXPECT_EQ(pool_.stats().current_bytes, 0u);
}

TEST_F(RmmOverRap, DeviceUvectorAndScalarThroughAnOwningCopy) {
  (void)rmm::mr::set_current_device_resource(*mr_);   // the map keeps a copy
  {
    rmm::device_uvector<int> v(1 << 20, sv());
    EXPECT_EQ(m_.find(v.data()), pool_);
    std::vector<int> host(v.size());
    for (std::size_t i = 0; i < host.size(); i++) host[i] = static_cast<int>(i * 3);
    ASSERT_EQ(cudaMemcpyAsync(v.data(), host.data(), host.size() * sizeof(int),
                              cudaMemcpyHostToDevice, sv().value()),
              cudaSuccess);
    const int seven = 7;   // read by the copy on the stream: it lives until element() syncs
    v.set_element_async(7, seven, sv());
    EXPECT_EQ(v.element(7, sv()), 7);
    EXPECT_EQ(v.element(1000, sv()), 3000);
    rmm::device_scalar<int> s(42, sv());
    EXPECT_EQ(m_.find(s.data()), pool_);
    EXPECT_EQ(s.value(sv()), 42);
    const int next = 43;
    s.set_value_async(next, sv());
    EXPECT_EQ(s.value(sv()), 43);
    EXPECT_GE(pool_.stats().current_bytes, v.size() * sizeof(int) + sizeof(int));
  }
  EXPECT_EQ(pool_.stats().current_bytes, 0u);
}

TEST_F(RmmOverRap, StreamOrderedReuseOnTheSameStream) {
  (void)rmm::mr::set_current_device_resource(*mr_);
  void *first = nullptr;
  {
    rmm::device_buffer a(MiB, sv());
    first = a.data();
  }   // freed on its stream: pending there
  rmm::device_buffer b(MiB, sv());   // the same stream takes it back at once
  EXPECT_EQ(b.data(), first);
  rap::resource other = rap::resource::cuda_stream(m_);
  rmm::device_buffer c(MiB, rmm::cuda_stream_view(other.stream()));
  EXPECT_NE(c.data(), first);
  c = rmm::device_buffer(0, sv());
  {
    rmm::device_buffer moved(2 * MiB, sv());
    moved.set_stream(rmm::cuda_stream_view(other.stream()));   // freed on the other stream
  }
  EXPECT_EQ(pool_.stats().current_bytes, MiB);   // b alone: the moved buffer's block went back
  other.synchronize();
}

}  // namespace
