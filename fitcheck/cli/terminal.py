"""What reaches the terminal: no control sequence from a file, and any console encoding.

Names, dates and versions come from files a user may not have written (a profile, a receipt, a
package's METADATA, a model's config), and an ESC or OSC sequence in one could retitle the
terminal, move the cursor or clear the screen.  While a command runs, ``sys.stdout`` and
``sys.stderr`` are :class:`SafeStream`: every C0 and C1 control character but newline and tab is
written as a visible escape (``\\x1b``), so text output shows what the file holds and JSON, whose
strings ``json.dumps`` already escapes, is unchanged.  The one sequence kept is SGR colour
(``ESC [ … m``, nothing else), and only on a terminal: the colour ``fitcheck check --plan`` paints.

A console that cannot encode a character (``PYTHONIOENCODING=latin-1``, a Windows cp1252
console) gets an ASCII stand-in (``→`` as ``->``, ``—`` as ``-``, ``≥`` as ``>=``) or ``?``,
instead of a UnicodeEncodeError.
"""

from __future__ import annotations

import codecs
import io
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TextIO

# Stand-ins for the characters fitcheck's own text uses, for consoles that cannot encode them.
ASCII_STAND_INS = {
    "→": "->", "←": "<-", "—": "-", "–": "-", "…": "...", "×": "x", "≥": ">=", "≤": "<=", "≈": "~", "±": "+/-",
    "·": "*", "•": "*", "µ": "u", "−": "-", "‘": "'", "’": "'", "“": '"', "”": '"', "✓": "ok", "✗": "x",
    "█": "#", "▌": "|", "░": ".", "▏": "|", "│": "|", "─": "-", "└": "`", "├": "|", "°": " deg", "²": "^2",
    "\u00a0": " ", "\u202f": " ", "\u2009": " ",
}
ERROR_HANDLER = "fitcheck-ascii"
_CONTROL = re.compile(r"\x1b\[[0-9;]*m|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _stand_in(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    bad = error.object[error.start:error.end]
    return "".join(ASCII_STAND_INS.get(ch, "?") for ch in bad), error.end


codecs.register_error(ERROR_HANDLER, _stand_in)


def escape_controls(text: str, keep_colour: bool = False) -> str:
    """``text`` with every control character but newline and tab shown as an escape; SGR colour kept if asked."""
    def visible(match: re.Match[str]) -> str:
        found = match.group()
        if len(found) > 1:
            return found if keep_colour else found.encode("unicode_escape").decode("ascii")
        return f"\\x{ord(found):02x}"

    return _CONTROL.sub(visible, text)


class SafeStream(io.TextIOBase):
    """A text stream writing through to ``raw`` with control characters escaped and unencodable ones replaced."""

    def __init__(self, raw: TextIO) -> None:
        super().__init__()
        self._raw = raw
        isatty = getattr(raw, "isatty", None)
        self._colour = bool(isatty and isatty())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._raw, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return ERROR_HANDLER

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # click probes a text stream with write(b""): it must refuse bytes
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        safe = escape_controls(text, keep_colour=self._colour)
        try:
            self._raw.write(safe)
        except UnicodeEncodeError:
            self._raw.write(safe.encode(self.encoding, ERROR_HANDLER).decode(self.encoding, "replace"))
        return len(text)

    def writable(self) -> bool:
        return True

    @property
    def buffer(self) -> _SafeBuffer:
        """Where click.echo writes bytes (shell completion's output): escaped the same way."""
        return _SafeBuffer(self)

    def flush(self) -> None:
        self._raw.flush()

    def isatty(self) -> bool:
        return self._colour

    def fileno(self) -> int:
        return self._raw.fileno()


class _SafeBuffer(io.RawIOBase):
    def __init__(self, text: SafeStream) -> None:
        super().__init__()
        self._text = text

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        self._text.flush()


@contextmanager
def safe_streams() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` as :class:`SafeStream` for the duration (restored after)."""
    saved = sys.stdout, sys.stderr
    sys.stdout = SafeStream(saved[0]) if saved[0] is not None else None
    sys.stderr = SafeStream(saved[1]) if saved[1] is not None else None
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                with suppress(OSError, ValueError):
                    stream.flush()
        sys.stdout, sys.stderr = saved
