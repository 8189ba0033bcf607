"""The Python API at the C API's level, over host memory, as CI runs it: errors as classes with
.status, sizes checked before they reach a size_t, the full statistics and reset_peaks,
memory_info, rap.Buffer (free, with, collection, a view), its DLPack capsule read back with
ctypes as a consumer would (and numpy.from_dlpack where numpy is installed), sleep and wake of a
HOST_VMM pool, a block shared with another process (HostVmm(export=posix)), the out of memory
handler, the log handler and level, and the event trace. Standard library only (numpy optional).

    PYTHONPATH=<build>/python python3 test_api.py
"""
import ctypes
import gc
import json
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import unittest

import rap  # noqa: E402
from rap import _dlpack  # noqa: E402

try:
    import numpy
except ImportError:
    numpy = None

api = ctypes.PyDLL(None)   # not ctypes.pythonapi, whose declarations every module shares
api.PyCapsule_GetName.restype = ctypes.c_char_p
api.PyCapsule_GetName.argtypes = [ctypes.py_object]
api.PyCapsule_GetPointer.restype = ctypes.c_void_p
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_SetName.restype = ctypes.c_int
api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
USED = ctypes.create_string_buffer(b"used_dltensor")   # must outlive the capsules renamed to it


def consume(capsule, versioned=False):
    """What a DLPack consumer does: takes the tensor out and renames the capsule."""
    name = b"dltensor_versioned" if versioned else b"dltensor"
    assert api.PyCapsule_GetName(capsule) == name, api.PyCapsule_GetName(capsule)
    address = api.PyCapsule_GetPointer(capsule, name)
    api.PyCapsule_SetName(capsule, ctypes.cast(USED, ctypes.c_char_p))
    kind = _dlpack.DLManagedTensorVersioned if versioned else _dlpack.DLManagedTensor
    return address, kind.from_address(address)


class Errors(unittest.TestCase):
    def test_each_status_has_its_class_and_the_builtin_it_means(self):
        self.assertTrue(issubclass(rap.OutOfMemoryError, MemoryError))
        self.assertTrue(issubclass(rap.InvalidError, ValueError))
        self.assertTrue(issubclass(rap.UnsupportedError, NotImplementedError))
        for cls in (rap.InvalidError, rap.OutOfMemoryError, rap.BusyError, rap.NotFoundError,
                    rap.UnsupportedError, rap.UnknownPointerError, rap.ExistsError):
            self.assertTrue(issubclass(cls, rap.Error), cls)
            self.assertEqual(rap.status_name(cls.code), cls.status)
        self.assertEqual(rap.status_name(-2), "RAP_ERR_NOMEM")

    def test_refusals_raise_their_class_with_raps_sentence(self):
        with self.assertRaises(rap.NotFoundError) as e:
            rap.check_spec("QuikPool(HOST)")
        self.assertEqual(e.exception.status, "RAP_ERR_NOT_FOUND")
        self.assertEqual(e.exception.code, -3)
        self.assertIn("did you mean 'QuickPool'", str(e.exception))
        with rap.Allocator("QuickPool(SizeLimiter(HOST, limit=1MiB))") as pool:
            with self.assertRaises(rap.OutOfMemoryError) as e:
                pool.allocate(2 << 20)
            self.assertEqual(e.exception.status, "RAP_ERR_NOMEM")
            with self.assertRaises(rap.UnknownPointerError):
                pool.free(4096)
        pool = rap.Allocator("QuickPool(HOST)")
        pool.allocate(8)
        with self.assertRaises(rap.BusyError):
            pool.close()

    def test_sizes_are_checked_before_they_reach_a_size_t(self):
        with rap.Allocator("QuickPool(HOST)") as pool:
            with self.assertRaises(rap.InvalidError) as e:
                pool.allocate(-1)
            self.assertIsInstance(e.exception, ValueError)
            self.assertIn("at least 0 bytes, not -1", str(e.exception))
            self.assertNotIn("18446744073709551615", str(e.exception))
            with self.assertRaises(TypeError) as e:
                pool.allocate(1.5)
            self.assertIn("rap.Allocator.allocate: a size is an int number of bytes, not float 1.5",
                          str(e.exception))
            with self.assertRaises(rap.InvalidError):
                pool.allocate(1 << 64)
            with self.assertRaises(TypeError):
                pool.buffer("10")
            self.assertEqual(pool.stats()["allocation_count"], 0)


class Statistics(unittest.TestCase):
    def test_waits_are_reported_and_peaks_reset(self):
        with rap.Allocator("ResourceAwarePool(HOST, initial_size=1MiB)") as pool:
            s = pool.stats()
            self.assertEqual(list(s)[-5:], ["waits", "host_waits", "maps", "unmaps", "backup_bytes"])
            self.assertEqual((s["waits"], s["host_waits"]), (0, 0))
            p = pool.allocate(100000)
            pool.free(p)
            self.assertEqual(pool.stats()["high_watermark"], 100000)
            pool.reset_peaks()
            self.assertEqual(pool.stats()["high_watermark"], 0)
            q = pool.host_queue()
            p = pool.allocate(1000, q)
            self.assertEqual(pool.stats(q)["current_bytes"], 1000)
            pool.free(p, q)
            q.synchronize()

    def test_memory_info_is_the_hosts(self):
        with rap.Allocator("QuickPool(HOST)") as pool:
            free, total = pool.memory_info()
            self.assertGreater(total, 0)
            self.assertLessEqual(free, total)


class Buffers(unittest.TestCase):
    def test_a_buffer_frees_itself_every_way(self):
        with rap.Allocator("QuickPool(HOST, initial_size=1MiB)") as pool:
            with pool.buffer(4096) as b:
                self.assertEqual((b.size, len(b), b.kind, b.device), (4096, 4096, "host", None))
                b.view()[:3] = b"abc"
                self.assertEqual(ctypes.string_at(b.ptr, 3), b"abc")
                self.assertEqual(pool.stats()["current_bytes"], 4096)
            self.assertTrue(b.closed)
            self.assertEqual(pool.stats()["current_bytes"], 0)
            b.free()                                  # twice is fine
            with self.assertRaises(ValueError):
                b.view()
            b = rap.Buffer(pool, 100)
            del b
            gc.collect()
            self.assertEqual(pool.stats()["current_bytes"], 0)

    def test_a_buffer_freed_on_another_stream_waits_for_it(self):
        with rap.Allocator("ResourceAwarePool(HOST, initial_size=1MiB)") as pool:
            q1, q2 = pool.host_queue(), pool.host_queue()
            gate = threading.Event()
            b = pool.buffer(8192, q1)
            q2.submit(gate.wait)                      # q2 is busy until the test says
            b.free(q2)                                # the owner frees; q2's use is recorded
            p = pool.allocate(8192, q1)
            self.assertNotEqual(p, b.ptr)             # not even q1's own while q2 runs
            gate.set()
            q2.synchronize()
            pool.free(p, q1)
            q1.synchronize()

    def test_host_memory_has_no_cuda_array_interface(self):
        with rap.Allocator("QuickPool(HOST)") as pool:
            with pool.buffer(64) as b:
                self.assertFalse(hasattr(b, "__cuda_array_interface__"))
                self.assertEqual(b.__dlpack_device__(), (1, 0))   # kDLCPU

    def test_dlpack_capsule_is_a_tensor_of_the_bytes_and_its_deleter_frees(self):
        with rap.Allocator("QuickPool(HOST, initial_size=1MiB)") as pool:
            b = pool.buffer(300)
            for versioned in (False, True):
                cap = b.__dlpack__(max_version=(1, 0) if versioned else None)
                address, m = consume(cap, versioned)
                t = m.dl_tensor
                self.assertEqual((t.data, t.device.device_type, t.device.device_id, t.ndim),
                                 (b.ptr, 1, 0, 1))
                self.assertEqual((t.shape[0], t.dtype.code, t.dtype.bits, t.dtype.lanes), (300, 1, 8, 1))
                self.assertFalse(t.strides)
                if versioned:
                    self.assertEqual((m.version.major, m.version.minor, m.flags), (1, 0, 0))
                del cap                               # consumed: the capsule deletes nothing
                gc.collect()
                self.assertEqual(_dlpack.live_exports(), 1)
                b.free()                              # the consumer's tensor still holds it
                self.assertEqual(pool.stats()["current_bytes"], 300)
                m.deleter(address)                    # the consumer lets go: the block goes back
                self.assertEqual(_dlpack.live_exports(), 0)
                self.assertEqual(pool.stats()["current_bytes"], 0)
                b = pool.buffer(300)
            b.free()

    def test_a_capsule_never_consumed_lets_the_buffer_go(self):
        with rap.Allocator("QuickPool(HOST)") as pool:
            b = pool.buffer(64)
            cap = b.__dlpack__()
            del b
            gc.collect()
            self.assertEqual(pool.stats()["current_bytes"], 64)   # the capsule holds it
            del cap
            gc.collect()
            self.assertEqual(pool.stats()["current_bytes"], 0)
            self.assertEqual(_dlpack.live_exports(), 0)

    def test_dlpack_refuses_a_copy_or_another_device(self):
        with rap.Allocator("QuickPool(HOST)") as pool:
            with pool.buffer(64) as b:
                with self.assertRaises(rap.UnsupportedError):
                    b.__dlpack__(copy=True)
                with self.assertRaises(rap.UnsupportedError):
                    b.__dlpack__(dl_device=(2, 0))
                self.assertEqual(_dlpack.live_exports(), 0)
            with self.assertRaises(ValueError):
                b.__dlpack__()

    @unittest.skipIf(numpy is None, "numpy is not installed (python3-numpy)")
    def test_numpy_reads_the_buffer_through_dlpack(self):
        with rap.Allocator("QuickPool(HOST, initial_size=1MiB)") as pool:
            b = pool.buffer(16)
            a = numpy.from_dlpack(b)   # numpy marks what it imports read-only
            self.assertEqual((a.dtype, a.shape), (numpy.uint8, (16,)))
            self.assertEqual(a.__array_interface__["data"][0], b.ptr)
            b.view()[:] = bytes(range(16))
            self.assertEqual(a.tolist(), list(range(16)))
            b.free()
            self.assertEqual(pool.stats()["current_bytes"], 16)   # a still reads it
            del a
            gc.collect()
            self.assertEqual(pool.stats()["current_bytes"], 0)


class SleepAndShare(unittest.TestCase):
    SPEC = "ResourceAwarePool(HostVmm(export=posix), initial_size=2MiB)"

    def test_sleep_keeps_the_bytes_and_refuses_meanwhile(self):
        with rap.Allocator("ResourceAwarePool(HOST_VMM, initial_size=2MiB)") as pool:
            with pool.buffer(4096) as b:
                b.view()[:5] = b"hello"
                pool.sleep()
                self.assertTrue(pool.asleep)
                with self.assertRaises(rap.BusyError):
                    pool.allocate(64)
                pool.wake()
                self.assertFalse(pool.asleep)
                self.assertEqual(bytes(b.view()[:5]), b"hello")
                self.assertGreaterEqual(pool.stats()["backup_bytes"], 4096)   # kept for the next
                pool.sleep("release")
                self.assertEqual(pool.stats()["backup_bytes"], 0)
            with self.assertRaises(rap.InvalidError):
                pool.sleep("nap")
        with rap.Allocator("QuickPool(HOST)") as pool:
            with self.assertRaises(rap.UnsupportedError):
                pool.sleep()

    def test_a_block_shared_with_another_process(self):
        code = ("import pickle, sys, rap\n"
                "h = pickle.loads(sys.stdin.buffer.read())\n"
                "with rap.Allocator('QuickPool(HOST)') as other:\n"
                "    with other.open(h) as b:\n"
                "        sys.stdout.write('%d %s' % (b.size, bytes(b.view()[:4]).decode()))\n"
                "        b.view()[0:4] = b'pong'\n")
        with rap.Allocator(self.SPEC) as pool:
            b = pool.buffer(8192)
            b.view()[:4] = b"ping"
            h = pool.share(b)
            self.assertEqual(pickle.loads(pickle.dumps(h)), h)
            r = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(h),
                               capture_output=True)
            if r.returncode != 0 and b"ptrace" in r.stderr:
                pool.revoke(h)
                b.free()
                self.skipTest("no ptrace permission here: %s" % r.stderr.decode()[-300:])
            self.assertEqual(r.returncode, 0, r.stderr.decode())
            self.assertEqual(r.stdout, b"8192 ping")
            self.assertEqual(bytes(b.view()[:4]), b"pong")
            unused = pool.share(b)
            pool.revoke(unused)
            b.free()
        with rap.Allocator("QuickPool(HOST)") as pool:
            with pool.buffer(64) as b:
                with self.assertRaises(rap.Error):
                    pool.share(b)


class DefaultSpec(unittest.TestCase):
    def test_the_device_default_is_rap_h_s_and_a_valid_spec(self):
        """rap.DEFAULT_DEVICE_SPEC and FALLBACK_DEVICE_SPEC are rap/rap.h's macros, word for word
        (every integration makes its pools from one or the other), and both are specs rap makes."""
        header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "rap", "rap.h")
        with open(header) as f:
            text = f.read()
        for name, value in (("RAP_DEFAULT_DEVICE_SPEC", rap.DEFAULT_DEVICE_SPEC),
                            ("RAP_FALLBACK_DEVICE_SPEC", rap.FALLBACK_DEVICE_SPEC)):
            start = text.index("#define " + name)
            body = text[start:text.index("\n\n", start) if "\n\n" in text[start:] else None]
            body = body.split("\n#define", 1)[0]
            pieces = [p for p in body.replace("\\\n", "\n").split('"')[1::2]]
            self.assertEqual("".join(pieces), value, name)
            self.assertTrue(rap.check_spec(value.replace("{device}", "0")))
        self.assertIn("DeviceVmm", rap.DEFAULT_DEVICE_SPEC)
        self.assertIn("export=posix", rap.DEFAULT_DEVICE_SPEC)

    def test_device_pool_falls_back_only_where_the_default_is_unsupported(self):
        """rap.device_pool makes the default; where that is refused as unsupported, the fallback;
        any other refusal, and any refusal of a spec the caller named, is raised as it came."""
        made = []
        real = rap.Allocator
        refusal = {}

        class Fake:
            def __init__(self, spec, name=None):
                made.append((spec, name))
                if "DeviceVmm" in spec and refusal:
                    raise refusal["error"]

        rap.Allocator = Fake
        try:
            refusal["error"] = rap.UnsupportedError("RAP_ERR_UNSUPPORTED", "no VMM here")
            rap.device_pool(3, "x3")
            self.assertEqual(made, [(rap.DEFAULT_DEVICE_SPEC.replace("{device}", "3"), "x3"),
                                    (rap.FALLBACK_DEVICE_SPEC.replace("{device}", "3"), "x3")])
            del made[:]
            with self.assertRaises(rap.UnsupportedError):
                rap.device_pool(0, "named", "ResourceAwarePool(DeviceVmm(device={device}))")
            self.assertEqual(made, [("ResourceAwarePool(DeviceVmm(device=0))", "named")])
            del made[:]
            refusal["error"] = rap.OutOfMemoryError("RAP_ERR_NOMEM", "no memory")
            with self.assertRaises(rap.OutOfMemoryError):
                rap.device_pool(1, "x1")
            self.assertEqual(len(made), 1)
            del made[:]
            refusal.clear()
            rap.device_pool(2, "x2")
            self.assertEqual(made, [(rap.DEFAULT_DEVICE_SPEC.replace("{device}", "2"), "x2")])
        finally:
            rap.Allocator = real


class Handlers(unittest.TestCase):
    def test_the_oom_handler_frees_and_retries_and_its_errors_are_the_cause(self):
        with rap.Allocator("SizeLimiter(QuickPool(HOST), limit=1MiB)") as pool:
            hog = [pool.allocate(600 << 10)]
            calls = []

            def handler(nbytes, attempt):
                calls.append((nbytes, attempt))
                if hog:
                    pool.free(hog.pop())
                    return True
                return False
            pool.set_oom_handler(handler)
            p = pool.allocate(600 << 10)
            self.assertEqual(calls, [(600 << 10, 1)])
            with self.assertRaises(rap.OutOfMemoryError):
                pool.allocate(600 << 10)
            self.assertEqual(calls[-1], (600 << 10, 1))

            def broken(nbytes, attempt):
                raise KeyError("the handler's own bug")
            pool.set_oom_handler(broken)
            with self.assertRaises(rap.OutOfMemoryError) as e:
                pool.allocate(600 << 10)
            self.assertIsInstance(e.exception.__cause__, KeyError)
            pool.set_oom_handler(None)
            pool.free(p)

    def test_log_messages_reach_the_handler_at_the_level_set(self):
        got = []
        before = rap.log_level()
        try:
            rap.set_log_level("warn")
            self.assertEqual(rap.log_level(), "warn")
            rap.set_log_handler(lambda level, message: got.append((level, message)))
            pool = rap.Allocator("QuickPool(HOST)")
            pool.allocate(64)
            with self.assertRaises(rap.BusyError):
                pool.close()                          # a leak: rap warns
            self.assertTrue(any(lv == "warn" and "leaked" in m for lv, m in got), got)
            got.clear()
            rap.set_log_level("off")
            pool = rap.Allocator("QuickPool(HOST)")
            pool.allocate(64)
            with self.assertRaises(rap.BusyError):
                pool.close()
            self.assertEqual(got, [])
            with self.assertRaises(rap.InvalidError):
                rap.set_log_level("loud")
        finally:
            rap.set_log_handler(None)
            rap.set_log_level(before)

    def test_trace_records_the_calls(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.jsonl")
            rap.trace_start(path)
            try:
                with rap.Allocator("QuickPool(HOST)") as pool:
                    pool.free(pool.allocate(4000))
                rap.trace_flush()
            finally:
                rap.trace_stop()
            with open(path) as f:
                events = [json.loads(line) for line in f if line.strip()]
        self.assertTrue(any(e["ev"] == "alloc" and e.get("n") == 4000 for e in events), events[:5])
        self.assertTrue(any(e["ev"] == "dealloc" and e.get("a") == "python" for e in events), events[:5])
        rap.trace_stop()   # none open: fine


if __name__ == "__main__":
    unittest.main(verbosity=2)
