"""suite_compare.py — two runs of numba-cuda's own tests (native, and over rap.numba) side by side.

    python3 suite_compare.py NATIVE_LOG NATIVE_RC RAP_LOG RAP_RC [LIST_DIR]

Reads each test's outcome from the logs as pytest -v prints them (with or without xdist; a module
that did not import counts as one error), and
prints per run: passed, failed, errors, skipped, and whether it ran out of time (rc 124); then the
check: the rap run's failures and errors, how many of them fail natively too, and by name those
that do not. A few tests differ by design (BY_DESIGN: what numba's own IPC tests read of a CUDA IPC
handle, which rap's does not have); they are listed apart, with the reason, and do not fail the
check. With LIST_DIR, writes numba_suite_{native,rap}.txt there: one "outcome test" a line.
Exit status 1 when a test fails under rap only, or when the rap run has no outcome at all.
"""
import os
import re
import sys

PYTEST = re.compile(r"(\S+::\S+)\s+(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b|"
                    r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+::\S+)")
COLLECTION = re.compile(r"^ERROR (\S+\.py)(?: - .*)?$", re.M)   # a module that did not import
KIND = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "error",
        "SKIPPED": "skipped", "XFAIL": "xfailed"}
ORDER = ("passed", "failed", "error", "skipped", "xfailed")
BAD = ("failed", "error")
WORST = {"error": 4, "failed": 3, "passed": 2, "xfailed": 1, "skipped": 0}

# Tests whose failure over rap is what rap.numba does by design, each with why.
READS_CUDA_HANDLE = ("reads ipch.handle.reserved, the bytes of a CUDA IPC handle (cuIpcGetMemHandle); "
                     "rap.numba shares through rap's own descriptor (rap_ipc_export), and its "
                     "IpcHandle.handle is None")
BY_DESIGN = {
    "test_ipc.py::TestIpcMemory::test_ipc_handle": READS_CUDA_HANDLE,
    "test_ipc.py::TestIpcMemory::test_ipc_handle_serialization": READS_CUDA_HANDLE,
    "test_ipc.py::TestIpcStaged::test_staged": READS_CUDA_HANDLE,
}


def outcomes(path):
    """{test id: outcome}; a test reported twice (a teardown error) keeps the worst."""
    with open(path, errors="replace") as f:
        text = f.read()
    seen = {}
    for m in PYTEST.finditer(text):
        test, word = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
        kind = KIND[word]
        if WORST[kind] > WORST.get(seen.get(test), -1):
            seen[test] = kind
    for m in COLLECTION.finditer(text):
        seen[m.group(1) + " (collection)"] = "error"
    return seen


def by_design(test):
    for suffix, why in BY_DESIGN.items():
        if test.endswith(suffix):
            return why
    return None


def line(name, seen, rc):
    counts = ", ".join("%d %s" % (sum(1 for v in seen.values() if v == k), k) for k in ORDER)
    late = " (ran out of time: results so far)" if rc == 124 else ""
    return "%-6s %s%s" % (name, counts, late)


def write_list(path, seen):
    with open(path, "w") as f:
        for test in sorted(seen):
            f.write("%-8s %s\n" % (seen[test], test))


def main(argv):
    native, rc_native = outcomes(argv[1]), int(argv[2])
    over_rap, rc_rap = outcomes(argv[3]), int(argv[4])
    if len(argv) > 5:
        write_list(os.path.join(argv[5], "numba_suite_native.txt"), native)
        write_list(os.path.join(argv[5], "numba_suite_rap.txt"), over_rap)
    print(line("native", native, rc_native))
    print(line("rap", over_rap, rc_rap))
    bad = sorted(t for t, k in over_rap.items() if k in BAD)
    also = [t for t in bad if native.get(t) in BAD]
    rest = [t for t in bad if native.get(t) not in BAD]
    designed = [t for t in rest if by_design(t)]
    only = [t for t in rest if not by_design(t)]
    print("check: rap's failures and errors: %d; failing natively too: %d; rap only by design: %d; "
          "rap only: %d" % (len(bad), len(also), len(designed), len(only)))
    for t in designed:
        print("  rap only, by design: %s (%s)" % (t, by_design(t)))
    for t in only:
        print("  rap only: %s (native: %s)" % (t, native.get(t, "not reached")))
    if not over_rap:
        print("check: no test outcome in the rap run's log")
    print("check: %s" % ("PASS (rap's failures are native failures, or by design)"
                         if over_rap and not only else "FAIL"))
    return 1 if only or not over_rap else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
