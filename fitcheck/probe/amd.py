"""AMD and Intel discrete GPUs through sysfs (/sys/class/drm/card*/device): no ROCm needed.

amdgpu exposes mem_info_vram_total / mem_info_vram_used in bytes
(https://docs.kernel.org/gpu/amdgpu/driver-misc.html); Intel's xe/i915 drivers expose local
memory only on some kernels (lmem_total_bytes), so Intel GPUs without it (integrated) are skipped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace

from fitcheck.machine import GPU, Unknown
from fitcheck.probe.files import plausible_bytes, read_int, read_text, small_index, under

AMD_VENDOR = 0x1002
INTEL_VENDOR = 0x8086

# PCI device id -> name, for cards whose sysfs has no product_name (from the PCI ID repository,
# https://pci-ids.ucw.cz/read/PC/1002).
AMD_PCI_NAMES = {
    0x74A1: "AMD Instinct MI300X",
    0x74A5: "AMD Instinct MI325X",
    0x740F: "AMD Instinct MI210",
    0x740C: "AMD Instinct MI250X / MI250",
    0x7408: "AMD Instinct MI250X",
    0x738C: "AMD Instinct MI100",
    0x744C: "AMD Radeon RX 7900 XTX / 7900 XT",
    0x73BF: "AMD Radeon RX 6900 XT / 6800 XT",
}

_CARD = re.compile(r"^card(\d+)$")


def parse_visible_indices(value: str | None) -> list[int] | None:
    """ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES ('0,2') -> [0, 2]; None when unset.

    Like CUDA's variable, the list ends at the first entry that is not an index."""
    if value is None:
        return None
    indices: list[int] = []
    for token in (part.strip() for part in value.split(",")):
        index = small_index(token)
        if index is None or index in indices:
            break
        indices.append(index)
    return indices


def apply_visible(items: list, value: str | None) -> list:
    """The items a *_VISIBLE_DEVICES value selects, in its order (unset: all)."""
    indices = parse_visible_indices(value)
    if indices is None:
        return list(items)
    return [items[i] for i in indices if i < len(items)]


def read_drm_card(device_dir: str) -> GPU | None:
    """One /sys/class/drm/cardN/device as a GPU (index 0 for now), or None when not ours."""
    vendor = read_int(os.path.join(device_dir, "vendor"))
    if vendor == AMD_VENDOR:
        raw_total = read_int(os.path.join(device_dir, "mem_info_vram_total"))
        raw_used = read_int(os.path.join(device_dir, "mem_info_vram_used"))
        if raw_total is None:
            return None
        total = plausible_bytes(raw_total, "mem_info_vram_total")
        used = (plausible_bytes(raw_used, "mem_info_vram_used") if raw_used is not None
                else Unknown("mem_info_vram_used not readable"))
        device_id = read_int(os.path.join(device_dir, "device"))
        if device_id is not None and not 0 <= device_id <= 0xFFFF:
            device_id = None
        name = (read_text(os.path.join(device_dir, "product_name")) or "").strip()[:200]
        name = name or AMD_PCI_NAMES.get(device_id or -1) or f"AMD GPU (PCI id {device_id or 0:#06x})"
        free: int | Unknown
        if isinstance(total, Unknown) or isinstance(used, Unknown):
            free = total if isinstance(total, Unknown) else used
        elif used > total:
            free = Unknown(f"mem_info_vram_used ({used:,}) above mem_info_vram_total ({total:,})")
        else:
            free = total - used
        return GPU(index=0, vendor="amd", name=name, memory_total_bytes=total, memory_free_bytes=free,
                   memory_used_bytes=used,
                   notes=("read from sysfs (amdgpu)",))
    if vendor == INTEL_VENDOR:
        lmem_total = read_int(os.path.join(device_dir, "lmem_total_bytes"))
        if lmem_total is None:
            lmem_total = read_int(os.path.join(device_dir, "mem_info_vram_total"))
        if not lmem_total:
            return None  # integrated graphics: no local memory of its own
        device_id = read_int(os.path.join(device_dir, "device"))
        if device_id is not None and not 0 <= device_id <= 0xFFFF:
            device_id = None
        avail = read_int(os.path.join(device_dir, "lmem_avail_bytes"))
        intel_total = plausible_bytes(lmem_total, "lmem_total_bytes")
        intel_free = plausible_bytes(avail, "lmem_avail_bytes") if avail is not None \
            else Unknown("free local memory not in sysfs")
        if isinstance(intel_total, int) and isinstance(intel_free, int) and intel_free > intel_total:
            intel_free = Unknown(f"lmem_avail_bytes ({intel_free:,}) above lmem_total_bytes ({intel_total:,})")
        return GPU(index=0, vendor="intel", name=f"Intel GPU (PCI id {device_id or 0:#06x})",
                   memory_total_bytes=intel_total,
                   memory_free_bytes=intel_free,
                   notes=("read from sysfs",))
    return None


def read_drm_gpus(root: str = "/", env: Mapping[str, str] | None = None) -> tuple[tuple[GPU, ...], str]:
    """(AMD + Intel discrete GPUs, one-line status when none) from /sys/class/drm.

    AMD GPUs are ordered by card number (ROCm's usual order) and filtered by
    ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES (which indexes what ROCR left visible).
    """
    env = env or {}
    drm = under(root, "/sys/class/drm")
    try:
        names = sorted((int(m.group(1)), name) for name in os.listdir(drm) if (m := _CARD.match(name)))
    except OSError:
        return (), "no /sys/class/drm"
    amd: list[GPU] = []
    intel: list[GPU] = []
    for _, name in names:
        gpu = read_drm_card(os.path.join(drm, name, "device"))
        if gpu is not None:
            (amd if gpu.vendor == "amd" else intel).append(gpu)
    amd = apply_visible(apply_visible(amd, env.get("ROCR_VISIBLE_DEVICES")), env.get("HIP_VISIBLE_DEVICES"))
    gpus = tuple(_reindex(amd) + _reindex(intel))
    return gpus, "" if gpus else "no AMD/Intel GPU in /sys/class/drm"


def _reindex(gpus: list[GPU]) -> list[GPU]:
    return [replace(gpu, index=position) for position, gpu in enumerate(gpus)]
