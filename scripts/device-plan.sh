#!/usr/bin/env bash
# device-plan.sh — plans on the GPU machine, over a carried device-build/ (make device-build): for
# each trace, a plan made from it (rap-trace plan) and the trace replayed on CUDA streams through
# the ResourceAwarePool and through Planned over it, on DEVICE and DEVICE_VMM; then rap-bench (p).
#   bash scripts/device-plan.sh [TRACE.jsonl[.gz] ...]     (default: bench/traces/*.jsonl.gz)
# Results: $OUT/plan-replay.txt (one line per trace, parent and allocator), $OUT/plan-bench.*.
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
b=${RAP_BUILD_DIR:-device-build}
work=$(mktemp -d "${TMPDIR:-/tmp}/rap-plan.XXXXXX")
trap 'rm -rf "$work"' EXIT
traces=("$@")
[ ${#traces[@]} -eq 0 ] && traces=(bench/traces/*.jsonl.gz)
res=$out/plan-replay.txt
: >"$res"
for t in "${traces[@]}"; do
  name=$(basename "$t" .gz)
  name=${name%.jsonl}
  case "$t" in *.gz) gzip -dc "$t" >"$work/$name.jsonl" ;; *) cp "$t" "$work/$name.jsonl" ;; esac
  if ! "$b/tools/rap-trace" plan "$work/$name.jsonl" -o "$work/$name.plan" >"$work/plan.txt" 2>&1; then
    echo "$name: no plan: $(tail -1 "$work/plan.txt")" | tee -a "$res"
    continue
  fi
  head -2 "$work/plan.txt" | sed "s/^/$name: /" | tee -a "$res"
  for parent in "DEVICE, initial_size=64MiB, next_size=32MiB, heuristic=never" \
                "DEVICE_VMM, initial_size=2MiB, next_size=2MiB, heuristic=never"; do
    for spec in "ResourceAwarePool($parent)" "Planned(ResourceAwarePool($parent), plan=$work/$name.plan)"; do
      line=$(RAP_LOG_LEVEL=info "$b/tools/rap-trace" replay "$work/$name.jsonl" --resources cuda \
               --spec "$spec" 2>&1 | grep -E "held/live|info|failed|rap-trace:" | tr -s ' ' | tr '\n' ' ')
      echo "$name | ${spec%%(*} over ${parent%%,*} | $line" | sed "s|$work/||" | tee -a "$res"
    done
  done
done
"$b/bench/rap-bench" --only p --out "$out/plan-bench" >"$out/plan-bench.log" 2>&1 ||
  echo "rap-bench (p) failed: $(tail -1 "$out/plan-bench.log")"
grep -A6 "^p$" "$out/plan-bench.log" || true
