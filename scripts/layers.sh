#!/usr/bin/env bash
# layers.sh — draws src/'s folders as layers from the static library's members: for every object,
# the symbols it defines and the ones it uses; an edge A -> B where a file of folder A uses a symbol
# a file of folder B defines. Prints the edges and fails if the folders form a circle.
#   bash scripts/layers.sh [build-dir]    (default: build; needs the static library built)
set -euo pipefail
build=${1:-build}
archive=$(find "$build" -maxdepth 1 -name librap.a | head -1)
[ -n "$archive" ] || { echo "layers: no librap.a in $build"; exit 1; }
python3 - "$archive" <<'PY'
import subprocess, sys, os, collections
folder_of = {}
for d, _, files in os.walk('src'):
    for f in files:
        if f.endswith('.c'): folder_of[f + '.o'] = os.path.relpath(d, 'src').split(os.sep)[0]
defs, uses = {}, collections.defaultdict(set)
out = subprocess.run(['nm', '-A', sys.argv[1]], capture_output=True, text=True).stdout
for line in out.splitlines():
    fields = line.split(':', 2)            # archive:member: symbol line
    if len(fields) < 3 or fields[1] not in folder_of: continue
    folder, parts = folder_of[fields[1]], fields[2].split()
    if len(parts) == 3 and parts[1] in 'TDBRC' and parts[2].startswith('rap'):
        defs[parts[2]] = folder
    elif len(parts) == 2 and parts[0] == 'U' and parts[1].startswith('rap'):
        uses[folder].add(parts[1])
edges = collections.defaultdict(set)
for a, syms in uses.items():
    for s in syms:
        b = defs.get(s)
        if b and b != a: edges[a].add(b)
for a in sorted(edges): print(f"{a:10} -> {', '.join(sorted(edges[a]))}")
seen, stack, circle = {}, [], None
def visit(n):
    global circle
    seen[n] = 1; stack.append(n)
    for m in edges.get(n, ()):
        if seen.get(m) == 1 and circle is None: circle = stack[stack.index(m):] + [m]
        elif m not in seen: visit(m)
    stack.pop(); seen[n] = 2
for n in list(edges): 
    if n not in seen: visit(n)
if circle:
    print("layers: a circle:", " -> ".join(circle)); sys.exit(1)
print("layers: no circle")
PY
