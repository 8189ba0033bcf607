#!/usr/bin/env python3
"""scaling.py — how each peer of rap-bench's thread workloads scales: for every workload and
allocator in FILE.json, the median Mops/s at each thread count and its fraction of linear scaling
from the one-thread figure (Mops(n) / (n x Mops(1))). Where the workload has the ceiling (each
thread's own stacks, nothing shared: what the machine itself allows), each peer's fraction of
linear is also divided by the ceiling's at the same count ("of the ceiling"). Standard library only.
    python3 bench/scaling.py results.json [WORKLOAD ...]
"""
import json
import re
import sys

CEILING = "per-thread stacks (the ceiling)"


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip())
        return 2
    with open(argv[1]) as f:
        doc = json.load(f)
    want = set(argv[2:])
    table = {}
    for row in doc.get("rows", []):
        if row.get("metric") != "Mops/s" or (want and row["workload"] not in want):
            continue
        m = re.match(r"(\d+) thread", row["case"])
        if m:
            table.setdefault((row["workload"], row["allocator"]), {})[int(m.group(1))] = row["median"]
    def linear(by_n, n):
        base = by_n.get(1)
        return by_n[n] / (n * base) if base else None

    for (wl, peer), by_n in table.items():
        ceiling = table.get((wl, CEILING))
        cells = []
        for n in sorted(by_n):
            frac = linear(by_n, n)
            text = "" if frac is None else " (%.2f of linear" % frac
            top = linear(ceiling, n) if ceiling and n in ceiling and peer != CEILING else None
            if frac is not None and top:
                text += ", %.2f of the ceiling" % (frac / top)
            cells.append("%d: %.1f%s" % (n, by_n[n], text + (")" if text else "")))
        print("(%s) %s: %s" % (wl, peer, "; ".join(cells)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
