"""rap_torch's capabilities as a user meets them, on whatever spec enable() gives (its default;
RAP_TORCH_SPEC only overrides it), so that the same test proves the default once it changes.
Commands of test_torch.py (run_tests.sh runs sleep and graph_sleep; run_two_gpus.sh runs
share_allreduce); each can also be run here directly:

  sleep            training, rap_torch.sleep, another process allocates most of what the sleep
                   freed and gives it back, wake, training goes on bit-equal to a run without
                   sleep; the first sleep without prepare_sleep, the second after it; discard
  graph_sleep      a decode step as an explicit CUDA graph and through torch.compile(mode=
                   "reduce-overhead"), replayed before and after a sleep and wake: outputs
                   bit-equal, no capture after the wake, the main pool's memory freed while the
                   graph pools keep theirs (rap_glue.c's glue_sleep leaves them as they are)
  share_allreduce  two GPUs, one rank each (torchrun, started from here): a tensor of rap's pool
                   sent to a spawned process through torch.multiprocessing, which reads and
                   writes it and holds it while the rank's NCCL all-reduces run on new tensors of
                   the same pool, then drops it with its writes still queued (tensors made then
                   stay intact); results against values computed on the host; skipped with
                   fewer than two GPUs. --tag registered: PyTorch's allocator, a
                   torch.cuda.MemPool over rap.torch.allocator() (the spec enable() would use)
                   registered with NCCL (rap.torch.register_mem_pool), all-reduces in it
  summarize_two_gpus   share_allreduce's lines and RESULT (run_two_gpus.sh)
  summarize_capabilities   the lines of whichever of these wrote results to --out, and RESULT

A spec that cannot do what a test needs (sleep, export, NCCL registration) fails the test with
rap's sentence saying so; it is not skipped. summarize(out) returns (ok, lines) for
test_torch.py's summary. Each command writes <out>/<name>.json.
"""

import argparse
import contextlib
import gc
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback

if os.environ.get("RAP_TEST_FROM_WHEEL") == "1":   # the installed package's copy, by its old name
    import rap.torch  # noqa: E402
    sys.modules["rap_torch"] = rap.torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_torch_users import _dump, _load, _mib, _error  # noqa: E402  (the same helpers)

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")   # deterministic cuBLAS; before CUDA starts

HERE = os.path.abspath(__file__)


class CannotDoIt(Exception):
    """The device pool's spec cannot do what the test needs; the message is rap's sentence."""


def _name(base, args):
    return base + ("_" + args.tag if args.tag else "")


def _fail_or_error(r, e):
    r["ok"] = False
    if isinstance(e, CannotDoIt):
        r["error"] = str(e)
    else:
        _error(r, e)


# ---- sleep and wake under training -------------------------------------------------------------

def cmd_sleep(args):
    """A model trained 20 steps with two pauses (after step 5: sleep without prepare_sleep, the
    process's first; after step 12: prepare_sleep, then sleep) gives the losses of 20 steps
    without pause, bit for bit. At each pause the optimizer state and a 4 GiB tensor are kept,
    pointers too; the device's free memory rises by what the pool held; another process
    allocates all but 2 GiB of what is free then (more than was free before the sleep) and gives
    it back; the pool refuses to allocate while asleep; a tensor dropped while asleep is freed at
    the wake. Then sleep("discard") and wake. On a spec that cannot sleep: fails with rap's
    sentence."""
    import torch
    name = _name("sleep", args)
    if not torch.cuda.is_available():
        _dump(args.out, name, {"skipped": "no CUDA device"})
        return 0
    import rap_torch
    rap_torch.enable()
    from test_torch import build_model
    F = torch.nn.functional
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    r = {"spec": rap_torch.spec(), "env_spec": os.environ.get("RAP_TORCH_SPEC", ""), "pauses": []}

    def run(steps, pauses):
        torch.manual_seed(0)
        model = build_model(torch).cuda()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        gen = torch.Generator(device="cuda").manual_seed(1)
        losses = []
        for i in range(steps):
            if i in pauses:
                r["pauses"].append(_pause(torch, rap_torch, model, opt, i, pauses[i]))
            x = torch.randn(32, 3, 64, 64, generator=gen, device="cuda")
            y = torch.randint(0, 10, (32,), generator=gen, device="cuda")
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(float.hex(loss.item()))
        return losses

    try:
        r["losses_without_sleep"] = run(20, {})
        r["losses_with_sleep"] = run(20, {5: False, 12: True})   # step: prepared first?
        r["losses_equal"] = r["losses_without_sleep"] == r["losses_with_sleep"]
        scratch = torch.ones(1 << 22, device="cuda")
        rap_torch.sleep("discard")
        rap_torch.wake()
        scratch.fill_(3)
        r["discard_then_usable"] = float(scratch.sum().item()) == 3.0 * (1 << 22)
        r["ok"] = bool(r["losses_equal"] and r["discard_then_usable"] and len(r["pauses"]) == 2
                       and all(p["ok"] for p in r["pauses"]))
    except Exception as e:  # noqa: BLE001 - reported in the summary
        _fail_or_error(r, e)
    _dump(args.out, name, r)
    return 0 if r["ok"] else 1


def _state_hash(torch, model, opt):
    ts = [p.detach().flatten() for p in model.parameters()]
    ts += [v.flatten() for st in opt.state.values() for v in st.values()
           if torch.is_tensor(v) and v.is_cuda]
    return hashlib.sha256(torch.cat([t.float() for t in ts]).cpu().numpy().tobytes()).hexdigest()


def _sleep_or_say(rap_torch, mode="backup"):
    """rap_torch.sleep; a refusal becomes CannotDoIt naming the spec."""
    try:
        rap_torch.sleep(mode)
    except RuntimeError as e:
        raise CannotDoIt("the device's pool cannot sleep (spec %s): %s" % (rap_torch.spec(), e)) from e


def _pause(torch, rap_torch, model, opt, step, prepared):
    p = {"after_step": step, "prepared": prepared}
    before = _state_hash(torch, model, opt)
    ptrs = [q.data_ptr() for q in model.parameters()]
    weights = torch.full((1 << 30,), 7.0, device="cuda")   # 4 GiB kept across the pause
    spare = torch.ones(1 << 20, device="cuda")             # dropped while asleep: freed at the wake
    torch.cuda.synchronize()
    live = rap_torch.memory_allocated()
    if prepared:
        t0 = time.perf_counter()
        rap_torch.prepare_sleep()                           # the pinned backup, before the sleep
        p["prepare_ms"] = (time.perf_counter() - t0) * 1e3
    held = rap_torch.memory_reserved()
    free0, _ = torch.cuda.mem_get_info()
    t0 = time.perf_counter()
    _sleep_or_say(rap_torch)
    p["sleep_ms"] = (time.perf_counter() - t0) * 1e3
    free1, _ = torch.cuda.mem_get_info()
    p["reserved_MiB"] = held / 2**20
    p["freed_MiB"] = (free1 - free0) / 2**20
    p["freed_fraction"] = (free1 - free0) / held if held else 0.0
    try:
        torch.empty(1 << 20, device="cuda")
        p["refused_while_asleep"] = False
    except Exception as e:  # noqa: BLE001
        p["refused_while_asleep"] = "asleep" in str(e)
        p["refusal"] = str(e)[:200]
    del spare
    # The other process takes all but 2 GiB (its own context) of what is free now: more than was
    # free before the sleep, so it runs only on the memory the sleep gave back.
    take = free1 - (2 << 30)
    p["other_process_needed_the_freed_memory"] = take > free0
    code = ("import torch; x = torch.empty(%d, dtype=torch.uint8, device='cuda'); "
            "torch.cuda.synchronize(); print('ok')" % take)
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    p["other_process_took_MiB"] = take / 2**20
    p["other_process_ok"] = other.returncode == 0 and "ok" in other.stdout
    if not p["other_process_ok"]:
        p["other_process_stderr"] = other.stderr[-600:]
    t0 = time.perf_counter()
    rap_torch.wake()
    p["wake_ms"] = (time.perf_counter() - t0) * 1e3
    p["pointers_kept"] = ptrs == [q.data_ptr() for q in model.parameters()]
    p["free_while_asleep_done_at_wake"] = rap_torch.memory_allocated() == live - (4 << 20)
    p["state_bit_equal"] = _state_hash(torch, model, opt) == before
    p["weights_intact"] = bool((weights == 7.0).all().item())
    del weights
    p["ok"] = bool(all(p[k] for k in ("state_bit_equal", "pointers_kept", "refused_while_asleep",
                                      "other_process_ok", "free_while_asleep_done_at_wake",
                                      "weights_intact", "other_process_needed_the_freed_memory"))
                   and p["freed_fraction"] >= 0.99)
    return p


# ---- a CUDA graph across a sleep ---------------------------------------------------------------

def _count_captures(torch):
    """Counts CUDA graph captures (torch.cuda.CUDAGraph.capture_begin, which torch.cuda.graph and
    Inductor's graphs without trees call); None where the method cannot be wrapped."""
    counts = {"n": 0}
    cls = torch.cuda.CUDAGraph
    original = cls.capture_begin

    def capture_begin(self, *a, **k):
        counts["n"] += 1
        return original(self, *a, **k)

    try:
        cls.capture_begin = capture_begin
    except (TypeError, AttributeError):
        return None
    return counts


def _decoder(torch, D, T, B):
    """One decode step of an attention block with a fixed KV cache of T positions (module
    buffers, in the main pool), then an MLP: matmuls, a softmax and temporaries the graph keeps."""
    nn = torch.nn

    class Decode(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(D, D, bias=False)
            self.o = nn.Linear(D, D, bias=False)
            self.up = nn.Linear(D, 4 * D)
            self.down = nn.Linear(4 * D, D)
            self.register_buffer("k", torch.randn(B, T, D) / D ** 0.5, persistent=False)
            self.register_buffer("v", torch.randn(B, T, D), persistent=False)

        def forward(self, x):                                   # x: [B, D]
            s = torch.bmm(self.k, self.q(x).unsqueeze(-1)).squeeze(-1)   # [B, T]
            h = torch.bmm(torch.softmax(s, dim=-1).unsqueeze(1), self.v).squeeze(1)
            x = x + self.o(h)
            return x + self.down(torch.relu(self.up(x)))

    return Decode()


def cmd_graph_sleep(args):
    """A decode step captured as a torch.cuda.CUDAGraph and compiled with
    torch.compile(mode="reduce-overhead") (enable() turns Inductor's graph trees off, so Inductor
    records a plain CUDA graph), each replayed on four inputs, then rap_torch.sleep("backup")
    (without prepare_sleep) and wake: the same inputs give bit-equal outputs, no graph is
    captured after the wake, pointers stay. While asleep the device's free memory rises by what
    the main pool held (weights, KV cache, static inputs), and the graph pools keep theirs:
    rap's glue leaves CUDA-graph pools (QuickPools over DEVICE) as they are, so a graph's own
    memory never sleeps. Nothing replays while asleep (the weights are unmapped then). On a spec
    that cannot sleep: fails with rap's sentence."""
    import torch
    name = _name("graph_sleep", args)
    if not torch.cuda.is_available():
        _dump(args.out, name, {"skipped": "no CUDA device"})
        return 0
    import rap_torch
    rap_torch.enable()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    counts = _count_captures(torch)
    r = {"spec": rap_torch.spec(), "env_spec": os.environ.get("RAP_TORCH_SPEC", ""),
         "hooks": rap_torch.hooks(), "captures_counted": counts is not None}
    D, T, B = 1024, 4096, 32        # KV cache 2 x 512 MiB
    try:
        torch.manual_seed(0)
        model = _decoder(torch, D, T, B).cuda().eval()
        gen = torch.Generator(device="cuda").manual_seed(1)
        xs = [torch.randn(B, D, device="cuda", generator=gen) for _ in range(4)]
        ballast = torch.full((1 << 28,), 5.0, device="cuda")   # 1 GiB more in the main pool
        static_x = torch.zeros(B, D, device="cuda")
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    model(static_x)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                static_y = model(static_x)
            captured_explicit = counts["n"] if counts else None
            compiled = torch.compile(model, mode="reduce-overhead")
            for _ in range(3):
                compiled(xs[0])                                 # warm-up and recording

            def outputs():
                got = []
                for x in xs:
                    static_x.copy_(x)
                    g.replay()
                    got.append(static_y.cpu())
                for x in xs:
                    got.append(compiled(x).cpu())
                return got

            before = outputs()
        y_ptr = static_y.data_ptr()
        ptrs = [p.data_ptr() for p in model.parameters()] + [model.k.data_ptr(), model.v.data_ptr()]
        captures_before = counts["n"] if counts else None
        if counts:
            r["captures_explicit"] = captured_explicit
            r["captures_compiled"] = captures_before - captured_explicit
        torch.cuda.synchronize()
        main_held = rap_torch.rap_stats()["reserved"]
        graph_held = rap_torch.graph_memory_reserved()
        r["graph_pools"] = rap_torch.rap_stats(graph=True)["graph_pools"]
        free0, _ = torch.cuda.mem_get_info()
        t0 = time.perf_counter()
        _sleep_or_say(rap_torch)
        r["sleep_ms"] = (time.perf_counter() - t0) * 1e3
        free1, _ = torch.cuda.mem_get_info()
        graph_held_asleep = rap_torch.graph_memory_reserved()
        t0 = time.perf_counter()
        rap_torch.wake()
        r["wake_ms"] = (time.perf_counter() - t0) * 1e3
        with torch.no_grad():
            after = outputs()
        r["main_reserved_MiB"] = main_held / 2**20
        r["graph_reserved_MiB"] = graph_held / 2**20
        r["freed_MiB"] = (free1 - free0) / 2**20
        r["freed_fraction_of_main"] = (free1 - free0) / main_held if main_held else 0.0
        r["graph_memory_kept_while_asleep"] = graph_held_asleep == graph_held
        r["explicit_equal"] = all(torch.equal(a, b) for a, b in zip(before[:4], after[:4]))
        r["compiled_equal"] = all(torch.equal(a, b) for a, b in zip(before[4:], after[4:]))
        r["no_capture_after_wake"] = (counts["n"] == captures_before) if counts else None
        r["pointers_kept"] = (static_y.data_ptr() == y_ptr and ptrs ==
                              [p.data_ptr() for p in model.parameters()] +
                              [model.k.data_ptr(), model.v.data_ptr()])
        r["ballast_intact"] = bool((ballast == 5.0).all().item())
        r["ok"] = bool(r["explicit_equal"] and r["compiled_equal"] and r["pointers_kept"] and
                       r["ballast_intact"] and r["graph_memory_kept_while_asleep"] and
                       r["freed_fraction_of_main"] >= 0.99 and
                       r["no_capture_after_wake"] is not False and
                       (not counts or r["captures_compiled"] >= 1))
        if counts and r["captures_compiled"] < 1:
            r["error"] = ("torch.compile(mode='reduce-overhead') recorded no CUDA graph (Inductor "
                          "skipped cudagraphs: see the log)")
    except Exception as e:  # noqa: BLE001 - reported in the summary
        _fail_or_error(r, e)
    _dump(args.out, name, r)
    return 0 if r["ok"] else 1


# ---- two GPUs: torch.multiprocessing and NCCL on one pool --------------------------------------

SHARE_N = 16 << 20          # floats: 64 MiB, the shared tensor and each all-reduce's
CHILD_WRITES = 400          # the child's additions while it holds the tensor (~0.5 ms apart)
ALLREDUCES = 10


def _shared_base(torch, rank):
    """What the rank puts in the tensor it sends, computed on the host."""
    return (torch.arange(SHARE_N) % 4096).float() + 10000.0 * (rank + 1)


def _share_child(q_in, q_out, device, rank):
    """The receiver, on the rank's GPU: the tensor arrives through torch.multiprocessing (rap's
    share/open underneath) with rap_torch.share's handle of a second one; it checks both, doubles
    the first, then (on "go") adds 1 CHILD_WRITES times on its stream and holds it until "done",
    checks it, queues CHILD_WRITES more additions and drops it at once (the close is ordered after
    them on its stream), and synchronizes only on "bye"."""
    import torch
    torch.cuda.set_device(device)
    import rap_torch
    try:
        x, handle = q_in.get(timeout=120)
        base = _shared_base(torch, rank)
        ok = bool(torch.equal(x.cpu(), base))
        probe = rap_torch.open(handle)
        ok_probe = bool((probe == 3).all().item())
        del probe
        x.mul_(2)
        torch.cuda.current_stream().synchronize()
        q_out.put(("received", ok, ok_probe))
        if q_in.get(timeout=120) != "go":
            raise RuntimeError("expected 'go'")
        for _ in range(CHILD_WRITES):
            torch.cuda._sleep(1000000)
            x.add_(1)
        if q_in.get(timeout=300) != "done":
            raise RuntimeError("expected 'done'")
        ok = bool(torch.equal(x.cpu(), base * 2 + CHILD_WRITES))
        for _ in range(CHILD_WRITES):    # still queued when the tensor goes
            torch.cuda._sleep(1000000)
            x.add_(1)
        del x
        q_out.put(("dropped", ok))
        if q_in.get(timeout=120) != "bye":
            raise RuntimeError("expected 'bye'")
        torch.cuda.synchronize()
        q_out.put(("synced", True))
    except Exception as e:  # noqa: BLE001 - the rank reports it
        q_out.put(("error", "%s: %s" % (type(e).__name__, str(e)[:400])))


def _allreduce_checked(torch, dist, rank, world, i, where, check=None):
    """One all-reduce of SHARE_N floats in a fresh tensor (where: a context for its allocation);
    (every element what the host computes, its address, check(address) while it lives)."""
    with where():
        buf = (torch.arange(SHARE_N, device="cuda") % 1000).float() * (rank + 1) + i
    ptr = buf.data_ptr()
    checked = check(ptr) if check is not None else None
    dist.all_reduce(buf)
    expect = (torch.arange(SHARE_N) % 1000).float() * (world * (world + 1) // 2) + world * i
    return bool(torch.equal(buf.cpu(), expect)), ptr, checked


def _rank_shared(torch, dist, rap_torch, rank, local, world, r):
    """Enabled: the shared tensor, the child, and all-reduces on rap's pool while it holds it."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_share_child, args=(q_in, q_out, local, rank))
    child.start()
    try:
        s = (torch.arange(SHARE_N, device="cuda") % 4096).float() + 10000.0 * (rank + 1)
        probe = torch.full((1 << 18,), 3.0, device="cuda")
        try:    # here, not in the queue's feeder thread, so that a refusal is a sentence
            handle = rap_torch.share(probe)
        except RuntimeError as e:
            raise CannotDoIt("the device's pool cannot export (spec %s): %s"
                             % (rap_torch.spec(), e)) from e
        q_in.put((s, handle))
        got = q_out.get(timeout=180)
        if got[0] == "error":
            raise RuntimeError("the child: " + got[1])
        r["values_arrived"], r["share_open_values"] = got[1], got[2]
        torch.cuda.synchronize()
        r["receiver_write_seen"] = bool(torch.equal(s.cpu(), _shared_base(torch, rank) * 2))
        lo, hi = s.data_ptr(), s.data_ptr() + s.untyped_storage().nbytes()
        del s, probe                    # freed here while the child holds the shared one
        rap_torch.empty_cache()
        r["pending_while_held_MiB"] = rap_torch.pending_bytes() / 2**20
        q_in.put("go")
        def over(ptr):
            return lo <= ptr < hi or ptr <= lo < ptr + SHARE_N * 4

        right, overlaps = 0, 0
        for i in range(ALLREDUCES):
            ok, ptr, _ = _allreduce_checked(torch, dist, rank, world, i, contextlib.nullcontext)
            right += ok
            overlaps += over(ptr)
        r["allreduces_right"], r["allreduces_over_the_held_block"] = right, overlaps
        q_in.put("done")
        got = q_out.get(timeout=300)
        if got[0] == "error":
            raise RuntimeError("the child: " + got[1])
        r["child_writes_right"] = got[1]
        # The child dropped it with ~0.2 s of additions to it still queued on its stream: tensors
        # made now must not get that memory before its stream passed them (their 7s would change).
        fresh = [torch.full((SHARE_N,), 7.0, device="cuda") for _ in range(8)]
        r["fresh_over_the_closed_block"] = sum(over(t.data_ptr()) for t in fresh)
        q_in.put("bye")
        got = q_out.get(timeout=120)
        if got[0] == "error":
            raise RuntimeError("the child: " + got[1])
        torch.cuda.synchronize()
        r["fresh_tensors_intact"] = all(bool((t == 7.0).all().item()) for t in fresh)
        del fresh
        child.join(120)
        r["child_exit"] = child.exitcode
        torch.cuda.synchronize()
        rap_torch.empty_cache()
        r["pending_after_drop_MiB"] = rap_torch.pending_bytes() / 2**20
        r["registrable"] = rap_torch.registrable()          # None: NCCL could register it
        try:
            rap_torch.register_mem_pool(None)
            r["register_mem_pool_refused"] = None
        except RuntimeError as e:   # designed: not while rap is PyTorch's allocator
            r["register_mem_pool_refused"] = str(e)[:300]
        r["ok"] = bool(r["values_arrived"] and r["share_open_values"] and r["receiver_write_seen"]
                       and r["pending_while_held_MiB"] >= SHARE_N * 4 / 2**20
                       and right == ALLREDUCES and overlaps == 0 and r["child_writes_right"]
                       and r["fresh_tensors_intact"]
                       and r["child_exit"] == 0 and r["pending_after_drop_MiB"] < SHARE_N * 4 / 2**20
                       and r["register_mem_pool_refused"] is not None)
    finally:
        if child.is_alive():
            child.join(5)
        if child.is_alive():
            child.terminate()           # the child this rank started, by its own handle
            child.join(10)


def _rank_registered(torch, dist, rap_torch, rank, world, r, keep):
    """PyTorch's allocator; a MemPool over rap.torch.allocator() (enable()'s spec) registered
    with NCCL, all-reduces in it. keep["pool"]: the pool, deregistered by the caller (also after
    a failure) before the group goes."""
    pool = keep["pool"] = torch.cuda.MemPool(rap_torch.allocator())
    with torch.cuda.use_mem_pool(pool):
        early = torch.empty(1 << 20, device="cuda")
    r["spec"] = rap_torch.spec()
    why = rap_torch.registrable(early.data_ptr())
    del early
    if why is not None:
        raise CannotDoIt("NCCL cannot register the device pool's memory (spec %s): %s"
                         % (r["spec"], why))
    rap_torch.register_mem_pool(pool)
    r["registered"] = True
    right, registrable = 0, 0
    for i in range(ALLREDUCES):
        ok, _, why = _allreduce_checked(torch, dist, rank, world, i,
                                        lambda: torch.cuda.use_mem_pool(pool),
                                        rap_torch.registrable)
        right += ok
        registrable += why is None
    r["allreduces_right"], r["allreduces_in_registrable_memory"] = right, registrable
    r["ok"] = right == ALLREDUCES and registrable == ALLREDUCES


def _share_allreduce_rank(args):
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    registered = args.tag == "registered"
    import rap_torch
    if not registered:
        rap_torch.enable()
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world = dist.get_world_size()
    r = {"rank": rank, "world": world, "env_spec": os.environ.get("RAP_TORCH_SPEC", ""),
         "mode": "registered" if registered else "enabled"}
    keep = {}
    try:
        if registered:
            _rank_registered(torch, dist, rap_torch, rank, world, r, keep)
        else:
            r["spec"] = rap_torch.spec()
            _rank_shared(torch, dist, rap_torch, rank, local, world, r)
    except Exception as e:  # noqa: BLE001 - reported in the summary
        _fail_or_error(r, e)
    _dump(args.out, "%s_rank%d" % (_name("share_allreduce", args), rank), r)
    if r.get("registered"):
        torch.cuda.synchronize()
        dist.barrier()
        rap_torch.deregister_mem_pool(keep["pool"])   # before the group goes (rap_torch's docstring)
    keep.clear()   # the last reference: ~MemPool runs now, while the group is alive
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return 0 if r.get("ok") else 1


def _nccl_registration_lines(pattern_dir):
    lines = []
    for f in sorted(os.listdir(pattern_dir)):
        if f.startswith("nccl-cap.") and f.endswith(".log"):
            with open(os.path.join(pattern_dir, f), errors="replace") as fh:
                lines += [line.rstrip() for line in fh if "egist" in line]
    return lines


def cmd_share_allreduce(args):
    """Under torchrun (RANK set): one rank. Otherwise: skipped with fewer than two GPUs, else
    torchrun on two of them, and the ranks' results merged."""
    if "RANK" in os.environ:
        return _share_allreduce_rank(args)
    name = _name("share_allreduce", args)
    import torch
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < 2:
        _dump(args.out, name, {"skipped": "needs two GPUs; %d here" % gpus})
        return 0
    for f in os.listdir(args.out):   # this launch's files only
        if f.startswith(name + "_rank") or (f.startswith("nccl-cap.") and f.endswith(".log")):
            os.remove(os.path.join(args.out, f))
    env = dict(os.environ)
    if args.tag == "registered":   # NCCL says what it registered (REG), read into the results
        env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,REG",
                   NCCL_DEBUG_FILE=os.path.join(args.out, "nccl-cap.%h.%p.log"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           HERE, "share_allreduce", "--out", args.out] + (["--tag", args.tag] if args.tag else [])
    limit = getattr(args, "timeout", 300)
    t0 = time.perf_counter()
    # A session of its own: past the limit the launcher and its ranks (and their children) end
    # together, by the group this call made.
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        text, _ = p.communicate(timeout=limit)
        status = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        text, _ = p.communicate()
        status = "timed out after %d s" % limit
    print(text[-20000:])
    ranks = [_load(args.out, "%s_rank%d" % (name, k)) for k in range(2)]
    r = {"gpus": gpus, "launch_status": status, "seconds": time.perf_counter() - t0,
         "ranks": ranks, "mode": "registered" if args.tag == "registered" else "enabled"}
    if args.tag == "registered":
        reg = _nccl_registration_lines(args.out)
        r["nccl_registration_lines"], r["nccl_registration_sample"] = len(reg), reg[:4]
    r["ok"] = status == 0 and all(x and x.get("ok") for x in ranks)
    if not r["ok"]:
        r["launch_tail"] = text[-3000:]
    _dump(args.out, name, r)
    return 0 if r["ok"] else 1


# ---- summary -----------------------------------------------------------------------------------

def _spec_said(r):
    return r.get("spec") or "?"


def _sleep_lines(out, name, required):
    s = _load(out, name)
    if s is None:
        return not required, ["sleep/wake (%s): results missing" % name] if required else []
    if "skipped" in s:
        return True, ["sleep/wake (%s): skipped: %s" % (name, s["skipped"])]
    if "error" in s:
        return False, ["sleep/wake on %s: FAILED: %s" % (_spec_said(s), s["error"][:600])]
    lines = ["sleep/wake on %s%s: losses after two sleeps bit-equal to a run without: %s; "
             "discard then usable: %s"
             % (_spec_said(s), " (RAP_TORCH_SPEC)" if s.get("env_spec") else " (the default)",
                s["losses_equal"], s["discard_then_usable"])]
    for p in s["pauses"]:
        lines.append("  after step %d, %s: state bit-equal %s, 4 GiB tensor intact %s, pointers "
                     "kept %s; %.0f of %.0f MiB freed (%.1f %%); another process took %.0f MiB "
                     "(more than was free before: %s): %s; refused while asleep: %s; a tensor "
                     "dropped while asleep freed at the wake: %s; sleep %.0f ms, wake %.0f ms"
                     % (p["after_step"], "after prepare_sleep (%.0f ms)" % p["prepare_ms"]
                        if p["prepared"] else "first sleep, not prepared",
                        p["state_bit_equal"], p["weights_intact"], p["pointers_kept"],
                        p["freed_MiB"], p["reserved_MiB"], 100 * p["freed_fraction"],
                        p["other_process_took_MiB"], p["other_process_needed_the_freed_memory"],
                        p["other_process_ok"], p["refused_while_asleep"],
                        p["free_while_asleep_done_at_wake"], p["sleep_ms"], p["wake_ms"]))
    return bool(s.get("ok")), lines


def _graph_sleep_lines(out, required):
    g = _load(out, "graph_sleep")
    if g is None:
        return not required, ["CUDA graphs across a sleep: results missing"] if required else []
    if "skipped" in g:
        return True, ["CUDA graphs across a sleep: skipped: %s" % g["skipped"]]
    if "explicit_equal" not in g:
        return False, ["CUDA graphs across a sleep on %s: FAILED: %s"
                       % (_spec_said(g), g.get("error", "?")[:600])]
    line = ("CUDA graphs across a sleep on %s: a decode step as a CUDAGraph and through "
            "torch.compile(mode='reduce-overhead') (graphs it recorded: %s), replayed after "
            "the wake: explicit bit-equal %s, compiled bit-equal %s, captured again after the "
            "wake: %s; pointers kept %s; %.0f of the main pool's %.0f MiB freed (%.1f %%); the "
            "graph pools (%d, %.1f MiB) stayed mapped: %s; sleep %.0f ms, wake %.0f ms"
            % (_spec_said(g), g.get("captures_compiled", "?"), g["explicit_equal"],
               g["compiled_equal"], "not counted" if g["no_capture_after_wake"] is None
               else not g["no_capture_after_wake"], g["pointers_kept"], g["freed_MiB"],
               g["main_reserved_MiB"], 100 * g["freed_fraction_of_main"], g["graph_pools"],
               g["graph_reserved_MiB"], g["graph_memory_kept_while_asleep"], g["sleep_ms"],
               g["wake_ms"]))
    if g.get("error"):
        line += "; " + g["error"]
    return bool(g.get("ok")), [line]


def summarize(out, required=None):
    """(ok, lines) for test_torch.py's summary: sleep on enable()'s spec and graph_sleep (required
    unless RAP_TEST_ONLY, or required=False), sleep over DEVICE_VMM (--tag vmm) where run."""
    if required is None:
        required = os.environ.get("RAP_TEST_ONLY") is None
    ok, lines = True, []
    for name, need in (("sleep", required), ("sleep_vmm", False)):
        good, more = _sleep_lines(out, name, need)
        ok &= good
        lines += more
    good, more = _graph_sleep_lines(out, required)
    return ok & good, lines + more


def _two_gpu_lines(out):
    ok, lines = True, []
    for tag in ("", "registered"):
        name = "share_allreduce" + ("_" + tag if tag else "")
        s = _load(out, name)
        if s is None or "skipped" in s:
            ok &= s is not None
            lines.append("%s: %s" % (name, s["skipped"] if s else "results missing"))
            continue
        ranks = [x or {} for x in s["ranks"]]
        errors = ["rank %d: %s" % (k, x.get("error", "no results")[:400])
                  for k, x in enumerate(ranks) if not x.get("ok")]
        ok &= bool(s["ok"])
        spec = ranks[0].get("spec") or "?"
        what = ("rap enabled, a tensor shared while NCCL all-reduces" if tag == "" else
                "a MemPool over rap.torch.allocator() registered with NCCL")
        if "allreduces_right" not in ranks[0]:
            lines.append("two GPUs, %s: FAILED: %s" % (what, "; ".join(errors) or s.get("launch_tail", "")[-400:]))
            lines.append("  launch: exit %s, %.0f s" % (s["launch_status"], s["seconds"]))
            continue
        if tag == "":
            a = ranks[0]
            lines.append("two GPUs, rap enabled on %s: a 64 MiB tensor sent through "
                         "torch.multiprocessing (values arrived %s, the child's write seen %s, "
                         "share/open %s), held by the child while %d NCCL all-reduces ran on new "
                         "tensors of the same pool: right %s of %d, over the held block %s; the "
                         "child's %d writes right: %s; dropped by the child with its writes "
                         "still queued: 8 new tensors intact %s (%s over its block); pending "
                         "while held %.1f MiB, after the drop %.1f MiB; register_mem_pool while "
                         "enabled: %s"
                         % (spec, a.get("values_arrived"), a.get("receiver_write_seen"),
                            a.get("share_open_values"), ALLREDUCES, a.get("allreduces_right"),
                            ALLREDUCES, a.get("allreduces_over_the_held_block"), CHILD_WRITES,
                            a.get("child_writes_right"), a.get("fresh_tensors_intact"),
                            a.get("fresh_over_the_closed_block"), a.get("pending_while_held_MiB", -1),
                            a.get("pending_after_drop_MiB", -1),
                            "refused, as designed" if a.get("register_mem_pool_refused")
                            else a.get("register_mem_pool_refused")))
        else:
            a = ranks[0]
            lines.append("two GPUs, PyTorch's allocator with a MemPool over rap.torch.allocator() "
                         "(%s) registered with NCCL: %s of %d all-reduces right, in registrable "
                         "memory %s; NCCL's log: %s registration lines"
                         % (spec, a.get("allreduces_right"), ALLREDUCES,
                            a.get("allreduces_in_registrable_memory"),
                            s.get("nccl_registration_lines")))
        lines.append("  launch: exit %s, %.0f s%s" % (s["launch_status"], s["seconds"],
                                                     "; " + "; ".join(errors) if errors else ""))
    return ok, lines


def _result(out, file, ok, lines):
    lines.append("RESULT: " + ("PASS" if ok else "FAIL"))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out, file), "w") as f:
        f.write(text + "\n")
    return 0 if ok else 1


def cmd_summarize_two_gpus(args):
    ok, lines = _two_gpu_lines(args.out)
    return _result(args.out, "two_gpus_summary.txt", ok, lines)


def cmd_summarize_capabilities(args):
    """The lines of whichever of this file's commands wrote results to --out (none required)."""
    ok, lines = summarize(args.out, required=False)
    if any(_load(args.out, n) is not None for n in ("share_allreduce", "share_allreduce_registered")):
        good, more = _two_gpu_lines(args.out)
        ok, lines = ok and good, lines + more
    if not lines:
        lines.append("no results of sleep, graph_sleep or share_allreduce in %s" % args.out)
        ok = False
    return _result(args.out, "capabilities_summary.txt", ok, lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--tag", default="")
    ap.add_argument("--timeout", type=int, default=300, help="share_allreduce's launch, seconds")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    return globals()["cmd_" + args.command](args) or 0


if __name__ == "__main__":
    sys.exit(main())
