#!/usr/bin/env python3
"""report.py — rap-bench's JSON as Markdown tables (standard library only), for docs/benchmarks.md:
per workload and metric one table (rows: allocators; columns: cases; cells: the median and its
ratio to the workload's reference allocator), then what was skipped and the targets.

    python3 bench/report.py bench.json > tables.md
"""
import json
import sys

TITLES = {
    "a": "(a) allocate+free pair, same size, same stream, device memory",
    "b": "(b) random trace on 4 streams, log-uniform 256 B..4 MiB, <= 1000 live, 200 000 operations",
    "c": "(c) pair cost with N live blocks (256 B..4 KiB), device memory",
    "d": "(d) CPU running ahead of 4 busy streams: 400 temporaries of 64 MiB, 1 ms kernels",
    "e": "(e) threads on thread-safe allocators, device memory, 256 B..64 KiB",
    "h": "(h) host memory: pairs of one size",
    "b-host": "(b-host) the trace of (b) over host memory (4 host_async queues)",
    "c-host": "(c-host) pair cost with N live blocks, host memory",
    "e-host": "(e-host) threads on thread-safe allocators, host memory, 64 B..64 KiB",
    "e-x": "(e-x) threads in a ring, each freeing the blocks of the one before it (on the stream they "
           "were allocated on), device memory, 256 B..64 KiB",
    "e-x-host": "(e-x-host) threads in a ring, each freeing the blocks of the one before it, host memory, "
                "64 B..64 KiB",
}


def num(v):
    if v is None:
        return "-"
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}" if v < 1 else f"{v:.2f}"


def unique(items):
    out = []
    for i in items:
        if i not in out:
            out.append(i)
    return out


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1]) as f:
        data = json.load(f)
    rows = data["rows"]
    out = []
    seen = unique(r["workload"] for r in rows)
    for wl in seen:
        sel = [r for r in rows if r["workload"] == wl]
        ref = next((r["allocator"] for r in sel if r["ref"]), "-")
        out.append(f"#### {TITLES.get(wl, wl)}\n")
        out.append(f"Each cell: median (ratio to *{ref}* in the same column).\n")
        metrics = unique(r["metric"] for r in sel)
        for m in metrics:
            ms = [r for r in sel if r["metric"] == m]
            cases = unique(r["case"] for r in ms)
            if all(c.endswith((" live", " thread", " threads")) for c in cases):
                cases.sort(key=lambda c: int(c.split()[0]))
            allocs = unique(r["allocator"] for r in ms)
            out.append(f"| {m} | " + " | ".join(cases) + " |")
            out.append("|---|" + "---:|" * len(cases))
            for a in allocs:
                cells = []
                for c in cases:
                    x = next((r for r in ms if r["case"] == c and r["allocator"] == a), None)
                    if x is None:
                        cells.append("")
                    elif x["ratio"] is None:
                        cells.append(num(x["median"]))
                    else:
                        cells.append(f"{num(x['median'])} ({x['ratio']:.2f})")
                out.append(f"| {a} | " + " | ".join(cells) + " |")
            out.append("")
    if data.get("skipped"):
        out.append("#### Skipped\n")
        for s in data["skipped"]:
            out.append(f"- {s['what']}: {s['why']}")
        out.append("")
    if data.get("targets"):
        out.append("#### Targets\n")
        out.append("| target | measured | met |")
        out.append("|---|---|---|")
        for t in data["targets"]:
            met = {True: "yes", False: "**no**", None: "not measured"}[t["met"]]
            out.append(f"| {t['target']} | {t['measured']} | {met} |")
        out.append("")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
