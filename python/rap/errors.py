"""rap.errors — one exception class per rap status, so that a program branches on the class (or on
.status, rap's name for it) rather than on the sentence.

    try:
        ptr = pool.allocate(n, stream)
    except rap.OutOfMemoryError:       # also a MemoryError
        pool.release(); ...
    except rap.Error as e:             # every refusal; e.status == "RAP_ERR_BUSY", e.code == -5

Each class is rap.Error and, where Python has one that means the same, that built-in too
(OutOfMemoryError is a MemoryError; InvalidError, NotFoundError, WrongResourceError and
UnknownPointerError are ValueErrors; UnsupportedError is a NotImplementedError), so code written
for the built-ins keeps working: a bad spec is a ValueError whichever part of it is wrong.
"""

__all__ = ["Error", "InvalidError", "OutOfMemoryError", "NotFoundError", "ExistsError",
           "BusyError", "UnsupportedError", "WrongResourceError", "UnknownPointerError",
           "BackendError", "CorruptError"]


class Error(RuntimeError):
    """A rap call refused: status is rap's name for it ("RAP_ERR_BUSY"), code its number (-5),
    the text rap's sentence (rap_last_error)."""
    status = "RAP_ERR_UNKNOWN_STATUS"
    code = None

    def __init__(self, status, sentence, code=None):
        super().__init__(sentence)
        self.status = status
        if code is not None:
            self.code = code


class InvalidError(Error, ValueError):
    """RAP_ERR_INVALID: an argument rap cannot take (a bad spec, a negative size, ...)."""


class OutOfMemoryError(Error, MemoryError):
    """RAP_ERR_NOMEM: the pool and the memory under it could not serve the request."""


class NotFoundError(Error, ValueError):
    """RAP_ERR_NOT_FOUND: no strategy, allocator or platform of that name."""


class ExistsError(Error):
    """RAP_ERR_EXISTS: the name (or handler) is there already."""


class BusyError(Error):
    """RAP_ERR_BUSY: still in use (live blocks, an asleep pool, queued work, a graph capture)."""


class UnsupportedError(Error, NotImplementedError):
    """RAP_ERR_UNSUPPORTED: not in this build, on this machine or for this allocator."""


class WrongResourceError(Error, ValueError):
    """RAP_ERR_WRONG_RESOURCE: the block belongs to another stream."""


class UnknownPointerError(Error, ValueError):
    """RAP_ERR_UNKNOWN_POINTER: the pointer is not a live block of this allocator."""


class BackendError(Error):
    """RAP_ERR_BACKEND: CUDA, HIP or the threads library refused."""


class CorruptError(Error):
    """RAP_ERR_CORRUPT: an internal invariant of the allocator is broken."""


# rap.h's RAP_STATUS_LIST: name, code, class.
_STATUSES = (
    ("RAP_ERR_INVALID", -1, InvalidError), ("RAP_ERR_NOMEM", -2, OutOfMemoryError),
    ("RAP_ERR_NOT_FOUND", -3, NotFoundError), ("RAP_ERR_EXISTS", -4, ExistsError),
    ("RAP_ERR_BUSY", -5, BusyError), ("RAP_ERR_UNSUPPORTED", -6, UnsupportedError),
    ("RAP_ERR_WRONG_RESOURCE", -7, WrongResourceError),
    ("RAP_ERR_UNKNOWN_POINTER", -8, UnknownPointerError), ("RAP_ERR_BACKEND", -9, BackendError),
    ("RAP_ERR_CORRUPT", -10, CorruptError),
)
_BY_STATUS = {}
for _name, _code, _cls in _STATUSES:
    _cls.status, _cls.code, _cls.__module__ = _name, _code, "rap"
    _BY_STATUS[_name] = _cls
Error.__module__ = "rap"


def error_class(status):
    """The class for a status name ("RAP_ERR_BUSY"); Error for one this package does not know."""
    return _BY_STATUS.get(status, Error)


def from_status(lib, st):
    """The exception for status st of the call just made, with rap's sentence."""
    name = lib.rap_status_name(st).decode()
    return error_class(name)(name, lib.rap_last_error().decode(), st)


def check(lib, st):
    """Raises the exception for st unless it is RAP_OK."""
    if st != 0:
        raise from_status(lib, st)
