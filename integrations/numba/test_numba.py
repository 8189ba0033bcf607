"""rap.numba on a GPU, under pytest (run_tests.sh runs it with NUMBA_CUDA_MEMORY_MANAGER=rap.numba
and PYTHONPATH=<build>/python): device arrays on rap's memory, the finalizer's free,
stream-ordered frees under rap.numba.stream (a block freed on a busy stream is not handed to
another stream, and is handed back to its own at once), get_memory_info, pinned and mapped
arrays from rap's pinned pools, out of memory as Numba's CudaAPIError, set_memory_manager
without the variable, a rap.Buffer read by Numba through __cuda_array_interface__, and IPC:
an array shared with a spawned child when RAP_NUMBA_SPEC exports, else the sentence that says
which spec does; and kernels on rap's device, mapped and Buffer memory.

The memory checks compile no kernel: numba-cuda 0.21 to 0.30 registers an overload of np.row_stack
when it loads its CUDA target (at the first kernel compile, and in a device array's __setitem__,
which launches one), and numpy 2.5 removed row_stack, so there no kernel compiles, natively or over
rap. The tests that need a kernel are marked @needs_kernels: an xfail naming that cause where numpy
has no row_stack and the error is that one, a failure for any other error.

    NUMBA_CUDA_MEMORY_MANAGER=rap.numba PYTHONPATH=device-build/python python -m pytest integrations/numba/test_numba.py
"""

import functools
import importlib.metadata
import multiprocessing
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import cuda

import rap
import rap.numba

SPEC = os.environ.get("RAP_NUMBA_SPEC") or rap.numba.DEFAULT_SPEC   # the pool's spec this run
EXPORTS = "export=" in SPEC
NO_ROW_STACK = not hasattr(np, "row_stack")


def _version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


ROW_STACK = ("numba-cuda %s cannot compile a kernel with numpy %s: its CUDA target registers an "
             "overload of np.row_stack, which numpy 2.5 removed (a numba-cuda/numpy "
             "incompatibility, natively as over rap)" % (_version("numba-cuda"), np.__version__))


def _about_row_stack(e):
    while e is not None:
        if "row_stack" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def needs_kernels(test):
    """A test that compiles a kernel: an xfail saying why where numpy has no row_stack and the
    test failed on it; any other failure stays one."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        try:
            return test(*args, **kwargs)
        except Exception as e:
            if NO_ROW_STACK and _about_row_stack(e):
                pytest.xfail(ROW_STACK)
            raise
    return run


@cuda.jit
def double(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] *= 2


@cuda.jit
def sleep_then_fill(a, milliseconds, value):
    for _ in range(milliseconds):
        cuda.nanosleep(1000000)
    i = cuda.grid(1)
    while i < a.size:
        a[i] = value
        i += cuda.gridsize(1)


def current():
    return rap.numba.pool().stats()["current_bytes"]


def test_numba_uses_rap():
    mm = cuda.current_context().memory_manager
    assert isinstance(mm, rap.numba.RapNumbaManager), type(mm)
    assert mm.interface_version == 1


def test_device_arrays_on_raps_memory():
    before = current()
    h = np.arange(1 << 16, dtype=np.float32)
    d = cuda.to_device(h)
    assert current() >= before + h.nbytes
    np.testing.assert_array_equal(d.copy_to_host(), h)
    view = d[100:200]                 # a view keeps the block
    del d
    assert current() >= before + h.nbytes
    np.testing.assert_array_equal(view.copy_to_host(), h[100:200])
    del view
    assert current() == before


@needs_kernels
def test_a_kernel_on_raps_memory():
    h = np.arange(1 << 16, dtype=np.float32)
    d = cuda.to_device(h)
    double[(h.size + 255) // 256, 256](d)
    np.testing.assert_array_equal(d.copy_to_host(), h * 2)


@needs_kernels
def test_a_block_freed_on_a_busy_stream_waits_for_it():
    s, other = cuda.stream(), cuda.stream()
    n = 1 << 20
    with rap.numba.stream(s):
        d = cuda.device_array(n, dtype=np.uint8, stream=s)
        sleep_then_fill[1, 256, s](d, 200, 7)              # ~0.2 s of work on s
        freed = d.device_ctypes_pointer.value
        del d                                              # pending on s
        with rap.numba.stream(other):
            e = cuda.device_array(n, dtype=np.uint8, stream=other)
            assert e.device_ctypes_pointer.value != freed  # not another stream's while s runs
        again = cuda.device_array(n, dtype=np.uint8, stream=s)
        assert again.device_ctypes_pointer.value == freed  # s's own order makes it safe at once
    s.synchronize()
    other.synchronize()
    np.testing.assert_array_equal(again.copy_to_host()[:8], np.full(8, 7, np.uint8))
    del e, again


def test_memory_info_is_the_devices_and_the_pools():
    free, total = cuda.current_context().get_memory_info()
    assert 0 < free <= total and total > 1 << 30
    p = rap.numba.pool()
    device_free, device_total = p.memory_info()
    assert total == device_total
    expected = min(total, device_free + p.stats()["free_bytes"])
    assert abs(free - expected) < total // 100     # the device's free memory moves meanwhile


def test_pinned_and_mapped_arrays_come_from_rap():
    h = cuda.pinned_array(1000, dtype=np.float64)
    h[:] = np.arange(1000)
    pinned = rap.numba.pinned_pools()
    assert pinned and sum(p.stats()["current_bytes"] for p in pinned) >= h.nbytes
    d = cuda.to_device(h)
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(1000))
    m = cuda.mapped_array(256, dtype=np.float32)
    # Through a plain numpy array over its memory: numba-cuda's MappedNDArray methods (item
    # assignment, view, copies into it) read attributes its constructor never sets ("no attribute
    # '_dummy'", "'is_c_contiguous'" on the H200's numba-cuda), natively as over rap.
    host = np.asarray(m)
    host[:] = 1
    cuda.to_device(np.full(256, 2, np.float32)).copy_to_host(host)   # the device writes it
    np.testing.assert_array_equal(host, np.full(256, 2, np.float32))
    del h, m, host
    assert sum(p.stats()["current_bytes"] for p in pinned) == 0


@needs_kernels
def test_a_kernel_on_a_mapped_array():
    m = cuda.mapped_array(256, dtype=np.float32)
    m[:] = 1
    double[1, 256](m)
    cuda.synchronize()
    np.testing.assert_array_equal(m, np.full(256, 2, np.float32))


def test_out_of_memory_is_numbas_error_with_raps_sentence():
    from numba.cuda.cudadrv.driver import CudaAPIError
    with pytest.raises(CudaAPIError) as e:
        cuda.device_array(1 << 50, dtype=np.uint8)
    assert "rap.numba" in str(e.value)


def test_set_memory_manager_without_the_variable():
    code = ("from numba import cuda; import numpy as np; import rap.numba\n"
            "cuda.set_memory_manager(rap.numba.RapNumbaManager)\n"
            "d = cuda.to_device(np.ones(10))\n"
            "assert isinstance(cuda.current_context().memory_manager, rap.numba.RapNumbaManager)\n"
            "assert rap.numba.pool().stats()['current_bytes'] >= 80\n"
            "print('ok')\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CUDA_MEMORY_MANAGER"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_a_rap_buffer_is_read_by_numba_through_the_array_interface():
    with rap.Allocator("ResourceAwarePool(DEVICE, initial_size=16MiB)") as pool:
        s = cuda.stream()
        with pool.buffer(1024, s) as b:
            assert (b.kind, b.device) == ("device", cuda.get_current_device().id)
            cai = b.__cuda_array_interface__
            assert cai["version"] == 3 and cai["data"][0] == b.ptr and cai["stream"] == int(s)
            a = cuda.as_cuda_array(b)
            a.copy_to_device(np.full(a.shape, 3, a.dtype), stream=s)
            s.synchronize()
            assert (a.copy_to_host() == 3).all()
            del a
        s.synchronize()


@needs_kernels
def test_a_kernel_on_a_rap_buffer():
    with rap.Allocator("ResourceAwarePool(DEVICE, initial_size=16MiB)") as pool:
        s = cuda.stream()
        with pool.buffer(1024, s) as b:
            a = cuda.as_cuda_array(b)
            a.copy_to_device(np.full(a.shape, 3, a.dtype), stream=s)
            double[4, 256, s](a)
            s.synchronize()
            assert (a.copy_to_host() == 6).all()
            del a
        s.synchronize()


def _child(handle, q):
    try:
        from numba import cuda as c
        import numpy
        with handle as a:
            h = a.copy_to_host()
            a[:5].copy_to_device(-numpy.ones(5, a.dtype))   # a copy: no kernel (see needs_kernels)
            c.synchronize()
        q.put(("ok", float(h.sum()), h.size))
    except BaseException as e:   # noqa: B902 — reported to the parent
        q.put(("error", repr(e), 0))


@pytest.mark.skipif(not EXPORTS, reason="this run's pool does not export (the default does)")
def test_an_array_shared_with_another_process():
    h = np.arange(1000, dtype=np.float32)
    d = cuda.to_device(h)
    handle = d.get_ipc_handle()
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(handle, q))
    p.start()
    status, total, size = q.get(timeout=120)
    p.join(timeout=60)
    assert status == "ok", total
    assert (total, size) == (float(h.sum()), 1000)
    np.testing.assert_array_equal(d.copy_to_host()[:5], -np.ones(5, np.float32))


@pytest.mark.skipif(EXPORTS, reason="the spec exports")
def test_sharing_from_a_pool_that_does_not_export_says_which_spec_does():
    if EXPORTS:
        pytest.skip("this run's pool exports (the default does): the fallback spec's run covers it")
    d = cuda.to_device(np.arange(10))
    with pytest.raises(rap.UnsupportedError) as e:
        d.get_ipc_handle()
    assert "RAP_NUMBA_SPEC" in str(e.value) and "export=posix" in str(e.value)
