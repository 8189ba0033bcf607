#!/usr/bin/env bash
# demo-traced.sh DEMO — the demo run as docs/trace.md suggests (RAP_TRACE set) says that tracing is
# on and that its timings are not the pools', and writes a trace of tens of megabytes, not gigabytes
# (a ctest: examples.demo_traced).
set -euo pipefail
demo=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
RAP_TRACE="$dir/demo.jsonl" "$demo" > "$dir/out.txt"
fail() { echo "demo-traced: $*" >&2; cat "$dir/out.txt" >&2; exit 1; }
grep -q "tracing is on" "$dir/out.txt" || fail "the traced demo does not say that tracing is on"
grep -q "(traced)" "$dir/out.txt" || fail "the traced demo shows a speed-up"
size=$(stat -c %s "$dir/demo.jsonl")
[ "$size" -lt $((200 * 1024 * 1024)) ] || fail "the traced demo wrote $size bytes"
echo "demo-traced: says tracing is on; trace of $((size / 1024 / 1024)) MiB"
