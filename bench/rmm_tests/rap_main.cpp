// rap_main.cpp — the main of rmm_tests_rap: RMM's own tests of device_buffer, device_uvector and
// device_scalar (compiled from RMM's files as they are) with a rap::memory_resource as RMM's
// current device resource, where rmm_tests_native runs the same files over RMM's default.
//
// The environment below makes a rap pool on the device and sets a resource over it as current
// before the first test; after the last it puts RMM's default back, lets the device finish, and
// fails the run if the pool still holds a block RMM took or fails its own check. Without a usable
// device no test runs and the run fails, saying why. bench/rmm-tests-over-rap.sh runs both binaries.
#include "rap_resource.hpp"

#include <rmm/mr/per_device_resource.hpp>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>

namespace rap_rmm_tests {
namespace {

// The pool RMM's containers draw from; RAP_RMM_TESTS_SPEC names another (a rap spec string).
const char *pool_spec() {
  const char *s = std::getenv("RAP_RMM_TESTS_SPEC");
  return s != nullptr && *s != '\0' ? s : "ThreadSafe(ResourceAwarePool(DEVICE, initial_size=64MiB))";
}

class RapEnvironment : public testing::Environment {
 public:
  void SetUp() override {
    // A failure here runs no test (not a skip: GoogleTest counts every test of a skipped
    // environment as passed).
    try {
      (void)m_.allocator("DEVICE");
      pool_ = rap::allocator(m_, "rmm_tests", pool_spec());
      mr_.emplace(m_, pool_);
    } catch (const rap::error &e) {
      FAIL() << "rmm_tests_rap: no test ran: "
             << (e.status() == RAP_ERR_UNSUPPORTED ? "no CUDA device: " : "") << e.sentence();
    }
    (void)rmm::mr::set_current_device_resource(*mr_);   // RMM's map keeps a copy
    current_ = &*mr_;
  }
  void TearDown() override {
    if (!mr_) return;
    current_ = nullptr;
    (void)rmm::mr::reset_current_device_resource();   // the map's copy comes back and goes here
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    mr_.reset();
    EXPECT_EQ(pool_.stats().current_bytes, 0u) << "a block RMM's tests took was not given back";
    EXPECT_NO_THROW(pool_.check());
  }
  static const rap::memory_resource *current_;

 private:
  rap::manager m_;   // first: it goes last
  rap::allocator pool_;
  std::optional<rap::memory_resource> mr_;
};

const rap::memory_resource *RapEnvironment::current_ = nullptr;

}  // namespace

const rap::memory_resource &current_resource() {
  if (RapEnvironment::current_ == nullptr)
    throw std::logic_error("rmm_tests_rap: no rap resource is current (no device, or after the tests)");
  return *RapEnvironment::current_;
}

}  // namespace rap_rmm_tests

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  testing::AddGlobalTestEnvironment(new rap_rmm_tests::RapEnvironment);   // gtest owns it
  std::printf("rmm_tests_rap: RMM's current device resource: rap's %s\n", rap_rmm_tests::pool_spec());
  return RUN_ALL_TESTS();
}
