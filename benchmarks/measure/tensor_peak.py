"""Live-tensor peak of a training step on the CPU, from the PyTorch profiler's allocator events.

    python -m benchmarks.measure.tensor_peak [--cases PATTERN] [--out benchmarks/results/cpu-tensor-peaks-DATE.csv]

Resident memory (what `python -m benchmarks.measure` records) is live tensors plus what glibc's
heap keeps of freed ones.  This separates the two: each training case is built as the runner
builds it, one step is run to create the optimizer state, and a second step runs under
`torch.profiler.profile(profile_memory=True)`.  Walking the allocator's `[memory]` events in time
order gives the highest sum of live tensor bytes, and the op running at that moment.  The
peak is reported in absolute terms: the bytes alive when the step starts (parameters, buffers,
optimizer states; gradients are None after zero_grad) plus the step's own peak above them.

`python -m benchmarks.measure.compare` compares the estimator's peak allocated bytes with it
(group "training tensors").  Each case runs in a fresh process (as the runner does).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import sys
from pathlib import Path

from .cases import CPU_CASES, select
from .fresh_process import emit, run_fresh
from .profiler_peak import live_tensor_peak

RESULTS = Path(__file__).resolve().parents[1] / "results"
FIELDS = ("case_id", "start_bytes", "step_peak_bytes", "tensor_peak_bytes", "op_at_peak", "torch_version",
          "transformers_version", "peft_version", "date")


def measure(case_id: str) -> dict:
    """One case, in this process (torch, transformers and peft needed)."""
    from torch.profiler import ProfilerActivity, profile

    from . import workloads as W

    case = next(c for c in CPU_CASES if c.id == case_id)
    prepared = W.prepare(case)
    model, _, _ = W.build(case, "cpu", prepared)
    ids = W.random_ids(case, model, "cpu")
    optimizer = W.make_optimizer(case, model)

    def step():
        loss, _ = W.forward_loss(case, model, ids, "cpu")
        W.backward(loss, model)
        del loss
        W.optimizer_step(optimizer)

    step()
    start = (sum(p.numel() * p.element_size() for p in model.parameters())
             + sum(b.numel() * b.element_size() for b in model.buffers()) + W.tensor_bytes(dict(optimizer.state)))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    peak, innermost = live_tensor_peak(prof)
    versions = W.versions()
    return {"case_id": case_id, "start_bytes": start, "step_peak_bytes": peak, "tensor_peak_bytes": start + peak,
            "op_at_peak": innermost, "torch_version": versions["torch_version"],
            "transformers_version": versions["transformers_version"], "peft_version": versions["peft_version"],
            "date": datetime.date.today().isoformat()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", help="substring or glob of case ids (default: every training case)")
    ap.add_argument("--out", type=Path, default=RESULTS / f"cpu-tensor-peaks-{datetime.date.today().isoformat()}.csv")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # run one case here and print it as JSON
    args = ap.parse_args(argv)
    if args.one:
        emit(measure(args.one))
        return 0
    cases = [c for c in select(CPU_CASES, args.cases) if c.mode.startswith("train") and not c.autocast]
    rows = []
    for case in cases:
        row = run_fresh("benchmarks.measure.tensor_peak", case.id, case.id)
        if row is None:
            continue
        rows.append(row)
        print(f"{row['case_id']:40s} tensor peak {row['tensor_peak_bytes'] / 2**20:8.0f} MiB at {row['op_at_peak']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
