"""numba.cuda's EMM surface, standing in (see numba/__init__.py here)."""
import collections
import contextlib
import types
import weakref

from . import cudadrv  # noqa: F401  (numba.cuda.cudadrv.driver.CudaAPIError)

MemoryInfo = collections.namedtuple("MemoryInfo", "free,total")
_device = types.SimpleNamespace(id=0)


def get_current_device():
    return _device


class HostOnlyCUDAMemoryManager:
    def __init__(self, *args, **kwargs):
        if "context" not in kwargs:
            raise RuntimeError("Memory manager requires a context")
        self.context = kwargs.pop("context")
        self.allocations = {}

    def reset(self):
        self.allocations.clear()

    @contextlib.contextmanager
    def defer_cleanup(self):
        yield


class MemoryPointer:
    def __init__(self, context, pointer, size, owner=None, finalizer=None):
        self.context, self.device_pointer, self.size, self._owner = context, pointer, size, owner
        self.handle = pointer
        self.refct = 1
        self.is_managed = finalizer is not None
        if finalizer is not None:
            self._finalizer = weakref.finalize(self, finalizer)

    @property
    def device_pointer_value(self):
        return self.device_pointer.value or None

    def free(self):
        if self.is_managed:
            self._finalizer()


class _Owned:
    """An owned reference: when the last one goes, the memory's free runs (Numba's OwnedPointer)."""
    def __init__(self, mem):
        self._mem = mem
        mem.refct += 1

        def deref(m=mem):
            m.refct -= 1
            if m.refct == 0:
                m.free()
        weakref.finalize(self, deref)


class MappedMemory(MemoryPointer):
    def __init__(self, context, pointer, size, owner=None, finalizer=None):
        self.host_pointer = pointer
        super().__init__(context, pointer, size, finalizer=finalizer)
        self.refct -= 1          # an AutoFreePointer: owned references keep it

    def own(self):
        return _Owned(self)


class PinnedMemory:
    def __init__(self, context, pointer, size, owner=None, finalizer=None):
        self.context, self.host_pointer, self.size = context, pointer, size
        if finalizer is not None:
            weakref.finalize(self, finalizer)


class IpcHandle:
    def __init__(self, base, handle, size, source_info=None, offset=0):
        self.base, self.handle, self.size = base, handle, size
        self.source_info, self.offset = source_info, offset
