"""Time `fitcheck MODEL --json` end to end (a fresh process each run, the alternatives search
included) and print the median and p90.

    python benchmarks/bench_check.py [--runs 15] [-- extra fitcheck arguments]

Default arguments: `qwen-7b --json` on this machine, plus `--profile rtx-3060 --context 32768`,
a case that does not fit and so runs the whole alternatives search; then `fitcheck models --fits`
(the whole catalog ranked) on two profiles and for QLoRA.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

CASES = (
    ["qwen-7b", "--json"],
    ["qwen-7b", "--json", "--profile", "rtx-3060", "--context", "32768"],
)
# `fitcheck models --fits`: every catalog model judged (and, where it does not fit as asked, its
# alternatives searched) in one process; timed with fewer runs (a second or two each).
FITS_CASES = (
    ["models", "--fits", "--json", "--profile", "rtx-4090"],
    ["models", "--fits", "--json", "--profile", "laptop-16gb"],
    ["models", "--fits", "--json", "--profile", "rtx-4090", "--mode", "qlora", "--seq-len", "4096"],
)


CPU_TIMES: list[float] = []   # user + system seconds of each run's process (steadier on a shared machine)


def time_command(cmd: list[str], runs: int) -> list[float]:
    import resource

    times = []
    env = dict(os.environ)
    CPU_TIMES.clear()
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        CPU_TIMES.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-300:]}")
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description="time fitcheck MODEL --json")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("extra", nargs="*", help="fitcheck arguments to time instead of the default cases")
    args = ap.parse_args()
    exe = shutil.which("fitcheck") or os.path.join(os.path.dirname(sys.executable), "fitcheck")
    cases = [(args.extra, args.runs)] if args.extra else (
        [(c, args.runs) for c in CASES] + [(c, max(3, args.runs // 5)) for c in FITS_CASES])
    for case, runs in cases:
        cmd = [exe, *case]
        time_command(cmd, 1 if case[0] == "models" else 2)  # warm the page cache and bytecode
        t = sorted(time_command(cmd, runs))
        p90 = t[min(len(t) - 1, int(0.9 * len(t)))]
        print(f"fitcheck {' '.join(case)}: median {statistics.median(t) * 1000:.0f} ms, p90 {p90 * 1000:.0f} ms "
              f"(CPU {statistics.median(CPU_TIMES) * 1000:.0f} ms; {runs} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
