// cpp_consumer.cpp — an outside C++17 program over an installed rap.hpp: RAII handles, an error
// caught with its status and sentence. Built with a host compiler alone, it uses the host part;
// where CCCL's headers are on the include path (and under nvcc, Thrust's) it also checks at
// compile time that rap::memory_resource is a CCCL resource. It needs no GPU.
#include <rap/rap.hpp>

#include <cstdio>
#include <cstring>

#if RAP_HPP_CUDA
#if RAP_HPP_CCCL_NEW_NAMES
static_assert(cuda::mr::resource_with<rap::memory_resource, cuda::mr::device_accessible>, "");
#else
static_assert(cuda::mr::async_resource_with<rap::memory_resource, cuda::mr::device_accessible>, "");
#endif
#endif
#if RAP_HPP_THRUST
static_assert(std::is_same<rap::thrust_allocator<int>::pointer, thrust::device_ptr<int>>::value, "");
#endif

int main() {
  try {
    rap::manager m;
    rap::allocator pool(m, "pool", "QuickPool(HOST, initial_size=1MiB)");
    void *p = pool.allocate(4096);
    std::memset(p, 0, 4096);
    try {
      pool.deallocate(&m);   // not a block of pool's
      std::fprintf(stderr, "cpp consumer: a foreign pointer was taken\n");
      return 1;
    } catch (const rap::error &e) {
      if (e.status() != RAP_ERR_UNKNOWN_POINTER || std::strlen(e.sentence()) == 0) {
        std::fprintf(stderr, "cpp consumer: wrong error: %s\n", e.what());
        return 1;
      }
    }
    pool.deallocate(p);
    pool.check();
    pool.destroy();
    m.close();
  } catch (const rap::error &e) {
    std::fprintf(stderr, "cpp consumer: %s\n", e.what());
    return 1;
  }
  std::printf("cpp consumer: ok (CCCL part %s, Thrust part %s)\n", RAP_HPP_CUDA ? "on" : "off",
              RAP_HPP_THRUST ? "on" : "off");
  return 0;
}
