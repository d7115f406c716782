"""Published mlx-lm peak memory against fitcheck's MLX estimate.

    python -m benchmarks.mlx_peaks            # per-source summary
    python -m benchmarks.mlx_peaks --rows     # every row

Reads `benchmarks/data/mlx_peak_memory.csv`: the "Peak memory" mlx-lm prints (`mx.get_peak_memory() / 1e9`,
the Metal allocator's high-water mark of active memory, decimal GB) for a prompt and a generation, with the
source named in each row.  Each row is estimated as `fitcheck MODEL --engine mlx -p PRECISION --context
PROMPT+GENERATED --prompt PROMPT` on an Apple profile large enough to hold it, and its GPU need
(peak allocated: weights, KV cache, activations) compared with the published peak.  Errors are
(estimate - published) / published: negative = the estimate is short (the out-of-memory direction).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fitcheck.pipeline import check  # noqa: E402
from fitcheck.profiles import load_profile  # noqa: E402
from fitcheck.request import Request  # noqa: E402

DATA = REPO / "benchmarks" / "data" / "mlx_peak_memory.csv"
PROFILE = "macbook-pro-m4-max-128gb"   # enough unified memory for every row: the estimate, not the verdict


@dataclass(frozen=True)
class Row:
    id: str
    source: str
    model: str
    precision: str
    prompt: int
    generated: int
    published: float          # GB
    estimated: float          # GB

    @property
    def error(self) -> float:
        return self.estimated / self.published - 1


def read_rows(path: Path = DATA) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def estimate(row: dict) -> Row:
    prompt, generated = int(row["prompt_tokens"]), int(row["generated_tokens"])
    request = Request(precision=row["precision"], engine="mlx", context=prompt + generated, prompt_tokens=prompt)
    result = check(row["model"], request, load_profile(PROFILE), alternatives=False, search=False,
                   device_advice=False)
    gpu = result.estimate.gpu_devices[0]
    return Row(row["id"], row["source"], row["model"], row["precision"], prompt, generated,
               float(row["peak_gb"]), gpu.peak_allocated_bytes / 1e9)


def rows(path: Path = DATA) -> list[Row]:
    return [estimate(r) for r in read_rows(path)]


def summary(scored: list[Row]) -> list[tuple[str, int, float, float]]:
    """(source, rows, median |error|, worst under-prediction) per source."""
    by: dict[str, list[Row]] = {}
    for r in scored:
        by.setdefault(r.source, []).append(r)
    return [(source, len(rs), statistics.median(abs(r.error) for r in rs), min(r.error for r in rs))
            for source, rs in by.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true", help="print every row")
    args = parser.parse_args(argv)
    scored = rows()
    if args.rows:
        for r in scored:
            print(f"{r.id:28s} {r.precision:9s} {r.prompt:>6,}+{r.generated:<4} published {r.published:7.3f} GB  "
                  f"estimate {r.estimated:7.3f} GB  {r.error:+.1%}")
        print()
    print(f"{'source':78s} rows  median |err|  worst under")
    for source, n, med, worst in summary(scored):
        print(f"{source[:78]:78s} {n:4d}  {med:12.1%}  {worst:+10.1%}")
    print(f"{'all':78s} {len(scored):4d}  {statistics.median(abs(r.error) for r in scored):12.1%}  "
          f"{min(r.error for r in scored):+10.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
