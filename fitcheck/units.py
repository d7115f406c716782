"""Byte units, parsing of sizes and counts people type, and formatting for renderers.

Bytes are integers everywhere in fitcheck; only renderers format them, and GiB is labelled GiB.
"""

from __future__ import annotations

import re

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4
KB = 1000
MB = 1000**2
GB = 1000**3
TB = 1000**4

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": KiB, "kb": KB, "kib": KiB,
    "m": MiB, "mb": MB, "mib": MiB,
    "g": GiB, "gb": GB, "gib": GiB,
    "t": TiB, "tb": TB, "tib": TiB,
}

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")
# The largest size and count fitcheck parses: far beyond any machine or model, small enough that the
# arithmetic stays exact in a float (a 400-digit value is bad input, not an OverflowError).
MAX_SIZE_BYTES = 2**60        # 1 EiB
MAX_COUNT = 10**15            # a quadrillion parameters
_MAX_NUMBER_CHARS = 32


def parse_size(text: str) -> int:
    """Parse '24GiB', '40GB', '512 MiB', '1.5g' (binary) or '1024' (bytes) into bytes.

    'GB' is decimal (10^9) and 'GiB'/'G' binary (2^30), as the units say.
    """
    m = _SIZE_RE.match(str(text))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size: {_short(text)} (try 24GiB, 40GB or 512MiB)")
    value = _bounded_float(m.group(1), text) * _SIZE_UNITS[m.group(2).lower()]
    if value > MAX_SIZE_BYTES:
        raise ValueError(f"size out of range: {_short(text)} (at most 1 EiB)")
    return int(value)


_COUNT_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}
_COUNT_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmMbBtT]?)\s*$")


def parse_count(text: str) -> int:
    """Parse a parameter count such as '7b', '0.5B', '135m' or '7000000000'."""
    m = _COUNT_RE.match(str(text))
    if not m:
        raise ValueError(f"not a count: {_short(text)} (try 7b, 1.5b or 135m)")
    value = _bounded_float(m.group(1), text) * _COUNT_UNITS[m.group(2).lower()]
    if value > MAX_COUNT:
        raise ValueError(f"count out of range: {_short(text)} (at most 1,000,000b)")
    return int(round(value))


def _short(text: object) -> str:
    shown = repr(str(text))
    return shown if len(shown) <= 40 else shown[:36] + "…'"


def _bounded_float(number: str, text: object) -> float:
    """The number part of a size or count, refused when too long to be a real value (before float())."""
    if len(number.lstrip("0")) > _MAX_NUMBER_CHARS:
        raise ValueError(f"number out of range: {_short(text)}")
    return float(number)


def gib(n_bytes: int | float, digits: int = 2) -> str:
    """'14.38': bytes in GiB (2^30), the number only (a table whose header says GiB)."""
    return f"{n_bytes / GiB:.{digits}f}"


def format_gib(n_bytes: int | float | None, digits: int = 2) -> str:
    """'14.38 GiB'; None -> 'unknown'."""
    if n_bytes is None:
        return "unknown"
    return f"{gib(n_bytes, digits)} GiB"


def format_bytes(n_bytes: int | float | None) -> str:
    """Human size with binary units: '512 MiB', '14.4 GiB'; None -> 'unknown'."""
    if n_bytes is None:
        return "unknown"
    n = float(n_bytes)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def format_count(n: int | float | None) -> str:
    """'7.62B', '494M', '135M'; None -> 'unknown'."""
    if n is None:
        return "unknown"
    for unit, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if abs(n) >= size:
            value = n / size
            return f"{value:.2f}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return str(int(n))
