"""A check on this machine without a RAM-bandwidth reading measures it once by itself (fitcheck.probe.bench
.with_bandwidth_measured_now, from load_machine), keeps it as `probe --bench` does and says so; --no-bench and
FITCHECK_NO_BENCH skip it; a profile is never measured.  The measurement here is a fake (fast, deterministic):
tests/conftest.py sets FITCHECK_NO_BENCH=1 for every other test."""

import datetime as dt
import itertools
import json
import time

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.machine import CPU, Host, Machine, SystemMemory, Unknown
from fitcheck.probe import bandwidth_cache, bench
from fitcheck.units import GiB, MiB

READING = bench.BandwidthReading(40_000_000_000, 128 * MiB, 2, 4, 0.0067)
NOW = "RAM bandwidth measured now by fitcheck (cached for next time; --no-bench skips)"


@pytest.fixture
def benches(monkeypatch):
    """Measurements taken: a fake, fast bench; FITCHECK_NO_BENCH unset."""
    monkeypatch.delenv("FITCHECK_NO_BENCH")
    taken = []

    def fake(budget_s=bench.AUTO_BUDGET_S):
        taken.append(budget_s)
        return READING

    monkeypatch.setattr(bench, "measure_quickly", fake)
    return taken


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_the_first_check_measures_and_keeps_it_the_second_reads_it(benches):
    first = run("qwen-7b", "--device", "cpu")
    assert first.exit_code == 0, first.output
    assert len(benches) == 1
    speed = next(line for line in first.output.splitlines() if line.startswith("Speed:"))
    assert "tok/s decode" in speed and NOW in speed, speed
    path = bandwidth_cache.cache_path()
    kept = json.loads(path.read_text())["machines"]
    (entry,) = kept.values()
    assert entry["bytes_per_s"] == 40_000_000_000 and entry["by"] == "fitcheck"
    assert entry["how"] == READING.how

    second = run("qwen-7b", "--device", "cpu")
    assert second.exit_code == 0 and len(benches) == 1  # read from the cache, not measured again
    today = dt.date.today().isoformat()
    assert f"RAM bandwidth measured {today} by fitcheck" in second.output and "measured now" not in second.output


def test_no_bench_and_the_environment_variable_skip_it(benches, monkeypatch):
    r = run("qwen-7b", "--device", "cpu", "--no-bench")
    assert r.exit_code == 0 and not benches
    assert "Speed:    unknown (RAM bandwidth not known; measure it with `fitcheck probe --bench`)" in r.output
    assert not bandwidth_cache.cache_path().exists()
    monkeypatch.setenv("FITCHECK_NO_BENCH", "1")
    assert run("qwen-7b", "--device", "cpu").exit_code == 0 and not benches
    monkeypatch.setenv("FITCHECK_NO_BENCH", "0")  # off: measures
    assert run("qwen-7b", "--device", "cpu").exit_code == 0 and len(benches) == 1


def test_a_profile_probe_and_the_library_never_measure(benches):
    assert run("qwen-7b", "--profile", "github-ubuntu-latest").exit_code == 0  # no bandwidth in that profile
    assert run("probe").exit_code == 0  # probe measures only with --bench
    from fitcheck.profiles.overrides import load_machine

    load_machine(None)  # no command running: nothing measured behind a library caller's back
    assert not benches
    load_machine(None, bench=True)
    assert len(benches) == 1


def test_json_names_the_measurement_as_the_source(benches):
    measured = json.loads(run("qwen-7b", "--device", "cpu", "--json").output)
    assert len(benches) == 1
    assert measured["speed"]["ram_bandwidth_source"].startswith(
        "measured now by fitcheck (cached for next time; --no-bench skips): memmove of 128 MiB")
    assert measured["speed"]["bandwidth_bytes_per_s"] == 40_000_000_000


def test_json_keys_do_not_change_when_it_measures(benches, monkeypatch, tmp_path):
    monkeypatch.setenv("FITCHECK_CACHE_DIR", str(tmp_path / "a"))
    measured = json.loads(run("qwen-7b", "--device", "cpu", "--json").output)
    monkeypatch.setenv("FITCHECK_CACHE_DIR", str(tmp_path / "b"))
    skipped = json.loads(run("qwen-7b", "--device", "cpu", "--json", "--no-bench").output)

    def same_keys(a, b, path="doc"):
        """Every object has the same keys in both (a rate or cost is an object in one, null in the other)."""
        if isinstance(a, dict) and isinstance(b, dict):
            assert set(a) == set(b), path
            for k in a:
                same_keys(a[k], b[k], f"{path}.{k}")
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                same_keys(x, y, f"{path}[{i}]")

    same_keys(measured, skipped)
    assert skipped["speed"]["ram_bandwidth_source"] is None and measured["speed"]["ram_bandwidth_source"]


def test_a_models_fits_listing_on_this_machine_measures_too(benches):
    r = run("models", "--fits", "qwen2.5-0.5b")
    assert r.exit_code == 0, r.output
    assert len(benches) == 1 and bandwidth_cache.cache_path().exists()
    assert run("models", "--fits", "qwen2.5-0.5b", "--no-bench").exit_code == 0 and len(benches) == 1


def test_an_unwritable_cache_keeps_the_reading_for_this_answer(benches, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("FITCHECK_CACHE_DIR", str(blocker / "sub"))
    r = run("qwen-7b", "--device", "cpu")
    assert r.exit_code == 0
    assert "RAM bandwidth measured now by fitcheck (not cached, the cache folder cannot be written; --no-bench skips)" \
        in r.output


# ---- the measurement itself: bounded ---------------------------------------------------------------------------
def _machine(available: int = 24 * GiB) -> Machine:
    return Machine("m", "probed", Host("linux"), SystemMemory(available, available, None),
                   CPU("c", "x86_64", 2, 2, 2))


def test_too_little_ram_or_too_little_time_leaves_it_unknown_with_the_reason(monkeypatch, tmp_path):
    env = {"FITCHECK_CACHE_DIR": str(tmp_path)}
    monkeypatch.setattr(bench, "measure_quickly", lambda: pytest.fail("measured"))
    out = bench.with_bandwidth_measured_now(_machine(available=512 * MiB), env)
    assert isinstance(out.memory.bandwidth_bytes_per_s, Unknown) and "too little" in str(
        out.memory.bandwidth_bytes_per_s.reason)
    monkeypatch.setattr(bench, "measure_quickly", lambda: None)
    out = bench.with_bandwidth_measured_now(_machine(), env)
    assert "too busy" in out.memory.bandwidth_bytes_per_s.reason and not (tmp_path / "bandwidth.json").exists()
    given = bench.with_measured_bandwidth(_machine(), READING)
    assert bench.with_bandwidth_measured_now(given, env) is given  # a reading already there is kept


def test_a_budget_gives_up_when_mapping_the_buffers_is_too_slow():
    ticks = itertools.count(0.0, 0.2)  # each clock reading 0.2 s on: the second chunk ends past 3/4 of 0.4 s
    with pytest.raises(bench.OutOfTime):
        bench.measure_bandwidth(size_bytes=2 * bench.CHUNK_BYTES, passes=4, threads=1, clock=lambda: next(ticks),
                                budget_s=0.4)


def test_a_budget_stops_the_passes_in_time():
    # start 0; mapped at 0.1 (one chunk); warm-up pass 0.1 -> 0.15 (0.05 s); then a pass fits while
    # now + 0.05 <= 0.4: passes at 0.2-0.25 and 0.3-0.35 fit, the next check at 0.4 does not
    ticks = iter([0.0, 0.1, 0.1, 0.15, 0.2, 0.2, 0.25, 0.3, 0.3, 0.35, 0.4])
    r = bench.measure_bandwidth(size_bytes=1 * MiB, passes=4, threads=1, clock=lambda: next(ticks), budget_s=0.4)
    assert r.passes == 2 and r.best_seconds == pytest.approx(0.05)


def test_the_real_bounded_measurement_is_quick():
    start = time.perf_counter()
    r = bench.measure_quickly(budget_s=0.05)
    assert time.perf_counter() - start < 0.5
    assert r is None or (r.bytes_per_s > 0 and r.size_bytes <= bench.AUTO_MAX_BYTES)
