"""Tests of rap_cupy on a GPU (run_tests.sh runs them).

  full   ownership of arrays by stream, two streams with early frees (and a control without
         record_stream), stats, stream retirement, CUDA graph capture, out of memory, timing
  quick  ownership and timing only (run with RAP_CUPY_STREAM_SOURCE=python for the fallback)
  summarize
"""

import argparse
import json
import os
import sys
import time
import traceback


def dump(out, name, r):
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump(r, f, indent=1)
    print(json.dumps(r, indent=1)[:5000])


def setup():
    import cupy
    import rap_cupy
    rap_cupy.enable()   # RAP_CUPY_STREAM_SOURCE=python selects the fallback
    return cupy, rap_cupy


SPIN = r'''
extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) { }
}
'''


def ownership(cp, rap):
    s1 = cp.cuda.Stream(non_blocking=True)
    r = {}
    a = cp.empty(1000, cp.float32)
    r["default_stream_owner"] = rap.pointer_stream(a)
    with s1:
        b = cp.empty(1000, cp.float32)
    r["s1"] = s1.ptr
    r["under_with_s1_owner"] = rap.pointer_stream(b)
    s1.use()
    c = cp.empty(1000, cp.float32)
    r["after_s1_use_owner"] = rap.pointer_stream(c)
    cp.cuda.Stream.null.use()
    r["ok"] = (r["under_with_s1_owner"] == s1.ptr and r["after_s1_use_owner"] == s1.ptr and
               r["default_stream_owner"] in (0, 1, 2))
    del a, b, c
    return r


def two_streams(cp, rap, spin, iters, n, record):
    s1 = cp.cuda.Stream(non_blocking=True)   # producer
    s2 = cp.cuda.Stream(non_blocking=True)   # consumer, started late
    results, pending = [], []
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for i in range(iters):
        with s1:
            x = cp.full(n, i, dtype=cp.float32)
            x *= 2
            x += 1
            ev = s1.record()
        s2.wait_event(ev)
        with s2:
            spin((1,), (1,), (cp.int64(1000000),))   # about 0.5 ms: a reuse by s1 would race it
            y = x * 3
        if record:
            rap.record_stream(x, s2)
        del x                                          # early free, s2's read still queued
        results.append(y)
        if i % 10 == 9:
            pending.append(rap.pending_bytes())
    host_ms = (time.perf_counter() - t0) * 1e3
    cp.cuda.Device().synchronize()
    wrong_elements = wrong_iters = 0
    for i, y in enumerate(results):
        w = int((y != (2 * i + 1) * 3).sum())
        wrong_elements += w
        wrong_iters += w > 0
    after_sync = rap.memory_stats()
    rap.empty_cache()
    after_empty = rap.memory_stats()
    return {"iters": iters, "elements": n, "record_stream": record, "wrong_elements": wrong_elements,
            "wrong_iterations": wrong_iters, "max_pending_bytes": max(pending) if pending else 0,
            "host_ms": host_ms, "stats_after_sync": after_sync, "stats_after_empty_cache": after_empty}


def retire(cp, rap):
    rap.empty_cache()                           # earlier tests' streams are gone by now
    before = rap.memory_stats()["streams"]
    keep = []
    for _ in range(5):
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            keep.append(cp.ones(1 << 18, cp.float32) * 2)
        del s                                   # the stream dies while its array lives
    during = rap.memory_stats()["streams"]
    sums_ok = all(float(k.sum()) == 2.0 * (1 << 18) for k in keep)
    del keep
    rap.empty_cache()                           # no block needs those streams now: rap destroys them
    after = rap.memory_stats()["streams"]
    return {"streams_before": before, "streams_with_dead_owners": during, "streams_after": after,
            "arrays_ok": sums_ok, "ok": sums_ok and after == before}


def graph(cp, rap):
    r = {}
    try:
        s = cp.cuda.Stream(non_blocking=True)
        x = cp.arange(1 << 20, dtype=cp.float32)
        with s:
            s.begin_capture()
            y = x * 2 + 1                          # temporaries and y: from a graph pool
            z = cp.sqrt(y)
            g = s.end_capture()
        r["graph_stats"] = rap.memory_stats(graph=True)
        junk = cp.full(1 << 20, 7, cp.float32)
        ok = 0
        for k in range(10):
            x[...] = k
            cp.cuda.Device().synchronize()
            g.launch(stream=s)
            s.synchronize()
            ok += bool(cp.allclose(z, cp.sqrt(cp.float32(2 * k + 1)))) and bool((junk == 7).all())
        r.update({"captured": True, "launches": 10, "launches_ok": ok})
    except Exception as e:  # noqa: BLE001
        r.update({"captured": False, "error": "%s: %s" % (type(e).__name__, e),
                  "traceback": traceback.format_exc()[-1500:]})
    return r


def oom(cp, rap):
    r = {}
    try:
        cp.empty(1 << 46, cp.uint8)
        r["exception"] = None
    except Exception as e:  # noqa: BLE001
        r["exception"] = type(e).__name__
        r["message"] = str(e)[:300]
    r["pool_works_after"] = float(cp.ones(1000, cp.float32).sum()) == 1000.0
    return r


def timing(cp, rap, n=1 << 16, iters=3000):
    """Element-wise work whose every operation allocates: rap, then CuPy's default pool."""
    def loop():
        x = cp.ones(n, cp.float32)
        y = cp.ones(n, cp.float32)
        for _ in range(100):
            (x * 2 + y).sum()
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            z = x * 2 + y                        # two allocations (a temporary and z)
            del z
        cp.cuda.Device().synchronize()
        return (time.perf_counter() - t0) * 1e6 / iters

    rap_us = loop()
    rap_allocator = cp.cuda.get_allocator()
    pool = cp.cuda.MemoryPool()
    cp.cuda.set_allocator(pool.malloc)
    pool_us = loop()
    cp.cuda.set_allocator(rap_allocator)
    return {"elements": n, "iterations": iters, "rap_us_per_iteration": rap_us,
            "cupy_pool_us_per_iteration": pool_us}


def cmd_full(args):
    cp, rap = setup()
    spin = cp.RawKernel(SPIN, "spin")
    r = {"cupy": cp.__version__, "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
         "stream_source": rap.stream_source(), "spec": rap.spec(0)}
    r["ownership"] = ownership(cp, rap)
    r["two_streams"] = two_streams(cp, rap, spin, args.iters, args.elements, True)
    r["control_without_record_stream"] = two_streams(cp, rap, spin, args.iters, args.elements, False)
    r["retire"] = retire(cp, rap)
    r["graph"] = graph(cp, rap)
    r["oom"] = oom(cp, rap)
    r["timing"] = timing(cp, rap)
    r["final_stats"] = rap.memory_stats()
    dump(args.out, "cupy_full", r)


def cmd_quick(args):
    cp, rap = setup()
    r = {"stream_source": rap.stream_source(), "ownership": ownership(cp, rap),
         "timing": timing(cp, rap)}
    dump(args.out, "cupy_quick", r)


def load(out, name):
    try:
        with open(os.path.join(out, name + ".json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def mib(b):
    return "%.1f MiB" % (b / 2**20)


def cmd_summarize(args):
    ok, lines = True, []
    f = load(args.out, "cupy_full")
    if f:
        o, t, c = f["ownership"], f["two_streams"], f["control_without_record_stream"]
        lines.append("CuPy %s on %s; current stream from %s" % (f["cupy"], f["device"], f["stream_source"]))
        lines.append("arrays belong to the stream they were made under: %s" % o["ok"])
        lines.append("two streams, %d iterations x %d floats, early frees + record_stream: %d wrong elements; "
                     "pending up to %s; after sync pending %s, after empty_cache %s; reserved %s -> %s"
                     % (t["iters"], t["elements"], t["wrong_elements"], mib(t["max_pending_bytes"]),
                        mib(t["stats_after_sync"]["pending"]), mib(t["stats_after_empty_cache"]["pending"]),
                        mib(t["stats_after_sync"]["reserved"]), mib(t["stats_after_empty_cache"]["reserved"])))
        lines.append("  control without record_stream: %d wrong elements in %d of %d iterations"
                     % (c["wrong_elements"], c["wrong_iterations"], c["iters"]))
        r = f["retire"]
        lines.append("streams destroyed while their arrays live: rap keeps them (%d -> %d) and destroys "
                     "them afterwards (%d): %s" % (r["streams_before"], r["streams_with_dead_owners"],
                                                   r["streams_after"], "ok" if r["ok"] else "FAILED"))
        g = f["graph"]
        lines.append("CUDA graph (CuPy stream capture): %s" % (
            "%d/%d launches right, graph pool %s" % (g["launches_ok"], g["launches"],
                                                    mib(g["graph_stats"]["reserved"]))
            if g.get("captured") else g.get("error")))
        m = f["oom"]
        lines.append("out of memory: %s (%s); pool works after: %s"
                     % (m["exception"], (m.get("message") or "")[:120], m["pool_works_after"]))
        tm = f["timing"]
        lines.append("timing, z = x*2 + y on %d floats: rap %.2f us/iteration, CuPy MemoryPool %.2f"
                     % (tm["elements"], tm["rap_us_per_iteration"], tm["cupy_pool_us_per_iteration"]))
        ok &= (o["ok"] and t["wrong_elements"] == 0 and r["ok"] and m["exception"] is not None and
               m["pool_works_after"] and bool(g.get("captured")) and g["launches_ok"] == g["launches"])
    else:
        ok = False
        lines.append("full test: results missing")
    q = load(args.out, "cupy_quick")
    if q:
        ok &= q["ownership"]["ok"]
        lines.append("fallback (%s): ownership %s; rap %.2f us/iteration, CuPy MemoryPool %.2f"
                     % (q["stream_source"], q["ownership"]["ok"], q["timing"]["rap_us_per_iteration"],
                        q["timing"]["cupy_pool_us_per_iteration"]))
    else:
        ok = False
        lines.append("fallback test: results missing")
    lines.append("RESULT: " + ("PASS" if ok else "FAIL"))
    print("\n".join(lines))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--elements", type=int, default=1 << 20)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    return globals()["cmd_" + args.command](args) or 0


if __name__ == "__main__":
    sys.exit(main())
