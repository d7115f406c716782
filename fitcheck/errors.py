"""The one error type of fitcheck's core.

Library code raises :class:`FitcheckError` (or a subclass) with a one-line message and, where one
exists, a hint.  The CLI turns it into that line on stderr and the exit code it carries; nothing
else in fitcheck prints a traceback for bad input.
"""

from __future__ import annotations

import re

# Exit codes: a contract for scripts and CI (README lists them).
EXIT_FITS = 0
EXIT_DOES_NOT_FIT = 1
EXIT_BAD_INPUT = 2
EXIT_UNKNOWN = 3
# An internal error (a bug in fitcheck, not a verdict): sysexits.h's EX_SOFTWARE, so a CI job never reads a
# crash as "does not fit" (1) or "bad input" (2).
EXIT_INTERNAL_ERROR = 70


class FitcheckError(Exception):
    """A problem the user can act on: bad input, an unreadable file, an unknown model."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")


def redact_credentials(text: str) -> str:
    """``text`` with the user:password (or token) part of every URL replaced: ``http://***@host/...``."""
    return _URL_CREDENTIALS.sub(r"\1***@", text)
