"""`fitcheck where MODEL`: the request judged on every hardware profile, one row a machine, for serving and for
fine-tuning alike.

Each machine is checked exactly as `fitcheck MODEL --profile NAME` checks it (fitcheck.pipeline.check: its own
defaults, all its GPUs unless --gpus).  With no --precision, a machine whose default does not fit is listed as
check advises there: its best alternative that changes only the weights (WEIGHTS_ONLY: their format, the engine
serving them unless --engine, or llama.cpp with part of them in RAM), else the best precision that runs fully on
the device (fitcheck.search.best).  When no machine serves it alone, each cloud profile is tried over the fewest
nodes that do (serving: tensor × pipeline parallel, and expert parallel for a mixture of experts; fine-tuning: the
model states sharded over every GPU).  Every row keeps the request it checked: :meth:`WhereResult.command` is the
`fitcheck` command that checks it again, every setting it used written out.

Order: machines that fit with the headroom (and within --max-price) cheapest first — serving by price per hour,
fine-tuning by the run's cost with --tokens, else by price per training token — then those without a price,
fastest first.  Owned machines (serving) are costed by their power draw and purchase (fitcheck.speed.cost), with
the break-even against the cheapest rented machine per token that fits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fitcheck import engines
from fitcheck.commands import fitcheck_command
from fitcheck.errors import FitcheckError
from fitcheck.estimate.result import Estimate
from fitcheck.estimate.sharding import FSDP_STRATEGIES
from fitcheck.estimate.verdict import CANNOT_RUN, FITS, TIGHT, DeviceVerdict, Verdict, tightest_device
from fitcheck.machine import Machine
from fitcheck.model.catalog import get_entry
from fitcheck.model.resolve import ResolvedModel
from fitcheck.pipeline import WEIGHTS_ONLY, check, shared_evaluations
from fitcheck.plan import AnyPlan, Plan, TrainingPlan
from fitcheck.profiles import machines_of_kind
from fitcheck.request import Request
from fitcheck.search.routes import fewest_nodes, linked_nodes
from fitcheck.speed.cost import (
    CostSettings,
    OwnedCost,
    RunCost,
    break_even_hours,
    machine_owned_cost,
    run_cost,
    usd_per_million_tokens,
)
from fitcheck.speed.decode import SpeedEstimate
from fitcheck.speed.training import TrainingSpeed

MAX_WHERE_NODES = 8             # the most nodes `where` rents of one cloud profile to serve a model
MAX_WHERE_TRAINING_NODES = 32   # ... and to fine-tune one (256 GPUs of 8)
# Expert parallel is listed beside a machine's tensor-parallel row where it holds at least this many times the
# concurrent sequences (its KV cache no longer replicated over the TP ranks), or where TP does not fit at all.
EP_CONCURRENCY_GAIN = 2.0
# What an alternative may change and still be "this request at another precision" in `where`: the weights
# format, the engine that serves it (and the engine-specific options a switch resets), and with llama.cpp which
# part of the weights stays in RAM: a mixture of experts' routed experts (--n-cpu-moe), or whole layers (-ngl).
BUYING_KINDS = ("laptop", "desktop", "workstation")  # `where --kind` of these: buying one, costed against renting


@dataclass(frozen=True)
class WhereRow:
    """One machine's answer: the request as checked there, its plan, verdict, speed and (fine-tuning with --tokens)
    the run's time and cost."""

    machine: Machine
    request: Request                # what was checked, headroom included: the row's command asks it again
    plan: AnyPlan | None            # None when it could not be planned (reason says why)
    estimate: Estimate | None
    verdict: Verdict | None
    speed: SpeedEstimate | None = None            # serving: decode and prefill tokens/s
    training_speed: TrainingSpeed | None = None   # fine-tuning: training tokens/s
    run: RunCost | None = None                    # fine-tuning with --tokens: wall time and cost
    reason: str = ""                # why it does not fit, or was not planned
    default_precision: str | None = None  # set when the machine's default did not run: the precision it replaced
    checkpointing_added: bool = False     # fine-tuning: gradient checkpointing, left open, turned on to fit here

    @property
    def nodes(self) -> int:
        """Machines like this one the row runs on (--gpus is per node)."""
        return self.request.nodes

    @property
    def planned(self) -> AnyPlan:
        """The row's plan (every row that runs has one)."""
        if self.plan is None:
            raise ValueError(f"{self.machine.name}: not planned ({self.reason})")
        return self.plan

    @property
    def served(self) -> Plan:
        """The row's serving plan."""
        if not isinstance(self.plan, Plan):
            raise ValueError(f"{self.machine.name}: no serving plan ({self.reason})")
        return self.plan

    @property
    def judged(self) -> Verdict:
        if self.verdict is None:
            raise ValueError(f"{self.machine.name}: not judged ({self.reason})")
        return self.verdict

    @property
    def layout(self) -> str:
        """How the row spreads the model over its GPUs: 'expert-parallel' (MoE experts over every GPU, attention
        data parallel), the engine's split ('tensor-parallel', with vLLM's pipeline parallel across nodes
        'tensor-parallel+pipeline-parallel'; 'layer-split'), 'single' (one device)."""
        p = self.plan
        if not isinstance(p, Plan) or p.device == "cpu" or max(p.gpus, 1) * max(self.nodes, 1) < 2:
            return "single"
        return "expert-parallel" if p.expert_parallel else engines.get(p.engine).layout_key(p)

    @property
    def cannot_run(self) -> bool:
        """The machine cannot run the request at all (kernels, compute capability, engine), whatever the memory."""
        return self.verdict is not None and self.verdict.status == CANNOT_RUN

    @property
    def fits(self) -> bool:
        """Runs: fits, or fits tightly (what `fitcheck MODEL --profile NAME` exits 0 for)."""
        return self.verdict is not None and self.verdict.status in (FITS, TIGHT)

    @property
    def usd_per_hour(self) -> float | None:
        return self.machine.price.usd_per_hour * self.nodes if self.machine.price else None

    @property
    def tokens_per_s(self) -> float:
        """The middle of the row's speed: decode throughput when serving, training tokens/s when fine-tuning."""
        rate = self.training_speed.rate if self.training_speed else self.speed.decode if self.speed else None
        return rate.mid if rate else 0.0

    @property
    def usd_per_million_tokens(self) -> tuple[float, float] | None:
        """Serving on a rented machine: the price per million generated tokens (fast end, slow end)."""
        if self.usd_per_hour is None or self.speed is None or self.speed.decode is None:
            return None
        return usd_per_million_tokens(self.usd_per_hour, self.speed.decode)

    @property
    def usd_per_token(self) -> float | None:
        """Price per training token (rented machines with a known rate): what ranks runs of any length."""
        if self.usd_per_hour is None or not self.tokens_per_s:
            return None
        return self.usd_per_hour / 3600 / self.tokens_per_s

    @property
    def run_usd_mid(self) -> float | None:
        """The run's full cost (rented, or owned with the purchase amortised), middle of the range; an owned
        machine's electricity alone is not ranked against a rental price."""
        usd = (self.run.rented_usd or self.run.amortized_usd) if self.run else None
        return (usd[0] * usd[1]) ** 0.5 if usd else None

    @property
    def tightest(self) -> DeviceVerdict | None:
        """The fullest device verdict (need ÷ free), the one the verdict line names."""
        return tightest_device(self.verdict) if self.verdict is not None else None


@dataclass(frozen=True)
class WhereResult:
    query: str
    model: Any                      # fitcheck.model.resolve.ResolvedModel
    request: Request
    headroom: float
    kind: str | None
    max_price: float | None
    rows: tuple[WhereRow, ...]      # every machine of the kind, evaluated (and those over several nodes)
    cost: CostSettings = CostSettings()  # electricity price, amortisation (owned machines)
    rented: tuple[WhereRow, ...] = ()    # serving: cloud machines left out by --kind, the break-even reference
    tokens: int | None = None       # fine-tuning: the tokens to train on (--tokens)
    model_args: tuple[str, ...] = ()     # what to type for the same model (MODEL [--params N]); (): the query

    @property
    def training(self) -> bool:
        return self.request.training

    @property
    def fitting(self) -> list[WhereRow]:
        """Machines that fit with the headroom (and within --max-price), best first."""
        ok = [r for r in self.rows if r.fits and (self.max_price is None or
                                                 (r.usd_per_hour is not None and r.usd_per_hour <= self.max_price))]
        if self.training and self.tokens is None:  # no run to cost: rented machines by price per training token
            priced = sorted((r for r in ok if r.usd_per_token is not None), key=lambda r: (r.usd_per_token, r.nodes))
            chosen = {id(r) for r in priced}
            return priced + sorted((r for r in ok if id(r) not in chosen), key=lambda r: -r.tokens_per_s)
        if self.training:
            costed = sorted((r for r in ok if r.run_usd_mid is not None),
                            key=lambda r: (r.run_usd_mid, -r.tokens_per_s))
            return costed + sorted((r for r in ok if r.run_usd_mid is None), key=lambda r: -r.tokens_per_s)
        # a machine whose speed is unknown (llama.cpp layers in RAM on a profile without its RAM bandwidth) goes
        # after those whose speed is known: its price per token cannot be told
        priced = sorted((r for r in ok if r.usd_per_hour is not None),
                        key=lambda r: (not r.tokens_per_s, r.usd_per_hour, -r.tokens_per_s))
        return priced + sorted((r for r in ok if r.usd_per_hour is None), key=lambda r: -r.tokens_per_s)

    @property
    def not_fitting(self) -> list[WhereRow]:
        """Machines that could run the request but where it does not fit (or costs more than --max-price)."""
        chosen = {id(r) for r in self.fitting}
        return [r for r in self.rows if id(r) not in chosen and not (r.cannot_run and not self.training)]

    @property
    def cannot_run(self) -> list[WhereRow]:
        """Serving: machines that cannot run the request at all (kernels, compute capability, engine), apart."""
        return [] if self.training else [r for r in self.rows if r.cannot_run]

    @property
    def cheapest(self) -> WhereRow | None:
        """Fine-tuning: the fitting machine whose run costs least."""
        costed = [r for r in self.fitting if r.run_usd_mid is not None]
        return costed[0] if costed else None

    @property
    def fastest(self) -> WhereRow | None:
        timed = [r for r in self.fitting if r.tokens_per_s > 0]
        return max(timed, key=lambda r: r.tokens_per_s, default=None)

    @property
    def exit_code(self) -> int:
        return 0 if self.fitting else 1

    def command(self, row: WhereRow) -> str:
        """`fitcheck MODEL ... --profile NAME` that checks ``row`` again: every setting it used (the precision and
        engine where advised, its nodes, a fine-tuning plan's sharding)."""
        request = row.request
        if isinstance(row.plan, TrainingPlan):
            request = request.with_changes(fsdp=row.plan.fsdp, zero=row.plan.zero)
        return fitcheck_command(self.model_args or (self.query,), request, profile=row.machine.name)

    # ---- owned machines: what serving costs there, and when buying one pays off -------------------------
    def owned_cost(self, row: WhereRow) -> OwnedCost | None:
        d = row.speed.decode if row.speed else None
        return machine_owned_cost(row.machine, (d.low, d.high) if d else None, self.cost)

    @property
    def cheapest_rented(self) -> WhereRow | None:
        """The fitting rented machine with the lowest price per million tokens (middle of the range), among those
        listed and the cloud profiles --kind left out."""
        rented = [r for r in (*self.fitting, *self.rented) if r.fits and r.usd_per_million_tokens is not None]
        return min(rented, key=lambda r: _geomean(r.usd_per_million_tokens), default=None)

    def break_even_hours(self, row: WhereRow) -> float | None:
        """Hours of use after which buying ``row``'s machine costs less than renting the cheapest (None: never)."""
        owned = self.owned_cost(row)
        cloud = self.cheapest_rented
        if owned is None or row.machine.purchase is None or cloud is None or cloud.usd_per_hour is None:
            return None
        return break_even_hours(row.machine.purchase.usd, row.tokens_per_s, owned.electricity_usd_per_hour,
                                cloud.usd_per_hour, cloud.tokens_per_s)


def _geomean(r: Any) -> float:
    return float((r[0] * r[1]) ** 0.5)


def _as_where(spec: Any) -> ResolvedModel:
    """The model as `where` checks it: its spec, with its catalog entry (the pre-quantized repositories a check's
    commands and its choice of weights read) where it has one."""
    return ResolvedModel(spec, spec.name, "where", None, get_entry(spec.name))


def evaluate_on(spec: Any, request: Request, machine: Machine, headroom: float, tokens: int | None = None,
                cost: CostSettings | None = None) -> WhereRow:
    """The request on one machine, checked exactly as `fitcheck MODEL --profile NAME` checks it: plan, estimate,
    verdict, speed, and for a fine-tuning run of ``tokens`` its wall time and cost."""
    asked = request.with_changes(headroom=headroom * 100)
    try:
        result = check(_as_where(spec), asked, machine, alternatives=False, search=False,
                       device_advice=False)
    except FitcheckError as exc:
        return WhereRow(machine, asked, None, None, None, reason=exc.one_line())
    plan, verdict, speed = result.plan, result.verdict, result.training_speed
    run = None
    if tokens is not None and speed is not None and speed.rate is not None:
        rented = machine
        if plan.nodes > 1 and machine.price is not None:  # N nodes rent at N times the price
            rented = replace(machine, price=replace(machine.price,
                                                    usd_per_hour=machine.price.usd_per_hour * plan.nodes))
        run = run_cost(tokens, (speed.rate.low, speed.rate.high), rented, cost or CostSettings())
    return WhereRow(machine, asked, plan, result.estimate, verdict, result.speed, speed, run,
                    "" if verdict.status == FITS else verdict.summary())


def best_precision_row(spec: Any, request: Request, row: WhereRow, headroom: float) -> WhereRow:
    """``row`` (the machine at its default precision) when it runs or the precision was given; else the
    machine as `fitcheck MODEL --profile NAME` itself answers it: the weights check chooses there (pipeline.check's
    Chosen: its best alternative that changes only the weights, WEIGHTS_ONLY, on the same device or with llama.cpp
    part of them in RAM; else the best precision that runs fully on the device, fitcheck.search.best), checked
    again as its printed command checks it; ``row`` when check chooses nothing."""
    if request.precision is not None or row.fits or not isinstance(row.plan, Plan):
        return row
    asked = request.with_changes(headroom=headroom * 100)
    try:
        result = check(_as_where(spec), asked, row.machine, search=False,
                       device_advice=False)
    except FitcheckError:
        return row
    if result.chosen is None:
        return row
    chosen = evaluate_on(spec, result.request, row.machine, headroom)
    return replace(chosen, default_precision=row.plan.precision) if chosen.fits else row


def _fewest_nodes(rows: dict[int, WhereRow], evaluate: Any, most: int) -> WhereRow | None:
    """The row of the fewest nodes, 2..most, on which ``evaluate(n)`` fits (None: none)."""
    def fits(n: int) -> bool:
        rows[n] = evaluate(n)
        return rows[n].fits

    n = fewest_nodes(fits, 2, most) if most >= 2 else None
    return rows[n] if n is not None else None


def multi_node_row(spec: Any, request: Request, machine: Machine, headroom: float) -> WhereRow | None:
    """The fewest nodes of a cloud ``machine`` (2..MAX_WHERE_NODES) that serve ``request`` with the first serving
    engine (vLLM: tensor parallel within a node × pipeline parallel across nodes), or the one the request names,
    or None; only where the profile describes the link between nodes (linked_nodes)."""
    if machine.kind != "cloud" or not linked_nodes(machine) or request.nodes != 1 \
            or request.engine not in (None, *engines.SERVING_ENGINES):
        return None
    asked = request.with_changes(engine=request.engine or engines.SERVING_ENGINES[0])
    return _fewest_nodes({}, lambda n: evaluate_on(spec, asked.with_changes(nodes=n), machine, headroom),
                         MAX_WHERE_NODES)


def _concurrency(row: WhereRow) -> float | None:
    pool = row.estimate.pool if row.estimate is not None else None
    return pool.max_concurrency if pool is not None else None


def expert_parallel_row(spec: Any, request: Request, row: WhereRow, headroom: float) -> WhereRow | None:
    """For an MoE model on a cloud machine of several GPUs (or nodes): the same GPUs with the experts split over
    all of them and attention data parallel (vLLM --enable-expert-parallel, or SGLang's when asked), when that
    fits where ``row`` (the tensor-parallel layout) does not, or holds EP_CONCURRENCY_GAIN × its sequences."""
    m = row.machine
    if not spec.is_moe or request.training or request.expert_parallel or m.kind != "cloud" or not m.gpus \
            or len(m.gpus) * max(row.nodes, 1) < 2 or request.engine not in (None, *engines.EXPERT_PARALLEL_ENGINES):
        return None
    engine = request.engine or engines.EXPERT_PARALLEL_ENGINES[0]
    asked = request.with_changes(engine=engine, expert_parallel=True, nodes=row.nodes)
    if row.fits and row.plan is not None:
        asked = asked.with_changes(precision=row.plan.precision)
    ep = evaluate_on(spec, asked, m, headroom)
    if not ep.fits or not isinstance(ep.plan, Plan) or not ep.plan.expert_parallel:
        return None
    # compared with tensor parallel on the same engine and weights (the row itself when it is that)
    tp = row if row.plan is not None and row.plan.engine == engine and row.fits \
        else evaluate_on(spec, asked.with_changes(expert_parallel=False), m, headroom)
    if tp.fits:
        now, then = _concurrency(tp), _concurrency(ep)
        if now is None or then is None or then < EP_CONCURRENCY_GAIN * now:
            return None
    return ep


def multi_node_ep_row(spec: Any, request: Request, machine: Machine, headroom: float,
                      than: WhereRow | None) -> WhereRow | None:
    """The fewest nodes of a cloud ``machine`` that serve an MoE ``request`` expert parallel, when that is fewer
    nodes than ``than`` (the tensor × pipeline parallel row, None when none fits) or it fits where that does not."""
    if not spec.is_moe or machine.kind != "cloud" or not linked_nodes(machine) or request.nodes != 1 \
            or request.engine not in (None, *engines.EXPERT_PARALLEL_ENGINES):
        return None
    asked = request.with_changes(engine=request.engine or engines.EXPERT_PARALLEL_ENGINES[0], expert_parallel=True)
    most = (than.nodes - 1) if than is not None else MAX_WHERE_NODES
    return _fewest_nodes({}, lambda n: evaluate_on(spec, asked.with_changes(nodes=n), machine, headroom), most)


def multi_node_training_row(spec: Any, request: Request, machine: Machine, headroom: float, tokens: int | None,
                            cost: CostSettings) -> WhereRow | None:
    """The fewest nodes (2..MAX_WHERE_TRAINING_NODES) of a cloud ``machine`` on which ``request`` trains, the
    model states sharded over all of their GPUs (FSDP full-shard unless the request shards otherwise), or None.
    Hybrid sharding keeps a replica per node, so more nodes never lower its per-GPU need: not tried.  Only
    profiles that give the link between nodes ([cluster] inter_node_gbps): sharded training moves hundreds
    of GB per step over it, so a node without a described fabric is not offered as a cluster."""
    if machine.kind != "cloud" or not linked_nodes(machine) or request.nodes != 1:
        return None
    asked = request if (request.zero is not None or request.fsdp is not None) else request.with_changes(
        fsdp="full-shard")
    if asked.fsdp is not None and FSDP_STRATEGIES[asked.fsdp].within_node:
        return None
    return _fewest_nodes({}, lambda n: evaluate_on(spec, asked.with_changes(nodes=n), machine, headroom, tokens, cost),
                         MAX_WHERE_TRAINING_NODES)


def where_result(resolved: Any, request: Request, machines: Any, *, headroom: float, kind: str | None = None,
                 max_price: float | None = None, query: str | None = None, tokens: int | None = None,
                 cost: CostSettings | None = None, model_args: tuple[str, ...] = ()) -> WhereResult:
    """``request`` for ``resolved`` judged on every machine in ``machines`` of ``kind``."""
    cost = cost or CostSettings()
    of_kind = machines_of_kind(list(machines), kind)
    with shared_evaluations():  # each machine is checked several times (default, advice, layouts, nodes)
        if request.training:
            rows = _training_rows(resolved.spec, request, of_kind, headroom, tokens, cost)
            rented: tuple[WhereRow, ...] = ()
        else:
            rows = _serving_rows(resolved.spec, request, of_kind, headroom)
            rented = ()
            if kind in BUYING_KINDS:  # buying one: break-even against renting, even if not listed
                spec = resolved.spec
                rented = tuple(best_precision_row(spec, request, evaluate_on(spec, request, m, headroom), headroom)
                               for m in machines_of_kind(list(machines), "cloud"))
    return WhereResult(query or resolved.hf_id or resolved.spec.name, resolved, request, headroom, kind, max_price,
                       rows, cost, rented, tokens, model_args)


def _serving_rows(spec: Any, request: Request, machines: list[Machine], headroom: float) -> tuple[WhereRow, ...]:
    defaults = tuple(evaluate_on(spec, request, m, headroom) for m in machines)
    # Precision left to each machine: where its default does not run, the best precision that does.
    rows = tuple(best_precision_row(spec, request, r, headroom) for r in defaults)
    # MoE: expert parallel beside the default layout where it fits where that does not, or holds far more.
    ep_rows = tuple(e for e in (expert_parallel_row(spec, request, d, headroom) for d in defaults) if e is not None)
    if not any(r.fits for r in defaults):
        # No machine is enough alone at its own default: the fewest nodes of each cloud one that serve it.
        for d in defaults:
            if d.fits:
                continue
            tp = multi_node_row(spec, request, d.machine, headroom)
            rows += (tp,) if tp is not None else ()
            if any(e.machine is d.machine for e in ep_rows):
                continue  # expert parallel already serves it on one node
            ep = multi_node_ep_row(spec, request, d.machine, headroom, tp)
            if ep is None and tp is not None:
                ep = expert_parallel_row(spec, request, tp, headroom)
            rows += (ep,) if ep is not None else ()
    return rows + ep_rows


def checkpointed_row(spec: Any, request: Request, row: WhereRow, headroom: float, tokens: int | None,
                     cost: CostSettings) -> WhereRow:
    """``row`` when it fits or gradient checkpointing was set; else the machine with checkpointing on, when that
    fits (check's first training route: about 30 % more compute for the activations of one layer at a time), so
    `where --mode lora` does not hide every card a practitioner trains on with it (issue 35 item 6)."""
    if row.fits or request.grad_checkpointing is not None or not isinstance(row.plan, TrainingPlan) \
            or row.plan.grad_checkpointing:
        return row
    on = evaluate_on(spec, request.with_changes(grad_checkpointing=True), row.machine, headroom, tokens, cost)
    return replace(on, checkpointing_added=True) if on.fits else row


def _training_rows(spec: Any, request: Request, machines: list[Machine], headroom: float, tokens: int | None,
                   cost: CostSettings) -> tuple[WhereRow, ...]:
    rows = tuple(checkpointed_row(spec, request, evaluate_on(spec, request, m, headroom, tokens, cost), headroom,
                                  tokens, cost) for m in machines)
    if not any(r.fits for r in rows):
        # No machine is enough alone: the fewest nodes of each cloud one that train it.
        more = (multi_node_training_row(spec, request, r.machine, headroom, tokens, cost) for r in rows)
        rows += tuple(r for r in more if r is not None)
    return rows


__all__ = ["EP_CONCURRENCY_GAIN", "MAX_WHERE_NODES", "MAX_WHERE_TRAINING_NODES", "WEIGHTS_ONLY", "WhereResult",
           "WhereRow", "best_precision_row", "evaluate_on", "where_result"]
