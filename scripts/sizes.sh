#!/usr/bin/env bash
# sizes.sh — keeps src/'s rooms small: fails on a source file over 800 lines or a function over 80
# (from the first line of its signature to its closing brace), but for the exceptions listed in
# KNOWN below, each with its reason. Run by `make test` beside layers.sh. Prints the largest files
# and functions; -v prints every function over 60 lines too.
#   bash scripts/sizes.sh [-v]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - "$@" <<'PY'
import os, re, sys

FILE_MAX, FUNC_MAX = 800, 80
# Files or functions ("path:function") allowed past the limits, with why. Empty: any breach fails.
KNOWN = {}

def code_only(text):
    """The text with comments, strings and character literals blanked, lines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j])); i = j
        elif text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(c + ' ' * (min(j, n) - i - 1) + (c if j < n else '')); i = j + 1
        else:
            out.append(c); i += 1
    return ''.join(out)

def functions(path):
    """(name, first line, last line) of each function defined at file scope."""
    lines = code_only(open(path).read()).split('\n')
    depth, start, found, head = 0, None, [], []
    for no, line in enumerate(lines, 1):
        if depth == 0:
            s = line.strip()
            if not s or s.startswith('#'):
                head = []
            elif s:
                head.append((no, line))
        for ch in line:
            if ch == '{':
                if depth == 0:
                    sig = ' '.join(l for _, l in head)
                    m = re.search(r'(\w+)\s*\([^;{}=]*\)\s*(?:\w+\s*)*\{?\s*$', sig.split('{')[0] + '{')
                    is_func = m is not None and not re.match(r'\s*(typedef|struct|enum|union)\b', sig) \
                        and '=' not in sig.split('(')[0]
                    start = (m.group(1), head[0][0]) if is_func and head else None
                depth += 1
            elif ch == '}':
                depth -= 1
                if depth == 0:
                    if start: found.append((start[0], start[1], no))
                    start, head = None, []
        if depth == 0 and line.rstrip().endswith(';'):
            head = []
    return found

verbose = '-v' in sys.argv[1:]
bad, big_files, big_funcs = [], [], []
for d, _, names in os.walk('src'):
    for f in sorted(names):
        if not f.endswith(('.c', '.h')): continue
        path = os.path.join(d, f)
        n = sum(1 for _ in open(path))
        big_files.append((n, path))
        if n > FILE_MAX and path not in KNOWN:
            bad.append(f"{path}: {n} lines (at most {FILE_MAX}: cut it by idea)")
        for name, a, b in functions(path):
            length = b - a + 1
            big_funcs.append((length, f"{path}:{name}"))
            if length > FUNC_MAX and f"{path}:{name}" not in KNOWN:
                bad.append(f"{path}:{a}: {name} is {length} lines (at most {FUNC_MAX})")
big_files.sort(reverse=True); big_funcs.sort(reverse=True)
print("sizes: largest files:", ", ".join(f"{p} {n}" for n, p in big_files[:3]))
print("sizes: longest functions:", ", ".join(f"{p} {n}" for n, p in big_funcs[:3]))
if verbose:
    for n, p in big_funcs:
        if n > 60: print(f"  {n:4} {p}")
stale = [k for k in KNOWN if not any(k in (p, q) for _, p in big_files for _, q in big_funcs)]
for k in stale: bad.append(f"{k}: listed in KNOWN but not in src/ any more")
for b in bad: print("sizes:", b)
sys.exit(1 if bad else 0)
PY
