#!/usr/bin/env bash
# record-traces.sh — records the harder traces of the (f) family on a GPU machine with PyTorch and
# transformers, each with bench/record_torch_trace.py in a process of its own (one that fails loses
# only its own trace; its log says why), into DIR:
#   bash bench/record-traces.sh DIR                  one GPU: ckpt, pipeline, moe, serve
#   bash bench/record-traces.sh --distributed DIR    two GPUs (torchrun --nproc_per_node 2):
#                                                    rank 0 of FSDP2, and of DDP
# Each trace is DIR/<name>.jsonl.gz, its output DIR/<name>.log. RECORD_TIMEOUT (seconds, default
# 240) bounds each; PYTHON names the interpreter (python3), TORCHRUN torchrun.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
limit=${RECORD_TIMEOUT:-240}
dist=0
if [ "${1:-}" = "--distributed" ]; then dist=1; shift; fi
dir=${1:?usage: record-traces.sh [--distributed] DIR}
mkdir -p "$dir"
rec=$root/bench/record_torch_trace.py
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
failed=0

one() {   # one NAME COMMAND...: runs it, says how it went
  local name=$1; shift
  local t0=$SECONDS
  echo "== $name: $*" >"$dir/$name.log"
  timeout -k 10 "$limit" "$@" >>"$dir/$name.log" 2>&1
  local rc=$?
  if [ $rc = 0 ] && [ -s "$dir/$name.jsonl.gz" ]; then
    echo "$name: ok in $((SECONDS - t0)) s — $(grep '^wrote' "$dir/$name.log" | tail -1)"
  else
    failed=$((failed + 1))
    echo "$name: FAILED after $((SECONDS - t0)) s (rc $rc$([ $rc = 124 ] && echo ', timed out')); the end of $dir/$name.log:"
    tail -5 "$dir/$name.log" | sed 's/^/    /'
  fi
}

if [ $dist = 0 ]; then
  one gpt2_ckpt "$py" "$rec" "$dir/gpt2_ckpt.jsonl.gz" --workload ckpt --steps 3
  one pipeline_1f1b "$py" "$rec" "$dir/pipeline_1f1b.jsonl.gz" --workload pipeline --steps 3
  one moe_top2 "$py" "$rec" "$dir/moe_top2.jsonl.gz" --workload moe --steps 3
  one gpt2_serve "$py" "$rec" "$dir/gpt2_serve.jsonl.gz" --workload serve --steps 8
else
  run=${TORCHRUN:-torchrun}
  command -v "$run" >/dev/null || run="$py -m torch.distributed.run"
  # shellcheck disable=SC2086
  one fsdp2_rank0 $run --standalone --nproc_per_node 2 "$rec" "$dir/fsdp2_rank0.jsonl.gz" --workload fsdp2 --steps 3
  # shellcheck disable=SC2086
  one ddp_rank0 $run --standalone --nproc_per_node 2 "$rec" "$dir/ddp_rank0.jsonl.gz" --workload ddp --steps 3
fi
ls -l "$dir"/*.jsonl.gz 2>/dev/null
echo "$failed failed"
exit $((failed > 0))
