"""The parent side: run a Job in a fresh child process, under a time limit and a memory guard.

The parent never imports torch.  It starts ``python -m fitcheck.measure.child JOB``, reads the
child's marked lines as they come, and ends the run:

* ``measured``       the child reported ``@@done``;
* ``out_of_memory``  the child's allocator failed (``@@oom``: torch.OutOfMemoryError, MemoryError, an
                     allocation past its RLIMIT_AS), the kernel killed it (SIGKILL without us), or
                     its resident memory above the baseline passed ``host_limit_bytes`` (the guard
                     polls ``/proc/PID/statm`` and kills it);
* ``timeout``        it ran past ``time_limit_s``;
* ``error``          anything else (the child's last error line).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from fitcheck.measure.child import MARK_DONE, MARK_ERROR, MARK_INFO, MARK_OOM, MARK_PHASE
from fitcheck.measure.job import Job

MEASURED, OUT_OF_MEMORY, TIMEOUT, ERROR = "measured", "out_of_memory", "timeout", "error"
_POLL_S = 0.01


@dataclass
class RunResult:
    """What the child reported, and how the run ended."""

    status: str
    info: dict = field(default_factory=dict)
    phases: list[dict] = field(default_factory=list)
    error: str = ""
    wall_s: float = 0.0
    guard_peak_bytes: int | None = None   # CPU: the highest RSS above the baseline the guard saw


def process_rss(pid: int) -> int:
    """Resident bytes of process ``pid`` from /proc (0 once it is gone or where there is no /proc)."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def parse_line(result: RunResult, line: str) -> str | None:
    """Record one marked line of the child's stdout; returns its mark (None for chatter)."""
    mark, _, payload = line.strip().partition(" ")
    if mark not in (MARK_INFO, MARK_PHASE, MARK_DONE, MARK_OOM, MARK_ERROR):
        return None
    data = json.loads(payload)
    if mark == MARK_INFO:
        result.info = data
    elif mark == MARK_PHASE:
        result.phases.append(data)
    elif mark in (MARK_OOM, MARK_ERROR):
        result.error = data.get("error", "")
    return mark


def child_command(job: Job) -> list[str]:
    return [sys.executable, "-m", "fitcheck.measure.child", job.to_json()]


def run_job(job: Job, time_limit_s: float, env: dict[str, str] | None = None) -> RunResult:
    """Run `job` in a fresh process and return how it ended (never raises for the child's failures)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(child_command(job), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})), start_new_session=True)
    result = RunResult(status=ERROR)
    marks: list[str] = []
    stderr_tail: list[str] = []

    def read_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                mark = parse_line(result, line)
            except (json.JSONDecodeError, AttributeError):
                mark = None
            if mark:
                marks.append(mark)

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            stderr_tail.append(line.rstrip())
            del stderr_tail[:-40]

    readers = [threading.Thread(target=read_stdout, daemon=True), threading.Thread(target=read_stderr, daemon=True)]
    for reader in readers:
        reader.start()
    guard = job.host_limit_bytes or (job.memory_limit_bytes if job.device == "cpu" else None)
    killed_for = _watch(proc, result, guard, t0, time_limit_s)
    proc.wait()
    for reader in readers:
        reader.join(timeout=5)
    result.wall_s = round(time.perf_counter() - t0, 3)
    _ending(result, proc, killed_for, marks, stderr_tail, time_limit_s, guard)
    return result


def _watch(proc: subprocess.Popen, result: RunResult, guard: int | None, t0: float, time_limit_s: float) -> str:
    """Poll the child until it ends; kill it past the time limit or (CPU) the resident-memory guard.  Returns
    why it was killed ('' when it ended by itself)."""
    killed_for = ""
    try:
        while proc.poll() is None:
            if time.perf_counter() - t0 > time_limit_s:
                killed_for = TIMEOUT
            elif guard and result.info:
                above = process_rss(proc.pid) - int(result.info.get("baseline_bytes") or 0)
                result.guard_peak_bytes = max(result.guard_peak_bytes or 0, above)
                if above > guard:
                    killed_for = OUT_OF_MEMORY
            if killed_for:
                _kill(proc)
                break
            time.sleep(_POLL_S)
    except BaseException:
        _kill(proc)  # Ctrl-C or an error here: the child (its own session) must not outlive us
        raise
    return killed_for


def _ending(result: RunResult, proc: subprocess.Popen, killed_for: str, marks: list[str], stderr_tail: list[str],
            time_limit_s: float, guard: int | None) -> None:
    """How the run ended, from why it was killed, the child's marks and its exit status."""
    if killed_for == TIMEOUT:
        result.status, result.error = TIMEOUT, f"stopped after the {time_limit_s:g} s time limit (--time-limit)"
    elif killed_for == OUT_OF_MEMORY:
        result.status = OUT_OF_MEMORY
        result.error = f"resident memory passed the {(guard or 0) / 2**30:.2f} GiB limit"
    elif MARK_DONE in marks:
        result.status = MEASURED
    elif MARK_OOM in marks:
        result.status = OUT_OF_MEMORY
    elif proc.returncode == -signal.SIGKILL:
        result.status = OUT_OF_MEMORY
        result.error = "killed by SIGKILL (the kernel's out-of-memory killer, or a container memory limit)"
    else:
        result.status = ERROR
        if not result.error:
            tail = [ln for ln in stderr_tail if ln.strip()]
            result.error = (tail[-1] if tail else f"the measuring process exited with {proc.returncode}")[:500]


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
