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
