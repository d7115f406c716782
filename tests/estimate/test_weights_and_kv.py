"""Known values with sources, and invariants of the weight and KV-cache formulas."""

import pytest
from estimate_specs import DEEPSEEK_V3, GEMMA2_9B, LLAMA2_7B, LLAMA3_8B, MIXTRAL, QWEN25_05B, QWEN25_7B
from hypothesis import given
from hypothesis import strategies as st

from fitcheck.engines import get
from fitcheck.estimate.formats import WEIGHT_FORMATS, weight_format
from fitcheck.estimate.kv_cache import kv_cache_bytes
from fitcheck.estimate.weights import weight_bytes
from fitcheck.model.spec import ModelSpec
from fitcheck.units import GB, GiB


def wbytes(spec, precision):
    return weight_bytes(spec, weight_format(precision)).total


def test_7b_fp16_is_about_14_gb_not_4():
    # 7B x 2 bytes = 14 GB (one seed sentence says 4 GB: that is INT4, not FP16).
    b = wbytes(LLAMA2_7B, "fp16")
    assert 13.0 * GB < b < 14.0 * GB  # Llama-2-7b: 6.74B params -> 13.5 GB
    assert wbytes(LLAMA2_7B, "int4") < 4.5 * GB


@pytest.mark.parametrize("spec, precision, published_gb, source", [
    # Qwen's own GGUF: qwen2.5-7b-instruct-q4_k_m.gguf 4.68 GB (≈4.36 GiB)
    (QWEN25_7B, "q4_k_m", 4.68, "Qwen/Qwen2.5-7B-Instruct-GGUF"),
    # bartowski/Meta-Llama-3-8B-Instruct-GGUF file sizes
    (LLAMA3_8B, "q4_k_m", 4.92, "bartowski Q4_K_M"),
    (LLAMA3_8B, "q8_0", 8.54, "bartowski Q8_0"),
    (LLAMA3_8B, "q4_0", 4.66, "bartowski Q4_0"),
])
def test_gguf_file_sizes_match_published(spec, precision, published_gb, source):
    assert wbytes(spec, precision) / GB == pytest.approx(published_gb, rel=0.02), source


def test_quantized_formats_keep_embeddings_16bit():
    # Qwen2.5-7B: embed + lm_head = 2 x 152064 x 3584 = 1.09B params stay 2 bytes in GPTQ/AWQ.
    embed = 2 * 152064 * 3584 * 2
    linear = (QWEN25_7B.total_params - 2 * 152064 * 3584)
    assert wbytes(QWEN25_7B, "gptq-int4") > embed + linear * 0.5
    assert wbytes(QWEN25_7B, "awq") / GiB == pytest.approx(5.19, abs=0.05)


def test_kv_cache_llama3_8b_is_128_kib_per_token():
    # 2 (K,V) x 8 KV heads x 128 head_dim x 32 layers x 2 bytes = 131,072 bytes per token.
    assert kv_cache_bytes(LLAMA3_8B, tokens=1, sequences=1, kv_dtype="fp16", engine=get("vllm")) == 131072
    assert kv_cache_bytes(LLAMA3_8B, tokens=8192, sequences=4, kv_dtype="fp8", engine=get("vllm")) == 131072 * 8192 * 4 // 2


def test_gqa_explicit_head_dim_and_sliding_window():
    # gemma-2-9b: head_dim 256 (not 3584/16 = 224); half of its 42 layers attend to 4096 tokens.
    long = kv_cache_bytes(GEMMA2_9B, tokens=8192, sequences=1, kv_dtype="bf16", engine=get("vllm"))
    per_layer_token = 2 * 8 * 256 * 2
    assert long == 21 * 8192 * per_layer_token + 21 * 4096 * per_layer_token


def test_mla_latent_vs_expanded():
    # DeepSeek-V3: vLLM/llama.cpp cache 512 + 64 latent elements per token per layer;
    # transformers caches 128 heads x (128 + 64 + 128).
    latent = kv_cache_bytes(DEEPSEEK_V3, tokens=1000, sequences=1, kv_dtype="bf16", engine=get("vllm"))
    full = kv_cache_bytes(DEEPSEEK_V3, tokens=1000, sequences=1, kv_dtype="bf16", engine=get("transformers"))
    assert latent == 61 * 576 * 1000 * 2
    assert full == 61 * 128 * 320 * 1000 * 2


def test_moe_keeps_every_expert_resident():
    assert MIXTRAL.total_params / 1e9 == pytest.approx(46.7, rel=0.01)
    assert MIXTRAL.active_params / 1e9 == pytest.approx(12.9, rel=0.01)
    assert wbytes(MIXTRAL, "bf16") == pytest.approx(MIXTRAL.total_params * 2, rel=0.001)


def test_tied_gguf_embedding_takes_output_type():
    # Qwen2.5-0.5B-Instruct q4_k_m is 398 MB (Qwen's GGUF repo); hidden 896 is not a multiple of
    # 256, so k-quants fall back per tensor.
    assert wbytes(QWEN25_05B, "q4_k_m") / 1e6 == pytest.approx(398, rel=0.03)


dims = st.fixed_dictionaries({
    "layers": st.integers(1, 96), "heads": st.sampled_from([8, 16, 32, 64]),
    "kv_div": st.sampled_from([1, 2, 4, 8]), "head_dim": st.sampled_from([64, 128]),
    "ffn_mult": st.integers(2, 6), "vocab": st.integers(1000, 260000),
})


def _spec(d):
    h = d["heads"] * d["head_dim"]
    return ModelSpec("x", d["layers"], h, h * d["ffn_mult"], d["heads"], max(d["heads"] // d["kv_div"], 1), d["vocab"])


@given(dims, st.integers(1, 100000), st.integers(1, 64))
def test_kv_monotone_in_tokens_and_sequences(d, tokens, seqs):
    spec = _spec(d)
    a = kv_cache_bytes(spec, tokens=tokens, sequences=seqs, kv_dtype="fp16", engine=get("vllm"))
    assert kv_cache_bytes(spec, tokens=tokens + 1, sequences=seqs, kv_dtype="fp16", engine=get("vllm")) >= a
    assert kv_cache_bytes(spec, tokens=tokens, sequences=seqs + 1, kv_dtype="fp16", engine=get("vllm")) >= a


@given(dims)
def test_weights_monotone_in_bits(d):
    spec = _spec(d)
    order = ["fp32", "bf16", "q8_0", "int8", "q6_k", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k"]
    sizes = [wbytes(spec, p) for p in order]
    # Non-GGUF 8-bit keeps embeddings 16-bit, so compare within families where the claim holds.
    assert sizes[0] > sizes[1] > sizes[2]
    gguf = [wbytes(spec, p) for p in ["q8_0", "q6_k", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k"]]
    assert gguf == sorted(gguf, reverse=True)
    assert wbytes(spec, "bf16") > wbytes(spec, "gptq-int8") > wbytes(spec, "gptq-int4")


def test_every_format_has_a_positive_size():
    for name in WEIGHT_FORMATS:
        assert wbytes(QWEN25_7B, name) > 0
