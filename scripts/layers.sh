#!/usr/bin/env bash
# layers.sh — checks src/'s layering from the static library's members and the sources' includes.
#
# Folders: for every object, the symbols it defines and the ones it uses; an edge A -> B where a
# file of folder A uses a symbol a file of folder B defines, or includes a header of folder B. Every
# edge must be in ALLOWED below (a layer calls only the layers under it): a new edge in the wrong
# direction fails, not only a circle. Files: inside one folder, the same edges between files (a .c
# file using another's symbols, a file including a header) must form no circle, except the ones in
# KNOWN, each with its reason. Prints the folder edges; fails with the offending edge or circle.
#   bash scripts/layers.sh [build-dir]    (default: build; needs the static library built)
set -euo pipefail
build=${1:-build}
archive=$(find "$build" -maxdepth 1 -name librap.a | head -1)
[ -n "$archive" ] || { echo "layers: no librap.a in $build"; exit 1; }
python3 - "$archive" <<'PY'
import collections, os, re, subprocess, sys

# The layers, bottom up: core <- pool, events <- resources <- platforms <- strategies <- manager.
# Each folder lists the folders it may use; anything else is a wrong-direction edge.
ALLOWED = {
    'core':       set(),
    'pool':       {'core'},
    'events':     {'core'},
    'resources':  {'core', 'events'},
    'platforms':  {'core', 'events', 'resources'},
    'strategies': {'core', 'events', 'pool', 'resources', 'platforms'},
    'manager':    {'core', 'events', 'pool', 'resources', 'platforms', 'strategies'},
}
# Circles between files of one folder that are known and kept, with why. The list is empty: any
# circle fails.
KNOWN = {}

files = {}                                  # object name -> path under src/
for d, _, names in os.walk('src'):
    for f in names:
        if f.endswith('.c'): files[f + '.o'] = os.path.relpath(os.path.join(d, f), 'src')
def folder(path): return path.split('/')[0] if '/' in path else None   # rap_internal.h: none

defs, uses = {}, collections.defaultdict(set)
out = subprocess.run(['nm', '-A', sys.argv[1]], capture_output=True, text=True).stdout
for line in out.splitlines():
    fields = line.split(':', 2)            # archive:member: symbol line
    if len(fields) < 3 or fields[1] not in files: continue
    path, parts = files[fields[1]], fields[2].split()
    if len(parts) == 3 and parts[1] in 'TDBRC' and parts[2].startswith('rap'):
        defs[parts[2]] = path
    elif len(parts) == 2 and parts[0] == 'U' and parts[1].startswith('rap'):
        uses[path].add(parts[1])

file_edges = collections.defaultdict(set)   # path -> paths, with why
why = {}
for a, syms in uses.items():
    for s in sorted(syms):
        b = defs.get(s)
        if b and b != a:
            file_edges[a].add(b)
            why.setdefault((a, b), 'uses ' + s)
include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
for d, _, names in os.walk('src'):
    for f in names:
        if not f.endswith(('.c', '.h')): continue
        path = os.path.relpath(os.path.join(d, f), 'src')
        with open(os.path.join(d, f)) as fh:
            for inc in include.findall(fh.read()):
                target = inc if os.path.exists(os.path.join('src', inc)) else \
                    os.path.relpath(os.path.join(d, inc), 'src')
                if os.path.exists(os.path.join('src', target)) and target != path:
                    file_edges[path].add(target)
                    why.setdefault((path, target), 'includes ' + inc)

edges, bad = collections.defaultdict(set), []
for a, bs in file_edges.items():
    for b in bs:
        fa, fb = folder(a), folder(b)
        if fa is None or fb is None or fa == fb: continue
        edges[fa].add(fb)
        if fa not in ALLOWED or fb not in ALLOWED[fa]:
            bad.append(f"{a} -> {b} ({why[(a, b)]}): {fa} may not use {fb}")
for a in sorted(edges): print(f"{a:10} -> {', '.join(sorted(edges[a]))}")
if bad:
    for b in sorted(bad): print("layers: a wrong-direction edge:", b)
    sys.exit(1)

# Circles of files inside one folder: the strongly connected components of its file graph.
index, low, on, stack, comps, n = {}, {}, set(), [], [], [0]
def strong(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in file_edges.get(v, ()):
        if folder(w) != folder(v) or folder(v) is None: continue
        if w not in index: strong(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = set()
        while True:
            w = stack.pop(); on.discard(w); comp.add(w)
            if w == v: break
        if len(comp) > 1: comps.append(comp)
sys.setrecursionlimit(10000)
for v in sorted(file_edges):
    if v not in index: strong(v)
failed = False
for comp in comps:
    if frozenset(comp) in KNOWN: continue
    failed = True
    pairs = [f"{a} -> {b} ({why[(a, b)]})" for a in sorted(comp) for b in sorted(file_edges[a]) if b in comp]
    print("layers: a circle between files:", "; ".join(pairs))
if failed: sys.exit(1)
print("layers: every edge allowed, no circle")
PY
