"""Formatting of single machine facts, shared by the machine and profile renderers.

Bytes are shown in GiB (labelled GiB); bandwidth in decimal GB/s or TB/s, as vendors quote it;
an Unknown fact as "unknown (reason)".
"""

from __future__ import annotations

from fitcheck.machine import GPU, Unknown
from fitcheck.units import GiB


def show(value: object, fmt=str) -> str:
    """``fmt(value)``, or 'unknown (reason)' for an Unknown."""
    if isinstance(value, Unknown):
        return str(value)
    if value is None:
        return "none"
    return fmt(value)


def gib_text(n_bytes: object, digits: int = 1) -> str:
    """'24 GiB', '79.6 GiB', '10.7 GiB' (a trailing .0 dropped); Unknown -> 'unknown (reason)'."""

    def fmt(n: int) -> str:
        text = f"{n / GiB:.{digits}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return f"{text} GiB"

    return show(n_bytes, fmt)


def bandwidth_text(bytes_per_s: object) -> str:
    """'1,008 GB/s', '3,350 GB/s', '51.2 GB/s' (decimal units, as vendors quote bandwidth)."""

    def fmt(n: int) -> str:
        gbps = n / 10**9
        return f"{gbps:,.0f} GB/s" if gbps >= 100 else f"{gbps:.3g} GB/s"

    return show(bytes_per_s, fmt)


def tflops_text(tflops: object) -> str:
    return show(tflops, lambda t: f"{t:g} TFLOP/s")


def short_gpu_name(name: str | Unknown) -> str:
    """'RTX 4090' for 'NVIDIA GeForce RTX 4090': the words a table column has room for."""
    if isinstance(name, Unknown):
        return "GPU (name unknown)"
    for prefix in ("NVIDIA GeForce ", "NVIDIA ", "AMD Instinct ", "AMD "):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def gpu_group_text(gpus: tuple[GPU, ...]) -> str:
    """'2× RTX 3090 24 GiB', 'M3 Max (40-core GPU) 48 GiB unified', or 'none'."""
    if not gpus:
        return "none"
    groups: list[tuple[str, int]] = []  # (label, count), consecutive equal GPUs merged
    for gpu in gpus:
        label = f"{short_gpu_name(gpu.name)} {gib_text(gpu.memory_total_bytes)}"
        if gpu.unified_memory:
            label += " unified"
        if groups and groups[-1][0] == label:
            groups[-1] = (label, groups[-1][1] + 1)
        else:
            groups.append((label, 1))
    return " + ".join(label if count == 1 else f"{count}× {label}" for label, count in groups)


def price_text(price) -> str:
    """'$0.85/h' or '' when there is no price."""
    return f"${price.usd_per_hour:,.2f}/h" if price is not None else ""
