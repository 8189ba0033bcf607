"""bench_distributed.py — torch.distributed on rap: DDP and FSDP2 training, native against rap, and
NCCL's registration of rap memory. Run on a machine with two or more GPUs by run_distributed.sh,
which launches each run with torchrun on RAP_DIST_RANKS ranks (default: every GPU) and then prints
the tables.

  torchrun --standalone --nproc_per_node N bench_distributed.py train --allocator native|rap|registered [--registered] --out DIR --trial N
      DDP then FSDP2 (registered: DDP only; native --registered: then the registered DDP in the same
      process) training of a 6-layer GPT-2 (transformers' config,
      random weights), batch 8 x 512, bf16, AdamW, RAP_DIST_STEPS steps (default 30): median step ms
      of the steps after the first few (5, fewer for short runs), peak
      reserved, losses, and rap's cross-stream waits. native: PyTorch's allocator; rap:
      rap.torch.enable() with its default spec (or RAP_TORCH_SPEC); registered: PyTorch's
      allocator with DDP's buckets in a torch.cuda.MemPool over rap.torch.allocator(NCCL_SPEC),
      registered with NCCL (rap.torch.register_mem_pool).
  torchrun --standalone --nproc_per_node N bench_distributed.py nccl --out DIR
      all-reduce, all-gather and one DDP step on registered rap memory against native memory:
      results equal on every rank, times; NCCL's log (NCCL_DEBUG_FILE) is read by report.
  python3 bench_distributed.py bad --out DIR
      registering a pool of rap memory NCCL cannot register gets rap's sentence.
  python3 bench_distributed.py report --out DIR [--ranks N]
      the tables (medians and spreads over the runs, step time and peak reserved per rank, the
      check on every rank) and DIR/distributed.json; --ranks: how many ranks every launch had.
"""

import argparse
import glob
import gc
import json
import os
import re
import statistics
import sys
import time
import traceback

BATCH, SEQ, LAYERS = 8, 512, 6


def _steps_from_env():
    """RAP_DIST_STEPS (default 30, at least 3); the first SKIP steps (warm-up) are not timed."""
    v = os.environ.get("RAP_DIST_STEPS", "30")
    if not v.isdigit() or int(v) < 3:
        sys.exit("RAP_DIST_STEPS is a number of steps, at least 3, not %r" % v)
    n = int(v)
    return n, min(5, n // 3)


STEPS, SKIP = _steps_from_env()


def _rank():
    return int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))


def _dump(out, name, r):
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump(r, f, indent=1)


def _init(allocator):
    if allocator == "rap":
        import rap_torch
        rap_torch.enable()
    import torch
    import torch.distributed as dist
    rank, local = _rank()
    torch.cuda.set_device(local)
    # device_id: the communicator is made now (register_mem_pool needs it).
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    return torch, dist, rank, local


def _model(torch):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=LAYERS, n_positions=SEQ, n_embd=768, n_head=12)
    torch.manual_seed(0)   # the same weights on every rank
    with torch.device("cuda"):
        model = GPT2LMHeadModel(cfg)
    return model.to(torch.bfloat16), cfg


def _steps(torch, model, opt, rank, vocab):
    g = torch.Generator(device="cuda")
    g.manual_seed(1000 + rank)
    ids = torch.randint(0, vocab, (BATCH, SEQ), device="cuda", generator=g)
    times, losses = [], []
    for _ in range(STEPS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, losses


def _rap_figures(allocator):
    if not allocator.startswith("rap"):
        return {}
    import rap_torch
    s = rap_torch.rap_stats()
    return {"waits": s.get("waits", 0), "host_waits": s.get("host_waits", 0), "spec": rap_torch.spec()}


def _one(torch, dist, rank, mode, allocator, pool=None):
    import gc
    gc.collect()   # the previous configuration's model and optimizer go before the peaks restart
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    at_start = torch.cuda.memory_reserved()   # what the configuration before left held
    model, cfg = _model(torch)
    ctx = torch.cuda.use_mem_pool(pool) if pool is not None else _null()
    with ctx:
        if mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, device_ids=[torch.cuda.current_device()])
        else:
            try:
                from torch.distributed.fsdp import fully_shard
            except ImportError:
                from torch.distributed._composable.fsdp import fully_shard
            for block in model.transformer.h:
                fully_shard(block)
            fully_shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        times, losses = _steps(torch, model, opt, rank, cfg.vocab_size)
    r = {"mode": mode, "allocator": allocator, "rank": rank, "world": dist.get_world_size(),
         "steps": STEPS, "step_ms": times, "median_ms": statistics.median(times[SKIP:]), "losses": losses,
         "peak_reserved": torch.cuda.max_memory_reserved(), "peak_allocated": torch.cuda.max_memory_allocated(),
         "reserved_at_start": at_start}
    r.update(_rap_figures(allocator))
    del model, opt
    dist.barrier()
    return r


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def cmd_train(args):
    """One process: native runs DDP then FSDP2 and then, with --registered, DDP on registered rap
    memory (PyTorch's allocator either way: one launch fewer per round); rap runs DDP then FSDP2
    on rap's default; registered alone runs only its DDP."""
    alloc = args.allocator
    torch, dist, rank, _ = _init("rap" if alloc == "rap" else "native")
    label = alloc + (":" + args.variant if alloc == "rap" and args.variant else "")
    runs = [] if alloc == "registered" else [("ddp", label), ("fsdp", label)]
    if alloc == "registered" or (alloc == "native" and args.registered):
        runs.append(("ddp", "registered"))
    pool = None
    for mode, a in runs:
        r = {"mode": mode, "allocator": a, "rank": rank, "run": args.run}
        try:
            if a == "registered" and pool is None:
                import rap_torch
                pool = torch.cuda.MemPool(rap_torch.allocator(rap_torch.NCCL_SPEC))
                rap_torch.register_mem_pool(pool)
            r = _one(torch, dist, rank, mode, a, pool if a == "registered" else None)
            r["run"] = args.run
        except Exception as e:  # noqa: BLE001 - reported in the table
            r["error"] = "%s: %s" % (type(e).__name__, str(e)[:500])
            r["traceback"] = traceback.format_exc()[-2000:]
        _dump(args.out, "train_%s_%s_run%d_rank%d" % (mode, a, args.run, rank), r)
    _release_pool(torch, dist, pool)
    pool = None   # the last reference: ~MemPool runs now, while the group is alive
    gc.collect()
    dist.destroy_process_group()


def _release_pool(torch, dist, pool):
    """A registered pool is deregistered and goes before its process group: after the group, its
    segments' deregistration asks a destroyed communicator and PyTorch ends the process."""
    if pool is None:
        return
    import gc
    import rap_torch
    torch.cuda.synchronize()
    dist.barrier()
    rap_torch.deregister_mem_pool(pool)


def _time_collective(torch, call, n=20):
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def _time_all_reduce(torch, dist, x, n=20):
    return _time_collective(torch, lambda: dist.all_reduce(x), n)


def cmd_nccl(args):
    torch, dist, rank, local = _init("native")
    import rap_torch
    r = {"rank": rank}
    try:
        pool = torch.cuda.MemPool(rap_torch.allocator(rap_torch.NCCL_SPEC))
        with torch.cuda.use_mem_pool(pool):
            early = torch.empty(1 << 20, device="cuda")   # a segment before the registration
        rap_torch.register_mem_pool(pool)
        n = 64 << 20   # floats: 256 MiB, a segment taken after the registration
        with torch.cuda.use_mem_pool(pool):
            reg = torch.empty(n, device="cuda")
        r["registrable"] = rap_torch.registrable(reg.data_ptr()) is None
        nat = torch.empty(n, device="cuda")
        g = torch.Generator(device="cuda")
        g.manual_seed(7 + rank)
        src = torch.randint(-1000, 1000, (n,), device="cuda", generator=g).float()
        reg.copy_(src)
        nat.copy_(src)
        dist.all_reduce(reg)
        dist.all_reduce(nat)
        r["all_reduce_equal"] = bool(torch.equal(reg, nat))
        r["all_reduce_ms_registered"] = _time_all_reduce(torch, dist, reg)
        r["all_reduce_ms_native"] = _time_all_reduce(torch, dist, nat)
        # All-gather into registered rap memory against native memory: every rank's piece, equal.
        world = dist.get_world_size()
        r["world"] = world
        piece = 16 << 20   # floats per rank: 64 MiB
        with torch.cuda.use_mem_pool(pool):
            gathered = torch.empty(piece * world, device="cuda")
        gathered_nat = torch.empty(piece * world, device="cuda")
        mine = src[:piece]
        dist.all_gather_into_tensor(gathered, mine)
        dist.all_gather_into_tensor(gathered_nat, mine)
        r["all_gather_equal"] = bool(torch.equal(gathered, gathered_nat)) and bool(
            torch.equal(gathered[rank * piece:(rank + 1) * piece], mine))
        r["all_gather_ms_registered"] = _time_collective(
            torch, lambda: dist.all_gather_into_tensor(gathered, mine))
        r["all_gather_ms_native"] = _time_collective(
            torch, lambda: dist.all_gather_into_tensor(gathered_nat, mine))
        del gathered, gathered_nat, mine
        # One DDP step with the buckets in registered rap memory against one in native memory.
        from torch.nn.parallel import DistributedDataParallel as DDP
        grads = []
        for where in ("native", "registered"):
            model, cfg = _model(torch)
            ctx = torch.cuda.use_mem_pool(pool) if where == "registered" else _null()
            with ctx:
                ddp = DDP(model, device_ids=[local])
                gen = torch.Generator(device="cuda")
                gen.manual_seed(1000 + rank)
                ids = torch.randint(0, cfg.vocab_size, (2, 128), device="cuda", generator=gen)
                loss = ddp(input_ids=ids, labels=ids).loss
                loss.backward()
            torch.cuda.synchronize()
            grads.append([p.grad.detach().clone() for p in ddp.parameters()])
            r["ddp_loss_" + where] = loss.item()
            del ddp, model
        r["ddp_grads_equal"] = all(torch.equal(a, b) for a, b in zip(grads[0], grads[1]))
        r["ok"] = r["registrable"] and r["all_reduce_equal"] and r["all_gather_equal"] and r["ddp_grads_equal"]
        del early, reg, nat, src, grads   # the pool's tensors go before the pool (_release_pool)
    except Exception as e:  # noqa: BLE001
        r["error"] = "%s: %s" % (type(e).__name__, str(e)[:600])
        r["traceback"] = traceback.format_exc()[-2500:]
        r["ok"] = False
    _dump(args.out, "nccl_rank%d" % rank, r)
    try:
        _release_pool(torch, dist, pool)
    except NameError:
        pass   # the pool was never made: its error is in r
    pool = None   # the last reference: ~MemPool runs now, while the group is alive
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


# Memory NCCL cannot register: cudaMalloc chunks.
UNREGISTRABLE_SPEC = "ResourceAwarePool(DEVICE::{device}, initial_size=64MiB, next_size=32MiB)"


def cmd_bad(args):
    """A MemPool over a spec whose memory NCCL cannot register (a pool over DEVICE::N, cudaMalloc
    chunks: the fallback's platform) is refused: the check answers before NCCL is asked, with
    rap's sentence. (rap's default spec is registrable: the registration test runs on it.)"""
    import torch
    import rap_torch
    r = {}
    try:
        pool = torch.cuda.MemPool(rap_torch.allocator(UNREGISTRABLE_SPEC))
        with torch.cuda.use_mem_pool(pool):
            x = torch.ones(1 << 20, device="cuda")
        r["why"] = rap_torch.registrable(x.data_ptr())
        try:
            rap_torch.register_mem_pool(pool)
            r["refused"] = False
        except ValueError as e:
            r["refused"] = True
            r["sentence"] = str(e)
        r["ok"] = bool(r["refused"] and r["why"] and "DeviceVmm(export=posix)" in r.get("sentence", ""))
    except Exception as e:  # noqa: BLE001
        r["error"] = "%s: %s" % (type(e).__name__, str(e)[:600])
        r["ok"] = False
    _dump(args.out, "nccl_bad", r)


# ---- report -------------------------------------------------------------------------------------

def _load_all(out, pattern):
    found = []
    for p in sorted(glob.glob(os.path.join(out, pattern))):
        with open(p) as f:
            found.append(json.load(f))
    return found


def _spread(v):
    return "%.1f-%.1f" % (min(v), max(v)) if v else "-"


def _nccl_log_lines(out):
    lines = []
    for p in sorted(glob.glob(os.path.join(out, "nccl-reg.*"))):
        with open(p, errors="replace") as f:
            lines += [l.rstrip() for l in f if re.search(r"regist", l, re.I)]
    return lines


def _per_rank(rs):
    """{rank: (run medians of its step ms, its peak reserved MiB per run)} over the good runs."""
    out = {}
    for r in sorted((r for r in rs if "error" not in r), key=lambda r: r["run"]):
        t, m = out.setdefault(r["rank"], ([], []))
        t.append(r["median_ms"])
        m.append(r["peak_reserved"] / 2**20)
    return out


def _report_per_rank(summary, table):
    """Per rank, over the runs: the median and spread of the step time and of the peak reserved,
    and the check against native on the same rank: rap's median step time at most native's (or
    within native's spread: at most its slowest run) and rap's median peak reserved at most native's
    median. Every rank must pass; reported, not asserted (the machine decides)."""
    print()
    print("| config | rank | runs | step ms median (spread) | peak reserved MiB median (spread) |")
    print("| --- | --- | --- | --- | --- |")
    ranks = {}
    for (mode, alloc), rs in sorted(table.items(), key=lambda kv: kv[0]):
        ranks[(mode, alloc)] = _per_rank(rs)
        for rank, (t, m) in sorted(ranks[(mode, alloc)].items()):
            print("| %s %s | %d | %d | %.1f (%s) | %.0f (%s) |" % (
                mode.upper(), alloc, rank, len(t), statistics.median(t), _spread(t),
                statistics.median(m), "%.0f-%.0f" % (min(m), max(m))))
        for c in summary["configs"]:
            if (c["mode"], c["allocator"]) == (mode, alloc):
                c["per_rank"] = {str(k): {"step_ms": t, "peak_reserved_mib": m}
                                 for k, (t, m) in sorted(ranks[(mode, alloc)].items())}
    world = summary.get("world")
    for mode in ("ddp", "fsdp"):
        n = ranks.get((mode, "native"), {})
        for al in sorted(al for (m, al) in ranks if m == mode and al.startswith("rap")) or ["rap"]:
            a = ranks.get((mode, al), {})
            key = "target_" + mode + ("" if al == "rap" else "_" + al)
            want = set(range(world)) if world else set(n) | set(a)
            if not n or not a or set(n) != want or set(a) != want:
                print("%s: native and %s did not both finish on every rank (%s and %s of %d): nothing "
                      "to compare" % (mode.upper(), al, sorted(n), sorted(a), len(want)))
                summary["ok"] &= al != "rap"   # the default must run; a variant may fail
                continue
            each = {}
            for k in sorted(want):
                (nt, nm), (at, am) = n[k], a[k]
                each[str(k)] = {"time": statistics.median(at) <= max(nt),
                                "time_strict": statistics.median(at) <= statistics.median(nt),
                                "memory": statistics.median(am) <= statistics.median(nm)}
                print("%s rank %d: %s %.1f ms %s native %.1f ms (spread %s)%s; peak reserved %.0f MiB %s "
                      "native %.0f MiB" % (
                          mode.upper(), k, al, statistics.median(at),
                          "<=" if each[str(k)]["time_strict"] else ">", statistics.median(nt), _spread(nt),
                          "" if each[str(k)]["time_strict"] else (
                              ", within its spread" if each[str(k)]["time"] else ", ABOVE its slowest run"),
                          statistics.median(am), "<=" if each[str(k)]["memory"] else "NOT <=",
                          statistics.median(nm)))
            fast = all(v["time"] for v in each.values())
            small = all(v["memory"] for v in each.values())
            summary[key] = {"time": fast, "memory": small, "ranks": each}
            print("%s: %s against native on every one of %d ranks: step time %s, peak reserved %s" % (
                mode.upper(), al, len(want), "passed" if fast else "FAILED",
                "passed" if small else "FAILED"))


def cmd_report(args):
    out = args.out
    runs = _load_all(out, "train_*.json")
    table = {}
    for r in runs:
        key = (r.get("mode"), r.get("allocator"))
        table.setdefault(key, []).append(r)
    worlds = {r["world"] for r in runs if "world" in r}
    world = args.ranks or (max(worlds) if worlds else None)
    summary = {"configs": [], "ok": True, "world": world}
    if world:
        print("%d ranks, %s" % (world, "steps %s" % sorted({r.get("steps") for r in runs if r.get("steps")})))
    print("| config | runs | step ms: median of run medians (spread) | each run | peak reserved MiB per rank (max over runs) | rap waits | losses vs native |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    native_losses = {}
    for (mode, alloc), rs in sorted(table.items(), key=lambda kv: (kv[0][0], ["native", "rap", "registered"].index(kv[0][1]) if kv[0][1] in ("native", "rap", "registered") else 9)):
        errs = [r for r in rs if "error" in r]
        good = [r for r in rs if "error" not in r]
        by_run = {}
        for r in good:
            by_run.setdefault(r["run"], []).append(r)
        medians = [max(x["median_ms"] for x in v) for _, v in sorted(by_run.items())]   # the slower rank
        peaks = {}
        for r in good:
            peaks[r["rank"]] = max(peaks.get(r["rank"], 0), r["peak_reserved"])
        waits = sum(r.get("waits", 0) for r in good)
        host_waits = sum(r.get("host_waits", 0) for r in good)
        losses = {(r["run"], r["rank"]): r["losses"] for r in good}
        if alloc == "native":
            native_losses[mode] = losses
        diff = None
        if alloc != "native" and mode in native_losses and losses:
            ref = {rk: l for (_, rk), l in native_losses[mode].items()}   # each rank's own data
            diffs = [abs(a - b) for (_, rk), l in losses.items() if rk in ref for a, b in zip(l, ref[rk])]
            diff = max(diffs) if diffs else None
        c = {"mode": mode, "allocator": alloc, "runs": len(by_run), "errors": [e["error"] for e in errs],
             "median_ms": statistics.median(medians) if medians else None, "run_medians_ms": medians,
             "peak_reserved_mib": {str(k): v / 2**20 for k, v in sorted(peaks.items())},
             "waits": waits, "host_waits": host_waits, "max_loss_diff_vs_native": diff}
        summary["configs"].append(c)
        if errs:
            summary["ok"] = False
        print("| %s %s | %d%s | %s (%s) | %s | %s | %s | %s |" % (
            mode.upper(), alloc, len(by_run), " (%d failed)" % len(errs) if errs else "",
            "%.1f" % c["median_ms"] if medians else "-", _spread(medians),
            ", ".join("%.1f" % m for m in medians),
            " / ".join("%.0f" % v for v in c["peak_reserved_mib"].values()),
            "%d (%d on the host)" % (waits, host_waits) if alloc.startswith("rap") else "-",
            "-" if diff is None else "max |diff| %.2g" % diff))
    for c in summary["configs"]:
        for e in c["errors"][:2]:
            print("error in %s %s: %s" % (c["mode"], c["allocator"], e))
    _report_per_rank(summary, table)
    # The registration test, the bad input, the single-process record_stream hand-off.
    nccl = _load_all(out, "nccl_rank*.json")
    lines = _nccl_log_lines(out)
    registered_lines = [l for l in lines if not re.search(r"dereg|fail|error", l, re.I)]
    summary["nccl"] = {"ranks": nccl, "log_lines": lines[:40], "log_says_registered": bool(registered_lines)}
    for r in nccl:
        if "error" in r:
            print("NCCL registration, rank %d: %s" % (r["rank"], r["error"]))
            continue
        print("NCCL registration, rank %d: registrable %s, all-reduce equal %s, all-gather equal %s, "
              "DDP grads equal %s, all-reduce 256 MiB %.2f ms registered vs %.2f ms native (%s), "
              "all-gather 64 MiB a rank %.2f vs %.2f ms" % (
                  r["rank"], r["registrable"], r["all_reduce_equal"], r.get("all_gather_equal"),
                  r["ddp_grads_equal"], r["all_reduce_ms_registered"], r["all_reduce_ms_native"],
                  "<=" if r["all_reduce_ms_registered"] <= r["all_reduce_ms_native"] else ">",
                  r.get("all_gather_ms_registered", 0), r.get("all_gather_ms_native", 0)))
    nccl_ranks = sorted(r["rank"] for r in nccl)
    every = bool(world) and nccl_ranks == list(range(world))
    summary["nccl"]["every_rank"] = every
    if not every:
        print("NCCL registration: results from ranks %s, not from every one of %s ranks" % (nccl_ranks, world))
    summary["ok"] &= every
    print("NCCL's log (NCCL_DEBUG_SUBSYS=REG): %d lines about registration%s" % (
        len(lines), ", e.g.:" if lines else " (none: not registered, or this NCCL logs nothing)"))
    for l in registered_lines[:4]:
        print("  " + l[:200])
    summary["ok"] &= bool(nccl) and all(r.get("ok") for r in nccl) and bool(registered_lines)
    bad = _load_all(out, "nccl_bad.json")
    if bad:
        summary["bad"] = bad[0]
        print("bad input, a MemPool over cudaMalloc chunks (DEVICE): refused %s: %s" % (
            bad[0].get("refused"), bad[0].get("sentence", bad[0].get("error", ""))[:300]))
        summary["ok"] &= bool(bad[0].get("ok"))
    for alloc in ("native", "rap"):
        h = _load_all(out, "handoff_%s.json" % alloc)
        if h:
            summary["handoff_" + alloc] = h[0]
            print("record_stream hand-off (one process), %s: held %.0f MiB, median wall %.3f s, right %s" % (
                alloc, h[0]["max_reserved"] / 2**20, h[0]["median_wall_s"], h[0]["acc"] == h[0]["acc_expected"]))
    fr = _load_all(out, "fraction.json")
    if fr:
        f = fr[0]
        summary["fraction"] = {k: f.get(k) for k in ("ok", "limit", "above", "below_served",
                                                     "served_after_giving_back", "refusals",
                                                     "reserved_after_empty_cache",
                                                     "reserved_before_empty_cache")}
        print("memory fraction 0.1 and empty_cache (one GPU): %s; 12 %% refused with %s, 5 %% served %s, "
              "bad fractions refused with a sentence %s, empty_cache %.0f -> %.0f MiB" % (
                  "passed" if f.get("ok") else "FAILED", f.get("above"), f.get("below_served"),
                  f.get("all_refused_with_a_sentence"), f.get("reserved_before_empty_cache", 0) / 2**20,
                  f.get("reserved_after_empty_cache", 0) / 2**20))
        summary["ok"] &= bool(f.get("ok"))
    else:
        print("memory fraction test: no result (see distributed_log.txt)")
        summary["ok"] = False
    h = summary.get("handoff_rap")
    if h:
        summary["ok"] &= h["max_reserved"] <= 1 << 30 and h["acc"] == h["acc_expected"]
    with open(os.path.join(out, "distributed.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("all checks: %s (JSON: %s)" % ("passed" if summary["ok"] else "FAILED", os.path.join(out, "distributed.json")))
    return 0 if summary["ok"] else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=("train", "nccl", "bad", "report"))
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--allocator", default="native", choices=("native", "rap", "registered"))
    ap.add_argument("--registered", action="store_true",
                    help="with --allocator native: then DDP on registered rap memory in the same process")
    ap.add_argument("--variant", default="",
                    help="with --allocator rap: the name its results go under (rap:NAME); RAP_TORCH_SPEC is its spec")
    ap.add_argument("--ranks", type=int, default=0,
                    help="with report: how many ranks every launch had (default: what the runs say)")
    ap.add_argument("--trial", dest="run", type=int, default=0,
                    help="which run of the benchmark (not --run: torchrun would take it for its --run-path)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    return {"train": cmd_train, "nccl": cmd_nccl, "bad": cmd_bad, "report": cmd_report}[args.command](args) or 0


if __name__ == "__main__":
    sys.exit(main())
