#!/usr/bin/env python3
"""scaling.py — how each peer of rap-bench's thread workloads scales: for every workload and
allocator in FILE.json, the median Mops/s at each thread count and its fraction of linear scaling
from the one-thread figure (Mops(n) / (n x Mops(1))). Standard library only.
    python3 bench/scaling.py results.json [WORKLOAD ...]
"""
import json
import re
import sys


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
    for (wl, peer), by_n in table.items():
        base = by_n.get(1)
        cells = []
        for n in sorted(by_n):
            frac = "" if not base else " (%.2f of linear)" % (by_n[n] / (n * base))
            cells.append("%d: %.1f%s" % (n, by_n[n], frac))
        print("(%s) %s: %s" % (wl, peer, "; ".join(cells)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
