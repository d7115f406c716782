from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest
from fake_nvml import FakeNvml, a100_80gb

from fitcheck.machine import Machine, Unknown
from fitcheck.probe import nvidia, probe
from fitcheck.probe.cpu import X86_FEATURES, normalise_features
from fitcheck.probe.memory import parse_limit, parse_meminfo


def _forbid(*args, **kwargs):
    raise AssertionError("probe() must not start a process")


@pytest.fixture
def no_processes(monkeypatch):
    monkeypatch.setattr(subprocess, "Popen", _forbid)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve", "spawnv"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _forbid)


def test_probe_starts_no_process_and_returns_a_machine(no_processes):
    machine = probe()
    assert isinstance(machine, Machine)
    assert machine.kind == "probed" and machine.source == "probe" and machine.name
    if not machine.gpus:
        assert machine.gpu_status and "NVIDIA" in machine.gpu_status  # why there is no GPU


def test_probe_on_an_empty_root_never_raises(no_processes, tmp_path):
    machine = probe(root=str(tmp_path), env={"CUDA_VISIBLE_DEVICES": "abc"})
    assert isinstance(machine, Machine)
    if sys.platform.startswith("linux"):
        assert machine.cpu.model == Unknown("/proc/cpuinfo not readable")
        assert machine.memory.total_bytes == Unknown("/proc/meminfo not readable")
        assert not any(gpu.vendor in ("amd", "intel") for gpu in machine.gpus)
        assert "no /sys/class/drm" in machine.gpu_status or machine.gpus


def test_a_part_that_raises_becomes_unknown(monkeypatch):
    import fitcheck.probe.cpu as cpu_module

    def broken(root="/"):
        raise RuntimeError("boom")

    monkeypatch.setattr(cpu_module, "read_cpu", broken)
    machine = probe()
    assert isinstance(machine.cpu.model, Unknown) and "RuntimeError: boom" in machine.cpu.model.reason
    assert machine.memory.total_bytes  # the other parts are still read


def test_fake_pynvml_through_sys_modules(monkeypatch, no_processes):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([a100_80gb()]))
    monkeypatch.setattr(nvidia, "_nvml_library_present", lambda: True)
    machine = probe(env={"CUDA_VISIBLE_DEVICES": "0"})
    (gpu,) = machine.gpus
    assert gpu.name == "NVIDIA A100-SXM4-80GB" and machine.gpu_status == ""
    assert machine.cuda_version == "12.4"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_this_linux_machine_matches_proc():
    machine = probe()
    meminfo = parse_meminfo(open("/proc/meminfo").read())
    assert machine.memory.total_bytes == meminfo["MemTotal"]
    assert 0 < machine.memory.available_bytes <= meminfo["MemTotal"]
    # the cgroup limit, read independently from this process's memory cgroup
    for line in open("/proc/self/cgroup").read().splitlines():
        _, controllers, path = line.split(":", 2)
        candidates = []
        if "memory" in controllers.split(","):
            candidates.append(f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
        elif controllers == "":
            candidates.append(f"/sys/fs/cgroup{path}/memory.max")
        for candidate in candidates:
            if os.path.exists(candidate):
                limit = parse_limit(open(candidate).read())
                if limit is None:
                    assert machine.memory.cgroup_limit_bytes is None or machine.memory.cgroup_limit_bytes > 0
                else:
                    assert machine.memory.cgroup_limit_bytes <= limit
                    assert machine.memory.available_bytes <= limit
    # CPU features straight from /proc/cpuinfo
    words = set()
    for line in open("/proc/cpuinfo"):
        if line.startswith(("flags", "Features")):
            words = set(line.split(":", 1)[1].split())
            break
    assert machine.cpu.features == normalise_features(words)
    assert machine.cpu.features_source == "/proc/cpuinfo"
    assert machine.cpu.usable_cores <= len(os.sched_getaffinity(0))


def _nvml_loadable() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux") or _nvml_loadable(), reason="a machine without NVIDIA")
def test_no_nvidia_driver_says_why():
    machine = probe()
    assert not any(gpu.vendor == "nvidia" for gpu in machine.gpus)
    if not machine.gpus:
        assert "NVIDIA driver not found (libnvidia-ml.so.1 missing)" in machine.gpu_status
    assert isinstance(machine.driver_version, Unknown)


def test_x86_feature_names_are_kernel_flag_names():
    assert normalise_features(X86_FEATURES) == X86_FEATURES
