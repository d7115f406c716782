"""Render a Sweep (fitcheck.search.sweep): the text chart `fitcheck plot` prints, and the same chart as SVG.

    Model:    Qwen/Qwen2.5-7B-Instruct (7.62B params, qwen2)
    Machine:  rtx-4090, ...
    Plot:     total needed on GPU0 against context, transformers, batch 1
    <the chart: GiB against context, one curve per precision, the free memory, the largest that fits marked>
    <each curve's need at the asked context and its largest that fits>
    <the request as asked: one stacked bar per device>

GiB (2^30 bytes), labelled GiB; the bytes are the pipeline's (fitcheck.pipeline.check).
"""

from __future__ import annotations

from fitcheck.estimate.verdict import UNKNOWN
from fitcheck.render.charts import clip, gib_value
from fitcheck.render.charts.bar import device_bars
from fitcheck.render.charts.curve import MARK_GLYPH, SERIES_GLYPHS, Mark, Series, line_chart, short_count
from fitcheck.render.charts.svg import line_chart_svg
from fitcheck.search.sweep import Curve, Sweep
from fitcheck.units import format_count, gib

CHART_ROWS = 16
_UNITS = {"context": "tokens", "seq_len": "tokens", "batch": "sequences"}


def x_label(s: Sweep) -> str:
    if s.field == "batch":
        return "micro-batch (sequences per GPU)" if s.result.request.training else "batch (concurrent sequences)"
    return "sequence length (tokens)" if s.field == "seq_len" else "context (tokens)"


def y_cap(s: Sweep, free: float | None) -> float | None:
    """Where the y axis may stop: twice the free memory, or higher to show every curve at the asked value (a
    batch's need grows far past the free memory; what matters is where the curves cross it)."""
    if free is None:
        return None
    asked = [gib_value(p.need_bytes) for c in s.curves for p in c.points if p.x == s.asked_x]
    return max([2 * free] + [1.15 * y for y in asked])


def chart_data(s: Sweep) -> tuple[list[Series], list[Mark], float | None, str]:
    """(series, marks, free GiB or None, the free line's label) of the chart."""
    series = [Series(c.label, tuple((p.x, gib_value(p.need_bytes)) for p in c.points)) for c in s.curves]
    marks = [Mark(c.largest.x, gib_value(c.largest.need_bytes), f"{c.label} {short_count(c.largest.x)}")
             for c in s.curves if c.largest is not None]
    free = s.free
    if free is None or free.free_bytes is None:
        return series, marks, None, "free"
    return series, marks, gib_value(free.free_bytes), "free RAM" if free.device == "cpu" else \
        f"free on {_device(free.device)}"


def plot_lines(s: Sweep, width: int, ascii: bool = False, height: int = CHART_ROWS) -> list[str]:
    """Everything `fitcheck plot` prints, in lines of at most ``width`` columns."""
    series, marks, free, free_label = chart_data(s)
    lines = [part for line in _header(s) for part in _wrapped(line, width)] + [""]
    lines += line_chart(series, x_label(s), "GiB", width, height, ascii=ascii, hline=free, hline_label=free_label,
                        marks=marks, y_max=y_cap(s, free))
    lines += [""] + _table(s, ascii, width)
    limit = _limit_note(s)
    if limit:
        lines.append(limit)
    asked = s.curves[0] if s.curves else None
    if asked is not None:
        where = f"batch {s.asked_x:,}" if s.field == "batch" else f"{s.asked_x:,} tokens"
        lines += ["", f"{asked.label} at {where}, as asked:"]
        lines += device_bars(s.result, width, ascii)
    return [clip(line, width) for line in lines]


def plot_svg(s: Sweep) -> str:
    """The chart as a standalone SVG document."""
    series, marks, free, free_label = chart_data(s)
    title = f"{s.result.model_id} on {s.result.machine.name}: memory against {s.against}"
    return line_chart_svg(series, x_label(s), "GiB", title=title, hline=free, hline_label=free_label, marks=marks,
                          y_max=y_cap(s, free))


def _wrapped(line: str, width: int) -> list[str]:
    """A 'Label:    text' line wrapped to ``width``, the text's later lines under its first."""
    import textwrap

    indent = " " * (len(line) - len(line.split(":", 1)[-1].lstrip())) if ":" in line else ""
    if len(indent) > width // 3:
        indent = ""
    return textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False) or [""]


def _device(name: str) -> str:
    return "RAM" if name == "cpu" else name.upper()


def _header(s: Sweep) -> list[str]:
    from fitcheck.render.check import machine_line

    r = s.result
    spec = r.spec
    arch = f", {spec.architecture}" if spec.architecture else ""
    devices = {p.device for c in s.curves for p in c.points}
    where = f"on {_device(next(iter(devices)))}" if len(devices) == 1 else "on the fullest device at each point"
    plan = r.plan
    fixed = [getattr(plan, "engine", "")] if not plan.training else [f"{plan.mode} fine-tuning"]
    if s.field != "batch":
        fixed.append(f"{'micro-batch' if plan.training else 'batch'} {plan.batch}")
    else:
        length = getattr(plan, "seq_len", 0) if plan.training else plan.context
        fixed.append(f"{'sequence' if plan.training else 'context'} {length:,} tokens")
    return [f"Model:    {r.model_id} ({format_count(spec.total_params)} params{arch})",
            f"Machine:  {machine_line(r.machine)}",
            f"Plot:     total needed {where} against {x_label(s).split(' (')[0]}, " + ", ".join(f for f in fixed if f)]


def _table(s: Sweep, ascii: bool, width: int) -> list[str]:
    """Each curve's need at the asked value and its largest that fits (shorter words where the long ones do not
    fit in ``width``)."""
    glyphs = SERIES_GLYPHS[ascii]
    names = [f"{glyphs[i % len(glyphs)]} {c.label}{' (as asked)' if c.asked else ''}" for i, c in enumerate(s.curves)]
    pad = max((len(n) for n in names), default=0)
    at = [_need_at(c, s.asked_x) for c in s.curves]
    head = f"at batch {s.asked_x:,}" if s.field == "batch" else f"at {s.asked_x:,}"
    at_w = max([len(a) for a in at] + [len(head)])
    for short in (False, True):
        kept = "" if short else f" ({s.result.headroom:.0%} headroom kept)"
        lines = [f"{'':{pad}}  {head:>{at_w}}  {MARK_GLYPH[ascii]} largest that fits{kept}".rstrip()]
        lines += [f"{name:{pad}}  {need:>{at_w}}  {_largest(c, '' if short else _UNITS[s.field])}"
                  for name, need, c in zip(names, at, s.curves, strict=True)]
        if max(len(line) for line in lines) <= width:
            break
    return lines


def _need_at(c: Curve, x: int) -> str:
    point = next((p for p in c.points if p.x == x), None)
    return "-" if point is None else f"{gib(point.need_bytes)} GiB"


def _largest(c: Curve, unit: str) -> str:
    if c.largest is not None:
        return f"{c.largest.x:,}{' ' + unit if unit else ''}, {gib(c.largest.need_bytes)} GiB"
    if any(p.status == UNKNOWN for p in c.points):
        return "unknown (free memory unknown)"
    return "nothing fits"


def _limit_note(s: Sweep) -> str:
    """Say where the search stopped when a curve's largest context is the model's maximum."""
    maximum = s.result.spec.max_context
    if s.field == "batch" or maximum is None:
        return ""
    if any(c.largest is not None and c.largest.x == maximum for c in s.curves):
        return f"The largest {'sequence' if s.field == 'seq_len' else 'context'} is searched up to the model's " \
               f"maximum, {maximum:,} tokens."
    return ""
