"""rap.numba and rap.cuda_core over host memory, as CI runs them: where numba-cuda and cuda.core
are missing (CI has no GPU and neither package), tests/python/stubs stands in for the parts of
their interfaces these modules use, as those projects document them, so that the modules' own
logic runs: the EMM plugin's memalloc and finalizer, pinned and mapped host allocations,
get_memory_info, an IPC handle of a view (offset, pickling, opened in another process), reset,
out of memory as CudaAPIError, the version check's context=None; and the cuda.core resource's
allocate, close on the owner and on another stream (which waits for it), collection. Pools are
host ones (RAP_NUMBA_SPEC, allocator=...); host queues stand in for streams. The GPU machine runs
the real packages (integrations/numba/run_tests.sh, integrations/cuda_core/run_tests.sh).

    PYTHONPATH=<build>/python python3 test_integrations.py
"""
import ctypes
import gc
import os
import pickle
import subprocess
import sys
import threading
import unittest

STUBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stubs")
try:
    import numba.cuda  # noqa: F401
    REAL_NUMBA = True
except ImportError:
    REAL_NUMBA = False
try:
    import cuda.core  # noqa: F401
    REAL_CUDA_CORE = True
except ImportError:
    REAL_CUDA_CORE = False
if not (REAL_NUMBA and REAL_CUDA_CORE):
    sys.path.insert(0, STUBS)

EXPORTING = "ResourceAwarePool(HostVmm(export=posix), initial_size=1MiB)"
os.environ["RAP_NUMBA_SPEC"] = EXPORTING
os.environ["RAP_NUMBA_PINNED_SPEC"] = "QuickPool(HOST, initial_size=1MiB)"

import rap  # noqa: E402
import rap.numba  # noqa: E402
import rap.cuda_core  # noqa: E402
from numba import cuda  # noqa: E402


class Context:
    device = cuda.get_current_device()


def close(mm):
    for p in mm._pools.values():
        try:
            p.close()
        except rap.Error:
            pass
    mm._pools.clear()


_numba_current_stream = rap.numba._current_stream
rap.numba._current_stream = lambda: None   # allocations on the host: no CUDA stream here


class CUstreamLike:
    """cuda.bindings.driver.CUstream, as cuda.core's Stream.handle returns it: int() gives the
    address, and it is not an int."""
    def __init__(self, address):
        self._address = address

    def __int__(self):
        return self._address


class CoreStream:
    """cuda.core's Stream: __cuda_stream__() gives (0, the handle), the CUstream object in 0.3 and
    an int later, and .handle is a CUstream. Its stream is destroyed when it is collected: here it
    notes its address in `destroyed`."""
    destroyed = []

    def __init__(self, address, as_int=False):
        self.handle, self._as_int = CUstreamLike(address), as_int

    def __cuda_stream__(self):
        return (0, int(self.handle) if self._as_int else self.handle)

    def __del__(self):
        CoreStream.destroyed.append(int(self.handle))


class NumbaStream:
    """numba.cuda's Stream: .handle a ctypes c_void_p (its ctypes binding), or a CUstream."""
    def __init__(self, handle):
        self.handle = handle


def host_backed(pool):
    """pool's stream resources made as host queues: there is no GPU here, but which resource a
    block belongs to, and when a stream's resource goes, follow the same rules."""
    def make(handle):
        r = ctypes.c_void_p()
        pool._check(pool._lib.rap_resource_create_host_async(pool._rm, ctypes.byref(r)))
        return r
    pool._make_stream_resource = make
    pool._stream_idle = lambda handle: True
    return pool


@unittest.skipIf(REAL_NUMBA, "the real numba-cuda is here: integrations/numba/run_tests.sh tests it")
class NumbaPlugin(unittest.TestCase):
    def setUp(self):
        self.ctx = Context()
        self.mm = rap.numba.RapNumbaManager(context=self.ctx)
        self.mm.initialize()

    def tearDown(self):
        gc.collect()
        close(self.mm)

    def test_numbas_version_check_makes_nothing(self):
        dummy = rap.numba.RapNumbaManager(context=None)
        self.assertEqual(dummy.interface_version, 1)
        self.assertEqual(dummy._pools, {})
        self.assertIs(rap.numba._numba_memory_manager, rap.numba.RapNumbaManager)

    def test_memalloc_and_its_finalizer(self):
        pool = self.mm.device_pool()
        m = self.mm.memalloc(5000)
        self.assertIsInstance(m, cuda.MemoryPointer)
        self.assertEqual(m.size, 5000)
        ctypes.memset(m.device_pointer_value, 1, 5000)
        self.assertEqual(pool.stats()["current_bytes"], 5000)
        del m
        gc.collect()
        self.assertEqual(pool.stats()["current_bytes"], 0)
        self.assertEqual(self.mm._live, {})

    def test_defer_cleanup_holds_frees_back_until_it_ends(self):
        pool = self.mm.device_pool()
        with self.mm.defer_cleanup():
            m = self.mm.memalloc(300)
            del m
            gc.collect()
            self.assertEqual(pool.stats()["current_bytes"], 300)
        self.assertEqual(pool.stats()["current_bytes"], 0)

    def test_pinned_and_mapped_host_memory(self):
        h = self.mm.memhostalloc(4096)
        self.assertIsInstance(h, cuda.PinnedMemory)
        owned = self.mm.memhostalloc(1024, mapped=True)
        pools = self.mm.pinned_pools()
        self.assertEqual(len(pools), 2)                 # one per combination of flags
        self.assertEqual(sum(p.stats()["current_bytes"] for p in pools), 5120)
        del h, owned
        gc.collect()
        self.assertEqual(sum(p.stats()["current_bytes"] for p in pools), 0)

    def test_memory_info_counts_the_pools_free_bytes(self):
        m = self.mm.memalloc(1000)
        free, total = self.mm.get_memory_info()
        host_free, host_total = self.mm.device_pool().memory_info()
        self.assertEqual(total, host_total)
        self.assertGreaterEqual(free, host_free)
        self.assertLessEqual(free, total)
        del m

    def test_an_ipc_handle_of_a_view_opens_in_another_process(self):
        m = self.mm.memalloc(8192)
        ctypes.memmove(m.device_pointer_value + 16, b"shared", 6)
        view = cuda.MemoryPointer(self.ctx, ctypes.c_void_p(m.device_pointer_value + 16), 100)
        h = self.mm.get_ipc_handle(view)
        self.assertEqual((h.offset, h.size, h.rap_handle.nbytes), (16, 100, 8192))
        data = pickle.dumps(h)
        code = ("import pickle, sys, ctypes\n"
                "sys.path.insert(0, %r)\n"
                "import rap.numba\n"
                "class Ctx: pass\n"
                "h = pickle.loads(sys.stdin.buffer.read())\n"
                "m = h.open(Ctx())\n"
                "sys.stdout.write(ctypes.string_at(m.device_pointer_value, 6).decode() + ' %%d' %% m.size)\n"
                "h.close()\n" % STUBS)
        r = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True)
        if r.returncode != 0 and b"ptrace" in r.stderr:
            self.skipTest("no ptrace permission here")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertEqual(r.stdout, b"shared 100")
        del view, m

    def test_a_pool_that_does_not_export_says_which_spec_does(self):
        os.environ["RAP_NUMBA_SPEC"] = "ResourceAwarePool(HOST)"
        try:
            mm = rap.numba.RapNumbaManager(context=self.ctx)
            m = mm.memalloc(64)
            with self.assertRaises(rap.UnsupportedError) as e:
                mm.get_ipc_handle(m)
            self.assertIn("RAP_NUMBA_SPEC", str(e.exception))
            with self.assertRaises(cuda.cudadrv.driver.CudaAPIError) as e:
                mm.memalloc(1 << 60)
            self.assertIn("rap.numba", str(e.exception))
            del m
            gc.collect()
            close(mm)
        finally:
            os.environ["RAP_NUMBA_SPEC"] = EXPORTING

    def test_reset_closes_an_idle_pool_and_keeps_a_busy_one(self):
        m = self.mm.memalloc(64)
        self.mm.reset()
        self.assertIn(("device",), self.mm._pools)       # a block is live: released, kept
        del m
        gc.collect()
        self.mm.reset()
        self.assertNotIn(("device",), self.mm._pools)
        m = self.mm.memalloc(64)                          # made again on demand
        self.assertEqual(self.mm.device_pool().stats()["current_bytes"], 64)
        del m


@unittest.skipIf(REAL_CUDA_CORE, "the real cuda.core is here: integrations/cuda_core/run_tests.sh tests it")
class CudaCoreResource(unittest.TestCase):
    def test_allocate_close_and_collection(self):
        pool = rap.Allocator("ResourceAwarePool(HOST, initial_size=1MiB)")
        mr = rap.cuda_core.RapPinnedMemoryResource(allocator=pool)
        self.assertEqual((mr.is_host_accessible, mr.is_device_accessible, mr.device_id), (True, True, -1))
        b = mr.allocate(1000)
        self.assertEqual((b.size, b.memory_resource), (1000, mr))
        self.assertEqual(pool.stats()["current_bytes"], 1000)
        b.close()
        self.assertEqual(pool.stats()["current_bytes"], 0)
        b = mr.allocate(10)
        del b
        gc.collect()
        self.assertEqual(pool.stats()["current_bytes"], 0)
        pool.close()

    def test_a_close_on_another_stream_waits_for_it(self):
        pool = rap.Allocator("ResourceAwarePool(HOST, initial_size=1MiB)")
        mr = rap.cuda_core.RapPinnedMemoryResource(allocator=pool)
        q1, q2 = pool.host_queue(), pool.host_queue()
        gate = threading.Event()
        b = mr.allocate(8192, stream=q1)
        address = b.handle
        q2.submit(gate.wait)
        b.close(q2)
        c = mr.allocate(8192, stream=q1)
        self.assertNotEqual(c.handle, address)
        gate.set()
        q2.synchronize()
        c.close()
        q1.synchronize()
        pool.close()

    def test_device_resource_takes_the_device_and_spec(self):
        with self.assertRaises(rap.Error) as e:   # no such device anywhere: the pool cannot be made
            rap.cuda_core.RapMemoryResource(device_id=4095, spec="ResourceAwarePool(DEVICE::{device})")
        self.assertIn("DEVICE::4095", str(e.exception))
        mr = rap.cuda_core.RapMemoryResource(device_id=3, allocator=rap.Allocator("QuickPool(HOST)"))
        self.assertEqual((mr.device_id, mr.is_host_accessible, mr.is_device_accessible), (3, False, True))


class StreamObjects(unittest.TestCase):
    """The streams cuda.core, Numba, CuPy and PyTorch pass, as the objects they are; and a stream
    object kept while rap has a resource for it (cuda.core destroys a collected Stream's stream:
    rap's next fence there would use a handle that is gone)."""

    def test_every_kind_of_stream_object_gives_its_handle(self):
        handle = rap._allocator._stream_handle
        self.assertEqual(handle(CoreStream(0x1000)), 0x1000)                 # cuda.core 0.3
        self.assertEqual(handle(CoreStream(0x1100, as_int=True)), 0x1100)    # cuda.core 0.4 on
        self.assertEqual(handle(NumbaStream(CUstreamLike(0x1200))), 0x1200)  # .handle, CUstream
        self.assertEqual(handle(NumbaStream(ctypes.c_void_p(0x1300))), 0x1300)
        self.assertEqual(handle(NumbaStream(ctypes.c_void_p(None))), 0)     # Numba's default
        self.assertEqual(handle(CUstreamLike(0x1400)), 0x1400)
        self.assertEqual(handle(ctypes.c_void_p(0x1500)), 0x1500)
        with self.assertRaises(TypeError):
            handle(object())
        CoreStream.destroyed.clear()

    def test_a_cuda_core_stream_lives_while_rap_has_its_resource(self):
        CoreStream.destroyed.clear()
        pool = host_backed(rap.Allocator("ResourceAwarePool(HOST, initial_size=1MiB)"))
        mr = rap.cuda_core.RapMemoryResource(device_id=0, allocator=pool)
        s = CoreStream(0x1000)
        b = mr.allocate(4096, stream=s)
        b.close(s)                          # pending on s's resource
        del b, s
        gc.collect()
        self.assertEqual(CoreStream.destroyed, [])          # rap holds it: no record on a dead one
        s2 = CoreStream(0x2000)
        c = mr.allocate(4096, stream=s2)    # a new stream: the first one, idle, goes
        self.assertEqual(CoreStream.destroyed, [0x1000])
        self.assertNotIn(0x1000, pool._streams)
        del s2
        gc.collect()
        pool.release()                      # a live block is s2's: it stays
        self.assertEqual(CoreStream.destroyed, [0x1000])
        c.close()
        del c
        gc.collect()
        pool.release()
        self.assertEqual(CoreStream.destroyed, [0x1000, 0x2000])
        self.assertEqual((pool._streams, pool._kept), ({}, {}))
        self.assertEqual(pool.stats()["current_bytes"], 0)
        pool.check()
        pool.close()

    def test_a_stream_the_caller_holds_stays_and_handles_are_not_kept(self):
        pool = host_backed(rap.Allocator("ResourceAwarePool(HOST, initial_size=1MiB)"))
        s = CoreStream(0x3000, as_int=True)
        pool.free(pool.allocate(256, s))
        pool.release()
        self.assertIs(pool._kept[0x3000], s)                # the caller still has it
        pool.free(pool.allocate(256, 0x3100))                 # a bare handle is the caller's
        pool.free(pool.allocate(256, ctypes.c_void_p(0x3200)))
        self.assertEqual(sorted(pool._kept), [0x3000])
        pool.close()
        self.assertEqual((pool._streams, pool._kept), ({}, {}))
        del s
        CoreStream.destroyed.clear()

    @unittest.skipIf(REAL_NUMBA, "the real numba-cuda is here: integrations/numba/run_tests.sh tests it")
    def test_numba_arrays_made_in_a_stream_keep_it(self):
        mm = rap.numba.RapNumbaManager(context=Context())
        mm.initialize()
        pool = host_backed(mm.device_pool())
        ns = NumbaStream(ctypes.c_void_p(0x4000))
        saved, rap.numba._current_stream = rap.numba._current_stream, _numba_current_stream
        try:
            with rap.numba.stream(ns):
                m = mm.memalloc(256)
        finally:
            rap.numba._current_stream = saved
        self.assertIs(pool._kept[0x4000], ns)
        self.assertEqual(pool.stats()["current_bytes"], 256)
        del m
        gc.collect()
        self.assertEqual(pool.stats()["current_bytes"], 0)
        close(mm)


if __name__ == "__main__":
    unittest.main(verbosity=2)
