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


# ---- training rows: the Qwen(1) fine-tuning table (QwenLM/Qwen README @2df8e8a) -----------------
# What each row's setup implies (QwenLM/Qwen finetune.py and finetune/*.sh):
# - all rows: batch 1, gradient accumulation 8 (no memory effect), --gradient_checkpointing,
#   flash-attention 2, LoraArguments defaults r=64, alpha 16, dropout 0.05, target_modules
#   c_attn (fused qkv), c_proj (attention *and* MLP output: both modules carry that name), w1, w2.
# - "LoRA" / "LoRA (emb)": finetune_lora_single_gpu.sh: bf16 via the Trainer (PyTorch autocast,
#   no DeepSpeed), adamw_torch.  peft of the time cast adapters to the base dtype, so adapters,
#   gradients and AdamW states are bf16 (--master-weights none).  "(emb)" = a base (not chat)
#   model, for which finetune.py sets modules_to_save=["wte", "lm_head"]: trainable copies.
# - "LoRA (multinode)" (2 nodes × 2 GPUs): the README says "the rest of configurations are the
#   same as other Qwen-7B experiments"; the per-GPU values track the single-GPU run (38.9 vs
#   36.6 G at 8192), so it is modelled as the same run under DDP, one replica per GPU.
# - "Q-LoRA": finetune_qlora_single_gpu.sh: the released GPTQ-Int4 chat model, fp16, DeepSpeed
#   ZeRO-2 (ds_config_zero2.json: reduce_bucket_size 2e8, overlap_comm) on one GPU.  DeepSpeed
#   runs the model in fp16 without autocast, and Qwen1's code computes the loss on fp16 logits.
# - "Full-parameter": finetune_ds.sh with DeepSpeed ZeRO-3 (README: "we use DeepSpeed ZeRO 3"),
#   bf16; 1.8B on 1 GPU, 7B on 2 GPUs.  "LoRA + Deepspeed Zero3": 72B LoRA, ZeRO-3, 4 GPUs.
# - Multi-GPU values are totals over GPUs: the per-GPU prediction is compared with total / N.
# - Units: the table prints "G".  They are decimal GB: Qwen-7B full at 1024 tokens reads 162.0 G
#   on 2 × 80 GiB GPUs, 81.0 per GPU, which cannot be GiB.  Which counter was read is not said
#   (nvidia-smi or max_memory_reserved), so the prediction compared is total_bytes (reserved +
#   CUDA context: what must be free).
# - Qwen-1.8B/14B/72B *base* models are not in the catalog; "(emb)" rows use the chat entries,
#   whose architecture is identical.
_QWEN1 = {"Qwen-1.8B": "Qwen/Qwen-1_8B-Chat", "Qwen-7B": "Qwen/Qwen-7B-Chat", "Qwen-14B": "Qwen/Qwen-14B-Chat",
          "Qwen-72B": "Qwen/Qwen-72B-Chat"}
_QWEN_DS_BUCKET = 200_000_000  # ds_config_zero2.json reduce_bucket_size


def training_plan(r: dict):
    from fitcheck.estimate.training_request import TrainingPlan

    notes = r["notes"]
    n = int(r["num_gpus"] or 1)
    common = dict(seq_len=int(r["output_len"]), batch=int(r["batch"] or 1), grad_accum=8, optimizer="adamw",
                  grad_checkpointing=True, attention="flash", lora_rank=64, lora_targets="c_attn,c_proj,w1,w2",
                  lora_dropout=0.05, lora_train_embeddings="LoRA (emb)" in notes, gpus=n, fsdp=None, offload="none",
                  compute_capability=8.0)
    if r["mode"] == "qlora":
        return TrainingPlan(mode="qlora", precision="gptq-int4", compute_dtype="fp16", master_weights="fp32", zero=2,
                            ds_bucket_elements=_QWEN_DS_BUCKET, **common)
    if r["mode"] == "full":
        return TrainingPlan(mode="full", precision="bf16", compute_dtype="bf16", master_weights="fp32", zero=3,
                            ds_bucket_elements=None, **common)
    if "Zero3" in notes:
        return TrainingPlan(mode="lora", precision="bf16", compute_dtype="bf16", master_weights="fp32", zero=3,
                            ds_bucket_elements=None, **common)
    return TrainingPlan(mode="lora", precision="bf16", compute_dtype="bf16", master_weights="none", zero=None,
                        ds_bucket_elements=None, **common)


def training_row(r: dict) -> Row | None:
    from fitcheck.estimate.training import estimate_training

    if r["model"] not in _QWEN1:
        return None
    spec = resolve_model(_QWEN1[r["model"]]).spec
    plan = training_plan(r)
    est = estimate_training(spec, plan)
    predicted = est.gpu_devices[0].total_bytes / GiB
    measured_gb = float(r["measured_gb"]) / (plan.gpus if r["memory_scope"] == "total_all_gpus" else 1)
    method = r["notes"].split('"')[1] if '"' in r["notes"] else r["mode"]
    label = f"{r['model']} {method} seq={plan.seq_len} gpus={plan.gpus}"
    return Row(label, "training", predicted, measured_gb * 1e9 / GiB)


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
        print(f"training: {skipped} rows skipped (model not in the calibration map)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
