"""`fitcheck where` and MoE models: the expert-parallel layout (experts over every GPU, attention data parallel)
is listed beside a cloud profile's tensor-parallel row where it fits and TP does not, or holds at least
EP_CONCURRENCY_GAIN × the concurrent sequences; rows say their layout, JSON rows carry `layout`."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.search.where import EP_CONCURRENCY_GAIN

SCHEMA = json.loads((Path(__file__).parents[1] / "schemas" / "where.schema.json").read_text())


def _where(*args: str) -> tuple[dict, str]:
    doc = CliRunner().invoke(cli, ["where", *args, "--json"])
    text = CliRunner().invoke(cli, ["where", *args, "-v"])
    return json.loads(doc.output), text.output


@pytest.fixture
def deepseek(no_one_node_holds_deepseek):
    return _where("deepseek-r1", "--kind", "cloud")


def _concurrency(model: str, *flags: str) -> float:
    doc = json.loads(CliRunner().invoke(cli, [model, "--profile", "8x-h100", "--engine", "vllm", *flags,
                                              "--json"]).output)
    return float(doc["estimate"]["facts"]["vllm_max_concurrency"])


def test_deepseek_lists_two_nodes_expert_parallel_beside_tp_pp(deepseek):
    doc, text = deepseek
    jsonschema.validate(doc, SCHEMA)
    rows = {(m["name"], m["nodes"], m["layout"]) for m in doc["machines"]}
    assert ("8x-h100", 2, "tensor-parallel+pipeline-parallel") in rows
    assert ("8x-h100", 2, "expert-parallel") in rows
    assert "2 nodes × 8× H100 80GB HBM3, expert parallel" in text
    # listed because MLA's latent cache is replicated over TP ranks: EP holds far more sequences
    tp = _concurrency("deepseek-r1", "--nodes", "2")
    ep = _concurrency("deepseek-r1", "--nodes", "2", "--expert-parallel")
    assert ep >= EP_CONCURRENCY_GAIN * tp


def test_one_node_expert_parallel_row_for_an_mla_moe():
    doc, text = _where("deepseek-v2-lite", "--kind", "cloud")
    jsonschema.validate(doc, SCHEMA)
    ep = [m for m in doc["machines"] if m["layout"] == "expert-parallel"]
    # the 8-GPU nodes, one each (8x-h100, 8x-h200, 8x-a100-80gb)
    assert sorted((m["name"], m["nodes"], m["engine"]) for m in ep) == [
        ("8x-a100-80gb", 1, "vllm"), ("8x-h100", 1, "vllm"), ("8x-h200", 1, "vllm")]
    assert "8× H100 80GB HBM3, expert parallel" in text
    assert _concurrency("deepseek-v2-lite", "--expert-parallel") >= EP_CONCURRENCY_GAIN * _concurrency(
        "deepseek-v2-lite")


def test_no_expert_parallel_row_without_the_gain_or_for_dense_models():
    qwen, _ = _where("qwen3-235b-a22b", "--kind", "cloud")  # GQA: EP holds fewer sequences than TP here
    assert all(m["layout"] != "expert-parallel" for m in qwen["machines"])
    dense, _ = _where("llama-3.1-70b", "--kind", "cloud")
    assert all(m["layout"] != "expert-parallel" for m in dense["machines"])
    single = [m for m in dense["machines"] if m["gpus"] == 1 and m["nodes"] == 1 and m["device"] == "gpu"]
    assert single and all(m["layout"] == "single" for m in single)
