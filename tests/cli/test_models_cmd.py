"""`fitcheck models` through click's CliRunner."""

from __future__ import annotations

import json

from click.testing import CliRunner

from fitcheck.cli import cli


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_list_query_filters_by_family_and_name():
    r = run("models", "qwen3")
    assert r.exit_code == 0, r.output
    assert "Qwen/Qwen3-8B" in r.output and "Qwen/Qwen2.5-7B" not in r.output and "meta-llama" not in r.output
    assert r.output.splitlines()[0].split() == ["id", "params", "active", "layers", "context", "family", "released"]
    assert next(ln for ln in r.output.splitlines() if ln.startswith("Qwen/Qwen3-8B ")).split()[-1] == "2025-04"


def test_family_option_and_json():
    r = run("models", "--family", "mistral", "--json")
    assert r.exit_code == 0
    rows = json.loads(r.output)["models"]
    assert rows and all(row["family"] == "mistral" for row in rows)
    mixtral = next(row for row in rows if row["id"] == "mistralai/Mixtral-8x7B-v0.1")
    assert mixtral["params"] > mixtral["active_params"] and mixtral["layers"] == 32


def test_show_prints_spec_breakdown_and_sources():
    r = run("models", "--show", "qwen-7b")
    assert r.exit_code == 0, r.output
    out = r.output
    assert "Qwen/Qwen2.5-7B-Instruct" in out and "also:" in out
    assert "num_key_value_heads" in out and "non-embedding" in out and "Qwen2.5 model card" in out
    assert "gptq-int4: Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4" in out


def test_show_json_has_every_field_and_the_breakdown():
    r = run("models", "--show", "deepseek-ai/DeepSeek-V2-Lite", "--json")
    doc = json.loads(r.output)
    assert doc["spec"]["kv_lora_rank"] == 512 and doc["source"] == "catalog"
    p = doc["params"]
    assert p["embedding"] + p["non_embedding"] == p["total"] == sum(g["params"] for g in p["groups"])
    assert doc["sources"]["num_experts"].endswith("n_routed_experts")


def test_unknown_model_is_exit_2_with_three_suggestions():
    r = run("models", "--show", "lama3-8b")
    assert r.exit_code == 2
    assert "unknown model 'lama3-8b'" in r.output and "did you mean: llama3-8b, llama3.1-8b" in r.output


def test_no_match_and_unknown_family_are_exit_2():
    assert run("models", "zzzzqqq").exit_code == 2
    assert run("models", "--family", "nope").exit_code == 2
