"""The profiler walk the live-tensor benchmarks share (benchmarks/measure/profiler_peak.py), on fake events."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.measure.profiler_peak import live_tensor_peak  # noqa: E402


@dataclass
class Event:
    """The four accessors of a kineto event the walk reads."""

    label: str
    start: int
    nbytes_: int = 0
    duration: int = 0

    def name(self) -> str:
        return self.label

    def start_ns(self) -> int:
        return self.start

    def nbytes(self) -> int:
        return self.nbytes_

    def duration_ns(self) -> int:
        return self.duration


def _prof(events: list[Event]):
    return SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events)))


def test_the_peak_is_the_highest_running_sum_in_time_order_and_names_the_innermost_op():
    events = [
        Event("aten::linear", 0, duration=100),
        Event("aten::mm", 20, duration=10),
        # listed out of time order on purpose: the walk sorts by start
        Event("[memory]", 25, -300),
        Event("[memory]", 10, 200),
        Event("[memory]", 22, 500),   # 700 live while aten::mm and aten::linear run
        Event("[memory]", 40, 100),   # 500 after the free: below the peak
    ]
    assert live_tensor_peak(_prof(events)) == (700, "aten::mm")


def test_no_allocation_is_a_zero_peak_and_no_op_outside_every_op():
    assert live_tensor_peak(_prof([Event("[memory]", 5, -64)])) == (0, "")
    assert live_tensor_peak(_prof([Event("aten::add", 10, duration=5)])) == (0, "")
