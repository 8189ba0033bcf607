"""rap_torch — PyTorch's CUDA tensors on rap's ResourceAwarePool.

    import rap_torch
    rap_torch.enable()          # before the first CUDA tensor
    x = torch.randn(1024, device="cuda")

enable() loads librap_torch.so and makes it PyTorch's CUDA allocator through
torch.cuda.memory.CUDAPluggableAllocator. Each device gets one ResourceAwarePool, made from
RAP_TORCH_SPEC (a rap spec string, "{device}" standing for the device number) or from rap's
default for a device (RAP_DEFAULT_DEVICE_SPEC in rap/rap.h): "ResourceAwarePool(DeviceVmm(device=
{device}, export=posix), initial_size=64MiB, next_size=32MiB, heuristic=never, cross_resource=wait,
wait_above=512MiB, wait_pending_above=512MiB)" — one growable range per device that sleeps
(sleep/wake), shares tensors with other processes and registers with NCCL; where the driver refuses
that platform, the same pool over DEVICE::{device}.

PyTorch raises for a pluggable allocator's statistics; once enabled, torch.cuda.memory_stats,
memory_allocated, max_memory_reserved, reset_peak_memory_stats, memory_summary and the rest answer
with rap's figures under PyTorch's names (see memory_stats here), plus rap's own ("rap.*").

torch.compile(mode="reduce-overhead") works: enable() turns off Inductor's CUDA graph trees
(torch._inductor.config.triton.cudagraph_trees), which need to checkpoint and restore an
allocator's private pools, something a pluggable allocator cannot offer; Inductor then records one
CUDA graph per compiled function, whose memory comes from rap's graph pools.

allocator() is rap as a PyTorch allocator object, for torch.cuda.MemPool(rap_torch.allocator()):
a scoped pool whose memory comes from rap while PyTorch's own allocator serves the rest.

enable() also hands PyTorch rap's record_stream, empty_cache, memory-fraction and CUDA-graph pool
functions (set_record_stream_fn, set_reset_fn, set_memory_fraction_fn,
set_begin_allocate_to_pool, set_end_allocate_to_pool_fn,
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

try:
    import torch
except ImportError as _e:
    raise ImportError("rap.torch needs PyTorch with CUDA (pip install torch; see https://pytorch.org for the CUDA build that matches your driver); it is not installed here (%s). rap itself "
                      "(rap.Allocator, rap.check_spec) works without it." % (_e,)) from _e

__all__ = [
    "enable", "enabled", "library_path", "allocator", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "pending_bytes", "memory_stats",
    "memory_stats_as_nested_dict", "rap_stats", "reset_peak_memory_stats",
    "reset_accumulated_memory_stats", "memory_summary", "empty_cache", "release_graph_pools",
    "graph_memory_reserved", "record_stream", "spec", "hooks", "snapshot_from_trace", "sleep", "wake",
    "prepare_sleep", "share", "open", "IpcHandle", "set_memory_fraction", "memory_limit",
    "NCCL_SPEC", "register_mem_pool", "registrable", "set_python_stack", "python_stack",
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

_lib = None         # set by enable(): rap is PyTorch's allocator
_loaded = None      # the library, loaded by enable() or allocator()
_pluggable = None   # the one CUDAPluggableAllocator over it
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
    lib.rap_torch_memory_fraction.argtypes = [ctypes.c_int, ctypes.c_double]
    lib.rap_torch_memory_fraction.restype = ctypes.c_int
    lib.rap_torch_memory_limit.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)]
    lib.rap_torch_memory_limit.restype = ctypes.c_int
    lib.rap_torch_use_pool_hooks.argtypes = [ctypes.c_int]
    lib.rap_torch_use_pool_hooks.restype = None
    lib.rap_torch_sleep.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.rap_torch_sleep.restype = ctypes.c_int
    for fn in ("rap_torch_reset_peaks", "rap_torch_reset_accumulated", "rap_torch_wake"):
        getattr(lib, fn).argtypes = [ctypes.c_int]
        getattr(lib, fn).restype = ctypes.c_int
    lib.rap_torch_ipc_export.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    lib.rap_torch_ipc_export.restype = ctypes.c_int
    lib.rap_torch_ipc_import.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                         ctypes.POINTER(ctypes.c_void_p)]
    lib.rap_torch_ipc_import.restype = ctypes.c_int
    lib.rap_torch_ipc_close.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    lib.rap_torch_ipc_close.restype = ctypes.c_int
    lib.rap_torch_registrable.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rap_torch_registrable.restype = ctypes.c_int
    lib.rap_torch_python_stack.argtypes = [ctypes.c_int]
    lib.rap_torch_python_stack.restype = ctypes.c_int
    lib.rap_torch_python_stack_depth.argtypes = []
    lib.rap_torch_python_stack_depth.restype = ctypes.c_int
    return lib


def _library():
    global _loaded
    if _loaded is None:
        _loaded = _load(library_path())
    return _loaded


# Memory NCCL can register (ncclCommRegister, NVLS and window registration): CUDA virtual memory
# with POSIX file descriptor handles, RDMA-capable where the device supports it, in the recommended
# granularity, as ncclMemAlloc makes it. Each raw allocation PyTorch's caching allocator asks of a
# MemPool over it is one mapping of its own (pieces of at most 1 GiB), so that a segment PyTorch
# registers is what NCCL finds with cuMemGetAddressRange.
NCCL_SPEC = "DeviceVmm(export=posix)"

_spec_fixed = None   # the spec the device pools are made from, once allocator() or enable() ran


def _fix_spec(spec):
    global _spec_fixed
    current = os.environ.get("RAP_TORCH_SPEC") or None
    want = spec if spec is not None else current
    if _spec_fixed is not None:
        if spec is not None and spec != _spec_fixed[0]:
            raise RuntimeError("rap.torch: the device pools are made from %r already; one spec per "
                               "process (asked for %r)" % (_spec_fixed[0] or "the default", spec))
        return
    if spec is not None:
        os.environ["RAP_TORCH_SPEC"] = spec
    _spec_fixed = (want,)


def allocator(spec=None):
    """rap as a PyTorch allocator object (torch._C._cuda_CUDAAllocator), for a scoped pool:

        pool = torch.cuda.MemPool(rap_torch.allocator())
        with torch.cuda.use_mem_pool(pool):
            x = torch.empty(n, device="cuda")      # memory from rap's pool for the device

    PyTorch's own allocator keeps serving everything else. The same object enable() installs.
    spec (a rap spec, "{device}" for the device) is what the device pools are made from, as
    RAP_TORCH_SPEC: rap.torch.allocator(rap.torch.NCCL_SPEC) gives memory NCCL can register
    (register_mem_pool). One spec per process: RuntimeError for another once pools exist."""
    global _pluggable
    _fix_spec(spec)
    if _pluggable is None:
        _pluggable = torch.cuda.memory.CUDAPluggableAllocator(library_path(), "rap_torch_malloc",
                                                              "rap_torch_free")
        _library()
    return _pluggable.allocator()


def _address(lib, name):
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def enabled():
    return _lib is not None


def hooks():
    """How record_stream, empty_cache and CUDA-graph pools reach rap: 'allocator' (PyTorch's own
    hooks), 'python' (a wrapper of the Python function) or 'capture detection'."""
    return dict(_hooks)


def set_python_stack(depth):
    """Each allocation a trace records (RAP_TRACE) carries the innermost depth Python frames of the
    code that made it (0 to 32; 0: none), as "pystack": rap-trace stacks groups by them and
    snapshot_from_trace puts them in memory_viz's frames. The same as RAP_TRACE_PYTHON_STACK=depth
    in the environment. Costs nothing while no trace is open; traced, about a microsecond a frame
    an allocation. The GIL, which PyTorch lets go inside its operators, is taken back for the
    walk; allocations on threads Python never saw (PyTorch's autograd threads, in backward) carry
    no Python frames."""
    depth = int(depth)
    if _library().rap_torch_python_stack(depth) != 0:
        raise ValueError("rap.torch.set_python_stack: a number of frames from 0 to 32, not %d" % depth)


def python_stack():
    """The Python frames each traced allocation carries (set_python_stack, RAP_TRACE_PYTHON_STACK)."""
    return _library().rap_torch_python_stack_depth()


def enable(spec=None, python_stack=None):
    """Makes rap PyTorch's CUDA allocator. Must run before the first CUDA allocation.
    python_stack=N: traced allocations carry their N innermost Python frames (set_python_stack)."""
    global _lib
    if python_stack is not None:
        set_python_stack(python_stack)
    if _lib is not None:
        return
    native = allocator(spec)
    lib = _library()
    for setter, fn, key in (("set_record_stream_fn", "rap_torch_record_stream", "record_stream"),
                            ("set_reset_fn", "rap_torch_empty_cache", "empty_cache"),
                            ("set_memory_fraction_fn", "rap_torch_set_memory_fraction",
                             "memory_fraction")):
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
    torch.cuda.memory.change_current_allocator(_pluggable)
    _lib = lib
    _install_stats()
    _hooks["memory_stats"] = "rap"
    _hooks["cudagraph_trees"] = _no_cudagraph_trees()
    if "record_stream" not in _hooks:
        _wrap_record_stream()
        _hooks["record_stream"] = "python"
    if "empty_cache" not in _hooks:
        _wrap_empty_cache()
        _hooks["empty_cache"] = "python"
    # Always wrapped: rap's check of the fraction comes first (PyTorch lets 0 through), and
    # without PyTorch's hook the wrapper is what reaches rap.
    _wrap_memory_fraction(_hooks.get("memory_fraction") == "allocator")
    _hooks.setdefault("memory_fraction", "python")
    _install_reductions()
    _hooks["multiprocessing"] = "rap.share/open"


def _no_cudagraph_trees():
    """Inductor's CUDA graph trees checkpoint and restore the allocator's private pools
    (torch._C._cuda_getCheckpointState / _cuda_setCheckpointPoolState, and
    _cuda_checkPoolLiveAllocations in its checks); PyTorch's pluggable allocator has no way to offer
    them and raises. Without trees, torch.compile(mode="reduce-overhead") records one CUDA graph
    per compiled function through the allocator's graph-pool hooks, which rap serves."""
    try:
        import torch._inductor.config as inductor_config
    except Exception:  # noqa: BLE001 - a PyTorch without Inductor: nothing to turn off
        return "no inductor"
    inductor_config.triton.cudagraph_trees = False
    return "off"


def _install_stats():
    """torch.cuda's statistics read rap's: torch.cuda.memory_stats and everything built on it
    (memory_allocated, max_memory_reserved, memory_summary, ...) call these three."""
    torch._C._cuda_memoryStats = memory_stats_as_nested_dict
    torch._C._cuda_resetPeakMemoryStats = reset_peak_memory_stats
    torch._C._cuda_resetAccumulatedMemoryStats = reset_accumulated_memory_stats


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


def _check_fraction(fraction):
    try:
        f = float(fraction)
    except (TypeError, ValueError):
        raise TypeError("a memory fraction is a number in (0, 1], not %r" % (fraction,)) from None
    if not 0.0 < f <= 1.0:  # NaN too
        raise ValueError("a memory fraction must be in (0, 1] (above 0, at most 1); %r is not"
                         % (fraction,))
    return f


def _wrap_memory_fraction(hooked):
    original = torch.cuda.set_per_process_memory_fraction

    def set_per_process_memory_fraction(fraction, device=None):
        f = _check_fraction(fraction)
        if hooked:  # PyTorch calls rap_torch_set_memory_fraction
            original(f, device)
        else:
            set_memory_fraction(f, device)

    set_per_process_memory_fraction.__doc__ = original.__doc__
    torch.cuda.set_per_process_memory_fraction = set_per_process_memory_fraction
    torch.cuda.memory.set_per_process_memory_fraction = set_per_process_memory_fraction


def set_memory_fraction(fraction, device=None):
    """The device's pool may reserve at most fraction x the device's total memory; an allocation
    that would take it past that fails as out of memory (the pool first gives back its wholly
    free chunks and tries once more; PyTorch raises what it raises for any failed allocation). fraction must be in (0, 1]; 1 removes the cap. What
    torch.cuda.set_per_process_memory_fraction does once enabled."""
    f = _check_fraction(fraction)
    _need()
    d = _device(device)
    if _lib.rap_torch_memory_fraction(d, f) != 0:
        raise RuntimeError("rap_torch: " + _loader.last_error(_lib, "torch"))


def memory_limit(device=None):
    """The bytes the device's pool may reserve (set_memory_fraction), or 0 for no limit."""
    _need()
    d = _device(device)
    out = ctypes.c_size_t(0)
    if _lib.rap_torch_memory_limit(d, ctypes.byref(out)) != 0:
        raise RuntimeError("rap_torch: " + _loader.last_error(_lib, "torch"))
    return out.value


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


def rap_stats(device=None, graph=False):
    """rap's own figures for a device's pool (graph=True: summed over its CUDA-graph pools):
    current, peak, reserved, peak_reserved, pending, pending_count, free, releasable,
    largest_free, allocations, blocks, chunks, used, streams, graph_pools, deferred, and the
    running totals behind memory_stats's "allocated" and "freed"."""
    return _loader.memory_stats(_library(), "torch", _device(device), graph)


def _stat(current, peak, allocated=0, freed=0):
    return {"current": current, "peak": max(peak, current), "allocated": allocated, "freed": freed}


def _pools(stat):
    """PyTorch splits its figures into a small (< 1 MiB) and a large pool; rap has one, counted as
    the large pool, so that all = large_pool + small_pool still holds."""
    return {"all": stat, "large_pool": dict(stat), "small_pool": _stat(0, 0)}


def memory_stats_as_nested_dict(device=None):
    """torch.cuda.memory_stats_as_nested_dict's shape, from rap's figures (the device's pool and its
    CUDA-graph pools together). What rap does not count is 0 (small_pool, oversize, retries, device
    calls, segment and reserved totals). active is live + pending (rap's pending is PyTorch's
    "active, freed, awaiting its streams"); the peaks of active and inactive_split are lower bounds
    (rap keeps no peak of them). rap's own figures are under "rap"."""
    device = _device(device)
    m, g = rap_stats(device), rap_stats(device, graph=True)
    live = m["current"] + g["current"]
    count = m["allocations"] + g["allocations"]
    peak = m["peak"] + g["peak"]
    allocs, alloc_bytes = m["allocs_total"], m["alloc_bytes_total"]
    freed_count = max(0, allocs + m["base_count"] - count)
    freed_bytes = max(0, alloc_bytes + m["base_bytes"] - live)
    pending, pending_count = m["pending"] + g["pending"], m["pending_count"] + g["pending_count"]
    free_blocks = max(0, m["blocks"] + g["blocks"] - count - pending_count)
    not_releasable = max(0, m["free"] + g["free"] - m["releasable"] - g["releasable"])
    chunks = m["chunks"] + g["chunks"]
    return {
        "allocated_bytes": _pools(_stat(live, peak, alloc_bytes, freed_bytes)),
        "requested_bytes": _pools(_stat(live, peak, alloc_bytes, freed_bytes)),
        "allocation": _pools(_stat(count, count, allocs, freed_count)),
        "active_bytes": _pools(_stat(live + pending, peak, alloc_bytes,
                                     max(0, freed_bytes - pending))),
        "active": _pools(_stat(count + pending_count, count, allocs,
                               max(0, freed_count - pending_count))),
        "reserved_bytes": _pools(_stat(m["reserved"] + g["reserved"],
                                       m["peak_reserved"] + g["peak_reserved"])),
        "segment": _pools(_stat(chunks, chunks)),
        "inactive_split_bytes": _pools(_stat(not_releasable, not_releasable)),
        "inactive_split": _pools(_stat(free_blocks, free_blocks)),
        "oversize_allocations": _stat(0, 0),
        "oversize_segments": _stat(0, 0),
        "num_alloc_retries": 0,
        "num_ooms": m["ooms"],
        "num_sync_all_streams": 0,
        "num_device_alloc": 0,
        "num_device_free": 0,
        "rap": {"pending_bytes": pending, "pending_count": pending_count,
                "free_bytes": m["free"] + g["free"],
                "releasable_bytes": m["releasable"] + g["releasable"],
                "largest_free_block": max(m["largest_free"], g["largest_free"]),
                "streams": m["streams"], "graph_pools": m["graph_pools"],
                "graph_reserved_bytes": g["reserved"], "deferred_frees": m["deferred"]},
    }


def memory_stats(device=None):
    """torch.cuda.memory_stats's flat dictionary ("allocated_bytes.all.current", ..., "num_ooms",
    and rap's own: "rap.pending_bytes", ...), from rap's figures; once enabled,
    torch.cuda.memory_stats itself answers this."""
    flat = {}

    def walk(prefix, obj):
        for k, v in obj.items():
            if isinstance(v, dict):
                walk(prefix + k + ".", v)
            else:
                flat[prefix + k] = v

    walk("", memory_stats_as_nested_dict(device))
    return dict(sorted(flat.items()))


def reset_peak_memory_stats(device=None):
    """The peaks start again from the current values, in the device's pool and its CUDA-graph
    pools (rap_allocator_reset_peaks)."""
    lib = _library()
    if lib.rap_torch_reset_peaks(_device(device)) != 0:
        raise RuntimeError("rap_torch: " + _loader.last_error(lib, "torch"))


def reset_accumulated_memory_stats(device=None):
    """The running totals ("*.allocated", "*.freed", "num_ooms") start again from zero."""
    lib = _library()
    if lib.rap_torch_reset_accumulated(_device(device)) != 0:
        raise RuntimeError("rap_torch: " + _loader.last_error(lib, "torch"))


def memory_summary(device=None, abbreviated=False):
    """torch.cuda.memory_summary's table over rap's figures, then a line with rap's pending memory."""
    if enabled():
        text = torch.cuda.memory_summary(device, abbreviated)
    else:   # torch.cuda.memory_summary reads PyTorch's own allocator then: format rap's here
        saved = torch._C._cuda_memoryStats
        torch._C._cuda_memoryStats = memory_stats_as_nested_dict
        try:
            text = torch.cuda.memory_summary(device, abbreviated)
        finally:
            torch._C._cuda_memoryStats = saved
    s = memory_stats_as_nested_dict(device)["rap"]
    return text + ("rap: %d bytes pending in %d blocks (freed on a stream whose queued work may "
                   "still use them), %d streams, %d CUDA-graph pools holding %d bytes\n"
                   % (s["pending_bytes"], s["pending_count"], s["streams"], s["graph_pools"],
                      s["graph_reserved_bytes"]))


def memory_allocated(device=None):
    """Bytes of live tensors (as requested)."""
    return memory_stats_as_nested_dict(device)["allocated_bytes"]["all"]["current"]


def max_memory_allocated(device=None):
    return memory_stats_as_nested_dict(device)["allocated_bytes"]["all"]["peak"]


def memory_reserved(device=None):
    """Bytes the device's pools hold from CUDA."""
    return memory_stats_as_nested_dict(device)["reserved_bytes"]["all"]["current"]


def max_memory_reserved(device=None):
    return memory_stats_as_nested_dict(device)["reserved_bytes"]["all"]["peak"]


def pending_bytes(device=None):
    """Bytes freed on a stream whose queued work may still use them."""
    return rap_stats(device)["pending"]


def graph_memory_reserved(device=None):
    return rap_stats(device, graph=True)["reserved"]


def empty_cache():
    """Polls every stream and gives rap's wholly free chunks back to CUDA."""
    _library().rap_torch_empty_cache()


def release_graph_pools():
    """Gives back the memory of finished CUDA-graph captures; only once those graphs are gone."""
    _need()
    return _lib.rap_torch_release_graph_pools()


_SLEEP_MODES = {"backup": 0, "discard": 1}


def sleep(mode="backup", device=None):
    """rap's pool for the device gives its GPU memory back to the driver and keeps every address:
    tensors keep their data pointers. mode "backup" copies the live blocks to pinned host memory
    first (wake() restores them byte for byte); "discard" keeps nothing (caches, activations).
    Waits only for the streams that used the pool's blocks. While asleep the pool refuses to
    allocate or free. Needs the pool over DEVICE_VMM, e.g.
    enable("ResourceAwarePool(DEVICE_VMM, initial_size=64MiB)"); RuntimeError with rap's sentence
    otherwise."""
    if mode not in _SLEEP_MODES:
        raise ValueError("mode is 'backup' or 'discard', not %r" % (mode,))
    lib = _library()
    if lib.rap_torch_sleep(_device(device), _SLEEP_MODES[mode]) != 0:
        raise RuntimeError("rap_torch: " + _loader.last_error(lib, "torch"))


def prepare_sleep(device=None):
    """Makes the pinned host backup for what the device's pool holds live now, so that the first
    sleep("backup") pays no pinning (call it after loading a model, off the critical path). The
    pool stays awake."""
    lib = _library()
    if lib.rap_torch_sleep(_device(device), 2) != 0:
        raise RuntimeError("rap_torch: " + _loader.last_error(lib, "torch"))


def wake(device=None):
    """Maps the pool's memory again at the same addresses and restores what sleep("backup")
    kept; the copies are done when it returns. A wake the driver refuses (another process holds
    the memory) raises RuntimeError and leaves the pool asleep with its backup: call it again."""
    lib = _library()
    if lib.rap_torch_wake(_device(device)) != 0:
        raise RuntimeError("rap_torch: " + _loader.last_error(lib, "torch"))


def registrable(ptr=None, device=None):
    """None when NCCL can register the memory at ptr (an int address; None: whatever the device's
    pool hands out), else rap's sentence saying why not (rap_pointer_registrable)."""
    lib = _library()
    if lib.rap_torch_registrable(ptr, _device(device)) == 0:
        return None
    return _loader.last_error(lib, "torch")


def register_mem_pool(pool, group=None, device=None):
    """Registers a torch.cuda.MemPool over rap.torch.allocator(NCCL_SPEC) with NCCL for the
    process group (default: the world), through ProcessGroupNCCL.register_mem_pool: NCCL can then
    use the pool's buffers directly (user-buffer registration) in collectives. Segments the pool
    takes later are registered by PyTorch as they come, and deregistered before PyTorch gives
    them back. ValueError with rap's sentence if the pool's memory is not registrable (a pool made
    from another spec); RuntimeError if rap is PyTorch's allocator (enable()): PyTorch reads the
    caching allocator's snapshot of the pool, which no pluggable allocator can give."""
    if enabled():
        raise RuntimeError("rap.torch.register_mem_pool: rap is PyTorch's allocator in this process "
                           "(enable()), and ProcessGroupNCCL.register_mem_pool reads the caching "
                           "allocator's snapshot, which PyTorch's pluggable allocator cannot give; "
                           "register a torch.cuda.MemPool(rap.torch.allocator(rap.torch.NCCL_SPEC)) "
                           "in a process that keeps PyTorch's own allocator")
    import torch.distributed as dist
    d = _device(device)
    why = registrable(None, d)
    if why is not None:
        raise ValueError("rap.torch.register_mem_pool: NCCL cannot register this pool's memory: "
                         + why)
    backend = (group if group is not None else dist.group.WORLD)._get_backend(torch.device("cuda", d))
    backend.register_mem_pool(pool)


def deregister_mem_pool(pool, group=None, device=None):
    """Undoes register_mem_pool: NCCL lets go of the pool's segments. Call it before the process
    group is destroyed and before the pool goes: a registered MemPool that outlives its group
    frees its segments through PyTorch's deregistration hook, which asks the destroyed group's
    communicator and ends the process (PyTorch 2.11: "NCCL communicator was aborted")."""
    import torch.distributed as dist
    d = _device(device)
    backend = (group if group is not None else dist.group.WORLD)._get_backend(torch.device("cuda", d))
    backend.deregister_mem_pool(pool)


def spec(device=None):
    return _loader.spec(_library(), "torch", _device(device) if device is not None else 0)


# ---- memory across processes -------------------------------------------------------------------
# PyTorch refuses CUDA IPC for every pluggable allocator (shareIpcHandle), so torch.multiprocessing
# cannot send a CUDA tensor of rap's pool by itself. share() exports the tensor's block of rap's
# pool (which must be over an exporting platform: DeviceVmm(device={device}, export=posix)) and
# open() imports it in another process; enable() makes torch.multiprocessing use them.

import collections as _collections

IpcHandle = _collections.namedtuple(
    "IpcHandle", "desc nbytes dtype shape stride offset device uuid event requires_grad")

_SHARE_HINT = ('the device\'s pool must be over DeviceVmm(export=posix) or StreamOrdered(pool=new, '
               'export=posix), e.g. rap_torch.enable('
               '"ResourceAwarePool(DeviceVmm(device={device}, export=posix), initial_size=64MiB)")')


def share(tensor):
    """A picklable handle to a CUDA tensor of rap's pool that another process turns into a tensor
    over the same memory with open(handle). The memory returns to this process's pool only after
    the other process dropped its tensor and its stream passed that point, however soon this
    process frees its own. Each handle is opened once (share again for each receiver). Work queued
    on the current stream before share() is waited for by the receiver's stream."""
    _need()
    if not tensor.is_cuda:
        raise ValueError("rap_torch.share: the tensor is not a CUDA tensor")
    storage = tensor.untyped_storage()
    device = tensor.device.index
    desc = (ctypes.c_ubyte * 64)()
    if _lib.rap_torch_ipc_export(storage.data_ptr(), device, desc) != 0:
        raise RuntimeError("rap_torch.share: %s (%s)" % (_loader.last_error(_lib, "torch"), _SHARE_HINT))
    event = torch.cuda.Event(interprocess=True)
    event.record(torch.cuda.current_stream(device))
    return IpcHandle(bytes(desc), storage.nbytes(), str(tensor.dtype).replace("torch.", ""),
                     tuple(tensor.shape), tuple(tensor.stride()), tensor.storage_offset(), device,
                     str(torch.cuda.get_device_properties(device).uuid), bytes(event.ipc_handle()),
                     tensor.requires_grad)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DL_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _DL_DELETER)]
_opened = {}   # id -> what a DLPack tensor handed to PyTorch keeps alive until its deleter runs


def _close_opened(managed):
    key = managed.contents.manager_ctx
    entry = _opened.pop(key, None)
    if entry is None:
        return
    ptr, device, stream = entry[0], entry[1], entry[2]
    if _library().rap_torch_ipc_close(ptr, device, stream) != 0:
        import warnings
        warnings.warn("rap_torch: closing a shared tensor: " + _loader.last_error(_library(), "torch"))


_close_cb = _DL_DELETER(_close_opened)


def _local_device(handle):
    for i in range(torch.cuda.device_count()):
        if str(torch.cuda.get_device_properties(i).uuid) == handle.uuid:
            return i
    return handle.device


def open(handle, stream=None):
    """The tensor share() described, in this process: the same memory, dtype, shape and strides.
    Its work runs on stream (default: the current stream), which first waits for the sender's
    work before share(); when the tensor is dropped, its memory goes back to the sender once this
    stream has passed that point. RuntimeError with rap's sentence if the handle cannot be opened
    (opened already, its pool or process gone, no permission: docs/integrations.md)."""
    lib = _library()
    device = _local_device(handle)
    stream = stream if stream is not None else torch.cuda.current_stream(device)
    stream.wait_event(torch.cuda.Event.from_ipc_handle(device, handle.event))
    desc = (ctypes.c_ubyte * 64).from_buffer_copy(handle.desc)
    ptr = ctypes.c_void_p()
    if lib.rap_torch_ipc_import(desc, device, stream.cuda_stream, ctypes.byref(ptr)) != 0:
        raise RuntimeError("rap_torch.open: " + _loader.last_error(lib, "torch"))
    shape = (ctypes.c_int64 * 1)(handle.nbytes)
    managed = _DLManagedTensor()
    managed.dl_tensor = _DLTensor(ptr.value, _DLDevice(2, device), 1, _DLDataType(1, 8, 1),
                                  ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)), None, 0)
    # kDLCUDA, one dimension of uint8: the block's bytes, viewed below as what was shared
    key = id(managed)
    managed.manager_ctx = key
    managed.deleter = _close_cb
    _opened[key] = (ptr.value, device, stream.cuda_stream, managed, shape)
    ctypes.pythonapi.PyCapsule_New.restype = ctypes.py_object
    ctypes.pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = ctypes.pythonapi.PyCapsule_New(ctypes.addressof(managed), b"dltensor", None)
    flat = torch.utils.dlpack.from_dlpack(capsule)
    t = flat.view(getattr(torch, handle.dtype)).as_strided(handle.shape, handle.stride, handle.offset)
    return t.requires_grad_(handle.requires_grad) if handle.requires_grad else t


def _rebuild_shared(handle):
    return open(handle)


def _install_reductions():
    """torch.multiprocessing sends CUDA tensors through share() and open(); a CUDA storage sent
    alone gets a sentence naming them instead of PyTorch's shareIpcHandle error."""
    try:
        from multiprocessing.reduction import ForkingPickler
        import torch.multiprocessing.reductions as reductions
    except ImportError:
        return
    original = reductions.reduce_tensor

    def reduce_tensor(tensor):
        if tensor.is_cuda:
            return (_rebuild_shared, (share(tensor),))
        return original(tensor)

    def reduce_storage(storage):
        if storage.device.type == "cuda":
            raise RuntimeError("rap_torch: a CUDA storage cannot be sent alone with rap as the "
                               "allocator (PyTorch's pluggable allocator refuses CUDA IPC); send "
                               "the tensor, or use rap_torch.share(tensor) and rap_torch.open(handle)")
        return reductions.reduce_storage(storage)

    ForkingPickler.register(torch.Tensor, reduce_tensor)
    ForkingPickler.register(torch.nn.parameter.Parameter, reduce_tensor)
    ForkingPickler.register(torch.UntypedStorage, reduce_storage)
