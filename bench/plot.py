#!/usr/bin/env python3
"""plot.py — draws rap-bench's JSON (rap-bench --out FILE.json) as one SVG, with the standard
library only (no matplotlib): one panel per workload and metric, one row of bars per case, one bar
per allocator, on a logarithmic axis; the median is written at the end of each bar.

    python3 bench/plot.py bench.json docs/benchmarks.svg
"""
import json
import math
import sys
from xml.sax.saxutils import escape

# (workload, metric, panel title); panels whose rows are absent are left out.
PANELS = [
    ("a", "ns/pair", "(a) allocate+free pair, same stream, device: ns per pair"),
    ("b", "ns/pair", "(b) random 4-stream trace, device: ns per pair"),
    ("b", "held/live", "(b) random 4-stream trace, device: peak held / peak live"),
    ("c", "ns/pair", "(c) pair cost with N live blocks, device: ns per pair"),
    ("d", "peak held MiB", "(d) CPU running ahead of 4 busy streams: peak held, MiB"),
    ("d", "wall ms", "(d) CPU running ahead of 4 busy streams: wall time, ms"),
    ("e", "Mops/s", "(e) threads, device: million operations per second (higher is better)"),
    ("h", "ns/pair", "(h) host memory pairs: ns per pair"),
    ("b-host", "ns/pair", "(b-host) random trace over host memory: ns per pair"),
    ("b-host", "held/live", "(b-host) random trace over host memory: peak held / peak live"),
    ("c-host", "ns/pair", "(c-host) pair cost with N live blocks, host memory: ns per pair"),
    ("e-host", "Mops/s", "(e-host) threads, host memory: million operations per second"),
    ("e-x", "Mops/s", "(e-x) threads freeing each other's blocks, device: million operations per second"),
    ("e-x-host", "Mops/s", "(e-x-host) threads freeing each other's blocks, host memory: million operations per second"),
]

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
           "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5", "#393b79",
           "#637939", "#8c6d31", "#843c39"]

W = 1000           # image width
LABEL_W = 150      # case labels
BAR_X0 = LABEL_W + 10
BAR_W = W - BAR_X0 - 90
BAR_H = 11
GAP = 6


def fmt(v):
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1]) as f:
        data = json.load(f)
    rows = data["rows"]
    allocators = []
    for r in rows:
        if r["allocator"] not in allocators and r["median"] is not None:
            allocators.append(r["allocator"])
    color = {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(allocators)}

    parts = []
    y = 20
    gpu = data.get("gpu") or {}
    title = "rap-bench " + data.get("date", "")
    if gpu:
        title += " — " + gpu.get("name", "")
    title += " — host: " + data.get("host", {}).get("cpu", "")
    parts.append(f'<text x="10" y="{y}" class="t">{escape(title)}</text>')
    y += 14
    parts.append(f'<text x="10" y="{y}" class="s">medians; logarithmic axes; '
                 f'see docs/benchmarks.md for the tables</text>')
    y += 18
    # legend
    x = 10
    for a in allocators:
        wdt = 24 + 6.2 * len(a)
        if x + wdt > W - 10:
            x = 10
            y += 16
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{color[a]}"/>')
        parts.append(f'<text x="{x + 14}" y="{y}" class="l">{escape(a)}</text>')
        x += wdt
    y += 22

    for wl, metric, ptitle in PANELS:
        sel = [r for r in rows if r["workload"] == wl and r["metric"] == metric and r["median"]]
        if not sel:
            continue
        cases = []
        for r in sel:
            if r["case"] not in cases:
                cases.append(r["case"])
        if all(c.endswith((" live", " thread", " threads")) for c in cases):
            cases.sort(key=lambda c: int(c.split()[0]))
        vals = [r["median"] for r in sel if r["median"] > 0]
        lo = math.floor(math.log10(min(vals)))
        hi = math.ceil(math.log10(max(vals)))
        if hi <= lo:
            hi = lo + 1

        def xpos(v):
            return BAR_X0 + BAR_W * (math.log10(max(v, 10 ** lo)) - lo) / (hi - lo)

        parts.append(f'<text x="10" y="{y}" class="p">{escape(ptitle)}</text>')
        y += 8
        top = y
        for c in cases:
            crow = [r for r in sel if r["case"] == c]
            h = len(crow) * (BAR_H + 1)
            parts.append(f'<text x="{LABEL_W}" y="{y + h / 2 + 4:.1f}" class="c" '
                         f'text-anchor="end">{escape(c)}</text>')
            for r in crow:
                x1 = xpos(r["median"])
                parts.append(f'<rect x="{BAR_X0}" y="{y}" width="{max(x1 - BAR_X0, 1):.1f}" '
                             f'height="{BAR_H}" fill="{color[r["allocator"]]}">'
                             f'<title>{escape(r["allocator"])}: {fmt(r["median"])} {escape(metric)}'
                             f'</title></rect>')
                parts.append(f'<text x="{x1 + 3:.1f}" y="{y + BAR_H - 2}" class="v">'
                             f'{fmt(r["median"])}</text>')
                y += BAR_H + 1
            y += GAP
        # axis: one tick per decade
        for d in range(lo, hi + 1):
            xt = BAR_X0 + BAR_W * (d - lo) / (hi - lo)
            parts.append(f'<line x1="{xt:.1f}" y1="{top - 2}" x2="{xt:.1f}" y2="{y}" class="g"/>')
            label = f"{10 ** d:g}" if -3 <= d <= 6 else f"1e{d}"
            parts.append(f'<text x="{xt:.1f}" y="{y + 11}" class="a" text-anchor="middle">{label}</text>')
        y += 30

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{y}" '
           f'viewBox="0 0 {W} {y}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">',
           '<style>.t{font-size:14px;font-weight:bold}.s{font-size:11px;fill:#555}'
           '.l{font-size:11px}.p{font-size:12px;font-weight:bold}.c{font-size:11px}'
           '.v{font-size:9px;fill:#333}.a{font-size:9px;fill:#555}.g{stroke:#ddd;stroke-width:1}'
           '</style>',
           f'<rect width="{W}" height="{y}" fill="white"/>'] + parts + ["</svg>"]
    with open(argv[2], "w") as f:
        f.write("\n".join(svg) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
