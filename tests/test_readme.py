"""README examples stay true: every `$ fitcheck ...` console example runs, and examples that name a
hardware profile (so do not depend on this machine) print exactly what README shows."""

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"```console\n(.*?)```", re.S)


def examples():
    text = README.read_text()
    out = []
    for block in BLOCK.findall(text):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            if lines[i].startswith("$ fitcheck"):
                cmd = lines[i][2:]
                j = i + 1
                while j < len(lines) and not lines[j].startswith("$ "):
                    j += 1
                out.append((cmd, "\n".join(lines[i + 1:j])))
                i = j
            else:
                i += 1
    return out


def test_readme_opens_with_the_two_setup_commands():
    text = README.read_text()
    assert "pip install . && fitcheck qwen-7b" in text
    assert "pip install -e '.[test]' && pytest" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert "pip install -e '.[test]' && pytest" in ci


@pytest.mark.parametrize("cmd, shown", examples(), ids=lambda v: v if isinstance(v, str) and v.startswith("fitcheck") else "")
def test_readme_example(cmd, shown):
    args = shlex.split(cmd)[1:]
    result = CliRunner().invoke(cli, args, prog_name="fitcheck")
    assert result.exit_code in (0, 1), result.output
    if "--profile" in args and shown.strip():
        assert result.output.rstrip() == shown.rstrip()
