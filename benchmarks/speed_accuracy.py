"""Speed estimates vs published tokens/s: the ratio predicted/measured per row and its spread.

    python benchmarks/speed_accuracy.py [--rows] [--calibration PATH] [--reference PATH]

Two sources:
- the calibration set's Qwen2.5 speed benchmark rows (transformers 4.46 on A100 80GB, batch 1,
  2048 tokens generated after prompts of 1/6144/14336/30720 tokens; "speed NN tok/s" in the notes
  column).  The published speed is generated tokens ÷ wall time of generate(), so the prompt's
  prefill is part of it: predicted = 2048 / (prompt / prefill + 2048 / decode at the mean position).
- benchmarks/data/speed_reference.csv: llama.cpp decode (tg) and prefill (pp) figures on NVIDIA,
  Apple and x86 machines, each row with its source.
- benchmarks/data/qwen3_speed_h20.csv: the Qwen3 speed benchmark (transformers 4.51.3 and SGLang 0.4.6.post1 on
  NVIDIA H20, batch 1, 2048 tokens generated after prompts of 1 to 129,042 tokens).  Its speed is
  (prompt + generated tokens) / wall time (the page's own definition, `speed_definition` in the file), the
  prefill inside the wall time: predicted = (prompt + 2048) / (prompt / prefill + 2048 / decode at the mean
  position).

The prediction is the geometric middle of fitcheck's low–high range (fitcheck.estimate.speed).
Models come from the catalog; machines from hardware profiles where one exists, else from the
row's bandwidth and peak (datasheet figures in the notes).
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import statistics
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fitcheck.machine import CPU, GPU, Host, Machine, SystemMemory, Unknown  # noqa: E402
from fitcheck.model.resolve import resolve_model  # noqa: E402
from fitcheck.plan import resolve_inference
from fitcheck.profiles import load_profile  # noqa: E402
from fitcheck.request import Request  # noqa: E402
from fitcheck.speed.decode import estimate_speed
from fitcheck.units import GiB  # noqa: E402

DEFAULT_CALIBRATION = REPO / "benchmarks" / "data" / "calibration" / "measured.csv"
DEFAULT_REFERENCE = REPO / "benchmarks" / "data" / "speed_reference.csv"
DEFAULT_GENERATE = REPO / "benchmarks" / "data" / "qwen3_speed_h20.csv"
QWEN_PRECISION = {"BF16": "bf16", "GPTQ-Int8": "gptq-int8", "GPTQ-Int4": "gptq-int4", "AWQ": "awq"}
QWEN_GENERATED = 2048


def _machine_from_row(row: dict) -> Machine:
    """A bare machine with the row's bandwidth (GB/s) and peak (TFLOP/s)."""
    bw = int(float(row["bandwidth_gbps"]) * 1e9)
    tflops = float(row["tflops"]) if row["tflops"] else Unknown("not given")
    big = 512 * GiB
    if row.get("device") == "cpu":
        return Machine(row["machine"], "desktop", Host("linux"), SystemMemory(big, big, None, bandwidth_bytes_per_s=bw),
                       CPU(row["machine"], "x86_64", 16, 16, 16, bf16_tflops=tflops))
    n = max(int(row["gpus"] or 1), 1)
    apple = "M1" in row["machine"] or "M2" in row["machine"] or "M3" in row["machine"]
    mem = int(row["gpu_memory_mib"]) * 2**20 if row.get("gpu_memory_mib") else big
    cc = row.get("compute_capability") or "8.0"
    gpus = tuple(GPU(i, "apple" if apple else "nvidia", row["machine"], mem, mem, unified_memory=apple,
                     compute_capability=Unknown("n/a") if apple else cc,
                     bandwidth_bytes_per_s=bw, bf16_tflops=tflops) for i in range(n))
    return Machine(row["machine"], "desktop", Host("linux"), SystemMemory(big, big, None),
                   CPU("host", "x86_64", 16, 16, 16), gpus=gpus)


def reference_rows(path: Path) -> list[tuple[str, float, float]]:
    """(label, predicted, measured) for each llama.cpp reference row."""
    out = []
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            spec = resolve_model(row["model"]).spec
            machine = load_profile(row["profile"]) if row["profile"] else _machine_from_row(row)
            ctx = int(row["context"])
            gpus = int(row["gpus"] or 0)
            req = Request(precision=row["precision"], context=ctx, engine=row["engine"], device=row["device"],
                                   gpus=gpus or None, prompt_tokens=ctx)
            plan = resolve_inference(req, spec, machine)
            speed = estimate_speed(spec, plan, machine)
            rate = speed.decode if row["metric"] == "decode" else speed.prefill
            label = f"{row['metric']:7} {row['model']:10} {row['precision']:6} {row['engine']:9} {row['machine']}"
            out.append((label, rate.mid, float(row["measured_tok_s"])))
    return out


def qwen_rows(path: Path) -> list[tuple[str, float, float]]:
    """(label, predicted, measured) for the Qwen2.5 transformers speed benchmark rows."""
    out = []
    a100 = load_profile("a100-80gb")
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            m = re.search(r"speed ([0-9.]+) tok/s", row.get("notes", ""))
            if row["mode"] != "inference" or not m:
                continue
            spec = resolve_model("Qwen/" + row["model"]).spec
            n = int(row["num_gpus"] or 1)
            machine = replace(a100, gpus=tuple(replace(a100.gpus[0], index=i) for i in range(n)))
            prompt = int(row["input_len"])
            mean_ctx = prompt + QWEN_GENERATED // 2
            req = Request(precision=QWEN_PRECISION[row["precision"]], context=prompt + QWEN_GENERATED,
                                   engine="transformers", gpus=n, prompt_tokens=prompt)
            plan = resolve_inference(req, spec, machine)
            speed = estimate_speed(spec, plan, machine, context=mean_ctx)
            seconds = prompt / speed.prefill.mid + QWEN_GENERATED / speed.decode.mid
            label = f"Qwen2.5 {row['model'].split('-')[1]:5} {row['precision']:9} {n}×A100 prompt {prompt:>5}"
            out.append((label, QWEN_GENERATED / seconds, float(m.group(1))))
    return out


# what each speed_definition divides by the wall time of one request (prompt's prefill and the generation):
# True when the prompt's tokens are counted too
SPEED_DEFINITIONS = {"(prompt+generated)/wall": True, "generated/wall": False}


def request_speed(prompt: int, generated: int, prefill: float, decode: float, definition: str) -> float:
    """Tokens/s of one request as a table defines it: the counted tokens over the wall time of the prompt's prefill
    (at `prefill` tokens/s) and the generation (at `decode` tokens/s, the rate at the mean position)."""
    seconds = prompt / prefill + generated / decode
    return ((prompt + generated) if SPEED_DEFINITIONS[definition] else generated) / seconds


GENERATE_VERSIONS = {"transformers": "4.51.3"}  # the Qwen3 table's transformers release (its Environments)


def generate_rows(path: Path) -> dict[str, list[tuple[str, float, float]]]:
    """(label, predicted, measured) per engine for rows timed over a whole request: prefill then decode."""
    out: dict[str, list[tuple[str, float, float]]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            spec = resolve_model(row["model"]).spec
            machine = load_profile(row["profile"]) if row["profile"] else _machine_from_row(row)
            prompt, generated = int(row["prompt_tokens"]), int(row["generated_tokens"])
            n = int(row["gpus"] or 1)
            req = Request(precision=row["precision"], context=prompt + generated, engine=row["engine"], gpus=n,
                          prompt_tokens=prompt, transformers_version=GENERATE_VERSIONS.get(row["engine"]))
            plan = resolve_inference(req, spec, machine)
            speed = estimate_speed(spec, plan, machine, context=prompt + generated // 2)
            predicted = request_speed(prompt, generated, speed.prefill.mid, speed.decode.mid,
                                      row["speed_definition"])
            label = (f"{row['model'].split('/')[-1]:16} {row['precision']:9} {n}×{row['machine'].split()[1]} "
                     f"prompt {prompt:>6}")
            out.setdefault(row["engine"], []).append((label, predicted, float(row["measured_tok_s"])))
    return out


def summary(name: str, rows: list[tuple[str, float, float]]) -> str:
    ratios = [p / m for _, p, m in rows]
    logs = [abs(math.log(r)) for r in ratios]
    within = sum(1 for r in ratios if 1 / 1.5 <= r <= 1.5)
    return (f"{name}: {len(rows)} rows, ratio predicted/measured median {statistics.median(ratios):.2f}, "
            f"min {min(ratios):.2f}, max {max(ratios):.2f}, within ×1.5: {within}/{len(rows)}, "
            f"median |log ratio| {statistics.median(logs):.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=Path, default=DEFAULT_CALIBRATION)
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE)
    ap.add_argument("--generate", type=Path, default=DEFAULT_GENERATE)
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args(argv)
    groups = [("llama.cpp reference", reference_rows(args.reference))]
    groups += [(f"Qwen3 {engine} H20", rows) for engine, rows in generate_rows(args.generate).items()]
    if args.calibration.is_file():
        groups.append(("Qwen2.5 transformers A100", qwen_rows(args.calibration)))
    else:
        print(f"(calibration set not found at {args.calibration}; Qwen rows skipped)")
    for name, rows in groups:
        if args.rows:
            print(f"\n{name}\n{'row':70} {'predicted':>10} {'measured':>10} {'ratio':>6}")
            for label, p, m in rows:
                print(f"{label:70} {p:10.1f} {m:10.1f} {p / m:6.2f}")
    print()
    for name, rows in groups:
        print(summary(name, rows))
    everything = [r for _, rows in groups for r in rows]
    print(summary("all", everything))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
