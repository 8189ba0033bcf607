"""suite_compare.py — two runs of numba-cuda's tests (native, and over rap) side by side.

    python3 suite_compare.py NATIVE_LOG NATIVE_RC RAP_LOG RAP_RC

Reads each test's outcome from the logs as pytest -v (with or without xdist) or Numba's runner
(-v) prints them, and prints per run: passed, failed (failures and errors), skipped, whether it
ran out of time (rc 124), then the tests that failed under rap only, by name. Exit status 1 when
there is one, or when the rap run found no tests.
"""
import re
import sys

PYTEST = re.compile(r"(\S+::\S+)\s+(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)|"
                    r"(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+::\S+)")
UNITTEST = re.compile(r"^(\w+) \(([\w.]+)\)[^\n]*?\.\.\. (ok|FAIL|ERROR|skipped|expected failure|"
                      r"unexpected success)", re.M)
KIND = {"PASSED": "passed", "XFAIL": "passed", "XPASS": "passed", "ok": "passed",
        "expected failure": "passed", "unexpected success": "failed", "FAILED": "failed",
        "ERROR": "failed", "FAIL": "failed", "SKIPPED": "skipped", "skipped": "skipped"}


def outcomes(path):
    """{test id: passed | failed | skipped}; a test reported twice (a teardown error) keeps the worst."""
    with open(path, errors="replace") as f:
        text = f.read()
    seen = {}
    for m in PYTEST.finditer(text):
        test, word = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
        kind = KIND[word]
        if seen.get(test) != "failed":
            seen[test] = kind
    for m in UNITTEST.finditer(text):
        test = "%s.%s" % (m.group(2), m.group(1)) if not m.group(2).endswith(m.group(1)) else m.group(2)
        kind = KIND[m.group(3).split()[0] if m.group(3).startswith("skipped") else m.group(3)]
        if seen.get(test) != "failed":
            seen[test] = kind
    return seen


def line(name, seen, rc):
    counts = {k: sum(1 for v in seen.values() if v == k) for k in ("passed", "failed", "skipped")}
    late = " (ran out of time: results so far)" if rc == 124 else ""
    return "%-7s %4d passed, %3d failed, %3d skipped%s" % (name, counts["passed"], counts["failed"],
                                                           counts["skipped"], late)


def main(argv):
    native, rc_native = outcomes(argv[1]), int(argv[2])
    over_rap, rc_rap = outcomes(argv[3]), int(argv[4])
    print(line("native", native, rc_native))
    print(line("rap", over_rap, rc_rap))
    failed = sorted(t for t, k in over_rap.items() if k == "failed")
    also = [t for t in failed if native.get(t) == "failed"]
    only = [t for t in failed if native.get(t) != "failed"]
    print("rap's failures: %d, %d of them failing natively too, %d under rap only"
          % (len(failed), len(also), len(only)))
    for t in only:
        print("  rap only: %s%s" % (t, "" if t in native else " (not reached natively)"))
    if not over_rap:
        print("no test outcome found in the rap run's log")
    return 1 if only or not over_rap else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
