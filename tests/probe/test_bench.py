"""`fitcheck probe --bench`: the RAM bandwidth measurement (fitcheck.probe.bench)."""

import itertools

from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.machine import CPU, Host, Machine, SystemMemory
from fitcheck.probe import bench
from fitcheck.units import MiB


def test_copy_bandwidth_counts_read_and_write():
    assert bench.copy_bandwidth(100, 1.0) == 200


def test_best_pass_counts_with_a_fake_clock():
    # each pass reads the clock twice (start, end); passes take 0.5, 0.25, 0.5 s after the warm-up
    ticks = itertools.chain.from_iterable((0.0, d) for d in (9.0, 0.5, 0.25, 0.5))
    r = bench.measure_bandwidth(size_bytes=1 * MiB, passes=3, threads=2, clock=lambda: next(ticks))
    assert r.best_seconds == 0.25
    assert r.bytes_per_s == 2 * MiB * 4
    assert r.threads == 2 and "2 threads" in r.source and "best of 3" in r.source


def test_the_copy_really_copies_every_thread_span():
    r = bench.measure_bandwidth(size_bytes=3 * MiB + 7, passes=1, threads=4)
    assert r.bytes_per_s > 0 and r.threads == 4


def test_with_measured_bandwidth_replaces_only_the_bandwidth():
    m = Machine("m", "probed", Host("linux"), SystemMemory(8, 8, None), CPU("c", "x86_64", 1, 1, 1))
    r = bench.BandwidthReading(12_000_000_000, 256 * MiB, 2, 4, 0.04)
    out = bench.with_measured_bandwidth(m, r)
    assert out.memory.bandwidth_bytes_per_s == 12_000_000_000
    assert out.memory.bandwidth_source.startswith("measured")
    assert out.memory.total_bytes == 8 and out.cpu == m.cpu


def test_probe_bench_cli_shows_the_measurement(monkeypatch):
    reading = bench.BandwidthReading(21_000_000_000, 256 * MiB, 2, 4, 0.025)
    monkeypatch.setattr(bench, "measure_bandwidth", lambda: reading)
    r = CliRunner().invoke(cli, ["probe", "--bench"])
    assert r.exit_code == 0, r.output
    assert "21" in r.output and "measured" in r.output


def test_probe_bench_refuses_a_profile():
    r = CliRunner().invoke(cli, ["probe", "--bench", "--profile", "t4"])
    assert r.exit_code == 2 and "--profile" in r.output
