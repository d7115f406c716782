from __future__ import annotations

import json

from fitcheck.machine import Unknown
from fitcheck.probe.cpu import (
    count_cpu_list,
    cpu_from_cpuinfo,
    cpu_from_py_cpuinfo,
    cpu_from_sysctl,
    parse_cfs_quota,
    parse_cpu_max,
    parse_cpuinfo,
    read_cpu_quota,
    read_physical_cores_sysfs,
    usable_cores,
)


def test_sapphire_rapids_server(fixtures):
    info = parse_cpuinfo((fixtures / "cpuinfo_x86_sapphire_rapids.txt").read_text())
    assert info.model == "Intel(R) Xeon(R) Platinum 8480+"
    assert (info.logical_cores, info.physical_cores) == (8, 4)
    cpu = cpu_from_cpuinfo(info, "x86_64", None, affinity=8, quota_cpus=None)
    assert cpu.features == {"avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_vnni",
                            "amx_tile", "amx_bf16", "amx_int8"}
    assert cpu.usable_cores == 8 and cpu.features_source == "/proc/cpuinfo"


def test_laptop_without_avx512(fixtures):
    info = parse_cpuinfo((fixtures / "cpuinfo_x86_laptop_i7_1260p.txt").read_text())
    cpu = cpu_from_cpuinfo(info, "x86_64", None, affinity=6, quota_cpus=None)
    assert cpu.model == "12th Gen Intel(R) Core(TM) i7-1260P"
    assert (cpu.logical_cores, cpu.physical_cores) == (6, 4)
    assert cpu.features == {"avx", "avx2", "fma", "f16c"}
    assert not any(feature.startswith(("avx512", "amx")) for feature in cpu.features)


def test_arm_neoverse_v2(fixtures):
    info = parse_cpuinfo((fixtures / "cpuinfo_arm_neoverse_v2.txt").read_text())
    assert info.model == "ARM Neoverse-V2" and info.physical_cores is None
    cpu = cpu_from_cpuinfo(info, "arm64", physical_fallback=4, affinity=4, quota_cpus=1.5)
    assert cpu.features == {"neon", "sve", "sve2", "bf16", "i8mm"}
    assert cpu.physical_cores == 4 and cpu.usable_cores == 2  # ceil(1.5)


def test_macos_sysctl_sample(fixtures):
    values = json.loads((fixtures / "sysctl_macos_m2_max.json").read_text())
    cpu = cpu_from_sysctl(values, "arm64")
    assert cpu.model == "Apple M2 Max" and cpu.logical_cores == 12 and cpu.physical_cores == 12
    assert cpu.features == {"neon", "bf16", "i8mm"} and cpu.features_source == "sysctl"
    empty = cpu_from_sysctl({}, "arm64")
    assert isinstance(empty.model, Unknown) and isinstance(empty.logical_cores, Unknown)


def test_py_cpuinfo_fallback():
    cpu = cpu_from_py_cpuinfo({"brand_raw": "Intel Core i9", "count": 16, "flags": ["avx2", "fma", "sse4_2"]}, "x86_64")
    assert cpu.features == {"avx2", "fma"} and cpu.logical_cores == 16
    assert isinstance(cpu.physical_cores, Unknown)


def test_cpu_quota_parsers():
    assert parse_cpu_max("max 100000\n") is None
    assert parse_cpu_max("250000 100000\n") == 2.5
    assert parse_cfs_quota("-1\n", "100000\n") is None
    assert parse_cfs_quota("50000", "100000") == 0.5


def test_usable_cores():
    assert usable_cores(16, None, 32) == 16
    assert usable_cores(16, 2.5, 32) == 3
    assert usable_cores(16, 0.5, 32) == 1
    assert usable_cores(2, 8.0, 32) == 2
    assert usable_cores(None, None, None) is None
    assert count_cpu_list("0-3,8,10-11\n") == 7


def test_cpu_quota_from_nested_v2_and_v1_trees(tree):
    root = tree({
        "proc/self/cgroup": "0::/a/b\n",
        "sys/fs/cgroup/cgroup.controllers": "cpu\n",
        "sys/fs/cgroup/a/cpu.max": "200000 100000\n",
        "sys/fs/cgroup/a/b/cpu.max": "max 100000\n",
    })
    assert read_cpu_quota(str(root)) == 2.0


def test_cpu_quota_v1_joined_controller_folder(tree):
    root = tree({
        "proc/self/cgroup": "3:cpu,cpuacct:/job\n",
        "sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "150000\n",
        "sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n",
    })
    assert read_cpu_quota(str(root)) == 1.5


def test_physical_cores_from_sysfs_siblings(tree):
    files = {}
    for cpu, siblings in enumerate(["0,2", "1,3", "0,2", "1,3"]):
        files[f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"] = siblings + "\n"
    root = tree(files)
    assert read_physical_cores_sysfs(str(root)) == 2


def test_windows_cpu_from_the_registry_and_feature_flags():
    from fitcheck.probe.windows_cpu import cpu_from_windows

    present = {39, 40, 10}.__contains__  # AVX, AVX2 (and SSE2, which fitcheck does not list)
    cpu = cpu_from_windows("Intel(R) Core(TM) i7-12700K  ", 20, 12, present, "x86_64")
    assert (cpu.model, cpu.logical_cores, cpu.physical_cores, cpu.usable_cores) == (
        "Intel(R) Core(TM) i7-12700K", 20, 12, 20)
    assert cpu.features == {"avx", "avx2"} and cpu.features_source == "IsProcessorFeaturePresent"

    def broken(number):
        raise OSError("no such call")

    bare = cpu_from_windows(None, 4, None, broken, "arm64")
    assert str(bare.model).startswith("unknown") and str(bare.physical_cores).startswith("unknown")
    assert bare.features == frozenset() and bare.logical_cores == 4


def test_windows_probe_never_imports_py_cpuinfo(monkeypatch):
    import sys

    from fitcheck.probe import cpu as cpu_module
    from fitcheck.probe import windows_cpu

    monkeypatch.setattr(cpu_module.sys, "platform", "win32")
    monkeypatch.setattr(windows_cpu, "_registry_brand", lambda: "AMD Ryzen 9 7950X 16-Core Processor")
    monkeypatch.setattr(windows_cpu, "_feature_present", lambda: {39, 40, 41}.__contains__)
    monkeypatch.setattr(windows_cpu, "_physical_cores", lambda: 16)
    monkeypatch.setitem(sys.modules, "cpuinfo", None)  # importing it would raise
    cpu = cpu_module.read_cpu()
    assert cpu.model == "AMD Ryzen 9 7950X 16-Core Processor" and cpu.features == {"avx", "avx2", "avx512f"}
