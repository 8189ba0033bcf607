"""The Python package over host memory, as CI runs it: rap.check_spec refuses what a make would
refuse, rap.Allocator allocates, frees (on a stream: a host queue), reports and releases, dir(rap)
is the API, `import rap.torch` / `rap.cupy` without the framework say what to install, and the
wheel's metadata names the MIT licence. Standard library only.

    PYTHONPATH=<build>/python python3 test_package.py [<repo>]
"""
import ctypes
import os
import subprocess
import sys
import tempfile
import threading
import unittest
import zipfile

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
del sys.argv[1:]

import rap  # noqa: E402


class CheckSpec(unittest.TestCase):
    MISTAKES = {
        "QuikPool(HOST)": "did you mean 'QuickPool'?",
        "QuickPool(host)": "platform names are exact: 'HOST'",
        "QuickPool(HOST, initial_size=64 MiB)": "without a space",
        "QuickPool(HOST, foo=1)": "unknown option 'foo'",
        "QuickPool(HOST, alignment=3)": "power of two",
        "QuickPool(HOST, heuristic=sometimes)": "'sometimes'",
        "SizeLimiter(HOST, limt=1GiB)": "unknown option 'limt' \u2014 did you mean 'limit'?",
        "QuickPool()": "needs a parent",
        "QuickPool(HOST, initial_size=-1)": "'-1'",
        "ResourceAwarePool(HOST, cross_resource=maybe)": "'maybe'",
    }

    def test_mistakes_are_refused_with_raps_sentence(self):
        for spec, why in self.MISTAKES.items():
            with self.assertRaises(ValueError, msg=spec) as e:
                rap.check_spec(spec)
            self.assertIn("rap_spec_check", str(e.exception))
            self.assertIn(why, str(e.exception), spec)

    def test_good_specs_pass_device_ones_without_a_device(self):
        for spec in ("QuickPool(HOST, initial_size=64MiB)",
                     "ThreadSafe(ResourceAwarePool(SizeLimiter(DEVICE, limit=50%), initial_size=1GiB))",
                     "QuickPool(StreamOrdered(device=1, pool=new))"):
            self.assertIs(rap.check_spec(spec), True, spec)
        with self.assertRaises(TypeError):
            rap.check_spec(b"QuickPool(HOST)")


class AllocatorOverHost(unittest.TestCase):
    def test_allocate_free_stats_release(self):
        with rap.Allocator("QuickPool(HOST, initial_size=1MiB)") as pool:
            p = pool.allocate(1000)
            self.assertIsInstance(p, int)
            self.assertNotEqual(p, 0)
            ctypes.memset(p, 7, 1000)
            s = pool.stats()
            self.assertEqual(s["current_bytes"], 1000)
            self.assertEqual(s["allocation_count"], 1)
            self.assertEqual(s["chunk_count"], 1)
            pool.deallocate(p, 1000)
            self.assertEqual(pool.stats()["current_bytes"], 0)
            pool.release()
            self.assertEqual(pool.stats()["actual_bytes"], 0)

    def test_free_on_a_stream_stays_pending_until_it_passed(self):
        with rap.Allocator("ResourceAwarePool(HOST, initial_size=1MiB)") as pool:
            q = pool.host_queue()
            opened = threading.Event()
            p = pool.allocate(4096, q)
            q.submit(opened.wait)            # the queue is busy until the test says
            pool.free(p, q)                  # so the block stays pending on q
            self.assertEqual(pool.stats()["pending_count"], 1)
            opened.set()
            q.synchronize()
            pool.release()                   # polls: the block is free, the chunk goes back
            self.assertEqual(pool.stats()["pending_count"], 0)
            self.assertEqual(pool.stats()["actual_bytes"], 0)

    def test_errors_are_exceptions_with_raps_sentence(self):
        with self.assertRaises(ValueError) as e:
            rap.Allocator("SizeLimiter(HOST, limt=1GiB)")
        self.assertIn("did you mean 'limit'", str(e.exception))
        with rap.Allocator("QuickPool(SizeLimiter(HOST, limit=1MiB))") as pool:
            with self.assertRaises(MemoryError) as e:
                pool.allocate(2 << 20)
            self.assertIn("limit of 1 MiB", str(e.exception))
            with self.assertRaises(rap.Error) as e:
                pool.free(12345)
            self.assertEqual(e.exception.status, "RAP_ERR_UNKNOWN_POINTER")
            with self.assertRaises(TypeError):
                pool.allocate(10, stream="default")
        pool.close()   # twice is fine
        with self.assertRaises(ValueError):
            pool.allocate(10)

    def test_a_leak_is_named_at_close(self):
        pool = rap.Allocator("QuickPool(HOST)")
        pool.allocate(64)
        with self.assertRaises(rap.Error) as e:
            pool.close()
        self.assertEqual(e.exception.status, "RAP_ERR_BUSY")


class Package(unittest.TestCase):
    def test_dir_is_the_api(self):
        self.assertEqual([n for n in dir(rap) if not n.startswith("__")],
                         sorted(["Allocator", "Buffer", "HostQueue", "IpcHandle", "check_spec",
                                 "library_path", "version", "status_name", "errors", "LOG_LEVELS",
                                 "set_log_handler", "set_log_level", "log_level", "trace_start",
                                 "trace_stop", "trace_flush", "Error", "InvalidError",
                                 "OutOfMemoryError", "NotFoundError", "ExistsError", "BusyError",
                                 "UnsupportedError", "WrongResourceError", "UnknownPointerError",
                                 "BackendError", "CorruptError", "device_pool",
                                 "DEFAULT_DEVICE_SPEC", "FALLBACK_DEVICE_SPEC"]))

    def test_frameworks_missing_say_what_to_install(self):
        for mod, words in (("torch", "needs PyTorch"), ("cupy", "needs CuPy")):
            code = ("import sys, importlib.abc\n"
                    "class No(importlib.abc.MetaPathFinder):\n"
                    "    def find_spec(self, name, path, target=None):\n"
                    "        if name == %r: raise ImportError('No module named ' + name)\n"
                    "sys.meta_path.insert(0, No())\n"
                    "import rap.%s\n" % (mod, mod))
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(words, r.stderr, r.stderr)
            self.assertIn("pip install", r.stderr)

    def test_wheel_metadata_names_the_mit_licence(self):
        pkg = os.path.dirname(rap.__file__)
        with tempfile.TemporaryDirectory() as out:
            r = subprocess.run([sys.executable, os.path.join(ROOT, "python", "build_wheel.py"), pkg, out],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            whl = [f for f in os.listdir(out) if f.endswith(".whl")][0]
            with zipfile.ZipFile(os.path.join(out, whl)) as z:
                meta = [n for n in z.namelist() if n.endswith("/METADATA")][0]
                text = z.read(meta).decode()
        self.assertIn("License: MIT\n", text)
        self.assertIn("Classifier: License :: OSI Approved :: MIT License", text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
