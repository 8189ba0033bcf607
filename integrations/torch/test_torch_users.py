"""rap_torch as PyTorch users run it; commands of test_torch.py (run_tests.sh runs each in its own
process, one allocator per process):

  stats   --allocator native|rap   torch.cuda's statistics calls through a fixed sequence of tensors
  compile --allocator native|rap   torch.compile(mode="reduce-overhead"): training and inference
  handoff --allocator native|rap   allocate on one stream, use on another, record_stream, free,
                                    with the CPU running ahead (FSDP/NCCL-like): memory held, time
  mempool                           torch.cuda.MemPool scopes: rap's pool under PyTorch's allocator,
                                    and a MemPool of rap's own once enabled
  model   --model resnet|gpt2 --allocator native|rap   a torchvision / transformers model (random
                                    weights): training steps and (gpt2) greedy generation

summarize(out) returns (ok, lines) for test_torch.py's summary.
"""

import json
import os
import statistics
import time
import traceback


def _use(allocator):
    if allocator == "rap":
        import rap_torch
        rap_torch.enable()
    import torch
    return torch


def _dump(out, name, result):
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1)[:4000])


def _load(out, name):
    try:
        with open(os.path.join(out, name + ".json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _mib(b):
    return "%.1f MiB" % (b / 2**20)


def _error(r, e):
    r["error"] = "%s: %s" % (type(e).__name__, str(e)[:600])
    r["traceback"] = traceback.format_exc()[-2500:]


def cmd_stats(args):
    """The same tensors natively and on rap: torch.cuda's own calls must give the same answers."""
    torch = _use(args.allocator)
    torch.zeros(1, device="cuda")
    r = {"allocator": args.allocator, "seen": []}
    cuda = torch.cuda

    base = cuda.memory_allocated()   # one small tensor: 512 bytes natively (rounded), 4 on rap

    def see(what):
        r["seen"].append([what, cuda.memory_allocated() - base, cuda.max_memory_allocated() - base])

    try:
        see("start")
        keep = [torch.empty(1 << 20, dtype=torch.uint8, device="cuda") for _ in range(4)]   # 4 MiB
        see("four 1 MiB")
        big = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        see("64 MiB more")
        del big
        see("64 MiB freed")
        cuda.reset_peak_memory_stats()
        see("peak reset")
        keep.append(torch.empty(3 << 20, dtype=torch.uint8, device="cuda"))
        see("3 MiB more")
        stats = cuda.memory_stats()
        r["allocated_minus_base"] = cuda.memory_allocated() - base
        r["reserved_at_least_allocated"] = cuda.memory_reserved() >= cuda.memory_allocated()
        r["max_reserved_at_least_reserved"] = cuda.max_memory_reserved() >= cuda.memory_reserved()
        r["keys_missing"] = [k for k in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
                                         "reserved_bytes.all.current", "reserved_bytes.all.peak",
                                         "active_bytes.all.current", "allocation.all.allocated",
                                         "allocation.all.freed", "num_ooms", "segment.all.current")
                             if k not in stats]
        r["allocations_counted"] = stats.get("allocation.all.allocated", 0) - stats.get("allocation.all.freed", 0) \
            == stats.get("allocation.all.current", -1)
        cuda.reset_accumulated_memory_stats()
        after = cuda.memory_stats()
        r["accumulated_reset"] = after.get("allocation.all.allocated") == 0 and after.get("num_ooms") == 0
        ooms = 0
        try:
            torch.empty(1 << 46, dtype=torch.uint8, device="cuda")
        except (RuntimeError, MemoryError):   # torch.OutOfMemoryError is a RuntimeError
            ooms = 1
        r["num_ooms_after_one"] = cuda.memory_stats().get("num_ooms")
        r["oom_raised"] = ooms
        summary = cuda.memory_summary()
        r["summary_head"] = summary.splitlines()[:8]
        r["summary_ok"] = "memory summary" in summary and "Allocated memory" in summary
        if args.allocator == "rap":
            import rap_torch
            r["rap_pending_key"] = "rap.pending_bytes" in stats
            r["rap_summary_tail"] = rap_torch.memory_summary().splitlines()[-1]
        del keep
    except Exception as e:  # noqa: BLE001
        _error(r, e)
    _dump(args.out, "stats_" + args.allocator, r)


def cmd_compile(args):
    """torch.compile(mode="reduce-overhead") over an MLP: training steps, then inference; with rap
    nothing is set by hand (enable() alone)."""
    torch = _use(args.allocator)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    r = {"allocator": args.allocator}
    nn = torch.nn
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(),
                          nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(512, 1024, device="cuda", generator=gen)
    try:
        compiled = torch.compile(model, mode="reduce-overhead")

        def step():
            opt.zero_grad(set_to_none=True)
            loss = compiled(x).square().mean()
            loss.backward()
            opt.step()
            return loss

        r["losses"] = [float.hex(step().item()) for _ in range(12)]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(100):
            step()
        torch.cuda.synchronize()
        r["train_step_ms"] = (time.perf_counter() - t0) * 10
        compiled.eval()
        with torch.no_grad():
            r["infer"] = [float.hex(compiled(x).sum().item()) for _ in range(4)]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(100):
                compiled(x)
            torch.cuda.synchronize()
            r["infer_ms"] = (time.perf_counter() - t0) * 10
        r["ok"] = True
    except Exception as e:  # noqa: BLE001
        r["ok"] = False
        _error(r, e)
    r["max_reserved"] = torch.cuda.max_memory_reserved()
    r["max_allocated"] = torch.cuda.max_memory_allocated()
    if args.allocator == "rap":
        import rap_torch
        r["hooks"] = rap_torch.hooks()
        r["graph_reserved"] = rap_torch.graph_memory_reserved()
    _dump(args.out, "compile_" + args.allocator, r)


def cmd_handoff(args):
    """Each step allocates 64 MiB on the main stream, hands it to a slower side stream
    (record_stream) and frees it; the CPU never waits. Native PyTorch and a pool that grows keep
    every step's block; rap's default waits on the GPU past 512 MiB."""
    torch = _use(args.allocator)
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()
    n = 16 << 20   # floats: 64 MiB
    acc = torch.zeros(1, device="cuda")
    r = {"allocator": args.allocator, "steps": args.iters, "block_MiB": 64}
    walls = []
    for rep in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(args.iters):
            x = torch.empty(n, device="cuda")
            x.fill_(i)
            side.wait_stream(main)
            with torch.cuda.stream(side):
                torch.cuda._sleep(1000000)   # about 0.6 ms: the side stream falls behind
                acc += x[-1:]
            x.record_stream(side)
            del x
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t0)
    r["wall_s"] = walls
    r["median_wall_s"] = statistics.median(walls)
    r["acc"] = acc.item()
    r["acc_expected"] = 3 * sum(range(args.iters))
    r["max_reserved"] = torch.cuda.max_memory_reserved()
    if args.allocator == "rap":
        import rap_torch
        r["spec"] = rap_torch.spec()
    _dump(args.out, "handoff_" + args.allocator, r)


def cmd_mempool(args):
    """Two scopes. First PyTorch's own allocator with a MemPool over rap: tensors made in the scope
    come from rap, the rest does not. Then (the same process, rap enabled afterwards is not
    possible) a second process runs the other half: see --tag."""
    import torch
    import rap_torch
    r = {"tag": args.tag}
    try:
        if args.tag == "native":
            pool = torch.cuda.MemPool(rap_torch.allocator())
            outside = torch.ones(1 << 20, device="cuda")
            before = rap_torch.rap_stats()["current"]
            with torch.cuda.use_mem_pool(pool):
                inside = torch.full((1 << 22,), 3.0, device="cuda")   # 16 MiB
            r["rap_current_grew_by"] = rap_torch.rap_stats()["current"] - before
            r["inside_sum_ok"] = inside.sum().item() == 3.0 * (1 << 22)
            r["outside_sum_ok"] = outside.sum().item() == float(1 << 20)
            r["inside_is_rap"] = r["rap_current_grew_by"] >= inside.nbytes
            del inside
            del pool
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            r["rap_current_after_pool_gone"] = rap_torch.rap_stats()["current"]
            r["ok"] = (r["inside_sum_ok"] and r["outside_sum_ok"] and r["inside_is_rap"] and
                       r["rap_current_after_pool_gone"] == before)
        else:
            # PyTorch 2.11 makes a MemPool through the current allocator's createOrIncrefPool,
            # which its pluggable allocator refuses: with rap enabled, MemPool is PyTorch's to
            # refuse, and rap must stay usable after the refusal.
            rap_torch.enable()
            try:
                torch.cuda.MemPool()
                r["refused"] = None
            except RuntimeError as e:
                r["refused"] = str(e)[:300]
            x = torch.full((1 << 20,), 2.0, device="cuda")
            r["rap_works_after"] = x.sum().item() == 2.0 * (1 << 20)
            r["ok"] = r["rap_works_after"] and (r["refused"] is None or "createOrIncrefPool" in r["refused"])
            if r["refused"] is None:
                r.update(_mempool_scope(torch, rap_torch))
                r["ok"] = r["ok"] and r["scope_ok"]
    except Exception as e:  # noqa: BLE001
        r["ok"] = False
        _error(r, e)
    _dump(args.out, "mempool_" + args.tag, r)


def _mempool_scope(torch, rap_torch):
    """A MemPool scope with rap enabled (for a PyTorch whose pluggable allocator makes pools)."""
    r = {}
    pool = torch.cuda.MemPool()
    outside = torch.ones(1 << 20, device="cuda")
    main_before = rap_torch.rap_stats()["current"]
    with torch.cuda.use_mem_pool(pool):
        inside = torch.full((1 << 22,), 5.0, device="cuda")
    r["graph_pools_in_scope"] = rap_torch.rap_stats(graph=True)["current"]
    r["main_grew_by"] = rap_torch.rap_stats()["current"] - main_before
    r["inside_sum_ok"] = inside.sum().item() == 5.0 * (1 << 22)
    after_scope = torch.empty(1 << 20, device="cuda")
    r["after_scope_in_main"] = rap_torch.rap_stats()["current"] - main_before >= after_scope.nbytes
    del inside, after_scope
    del pool
    torch.cuda.synchronize()
    r["pool_blocks_after"] = rap_torch.rap_stats(graph=True)["current"]
    r["scope_ok"] = (r["graph_pools_in_scope"] >= (1 << 24) and r["main_grew_by"] == 0 and
                     r["inside_sum_ok"] and r["after_scope_in_main"] and
                     r["pool_blocks_after"] == 0 and outside.sum().item() == float(1 << 20))
    return r


def _deterministic(torch):
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def cmd_model(args):
    torch = _use(args.allocator)
    _deterministic(torch)
    r = {"model": args.model, "allocator": args.allocator}
    gen = torch.Generator(device="cuda").manual_seed(1)
    try:
        if args.model == "resnet":
            import torchvision
            model = torchvision.models.resnet50(weights=None).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            B = 64

            def batch():
                return (torch.randn(B, 3, 224, 224, device="cuda", generator=gen),
                        torch.randint(0, 1000, (B,), device="cuda", generator=gen))

            def loss_of(x, y):
                return torch.nn.functional.cross_entropy(model(x), y)
        else:
            import transformers
            cfg = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024)
            model = transformers.GPT2LMHeadModel(cfg).cuda()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            B, T = 8, 512

            def batch():
                ids = torch.randint(0, cfg.vocab_size, (B, T), device="cuda", generator=gen)
                return ids, ids

            def loss_of(x, y):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    return model(input_ids=x, labels=y).loss
        r["version"] = torch.__version__
        model.train()
        losses, times = [], []
        for i in range(args.steps):
            x, y = batch()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_of(x, y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            times.append((time.perf_counter() - t0) * 1e3)
        r["losses"] = [float.hex(v) for v in losses]
        r["loss_first_last"] = [losses[0], losses[-1]]
        r["median_step_ms"] = statistics.median(times[2:])
        steady = []
        for _ in range(3):   # three rounds of unsynced steps: the median round is reported
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for i in range(args.steps):
                x, y = batch()
                opt.zero_grad(set_to_none=True)
                loss_of(x, y).backward()
                opt.step()
            torch.cuda.synchronize()
            steady.append((time.perf_counter() - t0) * 1e3 / args.steps)
        r["steady_step_ms"] = statistics.median(steady)
        r["steady_rounds_ms"] = steady
        if args.model == "gpt2":
            model.eval()
            prompt = torch.randint(0, 50257, (2, 16), device="cuda", generator=gen)
            gen_s = []
            with torch.no_grad():
                for _ in range(3):   # the first warms up: the median of the three is reported
                    t0 = time.perf_counter()
                    out = model.generate(prompt, max_new_tokens=64, do_sample=False,
                                         pad_token_id=0, attention_mask=torch.ones_like(prompt))
                    torch.cuda.synchronize()
                    gen_s.append(time.perf_counter() - t0)
            r["generate_s"] = statistics.median(gen_s)
            r["generate_runs_s"] = gen_s
            r["tokens"] = out[:, 16:].tolist()
        r["max_reserved"] = torch.cuda.max_memory_reserved()
        r["max_allocated"] = torch.cuda.max_memory_allocated()
        r["ok"] = True
    except Exception as e:  # noqa: BLE001
        r["ok"] = False
        _error(r, e)
    _dump(args.out, "model_%s_%s" % (args.model, args.allocator), r)


def summarize(out):
    ok, lines = True, []
    n, a = _load(out, "stats_native"), _load(out, "stats_rap")
    if n and a and "error" not in a:
        same = n["seen"][1:] == a["seen"][1:]   # the first: PyTorch rounds the 4-byte base to 512
        good = (same and not a["keys_missing"] and a["allocations_counted"] and
                a["accumulated_reset"] and a["num_ooms_after_one"] == 1 and a["summary_ok"] and
                a.get("rap_pending_key"))
        ok &= bool(good)
        lines.append("torch.cuda statistics on rap: memory_allocated/max_memory_allocated through %d "
                     "steps equal to native: %s; keys missing: %s; totals consistent: %s; reset of "
                     "totals: %s; num_ooms after one: %s; memory_summary: %s"
                     % (len(a["seen"]) - 1, same, a["keys_missing"] or "none",
                        a["allocations_counted"], a["accumulated_reset"], a["num_ooms_after_one"],
                        a["summary_ok"]))
        if not same:
            lines.append("  native %s\n  rap    %s" % (n["seen"], a["seen"]))
    else:
        ok = False
        lines.append("torch.cuda statistics: %s" % ((a or {}).get("error") or "results missing"))
    n, a = _load(out, "compile_native"), _load(out, "compile_rap")
    if n and a and a.get("ok") and n.get("ok"):
        same = n["losses"] == a["losses"] and n["infer"] == a["infer"]
        ok &= same
        lines.append("torch.compile(mode='reduce-overhead'), enable() only (CUDA graph trees: %s): "
                     "losses and outputs bit-equal to native: %s; train step %.3f ms (native %.3f), "
                     "inference %.3f ms (native %.3f); max reserved %s (native, with trees, %s)"
                     % (a["hooks"].get("cudagraph_trees"), same, a["train_step_ms"],
                        n["train_step_ms"], a["infer_ms"], n["infer_ms"], _mib(a["max_reserved"]),
                        _mib(n["max_reserved"])))
    else:
        ok = False
        lines.append("torch.compile: %s" % ((a or {}).get("error") or (n or {}).get("error") or "results missing"))
    n, a = _load(out, "handoff_native"), _load(out, "handoff_rap")
    if n and a:
        good = a["acc"] == a["acc_expected"] and a["max_reserved"] <= 1 << 30
        ok &= good
        lines.append("record_stream hand-off, %d steps x 64 MiB, CPU ahead: rap's default held %s "
                     "(native %s), median wall %.3f s (native %.3f), results right: %s"
                     % (a["steps"], _mib(a["max_reserved"]), _mib(n["max_reserved"]),
                        a["median_wall_s"], n["median_wall_s"], a["acc"] == a["acc_expected"]))
    else:
        ok = False
        lines.append("record_stream hand-off: results missing")
    m = _load(out, "mempool_native")
    ok &= bool(m and m.get("ok"))
    lines.append("MemPool(rap_torch.allocator()) under PyTorch's allocator, a use_mem_pool scope: %s"
                 % ("ok" if m and m.get("ok") else (m or {}).get("error") or m))
    m = _load(out, "mempool_rap")
    ok &= bool(m and m.get("ok"))
    if m and m.get("refused"):
        lines.append("torch.cuda.MemPool() with rap enabled: refused by PyTorch (%s); rap works after: %s"
                     % (m["refused"][:90], m.get("rap_works_after")))
    else:
        lines.append("torch.cuda.MemPool() with rap enabled: %s"
                     % ("ok" if m and m.get("ok") else (m or {}).get("error") or m))
    for model in ("resnet", "gpt2"):
        n, a = _load(out, "model_%s_native" % model), _load(out, "model_%s_rap" % model)
        if not (n and a and n.get("ok") and a.get("ok")):
            ok = False
            lines.append("%s: %s" % (model, (a or {}).get("error") or (n or {}).get("error") or "results missing"))
            continue
        same = n["losses"] == a["losses"]
        diff = max(abs(float.fromhex(x) - float.fromhex(y)) / max(abs(float.fromhex(y)), 1e-12)
                   for x, y in zip(a["losses"], n["losses"]))
        tokens = n.get("tokens") == a.get("tokens")
        ok &= diff <= 1e-3 and tokens   # GPT-2's kernels are not all deterministic (native vs native differ)
        lines.append("%s (random weights), %d steps: losses bit-equal: %s%s; step %.1f ms (native %.1f), "
                     "steady %.1f ms (native %.1f); max reserved %s (native %s), max allocated %s "
                     "(native %s)%s"
                     % (model, len(a["losses"]), same,
                        "" if same else " (largest relative difference %.2g)" % diff,
                        a["median_step_ms"], n["median_step_ms"], a["steady_step_ms"], n["steady_step_ms"],
                        _mib(a["max_reserved"]), _mib(n["max_reserved"]), _mib(a["max_allocated"]),
                        _mib(n["max_allocated"]),
                        "; greedy generation, 64 tokens: equal %s, %.2f s (native %.2f)"
                        % (tokens, a["generate_s"], n["generate_s"]) if "tokens" in a else ""))
    return ok, lines
