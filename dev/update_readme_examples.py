"""Regenerate the output of the `$ fitcheck ... --profile ...` console examples in README.md and docs/*.md.

    python dev/update_readme_examples.py          # rewrite README.md and docs/*.md in place
    python dev/update_readme_examples.py --check  # exit 1 if one is stale (tests do the same)

Only examples that do not depend on this machine (a --profile, `where`, `models`, `profiles`) are regenerated.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from click.testing import CliRunner

from fitcheck.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def documents() -> list[Path]:
    """README.md and every docs/*.md: the files whose console examples are generated and checked."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]
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


def regenerated(text: str) -> str:
    return BLOCK.sub(lambda m: m.group(1) + _regenerate(m.group(2)) + m.group(3), text)


def main() -> int:
    stale = []
    for path in documents():
        text = path.read_text()
        new = regenerated(text)
        if new != text:
            stale.append(path)
            if "--check" not in sys.argv:
                path.write_text(new)
    if "--check" in sys.argv:
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)}", file=sys.stderr)
        return 1 if stale else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
