"""A training Request resolved against a machine: every choice concrete, every default recorded.

The device first (on the CPU a training run is one process in RAM), the base precision (QLoRA's NF4, else the
GPU's 16-bit type), the recipe's defaults (gradient checkpointing by mode), the GPUs (all of them with --zero or
--fsdp), and what this machine cannot run, from the training rows of the capability table.
"""

from __future__ import annotations

from fitcheck import engines
from fitcheck.engines.training import BASE_ENGINE
from fitcheck.engines.transformers import dequantize
from fitcheck.engines.transformers.releases import loss_shift_copy_mode
from fitcheck.estimate.formats import derived_note, weight_format
from fitcheck.estimate.lora_targets import parse_targets
from fitcheck.estimate.result import Assumption
from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec
from fitcheck.plan.inference import gpu_problems, typed_precision, typed_precision_note, validate_request
from fitcheck.plan.plan import DEFAULT_LORA_RANK, DEFAULT_LORA_TARGETS, DEFAULT_SEQ_LEN, TrainingPlan
from fitcheck.request import Request

# ---- training ----------------------------------------------------------------------------------
CPU_PRECISION_WHY = "CPU training: bf16 assumed"


# The recipe of the library that runs each mode.  QLoRA: peft's prepare_model_for_kbit_training(model,
# use_gradient_checkpointing=True) turns on model.gradient_checkpointing_enable() by default
# (https://github.com/huggingface/peft/blob/v0.13.2/src/peft/utils/other.py, prepare_model_for_kbit_training);
# full and LoRA: transformers' TrainingArguments(gradient_checkpointing=False).
RECIPE_CHECKPOINTING = {"full": (False, "Trainer default (off)"),
                        "lora": (False, "Trainer default (off)"),
                        "qlora": (True, "QLoRA recipe: peft's prepare_model_for_kbit_training enables it")}


def grad_checkpointing(req: Request) -> tuple[bool, str]:
    """(on, why) for a training request: the option when given, else its mode's recipe."""
    if req.grad_checkpointing is not None:
        return req.grad_checkpointing, "from --grad-checkpointing" if req.grad_checkpointing \
            else "from --no-grad-checkpointing"
    return RECIPE_CHECKPOINTING[req.mode]


def _training_problems(req: Request, plan_precision: str, device: str, gpus: int, machine: Machine) -> list[str]:
    """Why this machine cannot run the training request, from the capability table."""
    kind, cc = engines.machine_kind(machine, device)
    where = "this run is on the CPU (--device cpu)" if req.device == "cpu" else (
        f"{machine.name} has no GPU" if kind == engines.CPU else f"here: {engines.KIND_NAMES[kind]}")
    out: list[str] = []
    if device == "gpu" and not machine.gpus:
        return gpu_problems(machine, "--device gpu" if req.device == "gpu" else f"--gpus {req.gpus}", gpus)
    if device == "gpu" and gpus > len(machine.gpus):
        out += gpu_problems(machine, f"--gpus {gpus}", gpus)
    if kind == engines.CPU and req.gpus is not None:
        out.append(f"--gpus {req.gpus} needs GPUs, but {where}: CPU training runs one process")
    if req.zero is not None or req.fsdp is not None:
        what = f"--zero {req.zero} (DeepSpeed ZeRO)" if req.zero is not None else f"--fsdp {req.fsdp}"
        problem = engines.SHARDING_RUNS.problem(kind, cc)
        if problem:
            out.append(f"{what}: {problem}, but {where}")
    base = engines.TRAINING_BASE_RUNS.get(plan_precision)
    if base is not None and base.problem(kind, cc):
        what = f"QLoRA's {plan_precision} base" if req.mode == "qlora" else f"a {plan_precision} base"
        out.append(f"{what}: {base.problem(kind, cc)}, but {where}")
    optimizer = engines.OPTIMIZER_RUNS[req.optimizer].problem(kind, cc)
    if optimizer:
        out.append(f"--optimizer {req.optimizer}: {optimizer}, but {where}")
    attention = engines.ATTENTION_RUNS[req.attention or "sdpa"].problem(kind, cc)
    if attention:
        out.append(f"--attention {req.attention}: {attention}, but {where}")
    return out


def resolve_training(req: Request, spec: ModelSpec, machine: Machine) -> TrainingPlan:
    """Fill every default of a training ``req`` for ``machine`` and record how each was chosen.

    The device comes first: on the CPU (no GPU here, or --device cpu) a training run is one process
    in RAM.  With --zero or --fsdp and no --gpus, the run shards over all of the machine's GPUs.
    """
    validate_request(req)
    has_gpu = bool(machine.gpus)
    if req.device == "cpu":
        device = "cpu"
    else:
        device = "gpu" if (has_gpu or req.device == "gpu" or req.gpus) else "cpu"
    notes: list[Assumption] = [Assumption("mode", req.mode, "from --mode", "--mode")]
    notes.append(Assumption("device", device, "from --device" if req.device != "auto" else
                            ("a GPU is present" if has_gpu else "no GPU on this machine"), "--device"))
    cc = engines.machine_kind(machine, device)[1] if device == "gpu" else None
    if device == "gpu" and has_gpu:
        half, half_why = engines.default_precision(machine, "gpu", BASE_ENGINE)
    else:
        half, half_why = "bf16", CPU_PRECISION_WHY
    if half not in ("bf16", "fp16"):
        half = "bf16"
    # Training loads a trainable base: transformers dequantizes an MXFP4 (or FP8) checkpoint first
    # (Mxfp4HfQuantizer.is_trainable is False: "consider dequantizing the model first").
    if req.precision:
        precision = typed_precision(spec, req.precision)
        notes.append(Assumption("precision", precision, typed_precision_note(spec, precision), "--precision"))
    elif req.mode == "qlora":
        precision = "nf4"
        notes.append(Assumption("precision", precision, "; ".join(t for t in (
            "QLoRA's bitsandbytes NF4 base (Dettmers et al. 2023)",
            derived_note(weight_format(precision), spec.stored_format)) if t), "--precision"))
    else:
        precision = half
        notes.append(Assumption("precision", precision, "; ".join(t for t in (
            derived_note(weight_format(precision), spec.stored_format), half_why) if t), "--precision"))
    compute = precision if precision in ("bf16", "fp16", "fp32") else half
    master = req.master_weights or "fp32"
    notes.append(Assumption("master_weights", master, "from --master-weights" if req.master_weights else
                            ("mixed precision: fp32 master copy" if req.mode == "full"
                             else "trainable adapters kept in fp32 (peft)"), "--master-weights"))
    notes.append(Assumption("optimizer", req.optimizer, "from --optimizer" if req.optimizer != "adamw" else "default",
                            "--optimizer"))
    notes.append(Assumption("seq_len", str(req.seq_len), "from --seq-len" if req.seq_len != DEFAULT_SEQ_LEN
                            else "default", "--seq-len"))
    notes.append(Assumption("batch", str(req.batch), "micro-batch per GPU" if device == "gpu"
                            else "micro-batch of the one CPU process", "--batch"))
    checkpointing, checkpointing_why = grad_checkpointing(req)
    notes.append(Assumption("grad_checkpointing", "on" if checkpointing else "off", checkpointing_why,
                            "--no-grad-checkpointing" if checkpointing else "--grad-checkpointing"))
    attention = req.attention or "sdpa"
    notes.append(Assumption("attention", attention, "transformers default (sdpa)" if req.attention is None
                            else "from --attention", "--attention"))
    if req.mode != "full":
        targets = parse_targets(req.lora_targets)
        notes.append(Assumption("lora", f"r={req.lora_rank}, targets {targets.label}"
                                + (", embeddings trained" if req.lora_train_embeddings else ""),
                                "defaults" if (req.lora_rank, req.lora_targets)
                                == (DEFAULT_LORA_RANK, DEFAULT_LORA_TARGETS) else "from the options",
                                "--lora-rank/--lora-targets"))
    visible = len(machine.gpus)
    sharded = req.zero is not None or req.fsdp is not None
    if device == "cpu":
        gpus = 1  # one process
    elif req.gpus:
        gpus = req.gpus
        notes.append(Assumption("gpus", str(gpus), "from --gpus", "--gpus"))
    elif sharded and visible > 1:
        gpus = visible
        flag = "--zero" if req.zero is not None else "--fsdp"
        notes.append(Assumption("gpus", str(gpus), f"all {visible} GPUs of this machine ({flag} shards over them)",
                                "--gpus"))
    else:
        gpus = 1
        notes.append(Assumption("gpus", "1", "one GPU (add --zero or --fsdp to shard over more)" if visible > 1
                                else "one GPU", "--gpus"))
    if req.zero is not None:
        notes.append(Assumption("sharding", f"DeepSpeed ZeRO-{req.zero}", "from --zero", "--zero"))
    elif req.fsdp is not None:
        notes.append(Assumption("sharding", f"FSDP {req.fsdp}", "from --fsdp", "--fsdp"))
    if req.offload != "none":
        notes.append(Assumption("offload", req.offload, "from --offload", "--offload"))
    if req.nodes > 1:
        notes.append(Assumption("nodes", str(req.nodes), f"from --nodes: {gpus * req.nodes} processes, "
                                f"{gpus} per node", "--nodes"))
    if req.transformers_version is not None:
        notes.append(Assumption("transformers_version", req.transformers_version,
                                "from --transformers-version: the loss "
                                + ("upcasts, then shifts the logits with a contiguous fp32 copy (4.46–4.48; "
                                   "a copy at batch > 1)"
                                   if loss_shift_copy_mode("", req.transformers_version)
                                   else "keeps no shifted copy of the fp32 logits"), "--transformers-version"))
    problems = _training_problems(req, precision, device, gpus, machine)
    return TrainingPlan(
        mode=req.mode, precision=precision, compute_dtype=compute, seq_len=req.seq_len, batch=req.batch,
        grad_accum=req.grad_accum, optimizer=req.optimizer, master_weights=master,
        grad_checkpointing=checkpointing, attention=attention, lora_rank=req.lora_rank,
        lora_targets=parse_targets(req.lora_targets).text if req.mode != "full" else req.lora_targets,
        lora_dropout=req.lora_dropout, lora_train_embeddings=req.lora_train_embeddings, gpus=gpus,
        zero=req.zero, fsdp=req.fsdp, offload=req.offload, ds_bucket_elements=req.ds_bucket_elements,
        compute_capability=cc, assumptions=tuple(notes), device=device, problems=tuple(problems),
        nodes=req.nodes, dequantize=dequantize(spec, precision), transformers_version=req.transformers_version,
    )


