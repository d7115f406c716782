"""Older transformers releases keep cos/sin tables for every position in every attention layer
(fitcheck.plan.ROTARY_TABLE_RELEASES, checked in the released wheels)."""

import pytest
from estimate_specs import LLAMA3_8B, QWEN25_05B
from machines import machine, nvidia

from fitcheck.engines import estimate_inference
from fitcheck.engines.transformers.releases import rotary_table_mode
from fitcheck.estimate.result import WEIGHTS
from fitcheck.plan import resolve_inference
from fitcheck.request import Request

A100 = machine([nvidia("NVIDIA A100-SXM4-80GB", 81920, cc="8.0")])


@pytest.mark.parametrize("arch, version, keeps", [
    ("qwen2", "4.37.2", True), ("qwen2", "4.38.2", True), ("qwen2", "4.44.2", True), ("qwen2", "4.45", False),
    ("qwen2", None, False), ("qwen2_moe", "4.41", True), ("qwen2_moe", "4.45.2", False),
    ("mistral", "4.41.2", True), ("mistral", "4.42", False), ("llama", "4.40.2", True), ("llama", "4.41", False),
    ("gemma", "4.38.2", False), ("qwen", "4.38", False),
])
def test_the_release_decides(arch, version, keeps):
    assert rotary_table_mode(arch, version) is keeps


def _weights(spec, version):
    plan = resolve_inference(Request(context=2049, prompt_tokens=1, transformers_version=version), spec, A100)
    return estimate_inference(spec, plan).devices[0].component(WEIGHTS)


def test_qwen2_under_438_holds_two_tables_per_layer_in_the_load_dtype():
    # 2 × 32,768 positions × 64 × 2 B × 24 layers = 192 MiB for a 0.5B model
    extra = _weights(QWEN25_05B, "4.38.2") - _weights(QWEN25_05B, "4.46")
    assert extra == 2 * 32768 * 64 * 2 * 24


def test_llama_tables_follow_its_own_release_bound():
    assert _weights(LLAMA3_8B, "4.40") - _weights(LLAMA3_8B, "4.41") == 2 * 8192 * 128 * 2 * 32
