"""rap-trace as the wheel installs it: the console script `rap-trace` runs the program of that name
that the package carries beside this file (the C tool of the build, tools/rap_trace.c), with the
same arguments, output and exit status.

    rap-trace summary TRACE | replay TRACE --spec SPEC | plot TRACE -o FILE.svg | --help | --version
"""

import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rap-trace")
    if not os.access(exe, os.X_OK):
        sys.stderr.write("rap-trace: %s is not in this rap package, or not executable; the wheel "
                         "(python/build_wheel.py) carries it\n" % exe)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [exe] + sys.argv[1:])
    return 1   # not reached: execv replaces this process or raises


if __name__ == "__main__":
    sys.exit(main())
