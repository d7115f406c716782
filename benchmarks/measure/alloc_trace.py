"""Record the tensor allocations of training steps (or of transformers' generate) on the CPU and
replay them through the CUDA caching allocator's rules (benchmarks.measure.caching_allocator).

    python -m benchmarks.measure.alloc_trace --model Qwen/Qwen2.5-0.5B --mode lora --lengths 1024x6
    python -m benchmarks.measure.alloc_trace --model Qwen/Qwen2.5-0.5B --mode lora --vary 1024 --steps 12
    python -m benchmarks.measure.alloc_trace --sweep [--runs GLOB] [--out benchmarks/results/allocator-replay-DATE.csv]
    python -m benchmarks.measure.alloc_trace --compare benchmarks/results/allocator-replay-DATE.csv

The model is built from its catalog config with random weights (as benchmarks.measure builds
it); its tensors count as allocated one by one in module order, as a checkpoint loads onto a
GPU.  The steps then run under `torch.profiler.profile(profile_memory=True)`: every allocation and
free of the CPU allocator comes back with its address and size, in order, which is what a CUDA
run of the same steps asks of the caching allocator (the CPU kernels' own scratch aside).  AdamW
runs with foreach=True, as on CUDA.  `--vary N` draws each step's sequence length as SFT data
does: lengths of a skewed distribution (median N/2), truncated at N.

The sweep compares fixed and varying lengths for LoRA and full fine-tuning, and runs transformers'
generate (a prompt, then 64 tokens), and writes per run the peak allocated, the peak reserved on a
GPU with memory to spare, and the smallest GPU the run fits in.  `--compare CSV` sets the
estimator against them.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime
import fnmatch
import json
import os
import random
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .caching_allocator import Replay, needed_bytes, replay
from .cases import Case
from .fresh_process import emit, run_fresh

RESULTS = Path(__file__).resolve().parents[1] / "results"
FIELDS = ("run", "model", "mode", "lora_rank", "lengths", "logits_bytes_max", "peak_allocated_bytes",
          "peak_reserved_bytes", "needed_bytes", "slack_bytes", "slack_over_allocated", "slack_over_logits",
          "needed_over_allocated", "segments", "device", "torch_version", "transformers_version", "date", "layers")


def varied_lengths(max_len: int, steps: int, seed: int = 0) -> list[int]:
    """SFT-like lengths: log-normal around max_len / 2, at least 16 tokens, truncated at max_len."""
    rng = random.Random(seed)
    return [max(16, min(max_len, int(rng.lognormvariate(0, 0.8) * max_len / 2))) for _ in range(steps)]


# `generate` runs: one prompt of the run's length, then this many greedy tokens.
GENERATED_TOKENS = 64


def _case(model: str, mode: str, seq: int, layers: int | None, gc: bool, dtype: str, rank: int = 16) -> Case:
    if mode == "generate":
        return Case(id="trace", model=model, mode="generate", dtype=dtype, layers=layers, seq_len=seq,
                    new_tokens=GENERATED_TOKENS)
    common = dict(id="trace", model=model, dtype=dtype, layers=layers, seq_len=seq, grad_checkpointing=gc,
                  optimizer="adamw", train_steps=1)
    if mode == "lora":
        return Case(mode="train_lora", lora_rank=rank, lora_targets="all-linear", **common)
    return Case(mode="train_full", **common)


def _run_steps(case: Case, model, lengths: list[int], device: str, mark) -> None:
    """A generate case once, or one AdamW step (foreach, CUDA's default) per length; `mark()`
    is the context each step runs in."""
    import torch

    from . import workloads as W

    if case.mode == "generate":
        with mark():
            W.generate(case, model, W.random_ids(case, model, device))
        return
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5, foreach=True)
    for length in lengths:
        with mark():
            step_case = dataclasses.replace(case, seq_len=length)
            ids = W.random_ids(step_case, model, device)
            loss, _ = W.forward_loss(step_case, model, ids, device)
            W.backward(loss, model)
            del loss, ids
            W.optimizer_step(optimizer)


def record(model: str, mode: str, lengths: list[int], layers: int | None, gc: bool,
           dtype: str, rank: int = 16) -> tuple[dict, list[tuple]]:
    """The model's tensors (id -> bytes, loaded one by one, as a checkpoint loads onto a GPU) and
    the allocation events of training one step per length."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from . import workloads as W

    case = _case(model, mode, max(lengths), layers, gc, dtype, rank)
    prepared = W.prepare(case)
    built, _, _ = W.build(case, "cpu", prepared)
    start = {("tensor", i): t.numel() * t.element_size()
             for i, t in enumerate([*built.parameters(), *built.buffers()])}
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _run_steps(case, built, lengths, "cpu", lambda: record_function("fitcheck_step"))
    path = tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(path)
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)["traceEvents"]
    os.unlink(path)
    marks = sorted(e["ts"] for e in trace if e.get("name") == "fitcheck_step")
    memory = sorted((e["ts"], e["args"].get("Ev Idx", 0), e["args"]["Addr"], e["args"]["Bytes"]) for e in trace
                    if e.get("name") == "[memory]" and e["args"].get("Device Type", 0) == 0)
    events: list[tuple] = []
    live: dict[int, int] = {}
    serial = 0
    mark = 0
    for ts, _, addr, nbytes in memory:
        while mark < len(marks) and marks[mark] <= ts:
            events.append(("step",))
            mark += 1
        if nbytes > 0:
            serial += 1
            live[addr] = serial
            events.append(("a", serial, nbytes))
        elif addr in live:
            events.append(("f", live.pop(addr)))
    return start, events


def measure_cuda(model: str, mode: str, lengths: list[int], layers: int | None, gc: bool, dtype: str,
                 rank: int = 16) -> tuple[int, int]:
    """The same steps on a CUDA device: (max_memory_allocated, max_memory_reserved), the weights
    included, what the build cached beyond them given back first."""
    import torch

    from . import workloads as W

    case = _case(model, mode, max(lengths), layers, gc, dtype, rank)
    built, _, _ = W.build(case, "cuda", W.prepare(case))
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    _run_steps(case, built, lengths, "cuda", contextlib.nullcontext)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()


def run(model: str, mode: str, lengths: list[int], layers: int | None, gc: bool, dtype: str,
        rank: int = 16, device: str = "cpu") -> dict:
    import torch
    import transformers

    from .models import spec_for

    spec, _ = spec_for(model)
    logits = max(lengths) * spec.vocab_size * 4    # one fp32 logits tensor of the longest step
    if device == "cuda":   # measured, not replayed: the check of the replay
        peak_allocated, peak_reserved = measure_cuda(model, mode, lengths, layers, gc, dtype, rank)
        r = Replay(peak_allocated, peak_reserved, 0)
        needed = 0
    else:
        start, events = record(model, mode, lengths, layers, gc, dtype, rank)
        r = replay(events, start)
        needed = needed_bytes(events, start)
    slack = r.peak_reserved - r.peak_allocated
    return {"model": model, "mode": mode, "lora_rank": rank if mode == "lora" else 0,
            "lengths": " ".join(map(str, lengths)), "logits_bytes_max": logits,
            "peak_allocated_bytes": r.peak_allocated, "peak_reserved_bytes": r.peak_reserved, "needed_bytes": needed,
            "slack_bytes": slack, "slack_over_allocated": round(slack / r.peak_allocated, 4),
            "slack_over_logits": round(slack / logits, 4),
            "needed_over_allocated": round(needed / r.peak_allocated - 1, 4) if needed else "",
            "segments": r.segments, "device": device, "torch_version": torch.__version__,
            "transformers_version": transformers.__version__, "date": datetime.date.today().isoformat(),
            "layers": layers or ""}


# The sweep: one 0.5B model whose loss (a 151,936-entry vocabulary) dominates the transient memory,
# as in the published Qwen tables, and a 135M one with a small vocabulary; fixed vs varying lengths;
# and the Qwen(1) table's 1.8B shape (Qwen1.5-1.8B) with its LoRA rank 64, short and long.
# Then full fine-tuning where the optimizer step is the peak and its tensors dominate: the 0.5B model at
# 256 tokens (the loss path a quarter of the 1,024-token runs'), and Qwen2.5-1.5B's first 6 layers, whose
# MLP matrices (1,536 × 8,960 in bf16: 26.25 MiB) take segments of their own, rounded to 28 MiB.
# (run id, model, mode, per-step lengths, LoRA rank[, decoder layers built: the first N])
SWEEP: tuple[tuple, ...] = (
    ("qwen05-lora-fixed-1024", "Qwen/Qwen2.5-0.5B", "lora", [1024] * 6, 16),
    ("qwen05-lora-vary-1024", "Qwen/Qwen2.5-0.5B", "lora", varied_lengths(1024, 12), 16),
    ("qwen05-full-fixed-1024", "Qwen/Qwen2.5-0.5B", "full", [1024] * 4, 0),
    ("qwen05-full-vary-1024", "Qwen/Qwen2.5-0.5B", "full", varied_lengths(1024, 12, seed=1), 0),
    ("qwen05-lora-fixed-256", "Qwen/Qwen2.5-0.5B", "lora", [256] * 6, 16),
    ("smol135-full-fixed-1024", "HuggingFaceTB/SmolLM2-135M", "full", [1024] * 4, 0),
    ("smol135-full-vary-1024", "HuggingFaceTB/SmolLM2-135M", "full", varied_lengths(1024, 12, seed=2), 0),
    ("qwen1-18-lora-r64-fixed-256", "Qwen/Qwen1.5-1.8B-Chat", "lora", [256] * 3, 64),
    ("qwen1-18-lora-r64-fixed-2048", "Qwen/Qwen1.5-1.8B-Chat", "lora", [2048] * 2, 64),
    ("qwen05-full-fixed-256", "Qwen/Qwen2.5-0.5B", "full", [256] * 4, 0),
    ("qwen15-l6-full-fixed-512", "Qwen/Qwen2.5-1.5B", "full", [512] * 3, 0, 6),
    # inference: a prompt, then GENERATED_TOKENS greedy tokens with the KV cache (transformers' generate)
    ("qwen05-generate-P4096", "Qwen/Qwen2.5-0.5B", "generate", [4096], 0),
    ("qwen05-generate-P512", "Qwen/Qwen2.5-0.5B", "generate", [512], 0),
    ("llama1-generate-P2048", "meta-llama/Llama-3.2-1B", "generate", [2048], 0),
    ("qwen1-18-generate-P1024", "Qwen/Qwen1.5-1.8B-Chat", "generate", [1024], 0),
)


def estimate(row: dict) -> tuple[int, int]:
    """The estimator's (peak allocated, peak reserved) bytes on one GPU for a sweep row's run."""
    from fitcheck.engines import estimate_inference
    from fitcheck.engines.training.memory import estimate_training
    from fitcheck.plan import Plan, TrainingPlan

    from .hf_config import scaled_spec
    from .models import spec_for

    spec, _ = spec_for(row["model"])
    if row.get("layers"):   # a run built with the model's first N layers
        spec = scaled_spec(spec, int(row["layers"]))
    if row["mode"] == "generate":
        prompt = int(row["lengths"])
        plan = Plan(precision="bf16", engine="transformers", device="gpu", gpus=1, context=prompt + GENERATED_TOKENS,
                    batch=1, prompt_tokens=prompt, kv_dtype="bf16", gpu_layers=None, gpu_memory_utilization=0.9,
                    gpu_total_bytes=None, compute_capability=8.0)
        gpu = estimate_inference(spec, plan).devices[0]
        return gpu.peak_allocated_bytes, gpu.peak_reserved_bytes
    lora = row["mode"] == "lora"
    plan = TrainingPlan(
        mode="lora" if lora else "full", precision="bf16", compute_dtype="bf16",
        seq_len=max(int(x) for x in row["lengths"].split()), batch=1, grad_accum=1, optimizer="adamw",
        # peft >= 0.12 keeps adapters in fp32 on a 16-bit base (autocast_adapter_dtype=True)
        master_weights="fp32" if lora else "none", grad_checkpointing=True, attention="sdpa",
        lora_rank=int(row["lora_rank"]) or 16, lora_targets="all-linear", lora_dropout=0.0,
        lora_train_embeddings=False, gpus=1, zero=None, fsdp=None, offload="none", ds_bucket_elements=None,
        compute_capability=8.0)
    gpu = estimate_training(spec, plan).gpu_devices[0]
    return gpu.peak_allocated_bytes, gpu.peak_reserved_bytes


@dataclass(frozen=True)
class ReplayComparison:
    run: str
    mode: str                   # lora, full or generate
    replay_allocated: int       # live-tensor peak of the trace
    estimate_allocated: int
    needed: int                 # smallest GPU the trace runs in (caching allocator replayed)
    roomy_reserved: int         # max_memory_reserved on a GPU with memory to spare
    estimate_reserved: int

    @property
    def allocated_error(self) -> float:
        return self.estimate_allocated / self.replay_allocated - 1

    @property
    def needed_error(self) -> float:
        return self.estimate_reserved / self.needed - 1


def replay_comparisons(path: Path) -> list[ReplayComparison]:
    """Each sweep row of `path` against the estimator (no torch needed)."""
    out = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            alloc, reserved = estimate(row)
            out.append(ReplayComparison(row["run"], row["mode"], int(row["peak_allocated_bytes"]), alloc,
                                        int(row["needed_bytes"]),
                                        int(row["peak_reserved_bytes"]), reserved))
    return out


def compare(path: Path) -> str:
    """Replayed vs estimated, per run: live tensors, and the reserve the run needs."""
    from tabulate import tabulate

    mib = 2**20
    comparisons = replay_comparisons(path)
    rows = [(c.run, f"{c.replay_allocated / mib:,.0f}", f"{c.estimate_allocated / mib:,.0f}",
             f"{c.allocated_error:+.1%}", f"{c.needed / mib:,.0f}", f"{c.roomy_reserved / mib:,.0f}",
             f"{c.estimate_reserved / mib:,.0f}", f"{c.needed_error:+.1%}") for c in comparisons]
    table = tabulate(rows, headers=("run", "allocated MiB", "estimate", "error", "needs MiB", "reserved (roomy GPU)",
                                    "estimate reserved", "error vs needs"), disable_numparse=True)

    def summary(name, errs):
        return (f"{name}: median |error| {statistics.median(abs(e) for e in errs):.1%}, "
                f"worst under-prediction {min(errs):+.1%}, worst over-prediction {max(errs):+.1%}")

    training = [c for c in comparisons if c.mode != "generate"]
    inference = [c for c in comparisons if c.mode == "generate"]
    lines = [table, summary("allocated", [c.allocated_error for c in comparisons]),
             summary("training reserve vs need", [c.needed_error for c in training])]
    if inference:
        lines.append(summary("inference reserve vs need", [c.needed_error for c in inference]))
    cuda = sorted(path.parent.glob("allocator-cuda-*.csv"))
    if cuda:   # the replay checked against the same steps run on a GPU
        with cuda[-1].open(newline="") as f:
            measured = {r["run"]: r for r in csv.DictReader(f)}
        checks = [(c.run, f"{c.replay_allocated / mib:,.0f}", f"{int(m['peak_allocated_bytes']) / mib:,.0f}",
                   f"{c.roomy_reserved / mib:,.0f}", f"{int(m['peak_reserved_bytes']) / mib:,.0f}",
                   f"{c.roomy_reserved / int(m['peak_reserved_bytes']) - 1:+.1%}")
                  for c in comparisons if (m := measured.get(c.run))]
        lines += ["", f"replay vs CUDA ({cuda[-1].name})",
                  tabulate(checks, headers=("run", "replay allocated", "CUDA allocated", "replay reserved",
                                            "CUDA reserved", "replay error"), disable_numparse=True)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="Qwen/Qwen2.5-0.5B")
    ap.add_argument("--mode", choices=("lora", "full", "generate"), default="lora")
    ap.add_argument("--lengths", help="per-step lengths: 1024x6 or 1024,512,900")
    ap.add_argument("--vary", type=int, metavar="MAX", help="SFT-like lengths truncated at MAX")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--no-gc", action="store_true", help="without gradient checkpointing")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rank", type=int, default=16, help="LoRA rank (all-linear targets)")
    ap.add_argument("--sweep", action="store_true", help="the fixed/varying comparison (each run in a fresh process)")
    ap.add_argument("--runs", help="with --sweep: only the runs whose id matches one of these comma-separated globs")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: run the sweep's steps on a GPU and record max_memory_allocated/reserved, to check "
                         "the replay (allocator-cuda-DATE.csv)")
    ap.add_argument("--compare", type=Path, metavar="CSV", help="estimate vs a sweep's CSV (no torch needed)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.compare:
        print(compare(args.compare))
        return 0
    if args.one:
        run_id, model, mode, lengths, rank, layers, device = json.loads(args.one)
        emit({"run": run_id, **run(model, mode, lengths, layers, True, "bfloat16", rank, device)})
        return 0
    if args.sweep:
        kind = "allocator-replay" if args.device == "cpu" else "allocator-cuda"
        out = args.out or RESULTS / f"{kind}-{datetime.date.today().isoformat()}.csv"
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", newline="") as f:   # row by row: a run stopped by its time limit keeps what it did
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            for spec in SWEEP:
                if args.runs and not any(fnmatch.fnmatchcase(spec[0], g.strip()) for g in args.runs.split(",")):
                    continue
                layers = spec[5] if len(spec) > 5 else None
                row = run_fresh("benchmarks.measure.alloc_trace", json.dumps([*spec[:5], layers, args.device]), spec[0])
                if row is None:
                    continue
                writer.writerow(row)
                f.flush()
                _print(row)
        print(f"wrote {out}")
        return 0
    if args.vary:
        lengths = varied_lengths(args.vary, args.steps)
    elif args.lengths and "x" in args.lengths:
        n, times = args.lengths.split("x")
        lengths = [int(n)] * int(times)
    else:
        lengths = [int(x) for x in (args.lengths or "1024").split(",")]
    _print({"run": "adhoc", **run(args.model, args.mode, lengths, args.layers, not args.no_gc, args.dtype, args.rank)})
    return 0


def _print(row: dict) -> None:
    mib = 2**20
    print(f"{row['run']:28s} allocated {row['peak_allocated_bytes'] / mib:8.0f} MiB  reserved "
          f"{row['peak_reserved_bytes'] / mib:8.0f} MiB  slack {row['slack_bytes'] / mib:6.0f} MiB "
          f"({row['slack_over_allocated']:.1%} of allocated, {row['slack_over_logits']:.2f} × fp32 logits)"
          + (f"; runs in {row['needed_bytes'] / mib:8.0f} MiB (+{row['needed_over_allocated']:.1%})"
             if row["needed_bytes"] else " (measured on CUDA)"))


if __name__ == "__main__":
    sys.exit(main())
