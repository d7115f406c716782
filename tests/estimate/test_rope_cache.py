"""vLLM and SGLang keep each distinct rotary embedding's cos/sin cache on every GPU (inference.rope_cache_component,
ModelSpec.rope_tables): whole on every tensor-parallel rank and pipeline stage, vLLM in the model dtype, SGLang in
fp32 on CUDA; inside the reservation, so the KV pool is that much smaller."""

from __future__ import annotations

import pytest
from machines import machine, nvidia

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


def test_sglangs_published_weight_line_shows_the_fp32_table():
    # SGLang's own docs, the LoRA Serving notebook as its CI executed it on 2026-02-09 (docs.sglang.ai,
    # advanced_features/lora): "Load weight end. ... type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.41 GB,
    # mem usage=15.02 GB." for meta-llama/Meta-Llama-3.1-8B-Instruct at TP 1 (SGLang's GB are 2**30 bytes).  The
    # parameters are 14.96 GiB; the fp32 table of 131,072 × 128 brings 15.02 (a bf16 one would read 14.99).
    result = _check("llama-3.1-8b", engine="sglang", gpus=1)
    assert result.estimate.devices[0].component(WEIGHTS) / 2**30 == pytest.approx(15.02, abs=0.005)


def test_sglangs_pool_follows_the_memory_free_after_its_init():
    # ModelRunner: rest_memory = free after load − free after init × (1 − mem_fraction_static).  Published logs,
    # end to end through the estimate: SGLang's docs (2025-01-23), Meta-Llama-3.1-8B at TP 1 on an 80 GB H100 with
    # 0.88, 444,500 tokens; Qwen3-14B at TP 4 on RTX 4090s with 0.80, 298,447 tokens.  With several ranks the
    # init memory is vLLM's 2.05 GiB envelope where that log shows 0.91, so the pool reads small (the safe side).
    one = check("llama-3.1-8b", Request(engine="sglang", gpus=1, gpu_memory_utilization=0.88),
                load_profile("h100-sxm"), alternatives=False, search=False)
    assert one.estimate.fact("sglang_kv_pool_tokens") == pytest.approx(444_500, rel=0.01)
    four = check("qwen3-14b", Request(engine="sglang", gpus=4, gpu_memory_utilization=0.80),
                 machine([nvidia(index=i) for i in range(4)]), alternatives=False, search=False)
    assert -0.08 < four.estimate.fact("sglang_kv_pool_tokens") / 298_447 - 1 < 0


def test_sglang_on_rocm_keeps_the_table_in_the_model_dtype():
    rocm = check("llama-4-scout", Request(engine="sglang", gpus=1), load_profile("mi300x"), alternatives=False,
                 search=False)
    assert _rope(rocm)[0] == 10_485_760 * 128 * 2


def test_vllm_builds_gpt_oss_table_in_fp32():
    # vllm/model_executor/models/gpt_oss.py: get_rope(..., dtype=torch.float32)
    assert _rope(_check("gpt-oss-20b", engine="vllm", gpus=1)) == [131_072 * 64 * 4]
