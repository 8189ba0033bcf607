"""rap — memory-pool strategies for GPU and host memory, from Python.

    import rap
    rap.version()                         # the C library's version, also rap.__version__
    rap.check_spec("QuickPool(HOST)")     # True, or rap.InvalidError (a ValueError) with rap's sentence
    pool = rap.Allocator("ResourceAwarePool(DEVICE, initial_size=1GiB)")
    ptr = pool.allocate(1 << 20, stream)  # an int address, as rmm.mr's allocate
    pool.deallocate(ptr, 1 << 20, stream) # or pool.free(ptr, stream)
    buf = pool.buffer(1 << 20, stream)    # a rap.Buffer: frees itself; CUDA array interface, DLPack
    pool.stats(); pool.reset_peaks(); pool.memory_info(); pool.release(); pool.close()
    pool.sleep(); pool.wake()             # a pool over DEVICE_VMM gives its memory back
    h = pool.share(buf); other.open(h)    # a block in another process
    rap.set_log_handler(fn); rap.trace_start("run.jsonl")
    import rap.torch; rap.torch.enable()  # PyTorch's CUDA tensors on rap
    import rap.cupy; rap.cupy.enable()    # CuPy's arrays on rap
    import rap.numba                      # Numba's device arrays (NUMBA_CUDA_MEMORY_MANAGER=rap.numba)
    import rap.cuda_core                  # a cuda.core MemoryResource

Refusals are rap.Error, one class per status (rap.errors): rap.OutOfMemoryError is also a
MemoryError, rap.InvalidError a ValueError; .status is rap's name ("RAP_ERR_BUSY").

The package carries its shared libraries: librap.so (the C library), and librap_torch.so and
librap_cupy.so (self-contained: rap and the CUDA runtime linked in) where the build had CUDA. They
are loaded with ctypes, not as Python extensions. rap.torch and rap.cupy are the integrations'
modules (rap_torch and rap_cupy in the source tree: docs/integrations.md). The package also
carries the rap-trace program, which the wheel installs as a console script (rap/_trace_cli.py).

The core is this directory's modules: _lib (loading librap.so), errors, _allocator (Allocator,
HostQueue), _buffer (Buffer, IpcHandle), _dlpack, _driver (the few CUDA driver calls of Buffer),
_process (log and trace), and numba and cuda_core (the integrations that need no library of their
own); the build assembles the package around them (python/CMakeLists.txt) from integrations/.
"""

from . import errors
from ._allocator import Allocator, HostQueue
from ._buffer import Buffer, IpcHandle
from ._lib import library, library_path
from ._process import (LOG_LEVELS, log_level, set_log_handler, set_log_level, trace_flush,
                       trace_start, trace_stop)
from .errors import (BackendError, BusyError, CorruptError, Error, ExistsError, InvalidError,
                     NotFoundError, OutOfMemoryError, UnknownPointerError, UnsupportedError,
                     WrongResourceError)

__all__ = ["version", "check_spec", "device_pool", "DEFAULT_DEVICE_SPEC", "FALLBACK_DEVICE_SPEC",
           "library_path", "Allocator", "HostQueue", "Buffer",
           "IpcHandle", "set_log_handler", "set_log_level", "log_level", "LOG_LEVELS",
           "trace_start", "trace_stop", "trace_flush", "status_name"] + errors.__all__


def version():
    """The C library's version, "MAJOR.MINOR.PATCH"."""
    return library().rap_version().decode()


# rap/rap.h's RAP_DEFAULT_DEVICE_SPEC and RAP_FALLBACK_DEVICE_SPEC ("{device}": the device number):
# the pool every integration makes for a device when the user names none, and what it makes where
# the driver refuses the first's platform (tests/python checks that the two files agree).
DEFAULT_DEVICE_SPEC = ("ResourceAwarePool(DeviceVmm(device={device}, export=posix), initial_size=64MiB, "
                       "next_size=32MiB, heuristic=never, cross_resource=wait, wait_above=512MiB, "
                       "wait_pending_above=512MiB)")
FALLBACK_DEVICE_SPEC = ("ResourceAwarePool(DEVICE::{device}, initial_size=64MiB, next_size=32MiB, "
                        "heuristic=never, cross_resource=wait, wait_above=512MiB, "
                        "wait_pending_above=512MiB)")


def device_pool(device, name, spec=None):
    """A rap.Allocator for CUDA device `device` named `name`: from spec ("{device}" replaced), or,
    spec None, from DEFAULT_DEVICE_SPEC, falling back to FALLBACK_DEVICE_SPEC where the driver
    refuses the growable, exportable platform (rap.UnsupportedError). A named spec is never
    replaced."""
    if spec is not None:
        return Allocator(spec.replace("{device}", str(device)), name=name)
    try:
        return Allocator(DEFAULT_DEVICE_SPEC.replace("{device}", str(device)), name=name)
    except errors.UnsupportedError:
        return Allocator(FALLBACK_DEVICE_SPEC.replace("{device}", str(device)), name=name)


def check_spec(spec):
    """True when an allocator could be made from spec, such as
    "ThreadSafe(ResourceAwarePool(SizeLimiter(DEVICE, limit=8GiB), initial_size=1GiB))";
    rap.InvalidError (a ValueError) with rap's sentence when it could not. Names, options and
    values are checked as rap_allocator_make checks them; device specs are checked without a
    device (their memory stands in as the host's), and nothing is allocated."""
    if not isinstance(spec, str):
        raise TypeError("check_spec takes a str, not %s" % type(spec).__name__)
    lib = library()
    errors.check(lib, lib.rap_spec_check(spec.encode()))
    return True


def status_name(code):
    """rap's name of a status code: status_name(-2) == "RAP_ERR_NOMEM"."""
    return library().rap_status_name(int(code)).decode()


def __dir__():
    return sorted(__all__ + ["__version__", "errors"])


def __getattr__(name):
    if name == "__version__":
        return version()
    raise AttributeError("module 'rap' has no attribute %r" % (name,))
