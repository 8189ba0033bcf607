"""rap.numba — Numba's CUDA memory on rap: an External Memory Management (EMM) plugin.

    NUMBA_CUDA_MEMORY_MANAGER=rap.numba python app.py      # before Numba's first context
    # or, in the program, before the first CUDA array:
    from numba import cuda
    import rap.numba
    cuda.set_memory_manager(rap.numba.RapNumbaManager)

Device arrays come from one rap pool per device (per Numba context: a context made again after
cuda.close() gets new pools), made from RAP_NUMBA_SPEC ("{device}" stands for the device number)
or DEFAULT_SPEC; pool() is the current context's. Numba's EMM interface (version 1) gives memalloc no stream,
so a block is allocated on the default stream (the per-thread one under
NUMBA_CUDA_PER_THREAD_DEFAULT_STREAM=1) and, when Numba lets it go, freed there: it stays
pending until that stream has passed the free, and the legacy default stream waits for every
blocking stream's earlier work. Inside `with rap.numba.stream(s):` blocks are allocated on s
instead, and are freed on s: stream-ordered reuse without a device synchronize (s must outlive
the arrays made there).

Pinned host memory (cuda.pinned_array, mapped_array) comes from rap pools over
Pinned(portable, mapped, write_combined), one per combination of Numba's flags, made from
RAP_NUMBA_PINNED_SPEC or PINNED_SPEC ("{flags}" stands for the options); mempin (pinning memory
Numba did not allocate) and managed memory stay Numba's own. get_memory_info is the device's free
and total memory (rap_allocator_memory_info), the pool's free bytes counted as free.
get_ipc_handle shares a block through rap's IPC, which needs an exporting spec, such as
"ResourceAwarePool(DeviceVmm(device={device}, export=posix), initial_size=64MiB)"; other specs
raise rap.UnsupportedError saying so. The handle pickles, and IpcArrayHandle.open() in another
process maps the block (rap_ipc_import); close() gives it back.
"""

import contextlib
import ctypes
import os
import threading
import weakref

try:
    from numba import cuda
except ImportError as _e:
    raise ImportError("rap.numba needs Numba's CUDA target (pip install numba-cuda); it is not "
                      "installed here (%s). rap itself (rap.Allocator, rap.Buffer) works without "
                      "it." % (_e,)) from _e

import rap

__all__ = ["RapNumbaManager", "stream", "pool", "pinned_pools", "DEFAULT_SPEC", "PINNED_SPEC"]

# The pool each device's arrays come from, as rap.torch and rap.cupy make theirs (RAP_NUMBA_SPEC
# replaces it).
DEFAULT_SPEC = rap.DEFAULT_DEVICE_SPEC
PINNED_SPEC = "QuickPool(Pinned({flags}), initial_size=16MiB, next_size=2MiB, heuristic=never)"

_local = threading.local()     # .stream: what `with stream(s)` set on this thread
_lock = threading.RLock()      # rap's pools are one thread at a time; GC may free from any


def _per_thread_default():
    """NUMBA_CUDA_PER_THREAD_DEFAULT_STREAM as Numba read it."""
    for name in ("numba.cuda.core.config", "numba.core.config"):
        try:
            config = __import__(name, fromlist=["config"])
            return bool(getattr(config, "CUDA_PER_THREAD_DEFAULT_STREAM", False))
        except ImportError:
            continue
    return os.environ.get("NUMBA_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0")


def _current_stream():
    s = getattr(_local, "stream", None)
    if s is not None:
        return s
    return 2 if _per_thread_default() else 0   # cudaStreamPerThread, or the legacy stream


@contextlib.contextmanager
def stream(s):
    """Blocks allocated on this thread inside the with come from stream s (a numba stream, or an
    int cudaStream_t) and are freed on it."""
    before = getattr(_local, "stream", None)
    _local.stream = s
    try:
        yield s
    finally:
        _local.stream = before


def pool():
    """The rap.Allocator behind the current context's device arrays, for its stats()."""
    return _manager().device_pool()


def pinned_pools():
    """The rap.Allocators behind the current context's pinned and mapped arrays."""
    return _manager().pinned_pools()


def _manager():
    mm = cuda.current_context().memory_manager
    if not isinstance(mm, RapNumbaManager):
        raise RuntimeError("rap.numba: Numba's memory manager here is %s, not rap's (set "
                           "NUMBA_CUDA_MEMORY_MANAGER=rap.numba, or call cuda.set_memory_manager("
                           "rap.numba.RapNumbaManager) before the first CUDA array)" % type(mm).__name__)
    return mm


def _out_of_memory(e):
    """Numba's own out of memory error (CudaAPIError, CUDA_ERROR_OUT_OF_MEMORY), rap's sentence."""
    drv = cuda.cudadrv.driver
    results = getattr(getattr(drv, "binding", None), "CUresult", None)
    code = results.CUDA_ERROR_OUT_OF_MEMORY if results is not None else 2
    return drv.CudaAPIError(code, "rap.numba: %s" % e)


def _free(p, ptr):
    """A finalizer's free: quiet, since it runs at collection (or exit), when there is no caller
    to tell; a pool closed by reset() has already taken its memory back."""
    def free():
        with _lock:
            try:
                p.free(ptr)
            except (rap.Error, ValueError):
                pass
    return free


class RapNumbaManager(cuda.HostOnlyCUDAMemoryManager):
    """Numba's EMM plugin over rap (interface version 1)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)   # context=None for Numba's version check: no work here
        self._live = {}                     # ptr -> size of this context's device blocks
        self._deferred = _Deferred()
        # ("device",) or ("pinned", mapped, portable, wc) -> rap.Allocator. A context's own: a new
        # context (after cuda.close()) has a new manager, and new pools, where the memory is valid.
        self._pools = {}

    def device_pool(self):
        """The rap.Allocator of this context's device arrays (made at the first call)."""
        with _lock:
            p = self._pools.get(("device",))
            if p is None:
                device = self._device()
                spec = os.environ.get("RAP_NUMBA_SPEC") or None
                p = rap.device_pool(device, "numba%d" % device, spec)
                self._pools[("device",)] = p
            return p

    def pinned_pools(self):
        with _lock:
            return [p for k, p in self._pools.items() if k[0] == "pinned"]

    def _pinned_pool(self, mapped, portable, wc):
        key = ("pinned", bool(mapped), bool(portable), bool(wc))
        with _lock:
            p = self._pools.get(key)
            if p is None:
                flags = ", ".join("%s=1" % n for n, on in (("mapped", mapped), ("portable", portable),
                                                           ("write_combined", wc)) if on)
                spec = os.environ.get("RAP_NUMBA_PINNED_SPEC") or PINNED_SPEC
                p = rap.Allocator(spec.replace("{flags}", flags), name="numba-pinned")
                self._pools[key] = p
            return p

    @property
    def interface_version(self):
        return 1

    def _device(self):
        return self.context.device.id

    def initialize(self):
        self.device_pool()

    def memalloc(self, size):
        p = self.device_pool()
        with _lock:
            try:
                ptr = p.allocate(size, _current_stream())
            except rap.OutOfMemoryError as e:
                raise _out_of_memory(e) from e
            self._live[ptr] = size
        live, deferred = self._live, self._deferred
        free = _free(p, ptr)

        def finalizer():
            live.pop(ptr, None)
            deferred.run(free)
        return cuda.MemoryPointer(weakref.proxy(self.context), ctypes.c_void_p(ptr), size,
                                  finalizer=finalizer)

    def memhostalloc(self, size, mapped=False, portable=False, wc=False):
        p = self._pinned_pool(mapped, portable, wc)
        with _lock:
            ptr = p.allocate(size)
        free = _free(p, ptr)
        ctx = weakref.proxy(self.context)
        if not mapped:
            return cuda.PinnedMemory(ctx, ptr, size, finalizer=free)
        allocations = self.allocations

        def finalizer():
            allocations.pop(ptr, None)
            free()
        mem = cuda.MappedMemory(ctx, ptr, size, finalizer=finalizer)
        allocations[ptr] = mem   # kept alive here while Numba holds the owned pointer, as Numba does
        return mem.own()

    def get_memory_info(self):
        p = self.device_pool()
        with _lock:
            free, total = p.memory_info()
            cached = p.stats()["free_bytes"]
        return cuda.MemoryInfo(free=min(total, free + cached), total=total)

    def get_ipc_handle(self, memory):
        p = self.device_pool()
        address = int(memory.device_pointer_value or 0)
        with _lock:
            blocks = list(self._live.items())
        for base, size in blocks:
            if base <= address < base + max(size, 1):
                break
        else:
            raise ValueError("rap.numba: 0x%x is not in a block of this context's rap pool" % address)
        with _lock:
            try:
                handle = p.share(base, size)
            except rap.UnsupportedError as e:
                raise rap.UnsupportedError(e.status, "%s; rap.numba shares arrays only from a pool "
                                           "over an exporting platform: set RAP_NUMBA_SPEC to one, "
                                           "such as \"ResourceAwarePool(DeviceVmm(device={device}, "
                                           "export=posix), initial_size=64MiB)\"" % e, e.code) from None
        return _ipc_handle_class()(memory, handle, memory.size, address - base, self._device())

    def reset(self):
        """Numba's context reset: host allocations as Numba does, and the device pool released,
        or closed where no block is live (a device reset takes its memory)."""
        super().reset()
        self._deferred.flush(force=True)
        with _lock:
            p = self._pools.get(("device",))
            if p is None:
                return
            if not self._live:
                del self._pools[("device",)]
                try:
                    p.close()
                except rap.Error:
                    pass
            else:
                p.release()

    @contextlib.contextmanager
    def defer_cleanup(self):
        """Device blocks Numba lets go meanwhile go back to the pool at the end (Numba's own
        pinned memory is deferred by Numba's part)."""
        with super().defer_cleanup():
            with _lock:
                self._deferred.depth += 1
            try:
                yield
            finally:
                with _lock:
                    self._deferred.depth -= 1
                self._deferred.flush()


class _Deferred:
    """The frees held back while a defer_cleanup is open."""

    def __init__(self):
        self.depth = 0
        self.frees = []

    def run(self, free):
        with _lock:
            if self.depth:
                self.frees.append(free)
                return
        free()

    def flush(self, force=False):
        with _lock:
            if self.depth and not force:
                return
            frees, self.frees = self.frees, []
        for free in frees:
            free()


_IpcHandle = None


def _ipc_handle_class():
    """numba's IpcHandle with rap's descriptor in place of CUDA's (made on first use)."""
    global _IpcHandle
    if _IpcHandle is None:
        class RapIpcHandle(cuda.IpcHandle):
            def __init__(self, base, rap_handle, size, offset, device):
                super().__init__(base, None, size, source_info=None, offset=offset)
                self.rap_handle, self.device = rap_handle, device
                self._buffer = None

            def open(self, context):
                if self._buffer is not None:
                    raise ValueError("IpcHandle is already opened")
                self._buffer = _importer().open(self.rap_handle)
                return cuda.MemoryPointer(weakref.proxy(context),
                                          ctypes.c_void_p(self._buffer.ptr + self.offset), self.size)

            def close(self):
                if self._buffer is None:
                    raise ValueError("IpcHandle not opened")
                b, self._buffer = self._buffer, None
                b.free()

            def __reduce__(self):
                return (_rebuild_ipc_handle, (self.rap_handle.descriptor, self.rap_handle.nbytes,
                                              self.size, self.offset, self.device))
        RapIpcHandle.__module__ = __name__
        _IpcHandle = RapIpcHandle
    return _IpcHandle


def _rebuild_ipc_handle(descriptor, nbytes, size, offset, device):
    return _ipc_handle_class()(None, rap.IpcHandle(descriptor, nbytes), size, offset, device)


_importer_pool = None


def _importer():
    """The manager that opens blocks shared with this process (any manager may)."""
    global _importer_pool
    with _lock:
        if _importer_pool is None:
            _importer_pool = rap.Allocator("QuickPool(HOST)", name="numba-ipc")
        return _importer_pool


# NUMBA_CUDA_MEMORY_MANAGER=rap.numba: Numba imports this module and takes this attribute.
_numba_memory_manager = RapNumbaManager
