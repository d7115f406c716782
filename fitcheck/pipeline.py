"""One request, one pipeline, every mode: request → plan → estimate → verdict → alternatives →
largest context/batch → speed.  `fitcheck check`, `where`, plan files, interactive mode and the
CI formats all run through :func:`check`.

    from fitcheck.pipeline import check
    from fitcheck.request import Request
    from fitcheck.profiles import load_profile
    result = check("qwen-7b", Request(context=8192), load_profile("rtx-4090"))
    result.verdict.status, result.estimate.total_bytes, [a.fitcheck_command for a in result.alternatives]

No printing and no probing here: the caller passes the machine.  Rendering only formats the
result; the commands that reproduce each alternative come with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fitcheck.alternatives import Alternative, Outcome, find_alternatives
from fitcheck.commands import engine_command, fitcheck_command
from fitcheck.errors import FitcheckError
from fitcheck.estimate.result import Estimate
from fitcheck.estimate.search import largest_fitting
from fitcheck.estimate.speed import (
    DeviceAdvice,
    SpeedEstimate,
    TrainingSpeed,
    advise_device,
    estimate_speed,
    estimate_training_speed,
    usd_per_million_tokens,
)
from fitcheck.estimate.verdict import CANNOT_RUN, FITS, TIGHT, UNKNOWN, Verdict, judge
from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec
from fitcheck.plan import AnyPlan, TrainingPlan, resolve
from fitcheck.request import Request

MAX_BATCH_SEARCHED = 4096
MAX_MICRO_BATCH_SEARCHED = 1024


@dataclass(frozen=True)
class CheckResult:
    """Everything a renderer needs, built first and rendered last (table, JSON, CI, interactive)."""

    query: str
    model: Any                  # fitcheck.model.resolve.ResolvedModel
    machine: Machine
    request: Request
    plan: AnyPlan
    estimate: Estimate
    verdict: Verdict
    max_context: int | None     # the largest context (training: sequence) that fits at this batch
    max_batch: int | None       # the largest batch (training: micro-batch) that fits at this length
    alternatives: tuple[Alternative, ...]
    speed: SpeedEstimate | None = None            # inference decode/prefill tokens/s
    device_advice: DeviceAdvice | None = None     # CPU or GPU for this request here, and why
    training_speed: TrainingSpeed | None = None   # training tokens/s and step time
    model_args: tuple[str, ...] = ()              # what to type for the same model (MODEL [--params N])
    profile: str | None = None                    # what to pass to --profile for the same machine

    @property
    def spec(self) -> ModelSpec:
        return self.model.spec

    @property
    def headroom(self) -> float:
        return self.request.headroom / 100

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def model_id(self) -> str:
        return self.model.hf_id or self.spec.name

    def command(self, request: Request | None = None) -> str:
        """The `fitcheck` command that asks ``request`` (default: this one) again."""
        return fitcheck_command(self.model_args, request or self.request, profile=self.profile)


class Evaluator:
    """request → Outcome (plan, estimate, verdict), cached by plan: searches ask the same many times."""

    def __init__(self, spec: ModelSpec, machine: Machine):
        self.spec = spec
        self.machine = machine
        self._by_plan: dict[Any, tuple[Estimate, Verdict]] = {}
        self._by_request: dict[Request, Outcome] = {}

    def outcome(self, request: Request) -> Outcome:
        """Raises FitcheckError for a malformed request."""
        if request not in self._by_request:
            plan = resolve(request, self.spec, self.machine)
            est, verdict = self.judge(plan, request.headroom / 100)
            self._by_request[request] = Outcome(request, plan, est, verdict)
        return self._by_request[request]

    def __call__(self, request: Request) -> Outcome | None:
        """The outcome, or None for a request fitcheck refuses as malformed (never offered)."""
        try:
            return self.outcome(request)
        except FitcheckError:
            return None

    def judge(self, plan: AnyPlan, headroom: float) -> tuple[Estimate, Verdict]:
        key = (plan.with_changes(assumptions=()), headroom)
        if key not in self._by_plan:
            est = _estimate(self.spec, plan)
            verdict = judge(est, self.machine, headroom)
            if plan.problems:
                verdict = Verdict(CANNOT_RUN, verdict.devices, headroom, plan.problems)
            self._by_plan[key] = (est, verdict)
        return self._by_plan[key]


def _estimate(spec: ModelSpec, plan: AnyPlan) -> Estimate:
    if isinstance(plan, TrainingPlan):
        from fitcheck.estimate.training import estimate_training

        return estimate_training(spec, plan)
    from fitcheck.estimate.inference import estimate_inference

    return estimate_inference(spec, plan)


def largest(evaluate: Evaluator, request: Request, field: str, high: int) -> int | None:
    """The largest value of ``field`` (context, seq_len, batch) that fits with the rest of ``request``
    as asked: the request with that one field replaced, checked as if typed."""
    def fits(value: int) -> bool:
        out = evaluate(request.with_changes(**{field: value}))
        return out is not None and out.verdict.status == FITS

    return largest_fitting(fits, 1, high)


def profile_arg(machine: Machine) -> str | None:
    """What to pass to --profile to get this machine again: a shipped profile's name, else its path."""
    if machine.source == "probe":
        return None
    from fitcheck.profiles import profile_names

    return machine.name if Path(machine.source).stem == machine.name and machine.name in profile_names() \
        else machine.source


def resolve_model_arg(model: Any, params: str | None = None) -> tuple[Any, str, tuple[str, ...]]:
    """(ResolvedModel, query, model_args) for a name/path (or a model already resolved)."""
    if isinstance(model, str):
        from fitcheck.model.resolve import resolve_model

        resolved = resolve_model(model, params=params) if params else resolve_model(model)
        # The canonical id for catalog and Hub models (a short name may pick another model one day);
        # a local path or a generic name as typed, with its --params.
        name = resolved.hf_id if resolved.source in ("catalog", "hub") and resolved.hf_id else model.strip()
        args = (name,) + (("--params", params) if params else ())
        return resolved, model.strip(), args
    query = model.hf_id or model.spec.name
    return model, query, (query,)


def check(model: Any, request: Request, machine: Machine, *, params: str | None = None,
          alternatives: bool = True, search: bool = True, profile: str | None = None) -> CheckResult:
    """Will ``model`` (a name, path or ResolvedModel) serve or train as ``request`` says on ``machine``?

    Malformed input raises FitcheckError (exit 2); anything else is a verdict: fits, tight, does
    not fit, cannot run here (kernels, compute capability, GPUs missing) or unknown.
    """
    resolved, query, model_args = resolve_model_arg(model, params)
    spec = resolved.spec
    evaluate = Evaluator(spec, machine)
    outcome = evaluate.outcome(request)
    plan, estimate, verdict = outcome.plan, outcome.estimate, outcome.verdict
    profile = profile if profile is not None else profile_arg(machine)
    local = resolved.source == "local"
    model_ref = model_args[0] if local else (resolved.hf_id or spec.name)
    repos = dict(getattr(resolved.entry, "quantized_repos", None) or {}) if resolved.entry else {}

    alts: tuple[Alternative, ...] = ()
    if alternatives and verdict.status != FITS:
        alts = tuple(replace(a, fitcheck_command=fitcheck_command(model_args, a.request, profile=profile),
                             engine_command=engine_command(model_ref, a.plan, repos, local=local))
                     for a in find_alternatives(spec, request, plan, machine, evaluate))

    max_context = max_batch = None
    if search and verdict.status not in (CANNOT_RUN, UNKNOWN):
        if request.training:
            max_context = largest(evaluate, request, "seq_len", max(spec.max_context or 0, request.seq_len))
            max_batch = largest(evaluate, request, "batch", MAX_MICRO_BATCH_SEARCHED)
        else:
            max_context = largest(evaluate, request, "context", max(spec.max_context or 0, request.context))
            max_batch = largest(evaluate, request, "batch", MAX_BATCH_SEARCHED)

    speed = advice = training_speed = None
    if isinstance(plan, TrainingPlan):
        training_speed = estimate_training_speed(spec, plan, machine)
    else:
        speed = estimate_speed(spec, plan, machine)
        # With a free-memory figure unknown, "does it fit" is unknown too: no advice to give.
        if verdict.status != UNKNOWN and not plan.problems:
            advice = advise_device(spec, plan, machine, lambda p: evaluate.judge(p, request.headroom / 100)[1].runs)
    return CheckResult(
        query=query, model=resolved, machine=machine, request=request, plan=plan, estimate=estimate,
        verdict=verdict, max_context=max_context, max_batch=max_batch, alternatives=alts, speed=speed,
        device_advice=advice, training_speed=training_speed, model_args=model_args, profile=profile,
    )


# ---- where: the same check on every machine ---------------------------------------------------------
@dataclass(frozen=True)
class WhereRow:
    machine: Machine
    result: CheckResult | None
    reason: str = ""                # why it does not run (or was not evaluated)

    @property
    def plan(self) -> AnyPlan | None:
        return self.result.plan if self.result else None

    @property
    def verdict(self) -> Verdict | None:
        return self.result.verdict if self.result else None

    @property
    def speed(self) -> SpeedEstimate | None:
        return self.result.speed if self.result else None

    @property
    def training_speed(self) -> TrainingSpeed | None:
        return self.result.training_speed if self.result else None

    @property
    def runs(self) -> bool:
        """Fits, at least tightly (what `check` exits 0 for)."""
        return self.verdict is not None and self.verdict.status in (FITS, TIGHT)

    @property
    def usd_per_hour(self) -> float | None:
        return self.machine.price.usd_per_hour if self.machine.price else None

    @property
    def usd_per_million_tokens(self) -> tuple[float, float] | None:
        if self.usd_per_hour is None or self.speed is None or self.speed.decode is None:
            return None
        return usd_per_million_tokens(self.usd_per_hour, self.speed.decode)

    @property
    def tokens_per_s(self) -> float:
        if self.speed is not None and self.speed.decode is not None:
            return self.speed.decode.mid
        if self.training_speed is not None and self.training_speed.rate is not None:
            return self.training_speed.rate.mid
        return 0.0

    @property
    def tightest(self):
        """The device verdict with the least room: (need, free)."""
        devs = [d for d in (self.verdict.devices if self.verdict else ()) if d.free_bytes]
        return min(devs, key=lambda d: d.free_bytes - d.need_bytes, default=None)


@dataclass(frozen=True)
class WhereResult:
    query: str
    model: Any                      # ResolvedModel
    request: Request
    kind: str | None
    max_price: float | None
    rows: tuple[WhereRow, ...]      # every machine of the kind, evaluated

    @property
    def headroom(self) -> float:
        return self.request.headroom / 100

    @property
    def fitting(self) -> list[WhereRow]:
        """Machines that run it (fit, or fit tightly) within --max-price: cheapest first, then the
        ones without a price, fastest first."""
        ok = [r for r in self.rows if r.runs and (self.max_price is None or
                                                 (r.usd_per_hour is not None and r.usd_per_hour <= self.max_price))]
        priced = sorted((r for r in ok if r.usd_per_hour is not None),
                        key=lambda r: (r.usd_per_hour, -r.tokens_per_s, r.machine.name))
        unpriced = sorted((r for r in ok if r.usd_per_hour is None), key=lambda r: (-r.tokens_per_s, r.machine.name))
        return priced + unpriced

    @property
    def not_fitting(self) -> list[WhereRow]:
        chosen = {id(r) for r in self.fitting}
        return [r for r in self.rows if id(r) not in chosen]

    @property
    def exit_code(self) -> int:
        return 0 if self.fitting else 1


def where(model: Any, request: Request, machines: Iterable[Machine], *, kind: str | None = None,
          max_price: float | None = None, params: str | None = None) -> WhereResult:
    """``request`` judged on every machine of ``kind``: the same check as `fitcheck MODEL --profile NAME`."""
    from fitcheck.profiles import machines_of_kind

    resolved, query, _ = resolve_model_arg(model, params)
    request.validate()
    rows = []
    for m in machines_of_kind(list(machines), kind):
        try:
            result = check(resolved, request, m, alternatives=False, search=False)
        except FitcheckError as exc:
            rows.append(WhereRow(m, None, exc.one_line()))
            continue
        rows.append(WhereRow(m, result, "" if result.verdict.status == FITS else result.verdict.summary()))
    return WhereResult(query, resolved, request, kind, max_price, tuple(rows))
