"""Where each block was allocated, from the trace to memory_viz, without torch or a GPU.

A probe library (pyframes_probe.cpp) allocates as rap_torch_malloc does: it gathers the calling
thread's Python frames with integrations/torch/rap_pyframes.cpp and hands them to the trace.
Through ctypes.PyDLL the GIL is held during the call; through ctypes.CDLL it is not, as when
PyTorch allocates inside an operator (it lets the GIL go), and the frames are gathered with the GIL
taken back; a thread Python never saw carries none. RAP_TRACE_STACK adds the C
frames; rap_memviz puts both into the snapshot's frames. Standard library only.

    python3 test_pyframes.py LIBRAP_SO PROBE_SO RAP_MEMVIZ_PY
"""
import ctypes
import importlib.util
import json
import os
import pickle
import shutil
import sys
import tempfile
import unittest

LIB, PROBE, MEMVIZ = sys.argv[1], sys.argv[2], sys.argv[3]
del sys.argv[1:4]

spec = importlib.util.spec_from_file_location("rap_memviz", MEMVIZ)
rap_memviz = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rap_memviz)

rap = ctypes.CDLL(LIB)
P = ctypes.c_void_p
for name, args in {"rap_manager_create": [ctypes.POINTER(P)],
                   "rap_allocator_make_spec": [P, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(P)],
                   "rap_deallocate": [P, P, P], "rap_manager_destroy": [P],
                   "rap_trace_start": [ctypes.c_char_p], "rap_trace_stop": [], "rap_trace_active": []}.items():
    getattr(rap, name).argtypes = args
    getattr(rap, name).restype = ctypes.c_int
rap.rap_last_error.restype = ctypes.c_char_p

with_gil = ctypes.PyDLL(PROBE)      # the GIL stays held through the call
without_gil = ctypes.CDLL(PROBE)    # ctypes lets it go
for lib in (with_gil, without_gil):
    lib.rap_probe_allocate.argtypes = [P, ctypes.POINTER(P), ctypes.c_size_t]
    lib.rap_probe_allocate.restype = ctypes.c_int
    lib.rap_probe_set_depth.argtypes = [ctypes.c_int]
    lib.rap_probe_set_depth.restype = ctypes.c_int
    lib.rap_probe_allocate_on_a_c_thread.argtypes = [P, ctypes.POINTER(P), ctypes.c_size_t]
    lib.rap_probe_allocate_on_a_c_thread.restype = ctypes.c_int

HERE = os.path.abspath(__file__)


def ok(st):
    if st != 0:
        raise AssertionError("rap: %d: %s" % (st, rap.rap_last_error().decode()))


def lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def line_of(fn):
    return fn.__code__.co_firstlineno


class Frames(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.path = os.path.join(self.tmp, "t.jsonl")
        self.rm, self.pool = P(), P()
        ok(rap.rap_manager_create(ctypes.byref(self.rm)))
        ok(rap.rap_allocator_make_spec(self.rm, b"py", b"QuickPool(HOST, initial_size=1MiB)",
                                       ctypes.byref(self.pool)))
        self.blocks = []

    def tearDown(self):
        for b in self.blocks:
            ok(rap.rap_deallocate(self.pool, b, None))
        ok(rap.rap_manager_destroy(self.rm))
        os.environ.pop("RAP_TRACE_STACK", None)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def allocate(self, lib, n):
        p = P()
        ok(lib.rap_probe_allocate(self.pool, ctypes.byref(p), n))   # the line a frame names
        self.blocks.append(p)
        return p.value

    def model_forward(self, n):
        return self.allocate(with_gil, n)

    def test_a_depth_past_32_is_refused(self):
        self.assertNotEqual(with_gil.rap_probe_set_depth(33), 0)
        self.assertIn(b"from 0 to 32, not 33", rap.rap_last_error())

    def test_python_frames_on_the_alloc_line_only_while_asked_and_from_python_threads(self):
        ok(with_gil.rap_probe_set_depth(0))
        ok(rap.rap_trace_start(self.path.encode()))
        self.assertEqual(rap.rap_trace_active(), 1)
        off = self.model_forward(100)                 # not asked: no frames
        ok(with_gil.rap_probe_set_depth(3))
        a = self.model_forward(200)
        b = self.allocate(without_gil, 300)           # the GIL let go, as PyTorch does: frames
        q = P()
        ok(with_gil.rap_probe_allocate_on_a_c_thread(self.pool, ctypes.byref(q), 500))   # none
        self.blocks.append(q)
        ok(rap.rap_trace_stop())
        self.assertEqual(rap.rap_trace_active(), 0)
        c = self.model_forward(400)                   # no trace: nothing is gathered
        allocs = {int(e["p"], 16): e for e in lines(self.path) if e.get("ev") == "alloc" and e.get("d") == 0}
        self.assertNotIn("pystack", allocs[off])
        self.assertNotIn("pystack", allocs[q.value])
        self.assertEqual(allocs[b]["pystack"].split("\n")[0],
                         "%s:%d Frames.allocate" % (HERE, line_of(Frames.allocate) + 2))
        self.assertNotIn(c, allocs)
        frames = allocs[a]["pystack"].split("\n")
        self.assertEqual(len(frames), 3)               # the depth asked for
        # Innermost first: allocate (the probe's caller), model_forward, this test.
        self.assertEqual(frames[0], "%s:%d Frames.allocate" % (HERE, line_of(Frames.allocate) + 2))
        self.assertEqual(frames[1], "%s:%d Frames.model_forward" % (HERE, line_of(Frames.model_forward) + 1))
        self.assertTrue(frames[2].endswith(
            " Frames.test_python_frames_on_the_alloc_line_only_while_asked_and_from_python_threads"), frames[2])

    def test_memviz_frames_carry_the_c_and_python_stacks(self):
        os.environ["RAP_TRACE_STACK"] = "2"
        ok(with_gil.rap_probe_set_depth(2))
        ok(rap.rap_trace_start(self.path.encode()))
        a = self.model_forward(1000)
        b = self.model_forward(3000)
        ok(rap.rap_deallocate(self.pool, P(b), None))
        self.blocks.remove(self.blocks[-1])
        ok(rap.rap_trace_stop())
        line = next(e for e in lines(self.path) if e.get("ev") == "alloc" and e.get("d") == 0)
        self.assertIn("stack", line)
        self.assertIn("pystack", line)
        out = os.path.join(self.tmp, "s.pickle")
        snap = rap_memviz.snapshot_from_trace(self.path, out, allocator="py")
        with open(out, "rb") as f:
            self.assertEqual(pickle.load(f), snap)
        t = snap["device_traces"][0]
        alloc_a = next(e for e in t if e["action"] == "alloc" and e["addr"] == a)
        fr = alloc_a["frames"]
        self.assertEqual(len(fr), 4)                   # two C frames, then two Python frames
        for f in fr:
            self.assertEqual(set(f), {"filename", "line", "name"})
            self.assertIsInstance(f["line"], int)
        # The innermost C frame is the probe, where rap_allocate returns to.
        if shutil.which("addr2line"):
            self.assertIn("rap_probe_allocate", fr[0]["name"])
            self.assertTrue(fr[0]["filename"].endswith("pyframes_probe.cpp"), fr[0])
            self.assertGreater(fr[0]["line"], 0)
        else:
            self.assertTrue(fr[0]["filename"].endswith(os.path.basename(PROBE)))
        self.assertEqual(fr[2], {"filename": HERE, "line": line_of(Frames.allocate) + 2,
                                 "name": "Frames.allocate"})
        self.assertEqual(fr[3]["name"], "Frames.model_forward")
        # Unnamed, C frames are as written.
        raw = rap_memviz.snapshot_from_trace(self.path, allocator="py", symbolize=False)
        raw_a = next(e for e in raw["device_traces"][0] if e["action"] == "alloc" and e["addr"] == a)
        self.assertTrue(raw_a["frames"][0]["name"].startswith("+0x"))
        self.assertEqual(raw_a["frames"][2:], fr[2:])
        # The live block in its segment carries its frames; frees carry none (no stack is recorded
        # for them).
        block = next(bl for bl in snap["segments"][0]["blocks"] if bl["address"] == a)
        self.assertEqual(block["frames"], fr)
        self.assertEqual([e["frames"] for e in t if e["action"].startswith("free")], [[], []])
        alloc_b = next(e for e in t if e["action"] == "alloc" and e["addr"] == b)
        self.assertEqual(alloc_b["frames"][0], fr[0])   # the same call site in C


if __name__ == "__main__":
    unittest.main()
