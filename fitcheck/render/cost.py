"""What it costs, rendered: owned-machine figures and break-even in `where`, the cost lines and the
"cost" section of `check` (the arithmetic is fitcheck.estimate.cost).

`check` JSON, key "cost" (null for a machine that is neither owned nor rented, or without a speed):
    {kwh_price_usd, kwh_price_source, amortize_years, hours_per_day, owned: bool,
     usd_per_hour, power_watts, purchase_usd,
     energy_kwh_per_million_tokens: {low, high} | null, electricity_usd_per_million_tokens,
     amortized_usd_per_million_tokens, usd_per_million_tokens (rented),
     run: {tokens, hours: {low, high}, usd: {low, high} | null, basis, energy_kwh, electricity_usd,
           amortized_usd} | null}
Each {low, high} is (fast end, slow end) of the speed range.
"""

from __future__ import annotations

from fitcheck.machine import known
from fitcheck.speed.cost import (
    CostSettings,
    OwnedCost,
    RunCost,
    break_even_hours,
    is_owned,
    machine_owned_cost,
    range_dict,
    run_cost,
    settings_dict,
)


def _usd(x: float) -> str:
    if x < 0.01:
        return f"${x:.4f}"
    return f"${x:,.2f}" if x < 100 else f"${x:,.0f}"


def usd_range(r) -> str:
    return f"{_usd(r[0])}–{_usd(r[1])}"


def _fig(x: float) -> str:
    return f"{x:.2g}" if x < 10 else f"{x:,.0f}"


def kwh_range(r) -> str:
    return f"{_fig(r[0])}–{_fig(r[1])} kWh"


def hours_range(r) -> str:
    fast, slow = r
    if slow < 1:
        return f"{fast * 60:.2g}–{slow * 60:.2g} min"
    if slow >= 48:
        return f"{_fig(fast / 24)}–{_fig(slow / 24)} days"
    return f"{_fig(fast)}–{_fig(slow)} h"


def settings_text(s: CostSettings) -> str:
    where = "" if s.kwh_price_source == "--kwh-price" else f", {s.kwh_price_source}"
    return (f"electricity ${s.kwh_price_usd:g}/kWh{where}; purchase spread over {s.amortize_years:g} years of "
            f"{s.hours_per_day:g} h a day (--kwh-price, --amortize-years, --hours-per-day)")


# ---- where (inference) ---------------------------------------------------------------------------
def _rate(row):
    d = row.speed.decode if row.speed else None
    return (d.low, d.high) if d else None


def row_owned_cost(row, settings: CostSettings) -> OwnedCost | None:
    return machine_owned_cost(row.machine, _rate(row), settings)


def cheapest_rented(result):
    """The fitting rented machine with the lowest price per million tokens (middle of the range), among those
    listed and the cloud profiles --kind left out."""
    rented = [r for r in (*result.fitting, *getattr(result, "rented", ())) if r.fits
              and r.usd_per_million_tokens is not None]
    return min(rented, key=lambda r: (r.usd_per_million_tokens[0] * r.usd_per_million_tokens[1]) ** 0.5,
               default=None)


def row_break_even(row, result, settings: CostSettings) -> float | None:
    owned = row_owned_cost(row, settings)
    cloud = cheapest_rented(result)
    if owned is None or row.machine.purchase is None or cloud is None:
        return None
    return break_even_hours(row.machine.purchase.usd, row.speed.decode.mid, owned.electricity_usd_per_hour,
                            cloud.usd_per_hour, cloud.speed.decode.mid)


def where_cells(row, settings: CostSettings) -> tuple[str, str, str]:
    """($/hour, $/M tokens, kWh/M tokens) cells of one `where` row."""
    owned = row_owned_cost(row, settings)
    mtok = row.usd_per_million_tokens
    if owned is None:
        return (_usd(row.usd_per_hour) if row.usd_per_hour is not None else "-",
                usd_range(mtok) if mtok else "-", "-")
    if owned.amortized_usd_per_million is not None and owned.amortized_usd_per_hour is not None:
        return (f"{_usd(owned.amortized_usd_per_hour)} own", f"{usd_range(owned.amortized_usd_per_million)} own",
                kwh_range(owned.energy_kwh_per_million)[:-4])
    return ("-", f"{usd_range(owned.electricity_usd_per_million)} power", kwh_range(owned.energy_kwh_per_million)[:-4])


def where_lines(result, settings: CostSettings) -> list[str]:
    """The lines under the `where` table: what 'own' and 'power' mean, and each break-even."""
    owned = [r for r in result.fitting if row_owned_cost(r, settings) is not None]
    if not owned:
        return []
    lines = ["Owned machines: \"own\" is the purchase price plus electricity, \"power\" electricity only; "
             + settings_text(settings) + "."]
    cloud = cheapest_rented(result)
    for r in owned:
        if r.machine.purchase is None:
            continue
        hours = row_break_even(r, result, settings)
        if cloud is None:
            continue
        head = f"Buying {r.machine.name} ({_usd(r.machine.purchase.usd)})"
        against = f"renting {cloud.machine.name} ({_usd(cloud.usd_per_hour)}/hour, the cheapest per token that fits)"
        if hours is None:
            lines.append(f"{head} never pays off against {against}: renting the same tokens costs less than "
                         "its electricity.")
        else:
            days = hours / settings.hours_per_day
            lines.append(f"{head} pays off after {hours:,.0f} hours of use against {against}: "
                         f"{days:,.0f} days at {settings.hours_per_day:g} h a day.")
    return lines


def where_machine_keys(row, result, settings: CostSettings) -> dict:
    """The cost keys of one `where` machine (added to its JSON object)."""
    owned = row_owned_cost(row, settings)
    m = row.machine
    return {
        "owned": is_owned(m),
        "power_watts": m.power_watts if known(m.power_watts) else None,
        "purchase_usd": m.purchase.usd if m.purchase else None,
        "purchase_read_on": m.purchase.read_on if m.purchase else None,
        "purchase_source": m.purchase.source if m.purchase else None,
        "energy_kwh_per_million_tokens": range_dict(owned.energy_kwh_per_million) if owned else None,
        "electricity_usd_per_million_tokens": range_dict(owned.electricity_usd_per_million) if owned else None,
        "amortized_usd_per_million_tokens": range_dict(owned.amortized_usd_per_million) if owned else None,
        "break_even_hours": _round(row_break_even(row, result, settings)),
    }


def where_cost_document(result, settings: CostSettings) -> dict:
    cloud = cheapest_rented(result)
    return {**settings_dict(settings), "break_even_against": cloud.machine.name if cloud else None}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


# ---- check ---------------------------------------------------------------------------------------
def _check_rate(result):
    """(low, high) tokens/s: training throughput for a training check, decode otherwise."""
    ts = getattr(result, "training_speed", None)
    if ts is not None:
        return (ts.rate.low, ts.rate.high) if ts.rate else None
    sp = getattr(result, "speed", None)
    return (sp.decode.low, sp.decode.high) if sp is not None and sp.decode else None


def check_run_cost(result) -> RunCost | None:
    tokens = getattr(result, "tokens", None)
    rate = _check_rate(result)
    if tokens is None or rate is None or getattr(result, "training_speed", None) is None:
        return None
    return run_cost(tokens, rate, result.machine, result.cost or CostSettings())


def run_dict(run: RunCost | None) -> dict | None:
    if run is None:
        return None
    basis = ("rented" if run.rented_usd else "amortized" if run.amortized_usd else
             "electricity" if run.electricity_usd else None)
    return {"tokens": run.tokens, "hours": range_dict(run.hours, 3), "usd": range_dict(run.usd, 2), "basis": basis,
            "energy_kwh": range_dict(run.energy_kwh, 2), "electricity_usd": range_dict(run.electricity_usd, 2),
            "amortized_usd": range_dict(run.amortized_usd, 2)}


def check_cost_document(result) -> dict | None:
    """The "cost" section of the check document (see the module docstring), or None."""
    settings = getattr(result, "cost", None) or CostSettings()
    m = result.machine
    rate = _check_rate(result)
    training = getattr(result, "training_speed", None) is not None
    if rate is None or (not is_owned(m) and m.price is None) or not result.verdict.runs:
        return None
    owned = None if training else machine_owned_cost(m, rate, settings)
    rented = None
    if m.price is not None and not training:
        from fitcheck.speed.cost import usd_per_million_tokens
        from fitcheck.speed.efficiency import Rate

        rented = usd_per_million_tokens(m.price.usd_per_hour, Rate(*rate))
    return {
        **settings_dict(settings), "owned": is_owned(m),
        "usd_per_hour": m.price.usd_per_hour if m.price else None,
        "power_watts": m.power_watts if known(m.power_watts) else None,
        "purchase_usd": m.purchase.usd if m.purchase else None,
        "energy_kwh_per_million_tokens": range_dict(owned.energy_kwh_per_million) if owned else None,
        "electricity_usd_per_million_tokens": range_dict(owned.electricity_usd_per_million) if owned else None,
        "amortized_usd_per_million_tokens": range_dict(owned.amortized_usd_per_million) if owned else None,
        "usd_per_million_tokens": range_dict(rented),
        "run": run_dict(check_run_cost(result)),
    }


def check_cost_lines(result) -> list[str]:
    """'Cost:' lines of the check table: per million tokens (inference) or the run (--tokens)."""
    settings = getattr(result, "cost", None) or CostSettings()
    m = result.machine
    rate = _check_rate(result)
    if rate is None or not result.verdict.runs:
        return []
    if getattr(result, "training_speed", None) is not None:
        run = check_run_cost(result)
        if run is None:
            return []
        text = f"Run:      {run.tokens:,} tokens in {hours_range(run.hours)}"
        if run.rented_usd:
            text += f", {usd_range(run.rented_usd)} at {_usd(m.price.usd_per_hour)}/hour"
        elif run.energy_kwh:
            text += f", {kwh_range(run.energy_kwh)} = {usd_range(run.electricity_usd)} of electricity"
            if run.amortized_usd:
                text += f" ({usd_range(run.amortized_usd)} with the purchase's share)"
        return [text]
    owned = machine_owned_cost(m, rate, settings)
    if owned is None:
        return []
    source = "" if settings.kwh_price_source == "--kwh-price" else f" ({settings.kwh_price_source}; --kwh-price)"
    lines = [f"Cost:     {kwh_range(owned.energy_kwh_per_million)} per million tokens at {owned.power_watts:,} W = "
             f"{usd_range(owned.electricity_usd_per_million)} of electricity at ${settings.kwh_price_usd:g}/kWh"
             f"{source}"]
    if owned.amortized_usd_per_million:
        lines.append(f"          {usd_range(owned.amortized_usd_per_million)} per million tokens with the "
                     f"{_usd(m.purchase.usd)} purchase spread over {settings.amortize_years:g} years of "
                     f"{settings.hours_per_day:g} h a day (--amortize-years, --hours-per-day)")
    return lines
