"""rap._buffer — rap.Buffer, memory that gives itself back, and rap.IpcHandle, a block's descriptor
for another process.

A Buffer owns (ptr, size, allocator, stream): free(), the end of a with block or its collection
gives the block back to its allocator on the stream that owns it (a block freed on a CUDA stream
stays pending there until the stream has passed the free). Frameworks read it without copying:
__cuda_array_interface__ (version 3) where a device can address the memory (device, managed,
pinned), and DLPack (__dlpack__, __dlpack_device__) for every kind, host memory as kDLCPU. Both
describe one dimension of uint8, the buffer's bytes. A buffer opened from an IpcHandle is the
same object; its free() closes the import (rap_ipc_close) instead.
"""

import ctypes
import threading

from . import _dlpack
from .errors import UnsupportedError, check

__all__ = ["Buffer", "IpcHandle"]

_DLPACK_DEVICE = {"host": _dlpack.CPU, "device": _dlpack.CUDA, "pinned": _dlpack.CUDA_HOST,
                  "managed": _dlpack.CUDA_MANAGED}


def _value(resource):
    return resource.value if resource is not None else None


class IpcHandle:
    """A block of an exporting pool described for another process (rap_ipc_desc, 64 bytes), and
    its size. Picklable: send it through a pipe, a queue or a file; Allocator.open(handle) in the
    other process maps it. Each handle is opened once; Allocator.revoke(handle) takes back one
    that never will be."""
    __module__ = "rap"

    def __init__(self, descriptor, nbytes):
        if not isinstance(descriptor, (bytes, bytearray)) or len(descriptor) != 64:
            raise ValueError("rap.IpcHandle: a descriptor is 64 bytes, not %r" % (descriptor,))
        self.descriptor = bytes(descriptor)
        self.nbytes = int(nbytes)

    def _desc(self, lib_desc_type):
        d = lib_desc_type()
        ctypes.memmove(d.bytes, self.descriptor, 64)
        return d

    def __eq__(self, other):
        return isinstance(other, IpcHandle) and (self.descriptor, self.nbytes) == (
            other.descriptor, other.nbytes)

    def __hash__(self):
        return hash(self.descriptor)

    def __repr__(self):
        return "rap.IpcHandle(%s..., nbytes=%d)" % (self.descriptor[:8].hex(), self.nbytes)


class Buffer:
    """nbytes of allocator's memory, owned: Buffer(allocator, nbytes, stream=None), or
    allocator.buffer(nbytes, stream). ptr is the address (an int), size its bytes, stream what
    it was allocated on (None: the host), kind "host", "device", "pinned" or "managed"."""
    __module__ = "rap"

    def __init__(self, allocator, nbytes, stream=None):
        self._init(allocator, allocator.allocate(nbytes, stream), nbytes, stream, None)

    @classmethod
    def _adopt(cls, allocator, ptr, nbytes, stream, close):
        b = cls.__new__(cls)
        b._init(allocator, ptr, nbytes, stream, close)
        return b

    def _init(self, allocator, ptr, nbytes, stream, close):
        self.allocator, self.ptr, self.size, self.stream = allocator, ptr, int(nbytes), stream
        self._close = close          # None: deallocate; else how an imported block is closed
        self._lock = threading.Lock()
        self._exports = 0            # DLPack tensors alive over this buffer
        self._freed = False          # free() asked for
        self._gone = False           # the block is given back
        self._mem = None             # (kind, device), asked for once
        self._free_stream = None     # the stream free() named while tensors were alive

    nbytes = property(lambda self: self.size)
    closed = property(lambda self: self._freed, doc="free() was called (or the with block ended)")

    def __len__(self):
        return self.size

    def __int__(self):
        return self.ptr

    def _memory(self):
        if self._mem is None:
            self._mem = (self.allocator._memory(self.ptr) if self._close is None
                         else self.allocator._pointer_memory(self.ptr))
        return self._mem

    @property
    def kind(self):
        return self._memory()[0]

    @property
    def device(self):
        """The device the memory is on or was made for; None for host memory."""
        return self._memory()[1]

    @property
    def device_pointer(self):
        """The address a kernel uses (rap_device_pointer): the mapping of pinned memory."""
        if self._close is not None:   # imported: CUDA's unified addresses
            return self._live()
        return self.allocator.device_pointer(self._live())

    def _live(self):
        if self._freed:
            raise ValueError("this rap.Buffer is freed")
        return self.ptr

    def free(self, stream=None):
        """Gives the block back on the stream that owns it; stream, where another, is where it
        was last used: the block waits for that stream too (rap_record_resource). While a DLPack
        consumer still holds a tensor of it, the block goes back when the last one is deleted."""
        with self._lock:
            if self._freed:
                return
            self._freed = True
            if self._exports:
                self._free_stream = stream   # for the last consumer's deleter
                return
        self._give_back(stream)

    def _give_back(self, stream=None):
        if self._gone:
            return
        self._gone = True
        if self._close is not None:
            self._close(self.ptr, stream)
            return
        a = self.allocator
        if stream is not None and _value(a._resource(stream)) != _value(a._resource(self.stream)):
            a._record(self.ptr, stream)   # a pool frees on the owner: the other stream is a use
        a.free(self.ptr)

    def _export(self):
        with self._lock:
            self._live()
            self._exports += 1

    def _unexport(self):
        with self._lock:
            self._exports -= 1
            last = self._exports == 0 and self._freed
        if last:
            self._give_back(self._free_stream)

    def view(self):
        """A memoryview of the bytes, for memory the host can read (host, pinned, managed)."""
        if self.kind == "device":
            raise ValueError("rap.Buffer.view: device memory cannot be read by the host")
        return memoryview((ctypes.c_char * self.size).from_address(self._live())).cast("B")

    @property
    def __cuda_array_interface__(self):
        kind = self.kind
        if kind == "host":
            raise AttributeError("host memory has no __cuda_array_interface__ (use __dlpack__)")
        cai = {"shape": (self.size,), "typestr": "|u1", "data": (self.device_pointer, False),
               "strides": None, "version": 3}
        h = self.allocator._cuda_stream(self.stream)
        if h is not None:
            cai["stream"] = h if h != 0 else 1   # 0 is not allowed: 1 names the legacy stream
        return cai

    def __dlpack_device__(self):
        kind, device = self._memory()
        return (_DLPACK_DEVICE[kind], device if kind in ("device", "managed") else 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of the bytes. stream is the consumer's CUDA stream (None or 1 the
        legacy default, 2 the per-thread one, -1 none): its later work is ordered after what the
        buffer's stream has queued, and the block's free waits for that stream too."""
        kind, device = self._memory()
        want = (_DLPACK_DEVICE[kind], device if kind in ("device", "managed") else 0)
        if copy:
            raise UnsupportedError("RAP_ERR_UNSUPPORTED", "rap.Buffer.__dlpack__: copy=True is "
                                   "not offered; the tensor is the buffer's own memory")
        if dl_device is not None and tuple(dl_device) != want:
            raise UnsupportedError("RAP_ERR_UNSUPPORTED", "rap.Buffer.__dlpack__: the memory is "
                                   "on %r, not %r, and is not copied" % (want, tuple(dl_device)))
        if kind != "host":
            self._order_for(stream, device)
        self._export()
        try:
            versioned = max_version is not None and tuple(max_version)[0] >= 1
            return _dlpack.capsule(self, self.ptr, want[0], want[1], versioned)
        except BaseException:
            self._unexport()
            raise

    def _order_for(self, stream, device):
        producer = self.allocator._cuda_stream(self.stream)
        if stream == -1 or producer is None:
            return
        consumer = 1 if stream is None else int(stream)
        if {consumer, producer} <= {0, 1} or consumer == producer:
            return
        from . import _driver
        _driver.stream_after(consumer, producer, device)
        self.allocator._record(self.ptr, 0 if consumer == 1 else consumer)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __del__(self):
        try:
            if not self._freed and not self._gone:
                self._freed = True
                self._give_back()
        except Exception:
            pass

    def __repr__(self):
        state = "freed" if self._freed else "0x%x" % self.ptr
        return "rap.Buffer(%s, %d bytes, %r)" % (state, self.size, self.allocator)
