"""The live-tensor peak of a run under ``torch.profiler.profile(profile_memory=True)``.

The profiler records every allocation and free as a ``[memory]`` event carrying its signed byte
count; summing them in time order gives the bytes of live tensors at each moment, counted from
the moment profiling began.  Used by ``tensor_peak.py``, ``inference_peak.py`` and ``loss_path.py``.
"""

from __future__ import annotations


def live_tensor_peak(prof) -> tuple[int, str]:
    """The highest sum of live tensor bytes above the start of `prof`, and the innermost op running then."""
    events = list(prof.profiler.kineto_results.events())
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    live = peak = at = 0
    for t, nbytes in memory:
        live += nbytes
        if live > peak:
            peak, at = live, t
    running = [e for e in events if e.name() != "[memory]" and e.start_ns() <= at <= e.start_ns() + e.duration_ns()]
    innermost = min(running, key=lambda e: e.duration_ns()).name() if running else ""
    return peak, innermost


def live_tensors_at_peak(prof, frames: int = 3, match: str = "transformers/") -> list[tuple[int, str, str]]:
    """The allocations alive at the live-tensor peak of `prof`, largest first: (bytes, the op that made
    each, the innermost `frames` Python functions under `match` that it ran in).

    Reads the profiler's event tree (allocation events carry their address), so `prof` must have been
    recorded with ``with_stack=True`` for the Python frames; the peak is the same moment
    :func:`live_tensor_peak` finds."""
    from torch._C._profiler import _EventType

    allocations = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.tag == _EventType.Allocation:
            allocations.append(node)
    allocations.sort(key=lambda n: n.start_time_ns)

    def origin(node) -> tuple[str, str]:
        op, where = "", []
        parent = node.parent
        while parent is not None:
            if not op and parent.tag == _EventType.TorchOp:
                op = parent.name
            if parent.tag == _EventType.PyCall and match in parent.name and len(where) < frames:
                where.append(parent.name.split(match, 1)[-1])
            parent = parent.parent
        return op, " < ".join(where)

    total = peak = last = 0
    for i, node in enumerate(allocations):
        total += node.extra_fields.alloc_size
        if total > peak:
            peak, last = total, i
    live: dict[int, object] = {}
    for node in allocations[:last + 1]:
        ef = node.extra_fields
        if ef.alloc_size > 0:
            live[ef.ptr] = node
        else:
            live.pop(ef.ptr, None)
    out = [(n.extra_fields.alloc_size, *origin(n)) for n in live.values()]
    return sorted(out, key=lambda r: -r[0])
