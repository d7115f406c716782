"""Run cases one at a time, each in a fresh process, and write the CSV as they finish.

A fresh process per case means no allocator state, cache or import carries over between
cases.  Each child gets the case's time limit; the parent also watches the child's RSS and
kills it above ``max_rss_bytes`` so a mis-sized case cannot take a shared machine down.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from fitcheck.measure.child import MARK_DONE, MARK_INFO, MARK_PHASE
from fitcheck.measure.runner import process_rss

from .cases import Case
from .columns import COLUMN_NAMES, rows_for

REPO_ROOT = Path(__file__).resolve().parents[2]
_POLL_S = 0.2


@dataclass
class CaseResult:
    case: Case
    status: str = "ok"
    error: str = ""
    info: dict = field(default_factory=dict)
    phases: list[dict] = field(default_factory=list)
    case_wall_s: float | None = None
    date: str = ""

    def rows(self) -> list[dict]:
        return rows_for(self.case, self.info, self.phases, self.status, self.error,
                        self.case_wall_s, self.date)


def _parse(result: CaseResult, stdout: str) -> bool:
    """Fill info/phases from the child's marked lines; True when it reported done."""
    done = False
    for line in stdout.splitlines():
        mark, _, payload = line.partition(" ")
        if mark == MARK_INFO:
            result.info = json.loads(payload)
        elif mark == MARK_PHASE:
            result.phases.append(json.loads(payload))
        elif mark == MARK_DONE:
            result.case_wall_s = json.loads(payload)["case_wall_s"]
            done = True
    return done


def _last_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line or "Killed" in line:
            return line[:300]
    return lines[-1][:300] if lines else ""


def run_one(case: Case, device: str, env: dict[str, str] | None = None,
            max_rss_bytes: int | None = None, log_dir: Path | None = None) -> CaseResult:
    """Run one case in a child process and collect what it reported."""
    result = CaseResult(case=case, date=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))  # noqa: UP017 (Python 3.10)
    child_env = dict(os.environ, **(env or {}))
    child_env.setdefault("TOKENIZERS_PARALLELISM", "false")
    child_env.setdefault("HF_HUB_OFFLINE", "1")  # shapes come from specs; never touch the Hub
    command = [sys.executable, "-m", "benchmarks.measure.run_case", case.to_json(),
               "--device", device]
    started = time.monotonic()
    with subprocess.Popen(command, cwd=REPO_ROOT, env=child_env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as child:
        # Read pipes on threads via communicate() in short slices so the guards can run.
        outputs: list[str] = ["", ""]
        while True:
            try:
                out, err = child.communicate(timeout=_POLL_S)
                outputs = [out, err]
                break
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() - started > case.timeout_s:
                result.status, result.error = "timeout", f"exceeded {case.timeout_s} s"
            elif max_rss_bytes and process_rss(child.pid) > max_rss_bytes:  # the case child has no children of its own
                result.status = "killed"
                result.error = f"RSS above the {max_rss_bytes / 2**30:.1f} GiB guard"
            else:
                continue
            os.killpg(child.pid, signal.SIGKILL)
            out, err = child.communicate()
            outputs = [out, err]
            break
    stdout, stderr = outputs
    done = _parse(result, stdout or "")
    if result.status == "ok" and (child.returncode != 0 or not done):
        result.status = "error"
        result.error = _last_error_line(stderr or "") or f"exit code {child.returncode}"
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / f"{case.id}.log").write_text((stdout or "") + "\n--- stderr ---\n" + (stderr or ""))
    return result


def write_rows(path: Path, rows: list[dict], append: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    new_file = not append or not path.exists()
    with path.open("w" if new_file else "a", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, fieldnames=COLUMN_NAMES)
        if new_file:
            writer.writeheader()
        writer.writerows(rows)


def drop_cases(path: Path, case_ids: set[str]) -> int:
    """Remove the rows of ``case_ids`` from an existing CSV (to re-measure them); rows kept."""
    if not path.exists():
        return 0
    with path.open(newline="", encoding="utf-8") as existing:
        rows = list(csv.DictReader(existing))
    kept = [row for row in rows if row.get("case_id") not in case_ids]
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, fieldnames=COLUMN_NAMES, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(kept)
    return len(kept)


def run_all(cases: list[Case], device: str, out: Path, env: dict[str, str] | None = None,
            max_rss_bytes: int | None = None, log_dir: Path | None = None,
            budget_s: float | None = None, update: bool = False,
            progress=print) -> list[CaseResult]:
    """Run every case in order, appending each case's rows to ``out`` as soon as it ends.

    With ``budget_s``, no case starts when less than a minute (or its own time limit, if
    shorter) of the budget is left; the cases not started are reported, not written.
    With ``update``, rows of other cases already in ``out`` are kept and these cases' old rows
    replaced; otherwise ``out`` is started afresh.
    """
    if update:
        drop_cases(out, {case.id for case in cases})
    results = []
    started = time.monotonic()
    for number, case in enumerate(cases, 1):
        if budget_s is not None and time.monotonic() - started + min(case.timeout_s, 60) > budget_s:
            progress(f"budget of {budget_s:.0f} s spent: skipped {len(cases) - number + 1} cases")
            break
        progress(f"[{number}/{len(cases)}] {case.id} ...")
        result = run_one(case, device, env=env, max_rss_bytes=max_rss_bytes, log_dir=log_dir)
        write_rows(out, result.rows(), append=update or number > 1)
        wall = f"{result.case_wall_s:.0f} s" if result.case_wall_s is not None else ""
        progress(f"    {result.status} {wall} {result.error}".rstrip())
        results.append(result)
    return results
