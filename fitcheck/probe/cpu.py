"""The CPU: model, cores (logical, physical, usable by this process) and SIMD/matrix features.

Linux reads /proc/cpuinfo (x86 'flags', ARM 'Features'), /sys topology and the cgroup CPU quota;
macOS reads sysctl through ctypes; Windows the registry and IsProcessorFeaturePresent
(:mod:`fitcheck.probe.windows_cpu`).  Anything else falls back to py-cpuinfo when it is installed
(it starts processes and takes 1.5 s, so it is a dependency only on those platforms).
"""

from __future__ import annotations

import math
import os
import platform
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fitcheck.machine import CPU, Unknown
from fitcheck.probe.cgroup import read_cgroup_dirs
from fitcheck.probe.files import read_text, under
from fitcheck.probe.sysctl import read_sysctl
from fitcheck.probe.windows_cpu import read_windows_cpu

# The normalised feature names fitcheck reasons about.  x86 names are the kernel's
# /proc/cpuinfo flag names (arch/x86/include/asm/cpufeatures.h); ARM names come from the
# kernel's hwcap strings (arch/arm64/kernel/cpuinfo.c), where 'asimd' is Advanced SIMD (NEON).
X86_FEATURES = frozenset({
    "avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_vnni",
    "amx_tile", "amx_bf16", "amx_int8",
})
ARM_FEATURES = {"asimd": "neon", "neon": "neon", "sve": "sve", "sve2": "sve2", "bf16": "bf16", "i8mm": "i8mm"}

# macOS sysctl names -> normalised feature (hw.optional.* are 1 when present).
# Apple: https://developer.apple.com/documentation/kernel/1387446-sysctlbyname/determining_instruction_set_characteristics
MACOS_FEATURES = {
    "hw.optional.neon": "neon",
    "hw.optional.arm.FEAT_BF16": "bf16",
    "hw.optional.arm.FEAT_I8MM": "i8mm",
    "hw.optional.avx1_0": "avx",
    "hw.optional.avx2_0": "avx2",
    "hw.optional.fma": "fma",
    "hw.optional.f16c": "f16c",
    "hw.optional.avx512f": "avx512f",
}
MACOS_NAMES = ["machdep.cpu.brand_string", "hw.physicalcpu", "hw.logicalcpu", "hw.memsize", *MACOS_FEATURES]

# ARM /proc/cpuinfo has no model name: (implementer, part) -> name, from the kernel's
# arch/arm64/include/asm/cputype.h.  Unknown parts are shown by their ids.
ARM_PARTS = {
    ("0x41", "0xd0c"): "ARM Neoverse-N1",
    ("0x41", "0xd40"): "ARM Neoverse-V1",
    ("0x41", "0xd49"): "ARM Neoverse-N2",
    ("0x41", "0xd4f"): "ARM Neoverse-V2",
    ("0x41", "0xd8e"): "ARM Neoverse-N3",
    ("0x41", "0xd84"): "ARM Neoverse-V3",
    ("0x41", "0xd08"): "ARM Cortex-A72",
    ("0x41", "0xd0b"): "ARM Cortex-A76",
    ("0x41", "0xd0d"): "ARM Cortex-A77",
    ("0x61", "0x022"): "Apple M1",
}


@dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says."""

    model: str | None
    logical_cores: int
    physical_cores: int | None  # None when cpuinfo lacks 'physical id'/'core id' (ARM)
    raw_features: frozenset[str]


def parse_cpuinfo(text: str) -> CpuInfo:
    """Parse /proc/cpuinfo (x86 or ARM) into model, core counts and raw feature words."""
    blocks = [block for block in text.split("\n\n") if "processor" in block]
    model = None
    features: frozenset[str] = frozenset()
    cores: set[tuple[str, str]] = set()
    has_topology = False
    implementer = part = None
    for block in blocks:
        fields = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        model = model or fields.get("model name") or fields.get("Model name")
        words = fields.get("flags") or fields.get("Features")
        if words and not features:
            features = frozenset(words.split())
        if "physical id" in fields and "core id" in fields:
            has_topology = True
            cores.add((fields["physical id"], fields["core id"]))
        implementer = implementer or fields.get("CPU implementer")
        part = part or fields.get("CPU part")
    if model is None and implementer and part:
        model = ARM_PARTS.get((implementer.lower(), part.lower()), f"ARM CPU (implementer {implementer}, part {part})")
    if model is None and blocks:
        model = _first_field(text, ("Hardware", "cpu model"))
    return CpuInfo(model, len(blocks), len(cores) if has_topology else None, features)


def _first_field(text: str, names: tuple[str, ...]) -> str | None:
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in names:
            return value.strip()
    return None


def normalise_features(raw: frozenset[str] | set[str]) -> frozenset[str]:
    """Raw /proc/cpuinfo words -> fitcheck's normalised feature names."""
    found = {word for word in raw if word in X86_FEATURES}
    found |= {ARM_FEATURES[word] for word in raw if word in ARM_FEATURES}
    return frozenset(found)


def count_cpu_list(text: str) -> int:
    """'0-3,8,10-11' (a kernel cpu list) -> 7."""
    total = 0
    for chunk in text.strip().split(","):
        if not chunk:
            continue
        low, _, high = chunk.partition("-")
        total += int(high) - int(low) + 1 if high else 1
    return total


def parse_cpu_max(text: str | None) -> float | None:
    """cgroup v2 cpu.max ('200000 100000' -> 2.0 CPUs; 'max 100000' -> None)."""
    words = (text or "").split()
    if len(words) != 2 or words[0] == "max":
        return None
    try:
        quota, period = int(words[0]), int(words[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs_quota(quota_text: str | None, period_text: str | None) -> float | None:
    """cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us ('-1' = no quota)."""
    try:
        quota, period = int((quota_text or "").strip()), int((period_text or "").strip())
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def read_cpu_quota(root: str = "/") -> float | None:
    """The tightest CPU quota (in CPUs) over this process's cgroup and its ancestors, or None."""
    version, folders = read_cgroup_dirs("cpu", root)
    quotas = []
    for folder in folders:
        if version == 2:
            quota = parse_cpu_max(read_text(os.path.join(folder, "cpu.max")))
        else:
            quota = parse_cfs_quota(read_text(os.path.join(folder, "cpu.cfs_quota_us")),
                                    read_text(os.path.join(folder, "cpu.cfs_period_us")))
        if quota is not None:
            quotas.append(quota)
    return min(quotas) if quotas else None


def usable_cores(affinity: int | None, quota_cpus: float | None, logical: int | None) -> int | None:
    """min(CPUs this process may run on, ceil(cgroup quota)); None when nothing is known."""
    candidates = [value for value in (affinity, logical) if value]
    base = min(candidates) if candidates else None
    if quota_cpus is None:
        return base
    limit = max(1, math.ceil(quota_cpus - 1e-9))
    return min(base, limit) if base else limit


def read_physical_cores_sysfs(root: str = "/") -> int | None:
    """Physical cores from /sys topology: unique core sibling lists (ARM has no cpuinfo ids)."""
    base = under(root, "/sys/devices/system/cpu")
    try:
        names = [name for name in os.listdir(base) if name.startswith("cpu") and name[3:].isdigit()]
    except OSError:
        return None
    siblings = set()
    for name in names:
        text = read_text(os.path.join(base, name, "topology", "thread_siblings_list"))
        if text is None:
            text = read_text(os.path.join(base, name, "topology", "core_cpus_list"))
        if text is not None:
            siblings.add(text.strip())
    return len(siblings) or None


def _affinity() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def cpu_from_cpuinfo(info: CpuInfo, architecture: str, physical_fallback: int | None,
                     affinity: int | None, quota_cpus: float | None) -> CPU:
    """Assemble :class:`CPU` from parsed /proc/cpuinfo and the process's limits (pure)."""
    logical = info.logical_cores or None
    physical = info.physical_cores or physical_fallback
    usable = usable_cores(affinity, quota_cpus, logical)
    return CPU(
        model=info.model or Unknown("no model name in /proc/cpuinfo"),
        architecture=architecture,
        logical_cores=logical or Unknown("no processors in /proc/cpuinfo"),
        physical_cores=physical or Unknown("no core topology in /proc/cpuinfo or /sys"),
        usable_cores=usable or Unknown("affinity and quota not readable"),
        features=normalise_features(info.raw_features),
        features_source="/proc/cpuinfo",
    )


def cpu_from_sysctl(values: Mapping[str, int | str], architecture: str) -> CPU:
    """Assemble :class:`CPU` from macOS sysctl values (pure; ``values`` as read_sysctl returns)."""
    missing = Unknown("sysctl not readable")
    logical = values.get("hw.logicalcpu")
    physical = values.get("hw.physicalcpu")
    features = frozenset(feature for name, feature in MACOS_FEATURES.items() if values.get(name) == 1)
    if architecture == "arm64":
        features |= {"neon"}  # Advanced SIMD is mandatory on ARMv8-A
    return CPU(
        model=str(values.get("machdep.cpu.brand_string") or "") or missing,
        architecture=architecture,
        logical_cores=logical if isinstance(logical, int) and logical > 0 else missing,
        physical_cores=physical if isinstance(physical, int) and physical > 0 else missing,
        usable_cores=logical if isinstance(logical, int) and logical > 0 else missing,
        features=features,
        features_source="sysctl",
    )


def cpu_from_py_cpuinfo(info: Mapping[str, object], architecture: str) -> CPU:
    """Assemble :class:`CPU` from py-cpuinfo's get_cpu_info() dict (pure)."""
    count = info.get("count")
    logical = count if isinstance(count, int) and count > 0 else os.cpu_count()
    flags = info.get("flags", []) or []
    if not isinstance(flags, Iterable):  # what iterating it would raise (the caller reports the message)
        raise TypeError(f"'{type(flags).__name__}' object is not iterable")
    raw = frozenset(str(flag) for flag in flags)
    return CPU(
        model=str(info.get("brand_raw") or "") or Unknown("py-cpuinfo gave no brand"),
        architecture=architecture,
        logical_cores=logical or Unknown("py-cpuinfo gave no count"),
        physical_cores=Unknown("not reported by py-cpuinfo"),
        usable_cores=logical or Unknown("py-cpuinfo gave no count"),
        features=normalise_features(raw),
        features_source="py-cpuinfo",
    )


def normalise_architecture(machine: str) -> str:
    """'aarch64' -> 'arm64', 'AMD64' -> 'x86_64'."""
    name = machine.lower()
    return {"aarch64": "arm64", "amd64": "x86_64", "x64": "x86_64"}.get(name, name)


def read_cpu(root: str = "/") -> CPU:
    """This machine's CPU, read the cheapest way its OS allows."""
    architecture = normalise_architecture(platform.machine())
    if sys.platform.startswith("linux"):
        text = read_text(under(root, "/proc/cpuinfo"))
        if text is not None:
            info = parse_cpuinfo(text)
            physical = None if info.physical_cores else read_physical_cores_sysfs(root)
            return cpu_from_cpuinfo(info, architecture, physical, _affinity(), read_cpu_quota(root))
        missing = Unknown("/proc/cpuinfo not readable")
        usable = usable_cores(_affinity(), read_cpu_quota(root), os.cpu_count())
        return CPU(missing, architecture, os.cpu_count() or missing, missing, usable or missing)
    if sys.platform == "darwin":
        return cpu_from_sysctl(read_sysctl(MACOS_NAMES), architecture)
    if sys.platform == "win32":
        return read_windows_cpu(architecture)
    try:
        import cpuinfo  # py-cpuinfo: starts processes and takes ~1.5 s, so only as a last resort

        return cpu_from_py_cpuinfo(cpuinfo.get_cpu_info(), architecture)
    except Exception as exc:
        logical = os.cpu_count()
        return CPU(Unknown(f"py-cpuinfo: {exc}"), architecture,
                   logical or Unknown("os.cpu_count() is None"), Unknown("not readable"),
                   logical or Unknown("os.cpu_count() is None"))
