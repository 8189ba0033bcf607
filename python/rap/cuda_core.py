"""rap.cuda_core — cuda.core's memory resources over rap pools.

    from cuda.core import Device            # cuda.core.experimental in older releases
    import rap.cuda_core
    dev = Device(); dev.set_current(); s = dev.create_stream()
    mr = rap.cuda_core.RapMemoryResource()            # device memory of the current device
    buf = mr.allocate(1 << 20, stream=s)              # a cuda.core Buffer
    buf.close(s)                                      # back to rap's pool, pending on s
    pinned = rap.cuda_core.RapPinnedMemoryResource()  # page-locked host memory

RapMemoryResource serves a device's memory from a rap pool made from RAP_CUDA_CORE_SPEC
("{device}" stands for the device number) or DEFAULT_SPEC;
RapPinnedMemoryResource serves pinned memory from one over PINNED (RAP_CUDA_CORE_PINNED_SPEC or
PINNED_SPEC). Either takes a spec, or a rap.Allocator of one's own (allocator=...). A buffer is
allocated on the stream given (None: the device's legacy default stream for device memory, the
host for pinned) and given back on the stream that owns it; a close on another stream records
that stream as a use first (rap_record_resource), so the block waits for both. Both import paths
of cuda.core work: cuda.core (0.4 and later) and cuda.core.experimental.
"""

try:
    from cuda.core import Buffer, Device, MemoryResource
except ImportError:
    try:
        from cuda.core.experimental import Buffer, Device, MemoryResource
    except ImportError as _e:
        raise ImportError("rap.cuda_core needs cuda.core (pip install cuda-core); it is not "
                          "installed here (%s). rap itself (rap.Allocator, rap.Buffer) works "
                          "without it." % (_e,)) from _e

import os
import threading

import rap

__all__ = ["RapMemoryResource", "RapPinnedMemoryResource", "DEFAULT_SPEC", "PINNED_SPEC"]

DEFAULT_SPEC = rap.DEFAULT_DEVICE_SPEC
PINNED_SPEC = "QuickPool(PINNED, initial_size=16MiB, next_size=2MiB, heuristic=never)"


def _value(resource):
    return resource.value if resource is not None else None


def _wrap(mr, ptr, size, stream):
    """A cuda.core Buffer owning ptr, whose close calls mr.deallocate: from_handle with the
    stream where this cuda.core takes one, without where not, the constructor before either."""
    try:
        if stream is not None:
            try:
                return Buffer.from_handle(ptr, size, mr=mr, stream=stream)
            except TypeError:
                pass
        return Buffer.from_handle(ptr, size, mr=mr)
    except AttributeError:
        return Buffer(ptr, size, mr)


class _RapResource(MemoryResource):
    _spec_env = _default_spec = None

    def __init__(self, spec, allocator, device):
        try:
            super().__init__()
        except TypeError:
            pass
        if allocator is None:
            spec = spec or os.environ.get(self._spec_env)
            name = "cuda_core%s" % ("" if device is None else device)
            if spec is None and self._default_spec is DEFAULT_SPEC:   # the device default
                allocator = rap.device_pool(device, name)
            else:
                allocator = rap.Allocator((spec or self._default_spec).replace("{device}", str(device)),
                                          name=name)
        self._pool = allocator
        self._lock = threading.RLock()   # rap pools are one thread at a time; closes come from GC
        self._owner = {}                 # ptr -> the rap resource it was allocated on (None: host)

    @property
    def allocator(self):
        """The rap.Allocator behind this resource: stats(), release(), sleep() ..."""
        return self._pool

    def _default_stream(self):
        return None

    def allocate(self, size, stream=None):
        s = stream if stream is not None else self._default_stream()
        with self._lock:
            ptr = self._pool.allocate(size, s)
            self._owner[ptr] = _value(self._pool._resource(s))
        try:
            return _wrap(self, ptr, size, stream)
        except BaseException:
            self.deallocate(ptr, size)
            raise

    def deallocate(self, ptr, size, stream=None):
        ptr = int(ptr)
        with self._lock:
            owner = self._owner.pop(ptr, None)
            if stream is not None and _value(self._pool._resource(stream)) != owner:
                self._pool._record(ptr, stream)   # used there too: the free waits for it
            self._pool.free(ptr)

    @property
    def is_managed(self):
        return False


class RapMemoryResource(_RapResource):
    """Device memory from a rap pool: RapMemoryResource(device_id=None (the current device),
    spec=None, allocator=None)."""
    _spec_env, _default_spec = "RAP_CUDA_CORE_SPEC", DEFAULT_SPEC

    def __init__(self, device_id=None, spec=None, allocator=None):
        self._device = Device().device_id if device_id is None else int(device_id)
        super().__init__(spec, allocator, self._device)

    def _default_stream(self):
        return 0

    @property
    def is_device_accessible(self):
        return True

    @property
    def is_host_accessible(self):
        return False

    @property
    def device_id(self):
        return self._device


class RapPinnedMemoryResource(_RapResource):
    """Page-locked host memory from a rap pool over PINNED: RapPinnedMemoryResource(spec=None,
    allocator=None)."""
    _spec_env, _default_spec = "RAP_CUDA_CORE_PINNED_SPEC", PINNED_SPEC

    def __init__(self, spec=None, allocator=None):
        super().__init__(spec, allocator, None)

    @property
    def is_device_accessible(self):
        return True

    @property
    def is_host_accessible(self):
        return True

    @property
    def device_id(self):
        return -1
