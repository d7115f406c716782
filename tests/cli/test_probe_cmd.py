"""`fitcheck probe`: the table, --json, --save -> --profile round trip, and error lines."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

import fitcheck.probe
from fitcheck.cli import cli
from fitcheck.machine import CPU, GPU, Disk, Host, Machine, MigInstance, Price, SystemMemory, Unknown
from fitcheck.profiles import load_profile
from fitcheck.units import GiB, MiB

RICH = Machine(
    name="gpu-box",
    kind="probed",
    host=Host(os="linux", os_version="Ubuntu 22.04", architecture="x86_64", container=True,
              wsl=Unknown("no /proc/version"), hostname="gpu-box"),
    memory=SystemMemory(total_bytes=251 * GiB, available_bytes=int(22.9 * GiB), cgroup_limit_bytes=24 * GiB,
                        swap_total_bytes=0, swap_free_bytes=0, bandwidth_bytes_per_s=Unknown("not measured")),
    cpu=CPU(model="AMD EPYC 7763 64-Core Processor", architecture="x86_64", logical_cores=256,
            physical_cores=128, usable_cores=16, features=frozenset({"avx2", "avx512f", "fma"}),
            features_source="/proc/cpuinfo", bf16_tflops=Unknown("no bf16 figure for this CPU")),
    gpus=(
        GPU(index=0, vendor="nvidia", name="NVIDIA A100-SXM4-80GB", memory_total_bytes=81920 * MiB,
            memory_free_bytes=40000 * MiB, memory_used_bytes=41920 * MiB, memory_reserved_bytes=Unknown("NVML v1"),
            uuid="GPU-1234", compute_capability="8.0", bandwidth_bytes_per_s=2_039_000_000_000, bf16_tflops=312.0,
            fp8=False, mig_mode=True,
            mig_instances=(MigInstance(0, "MIG-aaa", "1g.10gb", 9856 * MiB, 9800 * MiB),
                           MigInstance(1, Unknown("NVML: not supported"), "3g.40gb", 40192 * MiB, Unknown("busy"))),
            notes=("MIG enabled: a process sees one instance",)),
        GPU(index=1, vendor="nvidia", name=Unknown("NVML: GPU is lost"), memory_total_bytes=Unknown("NVML: GPU is lost"),
            memory_free_bytes=Unknown("NVML: GPU is lost")),
    ),
    driver_version="550.54.15",
    cuda_version=Unknown("cuDriverGetVersion failed"),
    disk=Disk(path="/root/.cache/huggingface", free_bytes=120 * GiB, total_bytes=Unknown("statvfs failed")),
    price=Price(usd_per_hour=4.1, provider="lab", instance_type="box-1", read_on="2025-06-01", source="invoice"),
    power_watts=Unknown("not readable"),
    notes=("probed in a container",),
)


@pytest.fixture
def probed(monkeypatch):
    monkeypatch.setattr(fitcheck.probe, "probe", lambda: RICH)
    return RICH


def test_probe_table_shows_facts_and_unknown_reasons(probed):
    result = CliRunner().invoke(cli, ["probe"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "This machine (gpu-box)" in out
    assert "available 22.9 GiB (cgroup limit 24 GiB)" in out
    assert "256 logical / 128 physical / 16 usable" in out
    assert "NVIDIA A100-SXM4-80GB" in out and "2,039 GB/s" in out and "312 TFLOP/s" in out
    assert "MIG 1g.10gb" in out and "on, 2 instance(s)" in out
    assert "GPU 1 name: unknown (NVML: GPU is lost)" in out
    assert "550.54.15, CUDA unknown (cuDriverGetVersion failed)" in out
    assert "120 GiB free at /root/.cache/huggingface" in out


def test_probe_without_gpus_says_why(monkeypatch):
    import dataclasses

    bare = dataclasses.replace(RICH, gpus=(), gpu_status="no NVIDIA driver: libnvidia-ml.so.1 not found")
    monkeypatch.setattr(fitcheck.probe, "probe", lambda: bare)
    result = CliRunner().invoke(cli, ["probe"])
    assert "GPUs" in result.output and "none — no NVIDIA driver: libnvidia-ml.so.1 not found" in result.output


def test_save_then_profile_gives_back_an_equal_machine(probed, tmp_path):
    path = tmp_path / "box.toml"
    runner = CliRunner()
    saved = runner.invoke(cli, ["probe", "--save", str(path)])
    assert saved.exit_code == 0, saved.output
    assert f"Saved profile to {path}" in saved.stderr
    assert load_profile(str(path)) == RICH  # every field, Unknown reasons included

    again = runner.invoke(cli, ["probe", "--profile", str(path), "--json"])
    assert again.exit_code == 0, again.output
    first = runner.invoke(cli, ["probe", "--json"])
    assert json.loads(again.stdout)["machine"] == json.loads(first.stdout)["machine"]
    # the installed stack describes this machine only, never a saved profile of it
    assert json.loads(again.stdout)["software"] is None and json.loads(first.stdout)["software"] is not None


def test_probe_json_is_the_versioned_document_and_valid_json(probed):
    result = CliRunner().invoke(cli, ["probe", "--json"])
    assert result.exit_code == 0
    tool = subprocess.run([sys.executable, "-m", "json.tool"], input=result.stdout, capture_output=True, text=True)
    assert tool.returncode == 0, tool.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == "fitcheck.probe/1"
    machine = doc["machine"]
    assert machine["schema"] == "fitcheck.machine/1"
    assert machine["cuda_version"] is None and machine["unknown"]["cuda_version"] == "cuDriverGetVersion failed"
    gpu1 = machine["gpus"][1]
    assert gpu1["name"] is None and gpu1["unknown"]["name"] == "NVML: GPU is lost"
    assert machine["gpus"][0]["mig_instances"][1]["unknown"] == {"uuid": "NVML: not supported", "memory_free_bytes": "busy"}
    assert machine["memory"]["cgroup_limit_bytes"] == 24 * GiB


def test_probe_profile_by_name():
    result = CliRunner().invoke(cli, ["probe", "--profile", "h100-sxm"])
    assert result.exit_code == 0, result.output
    assert "Profile h100-sxm (cloud)" in result.output
    assert "NVIDIA H100 80GB HBM3" in result.output and "3,350 GB/s" in result.output
    assert "$3.39/h" in result.output


@pytest.mark.parametrize("body, field", [
    ("kind = = 1", "not valid TOML"),
    ('kind = "desktop"\n[memory]\ntotal_gib = 8\n[cpu]\narchitecture = "x86_64"\n', "cpu.logical_cores: missing"),
    ('kind = "desktop"\n[memory]\ntotal_gib = 8\n[cpu]\narchitecture = "x86_64"\nlogical_cores = 4\n'
     '[[gpus]]\nvendor = "nvidia"\nname = "x"\nmemory_total = "lots"\n',
     'gpus[0].memory_total: expected a size (like "24 GiB"), got "lots"'),
    ('kind = "desktop"\n[memory]\ntotal_gib = "eight"\n[cpu]\narchitecture = "x86_64"\nlogical_cores = 4\n',
     'memory.total_gib: expected a number, got "eight"'),
])
def test_malformed_profile_is_exit_2_with_one_line(tmp_path, body, field):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    result = CliRunner().invoke(cli, ["probe", "--profile", str(path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fitcheck: {path}: ") and field in lines[0], result.stderr
    assert "Traceback" not in result.output


def test_unknown_profile_name_is_exit_2_with_suggestions():
    result = CliRunner().invoke(cli, ["probe", "--profile", "h100"])
    assert result.exit_code == 2
    assert "unknown hardware profile 'h100'" in result.stderr and "did you mean" in result.stderr


def test_save_to_an_unwritable_place_is_exit_2(probed, tmp_path):
    result = CliRunner().invoke(cli, ["probe", "--save", str(tmp_path / "missing-dir" / "x.toml")])
    assert result.exit_code == 2 and "cannot write" in result.stderr and "x.toml" in result.stderr


def test_help_imports_neither_pynvml_nor_tabulate():
    code = ("import sys; from fitcheck.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('pynvml', 'tabulate') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr


def test_probe_and_profiles_commands_import_without_tabulate():
    code = ("import sys, fitcheck.cli.probe_cmd, fitcheck.cli.profiles_cmd, fitcheck.render.machine, "
            "fitcheck.render.profiles, fitcheck.profiles\nprint('tabulate' in sys.modules, 'pynvml' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False False", out.stdout + out.stderr
