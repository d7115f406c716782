"""Training speed against ms-swift's own time columns: what fitcheck's tokens/s (16-bit peak x TRAINING_MFU over
the recipe's FLOPs per token, fitcheck.speed.training) says against what each run measured.

    python -m benchmarks.training_speed [--rows]

The rows: benchmarks/data/ms_swift_speed.csv, Qwen-1.8B/7B/14B-Chat LoRA (rank 8 on c_attn, batch 1, gradient
checkpointing on, flash attention; the recipe in benchmarks/data/training_reference.csv) and full fine-tuning on one
A100 80GB.  A run's tokens/s is its samples/s (later table) or 1,000 samples / its minutes (earlier table) times the
mean tokens of a sample it trained on, from the data set's length histogram (benchmarks/data/cls-fudan-news-zh-
lengths.csv, uniform within a bin: the samples under max_length for the later table, which deletes the longer
ones; every sample cut to max_length for the earlier one).  The MFU a row implies is measured tokens/s x FLOPs per
token / the A100's 312 TFLOP/s.  Nothing is fitted here: it reports the ratio predicted/measured (the middle of
fitcheck's range) per table and mode, and the implied MFU; > 1 is a speed over-predicted (a wall time and cost
under-predicted, the direction a user plans wrong by).
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics

from benchmarks.report import DATA
from fitcheck.model.resolve import resolve_model
from fitcheck.profiles import load_profile
from fitcheck.speed.training import training_flops_per_token, training_rate

SPEED = DATA / "ms_swift_speed.csv"
LENGTHS = DATA / "cls-fudan-news-zh-lengths.csv"
MODELS = {"Qwen-1.8B": "qwen-1.8b", "Qwen-7B": "qwen-7b", "Qwen-14B": "qwen-14b"}
MACHINE = "a100-80gb"   # the tables' one A100 80GB (SXM4: 312 TFLOP/s dense BF16)
SAMPLES_PER_RUN = 1000  # the earlier table's runs: the data file's first 1,000 rows


def _bins() -> list[tuple[float, float, float]]:
    with LENGTHS.open() as f:
        return [(float(r["low"]), float(r["high"]), float(r["share"])) for r in csv.DictReader(f)]


def mean_tokens(max_length: int, delete_longer: bool) -> float:
    """The mean tokens of a sample trained on at ``max_length``: of those at most that long (deleted longer), or
    of every sample cut to it."""
    total = weight = 0.0
    for low, high, share in _bins():
        if delete_longer:
            if low >= max_length:
                continue
            top = min(high, max_length)
            part = share * (top - low) / (high - low)
            total, weight = total + part * (low + top) / 2, weight + part
        else:
            inside = max(min(high, max_length) - low, 0.0) / (high - low)
            total += share * (inside * (low + min(high, max_length)) / 2 + (1 - inside) * max_length)
            weight += share
    return total / weight


def rows() -> list[dict]:
    machine = load_profile(MACHINE)
    peak = float(machine.gpus[0].bf16_tflops) * 1e12
    out = []
    with SPEED.open() as f:
        for r in csv.DictReader(f):
            spec = resolve_model(MODELS[r["config_key"]]).spec
            length, value = int(r["max_length"]), float(r["value"])
            later = r["metric"] == "samples_per_s"
            tokens = mean_tokens(length, delete_longer=later)
            measured = value * tokens if later else SAMPLES_PER_RUN * tokens / (value * 60)
            rate = training_rate(spec, machine, method=r["mode"], gradient_checkpointing=True)
            assert rate is not None
            flops = training_flops_per_token(spec, r["mode"], gradient_checkpointing=True)
            out.append({"table": r["table"], "model": r["config_key"], "mode": r["mode"], "max_length": length,
                        "measured": measured, "predicted": math.sqrt(rate.low * rate.high),
                        "mfu": measured * flops / peak})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", action="store_true", help="every row, not only the summary")
    args = parser.parse_args()
    found = rows()
    if args.rows:
        for r in found:
            print(f"{r['table']:8} {r['model']:10} {r['mode']:5} {r['max_length']:>5}  measured {r['measured']:>8,.0f} "
                  f"tok/s  predicted {r['predicted']:>8,.0f}  ratio {r['predicted'] / r['measured']:5.2f}  "
                  f"implied MFU {r['mfu']:.1%}")
    print("| table | mode | rows | median predicted/measured | most over-predicted | implied MFU (min–max) |")
    print("|---|---|---|---|---|---|")
    for table in ("later", "earlier"):
        for mode in ("lora", "full"):
            group = [r for r in found if r["table"] == table and r["mode"] == mode]
            if not group:
                continue
            ratios = [r["predicted"] / r["measured"] for r in group]
            mfus = [r["mfu"] for r in group]
            print(f"| {table} | {mode} | {len(group)} | {statistics.median(ratios):.2f} | {max(ratios):.2f} | "
                  f"{min(mfus):.1%}–{max(mfus):.1%} |")


if __name__ == "__main__":
    main()
