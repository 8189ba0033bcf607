"""rap._driver — the few CUDA driver calls the Python package makes itself, through libcuda.so.1
(which every machine with an NVIDIA driver has; nothing of the toolkit is needed): what memory a
pointer is (for DLPack's device type and number), ordering one stream after another (for a
consumer's stream in __dlpack__) and whether a stream is idle (before rap.Allocator lets its
resource go). Loaded on first use only; a machine without the driver never loads it, since host
memory needs neither.
"""

import ctypes

_cu = None

# CUpointer_attribute and CUmemorytype (cuda.h).
_ATTR_MEMORY_TYPE, _ATTR_IS_MANAGED, _ATTR_DEVICE_ORDINAL = 2, 8, 9
_MEMORYTYPE_HOST = 1
_EVENT_DISABLE_TIMING = 2


def _driver():
    global _cu
    if _cu is None:
        try:
            cu = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise OSError("rap: the CUDA driver (libcuda.so.1) cannot be loaded: %s" % e) from None
        for name, args in {"cuInit": [ctypes.c_uint], "cuGetErrorString": [ctypes.c_int, ctypes.c_void_p],
                           "cuPointerGetAttribute": [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64],
                           "cuEventCreate": [ctypes.c_void_p, ctypes.c_uint],
                           "cuEventRecord": [ctypes.c_void_p, ctypes.c_void_p],
                           "cuStreamWaitEvent": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint],
                           "cuStreamQuery": [ctypes.c_void_p],
                           "cuEventDestroy_v2": [ctypes.c_void_p],
                           "cuDeviceGet": [ctypes.c_void_p, ctypes.c_int],
                           "cuDevicePrimaryCtxRetain": [ctypes.c_void_p, ctypes.c_int],
                           "cuDevicePrimaryCtxRelease_v2": [ctypes.c_int],
                           "cuCtxPushCurrent_v2": [ctypes.c_void_p],
                           "cuCtxPopCurrent_v2": [ctypes.c_void_p]}.items():
            f = getattr(cu, name)
            f.argtypes = args
            f.restype = ctypes.c_int
        _check(cu, cu.cuInit(0), "cuInit")
        _cu = cu
    return _cu


def _check(cu, rc, what):
    if rc != 0:
        text = ctypes.c_char_p()
        cu.cuGetErrorString(rc, ctypes.byref(text))
        raise OSError("rap: %s failed: %s (CUresult %d)" % (
            what, text.value.decode() if text.value else "unknown error", rc))


def pointer_memory(ptr):
    """("pinned" | "managed" | "device", device number) of a pointer CUDA knows."""
    cu = _driver()
    kind, managed, device = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_int()
    _check(cu, cu.cuPointerGetAttribute(ctypes.byref(kind), _ATTR_MEMORY_TYPE, ptr),
           "cuPointerGetAttribute(MEMORY_TYPE)")
    _check(cu, cu.cuPointerGetAttribute(ctypes.byref(managed), _ATTR_IS_MANAGED, ptr),
           "cuPointerGetAttribute(IS_MANAGED)")
    _check(cu, cu.cuPointerGetAttribute(ctypes.byref(device), _ATTR_DEVICE_ORDINAL, ptr),
           "cuPointerGetAttribute(DEVICE_ORDINAL)")
    if managed.value:
        return "managed", device.value
    return ("pinned" if kind.value == _MEMORYTYPE_HOST else "device"), device.value


def stream_after(consumer, producer, device):
    """Work queued on stream consumer from now on runs after what stream producer has queued so
    far (an event recorded on producer, waited for by consumer), in device's primary context.
    Handles as ints: 0 or 1 the legacy default stream, 2 the per-thread one."""
    cu = _driver()
    dev, ctx, ev = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
    _check(cu, cu.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
    _check(cu, cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    try:
        _check(cu, cu.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
        try:
            _check(cu, cu.cuEventCreate(ctypes.byref(ev), _EVENT_DISABLE_TIMING), "cuEventCreate")
            try:
                _check(cu, cu.cuEventRecord(ev, producer), "cuEventRecord")
                _check(cu, cu.cuStreamWaitEvent(consumer, ev, 0), "cuStreamWaitEvent")
            finally:
                cu.cuEventDestroy_v2(ev)
        finally:
            cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    finally:
        cu.cuDevicePrimaryCtxRelease_v2(dev)


def stream_idle(handle):
    """Whether stream handle (an int, not a special handle) has no work queued: cuStreamQuery
    answers CUDA_SUCCESS. Any other answer (work queued, or an error) is no."""
    return handle > 2 and _driver().cuStreamQuery(handle) == 0
