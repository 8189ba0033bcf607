"""replay_torch_peer.py — a rap event trace (docs/trace.md) replayed through PyTorch's own CUDA
allocator, as rap-trace replays it through rap's: the peers' row of workload (f).

    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 bench/replay_torch_peer.py TRACE[.gz]

Each `alloc` becomes torch.cuda.caching_allocator_alloc(n) on its resource's stream — resource 1 the
current stream, each other one a stream of its own, as rap-bench and rap-trace give each resource its
own — and each `dealloc` caching_allocator_delete of the block it made (blocks made before the trace
began are skipped when freed, as rap-trace does). No work runs on the streams. Prints one JSON
object: the allocator configuration, peak live (bytes as requested), torch.cuda.max_memory_reserved
and their ratio, and ns per call.
"""

import gzip
import json
import os
import sys
import time

import torch


def events(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        for line in f:
            e = json.loads(line)
            if e.get("ev") in ("alloc", "dealloc") and e.get("d", 0) == 0:
                yield e["ev"], int(e["p"], 16), e.get("n", 0), e.get("r") or 1


def main():
    path = sys.argv[1]
    evs = list(events(path))
    torch.cuda.init()
    torch.cuda.reset_peak_memory_stats()
    blocks, sizes = {}, {}
    streams = {1: torch.cuda.current_stream()}
    for r in {r for _, _, _, r in evs} - {1}:
        streams[r] = torch.cuda.Stream()
    live = peak = calls = skipped = 0
    t0 = time.perf_counter()
    for ev, p, n, r in evs:
        if ev == "alloc":
            blocks[p] = torch.cuda.caching_allocator_alloc(n, stream=streams[r])
            sizes[p] = n
            live += n
            peak = max(peak, live)
        elif p in blocks:
            torch.cuda.caching_allocator_delete(blocks.pop(p))
            live -= sizes.pop(p)
        else:
            skipped += 1
            continue
        calls += 1
    seconds = time.perf_counter() - t0
    torch.cuda.synchronize()
    reserved = torch.cuda.max_memory_reserved()
    for b in blocks.values():
        torch.cuda.caching_allocator_delete(b)
    print(json.dumps({"allocator": "PyTorch " + torch.cuda.get_allocator_backend(),
                      "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                      "peak_live": peak, "peak_held": reserved,
                      "held_per_live": reserved / peak if peak else 0,
                      "ns_per_call": seconds * 1e9 / max(calls, 1), "skipped_frees": skipped,
                      "streams": len(streams), "trace": os.path.basename(path)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
