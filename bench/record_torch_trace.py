"""record_torch_trace.py — a transformer training step's allocation sequence, recorded on a GPU
with PyTorch's own memory history and written as a rap event trace (docs/trace.md), so that
`rap-trace replay` and rap-bench can put it through any allocator.

    python3 bench/record_torch_trace.py OUT.jsonl.gz [--steps 3] [--batch 8] [--seq 1024]

GPT-2 small from transformers' config (random weights: nothing is downloaded), bf16 autocast,
AdamW, on PyTorch's native caching allocator. After one warm-up step, the history of --steps steps
is kept: every allocation (`alloc`) and every free as PyTorch's user asked it (`free_requested`,
which is when a rap pool would see the free), each with its stream. Streams become resource ids
1, 2, ... Also prints PyTorch's own peak allocated and reserved over the recorded steps, and
writes them into the trace's first line.
"""

import argparse
import gzip
import json
import sys

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    args = ap.parse_args()
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=args.seq)
    model = transformers.GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device="cuda")
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()

    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history("all", context=None, max_entries=2_000_000)
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(None)
    peak_alloc, peak_reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    # Blocks live before the recording started (parameters, optimizer state) come first, as
    # allocations at time 0, so that a replay holds what the recorded steps held.
    streams, lines = {}, []
    for seg in snap["segments"]:
        addr = seg["address"]   # a segment's blocks are listed in address order
        for blk in seg["blocks"]:
            if blk["state"] in ("active_allocated", "active_pending_free"):
                lines.append(("alloc", 0, seg["stream"], addr, blk.get("requested_size", blk["size"])))
            addr += blk["size"]
    for e in snap["device_traces"][0]:
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
    live0 = sum(x[4] for x in start)
    t0 = min((x[1] for x in rest), default=0)
    with gzip.open(args.out, "wt") as f:
        f.write(json.dumps({"t": 0, "ev": "trace", "version": "0.1.0", "clock": "monotonic ns",
                            "source": "PyTorch memory history, GPT-2 small, batch %d x %d, bf16, "
                                      "AdamW, %d steps" % (args.batch, args.seq, args.steps),
                            "torch": torch.__version__, "torch_peak_allocated": peak_alloc,
                            "torch_peak_reserved": peak_reserved}, separators=(",", ":")) + "\n")
        for ev, t, s, addr, n in start + rest:
            rid = streams.setdefault(s, len(streams) + 1)
            ns = max(0, (t - t0) * 1000) if t else 0
            f.write('{"t":%d,"th":1,"ev":"%s","a":"torch","d":0,"r":%d,"rk":"cuda","p":"0x%x","n":%d}\n'
                    % (ns, ev, rid, addr, n if ev == "alloc" else 0))
    print("wrote %s: %d events, %d streams, %d blocks live at the start (%.1f MiB); PyTorch peak "
          "allocated %.1f MiB, reserved %.1f MiB"
          % (args.out, len(start) + len(rest), len(streams), len(start), live0 / 2**20,
             peak_alloc / 2**20, peak_reserved / 2**20))
    return 0


if __name__ == "__main__":
    sys.exit(main())
