// rap_thrust.cu — rap from C++: one pool as Thrust's allocator and as a CCCL memory resource.
#include <rap/rap.hpp>

#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include <cstdio>

int main() {
  try {
    rap::manager m;   // first, so that it goes last
    rap::allocator pool(m, "pool", "ThreadSafe(ResourceAwarePool(DEVICE, initial_size=64MiB))");
    rap::resource stream = rap::resource::cuda_stream(m);   // a new CUDA stream, owned

    // Thrust: the vector's storage and the sort's temporary storage come from the pool, on stream.
    rap::thrust_allocator<int> alloc(pool, stream);
    auto on_stream = thrust::cuda::par_nosync(alloc).on(alloc.stream());
    thrust::device_vector<int, rap::thrust_allocator<int>> v(1 << 20, alloc);
    thrust::sequence(on_stream, v.rbegin(), v.rend());
    thrust::sort(on_stream, v.begin(), v.end());
    stream.synchronize();
    int lo = v.front(), hi = v.back();

    // CCCL: the same pool as a cuda::mr resource, stream-ordered. Pass it (or a
    // cuda::mr::resource_ref to it) wherever CCCL or RMM takes a device resource.
    rap::memory_resource mr(m, pool);
    cuda::stream_ref s(stream.stream());
    void *p = mr.allocate(s, 1 << 20, 256);
    mr.deallocate(s, p, 1 << 20, 256);   // pending on s, which may take it again at once

    rap::stats st = pool.stats();
    std::printf("sorted %d..%d; pool holds %zu bytes, %zu of them live, peak %zu\n", lo, hi,
                st.actual_bytes, st.current_bytes, st.high_watermark);
  } catch (const rap::error &e) {   // the status's name and rap's sentence
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
