"""rap_cupy — CuPy arrays on rap's ResourceAwarePool.

    import rap_cupy
    rap_cupy.enable()
    with cupy.cuda.Stream() as s:
        a = cupy.arange(10)     # a's memory belongs to s: freed, it is pending on s

enable() loads librap_cupy.so and installs it through cupy.cuda.memory.CFunctionAllocator. Each
device gets one ResourceAwarePool, made from RAP_CUPY_SPEC ("{device}" stands for the device
number) or from rap's default for a device (RAP_DEFAULT_DEVICE_SPEC in rap/rap.h:
"ResourceAwarePool(DeviceVmm(device={device}, export=posix), initial_size=64MiB, next_size=32MiB,
heuristic=never, cross_resource=wait, wait_above=512MiB, wait_pending_above=512MiB)", which sleeps,
exports and registers with NCCL; over DEVICE::{device} where the driver refuses that platform).

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

CuPy's names: MemoryPool() has the surface of cupy.cuda.MemoryPool (used_bytes, total_bytes,
free_bytes, n_free_blocks, free_all_blocks, set_limit, get_limit, malloc) over rap's pools; rap
has one pool per device in a process, so every MemoryPool object is a view of the same pools,
and each method acts on the current device, as CuPy's do. enable() installs
get_default_memory_pool().malloc; cupy.cuda.set_allocator(rap_cupy.MemoryPool().malloc) does the
same. A limit (set_limit, or CUPY_GPU_MEMORY_LIMIT as CuPy reads it, bytes or "50%", taken at a
device's first allocation) bounds the bytes of live arrays; an allocation past it raises
cupy.cuda.memory.OutOfMemoryError. PinnedMemoryPool() and enable_pinned() do the same for
cupy.cuda.set_pinned_memory_allocator: page-locked host memory from a rap pool over PINNED
(RAP_CUPY_PINNED_SPEC; default "QuickPool(PINNED, initial_size=16MiB, next_size=2MiB,
heuristic=never)").

Across processes: with the pool over DeviceVmm(export=posix) (or StreamOrdered(pool=new,
export=posix): blocks of allocations of at most 4 GiB), share(array) gives a picklable
handle and open(handle) in another process an array over the same memory, which returns to the
sender's pool only after the receiver's array is gone (see share and open).

The library is found from RAP_CUPY_LIB, next to this file (also inside the installed rap
package, as rap.cupy), or under <repo>/device-build or <repo>/build. Finding and loading it is
integrations/common/rap_loader.py, shared with rap_torch; a build copies it next to this file.
"""

import ctypes
import gc
import importlib.util
import os
import sys

try:
    import cupy
except ImportError as _e:
    raise ImportError("rap.cupy needs CuPy (pip install cupy-cuda12x or cupy-cuda13x, matching your CUDA); it is not installed here (%s). rap itself "
                      "(rap.Allocator, rap.check_spec) works without it." % (_e,)) from _e

__all__ = [
    "enable", "enabled", "library_path", "stream_source", "record_stream", "pointer_stream",
    "memory_stats", "used_bytes", "reserved_bytes", "pending_bytes", "empty_cache",
    "release_graph_pools", "spec", "MemoryPool", "get_default_memory_pool", "PinnedMemoryPool",
    "get_default_pinned_memory_pool", "enable_pinned", "sleep", "wake", "prepare_sleep",
    "share", "open", "IpcHandle",
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
_malloc = None            # the allocator function: size -> cupy.cuda.MemoryPointer
_enabled = False
_default_pool = None
_default_pinned_pool = None


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
    lib.rap_cupy_set_limit.argtypes = [ctypes.c_int, sz]
    lib.rap_cupy_get_limit.argtypes = [ctypes.c_int]
    lib.rap_cupy_get_limit.restype = sz
    lib.rap_cupy_memory_info.argtypes = [ctypes.c_int, ctypes.POINTER(sz), ctypes.POINTER(sz)]
    lib.rap_cupy_release_device.argtypes = [ctypes.c_int]
    lib.rap_cupy_pinned_malloc.argtypes = [sz]
    lib.rap_cupy_pinned_malloc.restype = vp
    lib.rap_cupy_pinned_free.argtypes = [vp]
    lib.rap_cupy_pinned_stat_values.argtypes = [ctypes.POINTER(sz), sz]
    lib.rap_cupy_pinned_spec.restype = ctypes.c_char_p
    lib.rap_cupy_sleep.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.rap_cupy_wake.argtypes = [ctypes.c_int]
    lib.rap_cupy_ipc_export.argtypes = [vp, ctypes.c_int, vp]
    lib.rap_cupy_ipc_export.restype = ctypes.c_int
    lib.rap_cupy_ipc_import.argtypes = [vp, ctypes.c_int, ip, ctypes.POINTER(vp)]
    lib.rap_cupy_ipc_import.restype = ctypes.c_int
    lib.rap_cupy_ipc_close.argtypes = [vp, ctypes.c_int, ip]
    lib.rap_cupy_ipc_close.restype = ctypes.c_int
    return lib


def _library():
    """The loaded library, loading it at the first call (without installing anything)."""
    global _lib
    if _lib is None:
        _lib = _load(library_path())
    return _lib


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
    """Whether enable() has made rap CuPy's allocator."""
    return _enabled


def stream_source():
    """How the library learns CuPy's current stream: 'capi: ...' or 'python: ...'."""
    return _source


def _setup(spec=None, stream_source=None):
    """Loads the library and makes the allocator function (_malloc), once; installs nothing."""
    global _source, _c_allocator, _malloc
    if _malloc is not None:
        return
    if spec is not None:
        os.environ["RAP_CUPY_SPEC"] = spec
    if stream_source is None:
        stream_source = os.environ.get("RAP_CUPY_STREAM_SOURCE", "auto")
    if stream_source not in ("auto", "python"):
        raise ValueError("stream_source is 'auto' or 'python', not %r" % (stream_source,))
    _env_limit()   # a malformed CUPY_GPU_MEMORY_LIMIT is an error here, as in CuPy
    lib = _library()
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
                mem = _retry(c_malloc, size)
            return mem
    else:
        bind = lib.rap_cupy_bind_stream
        current = cupy.cuda.get_current_stream
        _source = "python: cupy.cuda.get_current_stream() per allocation (C API: %s)" % what

        def malloc(size):
            bind(current().ptr)
            mem = c_malloc(size)
            if size and not mem.ptr:
                mem = _retry(c_malloc, size)
            return mem

    _c_allocator = c_allocator
    _malloc = malloc
    _wrap_stream_del()
    _wrap_ipc_get_mem_handle()


def enable(spec=None, stream_source=None):
    """Makes rap CuPy's allocator (for every device): cupy.cuda.set_allocator with the default
    pool's malloc (get_default_memory_pool()).

    stream_source: "auto" (CuPy's C function when its signature checks out, else "python") or
    "python"; default from RAP_CUPY_STREAM_SOURCE, else "auto". Both arguments count only at the
    first call (of enable, MemoryPool or get_default_memory_pool).
    """
    global _enabled
    _setup(spec, stream_source)
    cupy.cuda.set_allocator(get_default_memory_pool().malloc)
    _enabled = True


def _retry(c_malloc, size):
    """After a failed allocation: arrays kept only by reference cycles may hold memory (CuPy's
    pool collects them too); one more try, then OutOfMemoryError."""
    gc.collect()
    mem = c_malloc(size)
    if not mem.ptr:
        _raise_oom(size)
    return mem


def _raise_oom(size):
    try:
        device = cupy.cuda.runtime.getDevice()
        held = reserved_bytes(device)
        limit = _lib.rap_cupy_get_limit(device)
    except Exception:  # the statistics must not hide the out-of-memory error
        held, limit = 0, 0
    raise cupy.cuda.memory.OutOfMemoryError(size, held, limit)


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
    if _malloc is None:
        raise RuntimeError("rap_cupy.enable() (or MemoryPool()) has not been called")


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


def sleep(mode="backup", device=None):
    """rap's pool for the device (default: the current one) gives its GPU memory back and keeps
    every address; "backup" keeps the live bytes in pinned host memory for wake(), "discard" keeps
    nothing. Needs the pool over DEVICE_VMM (enable("ResourceAwarePool(DEVICE_VMM)")); raises
    RuntimeError with rap's sentence otherwise."""
    modes = {"backup": 0, "discard": 1}
    if mode not in modes:
        raise ValueError("mode is 'backup' or 'discard', not %r" % (mode,))
    lib = _library()
    if lib.rap_cupy_sleep(_device() if device is None else int(device), modes[mode]) != 0:
        raise RuntimeError("rap_cupy: " + _loader.last_error(lib, "cupy"))


def prepare_sleep(device=None):
    """Makes the pinned host backup for what the device's pool holds live now, so that the first
    sleep("backup") pays no pinning. The pool stays awake."""
    lib = _library()
    if lib.rap_cupy_sleep(_device() if device is None else int(device), 2) != 0:
        raise RuntimeError("rap_cupy: " + _loader.last_error(lib, "cupy"))


def wake(device=None):
    """Maps the pool's memory again at the same addresses and restores what sleep("backup") kept;
    a refused wake raises RuntimeError and leaves the pool asleep: call it again."""
    lib = _library()
    if lib.rap_cupy_wake(_device() if device is None else int(device)) != 0:
        raise RuntimeError("rap_cupy: " + _loader.last_error(lib, "cupy"))


def spec(device=0):
    return _loader.spec(_library(), "cupy", int(device))


# ---- memory across processes ------------------------------------------------------------------
# CuPy's own IPC (cupy.cuda.runtime.ipcGetMemHandle / ipcOpenMemHandle) works on memory from
# cudaMalloc, a whole allocation at a time; rap's exporting memory is made with CUDA's virtual memory
# calls (DeviceVmm(export=posix)), which cudaIpcGetMemHandle refuses. share() exports an array's
# block of rap's pool, open() imports it in another process, and the block returns to the sender's
# pool only after the receiver's array is gone and its stream passed that point.

import collections as _collections

IpcHandle = _collections.namedtuple(
    "IpcHandle", "desc nbytes dtype shape strides offset device bus_id event")
IpcHandle.__doc__ = """What share() returns and open() takes: rap's 64-byte descriptor of the block
(desc) and its size (nbytes), the array's dtype (a string), shape, strides (bytes) and offset (bytes
from the block's start), the sender's device number and PCI bus id (to find the same GPU in the
receiver), and the IPC handle of an event recorded on the sender's current stream."""

_SHARE_HINT = ('the device\'s pool must be over DeviceVmm(export=posix) or StreamOrdered(pool=new, '
               'export=posix), e.g. rap_cupy.enable('
               '"ResourceAwarePool(DeviceVmm(device={device}, export=posix), initial_size=64MiB)")')


def share(array):
    """A picklable handle (IpcHandle) to a cupy.ndarray of rap's pool that another process turns
    into an array over the same memory with open(handle). The memory returns to this process's
    pool only after the other process's array is gone and its stream passed that point, however
    soon this process frees its own. A handle opens once (share again for each receiver). Work
    queued on the current stream before share() is waited for by the receiver's stream.
    ValueError for an array of no memory; RuntimeError with rap's sentence when the array's memory
    is not rap's or the pool cannot export."""
    _need()
    memptr = array.data
    mem = memptr.mem
    if mem is None or not mem.ptr:
        raise ValueError("rap_cupy.share: the array has no device memory to share (size 0?)")
    device = memptr.device_id
    desc = (ctypes.c_ubyte * 64)()
    if _lib.rap_cupy_ipc_export(mem.ptr, device, desc) != 0:
        raise RuntimeError("rap_cupy.share: %s (%s)" % (_loader.last_error(_lib, "cupy"), _SHARE_HINT))
    with cupy.cuda.Device(device):
        event = cupy.cuda.Event(block=False, disable_timing=True, interprocess=True)
        event.record(cupy.cuda.get_current_stream())
        event_handle = bytes(cupy.cuda.runtime.ipcGetEventHandle(event.ptr))
        bus_id = cupy.cuda.Device(device).pci_bus_id
    return IpcHandle(bytes(desc), int(mem.size), array.dtype.str, tuple(array.shape),
                     tuple(array.strides), int(memptr.ptr - mem.ptr), device, bus_id, event_handle)


class _Imported:
    """The owner of an imported block, kept by the cupy.cuda.UnownedMemory under the array (and
    every view of it): when CuPy drops that memory, this object goes and closes the import on the
    stream it was used on, with that stream kept alive until then."""

    __slots__ = ("ptr", "device", "stream", "__weakref__")

    def __init__(self, ptr, device, stream):
        self.ptr = ptr
        self.device = device
        self.stream = stream     # the cupy.cuda.Stream (or its handle) the array was opened on

    def close(self):
        ptr, self.ptr = self.ptr, 0
        if not ptr or _lib is None:
            return
        handle = getattr(self.stream, "ptr", self.stream)
        if _lib.rap_cupy_ipc_close(ptr, self.device, handle) != 0:
            import warnings
            warnings.warn("rap_cupy: closing a shared array: " + _loader.last_error(_lib, "cupy"))

    def __del__(self):
        if not sys.is_finalizing():   # at exit the sender notices this process ended
            self.close()


def _local_device(handle):
    for i in range(cupy.cuda.runtime.getDeviceCount()):
        try:
            if cupy.cuda.Device(i).pci_bus_id == handle.bus_id:
                return i
        except Exception:   # a device that cannot be asked is not the one
            continue
    return handle.device


def open(handle, stream=None):
    """The array share() described, in this process: a cupy.ndarray over the same memory, with its
    dtype, shape and strides. Its work runs on stream (default: CuPy's current stream), which first
    waits for the sender's work before share(); when CuPy releases the array's memory (the array
    and every view of it are gone), the import is closed on that stream, and the memory goes back
    to the sender once the stream has passed that point. RuntimeError with rap's sentence if the
    handle cannot be opened (opened already, its pool or process gone, no permission:
    docs/integrations.md). rap need not be this process's allocator."""
    if not isinstance(handle, IpcHandle):
        handle = IpcHandle(*handle)
    lib = _library()
    device = _local_device(handle)
    with cupy.cuda.Device(device):
        if stream is None:
            stream = cupy.cuda.get_current_stream()
        event = cupy.cuda.runtime.ipcOpenEventHandle(handle.event)
        try:
            cupy.cuda.runtime.streamWaitEvent(stream.ptr, event)
        finally:
            cupy.cuda.runtime.eventDestroy(event)
        if len(handle.desc) != 64:
            raise ValueError("rap_cupy.open: the handle's descriptor has %d bytes, not 64"
                             % len(handle.desc))
        desc = (ctypes.c_ubyte * 64).from_buffer_copy(handle.desc)
        ptr = ctypes.c_void_p()
        if lib.rap_cupy_ipc_import(desc, device, stream.ptr, ctypes.byref(ptr)) != 0:
            raise RuntimeError("rap_cupy.open: " + _loader.last_error(lib, "cupy"))
        owner = _Imported(ptr.value, device, stream)
        try:
            mem = cupy.cuda.UnownedMemory(ptr.value, handle.nbytes, owner, device)
            memptr = cupy.cuda.MemoryPointer(mem, handle.offset)
            return cupy.ndarray(handle.shape, cupy.dtype(handle.dtype), memptr, handle.strides)
        except BaseException:
            owner.close()
            raise


def _wrap_ipc_get_mem_handle():
    """cupy.cuda.runtime.ipcGetMemHandle on memory of rap's pool: where CUDA refuses it (rap's
    exporting memory is VMM), the error says to use rap_cupy.share/open. CuPy's own callers
    (cupy.cuda.runtime.ipcGetMemHandle looked up at the call) see the wrapper; Cython code that
    cimports it does not (CuPy itself does not call it)."""
    runtime = cupy.cuda.runtime
    original = getattr(runtime, "ipcGetMemHandle", None)
    if original is None or getattr(original, "_rap_wrapped", False):
        return

    def ipcGetMemHandle(devPtr):
        try:
            return original(devPtr)
        except runtime.CUDARuntimeError as e:
            if _lib is None or not _is_rap_pointer(int(devPtr)):
                raise
            raise RuntimeError(
                "rap_cupy: cupy.cuda.runtime.ipcGetMemHandle cannot share memory of rap's pool "
                "(%s): use rap_cupy.share(array) in this process and rap_cupy.open(handle) in the "
                "other (the pool over DeviceVmm(export=posix) or StreamOrdered(pool=new, export=posix))" % (e,)) from e

    ipcGetMemHandle._rap_wrapped = True
    ipcGetMemHandle.__doc__ = original.__doc__
    try:
        runtime.ipcGetMemHandle = ipcGetMemHandle
    except (AttributeError, TypeError):   # a module that refuses: the docs say it instead
        pass


def _is_rap_pointer(ptr):
    try:
        device = cupy.cuda.runtime.pointerGetAttributes(ptr).device
    except Exception:
        device = cupy.cuda.runtime.getDevice()
    return _lib.rap_cupy_pointer_stream(ptr, device) != -1


# ---- CuPy's names: MemoryPool ------------------------------------------------------------------

def _env_limit():
    """CUPY_GPU_MEMORY_LIMIT as CuPy reads it: {"size": bytes} or {"fraction": share}, or {}.
    Raises ValueError when it is neither (the library reads it again at a device's first
    allocation, and takes a percentage of that device's memory)."""
    v = os.environ.get("CUPY_GPU_MEMORY_LIMIT")
    if not v:
        return {}
    try:
        if v.endswith("%"):
            fraction = float(v[:-1]) / 100.0
            if not 0 <= fraction <= 1:
                raise ValueError("out of range")
            return {"fraction": fraction}
        size = int(v)
        if size < 0:
            raise ValueError("negative")
        return {"size": size}
    except ValueError:
        raise ValueError("CUPY_GPU_MEMORY_LIMIT=%r is neither a number of bytes nor a percentage "
                         "from 0%% to 100%%" % (v,)) from None


def _device():
    return cupy.cuda.runtime.getDevice()


class MemoryPool:
    """cupy.cuda.MemoryPool's surface over rap's pools (one ResourceAwarePool per device, shared
    by every MemoryPool object of the process); each method acts on the current device.

        pool = rap_cupy.MemoryPool()
        cupy.cuda.set_allocator(pool.malloc)     # what rap_cupy.enable() does
        pool.set_limit(fraction=0.5)

    malloc(size) returns a cupy.cuda.MemoryPointer on the current device and stream, and raises
    cupy.cuda.memory.OutOfMemoryError when the memory or the device's limit runs out.
    spec and stream_source are enable()'s, and count only for the first pool or enable().
    """

    def __init__(self, spec=None, stream_source=None):
        _setup(spec, stream_source)
        self.malloc = _malloc   # the function itself: set_allocator(pool.malloc) adds no call

    def _stats(self):
        return _loader.memory_stats(_lib, "cupy", _device(), False)

    def used_bytes(self):
        """Bytes of live blocks (aligned), as CuPy counts its in-use bytes."""
        return self._stats()["used"]

    def total_bytes(self):
        """Bytes the pool holds from the device."""
        return self._stats()["reserved"]

    def free_bytes(self):
        """total_bytes() - used_bytes(): free blocks, blocks pending on a stream, and chunk
        ends."""
        st = self._stats()
        return st["reserved"] - st["used"]

    def n_free_blocks(self):
        """Blocks not in use: free and pending."""
        st = self._stats()
        return st["blocks"] - st["allocations"]

    def free_all_blocks(self, stream=None):
        """Gives the current device's wholly free chunks back to CUDA, after polling its
        streams. rap releases whole chunks whatever stream freed their blocks, so stream (kept
        for CuPy's signature) changes nothing."""
        del stream
        if _lib.rap_cupy_release_device(_device()) != 0:
            raise RuntimeError("rap_cupy: " + _lib.rap_cupy_last_error().decode())

    def free_all_free(self):
        """CuPy's old name of free_all_blocks."""
        self.free_all_blocks()

    def set_limit(self, size=None, fraction=None):
        """Limits the current device's live bytes to size, or to fraction (0 to 1) of the
        device's total memory; neither: no limit. Overrides CUPY_GPU_MEMORY_LIMIT."""
        if size is not None and fraction is not None:
            raise ValueError("size and fraction cannot be specified at one time")
        if size is None:
            if fraction is None:
                size = 0
            else:
                if not 0 <= fraction <= 1:
                    raise ValueError("memory limit fraction out of range: %r" % (fraction,))
                size = int(fraction * self._device_total())
        if size < 0:
            raise ValueError("memory limit size out of range: %r" % (size,))
        if _lib.rap_cupy_set_limit(_device(), int(size)) != 0:
            raise RuntimeError("rap_cupy: " + _lib.rap_cupy_last_error().decode())

    def get_limit(self):
        """The current device's limit in bytes (0: none)."""
        return _lib.rap_cupy_get_limit(_device())

    def _device_total(self):
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        if _lib.rap_cupy_memory_info(_device(), ctypes.byref(free), ctypes.byref(total)) != 0:
            raise RuntimeError("rap_cupy: " + _lib.rap_cupy_last_error().decode())
        return total.value


def get_default_memory_pool():
    """The MemoryPool that enable() installs."""
    global _default_pool
    if _default_pool is None:
        _default_pool = MemoryPool()
    return _default_pool


# ---- pinned host memory ------------------------------------------------------------------------

class _PinnedMemory:
    """A block of rap's pinned pool, with the ptr and size that cupy.cuda.PinnedMemoryPointer
    reads; it goes back to the pool when the last pointer to it is dropped (CuPy keeps it alive
    while an asynchronous copy from it is queued)."""

    __slots__ = ("ptr", "size", "__weakref__")

    def __init__(self, ptr, size):
        self.ptr = ptr
        self.size = size

    def __int__(self):
        return self.ptr

    def __del__(self):
        if self.ptr and not sys.is_finalizing():
            _lib.rap_cupy_pinned_free(self.ptr)
        self.ptr = 0


def _pinned_pointer(mem):
    try:
        return cupy.cuda.PinnedMemoryPointer(mem, 0)
    except TypeError as e:
        raise RuntimeError("rap_cupy: this CuPy's PinnedMemoryPointer(mem, offset) does not take a "
                           "memory object with ptr and size (%s); rap's pinned pool cannot be used "
                           "with it" % (e,)) from e


class PinnedMemoryPool:
    """cupy.cuda.PinnedMemoryPool's surface over a rap pool of page-locked host memory (one per
    process, made from RAP_CUPY_PINNED_SPEC at the first allocation).

        # what enable_pinned() does:
        cupy.cuda.set_pinned_memory_allocator(rap_cupy.PinnedMemoryPool().malloc)
    """

    def __init__(self):
        _library()

    def malloc(self, size):
        """A cupy.cuda.PinnedMemoryPointer to size bytes of pinned host memory."""
        if size == 0:
            return _pinned_pointer(_PinnedMemory(0, 0))
        ptr = _lib.rap_cupy_pinned_malloc(size)
        if not ptr:
            gc.collect()
            ptr = _lib.rap_cupy_pinned_malloc(size)
        if not ptr:
            raise cupy.cuda.memory.OutOfMemoryError(size, self.total_bytes(), 0)
        return _pinned_pointer(_PinnedMemory(ptr, size))

    def _stats(self):
        n = _lib.rap_cupy_stat_count()
        out = (ctypes.c_size_t * n)()
        if _lib.rap_cupy_pinned_stat_values(out, n) != 0:
            raise RuntimeError("rap_cupy: " + _lib.rap_cupy_last_error().decode())
        return {k: out[i] for i, k in enumerate(_loader.STATS[:n])}

    def used_bytes(self):
        return self._stats()["used"]

    def total_bytes(self):
        return self._stats()["reserved"]

    def free_bytes(self):
        st = self._stats()
        return st["reserved"] - st["used"]

    def n_free_blocks(self):
        st = self._stats()
        return st["blocks"] - st["allocations"]

    def free_all_blocks(self):
        """Gives wholly free chunks back (cudaFreeHost)."""
        if _lib.rap_cupy_pinned_release() != 0:
            raise RuntimeError("rap_cupy: " + _lib.rap_cupy_last_error().decode())

    def spec(self):
        return _lib.rap_cupy_pinned_spec().decode()


def get_default_pinned_memory_pool():
    """The PinnedMemoryPool that enable_pinned() installs."""
    global _default_pinned_pool
    if _default_pinned_pool is None:
        _default_pinned_pool = PinnedMemoryPool()
    return _default_pinned_pool


def enable_pinned():
    """Makes rap CuPy's pinned host memory allocator (cupy.cuda.alloc_pinned_memory, and CuPy's
    own staging buffers) with get_default_pinned_memory_pool().malloc."""
    cupy.cuda.set_pinned_memory_allocator(get_default_pinned_memory_pool().malloc)
