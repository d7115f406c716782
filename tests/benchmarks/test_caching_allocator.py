"""The CUDA caching-allocator replay: its rules on small hand-made traces (no torch needed)."""

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.measure.caching_allocator import (  # noqa: E402
    CachingAllocator,
    OutOfMemory,
    needed_bytes,
    read_trace,
    replay,
    round_size,
    segment_size,
)

MiB = 1 << 20


def test_rounding_and_segment_sizes():
    assert round_size(1) == 512 and round_size(513) == 1024 and round_size(4096) == 4096
    assert segment_size(1000) == 2 * MiB                    # small pool
    assert segment_size(3 * MiB) == 20 * MiB                # 1-10 MiB: a 20 MiB segment to share
    assert segment_size(10 * MiB + 512) == 12 * MiB         # >= 10 MiB: rounded to 2 MiB


def test_freed_blocks_of_different_segments_do_not_merge():
    # a loss's two 16-bit copies freed, then one fp32 request of their combined size: a new segment
    a = CachingAllocator()
    a.malloc("bf16 logits", 200 * MiB)
    a.malloc("shifted copy", 200 * MiB)
    a.free("bf16 logits")
    a.free("shifted copy")
    a.malloc("fp32 grad", 400 * MiB)
    assert a.allocated == 400 * MiB and a.reserved == 800 * MiB and a.peak_allocated == 400 * MiB


def test_a_smaller_request_reuses_a_cached_block_best_fit():
    a = CachingAllocator()
    a.malloc("big", 400 * MiB)
    a.malloc("mid", 200 * MiB)
    a.free("big")
    a.free("mid")
    a.malloc("x", 150 * MiB)         # fits both; takes the smaller (200 MiB) block, split
    a.malloc("y", 350 * MiB)         # the 400 MiB block
    assert a.reserved == 600 * MiB
    a.malloc("z", 50 * MiB)          # the 50 MiB left of the 200 MiB block
    assert a.reserved == 600 * MiB and a.segments == 2


def test_neighbours_in_one_segment_coalesce():
    a = CachingAllocator()
    a.malloc(1, 3 * MiB)             # opens a 20 MiB segment, 17 MiB stay free after it
    a.malloc(2, 3 * MiB)
    a.free(1)
    a.free(2)
    a.malloc(3, 19 * MiB)            # the whole segment again, after merging
    assert a.reserved == 20 * MiB and a.segments == 1


def test_a_large_remainder_of_one_mib_or_less_is_not_split():
    a = CachingAllocator()
    a.malloc(1, 13 * MiB)            # a 14 MiB segment; the 1 MiB left is not split off
    assert a.allocated == 14 * MiB
    a.free(1)
    a.malloc(2, 12 * MiB + MiB // 2)  # 1.5 MiB left: split off and cached
    assert a.allocated == 12 * MiB + MiB // 2 and a.reserved == 14 * MiB


def test_small_requests_share_two_mib_segments():
    a = CachingAllocator()
    for i in range(4):
        a.malloc(i, 1000)
    assert a.allocated == 4 * 1024 and a.reserved == 2 * MiB


def test_replay_ignores_frees_from_before_the_trace_and_marks_steps(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('["f", 99]\n["a", 1, 10485760]\n["step"]\n["a", 2, 10485760]\n["f", 1]\n["f", 2]\n')
    r = replay(read_trace(trace), start_live={"w": 20 * MiB})
    assert r.peak_allocated == 40 * MiB and r.peak_reserved == 40 * MiB
    assert r.step_peaks == ((30 * MiB, 30 * MiB), (40 * MiB, 40 * MiB))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 64 * MiB)), min_size=1, max_size=60))
def test_reserved_covers_allocated_and_every_free_returns_bytes(ops):
    """Invariants: reserved >= allocated at all times; freeing everything leaves allocated 0."""
    a = CachingAllocator()
    live = []
    for n, (alloc, size) in enumerate(ops):
        if alloc or not live:
            a.malloc(n, size)
            live.append(n)
        else:
            a.free(live.pop(size % len(live)))
        assert a.reserved >= a.allocated >= 0
    for ident in live:
        a.free(ident)
    assert a.allocated == 0 and a.peak_reserved == a.reserved


def test_double_allocation_of_an_id_is_an_error():
    a = CachingAllocator()
    a.malloc("x", 10)
    with pytest.raises(ValueError):
        a.malloc("x", 10)


def test_under_a_capacity_free_cached_segments_are_given_back_before_failing():
    events = [("a", 1, 200 * MiB), ("a", 2, 200 * MiB), ("f", 1), ("f", 2), ("a", 3, 400 * MiB), ("f", 3)]
    assert replay(events).peak_reserved == 800 * MiB
    assert replay(events, capacity=400 * MiB).peak_reserved == 400 * MiB   # both 200 MiB segments released
    with pytest.raises(OutOfMemory):
        replay(events, capacity=300 * MiB)
    assert needed_bytes(events) == 400 * MiB


def test_a_partly_used_segment_cannot_be_given_back():
    # 3 MiB pins a 20 MiB segment; the freed 18 MiB segment is given back for the 30 MiB request
    events = [("a", 1, 3 * MiB), ("a", 2, 18 * MiB), ("f", 2), ("a", 3, 30 * MiB)]
    assert replay(events).peak_reserved == (20 + 18 + 30) * MiB
    assert needed_bytes(events) == (20 + 30) * MiB
