"""Regenerate every generated part of README.md and docs/*.md, or check that none is stale.

    python dev/update_readme_examples.py          # rewrite README.md and docs/*.md in place
    python dev/update_readme_examples.py --check  # exit 1 if one is stale (tests/test_readme.py does the same)

Exit 2 when a block cannot be generated (its command fails, or answers for this machine): the block is
kept as it was, every other one is still regenerated, and each error is printed.

What is generated (everything else in a fenced block is input or configuration, never output):

- ```console blocks: each `$ fitcheck ...` line is run through click's CliRunner and the lines under it
  are its output. Every such command must answer for no particular machine (a `--profile`, `where`,
  `profiles`, `models` without `--local`, a plan whose cases all name a profile), so the bytes can be
  compared here and on any other machine; a command about *this* machine goes in a ```sh block, without
  output.
- A ```console block right under `<!-- input: ["answer", "", ...] -->` is a `fitcheck interactive`
  session: the answers are fed to it one line each, and echoed where a terminal would show them.
- A fenced block right under `<!-- file: NAME -->` is a file (a plan's TOML): it is written to the
  working folder the page's commands run in, so `$ fitcheck check --plan NAME` runs what the page shows.
- ```pycon blocks: each `>>> ` statement (with its `... ` lines) runs in one namespace, as the Python
  prompt runs it, and the lines under it are what it printed.
- The `fitcheck check` options table between `<!-- options:begin -->` and `<!-- options:end -->` (from
  the option vocabulary, fitcheck/options.py), and the accuracy table between the markers of
  `python -m benchmarks.report` (README.md and docs/accuracy.md).

Every command runs with no FITCHECK_* setting, an empty user config folder, cache, Hugging Face cache,
Ollama store and llama.cpp cache, no GitHub Actions files and no $COLUMNS (lines are not wrapped), so a
developer's own set-up and terminal never show.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fitcheck.cli import cli  # noqa: E402


class DocsError(Exception):
    """A page that cannot be generated: the message says what to change."""


def documents() -> list[Path]:
    """README.md and every docs/*.md: the files whose examples are generated and checked."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


OPTIONS = re.compile(r"(<!-- options:begin -->\n)(.*?)(<!-- options:end -->)", re.S)
MARKER = re.compile(r"^<!-- (file|input): (.+?) -->$")
FENCE = re.compile(r"^```([\w.+-]*)[ \t]*$")


# ---- the pages' fenced blocks ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Fence:
    """One fenced block: its language, its body (offsets into the page's text) and the marker above it."""

    lang: str
    body: str
    start: int        # offset of the body's first character
    end: int          # offset of the closing fence
    line: int         # 1-based line of the opening fence
    marker: tuple[str, str] | None   # ("file", NAME) or ("input", JSON) from the line above the fence


def fences(text: str) -> list[Fence]:
    out: list[Fence] = []
    lines = text.splitlines(keepends=True)
    offset, i = 0, 0
    offsets = []
    for ln in lines:
        offsets.append(offset)
        offset += len(ln)
    offsets.append(offset)
    while i < len(lines):
        m = FENCE.match(lines[i].rstrip("\n"))
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].rstrip("\n") != "```":
            j += 1
        if j == len(lines):
            raise DocsError(f"unclosed fence at line {i + 1}")
        above = lines[i - 1].rstrip("\n") if i else ""
        mk = MARKER.match(above)
        start, end = offsets[i + 1], offsets[j]
        out.append(Fence(m.group(1), text[start:end], start, end, i + 1, (mk.group(1), mk.group(2)) if mk else None))
        i = j + 1
    return out


def page_files(text: str) -> dict[str, str]:
    """The files a page declares (`<!-- file: NAME -->` above a fenced block): name -> content."""
    return {f.marker[1]: f.body for f in fences(text) if f.marker and f.marker[0] == "file"}


def interactive_input(fence: Fence) -> list[str] | None:
    if not fence.marker or fence.marker[0] != "input":
        return None
    answers = json.loads(fence.marker[1])
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise DocsError(f"line {fence.line}: <!-- input: ... --> takes a JSON list of strings")
    return answers


# ---- which commands can be compared byte for byte ---------------------------------------------------------

def _plan_names_profiles(plan: str | None) -> bool:
    if plan is None:
        return False
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    doc = tomllib.loads(plan)
    default = doc.get("defaults", {}).get("profile")
    cases = doc.get("case", [])
    return bool(cases) and all(c.get("profile", default) for c in cases)


def machine_independent(command: str, files: dict[str, str] | None = None) -> bool:
    """True for a command whose output does not depend on the machine it runs on: a hardware profile,
    `where` or `profiles` (every profile), `models` without --local (the catalog, or --fits for a
    profile), a plan whose every case names a profile."""
    words = shlex.split(command)
    if len(words) < 2 or words[0] != "fitcheck":
        return False
    if "--profile" in words:
        return True
    sub = words[1]
    if sub in ("where", "profiles"):
        return True
    if sub == "models":
        return "--local" not in words and "--fits" not in words
    if "--plan" in words:
        name = words[words.index("--plan") + 1] if words.index("--plan") + 1 < len(words) else ""
        return _plan_names_profiles((files or {}).get(name))
    return False


# ---- running fitcheck as the pages show it ---------------------------------------------------------------

@contextlib.contextmanager
def isolated(files: dict[str, str]) -> Iterator[dict[str, str | None]]:
    """A working folder holding the page's files, and the environment every example runs in."""
    with tempfile.TemporaryDirectory(prefix="fitcheck-docs-") as tmp:
        base = Path(tmp)
        for name, content in files.items():
            (base / name).parent.mkdir(parents=True, exist_ok=True)
            (base / name).write_text(content)
        env: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("FITCHECK_", "GITHUB_"))}
        env.update({
            "XDG_CONFIG_HOME": str(base / ".user" / "config"),
            "XDG_CACHE_HOME": str(base / ".user" / "cache"),
            "HF_HOME": str(base / ".user" / "hf"),
            "HF_HUB_CACHE": str(base / ".user" / "hf" / "hub"),
            "HF_HUB_OFFLINE": "1",
            "OLLAMA_MODELS": str(base / ".user" / "ollama"),
            "LLAMA_CACHE": str(base / ".user" / "llama.cpp"),
            "NO_COLOR": "1",
            # as a wide terminal shows it: no wrapping at $COLUMNS, the Unicode bars (not TERM=dumb's ASCII)
            "COLUMNS": None,
            "LINES": None,
            "TERM": "xterm-256color",
            "PYTHONIOENCODING": None,
        })
        cwd = os.getcwd()
        os.chdir(base)
        try:
            yield env
        finally:
            os.chdir(cwd)


def run(command: str, files: dict[str, str] | None = None, answers: list[str] | None = None) -> str:
    """What `command` (a `fitcheck ...` line) prints, as a terminal shows it."""
    args = shlex.split(command)[1:]
    with isolated(files or {}) as env:
        if answers is None:
            result = CliRunner(env=env).invoke(cli, args, prog_name="fitcheck")
        else:
            result = CliRunner(env=env, echo_stdin=True).invoke(
                cli, args, prog_name="fitcheck", input="".join(a + "\n" for a in answers))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise RuntimeError(f"{command}: {result.exception!r}\n{result.output}")
    if result.exit_code not in (0, 1):
        raise RuntimeError(f"{command}: exit {result.exit_code}\n{result.output}")
    return result.output.rstrip()


def commands(body: str) -> list[tuple[str, str]]:
    """A console block's (`$ ` command, the lines under it) pairs."""
    out: list[tuple[str, str]] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise DocsError(f"a console block holds text before its first `$ ` command: {lines[i]!r}")
        j = i + 1
        while j < len(lines) and not lines[j].startswith("$ "):
            j += 1
        out.append((lines[i][2:], "\n".join(lines[i + 1:j])))
        i = j
    return out


def console(fence: Fence, files: dict[str, str]) -> str:
    """The console block's body, regenerated."""
    answers = interactive_input(fence)
    out = []
    for command, _ in commands(fence.body):
        if not machine_independent(command, files) and not (answers is not None and command == "fitcheck interactive"):
            raise DocsError(f"line {fence.line}: `{command}` answers for this machine: put it in a ```sh block "
                             "without output, or give it a --profile")
        output = run(command, files, answers)
        out += [f"$ {command}", *([output] if output else [])]
    return "\n".join(out) + "\n"


def pycon(fence: Fence, files: dict[str, str]) -> str:
    """A ```pycon block regenerated: every `>>> ` statement run, its printed output and value under it."""
    statements: list[list[str]] = []
    for line in fence.body.splitlines():
        if line.startswith(">>> "):
            statements.append([line])
        elif line.startswith("... ") or line == "...":
            statements[-1].append(line)
        # anything else is the previous statement's output, regenerated below
    namespace: dict[str, object] = {"__name__": "__docs__"}
    out = []
    with isolated(files) as env:
        saved = {k: os.environ.get(k) for k in env}
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        try:
            for stmt in statements:
                source = "\n".join(s[4:] for s in stmt)
                buf = io.StringIO()
                hook = sys.displayhook

                def show(value: object, buf: io.StringIO = buf) -> None:
                    if value is not None:
                        buf.write(repr(value) + "\n")

                sys.displayhook = show
                try:
                    with contextlib.redirect_stdout(buf):
                        exec(compile(ast.parse(source, mode="single"), "<docs>", "single"), namespace)  # noqa: S102
                finally:
                    sys.displayhook = hook
                out += stmt
                printed = buf.getvalue().rstrip("\n")
                if printed:
                    out.append(printed)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return "\n".join(out) + "\n"


def generated_fences(text: str) -> list[Fence]:
    """The fenced blocks of a page whose body is generated (console and pycon)."""
    return [f for f in fences(text) if f.lang in ("console", "pycon")]


def regenerate(fence: Fence, files: dict[str, str]) -> str:
    return console(fence, files) if fence.lang == "console" else pycon(fence, files)


# ---- tables -----------------------------------------------------------------------------------------------

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


def accuracy_markers() -> tuple[str, str]:
    from benchmarks import report

    return report.BEGIN, report.END


def accuracy_table() -> str:
    """What `python -m benchmarks.report` writes between its markers."""
    from benchmarks import report

    return report.generated()


def _replace_accuracy(text: str, table: str) -> str:
    begin, end = accuracy_markers()
    if begin not in text or end not in text:
        return text
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{table}\n{end}{tail}"


# ---- the whole page ---------------------------------------------------------------------------------------

def regenerated(text: str, errors: list[str] | None = None) -> str:
    """The page with every generated part regenerated. With `errors`, a block that cannot be generated
    (a command that fails) is kept as it was and its error appended there; without, it raises."""
    files = page_files(text)
    out, pos = [], 0
    for fence in generated_fences(text):
        try:
            body = regenerate(fence, files)
        except (DocsError, RuntimeError) as e:
            if errors is None:
                raise
            errors.append(f"line {fence.line}: {e}")
            body = fence.body
        out += [text[pos:fence.start], body]
        pos = fence.end
    out.append(text[pos:])
    text = "".join(out)
    text = OPTIONS.sub(lambda m: m.group(1) + options_table() + m.group(3), text)
    if accuracy_markers()[0] in text:
        text = _replace_accuracy(text, accuracy_table())
    return text


def main() -> int:
    check = "--check" in sys.argv
    stale, failed = [], False
    for path in documents():
        text = path.read_text()
        errors: list[str] = []
        new = regenerated(text, errors)
        for e in errors:
            print(f"{path.relative_to(ROOT)}: {e}", file=sys.stderr)
        failed = failed or bool(errors)
        if new != text:
            stale.append(path)
            if not check:
                path.write_text(new)
    for path in stale:
        print(f"{'stale' if check else 'rewritten'}: {path.relative_to(ROOT)}", file=sys.stderr)
    return 2 if failed else 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
