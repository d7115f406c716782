"""Receipts: one JSON line per measurement, kept in the user's cache, never sent anywhere.

    $FITCHECK_CACHE_DIR/receipts.jsonl, else $XDG_CACHE_HOME/fitcheck/receipts.jsonl,
    else ~/.cache/fitcheck/receipts.jsonl

A receipt holds the model, the request (the check document's ``request``), the machine's
fingerprint (a hash of what decides memory: CPU model, RAM, GPU names and sizes, OS), the library
versions, and the measured and estimated peaks with the error.  ``fitcheck measure --receipts``
lists them; ``fitcheck check`` names the receipt that matches its model, request and machine;
``--export FILE`` copies them to a file (the calibration input of
``python -m benchmarks.measure.compare --receipts FILE``).  No torch here: check reads it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path

from fitcheck.bounded import append_regular_file, json_loads_bounded, read_tail
from fitcheck.errors import FitcheckError
from fitcheck.machine import Machine, known

SCHEMA = "fitcheck.receipt/1"
FILE_NAME = "receipts.jsonl"
MAX_LINE = 1 << 20       # characters; a longer line is not a receipt fitcheck wrote: skipped
MAX_RECEIPTS = 10_000    # receipts kept at most: the newest (one a measurement, so years of runs)
# Bytes read at most, from the end (the newest receipts): a receipt is ~2 KiB, so ~16,000 of them.
MAX_FILE_BYTES = 32 * 2**20
# A byte count in a receipt: a whole number from 0 to 2**60 (an exabyte); anything else is not fitcheck's.
_MAX_BYTES = 2**60
# Request keys that do not change memory (or that check and measure fill differently): not matched.
_UNMATCHED_KEYS = frozenset({"headroom_pct", "gpu_memory_utilization", "prompt_tokens"})


def receipts_path(env: Mapping[str, str] | None = None, home: str | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("FITCHECK_CACHE_DIR"):
        return Path(env["FITCHECK_CACHE_DIR"]) / FILE_NAME
    base = env.get("XDG_CACHE_HOME") or os.path.join(home or os.path.expanduser("~"), ".cache")
    return Path(base) / "fitcheck" / FILE_NAME


def fingerprint(machine: Machine) -> str:
    """12 hex digits that change when the memory-relevant hardware changes (not free memory)."""
    gpus = [(g.vendor, g.name if known(g.name) else "?", _quarter_gib(g.memory_total_bytes)) for g in machine.gpus]
    parts = {
        "cpu": machine.cpu.model if known(machine.cpu.model) else "?",
        "arch": machine.cpu.architecture,
        "ram_quarter_gib": _quarter_gib(machine.memory.total_bytes),
        "gpus": gpus,
        "os": machine.host.os,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _quarter_gib(value) -> int | str:
    """A size in quarter-GiB steps (a reading that drifts by a few MiB keeps its fingerprint)."""
    return int(value) // 2**28 if isinstance(value, int) and known(value) else "?"


def request_key(request: Mapping) -> dict:
    """The part of a check document's request that decides memory."""
    return {k: v for k, v in request.items() if k not in _UNMATCHED_KEYS}


def append(receipt: dict, path: Path | None = None) -> Path:
    """Append one receipt; returns the file.  An unwritable cache is reported by the caller."""
    path = path or receipts_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        append_regular_file(path, json.dumps({"schema": SCHEMA, **receipt}, sort_keys=True) + "\n", "receipts file")
    except FitcheckError as exc:
        raise OSError(exc.message) from None
    return path


def read(path: Path | None = None) -> Iterator[dict]:
    """Every well-formed receipt of the file, oldest first; other lines are skipped.

    Bounded like every reader of a file: a regular file only (a FIFO or ``/dev/zero`` is skipped, never
    waited on), its last MAX_FILE_BYTES and newest MAX_RECEIPTS at most, lines over MAX_LINE skipped, JSON
    nesting, long integers, NaN and Infinity refused, and the figures a receipt is read for checked
    (:func:`well_formed`).
    """
    path = path or receipts_path()
    try:
        data = read_tail(path, "receipts file", MAX_FILE_BYTES)
    except FitcheckError:
        return
    found: deque[dict] = deque(maxlen=MAX_RECEIPTS)   # the newest
    for line in data.decode("utf-8", "replace").splitlines():
        if len(line) > MAX_LINE:
            continue
        try:
            receipt = json_loads_bounded(line)
        except ValueError:
            continue
        if well_formed(receipt):
            found.append(receipt)
    yield from found


def well_formed(receipt: object) -> bool:
    """A receipt as fitcheck writes one: its schema, ``measured``, ``estimated`` and ``request`` objects, peaks that
    are byte counts in range, a finite error, and text where text is shown."""
    if not isinstance(receipt, dict) or receipt.get("schema") != SCHEMA:
        return False
    if not isinstance(receipt.get("measured"), dict):
        return False
    estimated = receipt.get("estimated", {})
    if not isinstance(estimated, dict):
        return False
    if not isinstance(receipt.get("request", {}), dict):
        return False
    if not all(v is None or _byte_count(v) for v in (receipt["measured"].get("peak_bytes"),
                                                    estimated.get("peak_bytes"))):
        return False
    error = receipt.get("error_pct")
    if error is not None and not (isinstance(error, (int, float)) and not isinstance(error, bool)
                                  and math.isfinite(error) and abs(error) < 1e6):
        return False
    return all(isinstance(receipt.get(k, ""), str) for k in ("date", "model", "status", "machine_fingerprint"))


def _byte_count(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value) and 0 <= value <= _MAX_BYTES
    return isinstance(value, int) and 0 <= value <= _MAX_BYTES


def matching(model_id: str, request: Mapping, machine: Machine, path: Path | None = None) -> dict | None:
    """The newest completed receipt for this model, request and machine, or None."""
    key, fp = request_key(request), fingerprint(machine)
    found = None
    for r in read(path):
        if (r.get("model") == model_id and r.get("machine_fingerprint") == fp and r.get("status") == "measured"
                and request_key(r.get("request") or {}) == key):
            found = r
    return found


def receipt_line(receipt: dict) -> str:
    """'on this machine on DATE: X GiB peak (estimate Y GiB, +Z %; ...)', after 'Measured '."""
    measured = receipt["measured"].get("peak_bytes") or 0
    estimated = receipt.get("estimated", {}).get("peak_bytes") or 0
    error = receipt.get("error_pct")
    err = f", {error:+.1f} %" if isinstance(error, (int, float)) else ""
    return (f"on this machine on {str(receipt.get('date', ''))[:10]}: {measured / 2**30:.2f} GiB peak "
            f"(estimate {estimated / 2**30:.2f} GiB{err}; fitcheck measure --receipts)")
