"""What fits instead of a request: the inference or the training routes (fitcheck.search.inference_routes,
training_routes), each candidate checked, best first."""

from __future__ import annotations

from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec
from fitcheck.plan import AnyPlan, TrainingPlan
from fitcheck.request import Request
from fitcheck.search.inference_routes import inference_alternatives
from fitcheck.search.routes import Alternative, Evaluate
from fitcheck.search.training_routes import training_alternatives


def find_alternatives(spec: ModelSpec, request: Request, plan: AnyPlan, machine: Machine,
                      evaluate: Evaluate) -> tuple[Alternative, ...]:
    """What fits instead of ``request`` on ``machine``, best first."""
    if isinstance(plan, TrainingPlan):
        return training_alternatives(spec, request, plan, machine, evaluate)
    return inference_alternatives(spec, request, plan, machine, evaluate)
