"""A device's memory as one horizontal stacked bar, against what is free on it.

    GPU0 [█████████████████████████│███▓▓▒▒▒▒░░] 18.05 / 12.00 GiB, over by 6.05
          █ weights 14.19  ▓ kv_cache 0.88  ▒ activations 2.17
          ░ overhead 0.82 GiB

The bar spans the device's free memory; when the need is larger, it spans the need and a ``│`` (ASCII ``|``)
stands where the free memory ends, so what overflows is the part right of it.  Each segment has its own fill
character, and the legend lists every segment with its GiB, also those too small for one cell of the bar.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fitcheck.render.charts import clip
from fitcheck.units import gib

if TYPE_CHECKING:
    from fitcheck.pipeline import CheckResult

UNICODE_FILLS = ("█", "▓", "▒", "░", "▞", "▚", "▖", "▗", "▙", "▟", "▛", "▜")
ASCII_FILLS = ("#", "=", "+", "%", "*", "o", "x", "~", "@", "&", ":", ";")
EMPTY = {False: "·", True: "."}     # free memory the need leaves
MARKER = {False: "│", True: "|"}    # where the free memory ends, when the need is past it
MIN_CELLS = 10                      # the shortest bar worth drawing before the numbers beside it are shortened


@dataclass(frozen=True)
class DeviceBar:
    """One bar: a label (GPU0, GPU0-7, RAM), its segments (name, bytes) and what is free there (None: unknown)."""

    label: str
    segments: tuple[tuple[str, int], ...]
    capacity: int | None


def fills_for(names: Sequence[str], ascii: bool = False) -> dict[str, str]:
    """A fill character for each distinct name, in order (repeating only past the last fill)."""
    chars = ASCII_FILLS if ascii else UNICODE_FILLS
    out: dict[str, str] = {}
    for name in names:
        if name not in out:
            out[name] = chars[len(out) % len(chars)]
    return out


def merged(segments: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """Segments of the same name summed (in the order each first appears); those of no bytes dropped."""
    sums: dict[str, int] = {}
    for name, size in segments:
        sums[name] = sums.get(name, 0) + int(size)
    return [(name, size) for name, size in sums.items() if size > 0]


def stacked_bar(segments: Sequence[tuple[str, int]], capacity: int | None, width: int, ascii: bool = False,
                *, label: str = "", fills: Mapping[str, str] | None = None) -> list[str]:
    """The bar of ``segments`` (name, bytes) against ``capacity`` (bytes free; None: unknown), then its legend.

    ``width`` is every column there is: no line is longer.  ``label`` goes before the bar (the labels of several
    bars should be padded to one length by the caller); ``fills`` maps names to fill characters (default: in
    order, :data:`UNICODE_FILLS` or :data:`ASCII_FILLS`)."""
    parts = merged(segments)
    fill = dict(fills) if fills is not None else {}
    for name, _ in parts:
        if name not in fill:
            free = [c for c in (ASCII_FILLS if ascii else UNICODE_FILLS) if c not in fill.values()]
            fill[name] = free[0] if free else fills_for([n for n, _ in parts], ascii)[name]
    need = sum(size for _, size in parts)
    head = f"{label} [" if label else "["
    suffix = _suffix(need, capacity, width - len(head) - 1 - MIN_CELLS)
    cells = max(width - len(head) - 1 - len(suffix), 1)
    bar = head + _cells(parts, need, capacity, cells, fill, ascii) + "]" + suffix
    indent = " " * (len(head) if len(head) <= max(width // 4, 2) else 2)
    return [clip(bar, width)] + _legend([(fill[n], n, size) for n, size in parts], width, indent)


def _suffix(need: int, capacity: int | None, room: int) -> str:
    """The numbers after the bar, the longest form that leaves the bar ``MIN_CELLS`` cells (``room``: what is left)."""
    if capacity is None:
        forms = [f" {gib(need)} GiB, free unknown", f" {gib(need)} GiB ?", f" {gib(need)}"]
    elif need > capacity:
        forms = [f" {gib(need)} / {gib(capacity)} GiB, over by {gib(need - capacity)}",
                 f" {gib(need)} / {gib(capacity)} GiB", f" {gib(need)}>{gib(capacity)}"]
    else:
        forms = [f" {gib(need)} / {gib(capacity)} GiB", f" {gib(need)}/{gib(capacity)}"]
    return next((f for f in forms if len(f) <= room), forms[-1] if len(forms[-1]) <= room else "")


def _cells(parts: list[tuple[str, int]], need: int, capacity: int | None, cells: int, fill: Mapping[str, str],
           ascii: bool) -> str:
    """``cells`` characters: each segment's share of the scale (the free memory, or the need when larger)."""
    scale = max(need, capacity or 0)
    if scale <= 0:
        return EMPTY[ascii] * cells
    out: list[str] = []
    done = 0
    for name, size in parts:
        done += size
        end = (2 * done * cells + scale) // (2 * scale)   # the segment ends at the cell nearest its bytes
        out += [fill[name]] * (end - len(out))
    out += [EMPTY[ascii]] * (cells - len(out))
    if capacity is not None and need > capacity:
        edge = min((2 * capacity * cells + scale) // (2 * scale), cells - 1)
        out[edge] = MARKER[ascii]
    return "".join(out)


def _legend(items: list[tuple[str, str, int]], width: int, indent: str) -> list[str]:
    """'█ weights 14.19  ▓ kv_cache 0.44  ... GiB', wrapped to ``width``: every segment named, also one too small
    for a cell of the bar (under 0.01 GiB: '<0.01')."""
    lines: list[str] = []
    line = indent
    for i, (char, name, size) in enumerate(items):
        entry = f"{char} {name} {_amount(size)}" + (" GiB" if i == len(items) - 1 else "")
        if line.strip() and len(line) + 2 + len(entry) > width:
            lines.append(line)
            line = indent
        line += ("  " if line.strip() else "") + entry
    if line.strip():
        lines.append(line)
    return [clip(x, width) for x in lines]


def _amount(size: int) -> str:
    """GiB with 2 decimals; '<0.01' for a segment that would read 0.00."""
    shown = gib(size)
    return "<0.01" if size > 0 and shown == "0.00" else shown


# ---- a check result: one bar per device -------------------------------------------------------------
def device_bar_data(result: CheckResult) -> list[DeviceBar]:
    """A bar for each device of ``result`` that needs memory: its components against what is free there.
    Consecutive GPUs with the same components and the same free memory are one bar, labelled GPU0-7."""
    bars: list[DeviceBar] = []
    keys: list[tuple] = []
    first = ""
    for need, judged in zip(result.estimate.devices, result.verdict.devices, strict=False):
        segments = tuple(merged([(c.name, c.bytes) for c in need.components]))
        if not segments:
            continue
        key = (need.kind, segments, judged.free_bytes)
        if need.kind == "gpu" and keys and keys[-1] == key:
            bars[-1] = DeviceBar(f"{first}-{need.device.upper().removeprefix('GPU')}", segments, judged.free_bytes)
            continue
        first = need.device.upper() if need.kind == "gpu" else "RAM per node" if result.plan.nodes > 1 else "RAM"
        bars.append(DeviceBar(first, segments, judged.free_bytes))
        keys.append(key)
    return bars


def device_bars(result: CheckResult, width: int, ascii: bool = False) -> list[str]:
    """One :func:`stacked_bar` per device of a check result (labels padded to one length, one fill per component
    name across all of them)."""
    bars = device_bar_data(result)
    if not bars:
        return []
    pad = max(len(b.label) for b in bars)
    # one fill per name, in the order of the fullest breakdown (a GPU holding only the overhead does not take █)
    fill = fills_for([name for b in sorted(bars, key=lambda b: -len(b.segments)) for name, _ in b.segments], ascii)
    lines: list[str] = []
    for b in bars:
        lines += stacked_bar(b.segments, b.capacity, width, ascii, label=b.label.ljust(pad), fills=fill)
    return lines
