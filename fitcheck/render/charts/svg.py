"""The charts as standalone SVG documents: the memory-per-device bars and the line chart.

Each function returns one complete document (an XML declaration and one ``<svg>`` element): no external resources
(no fonts, stylesheets, scripts or images), every text escaped, and the same input gives the same bytes (numbers
written with fixed decimals, elements in input order, no dates or random ids).  The elements a reader may want to
find carry a class (``series``, ``point``, ``mark``, ``hline``, ``xtick``, ``ytick``, ``segment``, ``capacity``)
and their data values (``data-x``, ``data-y``, ``data-value``, ``data-bytes``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape, quoteattr

from fitcheck.render.charts.bar import DeviceBar, device_bar_data, merged
from fitcheck.render.charts.curve import Mark, Scale, Series, short_count, y_axis, y_values
from fitcheck.units import gib

if TYPE_CHECKING:
    from fitcheck.pipeline import CheckResult

# Colour-blind-safe palette (Okabe & Ito 2008), series and segments in order.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
FREE_COLOUR = "#C00000"
AXIS_COLOUR = "#444444"
GRID_COLOUR = "#DDDDDD"
FONT = 12
MARK_SWATCH = "mark"  # a legend entry drawn as the marks are (a ring), not a colour swatch
CHAR_W = 7.0      # an estimate of one character's width at FONT px, for laying out legends (deterministic)


def _n(v: float) -> str:
    """A coordinate: two decimals, no '-0.00'."""
    text = f"{v:.2f}"
    return "0.00" if text == "-0.00" else text


def _attrs(**attrs: object) -> str:
    """XML attributes, in the order given (data_x -> data-x), each value quoted and escaped."""
    return "".join(f" {k.rstrip('_').replace('_', '-')}={quoteattr(str(v))}" for k, v in attrs.items())


def _el(tag: str, text: str | None = None, **attrs: object) -> str:
    if text is None:
        return f"<{tag}{_attrs(**attrs)}/>"
    return f"<{tag}{_attrs(**attrs)}>{escape(text)}</{tag}>"


def _document(width: float, height: float, title: str, body: list[str]) -> str:
    head = ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg"{_attrs(width=_n(width), height=_n(height))}'
            f'{_attrs(viewBox=f"0 0 {_n(width)} {_n(height)}", font_family="sans-serif", font_size=FONT)}>')
    parts = [head, _el("title", title or "fitcheck chart"),
             _el("rect", x=0, y=0, width=_n(width), height=_n(height), fill="#FFFFFF")]
    if title:
        parts.append(_el("text", title, x=_n(width / 2), y=_n(FONT + 8), text_anchor="middle", font_weight="bold"))
    return "\n".join(parts + body + ["</svg>"]) + "\n"


def _legend(entries: list[tuple[str, str]], left: float, top: float, right: float) -> tuple[list[str], float]:
    """(elements, bottom) of a legend of (colour, text) swatches, wrapped between ``left`` and ``right``."""
    out: list[str] = []
    x, y = left, top
    for colour, text in entries:
        need = 18 + CHAR_W * len(text) + 14
        if x > left and x + need > right:
            x, y = left, y + FONT + 8
        if colour == MARK_SWATCH:
            out.append(_el("circle", cx=_n(x + 6), cy=_n(y - FONT / 2 + 2), r=5, fill="none", stroke=AXIS_COLOUR,
                           stroke_width=2))
        else:
            out.append(_el("rect", x=_n(x), y=_n(y - FONT + 2), width=12, height=FONT - 2, fill=colour))
        out.append(_el("text", text, x=_n(x + 18), y=_n(y)))
        x += need
    return out, y + 8


# ---- the line chart ---------------------------------------------------------------------------------
def line_chart_svg(series: Sequence[Series], x_label: str, y_label: str, *, title: str = "",
                   hline: float | None = None, hline_label: str = "free", marks: Sequence[Mark] = (),
                   x_log: bool = True, x_format: Callable[[float], str] | None = None,
                   marks_label: str = "largest that fits", y_max: float | None = None, width: int = 720,
                   height: int = 420) -> str:
    """:func:`fitcheck.render.charts.curve.line_chart` as an SVG document of ``width`` × ``height`` pixels (the
    legend may add rows below).  Each series is a ``polyline`` with a ``circle`` at every point, each mark a
    ``circle class="mark"`` with its ``label`` beside it; the ``hline`` a dashed line labelled '{hline_label}
    {hline:.2f} {y_label}'; ``y_max`` ends the y axis (at its next tick) below higher points, which are cut off."""
    fmt = x_format or (short_count if x_log else (lambda v: f"{v:g}"))
    left, right, top = 64.0, width - 24.0, 40.0 if title else 20.0
    bottom = height - 56.0
    xs = [x for s in series for x, _ in s.points] + [m.x for m in marks]
    scale = Scale([x for x in xs if not x_log or x > 0], x_log)
    y_top, step, _ = y_axis(y_values(series, marks, hline, y_max), 16)

    def px(x: float) -> float:
        return left + scale.frac(x) * (right - left)

    def py(y: float) -> float:
        return bottom - y / y_top * (bottom - top)

    body = [_el("text", y_label, x=_n(left - 8), y=_n(top - 8), text_anchor="end")]
    for k in range(round(y_top / step) + 1):
        v, y = k * step, py(k * step)
        body.append(_el("line", class_="ytick", data_value=f"{v:g}", x1=_n(left), y1=_n(y), x2=_n(right), y2=_n(y),
                        stroke=GRID_COLOUR))
        body.append(_el("text", f"{v:g}", x=_n(left - 6), y=_n(y + 4), text_anchor="end"))
    for v in scale.ticks():
        if x_log and v <= 0:
            continue
        x = px(v)
        body.append(_el("line", class_="xtick", data_value=f"{v:g}", x1=_n(x), y1=_n(bottom), x2=_n(x),
                        y2=_n(bottom + 5), stroke=AXIS_COLOUR))
        body.append(_el("text", fmt(v), x=_n(x), y=_n(bottom + 18), text_anchor="middle"))
    body.append(_el("path", d=f"M{_n(left)} {_n(top)} V{_n(bottom)} H{_n(right)}", fill="none", stroke=AXIS_COLOUR))
    body.append(_el("text", x_label, x=_n(right), y=_n(bottom + 36), text_anchor="end"))
    if hline is not None:
        y = py(hline)
        text = f"{hline_label} {hline:.2f} {y_label}".strip()
        body.append(_el("line", class_="hline", data_y=f"{hline:.4f}", x1=_n(left), y1=_n(y), x2=_n(right),
                        y2=_n(y), stroke=FREE_COLOUR, stroke_dasharray="6 4"))
        body.append(_el("text", text, x=_n(right), y=_n(y - 4), text_anchor="end", fill=FREE_COLOUR))
    area = _el("rect", x=_n(left - 6), y=_n(top - 6), width=_n(right - left + 12), height=_n(bottom - top + 12))
    body.append(f"<clipPath{_attrs(id='plot-area')}>{area}</clipPath>")
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        points = sorted((x, y) for x, y in s.points if not x_log or x > 0)
        body.append(f"<g{_attrs(class_='series', data_series=s.name, clip_path='url(#plot-area)')}>")
        if points:
            body.append(_el("polyline", points=" ".join(f"{_n(px(x))},{_n(py(y))}" for x, y in points),
                            fill="none", stroke=colour, stroke_width=2))
        for x, y in points:
            body.append(_el("circle", class_="point", data_x=f"{x:g}", data_y=f"{y:.4f}", cx=_n(px(x)),
                            cy=_n(py(y)), r=2.5, fill=colour))
        body.append("</g>")
    placed: list[tuple[float, float, float, float]] = []
    for m in marks:
        if x_log and m.x <= 0:
            continue
        cx, cy = px(m.x), py(m.y)
        tip = _el("title", f"{marks_label}: {m.label}" if m.label else marks_label)
        circle = _attrs(class_="mark", data_x=f"{m.x:g}", data_y=f"{m.y:.4f}", cx=_n(cx), cy=_n(cy), r=5,
                        fill="none", stroke=AXIS_COLOUR, stroke_width=2)
        body.append(f"<g{_attrs(class_='mark')}>")
        body.append(f"<circle{circle}>{tip}</circle>")
        if m.label:
            x, y, anchor = _label_place(cx, cy, CHAR_W * len(m.label), placed)
            body.append(_el("text", m.label, x=_n(x), y=_n(y), text_anchor=anchor))
        body.append("</g>")
    entries = [(PALETTE[i % len(PALETTE)], s.name) for i, s in enumerate(series)]
    if marks:
        entries.append((MARK_SWATCH, marks_label))
    legend, end = _legend(entries, left, bottom + 36 + FONT + 8, right)
    return _document(width, max(float(height), end), title, body + legend)


def _label_place(cx: float, cy: float, w: float, placed: list[tuple[float, float, float, float]]
                 ) -> tuple[float, float, str]:
    """(x, y, text-anchor) of a mark's label: above left of it, else the first of below right, above right, below
    left whose box misses the labels already placed (added to ``placed``); above left when all collide."""
    options = [(cx - 8, cy - 8, "end"), (cx + 8, cy + 18, "start"), (cx + 8, cy - 8, "start"), (cx - 8, cy + 18, "end")]
    for x, y, anchor in options:
        box = (x - w if anchor == "end" else x, y - FONT, x if anchor == "end" else x + w, y + 2)
        if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
            placed.append(box)
            return x, y, anchor
    return options[0]


# ---- the bars -----------------------------------------------------------------------------------------
def bars_svg(bars: Sequence[DeviceBar], *, title: str = "", width: int = 720) -> str:
    """:func:`fitcheck.render.charts.bar.stacked_bar` for each of ``bars`` as one SVG document: a stacked bar per
    device against its free memory (scaled to the need when that is larger, the free memory then marked by a
    ``line class="capacity"``), each segment a ``rect class="segment"`` with its name and bytes, a legend under
    each bar."""
    names = list(dict.fromkeys(name for b in bars for name, _ in merged(b.segments)))
    colour = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}
    label_w = max((CHAR_W * len(b.label) for b in bars), default=0) + 16
    left, right = 16 + label_w, width - 150.0 - 8
    y = 44.0 if title else 20.0
    body: list[str] = []
    for b in bars:
        parts = merged(b.segments)
        need = sum(size for _, size in parts)
        scale = max(need, b.capacity or 0) or 1
        body.append(f"<g{_attrs(class_='device', data_device=b.label)}>")
        body.append(_el("text", b.label, x=_n(16), y=_n(y + 15)))
        body.append(_el("rect", class_="free", x=_n(left), y=_n(y), width=_n(right - left), height=20,
                        fill="#F4F4F4", stroke=AXIS_COLOUR))
        x = left
        for name, size in parts:
            w = size / scale * (right - left)
            rect = _attrs(class_="segment", data_name=name, data_bytes=size, x=_n(x), y=_n(y), width=_n(w), height=20,
                          fill=colour[name])
            body.append(f"<rect{rect}>{_el('title', f'{name} {gib(size)} GiB')}</rect>")
            x += w
        if b.capacity is not None and need > b.capacity:
            cx = left + b.capacity / scale * (right - left)
            body.append(_el("line", class_="capacity", data_bytes=b.capacity, x1=_n(cx), y1=_n(y - 4), x2=_n(cx),
                            y2=_n(y + 24), stroke=FREE_COLOUR, stroke_width=2))
        numbers = f"{gib(need)} GiB, free unknown" if b.capacity is None else f"{gib(need)} / {gib(b.capacity)} GiB"
        body.append(_el("text", numbers, x=_n(right + 8), y=_n(y + 15)))
        legend, end = _legend([(colour[n], f"{n} {gib(s)} GiB") for n, s in parts], left, y + 20 + FONT + 10,
                              width - 16)
        body += legend + ["</g>"]
        y = end + 12
    return _document(width, y + 8, title, body)


def device_bars_svg(result: CheckResult, *, title: str = "", width: int = 720) -> str:
    """:func:`bars_svg` of a check result's devices (fitcheck.render.charts.bar.device_bar_data)."""
    return bars_svg(device_bar_data(result), title=title, width=width)
