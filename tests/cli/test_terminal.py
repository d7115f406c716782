"""What reaches the terminal: control sequences from files escaped, any console encoding, no credentials."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from fitcheck.cli import cli
from fitcheck.cli.terminal import SafeStream, escape_controls

ROOT = Path(__file__).resolve().parents[2]
EVIL = "evil\x1b]0;pwned\x07x\x1b[2J\x9b31m"


def _evil_profile(tmp_path: Path) -> Path:
    lines = (ROOT / "hardware_profiles" / "rtx-4090.toml").read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("name ="))
    lines[first] = "name = " + json.dumps(EVIL)
    path = tmp_path / "evil.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@given(st.text())
def test_no_control_character_but_newline_and_tab_survives(text):
    out = escape_controls(text)
    assert not any((ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F for c in out)


def test_colour_is_kept_only_where_asked():
    painted = "\x1b[32m\x1b[1mFITS\x1b[0m"
    assert escape_controls(painted, keep_colour=True) == painted
    assert "\x1b" not in escape_controls(painted)
    assert escape_controls("\x1b]0;title\x07", keep_colour=True) == "\\x1b]0;title\\x07"


def test_a_profile_name_cannot_retitle_the_terminal(tmp_path):
    profile = _evil_profile(tmp_path)
    text = subprocess.run([sys.executable, "-m", "fitcheck", "qwen-7b", "--profile", str(profile)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert text.returncode in (0, 1) and "\\x1b]0;pwned\\x07" in text.stdout
    assert not any(c in text.stdout + text.stderr for c in "\x1b\x07\x9b")
    doc = subprocess.run([sys.executable, "-m", "fitcheck", "qwen-7b", "--profile", str(profile), "--json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert json.loads(doc.stdout)["machine"]["name"] == EVIL   # JSON keeps the text, as JSON escapes


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252", "ascii"])
@pytest.mark.parametrize("argv", [["qwen-7b", "--profile", "rtx-4090", "-v"], ["where", "qwen-7b"],
                                  ["probe"]], ids=["check", "where", "probe"])
def test_any_console_encoding(encoding, argv):
    env = {**os.environ, "PYTHONIOENCODING": encoding}
    out = subprocess.run([sys.executable, "-m", "fitcheck", *argv], capture_output=True, timeout=60, cwd=ROOT,
                         env=env)
    assert out.returncode in (0, 1), out.stderr.decode(encoding, "replace")
    text = out.stdout.decode(encoding)
    assert text.strip()
    if argv[0] == "qwen-7b":
        assert "qwen-7b -> Qwen/Qwen2.5-7B-Instruct" in text   # the alias arrow, as its ASCII stand-in


def test_unencodable_text_gets_ascii_stand_ins():
    raw = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    stream = SafeStream(raw)
    stream.write("qwen-7b → Qwen — 4 × 24 GiB ≥ 1 \u4e2d\n")
    stream.flush()
    raw.seek(0)
    assert raw.read() == "qwen-7b -> Qwen - 4 x 24 GiB >= 1 ?\n"


def test_credentials_in_a_typed_url_are_never_printed():
    res = CliRunner().invoke(cli, ["qwen-7b", "--python-env", "https://user:SECRETPASS@host/x"])
    assert res.exit_code == 2 and "SECRETPASS" not in res.output and "***@host" in res.output
