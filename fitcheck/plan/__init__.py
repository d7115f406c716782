"""A Request resolved against a machine: every choice concrete, every default recorded.

``resolve(request, spec, machine)`` returns a :class:`Plan` (inference, fitcheck.plan.inference) or
:class:`TrainingPlan` (full, lora, qlora, fitcheck.plan.training).  Defaults come from the capability table
(fitcheck.engines): the best precision and engine this machine runs for this checkpoint, never a pair the
table refuses.  Each default is an `Assumption` naming the flag that changes it.

A request the machine cannot run (kernels missing, compute capability too low, no GPU, fewer GPUs
than asked) still resolves: the plan carries ``problems``, and the verdict is *cannot run here*
with the alternatives that do run.  Only a malformed request raises (FitcheckError, exit 2).
"""

from __future__ import annotations

from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec
from fitcheck.plan.inference import resolve_inference, validate_request
from fitcheck.plan.plan import (
    DEFAULT_CONTEXT,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_LORA_RANK,
    DEFAULT_LORA_TARGETS,
    DEFAULT_SEQ_LEN,
    AnyPlan,
    Plan,
    TrainingPlan,
)
from fitcheck.plan.training import grad_checkpointing, resolve_training
from fitcheck.request import Request

__all__ = ["DEFAULT_CONTEXT", "DEFAULT_GPU_MEMORY_UTILIZATION", "DEFAULT_LORA_RANK", "DEFAULT_LORA_TARGETS",
           "DEFAULT_SEQ_LEN", "AnyPlan", "Plan", "TrainingPlan", "grad_checkpointing", "resolve", "resolve_inference",
           "resolve_training", "validate_request"]


def resolve(request: Request, spec: ModelSpec, machine: Machine) -> AnyPlan:
    """The plan for ``request`` on ``machine`` (either mode)."""
    return resolve_training(request, spec, machine) if request.training else resolve_inference(request, spec, machine)
