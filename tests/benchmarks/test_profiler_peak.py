"""The profiler walk the live-tensor benchmarks share (benchmarks/measure/profiler_peak.py), on fake events."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.measure.profiler_peak import live_tensor_peak  # noqa: E402


def _event(name: str, start: int, nbytes: int = 0, duration: int = 0) -> SimpleNamespace:
    """A kineto event: the four accessors the walk reads."""
    return SimpleNamespace(name=lambda: name, start_ns=lambda: start, nbytes=lambda: nbytes,
                           duration_ns=lambda: duration)


def _prof(events: list[SimpleNamespace]):
    return SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events)))


def test_the_peak_is_the_highest_running_sum_in_time_order_and_names_the_innermost_op():
    events = [
        _event("aten::linear", 0, duration=100),
        _event("aten::mm", 20, duration=10),
        # listed out of time order on purpose: the walk sorts by start
        _event("[memory]", 25, -300),
        _event("[memory]", 10, 200),
        _event("[memory]", 22, 500),   # 700 live while aten::mm and aten::linear run
        _event("[memory]", 40, 100),   # 500 after the free: below the peak
    ]
    assert live_tensor_peak(_prof(events)) == (700, "aten::mm")


def test_no_allocation_is_a_zero_peak_and_no_op_outside_every_op():
    assert live_tensor_peak(_prof([_event("[memory]", 5, -64)])) == (0, "")
    assert live_tensor_peak(_prof([_event("aten::add", 10, duration=5)])) == (0, "")
