"""Reading small system files (/proc, /sys) without ever raising: None means 'not readable'."""

from __future__ import annotations

import os


def read_text(path: str) -> str | None:
    """The file's text, or None when it is missing or unreadable (never raises)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except (OSError, ValueError):
        return None


def read_int(path: str) -> int | None:
    """The file's first word as an integer (decimal or 0x-hex), or None."""
    text = read_text(path)
    if text is None or not text.split():
        return None
    try:
        return int(text.split()[0], 0)
    except ValueError:
        return None


def under(root: str, absolute_path: str) -> str:
    """``absolute_path`` re-rooted under ``root`` ('/' leaves it as is): tests pass a tmp tree."""
    if root in ("", "/"):
        return absolute_path
    return os.path.join(root, absolute_path.lstrip("/"))
