"""GGUF header reader and GGUF -> ModelSpec: exact bytes, architectures, hostile files."""

from __future__ import annotations

import struct
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from filegen import gguf_bytes, gguf_llama, gguf_qwen3moe, write_gguf  # noqa: E402

from fitcheck.errors import FitcheckError
from fitcheck.model import gguf_header as gh
from fitcheck.model import gguf_spec


def test_block_table_matches_ggml_common_h():
    # Bits per weight of the k-quants as ggml-common.h documents them.
    bpw = {name: 8 * t.type_size / t.block_size for t in gh.GGML_TYPES.values() for name in [t.name]}
    assert bpw["Q4_K"] == 4.5 and bpw["Q5_K"] == 5.5 and bpw["Q6_K"] == 6.5625
    assert bpw["Q2_K"] == 2.625 and bpw["Q3_K"] == 3.4375 and bpw["Q8_0"] == 8.5
    assert bpw["MXFP4"] == 4.25 and bpw["IQ4_XS"] == 4.25 and bpw["BF16"] == 16


def test_llama_header_and_spec(tmp_path):
    meta, tensors = gguf_llama(layers=3, hidden=256, ff=512, heads=4, kv_heads=2, vocab=300)
    path = write_gguf(tmp_path / "tiny-llama-Q4_K_M.gguf", meta, tensors)
    header = gh.read_header(path)
    assert header.version == 3 and header.architecture == "llama"
    assert header.file_type == "q4_k_m"
    tokens = header.metadata["tokenizer.ggml.tokens"]
    assert len(tokens) == 300 and tokens.values is not None
    q = header.tensor("blk.0.attn_q.weight")
    assert q.dims == (256, 256) and q.type_name == "Q4_K" and q.nbytes == 256 * 256 // 256 * 144
    embd = header.tensor("token_embd.weight")
    assert embd.nbytes == 256 * 300 // 256 * 210
    roles = header.bytes_by_role()
    assert roles["token_embd"] == embd.nbytes and roles["output"] == embd.nbytes
    assert sum(roles.values()) == header.total_tensor_bytes

    spec = gguf_spec.spec_from_gguf([header], "tiny")
    assert (spec.num_layers, spec.hidden_size, spec.intermediate_size) == (3, 256, 512)
    assert (spec.num_attention_heads, spec.num_kv_heads, spec.vocab_size) == (4, 2, 300)
    assert spec.stored_format == "q4_k_m" and spec.max_context == 8192
    assert spec.stored_weight_bytes == header.total_tensor_bytes
    assert not spec.tie_word_embeddings and not spec.qkv_bias and spec.gated_mlp
    # The architecture's parameter count matches the tensors in the file exactly.
    assert spec.total_params == sum(t.elements for t in header.tensors)


def test_tied_output_qkv_bias_and_unquantized(tmp_path):
    meta, tensors = gguf_llama(arch="qwen2", tied=True, qkv_bias=True, wtype="F16", file_type=1)
    header = gh.read_header(write_gguf(tmp_path / "q.gguf", meta, tensors))
    spec = gguf_spec.spec_from_gguf([header], "q")
    assert spec.tie_word_embeddings and spec.qkv_bias and not spec.attn_out_bias
    # A 16-bit file's own type is its default precision (fp16), named as the file names it.
    assert spec.stored_format == "fp16" and spec.stored_file_type == "F16" and spec.stored_dtype == "float16"
    assert spec.total_params == sum(t.elements for t in header.tensors)


def test_moe_spec(tmp_path):
    meta, tensors = gguf_qwen3moe(layers=2, hidden=256, heads=4, kv_heads=2, experts=8, used=2,
                                  expert_ff=256, head_dim=64)
    header = gh.read_header(write_gguf(tmp_path / "moe.gguf", meta, tensors))
    spec = gguf_spec.spec_from_gguf([header], "moe")
    assert spec.architecture == "qwen3_moe" and spec.is_moe
    assert (spec.num_experts, spec.experts_per_token, spec.moe_intermediate_size) == (8, 2, 256)
    assert spec.num_dense_layers == 0 and spec.qk_norm and spec.stored_format == "q8_0"
    assert spec.head_dim == 64
    assert spec.total_params == sum(t.elements for t in header.tensors)
    assert spec.active_params < spec.total_params


def test_gemma3_sliding_layers_follow_llama_cpp_pattern(tmp_path):
    meta, tensors = gguf_llama(arch="gemma3", layers=12, tied=True, head_dim=128,
                               extra_meta={"gemma3.attention.sliding_window": 512})
    spec = gguf_spec.spec_from_gguf([gh.read_header(write_gguf(tmp_path / "g.gguf", meta, tensors))], "g")
    assert spec.sliding_window == 512 and spec.num_sliding_layers == 10  # layers 5 and 11 are global
    assert spec.head_dim == 128 and spec.architecture == "gemma3_text"


def test_deepseek2_mla(tmp_path):
    arch = "deepseek2"
    meta, tensors = gguf_llama(arch=arch, layers=2, extra_meta={
        f"{arch}.attention.kv_lora_rank": 64, f"{arch}.attention.q_lora_rank": 96,
        f"{arch}.rope.dimension_count": 16, f"{arch}.attention.key_length": 48,
        f"{arch}.attention.value_length": 32})
    spec = gguf_spec.spec_from_gguf([gh.read_header(write_gguf(tmp_path / "d.gguf", meta, tensors))], "d")
    assert spec.is_mla and spec.kv_lora_rank == 64 and spec.qk_rope_head_dim == 16
    assert spec.qk_nope_head_dim == 32 and spec.v_head_dim == 32 and spec.q_lora_rank == 96
    assert spec.kv_elements_per_token == 80


def test_split_gguf_sums_all_shards(tmp_path):
    meta, tensors = gguf_llama(layers=2)
    names = list(tensors)
    first = {n: tensors[n] for n in names[:10]}
    second = {n: tensors[n] for n in names[10:]}
    h1 = gh.read_header(write_gguf(tmp_path / "m-00001-of-00002.gguf", meta, first))
    h2 = gh.read_header(write_gguf(tmp_path / "m-00002-of-00002.gguf", {"general.architecture": "llama"}, second))
    spec = gguf_spec.spec_from_gguf([h1, h2], "m")
    assert spec.stored_weight_bytes == h1.total_tensor_bytes + h2.total_tensor_bytes
    assert not spec.tie_word_embeddings


def test_big_token_array_is_counted_not_kept(tmp_path):
    meta, tensors = gguf_llama(vocab=5000)
    header = gh.read_header(write_gguf(tmp_path / "v.gguf", meta, tensors))
    tokens = header.metadata["tokenizer.ggml.tokens"]
    assert len(tokens) == 5000 and tokens.values is None


# ---- hostile files ----------------------------------------------------------------------------

def _fails_fast(tmp_path, data: bytes) -> FitcheckError:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    start = time.perf_counter()
    with pytest.raises(FitcheckError) as info:
        gh.read_header(path)
    assert time.perf_counter() - start < 1.0
    assert "\n" not in info.value.one_line()
    return info.value


def test_truncated_gguf(tmp_path):
    meta, tensors = gguf_llama()
    data = gguf_bytes(meta, tensors)
    for cut in (10, 30, len(data) // 2, len(data) - 40):
        _fails_fast(tmp_path, data[:cut])


def test_truncated_tensor_data(tmp_path):
    meta, tensors = gguf_llama()
    err = _fails_fast(tmp_path, gguf_bytes(meta, tensors) + b"\0" * 64)
    assert "truncated" in err.message


def test_gguf_claiming_a_billion_tensors(tmp_path):
    err = _fails_fast(tmp_path, b"GGUF" + struct.pack("<IQQ", 3, 10**9, 0) + b"\0" * 64)
    assert "10^6" in err.message


def test_gguf_with_a_10_gb_string(tmp_path):
    body = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 10 * 10**9) + b"k" * 64
    err = _fails_fast(tmp_path, body)
    assert "16 MiB" in err.message


def test_gguf_with_a_huge_array(tmp_path):
    key = b"tokenizer.ggml.tokens"
    body = (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
            + struct.pack("<IIQ", 9, 8, 10**9) + b"\0" * 64)
    _fails_fast(tmp_path, body)
    body = body.replace(struct.pack("<Q", 10**9), struct.pack("<Q", 10**6))  # fits the limit, not the file
    assert "truncated" in _fails_fast(tmp_path, body).message


@pytest.mark.parametrize("data", [
    b"",
    b"GGML" + b"\0" * 60,
    b"GGUF" + struct.pack("<IQQ", 1, 0, 0) + b"\0" * 40,            # version 1
    b"GGUF" + struct.pack("<IQQ", 3, 0, 10**6) + b"\0" * 40,       # too many kv
    b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 99) + b"\0" * 40,
    b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<I", 9) + b"\0" * 80,
    b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQQI", 2, 2**40, 2**40, 0)
    + b"\0" * 40,                                                   # 2^80 elements
    b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQI", 1, 32, 77)
    + b"\0" * 40,                                                   # unknown ggml type
])
def test_hostile_gguf(tmp_path, data):
    _fails_fast(tmp_path, data)


def test_missing_architecture_keys(tmp_path):
    meta, tensors = gguf_llama()
    del meta["llama.block_count"]
    header = gh.read_header(write_gguf(tmp_path / "m.gguf", meta, tensors))
    with pytest.raises(FitcheckError, match="block_count"):
        gguf_spec.spec_from_gguf([header], "m")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_arbitrary_bytes_give_a_header_or_fitcheck_error(data):
    start = time.perf_counter()
    try:
        gh.parse_header(b"GGUF" + data)
    except FitcheckError as exc:
        assert exc.message
    assert time.perf_counter() - start < 1.0


_VALID = gguf_bytes(*gguf_llama(layers=1, hidden=32, ff=64, heads=2, kv_heads=1, vocab=40,
                                wtype="Q8_0"))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(_VALID) - 1), st.binary(min_size=1, max_size=8))
def test_corrupted_real_header_gives_a_header_or_fitcheck_error(position, patch):
    data = _VALID[:position] + patch + _VALID[position + len(patch):]
    start = time.perf_counter()
    try:
        header = gh.parse_header(data)
        if header.architecture:
            gguf_spec.spec_from_gguf([header], "x")
    except FitcheckError as exc:
        assert exc.message
    assert time.perf_counter() - start < 1.0


def test_gpt_oss_mxfp4(tmp_path):
    arch, hidden, heads, kv, d, experts, ff, layers = "gpt-oss", 256, 4, 2, 64, 4, 256, 4
    meta = {"general.architecture": arch, "general.file_type": 38,
            f"{arch}.block_count": layers, f"{arch}.context_length": 131072,
            f"{arch}.embedding_length": hidden, f"{arch}.feed_forward_length": ff,
            f"{arch}.attention.head_count": heads, f"{arch}.attention.head_count_kv": kv,
            f"{arch}.attention.key_length": d, f"{arch}.attention.value_length": d,
            f"{arch}.attention.sliding_window": 128, f"{arch}.expert_count": experts,
            f"{arch}.expert_used_count": 2, f"{arch}.expert_feed_forward_length": ff}
    t = {"token_embd.weight": ("Q8_0", [hidden, 512])}
    for i in range(layers):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = ("F32", [hidden])
        t[p + "post_attention_norm.weight"] = ("F32", [hidden])
        for n, width in (("attn_q", heads * d), ("attn_k", kv * d), ("attn_v", kv * d)):
            t[p + n + ".weight"] = ("BF16", [hidden, width])
            t[p + n + ".bias"] = ("F32", [width])
        t[p + "attn_output.weight"] = ("BF16", [heads * d, hidden])
        t[p + "attn_output.bias"] = ("F32", [hidden])
        t[p + "attn_sinks.weight"] = ("F32", [heads])
        t[p + "ffn_gate_inp.weight"] = ("F32", [hidden, experts])
        t[p + "ffn_gate_inp.bias"] = ("F32", [experts])
        for n, dims in (("ffn_gate_exps", [hidden, ff, experts]), ("ffn_up_exps", [hidden, ff, experts]),
                        ("ffn_down_exps", [ff, hidden, experts])):
            t[p + n + ".weight"] = ("MXFP4", dims)
            t[p + n + ".bias"] = ("F32", [dims[1], experts])
    t["output_norm.weight"] = ("F32", [hidden])
    t["output.weight"] = ("Q8_0", [hidden, 512])
    header = gh.read_header(write_gguf(tmp_path / "gpt-oss-mxfp4.gguf", meta, t))
    spec = gguf_spec.spec_from_gguf([header], "gpt-oss")
    assert spec.architecture == "gpt_oss" and spec.stored_format == "mxfp4_moe"
    assert spec.attention_sinks and spec.router_bias and spec.expert_bias
    assert spec.qkv_bias and spec.attn_out_bias and spec.num_dense_layers == 0
    assert spec.num_sliding_layers == 2 and spec.sliding_window == 128  # even layers slide
    assert spec.total_params == sum(x.elements for x in header.tensors)
    assert header.bytes_by_type()["MXFP4"] == layers * 3 * hidden * ff * experts // 32 * 17
