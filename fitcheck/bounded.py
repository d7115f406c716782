"""Bounded reads and bounded numbers: what every reader of user input goes through.

Files fitcheck reads (plans, profiles, configs, index files, model headers) are regular files of a
capped size, opened without blocking (a FIFO or a device never hangs a run, ``/dev/zero`` never
fills memory).  Numbers are checked against a range *before* any arithmetic or formatting, so a
400-digit integer or a non-finite float is one line of bad input, not an OverflowError.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from typing import Any, BinaryIO

from fitcheck.errors import FitcheckError

KiB = 1024
MiB = 1024**2

# Size caps (bytes), one home each.  A real plan or profile is a few KiB; the largest real
# config.json files (multimodal, with every sub-config) are ~100 KiB; Llama-405B's
# model.safetensors.index.json is ~100 KiB; so 16 MiB leaves room without letting a file fill memory.
MAX_TEXT_FILE_BYTES = 16 * MiB
# safetensors headers: the format's own limit (safetensors' MAX_HEADER_SIZE, 100 MB); fitcheck refuses
# anything over 100 MiB-ish before reading it.
MAX_SAFETENSORS_HEADER_BYTES = 100_000_000
# Nesting fitcheck accepts in a JSON or TOML document (real configs nest ~4 deep).
MAX_NESTING = 64


# Longest path fitcheck takes from a variable or an option (Linux's PATH_MAX), and longest component (NAME_MAX).
MAX_PATH_CHARS = 4096
MAX_NAME_CHARS = 255


def checked_path(value: str, name: str) -> str:
    """``value`` if it can name a file here; FitcheckError (one line naming ``name``) for a path over
    PATH_MAX, a component over NAME_MAX, or a NUL: what the system call would end in "File name too long"."""
    if len(value) > MAX_PATH_CHARS:
        raise FitcheckError(f"{name} is {len(value):,} characters long: not a path (at most {MAX_PATH_CHARS:,})")
    if "\x00" in value:
        raise FitcheckError(f"{name} holds a NUL character: not a path")
    longest = max((len(part) for part in re.split(r"[/\\]", value)), default=0)
    if longest > MAX_NAME_CHARS:
        raise FitcheckError(f"{name} has a name of {longest:,} characters: not a path (at most {MAX_NAME_CHARS})")
    return value


def short_number(value: object, limit: int = 24) -> str:
    """A number as text, shortened for a message: '1234…(400 digits)' instead of 400 digits."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            text = str(value)
        except ValueError:  # over Python's int-to-str digit limit
            return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
        if len(text) > limit:
            return f"{text[:8]}…({len(text.lstrip('-'))} digits)"
        return text
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def bounded_int(value: object, name: str, low: int, high: int) -> int:
    """``value`` as an int within [low, high]; FitcheckError naming ``name`` otherwise (no float math)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise FitcheckError(f"{name} must be a whole number, got {short_number(value)}")
    if not low <= value <= high:
        raise FitcheckError(f"{name} must be between {low:,} and {high:,}, got {short_number(value)}")
    return value


def finite_float(value: object, name: str, low: float | None = None, high: float | None = None) -> float:
    """``value`` as a finite float within [low, high]; FitcheckError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FitcheckError(f"{name} must be a number, got {short_number(value)}")
    if isinstance(value, int) and abs(value) > 2**63:
        raise FitcheckError(f"{name} is out of range, got {short_number(value)}")
    result = float(value)
    if not math.isfinite(result):
        raise FitcheckError(f"{name} must be a finite number, got {value!r}")
    if (low is not None and result < low) or (high is not None and result > high):
        lo = "" if low is None else f"{low:g}"
        hi = "" if high is None else f"{high:g}"
        raise FitcheckError(f"{name} must be between {lo or '-inf'} and {hi or 'inf'}, got {short_number(value)}")
    return result


def open_regular_file(path: str | os.PathLike[str], what: str) -> BinaryIO:
    """A regular file opened for binary reading without blocking on a FIFO; FitcheckError otherwise."""
    where = os.fspath(path)
    try:
        fd = os.open(where, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FitcheckError(f"{where}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise FitcheckError(f"{where}: cannot read {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "it is a folder" if stat.S_ISDIR(mode) else "not a regular file (a pipe, socket or device)"
        raise FitcheckError(f"{where}: cannot read {what}: {kind}")
    return os.fdopen(fd, "rb")


def read_regular_file(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_TEXT_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; FitcheckError naming ``what`` otherwise.

    Opened as :func:`open_regular_file` opens it (a FIFO or device is refused instead of blocking the
    run); the size is checked before reading and the read itself stops at ``max_bytes + 1``.
    """
    where = os.fspath(path)
    with open_regular_file(path, what) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise FitcheckError(f"{where}: {what} is too large ({size:,} bytes; at most {max_bytes:,})")
            data = f.read(max_bytes + 1)
        except OSError as exc:
            raise FitcheckError(f"{where}: cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise FitcheckError(f"{where}: {what} is too large (more than {max_bytes:,} bytes)")
    return data


def check_output_target(path: str | os.PathLike[str], what: str) -> None:
    """Refuse, before any work, an output path that exists and is not a regular file (a FIFO would block)."""
    where = os.fspath(path)
    try:
        mode = os.stat(where).st_mode
    except OSError:
        return  # missing (to be created) or unreadable: the write says why
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a pipe, socket or device)"
        raise FitcheckError(f"{what} {where}: cannot write: {kind}")


def write_regular_file(path: str | os.PathLike[str], text: str, what: str) -> None:
    """Write ``text`` to a regular file (created or truncated); a FIFO, socket or device is refused, never waited on."""
    _write_regular(path, text, what, os.O_TRUNC)


def append_regular_file(path: str | os.PathLike[str], text: str, what: str) -> None:
    """Append ``text`` to a regular file (created if missing); a FIFO, socket or device is refused, never waited on."""
    _write_regular(path, text, what, os.O_APPEND)


def _write_regular(path: str | os.PathLike[str], text: str, what: str, how: int) -> None:
    where = os.fspath(path)
    check_output_target(where, what)
    flags = os.O_WRONLY | os.O_CREAT | how | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(where, flags, 0o666)
    except OSError as exc:
        raise FitcheckError(f"{what} {where}: cannot write: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # it became one between the check and the open
            raise FitcheckError(f"{what} {where}: cannot write: not a regular file (a pipe, socket or device)")
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data):]
    except OSError as exc:
        raise FitcheckError(f"{what} {where}: cannot write: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_tail(path: str | os.PathLike[str], what: str, max_bytes: int) -> bytes:
    """The last ``max_bytes`` of a regular file (all of a smaller one): for append-only logs whose newest
    lines matter.  Opened as :func:`open_regular_file` opens it; FitcheckError where it is not a regular file."""
    with open_regular_file(path, what) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                f.seek(size - max_bytes)
                f.readline(max_bytes)  # the cut line's end
            return f.read(max_bytes)
        except OSError as exc:
            raise FitcheckError(f"{os.fspath(path)}: cannot read {what}: {exc.strerror or exc}") from None


def read_text_file(path: str | os.PathLike[str], what: str, expected: str,
                   max_bytes: int = MAX_TEXT_FILE_BYTES) -> str:
    """A regular UTF-8 text file (a leading BOM dropped); FitcheckError when it is not text."""
    data = read_regular_file(path, what, max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise FitcheckError(f"{os.fspath(path)}: not a text file (expected {expected})") from None


_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_LONG_DIGITS = re.compile(r"[0-9]{31,}")


def nesting_depth_exceeds(text: str, limit: int = MAX_NESTING) -> bool:
    """Whether brackets nest deeper than ``limit`` (brackets inside strings count too: conservative).

    Each pass deletes the innermost ``[]``/``{}`` pairs, so ``limit`` passes of C-speed string
    operations decide it, however long the text.
    """
    only = _NOT_BRACKETS.sub("", text)
    for _ in range(limit):
        if not only:
            return False
        reduced = only.replace("[]", "").replace("{}", "")
        if reduced == only:
            return False  # unbalanced brackets, not depth: the parser reports them
        only = reduced
    return "[]" in only or "{}" in only


def _bounded_json_int(text: str) -> int:
    if len(text.lstrip("-")) > 30:
        raise ValueError(f"integer with {len(text.lstrip('-'))} digits")
    return int(text)


def _bounded_json_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def json_loads_bounded(text: str) -> Any:
    """``json.loads`` refusing (ValueError) deep nesting, integers over 30 digits, NaN and Infinity; BOM dropped."""
    text = text.removeprefix("\ufeff")
    if nesting_depth_exceeds(text):
        raise ValueError(f"nested more than {MAX_NESTING} levels deep")
    # The int hook only when a long digit run is there at all (it costs ~5 µs an integer).
    parse_int = _bounded_json_int if _LONG_DIGITS.search(text) else None
    try:
        return json.loads(text, parse_int=parse_int, parse_constant=_bounded_json_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def loads_json(text: str | bytes, where: str, expected: str = "JSON") -> Any:
    """``json.loads`` that refuses deep nesting, integers over 30 digits, NaN and Infinity, with one line."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise FitcheckError(f"{where}: not valid {expected} (not UTF-8 text)") from None
    text = text.removeprefix("\ufeff")
    try:
        return json_loads_bounded(text)
    except json.JSONDecodeError as exc:
        raise FitcheckError(f"{where}: not valid {expected}: {exc.msg} (line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:
        raise FitcheckError(f"{where}: not valid {expected}: {str(exc).splitlines()[0][:120]}") from None


def check_toml_numbers(doc: Any, where: str, depth: int = 0) -> None:
    """Refuse a parsed TOML document with integers over 30 digits, non-finite floats or deep nesting."""
    if depth > MAX_NESTING:
        raise FitcheckError(f"{where}: values nested more than {MAX_NESTING} levels deep")
    if isinstance(doc, dict):
        for value in doc.values():
            check_toml_numbers(value, where, depth + 1)
    elif isinstance(doc, list):
        for value in doc:
            check_toml_numbers(value, where, depth + 1)
    elif isinstance(doc, bool):
        return
    elif isinstance(doc, int) and abs(doc) >= 10**30:
        raise FitcheckError(f"{where}: number out of range: {short_number(doc)}")
    elif isinstance(doc, float) and not math.isfinite(doc):
        raise FitcheckError(f"{where}: {doc!r} is not a usable number")


def loads_toml(text: str, where: str, what: str = "file", check_numbers: bool = True) -> dict:
    """``tomllib.loads`` with deep nesting, huge integers and non-finite floats refused, one line each.

    ``check_numbers=False`` leaves numbers to a schema that names the field itself (profiles).
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    if nesting_depth_exceeds(text):
        raise FitcheckError(f"{where}: not a usable {what}: values nested too deeply (more than {MAX_NESTING} levels)")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FitcheckError(f"{where}: not valid TOML: {exc}") from None
    except (ValueError, RecursionError) as exc:  # an integer over Python's digit limit, deep nesting
        raise FitcheckError(f"{where}: not a usable {what}: {str(exc).splitlines()[0][:120]}") from None
    if check_numbers:
        check_toml_numbers(doc, where)
    return doc
