"""Release numbers as typed and as packages report them: parsed once, compared as tuples."""

from __future__ import annotations

from fitcheck.bounded import short_number
from fitcheck.errors import FitcheckError


def parse_transformers_version(text: str) -> tuple[int, int]:
    """(major, minor) of a version such as '4.38.2' or '4.46'; bad input is a FitcheckError."""
    parts = str(text).strip().lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        major = minor = -1
    if not 2 <= major <= 99 or not 0 <= minor <= 999:
        raise FitcheckError(f"--transformers-version must look like 4.46 or 4.38.2, got {short_number(str(text))}")
    return major, minor


def version_tuple(text: str) -> tuple[int, ...]:
    """'550.54.14' -> (550, 54, 14); non-numeric parts end the tuple ('2.5.1+cu124' -> (2, 5, 1))."""
    out = []
    for part in str(text).split("+")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)
