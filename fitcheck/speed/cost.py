"""What it costs: energy, electricity and the amortised purchase of an owned machine, the break-even
against renting, and the wall time and cost of a fine-tuning run.  Pure arithmetic over dataclasses.

Formulas (a rate is tokens/s; a range (low, high) is (fast end, slow end) of the speed estimate):

    hours per million tokens   h = 1e6 / (rate × 3600)
    energy per million tokens  kWh = power_watts / 1000 × h          (the machine's draw under load)
    electricity per million    kWh × kWh price
    amortised per hour         purchase / (amortize_years × 365 × hours_per_day)   (hours of use)
    amortised per million      (amortised per hour + power_watts / 1000 × kWh price) × h
    break-even (hours of use)  purchase / (owned rate / cloud rate × cloud USD per hour − electricity per hour):
                               the hours after which renting the tokens the owned machine made would have
                               cost more than buying it plus its electricity (None: renting stays cheaper)
    a training run             hours = tokens / rate / 3600; rented: USD per hour × hours;
                               owned: energy × kWh price (+ the amortised share of those hours)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fitcheck.machine import Machine
from fitcheck.speed.efficiency import Rate

# The default electricity price: the U.S. average retail price to residential customers in 2024,
# 16.48 cents per kWh (U.S. Energy Information Administration, Electric Power Monthly, table 5.3,
# "Average Price of Electricity to Ultimate Customers", annual 2024).  Override it with --kwh-price
# or FITCHECK_KWH_PRICE (USD per kWh) for your tariff.
DEFAULT_KWH_PRICE_USD = 0.1648
KWH_PRICE_SOURCE = "U.S. average residential price 2024, EIA Electric Power Monthly table 5.3"
KWH_PRICE_ENV = "FITCHECK_KWH_PRICE"
# Spread the purchase over 3 years (a common depreciation period for IT hardware) of 8 hours of use a
# day (a working day); both are assumptions the user changes with --amortize-years and --hours-per-day.
DEFAULT_AMORTIZE_YEARS = 3.0
DEFAULT_HOURS_PER_DAY = 8.0

OWNED_KINDS = ("laptop", "desktop", "workstation", "probed")

Range = tuple[float, float]


@dataclass(frozen=True)
class CostSettings:
    """The user's cost assumptions: electricity price, amortisation period, hours of use a day."""

    kwh_price_usd: float = DEFAULT_KWH_PRICE_USD
    amortize_years: float = DEFAULT_AMORTIZE_YEARS
    hours_per_day: float = DEFAULT_HOURS_PER_DAY
    kwh_price_source: str = KWH_PRICE_SOURCE   # or "--kwh-price", "FITCHECK_KWH_PRICE"

    @property
    def hours_of_use(self) -> float:
        """Hours the purchase is spread over."""
        return self.amortize_years * 365 * self.hours_per_day


def kwh_price_from(option: float | None, env) -> tuple[float, str]:
    """(USD per kWh, where it came from): --kwh-price, else $FITCHECK_KWH_PRICE, else the default.

    A malformed or negative environment value raises ValueError naming the variable."""
    if option is not None:
        return option, "--kwh-price"
    raw = (env or {}).get(KWH_PRICE_ENV, "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{KWH_PRICE_ENV}={raw!r} is not a number (USD per kWh, like 0.30)") from None
        if not math.isfinite(value) or value < 0 or value > 100:
            raise ValueError(f"{KWH_PRICE_ENV}={raw!r}: expected USD per kWh between 0 and 100")
        return value, KWH_PRICE_ENV
    return DEFAULT_KWH_PRICE_USD, KWH_PRICE_SOURCE


def is_owned(machine: Machine) -> bool:
    """A machine you buy rather than rent: not priced per hour, and a laptop, desktop or this one."""
    return machine.price is None and machine.kind in OWNED_KINDS


def hours_per_million(tokens_per_s: float) -> float:
    return 1e6 / (tokens_per_s * 3600)


@dataclass(frozen=True)
class OwnedCost:
    """Per million generated tokens on an owned machine; each range is (fast end, slow end)."""

    power_watts: int
    energy_kwh_per_million: Range
    electricity_usd_per_million: Range
    electricity_usd_per_hour: float
    amortized_usd_per_hour: float | None       # purchase share + electricity; None without a purchase price
    amortized_usd_per_million: Range | None


def owned_cost(power_watts: int, purchase_usd: float | None, rate: Range, settings: CostSettings) -> OwnedCost:
    """What a million tokens costs on an owned machine drawing `power_watts` at `rate` (low, high) tokens/s."""
    low, high = rate
    hours = (hours_per_million(high), hours_per_million(low))
    kw = power_watts / 1000
    energy = (kw * hours[0], kw * hours[1])
    electricity_hour = kw * settings.kwh_price_usd
    amortized_hour = None
    amortized = None
    if purchase_usd is not None and settings.hours_of_use > 0:
        amortized_hour = purchase_usd / settings.hours_of_use + electricity_hour
        amortized = (amortized_hour * hours[0], amortized_hour * hours[1])
    return OwnedCost(power_watts, energy, (energy[0] * settings.kwh_price_usd, energy[1] * settings.kwh_price_usd),
                     electricity_hour, amortized_hour, amortized)


def machine_owned_cost(machine: Machine, rate: Range | None, settings: CostSettings) -> OwnedCost | None:
    """owned_cost for an owned machine whose power draw is known, else None."""
    watts = machine.power_watts
    if rate is None or not is_owned(machine) or not isinstance(watts, int) or min(rate) <= 0:
        return None
    purchase = machine.purchase.usd if machine.purchase is not None else None
    return owned_cost(watts, purchase, rate, settings)


def break_even_hours(purchase_usd: float, owned_tokens_per_s: float, electricity_usd_per_hour: float,
                     cloud_usd_per_hour: float, cloud_tokens_per_s: float) -> float | None:
    """Hours of use after which buying beats renting the same tokens; None when renting stays cheaper."""
    if owned_tokens_per_s <= 0 or cloud_tokens_per_s <= 0:
        return None
    saving_per_hour = owned_tokens_per_s / cloud_tokens_per_s * cloud_usd_per_hour - electricity_usd_per_hour
    if saving_per_hour <= 0:
        return None
    return purchase_usd / saving_per_hour


# ---- a fine-tuning run -------------------------------------------------------------------------
@dataclass(frozen=True)
class RunCost:
    """A training run of `tokens` tokens (dataset tokens × epochs): wall time and cost, (fast, slow)."""

    tokens: int
    hours: Range
    rented_usd: Range | None = None        # price per hour × hours (a rented machine)
    energy_kwh: Range | None = None        # owned machine with a known power draw
    electricity_usd: Range | None = None
    amortized_usd: Range | None = None     # electricity + the purchase's share of those hours

    @property
    def usd(self) -> Range | None:
        """The cost to compare machines by: rented price, else the amortised cost, else electricity."""
        return self.rented_usd or self.amortized_usd or self.electricity_usd


def run_cost(tokens: int, rate: Range, machine: Machine, settings: CostSettings) -> RunCost:
    """How long `tokens` training tokens take at `rate` (low, high) tokens/s on `machine`, and what they cost."""
    low, high = rate
    hours = (tokens / high / 3600, tokens / low / 3600)
    if machine.price is not None:
        p = machine.price.usd_per_hour
        return RunCost(tokens, hours, rented_usd=(p * hours[0], p * hours[1]))
    watts = machine.power_watts
    if not is_owned(machine) or not isinstance(watts, int):
        return RunCost(tokens, hours)
    kw = watts / 1000
    energy = (kw * hours[0], kw * hours[1])
    electricity = (energy[0] * settings.kwh_price_usd, energy[1] * settings.kwh_price_usd)
    amortized = None
    if machine.purchase is not None and settings.hours_of_use > 0:
        share = machine.purchase.usd / settings.hours_of_use
        amortized = (electricity[0] + share * hours[0], electricity[1] + share * hours[1])
    return RunCost(tokens, hours, energy_kwh=energy, electricity_usd=electricity, amortized_usd=amortized)


@dataclass(frozen=True)
class CheckCost:
    """What one answer costs on its machine: serving per million tokens (owned: energy, electricity and the
    purchase's share; rented: the price per hour ÷ the decode rate), or a fine-tuning run of --tokens."""

    settings: CostSettings
    rate: Range | None              # (fast, slow) tokens/s: training throughput, or decode
    owned: OwnedCost | None         # serving on an owned machine
    rented_per_million: Range | None  # serving on a rented machine: USD per million tokens
    run: RunCost | None             # fine-tuning with --tokens


def check_cost(machine: Machine, rate: Range | None, training: bool, tokens: int | None,
               settings: CostSettings) -> CheckCost:
    owned = None if training or rate is None else machine_owned_cost(machine, rate, settings)
    rented = (usd_per_million_tokens(machine.price.usd_per_hour, Rate(*rate))
              if machine.price is not None and not training and rate is not None else None)
    run = run_cost(tokens, rate, machine, settings) if training and tokens is not None and rate is not None else None
    return CheckCost(settings, rate, owned, rented, run)


def range_dict(r: Range | None, digits: int = 4) -> dict | None:
    """{low, high} rounded, or None (the JSON form of a range)."""
    return None if r is None else {"low": round(r[0], digits), "high": round(r[1], digits)}


def settings_dict(settings: CostSettings) -> dict:
    return {"kwh_price_usd": settings.kwh_price_usd, "kwh_price_source": settings.kwh_price_source,
            "amortize_years": settings.amortize_years, "hours_per_day": settings.hours_per_day}


__all__ = ["DEFAULT_AMORTIZE_YEARS", "DEFAULT_HOURS_PER_DAY", "DEFAULT_KWH_PRICE_USD", "KWH_PRICE_ENV",
           "KWH_PRICE_SOURCE", "CostSettings", "OwnedCost", "RunCost", "break_even_hours", "hours_per_million",
           "is_owned", "kwh_price_from", "machine_owned_cost", "owned_cost", "range_dict", "run_cost",
           "settings_dict"]


def usd_per_million_tokens(usd_per_hour: float, rate: Rate) -> tuple[float, float]:
    """(cheapest, dearest) price of a million generated tokens at an aggregate rate."""
    return usd_per_hour / (rate.high * 3600) * 1e6, usd_per_hour / (rate.low * 3600) * 1e6
