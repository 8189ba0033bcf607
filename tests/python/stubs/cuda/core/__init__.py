"""A stand-in for cuda.core, for CI where it is not installed: MemoryResource and the Buffer that
calls its deallocate on close or collection, as cuda.core's documentation describes them
(Buffer.from_handle(ptr, size, mr=None, *, stream=None), close(stream=None)). Used by
tests/python/test_integrations.py only when the real package is missing."""


class MemoryResource:
    def __init__(self, *args, **kwargs):
        pass


class Buffer:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("Buffer objects cannot be instantiated directly")

    @staticmethod
    def from_handle(ptr, size, mr=None, owner=None, *, stream=None):
        b = object.__new__(Buffer)
        b.handle, b.size, b.memory_resource, b._stream = ptr, size, mr, stream
        return b

    def close(self, stream=None):
        if self.handle is not None:
            handle, self.handle = self.handle, None
            self.memory_resource.deallocate(handle, self.size, stream=stream or self._stream)

    def __del__(self):
        self.close()


class Device:
    def __init__(self, device_id=None):
        self.device_id = device_id or 0
