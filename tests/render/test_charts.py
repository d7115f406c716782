"""fitcheck.render.charts: the stacked bars, the text line chart and their SVG forms (pure functions)."""

import math
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcheck.pipeline import check
from fitcheck.profiles import load_profile
from fitcheck.render.charts import can_draw_unicode
from fitcheck.render.charts.bar import ASCII_FILLS, MARKER, UNICODE_FILLS, device_bar_data, device_bars, stacked_bar
from fitcheck.render.charts.curve import MARK_GLYPH, SERIES_GLYPHS, Mark, Series, line_chart, short_count
from fitcheck.render.charts.svg import bars_svg, device_bars_svg, line_chart_svg
from fitcheck.request import Request

GiB = 2**30
SVG = "{http://www.w3.org/2000/svg}"
SEGMENTS = [("weights", 14 * GiB), ("kv_cache", GiB // 2), ("activations", GiB), ("overhead", 3 * 2**20)]
CONTEXTS = [512 * 2**k for k in range(7)]


def _curves():
    return [Series("bf16", tuple((x, 15.5 + x / 32768 * 2) for x in CONTEXTS)),
            Series("int8", tuple((x, 8.5 + x / 32768 * 2) for x in CONTEXTS)),
            Series("q4_k_m", tuple((x, 4.5 + x / 32768 * 8) for x in CONTEXTS))]


@pytest.fixture(scope="module")
def qwen_4090():
    return check("qwen-7b", Request(), load_profile("rtx-4090"), alternatives=False)


# ---- the stacked bar --------------------------------------------------------------------------------
def test_bar_unicode_then_a_legend_naming_every_segment_in_gib():
    bar, *legend = stacked_bar(SEGMENTS, 24 * GiB, 80, label="GPU0")
    assert bar.startswith("GPU0 [█") and bar.endswith("] 15.50 / 24.00 GiB")
    assert "·" in bar and MARKER[False] not in bar  # room to spare, no overflow marker
    text = " ".join(legend)
    for (name, _), fill in zip(SEGMENTS, UNICODE_FILLS, strict=False):
        assert f"{fill} {name} " in text
    assert "weights 14.00" in text and "kv_cache 0.50" in text and text.endswith("GiB")
    # 3 MiB is less than one cell of 56: not in the bar, still in the legend
    assert "░" not in bar and "░ overhead <0.01" in text


def test_bar_ascii_has_only_ascii_and_distinct_fills():
    lines = stacked_bar(SEGMENTS, 24 * GiB, 80, ascii=True, label="GPU0")
    assert all(line.isascii() for line in lines)
    text = " ".join(lines[1:])
    used = [f"{fill} {name}" for (name, _), fill in zip(SEGMENTS, ASCII_FILLS, strict=False)]
    assert all(u in text for u in used) and len(set(ASCII_FILLS)) == len(ASCII_FILLS)


def test_bar_over_capacity_is_scaled_to_the_need_with_a_marker_at_the_free_memory():
    bar = stacked_bar([("weights", 18 * GiB), ("kv_cache", 2 * GiB)], 10 * GiB, 60)[0]
    assert "20.00 / 10.00 GiB" in bar and "over by 10.00" in bar
    cells = bar[bar.index("[") + 1:bar.index("]")]
    assert MARKER[False] in cells and "·" not in cells
    assert abs(cells.index(MARKER[False]) - len(cells) / 2) <= 1  # free memory is half the need
    assert "|" in stacked_bar([("weights", 18 * GiB)], 10 * GiB, 60, ascii=True)[0]


def test_bar_with_free_memory_unknown():
    bar = stacked_bar(SEGMENTS, None, 70)[0]
    assert "free unknown" in bar and "·" not in bar


def test_equal_names_are_one_segment_and_empty_ones_none():
    lines = stacked_bar([("overhead", GiB), ("weights", GiB), ("overhead", GiB), ("logits", 0)], 8 * GiB, 80)
    text = " ".join(lines[1:])
    assert text.count("overhead") == 1 and "overhead 2.00" in text and "logits" not in text


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 2**41), min_size=1, max_size=10),
       capacity=st.one_of(st.none(), st.integers(0, 2**41)), width=st.integers(40, 200), ascii=st.booleans(),
       label=st.sampled_from(["", "GPU0", "RAM", "GPU0-7"]))
def test_bar_never_wider_than_its_width_and_names_every_segment(sizes, capacity, width, ascii, label):
    names = [f"part{i}" for i in range(len(sizes))]
    lines = stacked_bar(list(zip(names, sizes, strict=True)), capacity, width, ascii, label=label)
    assert all(len(line) <= width for line in lines)
    legend = " ".join(lines[1:])
    assert all(f" {n} " in legend for n in names)
    if ascii:
        assert all(line.isascii() for line in lines)
    cells = lines[0][lines[0].index("[") + 1:lines[0].index("]")]
    assert (MARKER[ascii] in cells) == (capacity is not None and sum(sizes) > capacity)


def test_device_bars_of_a_check_result(qwen_4090):
    lines = device_bars(qwen_4090, 80)
    assert lines[0].startswith("GPU0 [") and "/ 23.99 GiB" in lines[0]
    assert "weights 14.19" in " ".join(lines[1:])
    assert all(len(line) <= 80 for line in lines)
    assert all(line.isascii() for line in device_bars(qwen_4090, 80, ascii=True))


def test_device_bars_mark_the_overflow_and_put_ram_beside_the_gpu():
    result = check("llama-3.1-70b", Request(precision="q4_k_m"), load_profile("rtx-4090"), alternatives=False)
    labels = [b.label for b in device_bar_data(result)]
    assert labels == ["GPU0", "RAM"]
    lines = device_bars(result, 80)
    gpu = next(line for line in lines if line.startswith("GPU0"))
    assert MARKER[False] in gpu and "over by" in gpu
    assert next(line for line in lines if line.startswith("RAM ")).startswith("RAM  [")  # labels padded to one width


def test_identical_gpus_are_one_bar():
    result = check("llama-3.1-70b", Request(), load_profile("8x-h100"), alternatives=False)
    labels = [b.label for b in device_bar_data(result)]
    assert len(labels) < 8 and any("-" in label for label in labels), labels


# ---- the line chart -----------------------------------------------------------------------------------
def test_line_chart_unicode():
    lines = line_chart(_curves(), "context (tokens)", "GiB", 80, 14, hline=23.99,
                       marks=[Mark(32768, 17.5, "bf16 32k")])
    text = "\n".join(lines)
    assert lines[0] == "GiB" and all(len(line) <= 80 for line in lines)
    for glyph, name in zip(SERIES_GLYPHS[False], ("bf16", "int8", "q4_k_m"), strict=False):
        assert f"{glyph} {name}" in text and glyph in "\n".join(lines[1:15])
    assert "◆ largest that fits" in text and "─ free 23.99 GiB" in text
    assert "─" * 20 in text  # the free-memory line
    ticks = next(line for line in lines if "512" in line)
    assert ticks.split() == ["512", "1k", "2k", "4k", "8k", "16k", "32k"]
    assert any(line.strip() == "context (tokens)" for line in lines)
    # the mark is the last column of the plot, on the row of 17.5
    plot = [line for line in lines if "┤" in line or "│" in line]
    assert any(line.endswith(MARK_GLYPH[False]) for line in plot)


def test_line_chart_ascii():
    lines = line_chart(_curves(), "context (tokens)", "GiB", 60, 10, ascii=True, hline=23.99,
                       marks=[Mark(32768, 17.5)])
    assert all(line.isascii() for line in lines) and all(len(line) <= 60 for line in lines)
    text = "\n".join(lines)
    assert "@ largest that fits" in text and "- free 23.99 GiB" in text and "* bf16" in text


def test_line_chart_cut_at_y_max_says_so():
    steep = Series("bf16", ((1, 15.0), (256, 250.0)))
    lines = line_chart([steep], "batch", "GiB", 60, 12, hline=24.0, y_max=48.0)
    assert "(curves leave the chart above 50 GiB)" in "\n".join(lines)
    assert lines[1].lstrip().startswith("50")


def test_short_counts():
    assert [short_count(x) for x in (1, 256, 512, 1024, 32768, 131072, 2**20, 1536)] == \
        ["1", "256", "512", "1k", "32k", "128k", "1M", "1536"]


@settings(max_examples=120, deadline=None)
@given(data=st.lists(st.lists(st.tuples(st.integers(1, 2**24), st.floats(0, 5000, allow_nan=False)),
                              min_size=1, max_size=12), min_size=0, max_size=4),
       width=st.integers(40, 200), height=st.integers(3, 30), ascii=st.booleans(),
       hline=st.one_of(st.none(), st.floats(0, 5000, allow_nan=False)), log=st.booleans())
def test_line_chart_never_wider_than_its_width(data, width, height, ascii, hline, log):
    series = [Series(f"s{i}", tuple((float(x), y) for x, y in pts)) for i, pts in enumerate(data)]
    marks = [Mark(s.points[-1][0], s.points[-1][1]) for s in series]
    lines = line_chart(series, "context (tokens)", "GiB", width, height, ascii=ascii, hline=hline, marks=marks,
                       x_log=log)
    assert all(len(line) <= width for line in lines)
    if ascii:
        assert all(line.isascii() for line in lines)
    legend = "\n".join(lines)
    assert all(s.name in legend for s in series)


# ---- SVG -------------------------------------------------------------------------------------------------
def _svg(**extra):
    return line_chart_svg(_curves(), "context (tokens)", "GiB", title="qwen-7b <on> rtx-4090 & co", hline=23.99,
                          marks=[Mark(32768, 17.5, "bf16 32k"), Mark(16384, 9.5, "int8 16k")], **extra)


def test_svg_line_chart_is_well_formed_standalone_and_escaped():
    doc = _svg()
    root = ET.fromstring(doc.encode())
    assert root.tag == f"{SVG}svg"
    assert root.find(f"{SVG}title").text == "qwen-7b <on> rtx-4090 & co"
    assert "href" not in doc and doc.count("http") == 1 and "<script" not in doc and "<style" not in doc
    series = root.findall(f".//{SVG}g[@class='series']")
    assert [g.get("data-series") for g in series] == ["bf16", "int8", "q4_k_m"]
    assert all(len(g.findall(f"{SVG}circle")) == len(CONTEXTS) for g in series)
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "free 23.99 GiB" in texts and "bf16 32k" in texts and "context (tokens)" in texts


def test_svg_marks_the_largest_that_fits_at_its_coordinates():
    root = ET.fromstring(_svg().encode())
    xtick = {line.get("data-value"): float(line.get("x1")) for line in root.iter(f"{SVG}line")
             if line.get("class") == "xtick"}
    yticks = {float(line.get("data-value")): float(line.get("y1")) for line in root.iter(f"{SVG}line")
              if line.get("class") == "ytick"}
    marks = {c.get("data-x"): c for c in root.iter(f"{SVG}circle") if c.get("class") == "mark"}
    assert set(marks) == {"32768", "16384"}
    top = max(yticks)
    for x, y in (("32768", 17.5), ("16384", 9.5)):
        assert float(marks[x].get("cx")) == pytest.approx(xtick[x], abs=0.01)
        expected = yticks[0] - y / top * (yticks[0] - yticks[top])
        assert float(marks[x].get("cy")) == pytest.approx(expected, abs=0.01)
        assert float(marks[x].get("data-y")) == y
    assert "largest that fits: bf16 32k" in [t.text for t in root.iter(f"{SVG}title")]
    # the free line at 23.99 GiB
    hline = next(line for line in root.iter(f"{SVG}line") if line.get("class") == "hline")
    assert float(hline.get("y1")) == pytest.approx(yticks[0] - 23.99 / top * (yticks[0] - yticks[top]), abs=0.01)


def test_svg_is_deterministic():
    assert _svg() == _svg()
    assert _svg().encode() == line_chart_svg(_curves(), "context (tokens)", "GiB", title="qwen-7b <on> rtx-4090 & co",
                                             hline=23.99, marks=[Mark(32768, 17.5, "bf16 32k"),
                                                                 Mark(16384, 9.5, "int8 16k")]).encode()


def test_svg_line_chart_with_nothing_to_draw_is_still_a_document():
    root = ET.fromstring(line_chart_svg([], "batch", "GiB").encode())
    assert root.tag == f"{SVG}svg"


def test_svg_bars(qwen_4090):
    over = check("llama-3.1-70b", Request(precision="q4_k_m"), load_profile("rtx-4090"), alternatives=False)
    doc = device_bars_svg(over, title="llama & <70b>")
    root = ET.fromstring(doc.encode())
    devices = [g.get("data-device") for g in root.iter(f"{SVG}g") if g.get("class") == "device"]
    assert devices == ["GPU0", "RAM"]
    segments = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "segment"]
    gpu = over.estimate.devices[0]
    assert sum(int(r.get("data-bytes")) for r in segments[:4]) == gpu.total_bytes
    assert len([line for line in root.iter(f"{SVG}line") if line.get("class") == "capacity"]) == 1
    assert doc == device_bars_svg(over, title="llama & <70b>")
    fits = ET.fromstring(bars_svg(device_bar_data(qwen_4090)).encode())
    assert not [line for line in fits.iter(f"{SVG}line") if line.get("class") == "capacity"]
    widths = [float(r.get("width")) for r in fits.iter(f"{SVG}rect") if r.get("class") == "segment"]
    assert all(math.isfinite(w) and w >= 0 for w in widths)


# ---- where the text goes -------------------------------------------------------------------------------
@pytest.mark.parametrize("encoding, expected", [("utf-8", True), ("UTF-8", True), ("utf-16", True),
                                                ("ascii", False), ("latin-1", False), ("cp1252", False),
                                                (None, False), ("no-such-codec", False)])
def test_can_draw_unicode(encoding, expected):
    assert can_draw_unicode(encoding) is expected


def test_github_summary_has_the_bars_in_a_text_fence():
    from fitcheck.preflight.github import check_summary

    result = check("qwen-7b", Request(context=16384), load_profile("rtx-3060"), choose=False)
    md = check_summary(result)
    fence = md[md.index("```text\n") + len("```text\n"):]
    block = fence[:fence.index("```")].splitlines()
    assert block[0].startswith("GPU0 [") and MARKER[False] in block[0] and "18.05 / 12.00 GiB" in block[0]
    assert "weights 14.19" in " ".join(block[1:]) and all(len(line) <= 80 for line in block)
    assert md.index("| GPU0 |") < md.index("```text") < md.index("**What fits instead")
