"""`fitcheck where MODEL --mode full|lora|qlora [--tokens N]`: which machine to fine-tune on, in hours and money.

Each profile is judged with the training estimate (all of its GPUs, data parallel, unless --gpus), its
training tokens/s from fitcheck.estimate.speed, and with --tokens the run's wall time and cost
(fitcheck.estimate.cost.run_cost: price per hour × hours when rented, electricity — plus the amortised
purchase when its price is known — when owned).  Those that fit are listed cheapest run first (a full
cost: rented, or owned with a purchase price; without --tokens, rented machines by price per training
token, which orders runs of any length alike), then the others fastest first; the cheapest and the fastest
are named.  When no machine is enough alone, each cloud profile is tried over several nodes (the fewest,
2..MAX_WHERE_TRAINING_NODES, on which the model states sharded over all their GPUs fit; FSDP full-shard
unless --zero/--fsdp says otherwise; profiles that describe their link between nodes), priced per hour × nodes.

JSON document (schema "fitcheck.where-training/1"; tests lock its key set):
{
  "schema", "fitcheck_version", "model": {query, id, params_total, params_active},
  "request": {mode, precision, seq_len, batch, grad_accum, gpus, headroom_pct, kind, max_price_usd_per_hour, tokens},
  "machines": [{name, kind, description, precision, device, gpus, nodes, status, need_bytes, free_bytes,
                training_tokens_per_s: {low, high} | null, usd_per_hour, run: {...} | null, command}],
  "not_fitting": [{name, kind, status, reason}],
  "cheapest": name | null, "fastest": name | null,
  "cost": {kwh_price_usd, kwh_price_source, amortize_years, hours_per_day}
}
"run" is the check document's cost.run (tokens, hours, usd, basis, energy_kwh, electricity_usd, amortized_usd).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fitcheck import __version__
from fitcheck.errors import FitcheckError
from fitcheck.estimate.verdict import FITS, TIGHT, Verdict
from fitcheck.machine import Machine
from fitcheck.speed.cost import CostSettings, RunCost, run_cost, settings_dict
from fitcheck.speed.training import TrainingSpeed
from fitcheck.units import GiB

SCHEMA = "fitcheck.where-training/1"


@dataclass(frozen=True)
class TrainingWhereRow:
    machine: Machine
    plan: Any                       # TrainingPlan, None when it could not be planned
    verdict: Verdict | None
    speed: TrainingSpeed | None
    run: RunCost | None
    reason: str = ""

    @property
    def fits(self) -> bool:
        """Runs: fits, or fits tightly (what `fitcheck MODEL --profile NAME` exits 0 for)."""
        return self.verdict is not None and self.verdict.status in (FITS, TIGHT)

    @property
    def nodes(self) -> int:
        """Machines like this one the row trains on (gpus is per node)."""
        return self.plan.nodes if self.plan is not None else 1

    @property
    def usd_per_hour(self) -> float | None:
        return self.machine.price.usd_per_hour * self.nodes if self.machine.price else None

    @property
    def usd_per_token(self) -> float | None:
        """Price per training token (rented machines with a known rate): what ranks runs of any length."""
        if self.usd_per_hour is None or not self.tokens_per_s:
            return None
        return self.usd_per_hour / 3600 / self.tokens_per_s

    @property
    def tokens_per_s(self) -> float:
        return self.speed.rate.mid if self.speed is not None and self.speed.rate else 0.0

    @property
    def run_usd_mid(self) -> float | None:
        """The run's full cost (rented, or owned with the purchase amortised), middle of the range; an owned
        machine's electricity alone is not ranked against a rental price."""
        usd = (self.run.rented_usd or self.run.amortized_usd) if self.run else None
        return (usd[0] * usd[1]) ** 0.5 if usd else None

    @property
    def tightest(self):
        """The fullest device verdict (need ÷ free), the one the verdict line names."""
        from fitcheck.estimate.verdict import tightest_device

        return tightest_device(self.verdict)


@dataclass(frozen=True)
class TrainingWhereResult:
    query: str
    model: Any                      # ResolvedModel
    request: Any                    # fitcheck.request.Request (a training mode)
    headroom: float
    kind: str | None
    max_price: float | None
    tokens: int | None
    cost: CostSettings
    rows: tuple[TrainingWhereRow, ...]
    model_args: tuple[str, ...] = ()  # what to type for the same model (MODEL [--params N]); () : the query

    @property
    def fitting(self) -> list[TrainingWhereRow]:
        ok = [r for r in self.rows if r.fits and (self.max_price is None or
                                                 (r.usd_per_hour is not None and r.usd_per_hour <= self.max_price))]
        if self.tokens is None:  # no run to cost: rented machines by price per training token
            priced = sorted((r for r in ok if r.usd_per_token is not None), key=lambda r: (r.usd_per_token, r.nodes))
            chosen = {id(r) for r in priced}
            return priced + sorted((r for r in ok if id(r) not in chosen), key=lambda r: -r.tokens_per_s)
        costed = sorted((r for r in ok if r.run_usd_mid is not None), key=lambda r: (r.run_usd_mid, -r.tokens_per_s))
        rest = sorted((r for r in ok if r.run_usd_mid is None), key=lambda r: -r.tokens_per_s)
        return costed + rest

    @property
    def not_fitting(self) -> list[TrainingWhereRow]:
        chosen = {id(r) for r in self.fitting}
        return [r for r in self.rows if id(r) not in chosen]

    @property
    def cheapest(self) -> TrainingWhereRow | None:
        costed = [r for r in self.fitting if r.run_usd_mid is not None]
        return costed[0] if costed else None

    @property
    def fastest(self) -> TrainingWhereRow | None:
        timed = [r for r in self.fitting if r.tokens_per_s > 0]
        return max(timed, key=lambda r: r.tokens_per_s, default=None)

    @property
    def exit_code(self) -> int:
        return 0 if self.fitting else 1


def evaluate_training_on(spec, request: Any, machine: Machine, headroom: float, tokens: int | None,
                         cost: CostSettings) -> TrainingWhereRow:
    """The training request on one machine, checked exactly as `fitcheck MODEL --mode ... --profile NAME`
    checks it (fitcheck.pipeline.check): plan, estimate, verdict, speed, and the run's time and cost."""
    from fitcheck.model.resolve import ResolvedModel
    from fitcheck.pipeline import check

    try:
        result = check(ResolvedModel(spec, spec.name, "where"), request.with_changes(headroom=headroom * 100), machine,
                       alternatives=False, search=False)
    except FitcheckError as exc:
        return TrainingWhereRow(machine, None, None, None, None, exc.one_line())
    plan, verdict, speed = result.plan, result.verdict, result.training_speed
    rented = machine
    if plan.nodes > 1 and machine.price is not None:  # N nodes rent at N times the price
        rented = replace(machine, price=replace(machine.price, usd_per_hour=machine.price.usd_per_hour * plan.nodes))
    run = (run_cost(tokens, (speed.rate.low, speed.rate.high), rented, cost)
           if tokens is not None and speed is not None and speed.rate is not None else None)
    return TrainingWhereRow(machine, plan, verdict, speed, run, "" if verdict.status == FITS else verdict.summary())


MAX_WHERE_TRAINING_NODES = 32  # the most nodes `where` rents of one cloud profile for fine-tuning (256 GPUs of 8)


def multi_node_training_row(spec, request: Any, machine: Machine, headroom: float, tokens: int | None,
                            cost: CostSettings) -> TrainingWhereRow | None:
    """The fewest nodes (2..MAX_WHERE_TRAINING_NODES) of a cloud ``machine`` on which ``request`` trains, the
    model states sharded over all of their GPUs (FSDP full-shard unless the request shards otherwise), or None.
    Hybrid sharding keeps a replica per node, so more nodes never lower its per-GPU need: not tried.  Only
    profiles that give the link between nodes ([cluster] inter_node_gbps): sharded training moves hundreds
    of GB per step over it, so a node without a described fabric is not offered as a cluster."""
    from fitcheck.estimate.sharding import FSDP_STRATEGIES
    from fitcheck.search.routes import fewest_nodes

    if machine.kind != "cloud" or not machine.gpus or request.nodes != 1 or machine.cluster is None \
            or machine.cluster.inter_node_gbps is None:
        return None
    asked = request if (request.zero is not None or request.fsdp is not None) else request.with_changes(
        fsdp="full-shard")
    if asked.fsdp is not None and FSDP_STRATEGIES[asked.fsdp].within_node:
        return None
    rows: dict[int, TrainingWhereRow] = {}

    def fits(n: int) -> bool:
        rows[n] = evaluate_training_on(spec, asked.with_changes(nodes=n), machine, headroom, tokens, cost)
        return rows[n].fits

    n = fewest_nodes(fits, 2, MAX_WHERE_TRAINING_NODES)
    return rows[n] if n is not None else None


def where_training_result(resolved, request, machines, *, headroom: float, kind: str | None = None,
                          max_price: float | None = None, query: str | None = None, tokens: int | None = None,
                          cost: CostSettings | None = None,
                          model_args: tuple[str, ...] = ()) -> TrainingWhereResult:
    from fitcheck.profiles import machines_of_kind

    cost = cost or CostSettings()
    rows = tuple(evaluate_training_on(resolved.spec, request, m, headroom, tokens, cost)
                 for m in machines_of_kind(machines, kind))
    if not any(r.fits for r in rows):
        # No machine is enough alone: the fewest nodes of each cloud one that train it.
        more = (multi_node_training_row(resolved.spec, request, r.machine, headroom, tokens, cost) for r in rows)
        rows += tuple(r for r in more if r is not None)
    return TrainingWhereResult(query or resolved.hf_id or resolved.spec.name, resolved, request, headroom, kind,
                               max_price, tokens, cost, rows, model_args)


# ---- rendering --------------------------------------------------------------------------------
def _runs_on(row: TrainingWhereRow) -> str:
    if row.plan.device == "cpu":
        return "CPU"
    name = str(row.machine.gpus[0].name).replace("NVIDIA ", "").replace("GeForce ", "")
    text = f"{row.plan.gpus}× {name}" if row.plan.gpus > 1 else name
    return f"{row.nodes} nodes × {text}" if row.nodes > 1 else text


def row_command(result: TrainingWhereResult, row: TrainingWhereRow) -> str:
    """`fitcheck MODEL --mode ... --profile NAME` that checks this row again (its nodes and sharding)."""
    from fitcheck.commands import fitcheck_command

    request = result.request.with_changes(nodes=row.plan.nodes, fsdp=row.plan.fsdp, zero=row.plan.zero)
    if result.headroom * 100 != request.headroom:
        request = request.with_changes(headroom=result.headroom * 100)
    return fitcheck_command(result.model_args or (result.query,), request, profile=row.machine.name)


def _memory(row: TrainingWhereRow) -> str:
    d = row.tightest
    if d is None:
        return "unknown"
    from fitcheck.render.where import tight_mark

    return (f"{d.need_bytes / GiB:.1f} of {d.free_bytes / GiB:.0f} GiB {'RAM' if d.kind == 'cpu' else 'GPU'}"
            + tight_mark(row.verdict))


def _usd_hour(usd: float | None) -> str:
    return "-" if usd is None else f"${usd:,.2f}" if usd < 100 else f"${usd:,.0f}"


def _cost_cell(run: RunCost | None) -> str:
    from fitcheck.render.cost import usd_range

    if run is None or run.usd is None:
        return "-"
    basis = "" if run.rented_usd else " own" if run.amortized_usd else " power"
    return usd_range(run.usd) + basis


def render_where_training_table(result: TrainingWhereResult) -> str:
    from tabulate import tabulate

    from fitcheck.render.cost import hours_range, settings_text, usd_range
    from fitcheck.render.where import rate_text

    req = result.request
    spec = result.model.spec
    lines = [f"Model:    {result.model.hf_id or spec.name} — {req.mode} fine-tuning, sequence {req.seq_len:,} tokens, "
             f"micro-batch {req.batch}" + (f", {req.precision}" if req.precision else "")
             + (f", {result.tokens:,} tokens" if result.tokens else "")]
    fitting = result.fitting
    if fitting:
        rows = []
        for r in fitting:
            row = [r.machine.name, r.machine.kind, _runs_on(r), r.plan.precision, _memory(r),
                   rate_text(r.speed.rate if r.speed else None, ""), _usd_hour(r.usd_per_hour)]
            if result.tokens:
                row += [hours_range(r.run.hours) if r.run else "unknown", _cost_cell(r.run)]
            rows.append(row)
        headers = ["profile", "kind", "trains on", "base", "memory needed", "train tok/s", "$/hour"]
        if result.tokens:
            headers += ["wall time", "cost"]
        lines += ["", tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)]
    else:
        lines += ["", "No hardware profile fits this fine-tuning request with the headroom"
                  + (f" at or under ${result.max_price:g}/hour" if result.max_price is not None else "") + "."]
    from fitcheck.render.where import tight_note

    lines += tight_note(fitting, result.headroom)
    skipped = len(result.rows) - len(fitting)
    if skipped:
        lines.append(f"({skipped} other profile{'s' if skipped != 1 else ''} do not fit"
                     + (" or cost more" if result.max_price is not None else "") + "; --json lists why)")
    lines.append("")
    if not result.tokens:
        lines.append("Add --tokens N (dataset tokens × epochs, e.g. 100M) for each run's wall time and cost.")
    else:
        cheap, fast = result.cheapest, result.fastest
        if cheap is not None and cheap.run is not None and cheap.run.usd is not None:
            lines.append(f"Cheapest: {cheap.machine.name}, {usd_range(cheap.run.usd)} "
                         f"in {hours_range(cheap.run.hours)}")
        if fast is not None and fast.run is not None:
            cost = f", {usd_range(fast.run.usd)}" if fast.run.usd else ""
            lines.append(f"Fastest:  {fast.machine.name}, {hours_range(fast.run.hours)}{cost}")
        lines.append("Wall time is tokens ÷ training tokens/s (16-bit peak × 30–50 % MFU); cost is the price per "
                     "hour × that time, or for owned machines (\"own\": purchase share plus electricity, \"power\": "
                     "electricity only) " + settings_text(result.cost) + ".")
    return "\n".join(lines)


def where_training_document(result: TrainingWhereResult) -> dict:
    from fitcheck.render.cost import run_dict
    from fitcheck.render.where import rate_dict

    spec = result.model.spec
    req = result.request
    machines = []
    for r in result.fitting:
        d = r.tightest
        machines.append({
            "name": r.machine.name, "kind": r.machine.kind, "description": r.machine.description,
            "precision": r.plan.precision, "device": r.plan.device, "gpus": r.plan.gpus, "nodes": r.nodes,
            "status": r.verdict.status if r.verdict else None,
            "need_bytes": d.need_bytes if d else None, "free_bytes": d.free_bytes if d else None,
            "training_tokens_per_s": rate_dict(r.speed.rate if r.speed else None),
            "usd_per_hour": r.usd_per_hour, "run": run_dict(r.run), "command": row_command(result, r),
        })
    cheap, fast = result.cheapest, result.fastest
    return {
        "schema": SCHEMA, "fitcheck_version": __version__,
        "model": {"query": result.query, "id": result.model.hf_id or spec.name, "params_total": spec.total_params,
                  "params_active": spec.active_params},
        "request": {"mode": req.mode, "precision": req.precision, "seq_len": req.seq_len, "batch": req.batch,
                    "grad_accum": req.grad_accum, "gpus": req.gpus, "headroom_pct": round(result.headroom * 100, 3),
                    "kind": result.kind, "max_price_usd_per_hour": result.max_price, "tokens": result.tokens},
        "machines": machines,
        "not_fitting": [{"name": r.machine.name, "kind": r.machine.kind,
                         "status": r.verdict.status if r.verdict else "not_run",
                         "reason": r.reason or (f"costs ${r.usd_per_hour:g}/hour" if r.usd_per_hour is not None
                                                else "no price (--max-price given)")}
                        for r in result.not_fitting],
        "cheapest": cheap.machine.name if cheap else None,
        "fastest": fast.machine.name if fast else None,
        "cost": settings_dict(result.cost),
    }


__all__ = ["SCHEMA", "TrainingWhereResult", "TrainingWhereRow", "evaluate_training_on",
           "render_where_training_table", "where_training_document", "where_training_result"]
