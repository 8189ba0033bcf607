"""numba_suite_shims.py — TEST-ONLY shims for numba-cuda's own tests as scripts/device-numba-suite.sh
runs them: a pytest plugin (-p numba_suite_shims) loaded by both runs, the native one and the one
over rap.numba alike, so that they differ only in NUMBA_CUDA_MEMORY_MANAGER. Nothing here is part
of rap or of rap.numba.

- The fixture initialize_from_pytest_config, which numba-cuda's CUDATestCase asks for and which
  only its repository's testing/conftest.py defines (not installed with the package).
- Where no module filecheck is installed (numba.cuda.testing imports it at the top): stand-ins
  whose first use skips the test. Only the FileCheck comparisons of generated code use it.
- With RAP_NUMBA_ROW_STACK_SHIM=1, where numpy has no row_stack: numpy.row_stack = numpy.vstack in
  this process (and the xdist workers, which load the plugin too; not in processes a test spawns).
  numba-cuda 0.21 to 0.30.4 registers an overload of np.row_stack when it loads its CUDA target
  (numba/cuda/np/arrayobj.py, at the first kernel compile), and numpy 2.5 removed it: without the
  shim no kernel compiles there, natively or over rap.

install() does all this and says what it did (applied()); the script's probe calls it directly.
"""

import importlib.util
import os
import sys
import types
import unittest

_applied = []

NO_FILECHECK = ("filecheck is not installed here: this FileCheck comparison is skipped "
                "(numba_suite_shims, in both runs)")


class _SkipOnUse:
    def __init__(self, *args, **kwargs):
        raise unittest.SkipTest(NO_FILECHECK)


def _skip_on_use(*args, **kwargs):
    raise unittest.SkipTest(NO_FILECHECK)


def _stand_in_filecheck():
    top = types.ModuleType("filecheck")
    top.__path__ = []
    top.RAP_STAND_IN = True
    parts = {"matcher": {"Matcher": _SkipOnUse}, "options": {"Options": _SkipOnUse},
             "parser": {"Parser": _SkipOnUse, "pattern_for_opts": _skip_on_use},
             "finput": {"FInput": _SkipOnUse}}
    sys.modules["filecheck"] = top
    for name, attrs in parts.items():
        m = types.ModuleType("filecheck." + name)
        m.__dict__.update(attrs)
        sys.modules[m.__name__] = m
        setattr(top, name, m)


def install():
    """The shims this process needs (once)."""
    if _applied:
        return
    _applied.append("fixture initialize_from_pytest_config")
    if "filecheck" not in sys.modules and importlib.util.find_spec("filecheck") is None:
        _stand_in_filecheck()
        _applied.append("filecheck stand-in (FileCheck tests skip)")
    if os.environ.get("RAP_NUMBA_ROW_STACK_SHIM") == "1":
        import numpy
        if not hasattr(numpy, "row_stack"):
            numpy.row_stack = numpy.vstack
            _applied.append("numpy.row_stack = numpy.vstack")


def applied():
    return list(_applied)


install()

try:
    import pytest
except ImportError:   # the probe imports this module without pytest
    pytest = None

if pytest is not None:
    @pytest.fixture(scope="class")
    def initialize_from_pytest_config(request):
        """What numba-cuda's testing/conftest.py gives CUDATestCase: no reproducers dumped."""
        request.cls._dump_failed_filechecks = False

    def pytest_report_header(config):
        return "numba_suite_shims (test-only, both runs): " + "; ".join(_applied)
