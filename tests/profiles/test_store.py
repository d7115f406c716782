"""Finding profiles by name or path; the shipped profiles and their facts."""

from __future__ import annotations

import pytest

from fitcheck.errors import FitcheckError
from fitcheck.machine import Unknown, known
from fitcheck.profiles import list_profiles, load_profile, profile_names
from fitcheck.units import GB, GiB, MiB

SHIPPED = list_profiles()
BY_NAME = {m.name: m for m in SHIPPED}


def test_at_least_25_profiles_of_every_kind():
    assert len(SHIPPED) >= 25
    assert {m.kind for m in SHIPPED} >= {"laptop", "desktop", "cloud", "ci"}
    assert [m.name for m in SHIPPED] == profile_names()  # name = file stem


@pytest.mark.parametrize("machine", SHIPPED, ids=lambda m: m.name)
def test_shipped_profile_has_the_required_facts(machine):
    assert machine.source == f"hardware_profiles/{machine.name}.toml"
    assert machine.description
    assert known(machine.memory.total_bytes) and machine.memory.total_bytes >= 8 * GiB
    assert 0 < machine.memory.available_bytes < machine.memory.total_bytes
    assert known(machine.cpu.logical_cores) and known(machine.cpu.physical_cores)
    # bandwidth of system RAM: a figure, or an explicit reason (cloud VMs)
    assert known(machine.memory.bandwidth_bytes_per_s) or machine.memory.bandwidth_bytes_per_s.reason != "not in profile"
    assert known(machine.power_watts) or machine.power_watts.reason != "not in profile"
    for gpu in machine.gpus:
        assert known(gpu.name) and gpu.memory_total_bytes >= 7 * GiB
        assert gpu.memory_free_bytes == gpu.memory_total_bytes
        assert known(gpu.bandwidth_bytes_per_s)
        assert known(gpu.bf16_tflops) or gpu.bf16_tflops.reason != "not in profile"
        if gpu.vendor == "nvidia":
            assert known(gpu.compute_capability)
        if gpu.vendor == "apple":
            assert gpu.unified_memory
    if machine.kind == "cloud":
        price = machine.price
        assert price is not None and price.usd_per_hour > 0 and price.read_on and price.source
        assert price.provider and price.instance_type


@pytest.mark.parametrize("name, mib, bandwidth, tflops, cc", [
    ("h100-sxm", 81559, 3_350 * GB, 989.0, "9.0"),
    ("a100-80gb", 81920, 2_039 * GB, 312.0, "8.0"),
    ("rtx-4090", 24564, 1_008 * GB, 165.2, "8.9"),
    ("l4", 23034, 300 * GB, 121.0, "8.9"),
    ("t4", 15360, 320 * GB, None, "7.5"),
])
def test_reference_figures(name, mib, bandwidth, tflops, cc):
    gpu = BY_NAME[name].gpus[0]
    assert gpu.memory_total_bytes == mib * MiB
    assert gpu.bandwidth_bytes_per_s == bandwidth
    assert gpu.compute_capability == cc
    if tflops is None:
        assert isinstance(gpu.bf16_tflops, Unknown) and "no bf16" in gpu.bf16_tflops.reason
    else:
        assert gpu.bf16_tflops == tflops


def test_apple_gpu_memory_is_the_metal_working_set():
    assert BY_NAME["macbook-air-m3-16gb"].gpus[0].memory_total_bytes == 16 * GiB * 2 // 3
    assert BY_NAME["macbook-pro-m4-max-128gb"].gpus[0].memory_total_bytes == 96 * GiB


def test_multi_gpu_profiles():
    assert len(BY_NAME["2x-rtx-3090"].gpus) == 2
    assert [g.index for g in BY_NAME["8x-h100"].gpus] == list(range(8))


def test_lookup_by_name_is_case_insensitive_and_accepts_instance_types():
    assert load_profile("RTX-4090").name == "rtx-4090"
    assert load_profile("rtx-4090.toml").name == "rtx-4090"
    assert load_profile("g5.xlarge").name == "a10g"


def test_unknown_name_suggests_three_close_names():
    with pytest.raises(FitcheckError) as info:
        load_profile("rtx4090")
    assert "unknown hardware profile 'rtx4090'" in info.value.message
    assert info.value.hint.startswith("did you mean rtx-4090, ")
    assert info.value.hint.count(",") == 2


def test_path_loads_and_missing_path_is_an_error(tmp_path):
    path = tmp_path / "box.toml"
    path.write_text('kind = "desktop"\n[memory]\ntotal_gib = 8\n[cpu]\narchitecture = "arm64"\nlogical_cores = 4\n')
    machine = load_profile(str(path))
    assert machine.name == "box" and machine.source == str(path)
    with pytest.raises(FitcheckError, match="profile file not found"):
        load_profile(str(tmp_path / "nope.toml"))


def test_unconvertible_or_deeply_nested_toml_is_one_line(tmp_path):
    from fitcheck.profiles import read_profile_text

    with pytest.raises(FitcheckError, match=r"^p.toml: not a usable profile: ") as info:
        read_profile_text('kind = "desktop"\n[memory]\ntotal_bytes = 1' + "0" * 5000 + "\n", "p.toml")
    assert "\n" not in info.value.one_line()
    with pytest.raises(FitcheckError, match=r"^p.toml: not a usable profile: values nested too deeply"):
        read_profile_text("x = " + "[" * 5000 + "]" * 5000 + "\n", "p.toml")


def test_nan_profile_file_is_one_line(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('kind="desktop"\n[memory]\ntotal_gib=nan\n[cpu]\narchitecture="x86_64"\nlogical_cores=8\n')
    with pytest.raises(FitcheckError, match=r"p.toml: memory.total_gib: expected a finite number, got NaN$"):
        load_profile(str(path))
