"""What it costs: the arithmetic against hand-computed values, profiles with and without prices, the CLI."""

import json

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.profiles import list_profiles, load_profile
from fitcheck.speed.cost import (
    DEFAULT_KWH_PRICE_USD,
    CostSettings,
    break_even_hours,
    is_owned,
    kwh_price_from,
    machine_owned_cost,
    owned_cost,
    run_cost,
)


def test_owned_cost_by_hand():
    # 500 W at 50-100 tok/s: a million tokens takes 1e6/(100*3600) = 2.778 h .. 5.556 h.
    c = owned_cost(500, 3000.0, (50.0, 100.0), CostSettings(kwh_price_usd=0.30, amortize_years=3, hours_per_day=8))
    assert c.energy_kwh_per_million == pytest.approx((1.3889, 2.7778), rel=1e-4)       # 0.5 kW × h
    assert c.electricity_usd_per_million == pytest.approx((0.41667, 0.83333), rel=1e-4)  # × $0.30
    assert c.electricity_usd_per_hour == pytest.approx(0.15)
    # $3000 over 3 × 365 × 8 = 8760 h = $0.34247/h, plus $0.15/h of electricity
    assert c.amortized_usd_per_hour == pytest.approx(0.49247, rel=1e-4)
    assert c.amortized_usd_per_million == pytest.approx((1.36797, 2.73594), rel=1e-4)


def test_owned_cost_without_purchase_price_has_no_amortised_figure():
    c = owned_cost(100, None, (10.0, 20.0), CostSettings(kwh_price_usd=0.2))
    assert c.amortized_usd_per_million is None and c.amortized_usd_per_hour is None
    hours = (1e6 / (20 * 3600), 1e6 / (10 * 3600))
    assert c.electricity_usd_per_million == pytest.approx((0.1 * hours[0] * 0.2, 0.1 * hours[1] * 0.2))


def test_break_even_by_hand():
    # Owned makes 60 tok/s, the cloud 120 tok/s at $2/h: an owned hour replaces $1 of renting, minus $0.10 of
    # electricity -> $0.90 saved per hour; a $1800 machine pays off after 2000 hours.
    assert break_even_hours(1800, 60, 0.10, 2.0, 120) == pytest.approx(2000)
    assert break_even_hours(1800, 1, 0.50, 2.0, 120) is None  # electricity costs more than renting the tokens


def test_run_cost_rented_and_owned_by_hand():
    h100 = load_profile("h100-sxm")
    run = run_cost(36_000_000, (5000.0, 10000.0), h100, CostSettings())
    assert run.hours == pytest.approx((1.0, 2.0))            # 36M tokens at 10k / 5k tok/s
    assert run.rented_usd == pytest.approx((3.39, 6.78)) and run.usd == run.rented_usd
    rig = load_profile("rtx-4090")                            # 700 W, $3,098
    settings = CostSettings(kwh_price_usd=0.25, amortize_years=1, hours_per_day=10)
    run = run_cost(3_600_000, (500.0, 1000.0), rig, settings)
    assert run.hours == pytest.approx((1.0, 2.0))
    assert run.energy_kwh == pytest.approx((0.7, 1.4)) and run.electricity_usd == pytest.approx((0.175, 0.35))
    share = 3098 / 3650
    assert run.amortized_usd == pytest.approx((0.175 + share, 0.35 + 2 * share))
    assert run.usd == run.amortized_usd


def test_shipped_profiles_with_and_without_purchase_prices():
    profiles = {m.name: m for m in list_profiles()}
    for name in ("rtx-3060", "rtx-3090", "2x-rtx-3090", "rtx-4090", "rtx-5090", "macbook-air-m3-16gb"):
        p = profiles[name].purchase
        assert p is not None and p.usd > 0 and p.read_on[:2] == "20" and p.source, name
    assert profiles["laptop-16gb"].purchase is None            # no price: energy only
    for m in profiles.values():
        assert m.purchase is None or m.price is None, m.name   # bought or rented, not both
    assert is_owned(profiles["rtx-4090"]) and not is_owned(profiles["h100-sxm"])
    assert not is_owned(profiles["github-ubuntu-latest"])       # a CI runner is neither
    no_price = machine_owned_cost(profiles["laptop-16gb"], (10.0, 20.0), CostSettings())
    assert no_price is not None and no_price.amortized_usd_per_million is None


def test_kwh_price_option_then_environment_then_default():
    assert kwh_price_from(0.4, {"FITCHECK_KWH_PRICE": "0.3"}) == (0.4, "--kwh-price")
    assert kwh_price_from(None, {"FITCHECK_KWH_PRICE": "0.3"}) == (0.3, "FITCHECK_KWH_PRICE")
    assert kwh_price_from(None, {})[0] == DEFAULT_KWH_PRICE_USD
    with pytest.raises(ValueError, match="FITCHECK_KWH_PRICE"):
        kwh_price_from(None, {"FITCHECK_KWH_PRICE": "cheap"})


def _run(*args, env=None):
    return CliRunner().invoke(cli, list(args), env=env or {})


def test_where_shows_owned_costs_and_break_even():
    r = _run("where", "qwen-7b", "--json")
    doc = json.loads(r.output)
    rig = next(m for m in doc["machines"] if m["name"] == "rtx-4090")
    low, high = rig["decode_tokens_per_s"]["low"], rig["decode_tokens_per_s"]["high"]
    assert rig["owned"] and rig["purchase_usd"] == 3098
    assert rig["energy_kwh_per_million_tokens"]["low"] == pytest.approx(0.7 * 1e6 / (high * 3600), rel=1e-3)
    assert rig["electricity_usd_per_million_tokens"]["high"] == pytest.approx(
        0.7 * 1e6 / (low * 3600) * DEFAULT_KWH_PRICE_USD, rel=1e-3)
    assert rig["break_even_hours"] > 0 and doc["cost"]["break_even_against"]
    cloud = next(m for m in doc["machines"] if m["name"] == doc["cost"]["break_even_against"])
    assert not cloud["owned"] and cloud["energy_kwh_per_million_tokens"] is None
    text = _run("where", "qwen-7b", "-v").output
    assert "Buying rtx-4090 ($3,098) pays off after" in text and " own" in text


def test_check_cost_line_and_environment_price():
    doc = json.loads(_run("qwen-7b", "--profile", "rtx-4090", "--json", env={"FITCHECK_KWH_PRICE": "0.5"}).output)
    cost = doc["cost"]
    assert cost["kwh_price_usd"] == 0.5 and cost["kwh_price_source"] == "FITCHECK_KWH_PRICE"
    ratio = cost["electricity_usd_per_million_tokens"]["low"] / cost["energy_kwh_per_million_tokens"]["low"]
    assert ratio == pytest.approx(0.5, rel=1e-3) and cost["run"] is None
    out = _run("qwen-7b", "--profile", "rtx-4090", "--kwh-price", "0.3", "--amortize-years", "5").output
    assert "Cost:" in out and "$0.3/kWh" in out and "5 years" in out
    bad = _run("qwen-7b", "--profile", "rtx-4090", env={"FITCHECK_KWH_PRICE": "lots"})
    assert bad.exit_code == 2 and "FITCHECK_KWH_PRICE" in bad.output


def test_check_training_run_cost_with_tokens():
    doc = json.loads(_run("qwen-7b", "--mode", "lora", "--tokens", "100M", "--profile", "h100-sxm", "--json").output)
    run = doc["cost"]["run"]
    rate = doc["speed"]["training_tokens_per_s"]
    assert run["tokens"] == 100_000_000 and run["basis"] == "rented"
    assert run["hours"]["low"] == pytest.approx(1e8 / rate["high"] / 3600, rel=1e-3)
    assert run["usd"]["high"] == pytest.approx(3.39 * 1e8 / rate["low"] / 3600, rel=1e-3)
    assert _run("qwen-7b", "--tokens", "100M", "--profile", "h100-sxm").exit_code == 2  # training only
    assert _run("qwen-7b", "--mode", "lora", "--tokens", "lots", "--profile", "h100-sxm").exit_code == 2
