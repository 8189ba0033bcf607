#!/usr/bin/env bash
# run_distributed.sh — torch.distributed on rap, on a machine with two or more GPUs, over a carried
# device-build/ (make device-build): one command that runs everything and prints the tables.
#   bash integrations/torch/run_distributed.sh            (OUT=dir for the results; default <repo>/out)
# RAP_DIST_RANKS=N ranks, one a GPU (default: every GPU nvidia-smi -L lists, or torch sees; at
# least 2, at most the GPUs there). RAP_DIST_RUNS=N rounds (default 5); each round launches, with
# torchrun on N ranks, PyTorch's
# allocator (DDP, FSDP2, then DDP on registered rap memory, which runs on PyTorch's allocator
# too, in one process) and rap's default (rap.torch.enable(): DDP then FSDP2), in that order
# (interleaved, so the machine's drift falls on every configuration alike). RAP_DIST_STEPS=S
# training steps a configuration (default 30). Before them: the NCCL
# registration test on every rank (all-reduce, all-gather and a DDP step on registered rap memory
# equal to native; NCCL_DEBUG=INFO, subsystem REG, logged to $OUT/nccl-reg.*), the bad-input
# check, the memory-fraction and empty_cache test (test_torch.py fraction, on one GPU), and the
# single-process record_stream hand-off native and on rap's default.
# RAP_DIST_VARIANTS="NAME=SPEC;NAME=SPEC" adds, to every round, rap on each other spec (RAP_TORCH_SPEC),
# reported as "rap:NAME": a rule tried against the default in the same run.
# RAP_DIST_BUDGET_S=S starts no round after S seconds (the table says how many ran);
# RAP_DIST_TIMEOUT=S ends a launch after S seconds (default 120). Writes $OUT/distributed.json and
# $OUT/distributed_log.txt; the tables are the last thing printed: per configuration, and per rank
# (step time and peak reserved, median and spread over the rounds, and rap against native on
# every rank). Exit status 1 if a check failed, 2 if the ranks cannot be had.
# Bounds: most of a round is its two launches' start (on two H100s the checks and five rounds of 30
# steps took 376 s); more ranks start slower (not measured yet on four), so for a 10-minute limit
# give RAP_DIST_BUDGET_S=300 (the rounds that started finish, and the tables come back) and, if
# needed, fewer RAP_DIST_STEPS or RAP_DIST_RUNS. CUDA_VISIBLE_DEVICES, where set, is what is counted.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$root/integrations/torch
out=${OUT:-$root/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${RAP_BUILD_DIR:-$root/device-build}
export RAP_TORCH_LIB=${RAP_TORCH_LIB:-$build/integrations/torch/librap_torch.so}
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 TOKENIZERS_PARALLELISM=false
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
py=${PYTHON:-python3}
runs=${RAP_DIST_RUNS:-5}
log=$out/distributed_log.txt
: >"$log"
gpus=0
[ -n "${CUDA_VISIBLE_DEVICES:-}" ] || gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "${gpus:-0}" -gt 0 ] || gpus=$("$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
ranks=${RAP_DIST_RANKS:-$gpus}
if ! [[ "$ranks" =~ ^[0-9]+$ ]] || [ "$ranks" -lt 2 ] || [ "$ranks" -gt "${gpus:-0}" ]; then
  echo "run_distributed.sh: RAP_DIST_RANKS=$ranks: needs a number from 2 to the GPUs here ($gpus)" | tee -a "$log"
  exit 2
fi
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
  echo "run_distributed.sh: RAP_DIST_RUNS is a number of rounds, at least 1, not '$runs'" | tee -a "$log"
  exit 2
fi
if ! [[ "${RAP_DIST_STEPS:-30}" =~ ^[0-9]+$ ]] || [ "${RAP_DIST_STEPS:-30}" -lt 3 ]; then
  echo "run_distributed.sh: RAP_DIST_STEPS is a number of steps, at least 3, not '$RAP_DIST_STEPS'" | tee -a "$log"
  exit 2
fi
if [ ! -f "$RAP_TORCH_LIB" ]; then
  echo "run_distributed.sh: $RAP_TORCH_LIB is missing: run make device-build first" | tee -a "$log"
  exit 1
fi
rm -f "$out"/train_*.json "$out"/nccl_*.json "$out"/nccl-reg.* "$out"/handoff_*.json "$out"/fraction.json
trun() {   # torchrun on $ranks GPUs, a fresh rendezvous port each time
  timeout "${RAP_DIST_TIMEOUT:-120}" "$py" -m torch.distributed.run --standalone --nproc_per_node "$ranks" \
    "$here/bench_distributed.py" "$@" --out "$out" >>"$log" 2>&1
  echo "=== exit $? ($*)" >>"$log"
}
t0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader;
  "$py" -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  echo "ranks $ranks of $gpus GPUs, rounds $runs, steps ${RAP_DIST_STEPS:-30}"; } >>"$log" 2>&1
# The checks first (short), then the rounds: a round starts only while RAP_DIST_BUDGET_S seconds
# (default unlimited) have not passed, so that a time-limited machine still gets the table back.
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,REG,NVLS NCCL_DEBUG_FILE="$out/nccl-reg.%h.%p.log" trun nccl
"$py" "$here/bench_distributed.py" bad --out "$out" >>"$log" 2>&1
for a in native rap; do
  timeout 120 "$py" "$here/test_torch.py" handoff --allocator "$a" --iters 100 --out "$out" >>"$log" 2>&1
done
timeout 120 "$py" "$here/test_torch.py" fraction --out "$out" >>"$log" 2>&1
echo "=== exit $? (fraction)" >>"$log"
echo "checks done after $((SECONDS - t0)) s" | tee -a "$log"
for i in $(seq 1 "$runs"); do
  if [ -n "${RAP_DIST_BUDGET_S:-}" ] && [ $((SECONDS - t0)) -ge "$RAP_DIST_BUDGET_S" ]; then
    echo "round $i of $runs not started: RAP_DIST_BUDGET_S=$RAP_DIST_BUDGET_S s have passed" | tee -a "$log"
    break
  fi
  trun train --allocator native --registered --trial "$i"
  trun train --allocator rap --trial "$i"
  IFS=';' read -ra variants <<<"${RAP_DIST_VARIANTS:-}"
  for v in "${variants[@]}"; do
    [ -n "$v" ] || continue
    RAP_TORCH_SPEC=${v#*=} trun train --allocator rap --variant "${v%%=*}" --trial "$i"
  done
  echo "round $i of $runs done after $((SECONDS - t0)) s" | tee -a "$log"
done
echo "all runs done after $((SECONDS - t0)) s" | tee -a "$log"
"$py" "$here/bench_distributed.py" report --ranks "$ranks" --out "$out" 2>>"$log" | tee "$out/distributed_table.md"
rc=${PIPESTATUS[0]}
# The per-run files in one archive (a device machine may send back only a few files).
tar czf "$out/distributed_runs.tgz" -C "$out" $(cd "$out" && ls train_*.json nccl_*.json nccl-reg.* handoff_*.json 2>/dev/null) 2>/dev/null &&
  rm -f "$out"/train_*.json "$out"/nccl_rank*.json "$out"/nccl-reg.*
exit "$rc"
