"""Reading small system files (/proc, /sys) without ever raising: None means 'not readable'."""

from __future__ import annotations

import os

from fitcheck.machine import Unknown

# The most bytes a reading may claim and be believed (64 PiB): above any machine's RAM or any GPU's
# memory; 2^70 bytes of VRAM or a negative MemTotal is a broken reading, shown as Unknown(reason).
MAX_PLAUSIBLE_BYTES = 2**56
# A /proc or /sys file fitcheck reads is small (/proc/cpuinfo of a 512-thread host is ~1 MiB).
MAX_SYSTEM_FILE_BYTES = 4 * 1024**2


def read_text(path: str) -> str | None:
    """The file's text, or None when it is missing or unreadable (never raises)."""
    from fitcheck.bounded import open_regular_file
    from fitcheck.errors import FitcheckError

    try:
        with open_regular_file(path, "system file") as handle:  # a FIFO (a faked /proc) is refused, never waited on
            return handle.read(MAX_SYSTEM_FILE_BYTES).decode("utf-8", "replace")
    except (OSError, ValueError, FitcheckError):
        return None


def read_int(path: str) -> int | None:
    """The file's first word as an integer (decimal or 0x-hex), or None."""
    text = read_text(path)
    if text is None or not text.split():
        return None
    word = text.split()[0]
    if len(word) > 40:  # no real counter has more digits; int() of thousands is slow or refused
        return None
    try:
        return int(word, 0)
    except ValueError:
        return None


def plausible_bytes(value: object, what: str) -> int | Unknown:
    """``value`` when it is a whole number of bytes a machine can have; Unknown(reason) otherwise."""
    if isinstance(value, Unknown):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        return Unknown(f"{what}: not a number ({type(value).__name__})")
    if value < 0:
        return Unknown(f"{what}: negative reading ({value})")
    if value > MAX_PLAUSIBLE_BYTES:
        digits = len(str(value)) if value < 10**4000 else 4000
        return Unknown(f"{what}: impossible reading ({digits}-digit number of bytes)")
    return value


def small_index(token: str, limit: int = 1_000_000) -> int | None:
    """A device index as typed in *_VISIBLE_DEVICES: ASCII digits only ('²' is not one), below ``limit``."""
    if not token.isascii() or not token.isdigit() or len(token) > 7:
        return None
    value = int(token)
    return value if value < limit else None


def under(root: str, absolute_path: str) -> str:
    """``absolute_path`` re-rooted under ``root`` ('/' leaves it as is): tests pass a tmp tree."""
    if root in ("", "/"):
        return absolute_path
    return os.path.join(root, absolute_path.lstrip("/"))
