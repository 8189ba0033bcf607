"""rap._process — what is set for the whole process: rap's logger (its level, and a Python
function to receive its messages instead of stderr) and the event trace (docs/trace.md).

    rap.set_log_level("info")
    rap.set_log_handler(lambda level, message: logging.getLogger("rap").warning(message))
    rap.trace_start("/tmp/run-%p.jsonl"); ...; rap.trace_stop()
"""

import os
import threading

from . import _lib
from .errors import InvalidError, check

__all__ = ["set_log_handler", "set_log_level", "log_level", "trace_start", "trace_stop",
           "trace_flush", "LOG_LEVELS"]

LOG_LEVELS = ("debug", "info", "warn", "error", "off")   # rap_log_level's order: 0 .. 4
_handlers = []         # every ctypes callback handed to rap: one replaced may still be running
_handler_lock = threading.Lock()


def _level(level):
    if isinstance(level, str) and level.lower() in LOG_LEVELS:
        return LOG_LEVELS.index(level.lower())
    if isinstance(level, int) and not isinstance(level, bool) and 0 <= level < len(LOG_LEVELS):
        return level
    raise InvalidError("RAP_ERR_INVALID", "rap.set_log_level: a level is one of %s (or 0 to 4), "
                       "not %r" % (", ".join(LOG_LEVELS), level), -1)


def set_log_level(level):
    """Messages below level are dropped: "debug", "info", "warn" (the default, or RAP_LOG_LEVEL),
    "error" or "off"."""
    lib = _lib.library()
    check(lib, lib.rap_log_set_level(_level(level)))


def log_level():
    """The level in use, as its name."""
    return LOG_LEVELS[_lib.library().rap_log_get_level()]


def set_log_handler(fn):
    """fn(level, message) receives rap's messages (level a name of LOG_LEVELS) instead of stderr,
    on whichever thread logs; None gives them back to stderr. What fn raises is reported by
    Python as unraisable and dropped: rap's call goes on."""
    lib = _lib.library()
    with _handler_lock:
        if fn is None:
            check(lib, lib.rap_log_set_handler(_lib.LOG_FN(), None))
            return

        def handler(level, message, _user):
            name = LOG_LEVELS[level] if 0 <= level < len(LOG_LEVELS) else str(level)
            fn(name, message.decode(errors="replace") if message else "")
        cb = _lib.LOG_FN(handler)
        _handlers.append(cb)
        check(lib, lib.rap_log_set_handler(cb, None))


def trace_start(path):
    """Every allocator's events go to path as JSON Lines ("%p" in path: the process id); a
    trace already open is closed first. rap-trace reads it."""
    lib = _lib.library()
    check(lib, lib.rap_trace_start(os.fsencode(path)))


def trace_stop():
    """Flushes and closes the trace (nothing to do when none is open)."""
    lib = _lib.library()
    check(lib, lib.rap_trace_stop())


def trace_flush():
    """What was traced so far reaches the file."""
    lib = _lib.library()
    check(lib, lib.rap_trace_flush())


