"""Time `fitcheck MODEL --json` end to end (a fresh process each run, the alternatives search
included) and print the median and p90.

    python benchmarks/bench_check.py [--runs 15] [-- extra fitcheck arguments]

Default arguments: `qwen-7b --json` on this machine, plus `--profile rtx-3060 --context 32768`,
a case that does not fit and so runs the whole alternatives search.
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


def time_command(cmd: list[str], runs: int) -> list[float]:
    times = []
    env = dict(os.environ)
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        times.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-300:]}")
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description="time fitcheck MODEL --json")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("extra", nargs="*", help="fitcheck arguments to time instead of the default cases")
    args = ap.parse_args()
    exe = shutil.which("fitcheck") or os.path.join(os.path.dirname(sys.executable), "fitcheck")
    cases = [args.extra] if args.extra else CASES
    for case in cases:
        cmd = [exe, *case]
        time_command(cmd, 2)  # warm the page cache and bytecode
        t = sorted(time_command(cmd, args.runs))
        p90 = t[min(len(t) - 1, int(0.9 * len(t)))]
        print(f"fitcheck {' '.join(case)}: median {statistics.median(t) * 1000:.0f} ms, p90 {p90 * 1000:.0f} ms "
              f"({args.runs} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
