"""The RAM bandwidth `fitcheck probe --bench` measured, kept per machine in the user's cache and used
by later answers for this machine (its CPU speed), with the date it was measured.

    <cache>/bandwidth.json      (<cache>: fitcheck.user_config.cache_dir)

    {"schema": "fitcheck.bandwidth/1", "fitcheck_version": str,
     "machines": {KEY: {"bytes_per_s": int, "measured_on": "YYYY-MM-DD", "how": str,
                        "cpu": str, "ram_bytes": int, "by": str}}}

"by" says what measured it: "probe --bench" (the default of a file without it), or "fitcheck" when an answer
on this machine measured it by itself (fitcheck.probe.bench.with_bandwidth_measured_now).

KEY is :func:`machine_key`: 12 hex digits of what decides RAM bandwidth and its measurement (CPU
model, architecture, logical CPUs, installed RAM in GiB, OS), so a reading follows the machine,
not the host name, and a RAM or CPU upgrade starts afresh.  A file fitcheck did not write (too
large, not JSON, wrong shapes) is ignored on reading and replaced on the next --bench.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from fitcheck import __version__
from fitcheck.bounded import loads_json, read_regular_file, write_regular_file
from fitcheck.errors import FitcheckError
from fitcheck.machine import Machine, known
from fitcheck.user_config import cache_dir

SCHEMA = "fitcheck.bandwidth/1"
FILE_NAME = "bandwidth.json"
MAX_FILE_BYTES = 1 << 20
MAX_MACHINES = 64          # readings kept (the newest)
SOURCE_PREFIX = "measured"
BY_PROBE_BENCH = "probe --bench"
MAX_BY_CHARS = 40


@dataclass(frozen=True)
class StoredBandwidth:
    bytes_per_s: int
    measured_on: dt.date
    how: str                   # the measurement (bench.BandwidthReading.source)
    by: str = BY_PROBE_BENCH   # what measured it: probe --bench, or fitcheck by itself

    @property
    def source(self) -> str:
        """What the answers say: 'measured 2026-12-01 by probe --bench: memmove of ...'."""
        return f"{SOURCE_PREFIX} {self.measured_on.isoformat()} by {self.by}" + (f": {self.how}" if self.how else "")


def cache_path(env: Mapping[str, str] | None = None) -> Path:
    return cache_dir(env) / FILE_NAME


def machine_key(machine: Machine) -> str:
    cpu = machine.cpu
    parts = {
        "cpu": cpu.model if known(cpu.model) else "?",
        "arch": cpu.architecture,
        "logical": cpu.logical_cores if known(cpu.logical_cores) else "?",
        "ram_gib": round(machine.memory.total_bytes / 2**30) if isinstance(machine.memory.total_bytes, int)
        and known(machine.memory.total_bytes) else "?",
        "os": machine.host.os,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _read(path: Path) -> dict:
    try:
        doc = loads_json(read_regular_file(path, "bandwidth cache", MAX_FILE_BYTES), str(path))
    except FitcheckError:
        return {}
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("machines"), dict):
        return {}
    return doc["machines"]


def load(machine: Machine, env: Mapping[str, str] | None = None) -> StoredBandwidth | None:
    """This machine's stored reading, or None (none kept, or the file is not one fitcheck wrote)."""
    path = cache_path(env)
    if not path.exists():
        return None
    entry = _read(path).get(machine_key(machine))
    if not isinstance(entry, dict):
        return None
    bw, on, how = entry.get("bytes_per_s"), entry.get("measured_on"), entry.get("how", "")
    by = entry.get("by", BY_PROBE_BENCH)
    if not isinstance(bw, int) or isinstance(bw, bool) or not 0 < bw < 10**15 or not isinstance(on, str) \
            or not isinstance(how, str) or not isinstance(by, str):
        return None
    try:
        day = dt.date.fromisoformat(on)
    except ValueError:
        return None
    return StoredBandwidth(bw, day, how[:200], by[:MAX_BY_CHARS] if by.isprintable() and by else BY_PROBE_BENCH)


def store(machine: Machine, bytes_per_s: int, how: str, *, today: dt.date | None = None,
          env: Mapping[str, str] | None = None, by: str = BY_PROBE_BENCH) -> Path:
    """Keep ``bytes_per_s`` for this machine (dated ``today``, measured ``by``); the other machines' readings are
    kept."""
    path = cache_path(env)
    machines = _read(path) if path.exists() else {}
    machines.pop(machine_key(machine), None)
    machines[machine_key(machine)] = {
        "bytes_per_s": int(bytes_per_s), "measured_on": (today or dt.date.today()).isoformat(), "how": how,
        "cpu": machine.cpu.model if known(machine.cpu.model) else None,
        "ram_bytes": machine.memory.total_bytes if known(machine.memory.total_bytes) else None,
        "by": by,
    }
    kept = dict(list(machines.items())[-MAX_MACHINES:])
    try:
        os.makedirs(path.parent, exist_ok=True)
    except OSError as exc:
        raise FitcheckError(f"{path.parent}: cannot keep the measured bandwidth: {exc.strerror or exc}") from None

    doc = {"schema": SCHEMA, "fitcheck_version": __version__, "machines": kept}
    write_regular_file(path, json.dumps(doc, indent=1) + "\n", "bandwidth cache")
    return path


def with_stored_bandwidth(machine: Machine, env: Mapping[str, str] | None = None) -> Machine:
    """``machine`` (this one, probed) with its stored RAM bandwidth where the probe could not read one."""
    if known(machine.memory.bandwidth_bytes_per_s):
        return machine
    stored = load(machine, env)
    if stored is None:
        return machine
    memory = replace(machine.memory, bandwidth_bytes_per_s=stored.bytes_per_s, bandwidth_source=stored.source)
    return replace(machine, memory=memory)
