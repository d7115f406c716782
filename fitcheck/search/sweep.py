"""Memory across one knob: the need on the busiest device at each context (or batch) for a few precisions, and the
largest that fits of each: what `fitcheck plot` draws.

    from fitcheck.search.sweep import sweep
    from fitcheck.profiles import load_profile
    s = sweep("qwen-7b", Request(), load_profile("rtx-4090"))
    [(c.precision, [(p.x, p.need_bytes) for p in c.points], c.largest) for c in s.curves]

Every point is the pipeline's own outcome of the request with that one field replaced (the Evaluator `check`
uses, fitcheck.pipeline.evaluator), so a point's bytes are what ``fitcheck check ... --context N`` prints for
that device; the curve of the request as asked takes its largest context and batch from that check itself.
The other curves keep every field of the request but the precision, on the same engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fitcheck import engines
from fitcheck.engines.capabilities import half_dtype, machine_kind
from fitcheck.errors import FitcheckError
from fitcheck.estimate.context_limit import search_limit
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.verdict import CANNOT_RUN, UNKNOWN, fullness
from fitcheck.machine import Machine
from fitcheck.pipeline import (
    MAX_BATCH_SEARCHED,
    MAX_MICRO_BATCH_SEARCHED,
    CheckResult,
    Evaluator,
    check,
    evaluator,
    largest,
    resolve_model_arg,
    shared_evaluations,
)
from fitcheck.request import Request
from fitcheck.search.routes import Outcome, with_context

AGAINST = ("context", "batch")
MAX_CURVES = 4
FIRST_CONTEXT = 512          # the shortest context drawn: contexts double from here to the model's maximum
BATCHES = tuple(2**k for k in range(9))   # 1 .. 256 concurrent sequences
# Weights formats by bits per weight: the classes drawn beside the request's own (a 16-bit, an 8-bit, a 4-bit one).
BIT_CLASSES = ((7.5, 9.0), (3.9, 5.0))


@dataclass(frozen=True)
class Point:
    """The need at one value of the knob, on the busiest device (the fullest: need ÷ free; the largest need where
    free is unknown)."""

    x: int
    device: str                 # gpu0, ..., cpu
    need_bytes: int
    free_bytes: int | None
    status: str                 # the verdict there (fits, tight, does_not_fit, ...)


@dataclass(frozen=True)
class Curve:
    precision: str
    engine: str
    request: Request            # the curve's request (the knob at its asked value)
    points: tuple[Point, ...]   # ascending x; the largest that fits among them
    largest: Point | None       # at the largest value that fits (None: nothing fits, or it cannot be judged)
    asked: bool = False         # the request as asked

    @property
    def label(self) -> str:
        return self.precision


@dataclass(frozen=True)
class Sweep:
    against: str                # 'context' or 'batch'
    field: str                  # the Request field swept: context, seq_len (training) or batch
    result: CheckResult         # the check of the request as asked
    curves: tuple[Curve, ...]   # the request as asked first
    xs: tuple[int, ...]         # the values drawn

    @property
    def asked_x(self) -> int:
        return int(getattr(self.result.request, self.field))

    @property
    def free(self) -> Point | None:
        """The asked request's busiest device at the asked value: its free memory is the line drawn."""
        asked = self.curves[0] if self.curves else None
        return next((p for p in asked.points if p.x == self.asked_x), None) if asked else None


def busiest(outcome: Outcome, x: int) -> Point:
    """The device the verdict's summary names (the fullest), with its need."""
    devices = outcome.verdict.devices
    known = [d for d in devices if d.free_bytes]
    d = max(known, key=fullness) if known else max(devices, key=lambda v: v.need_bytes)
    return Point(x, d.device, d.need_bytes, d.free_bytes, outcome.verdict.status)


def grid(against: str, asked: int, maximum: int | None) -> tuple[int, ...]:
    """The values drawn: contexts doubling from 512 to the model's maximum (and the maximum itself), or batches
    1 to 256; with the asked value."""
    if against == "batch":
        return tuple(sorted({*BATCHES, asked}))
    top = maximum if maximum is not None else max(asked, 32768)
    xs = {asked, top} if maximum is not None else {asked}
    x = FIRST_CONTEXT
    while x <= top:
        xs.add(x)
        x *= 2
    return tuple(sorted(xs))


def at(request: Request, field: str, x: int) -> Request:
    """``request`` with the swept field set to ``x`` (a context's --prompt cut to fit, as the searches do)."""
    return with_context(request, x) if field == "context" else request.with_changes(**{field: x})


def sweep(model: Any, request: Request, machine: Machine, *, against: str = "context", params: str | None = None,
          revision: str | None = None, ctx: Any = None, max_curves: int = MAX_CURVES) -> Sweep:
    """Check ``request`` for ``model`` on ``machine`` (fitcheck.pipeline.check, without alternatives), then the
    need at every value of the grid for it and for up to ``max_curves - 1`` other precisions the same engine runs
    here.  FitcheckError (exit 2) for a malformed request, as check raises it."""
    if against not in AGAINST:
        raise FitcheckError(f"cannot plot against {against!r}", "choose context or batch")
    with shared_evaluations():
        resolved, _, _ = resolve_model_arg(model, params, revision)
        result = check(resolved, request, machine, alternatives=False, device_advice=False, ctx=ctx)
        evaluate = evaluator(resolved.spec, machine)
        asked = result.request
        field = "batch" if against == "batch" else "seq_len" if asked.training else "context"
        xs = grid(against, int(getattr(asked, field)), resolved.spec.max_context)
        first = _curve(evaluate, asked, field, xs, _largest_of(result, field), asked=True)
        curves = [first] + [c for c in (_other(evaluate, result, p, field, xs) for p in _precisions(result))
                            if c is not None][:max_curves - 1]
    return Sweep(against, field, result, tuple(curves), xs)


def _largest_of(result: CheckResult, field: str) -> int | None:
    return result.max_batch if field == "batch" else result.max_context


def _high(evaluate: Evaluator, request: Request, field: str) -> int:
    """Where the largest-that-fits search stops, as fitcheck.pipeline._largest stops it."""
    if field == "batch":
        return MAX_MICRO_BATCH_SEARCHED if request.training else MAX_BATCH_SEARCHED
    return search_limit(evaluate.spec, int(getattr(request, field)))


def _other(evaluate: Evaluator, result: CheckResult, precision: str, field: str, xs: tuple[int, ...]) -> Curve | None:
    """The curve of ``precision`` on the asked request's engine; None when that request is malformed or cannot run."""
    request = result.request.with_changes(precision=precision, engine=getattr(result.plan, "engine", None))
    out = evaluate(request)
    if out is None or out.plan.problems or out.verdict.status == CANNOT_RUN:
        return None
    top = None if out.verdict.status == UNKNOWN else largest(evaluate, request, field, _high(evaluate, request, field))
    return _curve(evaluate, request, field, xs, top)


def _curve(evaluate: Evaluator, request: Request, field: str, xs: tuple[int, ...], top: int | None,
           asked: bool = False) -> Curve:
    points: dict[int, Point] = {}
    for x in sorted({*xs, *([top] if top else [])}):
        out = evaluate(at(request, field, x))
        if out is not None:
            points[x] = busiest(out, x)
    base = evaluate.outcome(request)
    return Curve(base.plan.precision, getattr(base.plan, "engine", ""), request, tuple(points.values()),
                 points.get(top) if top else None, asked)


def _precisions(result: CheckResult) -> list[str]:
    """The precisions drawn beside the asked one: the machine's 16-bit type, an 8-bit and a 4-bit format, each the
    first the plan's engine runs here in its own order of lower precisions (fitcheck.engines); none for training."""
    plan = result.plan
    if plan.training:
        return []
    engine = engines.get(plan.engine)
    kind, cc = machine_kind(result.machine, plan.device)
    stored = result.spec.stored_formats()

    def runs(p: str) -> bool:
        fmt = weight_format(p)
        return (p in engine.precisions and engine.runs_here(p, kind, cc) is None
                and (not fmt.stored_only or p in stored or bool(set(fmt.converted_from) & stored)))

    half = half_dtype(kind, cc)
    chosen = [p for p in (half, "fp16" if half == "bf16" else "bf16") if runs(p)][:1]
    order = [*engine.lower_precisions, *(p for p in engine.precisions if p not in engine.lower_precisions)]
    for low, high in BIT_CLASSES:
        chosen += [p for p in order if low <= weight_format(p).linear_bits < high and runs(p)][:1]
    return [p for p in dict.fromkeys(chosen) if p != plan.precision]
