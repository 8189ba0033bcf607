"""Tests of rap_torch on a GPU; run_tests.sh runs each command in its own process.

  probe              what this PyTorch offers a pluggable allocator
  train  --allocator native|rap   a small CNN, 50 steps, losses and times (bit-for-bit comparison)
  streams            producer/consumer on two streams with record_stream and early frees; threads
  graph              CUDA graph capture and replay of an allocating step
  oom                a failed allocation (RAP_TORCH_OOM=null: see what PyTorch does with NULL)
  fraction           set_per_process_memory_fraction (limit, refusals) and empty_cache
  ipc                torch.multiprocessing and rap_torch.share/open over DeviceVmm(export=posix)
                     (--tag streamordered: over StreamOrdered(pool=new, export=posix))
  pystack            a traced run with rap_torch.enable(python_stack=8), in a child process: the
                     allocations carry their Python frames, and snapshot_from_trace puts them in
                     memory_viz's frames
  summarize          compares the results and prints the table; exit status 1 on a failure
and test_torch_users.py's: stats, compile, handoff, mempool, model, and
test_torch_capabilities.py's: sleep, graph_sleep, share_allreduce (see there).
Each command writes <out>/<name>.json.
"""

import argparse
import hashlib
import json
import os
import statistics
import sys
import threading
import time
import traceback
import warnings

if os.environ.get("RAP_TEST_FROM_WHEEL") == "1":   # the installed package's copy, by its old name
    import rap.torch  # noqa: E402
    sys.modules["rap_torch"] = rap.torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_torch_users  # noqa: E402  (the commands of PyTorch users' own patterns)
import test_torch_capabilities  # noqa: E402  (sleep, graphs across a sleep, two GPUs)

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")   # deterministic cuBLAS; before CUDA starts


def dump(args, name, result):
    path = os.path.join(args.out, name + ".json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1)[:6000])


def use(allocator):
    if allocator == "rap":
        import rap_torch
        rap_torch.enable()
    import torch
    return torch


def cmd_probe(args):
    import torch
    import rap_torch
    r = {"torch": torch.__version__, "cuda": torch.version.cuda,
         "cudnn": torch.backends.cudnn.version(), "device": torch.cuda.get_device_name(0)}
    a = torch.cuda.memory.CUDAPluggableAllocator(rap_torch.library_path(), "rap_torch_malloc",
                                                  "rap_torch_free")
    native = a.allocator()
    r["pluggable_allocator_type"] = type(native).__name__
    r["pluggable_allocator_methods"] = sorted(m for m in dir(native) if not m.startswith("__"))
    r["torch_C_allocator_functions"] = sorted(n for n in dir(torch._C) if "llocator" in n)
    r["graph_capture_begin_doc"] = (torch.cuda.CUDAGraph.capture_begin.__doc__ or "")[:400]
    torch.zeros(1, device="cuda")   # native allocator; just to see what the process loads
    with open("/proc/self/maps") as f:
        libs = sorted({line.split()[-1] for line in f if "cudart" in line or "libcuda." in line})
    r["cuda_libraries_loaded_by_torch"] = libs
    dump(args, "probe", r)


def build_model(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
        nn.Conv2d(128, 128, 3, stride=2, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(128 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, 10))


def cmd_train(args):
    t_start = time.perf_counter()
    torch = use(args.allocator)
    F = torch.nn.functional
    caught = []
    warnings.simplefilter("always")
    old_showwarning = warnings.showwarning
    warnings.showwarning = lambda m, *a, **k: caught.append(str(m)[:200])
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    model = build_model(torch).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator(device=dev).manual_seed(1)
    B = args.batch

    def step():
        x = torch.randn(B, 3, 64, 64, generator=gen, device=dev)
        y = torch.randint(0, 10, (B,), generator=gen, device=dev)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    losses, times = [], []
    for _ in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step().item()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss)
    params = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu().numpy().tobytes()
    # Steady state: more steps without a sync in each (host overhead and GPU overlap).
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.timed_steps):
        step()
    torch.cuda.synchronize()
    steady = (time.perf_counter() - t0) * 1e3 / args.timed_steps
    warnings.showwarning = old_showwarning
    r = {"allocator": args.allocator, "steps": args.steps, "batch": B,
         "losses_hex": [float.hex(v) for v in losses], "losses": losses,
         "params_sha256": hashlib.sha256(params).hexdigest(),
         "step_ms": times, "first_step_ms": times[0],
         "median_step_ms_after_first": statistics.median(times[1:]),
         "mean_step_ms_after_first": statistics.mean(times[1:]),
         "steady_step_ms": steady, "timed_steps": args.timed_steps,
         "determinism_warnings": sorted(set(caught))[:10]}
    free, total = torch.cuda.mem_get_info()
    r["device_used_at_end_MiB"] = (total - free) / 2**20
    if args.allocator == "native":
        r["max_memory_reserved"] = torch.cuda.max_memory_reserved()
        r["max_memory_allocated"] = torch.cuda.max_memory_allocated()
        r["memory_reserved"] = torch.cuda.memory_reserved()
    else:
        import rap_torch
        s = rap_torch.rap_stats()
        r["max_memory_reserved"] = s["peak_reserved"]
        r["max_memory_allocated"] = s["peak"]
        r["memory_reserved"] = s["reserved"]
        r["rap_stats"] = s
        r["rap_hooks"] = rap_torch.hooks()
        r["rap_spec"] = rap_torch.spec()
    r["process_s"] = time.perf_counter() - t_start
    r["tag"] = args.tag
    dump(args, "train_" + args.allocator + ("_" + args.tag if args.tag else ""), r)


def producer_consumer(torch, rap_torch, iters, n, record):
    """Tensors made on a side stream, read on the main stream after a delay, freed at once."""
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    results, pending = [], []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(iters):
        with torch.cuda.stream(side):
            x = torch.empty(n, device="cuda")
            x.fill_(float(i))
            x.mul_(2).add_(1)
        main.wait_stream(side)
        torch.cuda._sleep(args_sleep_cycles)   # the consumer starts late: a reuse would race it
        y = x * 3
        if record:
            x.record_stream(main)
        del x                                  # early free, with main's read still queued
        results.append(y)
        if i % 10 == 9:
            pending.append(rap_torch.pending_bytes())
    host_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    bad_elements, bad_iters = 0, 0
    for i, y in enumerate(results):
        wrong = int((y != float((2 * i + 1) * 3)).sum().item())   # element by element
        bad_elements += wrong
        bad_iters += wrong > 0
    stats_synced = rap_torch.rap_stats()
    torch.cuda.empty_cache()
    stats_after_empty = rap_torch.rap_stats()
    return {"iters": iters, "elements": n, "record_stream": record,
            "wrong_elements": bad_elements, "wrong_iterations": bad_iters,
            "pending_bytes_samples": pending, "max_pending_bytes": max(pending) if pending else 0,
            "host_ms": host_ms, "stats_after_sync": stats_synced,
            "stats_after_empty_cache": stats_after_empty}


args_sleep_cycles = 1000000   # about 0.5 ms of GPU time on the consumer stream


def threads_test(torch, nthreads=4, iters=300):
    errors = []

    def work(k):
        try:
            s = torch.cuda.Stream()
            g = torch.Generator().manual_seed(k)
            with torch.cuda.stream(s):
                live = []
                for i in range(iters):
                    n = int(torch.randint(1, 1 << 16, (1,), generator=g))
                    v = k * 1000 + i % 7
                    t = torch.full((n,), v, dtype=torch.int64, device="cuda")
                    live.append((t, v, n))
                    if len(live) > 8:
                        t, v, n = live.pop(0)
                        if int(t.sum().item()) != v * n:
                            errors.append("thread %d iteration %d: wrong sum" % (k, i))
                        del t
        except Exception as e:  # noqa: BLE001
            errors.append("thread %d: %r" % (k, e))

    ts = [threading.Thread(target=work, args=(k,)) for k in range(nthreads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return {"threads": nthreads, "iterations": iters, "errors": errors[:10],
            "seconds": time.perf_counter() - t0}


def cmd_streams(args):
    torch = use("rap")
    import rap_torch
    r = {"hooks": rap_torch.hooks()}
    r["with_record_stream"] = producer_consumer(torch, rap_torch, args.iters, args.elements, True)
    r["control_without_record_stream"] = producer_consumer(torch, rap_torch, args.iters,
                                                           args.elements, False)
    r["threads"] = threads_test(torch)
    r["final_stats"] = rap_torch.rap_stats()
    dump(args, "streams", r)


def cmd_graph(args):
    torch = use("rap")
    import rap_torch
    r = {}
    D, B = 1024, 256
    w = torch.randn(D, D, device="cuda") / 32
    static_x = torch.randn(B, D, device="cuda")

    def step(x):
        h = torch.relu(x @ w)          # temporaries: allocated and freed inside the step
        h2 = h * 2 + 1
        return (h2 @ w).sum(dim=1)

    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step(static_x)
        torch.cuda.current_stream().wait_stream(s)
        r["main_before_capture"] = rap_torch.rap_stats()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = step(static_x)
        r["graph_pools_after_capture"] = rap_torch.rap_stats(graph=True)
        replays, equal, close, junk_ok, maxdiff = 20, 0, 0, 0, 0.0
        for k in range(replays):
            static_x.copy_(torch.randn(B, D, device="cuda"))
            junk = [torch.full((B, D), 7.0, device="cuda") for _ in range(4)]   # eager, between replays
            g.replay()
            ref = step(static_x)
            torch.cuda.synchronize()
            equal += bool(torch.equal(static_y, ref))
            close += bool(torch.allclose(static_y, ref, rtol=1e-5, atol=1e-4))
            maxdiff = max(maxdiff, float((static_y - ref).abs().max().item()))
            junk_ok += all(bool((j == 7).all().item()) for j in junk)
            del junk
        r.update({"replays": replays, "replays_equal_to_eager": equal, "replays_close_to_eager": close,
                  "max_abs_diff": maxdiff,
                  "eager_tensors_untouched": junk_ok, "captured": True})
        del g, static_y
        torch.cuda.synchronize()
        r["graph_pools_after_graph_deleted"] = rap_torch.rap_stats(graph=True)
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:   # cuBLAS's workspace, taken during the capture, lives in its pool
            clear()
        r["graph_pools_after_cublas_workspaces_cleared"] = rap_torch.rap_stats(graph=True)
        r["graph_pools_released_by_hand"] = rap_torch.release_graph_pools()
        r["graph_pools_at_end"] = rap_torch.rap_stats(graph=True)
    except Exception as e:  # noqa: BLE001
        r.update({"captured": False, "error": "%s: %s" % (type(e).__name__, e),
                  "traceback": traceback.format_exc()[-2000:]})
    r["main_at_end"] = rap_torch.rap_stats()
    r["hooks"] = rap_torch.hooks()
    dump(args, "graph_" + (args.tag or "default"), r)


def cmd_oom(args):
    torch = use("rap")
    import rap_torch
    mode = os.environ.get("RAP_TORCH_OOM", "raise")
    r = {"mode": mode}
    x = torch.ones(10, device="cuda")
    try:
        big = torch.empty(1 << 46, dtype=torch.uint8, device="cuda")   # 64 TiB
        r["exception"] = None
        r["data_ptr"] = big.data_ptr()
        del big
    except BaseException as e:  # noqa: BLE001
        r["exception"] = type(e).__name__
        r["exception_mro"] = [c.__name__ for c in type(e).__mro__]
        r["message"] = str(e)[:400]
    if mode != "null":
        y = torch.ones(1000, device="cuda") * 2
        r["pool_works_after"] = float(y.sum().item()) == 2000.0 and float(x.sum().item()) == 10.0
    r["stats"] = rap_torch.rap_stats()
    dump(args, "oom_" + mode, r)


def cmd_fraction(args):
    """torch.cuda.set_per_process_memory_fraction and empty_cache with rap enabled: at 0.1 an
    allocation of 12 % of the device is refused with out of memory and the process goes on; 7 %
    is served while the pool holds a free 6 % (given back first), 5 % is served; 1.5, 0, -0.1 and NaN are refused with a sentence (the limit stays); freeing tensors
    and empty_cache lower memory_reserved."""
    torch = use("rap")
    import rap_torch
    r = {"hooks": rap_torch.hooks()}
    total = torch.cuda.mem_get_info(0)[1]
    r["total"] = total
    x = torch.ones(1 << 20, device="cuda")   # the pool exists
    torch.cuda.set_per_process_memory_fraction(0.1, 0)
    r["limit"] = rap_torch.memory_limit(0)
    r["limit_is_a_tenth"] = abs(r["limit"] - total // 10) <= 1
    try:
        big = torch.empty(int(total * 0.12), dtype=torch.uint8, device="cuda")
        r["above"] = None
        del big
    except Exception as e:  # noqa: BLE001
        r["above"] = type(e).__name__
        r["above_is_OutOfMemoryError"] = isinstance(e, getattr(torch, "OutOfMemoryError", ()))
        r["above_message"] = str(e)[:400]
    r["reserved_after_refusal"] = torch.cuda.memory_reserved(0)
    r["reserved_within_limit_after_refusal"] = r["reserved_after_refusal"] <= r["limit"]
    # Live bytes that fit, but a pool that would grow past the cap: 6 % held free after a free,
    # then 7 % (which the free 6 % cannot serve) is served once the pool gives the 6 % back.
    a = torch.empty(int(total * 0.06), dtype=torch.uint8, device="cuda")
    del a
    r["reserved_holding_free_6pc"] = torch.cuda.memory_reserved(0)
    try:
        b = torch.empty(int(total * 0.07), dtype=torch.uint8, device="cuda")
        b.fill_(3)
        r["served_after_giving_back"] = int(b[0].item()) == 3
        r["reserved_with_7pc"] = torch.cuda.memory_reserved(0)
        r["served_after_giving_back"] &= r["reserved_with_7pc"] <= r["limit"]
        del b
    except Exception as e:  # noqa: BLE001
        r["served_after_giving_back"] = "%s: %s" % (type(e).__name__, str(e)[:200])
    below = torch.empty(int(total * 0.05), dtype=torch.uint8, device="cuda")
    below.fill_(7)
    r["below_served"] = int(below[-1].item()) == 7 and float(x.sum().item()) == float(1 << 20)
    r["reserved_with_below"] = torch.cuda.memory_reserved(0)
    refusals = {}
    for bad in (1.5, 0.0, -0.1, float("nan")):
        try:
            torch.cuda.set_per_process_memory_fraction(bad, 0)
            refusals[repr(bad)] = None
        except Exception as e:  # noqa: BLE001
            refusals[repr(bad)] = "%s: %s" % (type(e).__name__, str(e)[:200])
    r["refusals"] = refusals
    r["all_refused_with_a_sentence"] = all(v is not None and "fraction" in v for v in refusals.values())
    r["limit_kept_after_refusals"] = rap_torch.memory_limit(0) == r["limit"]
    # The rap path checks too (PyTorch itself lets 0 through to the allocator).
    try:
        rap_torch.set_memory_fraction(0.0, 0)
        r["rap_path_refuses_0"] = False
    except ValueError as e:
        r["rap_path_refuses_0"] = "(0, 1]" in str(e)
    lib = rap_torch._library()
    r["c_path_refuses_0"] = (lib.rap_torch_memory_fraction(0, 0.0) != 0 and
                             "(0, 1]" in rap_torch._loader.last_error(lib, "torch"))
    if (r["hooks"].get("memory_fraction") == "allocator" and
            hasattr(torch._C, "_cuda_setMemoryFraction")):   # PyTorch's own call lets 0 through to rap
        try:
            torch._C._cuda_setMemoryFraction(0.0, 0)
            r["hook_refuses_0"] = False
        except Exception as e:  # noqa: BLE001
            r["hook_refuses_0"] = "(0, 1]" in str(e)
            r["hook_refusal"] = "%s: %s" % (type(e).__name__, str(e)[:200])
    r["limit_kept_after_refusals"] = rap_torch.memory_limit(0) == r["limit"]
    # Raised to 1: the 12 % allocation is served.
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    try:
        big = torch.empty(int(total * 0.12), dtype=torch.uint8, device="cuda")
        big.fill_(1)
        r["above_served_at_1"] = rap_torch.memory_limit(0) == 0   # 1: no cap at all
    except Exception as e:  # noqa: BLE001
        r["above_served_at_1"] = "%s: %s" % (type(e).__name__, str(e)[:200])
        big = None
    torch.cuda.synchronize()
    r["reserved_before_empty_cache"] = torch.cuda.memory_reserved(0)
    del big, below
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    r["reserved_after_empty_cache"] = torch.cuda.memory_reserved(0)
    r["allocated_after_empty_cache"] = torch.cuda.memory_allocated(0)
    r["empty_cache_lowered_reserved"] = (r["reserved_after_empty_cache"] <
                                         r["reserved_before_empty_cache"] - int(total * 0.1))
    r["ok"] = bool(r["limit_is_a_tenth"] and r["above"] is not None and
                   "out of memory" in r.get("above_message", "").lower() and
                   r["reserved_within_limit_after_refusal"] and r["below_served"] and
                   r["served_after_giving_back"] is True and
                   r["all_refused_with_a_sentence"] and r["limit_kept_after_refusals"] and
                   r["rap_path_refuses_0"] and r["c_path_refuses_0"] and
                   r.get("hook_refuses_0", True) and r["above_served_at_1"] is True and
                   r["empty_cache_lowered_reserved"])
    dump(args, "fraction", r)
    return 0 if r["ok"] else 1


load, mib = test_torch_users._load, test_torch_users._mib


def _ipc_child(q_in, q_out):
    """The receiver: tensors arrive through torch.multiprocessing (rap's share/open underneath) and
    through rap_torch.open; each is checked, written on this process's stream, and dropped."""
    import torch
    import rap_torch
    x = q_in.get()                            # a CUDA tensor sent as torch.multiprocessing does
    ok1 = bool(torch.equal(x.cpu(), torch.arange(1 << 20, dtype=torch.float32)))
    x.mul_(2)                                 # the sender sees it (the same memory)
    torch.cuda.current_stream().synchronize()
    q_out.put(("received", ok1))
    handle = q_in.get()                       # rap_torch.share's handle
    y = rap_torch.open(handle)
    ok2 = bool((y == 7).all().item())
    second = None
    try:
        rap_torch.open(handle)
    except RuntimeError as e:                 # a handle opens once
        second = str(e)
    del x, y
    torch.cuda.synchronize()
    q_out.put(("dropped", ok2, second))


def cmd_ipc(args):
    """torch.multiprocessing with rap enabled over DeviceVmm(export=posix) (RAP_TORCH_SPEC): a CUDA
    tensor sent to a spawned process arrives with its values, the receiver's writes are seen here,
    and its memory returns to this pool only after the receiver dropped it; rap_torch.share/open
    the same; a handle opened twice is refused; the default pool (not exporting) refuses share with
    the sentence naming the spec to use."""
    import torch
    if not torch.cuda.is_available():
        dump(args, "ipc" + (args.tag and "_" + args.tag), {"skipped": "no CUDA device"})
        return 0
    import rap_torch
    import torch.multiprocessing as mp
    rap_torch.enable()
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_ipc_child, args=(q_in, q_out))
    child.start()
    r = {}
    x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    q_in.put(x)
    tag, r["values_arrived"] = q_out.get(timeout=120)
    torch.cuda.synchronize()
    r["receiver_write_seen"] = bool(torch.equal(x.cpu(), 2 * torch.arange(1 << 20, dtype=torch.float32)))
    y = torch.full((1 << 18,), 7.0, device="cuda")
    q_in.put(rap_torch.share(y))
    del x, y                                   # freed here while the receiver still holds both
    rap_torch.empty_cache()
    r["pending_while_held_MiB"] = rap_torch.pending_bytes() / 2**20
    tag, r["open_values"], r["second_open_error"] = q_out.get(timeout=120)
    child.join(120)
    r["child_exit"] = child.exitcode
    rap_torch.empty_cache()
    r["pending_after_drop_MiB"] = rap_torch.pending_bytes() / 2**20
    r["ok"] = (r["values_arrived"] and r["receiver_write_seen"] and r["open_values"] and
               r["second_open_error"] is not None and r["pending_while_held_MiB"] >= 4 and
               r["pending_after_drop_MiB"] == 0 and r["child_exit"] == 0)
    r["spec"] = os.environ.get("RAP_TORCH_SPEC", "")
    dump(args, "ipc" + (args.tag and "_" + args.tag), r)
    return 0 if r["ok"] else 1


def make_weights(torch):
    return torch.empty(3 << 20, dtype=torch.uint8, device="cuda")   # 3 MiB: found by its size


def cmd_pystack_child(args):
    """Runs under RAP_TRACE (set by cmd_pystack); the trace is written when the process exits."""
    import rap_torch
    rap_torch.enable(python_stack=8)
    import torch
    w = make_weights(torch)
    model = build_model(torch).cuda()
    x = torch.randn(32, 3, 64, 64, device="cuda")
    model(x).sum().backward()   # backward allocates on PyTorch's autograd thread: no Python frames
    torch.cuda.synchronize()
    rap_torch.set_python_stack(0)
    t0 = time.perf_counter()
    for _ in range(2000):
        torch.empty(1024, device="cuda")
    off = time.perf_counter() - t0
    rap_torch.set_python_stack(16)
    t0 = time.perf_counter()
    for _ in range(2000):
        torch.empty(1024, device="cuda")
    on = time.perf_counter() - t0
    with open(os.path.join(args.out, "pystack_child.json"), "w") as f:
        json.dump({"depth": rap_torch.python_stack(), "weights": w.data_ptr(),
                   "traced_alloc_us_without_frames": off / 2000 * 1e6,
                   "traced_alloc_us_with_16_frames": on / 2000 * 1e6}, f)


def cmd_pystack(args):
    import subprocess
    trace = os.path.join(args.out, "pystack_trace.jsonl")
    env = dict(os.environ, RAP_TRACE=trace)
    env.pop("RAP_TRACE_MAX_ENTRIES", None)
    child = subprocess.run([sys.executable, os.path.abspath(__file__), "pystack_child", "--out", args.out],
                           env=env, capture_output=True, text=True, timeout=300)
    r = {"child_status": child.returncode, "child_stderr": child.stderr[-2000:]}
    if child.returncode == 0:
        with open(os.path.join(args.out, "pystack_child.json")) as f:
            r.update(json.load(f))
        with open(trace) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        user = [e for e in lines if e.get("ev") == "alloc" and e.get("d") == 0]
        r["user_allocs"] = len(user)
        r["with_pystack"] = sum("pystack" in e for e in user)
        w = [e for e in user if int(e["p"], 16) == r["weights"]]
        first = w[0]["pystack"].split("\n")[0] if w and "pystack" in w[0] else ""
        here = os.path.abspath(__file__)
        r["weights_frame"] = first
        r["weights_frame_ok"] = first == "%s:%d make_weights" % (here, make_weights.__code__.co_firstlineno + 1)
        import rap_torch
        snap = rap_torch.snapshot_from_trace(trace)
        frames = [e["frames"] for e in snap["device_traces"][0]
                  if e["action"] == "alloc" and e["addr"] == r["weights"]]
        r["memviz_frames"] = frames[0][:3] if frames else None
        r["memviz_ok"] = bool(frames) and bool(frames[0]) and frames[0][0] == {"filename": here, "name": "make_weights",
                                                            "line": make_weights.__code__.co_firstlineno + 1}
    r["ok"] = bool(r.get("weights_frame_ok") and r.get("memviz_ok"))
    dump(args, "pystack", r)
    return 0 if r["ok"] else 1


def cmd_summarize(args):
    ok = True
    lines = []
    native, rap = load(args.out, "train_native"), load(args.out, "train_rap")
    if native and rap:
        same = native["losses_hex"] == rap["losses_hex"]
        differ = [i for i, (a, b) in enumerate(zip(native["losses_hex"], rap["losses_hex"])) if a != b]
        ok &= same
        lines.append("training, %d steps, batch %d: losses bit-for-bit equal: %s%s; final parameters "
                     "equal: %s" % (rap["steps"], rap["batch"], same,
                                    "" if same else " (first difference at step %d)" % differ[0],
                                    native["params_sha256"] == rap["params_sha256"]))
        lines.append("  loss step 1 %.6f, step %d %.6f" % (rap["losses"][0], rap["steps"], rap["losses"][-1]))
        for r in (native, rap):
            lines.append("  %-6s first step %.1f ms, median step %.2f ms (synced each step), "
                         "steady step %.2f ms (%d steps unsynced); max reserved %s, max allocated %s"
                         % (r["allocator"], r["first_step_ms"], r["median_step_ms_after_first"],
                            r["steady_step_ms"], r["timed_steps"], mib(r["max_memory_reserved"]),
                            mib(r["max_memory_allocated"])))
        qp = load(args.out, "train_rap_quickpool")
        if qp:
            lines.append("  diagnostic, rap QuickPool (no pending state; safe here, one stream): losses equal: %s, "
                         "median step %.2f ms, steady %.2f ms, max reserved %s"
                         % (qp["losses_hex"] == native["losses_hex"], qp["median_step_ms_after_first"],
                            qp["steady_step_ms"], mib(qp["max_memory_reserved"])))
        vmm = load(args.out, "train_rap_vmm")
        if vmm:
            same_vmm = vmm["losses_hex"] == native["losses_hex"]
            ok &= same_vmm
            lines.append("  rap ResourceAwarePool over DEVICE_VMM (2 MiB granules): losses equal: %s, "
                         "median step %.2f ms, steady %.2f ms, max reserved %s"
                         % (same_vmm, vmm["median_step_ms_after_first"], vmm["steady_step_ms"],
                            mib(vmm["max_memory_reserved"])))
        if rap.get("determinism_warnings"):
            lines.append("  determinism warnings: %s" % rap["determinism_warnings"])
    else:
        ok = False
        lines.append("training: results missing")
    s = load(args.out, "streams")
    if s:
        a, c, t = s["with_record_stream"], s["control_without_record_stream"], s["threads"]
        ok &= a["wrong_elements"] == 0 and not t["errors"]
        lines.append("two streams, %d iterations x %d floats, record_stream via %s: %d wrong elements; "
                     "pending up to %s, pending after sync %s (%d blocks), after empty_cache %s; "
                     "reserved %s -> %s after empty_cache"
                     % (a["iters"], a["elements"], s["hooks"].get("record_stream"), a["wrong_elements"],
                        mib(a["max_pending_bytes"]), mib(a["stats_after_sync"]["pending"]),
                        a["stats_after_sync"]["pending_count"],
                        mib(a["stats_after_empty_cache"]["pending"]),
                        mib(a["stats_after_sync"]["reserved"]),
                        mib(a["stats_after_empty_cache"]["reserved"])))
        lines.append("  control without record_stream: %d wrong elements in %d of %d iterations "
                     "(a race the test can see)" % (c["wrong_elements"], c["wrong_iterations"], c["iters"]))
        lines.append("  %d threads x %d allocations on their own streams: %s (%.2f s)"
                     % (t["threads"], t["iterations"], "ok" if not t["errors"] else t["errors"], t["seconds"]))
    else:
        ok = False
        lines.append("streams: results missing")
    for tag in ("hooks", "detect"):
        g = load(args.out, "graph_" + tag)
        if g and g.get("captured"):
            good = (g["replays_close_to_eager"] == g["replays"] and
                    g["eager_tensors_untouched"] == g["replays"])
            ok &= good
            lines.append("CUDA graph (pools via %s): %d/%d replays bit-equal to eager, %d close (max |diff| "
                         "%g), eager tensors untouched in %d/%d; graph pools held %s; after the graph was "
                         "deleted %s, after cuBLAS workspaces were cleared %s, at end %s"
                         % (g["hooks"].get("graph_pools"), g["replays_equal_to_eager"], g["replays"],
                            g["replays_close_to_eager"], g["max_abs_diff"], g["eager_tensors_untouched"],
                            g["replays"], mib(g["graph_pools_after_capture"]["reserved"]),
                            mib(g["graph_pools_after_graph_deleted"]["reserved"]),
                            mib(g["graph_pools_after_cublas_workspaces_cleared"]["reserved"]),
                            mib(g["graph_pools_at_end"]["reserved"])))
        else:
            ok = False
            lines.append("CUDA graph (%s): %s" % (tag, g.get("error") if g else "results missing"))
    for mode in ("raise", "null"):
        o = load(args.out, "oom_" + mode)
        if not o:
            lines.append("oom (%s): results missing" % mode)
            ok &= mode == "null"
            continue
        if mode == "raise":
            ok &= o["exception"] is not None and o.get("pool_works_after", False)
            lines.append("out of memory (default): %s: %s; pool works after: %s"
                         % (o["exception"], (o.get("message") or "")[:160], o.get("pool_works_after")))
        else:
            lines.append("out of memory with RAP_TORCH_OOM=null: exception %s, data_ptr %s"
                         % (o["exception"], o.get("data_ptr")))
    fr = load(args.out, "fraction")
    if fr:
        ok &= bool(fr.get("ok"))
        lines.append("memory fraction 0.1 (fraction hook via %s): 12 %% of the device refused: %s "
                     "(torch.OutOfMemoryError: %s; %s); reserved within the limit after: %s; 7 %% "
                     "served after the pool gave a free 6 %% back: %s; 5 %% served: %s; 1.5, 0, "
                     "-0.1, NaN refused with a sentence: %s; rap's path refuses 0: %s; at 1.0 the 12 %% served: %s; empty_cache: reserved %s -> %s"
                     % (fr["hooks"].get("memory_fraction"), fr["above"],
                        fr.get("above_is_OutOfMemoryError"), (fr.get("above_message") or "")[:160],
                        fr["reserved_within_limit_after_refusal"],
                        fr["served_after_giving_back"], fr["below_served"],
                        fr["all_refused_with_a_sentence"], fr["rap_path_refuses_0"],
                        fr["above_served_at_1"], mib(fr["reserved_before_empty_cache"]),
                        mib(fr["reserved_after_empty_cache"])))
    elif os.environ.get("RAP_TEST_ONLY") is None:
        ok = False
        lines.append("memory fraction: results missing")
    for name, over in (("ipc", "DeviceVmm(export=posix)"), ("ipc_streamordered", "StreamOrdered(pool=new, export=posix)")):
        ip = load(args.out, name)
        if ip and "skipped" not in ip:
            ok &= bool(ip.get("ok"))
            lines.append("across processes (torch.multiprocessing and share/open over %s): "
                         "values arrived %s, receiver's write seen %s, open %s, held while the receiver "
                         "kept it %.1f MiB pending, after it dropped it %.1f MiB; second open refused: %s"
                         % (over, ip["values_arrived"], ip["receiver_write_seen"], ip["open_values"],
                            ip["pending_while_held_MiB"], ip["pending_after_drop_MiB"],
                            (ip["second_open_error"] or "no")[:120]))
        elif ip is not None:
            lines.append("across processes over %s: skipped: %s" % (over, ip["skipped"]))
    ps = load(args.out, "pystack")
    if ps is not None or os.environ.get("RAP_TEST_ONLY") is None:
        ok &= bool(ps and ps.get("ok"))
        if ps and ps.get("child_status") == 0:
            lines.append("Python frames in the trace (python_stack=8): %d of %d user allocations carry "
                         "them (backward's come from the autograd thread); the weights' innermost "
                         "frame %r: %s; in memory_viz's frames: %s; a traced torch.empty %.1f us "
                         "without frames, %.1f us with 16"
                         % (ps["with_pystack"], ps["user_allocs"], ps["weights_frame"],
                            ps["weights_frame_ok"], ps["memviz_ok"],
                            ps["traced_alloc_us_without_frames"], ps["traced_alloc_us_with_16_frames"]))
        else:
            lines.append("Python frames in the trace: %s" % ("child failed: " + ps["child_stderr"][-400:]
                                                             if ps else "results missing"))
    p = load(args.out, "probe")
    if p:
        lines.insert(0, "torch %s (CUDA %s, cuDNN %s) on %s; pluggable allocator object %s exposes %s"
                     % (p["torch"], p["cuda"], p["cudnn"], p["device"], p["pluggable_allocator_type"],
                        p["pluggable_allocator_methods"] or "no methods"))
    users_ok, users_lines = test_torch_users.summarize(args.out)
    ok &= users_ok
    lines.extend(users_lines)
    caps_ok, caps_lines = test_torch_capabilities.summarize(args.out)
    ok &= caps_ok
    lines.extend(caps_lines)
    lines.append("RESULT: " + ("PASS" if ok else "FAIL"))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "torch_summary.txt"), "w") as f:
        f.write(text + "\n")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--allocator", default="rap")
    ap.add_argument("--tag", default="")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--timed-steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--elements", type=int, default=1 << 20)
    ap.add_argument("--model", default="gpt2")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    fn = (globals().get("cmd_" + args.command) or getattr(test_torch_users, "cmd_" + args.command, None)
          or getattr(test_torch_capabilities, "cmd_" + args.command))
    return fn(args) or 0


if __name__ == "__main__":
    sys.exit(main())
