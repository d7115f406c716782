"""`fitcheck where MODEL --mode full|lora|qlora [--tokens N]`, rendered: which machine to fine-tune on, in hours and
money (the search is fitcheck.search.where).

Each profile is judged with the training estimate (all of its GPUs, data parallel, unless --gpus), its
training tokens/s from fitcheck.speed.training, and with --tokens the run's wall time and cost
(fitcheck.speed.cost.run_cost: price per hour × hours when rented, electricity — plus the amortised
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

from fitcheck import __version__
from fitcheck.render.cost import hours_range, run_dict, settings_text, usd, usd_range
from fitcheck.render.layout import Command, fit
from fitcheck.render.speed import rate_dict, rate_text
from fitcheck.render.where import model_document, not_fitting_document, runs_on, tight_mark, tight_note
from fitcheck.search.where import WhereResult, WhereRow
from fitcheck.speed.cost import RunCost, settings_dict
from fitcheck.units import GiB

SCHEMA = "fitcheck.where-training/1"


# ---- rendering --------------------------------------------------------------------------------
def _memory(row: WhereRow) -> str:
    d = row.tightest
    if d is None:
        return "unknown"
    return (f"{d.need_bytes / GiB:.1f} of {(d.free_bytes or 0) / GiB:.0f} GiB {'RAM' if d.kind == 'cpu' else 'GPU'}"
            + tight_mark(row.verdict))


def _usd_hour(x: float | None) -> str:
    return "-" if x is None else usd(x)


def _cost_cell(run: RunCost | None) -> str:
    if run is None or run.usd is None:
        return "-"
    basis = "" if run.rented_usd else " own" if run.amortized_usd else " power"
    return usd_range(run.usd) + basis


def render_where_training_table(result: WhereResult, verbose: bool = False, width: int | None = None) -> str:
    """The ranked machines for a fine-tuning run (every column fits 120; ``verbose`` is the same table, as
    where's own option; ``width`` wraps the prose under it)."""
    from tabulate import tabulate

    req = result.request
    spec = result.model.spec
    lines = [f"Model:    {result.model.hf_id or spec.name} — {req.mode} fine-tuning, sequence {req.seq_len:,} tokens, "
             f"micro-batch {req.batch}" + (f", {req.precision}" if req.precision else "")
             + (f", {result.tokens:,} tokens" if result.tokens else "")]
    fitting = result.fitting
    if fitting:
        rows = []
        for r in fitting:
            row = [r.machine.name, r.machine.kind, runs_on(r), r.planned.precision + ("*" if r.checkpointing_added
                                                                                   else ""), _memory(r),
                   rate_text(r.training_speed.rate if r.training_speed else None, ""), _usd_hour(r.usd_per_hour)]
            if result.tokens:
                row += [hours_range(r.run.hours) if r.run else "unknown", _cost_cell(r.run)]
            rows.append(row)
        headers = ["profile", "kind", "trains on", "base", "memory needed", "train tok/s", "$/hour"]
        if result.tokens:
            headers += ["wall time", "cost"]
        lines += ["", Command(tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True))]
    else:
        lines += ["", "No hardware profile fits this fine-tuning request with the headroom"
                  + (f" at or under ${result.max_price:g}/hour" if result.max_price is not None else "") + "."]
    if any(r.checkpointing_added for r in fitting):
        lines.append("* gradient checkpointing added (--grad-checkpointing, about 30% more compute, in the rate "
                     "shown): the run without it does not fit there")
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
    return "\n".join(fit(lines, width))


def where_training_document(result: WhereResult) -> dict:
    req = result.request
    machines = []
    for r in result.fitting:
        d = r.tightest
        machines.append({
            "name": r.machine.name, "kind": r.machine.kind, "description": r.machine.description,
            "precision": r.planned.precision, "device": r.planned.device, "gpus": r.planned.gpus, "nodes": r.nodes,
            "status": r.verdict.status if r.verdict else None,
            "need_bytes": d.need_bytes if d else None, "free_bytes": d.free_bytes if d else None,
            "training_tokens_per_s": rate_dict(r.training_speed.rate if r.training_speed else None),
            "usd_per_hour": r.usd_per_hour, "run": run_dict(r.run), "command": result.command(r),
            "grad_checkpointing": bool(getattr(r.planned, "grad_checkpointing", False)),
            "checkpointing_added": r.checkpointing_added,
        })
    cheap, fast = result.cheapest, result.fastest
    return {
        "schema": SCHEMA, "fitcheck_version": __version__,
        "model": model_document(result),
        "request": {"mode": req.mode, "precision": req.precision, "seq_len": req.seq_len, "batch": req.batch,
                    "grad_accum": req.grad_accum, "gpus": req.gpus, "headroom_pct": round(result.headroom * 100, 3),
                    "kind": result.kind, "max_price_usd_per_hour": result.max_price, "tokens": result.tokens},
        "machines": machines,
        "not_fitting": not_fitting_document(result),
        "cheapest": cheap.machine.name if cheap else None,
        "fastest": fast.machine.name if fast else None,
        "cost": settings_dict(result.cost),
    }


__all__ = ["SCHEMA", "render_where_training_table", "where_training_document"]
