"""A text line chart: one glyph per series, axes with tick labels, a horizontal line (free memory) and marked points.

    GiB
    30 ┤
       │
    20 ┤──────────────────────────────────────────────●●●◆●●●●●●●●●●
       │●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●●
    10 ┤
       │■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■■
     0 ┤
       └┬─────────┬─────────┬─────────┬────────┬─────────┬─────────┬
        512       1k        2k        4k       8k       16k      32k
                                                    context (tokens)
    ● bf16  ■ q4_k_m  ◆ largest that fits  ─ free on GPU0 20.00 GiB

The x axis is log2 by default (contexts and batches double), or linear; the y axis is linear from 0.  Each series
is drawn at every column between its first and last point (straight between points in the axis' scale), the
first series on top; marks on top of everything.  ASCII form: ``ascii=True``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fitcheck.render.charts import clip

SERIES_GLYPHS = {False: ("●", "■", "▲", "▼", "○", "□", "△", "▽"), True: ("*", "o", "+", "x", "%", "=", "~", "&")}
MARK_GLYPH = {False: "◆", True: "@"}
HLINE = {False: "─", True: "-"}
AXIS = {False: {"v": "│", "tick": "┤", "corner": "└", "h": "─", "xtick": "┬"},
        True: {"v": "|", "tick": "+", "corner": "+", "h": "-", "xtick": "+"}}


@dataclass(frozen=True)
class Series:
    """One curve: a name for the legend and its (x, y) points (x > 0 on a log axis)."""

    name: str
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Mark:
    """A point drawn on top (the largest that fits), with a label (the SVG form shows it)."""

    x: float
    y: float
    label: str = ""


def short_count(x: float) -> str:
    """512, 1k, 32k, 128k, 1M: a count of tokens or sequences as fitcheck's options take it (k = 1024)."""
    if x >= 1024**2 and x % 1024**2 == 0:
        return f"{int(x) // 1024**2}M"
    if x >= 1024 and x % 1024 == 0:
        return f"{int(x) // 1024}k"
    return f"{x:g}"


def nice_step(span: float, ticks: int) -> float:
    """A step of 1, 2, 2.5 or 5 × 10^k that cuts ``span`` into about ``ticks`` parts."""
    raw = span / max(ticks, 1)
    if raw <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def y_axis(values: Sequence[float], rows: int) -> tuple[float, float, int]:
    """(top, step, rows used) of a linear y axis from 0 that holds ``values``: the lowest top of a 1-2-2.5-5 step
    with 2 to rows/2 ticks, and the rows trimmed so that every tick falls the same number of rows apart."""
    high = max((v for v in values if math.isfinite(v)), default=0.0)
    if high <= 0:
        return 1.0, 0.5, rows - (rows - 1) % 2
    best: tuple[float, float, int] | None = None
    for parts in range(2, max(rows // 2, 2) + 1):
        step = nice_step(high, parts)
        n = math.ceil(high / step - 1e-9)
        top = step * n
        if n < 1 or n > max((rows - 1) // 2, 1):
            continue
        if best is None or top < best[0] - 1e-9 or (abs(top - best[0]) < 1e-9 and step < best[1]):
            best = (top, step, n)
    top, step, n = best if best is not None else (high, high, 1)
    return top, step, (rows - 1) // n * n + 1


class Scale:
    """A data value to a position in [0, 1] along an axis (log2 or linear) and back."""

    def __init__(self, values: Sequence[float], log: bool):
        self.log = log
        ts = [self.t(v) for v in values if not log or v > 0]
        lo, hi = (min(ts), max(ts)) if ts else (0.0, 1.0)
        if hi - lo < 1e-12:
            lo, hi = lo - 1, hi + 1
        self.lo, self.hi = lo, hi

    def t(self, v: float) -> float:
        return math.log2(v) if self.log else v

    def frac(self, v: float) -> float:
        return (self.t(v) - self.lo) / (self.hi - self.lo)

    def value(self, frac: float) -> float:
        t = self.lo + frac * (self.hi - self.lo)
        return 2**t if self.log else t

    def ticks(self) -> list[float]:
        """Powers of two inside the axis (log), else multiples of a nice step."""
        if self.log:
            return [2.0**e for e in range(math.ceil(self.lo - 1e-9), math.floor(self.hi + 1e-9) + 1)]
        step = nice_step(self.hi - self.lo, 6)
        first = math.ceil(self.lo / step - 1e-9)
        return [k * step for k in range(first, math.floor(self.hi / step + 1e-9) + 1)]


def line_chart(series: Sequence[Series], x_label: str, y_label: str, width: int, height: int, ascii: bool = False,
               hline: float | None = None, hline_label: str = "free", marks: Sequence[Mark] = (), *,
               x_log: bool = True, x_format: Callable[[float], str] | None = None,
               marks_label: str = "largest that fits", y_max: float | None = None) -> list[str]:
    """The chart in at most ``width`` columns: ``y_label`` (the unit, GiB) on top, ``height`` rows of plot, the x
    axis with its tick labels, ``x_label`` and a legend (each series' glyph, the marks, the ``hline`` as
    '─ {hline_label} {hline:.2f} {y_label}').  ``y_max``: the y axis ends there (at its next tick) even when points
    are higher; the curves leave the chart at the top, and the legend says so."""
    fmt = x_format or (short_count if x_log else (lambda v: f"{v:g}"))
    xs = [x for s in series for x, _ in s.points] + [m.x for m in marks]
    ys = y_values(series, marks, hline, y_max)
    scale = Scale(xs, x_log)
    top, step, rows = y_axis(ys, max(height, 3))
    labels = _y_labels(top, step, rows)
    lw = max((len(t) for t in labels.values()), default=1)
    cols = max(width - lw - 2, 2)
    grid = [[" "] * cols for _ in range(rows)]

    def col(x: float) -> int:
        return round(scale.frac(x) * (cols - 1))

    def row(y: float) -> int | None:
        """The row of ``y`` (None above the top: not drawn)."""
        at = round((top - y) / top * (rows - 1))
        return None if at < 0 else min(at, rows - 1)

    def row_in(y: float) -> int:
        return max(row(y) or 0, 0)

    if hline is not None:
        grid[row_in(hline)] = [HLINE[ascii]] * cols
    glyphs = SERIES_GLYPHS[ascii]
    for i in reversed(range(len(series))):
        _draw(grid, series[i], glyphs[i % len(glyphs)], scale, col, row, x_log)
    for m in marks:
        if not x_log or m.x > 0:
            grid[row_in(m.y)][col(m.x)] = MARK_GLYPH[ascii]
    axis = AXIS[ascii]
    lines = [y_label]
    for r in range(rows):
        text = labels.get(r, "")
        edge = axis["tick"] if text else axis["v"]
        lines.append(f"{text:>{lw}} {edge}{''.join(grid[r])}")
    ticks = _x_ticks([v for v in scale.ticks() if not x_log or v > 0], col, fmt, cols)
    lines += _x_axis(ticks, lw, cols, axis)
    lines.append(x_label.rjust(lw + 2 + cols) if len(x_label) <= lw + 2 + cols else x_label)
    legend = [f"{glyphs[i % len(glyphs)]} {s.name}" for i, s in enumerate(series)]
    if marks:
        legend.append(f"{MARK_GLYPH[ascii]} {marks_label}")
    if hline is not None:
        legend.append(f"{HLINE[ascii]} {hline_label} {hline:.2f} {y_label}".rstrip())
    if any(y > top for s in series for _, y in s.points):
        legend.append(f"(curves leave the chart above {top:g} {y_label})".replace(" )", ")"))
    lines += _wrapped(legend, width)
    return [clip(line.rstrip(), width) for line in lines]


def y_values(series: Sequence[Series], marks: Sequence[Mark], hline: float | None, y_max: float | None) -> list[float]:
    """The values the y axis must hold: every point, mark and the line, the points capped at ``y_max``."""
    points = [y for s in series for _, y in s.points]
    if y_max is not None:
        points = [min(y, y_max) for y in points]
    return points + [m.y for m in marks] + ([hline] if hline is not None else [])


def _y_labels(top: float, step: float, rows: int) -> dict[int, str]:
    """Row -> tick label, from 0 up to ``top`` every ``step`` (a row keeps its first label)."""
    decimals = next((d for d in range(7) if abs(round(step, d) - step) < 1e-9 * max(step, 1)), 6)
    out: dict[int, str] = {}
    for k in range(round(top / step) + 1):
        value = k * step
        r = round((top - value) / top * (rows - 1))
        out.setdefault(r, f"{value:.{decimals}f}")
    return out


def _draw(grid: list[list[str]], series: Series, glyph: str, scale: Scale, col, row, x_log: bool) -> None:
    """``series`` at every column between its first and last point, each column joined to the last one."""
    points = sorted((x, y) for x, y in series.points if (not x_log or x > 0) and math.isfinite(y))
    if not points:
        return
    cols = len(grid[0])
    first, last = col(points[0][0]), col(points[-1][0])
    previous: int | None = None
    for c in range(first, last + 1):
        x = scale.value(c / (cols - 1)) if cols > 1 else points[0][0]
        r = row(_interpolate(points, scale, x))
        if r is None:  # above the chart
            previous = None
            continue
        if previous is not None:
            for between in range(min(previous, r) + 1, max(previous, r)):
                grid[between][c] = glyph
        grid[r][c] = glyph
        previous = r
    for x, y in points:  # the points themselves, where a column's value rounds elsewhere
        r = row(y)
        if r is not None:
            grid[r][col(x)] = glyph


def _interpolate(points: list[tuple[float, float]], scale: Scale, x: float) -> float:
    """y at ``x``: straight between the two points around it in the axis' scale."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x <= x1:
            t0, t1 = scale.t(x0), scale.t(x1)
            return y0 if t1 == t0 else y0 + (y1 - y0) * (scale.t(x) - t0) / (t1 - t0)
    return points[-1][1]


def _x_ticks(values: list[float], col, fmt: Callable[[float], str], cols: int) -> list[tuple[int, str, int]]:
    """(column, label, label start) of the x ticks: every n-th candidate, the smallest n whose labels do not touch."""
    for stride in range(1, max(len(values), 1) + 1):
        chosen = []
        end = -2
        for v in values[::stride]:
            label, c = fmt(v), col(v)
            start = min(max(c - (len(label) - 1) // 2, 0), cols - len(label))
            if start < 0 or start <= end + 1:
                break
            chosen.append((c, label, start))
            end = start + len(label) - 1
        else:
            return chosen
    return []


def _x_axis(ticks: list[tuple[int, str, int]], lw: int, cols: int, axis: dict[str, str]) -> list[str]:
    """The axis line with a tick at each labelled column, and the labels under it."""
    line = [axis["h"]] * cols
    text = [" "] * cols
    for c, label, start in ticks:
        line[c] = axis["xtick"]
        text[start:start + len(label)] = list(label)
    return [" " * (lw + 1) + axis["corner"] + "".join(line), " " * (lw + 2) + "".join(text)]


def _wrapped(entries: list[str], width: int) -> list[str]:
    lines: list[str] = []
    line = ""
    for entry in entries:
        if line and len(line) + 2 + len(entry) > width:
            lines.append(line)
            line = ""
        line += ("  " if line else "") + entry
    if line:
        lines.append(line)
    return lines
