from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fitcheck.probe.nvidia import parse_cuda_visible_devices

UUIDS = ["GPU-abc12345-0000", "GPU-def67890-1111", "MIG-7f9d2c1e-aaaa"]  # two GPUs + one MIG instance


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, [0, 1]),  # unset: all devices
        ("", []),  # empty: none
        ("   ", []),
        ("0", [0]),
        ("1,0", [1, 0]),  # CUDA order follows the list
        ("0,0", []),  # a duplicate invalidates everything
        ("0,5,1", [0]),  # out of range ends the list
        ("-1", []),  # not an index: ends at once
        ("GPU-abc", [0]),  # unique UUID prefix
        ("GPU-def67890-1111,GPU-abc", [1, 0]),
        ("GPU-", []),  # ambiguous prefix ends the list
        ("MIG-7f9d", ["MIG-7f9d2c1e-aaaa"]),  # a MIG instance by UUID prefix
        (" 0 , 1 ", [0, 1]),  # whitespace trimmed
        ("abc", []),
        ("1,abc,0", [1]),
        ("0,GPU-def", [0]),  # indices and UUIDs cannot be mixed: the list ends
        ("GPU-abc,0", [0]),
        ("GPU-abc,GPU-abc12345", []),  # two spellings of one GPU: a duplicate
        ("0,", [0]),  # a trailing empty entry ends the list
    ],
)
def test_cuda_visible_devices_table(value, expected):
    assert parse_cuda_visible_devices(value, 2, UUIDS) == expected


def test_no_devices_at_all():
    assert parse_cuda_visible_devices(None, 0, []) == []
    assert parse_cuda_visible_devices("0", 0, []) == []


@given(st.lists(st.integers(min_value=0, max_value=9), max_size=6), st.integers(min_value=0, max_value=8))
def test_index_lists_follow_cuda_rules(indices, count):
    """Read left to right: a repeat seen before the first invalid entry voids everything;
    otherwise the valid prefix is kept."""
    value = ",".join(map(str, indices))
    expected: list[int] = []
    for index in indices:
        if index in expected:
            expected = []
            break
        if index >= count:
            break
        expected.append(index)
    assert parse_cuda_visible_devices(value, count, [f"GPU-{i:04d}" for i in range(count)]) == expected
