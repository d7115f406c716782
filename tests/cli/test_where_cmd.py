"""`fitcheck where MODEL`: every profile judged, cheapest that fits first, the JSON contract."""

import json

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli

TOP_KEYS = {"schema", "fitcheck_version", "model", "request", "machines", "not_fitting", "cannot_run", "assumptions",
            "cost"}
COST_KEYS = {"kwh_price_usd", "kwh_price_source", "amortize_years", "hours_per_day", "break_even_against"}
MACHINE_KEYS = {"name", "kind", "description", "precision", "engine", "device", "gpus", "nodes", "layout", "cpu_moe", "gpu_layers", "status",
                "need_bytes",
                "free_bytes", "decode_tokens_per_s", "per_sequence_tokens_per_s", "prefill_tokens_per_s",
                "usd_per_hour", "usd_per_million_tokens", "price_read_on", "price_source",
                "owned", "power_watts", "purchase_usd", "purchase_read_on", "purchase_source",
                "energy_kwh_per_million_tokens", "electricity_usd_per_million_tokens",
                "amortized_usd_per_million_tokens", "break_even_hours", "precision_choice", "default_precision",
                "command"}
REQUEST_KEYS = {"precision", "context", "prompt_tokens", "batch", "kv_dtype", "engine", "gpus", "headroom_pct", "kind",
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
    assert set(doc["cost"]) == COST_KEYS
    assert set(doc["request"]) == REQUEST_KEYS
    assert all(set(m) == MACHINE_KEYS for m in doc["machines"])
    prices = [m["usd_per_hour"] for m in doc["machines"]]
    priced = [p for p in prices if p is not None]
    assert priced == sorted(priced) and prices[: len(priced)] == priced  # cheapest first, unpriced after
    unpriced = [(m["decode_tokens_per_s"]["low"] * m["decode_tokens_per_s"]["high"]) ** 0.5
                for m in doc["machines"][len(priced):] if m["decode_tokens_per_s"]]
    assert unpriced == sorted(unpriced, reverse=True)  # then fastest first
    # tight machines are listed too (check exits 0 for them)
    assert all(m["status"] in ("fits", "tight") and m["need_bytes"] <= m["free_bytes"] for m in doc["machines"])
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
    r = run("qwen-7b", "--kind", "cloud", "-v")
    assert r.exit_code == 0, r.output
    assert "decode tok/s" in r.output and "$/M tokens" in r.output and "Assumptions:" in r.output


def test_bad_input_is_exit_2():
    r = run("qwen-7b", "--kind", "spaceship")
    assert r.exit_code == 2


def test_multi_gpu_profiles_use_all_their_gpus_unless_gpus_is_given():
    _, doc = doc_of("llama3-70b", "--kind", "cloud")
    by_name = {m["name"]: m for m in doc["machines"]}
    assert by_name["8x-h100"]["gpus"] == 8 and doc["request"]["gpus"] is None
    _, one = doc_of("llama3-70b", "--kind", "cloud", "--gpus", "1", "-p", "bf16")
    assert "8x-h100" not in {m["name"] for m in one["machines"]}  # 140 GiB of bf16 on one 80 GiB GPU
    code, ds = doc_of("deepseek-v3", "-p", "q4_k_m")  # ~380 GiB: only eight GPUs hold it
    eight = {"8x-a100-80gb", "8x-h100", "8x-h200"}   # the 8-GPU nodes
    assert code == 0 and {m["name"] for m in ds["machines"]} == eight and all(m["gpus"] == 8 for m in ds["machines"])
    _, two = doc_of("qwen-14b", "--kind", "desktop", "--precision", "bf16")
    assert {m["name"]: m["gpus"] for m in two["machines"]}.get("2x-rtx-3090") == 2


def test_where_and_check_agree_on_multi_gpu_machines():
    """`where` lists a machine exactly when `fitcheck MODEL --profile NAME` exits 0 for it."""
    for args in (["llama3.3-70b", "-p", "awq"], ["qwen-14b", "-p", "bf16"]):
        _, doc = doc_of(*args, "--kind", "desktop")
        listed = {m["name"]: m for m in doc["machines"]}
        for name in ("2x-rtx-3090", "rtx-4090"):
            r = CliRunner().invoke(cli, [*args, "--profile", name, "--json"])
            check = json.loads(r.output)
            assert (name in listed) == (r.exit_code == 0), (args, name)
            if name in listed:
                assert listed[name]["gpus"] == check["request"]["gpus"]
                assert listed[name]["status"] == check["verdict"]["status"]


def test_the_vocabulary_defines_where_options():
    from fitcheck.cli.where_cmd import where
    from fitcheck.options import PRECISIONS

    params = {p.name: p for p in where.params}
    assert tuple(params["precision"].type.choices) == PRECISIONS
    assert params["kv_dtype"].default == "auto" and params["headroom"].default == 10.0
    assert "each machine" in params["engine"].help and params["params"].metavar == "COUNT"
    assert run("qwen-7b", "--headroom", "150").exit_code == 2
    assert run("qwen-7b", "--kv-dtype", "fp4").exit_code == 2


def test_default_precision_picks_each_machines_best_that_fits(no_one_node_holds_deepseek):
    """DeepSeek-R1 at its stored fp8 fits no single machine: 8x-h100 is listed at the best precision
    that fits it alone, beside the multi-node fp8 rows, cheapest first; each row names what it chose."""
    code, doc = doc_of("deepseek-r1")
    assert code == 0
    h100 = [m for m in doc["machines"] if m["name"] == "8x-h100"]
    single = [m for m in h100 if m["nodes"] == 1]
    assert len(single) == 1 and single[0]["precision_choice"] == "best_fitting"
    assert single[0]["default_precision"] == "fp8" and single[0]["precision"] in ("awq", "gptq-int4", "nf4", "q4_k_m")
    assert any(m["nodes"] > 1 and m["precision"] == "fp8" for m in h100)  # multi-node at the default, as before
    # cheapest first among the machines whose speed is known, then those whose speed is not (layers in RAM on a
    # profile without its RAM bandwidth: no price per token to compare)
    priced = [m for m in doc["machines"] if m["usd_per_hour"] is not None]
    known = [m["decode_tokens_per_s"] is not None for m in priced]
    assert known == sorted(known, reverse=True) and any(known)
    for group in (True, False):
        prices = [m["usd_per_hour"] for m, k in zip(priced, known, strict=True) if k is group]
        assert prices == sorted(prices)
    # the row reproduces: `fitcheck MODEL -p P --engine E --profile NAME` exits 0 with the same need
    r = CliRunner().invoke(cli, ["deepseek-r1", "-p", single[0]["precision"], "--engine", single[0]["engine"],
                                 "--profile", "8x-h100", "--json"])
    assert r.exit_code == 0, r.output
    table = run("deepseek-r1").output
    assert f"{single[0]['precision']} {single[0]['engine']}*" in table and "what check advises there" in table
    # an explicit precision keeps today's behaviour: no single 8x-h100 at fp8
    _, given = doc_of("deepseek-r1", "-p", "fp8")
    assert all(m["nodes"] > 1 and m["precision_choice"] == "given" for m in given["machines"])


def test_profiles_that_cannot_run_are_listed_apart():
    _, doc = doc_of("qwen-7b", "-p", "fp8", "--kind", "cloud")
    cannot = {m["name"]: m["reason"] for m in doc["cannot_run"]}
    assert {"t4", "a100-80gb"} <= set(cannot) and "compute capability" in cannot["t4"]
    assert not set(cannot) & {m["name"] for m in doc["not_fitting"]}
    _, apple = doc_of("qwen-7b", "--engine", "vllm", "--kind", "laptop")
    assert "macbook-air-m3-16gb" in {m["name"] for m in apple["cannot_run"]}
    out = run("qwen-7b", "-p", "fp8", "--kind", "cloud").output
    assert "Cannot run it at all" in out and "t4" in out.split("Cannot run it at all")[1]


# ---- where --mode full|lora|qlora [--tokens N] -----------------------------------------------------
TRAINING_TOP_KEYS = {"schema", "fitcheck_version", "model", "request", "machines", "not_fitting", "cheapest",
                     "fastest", "cost"}
TRAINING_REQUEST_KEYS = {"mode", "precision", "seq_len", "batch", "grad_accum", "gpus", "headroom_pct", "kind",
                         "max_price_usd_per_hour", "tokens"}
TRAINING_MACHINE_KEYS = {"name", "kind", "description", "precision", "device", "gpus", "nodes", "status", "need_bytes",
                         "free_bytes", "training_tokens_per_s", "usd_per_hour", "run", "command", "grad_checkpointing",
                         "checkpointing_added"}
RUN_KEYS = {"tokens", "hours", "usd", "basis", "energy_kwh", "electricity_usd", "amortized_usd"}


def test_where_training_names_cheapest_and_fastest_in_hours_and_money():
    code, doc = doc_of("qwen-7b", "--mode", "qlora", "--grad-checkpointing", "--tokens", "100M")
    assert code == 0 and doc["schema"] == "fitcheck.where-training/1"
    assert set(doc) == TRAINING_TOP_KEYS and set(doc["request"]) == TRAINING_REQUEST_KEYS
    assert all(set(m) == TRAINING_MACHINE_KEYS for m in doc["machines"])
    runs = [m for m in doc["machines"] if m["run"]]
    assert runs and all(set(m["run"]) == RUN_KEYS for m in runs)
    for m in runs:  # wall time is tokens / rate; a rented run costs price x hours
        rate = m["training_tokens_per_s"]
        assert m["run"]["hours"]["low"] == pytest.approx(1e8 / rate["high"] / 3600, rel=1e-3)
        if m["usd_per_hour"] is not None:
            assert m["run"]["basis"] == "rented"
            hours = 1e8 / rate["low"] / 3600
            assert m["run"]["usd"]["high"] == pytest.approx(m["usd_per_hour"] * hours, rel=1e-3, abs=0.01)
    full = [m for m in runs if m["run"]["basis"] in ("rented", "amortized")]
    mid = [(m["run"]["usd"]["low"] * m["run"]["usd"]["high"]) ** 0.5 for m in full]
    assert mid == sorted(mid) and doc["cheapest"] == full[0]["name"]
    rated = [m for m in doc["machines"] if m["training_tokens_per_s"]]  # a peak FLOP/s unknown: no rate
    fastest = max(rated, key=lambda m: m["training_tokens_per_s"]["low"] * m["training_tokens_per_s"]["high"])
    assert doc["fastest"] == fastest["name"]
    text = run("qwen-7b", "--mode", "qlora", "--grad-checkpointing", "--tokens", "100M").output
    assert f"Cheapest: {doc['cheapest']}" in text and f"Fastest:  {doc['fastest']}" in text
    assert "wall time" in text


def test_where_training_without_tokens_and_wrong_mode_options():
    code, doc = doc_of("qwen-7b", "--mode", "lora")
    assert code == 0 and all(m["run"] is None for m in doc["machines"]) and doc["cheapest"] is None
    assert "--tokens N" in run("qwen-7b", "--mode", "lora").output
    assert run("qwen-7b", "--mode", "lora", "--context", "100").exit_code == 2
    assert run("qwen-7b", "--tokens", "100M").exit_code == 2          # --tokens is for training


def test_where_lists_llama_cpp_partial_offload_as_check_advises_it():
    """Qwen2-72B on an RTX 4090 (24 GiB VRAM, 64 GiB RAM): check's first advice is llama.cpp's Q4_K_M with 38 of 80
    layers on the GPU (-ngl 38); `where` left the machine out (nothing fits fully in VRAM but Q2_K, and that not with
    headroom).  It is listed as check advises it, at check's speed, and its command reproduces it."""
    from fitcheck.model.resolve import resolve_model
    from fitcheck.pipeline import check
    from fitcheck.profiles import load_profile
    from fitcheck.request import Request

    code, doc = doc_of("qwen2-72b", "--kind", "desktop")
    assert code == 0
    row = next(m for m in doc["machines"] if m["name"] == "rtx-4090")
    chosen = check(resolve_model("qwen2-72b"), Request(), load_profile("rtx-4090"))   # what check answers there
    advised = check(resolve_model("qwen2-72b"), Request(), load_profile("rtx-4090"), choose=False).alternatives[0]
    assert chosen.chosen is not None and chosen.plan.gpu_layers == advised.plan.gpu_layers
    assert (row["precision"], row["engine"], row["device"]) == ("q4_k_m", "llama.cpp", "offload")
    assert row["gpu_layers"] == advised.plan.gpu_layers and row["precision_choice"] == "best_fitting"
    r = CliRunner().invoke(cli, ["qwen2-72b", "-p", "q4_k_m", "--engine", "llama.cpp", "--gpu-layers",
                                 str(row["gpu_layers"]), "--profile", "rtx-4090", "--json"])
    again = json.loads(r.output)
    assert r.exit_code == 0 and again["verdict"]["status"] == row["status"]
    assert again["speed"]["decode_tokens_per_s"] == row["decode_tokens_per_s"]
    table = run("qwen2-72b", "--kind", "desktop", "-v").output
    assert f"q4_k_m llama.cpp -ngl {row['gpu_layers']}*" in table
    assert row["command"] == ("fitcheck qwen2-72b --precision q4_k_m --engine llama.cpp --gpu-layers "
                              f"{row['gpu_layers']} --profile rtx-4090")
    assert f"  {row['command']}" in table
