"""Run the hostile-input battery and print its summary table.

    python -m benchmarks.hostile [--fuzz N] [--concurrent N] [--json FILE] [--only surfaces]

Command lines run as real ``python -m fitcheck`` processes (each timed, its peak RSS read with
wait4); parser inputs (every truncation of a safetensors and a GGUF header, seeded mutations of
headers, configs, plans and profiles, unit strings, /proc and NVML fault injection) run in this
process.  Hub cases use endpoints on 127.0.0.1 only: one that accepts and never answers, one that
refuses.  A finding is a traceback (or exit 70, the internal-error code), a run over 10 s of wall
time (concurrent runs: 10 s per run per core), a wrong exit code or output, or a process over 500 MB
(one past 2 GiB is killed there), a raw control character (ESC, BEL, any C0 but tab, newline and
carriage return) on stdout or stderr, or a case's secret (a password in its input) printed.
Exit status 1 when there is any.  "max CPU s" tells a slow input from a busy machine.
``--only surfaces`` runs only benchmarks/hostile/surfaces.py's cases (caches, stores, environments,
receipts, encodings, credentials).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.hostile import cases as C
from benchmarks.hostile import surface_parsers as SP
from benchmarks.hostile import surfaces as S

HANG_S = 10.0
KILL_S = 20.0
RSS_LIMIT_MB = 500
RSS_KILL_MB = 2048          # a process past this is killed (a reader of /dev/zero would take the machine)
RSS_POLL_S = 0.05
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")   # C0 controls but tab, newline, carriage return
PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20
ROOT = Path(__file__).resolve().parents[2]


def _silent_server() -> tuple[str, socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return f"127.0.0.1:{server.getsockname()[1]}", server


def _refused_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"  # closed again: connections are refused


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * PAGE_MB
    except (OSError, IndexError, ValueError):
        return 0.0


def _rss_guard(proc: subprocess.Popen, done: threading.Event, killed: list[float]) -> None:
    """Kill ``proc`` once its resident memory passes RSS_KILL_MB (it is not reaped before ``done`` is set)."""
    while not done.wait(RSS_POLL_S):
        rss = _rss_mb(proc.pid)
        if rss > RSS_KILL_MB:
            killed.append(rss)
            proc.kill()
            return


def _control_excerpt(text: str) -> str:
    """The first raw control character with a little context, escaped: what the terminal would have run."""
    m = CONTROL.search(text)
    if m is None:
        return ""
    return ascii(text[max(0, m.start() - 20):m.end() + 20])


def run_cli(case: C.CliCase, work: Path, base_env: dict[str, str], hang_s: float = HANG_S) -> dict:
    env = {**base_env, **case.env}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "fitcheck", *case.argv], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    timer = threading.Timer(KILL_S * hang_s / HANG_S, proc.kill)
    timer.start()
    done = threading.Event()
    killed_at: list[float] = []
    guard = threading.Thread(target=_rss_guard, args=(proc, done, killed_at), daemon=True)
    guard.start()
    out_chunks: list[bytes] = []
    err_chunks: list[bytes] = []
    assert proc.stdout is not None and proc.stderr is not None
    stdout, stderr = proc.stdout, proc.stderr
    t_out = threading.Thread(target=lambda: out_chunks.append(stdout.read()))
    t_err = threading.Thread(target=lambda: err_chunks.append(stderr.read()))
    t_out.start()
    t_err.start()
    # exited, not yet reaped: its pid cannot be reused while the timer and the guard are stopped
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    timer.cancel()
    done.set()
    guard.join()
    _, status, usage = os.wait4(proc.pid, 0)
    t_out.join()
    t_err.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - start
    out = b"".join(out_chunks).decode("utf-8", "replace")
    err = b"".join(err_chunks).decode("utf-8", "replace")
    problems = []
    if "Traceback (most recent call last)" in out + err or proc.returncode == 70:
        problems.append("traceback")
    if seconds > hang_s:
        problems.append("hang")
    wrong = []
    if proc.returncode not in case.expect:
        wrong.append(f"exit {proc.returncode}, expected {sorted(case.expect)}")
    if proc.returncode == 2 and len(err.strip().splitlines()) != 1:
        wrong.append(f"{len(err.strip().splitlines())} lines on stderr")
    wrong += [f"printed {s!r}" for s in case.must_not_print if s in out + err]
    wrong += [f"did not print {s!r}" for s in case.must_print if s not in out + err]
    if killed_at:
        wrong.append(f"killed at {killed_at[0]:.0f} MB RSS")
    if wrong:
        problems.append("wrong")
    if CONTROL.search(out + err):
        problems.append("control")
        wrong.append(f"raw control {_control_excerpt(out + err)}")
    if case.secret and case.secret in out + err:
        problems.append("secret")
        where = (out + err).find(case.secret)
        wrong.append(f"secret printed: {(out + err)[max(0, where - 40):where + len(case.secret) + 10]!r}")
    rss_mb = usage.ru_maxrss / 1024
    if rss_mb > RSS_LIMIT_MB or killed_at:
        problems.append("rss")
    return {"group": case.group, "name": case.name, "exit": proc.returncode, "seconds": round(seconds, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "rss_mb": round(rss_mb, 1), "problems": problems,
            "detail": "; ".join(wrong), "stderr": err.strip().splitlines()[-1][:200] if err.strip() else "",
            "stdout": out}


def run_parser(case: C.ParserCase) -> dict:
    from fitcheck.errors import FitcheckError

    start = time.monotonic()
    problems, detail = [], ""
    try:
        case.run()
    except (FitcheckError, ValueError):
        pass
    except Exception as exc:  # a crash: what the battery looks for
        problems.append("traceback")
        detail = f"{type(exc).__name__}: {str(exc)[:160]}"
    seconds = time.monotonic() - start
    if seconds > HANG_S:
        problems.append("hang")
    return {"group": case.group, "name": case.name, "exit": None, "seconds": round(seconds, 3),
            "cpu_s": round(seconds, 3), "rss_mb": None, "problems": problems, "detail": detail}


def concurrency(n: int, work: Path, base_env: dict[str, str]) -> list[dict]:
    """``n`` identical checks at once: each must succeed with the same document.  They share the CPUs,
    so the time allowed grows with ``n`` per core (a hang is waiting, not sharing)."""
    case = C.CliCase("concurrency", "same check", ["qwen-7b", "--profile", "rtx-4090", "--json"], C.VERDICT)
    hang_s = HANG_S * max(1.0, n / (os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(lambda _: run_cli(case, work, base_env, hang_s), range(n)))
    documents = {r["stdout"] for r in results if r["exit"] in C.VERDICT}
    if len(documents) > 1:
        for r in results:
            r["problems"].append("wrong")
            r["detail"] = f"{len(documents)} different documents from identical runs"
    return results


PROBLEM_KINDS = ("traceback", "hang", "wrong", "rss", "control", "secret")


def table(results: list[dict]) -> str:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        groups[r["group"]].append(r)
    rows = []
    for name, rs in [*groups.items(), ("all", results)]:
        rss = [r["rss_mb"] for r in rs if r["rss_mb"] is not None]
        rows.append((name, len(rs), *(sum(kind in r["problems"] for r in rs) for kind in PROBLEM_KINDS),
                     f"{max(rss):.0f}" if rss else "-",
                     f"{max(r['seconds'] for r in rs):.2f}", f"{max(r['cpu_s'] for r in rs):.2f}"))
    head = ("group", "inputs", "tracebacks", "hangs >10 s", "wrong exits", "over 500 MB", "raw control",
            "secrets printed", "max RSS MB", "slowest s", "max CPU s")
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=False)]
    lines = ["  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths,
                                                                                              strict=False)))
             for row in (head, *rows)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.hostile", description=__doc__.splitlines()[0])
    ap.add_argument("--fuzz", type=int, default=400, help="mutations per parser (default 400)")
    ap.add_argument("--concurrent", type=int, default=16, help="simultaneous identical runs (default 16)")
    ap.add_argument("--workers", type=int, default=2, help="fitcheck processes at a time (default 2)")
    ap.add_argument("--json", metavar="FILE", help="also write every result as JSON")
    ap.add_argument("--only", choices=["surfaces"], help="run only these cases (surfaces: benchmarks/hostile/"
                    "surfaces.py's command lines and parsers; no concurrency runs)")
    args = ap.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fitcheck-hostile-") as tmp:
        work = Path(tmp)
        silent, server = _silent_server()
        base_env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FITCHECK_", "CUDA_"))}
        base_env.update(HF_HOME=str(work / "hf-home"), NO_COLOR="1",
                        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
        if args.only == "surfaces":
            cli_cases = S.cli_cases(work, base_env)
        else:
            cli_cases = (C.baseline_cases() + C.number_cases() + C.file_cases(work) + C.model_cases(work)
                         + C.cost_cases(work) + C.hub_cases(silent, _refused_endpoint()) + S.cli_cases(work, base_env))
        with ThreadPoolExecutor(max_workers=args.workers) as pool:
            results = list(pool.map(lambda c: run_cli(c, work, base_env), cli_cases))
        if args.only is None:
            results += concurrency(args.concurrent, work, base_env)
        server.close()
        parser_cases = SP.parser_cases(work)
        if args.only is None:
            parser_cases = C.parser_cases(fuzz=args.fuzz) + C.probe_cases() + parser_cases
        results += [run_parser(c) for c in parser_cases]
    own_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(table(results))
    print(f"\n{len(results):,} inputs in {time.monotonic() - started:.0f} s; in-process parsers peaked at "
          f"{own_rss:.0f} MB RSS (the battery's own process)")
    findings = [r for r in results if r["problems"]]
    for r in findings if args.only else findings[:40]:
        line = (f"FINDING {r['group']} / {r['name']}: {', '.join(r['problems'])} {r['detail']} "
                f"(exit {r['exit']}, {r['seconds']} s) {r.get('stderr', '')}")
        print(CONTROL.sub(lambda m: ascii(m.group())[1:-1], line))  # what a finding printed, never run here
    if args.json:
        Path(args.json).write_text(json.dumps([{k: v for k, v in r.items() if k != "stdout"} for r in results],
                                              indent=1))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
