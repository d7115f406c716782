"""Pictures of a result: text charts for the terminal and the same charts as SVG documents.

Pure functions over numbers (no I/O, no click): each takes what it draws and the columns it may use,
and returns lines (or, for SVG, one document string).

    from fitcheck.render.charts.bar import device_bars, stacked_bar
    from fitcheck.render.charts.curve import Mark, Series, line_chart
    from fitcheck.render.charts.svg import bars_svg, line_chart_svg

Bytes are integers in, GiB (2^30 bytes) out, labelled GiB.  Every text chart has a Unicode and an ASCII
form (``ascii=True``) and never writes a line longer than the ``width`` it is given.
"""

from __future__ import annotations

from fitcheck.units import GiB

# Every glyph the Unicode charts draw (bar fills, markers, series and marks, axes): a stream that cannot encode them
# all gets the ASCII charts.
UNICODE_GLYPHS = "█▓▒░▞▚▖▗▙▟▛▜·│●■▲▼○□△▽◆─┤└┬"


def can_draw_unicode(encoding: str | None) -> bool:
    """Whether a stream in ``encoding`` can show the Unicode charts' glyphs (else: the ASCII form)."""
    if not encoding:
        return False
    try:
        UNICODE_GLYPHS.encode(encoding)
    except (LookupError, UnicodeEncodeError):
        return False
    return True


def gib_value(n_bytes: int | float) -> float:
    """Bytes as GiB, a float (for chart coordinates)."""
    return n_bytes / GiB


def clip(line: str, width: int) -> str:
    """``line`` cut to ``width`` columns (every glyph the charts use is one column wide)."""
    return line[:max(width, 0)]
