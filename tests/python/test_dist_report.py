"""The torch.distributed report (integrations/torch/bench_distributed.py report) over made-up runs of
four ranks, as CI runs it (no GPU, no torch): the per-rank table, the check against native on every
rank (one rank slower than native's slowest round fails it; peak reserved above native's fails
it), and the NCCL test's answer from every rank. Standard library only.

    python3 test_dist_report.py <integrations/torch/bench_distributed.py>
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

BENCH = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "integrations", "torch", "bench_distributed.py")
del sys.argv[1:]
RANKS, ROUNDS, STEPS = 4, 5, 12


def write_runs(out, slow_rank=None, big_rank=None, nccl_ranks=RANKS):
    """Native's step time 100 ms + round/10 on every rank, rap's 0.2 ms below (slow_rank: 5 ms
    above); peak reserved 2048 MiB native, 2000 rap (big_rank: 2100)."""
    for run in range(1, ROUNDS + 1):
        for alloc, modes in (("native", ("ddp", "fsdp")), ("rap", ("ddp", "fsdp")), ("registered", ("ddp",))):
            for mode in modes:
                for rank in range(RANKS):
                    ms = 100 + run / 10.0
                    peak = 2048
                    if alloc != "native":
                        ms += 5 if rank == slow_rank and mode == "fsdp" else -0.2
                        peak = 2100 if rank == big_rank and mode == "ddp" else 2000
                    r = {"mode": mode, "allocator": alloc, "rank": rank, "world": RANKS, "steps": STEPS,
                         "run": run, "step_ms": [ms] * STEPS, "median_ms": ms,
                         "losses": [5.0] * STEPS, "peak_reserved": peak << 20, "peak_allocated": 0}
                    if alloc == "rap":
                        r.update(waits=0, host_waits=0, spec="default")
                    name = "train_%s_%s_run%d_rank%d.json" % (mode, alloc, run, rank)
                    with open(os.path.join(out, name), "w") as f:
                        json.dump(r, f)
    for rank in range(nccl_ranks):
        r = {"rank": rank, "world": RANKS, "registrable": True, "all_reduce_equal": True,
             "all_gather_equal": True, "ddp_grads_equal": True, "all_reduce_ms_registered": 1.0,
             "all_reduce_ms_native": 1.0, "all_gather_ms_registered": 0.5, "all_gather_ms_native": 0.5,
             "ok": True}
        with open(os.path.join(out, "nccl_rank%d.json" % rank), "w") as f:
            json.dump(r, f)


def report(out):
    p = subprocess.run([sys.executable, BENCH, "report", "--ranks", str(RANKS), "--out", out],
                       capture_output=True, text=True, timeout=60)
    with open(os.path.join(out, "distributed.json")) as f:
        return p.stdout, json.load(f)


class PerRank(unittest.TestCase):
    def test_every_rank_passes(self):
        with tempfile.TemporaryDirectory() as out:
            write_runs(out)
            text, s = report(out)
        self.assertIn("%d ranks" % RANKS, text)
        for rank in range(RANKS):
            self.assertIn("| FSDP rap | %d | %d |" % (rank, ROUNDS), text)
        for mode in ("ddp", "fsdp"):
            self.assertEqual(s["target_" + mode]["time"], True)
            self.assertEqual(s["target_" + mode]["memory"], True)
            self.assertEqual(sorted(s["target_" + mode]["ranks"]), [str(k) for k in range(RANKS)])
        self.assertIn("rap against native on every one of 4 ranks: step time passed, peak reserved passed", text)
        self.assertTrue(s["nccl"]["every_rank"])
        per = [c for c in s["configs"] if (c["mode"], c["allocator"]) == ("ddp", "rap")][0]["per_rank"]
        self.assertEqual(len(per["3"]["step_ms"]), ROUNDS)

    def test_one_slow_rank_fails_the_time_check(self):
        with tempfile.TemporaryDirectory() as out:
            write_runs(out, slow_rank=2)
            text, s = report(out)
        self.assertFalse(s["target_fsdp"]["time"])
        self.assertFalse(s["target_fsdp"]["ranks"]["2"]["time"])
        self.assertTrue(s["target_fsdp"]["ranks"]["1"]["time"])
        self.assertTrue(s["target_ddp"]["time"])
        self.assertIn("FSDP rank 2: rap 105.3 ms > native 100.3 ms", text)
        self.assertIn("ABOVE its slowest run", text)

    def test_one_rank_above_native_memory_fails_the_memory_check(self):
        with tempfile.TemporaryDirectory() as out:
            write_runs(out, big_rank=3)
            text, s = report(out)
        self.assertFalse(s["target_ddp"]["memory"])
        self.assertFalse(s["target_ddp"]["ranks"]["3"]["memory"])
        self.assertTrue(s["target_fsdp"]["memory"])
        self.assertIn("peak reserved 2100 MiB NOT <= native 2048 MiB", text)

    def test_a_rank_missing_from_the_nccl_test_fails(self):
        with tempfile.TemporaryDirectory() as out:
            write_runs(out, nccl_ranks=RANKS - 1)
            text, s = report(out)
        self.assertFalse(s["nccl"]["every_rank"])
        self.assertFalse(s["ok"])
        self.assertIn("not from every one of 4 ranks", text)


if __name__ == "__main__":
    unittest.main()
