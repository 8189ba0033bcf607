"""rap.cuda_core on a GPU, under pytest (run_tests.sh runs it with PYTHONPATH=<build>/python):
cuda.core Buffers from rap's device and pinned pools (their properties, copy_from/copy_to both
ways, copy_to without a destination allocating through the resource, close and collection giving
the block back to the pool), a kernel built with cuda.core's Program and launched with launch()
writing a rap device buffer and a rap pinned buffer, a buffer closed on a busy stream kept from
another stream, a collected stream kept while a block is pending on it; and rap.Buffer's own
DLPack and array interface read by CuPy and PyTorch.

    PYTHONPATH=device-build/python python -m pytest integrations/cuda_core/test_cuda_core.py
"""

import ctypes
import gc

import pytest

try:
    from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
except ImportError:
    from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch

import rap
import rap.cuda_core
from rap.cuda_core import RapMemoryResource, RapPinnedMemoryResource

CODE = r"""
extern "C" __global__ void fill(unsigned char *p, unsigned long long n, int value) {
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = (unsigned char)value;
}
extern "C" __global__ void sleep_then_fill(unsigned char *p, unsigned long long n, int ms, int value) {
  for (int i = 0; i < ms; i++) __nanosleep(1000000);
  for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) p[i] = (unsigned char)value;
}
"""


@pytest.fixture(scope="module")
def dev():
    d = Device()
    d.set_current()
    return d


@pytest.fixture(scope="module")
def kernels(dev):
    arch = getattr(dev, "arch", None) or "%d%d" % dev.compute_capability
    prog = Program(CODE, code_type="c++", options=ProgramOptions(arch="sm_%s" % arch))
    mod = prog.compile("cubin")
    return {name: mod.get_kernel(name) for name in ("fill", "sleep_then_fill")}


@pytest.fixture(scope="module")
def mr(dev):
    return RapMemoryResource()


@pytest.fixture(scope="module")
def pinned(dev):
    return RapPinnedMemoryResource()


def run(kernel, stream, grid, block, *args):
    launch(stream, LaunchConfig(grid=grid, block=block), kernel, *args)


def host_bytes(buf):
    return ctypes.string_at(int(buf.handle), buf.size)


def test_resources_say_what_their_memory_is(dev, mr, pinned):
    assert (mr.is_device_accessible, mr.is_host_accessible, mr.device_id) == (True, False, dev.device_id)
    assert (pinned.is_device_accessible, pinned.is_host_accessible) == (True, True)
    s = dev.create_stream()
    before = mr.allocator.stats()["current_bytes"]
    buf = mr.allocate(4096, stream=s)
    assert buf.size == 4096 and buf.memory_resource is mr and buf.is_device_accessible
    assert mr.allocator.stats()["current_bytes"] == before + 4096
    buf.close(s)
    assert mr.allocator.stats()["current_bytes"] == before
    buf = mr.allocate(100, stream=s)
    del buf
    gc.collect()
    assert mr.allocator.stats()["current_bytes"] == before
    s.sync()


def test_copies_both_ways_through_pinned_memory(dev, mr, pinned):
    s = dev.create_stream()
    n = 1 << 20
    src = pinned.allocate(n, stream=s)
    ctypes.memmove(int(src.handle), bytes(range(256)) * (n // 256), n)
    d = mr.allocate(n, stream=s)
    d.copy_from(src, stream=s)
    back = pinned.allocate(n, stream=s)
    d.copy_to(back, stream=s)
    s.sync()
    assert host_bytes(back) == host_bytes(src)
    twin = d.copy_to(stream=s)                 # allocated through mr.allocate
    assert twin.memory_resource is mr and twin.size == n
    ctypes.memset(int(back.handle), 0, n)
    twin.copy_to(back, stream=s)
    s.sync()
    assert host_bytes(back) == host_bytes(src)
    for b in (twin, d, back, src):
        b.close(s)
    s.sync()


def test_a_kernel_writes_rap_device_and_pinned_buffers(dev, mr, pinned, kernels):
    s = dev.create_stream()
    n = 300000
    d = mr.allocate(n, stream=s)
    run(kernels["fill"], s, 64, 256, d, ctypes.c_uint64(n), ctypes.c_int(42))
    h = pinned.allocate(n, stream=s)
    d.copy_to(h, stream=s)
    s.sync()
    assert host_bytes(h) == bytes([42]) * n
    run(kernels["fill"], s, 64, 256, h, ctypes.c_uint64(n), ctypes.c_int(7))   # pinned: in place
    s.sync()
    assert host_bytes(h) == bytes([7]) * n
    d.close(s)
    h.close(s)
    s.sync()


def test_a_buffer_closed_on_a_busy_stream_is_kept_from_another(dev, mr, kernels):
    s, other = dev.create_stream(), dev.create_stream()
    n = 1 << 20
    b = mr.allocate(n, stream=s)
    run(kernels["sleep_then_fill"], s, 1, 256, b, ctypes.c_uint64(n), ctypes.c_int(200), ctypes.c_int(9))
    freed = int(b.handle)
    b.close(s)                                   # pending on s while the kernel sleeps
    e = mr.allocate(n, stream=other)
    assert int(e.handle) != freed
    again = mr.allocate(n, stream=s)
    assert int(again.handle) == freed            # s's own order makes it safe at once
    s.sync()
    e.close(other)
    again.close(s)
    other.sync()
    s.sync()


def test_a_collected_stream_is_kept_while_blocks_are_pending_on_it(dev, kernels):
    # One 1 MiB chunk: the second stream's request misses, and the pool fences the first
    # stream's batch, on a stream cuda.core would have destroyed when it was collected.
    mr = RapMemoryResource(spec="ResourceAwarePool(DEVICE::{device}, initial_size=1MiB, next_size=1MiB)")
    pool = mr.allocator
    n = 1 << 20
    s = dev.create_stream()
    b = mr.allocate(n, stream=s)
    run(kernels["sleep_then_fill"], s, 1, 256, b, ctypes.c_uint64(n), ctypes.c_int(100), ctypes.c_int(9))
    b.close(s)                                   # pending on s, behind the kernel
    address = int(s.handle)
    del b, s
    gc.collect()                                 # rap still holds s: it is not destroyed
    assert address in pool._kept
    other = dev.create_stream()
    c = mr.allocate(n, stream=other)             # a new stream: s is busy, so it stays
    assert address in pool._kept and int(c.handle) != 0
    pool._kept[address].sync()
    pool.release()                               # idle, only rap holds it: it goes now
    assert address not in pool._kept and address not in pool._streams
    c.close(other)
    other.sync()
    assert pool.stats()["current_bytes"] == 0
    pool.check()


def test_a_rap_buffer_is_read_by_cupy_and_torch_in_place(dev):
    cupy = pytest.importorskip("cupy")
    pool = rap.Allocator("ResourceAwarePool(DEVICE, initial_size=16MiB)")
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        b = pool.buffer(1024, s)
        x = cupy.asarray(b)                       # __cuda_array_interface__
        x[:] = 5
        y = cupy.from_dlpack(b)                   # __dlpack__ with CuPy's stream
        assert int(y.sum()) == 5 * 1024
        assert b.__dlpack_device__() == (2, dev.device_id)
    s.synchronize()
    torch = pytest.importorskip("torch")
    t = torch.from_dlpack(b)
    assert t.dtype == torch.uint8 and int(t.sum()) == 5 * 1024 and t.data_ptr() == b.ptr
    del x, y, t
    b.free()
    with rap.Allocator("QuickPool(PINNED)") as hp:
        with hp.buffer(64) as p:
            assert p.kind == "pinned" and p.__dlpack_device__() == (3, 0)
            assert p.__cuda_array_interface__["data"][0] == p.device_pointer
    pool.close()
