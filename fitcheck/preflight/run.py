"""Run a plan file's cases: one check per case, each against its own machine.  No printing.

Cases without a profile share one machine (probed once by the caller's ``machine_for``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fitcheck.errors import FitcheckError
from fitcheck.estimate.verdict import TIGHT
from fitcheck.machine import Machine
from fitcheck.preflight.plan_file import Case, PlanFile
from fitcheck.preflight.requirements import combine  # noqa: F401  (was defined here; emit imports it from requirements)

PLAN_MODES = ("inference",)  # training cases need the training estimator's API


@dataclass(frozen=True)
class CaseResult:
    case: Case
    result: object        # fitcheck.check.CheckResult
    exit_code: int        # 0 fits, 1 does not fit (or tight when strict), 3 unknown


def request_for(case: Case):
    """The InferenceRequest a case describes (unset fields: the CLI's defaults)."""
    from fitcheck.estimate.request import InferenceRequest

    names = ("precision", "context", "batch", "kv_dtype", "engine", "gpus", "device", "gpu_layers",
             "gpu_memory_utilization", "transformers_version", "attention")
    given = {n: case.options[n] for n in names if n in case.options}
    if "prompt" in case.options:
        given["prompt_tokens"] = case.options["prompt"]
    return InferenceRequest(**given)


def run_case(case: Case, machine: Machine, *, strict: bool = False, where: str = "plan") -> CaseResult:
    from fitcheck.check import check_inference
    from fitcheck.model.resolve import resolve_model

    label = f"{where}: case {case.index} ({case.name})"
    mode = case.get("mode", "inference")
    if mode not in PLAN_MODES:
        raise FitcheckError(f"{label}: field 'mode' is {mode!r}; plans run {', '.join(PLAN_MODES)} cases for now")
    try:
        params = case.get("params")
        model = resolve_model(case.model, params=params) if params else resolve_model(case.model)
        result = check_inference(model, request_for(case), machine, headroom=case.get("headroom", 10.0) / 100)
    except FitcheckError as exc:
        raise FitcheckError(f"{label}: {exc.message}", exc.hint) from None
    code = result.exit_code
    if (strict or case.get("strict", False)) and result.verdict.status == TIGHT:
        code = 1
    return CaseResult(case, result, code)


def run_plan(plan: PlanFile, machine_for: Callable[[str | None], Machine], *, strict: bool = False,
             default_profile: str | None = None) -> tuple[CaseResult, ...]:
    """Every case of ``plan``; ``machine_for(profile_or_None)`` supplies (and caches) machines."""
    out = []
    for case in plan.cases:
        profile = case.get("profile", default_profile)
        try:
            machine = machine_for(profile)
        except FitcheckError as exc:
            raise FitcheckError(f"{plan.path}: case {case.index} ({case.name}): field 'profile': {exc.message}",
                                exc.hint) from None
        out.append(run_case(case, machine, strict=strict, where=plan.path))
    return tuple(out)
