"""A training question as typed (`TrainingRequest`) and resolved for a machine (`TrainingPlan`).

Pure: no probing.  Every default is recorded as an `Assumption` the user can see and change,
exactly as `request.resolve_inference` does for inference.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fitcheck.bounded import bounded_int
from fitcheck.errors import FitcheckError
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.lora import parse_targets
from fitcheck.estimate.optimizers import OPTIMIZERS
from fitcheck.estimate.request import DEVICES, MAX_BATCH, MAX_CONTEXT, MAX_GPUS, default_precision
from fitcheck.estimate.result import Assumption
from fitcheck.machine import Machine, known
from fitcheck.model.spec import ModelSpec

MODES = ("full", "lora", "qlora")
ATTENTIONS = ("flash", "sdpa", "eager")
OFFLOADS = ("none", "optimizer", "optimizer+params")
FSDP_MODES = ("full-shard", "shard-grad-op")
MASTER_WEIGHTS = ("fp32", "none")
PRECISIONS_BY_MODE = {
    "full": ("bf16", "fp16", "fp32"),
    "lora": ("bf16", "fp16", "int8"),
    "qlora": ("nf4", "gptq-int4", "int4", "awq"),
}
DEFAULT_SEQ_LEN = 2048
DEFAULT_LORA_RANK = 16
DEFAULT_LORA_TARGETS = "all-linear"
# Bounds so absurd numbers are bad input, not overflows (sequence, batch and GPUs share the inference bounds).
MAX_GRAD_ACCUM = 2**20
MAX_LORA_RANK = 2**16


@dataclass(frozen=True)
class TrainingRequest:
    """A fine-tuning question as typed; None means 'pick the default'."""

    mode: str = "lora"
    seq_len: int = DEFAULT_SEQ_LEN
    batch: int = 1                       # micro-batch per GPU
    grad_accum: int = 1                  # > 1 keeps gradients allocated between micro-batches
    precision: str | None = None         # the base weights' format
    optimizer: str = "adamw"
    master_weights: str | None = None    # fp32 | none (None: fp32)
    grad_checkpointing: bool = False     # Hugging Face Trainer default: off
    attention: str = "sdpa"              # transformers' default attn_implementation
    lora_rank: int = DEFAULT_LORA_RANK
    lora_targets: str = DEFAULT_LORA_TARGETS
    lora_dropout: float = 0.0            # peft LoraConfig default
    lora_train_embeddings: bool = False  # peft modules_to_save=["embed_tokens", "lm_head"]
    gpus: int | None = None
    zero: int | None = None              # DeepSpeed ZeRO stage
    fsdp: str | None = None              # PyTorch FSDP sharding strategy
    offload: str = "none"
    ds_bucket_elements: int | None = None  # DeepSpeed reduce_bucket_size (None: HF "auto" = hidden²)
    device: str = "auto"                 # auto | gpu | cpu (auto: the GPU when the machine has one)

    def validate(self) -> None:
        if self.mode not in MODES:
            raise FitcheckError(f"unknown training mode '{self.mode}'", "choose one of: " + ", ".join(MODES))
        for name, value, high in (("--seq-len", self.seq_len, MAX_CONTEXT), ("--batch", self.batch, MAX_BATCH),
                                  ("--grad-accum", self.grad_accum, MAX_GRAD_ACCUM)):
            bounded_int(value, name, 1, high)
        if self.gpus is not None:
            bounded_int(self.gpus, "--gpus", 1, MAX_GPUS)
        if self.optimizer not in OPTIMIZERS:
            raise FitcheckError(f"unknown optimizer '{self.optimizer}'", "choose one of: " + ", ".join(OPTIMIZERS))
        if self.master_weights is not None and self.master_weights not in MASTER_WEIGHTS:
            raise FitcheckError(f"unknown --master-weights '{self.master_weights}'", "choose fp32 or none")
        if self.attention not in ATTENTIONS:
            raise FitcheckError(f"unknown attention '{self.attention}'", "choose one of: " + ", ".join(ATTENTIONS))
        if self.offload not in OFFLOADS:
            raise FitcheckError(f"unknown --offload '{self.offload}'", "choose one of: " + ", ".join(OFFLOADS))
        if self.zero is not None and self.zero not in (0, 1, 2, 3):
            raise FitcheckError(f"--zero must be 0, 1, 2 or 3, got {self.zero}")
        if self.fsdp is not None and self.fsdp not in FSDP_MODES:
            raise FitcheckError(f"unknown --fsdp '{self.fsdp}'", "choose one of: " + ", ".join(FSDP_MODES))
        if self.zero is not None and self.fsdp is not None:
            raise FitcheckError("--zero (DeepSpeed) and --fsdp (PyTorch FSDP) are alternatives", "pass one of them")
        if self.offload != "none":
            if self.fsdp is not None:
                if self.offload != "optimizer+params" or self.fsdp != "full-shard":
                    raise FitcheckError("FSDP offloads parameters, gradients and optimizer together",
                                        "use --fsdp full-shard --offload optimizer+params")
            elif self.zero is None or self.zero == 0:
                raise FitcheckError("--offload needs DeepSpeed ZeRO", "add --zero 2 (optimizer) or --zero 3 (optimizer+params)")
            elif self.offload == "optimizer+params" and self.zero != 3:
                raise FitcheckError("parameter offload needs ZeRO-3", "use --zero 3 --offload optimizer+params")
        if self.precision is not None:
            p = weight_format(self.precision).name
            allowed = PRECISIONS_BY_MODE[self.mode]
            if p not in allowed:
                raise FitcheckError(f"--precision {self.precision} is not a {self.mode} base",
                                    f"{self.mode} takes: " + ", ".join(allowed))
        if self.mode != "full":
            bounded_int(self.lora_rank, "--lora-rank", 1, MAX_LORA_RANK)
            parse_targets(self.lora_targets)
            if not 0 <= self.lora_dropout < 1:
                raise FitcheckError(f"LoRA dropout must be in [0, 1), got {self.lora_dropout}")


@dataclass(frozen=True)
class TrainingPlan:
    """A fully resolved training configuration."""

    mode: str
    precision: str               # base weights format
    compute_dtype: str           # bf16 | fp16 | fp32: activations and 16-bit copies
    seq_len: int
    batch: int
    grad_accum: int
    optimizer: str
    master_weights: str          # fp32 | none
    grad_checkpointing: bool
    attention: str
    lora_rank: int
    lora_targets: str
    lora_dropout: float
    lora_train_embeddings: bool
    gpus: int
    zero: int | None
    fsdp: str | None
    offload: str
    ds_bucket_elements: int | None
    compute_capability: float | None = None
    assumptions: tuple[Assumption, ...] = ()
    device: str = "gpu"          # gpu | cpu: where the step runs (cpu: one process, RAM is the memory)

    def with_changes(self, **changes) -> "TrainingPlan":
        return replace(self, **changes)

    @property
    def framework(self) -> str:
        """deepspeed | fsdp | ddp | single (one process, plain PyTorch/Trainer)."""
        if self.zero is not None:
            return "deepspeed"
        if self.fsdp is not None:
            return "fsdp"
        return "ddp" if self.gpus > 1 else "single"

    @property
    def effective_batch(self) -> int:
        return self.batch * self.grad_accum * self.gpus


def _compute_capability(machine: Machine) -> float | None:
    if machine.gpus and known(machine.gpus[0].compute_capability):
        try:
            return float(machine.gpus[0].compute_capability)
        except ValueError:
            return None
    return None


_BNB_OPTIMIZERS = ("adamw-8bit", "paged-adamw-8bit")
CPU_PRECISION_WHY = "CPU training: bf16 assumed"


def _check_cpu_request(req: TrainingRequest, machine: Machine) -> None:
    """What a training run on the CPU cannot do: several processes, sharding, offload, CUDA-only kernels.

    Called once the device is known to be the CPU (before the option combinations are checked, so
    the CPU is named as the reason); each problem is one line with what to do instead.
    """
    why = "this run is on the CPU (--device cpu)" if req.device == "cpu" else f"{machine.name} has no GPU"
    one = "CPU training runs one process"
    if req.gpus is not None:
        raise FitcheckError(f"--gpus {req.gpus} needs GPUs, but {why}: {one}", "drop --gpus")
    if req.zero is not None:
        raise FitcheckError(f"--zero {req.zero} (DeepSpeed ZeRO) needs GPUs, but {why}: {one}", "drop --zero")
    if req.fsdp is not None:
        raise FitcheckError(f"--fsdp {req.fsdp} needs GPUs, but {why}: {one}", "drop --fsdp")
    if req.offload != "none":
        raise FitcheckError(f"--offload {req.offload} moves GPU memory to RAM, but {why}: CPU training runs from RAM already",
                            "drop --offload")
    if req.mode == "qlora":
        raise FitcheckError(f"QLoRA's 4-bit bases (bitsandbytes NF4, GPTQ, AWQ) need GPU kernels, but {why}",
                            "use --mode lora: a bf16 base trains on the CPU")
    if req.precision is not None and req.mode in PRECISIONS_BY_MODE:
        fmt = weight_format(req.precision)
        if fmt.name in PRECISIONS_BY_MODE[req.mode] and fmt.family != "float":
            raise FitcheckError(f"--precision {fmt.name} (a bitsandbytes base) needs GPU kernels, but {why}",
                                "use --precision bf16")
    if req.optimizer in _BNB_OPTIMIZERS:
        raise FitcheckError(f"--optimizer {req.optimizer} needs bitsandbytes' GPU kernels, but {why}",
                            "use --optimizer adamw, adafactor or sgd")
    if req.attention == "flash":
        raise FitcheckError(f"--attention flash (flash-attention 2) runs on CUDA GPUs only, but {why}",
                            "use --attention sdpa")


def resolve_training(req: TrainingRequest, spec: ModelSpec, machine: Machine) -> TrainingPlan:
    """Fill every default of `req` for `machine` and record how each was chosen.

    The device comes first: on the CPU (no GPU here, or --device cpu) a training run is one
    process in RAM, so the GPU-only options are refused with the CPU as the reason.
    """
    if req.device not in DEVICES:
        raise FitcheckError(f"unknown device '{req.device}'", "choose one of: " + ", ".join(DEVICES))
    has_gpu = bool(machine.gpus)
    if req.device == "gpu" and not has_gpu:
        raise FitcheckError(f"--device gpu, but {machine.name} has no GPU", machine.gpu_status or None)
    device = "gpu" if (req.device in ("auto", "gpu") and has_gpu) else "cpu"
    if device == "cpu":
        _check_cpu_request(req, machine)
    req.validate()
    notes: list[Assumption] = [Assumption("mode", req.mode, "from --mode", "--mode")]
    notes.append(Assumption("device", device, "from --device" if req.device != "auto" else
                            ("a GPU is present" if has_gpu else "no GPU on this machine"), "--device"))
    cc = _compute_capability(machine) if device == "gpu" else None
    if device == "gpu":
        half, half_why = default_precision(machine, "gpu")
    else:
        half, half_why = "bf16", CPU_PRECISION_WHY
    if half not in ("bf16", "fp16"):
        half = "bf16"
    if req.precision:
        precision = weight_format(req.precision).name
        notes.append(Assumption("precision", precision, "from --precision", "--precision"))
    elif req.mode == "qlora":
        precision = "nf4"
        notes.append(Assumption("precision", precision, "QLoRA's bitsandbytes NF4 base (Dettmers et al. 2023)", "--precision"))
    else:
        precision = half
        notes.append(Assumption("precision", precision, half_why, "--precision"))
    compute = precision if precision in ("bf16", "fp16", "fp32") else half
    master = req.master_weights or "fp32"
    notes.append(Assumption("master_weights", master, "from --master-weights" if req.master_weights else
                            ("mixed precision: fp32 master copy" if req.mode == "full" else "trainable adapters kept in fp32 (peft)"),
                            "--master-weights"))
    notes.append(Assumption("optimizer", req.optimizer, "from --optimizer" if req.optimizer != "adamw" else "default", "--optimizer"))
    notes.append(Assumption("seq_len", str(req.seq_len), "from --seq-len" if req.seq_len != DEFAULT_SEQ_LEN else "default", "--seq-len"))
    notes.append(Assumption("batch", str(req.batch), "micro-batch per GPU" if device == "gpu" else "micro-batch of the one CPU process",
                            "--batch"))
    notes.append(Assumption("grad_checkpointing", "on" if req.grad_checkpointing else "off",
                            "from the option" if req.grad_checkpointing else "Trainer default (off)", "--grad-checkpointing"))
    notes.append(Assumption("attention", req.attention, "transformers default (sdpa)" if req.attention == "sdpa" else "from --attention",
                            "--attention"))
    if req.mode != "full":
        targets = parse_targets(req.lora_targets)
        notes.append(Assumption("lora", f"r={req.lora_rank}, targets {targets.label}"
                                + (", embeddings trained" if req.lora_train_embeddings else ""),
                                "defaults" if (req.lora_rank, req.lora_targets) == (DEFAULT_LORA_RANK, DEFAULT_LORA_TARGETS)
                                else "from the options", "--lora-rank/--lora-targets"))
    gpus = req.gpus or 1  # on the CPU: one process (the CPU checks above refuse --gpus)
    visible = len(machine.gpus)
    if req.gpus and req.gpus > visible:
        raise FitcheckError(f"--gpus {req.gpus}, but {machine.name} has {visible} GPU{'' if visible == 1 else 's'}",
                            f"use --gpus {visible} or less, or a profile with more GPUs" if visible else None)
    vendor = machine.gpus[0].vendor if device == "gpu" else None
    bnb_optimizer = req.optimizer in _BNB_OPTIMIZERS
    if vendor in ("apple", "intel") and (weight_format(precision).family in ("bnb", "gptq", "awq") or bnb_optimizer):
        what = f"--optimizer {req.optimizer}" if bnb_optimizer else f"a {precision} base"
        raise FitcheckError(f"{what} needs CUDA kernels (bitsandbytes/GPTQ/AWQ); this GPU is {vendor}",
                            "use --mode lora with a bf16 base and --optimizer adamw")
    if device == "gpu":
        notes.append(Assumption("gpus", str(gpus), "from --gpus" if req.gpus else "one GPU", "--gpus"))
    if req.zero is not None:
        notes.append(Assumption("sharding", f"DeepSpeed ZeRO-{req.zero}", "from --zero", "--zero"))
    elif req.fsdp is not None:
        notes.append(Assumption("sharding", f"FSDP {req.fsdp}", "from --fsdp", "--fsdp"))
    if req.offload != "none":
        notes.append(Assumption("offload", req.offload, "from --offload", "--offload"))
    return TrainingPlan(
        mode=req.mode, precision=precision, compute_dtype=compute, seq_len=req.seq_len, batch=req.batch,
        grad_accum=req.grad_accum, optimizer=req.optimizer, master_weights=master,
        grad_checkpointing=req.grad_checkpointing, attention=req.attention, lora_rank=req.lora_rank,
        lora_targets=parse_targets(req.lora_targets).text if req.mode != "full" else req.lora_targets,
        lora_dropout=req.lora_dropout, lora_train_embeddings=req.lora_train_embeddings, gpus=gpus,
        zero=req.zero, fsdp=req.fsdp, offload=req.offload, ds_bucket_elements=req.ds_bucket_elements,
        compute_capability=cc, assumptions=tuple(notes), device=device,
    )


# ---- the fields the shared renderer reads from any plan (inference Plan has the same names) ----
def _engine(plan: TrainingPlan) -> str:
    return {"deepspeed": "deepspeed", "fsdp": "fsdp"}.get(plan.framework, "transformers")


TrainingPlan.context = property(lambda self: self.seq_len)            # tokens per sequence
TrainingPlan.prompt_tokens = property(lambda self: self.seq_len)
TrainingPlan.kv_dtype = property(lambda self: "none")                # no KV cache in training
TrainingPlan.engine = property(_engine)
TrainingPlan.gpu_layers = property(lambda self: None)
TrainingPlan.gpu_memory_utilization = property(lambda self: None)
