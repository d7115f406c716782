"""The Python API behind `fitcheck MODEL`: resolve, estimate, judge, search alternatives.

    from fitcheck.check import check_inference
    from fitcheck.estimate.request import InferenceRequest
    from fitcheck.profiles import load_profile
    result = check_inference("qwen-7b", InferenceRequest(context=8192), load_profile("rtx-4090"))
    result.verdict.status, result.estimate.total_bytes, result.alternatives

No printing and no probing here: the caller passes the machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fitcheck.estimate.alternatives import Alternative, find_alternatives
from fitcheck.estimate.cost import CostSettings
from fitcheck.estimate.inference import estimate_inference
from fitcheck.estimate.request import DEFAULT_HEADROOM, InferenceRequest, Plan, resolve_inference
from fitcheck.estimate.result import Estimate
from fitcheck.estimate.search import largest_fitting
from fitcheck.estimate.speed import (
    DeviceAdvice,
    SpeedEstimate,
    TrainingSpeed,
    advise_device,
    estimate_speed,
    estimate_training_speed,
)
from fitcheck.estimate.verdict import FITS, UNKNOWN, Verdict, judge, with_software
from fitcheck.errors import FitcheckError
from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec

if TYPE_CHECKING:
    from fitcheck.estimate.compat import StackCheck

MAX_BATCH_SEARCHED = 4096


@dataclass(frozen=True)
class CheckResult:
    """Everything a renderer needs: built first, rendered last (table, JSON, interactive)."""

    query: str
    model: object               # fitcheck.model.resolve.ResolvedModel
    machine: Machine
    request: InferenceRequest
    plan: Plan
    estimate: Estimate
    verdict: Verdict
    headroom: float
    max_context: int | None     # the largest context that fits at this batch
    max_batch: int | None       # the largest batch that fits at this context
    alternatives: tuple[Alternative, ...]
    speed: SpeedEstimate | None = None   # decode/prefill tokens/s of this plan (fitcheck.estimate.speed)
    device_advice: DeviceAdvice | None = None  # CPU or GPU for this request here, and why
    training_speed: TrainingSpeed | None = None  # training tokens/s and step time (training checks)
    cost: CostSettings | None = None     # electricity price and amortisation (fitcheck.estimate.cost)
    tokens: int | None = None            # training: tokens to train on (--tokens), for the run's time and cost
    software: StackCheck | None = None   # the installed stack checked for this request (this machine only)

    @property
    def spec(self) -> ModelSpec:
        return self.model.spec

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code


def _evaluator(estimate_fn, spec: ModelSpec, machine: Machine, headroom: float):
    """evaluate(plan) -> (Estimate, Verdict), cached: searches ask for the same plan many times."""
    cache: dict = {}

    def evaluate(plan) -> tuple[Estimate, Verdict]:
        key = plan.with_changes(assumptions=())
        if key not in cache:
            est = estimate_fn(spec, plan)
            cache[key] = (est, judge(est, machine, headroom))
        return cache[key]

    return evaluate


def _resolve(model, headroom: float):
    """The ResolvedModel for a name/path (or one already resolved), after checking the headroom."""
    if not 0 <= headroom < 1:
        raise FitcheckError(f"--headroom must be between 0 and 99 percent, got {headroom * 100:g}")
    if isinstance(model, str):
        from fitcheck.model.resolve import resolve_model

        return resolve_model(model)
    return model


def _largest(evaluate, plan, **knob_range) -> int | None:
    """The largest value of one plan field (name=(low, high)) that still fits."""
    (name, (low, high)), = knob_range.items()

    def fits(value: int) -> bool:
        changes = {name: value}
        if name == "context":
            changes["prompt_tokens"] = min(plan.prompt_tokens, value)
        return evaluate(plan.with_changes(**changes))[1].status == FITS

    return largest_fitting(fits, low, high)


def check_inference(model, request: InferenceRequest, machine: Machine, *, headroom: float = DEFAULT_HEADROOM,
                    alternatives: bool = True) -> CheckResult:
    """Will `model` (a name, path or ResolvedModel) serve `request` on `machine`?"""
    resolved = _resolve(model, headroom)
    spec = resolved.spec
    plan = resolve_inference(request, spec, machine)
    evaluate = _evaluator(estimate_inference, spec, machine, headroom)
    estimate, verdict = evaluate(plan)
    alts: tuple[Alternative, ...] = ()
    if alternatives and verdict.status != FITS:
        alts = find_alternatives(spec, plan, machine, evaluate)
    return CheckResult(
        query=model if isinstance(model, str) else resolved.hf_id, model=resolved, machine=machine,
        request=request, plan=plan, estimate=estimate, verdict=verdict, headroom=headroom,
        max_context=_largest(evaluate, plan, context=(1, max(spec.max_context or 0, plan.context))),
        max_batch=_largest(evaluate, plan, batch=(1, MAX_BATCH_SEARCHED)),
        alternatives=alts,
        speed=estimate_speed(spec, plan, machine),
        # With a free-memory figure unknown, "does it fit" is unknown too: no advice to give.
        device_advice=None if verdict.status == UNKNOWN else advise_device(spec, plan, machine,
                                                                            lambda p: evaluate(p)[1].runs),
    )


# ---- training (--mode full|lora|qlora) ---------------------------------------------------------
MAX_MICRO_BATCH_SEARCHED = 1024


def check_training(model, request, machine: Machine, *, headroom: float = DEFAULT_HEADROOM,
                   alternatives: bool = True) -> CheckResult:
    """Will `model` fine-tune as `request` (a TrainingRequest) says on `machine`?

    The same CheckResult as inference: `plan` is a TrainingPlan, `max_context` the longest
    sequence and `max_batch` the largest micro-batch that fit, `alternatives` TrainingAlternatives.
    """
    from fitcheck.estimate.training import estimate_training
    from fitcheck.estimate.training_alternatives import find_training_alternatives
    from fitcheck.estimate.training_request import resolve_training

    resolved = _resolve(model, headroom)
    spec = resolved.spec
    plan = resolve_training(request, spec, machine)
    evaluate = _evaluator(estimate_training, spec, machine, headroom)
    estimate, verdict = evaluate(plan)
    alts = ()
    if alternatives and verdict.status != FITS:
        alts = find_training_alternatives(spec, plan, machine, evaluate)
    return CheckResult(
        query=model if isinstance(model, str) else resolved.hf_id, model=resolved, machine=machine,
        request=request, plan=plan, estimate=estimate, verdict=verdict, headroom=headroom,
        max_context=_largest(evaluate, plan, seq_len=(1, max(spec.max_context or 0, plan.seq_len))),
        max_batch=_largest(evaluate, plan, batch=(1, MAX_MICRO_BATCH_SEARCHED)),
        alternatives=alts,
        training_speed=estimate_training_speed(spec, plan, machine),
    )


# ---- the installed software stack (this machine only) ---------------------------------------------
def with_stack(result: CheckResult, stack) -> CheckResult:
    """`result` with the installed stack (a fitcheck.probe.software.SoftwareStack) checked against its plan:
    a blocking issue makes the verdict CANNOT_RUN (exit 1), and alternatives the stack cannot run are
    dropped.  Only for the machine the stack was read on: never with a --profile."""
    from dataclasses import replace

    from fitcheck.estimate.compat import check_stack

    checked = check_stack(stack, result.machine, result.plan)
    alts = tuple(a for a in result.alternatives if not check_stack(stack, result.machine, a.plan).blocking)
    return replace(result, verdict=with_software(result.verdict, tuple(i.text for i in checked.blocking)),
                   alternatives=alts, software=checked)
