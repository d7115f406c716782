"""Estimator vs published measurements: per-row error and the summary.

    python benchmarks/accuracy.py [--csv PATH] [--mode inference|training|all] [--rows]

Reads the calibration set (../shared/reference/calibration/measured.csv by default): the Qwen2.5
speed benchmark (inference, transformers 4.46, A100, sum over GPUs of
torch.cuda.max_memory_allocated, GiB) and, when the training estimator exists, the Qwen
fine-tuning table.  Prints each row's predicted and measured GiB and the error, then the median
|error| and the worst under-prediction (an under-prediction is an out-of-memory crash).
Models come from fitcheck's catalog, exactly as a user would get them.
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

from fitcheck.estimate.inference import estimate_inference  # noqa: E402
from fitcheck.estimate.request import Plan  # noqa: E402
from fitcheck.model.resolve import resolve_model  # noqa: E402
from fitcheck.units import GiB  # noqa: E402

DEFAULT_CSV = REPO.parent / "shared" / "reference" / "calibration" / "measured.csv"
A100_80GB = 81920 * 1024**2
_PRECISION = {"BF16": "bf16", "GPTQ-Int8": "gptq-int8", "GPTQ-Int4": "gptq-int4", "AWQ": "awq"}


@dataclass(frozen=True)
class Row:
    label: str
    mode: str
    predicted_gib: float
    measured_gib: float

    @property
    def error_pct(self) -> float:
        return (self.predicted_gib - self.measured_gib) / self.measured_gib * 100


def _qwen_id(model: str) -> str:
    return model if "/" in model else f"Qwen/{model}"


def inference_row(r: dict) -> Row:
    spec = resolve_model(_qwen_id(r["model"])).spec
    prompt, new = int(r["input_len"]), int(r["output_len"])
    gpus = int(r["num_gpus"] or 1)
    plan = Plan(precision=_PRECISION[r["precision"]], engine="transformers", device="gpu", gpus=gpus,
                context=prompt + new, batch=int(r["batch"] or 1), prompt_tokens=prompt, kv_dtype="bf16",
                gpu_layers=None, gpu_memory_utilization=0.9, gpu_total_bytes=A100_80GB, compute_capability=8.0)
    est = estimate_inference(spec, plan)
    # The benchmark sums max_memory_allocated over the GPUs of a device_map="auto" split.
    predicted = est.peak_allocated_bytes / GiB
    label = f"{r['model']} {r['precision']} in={prompt} out={new} gpus={gpus}"
    return Row(label, "inference", predicted, float(r["measured_gb"]))


def training_row(r: dict) -> Row | None:
    try:
        from fitcheck.estimate.training_calibration import training_row_prediction  # training issue
    except ImportError:
        return None
    return training_row_prediction(r)


def summarize(rows: list[Row], title: str) -> str:
    if not rows:
        return f"{title}: no rows"
    errs = [r.error_pct for r in rows]
    worst_under = min(rows, key=lambda r: r.error_pct)
    worst_over = max(rows, key=lambda r: r.error_pct)
    return (f"{title}: {len(rows)} rows, median |error| {statistics.median(abs(e) for e in errs):.2f} %, "
            f"mean error {statistics.mean(errs):+.2f} %, worst under-prediction {worst_under.error_pct:+.2f} % "
            f"({worst_under.label}), worst over-prediction {worst_over.error_pct:+.2f} % ({worst_over.label})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--mode", choices=["inference", "training", "all"], default="all")
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args(argv)
    if not args.csv.exists():
        print(f"calibration set not found: {args.csv} (pass --csv)", file=sys.stderr)
        return 2
    with args.csv.open(newline="") as f:
        data = list(csv.DictReader(f))
    results: dict[str, list[Row]] = {"inference": [], "training": []}
    skipped = 0
    for r in data:
        if r["mode"] == "inference" and args.mode in ("inference", "all"):
            results["inference"].append(inference_row(r))
        elif r["mode"] != "inference" and args.mode in ("training", "all"):
            row = training_row(r)
            if row is None:
                skipped += 1
            else:
                results["training"].append(row)
    for mode, rows in results.items():
        if args.rows and rows:
            print(f"{'row':70s} {'pred GiB':>9s} {'meas GiB':>9s} {'error':>8s}")
            for row in rows:
                print(f"{row.label:70s} {row.predicted_gib:9.2f} {row.measured_gib:9.2f} {row.error_pct:+7.1f}%")
        if rows:
            print(summarize(rows, mode))
    if skipped:
        print(f"training: {skipped} rows skipped (no training estimator yet)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
