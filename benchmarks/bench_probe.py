"""Time the probe: ``fitcheck probe --json`` and a bare ``probe()`` call, each as a fresh process.

    python benchmarks/bench_probe.py            # 15 runs each
    python benchmarks/bench_probe.py -n 30 --as-is

Prints median and p90 wall time in ms.  By default bytecode is cached in a temporary folder
(PYTHONPYCACHEPREFIX) and a warm-up run fills it, so the figures match an installed fitcheck even
where PYTHONDONTWRITEBYTECODE is set; --as-is keeps the environment untouched.  A command that is
not available yet (no ``probe`` CLI command) is reported and skipped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

COMMANDS = {
    "fitcheck probe --json": [sys.executable, "-m", "fitcheck", "probe", "--json"],
    "python -c 'probe()'": [sys.executable, "-c", "from fitcheck.probe import probe; probe()"],
    "python -c 'pass' (interpreter start)": [sys.executable, "-c", "pass"],
}
IN_PROCESS = ("in-process probe() (imports + first call)", "in-process probe() (later calls)")
IN_PROCESS_SCRIPT = (
    "import time,json;t=time.perf_counter();from fitcheck.probe import probe;probe();"
    "a=time.perf_counter()-t;t=time.perf_counter();probe();b=time.perf_counter()-t;print(json.dumps([a,b]))"
)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    return time.perf_counter() - start, done


def report(label: str, seconds: list[float]) -> None:
    ms = [s * 1000 for s in seconds]
    print(f"{label:45s} median {statistics.median(ms):7.1f} ms   p90 {percentile(ms, 0.9):7.1f} ms   (n={len(ms)})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=15, help="runs per command (default 15)")
    parser.add_argument("--as-is", action="store_true", help="do not set up a bytecode cache")
    args = parser.parse_args(argv)

    env = dict(os.environ)
    cache = None
    if not args.as_is:
        cache = tempfile.TemporaryDirectory(prefix="fitcheck-bench-pycache-")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache.name

    for label, command in COMMANDS.items():
        _, warm = run_once(command, env)  # warm-up: fills the bytecode cache and the page cache
        if warm.returncode != 0:
            why = (warm.stderr.strip().splitlines() or [f"exit {warm.returncode}"])[-1]
            print(f"{label:45s} skipped: {why}")
            continue
        report(label, [run_once(command, env)[0] for _ in range(args.runs)])

    import json

    first, later = [], []
    for _ in range(args.runs):
        _, done = run_once([sys.executable, "-c", IN_PROCESS_SCRIPT], env)
        if done.returncode != 0:
            print(f"in-process probe() failed: {done.stderr.strip()[-200:]}")
            return 1
        a, b = json.loads(done.stdout)
        first.append(a)
        later.append(b)
    report(IN_PROCESS[0], first)
    report(IN_PROCESS[1], later)
    if cache is not None:
        cache.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
