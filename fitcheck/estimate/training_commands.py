"""Commands and settings that run a training plan: fitcheck's own command, and the settings for
peft (`LoraConfig`), transformers (`TrainingArguments`), DeepSpeed (config values) and
`accelerate launch` flags.  Pure string building; shlex-quoted."""

from __future__ import annotations

import shlex

from fitcheck.estimate.training_request import DEFAULT_LORA_RANK, DEFAULT_LORA_TARGETS, DEFAULT_SEQ_LEN, TrainingPlan

# transformers TrainingArguments(optim=...) names (training_args.OptimizerNames).
HF_OPTIM = {"adamw": "adamw_torch", "adamw-8bit": "adamw_bnb_8bit", "paged-adamw-8bit": "paged_adamw_8bit",
            "sgd": "sgd", "adafactor": "adafactor"}
HF_ATTENTION = {"flash": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}


def training_fitcheck_command(model: str, plan: TrainingPlan, *, profile: str | None = None) -> str:
    """`fitcheck MODEL --mode ...` reproducing `plan` (options that differ from defaults, plus precision)."""
    args = ["fitcheck", model, "--mode", plan.mode, "--precision", plan.precision]
    if plan.seq_len != DEFAULT_SEQ_LEN:
        args += ["--seq-len", str(plan.seq_len)]
    if plan.batch != 1:
        args += ["--batch", str(plan.batch)]
    if plan.grad_accum != 1:
        args += ["--grad-accum", str(plan.grad_accum)]
    if plan.optimizer != "adamw":
        args += ["--optimizer", plan.optimizer]
    if plan.master_weights != "fp32":
        args += ["--master-weights", plan.master_weights]
    if plan.grad_checkpointing:
        args.append("--grad-checkpointing")
    if plan.attention != "sdpa":
        args += ["--attention", plan.attention]
    if plan.mode != "full":
        if plan.lora_rank != DEFAULT_LORA_RANK:
            args += ["--lora-rank", str(plan.lora_rank)]
        if plan.lora_targets != DEFAULT_LORA_TARGETS:
            args += ["--lora-targets", plan.lora_targets]
        if plan.lora_train_embeddings:
            args.append("--lora-train-embeddings")
    if plan.device == "cpu":
        args += ["--device", "cpu"]
    if plan.gpus > 1:
        args += ["--gpus", str(plan.gpus)]
    if plan.zero is not None:
        args += ["--zero", str(plan.zero)]
    if plan.fsdp is not None:
        args += ["--fsdp", plan.fsdp]
    if plan.offload != "none":
        args += ["--offload", plan.offload]
    if profile:
        args += ["--profile", profile]
    return shlex.join(args)


def lora_config(plan: TrainingPlan) -> str:
    """peft LoraConfig(...) for the plan's adapters."""
    targets = ("'all-linear'" if plan.lora_targets == "all-linear" else
               repr(["q_proj", "k_proj", "v_proj", "o_proj"]) if plan.lora_targets == "attention" else
               repr(plan.lora_targets.split(",")))
    extra = ", modules_to_save=['embed_tokens', 'lm_head']" if plan.lora_train_embeddings else ""
    return f"LoraConfig(r={plan.lora_rank}, lora_alpha={2 * plan.lora_rank}, target_modules={targets}{extra})"


def deepspeed_config(plan: TrainingPlan) -> str:
    """The DeepSpeed config values that matter for memory (zero_optimization and precision)."""
    if plan.zero is None:
        return ""
    z = {"stage": plan.zero}
    if plan.offload in ("optimizer", "optimizer+params"):
        z["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if plan.offload == "optimizer+params":
        z["offload_param"] = {"device": "cpu", "pin_memory": True}
    prec = {"bf16": '"bf16": {"enabled": true}', "fp16": '"fp16": {"enabled": true}'}.get(plan.compute_dtype, "")
    zo = str(z).replace("'", '"').replace("True", "true")
    return "{" + (prec + ", " if prec else "") + f'"zero_optimization": {zo}' + "}"


def training_arguments(plan: TrainingPlan) -> str:
    args = [f"per_device_train_batch_size={plan.batch}", f"gradient_accumulation_steps={plan.grad_accum}",
            f"optim='{HF_OPTIM[plan.optimizer]}'"]
    if plan.grad_checkpointing:
        args.append("gradient_checkpointing=True")
    if plan.compute_dtype in ("bf16", "fp16"):
        args.append(f"{plan.compute_dtype}=True")
    if plan.device == "cpu":
        args.append("use_cpu=True")
    return "TrainingArguments(" + ", ".join(args) + ")"


def training_engine_command(model_id: str, plan: TrainingPlan) -> str:
    """`accelerate launch` flags plus the Python-side settings (peft, transformers, DeepSpeed).

    On the CPU: `accelerate launch --cpu` with one process, and TrainingArguments(use_cpu=True)."""
    args = ["accelerate", "launch"] + (["--cpu"] if plan.device == "cpu" else []) + ["--num_processes", str(plan.gpus)]
    if plan.compute_dtype in ("bf16", "fp16"):
        args += ["--mixed_precision", plan.compute_dtype]
    if plan.zero is not None:
        args += ["--use_deepspeed", "--zero_stage", str(plan.zero)]
        if plan.offload in ("optimizer", "optimizer+params"):
            args += ["--offload_optimizer_device", "cpu"]
        if plan.offload == "optimizer+params":
            args += ["--offload_param_device", "cpu"]
    if plan.fsdp is not None:
        args += ["--use_fsdp", "--fsdp_sharding_strategy", plan.fsdp.upper().replace("-", "_")]
        if plan.offload != "none":
            args += ["--fsdp_offload_params", "true"]
    args += ["--gradient_accumulation_steps", str(plan.grad_accum), "train.py"]
    notes = [f"from_pretrained('{model_id}', attn_implementation='{HF_ATTENTION[plan.attention]}'"
             + (", quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', "
                "bnb_4bit_use_double_quant=True)" if plan.precision == "nf4" else
                ", quantization_config=BitsAndBytesConfig(load_in_8bit=True)" if plan.precision == "int8" else "") + ")"]
    if plan.mode != "full":
        notes.append(lora_config(plan))
    notes.append(training_arguments(plan))
    ds = deepspeed_config(plan)
    if ds:
        notes.append(f"deepspeed config {ds}")
    return shlex.join(args) + "  # " + "; ".join(notes)
