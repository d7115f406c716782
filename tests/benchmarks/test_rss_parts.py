"""benchmarks.measure.rss_parts: the readings it splits a resident peak into (no torch needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.measure import rss_parts  # noqa: E402
from benchmarks.measure.compare import RSS_PARTS, run_csvs  # noqa: E402


def test_sampler_reads_resident_and_file_backed_pages():
    sampler = rss_parts.Sampler()
    resident, file_backed = sampler.read()
    assert 0 < file_backed < resident
    block = bytearray(64 * 2**20)  # touched: anonymous pages
    assert sampler.read()[0] - resident > 32 * 2**20
    del block


def test_mallinfo2_sees_the_heap_grow():
    info = rss_parts.mallinfo2()
    if not info:
        pytest.skip("mallinfo2 needs glibc >= 2.33")
    before = info["uordblks"] + info["hblkhd"]
    blocks = [bytearray(4096) for _ in range(1000)]
    after = rss_parts.mallinfo2()
    assert after["uordblks"] + after["hblkhd"] >= before + 4 * 2**20 - 2**20
    assert rss_parts.arena_count() >= 1
    del blocks


def test_its_results_are_not_read_as_measurement_runs():
    assert not any(p.name.startswith(RSS_PARTS) for p in run_csvs())
