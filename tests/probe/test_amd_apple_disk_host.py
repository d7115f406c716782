from __future__ import annotations

import json

from fitcheck.machine import Unknown
from fitcheck.probe.amd import parse_visible_indices, read_drm_gpus
from fitcheck.probe.apple import apple_gpu, estimated_working_set, read_apple_gpus
from fitcheck.probe.disk import model_cache_dir, nearest_existing, read_disk
from fitcheck.probe.host import is_container, is_wsl, parse_os_release

GIB = 1024**3


def amd_card(n: int, device_id: str, total: int, used: int, product: str | None = None) -> dict[str, str]:
    base = f"sys/class/drm/card{n}/device/"
    files = {base + "vendor": "0x1002\n", base + "device": device_id + "\n",
             base + "mem_info_vram_total": f"{total}\n", base + "mem_info_vram_used": f"{used}\n"}
    if product:
        files[base + "product_name"] = product + "\n"
    return files


def amd_tree(tree):
    files = {**amd_card(0, "0x74a1", 192 * GIB, 2 * GIB), **amd_card(1, "0x744c", 24 * GIB, 1 * GIB, "Radeon RX 7900 XTX")}
    files["sys/class/drm/card0-DP-1/status"] = "connected\n"  # a connector, not a card
    files["sys/class/drm/card2/device/vendor"] = "0x8086\n"  # integrated Intel: no local memory
    files["sys/class/drm/card2/device/device"] = "0x46a6\n"
    return tree(files)


def test_amd_sysfs_tree(tree):
    gpus, status = read_drm_gpus(str(amd_tree(tree)), {})
    assert status == ""
    assert [(g.index, g.vendor, g.name) for g in gpus] == [
        (0, "amd", "AMD Instinct MI300X"), (1, "amd", "Radeon RX 7900 XTX")]
    assert gpus[0].memory_total_bytes == 192 * GIB and gpus[0].memory_free_bytes == 190 * GIB


def test_rocr_and_hip_visible_devices(tree):
    root = str(amd_tree(tree))
    (gpu,) = read_drm_gpus(root, {"ROCR_VISIBLE_DEVICES": "1"})[0]
    assert gpu.index == 0 and gpu.name == "Radeon RX 7900 XTX"
    (gpu,) = read_drm_gpus(root, {"ROCR_VISIBLE_DEVICES": "1,0", "HIP_VISIBLE_DEVICES": "1"})[0]
    assert gpu.name == "AMD Instinct MI300X"
    assert read_drm_gpus(root, {"HIP_VISIBLE_DEVICES": ""}) == ((), "no AMD/Intel GPU in /sys/class/drm")
    assert parse_visible_indices("0,x,1") == [0] and parse_visible_indices(None) is None


def test_intel_discrete_with_local_memory(tree):
    root = tree({"sys/class/drm/card1/device/vendor": "0x8086\n", "sys/class/drm/card1/device/device": "0x56a0\n",
                 "sys/class/drm/card1/device/lmem_total_bytes": f"{16 * GIB}\n"})
    (gpu,) = read_drm_gpus(str(root), {})[0]
    assert gpu.vendor == "intel" and gpu.memory_total_bytes == 16 * GIB
    assert isinstance(gpu.memory_free_bytes, Unknown)


def test_no_drm(tmp_path):
    assert read_drm_gpus(str(tmp_path), {}) == ((), "no /sys/class/drm")


def test_apple_working_set_sources(fixtures):
    memsize = json.loads((fixtures / "sysctl_macos_m2_max.json").read_text())["hw.memsize"]
    metal = apple_gpu(memsize, 48 * GIB, None, "Apple M2 Max GPU", free_bytes=40 * GIB)
    assert metal.memory_total_bytes == 48 * GIB and metal.memory_free_bytes == 40 * GIB and metal.unified_memory
    wired = apple_gpu(memsize, None, 57344, None)
    assert wired.memory_total_bytes == 56 * GIB and "iogpu" in wired.notes[1]
    estimate = apple_gpu(memsize, None, 0, None)  # wired_limit_mb 0 means 'default'
    assert estimate.memory_total_bytes == 48 * GIB and "estimated" in estimate.notes[1]
    assert isinstance(apple_gpu(None, None, None, None).memory_total_bytes, Unknown)


def test_apple_default_estimate_thresholds():
    assert estimated_working_set(16 * GIB) == 16 * GIB * 2 // 3  # 10.67 GiB, as an M4 16 GB reports
    assert estimated_working_set(36 * GIB) == 24 * GIB
    assert estimated_working_set(192 * GIB) == 144 * GIB


def test_apple_is_a_no_op_off_macos():
    assert read_apple_gpus(8 * GIB) == ()


def test_model_cache_dir_precedence():
    home = "/home/ada"
    assert model_cache_dir({"HF_HUB_CACHE": "/data/hub", "HF_HOME": "/x"}, home) == "/data/hub"
    assert model_cache_dir({"HF_HOME": "/data/hf"}, home) == "/data/hf/hub"
    assert model_cache_dir({"XDG_CACHE_HOME": "/c"}, home) == "/c/huggingface/hub"
    assert model_cache_dir({}, home) == "/home/ada/.cache/huggingface/hub"


def test_disk_uses_nearest_existing_folder(tmp_path):
    assert nearest_existing(str(tmp_path / "a" / "b")) == str(tmp_path)
    disk = read_disk({"HF_HUB_CACHE": str(tmp_path / "not" / "yet")})
    assert disk.path == str(tmp_path) and disk.free_bytes > 0 and disk.total_bytes >= disk.free_bytes


def test_container_and_wsl_detection():
    assert is_container(True, False, None) and is_container(False, True, "")
    assert is_container(False, False, "12:memory:/kubepods/besteffort/pod1\n")
    assert not is_container(False, False, "0::/\n")
    assert is_wsl("5.15.90.1-microsoft-standard-WSL2\n") and not is_wsl("6.8.0-45-generic")
    assert parse_os_release('NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 24.04.1 LTS"\n') == "Ubuntu 24.04.1 LTS"
