// device_buffer_over_rap.cu — RMM's device_buffer_tests.cu, included as RMM ships it, with rap's
// resource added to the resource types its typed suite runs over.
//
// DeviceBufferTest is typed over RMM's cuda_memory_resource and managed_memory_resource: its
// "explicit resource" cases allocate from a default-constructed one of those, not from the current
// resource. GoogleTest turns a suite's type list into the list it registers through
// testing::internal::GenerateTypeList; specialised here for lists of device resources, before
// RMM's file uses it, it appends rap_rmm_tests::rap_resource, so that every DeviceBufferTest case
// also runs with rap's resource as its explicit one (as DeviceBufferTest/2.<case>). This
// translation unit has no other typed suite; the assertion stops the build if one appears.
#include "rap_resource.hpp"

#include <cuda/memory_resource>
#include <gtest/gtest.h>

namespace testing::internal {
template <class... Resources>
struct GenerateTypeList<::testing::Types<Resources...>> {
  static_assert((cuda::mr::resource_with<Resources, cuda::mr::device_accessible> && ...),
                "device_buffer_over_rap.cu appends rap's resource to lists of device resources only");
  using type = typename ::testing::Types<Resources..., rap_rmm_tests::rap_resource>::type;
};
}  // namespace testing::internal

#include <device_buffer_tests.cu>
