"""What it costs, rendered: money, energy and hours as text, the cost lines and the "cost" section of `check`
(the arithmetic is fitcheck.speed.cost; `where`'s cells are fitcheck.render.where's).

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
from fitcheck.speed.cost import CostSettings, RunCost, is_owned, range_dict, settings_dict


def usd(x: float) -> str:
    if x < 0.01:
        return f"${x:.4f}"
    return f"${x:,.2f}" if x < 100 else f"${x:,.0f}"


def usd_range(r) -> str:
    return f"{usd(r[0])}–{usd(r[1])}"


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


# ---- check ---------------------------------------------------------------------------------------
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
    c = result.costs
    m = result.machine
    if c.rate is None or (not is_owned(m) and m.price is None) or not result.verdict.runs:
        return None
    owned = c.owned
    return {
        **settings_dict(c.settings), "owned": is_owned(m),
        "usd_per_hour": m.price.usd_per_hour if m.price else None,
        "power_watts": m.power_watts if known(m.power_watts) else None,
        "purchase_usd": m.purchase.usd if m.purchase else None,
        "energy_kwh_per_million_tokens": range_dict(owned.energy_kwh_per_million) if owned else None,
        "electricity_usd_per_million_tokens": range_dict(owned.electricity_usd_per_million) if owned else None,
        "amortized_usd_per_million_tokens": range_dict(owned.amortized_usd_per_million) if owned else None,
        "usd_per_million_tokens": range_dict(c.rented_per_million),
        "run": run_dict(c.run),
    }


def check_cost_lines(result) -> list[str]:
    """'Cost:' lines of the check table: per million tokens (inference) or the run (--tokens)."""
    c = result.costs
    m = result.machine
    if c.rate is None or not result.verdict.runs:
        return []
    if result.training_speed is not None:
        run = c.run
        if run is None:
            return []
        text = f"Run:      {run.tokens:,} tokens in {hours_range(run.hours)}"
        if run.rented_usd:
            text += f", {usd_range(run.rented_usd)} at {usd(m.price.usd_per_hour)}/hour"
        elif run.energy_kwh:
            text += f", {kwh_range(run.energy_kwh)} = {usd_range(run.electricity_usd)} of electricity"
            if run.amortized_usd:
                text += f" ({usd_range(run.amortized_usd)} with the purchase's share)"
        return [text]
    owned, settings = c.owned, c.settings
    if owned is None:
        return []
    source = "" if settings.kwh_price_source == "--kwh-price" else f" ({settings.kwh_price_source}; --kwh-price)"
    lines = [f"Cost:     {kwh_range(owned.energy_kwh_per_million)} per million tokens at {owned.power_watts:,} W = "
             f"{usd_range(owned.electricity_usd_per_million)} of electricity at ${settings.kwh_price_usd:g}/kWh"
             f"{source}"]
    if owned.amortized_usd_per_million:
        lines.append(f"          {usd_range(owned.amortized_usd_per_million)} per million tokens with the "
                     f"{usd(m.purchase.usd)} purchase spread over {settings.amortize_years:g} years of "
                     f"{settings.hours_per_day:g} h a day (--amortize-years, --hours-per-day)")
    return lines
