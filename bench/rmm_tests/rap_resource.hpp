// rap_resource.hpp — what RMM's own tests need from rap to run over it (bench/rmm_tests).
//
// rmm_tests_rap's main (rap_main.cpp) makes one rap pool and a rap::memory_resource over it, and
// sets that resource as RMM's current device resource before the first test. rap_resource is the
// same resource as a type that default-constructs, for the tests typed over resource types
// (RMM's DeviceBufferTest makes a `MemoryResourceType mr{}` in its fixture): every instance is a
// copy of main's resource, sharing its pool and its stream resources.
#ifndef RAP_BENCH_RMM_TESTS_RAP_RESOURCE_HPP
#define RAP_BENCH_RMM_TESTS_RAP_RESOURCE_HPP

#include <rap/rap.hpp>

namespace rap_rmm_tests {

// The resource main set as current; throws std::logic_error when there is none (before main's
// environment made it, or after it went).
const rap::memory_resource &current_resource();

struct rap_resource : rap::memory_resource {
  rap_resource() : rap::memory_resource(current_resource()) {}
};

}  // namespace rap_rmm_tests

#endif
