"""Render `fitcheck where MODEL` (a fitcheck.pipeline.WhereResult): the table and the JSON document.

JSON document (schema "fitcheck.where/2"; tests lock its key set):
{
  "schema": "fitcheck.where/2", "fitcheck_version": str,
  "model": {query, id, params_total, params_active},
  "request": {mode, precision, context, seq_len, batch, kv_dtype, engine, gpus, headroom_pct, kind,
              max_price_usd_per_hour},
  "machines": [{name, kind, description, precision, engine, device, gpus, status, need_bytes, free_bytes,
                decode_tokens_per_s: {low, high} | null, per_sequence_tokens_per_s, prefill_tokens_per_s,
                training_tokens_per_s, usd_per_hour, usd_per_million_tokens: {low, high} | null,
                price_read_on, price_source}],
  "not_fitting": [{name, kind, status, reason}],
  "assumptions": [{name, low, high, why}]
}
Machines that run it (fits or tight, as `fitcheck check` exits 0 for) are listed cheapest first
(price per hour), then the ones without a price, fastest first.
"""

from __future__ import annotations

from fitcheck import __version__
from fitcheck.estimate.speed import Efficiency
from fitcheck.estimate.verdict import TIGHT
from fitcheck.pipeline import WhereResult, WhereRow
from fitcheck.render.speed import efficiency_dict, rate_dict, rate_text
from fitcheck.units import gib

SCHEMA = "fitcheck.where/2"


# ---- rendering --------------------------------------------------------------------------------
def _where_text(row: WhereRow) -> str:
    p = row.plan
    if p is None or p.device == "cpu" or not row.machine.gpus:
        return "CPU"
    g = row.machine.gpus[0]
    name = str(g.name).replace("NVIDIA ", "").replace("GeForce ", "")
    return f"{p.gpus}× {name}" if p.gpus > 1 else name


def _memory_text(row: WhereRow) -> str:
    d = row.tightest
    if d is None:
        return "unknown"
    label = "RAM" if d.kind == "cpu" else "GPU"
    return f"{gib(d.need_bytes, 1)} of {gib(d.free_bytes, 0)} GiB {label}"


def _usd(x: float) -> str:
    return f"${x:,.2f}" if x < 100 else f"${x:,.0f}"


def render_where_table(result: WhereResult) -> str:
    from tabulate import tabulate

    spec = result.model.spec
    req = result.request
    what = (f"context {req.context:,} tokens, batch {req.batch}" if not req.training else
            f"{req.mode} fine-tuning, sequence {req.seq_len:,} tokens, micro-batch {req.batch}")
    lines = [f"Model:    {result.model.hf_id or spec.name} — {what}"
             + (f", {req.precision}" if req.precision else ", each machine's default precision")
             + (f", {req.engine}" if req.engine else "")]
    fitting = result.fitting
    if fitting:
        rows = []
        for r in fitting:
            assert r.plan is not None
            mtok = r.usd_per_million_tokens
            rate = r.speed.decode if r.speed else (r.training_speed.rate if r.training_speed else None)
            tight = " (tight)" if r.verdict is not None and r.verdict.status == TIGHT else ""
            rows.append([r.machine.name, r.machine.kind, _where_text(r), f"{r.plan.precision} {r.plan.engine}",
                         _memory_text(r) + tight, rate_text(rate, ""),
                         _usd(r.usd_per_hour) if r.usd_per_hour is not None else "-",
                         f"{_usd(mtok[0])}–{_usd(mtok[1])}" if mtok else "-"])
        speed_header = "training tok/s" if req.training else "decode tok/s"
        headers = ["profile", "kind", "runs on", "weights", "memory needed", speed_header, "$/hour", "$/M tokens"]
        lines += ["", tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)]
    else:
        lines += ["", "No hardware profile fits this request with the headroom"
                  + (f" at or under ${result.max_price:g}/hour" if result.max_price is not None else "") + "."]
    skipped = len(result.rows) - len(fitting)
    if skipped:
        lines.append(f"({skipped} other profile{'s' if skipped != 1 else ''} do not fit"
                     + (" or cost more" if result.max_price is not None else "") + "; --json lists why)")
    lines.append("")
    if req.training:
        lines.append("Training tok/s is over all the GPUs a run uses. Prices are indicative on-demand list prices "
                     "(see each profile).")
    else:
        lines.append(f"Decode tok/s is the whole batch's throughput at {req.context:,} tokens; $/M tokens is the "
                     "price per hour ÷ that throughput. Prices are indicative on-demand list prices "
                     "(see each profile).")
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
        if r.training_speed is not None:
            seen.setdefault(r.training_speed.mfu.name, r.training_speed.mfu)
    return list(seen.values())


def where_document(result: WhereResult) -> dict:
    spec = result.model.spec
    req = result.request
    machines = []
    for r in result.fitting:
        assert r.plan is not None and r.verdict is not None
        d = r.tightest
        mtok = r.usd_per_million_tokens
        machines.append({
            "name": r.machine.name, "kind": r.machine.kind, "description": r.machine.description,
            "precision": r.plan.precision, "engine": r.plan.engine, "device": r.plan.device, "gpus": r.plan.gpus,
            "status": r.verdict.status,
            "need_bytes": d.need_bytes if d else None, "free_bytes": d.free_bytes if d else None,
            "decode_tokens_per_s": rate_dict(r.speed.decode if r.speed else None),
            "per_sequence_tokens_per_s": rate_dict(r.speed.per_sequence if r.speed else None),
            "prefill_tokens_per_s": rate_dict(r.speed.prefill if r.speed else None),
            "training_tokens_per_s": rate_dict(r.training_speed.rate if r.training_speed else None),
            "usd_per_hour": r.usd_per_hour,
            "usd_per_million_tokens": {"low": round(mtok[0], 4), "high": round(mtok[1], 4)} if mtok else None,
            "price_read_on": str(r.machine.price.read_on) if r.machine.price else None,
            "price_source": r.machine.price.source if r.machine.price else None,
        })
    return {
        "schema": SCHEMA,
        "fitcheck_version": __version__,
        "model": {"query": result.query, "id": result.model.hf_id or spec.name, "params_total": spec.total_params,
                  "params_active": spec.active_params},
        "request": {"mode": req.mode, "seq_len": req.seq_len if req.training else None,
                    "precision": req.precision, "context": req.context if not req.training else None,
                    "batch": req.batch, "kv_dtype": req.kv_dtype,
                    "engine": req.engine, "gpus": req.gpus, "headroom_pct": round(result.headroom * 100, 3),
                    "kind": result.kind, "max_price_usd_per_hour": result.max_price},
        "machines": machines,
        "not_fitting": [{"name": r.machine.name, "kind": r.machine.kind,
                         "status": r.verdict.status if r.verdict else "not_run",
                         "reason": r.reason or (f"costs ${r.usd_per_hour:g}/hour" if r.usd_per_hour is not None
                                                else "no price (--max-price given)")}
                        for r in result.not_fitting],
        "assumptions": [efficiency_dict(e) for e in _assumptions(result)],
    }
