#!/usr/bin/env bash
# run_tests.sh — rap_torch on a GPU machine, over a build made by `make device-build`.
# Each test runs in its own process (PyTorch's allocator cannot be swapped after its first use):
# probe, training with the native allocator, the same training on rap, two streams with
# record_stream and early frees (+ threads), CUDA graph capture and replay (graph pools through
# PyTorch's hooks, then through capture detection), out of memory (default and RAP_TORCH_OOM=null),
# set_per_process_memory_fraction and empty_cache, Python frames in a trace, PyTorch users' own patterns (test_torch_users.py), and the training on a QuickPool as a
# diagnostic; sleep and wake under training and across CUDA graphs (test_torch_capabilities.py). Writes to $OUT (default <repo>/out): torch_summary.txt, torch_results.json (every
# test's numbers) and torch_log.txt (every process's output). Exit status 1 on a failure.
# The rest (environment, log, results) is integrations/common/run_tests.sh, shared with cupy.
show_env="RAP_TORCH_OOM RAP_TORCH_POOL_HOOKS RAP_TORCH_SPEC"
export CUBLAS_WORKSPACE_CONFIG=:4096:8
# shellcheck source-path=SCRIPTDIR source=../common/run_tests.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/run_tests.sh" torch

run probe
run train --allocator native
run train --allocator rap
run streams
run graph --tag hooks
RAP_TORCH_POOL_HOOKS=0 run graph --tag detect
run oom
RAP_TORCH_OOM=null run oom
run fraction
# Python frames on traced allocations (enable(python_stack=8)) and in the memory_viz snapshot.
run pystack
# As users run it: torch.cuda's statistics, torch.compile with CUDA graphs, the record_stream
# hand-off, MemPool scopes, and real models (torchvision, transformers), each against native.
for a in native rap; do
  run stats --allocator $a
  run compile --allocator $a
  run handoff --allocator $a
  run model --model resnet --steps 20 --allocator $a
  run model --model gpt2 --steps 30 --allocator $a
done
run mempool --tag native
run mempool --tag rap
# Diagnostic: the same training on a QuickPool (no pending state), to see what pending costs.
RAP_TORCH_SPEC="QuickPool(DEVICE::{device}, initial_size=64MiB, next_size=32MiB, heuristic=never)" \
  run train --allocator rap --tag quickpool
# The same training on the default pool over the growable platform (one chunk, 2 MiB granules).
RAP_TORCH_SPEC="ResourceAwarePool(DEVICE_VMM::{device}, initial_size=64MiB, next_size=2MiB, heuristic=never, cross_resource=wait, wait_above=512MiB)" \
  run train --allocator rap --tag vmm
# Sleep and wake on the spec enable() gives (the default; RAP_TORCH_SPEC where set), with its
# memory lent to another process: the first sleep unprepared, the second after prepare_sleep; a
# decode step's CUDA graphs (explicit and torch.compile's) replayed across a sleep. A spec that
# cannot sleep fails both, saying so (test_torch_capabilities.py).
RAP_TEST_TIMEOUT=${RAP_TEST_TIMEOUT:-300} run sleep
RAP_TEST_TIMEOUT=${RAP_TEST_TIMEOUT:-300} run graph_sleep
# The same sleep over the growable platform named by hand.
RAP_TORCH_SPEC="ResourceAwarePool(DEVICE_VMM::{device}, initial_size=64MiB, next_size=2MiB, heuristic=never, cross_resource=wait, wait_above=512MiB)" \
  RAP_TEST_TIMEOUT=${RAP_TEST_TIMEOUT:-300} run sleep --tag vmm
# CUDA tensors across processes: torch.multiprocessing and share/open over an exporting platform.
RAP_TORCH_SPEC="ResourceAwarePool(DeviceVmm(device={device}, export=posix), initial_size=64MiB, next_size=2MiB, heuristic=never)" \
  run ipc
RAP_TORCH_SPEC="ResourceAwarePool(StreamOrdered(device={device}, pool=new, export=posix), initial_size=64MiB, next_size=2MiB, heuristic=never)" \
  run ipc --tag streamordered
finish
