"""rap._dlpack — a Buffer as a DLPack capsule, built with ctypes (no numpy, no compiled code).

The tensor is one dimension of uint8, the buffer's bytes. The capsule is "dltensor" (a
DLManagedTensor) or, for a consumer that asks for DLPack 1.0 (max_version), "dltensor_versioned"
(a DLManagedTensorVersioned). Each export keeps its buffer alive in _exports until the consumer
calls the tensor's deleter (or the capsule is collected unconsumed: its destructor calls the
deleter then), which lets the buffer go: a buffer freed meanwhile goes back to its pool at the
last deleter. The structs follow dlpack.h (DLPack 1.0; the legacy struct is the same as 0.8's).
"""

import ctypes
import itertools
import threading

# DLDeviceType values (dlpack.h).
CPU, CUDA, CUDA_HOST, CUDA_MANAGED = 1, 2, 3, 13
_UINT = 1   # DLDataTypeCode kDLUInt


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_NAME = ctypes.create_string_buffer(b"dltensor")
_NAME_VERSIONED = ctypes.create_string_buffer(b"dltensor_versioned")
_exports = {}          # key -> (buffer, struct, shape): what an unconsumed or live export holds
_keys = itertools.count(1)
_lock = threading.Lock()

# The interpreter's C API through a handle of our own: ctypes.pythonapi's function objects are
# shared by every module, and one that declared other argument types would break these.
_api = ctypes.PyDLL(None)
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_void_p, _CAPSULE_DESTRUCTOR]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_void_p]


def _release(struct_type, address):
    key = struct_type.from_address(address).manager_ctx
    with _lock:
        entry = _exports.pop(key, None)
    if entry is not None:
        entry[0]._unexport()


@DELETER
def _delete(address):
    _release(DLManagedTensor, address)


@DELETER
def _delete_versioned(address):
    _release(DLManagedTensorVersioned, address)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    # A consumer renames the capsule ("used_dltensor") and owns the deleter from then on; a capsule
    # still named as made was never consumed, and its tensor is deleted here.
    for name, deleter in ((_NAME, _delete), (_NAME_VERSIONED, _delete_versioned)):
        if _api.PyCapsule_IsValid(capsule, ctypes.addressof(name)):
            deleter(_api.PyCapsule_GetPointer(capsule, ctypes.addressof(name)))
            return


def capsule(buffer, data, device_type, device_id, versioned):
    """A new capsule over buffer's bytes at data; buffer._export() was counted by the caller."""
    shape = (ctypes.c_int64 * 1)(buffer.size)
    tensor = DLTensor(data=data, device=DLDevice(device_type, device_id), ndim=1,
                      dtype=DLDataType(_UINT, 8, 1), shape=shape, byte_offset=0)
    key = next(_keys)
    if versioned:
        struct = DLManagedTensorVersioned(version=DLPackVersion(1, 0), manager_ctx=key,
                                          deleter=_delete_versioned, flags=0, dl_tensor=tensor)
        name = _NAME_VERSIONED
    else:
        struct = DLManagedTensor(dl_tensor=tensor, manager_ctx=key, deleter=_delete)
        name = _NAME
    with _lock:
        _exports[key] = (buffer, struct, shape)
    return _api.PyCapsule_New(ctypes.addressof(struct), ctypes.addressof(name), _capsule_destructor)


def live_exports():
    """How many tensors are exported and not yet deleted (for tests)."""
    with _lock:
        return len(_exports)
