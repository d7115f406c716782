"""Regenerate the output of README's `$ fitcheck ... --profile ...` console examples.

    python dev/update_readme_examples.py          # rewrite README.md in place
    python dev/update_readme_examples.py --check  # exit 1 if README is stale (tests do the same)

Only examples that do not depend on this machine (a --profile, `where`, `models`, `profiles`) are regenerated.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from click.testing import CliRunner

from fitcheck.cli import cli

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(```console\n)(.*?)(```)", re.S)


def machine_independent(command: str) -> bool:
    """True for examples whose output does not depend on this machine (a profile, or a command
    that reads no machine): those are regenerated and compared exactly."""
    words = shlex.split(command)
    return "--profile" in words or (len(words) > 1 and words[1] in ("where", "models", "profiles"))


def _regenerate(block: str) -> str:
    out: list[str] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        j = i + 1
        while j < len(lines) and not lines[j].startswith("$ "):
            j += 1
        if line.startswith("$ fitcheck") and machine_independent(line[2:]):
            result = CliRunner().invoke(cli, shlex.split(line[2:])[1:], prog_name="fitcheck")
            out += [line, *result.output.rstrip().splitlines()]
        else:
            out += lines[i:j]
        i = j
    return "\n".join(out) + "\n"


def main() -> int:
    text = README.read_text()
    new = BLOCK.sub(lambda m: m.group(1) + _regenerate(m.group(2)) + m.group(3), text)
    if "--check" in sys.argv:
        return 0 if new == text else 1
    README.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
