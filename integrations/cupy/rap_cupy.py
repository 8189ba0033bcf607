"""rap_cupy — CuPy arrays on rap's ResourceAwarePool.

    import rap_cupy
    rap_cupy.enable()
    with cupy.cuda.Stream() as s:
        a = cupy.arange(10)     # a's memory belongs to s: freed, it is pending on s

enable() loads librap_cupy.so and installs it through cupy.cuda.memory.CFunctionAllocator. Each
device gets one ResourceAwarePool, made from RAP_CUPY_SPEC ("{device}" stands for the device
number) or from "ResourceAwarePool(DEVICE::{device}, initial_size=64MiB, next_size=32MiB,
heuristic=never)".

CuPy's C allocator ABI carries no stream, so the library must learn CuPy's current stream at each
allocation. enable() hands it CuPy's own C function for that, taken from CuPy's Cython C-API table
(cupy_backends.cuda.stream.__pyx_capi__: get_stream_ptr(int device) or get_current_stream_ptr()),
after checking its signature; that costs one C call per allocation. Where that table is missing
or has another signature, enable() falls back to a Python wrapper that binds
cupy.cuda.get_current_stream().ptr to the thread before each allocation (a few microseconds
more); enable(stream_source="python") or RAP_CUPY_STREAM_SOURCE=python asks for that one.
stream_source() says which one is in use.

CuPy's allocator does not check for NULL, so the installed allocator is a thin Python function
that raises cupy.cuda.memory.OutOfMemoryError when rap returns none.

Streams: a cupy.cuda.Stream destroys its handle when collected, while blocks freed on it may still
be pending there. enable() therefore wraps Stream.__del__: when rap knows the stream, rap takes
the handle over and destroys it once no block needs it.

The library is found from RAP_CUPY_LIB, next to this file, or under <repo>/device-build or
<repo>/build. Finding and loading it is integrations/common/rap_loader.py, shared with rap_torch;
a build copies it next to this file.
"""

import ctypes
import importlib.util
import os

import cupy

__all__ = [
    "enable", "enabled", "library_path", "stream_source", "record_stream", "pointer_stream",
    "memory_stats", "used_bytes", "reserved_bytes", "pending_bytes", "empty_cache",
    "release_graph_pools", "spec",
]


def _import_loader():
    """rap_loader, which this module shares with rap_torch: the copy a build puts next to this
    file, else integrations/common/rap_loader.py in the source tree (also through a symlink)."""
    tried = []
    for f in (__file__, os.path.realpath(__file__)):
        here = os.path.dirname(os.path.abspath(f))
        for path in (os.path.join(here, "rap_loader.py"),
                     os.path.join(os.path.dirname(here), "common", "rap_loader.py")):
            if path in tried:
                continue
            if os.path.exists(path):
                found = importlib.util.spec_from_file_location("rap_loader", path)
                module = importlib.util.module_from_spec(found)
                found.loader.exec_module(module)
                return module
            tried.append(path)
    raise ImportError("rap_cupy: rap_loader.py not found; looked at " + ", ".join(tried))


_loader = _import_loader()

# Cython C-API entries that return CuPy's current stream, with the C signature we call them by
# (a capsule's name is its signature; an exception clause after it does not change the call).
_SOURCES = (
    ("cupy_backends.cuda.stream", "get_stream_ptr", b"intptr_t (int)", 1),
    ("cupy_backends.cuda.stream", "get_current_stream_ptr", b"intptr_t (void)", 0),
    ("cupy.cuda.stream", "get_current_stream_ptr", b"intptr_t (void)", 0),
)

_lib = None
_source = None
_c_allocator = None


def library_path():
    """Where librap_cupy.so is: RAP_CUPY_LIB, next to this file, or under <repo>/device-build,
    <repo>/build or <repo>/build-rel."""
    return _loader.library_path("cupy", __file__)


def _load(path):
    lib = _loader.load(path, "cupy")
    vp, sz, ip = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_ssize_t
    lib.rap_cupy_malloc_on.argtypes = [sz, ctypes.c_int, ip]
    lib.rap_cupy_malloc_on.restype = vp
    lib.rap_cupy_set_stream_source.argtypes = [vp, ctypes.c_int]
    lib.rap_cupy_set_stream_source.restype = None
    lib.rap_cupy_bind_stream.argtypes = [ip]
    lib.rap_cupy_bind_stream.restype = None
    lib.rap_cupy_current_stream.argtypes = [ctypes.c_int]
    lib.rap_cupy_current_stream.restype = ip
    lib.rap_cupy_record_stream.argtypes = [vp, ip]
    lib.rap_cupy_pointer_stream.argtypes = [vp, ctypes.c_int]
    lib.rap_cupy_pointer_stream.restype = ip
    lib.rap_cupy_stream_retire.argtypes = [ip]
    return lib


def _capi_source():
    """(address, takes_device, description) of CuPy's current-stream C function, or None."""
    import importlib
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.argtypes = [ctypes.py_object]
    get_name.restype = ctypes.c_char_p
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    get_pointer.restype = ctypes.c_void_p
    seen = []
    for module, name, signature_wanted, takes_device in _SOURCES:
        try:
            capi = importlib.import_module(module).__pyx_capi__
            capsule = capi[name]
        except (ImportError, AttributeError, KeyError):
            continue
        signature = get_name(capsule)
        seen.append("%s.%s: %r" % (module, name, signature))
        if signature is not None and (signature == signature_wanted or
                                      signature.startswith(signature_wanted + b" ")):
            address = get_pointer(capsule, signature)
            if address:
                return address, takes_device, "%s.%s %s" % (module, name, signature.decode())
    return None, 0, "; ".join(seen) or "no C-API table found"


def enabled():
    return _lib is not None


def stream_source():
    """How the library learns CuPy's current stream: 'capi: ...' or 'python: ...'."""
    return _source


def enable(spec=None, stream_source=None):
    """Makes rap CuPy's allocator (for every device).

    stream_source: "auto" (CuPy's C function when its signature checks out, else "python") or
    "python"; default from RAP_CUPY_STREAM_SOURCE, else "auto".
    """
    global _lib, _source, _c_allocator
    if _lib is not None:
        return
    if spec is not None:
        os.environ["RAP_CUPY_SPEC"] = spec
    if stream_source is None:
        stream_source = os.environ.get("RAP_CUPY_STREAM_SOURCE", "auto")
    if stream_source not in ("auto", "python"):
        raise ValueError("stream_source is 'auto' or 'python', not %r" % (stream_source,))
    lib = _load(library_path())
    if stream_source == "python":
        address, takes_device, what = None, 0, "not used: stream_source='python'"
    else:
        address, takes_device, what = _capi_source()
    malloc_fn = ctypes.cast(lib.rap_cupy_malloc, ctypes.c_void_p).value
    free_fn = ctypes.cast(lib.rap_cupy_free, ctypes.c_void_p).value
    c_allocator = cupy.cuda.memory.CFunctionAllocator(0, malloc_fn, free_fn, lib)
    c_malloc = c_allocator.malloc

    if address:
        lib.rap_cupy_set_stream_source(address, takes_device)
        _source = "capi: " + what

        def malloc(size):
            mem = c_malloc(size)
            if size and not mem.ptr:
                _raise_oom(size)
            return mem
    else:
        bind = lib.rap_cupy_bind_stream
        current = cupy.cuda.get_current_stream
        _source = "python: cupy.cuda.get_current_stream() per allocation (C API: %s)" % what

        def malloc(size):
            bind(current().ptr)
            mem = c_malloc(size)
            if size and not mem.ptr:
                _raise_oom(size)
            return mem

    _lib = lib
    _c_allocator = c_allocator
    cupy.cuda.set_allocator(malloc)
    _wrap_stream_del()


def _raise_oom(size):
    try:
        held = reserved_bytes()
    except Exception:  # the statistics must not hide the out-of-memory error
        held = 0
    raise cupy.cuda.memory.OutOfMemoryError(size, held, 0)


def _wrap_stream_del():
    stream_class = cupy.cuda.Stream
    original = stream_class.__del__

    def __del__(self, *args, **kwargs):
        ptr = getattr(self, "ptr", 0)
        if (_lib is not None and ptr not in (0, 1, 2) and
                getattr(self, "_foreign_stream_ref", None) is None):
            try:
                if _lib.rap_cupy_stream_retire(ptr) == 1:
                    return   # rap destroys the handle once no block needs it
            except Exception:
                pass
        original(self, *args, **kwargs)

    stream_class.__del__ = __del__


def _need():
    if _lib is None:
        raise RuntimeError("rap_cupy.enable() has not been called")


def record_stream(array, stream):
    """array's memory is also used on stream: when freed it stays pending until stream passes."""
    _need()
    ptr = array.data.mem.ptr
    if _lib.rap_cupy_record_stream(ptr, stream.ptr) != 0:
        raise RuntimeError("rap_cupy: " + _lib.rap_cupy_last_error().decode())


def pointer_stream(array):
    """The stream (handle) that owns array's memory, or None."""
    _need()
    s = _lib.rap_cupy_pointer_stream(array.data.mem.ptr, array.data.device_id)
    return None if s == -1 else s


def memory_stats(device=None, graph=False):
    _need()
    dev = cupy.cuda.runtime.getDevice() if device is None else int(device)
    return _loader.memory_stats(_lib, "cupy", dev, graph)


def used_bytes(device=None):
    return memory_stats(device)["current"]


def reserved_bytes(device=None):
    return memory_stats(device)["reserved"]


def pending_bytes(device=None):
    return memory_stats(device)["pending"]


def empty_cache():
    _need()
    _lib.rap_cupy_empty_cache()


def release_graph_pools():
    _need()
    return _lib.rap_cupy_release_graph_pools()


def spec(device=0):
    lib = _lib if _lib is not None else _load(library_path())
    return _loader.spec(lib, "cupy", int(device))
