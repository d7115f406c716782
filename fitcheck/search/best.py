"""For `where`: each machine's best weights format for a request whose precision was left to the machine, ranked
as check ranks its alternatives (quality first, then the decode speed given up), checked cheapest first.
"""

from __future__ import annotations

from fitcheck import engines
from fitcheck.errors import FitcheckError
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.weights import weight_bytes
from fitcheck.machine import Machine, known
from fitcheck.model.spec import ModelSpec
from fitcheck.plan import Plan, resolve
from fitcheck.request import Request
from fitcheck.search import rank as R
from fitcheck.search.inference_routes import (
    engine_chosen,
    gguf_default,
    gguf_ladder,
    lower_precision_engines,
    with_engine,
)
from fitcheck.search.routes import Alternative, Evaluate, Outcome, Search, runs


# ---- where: each machine's best precision ---------------------------------------------------------
def cannot_hold(spec: ModelSpec, precision: str, machine: Machine, device: str) -> bool:
    """True when the weights alone (less the embedding llama.cpp keeps in RAM, with a 5 % margin) exceed
    all the free memory of the devices a plan on ``device`` uses: a candidate skipped without estimating it."""
    if device == "cpu" or not machine.gpus:
        free = [machine.memory.available_bytes]
    else:
        free = [g.memory_free_bytes for g in machine.gpus]
    if not all(known(f) and isinstance(f, int) for f in free):
        return False
    wb = weight_bytes(spec, weight_format(precision))
    return 0.95 * (wb.total - wb.embed_bytes) > sum(free)  # type: ignore[arg-type]


def with_speed_costs(spec: ModelSpec, plan: Plan, machine: Machine, evaluate: Evaluate,
                      candidates: list[tuple[float, str, Request]]) -> list[tuple[float, str, Request]]:
    """The candidates that run, each cost with the decode speed it gives up (_slowdown_costs).  The other
    engines' are checked first; one of the plan's engine is checked only when its cost with the speed it
    gives up to those (from its plan alone: transformers' memory estimate is the slow one) can be the lowest."""
    def holds(c: tuple[float, str, Request]) -> bool:
        return not cannot_hold(spec, c[2].precision or "", machine, plan.device)

    running: list[tuple[tuple[float, str, Request], Outcome]] = []
    for c in [c for c in candidates if c[2].engine != plan.engine and holds(c)]:
        out = evaluate(c[2])
        if out is not None and runs(out):
            running.append((c, out))
    rated = [(R.gives_up(o.plan), R.decode_rate(spec, machine, o.plan)) for _, o in running]
    lowest = min((c[0] + R.slowdown_cost(r, g, rated) for (c, _), (g, r) in zip(running, rated, strict=True)),
                 default=None)
    for c in sorted((c for c in candidates if c[2].engine == plan.engine and holds(c)), key=lambda c: c[0]):
        try:
            own = resolve(c[2], spec, machine)
        except FitcheckError:
            continue
        own_slow = R.slowdown_cost(R.decode_rate(spec, machine, own), R.gives_up(own), rated)
        if lowest is not None and c[0] + own_slow >= lowest:
            continue
        out = evaluate(c[2])
        if out is not None and runs(out):
            running.append((c, out))
    slow = R.slowdown_costs(spec, machine, [o for _, o in running])
    return [(c[0] + extra, c[1], c[2]) for (c, _), extra in zip(running, slow, strict=True)]


def best_precision(spec: ModelSpec, request: Request, plan: Plan, machine: Machine,
                   evaluate: Evaluate) -> Alternative | None:
    """For a request whose precision was left to the machine and does not run at its default: the
    weights format the inference alternatives above would try (the engine's lower precisions, then
    GGUF builds with llama.cpp where no engine was given), nothing else of the request changed (same
    device, context, batch and KV cache, no partial offload), the first in check's order: the same costs as the
    alternatives (quality first), then speed_order (an option too slow to read along after a much faster one).
    Candidates are checked cheapest first, and only until one runs that nothing costlier can rank before; where
    fitcheck chose the engine, the serving engines' and the GGUF builds are checked too (vLLM's AWQ before
    transformers'), all of them, each paying for the decode speed it gives up."""
    base = request.with_changes(precision=plan.precision, engine=plan.engine)
    kind, cc = engines.machine_kind(machine, plan.device)

    def step(p: str) -> float:
        return max(R.quality(p) - R.quality(plan.precision), 0) * R.COST_PER_QUALITY_STEP

    candidates: list[tuple[float, str, Request]] = [
        (step(p) + (0 if e == plan.engine else R.COST_ENGINE_SWITCH), f"{weight_format(p).description} with {e}",
         with_engine(base, e, plan).with_changes(precision=p))
        for p, names in lower_precision_engines(spec, request, plan, kind, cc).items() for e in names]
    if request.engine in (None, engines.gguf_engine()):
        start = plan.precision if weight_format(plan.precision).gguf else gguf_default(spec)
        gguf_base = base.with_changes(engine=engines.gguf_engine(), transformers_version=None, attention=None,
                                      gpu_memory_utilization=Request().gpu_memory_utilization)
        candidates += [(step(g) + R.COST_GGUF, f"GGUF {g} with {engines.gguf_engine()}",
                        gguf_base.with_changes(precision=g))
                       for g in gguf_ladder(spec, start) if g != plan.precision]
    if engine_chosen(request, plan):
        # every engine's candidates, the GGUF builds too, pay for the decode speed they give up, as check's
        # (_consider_fastest against llama.cpp's build on the same GPUs, and each GGUF build's own)
        candidates = with_speed_costs(spec, plan, machine, evaluate, candidates)
    s = Search(base, evaluate, relax=True)  # the weights are what this search changes
    kept: list[Alternative] = []
    lead: tuple[Alternative, R.Footing] | None = None   # the cheapest kept, and what the speed order reads of it
    # Cheapest first, until one runs that nothing costlier can rank before; a lead too slow to read along may be
    # put after a much faster one (speed_order), so then every candidate is checked.
    for cost, title, cand in sorted(candidates, key=lambda c: c[0]):
        if lead is not None and cost >= lead[0].cost and not may_be_overtaken(lead[1]):
            break  # nothing costlier ranks before it
        if cannot_hold(spec, cand.precision or "", machine, plan.device):
            continue
        found = len(s.found)
        s.consider(title, cand, cost)
        for a in s.found[found:]:
            if isinstance(a.plan, Plan) and a.plan.device == plan.device and a.plan.gpu_layers is None \
                    and a.plan.nodes == plan.nodes and not a.plan.problems:
                kept.append(a)
                # an option whose checkpoint is unknown leads nothing: a known one at any cost ranks before it
                if R.checkpoint_known(spec, a) and (lead is None or R.rank_key(a) < R.rank_key(lead[0])):
                    lead = a, R.footing(spec, machine, a)
    if not kept:
        return None
    # check's own order: by cost, then an option too slow to read along after one much faster (speed_order), the
    # known checkpoints first (known_first)
    return R.known_first(spec, R.speed_order(sorted(kept, key=R.rank_key), lambda a: R.footing(spec, machine, a)))[0]


def may_be_overtaken(lead: R.Footing) -> bool:
    """Whether speed_order can put ``lead`` after another option: only one too slow to read along can be."""
    return lead.decode_low is not None and lead.decode_low / max(lead.batch, 1) < R.READ_ALONG_TOKENS_PER_S


