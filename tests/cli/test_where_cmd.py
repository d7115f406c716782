"""`fitcheck where MODEL`: every profile judged, cheapest that fits first, the JSON contract."""

import json

from click.testing import CliRunner

from fitcheck.cli import cli

TOP_KEYS = {"schema", "fitcheck_version", "model", "request", "machines", "not_fitting", "assumptions"}
MACHINE_KEYS = {"name", "kind", "description", "precision", "engine", "device", "gpus", "status", "need_bytes",
                "free_bytes", "decode_tokens_per_s", "per_sequence_tokens_per_s", "prefill_tokens_per_s",
                "usd_per_hour", "usd_per_million_tokens", "price_read_on", "price_source"}
REQUEST_KEYS = {"precision", "context", "batch", "kv_dtype", "engine", "gpus", "headroom_pct", "kind",
                "max_price_usd_per_hour"}


def run(*args):
    return CliRunner().invoke(cli, ["where", *args])


def doc_of(*args):
    r = run(*args, "--json")
    return r.exit_code, json.loads(r.output)


def test_json_contract_and_order():
    code, doc = doc_of("qwen-7b")
    assert code == 0
    assert set(doc) == TOP_KEYS and doc["schema"] == "fitcheck.where/1"
    assert set(doc["request"]) == REQUEST_KEYS
    assert all(set(m) == MACHINE_KEYS for m in doc["machines"])
    prices = [m["usd_per_hour"] for m in doc["machines"]]
    priced = [p for p in prices if p is not None]
    assert priced == sorted(priced) and prices[: len(priced)] == priced  # cheapest first, unpriced after
    unpriced = [(m["decode_tokens_per_s"]["low"] * m["decode_tokens_per_s"]["high"]) ** 0.5
                for m in doc["machines"][len(priced):] if m["decode_tokens_per_s"]]
    assert unpriced == sorted(unpriced, reverse=True)  # then fastest first
    assert all(m["status"] == "fits" and m["need_bytes"] <= m["free_bytes"] for m in doc["machines"])
    first = doc["machines"][0]
    cost = first["usd_per_million_tokens"]
    rate = first["decode_tokens_per_s"]
    assert abs(cost["low"] / (first["usd_per_hour"] / (rate["high"] * 3600) * 1e6) - 1) < 1e-3


def test_max_price_and_kind_filter():
    _, doc = doc_of("qwen-7b", "--max-price", "2")
    assert doc["machines"] and all(m["usd_per_hour"] is not None and m["usd_per_hour"] <= 2 for m in doc["machines"])
    _, doc = doc_of("qwen-7b", "--kind", "laptop")
    assert doc["machines"] and {m["kind"] for m in doc["machines"]} == {"laptop"}


def test_exit_1_when_nothing_fits():
    code, doc = doc_of("llama3-70b", "--kind", "laptop", "--precision", "bf16")
    assert code == 1 and doc["machines"] == [] and doc["not_fitting"]
    r = run("llama3-70b", "--kind", "laptop", "--precision", "bf16")
    assert r.exit_code == 1 and "No hardware profile fits" in r.output


def test_table_shows_speed_and_price():
    r = run("qwen-7b", "--kind", "cloud")
    assert r.exit_code == 0, r.output
    assert "decode tok/s" in r.output and "$/M tokens" in r.output and "Assumptions:" in r.output


def test_bad_input_is_exit_2():
    r = run("qwen-7b", "--kind", "spaceship")
    assert r.exit_code == 2
