"""`fitcheck plot MODEL`: memory against context or batch, in the terminal or as SVG; check's numbers at every point."""

import json
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.profiles import load_profile
from fitcheck.request import Request
from fitcheck.search.sweep import sweep

SVG = "{http://www.w3.org/2000/svg}"
GiB = 2**30


def run(*args, env=None, charset="utf-8"):
    return CliRunner(charset=charset).invoke(cli, list(args), env={"COLUMNS": "80", **(env or {})})


def check_json(*args):
    r = run("check", "qwen-7b", "--profile", "rtx-4090", *args, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.output)


def busiest_total(doc) -> tuple[str, int]:
    d = max(doc["estimate"]["devices"], key=lambda d: d["total_bytes"])
    return d["device"], d["total_bytes"]


@pytest.fixture(scope="module")
def qwen_sweep():
    return sweep("qwen-7b", Request(), load_profile("rtx-4090"))


def test_plot_qwen_on_a_4090():
    r = run("plot", "qwen-7b", "--profile", "rtx-4090")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert lines[0].startswith("Model:    Qwen/Qwen2.5-7B-Instruct")
    assert "Plot:     total needed on GPU0 against context, transformers, batch 1" in r.output
    assert "● bf16  ■ int8  ▲ awq  ◆ largest that fits  ─ free on GPU0 23.99 GiB" in r.output
    assert "● bf16 (as asked)  15.68 GiB  32,768 tokens, " in r.output
    assert "bf16 at 4,096 tokens, as asked:" in r.output and "GPU0 [█" in r.output
    assert "512" in r.output and "32k" in r.output and "context (tokens)" in r.output


def test_plotted_values_are_checks_numbers(qwen_sweep):
    curves = {c.precision: c for c in qwen_sweep.curves}
    assert list(curves) == ["bf16", "int8", "awq"] and qwen_sweep.curves[0].asked
    for precision, extra in (("bf16", ()), ("int8", ("--precision", "int8", "--engine", "transformers"))):
        for context in (4096, 8192, 32768):
            doc = check_json("--context", str(context), *extra)
            point = next(p for p in curves[precision].points if p.x == context)
            assert (point.device, point.need_bytes) == busiest_total(doc), (precision, context)
    asked = check_json()
    assert qwen_sweep.curves[0].largest.x == asked["verdict"]["max_context"] == 32768
    int8 = check_json("--precision", "int8", "--engine", "transformers")
    assert curves["int8"].largest.x == int8["verdict"]["max_context"]


def test_the_svg_file_carries_checks_numbers(tmp_path):
    target = tmp_path / "memory.svg"
    r = run("plot", "qwen-7b", "--profile", "rtx-4090", "--svg", str(target))
    assert r.exit_code == 0, r.output
    assert "GPU0 [" in r.output and f"Wrote the chart to {target}" in r.output
    root = ET.fromstring(target.read_bytes())
    bf16 = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "series" and g.get("data-series") == "bf16")
    plotted = {c.get("data-x"): float(c.get("data-y")) for c in bf16.iter(f"{SVG}circle")}
    for context in (8192, 16384):
        _, total = busiest_total(check_json("--context", str(context)))
        assert plotted[str(context)] == round(total / GiB, 4)
    marks = [c for c in root.iter(f"{SVG}circle") if c.get("class") == "mark"]
    assert "32768" in {m.get("data-x") for m in marks}
    assert "bf16 32k" in [t.text for t in root.iter(f"{SVG}text")]
    again = tmp_path / "again.svg"
    assert run("plot", "qwen-7b", "--profile", "rtx-4090", "--svg", str(again)).exit_code == 0
    assert again.read_bytes() == target.read_bytes()  # deterministic


def test_svg_to_stdout_instead_of_the_text_chart():
    r = run("plot", "qwen-7b", "--profile", "rtx-4090", "--svg", "-")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("<?xml") and "GPU0 [" not in r.output
    ET.fromstring(r.output.encode())


def test_against_batch_marks_checks_largest_batch():
    r = run("plot", "qwen-7b", "--profile", "rtx-4090", "--against", "batch")
    assert r.exit_code == 0, r.output
    assert "batch (concurrent sequences)" in r.output and "against batch, transformers, context 4,096 tokens" in r.output
    max_batch = check_json()["verdict"]["max_batch"]
    assert f"● bf16 (as asked)   15.68 GiB  {max_batch} sequences, " in r.output
    ticks = next(line for line in r.output.splitlines() if line.strip().startswith("1 "))
    assert ticks.split() == ["1", "2", "4", "8", "16", "32", "64", "128", "256"]
    assert all(len(line) <= 80 for line in r.output.splitlines())


def test_batch_points_are_checks_numbers():
    s = sweep("qwen-7b", Request(), load_profile("rtx-4090"), against="batch")
    assert s.xs == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    for batch in (4, 16):
        point = next(p for p in s.curves[0].points if p.x == batch)
        assert (point.device, point.need_bytes) == busiest_total(check_json("--batch", str(batch), "--strict"))


def test_ascii():
    r = run("plot", "qwen-7b", "--profile", "rtx-4090", "--ascii")
    assert r.exit_code == 0, r.output
    assert r.output.isascii(), [line for line in r.output.splitlines() if not line.isascii()]
    assert "* bf16  o int8  + awq  @ largest that fits  - free on GPU0 23.99 GiB" in r.output
    assert "GPU0 [#" in r.output


@pytest.mark.parametrize("how", ["dumb terminal", "latin-1 console"])
def test_ascii_by_itself_where_unicode_would_not_show(how):
    r = run("plot", "qwen-7b", "--profile", "rtx-4090", env={"TERM": "dumb"}) if how == "dumb terminal" \
        else run("plot", "qwen-7b", "--profile", "rtx-4090", charset="latin-1")
    assert r.exit_code == 0, r.output
    assert "█" not in r.output and "●" not in r.output and "GPU0 [#" in r.output


@pytest.mark.parametrize("columns", ["40", "120", "200"])
def test_the_width_follows_the_terminal(columns):
    r = run("plot", "qwen-7b", "--profile", "rtx-4090", env={"COLUMNS": columns})
    assert r.exit_code == 0, r.output
    widths = [len(line) for line in r.output.splitlines()]
    assert max(widths) <= int(columns) and max(widths) > int(columns) - 10


def test_precisions_follow_the_engine():
    r = run("plot", "qwen-7b", "--profile", "laptop-16gb")  # CPU only: llama.cpp
    assert r.exit_code == 0, r.output
    assert "● q4_k_m  ■ bf16  ▲ q8_0" in r.output and "against context, llama.cpp" in r.output
    s = sweep("qwen-7b", Request(engine="vllm"), load_profile("rtx-4090"))
    assert [c.engine for c in s.curves] == ["vllm"] * len(s.curves) and len(s.curves) <= 4


def test_training():
    r = run("plot", "qwen-7b", "--profile", "rtx-4090", "--mode", "qlora")
    assert r.exit_code == 0, r.output
    assert "sequence length (tokens)" in r.output and "● nf4 (as asked)" in r.output


@pytest.mark.parametrize("args", [
    ["--context", "0"],
    ["--context", "lots"],
    ["--against", "height"],
    ["--profile", "no-such-profile"],
    ["--precision", "q9_9"],
    ["--mode", "lora", "--context", "2048"],      # --context is inference's
    ["--vram", "lots"],
    ["--engine", "vllm", "--precision", "q4_k_m"],
])
def test_bad_input_is_exit_2_without_a_traceback(args):
    base = ["plot", "qwen-7b"] + ([] if "--profile" in args else ["--profile", "rtx-4090"])
    r = run(*base, *args)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.output.startswith("fitcheck")


def test_svg_into_a_folder_is_exit_2_before_any_work(tmp_path):
    r = run("plot", "qwen-7b", "--profile", "rtx-4090", "--svg", str(tmp_path))
    assert r.exit_code == 2 and "--svg" in r.output and "folder" in r.output


def test_missing_model_is_exit_2():
    assert run("plot").exit_code == 2


def test_help_has_examples():
    r = run("plot", "--help")
    assert r.exit_code == 0 and "Examples:" in r.output and "fitcheck plot qwen-7b --profile rtx-4090" in r.output
    assert "plot" in run("--help").output
