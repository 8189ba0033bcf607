"""rap_memviz — a rap event trace as a PyTorch memory snapshot, for pytorch.org/memory_viz.

    RAP_TRACE=run.jsonl python train.py          # rap_torch writes the trace
    python rap_memviz.py run.jsonl -o run.pickle  # or rap_torch.snapshot_from_trace(...)

The snapshot is the dictionary torch.cuda.memory._snapshot() returns, pickled: 'device_traces'
holds the timeline, 'segments' the pools' chunks at the end of the trace. rap's events map onto
PyTorch's actions:

    rap                                    memory_viz
    alloc (the user's call)                alloc
    dealloc (the user's call)              free_requested
    block no longer pending (ready/reuse)  free_completed   (pending: 'active_awaiting_free')
    dealloc of a block that never pends    free_requested, then free_completed at once
    grow / release of a pool               segment_alloc / segment_free
    grow / release at a chunk's end        segment_map / segment_unmap (a growable platform's
                                           chunk growing or shrinking in place: one segment)
    oom                                    oom

Streams are rap's resource ids. Frames are where each block was allocated, innermost first, on
its alloc entry and its block in the segments: the C frames of RAP_TRACE_STACK ("stack"), named by
addr2line (binutils) where it is on the PATH and the module still exists, then the Python frames
rap.torch records with RAP_TRACE_PYTHON_STACK ("pystack"), as they are; empty in a trace without
them. Needs only the standard library (no torch), so a trace can be converted anywhere.
"""

import bisect
import json
import os
import pickle
import shutil
import subprocess
import sys

__all__ = ["snapshot_from_trace", "main"]



def _segment_ending_at(segments, p):
    """The base of the segment that ends exactly at p, or None."""
    for base, (size, _) in segments.items():
        if base + size == p:
            return base
    return None


def _segment_holding(segments, p):
    """The base of the segment that p lies in, or None."""
    for base, (size, _) in segments.items():
        if base <= p < base + size:
            return base
    return None

def _c_frame(word):
    """One "MODULE+0xADDR" of a "stack" as (module, address), or None."""
    module, plus, addr = word.rpartition("+0x")
    try:
        return (module, int(addr, 16)) if plus and module else None
    except ValueError:
        return None


def _name_c_frames(frames):
    """{(module, address): frame dict} for each C frame, named by addr2line where it can be (one
    run a module; a return address is named by the call before it), else as written."""
    named = {}
    tool = shutil.which("addr2line")
    by_module = {}
    for module, addr in frames:
        by_module.setdefault(module, []).append(addr)
    for module, addrs in by_module.items():
        addrs = sorted(set(addrs))
        lines = []
        if tool and os.access(module, os.R_OK):
            try:
                run = subprocess.run([tool, "-f", "-C", "-e", module] + ["0x%x" % max(a - 1, 0) for a in addrs],
                                     capture_output=True, text=True, timeout=120)
                lines = run.stdout.splitlines() if run.returncode == 0 else []
            except (OSError, subprocess.SubprocessError):
                lines = []
        for i, a in enumerate(addrs):
            func, where = (lines[2 * i], lines[2 * i + 1]) if len(lines) == 2 * len(addrs) else ("??", "")
            file, _, line = where.rpartition(":")
            line = line.split(" ")[0]
            if func.startswith("??"):
                named[(module, a)] = {"filename": module, "line": 0, "name": "+0x%x" % a}
            elif not file or file.startswith("??"):   # a symbol without line tables
                named[(module, a)] = {"filename": module, "line": 0, "name": func}
            else:
                named[(module, a)] = {"filename": file, "line": int(line) if line.isdigit() else 0,
                                      "name": func}
    return named


def _py_frames(pystack):
    """The frames of a "pystack": "FILE:LINE FUNCTION" lines, innermost first."""
    out = []
    for f in pystack.split("\n"):
        where, _, name = f.rpartition(" ")
        file, _, line = where.rpartition(":")
        if not where:
            where, name = name, "?"
            file, _, line = where.rpartition(":")
        out.append({"filename": file or where, "line": int(line) if line.isdigit() else 0,
                    "name": name})
    return out


def _frames_of(events, symbolize=True):
    """A function from an alloc event to its frames (a list of dicts: filename, line, name)."""
    words = [w for e in events if "stack" in e for w in e["stack"].split()]
    c = [f for f in map(_c_frame, words) if f is not None]
    named = _name_c_frames(c) if symbolize else {}
    cache = {}

    def frames(e):
        key = (e.get("stack", ""), e.get("pystack", ""))
        if key not in cache:
            out = []
            for w in key[0].split():
                f = _c_frame(w)
                if f is not None:
                    out.append(dict(named.get(f) or {"filename": f[0], "line": 0, "name": "+0x%x" % f[1]}))
            if key[1]:
                out.extend(_py_frames(key[1]))
            cache[key] = out
        return [dict(f) for f in cache[key]]
    return frames


def _events(path):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue   # a line cut short by a crash
            if isinstance(e, dict) and "ev" in e and e["ev"] != "trace":
                yield e


def _addr(e):
    return int(e["p"], 16) if "p" in e else 0


def _call(e, allocator):
    return (e["ev"] in ("alloc", "dealloc") and e.get("d") == 0
            and (allocator is None or e.get("a") == allocator))


def snapshot_from_trace(path, out=None, allocator=None, device=0, symbolize=True):
    """Reads the trace at path; returns the snapshot dictionary, and pickles it to out if given.
    allocator: whose user calls make the timeline (default: every allocator's); device: the
    index the timeline is filed under; symbolize: name C frames with addr2line (else they stay
    "MODULE+0xADDR")."""
    events = list(_events(path))
    frames_of = _frames_of(events, symbolize)
    # Growth in place is what a grow/release line's in_place says; a trace from before that field
    # (no line has it) is read by addresses: a grow at a segment's end, a release inside one.
    knows_in_place = any("in_place" in e for e in events if e["ev"] in ("grow", "release"))
    # A refused deallocation voids the dealloc line written before it (same thread and pointer).
    void = set()
    for i, e in enumerate(events):
        if e["ev"] == "refused":
            for j in range(i - 1, -1, -1):
                f = events[j]
                if (f["ev"] == "dealloc" and j not in void and f.get("th") == e.get("th")
                        and f.get("p") == e.get("p") and f.get("a") == e.get("a")):
                    void.add(j)
                    break
    # Does a user's free go pending? Its 'pending' line follows on the same thread, before that
    # thread's next call.
    pends = set()
    open_free = {}
    for i, e in enumerate(events):
        th = e.get("th")
        if _call(e, allocator) and i not in void:
            open_free.pop(th, None)
            if e["ev"] == "dealloc":
                open_free[th] = (i, e.get("p"))
        elif e["ev"] == "pending" and th in open_free and open_free[th][1] == e.get("p"):
            pends.add(open_free.pop(th)[0])

    trace = []
    live = {}        # addr -> (size, stream)
    awaiting = []    # sorted addresses freed and pending
    segments = {}    # addr -> (size, stream)

    def entry(action, addr, size, stream, t, frames=None):
        trace.append({"action": action, "addr": addr, "size": size, "stream": stream,
                      "frames": frames or [], "time_us": t // 1000})

    for i, e in enumerate(events):
        ev, t = e["ev"], e.get("t", 0)
        stream = e.get("r") or 0
        if _call(e, allocator) and i not in void:
            a = _addr(e)
            if ev == "alloc":
                frames = frames_of(e)
                live[a] = (e.get("n", 0), stream, frames)
                entry("alloc", a, e.get("n", 0), stream, t, frames)
            elif a in live:
                size, s, _ = live[a]
                entry("free_requested", a, size, s, t)
                if i in pends:
                    bisect.insort(awaiting, a)
                else:
                    del live[a]
                    entry("free_completed", a, size, s, t)
        elif ev in ("ready", "reuse"):
            lo, hi = _addr(e), _addr(e) + e.get("n", 0)
            k = bisect.bisect_left(awaiting, lo)
            while k < len(awaiting) and awaiting[k] < hi:
                a = awaiting.pop(k)
                size, s, _ = live.pop(a, (0, stream, None))
                entry("free_completed", a, size, s, t)
        elif ev == "grow":
            p, n = _addr(e), e.get("n", 0)
            at_end = _segment_ending_at(segments, p)
            base = at_end if not knows_in_place or e.get("in_place") else None
            if base is not None:   # a growable platform's chunk grew in place: one segment
                segments[base] = (segments[base][0] + n, 0)
                entry("segment_map", p, n, 0, t)
            else:
                segments[p] = (n, 0)
                entry("segment_alloc", p, n, 0, t)
        elif ev == "release":
            p, n = _addr(e), e.get("n", 0)
            base = _segment_holding(segments, p)
            if knows_in_place and not e.get("in_place"):
                base = None   # a whole chunk
            if base is not None and base < p:   # the end of a chunk went back: it shrinks
                segments[base] = (p - base, 0)
                entry("segment_unmap", p, n, 0, t)
            else:
                size, _ = segments.pop(p, (n, 0))
                entry("segment_free", p, size, 0, t)
        elif ev == "oom":
            trace.append({"action": "oom", "addr": 0, "size": e.get("n", 0), "stream": stream,
                          "frames": [], "time_us": t // 1000, "device_free": 0})

    # The chunks at the end, each cut into its live, pending and free blocks.
    pending = set(awaiting)
    segs = []
    starts = sorted(live)
    for base in sorted(segments):
        total, stream = segments[base]
        blocks, at, allocated, active, requested = [], base, 0, 0, 0
        k = bisect.bisect_left(starts, base)
        while k < len(starts) and starts[k] < base + total:
            a = starts[k]
            size = min(live[a][0], base + total - a)
            if a > at:
                blocks.append({"address": at, "size": a - at, "requested_size": 0,
                               "state": "inactive", "frames": []})
            state = "active_awaiting_free" if a in pending else "active_allocated"
            blocks.append({"address": a, "size": size, "requested_size": size, "state": state,
                           "frames": [dict(f) for f in live[a][2]]})
            active += size
            if state == "active_allocated":
                allocated += size
                requested += size
            at = max(at, a + size)
            k += 1
        if at < base + total:
            blocks.append({"address": at, "size": base + total - at, "requested_size": 0,
                           "state": "inactive", "frames": []})
        segs.append({"device": device, "address": base, "total_size": total,
                     "allocated_size": allocated, "active_size": active,
                     "requested_size": requested, "stream": stream, "segment_type": "large",
                     "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                     "blocks": blocks})
    snapshot = {"segments": segs,
                "device_traces": [[] for _ in range(device)] + [trace],
                "allocator_settings": {"rap_trace": path}}
    if out is not None:
        with open(out, "wb") as f:
            pickle.dump(snapshot, f)
    return snapshot


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(description="A rap event trace (RAP_TRACE) as a PyTorch memory "
                                            "snapshot for pytorch.org/memory_viz.")
    p.add_argument("trace")
    p.add_argument("-o", "--out", required=True, help="the snapshot to write (.pickle)")
    p.add_argument("--allocator", help="whose user calls make the timeline (default: all)")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--no-symbolize", action="store_true",
                   help="leave C frames as MODULE+0xADDR (no addr2line)")
    args = p.parse_args(argv)
    try:
        s = snapshot_from_trace(args.trace, args.out, args.allocator, args.device,
                                not args.no_symbolize)
    except OSError as e:
        print("rap_memviz: %s" % e, file=sys.stderr)
        return 1
    n = len(s["device_traces"][args.device])
    print("rap_memviz: %d timeline entries, %d segments -> %s" % (n, len(s["segments"]), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
