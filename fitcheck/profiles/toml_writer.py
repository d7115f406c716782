"""A small TOML writer for fitcheck's machine documents (no tomli_w dependency).

It writes the subset the schema needs: strings, integers, floats, booleans, arrays of those,
tables and arrays of tables, nested to any depth.  ``None`` values are skipped (TOML has no
null; the schema records unknown facts in an ``unknown`` table instead).  What it writes is
read back unchanged by :mod:`tomllib` (Python 3.11+) / ``tomli``: tests round-trip it.

Layout follows TOML 1.0 (https://toml.io/en/v1.0.0): in every table, plain keys come first,
then sub-tables (``[a.b]``), then arrays of tables (``[[a.c]]``), because a key written after a
table header would belong to that table.
"""

from __future__ import annotations

import math
import re
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")

# TOML basic strings: escape the quote, the backslash and every control character
# (U+0000-U+001F and U+007F), https://toml.io/en/v1.0.0#string
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def dumps(document: dict[str, Any], header: str = "") -> str:
    """The TOML text of ``document``; ``header`` lines are written first as ``#`` comments."""
    lines: list[str] = [f"# {line}".rstrip() for line in header.splitlines()]
    _write_table(document, (), lines, array_item=False)
    return "\n".join(lines).strip("\n") + "\n"


def _write_table(table: dict[str, Any], path: tuple[str, ...], lines: list[str], array_item: bool) -> None:
    plain = {k: v for k, v in table.items() if v is not None and not _is_table(v) and not _is_table_array(v)}
    tables = {k: v for k, v in table.items() if _is_table(v)}
    arrays = {k: v for k, v in table.items() if _is_table_array(v)}

    if path:
        if lines:
            lines.append("")
        dotted = ".".join(_key(p) for p in path)
        lines.append(f"[[{dotted}]]" if array_item else f"[{dotted}]")
    for key, value in plain.items():
        lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in tables.items():
        _write_table(value, (*path, key), lines, array_item=False)
    for key, items in arrays.items():
        for item in items:
            _write_table(item, (*path, key), lines, array_item=True)


def _is_table(value: Any) -> bool:
    return isinstance(value, dict)


def _is_table_array(value: Any) -> bool:
    # An empty list is written inline as `key = []`.
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, dict) for v in value)


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)  # fullmatch: `$` would accept "a\n"


def _value(value: Any) -> str:
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)  # shortest text that reads back as the same float
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else list(value)
        return "[" + ", ".join(_value(v) for v in items) + "]"
    if isinstance(value, dict):  # only reached for dicts inside arrays: inline table
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items() if v is not None) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML: {value!r}")


def _string(text: str) -> str:
    out = []
    for ch in text:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'
