"""The longest sequence fitcheck says fits vs the longest that fit, for published capacity tables.

    python -m benchmarks.capacity [--csv PATH] [--rows]

Reads `benchmarks/data/capacity_reference.csv`: published maximum sequence lengths of QLoRA
fine-tuning (Hugging Face + flash-attention 2, rank 32 on all linear layers, batch 1, gradient
checkpointing; the sources in the rows and in benchmarks/data/SOURCES.md).  For each row it
finds the longest `--seq-len` whose estimate (the whole need: allocated, allocator reserve, CUDA
context) fits in the row's GPU, with the rest of the request as the row says, and reports the
ratio to the published length: above 1 fitcheck would say "fits" where the run ran out of memory.
A row whose published result is OOM checks that fitcheck says it does not fit at 512 tokens.
The transformers release is the one current at the post's date (the posts do not name it); the
optimizer is the posts' notebooks' `adamw_8bit`.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CSV = Path(__file__).resolve().parent / "data" / "capacity_reference.csv"
OOM_CHECK_LEN = 512
GiB = 1024**3


@dataclass(frozen=True)
class Capacity:
    label: str
    published: int | None     # None: the run was out of memory
    predicted: int            # the longest fitcheck says fits (0: none)

    @property
    def ratio(self) -> float | None:
        return None if not self.published else self.predicted / self.published

    @property
    def agrees(self) -> bool:
        """An OOM row: fitcheck says it does not fit at OOM_CHECK_LEN either."""
        return self.published is not None or self.predicted < OOM_CHECK_LEN


def _need(spec, request, machine) -> int:
    from fitcheck.pipeline import Evaluator

    out = Evaluator(spec, machine).outcome(request)
    return max(d.total_bytes for d in out.estimate.devices)


def capacity(row: dict) -> Capacity:
    from fitcheck.model.resolve import resolve_model
    from fitcheck.profiles import load_profile
    from fitcheck.profiles.overrides import MachineOverrides, apply_overrides
    from fitcheck.request import Request

    spec = resolve_model(row["model"]).spec
    gpu_bytes = int(float(row["gpu_gib"]) * GiB)
    machine = apply_overrides(load_profile("a100-80gb"), MachineOverrides(vram=f"{row['gpu_gib']}GiB"))
    base = Request(mode=row["mode"], precision=row["precision"], batch=int(row["batch"]),
                   lora_rank=int(row["lora_rank"]), lora_targets=row["lora_targets"],
                   grad_checkpointing=row["grad_checkpointing"] == "yes", attention=row["attention"],
                   optimizer=row["optimizer"], transformers_version=row["transformers_version"] or None)

    def fits(n: int) -> bool:
        return _need(spec, base.with_changes(seq_len=n), machine) <= gpu_bytes

    lo, hi = 0, 1 << 20
    while lo < hi:  # the largest n with fits(n); fits is monotone in n
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    label = f"{row['model'].split('/')[-1]} on {row['gpu']} (transformers {row['transformers_version']})"
    return Capacity(label, int(row["max_seq_len"]) if row["max_seq_len"] else None, lo)


def read(path: Path = DEFAULT_CSV) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def capacities(path: Path = DEFAULT_CSV) -> list[Capacity]:
    return [capacity(r) for r in read(path)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    args = ap.parse_args(argv)
    rows = capacities(args.csv)
    for c in rows:
        if c.published is None:
            verdict = "agrees" if c.agrees else "DISAGREES"
            print(f"{c.label:60s} published OOM; fitcheck's longest {c.predicted:>7,}: {verdict}")
        else:
            print(f"{c.label:60s} published {c.published:>7,}; fitcheck's longest {c.predicted:>7,}: "
                  f"ratio {c.ratio:.3f}")
    ratios = [c.ratio for c in rows if c.ratio is not None]
    if ratios:
        print(f"largest ratio {max(ratios):.3f}, smallest {min(ratios):.3f} over {len(ratios)} rows; "
              f"OOM rows agreeing: {sum(c.agrees for c in rows if c.published is None)} of "
              f"{sum(c.published is None for c in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
