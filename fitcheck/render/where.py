"""`fitcheck where MODEL`, rendered: the table and the JSON document of a serving search
(fitcheck.search.where; fine-tuning's are fitcheck.render.where_training).

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
                amortized_usd_per_million_tokens, break_even_hours, precision_choice, default_precision,
                command}],
  "not_fitting": [{name, kind, status, reason}],   # could run it, but it does not fit (or costs more)
  "cannot_run": [{name, kind, reason}],            # cannot run it at all: kernels, compute capability, engine
  "assumptions": [{name, low, high, why}],
  "cost": {kwh_price_usd, kwh_price_source, amortize_years, hours_per_day, break_even_against}
}
Owned machines: energy and electricity per million tokens from the profile's power draw, the amortised cost adds
the purchase price spread over amortize_years × 365 × hours_per_day; break_even_hours is against
break_even_against, the cheapest rented machine per token that fits.  "command" is the `fitcheck` command that
checks the row again (precision_choice "best_fitting": the machine's default, default_precision, does not fit, and
the row is what check advises there).
"""

from __future__ import annotations

from fitcheck import __version__
from fitcheck.estimate.verdict import TIGHT, Verdict
from fitcheck.machine import known
from fitcheck.render.cost import kwh_range, settings_text, usd, usd_range
from fitcheck.render.layout import Command, fit, table
from fitcheck.render.speed import efficiency_dict, rate_dict, rate_text
from fitcheck.search.where import WhereResult, WhereRow
from fitcheck.speed.cost import is_owned, range_dict, settings_dict
from fitcheck.speed.efficiency import Efficiency
from fitcheck.units import GiB

SCHEMA = "fitcheck.where/1"


# ---- rendering --------------------------------------------------------------------------------
def _weights_text(row: WhereRow, short: bool = False) -> str:
    """The precision and engine the row runs with (and llama.cpp's split, --n-cpu-moe N or -ngl N; '+ CPU' when
    ``short``: the row's command names it); * when chosen because the machine's default did not fit."""
    p = row.served
    split = (" + CPU" if short else f" {p.offload_flag}") if p.offload_flag else ""
    return f"{p.precision} {p.engine}{split}" + ("*" if row.default_precision else "")


def _cannot_run_reason(row: WhereRow) -> str:
    return row.verdict.reasons[0] if row.verdict and row.verdict.reasons else row.reason


def _memory_text(row: WhereRow, short: bool = False) -> str:
    """'15.7 of 22 GiB GPU' (the tightest device; a GPU + RAM split names both), or '15.7/22' when ``short``
    (the column header says GiB on the GPU; RAM is named: '21.1/24 + 28.4/29 RAM', '5.0/14 RAM')."""
    d = row.tightest
    if d is None:
        return "unknown"

    def one(x) -> str:
        label = "RAM" if x.kind == "cpu" else "GPU"
        if short:
            return f"{x.need_bytes / GiB:.1f}/{(x.free_bytes or 0) / GiB:.0f}" + (" RAM" if x.kind == "cpu" else "")
        return f"{x.need_bytes / GiB:.1f} of {(x.free_bytes or 0) / GiB:.0f} GiB {label}"
    text = one(d)
    if row.served.device == "offload":  # split between the GPU and RAM: the other's too
        others = [o for o in row.judged.devices if o is not d and o.free_bytes is not None and o.need_bytes]
        if short:  # the GPU first, unlabelled as the header says
            text = " + ".join(one(x) for x in sorted([d, *others], key=lambda x: x.kind == "cpu"))
        else:
            text += "".join(f", {one(o)}" for o in others)
    return text + (tight_mark(row.verdict).replace("(tight)", "tight") if short else tight_mark(row.verdict))


def tight_mark(verdict: Verdict | None) -> str:
    """' (tight)' for a row that runs only inside the headroom (what `fitcheck MODEL --profile NAME` calls TIGHT)."""
    return " (tight)" if verdict is not None and verdict.status == TIGHT else ""


def tight_note(rows, headroom: float) -> list[str]:
    """The line under a table that has a (tight) row."""
    if not any(tight_mark(r.verdict) for r in rows):
        return []
    return [f"(tight): fits only inside the {headroom:.0%} headroom (--headroom sets it; "
            "`fitcheck MODEL --profile NAME --strict` exits 1 on it)"]


def runs_on(row: WhereRow) -> str:
    """'2 nodes × 8× H100 80GB HBM3', 'CPU': what the row runs on."""
    p = row.planned
    if p.device == "cpu":
        return "CPU"
    name = str(row.machine.gpus[0].name).replace("NVIDIA ", "").replace("GeForce ", "")
    text = f"{p.gpus}× {name}" if p.gpus > 1 else name
    return f"{row.nodes} nodes × {text}" if row.nodes > 1 else text


def _where_text(row: WhereRow) -> str:
    text = runs_on(row)
    text += " + CPU" if row.served.device == "offload" else ""  # llama.cpp: part of the weights in RAM
    return text + (", expert parallel" if row.layout == "expert-parallel" else "")


def _cells(result: WhereResult, row: WhereRow) -> tuple[str, str, str]:
    """($/hour, $/M tokens, kWh/M tokens) cells of one row."""
    owned = result.owned_cost(row)
    mtok = row.usd_per_million_tokens
    if owned is None:
        return (usd(row.usd_per_hour) if row.usd_per_hour is not None else "-", usd_range(mtok) if mtok else "-", "-")
    if owned.amortized_usd_per_million is not None and owned.amortized_usd_per_hour is not None:
        return (f"{usd(owned.amortized_usd_per_hour)} own", f"{usd_range(owned.amortized_usd_per_million)} own",
                kwh_range(owned.energy_kwh_per_million)[:-4])
    return ("-", f"{usd_range(owned.electricity_usd_per_million)} power", kwh_range(owned.energy_kwh_per_million)[:-4])


def _cost_lines(result: WhereResult) -> list[str]:
    """The lines under the table: what 'own' and 'power' mean, and each break-even."""
    owned = [r for r in result.fitting if result.owned_cost(r) is not None]
    if not owned:
        return []
    lines = ["Owned machines: \"own\" is the purchase price plus electricity, \"power\" electricity only; "
             + settings_text(result.cost) + "."]
    cloud = result.cheapest_rented
    for r in owned:
        if r.machine.purchase is None or cloud is None or cloud.usd_per_hour is None:
            continue
        hours = result.break_even_hours(r)
        head = f"Buying {r.machine.name} ({usd(r.machine.purchase.usd)})"
        against = f"renting {cloud.machine.name} ({usd(cloud.usd_per_hour)}/hour, the cheapest per token that fits)"
        if hours is None:
            lines.append(f"{head} never pays off against {against}: renting the same tokens costs less than "
                         "its electricity.")
        else:
            days = hours / result.cost.hours_per_day
            lines.append(f"{head} pays off after {hours:,.0f} hours of use against {against}: "
                         f"{days:,.0f} days at {result.cost.hours_per_day:g} h a day.")
    return lines


def commands_note(result: WhereResult, rows: list[WhereRow], why: str) -> list[str]:
    """``why``, then the command that checks each of ``rows`` again."""
    if not rows:
        return []
    return [why] + [Command(f"  {result.command(r)}") for r in rows]  # each names its --profile


def render_where_table(result: WhereResult, verbose: bool = False, width: int | None = None) -> str:
    """The ranked machines. By default within 120 columns: profile (with its nodes), weights, memory, speed and
    price; ``verbose`` adds each machine's kind, what it runs on, energy, the break-even of each purchase and the
    speed assumptions. ``width`` wraps the prose under the table (commands stay whole)."""
    from tabulate import tabulate

    spec = result.model.spec
    req = result.request
    lines = [f"Model:    {result.model.hf_id or spec.name} — context {req.context:,} tokens"
             + (f" (prompt {req.prompt_tokens:,})" if req.prompt_tokens and req.prompt_tokens != req.context else "")
             + f", batch {req.batch}"
             + (f", {req.precision}" if req.precision else ", each machine's default precision")
             + (f", {req.engine}" if req.engine else "")]
    fitting = result.fitting
    if fitting and verbose:
        rows = [[r.machine.name, r.machine.kind, _where_text(r), _weights_text(r), _memory_text(r),
                 rate_text(r.speed.decode if r.speed else None, ""), *_cells(result, r)] for r in fitting]
        headers = ["profile", "kind", "runs on", "weights", "memory needed", "decode tok/s", "$/hour", "$/M tokens",
                   "kWh/M tokens"]
        if all(row[-1] == "-" for row in rows):  # no owned machine: no energy column
            rows, headers = [row[:-1] for row in rows], headers[:-1]
        lines += ["", Command(tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True))]
    elif fitting:
        rows = [[_profile_text(r), _weights_text(r, short=True), _memory_text(r, short=True),
                 rate_text(r.speed.decode if r.speed else None, ""), *_cells(result, r)[:2]] for r in fitting]
        headers = ["profile", "weights", "GPU GiB needed/free", "tok/s", "$/hour", "$/M tokens"]
        lines += ["", table(rows, headers)]
    else:
        lines += ["", "No hardware profile fits this request with the headroom"
                  + (f" at or under ${result.max_price:g}/hour" if result.max_price is not None else "") + "."]
    lines += commands_note(result, [r for r in fitting if r.default_precision],
                           "* the machine's default precision does not fit there; the row is what check advises "
                           "there instead:")
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
    cost = _cost_lines(result)
    assumptions = _assumptions(result)
    if verbose:
        lines += cost
        if assumptions:
            lines.append("Assumptions: " + "; ".join(f"{e.name} {_range(e)}" for e in assumptions))
    else:
        if cost:
            lines.append('"own": the purchase spread over its use plus electricity; "power": electricity only.')
        more = ["each machine's kind and GPUs"] + (["energy and when buying pays off"] if cost else []) \
            + ([f"the {len(assumptions)} speed assumptions"] if assumptions else [])
        lines.append(f"More: -v shows {', '.join(more)}; --json has every figure.")
    return "\n".join(fit(lines, width))


def _profile_text(row: WhereRow) -> str:
    """The profile, with the nodes it takes and an expert-parallel layout (the default table has no 'runs on')."""
    text = row.machine.name + (f" × {row.nodes} nodes" if row.nodes > 1 else "")
    return text + (", EP" if row.layout == "expert-parallel" else "")


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


def _cost_keys(result: WhereResult, row: WhereRow) -> dict:
    owned = result.owned_cost(row)
    m = row.machine
    hours = result.break_even_hours(row)
    return {
        "owned": is_owned(m),
        "power_watts": m.power_watts if known(m.power_watts) else None,
        "purchase_usd": m.purchase.usd if m.purchase else None,
        "purchase_read_on": m.purchase.read_on if m.purchase else None,
        "purchase_source": m.purchase.source if m.purchase else None,
        "energy_kwh_per_million_tokens": range_dict(owned.energy_kwh_per_million) if owned else None,
        "electricity_usd_per_million_tokens": range_dict(owned.electricity_usd_per_million) if owned else None,
        "amortized_usd_per_million_tokens": range_dict(owned.amortized_usd_per_million) if owned else None,
        "break_even_hours": None if hours is None else round(hours, 1),
    }


def not_fitting_document(result: WhereResult) -> list[dict]:
    return [{"name": r.machine.name, "kind": r.machine.kind, "status": r.verdict.status if r.verdict else "not_run",
             "reason": r.reason or (f"costs ${r.usd_per_hour:g}/hour" if r.usd_per_hour is not None
                                    else "no price (--max-price given)")}
            for r in result.not_fitting]


def model_document(result: WhereResult) -> dict:
    spec = result.model.spec
    return {"query": result.query, "id": result.model.hf_id or spec.name, "params_total": spec.total_params,
            "params_active": spec.active_params}


def where_document(result: WhereResult) -> dict:
    req = result.request
    machines = []
    for r in result.fitting:
        d, p = r.tightest, r.served
        mtok = r.usd_per_million_tokens
        machines.append({
            "name": r.machine.name, "kind": r.machine.kind, "description": r.machine.description,
            "precision": p.precision, "engine": p.engine, "device": p.device, "gpus": p.gpus,
            "nodes": r.nodes, "layout": r.layout,
            "cpu_moe": ("all" if p.cpu_moe_all else p.cpu_moe) if p.cpu_moe else None,
            "gpu_layers": p.gpu_layers if p.device == "offload" and not p.cpu_moe else None,
            "precision_choice": ("given" if req.precision else "best_fitting" if r.default_precision else "default"),
            "default_precision": r.default_precision,
            "status": r.judged.status,
            "need_bytes": d.need_bytes if d else None, "free_bytes": d.free_bytes if d else None,
            "decode_tokens_per_s": rate_dict(r.speed.decode if r.speed else None),
            "per_sequence_tokens_per_s": rate_dict(r.speed.per_sequence if r.speed else None),
            "prefill_tokens_per_s": rate_dict(r.speed.prefill if r.speed else None),
            "usd_per_hour": r.usd_per_hour,
            "usd_per_million_tokens": {"low": round(mtok[0], 4), "high": round(mtok[1], 4)} if mtok else None,
            "price_read_on": str(r.machine.price.read_on) if r.machine.price else None,
            "price_source": r.machine.price.source if r.machine.price else None,
            **_cost_keys(result, r),
            "command": result.command(r),
        })
    cloud = result.cheapest_rented
    return {
        "schema": SCHEMA,
        "fitcheck_version": __version__,
        "model": model_document(result),
        "request": {"precision": req.precision, "context": req.context,
                    "prompt_tokens": req.prompt_tokens or req.context, "batch": req.batch, "kv_dtype": req.kv_dtype,
                    "engine": req.engine, "gpus": req.gpus, "headroom_pct": round(result.headroom * 100, 3),
                    "kind": result.kind, "max_price_usd_per_hour": result.max_price},
        "machines": machines,
        "not_fitting": not_fitting_document(result),
        "cannot_run": [{"name": r.machine.name, "kind": r.machine.kind, "reason": _cannot_run_reason(r)}
                       for r in result.cannot_run],
        "assumptions": [efficiency_dict(e) for e in _assumptions(result)],
        "cost": {**settings_dict(result.cost), "break_even_against": cloud.machine.name if cloud else None},
    }


__all__ = ["SCHEMA", "commands_note", "render_where_table", "tight_mark", "tight_note", "where_document"]
