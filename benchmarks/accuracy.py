"""Estimator vs published measurements: per-row error and the summary.

    python benchmarks/accuracy.py [--csv PATH] [--configs PATH] [--mode inference|training|all] [--rows]

Reads a calibration set in the schema of benchmarks/data/calibration/measured.csv (the
default, with its model-configs.json; sources and licences in benchmarks/data/SOURCES.md): the
Qwen2.5 speed benchmark (inference, transformers 4.46, A100, sum over GPUs of
torch.cuda.max_memory_allocated, GiB) and the Qwen fine-tuning table.  Any other table in that
schema is read too: each row's model comes from fitcheck's catalog (checked against the shapes
in model-configs.json, built from them when the catalog has no such model), its setup from the
precision, framework, batch, lengths, checkpointing, flash-attention, GPU and notes columns, and
the figure compared from the metric column (max_memory_allocated → the estimate's peak
allocated bytes, max_memory_reserved → peak reserved, nvidia-smi or unspecified → total).
A row that cannot be mapped is listed with the reason, never guessed silently.
Prints each row's predicted and measured GiB and the error, then the median |error| and the
worst under-prediction (an under-prediction is an out-of-memory crash).
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

import json  # noqa: E402
import re  # noqa: E402

from fitcheck.engines import estimate_inference
from fitcheck.engines.transformers.releases import attention_mode, legacy_cache_mode, logits_mode
from fitcheck.errors import FitcheckError  # noqa: E402
from fitcheck.estimate.formats import weight_format  # noqa: E402
from fitcheck.model.hf_config import spec_from_config  # noqa: E402
from fitcheck.model.resolve import resolve_model  # noqa: E402
from fitcheck.model.spec import ModelSpec  # noqa: E402
from fitcheck.plan import Plan
from fitcheck.units import GiB  # noqa: E402

DEFAULT_CSV = REPO / "benchmarks" / "data" / "calibration" / "measured.csv"  # see benchmarks/data/SOURCES.md
A100_80GB = 81920 * 1024**2
# Precision column → fitcheck format, where weight_format() does not read it as it is.
_PRECISION = {"int4 (bnb)": "nf4", "int8 (bnb)": "int8", "int4 (gptq)": "gptq-int4", "int8 (gptq)": "gptq-int8",
              "int4 (awq)": "awq", "nf4": "nf4", "qlora": "nf4"}
# Config keys whose short name fitcheck's catalog gives to a newer family member (it resolves
# "qwen-7b" to Qwen2.5): the calibration set's "Qwen-7B" is the original Qwen.
_EXPLICIT = {"Qwen-7B": "Qwen/Qwen-7B-Chat", "Qwen-14B": "Qwen/Qwen-14B-Chat", "Qwen-72B": "Qwen/Qwen-72B-Chat",
             "Qwen-1.8B": "Qwen/Qwen-1_8B-Chat"}


class Skip(Exception):
    """A row this script cannot map to an estimate; the message says why."""


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


def _same_shape(spec: ModelSpec, cfg: dict | None) -> bool:
    if not cfg:
        return True
    return (spec.num_layers, spec.hidden_size, spec.vocab_size) == (
        cfg.get("num_hidden_layers"), cfg.get("hidden_size"), cfg.get("vocab_size"))


def row_spec(r: dict, configs: dict) -> ModelSpec:
    """The row's model: the catalog entry with the shapes model-configs.json gives, else one built from them."""
    key = r.get("config_key") or r["model"]
    cfg = configs.get(key)
    tried = []
    for name in (_EXPLICIT.get(key), r["model"], key, _qwen_id(r["model"])):
        if not name or name in tried:
            continue
        tried.append(name)
        try:
            spec = resolve_model(name).spec
        except FitcheckError:
            continue
        if _same_shape(spec, cfg):
            return spec
    if cfg:
        config = {k: v for k, v in cfg.items() if not isinstance(v, (list, dict))}
        config["model_type"] = str(cfg.get("arch", "")).split()[0]
        try:
            return spec_from_config(config, key, source="model-configs.json")
        except FitcheckError as exc:
            raise Skip(f"model {key}: {exc}") from None
    raise Skip(f"model {key}: not in the catalog and no config in model-configs.json")


def _int(value: str, default: int | None = None) -> int | None:
    m = re.match(r"\s*(\d+)", value or "")
    return int(m.group(1)) if m else default


def _yes(value: str) -> bool:
    return (value or "").strip().lower().startswith(("yes", "true", "y", "1", "on", "✔"))


def _precision(text: str) -> str:
    t = (text or "").strip()
    for key, fmt in _PRECISION.items():
        if t.lower().startswith(key):
            return fmt
    try:
        return weight_format(t.split()[0] if t else "").name
    except (FitcheckError, IndexError):
        raise Skip(f"precision {text!r} is not a format fitcheck knows") from None


def _engine(framework: str) -> str:
    f = (framework or "").lower()
    if "vllm" in f:
        return "vllm"
    if "llama.cpp" in f or "llama-cpp" in f or "gguf" in f:
        return "llama.cpp"
    return "transformers"


def _logits_mode(framework: str, architecture: str = "") -> str:
    """The prefill's logits for the row's transformers version (fitcheck.plan.logits_mode,
    as `--transformers-version` sets them); a current release when the framework names none."""
    return logits_mode(architecture, _transformers_version(framework))[0]


def _transformers_version(framework: str) -> str | None:
    m = re.search(r"transformers\s+(\d+\.\d+)", framework or "", re.IGNORECASE)
    return m.group(1) if m else None


def _gpu_bytes(gpu: str) -> int:
    """Total memory of the row's GPU ('A100 80GB', 'RTX 4090 24GB'); an A100 80GB when not given."""
    m = re.search(r"(\d+)\s*G", gpu or "")
    return int(m.group(1)) * 1024**3 if m else A100_80GB


# The compute capability of the GPUs the published tables name (NVIDIA's CUDA GPUs list); an A100 when
# the row names none.  It picks the kernels' scratch and what an FP8 request runs on.
_CC = {"H20": 9.0, "H100": 9.0, "H200": 9.0, "H800": 9.0, "L40": 8.9, "L4": 8.9, "4090": 8.9, "A100": 8.0,
       "A800": 8.0, "A10": 8.6, "3090": 8.6}


def _compute_capability(gpu: str) -> float:
    return next((cc for name, cc in _CC.items() if re.search(rf"\b{name}\b", gpu or "")), 8.0)


def _measured_gib(r: dict, per_gpu: bool = True) -> float:
    """The measured figure in GiB ('GiB' bases as they are, printed 'GB'/'G' as 10⁹ bytes), per GPU
    unless `per_gpu` is False (a total over GPUs stays the total)."""
    value = float(r["measured_gb"])
    basis = (r.get("unit_basis") or "").strip()
    if not basis.startswith("GiB") and "MiB" not in basis:
        value = value * 1e9 / GiB
    if per_gpu and (r.get("memory_scope") or "") == "total_all_gpus":
        value /= max(_int(r.get("num_gpus"), 1), 1)
    return value


def _figure(device, metric: str) -> int:
    """The estimate's number that the table's counter corresponds to."""
    m = (metric or "").lower()
    if "allocated" in m and "reserved" not in m:
        return device.peak_allocated_bytes
    if "reserved" in m and "allocated" not in m:
        return device.peak_reserved_bytes
    return device.total_bytes


def inference_row(r: dict, configs: dict | None = None) -> Row:
    spec = row_spec(r, configs or {})
    prompt, new = _int(r["input_len"], 1), _int(r["output_len"], 0)
    gpus = _int(r["num_gpus"], 1)
    precision = _precision(r["precision"])
    engine = _engine(r.get("framework", ""))
    kv = "bf16" if precision == "bf16" else "fp16"
    plan = Plan(precision=precision, engine=engine, device="gpu", gpus=gpus,
                context=prompt + new, batch=_int(r["batch"], 1), prompt_tokens=prompt, kv_dtype=kv,
                gpu_layers=None, gpu_memory_utilization=0.9, gpu_total_bytes=_gpu_bytes(r.get("gpu", "")),
                compute_capability=_compute_capability(r.get("gpu", "")),
                logits=_logits_mode(r.get("framework", ""), spec.architecture) if engine == "transformers" else "last")
    if engine == "transformers":
        # what `--transformers-version` sets: the release's attention default and its cache class
        version = _transformers_version(r.get("framework", ""))
        attention = "flash" if "flash" in (r.get("notes", "") + r.get("framework", "")).lower() else \
            attention_mode(spec.architecture, version, None)[0]
        plan = plan.with_changes(attention=attention, legacy_cache=legacy_cache_mode(spec.architecture, version),
                                 transformers_version=version)
    est = estimate_inference(spec, plan)
    metric = r.get("metric", "")
    if (r.get("memory_scope") or "") == "total_all_gpus" and "allocated" in metric.lower():
        # The Qwen2.5 benchmark sums max_memory_allocated over the GPUs of a device_map="auto" split.
        predicted = est.peak_allocated_bytes / GiB
        measured = _measured_gib(r, per_gpu=False)
    else:
        predicted = _figure(est.devices[0], metric) / GiB
        measured = _measured_gib(r)
    label = f"{r['model']} {r['precision']} in={prompt} out={new} gpus={gpus}"
    return Row(label, "inference", predicted, measured)


# ---- training rows: the Qwen(1) fine-tuning table (QwenLM/Qwen README @2df8e8a) -----------------
# What each row's setup implies (QwenLM/Qwen finetune.py and finetune/*.sh):
# - all rows: batch 1, gradient accumulation 8 (gradients stay allocated), --gradient_checkpointing,
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
    from fitcheck.plan import TrainingPlan

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


def _search(pattern: str, text: str, default=None):
    m = re.search(pattern, text or "", re.IGNORECASE)
    return m.group(1) if m else default


def generic_training_plan(r: dict, spec: ModelSpec):
    """A TrainingPlan from the columns and the notes of a row from any other table."""
    from fitcheck.plan import TrainingPlan
    from fitcheck.request import PRECISIONS_BY_MODE

    mode = r["mode"]
    if mode not in PRECISIONS_BY_MODE:
        raise Skip(f"mode {mode!r} is not full, lora or qlora")
    notes = f"{r.get('notes', '')} {r.get('framework', '')} {r.get('precision', '')}"
    precision = _precision(r["precision"])
    if precision not in PRECISIONS_BY_MODE[mode]:
        raise Skip(f"{precision} is not a {mode} base fitcheck models")
    compute = "fp32" if precision == "fp32" else "fp16" if (precision == "fp16" or "fp16" in notes.lower()) else "bf16"
    inp, out = _int(r.get("input_len")), _int(r.get("output_len"))
    seq = (inp or 0) + (out or 0)
    if not seq:
        raise Skip("no sequence length")
    stage = _search(r"zero[-_ ]?(?:stage[-_ ]?)?([0-3])\b", notes)
    fsdp = "full-shard" if "fsdp" in notes.lower() else None
    offload = "optimizer" if re.search(r"offload", notes, re.IGNORECASE) else "none"
    if offload != "none" and stage is None:
        raise Skip("offload without a ZeRO stage")
    named = _search(r"target_modules\s*[=:]\s*([\w,]+)", notes)
    targets = named or ("all-linear" if re.search(r"all[- _]?linear|\bALL\b", notes) else "attention")
    master = "none" if (compute == "fp32" or re.search(r"no fp32 master|pure bf16", notes, re.IGNORECASE)) else "fp32"
    return TrainingPlan(
        mode=mode, precision=precision, compute_dtype=compute, seq_len=seq, batch=_int(r.get("batch"), 1),
        grad_accum=int(_search(r"grad(?:ient)?[ _-]*accum\w*(?:[ _-]*steps)?\s*[=:]?\s*(\d+)", notes, 1)),
        optimizer="adamw", master_weights=master,
        grad_checkpointing=_yes(r.get("grad_checkpointing", "")),
        attention="flash" if _yes(r.get("flash_attn", "")) else "sdpa",
        lora_rank=int(_search(r"\b(?:lora[ _-]?)?(?:r|rank)\s*[=:]?\s*(\d+)", notes, 8)),
        lora_targets=targets, lora_dropout=float(_search(r"dropout\s*[=:]?\s*(0?\.\d+)", notes, 0.0)),
        lora_train_embeddings=bool(re.search(r"modules_to_save|\(emb\)", notes)), gpus=_int(r.get("num_gpus"), 1),
        zero=int(stage) if stage is not None and not fsdp else None, fsdp=fsdp, offload=offload,
        ds_bucket_elements=None, compute_capability=8.0)


def is_oom(r: dict) -> bool:
    """A row whose published result is out of memory (measured_gb "OOM")."""
    return (r.get("measured_gb") or "").strip().upper() == "OOM"


def training_row(r: dict, configs: dict | None = None) -> Row:
    from fitcheck.engines.training.memory import estimate_training

    if is_oom(r):
        raise Skip("published as out of memory: no figure to compare (benchmarks.varying_reserve.oom_rows "
                   "checks that fitcheck says it does not fit)")
    qwen_readme = "QwenLM/Qwen README" in (r.get("source") or "") and r["model"] in _QWEN1
    spec = resolve_model(_QWEN1[r["model"]]).spec if qwen_readme else row_spec(r, configs or {})
    try:
        plan = training_plan(r) if qwen_readme else generic_training_plan(r, spec)
        est = estimate_training(spec, plan)
    except FitcheckError as exc:
        raise Skip(str(exc)) from None
    # The Qwen table does not name its counter: total (reserved + CUDA context) is what must be free.
    predicted = _figure(est.gpu_devices[0], "" if qwen_readme else r.get("metric", "")) / GiB
    method = r["notes"].split('"')[1] if '"' in r.get("notes", "") else r["mode"]
    label = f"{r['model']} {method} seq={plan.seq_len} gpus={plan.gpus}"
    return Row(label, "training", predicted, _measured_gib(r))


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
    ap.add_argument("--configs", type=Path, default=None,
                    help="model-configs.json with the rows' shapes (default: next to the CSV)")
    ap.add_argument("--mode", choices=["inference", "training", "all"], default="all")
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args(argv)
    if not args.csv.exists():
        print(f"calibration set not found: {args.csv} (pass --csv)", file=sys.stderr)
        return 2
    with args.csv.open(newline="") as f:
        data = list(csv.DictReader(f))
    configs_path = args.configs or args.csv.parent / "model-configs.json"
    configs = json.loads(configs_path.read_text()) if configs_path.exists() else {}
    results: dict[str, list[Row]] = {"inference": [], "training": []}
    skipped: list[str] = []
    for r in data:
        kind = "inference" if r["mode"] == "inference" else "training"
        if args.mode not in (kind, "all"):
            continue
        try:
            row = inference_row(r, configs) if kind == "inference" else training_row(r, configs)
        except (Skip, KeyError, ValueError) as exc:
            skipped.append(f"{r.get('model', '?')} {r.get('mode', '?')} {r.get('precision', '')}: {exc}")
            continue
        results[kind].append(row)
    for mode, rows in results.items():
        if args.rows and rows:
            print(f"{'row':70s} {'pred GiB':>9s} {'meas GiB':>9s} {'error':>8s}")
            for row in rows:
                print(f"{row.label:70s} {row.predicted_gib:9.2f} {row.measured_gib:9.2f} {row.error_pct:+7.1f}%")
        if rows:
            print(summarize(rows, mode))
    for line in skipped:
        print(f"skipped {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
