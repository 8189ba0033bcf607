"""Tests of rap_cupy on a GPU (run_tests.sh runs them).

  full   ownership of arrays by stream, two streams with early frees (and a control without
         record_stream), stats, stream retirement, CUDA graph capture, out of memory, timing
  quick  ownership and timing only (run with RAP_CUPY_STREAM_SOURCE=python for the fallback)
  pool   CuPy's names: the MemoryPool surface against what it should report, set_limit (size,
         fraction, refusal with OutOfMemoryError and recovery), free_all_blocks, the pinned host
         pool, and CUPY_GPU_MEMORY_LIMIT (bytes and "N%") in child processes (envlimit)
  ipc    rap_cupy.share/open over DeviceVmm(export=posix) (RAP_CUPY_SPEC) with a spawned child:
         values arrive, the child's write is seen here, a strided view keeps its layout, a handle
         opens once, the freed block stays pending while the child holds it and returns after,
         and cupy.cuda.runtime.ipcGetMemHandle on rap's memory names share/open
  summarize

With RAP_TEST_FROM_WHEEL=1 the module is the installed package's rap.cupy, not rap_cupy from
PYTHONPATH, and the results say where it was loaded from. pytest runs test_memory_pool,
test_pinned_pool and test_env_limit (python -m pytest integrations/cupy/test_cupy.py).
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


def import_rap_cupy():
    """rap_cupy from PYTHONPATH, or the installed package's rap.cupy with RAP_TEST_FROM_WHEEL=1."""
    if os.environ.get("RAP_TEST_FROM_WHEEL") == "1":
        import rap.cupy as rap_cupy
    else:
        import rap_cupy
    return rap_cupy


def setup():
    import cupy
    rap_cupy = import_rap_cupy()
    rap_cupy.enable()   # RAP_CUPY_STREAM_SOURCE=python selects the fallback
    return cupy, rap_cupy


def origin(rap):
    """Where the module and its library were loaded from."""
    return {"module": rap.__name__, "file": rap.__file__, "library": rap.library_path(),
            "from_wheel": os.environ.get("RAP_TEST_FROM_WHEEL") == "1"}


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
         "stream_source": rap.stream_source(), "spec": rap.spec(0), "origin": origin(rap)}
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


MIB = 1 << 20


def memory_pool(cp, rap):
    """The MemoryPool surface: installed by enable(), figures that agree with what was allocated,
    malloc's MemoryPointer, set_limit (size, fraction, refusal, recovery), free_all_blocks."""
    pool = rap.get_default_memory_pool()
    r, bad = {}, []

    def check(name, cond, value=None):
        r[name] = value if value is not None else bool(cond)
        if not cond:
            bad.append(name)

    check("installed", cp.cuda.get_allocator() is pool.malloc)
    check("a_second_pool_is_a_view", rap.MemoryPool().used_bytes() == pool.used_bytes())
    cp.cuda.Device().synchronize()
    pool.free_all_blocks()
    u0, t0 = pool.used_bytes(), pool.total_bytes()
    a = cp.empty(10 * MIB, cp.uint8)
    u1, t1, f1 = pool.used_bytes(), pool.total_bytes(), pool.free_bytes()
    check("used_grows_by_the_array", 10 * MIB <= u1 - u0 < 10 * MIB + 4096, u1 - u0)
    check("total_at_least_used", t1 >= u1, t1)
    check("free_is_total_minus_used", f1 == t1 - u1, f1)
    del a
    cp.cuda.Device().synchronize()
    check("used_back_after_del", pool.used_bytes() == u0, pool.used_bytes())
    check("a_free_block_after_del", pool.n_free_blocks() >= 1, pool.n_free_blocks())
    m = pool.malloc(1000)
    check("malloc_gives_a_memory_pointer", isinstance(m, cp.cuda.MemoryPointer) and m.ptr != 0
          and m.device_id == cp.cuda.runtime.getDevice(), type(m).__name__)
    check("malloc_counts", pool.used_bytes() >= u0 + 1000, pool.used_bytes() - u0)
    del m

    # free_all_blocks gives memory back: a large array grows the pool, and once it is gone and
    # its stream has passed, total_bytes drops by at least its size.
    big = cp.empty(512 * MIB, cp.uint8)
    big.fill(1)
    t_big = pool.total_bytes()
    del big
    cp.cuda.Device().synchronize()
    pool.free_all_blocks()
    t_after = pool.total_bytes()
    check("free_all_blocks_gives_back", t_big - t_after >= 512 * MIB,
          {"total_with_array": t_big, "total_after": t_after, "total_before": t0})
    pool.free_all_blocks(stream=cp.cuda.get_current_stream())   # CuPy's signature

    # set_limit(size): an allocation past it raises CuPy's OutOfMemoryError, and one fits again
    # once memory is freed.
    base = pool.used_bytes()
    limit = base + 64 * MIB
    pool.set_limit(size=limit)
    check("get_limit_is_the_size", pool.get_limit() == limit, pool.get_limit())
    x = cp.empty(40 * MIB, cp.uint8)
    try:
        cp.empty(40 * MIB, cp.uint8)
        refused, message = None, None
    except Exception as e:  # noqa: BLE001
        refused, message = type(e).__name__, str(e)
    check("past_the_limit_raises_OutOfMemoryError", refused == "OutOfMemoryError",
          {"exception": refused, "message": message})
    check("the_error_names_the_limit", message is not None and "{:,}".format(limit) in message)
    del x
    try:
        y = cp.empty(60 * MIB, cp.uint8)
        recovered = pool.used_bytes() <= limit
        del y
    except Exception as e:  # noqa: BLE001
        recovered = "%s: %s" % (type(e).__name__, e)
    check("fits_again_after_free", recovered is True, recovered)

    # fraction: of the device's total memory, as CuPy's memGetInfo reports it.
    total = cp.cuda.runtime.memGetInfo()[1]
    pool.set_limit(fraction=0.25)
    check("fraction_of_device_memory", abs(pool.get_limit() - int(0.25 * total)) <= MIB,
          {"limit": pool.get_limit(), "device_total": total})
    pool.set_limit(fraction=0.0)
    try:
        cp.empty(1, cp.uint8)
        zero = None
    except Exception as e:  # noqa: BLE001
        zero = type(e).__name__
    r["fraction_0"] = zero   # CuPy: limit 0 means none, so this allocates
    errors = []
    for kwargs in ({"fraction": 1.5}, {"fraction": -0.1}, {"size": 1, "fraction": 0.5},
                   {"size": -1}):
        try:
            pool.set_limit(**kwargs)
            errors.append(None)
        except ValueError:
            errors.append("ValueError")
    check("bad_limits_are_ValueError", errors == ["ValueError"] * 4, errors)
    pool.set_limit()
    check("no_limit", pool.get_limit() == 0, pool.get_limit())
    check("works_after", float(cp.ones(1000, cp.float32).sum()) == 1000.0)
    r["stats"] = {"used": pool.used_bytes(), "total": pool.total_bytes(), "free": pool.free_bytes(),
                  "n_free_blocks": pool.n_free_blocks()}
    r["failed"] = bad
    r["ok"] = not bad
    return r


def pinned_pool(cp, rap):
    """The pinned host pool through cupy.cuda.alloc_pinned_memory: a cupy array copied to and from
    a numpy array on a pinned buffer from rap's pool, values equal; the buffer goes back to the
    pool when dropped, and free_all_blocks gives the chunk back."""
    import numpy
    r, bad = {}, []

    def check(name, cond, value=None):
        r[name] = value if value is not None else bool(cond)
        if not cond:
            bad.append(name)

    rap.enable_pinned()
    pp = rap.get_default_pinned_memory_pool()
    r["spec"] = pp.spec()
    n = 1 << 20
    used0 = pp.used_bytes()
    mem = cp.cuda.alloc_pinned_memory(n * 4)
    check("a_pinned_memory_pointer", isinstance(mem, cp.cuda.PinnedMemoryPointer),
          type(mem).__name__)
    check("size", mem.size() == n * 4, mem.size())
    check("from_rap", pp.used_bytes() >= used0 + n * 4, pp.used_bytes() - used0)
    check("page_locked", bool(cp.cuda.pinned_memory.is_memory_pinned(mem.ptr)))
    h = numpy.frombuffer(mem, numpy.float32, n)
    h[:] = numpy.arange(n, dtype=numpy.float32)
    d = cp.empty(n, cp.float32)
    d.set(h)
    check("host_to_device", bool((d == cp.arange(n, dtype=cp.float32)).all()))
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        e = d * 2
        e.get(out=h, stream=s)
    s.synchronize()
    check("device_to_host", bool((h == 2 * numpy.arange(n, dtype=numpy.float32)).all()))
    del h, mem, e, d
    cp.cuda.Device().synchronize()
    cp.cuda.alloc_pinned_memory(0)   # CuPy lets go of staging buffers whose copies are done
    check("back_to_the_pool", pp.used_bytes() == used0, pp.used_bytes())
    check("a_free_block", pp.n_free_blocks() >= 1, pp.n_free_blocks())
    t = pp.total_bytes()
    pp.free_all_blocks()
    check("free_all_blocks_gives_back", pp.total_bytes() < t or t == 0,
          {"before": t, "after": pp.total_bytes()})
    z = cp.cuda.alloc_pinned_memory(0)
    check("zero_bytes", z.size() == 0)
    # CuPy's own copies that stage through pinned memory.
    a = cp.arange(1000, dtype=cp.float64)
    check("asnumpy", bool((cp.asnumpy(a, stream=s) == numpy.arange(1000)).all()))
    r["failed"] = bad
    r["ok"] = not bad
    return r


ENV_CASES = (("268435456", "bytes"), ("1%", "percent"))


def env_limit_child(cp, rap, which):
    """In a child process with CUPY_GPU_MEMORY_LIMIT set: the default pool's limit is the
    environment's at the first allocation, and it refuses past it."""
    pool = rap.get_default_memory_pool()
    total = cp.cuda.runtime.memGetInfo()[1]
    want = 268435456 if which == "bytes" else int(total * 0.01)
    first = cp.empty(16, cp.uint8)   # the device's first allocation reads the environment
    limit = pool.get_limit()
    ok_limit = abs(limit - want) <= MIB
    try:
        x = cp.empty(want // 2, cp.uint8)
        under = True
    except Exception:  # noqa: BLE001
        under = False
    try:
        cp.empty(want // 2 + MIB, cp.uint8)
        over = None
    except Exception as e:  # noqa: BLE001
        over = type(e).__name__
    del x, first
    return {"env": os.environ.get("CUPY_GPU_MEMORY_LIMIT"), "limit": limit, "want": want,
            "limit_ok": ok_limit, "half_fits": under, "past_it": over,
            "ok": ok_limit and under and over == "OutOfMemoryError"}


def env_limit(out):
    """env_limit_child in child processes, one per ENV_CASES, and one where set_limit before the
    first allocation wins over the environment (as in CuPy)."""
    import subprocess
    r = {}
    for value, which in ENV_CASES + (("268435456", "set_limit_wins"),):
        env = dict(os.environ, CUPY_GPU_MEMORY_LIMIT=value)
        path = os.path.join(out, "cupy_envlimit_%s.json" % which)
        cmd = [sys.executable, os.path.abspath(__file__), "envlimit", "--which", which,
               "--out", out]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        try:
            with open(path) as f:
                r[which] = json.load(f)
        except (OSError, ValueError):
            r[which] = {"ok": False, "rc": p.returncode, "output": (p.stdout + p.stderr)[-2000:]}
    r["ok"] = all(v.get("ok") for v in r.values() if isinstance(v, dict))
    return r


def cmd_envlimit(args):
    cp, rap = setup()
    if args.which == "set_limit_wins":
        pool = rap.get_default_memory_pool()
        pool.set_limit(size=64 * MIB)       # before the first allocation
        cp.empty(16, cp.uint8)
        r = {"limit": pool.get_limit(), "ok": pool.get_limit() == 64 * MIB}
    else:
        r = env_limit_child(cp, rap, args.which)
    with open(os.path.join(args.out, "cupy_envlimit_%s.json" % args.which), "w") as f:
        json.dump(r, f, indent=1)
    print(json.dumps(r, indent=1))
    return 0 if r["ok"] else 1


def cmd_pool(args):
    cp, rap = setup()
    r = {"origin": origin(rap), "memory_pool": memory_pool(cp, rap), "pinned": pinned_pool(cp, rap),
         "env_limit": env_limit(args.out)}
    r["ok"] = r["memory_pool"]["ok"] and r["pinned"]["ok"] and r["env_limit"]["ok"]
    dump(args.out, "cupy_pool", r)


def _ipc_child(q_in, q_out):
    """The receiver (a spawned process): opens what the parent shared, checks it, writes into it,
    holds it until told, then drops it (which closes the import on the stream it was used on)."""
    try:
        import cupy as cp
        rap = import_rap_cupy()
        rap.enable()                              # its own pool, as a receiver's would be
        x = rap.open(q_in.get())                  # a flat array of 1 << 20 floats
        ok_values = bool((x == cp.arange(1 << 20, dtype=cp.float32)).all())
        x *= 2                                    # the parent sees it: the same memory
        v = rap.open(q_in.get())                  # a strided view of a (256, 64) float64 array
        expect = cp.arange(256 * 64, dtype=cp.float64).reshape(256, 64)[3:, 1::2]
        ok_view = (v.shape == expect.shape and v.strides == expect.strides and
                   bool((v == expect).all()))
        second = None
        try:
            rap.open(q_in.get())                  # the first handle again
        except RuntimeError as e:                 # a handle opens once
            second = str(e)
        cp.cuda.get_current_stream().synchronize()
        q_out.put(("holding", ok_values, ok_view, second))
        q_in.get()                                # "drop"
        del x, v
        cp.cuda.get_current_stream().synchronize()
        q_out.put(("dropped", True))
    except BaseException as e:
        q_out.put(("error", "%s: %s" % (type(e).__name__, e), traceback.format_exc()))


def cmd_ipc(args):
    """rap_cupy.share/open with the pool over DeviceVmm(export=posix) (run_tests.sh sets
    RAP_CUPY_SPEC): a child spawned with multiprocessing opens a shared array and sees its
    values; its write is seen here; a strided view arrives with its shape, strides and offset; a
    second open of a handle is refused; this process frees both arrays at once, and their bytes
    stay pending while the child holds them and return after it dropped them; CuPy's
    ipcGetMemHandle on rap's memory raises a sentence naming share/open."""
    import multiprocessing as mp
    import pickle
    cp, rap = setup()
    r = {"spec": rap.spec(0), "origin": origin(rap)}
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_ipc_child, args=(q_in, q_out))
    child.start()
    try:
        x = cp.arange(1 << 20, dtype=cp.float32)                        # 4 MiB
        base = cp.arange(256 * 64, dtype=cp.float64).reshape(256, 64)   # 128 KiB
        view = base[3:, 1::2]
        h = rap.share(x)
        r["handle_pickled_bytes"] = len(pickle.dumps(h))
        q_in.put(h)
        hv = rap.share(view)
        r["view_offset"] = hv.offset
        q_in.put(hv)
        q_in.put(h)
        msg = q_out.get(timeout=120)
        if msg[0] == "error":
            raise RuntimeError("child: " + msg[1] + "\n" + msg[2])
        _, r["values_arrived"], r["view_arrived"], r["second_open_error"] = msg
        cp.cuda.Device().synchronize()
        r["child_write_seen"] = bool((x == 2 * cp.arange(1 << 20, dtype=cp.float32)).all())
        try:
            cp.cuda.runtime.ipcGetMemHandle(x.data.ptr)
            r["cupy_ipc_error"] = None
        except RuntimeError as e:
            r["cupy_ipc_error"] = str(e)
        except Exception as e:        # CUDA's own error: the hook did not apply
            r["cupy_ipc_error"] = "not rap's sentence: %s: %s" % (type(e).__name__, e)
        del x, view, base               # freed here while the child holds them
        cp.cuda.Device().synchronize()
        rap.empty_cache()
        r["pending_while_held_MiB"] = rap.pending_bytes() / 2**20
        q_in.put("drop")
        msg = q_out.get(timeout=120)
        if msg[0] == "error":
            raise RuntimeError("child: " + msg[1] + "\n" + msg[2])
        child.join(120)
        r["child_exit"] = child.exitcode
        cp.cuda.Device().synchronize()
        rap.empty_cache()
        r["pending_after_drop_MiB"] = rap.pending_bytes() / 2**20
    except Exception as e:
        r["error"] = "%s: %s" % (type(e).__name__, e)
        traceback.print_exc()
    finally:
        if child.is_alive():
            child.kill()
            child.join(10)
    err = r.get("cupy_ipc_error") or ""
    r["ok"] = ("error" not in r and bool(r.get("values_arrived")) and bool(r.get("view_arrived")) and
               bool(r.get("child_write_seen")) and r.get("second_open_error") is not None and
               "rap_cupy.share" in err and r.get("pending_while_held_MiB", 0) >= 4 and
               r.get("pending_after_drop_MiB") == 0 and r.get("child_exit") == 0)
    dump(args.out, "cupy_ipc" + (args.tag and "_" + args.tag), r)
    return 0 if r["ok"] else 1


# pytest: the same checks (one process; rap stays CuPy's allocator after the first).

def _pytest_out():
    import tempfile
    return tempfile.mkdtemp(prefix="rap-cupy-")


def test_memory_pool():
    cp, rap = setup()
    r = memory_pool(cp, rap)
    assert r["ok"], json.dumps(r, indent=1)


def test_pinned_pool():
    cp, rap = setup()
    r = pinned_pool(cp, rap)
    assert r["ok"], json.dumps(r, indent=1)


def test_env_limit():
    r = env_limit(_pytest_out())
    assert r["ok"], json.dumps(r, indent=1)


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
    p = load(args.out, "cupy_pool")
    if p:
        ok &= bool(p["ok"])
        mp, pn, el = p["memory_pool"], p["pinned"], p["env_limit"]
        lines.append("loaded from %s (library %s)" % (p["origin"]["file"], p["origin"]["library"]))
        lines.append("MemoryPool surface: %s; freed by free_all_blocks: %s; limit refusal: %s"
                     % ("ok" if mp["ok"] else "FAILED " + ", ".join(mp["failed"]),
                        mp.get("free_all_blocks_gives_back"),
                        mp.get("past_the_limit_raises_OutOfMemoryError")))
        lines.append("pinned pool (%s): %s" % (pn.get("spec"), "ok" if pn["ok"] else
                                               "FAILED " + ", ".join(pn["failed"])))
        lines.append("CUPY_GPU_MEMORY_LIMIT: %s" % "; ".join(
            "%s: %s" % (k, "ok" if v.get("ok") else "FAILED %s" % v)
            for k, v in el.items() if isinstance(v, dict)))
    else:
        ok = False
        lines.append("pool test: results missing")
    ip = load(args.out, "cupy_ipc")
    if ip is None:
        ok = False
        lines.append("ipc test: results missing")
    for ip in (ip, load(args.out, "cupy_ipc_streamordered")):
        if ip is None:
            continue
        ok &= bool(ip["ok"])
        lines.append("across processes (share/open over %s): %s; values arrived %s, child's write "
                     "seen %s, strided view %s, second open refused: %s; pending while the child "
                     "held them %.1f MiB, after it dropped them %.1f MiB; CuPy's ipcGetMemHandle: %s"
                     % (ip.get("spec"), "ok" if ip["ok"] else "FAILED " + ip.get("error", ""),
                        ip.get("values_arrived"), ip.get("child_write_seen"), ip.get("view_arrived"),
                        (ip.get("second_open_error") or "no")[:120],
                        ip.get("pending_while_held_MiB", -1), ip.get("pending_after_drop_MiB", -1),
                        (ip.get("cupy_ipc_error") or "no error")[:160]))
    lines.append("RESULT: " + ("PASS" if ok else "FAIL"))
    print("\n".join(lines))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--elements", type=int, default=1 << 20)
    ap.add_argument("--which", default="bytes")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    return globals()["cmd_" + args.command](args) or 0


if __name__ == "__main__":
    sys.exit(main())
