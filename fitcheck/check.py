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

from fitcheck.estimate.alternatives import Alternative, find_alternatives
from fitcheck.estimate.inference import estimate_inference
from fitcheck.estimate.request import DEFAULT_HEADROOM, InferenceRequest, Plan, resolve_inference
from fitcheck.estimate.result import Estimate
from fitcheck.estimate.search import largest_fitting
from fitcheck.estimate.speed import DeviceAdvice, SpeedEstimate, advise_device, estimate_speed
from fitcheck.estimate.verdict import FITS, Verdict, judge
from fitcheck.errors import FitcheckError
from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec

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

    @property
    def spec(self) -> ModelSpec:
        return self.model.spec

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code


def _evaluator(spec: ModelSpec, machine: Machine, headroom: float):
    cache: dict[Plan, tuple[Estimate, Verdict]] = {}

    def evaluate(plan: Plan) -> tuple[Estimate, Verdict]:
        key = plan.with_changes(assumptions=())
        if key not in cache:
            est = estimate_inference(spec, plan)
            cache[key] = (est, judge(est, machine, headroom))
        return cache[key]

    return evaluate


def check_inference(model, request: InferenceRequest, machine: Machine, *, headroom: float = DEFAULT_HEADROOM,
                    alternatives: bool = True) -> CheckResult:
    """Will `model` (a name, path or ResolvedModel) serve `request` on `machine`?"""
    if not 0 <= headroom < 1:
        raise FitcheckError(f"--headroom must be between 0 and 99 percent, got {headroom * 100:g}")
    if isinstance(model, str):
        from fitcheck.model.resolve import resolve_model

        resolved = resolve_model(model)
    else:
        resolved = model
    spec = resolved.spec
    plan = resolve_inference(request, spec, machine)
    evaluate = _evaluator(spec, machine, headroom)
    estimate, verdict = evaluate(plan)

    upper = max(spec.max_context or 0, plan.context)

    def context_fits(ctx: int) -> bool:
        return evaluate(plan.with_changes(context=ctx, prompt_tokens=min(plan.prompt_tokens, ctx)))[1].status == FITS

    def batch_fits(b: int) -> bool:
        return evaluate(plan.with_changes(batch=b))[1].status == FITS

    max_context = largest_fitting(context_fits, 1, upper)
    max_batch = largest_fitting(batch_fits, 1, MAX_BATCH_SEARCHED)
    alts: tuple[Alternative, ...] = ()
    if alternatives and verdict.status != FITS:
        alts = find_alternatives(spec, plan, machine, evaluate)
    return CheckResult(
        query=model if isinstance(model, str) else resolved.hf_id, model=resolved, machine=machine,
        request=request, plan=plan, estimate=estimate, verdict=verdict, headroom=headroom,
        max_context=max_context, max_batch=max_batch, alternatives=alts,
        speed=estimate_speed(spec, plan, machine),
        device_advice=advise_device(spec, plan, machine, lambda p: evaluate(p)[1].runs),
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

    if not 0 <= headroom < 1:
        raise FitcheckError(f"--headroom must be between 0 and 99 percent, got {headroom * 100:g}")
    if isinstance(model, str):
        from fitcheck.model.resolve import resolve_model

        resolved = resolve_model(model)
    else:
        resolved = model
    spec = resolved.spec
    plan = resolve_training(request, spec, machine)
    cache: dict = {}

    def evaluate(p):
        key = p.with_changes(assumptions=())
        if key not in cache:
            est = estimate_training(spec, p)
            cache[key] = (est, judge(est, machine, headroom))
        return cache[key]

    estimate, verdict = evaluate(plan)
    upper = max(spec.max_context or 0, plan.seq_len)
    max_seq = largest_fitting(lambda s: evaluate(plan.with_changes(seq_len=s))[1].status == FITS, 1, upper)
    max_batch = largest_fitting(lambda b: evaluate(plan.with_changes(batch=b))[1].status == FITS, 1,
                                MAX_MICRO_BATCH_SEARCHED)
    alts = ()
    if alternatives and verdict.status != FITS:
        alts = find_training_alternatives(spec, plan, machine, evaluate)
    return CheckResult(
        query=model if isinstance(model, str) else resolved.hf_id, model=resolved, machine=machine,
        request=request, plan=plan, estimate=estimate, verdict=verdict, headroom=headroom,
        max_context=max_seq, max_batch=max_batch, alternatives=alts,
    )
