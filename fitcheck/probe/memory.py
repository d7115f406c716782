"""System RAM and swap, with the cgroup memory limit that applies to this process.

The effective available memory is the smaller of what the OS reports available and, for each
cgroup level with a limit, ``limit - (usage - inactive_file)``: inactive file cache is reclaimable,
which is the working-set figure the kernel and ``docker stats`` use
(https://docs.kernel.org/admin-guide/cgroup-v2.html, memory.stat; v1: Documentation/
admin-guide/cgroup-v1/memory.rst, section 5.5 'usage_in_bytes').
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from fitcheck.machine import SystemMemory, Unknown
from fitcheck.probe.cgroup import read_cgroup_dirs
from fitcheck.probe.files import plausible_bytes, read_text, under

# cgroup v1 reports "no limit" as PAGE_COUNTER_MAX rounded down to the page size:
# 0x7FFFFFFFFFFFF000 on 4 KiB pages (larger pages give other near-2^63 values).  Anything at or
# above 2^60 bytes (1 EiB) is treated as unlimited.
NO_LIMIT_THRESHOLD = 2**60


@dataclass(frozen=True)
class CgroupMemoryLevel:
    """One cgroup folder's memory figures, in bytes (None when absent or unlimited)."""

    path: str
    limit_bytes: int | None
    usage_bytes: int | None
    inactive_file_bytes: int | None

    @property
    def headroom_bytes(self) -> int | None:
        """What this level still lets the process allocate: limit - working set."""
        if self.limit_bytes is None:
            return None
        working_set = max(0, (self.usage_bytes or 0) - (self.inactive_file_bytes or 0))
        return max(0, self.limit_bytes - working_set)


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo ('MemTotal:  16318392 kB') -> {'MemTotal': bytes, ...}."""
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        words = rest.split()
        if not words:
            continue
        try:
            number = int(words[0])
        except ValueError:
            continue
        values[name.strip()] = number * 1024 if len(words) > 1 and words[1].lower() == "kb" else number
    return values


def parse_limit(text: str | None) -> int | None:
    """A memory limit file's value in bytes; None for 'max', the v1 sentinel, or unreadable."""
    if text is None:
        return None
    word = text.strip()
    if not word or word == "max":
        return None
    try:
        value = int(word)
    except ValueError:
        return None
    return None if value >= NO_LIMIT_THRESHOLD or value < 0 else value


def parse_memory_stat(text: str | None) -> dict[str, int]:
    """memory.stat ('inactive_file 1234') -> {'inactive_file': 1234, ...}."""
    values = {}
    for line in (text or "").splitlines():
        words = line.split()
        if len(words) == 2:
            try:
                values[words[0]] = int(words[1])
            except ValueError:
                continue
    return values


def _optional_int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def read_cgroup_memory_level(folder: str, version: int) -> CgroupMemoryLevel:
    """The figures of one cgroup folder (v2: memory.max/current/stat; v1: memory.*_in_bytes)."""
    join = os.path.join
    if version == 2:
        limit = parse_limit(read_text(join(folder, "memory.max")))
        usage = _optional_int(read_text(join(folder, "memory.current")))
        inactive = parse_memory_stat(read_text(join(folder, "memory.stat"))).get("inactive_file")
    else:
        limit = parse_limit(read_text(join(folder, "memory.limit_in_bytes")))
        usage = _optional_int(read_text(join(folder, "memory.usage_in_bytes")))
        inactive = parse_memory_stat(read_text(join(folder, "memory.stat"))).get("total_inactive_file")
    return CgroupMemoryLevel(folder, limit, usage, inactive)


def read_cgroup_memory(root: str = "/") -> list[CgroupMemoryLevel]:
    """Memory figures for this process's cgroup and each ancestor (empty when no cgroup)."""
    version, folders = read_cgroup_dirs("memory", root)
    return [read_cgroup_memory_level(folder, version) for folder in folders]


def effective_memory(os_available: int | None, levels: list[CgroupMemoryLevel]) -> tuple[int | None, int | None]:
    """(tightest cgroup limit or None, effective available bytes or None).

    Available = min(OS available, min over limited levels of limit - (usage - inactive_file)).
    """
    limits = [level.limit_bytes for level in levels if level.limit_bytes is not None]
    headrooms = [level.headroom_bytes for level in levels if level.headroom_bytes is not None]
    candidates = [value for value in [os_available, *headrooms] if value is not None]
    return (min(limits) if limits else None), (min(candidates) if candidates else None)


def system_memory_from(
    total: int | None,
    available: int | None,
    swap_total: int | None,
    swap_free: int | None,
    levels: list[CgroupMemoryLevel],
    source: str,
) -> SystemMemory:
    """Assemble :class:`SystemMemory` from OS figures and cgroup levels (pure).

    An impossible reading (negative, beyond any machine, available above total, swap free above swap
    total) becomes Unknown(reason) rather than a fact.
    """
    missing = Unknown(f"not in {source}")
    checked_total = plausible_bytes(total, "MemTotal") if total is not None else missing
    checked_available = plausible_bytes(available, "MemAvailable") if available is not None else None
    if isinstance(checked_total, int) and isinstance(checked_available, int) and checked_available > checked_total:
        checked_available = Unknown(f"MemAvailable ({checked_available:,}) above MemTotal ({checked_total:,})")
    limit, effective = effective_memory(checked_available if isinstance(checked_available, int) else None, levels)
    if isinstance(checked_available, Unknown) and effective is None:
        available_value: int | Unknown = checked_available
    else:
        available_value = effective if effective is not None else missing
    swap_t = plausible_bytes(swap_total, "SwapTotal") if swap_total is not None else missing
    swap_f = plausible_bytes(swap_free, "SwapFree") if swap_free is not None else missing
    if isinstance(swap_t, int) and isinstance(swap_f, int) and swap_f > swap_t:
        swap_f = Unknown(f"SwapFree ({swap_f:,}) above SwapTotal ({swap_t:,})")
    return SystemMemory(
        total_bytes=checked_total,
        available_bytes=available_value,
        cgroup_limit_bytes=limit,
        swap_total_bytes=swap_t,
        swap_free_bytes=swap_f,
    )


def read_memory(root: str = "/") -> SystemMemory:
    """This machine's memory: /proc/meminfo on Linux (what psutil reads there, without the
    ~20 ms import), psutil elsewhere; cgroup limits applied on Linux."""
    if sys.platform.startswith("linux"):
        text = read_text(under(root, "/proc/meminfo"))
        if text is not None:
            info = parse_meminfo(text)
            return system_memory_from(
                info.get("MemTotal"), info.get("MemAvailable"), info.get("SwapTotal"), info.get("SwapFree"),
                read_cgroup_memory(root), "/proc/meminfo",
            )
        missing = Unknown("/proc/meminfo not readable")
        return SystemMemory(missing, missing, None, missing, missing)
    try:
        import psutil

        ram, swap = psutil.virtual_memory(), psutil.swap_memory()
    except Exception as exc:  # psutil missing or unsupported platform: facts become Unknown
        reason = f"psutil: {exc}"
        return SystemMemory(Unknown(reason), Unknown(reason), None, Unknown(reason), Unknown(reason))
    return system_memory_from(ram.total, ram.available, swap.total, swap.free, [], "psutil")
