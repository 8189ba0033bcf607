#!/usr/bin/env python3
"""plot_threads.py — one of rap-bench's thread workloads (e, e-host, e-x, e-x-host) as an SVG line
chart, with the standard library only (no matplotlib): million operations per second (y, log
scale unless --linear) against the number of threads (x, log scale), one line per allocator, the
median of the repetitions with a bar from their minimum to their maximum. rap's rows are solid,
the other allocators dashed; the legend gives each line's figure at the most threads.

    build/bench/rap-bench --only e-host,e-x-host --threads 1,2,4,8,16 --out results
    python3 bench/plot_threads.py results.json e-x-host e-x-host.svg

The input is rap-bench's FILE.json or FILE.csv (the JSON also gives the machine, in the subtitle).
"""
import argparse
import csv
import json
import math
import sys
from xml.sax.saxutils import escape

TITLES = {
    "e": "(e) threads, each freeing its own blocks, device memory, 256 B..64 KiB",
    "e-host": "(e-host) threads, each freeing its own blocks, host memory, 64 B..64 KiB",
    "e-x": "(e-x) threads in a ring, each freeing the blocks of the one before it, device memory",
    "e-x-host": "(e-x-host) threads in a ring, each freeing the blocks of the one before it, host memory",
}

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]

H = 560
LEFT, TOP, RIGHT, BOTTOM = 80, 78, 650, 490   # the plot area; the legend is to its right
LEGEND_X = RIGHT + 30
CHAR_W = 7.2   # about the width of a character at 12 px, to size the legend


def load(path):
    """The rows (dicts with workload, case, allocator, metric, median, min, max) and the run's
    description, from rap-bench's JSON or CSV."""
    if path.endswith(".csv"):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        for r in rows:
            for k in ("median", "min", "max"):
                r[k] = float(r[k]) if r[k] not in ("", None) else None
        return rows, {}
    with open(path) as f:
        data = json.load(f)
    return data["rows"], data


def threads_of(case):
    """'16 threads' -> 16; None for a case that is no thread count."""
    head = case.split()[0] if case.split() else ""
    return int(head) if head.isdigit() else None


def tick(v):
    """1000 -> '1,000', 2.0 -> '2', 0.5 -> '0.5'."""
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def fmt(v):
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def series_of(rows, wl):
    """{allocator: [(threads, median, min, max), ...]} in the order rap-bench wrote them."""
    series = {}
    for r in rows:
        if r["workload"] != wl or r["metric"] != "Mops/s" or r["median"] is None:
            continue
        n = threads_of(r["case"])
        if n is None:
            continue
        lo = r["min"] if r["min"] is not None else r["median"]
        hi = r["max"] if r["max"] is not None else r["median"]
        series.setdefault(r["allocator"], []).append((n, r["median"], lo, hi))
    for pts in series.values():
        pts.sort()
    return series


def subtitle(meta):
    if not meta:
        return ""
    host = meta.get("host") or {}
    gpu = meta.get("gpu")
    opts = meta.get("options") or {}
    parts = [f"rap {meta.get('rap_version', '?')}", meta.get("date", "")]
    parts.append(f"{host.get('cpu', '?')}, {host.get('cores', '?')} cores")
    if gpu:
        parts.append(gpu.get("name", "GPU"))
    if opts:
        parts.append(f"median of {opts.get('reps', '?')} x {opts.get('rep_ms', '?')} ms"
                     + (" (quick run)" if opts.get("quick") else ""))
    return "; ".join(p for p in parts if p)


class Scale:
    """Maps a value to a coordinate between a and b, logarithmically or linearly."""

    def __init__(self, lo, hi, a, b, log):
        self.log, self.a, self.b = log, a, b
        self.lo, self.hi = (math.log10(lo), math.log10(hi)) if log else (lo, hi)

    def __call__(self, v):
        v = math.log10(v) if self.log else v
        return self.a + (v - self.lo) / (self.hi - self.lo) * (self.b - self.a)


def y_ticks(lo, hi, log):
    """(value, label, major) ticks for the y axis, and the axis' ends."""
    if not log:
        top = hi * 1.05
        step = 10 ** math.floor(math.log10(top / 5))
        for m in (1, 2, 5, 10):
            if top / (step * m) <= 8:
                step *= m
                break
        top = math.ceil(top / step) * step
        ticks, v = [], 0.0
        while v <= top + step / 2:
            ticks.append((v, tick(v), True))
            v += step
        return ticks, 0.0, top
    d0, d1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if d1 == d0:
        d1 += 1
    ticks = []
    for d in range(d0, d1 + 1):
        ticks.append((10.0 ** d, tick(10.0 ** d), True))
        if d < d1:
            for m in (2, 5):
                ticks.append((m * 10.0 ** d, tick(m * 10.0 ** d) if d1 - d0 <= 3 else "", False))
    return ticks, 10.0 ** d0, 10.0 ** d1


def draw(wl, series, meta, log_y):
    counts = sorted({p[0] for pts in series.values() for p in pts})
    values = [v for pts in series.values() for p in pts for v in p[1:] if v > 0]
    xlo, xhi = counts[0], counts[-1]
    if xlo == xhi:
        xlo, xhi = xlo / 2, xhi * 2
    x = Scale(xlo, xhi, LEFT + 20, RIGHT - 20, True)
    ticks, ylo, yhi = y_ticks(min(values), max(values), log_y)
    y = Scale(ylo, yhi, BOTTOM, TOP, log_y)
    labels = {name: legend_label(name, pts, counts[-1]) for name, pts in series.items()}
    W = int(max(LEGEND_X + 38 + CHAR_W * max(len(t) for t in labels.values()) + 20, 980))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{LEFT}" y="28" font-size="16" font-weight="bold">'
           f'{escape(TITLES.get(wl, wl))}</text>',
           f'<text x="{LEFT}" y="48" font-size="11" fill="#555">{escape(subtitle(meta))}</text>']
    # Grid, ticks and labels.
    for v, label, major in ticks:
        if not (ylo <= v <= yhi):
            continue
        py = y(v)
        out.append(f'<line x1="{LEFT}" y1="{py:.1f}" x2="{RIGHT}" y2="{py:.1f}" '
                   f'stroke="{"#ccc" if major else "#eee"}" stroke-width="1"/>')
        if label:
            out.append(f'<text x="{LEFT - 8}" y="{py + 4:.1f}" font-size="12" text-anchor="end">'
                       f'{escape(label)}</text>')
    for n in counts:
        px = x(n)
        out.append(f'<line x1="{px:.1f}" y1="{TOP}" x2="{px:.1f}" y2="{BOTTOM}" stroke="#eee"/>')
        out.append(f'<text x="{px:.1f}" y="{BOTTOM + 20}" font-size="12" text-anchor="middle">{n}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{RIGHT - LEFT}" height="{BOTTOM - TOP}" '
               f'fill="none" stroke="#333"/>')
    out.append(f'<text x="{(LEFT + RIGHT) / 2}" y="{BOTTOM + 45}" font-size="13" '
               f'text-anchor="middle">threads</text>')
    out.append(f'<text x="22" y="{(TOP + BOTTOM) / 2}" font-size="13" text-anchor="middle" '
               f'transform="rotate(-90 22 {(TOP + BOTTOM) / 2})">million operations (allocations + frees) '
               f'per second{", log scale" if log_y else ""}</text>')
    # One line per allocator, with its min..max bars; then the legend.
    ly = TOP + 6
    out.append(f'<text x="{LEGEND_X}" y="{ly}" font-size="12" font-weight="bold">allocator '
               f'(Mops/s at {counts[-1]} thread{"s" if counts[-1] > 1 else ""})</text>')
    for i, (name, pts) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        rap = name.startswith("rap ")
        dash = "" if rap else ' stroke-dasharray="6 4"'
        coords = [(x(n), y(med)) for n, med, _, _ in pts]
        if len(coords) > 1:
            path = " ".join(f"{cx:.1f},{cy:.1f}" for cx, cy in coords)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                       f'stroke-width="{2.2 if rap else 1.8}"{dash}/>')
        for (n, med, lo, hi), (cx, cy) in zip(pts, coords):
            if lo > 0 and hi > 0 and hi > lo:
                out.append(f'<line x1="{cx:.1f}" y1="{y(lo):.1f}" x2="{cx:.1f}" y2="{y(hi):.1f}" '
                           f'stroke="{color}" stroke-width="1" opacity="0.6"/>')
            out.append(marker(cx, cy, color, rap, f"{name}, {n} threads: {fmt(med)} Mops/s"))
        ly += 22
        out.append(f'<line x1="{LEGEND_X}" y1="{ly - 4}" x2="{LEGEND_X + 30}" y2="{ly - 4}" '
                   f'stroke="{color}" stroke-width="2"{dash}/>')
        out.append(marker(LEGEND_X + 15, ly - 4, color, rap, name))
        out.append(f'<text x="{LEGEND_X + 38}" y="{ly}" font-size="12">{escape(labels[name])}</text>')
    ly += 30
    out.append(f'<text x="{LEGEND_X}" y="{ly}" font-size="11" fill="#555">solid: rap; dashed: '
               f'other allocators;</text>')
    out.append(f'<text x="{LEGEND_X}" y="{ly + 15}" font-size="11" fill="#555">bars: min..max of '
               f'the repetitions</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def legend_label(name, pts, most):
    """The allocator and its figure at the most threads (or at the most it reached)."""
    n, med = pts[-1][0], pts[-1][1]
    return f"{name} — {fmt(med)}" + ("" if n == most else f" at {n} thread{'s' if n > 1 else ''}")


def marker(cx, cy, color, round_, title):
    tip = f"<title>{escape(title)}</title>"
    if round_:
        return f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" fill="{color}">{tip}</circle>'
    return (f'<rect x="{cx - 3.5:.1f}" y="{cy - 3.5:.1f}" width="7" height="7" fill="white" '
            f'stroke="{color}" stroke-width="1.5">{tip}</rect>')


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="rap-bench's FILE.json or FILE.csv (--out FILE)")
    ap.add_argument("workload", help="e, e-host, e-x or e-x-host")
    ap.add_argument("svg", help="the chart to write")
    ap.add_argument("--linear", action="store_true", help="a linear y axis from 0")
    args = ap.parse_args(argv[1:])
    rows, meta = load(args.results)
    series = series_of(rows, args.workload)
    if not series:
        have = sorted({r["workload"] for r in rows if r["metric"] == "Mops/s"})
        sys.stderr.write(f"plot_threads: no Mops/s rows for workload {args.workload!r} in "
                         f"{args.results} (it has: {', '.join(have) or 'none'})\n")
        return 1
    with open(args.svg, "w") as f:
        f.write(draw(args.workload, series, meta, not args.linear))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
