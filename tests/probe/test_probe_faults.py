"""Impossible probe readings become Unknown(reason); visible-device lists and NVML types parsed defensively."""

from __future__ import annotations

import types

from fake_nvml import GIB, FakeNvml, a100_80gb, memory_v2

from fitcheck.machine import SystemMemory, Unknown, known
from fitcheck.probe.amd import parse_visible_indices, read_drm_card
from fitcheck.probe.cuda_visible import parse_cuda_visible_devices
from fitcheck.probe.memory import parse_meminfo, system_memory_from
from fitcheck.probe.nvidia import read_nvidia

RAM = SystemMemory(64 * GIB, 48 * GIB, None, 0, 0)


def test_negative_memtotal_and_available_above_total_are_unknown():
    info = parse_meminfo("MemTotal: -5 kB\nMemAvailable: 100 kB\n")
    mem = system_memory_from(info.get("MemTotal"), info.get("MemAvailable"), None, None, [], "/proc/meminfo")
    assert isinstance(mem.total_bytes, Unknown) and "negative" in mem.total_bytes.reason
    mem = system_memory_from(8 * GIB, 16 * GIB, 1, 2, [], "/proc/meminfo")
    assert isinstance(mem.available_bytes, Unknown) and "above MemTotal" in mem.available_bytes.reason
    assert isinstance(mem.swap_free_bytes, Unknown)


def test_amd_used_above_total_and_2_to_the_70_are_unknown(tmp_path):
    card = tmp_path / "card0" / "device"
    card.mkdir(parents=True)
    (card / "vendor").write_text("0x1002\n")
    (card / "mem_info_vram_total").write_text(str(16 * GIB))
    (card / "mem_info_vram_used").write_text(str(1000 * GIB))
    gpu = read_drm_card(str(card))
    assert gpu.memory_total_bytes == 16 * GIB and isinstance(gpu.memory_free_bytes, Unknown)
    (card / "mem_info_vram_total").write_text(str(2**70))
    gpu = read_drm_card(str(card))
    assert isinstance(gpu.memory_total_bytes, Unknown) and "impossible" in gpu.memory_total_bytes.reason


def test_cuda_visible_devices_with_unicode_digits_or_5000_digits_ends_the_list():
    assert parse_cuda_visible_devices("²", 2, ["GPU-a", "GPU-b"]) == []
    assert parse_cuda_visible_devices("1," + "9" * 5000, 2, ["GPU-a", "GPU-b"]) == [1]
    assert parse_visible_indices("0,²") == [0]
    assert parse_visible_indices("9" * 5000) == []


def test_cuda_visible_devices_odd_value_keeps_driver_and_cuda_versions():
    reading = read_nvidia({"CUDA_VISIBLE_DEVICES": "9" * 5000}, RAM, nvml=FakeNvml([a100_80gb()]))
    assert reading.driver_version == "550.54.15" and reading.cuda_version == "12.4"
    assert reading.gpus == ()


def test_odd_nvml_return_types_blank_only_their_field():
    odd = a100_80gb()
    odd["nvmlDeviceGetName"] = 42
    odd["nvmlDeviceGetCudaComputeCapability"] = "8.0"
    odd["memory_v2"] = memory_v2(2**70, 10 * GIB, 0)
    good = a100_80gb(1, uuid="GPU-ffff")
    reading = read_nvidia({}, RAM, nvml=FakeNvml([odd, good], cuda="12040"))
    first, second = reading.gpus
    assert isinstance(first.name, Unknown) and isinstance(first.compute_capability, Unknown)
    assert isinstance(first.memory_total_bytes, Unknown) and known(first.memory_free_bytes)
    assert second.name == "NVIDIA A100-SXM4-80GB" and second.compute_capability == "8.0"
    assert isinstance(reading.cuda_version, Unknown) and reading.driver_version == "550.54.15"


def test_nvml_memory_free_above_total_is_unknown():
    device = a100_80gb()
    device["memory_v2"] = types.SimpleNamespace(total=10 * GIB, free=20 * GIB, used=0, reserved=0)
    (gpu,) = read_nvidia({}, RAM, nvml=FakeNvml([device])).gpus
    assert isinstance(gpu.memory_free_bytes, Unknown) and "above total" in gpu.memory_free_bytes.reason
