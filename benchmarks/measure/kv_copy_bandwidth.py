"""Time transformers' per-token KV-cache work on a CUDA GPU: what KV_CONCAT_BANDWIDTH assumes, measured.

    python -m benchmarks.measure.kv_copy_bandwidth [--model Qwen/Qwen2.5-7B-Instruct] [--contexts 6144 14336 30720]
                                                   [--reps 20] [--out kv_copy.csv] [--dry-run]

For one layer of the model at each context N it times, with CUDA events (median of --reps):
  clone     K.clone(): a contiguous copy (vectorised), the reference byte rate;
  cat       torch.cat([K, k_new], dim=-2), what DynamicCache.update does to K (and again to V);
  repeat    repeat_kv(K, g): expand + reshape, the grouped-query copy transformers 4.46 makes before attention;
  attention scaled_dot_product_attention of one query row over the repeated K and V.
Each row: bytes the op moves (reads + writes), seconds, GB/s, and GB/s over clone's (cat's is what
KV_CONCAT_BANDWIDTH in fitcheck/speed/efficiency.py takes from pytorch/pytorch#150233).  --dry-run prints the ops and
their bytes without torch (no GPU needed).  The run needs torch with CUDA; the versions go into the CSV.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from fitcheck.model.resolve import resolve_model  # noqa: E402

ELEMENT_BYTES = 2  # bf16


@dataclass(frozen=True)
class Op:
    name: str
    context: int
    bytes_moved: int


def planned_ops(kv_heads: int, heads: int, head_dim: int, context: int) -> list[Op]:
    """The ops one layer runs on K per decoded token (V repeats them), with the bytes each moves."""
    k = kv_heads * context * head_dim * ELEMENT_BYTES  # one layer's K at `context` positions
    g = max(heads // max(kv_heads, 1), 1)
    return [Op("clone", context, 2 * k),                      # read K, write its copy
            Op("cat", context, 2 * k + 2 * kv_heads * head_dim * ELEMENT_BYTES),  # read K + the token, write both
            Op("repeat", context, k + g * k),                  # read K, write g copies
            Op("attention", context, 2 * g * k)]               # read the repeated K and V


def _time(fn, reps: int) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def measure(kv_heads: int, heads: int, head_dim: int, context: int, reps: int) -> list[tuple[Op, float]]:
    import torch
    import torch.nn.functional as F

    g = max(heads // max(kv_heads, 1), 1)
    dev, dt = "cuda", torch.bfloat16
    K = torch.randn(1, kv_heads, context, head_dim, device=dev, dtype=dt)
    V = torch.randn_like(K)
    k_new = torch.randn(1, kv_heads, 1, head_dim, device=dev, dtype=dt)
    q = torch.randn(1, heads, 1, head_dim, device=dev, dtype=dt)

    def repeat(x):
        return x[:, :, None].expand(1, kv_heads, g, x.shape[2], head_dim).reshape(1, kv_heads * g, x.shape[2], head_dim)

    Kr, Vr = repeat(K), repeat(V)
    fns = {"clone": lambda: K.clone(), "cat": lambda: torch.cat([K, k_new], dim=-2), "repeat": lambda: repeat(K),
           "attention": lambda: F.scaled_dot_product_attention(q, Kr, Vr)}
    return [(op, _time(fns[op.name], reps)) for op in planned_ops(kv_heads, heads, head_dim, context)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="Qwen/Qwen2.5-7B-Instruct")
    ap.add_argument("--contexts", type=int, nargs="+", default=[6144, 14336, 30720])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    spec = resolve_model(args.model).spec
    shape = (spec.num_kv_heads, spec.num_attention_heads, spec.attn_head_dim)
    if args.dry_run:
        for n in args.contexts:
            for op in planned_ops(*shape, n):
                print(f"{op.name:9} context {n:>6}: {op.bytes_moved / 1e6:10.1f} MB per layer")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: run with --dry-run for the planned ops", file=sys.stderr)
        return 2
    rows = []
    for n in args.contexts:
        timed = measure(*shape, n, args.reps)
        clone_rate = timed[0][0].bytes_moved / timed[0][1]
        for op, seconds in timed:
            rate = op.bytes_moved / seconds
            rows.append({"model": args.model, "op": op.name, "context": n, "bytes": op.bytes_moved,
                         "seconds": f"{seconds:.6g}", "gb_per_s": f"{rate / 1e9:.1f}",
                         "share_of_clone": f"{rate / clone_rate:.3f}", "gpu": torch.cuda.get_device_name(),
                         "torch": torch.__version__})
            print(f"{op.name:9} context {n:>6}: {rate / 1e9:7.1f} GB/s ({rate / clone_rate:.2f} of clone)")
    if args.out:
        with open(args.out, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
