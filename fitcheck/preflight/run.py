"""Run a plan file's cases: one check per case, each against its own machine.  No printing.

Every case is checked for bad input first (validate_plan: its fields as the command line checks them, its
profile, its model, options that contradict each other); a plan with any such case runs none of them, and every
one is reported (exit 2).  Then every case runs, in every mode: a case the machine cannot run is a verdict like any
other.  Cases without a profile share one machine (probed once by the caller's ``machine_for``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fitcheck.errors import EXIT_BAD_INPUT, FitcheckError
from fitcheck.estimate.verdict import TIGHT
from fitcheck.machine import Machine
from fitcheck.options import BY_NAME, PLAN_ALIASES, mode_error, not_applying
from fitcheck.preflight.plan_file import Case, PlanFile
from fitcheck.request import Request


class MachineError(FitcheckError):
    """A case's machine could not be made from ``field`` (what the user wrote: '--gpu', '--vram, --ram'),
    whatever the case's own fields say (``machine_for`` raises it for the command line's overrides)."""

    def __init__(self, field: str, cause: FitcheckError):
        super().__init__(cause.message, cause.hint)
        self.field = field


def machine_field(case: Case, default_profile: str | None) -> str:
    """Where a case's machine comes from, as the user wrote it: the case's own field 'profile', the [defaults]
    one, the command line's --profile, else this machine, probed."""
    if "profile" in case.own:
        return "field 'profile'"
    if "profile" in case.options:
        return "[defaults] field 'profile'"
    return "--profile" if default_profile else "this machine (probed: no profile named)"


def _machine_failure(case: Case, path: str, default_profile: str | None, exc: FitcheckError) -> str:
    field = exc.field if isinstance(exc, MachineError) else machine_field(case, default_profile)
    return f"{case.label(path)}: {field}: {exc.one_line()}"


@dataclass(frozen=True)
class CaseResult:
    case: Case
    result: Any           # fitcheck.pipeline.CheckResult, or None when the case is malformed
    exit_code: int        # 0 fits, 1 does not fit / cannot run (or tight when strict), 2 malformed, 3 unknown
    error: str = ""       # the one line saying why a malformed case did not run


def request_for(case: Case) -> Request:
    """The Request a case describes (unset fields: the vocabulary's defaults)."""
    values = {PLAN_ALIASES.get(n, n): v for n, v in case.options.items()}
    return Request(**{n: BY_NAME[n].parse(v) for n, v in values.items() if n in BY_NAME})


@dataclass(frozen=True)
class Prepared:
    """A case found well-formed: its request and its model, resolved."""

    request: Request
    resolved: Any         # fitcheck.model.resolve.ResolvedModel


def prepare_case(case: Case, machine: Machine) -> Prepared:
    """The case's request and model, each checked as the command line checks it (FitcheckError when malformed):
    its fields, the mode they apply to, the model, and the options against each other on its machine."""
    from fitcheck.model.resolve import resolve_model
    from fitcheck.plan import resolve

    request = request_for(case)
    # a field the case gives for the other mode is malformed even at its default value (`context = 4096`
    # in a lora case), as `--context 4096 --mode lora` is on the command line
    wrong = not_applying(request.mode, [PLAN_ALIASES.get(n, n) for n in case.own])
    if wrong:
        raise mode_error(request.mode, wrong)
    params = case.get("params")
    resolved = resolve_model(case.model, params=params) if params else resolve_model(case.model)
    resolve(request, resolved.spec, machine)  # options that contradict each other (the plan's own checks)
    return Prepared(request, resolved)


def run_case(case: Case, machine: Machine, *, strict: bool = False, where: str = "plan",
             prepared: Prepared | None = None, context: Any = None) -> CaseResult:
    from fitcheck.pipeline import check

    label = case.label(where)
    try:
        from fitcheck.probe.disk import storage_for

        ready = prepared or prepare_case(case, machine)
        request, resolved = ready.request, ready.resolved
        params = case.get("params")
        typed = (case.model.strip(),) + (("--params", params) if params else ())
        result = check(resolved, request, machine, as_typed=typed,
                       storage=storage_for(resolved, case.model, request.download_dir, machine), ctx=context,
                       choose=not (strict or case.get("strict", False)))
    except FitcheckError as exc:
        return CaseResult(case, None, EXIT_BAD_INPUT, f"{label}: {exc.one_line()}")
    code = result.exit_code
    if (strict or case.get("strict", False)) and result.verdict.status == TIGHT:
        code = 1
    return CaseResult(case, result, code)


def validate_plan(plan: PlanFile, machine_for: Callable[[str | None], Machine], *,
                  default_profile: str | None = None) -> tuple[dict[int, Prepared], list[str]]:
    """Each case of ``plan`` checked for bad input before any runs (prepare_case on its machine): the prepared
    cases by index, and a line for each malformed one (file, case, field, the error and its suggestion)."""
    prepared: dict[int, Prepared] = {}
    errors: list[str] = []
    for case in plan.cases:
        label = case.label(plan.path)
        try:
            machine = machine_for(case.get("profile", default_profile))
        except FitcheckError as exc:
            errors.append(_machine_failure(case, plan.path, default_profile, exc))
            continue
        try:
            prepared[case.index] = prepare_case(case, machine)
        except FitcheckError as exc:
            errors.append(f"{label}: {exc.one_line()}")
    return prepared, errors


def run_plan(plan: PlanFile, machine_for: Callable[[str | None], Machine], *, strict: bool = False,
             default_profile: str | None = None,
             prepared: dict[int, Prepared] | None = None,
             context_for: Callable[[str | None], Any] | None = None) -> tuple[CaseResult, ...]:
    """Every case of ``plan``; ``machine_for(profile_or_None)`` supplies (and caches) machines and
    ``context_for`` their edge context (fitcheck.context); ``prepared``: the cases validate_plan found
    well-formed."""
    out = []
    for case in plan.cases:
        profile = case.get("profile", default_profile)
        try:
            machine = machine_for(profile)
        except FitcheckError as exc:
            out.append(CaseResult(case, None, EXIT_BAD_INPUT, _machine_failure(case, plan.path, default_profile, exc)))
            continue
        out.append(run_case(case, machine, strict=strict, where=plan.path,
                            prepared=(prepared or {}).get(case.index),
                            context=context_for(profile) if context_for is not None else None))
    return tuple(out)
