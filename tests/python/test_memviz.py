"""The memory_viz snapshot of a real trace: librap (through ctypes) writes a trace in which a block
freed on a busy host_async queue stays pending until the queue's gate opens; rap_memviz turns it
into a snapshot whose timeline and segments say so. Standard library only.

    python3 test_memviz.py LIBRAP_SO RAP_MEMVIZ_PY
"""
import ctypes
import importlib.util
import json
import os
import pickle
import sys
import tempfile
import threading
import unittest

LIB, MEMVIZ = sys.argv[1], sys.argv[2]
del sys.argv[1:3]

spec = importlib.util.spec_from_file_location("rap_memviz", MEMVIZ)
rap_memviz = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rap_memviz)

rap = ctypes.CDLL(LIB)
P = ctypes.c_void_p
JOB = ctypes.CFUNCTYPE(None, P)
for name, args in {"rap_manager_create": [ctypes.POINTER(P)],
                   "rap_allocator_make_spec": [P, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(P)],
                   "rap_resource_create_host_async": [P, ctypes.POINTER(P)],
                   "rap_resource_submit": [P, JOB, P], "rap_resource_synchronize": [P],
                   "rap_resource_destroy": [P], "rap_allocate": [P, ctypes.POINTER(P), ctypes.c_size_t, P],
                   "rap_deallocate": [P, P, P], "rap_release": [P], "rap_manager_destroy": [P],
                   "rap_trace_start": [ctypes.c_char_p], "rap_trace_stop": []}.items():
    getattr(rap, name).argtypes = args
    getattr(rap, name).restype = ctypes.c_int
rap.rap_last_error.restype = ctypes.c_char_p


def ok(st):
    if st != 0:
        raise AssertionError("rap: %d: %s" % (st, rap.rap_last_error().decode()))


class Snapshot(unittest.TestCase):
    def test_pending_block_is_awaiting_free_until_its_queue_passes(self):
        tmp = tempfile.mkdtemp()
        path = os.path.join(tmp, "t.jsonl")
        rm, pool, q = P(), P(), P()
        ok(rap.rap_manager_create(ctypes.byref(rm)))
        ok(rap.rap_allocator_make_spec(rm, b"viz", b"ResourceAwarePool(HOST, initial_size=1MiB)",
                                       ctypes.byref(pool)))
        ok(rap.rap_resource_create_host_async(rm, ctypes.byref(q)))
        gate = threading.Event()
        job = JOB(lambda _: gate.wait())
        ok(rap.rap_trace_start(path.encode()))
        ok(rap.rap_resource_submit(q, job, None))         # q is busy until the gate opens
        a, b, c = P(), P(), P()
        ok(rap.rap_allocate(pool, ctypes.byref(a), 1000, q))
        ok(rap.rap_allocate(pool, ctypes.byref(b), 3000, None))
        ok(rap.rap_deallocate(pool, a, q))                # pending on q
        ok(rap.rap_deallocate(pool, b, None))             # the host: free at once
        ok(rap.rap_allocate(pool, ctypes.byref(c), 500, None))
        snap_mid = None
        rap.rap_trace_flush.restype = ctypes.c_int
        ok(rap.rap_trace_flush())
        snap_mid = rap_memviz.snapshot_from_trace(path)   # a still pending
        gate.set()
        ok(rap.rap_resource_synchronize(q))
        ok(rap.rap_release(pool))                         # a comes back
        ok(rap.rap_deallocate(pool, c, None))
        ok(rap.rap_trace_stop())
        out = os.path.join(tmp, "s.pickle")
        snap = rap_memviz.snapshot_from_trace(path, out, allocator="viz")
        with open(out, "rb") as f:
            self.assertEqual(pickle.load(f), snap)

        t = snap["device_traces"][0]
        acts = [(e["action"], e["addr"]) for e in t if e["action"] != "segment_alloc"]
        A, B, C = a.value, b.value, c.value
        self.assertEqual(acts[:4], [("alloc", A), ("alloc", B), ("free_requested", A),
                                    ("free_requested", B)])
        self.assertEqual(acts[4], ("free_completed", B))  # b never pended
        self.assertEqual(acts[5], ("alloc", C))
        done_a = acts.index(("free_completed", A))
        self.assertGreater(done_a, 5)                     # only once q passed
        self.assertEqual([e["action"] for e in t if e["action"] == "segment_alloc"], ["segment_alloc"])
        self.assertEqual(t[0]["action"], "segment_alloc")
        for e in t:
            self.assertEqual(set(e) >= {"action", "addr", "size", "stream", "frames", "time_us"}, True)
        self.assertEqual([e["size"] for e in t if e["addr"] == A and e["action"] == "alloc"], [1000])

        # Mid-run: a is awaiting free in its segment, c allocated; the blocks tile the segment.
        seg = snap_mid["segments"][0]
        states = {bl["address"]: bl["state"] for bl in seg["blocks"]}
        self.assertEqual(states[A], "active_awaiting_free")
        self.assertEqual(states[C], "active_allocated")
        self.assertEqual(sum(bl["size"] for bl in seg["blocks"]), seg["total_size"])
        at = seg["address"]
        for bl in seg["blocks"]:
            self.assertEqual(bl["address"], at)
            at += bl["size"]
        self.assertEqual(seg["allocated_size"], 500)
        self.assertEqual(seg["active_size"], 1500)
        # At the end nothing is live: the segment is one free block.
        self.assertEqual([bl["state"] for bl in snap["segments"][0]["blocks"]], ["inactive"])
        ok(rap.rap_resource_destroy(q))
        ok(rap.rap_manager_destroy(rm))

    def test_a_chunk_that_grows_and_shrinks_in_place_is_one_segment(self):
        tmp = tempfile.mkdtemp()
        path = os.path.join(tmp, "g.jsonl")
        rm, pool = P(), P()
        ok(rap.rap_manager_create(ctypes.byref(rm)))
        ok(rap.rap_allocator_make_spec(
            rm, b"vmm", b"QuickPool(HostVmm(reserve=16MiB, granularity=64KiB), initial_size=64KiB, "
                        b"next_size=64KiB, heuristic=never)", ctypes.byref(pool)))
        ok(rap.rap_trace_start(path.encode()))
        a, b, c = P(), P(), P()
        K = 1024
        ok(rap.rap_allocate(pool, ctypes.byref(a), 32 * K, None))   # the chunk: 64 KiB
        ok(rap.rap_allocate(pool, ctypes.byref(b), 64 * K, None))   # grows in place
        ok(rap.rap_allocate(pool, ctypes.byref(c), 64 * K, None))   # and again
        ok(rap.rap_deallocate(pool, c, None))
        ok(rap.rap_deallocate(pool, b, None))
        ok(rap.rap_release(pool))                                   # one release of both ends
        ok(rap.rap_trace_stop())
        snap = rap_memviz.snapshot_from_trace(path, allocator="vmm")
        acts = [e["action"] for e in snap["device_traces"][0] if e["action"].startswith("segment")]
        self.assertEqual(acts, ["segment_alloc", "segment_map", "segment_map", "segment_unmap"])
        self.assertEqual(len(snap["segments"]), 1)                  # no segment left behind
        self.assertEqual(snap["segments"][0]["total_size"], 64 * K)
        ok(rap.rap_deallocate(pool, a, None))
        ok(rap.rap_manager_destroy(rm))

    def test_a_new_chunk_next_to_another_is_a_segment_of_its_own(self):
        # Where the trace says in_place, a chunk that happens to start where another ends is new.
        tmp = tempfile.mkdtemp()
        path = os.path.join(tmp, "adjacent.jsonl")
        with open(path, "w") as f:
            for e in ({"t": 1, "ev": "grow", "a": "p", "r": None, "p": "0x10000", "n": 4096, "held": 4096},
                      {"t": 2, "ev": "grow", "a": "p", "r": None, "p": "0x11000", "n": 4096, "held": 8192,
                       "in_place": True},
                      {"t": 3, "ev": "grow", "a": "p", "r": None, "p": "0x12000", "n": 4096, "held": 12288}):
                f.write(json.dumps(e) + "\n")
        snap = rap_memviz.snapshot_from_trace(path)
        acts = [e["action"] for e in snap["device_traces"][0]]
        self.assertEqual(acts, ["segment_alloc", "segment_map", "segment_alloc"])
        self.assertEqual([(s["address"], s["total_size"]) for s in snap["segments"]],
                         [(0x10000, 8192), (0x12000, 4096)])


if __name__ == "__main__":
    unittest.main()
