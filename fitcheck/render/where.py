"""`fitcheck where MODEL`: the request judged on every hardware profile, built first, rendered last.

:func:`where_result` evaluates the request on each machine (each with its own default precision
and engine unless given) and keeps the verdict and speed; :func:`render_where_table` and
:func:`where_document` render it.  The speed helpers here (:func:`rate_text`,
:func:`speed_document`) are shared with the `fitcheck MODEL` renderer.

JSON document (schema "fitcheck.where/1"; tests lock its key set):
{
  "schema": "fitcheck.where/1", "fitcheck_version": str,
  "model": {query, id, params_total, params_active},
  "request": {precision, context, prompt_tokens, batch, kv_dtype, engine, gpus, headroom_pct, kind,
              max_price_usd_per_hour},
  "machines": [{name, kind, description, precision, engine, device, gpus, nodes, layout, cpu_moe, gpu_layers, status,
                need_bytes,
                free_bytes,
                decode_tokens_per_s: {low, high} | null, per_sequence_tokens_per_s, prefill_tokens_per_s,
                usd_per_hour, usd_per_million_tokens: {low, high} | null, price_read_on, price_source,
                owned, power_watts, purchase_usd, purchase_read_on, purchase_source,
                energy_kwh_per_million_tokens: {low, high} | null, electricity_usd_per_million_tokens,
                amortized_usd_per_million_tokens, break_even_hours, precision_choice, default_precision}],
  "not_fitting": [{name, kind, status, reason}],   # could run it, but it does not fit (or costs more)
  "cannot_run": [{name, kind, reason}],            # cannot run it at all: kernels, compute capability, engine
  "assumptions": [{name, low, high, why}],
  "cost": {kwh_price_usd, kwh_price_source, amortize_years, hours_per_day, break_even_against}
}
Owned machines (fitcheck.render.cost): energy and electricity per million tokens from the profile's
power draw, the amortised cost adds the purchase price spread over amortize_years × 365 ×
hours_per_day; break_even_hours is against break_even_against, the cheapest rented machine per token.
Machines that fit with the headroom are listed cheapest first (price per hour), then the ones
without a price, fastest first.  With no --precision, a machine whose default does not fit is listed
as check advises there (precision_choice "best_fitting", its default in default_precision): check's best
alternative on that machine that changes only the weights — their format, the engine serving them (with no
--engine), or llama.cpp with part of them in RAM (device "offload": -ngl N layers on the GPU, or for a mixture
of experts --n-cpu-moe N, cpu_moe N) — else the best precision that runs fully on the device
(fitcheck.alternatives.best_precision: the lower precisions and GGUF builds check's alternatives try, in check's
order), nothing else of the request changed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fitcheck import __version__
from fitcheck.errors import FitcheckError
from fitcheck.estimate.result import Estimate
from fitcheck.estimate.verdict import CANNOT_RUN, FITS, TIGHT, Verdict
from fitcheck.machine import Machine
from fitcheck.plan import Plan
from fitcheck.request import Request
from fitcheck.speed.cost import CostSettings, usd_per_million_tokens
from fitcheck.speed.decode import SpeedEstimate
from fitcheck.speed.efficiency import Efficiency
from fitcheck.units import GiB

SCHEMA = "fitcheck.where/1"


# ---- speed helpers (fitcheck.render.speed), re-exported for the where renderers -------------------
from fitcheck.render.speed import (  # noqa: E402,F401
    _num,  # noqa: E402,F401
    advice_document,
    efficiency_dict,
    rate_dict,
    rate_text,
    speed_document,
    speed_line,
    training_speed_document,
    training_speed_line,
)


# ---- the where result -------------------------------------------------------------------------
@dataclass(frozen=True)
class WhereRow:
    machine: Machine
    plan: Plan | None
    estimate: Estimate | None
    verdict: Verdict | None
    speed: SpeedEstimate | None
    reason: str = ""                # why it does not fit / was not evaluated
    nodes: int = 1                  # machines like this one (vLLM: pipeline parallel across them)
    default_precision: str | None = None  # set when the machine's default did not run: the precision chosen instead

    @property
    def layout(self) -> str:
        """How the row spreads the model over its GPUs: 'expert-parallel' (MoE experts over every GPU, attention
        data parallel), 'tensor-parallel' (vLLM/SGLang TP, with vLLM's pipeline parallel across nodes
        'tensor-parallel+pipeline-parallel'), 'layer-split' (llama.cpp, transformers), 'single' (one device)."""
        p = self.plan
        if p is None or p.device == "cpu" or max(p.gpus, 1) * max(self.nodes, 1) < 2:
            return "single"
        if p.expert_parallel:
            return "expert-parallel"
        if p.engine == "vllm" and self.nodes > 1:
            return "tensor-parallel+pipeline-parallel"
        if p.engine in ("vllm", "sglang"):
            return "tensor-parallel"
        return "layer-split"

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
    def usd_per_million_tokens(self) -> tuple[float, float] | None:
        if self.usd_per_hour is None or self.speed is None or self.speed.decode is None:
            return None
        return usd_per_million_tokens(self.usd_per_hour, self.speed.decode)

    @property
    def tightest(self):
        """The fullest device verdict (need ÷ free), the one the verdict line names."""
        from fitcheck.estimate.verdict import tightest_device

        return tightest_device(self.verdict)


@dataclass(frozen=True)
class WhereResult:
    query: str
    model: object                   # ResolvedModel
    request: Request
    headroom: float
    kind: str | None
    max_price: float | None
    rows: tuple[WhereRow, ...]      # every machine of the kind, evaluated
    cost: CostSettings = CostSettings()  # electricity price, amortisation (owned machines)
    rented: tuple[WhereRow, ...] = ()    # cloud machines left out by --kind: the break-even reference

    @property
    def fitting(self) -> list[WhereRow]:
        """Machines that fit with the headroom (and within --max-price), best first."""
        ok = [r for r in self.rows if r.fits and (self.max_price is None or
                                                 (r.usd_per_hour is not None and r.usd_per_hour <= self.max_price))]
        # a machine whose speed is unknown (llama.cpp layers in RAM on a profile without its RAM bandwidth) goes
        # after those whose speed is known: its price per token cannot be told
        priced = sorted((r for r in ok if r.usd_per_hour is not None),
                        key=lambda r: (not _speed(r), r.usd_per_hour, -_speed(r)))
        unpriced = sorted((r for r in ok if r.usd_per_hour is None), key=lambda r: -_speed(r))
        return priced + unpriced

    @property
    def not_fitting(self) -> list[WhereRow]:
        """Machines that could run the request but where it does not fit (or costs more than --max-price)."""
        chosen = {id(r) for r in self.fitting}
        return [r for r in self.rows if id(r) not in chosen and not r.cannot_run]

    @property
    def cannot_run(self) -> list[WhereRow]:
        """Machines that cannot run the request at all (kernels, compute capability, engine): listed apart."""
        return [r for r in self.rows if r.cannot_run]

    @property
    def exit_code(self) -> int:
        return 0 if self.fitting else 1


def _speed(row: WhereRow) -> float:
    return row.speed.decode.mid if row.speed and row.speed.decode else 0.0


def evaluate_on(spec, request, machine: Machine, headroom: float) -> WhereRow:
    """The request on one machine, checked exactly as `fitcheck MODEL --profile NAME` checks it
    (fitcheck.pipeline.check: its defaults, all its GPUs unless --gpus): plan, estimate, verdict, speed."""
    from fitcheck.model.resolve import ResolvedModel
    from fitcheck.pipeline import check

    try:
        result = check(ResolvedModel(spec, spec.name, "where"), request.with_changes(headroom=headroom * 100), machine,
                       alternatives=False, search=False, device_advice=False)
    except FitcheckError as exc:
        return WhereRow(machine, None, None, None, None, exc.one_line())
    verdict = result.verdict
    return WhereRow(machine, result.plan, result.estimate, verdict, result.speed,
                    "" if verdict.status == FITS else verdict.summary(), nodes=request.nodes)


# What an alternative may change and still be "this request at another precision" in `where`: the weights
# format, the engine that serves it (and the engine-specific options a switch resets), and with llama.cpp which
# part of the weights stays in RAM: a mixture of experts' routed experts (--n-cpu-moe), or whole layers (-ngl).
WEIGHTS_ONLY = frozenset({"precision", "engine", "cpu_moe", "gpu_layers", "transformers_version", "attention",
                          "gpu_memory_utilization", "device"})


def best_precision_row(spec, request: Request, row: WhereRow, headroom: float) -> WhereRow:
    """``row`` (the machine at its default precision) when it runs or the precision was given; else the
    machine as `fitcheck MODEL --profile NAME` itself advises: its best alternative there that changes only the
    weights (WEIGHTS_ONLY; the engine too unless --engine was given) on the same device, or with llama.cpp part
    of them in RAM (-ngl N, or --n-cpu-moe N for a mixture of experts), checked again as its printed command
    checks it.  Where check offers none such (it shortens the context or rents nodes instead), the best
    precision that runs fully on the device, ranked as check ranks (fitcheck.alternatives.best_precision);
    ``row`` when nothing runs."""
    from fitcheck.model.resolve import ResolvedModel
    from fitcheck.pipeline import check, evaluator
    from fitcheck.search.best import best_precision

    if request.precision is not None or row.fits or not isinstance(row.plan, Plan):
        return row
    asked = request.with_changes(headroom=headroom * 100)
    allowed = WEIGHTS_ONLY - ({"engine"} if request.engine else set())
    try:
        advised = check(ResolvedModel(spec, spec.name, "where"), asked, row.machine, search=False,
                        device_advice=False).alternatives
    except FitcheckError:
        advised = ()
    chosen_request = next((a.request for a in advised if {k for k, _ in a.changes} <= allowed
                           and a.plan.device in (row.plan.device, "offload")), None)
    if chosen_request is None:
        best = best_precision(spec, asked, row.plan, row.machine, evaluator(spec, row.machine))
        if best is None:
            return row
        chosen_request = request.with_changes(precision=best.plan.precision, engine=best.plan.engine)
    chosen = evaluate_on(spec, chosen_request, row.machine, headroom)
    return replace(chosen, default_precision=row.plan.precision) if chosen.fits else row


MAX_WHERE_NODES = 8  # the most nodes `where` rents of one cloud profile


def multi_node_row(spec, request: Request, machine: Machine, headroom: float) -> WhereRow | None:
    """The fewest nodes of a cloud ``machine`` (2..MAX_WHERE_NODES) that serve ``request`` with vLLM
    (tensor parallel within a node × pipeline parallel across nodes), or with SGLang (tensor parallel over all
    nodes) when the request names it, or None."""
    from fitcheck.search.routes import fewest_nodes

    if machine.kind != "cloud" or not machine.gpus or request.engine not in (None, "vllm", "sglang") \
            or request.nodes != 1:
        return None
    asked = request.with_changes(engine=request.engine or "vllm", nodes=2)
    rows: dict[int, WhereRow] = {}

    def fits(n: int) -> bool:
        rows[n] = evaluate_on(spec, asked.with_changes(nodes=n), machine, headroom)
        return rows[n].fits

    n = fewest_nodes(fits, 2, MAX_WHERE_NODES)
    return rows[n] if n is not None else None


# Expert parallel is listed beside a machine's tensor-parallel row where it holds at least this many times the
# concurrent sequences (its KV cache no longer replicated over the TP ranks), or where TP does not fit at all.
EP_CONCURRENCY_GAIN = 2.0


def _concurrency(row: WhereRow) -> float | None:
    from fitcheck.pipeline import _concurrency as of_estimate

    return of_estimate(row.estimate) if row.estimate is not None else None


def expert_parallel_row(spec, request: Request, row: WhereRow, headroom: float) -> WhereRow | None:
    """For an MoE model on a cloud machine of several GPUs (or nodes): the same GPUs with the experts split over
    all of them and attention data parallel (vLLM --enable-expert-parallel, or SGLang's when asked), when that
    fits where ``row`` (the tensor-parallel layout) does not, or holds EP_CONCURRENCY_GAIN × its sequences."""
    from fitcheck import engines

    m = row.machine
    if not spec.is_moe or request.training or request.expert_parallel or m.kind != "cloud" or not m.gpus \
            or len(m.gpus) * max(row.nodes, 1) < 2 or request.engine not in (None, *engines.EXPERT_PARALLEL_ENGINES):
        return None
    engine = request.engine or "vllm"
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


def multi_node_ep_row(spec, request: Request, machine: Machine, headroom: float,
                      than: WhereRow | None) -> WhereRow | None:
    """The fewest nodes of a cloud ``machine`` that serve an MoE ``request`` expert parallel, when that is fewer
    nodes than ``than`` (the tensor × pipeline parallel row, None when none fits) or it fits where that does not."""
    from fitcheck import engines
    from fitcheck.search.routes import fewest_nodes

    if not spec.is_moe or machine.kind != "cloud" or not machine.gpus or request.nodes != 1 \
            or request.engine not in (None, *engines.EXPERT_PARALLEL_ENGINES):
        return None
    asked = request.with_changes(engine=request.engine or "vllm", expert_parallel=True)
    rows: dict[int, WhereRow] = {}
    most = (than.nodes - 1) if than is not None else MAX_WHERE_NODES

    def fits(n: int) -> bool:
        rows[n] = evaluate_on(spec, asked.with_changes(nodes=n), machine, headroom)
        return rows[n].fits

    n = fewest_nodes(fits, 2, most) if most >= 2 else None
    return rows[n] if n is not None else None


def where_result(resolved, request: Request, machines, *, headroom: float, kind: str | None = None,
                 max_price: float | None = None, query: str | None = None,
                 cost: CostSettings | None = None) -> WhereResult:
    """`request` for `resolved` judged on every machine in `machines` of `kind`."""
    from fitcheck.pipeline import shared_evaluations

    with shared_evaluations():  # each machine is checked several times (default, advice, layouts, nodes)
        return _where_result(resolved, request, list(machines), headroom, kind, max_price, query, cost)


def _where_result(resolved, request: Request, machines: list[Machine], headroom: float, kind: str | None,
                  max_price: float | None, query: str | None, cost: CostSettings | None) -> WhereResult:
    from fitcheck.profiles import machines_of_kind

    defaults = tuple(evaluate_on(resolved.spec, request, m, headroom) for m in machines_of_kind(machines, kind))
    # Precision left to each machine: where its default does not run, the best precision that does.
    rows = tuple(best_precision_row(resolved.spec, request, r, headroom) for r in defaults)
    # MoE: expert parallel beside the default layout where it fits where that does not, or holds far more.
    ep_rows = tuple(e for e in (expert_parallel_row(resolved.spec, request, d, headroom) for d in defaults)
                    if e is not None)
    if not request.training and not any(r.fits for r in defaults):
        # No machine is enough alone at its own default: the fewest nodes of each cloud one that serve it.
        for d in defaults:
            if d.fits:
                continue
            tp = multi_node_row(resolved.spec, request, d.machine, headroom)
            rows += (tp,) if tp is not None else ()
            if any(e.machine is d.machine for e in ep_rows):
                continue  # expert parallel already serves it on one node
            ep = multi_node_ep_row(resolved.spec, request, d.machine, headroom, tp)
            if ep is None and tp is not None:
                ep = expert_parallel_row(resolved.spec, request, tp, headroom)
            rows += (ep,) if ep is not None else ()
    rows += ep_rows
    rented: tuple[WhereRow, ...] = ()
    if kind in ("laptop", "desktop", "workstation"):  # buying one: break-even against renting, even if not listed
        rented = tuple(best_precision_row(resolved.spec, request, evaluate_on(resolved.spec, request, m, headroom),
                                          headroom) for m in machines_of_kind(machines, "cloud"))
    return WhereResult(query or resolved.hf_id or resolved.spec.name, resolved, request, headroom, kind, max_price,
                       rows, cost or CostSettings(), rented)


# ---- rendering --------------------------------------------------------------------------------
def _where_text(row: WhereRow) -> str:
    p = row.plan
    if p.device == "cpu":
        return "CPU"
    g = row.machine.gpus[0]
    name = str(g.name).replace("NVIDIA ", "").replace("GeForce ", "")
    text = f"{p.gpus}× {name}" if p.gpus > 1 else name
    text = f"{row.nodes} nodes × {text}" if row.nodes > 1 else text
    text += " + CPU" if p.device == "offload" else ""  # llama.cpp: part of the weights in RAM
    return text + (", expert parallel" if row.layout == "expert-parallel" else "")


def _weights_text(row: WhereRow) -> str:
    """The precision and engine the row runs with (and llama.cpp's split, --n-cpu-moe N or -ngl N); * when chosen
    because the machine's default did not fit."""
    p = row.plan
    return f"{p.precision} {p.engine}" + (f" {p.offload_flag}" if p.offload_flag else "") \
        + ("*" if row.default_precision else "")


def _cannot_run_reason(row: WhereRow) -> str:
    return row.verdict.reasons[0] if row.verdict and row.verdict.reasons else row.reason


def _memory_text(row: WhereRow) -> str:
    d = row.tightest
    if d is None:
        return "unknown"
    label = "RAM" if d.kind == "cpu" else "GPU"
    text = f"{d.need_bytes / GiB:.1f} of {d.free_bytes / GiB:.0f} GiB {label}"
    if row.plan is not None and row.plan.device == "offload":  # split between the GPU and RAM: the other's too
        others = [o for o in row.verdict.devices if o is not d and o.free_bytes is not None and o.need_bytes]
        text += "".join(f", {o.need_bytes / GiB:.1f} of {o.free_bytes / GiB:.0f} GiB "
                        + ("RAM" if o.kind == "cpu" else "GPU") for o in others)
    return text + tight_mark(row.verdict)


def tight_mark(verdict: Verdict | None) -> str:
    """' (tight)' for a row that runs only inside the headroom (what `fitcheck MODEL --profile NAME` calls TIGHT)."""
    return " (tight)" if verdict is not None and verdict.status == TIGHT else ""


def tight_note(rows, headroom: float) -> list[str]:
    """The line under a table that has a (tight) row."""
    if not any(tight_mark(r.verdict) for r in rows):
        return []
    return [f"(tight): fits only inside the {headroom:.0%} headroom (--headroom sets it; "
            "`fitcheck MODEL --profile NAME --strict` exits 1 on it)"]


def _usd(x: float) -> str:
    return f"${x:,.2f}" if x < 100 else f"${x:,.0f}"


def render_where_table(result: WhereResult) -> str:
    from tabulate import tabulate

    spec = result.model.spec
    req = result.request
    lines = [f"Model:    {result.model.hf_id or spec.name} — context {req.context:,} tokens"
             + (f" (prompt {req.prompt_tokens:,})" if req.prompt_tokens and req.prompt_tokens != req.context else "")
             + f", batch {req.batch}"
             + (f", {req.precision}" if req.precision else ", each machine's default precision")
             + (f", {req.engine}" if req.engine else "")]
    fitting = result.fitting
    from fitcheck.render.cost import where_cells, where_lines

    if fitting:
        rows = []
        for r in fitting:
            rows.append([r.machine.name, r.machine.kind, _where_text(r), _weights_text(r),
                         _memory_text(r), rate_text(r.speed.decode if r.speed else None, ""),
                         *where_cells(r, result.cost)])
        headers = ["profile", "kind", "runs on", "weights", "memory needed", "decode tok/s", "$/hour", "$/M tokens",
                   "kWh/M tokens"]
        if all(row[-1] == "-" for row in rows):  # no owned machine: no energy column
            rows, headers = [row[:-1] for row in rows], headers[:-1]
        lines += ["", tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)]
    else:
        lines += ["", "No hardware profile fits this request with the headroom"
                  + (f" at or under ${result.max_price:g}/hour" if result.max_price is not None else "") + "."]
    if any(r.default_precision for r in fitting):
        lines.append("* the machine's default precision does not fit there: the best precision that does "
                     "(check it with `fitcheck MODEL -p PRECISION --engine ENGINE --profile NAME`"
                     + (", and --cpu-moe N for --n-cpu-moe N" if any(r.plan.cpu_moe for r in fitting) else "")
                     + (", and --gpu-layers N for -ngl N" if any(r.plan.device == "offload" and not r.plan.cpu_moe
                                                                 for r in fitting) else "") + ")")
    lines += tight_note(fitting, result.headroom)
    skipped = len(result.not_fitting)
    if skipped:
        lines.append(f"({skipped} other profile{'s' if skipped != 1 else ''} do not fit"
                     + (" or cost more" if result.max_price is not None else "") + "; --json lists why)")
    cannot = result.cannot_run
    if cannot:
        by_reason: dict[str, list[str]] = {}
        for r in cannot:
            by_reason.setdefault(_cannot_run_reason(r), []).append(r.machine.name)
        lines.append(f"Cannot run it at all ({len(cannot)} profile{'s' if len(cannot) != 1 else ''}):")
        lines += [f"  {', '.join(names)}: {why}" for why, names in by_reason.items()]
    lines.append("")
    lines.append(f"Decode tok/s is the whole batch's throughput at {req.context:,} tokens; $/M tokens is the price "
                 "per hour ÷ that throughput. Prices are indicative on-demand list prices (see each profile).")
    lines += where_lines(result, result.cost)
    assumptions = _assumptions(result)
    if assumptions:
        lines.append("Assumptions: " + "; ".join(f"{e.name} {_range(e)}" for e in assumptions))
    return "\n".join(lines)


def _range(e: Efficiency) -> str:
    if e.high < 0.01:
        return f"{e.low * 1e3:g}–{e.high * 1e3:g} ms"
    return f"{e.low:g}–{e.high:g}"


def _assumptions(result: WhereResult) -> list[Efficiency]:
    seen: dict[str, Efficiency] = {}
    for r in result.fitting:
        for e in r.speed.assumptions if r.speed else ():
            seen.setdefault(e.name, e)
    return list(seen.values())


def where_document(result: WhereResult) -> dict:
    from fitcheck.render.cost import where_cost_document, where_machine_keys

    spec = result.model.spec
    req = result.request
    machines = []
    for r in result.fitting:
        d = r.tightest
        mtok = r.usd_per_million_tokens
        machines.append({
            "name": r.machine.name, "kind": r.machine.kind, "description": r.machine.description,
            "precision": r.plan.precision, "engine": r.plan.engine, "device": r.plan.device, "gpus": r.plan.gpus,
            "nodes": r.nodes, "layout": r.layout,
            "cpu_moe": ("all" if r.plan.cpu_moe_all else r.plan.cpu_moe) if r.plan.cpu_moe else None,
            "gpu_layers": r.plan.gpu_layers if r.plan.device == "offload" and not r.plan.cpu_moe else None,
            "precision_choice": ("given" if req.precision else "best_fitting" if r.default_precision else "default"),
            "default_precision": r.default_precision,
            "status": r.verdict.status,
            "need_bytes": d.need_bytes if d else None, "free_bytes": d.free_bytes if d else None,
            "decode_tokens_per_s": rate_dict(r.speed.decode if r.speed else None),
            "per_sequence_tokens_per_s": rate_dict(r.speed.per_sequence if r.speed else None),
            "prefill_tokens_per_s": rate_dict(r.speed.prefill if r.speed else None),
            "usd_per_hour": r.usd_per_hour,
            "usd_per_million_tokens": {"low": round(mtok[0], 4), "high": round(mtok[1], 4)} if mtok else None,
            "price_read_on": str(r.machine.price.read_on) if r.machine.price else None,
            "price_source": r.machine.price.source if r.machine.price else None,
            **where_machine_keys(r, result, result.cost),
        })
    return {
        "schema": SCHEMA,
        "fitcheck_version": __version__,
        "model": {"query": result.query, "id": result.model.hf_id or spec.name, "params_total": spec.total_params,
                  "params_active": spec.active_params},
        "request": {"precision": req.precision, "context": req.context,
                    "prompt_tokens": req.prompt_tokens or req.context, "batch": req.batch, "kv_dtype": req.kv_dtype,
                    "engine": req.engine, "gpus": req.gpus, "headroom_pct": round(result.headroom * 100, 3),
                    "kind": result.kind, "max_price_usd_per_hour": result.max_price},
        "machines": machines,
        "not_fitting": [{"name": r.machine.name, "kind": r.machine.kind,
                         "status": r.verdict.status if r.verdict else "not_run",
                         "reason": r.reason or (f"costs ${r.usd_per_hour:g}/hour" if r.usd_per_hour is not None
                                                else "no price (--max-price given)")}
                        for r in result.not_fitting],
        "cannot_run": [{"name": r.machine.name, "kind": r.machine.kind, "reason": _cannot_run_reason(r)}
                       for r in result.cannot_run],
        "assumptions": [efficiency_dict(e) for e in _assumptions(result)],
        "cost": where_cost_document(result, result.cost),
    }


__all__ = ["SCHEMA", "WhereResult", "WhereRow", "advice_document", "evaluate_on", "rate_text", "render_where_table",
           "speed_document", "speed_line", "where_document", "where_result"]
