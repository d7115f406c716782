"""Lines that fit the terminal: wrapped at its width with a hanging indent, commands never broken.

An answer is a list of lines. Prose lines longer than the width are wrapped at spaces, each
continuation indented under the text after its label (``Speed:    ``) or under the line's own
indent; a :class:`Command` (something to paste: ``fitcheck …``, ``vllm serve …``) is left whole,
because a newline inside it would break the paste (the terminal folds it, and copying a folded
line gives it back whole). The width is the edge's to find (:func:`terminal_width`); ``None``
leaves every line as it is (a pipe, a file, a test that reads the bytes).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
from collections.abc import Iterable, Mapping

# Narrowest width wrapped to: below it, a hanging indent leaves no room for the text.
MIN_WIDTH = 40

_LABEL = re.compile(r"^(?:[A-Z][A-Za-z ()]*:\s+|\s+(?:\d+\.\s+)?)")


class Command(str):
    """A line to paste as it is: never wrapped."""

    __slots__ = ()


def terminal_width(env: Mapping[str, str] | None = None, stream=None) -> int | None:
    """The columns to wrap at: ``$COLUMNS`` when set to a number, else the terminal's width when
    the output is one, else ``None`` (do not wrap)."""
    env = os.environ if env is None else env
    columns = env.get("COLUMNS", "").strip()
    if columns.isdigit() and 0 < int(columns) < 10_000:
        return max(MIN_WIDTH, int(columns))
    stream = sys.stdout if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty:
        return None
    return max(MIN_WIDTH, shutil.get_terminal_size((80, 24)).columns)


def wrap_line(line: str, width: int | None) -> list[str]:
    """``line`` as one or more lines of at most ``width`` columns (a word longer than that stays whole)."""
    if width is None or len(line) <= width or isinstance(line, Command):
        return [line]
    match = _LABEL.match(line)
    indent = " " * min(len(match.group()) if match else 0, width // 2)
    out: list[str] = []
    rest = line
    first = True
    while len(rest) > width:
        cut = rest.rfind(" ", len(indent) + 1 if not first else 1, width + 1)
        if cut <= len(indent) or not rest[:cut].strip():
            cut = rest.find(" ", width)
            if cut < 0:
                break
        out.append(rest[:cut].rstrip())
        rest = indent + rest[cut:].lstrip()
        first = False
    out.append(rest)
    return out


def fit(lines: Iterable[str], width: int | None) -> list[str]:
    """Every line of ``lines`` (each may hold newlines) wrapped to ``width``."""
    out: list[str] = []
    for line in lines:
        parts = line.split("\n") if "\n" in line else [line]
        for part in parts:
            out += wrap_line(Command(part) if isinstance(line, Command) else part, width)
    return out


def wants_ascii(env: Mapping[str, str] | None = None, stream=None, sample: str = "█▓▒░│─") -> bool:
    """Draw pictures in ASCII: ``TERM=dumb``, or an output whose encoding cannot hold ``sample``
    (``PYTHONIOENCODING=latin-1``, a cp1252 console)."""
    env = os.environ if env is None else env
    if env.get("TERM") == "dumb":
        return True
    stream = sys.stdout if stream is None else stream
    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        sample.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return True
    return False


_TABULATE = threading.Lock()


def table(rows, headers, **options) -> Command:
    """``tabulate``'s "simple" table with each column as wide as its widest cell or header (tabulate pads every
    header by 2 more: 12 columns of a 6-column answer), as one :class:`Command` so it is never wrapped."""
    import tabulate as tabulate_module

    with _TABULATE:  # MIN_PADDING is the module's; a server answers from several threads
        saved, tabulate_module.MIN_PADDING = tabulate_module.MIN_PADDING, 0
        try:
            text = tabulate_module.tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True,
                                            **options)
        finally:
            tabulate_module.MIN_PADDING = saved
    return Command(text)
