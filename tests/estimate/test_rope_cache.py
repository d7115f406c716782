"""vLLM and SGLang keep each distinct rotary embedding's cos/sin cache on every GPU (inference.rope_cache_component,
ModelSpec.rope_tables): whole on every tensor-parallel rank and pipeline stage, vLLM in the model dtype, SGLang in
fp32 on CUDA; inside the reservation, so the KV pool is that much smaller."""

from __future__ import annotations

import pytest

from fitcheck.estimate.result import WEIGHTS
from fitcheck.pipeline import check
from fitcheck.profiles import load_profile
from fitcheck.request import Request

H100 = load_profile("8x-h100")


def _rope(result) -> list[int]:
    return [sum(c.bytes for c in d.components if c.name == WEIGHTS and c.detail.startswith("rotary cos/sin cache"))
            for d in result.estimate.devices if d.kind == "gpu"]


def _check(model: str, **request):
    return check(model, Request(**request), H100, alternatives=False, search=False)


def test_llama4_scouts_table_is_whole_on_every_rank():
    table = 10_485_760 * 128  # max_position_embeddings × head_dim, one table (the NoPE layers have none)
    for gpus in (4, 8):
        result = _check("llama-4-scout", engine="vllm", gpus=gpus)
        assert _rope(result) == [table * 2] * gpus
    sglang = _check("llama-4-scout", engine="sglang", gpus=4)
    assert _rope(sglang) == [table * 4] * 4  # fp32 on CUDA


def test_every_pipeline_stage_builds_it():
    result = _check("llama-3.1-8b", engine="vllm", gpus=1, nodes=2)
    assert _rope(result) == [131_072 * 128 * 2] * 2


def test_the_kv_pool_gives_way_to_it():
    scout = _check("llama-4-scout", engine="vllm", gpus=4)
    pool = scout.estimate.fact("vllm_kv_pool_bytes")
    reserved = scout.estimate.fact("vllm_reserved_bytes")
    dev = scout.estimate.devices[0]
    nccl = sum(c.bytes for c in dev.components if c.name == "overhead" and c.counted_in == "runtime"
               and "NCCL buffers" in c.detail)
    assert pool == reserved - dev.component(WEIGHTS) - dev.component("activations") - nccl
    assert _rope(scout)[0] == pytest.approx(2.5 * 2**30)


def test_models_without_rotary_positions_carry_none():
    assert _rope(_check("mpt-7b", engine="vllm", gpus=1)) == [0]
    assert _rope(_check("llama-3.1-8b", engine="transformers", gpus=1)) == [0]  # computed per forward
