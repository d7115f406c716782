"""What one measurement runs: a :class:`Job`, built from a check's resolved plan (pure, no torch).

The parent (``fitcheck measure``) builds the job from the same ``Plan``/``TrainingPlan`` the
estimate used, so the run and the estimate answer the same question; the child
(:mod:`fitcheck.measure.child`) receives it as JSON and runs exactly that.  What a plain PyTorch
loop on one device cannot run (vLLM, llama.cpp, GGUF types, GPTQ/AWQ kernels, several GPUs,
DeepSpeed/FSDP, offload, DeepSpeed-style fp32 master weights) is refused here with the reason, as
bad input (exit 2), before anything is imported.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

from fitcheck.errors import FitcheckError
from fitcheck.measure.hf_config import UnsupportedSpec, spec_to_hf_config
from fitcheck.model.spec import ModelSpec

# fitcheck precision -> torch dtype name of the parameters (bitsandbytes: the compute/base dtype).
TORCH_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "int8": "bfloat16", "nf4": "bfloat16"}
FLOAT_PRECISIONS = ("fp32", "fp16", "bf16")
BNB_PRECISIONS = ("int8", "nf4")   # bitsandbytes: LLM.int8 and NF4 with double quantization (CUDA only)
OPTIMIZERS = ("adamw", "sgd", "adafactor", "adamw-8bit", "paged-adamw-8bit")
BNB_OPTIMIZERS = ("adamw-8bit", "paged-adamw-8bit")
DEVICES = ("cpu", "cuda", "mps")
ATTENTION = {"sdpa": "sdpa", "eager": "eager", "flash": "flash_attention_2"}
# peft target_modules for fitcheck's --lora-targets names.
LORA_TARGET_MODULES = {"all-linear": "all-linear", "attention": ["q_proj", "k_proj", "v_proj", "o_proj"]}
DEFAULT_NEW_TOKENS = 16
DEFAULT_STEPS = 2


@dataclass(frozen=True)
class Job:
    """One measurement, every field concrete (JSON-serialisable)."""

    hf_config: dict                 # transformers config dict, with model_type
    device: str                     # cpu | cuda | mps
    precision: str                  # fitcheck precision of the weights
    mode: str                       # inference | full | lora | qlora
    batch: int = 1
    prompt_tokens: int = 0          # inference: the prefill
    new_tokens: int = 0             # inference: generated after the prompt
    sampling: str = "greedy"        # inference: how generate() picks tokens (generate_step.generate_kwargs)
    seq_len: int = 0                # training: tokens per sequence
    steps: int = 0                  # training: optimizer steps
    grad_accum: int = 1
    optimizer: str = ""
    grad_checkpointing: bool = False
    attention: str = "sdpa"         # transformers attn_implementation
    lora_rank: int = 0
    lora_targets: object = None     # peft target_modules ("all-linear" or a list)
    lora_train_embeddings: bool = False
    fp32_adapters: bool = True      # peft autocast_adapter_dtype (>= 0.12 default)
    memory_limit_bytes: int | None = None  # above the baseline: CUDA's set_per_process_memory_fraction; CPU: RAM
    host_limit_bytes: int | None = None    # RAM above the baseline: the parent's guard; CPU (Linux): RLIMIT_AS too
    seed: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def dtype(self) -> str:
        return TORCH_DTYPE[self.precision]

    @property
    def training(self) -> bool:
        return self.mode != "inference"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Job:
        data = fields_from_json(cls, text, "job")
        data["notes"] = tuple(data.get("notes", ()))
        return cls(**data)


def fields_from_json(cls, text: str, what: str) -> dict:
    """The JSON object `text` as keyword arguments of dataclass `cls`; an unknown key is a ValueError."""
    data = json.loads(text)
    unknown = set(data) - {f.name for f in fields(cls)}
    if unknown:
        raise ValueError(f"unknown {what} fields: {sorted(unknown)}")
    return data


def _refuse(what: str, hint: str | None = None) -> FitcheckError:
    return FitcheckError(f"fitcheck measure cannot run {what}", hint)


def hf_config_for(spec: ModelSpec) -> dict:
    """The transformers config of `spec` (its shape exactly); an architecture it cannot build is bad input."""
    try:
        return spec_to_hf_config(spec)
    except UnsupportedSpec as exc:
        raise FitcheckError(f"fitcheck measure cannot build this model: {exc}",
                            "measure supports llama, qwen2, qwen3, mistral, mixtral, qwen2_moe, gemma2 and gemma3 "
                            "architectures; `fitcheck MODEL` still estimates it") from None


def device_for(machine, requested: str) -> str:
    """cpu, cuda or mps: where the run goes on this machine (`requested` is check's --device)."""
    if requested == "cpu" or not machine.gpus:
        if requested == "gpu":
            raise FitcheckError("--device gpu, but this machine has no GPU", machine.gpu_status or None)
        return "cpu"
    vendor = machine.gpus[0].vendor
    if vendor == "apple":
        return "mps"
    if vendor in ("nvidia", "amd"):   # ROCm builds of torch expose HIP as torch.cuda
        return "cuda"
    raise FitcheckError(f"fitcheck measure has no meter for a {vendor} GPU", "use --device cpu")


def inference_job(spec: ModelSpec, plan, device: str, new_tokens: int, memory_limit: int | None,
                  host_limit: int | None = None) -> Job:
    """The job for an inference plan (transformers: a prefill of the prompt, then `new_tokens` generated)."""
    if plan.engine != "transformers":
        raise _refuse(f"--engine {plan.engine}", "it runs transformers; add --engine transformers")
    if plan.gpus > 1:
        raise _refuse(f"--gpus {plan.gpus}", "it measures one device; use --gpus 1")
    _check_precision(plan.precision, device)
    if plan.kv_dtype not in ("fp32", "fp16", "bf16") or (plan.kv_dtype != "fp32" and plan.kv_dtype
                                                          != _compute_precision(plan.precision)):
        raise _refuse(f"--kv-dtype {plan.kv_dtype} with {plan.precision} weights",
                      "transformers keeps the KV cache in the compute dtype; use --kv-dtype auto")
    if plan.logits != "last":
        raise _refuse("a transformers version before 4.45 (--transformers-version)",
                      "it runs the installed transformers; drop --transformers-version")
    return Job(hf_config=hf_config_for(spec), device=device, precision=plan.precision, mode="inference",
               batch=plan.batch, prompt_tokens=plan.prompt_tokens, new_tokens=new_tokens, sampling=plan.sampling,
               memory_limit_bytes=memory_limit, host_limit_bytes=host_limit)


def training_job(spec: ModelSpec, plan, device: str, steps: int, memory_limit: int | None,
                 host_limit: int | None = None) -> Job:
    """The job for a TrainingPlan: `steps` optimizer steps of `grad_accum` micro-batches each."""
    if plan.gpus > 1 or plan.zero is not None or plan.fsdp is not None:
        raise _refuse("several GPUs, DeepSpeed ZeRO or FSDP", "it measures one process on one device")
    if plan.offload != "none":
        raise _refuse(f"--offload {plan.offload}", "ZeRO-Offload needs DeepSpeed")
    _check_precision(plan.precision, device)
    if plan.mode == "full" and plan.master_weights == "fp32" and plan.precision != "fp32":
        raise _refuse("fp32 master weights for full fine-tuning of 16-bit weights (DeepSpeed/apex mixed precision)",
                      "add --master-weights none (a plain PyTorch loop), or --precision fp32")
    if plan.optimizer not in OPTIMIZERS:
        raise _refuse(f"--optimizer {plan.optimizer}")
    if plan.optimizer in BNB_OPTIMIZERS and device != "cuda":
        raise _refuse(f"--optimizer {plan.optimizer} on {device}", "bitsandbytes optimizers need CUDA; use adamw")
    if plan.attention == "flash" and device != "cuda":
        raise _refuse("flash-attention off CUDA", "use --attention sdpa")
    lora = plan.mode in ("lora", "qlora")
    targets: object = None
    if lora:
        targets = LORA_TARGET_MODULES.get(plan.lora_targets,
                                          [t.strip() for t in plan.lora_targets.split(",") if t.strip()])
    return Job(hf_config=hf_config_for(spec), device=device, precision=plan.precision, mode=plan.mode,
               batch=plan.batch, seq_len=plan.seq_len, steps=steps, grad_accum=plan.grad_accum,
               optimizer=plan.optimizer, grad_checkpointing=plan.grad_checkpointing,
               attention=ATTENTION[plan.attention], lora_rank=plan.lora_rank if lora else 0,
               lora_targets=targets, lora_train_embeddings=lora and plan.lora_train_embeddings,
               fp32_adapters=plan.master_weights == "fp32", memory_limit_bytes=memory_limit,
               host_limit_bytes=host_limit)


def _compute_precision(precision: str) -> str:
    return "bf16" if precision in BNB_PRECISIONS else precision


def _check_precision(precision: str, device: str) -> None:
    if precision in BNB_PRECISIONS:
        if device != "cuda":
            raise _refuse(f"{precision} weights on {device}", "bitsandbytes quantization needs CUDA; use bf16 or fp32")
        return
    if precision not in FLOAT_PRECISIONS:
        raise _refuse(f"{precision} weights",
                      "it builds fp32/fp16/bf16 weights (and bitsandbytes int8/nf4 on CUDA); GPTQ, AWQ, FP8 and "
                      "GGUF checkpoints need their own kernels and files")
