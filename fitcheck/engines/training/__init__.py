"""Fine-tuning with the Hugging Face stack: transformers' Trainer with peft's LoRA/QLoRA, launched by accelerate,
sharded by DeepSpeed ZeRO or PyTorch FSDP, over nodes with DeepSpeed's launcher or torchrun.

Its memory model is in fitcheck.engines.training.memory (model states, activations, the caching allocator's
reserve, ZeRO/FSDP sharding and offload), its commands in commands; what runs where is the training rows of the
capability table (fitcheck.engines.capabilities: optimizers, attention kernels, sharding, base formats).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# The engine that loads the base model for training: Trainer and peft wrap a transformers model (its precision
# defaults and kernels are the training run's).
BASE_ENGINE = "transformers"

if TYPE_CHECKING:
    from fitcheck.estimate.result import Estimate
    from fitcheck.model.spec import ModelSpec
    from fitcheck.plan import TrainingPlan


def estimate_training(spec: ModelSpec, plan: TrainingPlan) -> Estimate:
    """Bytes per device for training ``spec`` as ``plan`` says."""
    from fitcheck.engines.training.memory import estimate_training as estimate

    return estimate(spec, plan)


def framework(zero: int | None, fsdp: str | None, world: int) -> str:
    """deepspeed | fsdp | ddp | single (one process, plain PyTorch/Trainer)."""
    if zero is not None:
        return "deepspeed"
    if fsdp is not None:
        return "fsdp"
    return "ddp" if world > 1 else "single"
