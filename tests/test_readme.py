"""README examples stay true: every `$ fitcheck ...` console example runs, and examples that do not
depend on this machine (a hardware profile, `where`, `models`) print exactly what README shows.
`python dev/update_readme_examples.py` regenerates them."""

import re
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
sys.path.insert(0, str(ROOT / "dev"))
from update_readme_examples import machine_independent  # noqa: E402

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
    if machine_independent(cmd) and shown.strip():
        assert result.output.rstrip() == shown.rstrip()


def test_readme_options_table_is_the_vocabulary():
    from update_readme_examples import OPTIONS, options_table

    (section,) = OPTIONS.findall(README.read_text())
    assert section[1] == options_table(), "run python dev/update_readme_examples.py"
