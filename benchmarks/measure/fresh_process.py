"""Run one measurement in a fresh Python process and read back its result line.

A measurement's memory must not include what an earlier one left behind (allocator caches, glibc's
heap, imported modules), so each runs as ``python -m MODULE --one ARG``, which prints its result as
one ``RESULT {json}`` line among whatever else the libraries print.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

MARK = "RESULT "


def emit(row: dict) -> None:
    """Print the result line (in the child)."""
    print(MARK + json.dumps(row))


def run_fresh(module: str, arg: str, label: str) -> dict | None:
    """The child's result, or None after printing why there is none (its stderr's tail)."""
    proc = subprocess.run([sys.executable, "-m", module, "--one", arg], capture_output=True, text=True)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)), None)
    if line is None:
        print(f"{label}: failed (exit {proc.returncode})\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(line[len(MARK):])


def write_fresh_rows(out: Path, fields: list[str], module: str, names: Iterable[str],
                     describe: Callable[[dict], str], append: bool = False) -> None:
    """Run ``module --one NAME`` for each name in a fresh process and write its row to ``out`` as it
    comes (a row survives a later case's time limit), printing ``describe(row)`` for each."""
    out.parent.mkdir(parents=True, exist_ok=True)
    new = not (append and out.exists())
    with out.open("w" if new else "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        if new:
            writer.writeheader()
        for name in names:
            row = run_fresh(module, name, name)
            if not row:
                continue
            writer.writerow(row)
            f.flush()
            print(describe(row), flush=True)
