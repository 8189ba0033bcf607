#!/usr/bin/env bash
# workload-f.sh — the PyTorch rows of workload (f), on a GPU machine with PyTorch: the recorded
# transformer training step (bench/traces/gpt2_small_step.jsonl.gz, from
# bench/record_torch_trace.py) replayed through PyTorch's CUDA allocator as configured by default,
# with expandable segments, and with its cudaMallocAsync backend (bench/replay_torch_peer.py; one
# process each, since PyTorch reads its configuration once). rap-bench --only f replays the same
# trace through rap's pools, cudaMallocAsync and CUB in its own process.
#   bash bench/workload-f.sh [TRACE...]       (also writes $OUT/workload-f.jsonl when OUT is set)
# Several traces (bench/traces/*.jsonl.gz: the f family) are replayed in turn, each row named by its
# file.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -gt 0 ] || set -- "$root/bench/traces/gpt2_small_step.jsonl.gz"
py=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/rap-f.XXXXXX")
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl
: >"$results"
for trace in "$@"; do
  for conf in "" "expandable_segments:True" "backend:cudaMallocAsync"; do
    PYTORCH_CUDA_ALLOC_CONF=$conf "$py" "$root/bench/replay_torch_peer.py" "$trace" >>"$results" 2>"$work/err" ||
      echo "PyTorch (${conf:-default}) on $trace: $(tail -1 "$work/err")"
  done
done
"$py" - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("workload (f), PyTorch's allocator: %-40s %12s %12s %9s %8s" % ("", "peak live", "peak held", "held/live", "ns/call"))
for r in rows:
    name = "%s: %s (%s)" % (r.get("trace", ""), r["allocator"], r["conf"] or "default")
    print("  %-72s %9.1f MiB %9.1f MiB %9.3f %8.0f" % (name, r["peak_live"] / 2**20, r["peak_held"] / 2**20,
                                                     r["held_per_live"], r["ns_per_call"]))
PY
if [ -n "${OUT:-}" ]; then cp "$results" "$OUT/workload-f.jsonl"; fi
exit 0
