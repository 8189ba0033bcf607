"""rap_torch — PyTorch's CUDA tensors on rap's ResourceAwarePool.

    import rap_torch
    rap_torch.enable()          # before the first CUDA tensor
    x = torch.randn(1024, device="cuda")

enable() loads librap_torch.so and makes it PyTorch's CUDA allocator through
torch.cuda.memory.CUDAPluggableAllocator. Each device gets one ResourceAwarePool, made from
RAP_TORCH_SPEC (a rap spec string, "{device}" standing for the device number) or from
"ResourceAwarePool(DEVICE::{device}, initial_size=64MiB, next_size=32MiB, heuristic=never)".

PyTorch cannot report a pluggable allocator's memory (torch.cuda.memory_allocated raises), so this
module reports rap's: memory_allocated, max_memory_allocated, memory_reserved,
max_memory_reserved, pending_bytes, memory_stats.

enable() also hands PyTorch rap's record_stream, empty_cache and CUDA-graph pool functions
(set_record_stream_fn, set_reset_fn, set_begin_allocate_to_pool, set_end_allocate_to_pool_fn,
set_release_pool on the allocator object; PyTorch 2.11 has them). Where a PyTorch lacks them it
wraps torch.Tensor.record_stream and torch.cuda.empty_cache instead, and finds graph captures by
asking CUDA at each allocation; hooks() says which. RAP_TORCH_POOL_HOOKS=0 forces the latter for
graphs.

The library is found from RAP_TORCH_LIB, next to this file, or under <repo>/device-build or
<repo>/build. Finding and loading it is integrations/common/rap_loader.py, shared with rap_cupy;
a build copies it next to this file.
"""

import ctypes
import importlib.util
import os

import torch

__all__ = [
    "enable", "enabled", "library_path", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "pending_bytes", "memory_stats", "empty_cache",
    "release_graph_pools", "graph_memory_reserved", "record_stream", "spec", "hooks",
    "snapshot_from_trace",
]


def _import_loader():
    """rap_loader, which this module shares with rap_cupy: the copy a build puts next to this
    file, else integrations/common/rap_loader.py in the source tree (also through a symlink)."""
    tried = []
    for f in (__file__, os.path.realpath(__file__)):
        here = os.path.dirname(os.path.abspath(f))
        for path in (os.path.join(here, "rap_loader.py"),
                     os.path.join(os.path.dirname(here), "common", "rap_loader.py")):
            if path in tried:
                continue
            if os.path.exists(path):
                found = importlib.util.spec_from_file_location("rap_loader", path)
                module = importlib.util.module_from_spec(found)
                found.loader.exec_module(module)
                return module
            tried.append(path)
    raise ImportError("rap_torch: rap_loader.py not found; looked at " + ", ".join(tried))


_loader = _import_loader()


def snapshot_from_trace(path, out=None, allocator=None, device=0):
    """A trace written with RAP_TRACE=FILE as PyTorch's memory snapshot (the dictionary
    torch.cuda.memory._snapshot() returns), pickled to out if given: drop it on
    pytorch.org/memory_viz, or pass it to torch.cuda._memory_viz. rap's pending blocks are
    'active_awaiting_free' there. rap_memviz.py, next to this file, does the work."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = importlib.util.spec_from_file_location("rap_memviz", os.path.join(here, "rap_memviz.py"))
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module.snapshot_from_trace(path, out, allocator, device)

_lib = None
_hooks = {}


def library_path():
    """Where librap_torch.so is: RAP_TORCH_LIB, next to this file, or under <repo>/device-build,
    <repo>/build or <repo>/build-rel."""
    return _loader.library_path("torch", __file__)


def _load(path):
    lib = _loader.load(path, "torch")
    lib.rap_torch_record_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.rap_torch_record_stream.restype = None
    lib.rap_torch_empty_cache.argtypes = []
    lib.rap_torch_empty_cache.restype = None
    lib.rap_torch_use_pool_hooks.argtypes = [ctypes.c_int]
    lib.rap_torch_use_pool_hooks.restype = None
    return lib


def _address(lib, name):
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def enabled():
    return _lib is not None


def hooks():
    """How record_stream, empty_cache and CUDA-graph pools reach rap: 'allocator' (PyTorch's own
    hooks), 'python' (a wrapper of the Python function) or 'capture detection'."""
    return dict(_hooks)


def enable(spec=None):
    """Makes rap PyTorch's CUDA allocator. Must run before the first CUDA allocation."""
    global _lib
    if _lib is not None:
        return
    if spec is not None:
        os.environ["RAP_TORCH_SPEC"] = spec
    path = library_path()
    allocator = torch.cuda.memory.CUDAPluggableAllocator(path, "rap_torch_malloc", "rap_torch_free")
    lib = _load(path)
    native = allocator.allocator()
    for setter, fn, key in (("set_record_stream_fn", "rap_torch_record_stream", "record_stream"),
                            ("set_reset_fn", "rap_torch_empty_cache", "empty_cache")):
        f = getattr(native, setter, None)
        if callable(f):
            try:
                f(_address(lib, fn))
                _hooks[key] = "allocator"
            except Exception:  # a binding that takes another argument type
                pass
    pool_hooks = (("set_begin_allocate_to_pool", "rap_torch_begin_allocate_to_pool"),
                  ("set_end_allocate_to_pool_fn", "rap_torch_end_allocate_to_pool"),
                  ("set_release_pool", "rap_torch_release_pool"))
    if (os.environ.get("RAP_TORCH_POOL_HOOKS", "1") != "0" and
            all(callable(getattr(native, setter, None)) for setter, _ in pool_hooks)):
        for setter, fn in pool_hooks:
            getattr(native, setter)(_address(lib, fn))
        lib.rap_torch_use_pool_hooks(1)
        _hooks["graph_pools"] = "allocator"
    else:
        _hooks["graph_pools"] = "capture detection"
    torch.cuda.memory.change_current_allocator(allocator)
    _lib = lib
    if "record_stream" not in _hooks:
        _wrap_record_stream()
        _hooks["record_stream"] = "python"
    if "empty_cache" not in _hooks:
        _wrap_empty_cache()
        _hooks["empty_cache"] = "python"


def _wrap_record_stream():
    original = torch.Tensor.record_stream

    def record_stream(self, stream):
        original(self, stream)
        if self.is_cuda:
            _lib.rap_torch_record_stream(self.untyped_storage().data_ptr(), stream.cuda_stream)

    record_stream.__doc__ = original.__doc__
    torch.Tensor.record_stream = record_stream


def _wrap_empty_cache():
    original = torch.cuda.empty_cache

    def empty_cache():
        original()
        _lib.rap_torch_empty_cache()

    empty_cache.__doc__ = original.__doc__
    torch.cuda.empty_cache = empty_cache
    torch.cuda.memory.empty_cache = empty_cache


def record_stream(tensor, stream):
    """tensor's memory is also used on stream (what Tensor.record_stream does once enabled)."""
    _need()
    _lib.rap_torch_record_stream(tensor.untyped_storage().data_ptr(), stream.cuda_stream)


def _need():
    if _lib is None:
        raise RuntimeError("rap_torch.enable() has not been called")


def _device(device):
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    return d.index if d.index is not None else torch.cuda.current_device()


def memory_stats(device=None, graph=False):
    """rap's statistics for a device's pool (graph=True: summed over its CUDA-graph pools)."""
    _need()
    return _loader.memory_stats(_lib, "torch", _device(device), graph)


def memory_allocated(device=None):
    """Bytes of live tensors (as requested)."""
    return memory_stats(device)["current"]


def max_memory_allocated(device=None):
    return memory_stats(device)["peak"]


def memory_reserved(device=None):
    """Bytes the pool holds from cudaMalloc."""
    return memory_stats(device)["reserved"]


def max_memory_reserved(device=None):
    return memory_stats(device)["peak_reserved"]


def pending_bytes(device=None):
    """Bytes freed on a stream whose queued work may still use them."""
    return memory_stats(device)["pending"]


def graph_memory_reserved(device=None):
    return memory_stats(device, graph=True)["reserved"]


def empty_cache():
    _need()
    _lib.rap_torch_empty_cache()


def release_graph_pools():
    """Gives back the memory of finished CUDA-graph captures; only once those graphs are gone."""
    _need()
    return _lib.rap_torch_release_graph_pools()


def spec(device=None):
    lib = _lib if _lib is not None else _load(library_path())
    return _loader.spec(lib, "torch", _device(device) if device is not None else 0)
