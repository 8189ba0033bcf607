"""record_torch_trace.py — a PyTorch workload's allocation sequence, recorded on a GPU with
PyTorch's own memory history and written as a rap event trace (docs/trace.md), so that
`rap-trace replay` and rap-bench can put it through any allocator.

    python3 bench/record_torch_trace.py OUT.jsonl.gz [--workload W] [--steps N] [--batch B] [--seq T]

Workloads (random weights everywhere: nothing is downloaded):
  gpt2      GPT-2 small from transformers' config, bf16 autocast, AdamW: one training step a step
            (the default; workload (f)).
  ckpt      GPT-2 medium with activation checkpointing on every block (transformers'
            gradient_checkpointing_enable, torch.utils.checkpoint underneath): the backward pass
            recomputes each block's activations.
  pipeline  two pipeline stages of a decoder, each on its own CUDA stream, micro-batches in a
            1F1B schedule; activations and their gradients cross streams with wait_stream and
            record_stream, as a pipeline-parallel runtime hands them between stages.
  moe       a small mixture-of-experts decoder in plain torch: top-2 routing, each expert's tokens
            gathered with index_select and added back with index_add_, so every expert's tensors
            change size every step.
  serve     inference serving: GPT-2 `generate` (greedy, KV cache growing a token at a time) for
            requests of varying batch size and prompt length; a step is a request.
  fsdp2     one rank of FSDP2 (fully_shard per block, bf16 parameters) on GPT-2 small under
            torchrun: rank 0 writes OUT, the other ranks only train.
  ddp       the same with DistributedDataParallel and bf16 autocast.

After one warm-up step, the history of --steps steps is kept: every allocation (`alloc`) and every
free as PyTorch's user asked it (`free_requested`, which is when a rap pool would see the free),
each with its stream. Streams become resource ids 1, 2, ... in the order they first appear. Also
prints PyTorch's own peak allocated and reserved over the recorded steps, and writes them into the
trace's first line.
"""

import argparse
import gzip
import json
import math
import os
import random
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- writing the trace -------------------------------------------------------------------------

def snapshot_lines(snap, dev):
    """The (event, time_us, stream, addr, bytes) lines of device dev's part of a memory snapshot:
    the blocks live before the recording started first (as allocations at time 0), then the
    recorded allocations and requested frees in order."""
    lines = []
    for seg in snap["segments"]:
        if seg.get("device", dev) != dev:
            continue
        addr = seg["address"]   # a segment's blocks are listed in address order
        for blk in seg["blocks"]:
            if blk["state"] in ("active_allocated", "active_pending_free"):
                lines.append(("alloc", 0, seg["stream"], addr, blk.get("requested_size", blk["size"])))
            addr += blk["size"]
    traces = snap["device_traces"]
    for e in (traces[dev] if dev < len(traces) else []):
        if e["action"] == "alloc":
            lines.append(("alloc", e["time_us"], e["stream"], e["addr"], e["size"]))
        elif e["action"] == "free_requested":
            lines.append(("dealloc", e["time_us"], e["stream"], e["addr"], e["size"]))
    # The segments' blocks are the state at the end: those allocated during the recording appear
    # twice (start and trace). Keep a start entry only for a block with no alloc in the trace.
    traced = {a for (ev, t, s, a, n) in lines if ev == "alloc" and t != 0}
    start = [x for x in lines if x[1] == 0 and x[0] == "alloc" and x[3] not in traced]
    rest = [x for x in lines if not (x[1] == 0 and x[0] == "alloc")]
    # A block made before the recording and freed during it is in neither list's allocations:
    # it was live at the start too.
    live = {x[3] for x in start}
    for ev, t, s, a, n in rest:
        if ev == "alloc":
            live.add(a)
        elif a in live:
            live.discard(a)
        else:
            start.append(("alloc", 0, s, a, n))
    return start, rest


def write_trace(out, snap, dev, source, peak_alloc, peak_reserved):
    start, rest = snapshot_lines(snap, dev)
    live0 = sum(x[4] for x in start)
    t0 = min((x[1] for x in rest), default=0)
    streams = {}
    tmp = out + ".part"
    with gzip.open(tmp, "wt") as f:
        f.write(json.dumps({"t": 0, "ev": "trace", "version": "0.1.0", "clock": "monotonic ns",
                            "source": "PyTorch memory history, " + source,
                            "torch": torch.__version__, "torch_peak_allocated": peak_alloc,
                            "torch_peak_reserved": peak_reserved}, separators=(",", ":")) + "\n")
        for ev, t, s, addr, n in start + rest:
            rid = streams.setdefault(s, len(streams) + 1)
            ns = max(0, (t - t0) * 1000) if t else 0
            f.write('{"t":%d,"th":1,"ev":"%s","a":"torch","d":0,"r":%d,"rk":"cuda","p":"0x%x","n":%d}\n'
                    % (ns, ev, rid, addr, n if ev == "alloc" else 0))
    os.replace(tmp, out)
    print("wrote %s: %d events, %d streams, %d blocks live at the start (%.1f MiB); PyTorch peak "
          "allocated %.1f MiB, reserved %.1f MiB"
          % (out, len(start) + len(rest), len(streams), len(start), live0 / 2**20,
             peak_alloc / 2**20, peak_reserved / 2**20), flush=True)


def record(out, step, steps, source, warmup=1, write=True):
    """Runs step() warmup times, then steps times under PyTorch's memory history, and writes the
    recorded steps to out (when write is false — a rank other than 0 — it only runs them)."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    if write:
        torch.cuda.memory._record_memory_history("all", context=None, max_entries=4_000_000)
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    if not write:
        return
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(None)
    write_trace(out, snap, torch.cuda.current_device(), source, torch.cuda.max_memory_allocated(),
                torch.cuda.max_memory_reserved())


# ---- a decoder in plain torch (pipeline, moe) --------------------------------------------------

class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.fc = nn.Linear(d, ff)
        self.out = nn.Linear(ff, d)

    def forward(self, x):
        return self.out(F.gelu(self.fc(x)))


class MoE(nn.Module):
    """Top-k routing over experts, dropless: each expert takes the tokens routed to it (gathered
    with index_select), and its outputs, weighted by the router, are added back with index_add_.
    The number of tokens each expert gets is read back to the host, as dropless MoE layers do, so
    its tensors are exactly as large as its share of this batch."""

    def __init__(self, d, ff, experts, k):
        super().__init__()
        self.k = k
        self.router = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(MLP(d, ff) for _ in range(experts))

    def forward(self, x):
        b, t, c = x.shape
        xs = x.reshape(b * t, c)
        probs = self.router(xs).float().softmax(dim=-1)
        w, idx = probs.topk(self.k, dim=-1)
        w = w / w.sum(dim=-1, keepdim=True)
        flat = idx.reshape(-1)
        order = flat.argsort()
        token = order // self.k
        weight = w.reshape(-1)[order]
        counts = torch.bincount(flat, minlength=len(self.experts)).tolist()
        out = None
        at = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            tok = token[at:at + n]
            y = self.experts[e](xs.index_select(0, tok))
            y = y * weight[at:at + n, None].to(y.dtype)
            if out is None:
                out = torch.zeros(b * t, c, device=x.device, dtype=y.dtype)
            out.index_add_(0, tok, y)
            at += n
        return out.view(b, t, c)


class Block(nn.Module):
    def __init__(self, d, heads, ff, experts=0, k=2):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MoE(d, ff, experts, k) if experts else MLP(d, ff)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Embed(nn.Module):
    def __init__(self, vocab, d, seq):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)

    def forward(self, ids):
        return self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))


class Head(nn.Module):
    """Final norm, vocabulary projection and next-token loss."""

    def __init__(self, vocab, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.out = nn.Linear(d, vocab, bias=False)

    def forward(self, x, ids):
        logits = self.out(self.ln(x))
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                               ids[:, 1:].reshape(-1))


# ---- the workloads: each returns (step, description) -------------------------------------------

def gpt2_model(layers, d, heads, seq):
    import transformers
    cfg = transformers.GPT2Config(n_layer=layers, n_embd=d, n_head=heads, n_positions=seq)
    return cfg, transformers.GPT2LMHeadModel(cfg)


def wl_gpt2(args, dev):
    cfg, model = gpt2_model(12, 768, 12, args.seq)
    model = model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()

    return step, "GPT-2 small, batch %d x %d, bf16, AdamW, %d steps" % (args.batch, args.seq, args.steps)


def wl_ckpt(args, dev):
    cfg, model = gpt2_model(24, 1024, 16, args.seq)   # GPT-2 medium
    model = model.to(dev)
    model.train()
    try:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    except TypeError:   # an older transformers
        model.gradient_checkpointing_enable()
    model.config.use_cache = False
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()

    return step, ("GPT-2 medium with activation checkpointing on every block, batch %d x %d, bf16, "
                  "AdamW, %d steps" % (args.batch, args.seq, args.steps))


def one_f_one_b(stage, stages, micro):
    """Stage's operations in a 1F1B schedule: ('F', i) and ('B', i)."""
    warm = min(stages - stage - 1, micro)
    ops = [("F", i) for i in range(warm)]
    for i in range(micro - warm):
        ops += [("F", warm + i), ("B", i)]
    ops += [("B", micro - warm + i) for i in range(warm)]
    return ops


def wl_pipeline(args, dev, vocab=32000, d=1024, heads=16, layers=12):
    torch.manual_seed(0)
    micro = args.micro
    half = layers // 2
    stage0 = nn.Sequential(Embed(vocab, d, args.seq), *[Block(d, heads, 4 * d) for _ in range(half)]).to(dev)
    blocks1 = nn.Sequential(*[Block(d, heads, 4 * d) for _ in range(layers - half)]).to(dev)
    head = Head(vocab, d).to(dev)
    params = list(stage0.parameters()) + list(blocks1.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    streams = [torch.cuda.Stream(dev), torch.cuda.Stream(dev)]
    mb = max(1, args.batch // micro)

    def step():
        main = torch.cuda.current_stream(dev)
        ids = [torch.randint(0, vocab, (mb, args.seq), device=dev) for _ in range(micro)]
        for s in streams:
            s.wait_stream(main)   # inputs made, parameters stepped and gradients zeroed
        acts, inputs, grads = {}, {}, {}
        ops = [one_f_one_b(0, 2, micro), one_f_one_b(1, 2, micro)]
        done = [set(), set()]
        pos = [0, 0]
        while pos[0] < len(ops[0]) or pos[1] < len(ops[1]):
            moved = False
            for st in (0, 1):
                if pos[st] == len(ops[st]):
                    continue
                kind, i = ops[st][pos[st]]
                # stage 1's forward needs stage 0's; stage 0's backward needs stage 1's.
                if st == 1 and kind == "F" and ("F", i) not in done[0]:
                    continue
                if st == 0 and kind == "B" and ("B", i) not in done[1]:
                    continue
                s = streams[st]
                with torch.cuda.stream(s):
                    if st == 0 and kind == "F":
                        ids[i].record_stream(s)
                        with torch.autocast("cuda", dtype=torch.bfloat16):
                            acts[i] = stage0(ids[i])
                    elif st == 1 and kind == "F":
                        s.wait_stream(streams[0])
                        h = acts[i]
                        h.record_stream(s)   # stage 0's activation, read on stage 1's stream
                        ids[i].record_stream(s)
                        x = h.detach().requires_grad_(True)
                        with torch.autocast("cuda", dtype=torch.bfloat16):
                            loss = head(blocks1(x), ids[i]) / micro
                        inputs[i] = (x, loss)
                    elif st == 1:
                        x, loss = inputs.pop(i)
                        loss.backward()
                        grads[i] = x.grad
                        del x, loss
                    else:
                        s.wait_stream(streams[1])
                        g = grads.pop(i)
                        g.record_stream(s)   # stage 1's gradient, read on stage 0's stream
                        h = acts.pop(i)
                        h.backward(g)
                        del g, h
                done[st].add((kind, i))
                pos[st] += 1
                moved = True
            if not moved:
                raise RuntimeError("1F1B schedule stalled")
        for s in streams:
            main.wait_stream(s)
        del ids
        opt.step()
        opt.zero_grad(set_to_none=False)   # gradients stay, made on the stages' streams

    return step, ("a %d-layer decoder (d %d) as two pipeline stages on two CUDA streams, 1F1B, "
                  "%d micro-batches of %d x %d, bf16, AdamW, %d steps"
                  % (layers, d, micro, mb, args.seq, args.steps))


def wl_moe(args, dev, vocab=32000, d=1024, heads=16, layers=8, experts=8, k=2):
    torch.manual_seed(0)
    model = nn.ModuleDict({"embed": Embed(vocab, d, args.seq),
                           "blocks": nn.Sequential(*[Block(d, heads, 4 * d, experts, k) for _ in range(layers)]),
                           "head": Head(vocab, d)}).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1)

    def step():
        # Tokens drawn from a skewed distribution that moves every step, so the router's load
        # moves too.
        hot = torch.randint(0, vocab, (64,), device=dev, generator=gen)
        pick = torch.randint(0, 64, (args.batch, args.seq), device=dev, generator=gen)
        uniform = torch.randint(0, vocab, (args.batch, args.seq), device=dev, generator=gen)
        ids = torch.where(torch.rand(args.batch, args.seq, device=dev, generator=gen) < 0.5, hot[pick], uniform)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model["head"](model["blocks"](model["embed"](ids)), ids)
        loss.backward()
        opt.step()

    return step, ("a mixture-of-experts decoder, %d layers, %d experts top-%d (index_select / index_add "
                  "per expert), d %d, batch %d x %d, bf16, AdamW, %d steps"
                  % (layers, experts, k, d, args.batch, args.seq, args.steps))


def wl_serve(args, dev):
    cfg, model = gpt2_model(12, 768, 12, 1024)
    model = model.to(dev, dtype=torch.bfloat16).eval()
    rng = random.Random(args.seed)

    def step():
        b = rng.choice([1, 2, 4, 8, 16, 32])
        prompt = rng.randint(16, 512)
        new = rng.randint(16, args.max_new)
        ids = torch.randint(0, cfg.vocab_size, (b, prompt), device=dev)
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                           min_new_tokens=new, do_sample=False, pad_token_id=cfg.eos_token_id)

    return step, ("GPT-2 small serving: generate (greedy, growing KV cache), %d requests of batch "
                  "1..32, prompts 16..512 tokens, 16..%d new tokens, bf16" % (args.steps, args.max_new))


def wl_distributed(args, dev, kind):
    import torch.distributed as dist
    cfg, model = gpt2_model(12, 768, 12, args.seq)
    model = model.to(dev)
    if kind == "fsdp2":
        try:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        except ImportError:
            from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in model.transformer.h:
            fully_shard(block, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        wrapped = model
        autocast = False
    else:
        wrapped = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
        autocast = True
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = wrapped(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()

    world = dist.get_world_size()
    what = "FSDP2 (fully_shard per block, bf16 parameters, fp32 reduce)" if kind == "fsdp2" else \
        "DDP with bf16 autocast"
    return step, ("GPT-2 small, rank %d of %d, %s, batch %d x %d per rank, AdamW, %d steps"
                  % (dist.get_rank(), world, what, args.batch, args.seq, args.steps))


WORKLOADS = {"gpt2": wl_gpt2, "ckpt": wl_ckpt, "pipeline": wl_pipeline, "moe": wl_moe,
             "serve": wl_serve, "fsdp2": lambda a, d: wl_distributed(a, d, "fsdp2"),
             "ddp": lambda a, d: wl_distributed(a, d, "ddp")}
DEFAULT_BATCH = {"gpt2": 8, "ckpt": 8, "pipeline": 32, "moe": 8, "serve": 0, "fsdp2": 8, "ddp": 8}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--workload", default="gpt2", choices=sorted(WORKLOADS))
    ap.add_argument("--steps", type=int, default=None, help="recorded steps (serve: requests); 3, serve 8")
    ap.add_argument("--batch", type=int, default=None, help="batch (pipeline: the whole batch of the micro-batches)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--micro", type=int, default=8, help="pipeline: micro-batches a step")
    ap.add_argument("--max-new", type=int, default=96, help="serve: most new tokens a request")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.steps is None:
        args.steps = 8 if args.workload == "serve" else 3
    if args.batch is None:
        args.batch = DEFAULT_BATCH[args.workload]
    torch.manual_seed(args.seed)
    write = True
    if args.workload in ("fsdp2", "ddp"):
        import torch.distributed as dist
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        try:
            dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        except TypeError:   # an older torch
            dist.init_process_group("nccl")
        write = dist.get_rank() == 0
    dev = torch.device("cuda", torch.cuda.current_device())
    step, source = WORKLOADS[args.workload](args, dev)
    try:
        record(args.out, step, args.steps, source, write=write)
    finally:
        if args.workload in ("fsdp2", "ddp"):
            import torch.distributed as dist
            dist.barrier()
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
