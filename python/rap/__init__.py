"""rap — memory-pool strategies for GPU and host memory, from Python.

    import rap
    rap.version()                         # the C library's version, also rap.__version__
    rap.check_spec("QuickPool(HOST)")     # True, or ValueError with rap's sentence
    import rap.torch; rap.torch.enable()  # PyTorch's CUDA tensors on rap
    import rap.cupy; rap.cupy.enable()    # CuPy's arrays on rap

The package carries its shared libraries: librap.so (the C library), and librap_torch.so and
librap_cupy.so (self-contained: rap and the CUDA runtime linked in) where the build had CUDA. They
are loaded with ctypes, not as Python extensions. rap.torch and rap.cupy are the integrations'
modules (rap_torch and rap_cupy in the source tree: docs/integrations.md).

This file is the only Python source kept here; the build assembles the package around it
(python/CMakeLists.txt) from integrations/.
"""

import ctypes
import os

__all__ = ["version", "check_spec", "library_path"]

_here = os.path.dirname(os.path.abspath(__file__))
_lib = None


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


def _library():
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(library_path())
        lib.rap_version.restype = ctypes.c_char_p
        lib.rap_version.argtypes = []
        lib.rap_spec_check.restype = ctypes.c_int
        lib.rap_spec_check.argtypes = [ctypes.c_char_p]
        lib.rap_last_error.restype = ctypes.c_char_p
        lib.rap_last_error.argtypes = []
        _lib = lib
    return _lib


def version():
    """The C library's version, "MAJOR.MINOR.PATCH"."""
    return _library().rap_version().decode()


def check_spec(spec):
    """True when an allocator could be made from spec, such as
    "ThreadSafe(ResourceAwarePool(SizeLimiter(DEVICE, limit=8GiB), initial_size=1GiB))";
    ValueError with rap's sentence when it could not. Names, options and values are checked as
    rap_allocator_make checks them; device specs are checked without a device (their memory
    stands in as the host's), and nothing is allocated."""
    if not isinstance(spec, str):
        raise TypeError("check_spec takes a str, not %s" % type(spec).__name__)
    lib = _library()
    if lib.rap_spec_check(spec.encode()) != 0:
        raise ValueError(lib.rap_last_error().decode())
    return True


def __getattr__(name):
    if name == "__version__":
        return version()
    raise AttributeError("module 'rap' has no attribute %r" % (name,))
