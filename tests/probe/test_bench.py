"""`fitcheck probe --bench`: the RAM bandwidth measurement (fitcheck.probe.bench)."""

import itertools
import json

import pytest
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


# ---- the reading kept per machine, used by later answers ---------------------------------------------
def _machine(cpu: str = "AMD EPYC", ram: int = 24 * 2**30) -> Machine:
    return Machine("m", "probed", Host("linux"), SystemMemory(ram, ram, None), CPU(cpu, "x86_64", 2, 2, 2))


def test_a_stored_reading_is_dated_and_follows_the_machine(tmp_path):
    import datetime as dt

    from fitcheck.probe import bandwidth_cache as bc

    env = {"FITCHECK_CACHE_DIR": str(tmp_path)}
    m = _machine()
    assert bc.load(m, env) is None and bc.with_stored_bandwidth(m, env) is m
    path = bc.store(m, 9_000_000_000, "memmove of 128 MiB", today=dt.date(2026, 12, 1), env=env)
    assert path == tmp_path / "bandwidth.json"
    jsonschema = pytest.importorskip("jsonschema")
    from fitcheck.contracts import load_schema

    jsonschema.validate(json.loads(path.read_text()), load_schema("fitcheck.bandwidth/1"))
    out = bc.with_stored_bandwidth(m, env)
    assert out.memory.bandwidth_bytes_per_s == 9_000_000_000
    assert out.memory.bandwidth_source == "measured 2026-12-01 by probe --bench: memmove of 128 MiB"
    # another CPU or more RAM is another machine; its reading does not replace this one's
    assert bc.load(_machine(cpu="Intel Xeon"), env) is None and bc.load(_machine(ram=64 * 2**30), env) is None
    bc.store(_machine(cpu="Intel Xeon"), 5, "x", env=env)
    assert bc.load(m, env).bytes_per_s == 9_000_000_000
    # a bandwidth a profile gives is never replaced
    given = bench.with_measured_bandwidth(m, bench.BandwidthReading(1, 1, 1, 1, 1.0))
    assert bc.with_stored_bandwidth(given, env) is given


def test_a_file_fitcheck_did_not_write_is_ignored_and_replaced(tmp_path):
    from fitcheck.probe import bandwidth_cache as bc

    env = {"FITCHECK_CACHE_DIR": str(tmp_path)}
    bad_entry = {"schema": "fitcheck.bandwidth/1", "machines": {bc.machine_key(_machine()): {"bytes_per_s": -1}}}
    for text in ("not json", '{"schema": "other"}', '{"schema": "fitcheck.bandwidth/1", "machines": []}',
                 json.dumps(bad_entry), "[" * 10_000):
        (tmp_path / "bandwidth.json").write_text(text)
        assert bc.load(_machine(), env) is None
    bc.store(_machine(), 7, "x", env=env)
    assert bc.load(_machine(), env).bytes_per_s == 7


def test_probe_bench_keeps_the_reading_and_later_answers_say_when(monkeypatch):
    import datetime as dt
    import json

    reading = bench.BandwidthReading(40_000_000_000, 128 * MiB, 2, 4, 0.0067)
    monkeypatch.setattr(bench, "measure_bandwidth", lambda: reading)
    before = CliRunner().invoke(cli, ["qwen-7b", "--device", "cpu", "--json"])
    assert json.loads(before.output)["speed"]["ram_bandwidth_source"] in (None, "profile")
    r = CliRunner().invoke(cli, ["probe", "--bench"])
    assert r.exit_code == 0 and "later answers for this machine use it" in r.output
    today = dt.date.today().isoformat()
    out = CliRunner().invoke(cli, ["qwen-7b", "--device", "cpu"]).output
    assert f"RAM bandwidth measured {today} by probe --bench" in out
    doc = json.loads(CliRunner().invoke(cli, ["qwen-7b", "--device", "cpu", "--json"]).output)
    assert doc["speed"]["bandwidth_bytes_per_s"] == 40_000_000_000
    assert doc["speed"]["ram_bandwidth_source"].startswith(f"measured {today} by probe --bench: memmove of 128 MiB")
    assert f"measured {today}" in CliRunner().invoke(cli, ["probe"]).output


def test_the_buffers_follow_the_last_level_cache(tmp_path):
    for cpu, shared in (("cpu0", "0-1"), ("cpu1", "0-1"), ("cpu2", "2-3")):
        for index, (level, size) in enumerate((("1", "32K"), ("2", "512K"), ("3", "32768K"))):
            d = tmp_path / "sys/devices/system/cpu" / cpu / "cache" / f"index{index}"
            d.mkdir(parents=True)
            (d / "level").write_text(level)
            (d / "size").write_text(size)
            (d / "shared_cpu_list").write_text(shared if level == "3" else cpu[3:])
    l3 = bench.read_last_level_cache_bytes(str(tmp_path))
    assert l3 == 64 * MiB  # two L3 groups of 32 MiB, each counted once
    assert bench.buffer_bytes(l3) == 256 * MiB and bench.buffer_bytes(8 * MiB) == 64 * MiB
    assert bench.buffer_bytes(None) == 256 * MiB and bench.buffer_bytes(2048 * MiB) == 1024 * MiB
    assert bench.read_last_level_cache_bytes(str(tmp_path / "nothing")) is None


def test_help_and_readme_say_the_same_about_the_bench():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "256 MiB copy, under a second" not in readme and "4 × the CPU's last-level cache" in readme
    help_text = CliRunner().invoke(cli, ["probe", "--help"]).output
    assert "4 × the CPU's last-level" in " ".join(help_text.split()) and "under a second" not in help_text


def test_an_unwritable_cache_loses_the_reading_not_the_answer(monkeypatch, tmp_path):
    reading = bench.BandwidthReading(40_000_000_000, 128 * MiB, 2, 4, 0.0067)
    monkeypatch.setattr(bench, "measure_bandwidth", lambda: reading)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("FITCHECK_CACHE_DIR", str(blocker / "sub"))  # a folder under a file: cannot be made
    r = CliRunner().invoke(cli, ["probe", "--bench"])
    assert r.exit_code == 0 and "Could not keep the measured RAM bandwidth" in r.output and "40" in r.output
