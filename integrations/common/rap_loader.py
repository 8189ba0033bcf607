"""rap_loader — what rap_torch and rap_cupy share: finding their shared library, loading it with
the entry points both libraries have (rap_glue.c behind a prefix), and reading its statistics.

Standard library only; nothing here imports a framework. In the source tree this file is
integrations/common/rap_loader.py; a build copies it next to each module
(<build>/integrations/torch/, <build>/integrations/cupy/), and each module loads the copy next to
itself first (see _loader() in rap_torch.py and rap_cupy.py).
"""

import ctypes
import os

# rap_<name>_stat_values fills these, in this order (glue_stat_values, rap_glue.h); a library may
# report fewer.
STATS = ("current", "peak", "reserved", "peak_reserved", "pending", "pending_count", "free",
         "releasable", "largest_free", "allocations", "blocks", "chunks", "used", "streams",
         "graph_pools", "deferred", "allocs_total", "alloc_bytes_total", "ooms", "base_count",
         "base_bytes", "waits", "host_waits")


def library_path(name, module_file):
    """Where librap_<name>.so is: $RAP_<NAME>_LIB, else next to module_file (a build), else under
    <repo>/device-build, <repo>/build or <repo>/build-rel (module_file in <repo>/integrations/<name>).
    Raises FileNotFoundError naming the places it looked."""
    lib = "librap_%s.so" % name
    var = "RAP_%s_LIB" % name.upper()
    env = os.environ.get(var)
    if env:
        return env
    here = os.path.dirname(os.path.abspath(module_file))
    candidates = [os.path.join(here, lib)]
    root = os.path.dirname(os.path.dirname(here))
    for build in ("device-build", "build", "build-rel"):
        candidates.append(os.path.join(root, build, "integrations", name, lib))
    for c in candidates:
        if os.path.exists(c):
            return c
    raise FileNotFoundError("%s not found (set %s); looked at %s" % (lib, var, ", ".join(candidates)))


def load(path, name):
    """ctypes.CDLL(path) with the signatures of the entry points every integration has; the module
    declares its own on top."""
    lib = ctypes.CDLL(path)
    sz = ctypes.c_size_t
    prefix = "rap_%s_" % name
    getattr(lib, prefix + "release_graph_pools").restype = sz
    stat_values = getattr(lib, prefix + "stat_values")
    stat_values.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(sz), sz]
    stat_values.restype = ctypes.c_int
    getattr(lib, prefix + "stat_count").restype = ctypes.c_int
    getattr(lib, prefix + "spec").argtypes = [ctypes.c_int, ctypes.c_char_p, sz]
    getattr(lib, prefix + "last_error").restype = ctypes.c_char_p
    return lib


def last_error(lib, name):
    return getattr(lib, "rap_%s_last_error" % name)().decode()


def memory_stats(lib, name, device, graph):
    """{STATS[i]: value} for device's pool (graph: summed over its CUDA-graph pools); two C calls.
    Raises RuntimeError("rap_<name>: <the library's last error>")."""
    n = getattr(lib, "rap_%s_stat_count" % name)()
    out = (ctypes.c_size_t * n)()
    if getattr(lib, "rap_%s_stat_values" % name)(device, 1 if graph else 0, out, n) != 0:
        raise RuntimeError("rap_%s: %s" % (name, last_error(lib, name)))
    return {k: out[i] for i, k in enumerate(STATS[:n])}


def spec(lib, name, device):
    """The spec device's pool is (or would be) made from."""
    buf = ctypes.create_string_buffer(1024)
    getattr(lib, "rap_%s_spec" % name)(device, buf, len(buf))
    return buf.value.decode()
