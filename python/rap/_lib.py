"""rap._lib — librap.so through ctypes: where it is, and the signature of every entry point the
package calls (include/rap/rap.h and rap/cuda.h), declared once when it is first loaded.

Every call but the few that return a name or a pointer returns rap's int status; errors.py turns
a refusal into an exception. The C callbacks' types (host queue jobs, the log handler, the out of
memory handler) are here too, since the signatures name them.
"""

import ctypes
import os

_here = os.path.dirname(os.path.abspath(__file__))
_lib = None

P = ctypes.c_void_p
PP = ctypes.POINTER(ctypes.c_void_p)
SIZE = ctypes.c_size_t

# The fields of rap_stats, in order (rap.h). rap_allocator_stats_sized is told the size of the
# struct passed, so a library older than this list fills what it knows and zeroes nothing past it.
STATS = ("current_bytes", "high_watermark", "actual_bytes", "actual_high_watermark",
         "releasable_bytes", "free_bytes", "pending_bytes", "largest_free_block",
         "allocation_count", "block_count", "pending_count", "chunk_count", "used_bytes",
         "cached_bytes", "cached_count", "waits", "host_waits", "maps", "unmaps", "backup_bytes")


class Stats(ctypes.Structure):
    _fields_ = [(n, SIZE) for n in STATS]


class IpcDesc(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 64)]


JOB = ctypes.CFUNCTYPE(None, P)
LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, P)
OOM_FN = ctypes.CFUNCTYPE(ctypes.c_int, P, SIZE, P, ctypes.c_int, P)

# name -> argument types; each returns an int status.
_STATUS_CALLS = {
    "rap_spec_check": [ctypes.c_char_p],
    "rap_log_set_handler": [LOG_FN, P], "rap_log_set_level": [ctypes.c_int],
    "rap_log_get_level": [],
    "rap_trace_start": [ctypes.c_char_p], "rap_trace_stop": [], "rap_trace_flush": [],
    "rap_manager_create": [PP], "rap_manager_destroy": [P],
    "rap_allocator_make_spec": [P, ctypes.c_char_p, ctypes.c_char_p, PP],
    "rap_allocator_destroy": [P],
    "rap_allocate": [P, PP, SIZE, P], "rap_deallocate": [P, P, P], "rap_release": [P],
    "rap_allocator_check": [P], "rap_record_resource": [P, P, P],
    "rap_allocator_set_oom_handler": [P, OOM_FN, P],
    "rap_allocator_stats_sized": [P, ctypes.POINTER(Stats), SIZE],
    "rap_allocator_resource_stats_sized": [P, P, ctypes.POINTER(Stats), SIZE],
    "rap_allocator_reset_peaks": [P],
    "rap_allocator_memory_info": [P, ctypes.POINTER(SIZE), ctypes.POINTER(SIZE)],
    "rap_allocator_set_peer_access": [P, ctypes.c_int, ctypes.c_int],
    "rap_device_pointer": [P, P, PP],
    "rap_allocator_sleep": [P, ctypes.c_int], "rap_allocator_wake": [P],
    "rap_allocator_is_asleep": [P],
    "rap_ipc_export": [P, P, ctypes.POINTER(IpcDesc)],
    "rap_ipc_import": [P, ctypes.POINTER(IpcDesc), P, PP],
    "rap_ipc_close": [P, P, P], "rap_ipc_revoke": [P, ctypes.POINTER(IpcDesc)],
    "rap_resource_create_host_async": [P, PP], "rap_resource_create_cuda": [P, P, PP],
    "rap_resource_submit": [P, JOB, P], "rap_resource_synchronize": [P],
    "rap_resource_destroy": [P], "rap_resource_set_call_scoped": [P, ctypes.c_int],
}
_NAME_CALLS = {"rap_version": [], "rap_last_error": [], "rap_status_name": [ctypes.c_int],
               "rap_allocator_name": [P], "rap_allocator_strategy": [P]}


def library_path(name=None):
    """Where the package's shared library is: librap.so (name None), librap_torch.so ("torch") or
    librap_cupy.so ("cupy"). RAP_LIB replaces librap.so's. Raises FileNotFoundError."""
    if name is None:
        env = os.environ.get("RAP_LIB")
        if env:
            return env
        path = os.path.join(_here, "librap.so")
    else:
        path = os.path.join(_here, "librap_%s.so" % name)
    if not os.path.exists(path):
        raise FileNotFoundError("%s is not in this rap package (%s)%s" % (
            os.path.basename(path), _here,
            "; it is built only where CUDA is" if name is not None else ""))
    return path


def library():
    """librap.so, loaded once, with its signatures declared."""
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(library_path())
        for name, args in _STATUS_CALLS.items():
            f = getattr(lib, name)
            f.argtypes = args
            f.restype = ctypes.c_int
        for name, args in _NAME_CALLS.items():
            f = getattr(lib, name)
            f.argtypes = args
            f.restype = ctypes.c_char_p
        lib.rap_allocator_parent.argtypes = [P]
        lib.rap_allocator_parent.restype = P
        _lib = lib
    return _lib
