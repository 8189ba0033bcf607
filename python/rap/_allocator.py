"""rap._allocator — rap.Allocator, a pool made from a spec with a manager of its own, and
rap.HostQueue, a CPU work queue to free blocks on.

The calls follow rap.h one for one: allocate/free (and Buffers over them), statistics and peaks,
the memory under the pool, release, sleep and wake, blocks across processes (share, open,
revoke) and an out of memory handler. Arguments are checked here before they reach a size_t
(a negative size is rap.InvalidError, a float a TypeError); refusals from the library are the
classes of rap.errors with rap's sentence.
"""

import ctypes
import operator
import sys

from . import _lib
from ._buffer import Buffer, IpcHandle
from .errors import InvalidError, OutOfMemoryError, UnsupportedError, check, from_status

__all__ = ["Allocator", "HostQueue"]

_SIZE_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1
_SLEEP_MODES = {"backup": 0, "discard": 1, "prepare": 2, "release": 3}


def _size(n, call):
    """n as a size_t, or the exception a Python user expects, in rap's words."""
    if isinstance(n, bool) or not hasattr(type(n), "__index__"):
        raise TypeError("%s: a size is an int number of bytes, not %s %r" % (call, type(n).__name__, n))
    n = operator.index(n)
    if n < 0:
        raise InvalidError("RAP_ERR_INVALID", "%s: a size is at least 0 bytes, not %d" % (call, n), -1)
    if n > _SIZE_MAX:
        raise InvalidError("RAP_ERR_INVALID", "%s: %d bytes is past what a size_t holds" % (call, n), -1)
    return n


def _stream_handle(stream):
    """A CUDA stream as its cudaStream_t: an int, or an object carrying one as PyTorch
    (cuda_stream), CuPy (ptr), Numba (handle), cuda.core (__cuda_stream__) and rmm/cuda-python
    (handle, or int()) do."""
    if hasattr(stream, "__cuda_stream__"):
        v = stream.__cuda_stream__
        return int((v() if callable(v) else v)[1])
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if v is not None:
            stream = v
            break
    if isinstance(stream, ctypes.c_void_p):
        return stream.value or 0
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise TypeError("a stream is None, a HostQueue, an int cudaStream_t or an object with "
                        "cuda_stream, ptr or handle, not %s" % type(stream).__name__) from None


def _stream_object(stream):
    """Whether stream is an object that may own its CUDA stream (cuda.core's, CuPy's, Numba's
    Stream), which the Allocator keeps alive while it has a resource for it; a bare handle (an
    int, a ctypes pointer) is the caller's to keep."""
    return not isinstance(stream, (int, ctypes.c_void_p, HostQueue)) and stream is not None


class HostQueue:
    """A CPU work queue (rap's host_async resource): a stream of execution without a GPU. Blocks
    freed on it stay pending until the work submitted before the free has run."""
    __module__ = "rap"

    def __init__(self, allocator):
        self._alloc = allocator
        self._r = ctypes.c_void_p()
        check(allocator._lib, allocator._lib.rap_resource_create_host_async(
            allocator._rm, ctypes.byref(self._r)))
        self._jobs = []   # the ctypes callbacks must outlive their run

    def submit(self, fn):
        """Runs fn() on the queue's thread, after everything submitted before it."""
        def run(_):
            fn()
        job = _lib.JOB(run)
        self._jobs.append(job)
        check(self._alloc._lib, self._alloc._lib.rap_resource_submit(self._r, job, None))

    def synchronize(self):
        check(self._alloc._lib, self._alloc._lib.rap_resource_synchronize(self._r))
        self._jobs.clear()


class Allocator:
    """A pool made from a rap spec, with rmm.mr's calls: allocate(nbytes, stream) returns an int
    address; deallocate(ptr, nbytes, stream) or free(ptr, stream) gives it back (the stream it
    was last used on: the block stays pending until that stream has passed the free);
    buffer(nbytes, stream) is a rap.Buffer that frees itself. A stream is None (the host), a
    HostQueue, or a CUDA stream (an int cudaStream_t, a torch.cuda.Stream, a cupy stream, a
    numba stream). Each Allocator has a manager of its own; close() (or the end of a with block)
    destroys both. Not safe for threads unless the spec says so: "ThreadSafe(...)"."""
    __module__ = "rap"

    def __init__(self, spec, name="python"):
        if not isinstance(spec, str):
            raise TypeError("Allocator takes a spec str, not %s" % type(spec).__name__)
        self._lib = _lib.library()
        self._rm = ctypes.c_void_p()
        self._a = None
        self._streams = {}           # cudaStream_t -> its rap resource
        self._kept = {}              # cudaStream_t -> the stream object it came from, kept alive
        self._mem = None
        self._oom = []               # set_oom_handler's ctypes callbacks, kept while the pool lives
        self._oom_error = None       # what the handler raised, for the NOMEM that follows
        check(self._lib, self._lib.rap_manager_create(ctypes.byref(self._rm)))
        a = ctypes.c_void_p()
        st = self._lib.rap_allocator_make_spec(self._rm, name.encode(), spec.encode(), ctypes.byref(a))
        if st != 0:
            e = from_status(self._lib, st)
            self._lib.rap_manager_destroy(self._rm)
            self._rm = None
            raise e
        self._a = a
        self.spec = spec

    def _check(self, st):
        check(self._lib, st)

    def _resource(self, stream):
        if stream is None:
            return None
        if isinstance(stream, HostQueue):
            return stream._r
        handle = _stream_handle(stream)
        r = self._streams.get(handle)
        if r is None:
            self._retire_streams()   # a new stream: those only this Allocator holds may go
            r = self._make_stream_resource(handle)
            if not _stream_object(stream) and handle not in (0, 1, 2):
                self._call_scoped(r)
            self._streams[handle] = r
        if handle not in self._kept and _stream_object(stream):
            self._kept[handle] = stream
        return r

    def _make_stream_resource(self, handle):
        r = ctypes.c_void_p()
        self._check(self._lib.rap_resource_create_cuda(self._rm, ctypes.c_void_p(handle),
                                                       ctypes.byref(r)))
        return r

    def _call_scoped(self, r):
        """A bare handle's stream (an int: its object, if any, is not kept here) may be destroyed
        by its owner whenever a call with it has returned: its resource is call-scoped (every free
        fenced at once, its end waits for its last event, never for the stream). The default
        streams (0, 1, 2) never go and are left alone."""
        st = self._lib.rap_resource_set_call_scoped(r, 1)
        if st != 0:
            self._lib.rap_resource_destroy(r)
            self._check(st)

    @staticmethod
    def _stream_idle(handle):
        """Whether the stream has no work queued (so that destroying its resource, which
        synchronizes it, does not wait)."""
        from . import _driver
        try:
            return _driver.stream_idle(handle)
        except OSError:
            return False

    def _retire_streams(self):
        """The stream objects that nobody but this Allocator holds any more, and that are idle,
        go with their rap resources (rap_resource_destroy: their pending blocks come back). One
        that a live block still belongs to stays (RAP_ERR_BUSY) until a later sweep. A stream's
        resource lives as long as its object: rap records events on the stream until then, and a
        stream destroyed under it (cuda.core, CuPy and Numba destroy theirs when collected) would
        take those records to a handle that is gone."""
        for handle in [h for h in self._kept if sys.getrefcount(self._kept[h]) <= 2]:
            if self._rm is None or not self._stream_idle(handle):
                continue
            if self._lib.rap_resource_destroy(self._streams[handle]) == 0:
                del self._streams[handle], self._kept[handle]

    def _cuda_stream(self, stream):
        """stream's cudaStream_t as an int; None for the host and host queues."""
        if stream is None or isinstance(stream, HostQueue):
            return None
        return _stream_handle(stream)

    def _live(self):
        if self._a is None:
            raise ValueError("this rap.Allocator is closed")
        return self._a

    def allocate(self, nbytes, stream=None):
        """The address of nbytes of memory usable on stream, as an int."""
        n = _size(nbytes, "rap.Allocator.allocate")
        p = ctypes.c_void_p()
        st = self._lib.rap_allocate(self._live(), ctypes.byref(p), n, self._resource(stream))
        if st != 0:
            e = from_status(self._lib, st)
            cause, self._oom_error = self._oom_error, None
            raise e from (cause if isinstance(e, OutOfMemoryError) else None)
        return p.value or 0

    def buffer(self, nbytes, stream=None):
        """A rap.Buffer of nbytes on stream, given back when freed or collected."""
        return Buffer(self, nbytes, stream)

    def free(self, ptr, stream=None):
        """Gives ptr back on stream (None: the stream that owns it)."""
        self._check(self._lib.rap_deallocate(self._live(), ctypes.c_void_p(ptr),
                                             self._resource(stream)))

    def deallocate(self, ptr, nbytes=None, stream=None):
        """rmm.mr's spelling of free: nbytes is accepted and not needed."""
        self.free(ptr, stream)

    def _record(self, ptr, stream):
        """The block at ptr is used on stream too: its free waits for it (where the strategy
        keeps per-stream uses; others need not)."""
        try:
            self._check(self._lib.rap_record_resource(self._live(), ctypes.c_void_p(ptr),
                                                      self._resource(stream)))
        except UnsupportedError:
            pass

    def stats(self, stream=None):
        """rap_stats as a dict: the pool's, or (stream given) the part of it on that stream."""
        s = _lib.Stats()   # its size goes with it: an older library fills what it knows
        if stream is None:
            st = self._lib.rap_allocator_stats_sized(self._live(), ctypes.byref(s), ctypes.sizeof(s))
        else:
            st = self._lib.rap_allocator_resource_stats_sized(
                self._live(), self._resource(stream), ctypes.byref(s), ctypes.sizeof(s))
        self._check(st)
        return {n: getattr(s, n) for n in _lib.STATS}

    def reset_peaks(self):
        """The high-water marks start again from the current values."""
        self._check(self._lib.rap_allocator_reset_peaks(self._live()))

    def memory_info(self):
        """(free, total) bytes of the memory under the pool: the device's, or the host's."""
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(self._lib.rap_allocator_memory_info(self._live(), ctypes.byref(free),
                                                        ctypes.byref(total)))
        return free.value, total.value

    def release(self):
        """Gives every wholly free chunk back to the memory below, and the resources of streams
        that only this Allocator still holds (and that are idle) go, letting those streams go."""
        self._retire_streams()
        self._check(self._lib.rap_release(self._live()))

    def check(self):
        """Walks the pool's invariants: rap.CorruptError names the first one broken."""
        self._check(self._lib.rap_allocator_check(self._live()))

    def device_pointer(self, ptr):
        """The address a kernel uses for ptr (pinned memory's mapping); InvalidError for host."""
        out = ctypes.c_void_p()
        self._check(self._lib.rap_device_pointer(self._live(), ctypes.c_void_p(ptr), ctypes.byref(out)))
        return out.value or 0

    def set_peer_access(self, device, enable=True):
        """Streams of device may use this pool's device memory (enable), or not."""
        self._check(self._lib.rap_allocator_set_peer_access(self._live(), int(device), 1 if enable else 0))

    def _memory(self, ptr):
        """(kind, device) of this pool's memory, asked for once: "host" where no device can
        address it, else what CUDA says of ptr."""
        if self._mem is None:
            out = ctypes.c_void_p()
            st = self._lib.rap_device_pointer(self._live(), ctypes.c_void_p(ptr), ctypes.byref(out))
            if st != 0:
                e = from_status(self._lib, st)
                if not isinstance(e, (InvalidError, UnsupportedError)):
                    raise e
                self._mem = ("host", None)
            else:
                from . import _driver
                self._mem = _driver.pointer_memory(ptr)
        return self._mem

    @staticmethod
    def _pointer_memory(ptr):
        """(kind, device) of a pointer from elsewhere (an import): CUDA's answer, else host."""
        try:
            from . import _driver
            return _driver.pointer_memory(ptr)
        except OSError:
            return ("host", None)

    # ---- sleep and wake ------------------------------------------------------------------------
    def sleep(self, mode="backup"):
        """Gives the pool's physical memory back, keeping every address (a ResourceAwarePool over
        DEVICE_VMM or HOST_VMM): "backup" keeps live bytes in host memory, "discard" does not,
        "prepare" only makes the backup ready (pinned for DEVICE_VMM) and stays awake, "release"
        gives back the backup an awake pool keeps for its next sleep (stats()["backup_bytes"])."""
        if mode not in _SLEEP_MODES:
            raise InvalidError("RAP_ERR_INVALID", "rap.Allocator.sleep: mode is one of %s, not %r"
                               % (", ".join(_SLEEP_MODES), mode), -1)
        self._check(self._lib.rap_allocator_sleep(self._live(), _SLEEP_MODES[mode]))

    def wake(self):
        """Maps the pool's memory again and restores the live bytes kept by sleep("backup")."""
        self._check(self._lib.rap_allocator_wake(self._live()))

    @property
    def asleep(self):
        return bool(self._lib.rap_allocator_is_asleep(self._live()))

    # ---- across processes ----------------------------------------------------------------------
    def share(self, block, nbytes=None):
        """A picklable rap.IpcHandle for a block (a Buffer, or a pointer and its size) of a pool
        over an exporting platform (DeviceVmm(export=posix), StreamOrdered(pool=new,
        export=posix), HostVmm(export=posix)); rap.UnsupportedError for others."""
        if isinstance(block, Buffer):
            ptr, nbytes = block._live(), block.size if nbytes is None else nbytes
        else:
            ptr = block
            if nbytes is None:
                raise TypeError("rap.Allocator.share(ptr, nbytes): the size of a pointer's block is needed")
        desc = _lib.IpcDesc()
        self._check(self._lib.rap_ipc_export(self._live(), ctypes.c_void_p(ptr), ctypes.byref(desc)))
        return IpcHandle(bytes(desc.bytes), _size(nbytes, "rap.Allocator.share"))

    def open(self, handle, stream=None):
        """The block another process shared, as a rap.Buffer used on stream (None: the host);
        its free() closes the import. Any Allocator's manager may open it."""
        if not isinstance(handle, IpcHandle):
            raise TypeError("rap.Allocator.open takes a rap.IpcHandle, not %s" % type(handle).__name__)
        out = ctypes.c_void_p()
        desc = handle._desc(_lib.IpcDesc)
        self._live()
        self._check(self._lib.rap_ipc_import(self._rm, ctypes.byref(desc), self._resource(stream),
                                             ctypes.byref(out)))
        return Buffer._adopt(self, out.value or 0, handle.nbytes, stream, self._close_import)

    def _close_import(self, ptr, stream):
        if self._rm is None:
            raise ValueError("this rap.Allocator is closed")
        self._check(self._lib.rap_ipc_close(self._rm, ctypes.c_void_p(ptr), self._resource(stream)))

    def revoke(self, handle):
        """Takes back a handle this pool shared that nobody will open."""
        desc = handle._desc(_lib.IpcDesc)
        self._check(self._lib.rap_ipc_revoke(self._live(), ctypes.byref(desc)))

    # ---- out of memory -------------------------------------------------------------------------
    def set_oom_handler(self, fn):
        """fn(nbytes, attempt) runs when an allocation is about to fail for memory (attempt 1,
        2, ...): it may free memory and returns True to have the request tried again. What it
        raises ends the retries and becomes the cause of the rap.OutOfMemoryError raised. None
        removes it."""
        if fn is None:
            self._check(self._lib.rap_allocator_set_oom_handler(self._live(), _lib.OOM_FN(), None))
            return

        def handler(_a, nbytes, _r, attempt, _user):
            try:
                return 1 if fn(nbytes, attempt) else 0
            except BaseException as e:   # noqa: B902 — carried to the allocate that failed
                self._oom_error = e
                return 0
        cb = _lib.OOM_FN(handler)
        self._oom.append(cb)
        self._check(self._lib.rap_allocator_set_oom_handler(self._live(), cb, None))

    def host_queue(self):
        """A new HostQueue of this allocator's manager."""
        return HostQueue(self)

    def close(self):
        """Destroys the pool and its manager; rap.BusyError names leaked blocks."""
        if self._rm is None:
            return
        rm, self._rm, self._a = self._rm, None, None
        try:
            self._check(self._lib.rap_manager_destroy(rm))
        finally:   # the streams outlive their resources, which the manager took
            self._streams.clear()
            self._kept.clear()

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

