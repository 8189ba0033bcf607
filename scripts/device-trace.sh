#!/usr/bin/env bash
# device-trace.sh — on the GPU machine, over a carried device-build/: the PyTorch training test on
# rap with RAP_TRACE set; the trace summarised, plotted (SVG and HTML), replayed through the pool
# that wrote it and through a QuickPool on CUDA streams, and turned into a memory_viz snapshot that
# PyTorch's own torch.cuda._memory_viz then reads (segment summary, trace listing, its HTML page).
# Outputs under $OUT: train.jsonl.gz, train_summary.txt, train.svg, train.html, train_replay.txt,
# train_snapshot.pickle, train_memviz.html, train_memviz.txt. STEPS (default 20) training steps.
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
b=${RAP_BUILD_DIR:-device-build}
tool=$b/tools/rap-trace
export RAP_TORCH_LIB=$b/integrations/torch/librap_torch.so
export PYTHONPATH=$PWD/integrations/torch${PYTHONPATH:+:$PYTHONPATH}
export CUBLAS_WORKSPACE_CONFIG=:4096:8
work=$(mktemp -d "${TMPDIR:-/tmp}/rap-trace.XXXXXX")
trace=$out/train.jsonl
status=0
RAP_TRACE=$trace timeout 150 python3 integrations/torch/test_torch.py train --allocator rap \
  --steps "${STEPS:-20}" --timed-steps "${STEPS:-20}" --out "$work" > "$out/train.log" 2>&1 || status=1
echo "training on rap with RAP_TRACE: exit $status, $(wc -l < "$trace") trace lines"
"$tool" summary "$trace" | tee "$out/train_summary.txt" || status=1
"$tool" plot "$trace" -o "$out/train.svg" --title "rap_torch: a small CNN, ${STEPS:-20} training steps on an H100" || status=1
"$tool" plot "$trace" -o "$out/train.html" --title "rap_torch: a small CNN, ${STEPS:-20} training steps on an H100" || status=1
{
  for spec in "ResourceAwarePool(DEVICE, initial_size=64MiB, next_size=32MiB, heuristic=never)" \
              "QuickPool(DEVICE, initial_size=64MiB, next_size=32MiB, heuristic=never)"; do
    "$tool" replay "$trace" --spec "$spec" --resources cuda
  done
} | tee "$out/train_replay.txt" || status=1
python3 - "$trace" "$out" <<'PY' || status=1
import pickle, sys, time
import rap_torch
from torch.cuda import _memory_viz as mv
trace, out = sys.argv[1], sys.argv[2]
t0 = time.time()
snap = rap_torch.snapshot_from_trace(trace, out + "/train_snapshot.pickle")
print("snapshot: %d timeline entries, %d segments (%.1f s)"
      % (len(snap["device_traces"][0]), len(snap["segments"]), time.time() - t0))
with open(out + "/train_snapshot.pickle", "rb") as f:
    back = pickle.load(f)
with open(out + "/train_memviz.txt", "w") as f:
    f.write(mv.segsum(back))          # asserts that every segment's blocks add up
    f.write(mv.trace(back)[:20000])
with open(out + "/train_memviz.html", "w") as f:
    f.write(mv.trace_plot(back))
acts = {}
for e in back["device_traces"][0]:
    acts[e["action"]] = acts.get(e["action"], 0) + 1
print("memory_viz actions:", acts)
print("torch.cuda._memory_viz read it: segsum, trace and trace_plot done")
PY
gzip -9f "$trace"
rm -rf "$work"
exit $status
