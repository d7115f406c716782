"""What a terminal shows, byte for byte, at 80 and 120 columns: a fitting answer, one that does not fit, a
fine-tuning run, several GPUs, `where` and `models --fits`. The files under tests/fixtures/screens are the
answers as they should read; `python tests/cli/test_screens.py` rewrites them after a deliberate change
(read the diff before committing it).

Beside the bytes, the promises the issue makes of the layout: a fitting answer fits in 24 rows of 80 columns;
no prose line is wider than the terminal (a command to paste stays whole: the terminal folds it, and a copy
gives it back whole); `where` and `models --fits` fit 120 columns; --brief is one line.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli

SCREENS = Path(__file__).resolve().parents[1] / "fixtures" / "screens"
WIDTHS = (80, 120)
CASES = {
    "fits": ["qwen-7b", "--profile", "rtx-4090"],
    "does-not-fit": ["qwen-7b", "--profile", "rtx-4060-laptop"],
    "training": ["qwen-7b", "--mode", "qlora", "--seq-len", "4096", "--profile", "rtx-4090"],
    "multi-gpu": ["llama-3.1-70b", "--profile", "8x-h100", "--engine", "vllm"],
    "where": ["where", "qwen-7b", "--kind", "cloud"],
    "models-fits": ["models", "--fits", "--profile", "rtx-4060-laptop", "--top", "8"],
}
FITTING = ("fits", "training", "multi-gpu")
COMMAND_STARTS = ("fitcheck ", "vllm ", "llama-server ", "python ", "accelerate ", "torchrun ", "Look closer: ")


def screen(name: str, width: int) -> str:
    result = CliRunner().invoke(cli, CASES[name], env={"COLUMNS": str(width)}, prog_name="fitcheck")
    assert result.exit_code in (0, 1), result.output
    return result.output


def _rows(text: str, width: int) -> int:
    return sum(max(1, math.ceil(len(line) / width)) for line in text.splitlines())


def _is_command(line: str) -> bool:
    text = line.strip()
    return text.startswith(COMMAND_STARTS) or text.startswith("-") or "  " in text  # a table row or rule


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", CASES)
def test_screen_is_the_recorded_one(name, width):
    recorded = (SCREENS / f"{name}-{width}.txt").read_text()
    assert screen(name, width) == recorded, f"python tests/cli/test_screens.py regenerates {name}-{width}.txt"


@pytest.mark.parametrize("name", FITTING)
def test_a_fitting_answer_fits_one_screen(name):
    text = screen(name, 80)
    assert _rows(text, 80) <= 24, text


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", CASES)
def test_prose_is_never_wider_than_the_terminal(name, width):
    limit = min(width, 120)
    for line in screen(name, width).splitlines():
        assert len(line) <= limit or _is_command(line), line


@pytest.mark.parametrize("name", ("where", "models-fits"))
def test_searches_fit_120_columns_even_in_a_pipe(name):
    text = CliRunner().invoke(cli, CASES[name]).output
    assert max(len(line) for line in text.splitlines()) <= 120, text


def test_verbose_gives_what_the_default_leaves_out():
    short, long = screen("fits", 80), CliRunner().invoke(cli, [*CASES["fits"], "-v"]).output
    assert "More:     -v shows" in short and "More:" not in long
    for whole in ("total needed", "Assumptions:", "Cost:", "also: Qwen/Qwen2.5-7B"):
        assert whole in long and whole not in short, whole


def test_brief_is_one_line_with_the_largest_context():
    out = CliRunner().invoke(cli, [*CASES["fits"], "--brief"])
    assert out.exit_code == 0
    assert out.output.count("\n") == 1 and out.output.startswith("FITS: Qwen/Qwen2.5-7B-Instruct on rtx-4090 — ")
    assert out.output.rstrip().endswith("largest context 32,768")
    bad = CliRunner().invoke(cli, [*CASES["fits"], "--brief", "-v"])
    assert bad.exit_code == 2 and "pass one of them" in bad.output


def test_dumb_terminals_and_no_color_get_plain_ascii_pictures(monkeypatch):
    from fitcheck.preflight.lines import use_color
    from fitcheck.render.layout import terminal_width, wants_ascii

    assert wants_ascii({"TERM": "dumb"}) and not wants_ascii({"TERM": "xterm"}, _Stream("utf-8"))
    assert wants_ascii({}, _Stream("latin-1"))
    assert not use_color(_Stream("utf-8", tty=True), {"NO_COLOR": "1"})
    assert terminal_width({"COLUMNS": "100"}) == 100 and terminal_width({}, _Stream("utf-8")) is None
    assert terminal_width({"COLUMNS": "7"}) == 40   # narrower than a hanging indent needs: the floor
    out = CliRunner().invoke(cli, CASES["fits"], env={"TERM": "dumb"}).output
    assert "#" in out and "█" not in out


class _Stream:
    def __init__(self, encoding: str, tty: bool = False):
        self.encoding, self._tty = encoding, tty

    def isatty(self) -> bool:
        return self._tty


if __name__ == "__main__":  # rewrite the recorded screens
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    SCREENS.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        for w in WIDTHS:
            (SCREENS / f"{case}-{w}.txt").write_text(screen(case, w))
            print(f"wrote {case}-{w}.txt")
