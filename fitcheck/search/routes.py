"""What runs instead: alternatives as named routes, each candidate re-checked through the same pipeline.

An alternative is the request with a few fields replaced (typed changes, never strings).  Each candidate is
resolved and estimated exactly as a request typed by the user would be, so one the capability table refuses, or
one whose options contradict each other, never shows up, and its command (built from the changed request)
reproduces its status and bytes.

A :class:`Route` is one way to make a request fit (quantize the weights, shorten the context, offload layers to
the CPU, ...): a small function that proposes candidates to a :class:`Search` and says what it gives up.  The
inference routes are in fitcheck.search.inference_routes, the training ones in training_routes; routes only an
engine has come from its module (Engine.routes).  The ranking is fitcheck.search.rank.

A route never changes a field the user set: a candidate that would (another --precision than the one typed, a
shorter --context than the one asked) is kept apart and offered only when nothing that keeps every field the user
set fits, its title naming the fields it changes; where the request as set cannot run here at all, the fields that
stop it may change.  A candidate equal to the request is never offered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from fitcheck.engines.checkpoints import HF_QUANT_KEYS
from fitcheck.estimate.formats import stored_only_problem, weight_format, weight_format_or_none
from fitcheck.estimate.result import Estimate
from fitcheck.estimate.verdict import FITS, TIGHT, Verdict
from fitcheck.estimate.weights import weight_bytes
from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec
from fitcheck.options import BY_NAME
from fitcheck.plan import AnyPlan
from fitcheck.request import Request
from fitcheck.search import rank as R


@dataclass(frozen=True)
class Outcome:
    """One request checked: its plan, estimate and verdict."""

    request: Request
    plan: AnyPlan
    estimate: Estimate
    verdict: Verdict


Evaluate = Callable[[Request], "Outcome | None"]   # None: the request is malformed (never offered)


@dataclass(frozen=True)
class Alternative:
    title: str
    request: Request                          # the whole request to ask instead
    plan: AnyPlan
    estimate: Estimate
    verdict: Verdict
    cost: float
    changes: tuple[tuple[str, Any], ...]      # request fields replaced, with their new (typed) values
    fitcheck_command: str = ""
    engine_command: str = ""
    download: Any = None                      # fitcheck.engines.download.Download of its plan
    speed: Any = None                         # its plan's SpeedEstimate or TrainingSpeed (fitcheck.pipeline)


@dataclass(frozen=True)
class Route:
    """One way to make a request fit: its name, what taking it gives up, and the function that proposes it."""

    name: str
    gives_up: str
    propose: Callable[[Any], None]            # called with the search's context (inference or training routes)


def changed_fields(before: Request, after: Request) -> tuple[tuple[str, Any], ...]:
    return tuple((f.name, getattr(after, f.name)) for f in fields(Request)
                 if getattr(before, f.name) != getattr(after, f.name))


def with_context(request: Request, context: int) -> Request:
    """The request at another context length, its prompt (--prompt) cut to fit in it."""
    prompt = request.prompt_tokens
    return request.with_changes(context=context, prompt_tokens=None if prompt is None else min(prompt, context))


class Search:
    """Collects candidates: each evaluated once (by plan), kept when it fits or fits tightly.

    ``base``: the request the changes are counted from (the plan's precision and engine pinned); ``typed``: the
    request as the user asked it, whose set fields a candidate keeps (``relax``: the request cannot run here as
    set, so they may change)."""

    def __init__(self, base: Request, evaluate: Evaluate, *, typed: Request | None = None, relax: bool = False):
        self.base = base
        self.evaluate = evaluate
        self.typed = typed or base
        self.locked = frozenset() if relax else frozenset(
            n for n in self.typed.given() if n in BY_NAME and BY_NAME[n].choice and n != "headroom")
        self.found: list[Alternative] = []
        self.relaxed: list[Alternative] = []    # candidates that change a field the user set
        self.seen: set = set()

    def fits(self, request: Request) -> bool:
        out = self.evaluate(request)
        return out is not None and out.verdict.status == FITS

    def consider(self, title: str, request: Request, cost: float) -> Outcome | None:
        out = self.evaluate(request)
        if out is None:
            return None
        key = out.plan.with_changes(assumptions=())
        if key in self.seen:
            return out
        self.seen.add(key)
        if out.verdict.status in (FITS, TIGHT):
            # out.request: the request evaluated, which may carry what made it fit (pipeline.pool_room's utilization)
            changes = changed_fields(self.base, out.request)
            if not changes:
                return out  # the request itself
            lowered = dict(changes).get("gpu_memory_utilization")
            if lowered is not None and "gpu-memory-utilization" not in title:
                # what pipeline.pool_room changed to make room is in the title too (issue 35 item 4)
                title += f" at --gpu-memory-utilization {lowered:g}"
            alt = Alternative(title, out.request, out.plan, out.estimate, out.verdict,
                              cost + R.margin_cost(out), changes)
            touched = self.touched(out.request)
            if touched:
                flags = ", ".join(BY_NAME[n].flag.split("/")[0] for n in touched)
                self.relaxed.append(replace(alt, title=f"{title} {changes_what_you_set(flags)}"))
            else:
                self.found.append(alt)
        return out

    def touched(self, request: Request) -> list[str]:
        """The fields the user set that ``request`` changes.  A training micro-batch traded for accumulation that
        keeps the effective batch (sequences per optimizer step) changes nothing the run learns from."""
        names = [name for name, _ in changed_fields(self.typed, request) if name in self.locked]
        typed = self.typed
        if typed.training and request.batch * request.grad_accum == typed.batch * typed.grad_accum:
            names = [n for n in names if n not in ("batch", "grad_accum")]
        return names

    def offered(self) -> list[Alternative]:
        """What keeps every field the user set; only when nothing does, what changes some of them."""
        return self.found or self.relaxed

    def ranked(self, n: int) -> tuple[Alternative, ...]:
        return tuple(sorted(self.offered(), key=R.rank_key)[:n])

    def ranked_for_training(self, n: int) -> tuple[Alternative, ...]:
        """By cost, without an option that gives up more than another for nothing (gives_up_more_for_nothing)."""
        found = self.offered()
        return tuple(a for a in sorted(found, key=R.rank_key) if not R.gives_up_more_for_nothing(a, found))[:n]

    def ranked_for_serving(self, n: int, plan: AnyPlan, spec: ModelSpec, machine: Machine) -> tuple[Alternative, ...]:
        """The inference alternatives a practitioner would read: by cost, without the multi-node ones a
        single machine's fitting alternative makes needless (needless_nodes), a much slower option after a
        much faster one that gives up little more (speed_order), one good option per route family before a third
        of the same family (diverse)."""
        found = sorted(self.offered(), key=R.rank_key)
        kept = [a for a in found if not R.needless_nodes(a, found, plan)]
        feet = {id(a): R.footing(spec, machine, a) for a in kept}
        # known checkpoints first, before diverse too: an unknown AWQ build must not take a known FP8's place
        ordered = R.known_first(spec, R.speed_order(kept, lambda a: feet[id(a)]))
        return tuple(R.known_first(spec, R.diverse(ordered)))[:n]


# ---- helpers the routes share -----------------------------------------------------------------------------
def runs(out: Outcome | None) -> bool:
    return out is not None and out.verdict.status in (FITS, TIGHT)


def gpus_fit(out: Outcome | None) -> bool:
    if out is None:
        return False
    v = out.verdict
    return not v.reasons and all(d.status == FITS for d in v.devices if d.kind == "gpu")


# Formats made from a 16-bit checkpoint (bitsandbytes at load, GPTQ/AWQ by a calibration run): a checkpoint stored
# quantized (DeepSeek-R1's FP8, gpt-oss's MXFP4) is not re-quantized to them; only a published build of one counts.
_FROM_16_BIT = ("bnb", "gptq", "awq")


def requantizes(spec: ModelSpec, precision: str) -> bool:
    """Whether ``precision`` would re-quantize a checkpoint stored quantized, with no published build of it
    (issue 35 item 5: an expert does not list NF4 of an FP8 checkpoint)."""
    stored = weight_format_or_none(spec.stored_format) if spec.stored_format else None
    if stored is None or stored.family == "float" or weight_format(precision).family not in _FROM_16_BIT:
        return False
    return HF_QUANT_KEYS.get(precision, "") not in spec.prequantized


def smaller(spec: ModelSpec, precision: str, than: str) -> bool:
    """Whether ``precision`` exists for this checkpoint and stores its weights in fewer bytes than ``than``
    (sizes, not bits per weight: an MXFP4 checkpoint's experts are already 4-bit, so int8 of it is larger)."""
    fmt = weight_format(precision)
    if stored_only_problem(fmt, spec.stored_formats(), spec.name):
        return False
    return weight_bytes(spec, fmt).total < weight_bytes(spec, weight_format(than)).total


def multi_node(machine: Machine) -> bool:
    """Machines one runs several of: cloud nodes, or a profile that describes its cluster."""
    return bool(machine.gpus) and (machine.cluster is not None or machine.kind == "cloud")


def linked_nodes(machine: Machine) -> bool:
    """Machines `where` offers as a cluster: a profile that describes the link between its nodes ([cluster]
    inter_node_gbps).  A cloud VM of one GPU with no fabric named is not what one rents several of to serve or
    train one model, and what crosses between its nodes every step could not be timed (issue 35 item 7)."""
    return bool(machine.gpus) and machine.cluster is not None and machine.cluster.inter_node_gbps is not None


def fewest_nodes(fits: Callable[[int], bool], start: int, high: int = R.MAX_NODES_SEARCHED) -> int | None:
    """The smallest node count in [start, high] for which ``fits`` holds.  Counted up, not bisected: more nodes
    need less per GPU, but not every count is a layout (SGLang's TP over all nodes must divide the heads)."""
    if start > high or not fits(high):
        return None
    return next(n for n in range(start, high + 1) if n == high or fits(n))


def more_nodes(s: Search, cand: Request, plan: AnyPlan, title: str, extra: float = 0.0) -> bool:
    """Offer the fewest nodes (more than the plan's) on which ``cand`` runs; False when none up to the limit."""
    n = fewest_nodes(lambda k: runs(s.evaluate(cand.with_changes(nodes=k))), plan.nodes + 1)
    if n is not None:
        s.consider(f"{title} over {n} nodes", cand.with_changes(nodes=n), extra + R.cluster_cost(plan.nodes, n))
    return n is not None


def same_effective_batch(fitting: int, effective: int) -> tuple[int, int]:
    """(micro-batch, accumulation) keeping ``effective`` sequences per optimizer step exactly (the same math): the
    largest micro-batch up to ``fitting`` that divides it (8 at most 5 a step: 4 × 2, not 5 × 2 = 10)."""
    micro = max(d for d in range(1, max(fitting, 1) + 1) if effective % d == 0)
    return micro, effective // micro


def changes_what_you_set(flags: str) -> str:
    """The words an alternative's title ends in when it changes options the user set ('--engine, --batch')."""
    return f"(changes {flags}, which you set)"
