"""rap — memory-pool strategies for GPU and host memory, from Python.

    import rap
    rap.version()                         # the C library's version, also rap.__version__
    rap.check_spec("QuickPool(HOST)")     # True, or ValueError with rap's sentence
    pool = rap.Allocator("ResourceAwarePool(DEVICE, initial_size=1GiB)")
    ptr = pool.allocate(1 << 20, stream)  # an int address, as rmm.mr's allocate
    pool.deallocate(ptr, 1 << 20, stream) # or pool.free(ptr, stream)
    pool.stats(); pool.release(); pool.close()
    import rap.torch; rap.torch.enable()  # PyTorch's CUDA tensors on rap
    import rap.cupy; rap.cupy.enable()    # CuPy's arrays on rap

The package carries its shared libraries: librap.so (the C library), and librap_torch.so and
librap_cupy.so (self-contained: rap and the CUDA runtime linked in) where the build had CUDA. They
are loaded with ctypes, not as Python extensions. rap.torch and rap.cupy are the integrations'
modules (rap_torch and rap_cupy in the source tree: docs/integrations.md). The package also
carries the rap-trace program, which the wheel installs as a console script (rap/_trace_cli.py).

This file and _trace_cli.py are the only Python sources kept here; the build assembles the package
around them (python/CMakeLists.txt) from integrations/ and the build's libraries and tools.
"""

import ctypes
import os

__all__ = ["version", "check_spec", "library_path", "Allocator", "HostQueue", "Error"]

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
        P = ctypes.c_void_p
        for name, args in {
                "rap_manager_create": [ctypes.POINTER(P)], "rap_manager_destroy": [P],
                "rap_allocator_make_spec": [P, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(P)],
                "rap_allocate": [P, ctypes.POINTER(P), ctypes.c_size_t, P],
                "rap_deallocate": [P, P, P], "rap_release": [P],
                "rap_allocator_stats_sized": [P, ctypes.POINTER(_Stats), ctypes.c_size_t],
                "rap_allocator_destroy": [P],
                "rap_resource_create_host_async": [P, ctypes.POINTER(P)],
                "rap_resource_create_cuda": [P, P, ctypes.POINTER(P)],
                "rap_resource_submit": [P, _JOB, P], "rap_resource_synchronize": [P],
                "rap_resource_destroy": [P], "rap_status_name": [ctypes.c_int]}.items():
            getattr(lib, name).argtypes = args
            getattr(lib, name).restype = ctypes.c_int
        lib.rap_status_name.restype = ctypes.c_char_p
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


_STATS = ("current_bytes", "high_watermark", "actual_bytes", "actual_high_watermark",
          "releasable_bytes", "free_bytes", "pending_bytes", "largest_free_block",
          "allocation_count", "block_count", "pending_count", "chunk_count", "used_bytes",
          "cached_bytes", "cached_count")


class _Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in _STATS]


_JOB = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Error(RuntimeError):
    """A rap call refused: status is rap's name for it ("RAP_ERR_BUSY"), the text its sentence."""

    def __init__(self, status, sentence):
        super().__init__(sentence)
        self.status = status


def _raise(lib, st):
    sentence = lib.rap_last_error().decode()
    name = lib.rap_status_name(st).decode()
    if name == "RAP_ERR_NOMEM":
        raise MemoryError(sentence)
    if name == "RAP_ERR_INVALID":
        raise ValueError(sentence)
    raise Error(name, sentence)


def _stream_handle(stream):
    """A CUDA stream as its cudaStream_t: an int, or an object carrying one as PyTorch
    (cuda_stream), CuPy (ptr) and rmm/cuda-python (handle, or int()) do."""
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if v is not None:
            stream = v
            break
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise TypeError("a stream is None, a HostQueue, an int cudaStream_t or an object with "
                        "cuda_stream, ptr or handle, not %s" % type(stream).__name__) from None


class HostQueue:
    """A CPU work queue (rap's host_async resource): a stream of execution without a GPU. Blocks
    freed on it stay pending until the work submitted before the free has run."""

    def __init__(self, allocator):
        self._alloc = allocator
        self._r = ctypes.c_void_p()
        allocator._check(allocator._lib.rap_resource_create_host_async(allocator._rm,
                                                                        ctypes.byref(self._r)))
        self._jobs = []   # the ctypes callbacks must outlive their run

    def submit(self, fn):
        """Runs fn() on the queue's thread, after everything submitted before it."""
        def run(_):
            fn()
        job = _JOB(run)
        self._jobs.append(job)
        self._alloc._check(self._alloc._lib.rap_resource_submit(self._r, job, None))

    def synchronize(self):
        self._alloc._check(self._alloc._lib.rap_resource_synchronize(self._r))
        self._jobs.clear()


class Allocator:
    """A pool made from a rap spec, for Python users outside PyTorch and CuPy, with rmm.mr's
    calls: allocate(nbytes, stream) returns an int address; deallocate(ptr, nbytes, stream) or
    free(ptr, stream) gives it back (the stream it was last used on: the block stays pending
    until that stream has passed the free); stats() is a dict of rap_stats; release() gives
    wholly free chunks back. A stream is None (the host), a HostQueue, or a CUDA stream (an int
    cudaStream_t, a torch.cuda.Stream, a cupy stream). Each Allocator has a manager of its own;
    close() (or the end of a with block) destroys both. Not safe for threads unless the spec
    says so: "ThreadSafe(...)" or "ThreadCache(...)"."""

    def __init__(self, spec, name="python"):
        if not isinstance(spec, str):
            raise TypeError("Allocator takes a spec str, not %s" % type(spec).__name__)
        self._lib = _library()
        self._rm = ctypes.c_void_p()
        self._a = None
        self._streams = {}
        self._check(self._lib.rap_manager_create(ctypes.byref(self._rm)))
        a = ctypes.c_void_p()
        st = self._lib.rap_allocator_make_spec(self._rm, name.encode(), spec.encode(), ctypes.byref(a))
        if st != 0:
            sentence_st = st
            try:
                _raise(self._lib, sentence_st)
            finally:
                self._lib.rap_manager_destroy(self._rm)
                self._rm = None
        self._a = a
        self.spec = spec

    def _check(self, st):
        if st != 0:
            _raise(self._lib, st)

    def _resource(self, stream):
        if stream is None:
            return None
        if isinstance(stream, HostQueue):
            return stream._r
        handle = _stream_handle(stream)
        r = self._streams.get(handle)
        if r is None:
            r = ctypes.c_void_p()
            self._check(self._lib.rap_resource_create_cuda(self._rm, ctypes.c_void_p(handle),
                                                           ctypes.byref(r)))
            self._streams[handle] = r
        return r

    def _live(self):
        if self._a is None:
            raise ValueError("this rap.Allocator is closed")
        return self._a

    def allocate(self, nbytes, stream=None):
        """The address of nbytes of memory usable on stream, as an int."""
        p = ctypes.c_void_p()
        self._check(self._lib.rap_allocate(self._live(), ctypes.byref(p), nbytes,
                                           self._resource(stream)))
        return p.value or 0

    def free(self, ptr, stream=None):
        """Gives ptr back on stream (None: the stream that owns it)."""
        self._check(self._lib.rap_deallocate(self._live(), ctypes.c_void_p(ptr),
                                             self._resource(stream)))

    def deallocate(self, ptr, nbytes=None, stream=None):
        """rmm.mr's spelling of free: nbytes is accepted and not needed."""
        self.free(ptr, stream)

    def stats(self):
        s = _Stats()   # its size goes with it: a library older or newer than _STATS fills what fits
        self._check(self._lib.rap_allocator_stats_sized(self._live(), ctypes.byref(s),
                                                        ctypes.sizeof(s)))
        return {n: getattr(s, n) for n in _STATS}

    def release(self):
        """Gives every wholly free chunk back to the memory below."""
        self._check(self._lib.rap_release(self._live()))

    def host_queue(self):
        """A new HostQueue of this allocator's manager."""
        return HostQueue(self)

    def close(self):
        """Destroys the pool and its manager; Error (RAP_ERR_BUSY) names leaked blocks."""
        if self._rm is None:
            return
        rm, self._rm, self._a = self._rm, None, None
        self._check(self._lib.rap_manager_destroy(rm))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._rm is not None:
                self._lib.rap_manager_destroy(self._rm)
        except Exception:
            pass

    def __repr__(self):
        return "rap.Allocator(%r)" % (getattr(self, "spec", "?"),)


def __dir__():
    return sorted(__all__ + ["__version__"])


def __getattr__(name):
    if name == "__version__":
        return version()
    raise AttributeError("module 'rap' has no attribute %r" % (name,))
