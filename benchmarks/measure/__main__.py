"""python -m benchmarks.measure: measure real framework memory, one fresh process per case.

    python -m benchmarks.measure                       # every CPU case -> benchmarks/results/
    python -m benchmarks.measure --cases 'prefill-*'   # a subset (comma-separated globs)
    python -m benchmarks.measure --device cuda --out "$OUT/cuda.csv"
    python -m benchmarks.measure --list                # print the case ids and exit
    python -m benchmarks.measure --cases 'gemma*' --update   # re-measure into the same CSV
"""

from __future__ import annotations

import argparse
import csv
from datetime import datetime, timezone
from pathlib import Path

from .cases import CASE_LISTS, select
from .compare import compare_rows, comparison_lines, summary
from .runner import REPO_ROOT, run_all
from .table import render


def _env_pairs(values: list[str]) -> dict[str, str]:
    env = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"--env wants KEY=VALUE, got {item!r}")
        env[key] = value
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.measure", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", help="glob(s) over case ids, comma-separated (default: all)")
    parser.add_argument("--device", choices=sorted(CASE_LISTS), default="cpu",
                        help="which case list to run and where (default: cpu)")
    parser.add_argument("--out", type=Path, help="CSV path (default: "
                        "benchmarks/results/<device>-<UTC date>.csv)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment for each case, e.g. MALLOC_ARENA_MAX=2 (repeatable)")
    parser.add_argument("--max-rss-gib", type=float, default=10.0,
                        help="kill a case whose RSS passes this (default 10; 0 = no guard)")
    parser.add_argument("--budget-s", type=float,
                        help="start no case after this many seconds (for a timed device lease)")
    parser.add_argument("--update", action="store_true",
                        help="keep other cases' rows in --out and replace these cases' rows")
    parser.add_argument("--logs", type=Path, help="folder for each case's stdout/stderr")
    parser.add_argument("--list", action="store_true", help="list the selected case ids and exit")
    args = parser.parse_args(argv)

    cases = select(CASE_LISTS[args.device], args.cases)
    if not cases:
        parser.error(f"no {args.device} case matches {args.cases!r} (see --list)")
    if args.list:
        for case in cases:
            print(case.id)
        return 0
    out = args.out or REPO_ROOT / "benchmarks" / "results" / (
        f"{args.device}-{datetime.now(timezone.utc):%Y-%m-%d}.csv")  # noqa: UP017 (Python 3.10)
    max_rss = int(args.max_rss_gib * 2**30) if args.max_rss_gib > 0 else None
    results = run_all(cases, args.device, out, env=_env_pairs(args.env), max_rss_bytes=max_rss,
                      log_dir=args.logs, budget_s=args.budget_s,
                      update=args.update)
    with out.open(newline="", encoding="utf-8") as written:
        rows = list(csv.DictReader(written))
    print(render(rows))
    # Predicted vs measured, per case and component, and the summary (compare.py on this CSV).
    comparisons, skipped = compare_rows(rows)
    print()
    for line in comparison_lines(comparisons) + summary(comparisons) + [f"skipped {s}" for s in skipped]:
        print(line)
    print(f"\nwrote {out}")
    return 0 if all(r.status == "ok" for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
