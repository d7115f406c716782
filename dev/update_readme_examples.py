"""Regenerate the generated parts of README.md and docs/*.md: the output of the `$ fitcheck ...
--profile ...` console examples, and the `fitcheck check` options table (from the option vocabulary,
fitcheck/options.py) where a page holds its markers.

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
OPTIONS = re.compile(r"(<!-- options:begin -->\n)(.*?)(<!-- options:end -->)", re.S)


def options_table() -> str:
    """One row per option of `fitcheck check`: the request options from the vocabulary (with the
    modes they apply to), then the command's own options, each with its default and help."""
    import click

    from fitcheck.cli.check_cmd import check
    from fitcheck.options import ALL_MODES, BY_NAME, TRAINING

    def modes(name: str) -> str:
        opt = BY_NAME.get(name)
        if opt is None or opt.modes == ALL_MODES:
            return "all"
        return "training" if opt.modes == TRAINING else ", ".join(m for m in ("inference", "full", "lora", "qlora")
                                                                    if m in opt.modes)

    rows = ["| option | default | values | modes | meaning |", "|---|---|---|---|---|"]
    for param in check.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        flags = " / ".join(f"`{f}`" for f in [*param.opts, *param.secondary_opts])
        default = param.default if not callable(param.default) else None
        unset = default is None or default is False or default == () or type(default).__name__ == "Sentinel"
        shown = "" if unset else f"`{default}`"
        opt = BY_NAME.get(param.name)
        if isinstance(param.type, click.Choice):
            values = ", ".join(str(c) for c in param.type.choices)
        elif opt is not None and opt.kind == "int" and not opt.choices and opt.low is not None:
            # a whole number the option parses itself (32k, 4,096): its range from the vocabulary
            low_i, high_i = int(opt.low), None if opt.high is None else int(opt.high)
            values = f"{low_i:,}–{high_i:,}" if high_i is not None else f">= {low_i:,}"
        elif isinstance(param.type, (click.IntRange, click.FloatRange)):
            low, high = param.type.min, param.type.max
            values = f"{low:,}–{high:,}" if high is not None else f">= {low:,}"
        else:
            values = param.metavar or ""
        text = " ".join((param.help or "").split()).replace("|", "\\|")
        values = values.replace("|", "\\|")
        rows.append(f"| {flags} | {shown} | {values} | {modes(param.name)} | {text} |")
    return "\n".join(rows) + "\n"


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
    text = BLOCK.sub(lambda m: m.group(1) + _regenerate(m.group(2)) + m.group(3), text)
    return OPTIONS.sub(lambda m: m.group(1) + options_table() + m.group(3), text)


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
