"""spec_from_config against recorded real config.json files, hostile values, and properties."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcheck.errors import FitcheckError
from fitcheck.model.hf_config import SUPPORTED_ARCHITECTURES, spec_from_config, stored_format_of
from fitcheck.model.spec import EXPERTS, OTHER

CONFIGS = Path(__file__).parent.parent / "fixtures" / "configs"


def load(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def spec(name: str):
    return spec_from_config(load(name), name)


# (fixture, total params, active params) - totals checked against the published figures in the
# catalog test; here they pin the exact arithmetic for each architecture.
EXACT = [
    ("Qwen2.5-7B-Instruct", 7_615_616_512, 7_615_616_512),
    ("Llama-3.1-8B-Instruct", 8_030_261_248, 8_030_261_248),
    ("Mixtral-8x7B-v0.1", 46_702_792_704, 12_879_925_248),
    ("Phi-3-mini-4k-instruct", 3_821_079_552, 3_821_079_552),
    ("Qwen-7B", 7_721_324_544, 7_721_324_544),
    ("Mistral-7B-v0.1", 7_241_732_096, 7_241_732_096),
]


@pytest.mark.parametrize("name,total,active", EXACT)
def test_exact_counts(name, total, active):
    s = spec(name)
    assert s.total_params == total
    assert s.active_params == active


def test_qwen25_reads_every_field_and_no_sliding_window():
    s = spec("Qwen2.5-7B-Instruct")
    assert (s.num_layers, s.hidden_size, s.intermediate_size) == (28, 3584, 18944)
    assert (s.num_attention_heads, s.num_kv_heads, s.attn_head_dim) == (28, 4, 128)
    assert s.qkv_bias and not s.attn_out_bias and not s.tie_word_embeddings
    assert s.max_context == 32768 and s.sliding_window is None and s.num_sliding_layers == 0
    assert s.stored_dtype == "bfloat16" and s.stored_format is None
    assert dict(s.sources)["num_kv_heads"] == "config.json: num_key_value_heads"
    # Qwen2.5-7B model card: 7.61B total, 6.53B non-embedding
    assert round(s.non_embedding_params / 1e9, 2) == 6.53


def test_gptq_config_gives_stored_format():
    s = spec("Qwen2.5-7B-Instruct-GPTQ-Int4")
    assert s.stored_format == "gptq-int4" and s.stored_dtype == "float16"


def test_mistral_v01_slides_every_layer():
    s = spec("Mistral-7B-v0.1")
    assert (s.sliding_window, s.num_sliding_layers) == (4096, 32)


def test_mixtral_experts_and_null_sliding_window():
    s = spec("Mixtral-8x7B-v0.1")
    assert (s.num_experts, s.experts_per_token, s.moe_intermediate_size) == (8, 2, 14336)
    assert s.sliding_window is None


def test_gemma3_nested_text_config_uses_defaults_and_counts_vision():
    s = spec("gemma-3-4b-it")
    assert (s.num_layers, s.hidden_size, s.num_attention_heads, s.num_kv_heads, s.head_dim) == (34, 2560, 8, 4, 256)
    assert s.vocab_size == 262208 and s.tie_word_embeddings and s.norms_per_layer == 4 and s.qk_norm
    assert (s.sliding_window, s.num_sliding_layers) == (1024, 34 - 34 // 6)
    # SigLIP-So400m tower (416,866,032) + projector 1152 x 2560 + soft-embedding norm 1152
    assert s.extra_params == 416_866_032 + 1152 * 2560 + 1152
    assert "Gemma3TextConfig default" in dict(s.sources)["num_attention_heads"]
    assert round(s.total_params / 1e9, 2) == 4.30  # model page: 4.3B


def test_deepseek_v2_lite_mla_moe():
    s = spec("DeepSeek-V2-Lite")
    assert s.is_mla and s.q_lora_rank is None and s.kv_lora_rank == 512
    assert (s.num_experts, s.num_shared_experts, s.experts_per_token, s.num_dense_layers) == (64, 2, 6, 1)
    assert s.kv_elements_per_token == 512 + 64
    assert round(s.total_params / 1e9, 1) == 15.7  # model card: 15.7B total
    assert round(s.active_params / 1e9, 1) in (2.4, 2.7)  # card: 2.4B activated (without embeddings)


def test_gpt_oss_20b():
    s = spec("gpt-oss-20b")
    assert s.stored_format == "mxfp4"
    assert (s.sliding_window, s.num_sliding_layers) == (128, 12)
    assert s.attention_sinks and s.router_bias and s.expert_bias and s.qkv_bias and s.attn_out_bias
    groups = {g.kind: g.params for g in s.tensor_groups()}
    assert groups[EXPERTS] == 32 * 3 * 2880 * 2880 * 24
    assert groups[OTHER] == 64 * 24  # one sink per head per layer
    assert abs(s.total_params / 20.91e9 - 1) < 0.001  # OpenAI model card: 20.91B


def test_phi3_sliding_window_not_applied():
    s = spec("Phi-3-mini-4k-instruct")
    assert s.sliding_window is None and s.max_context == 4096


def test_qwen1_halves_intermediate_size():
    s = spec("Qwen-7B")
    assert s.intermediate_size == 11008 and s.max_context == 8192 and s.qkv_bias
    assert s.load_buffer_bytes == 0  # the remote code since 2023-11-14 registers no causal-mask buffer


def test_qwen1_first_release_reads_gpt2_keys_and_counts_its_per_layer_mask_buffers():
    # August 2023 Qwen-7B-Chat: n_layer/n_embd/n_head/n_positions/ffn_hidden_size, and a max_positions² bool
    # buffer registered in every QWenAttention (modeling_qwen.py @04df5dd).
    s = spec("Qwen-7B-Chat-2023-08")
    new = spec("Qwen-7B")
    assert (s.num_layers, s.hidden_size, s.num_attention_heads, s.intermediate_size, s.vocab_size) == \
        (new.num_layers, new.hidden_size, new.num_attention_heads, new.intermediate_size, new.vocab_size)
    assert s.total_params == new.total_params
    assert s.load_buffer_bytes == 32 * 6144 * 6144 and "every layer" in s.load_buffer_note


def test_layer_types_win_over_family_rule():
    cfg = load("Mistral-7B-v0.1")
    cfg["layer_types"] = ["sliding_attention"] * 8 + ["full_attention"] * 24
    assert spec_from_config(cfg, "x").num_sliding_layers == 8


def test_qwen2_use_sliding_window_true_uses_max_window_layers():
    cfg = dict(load("Qwen2.5-7B-Instruct"), use_sliding_window=True, sliding_window=4096, max_window_layers=20)
    s = spec_from_config(cfg, "x")
    assert (s.sliding_window, s.num_sliding_layers) == (4096, 8)


@pytest.mark.parametrize("quant,expected", [
    ({"quant_method": "gptq", "bits": 8}, "gptq-int8"),
    ({"quant_method": "awq", "bits": 4}, "awq"),
    ({"quant_method": "fp8", "fmt": "e4m3"}, "fp8"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "nf4"),
    ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "int8"),
    ({"quant_method": "mxfp4"}, "mxfp4"),
    (None, None),
])
def test_stored_format_of(quant, expected):
    assert stored_format_of(quant) == expected


BASE = load("Llama-3.1-8B-Instruct")


@pytest.mark.parametrize("key,value,field", [
    ("num_hidden_layers", -1, "num_hidden_layers"),
    ("num_hidden_layers", 10**12, "num_hidden_layers"),
    ("num_attention_heads", 0, "num_attention_heads"),
    ("hidden_size", "4096", "hidden_size"),
    ("hidden_size", 10**8, "hidden_size"),
    ("vocab_size", 1.5, "vocab_size"),
    ("num_key_value_heads", 3, "key/value heads"),
    ("hidden_size", 4097, "not divisible"),
    ("tie_word_embeddings", "yes", "tie_word_embeddings"),
    ("intermediate_size", None, "intermediate_size"),
    ("model_type", "not_a_model", "not_a_model"),
    ("quantization_config", {"quant_method": "gptq", "bits": 5}, "bits"),
])
def test_hostile_values_raise_one_line_naming_the_field(key, value, field):
    cfg = dict(BASE, **{key: value})
    with pytest.raises(FitcheckError) as err:
        spec_from_config(cfg, "x")
    assert field in err.value.message and "\n" not in err.value.one_line()


def test_not_a_dict():
    with pytest.raises(FitcheckError):
        spec_from_config([1, 2], "x")


JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**13, 10**13) | st.floats(allow_nan=True)
                    | st.text(max_size=8), lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=8)
KEYS = ["num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size",
        "vocab_size", "head_dim", "max_position_embeddings", "tie_word_embeddings", "sliding_window", "layer_types",
        "num_local_experts", "num_experts_per_tok", "num_experts", "moe_intermediate_size", "n_routed_experts",
        "kv_lora_rank", "q_lora_rank", "first_k_dense_replace", "quantization_config", "torch_dtype", "text_config",
        "multi_query", "n_layer", "n_embd", "n_head", "d_model", "n_heads", "n_layers", "use_sliding_window"]
SMALL = st.one_of(st.integers(-2, 70), JSON)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model_type=st.sampled_from(SUPPORTED_ARCHITECTURES), values=st.dictionaries(st.sampled_from(KEYS), SMALL))
def test_arbitrary_configs_raise_only_fitcheck_error(model_type, values):
    cfg = dict(BASE if values.get("hidden_size") is None else {}, model_type=model_type, **values)
    if model_type in ("gemma3", "llama4") and isinstance(values.get("text_config"), dict):
        cfg["text_config"] = dict(values["text_config"])
    try:
        s = spec_from_config(cfg, "x")
    except FitcheckError:
        return
    assert s.total_params >= s.active_params > 0
    assert s.embedding_params + s.non_embedding_params == s.total_params


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=10), JSON, max_size=6))
def test_random_dicts_raise_only_fitcheck_error(cfg):
    try:
        spec_from_config(cfg, "x")
    except FitcheckError:
        pass


@pytest.mark.parametrize("value, shown", [
    (1e300, "num_hidden_layers = 1e+300 is out of range"),
    (10**300, "num_hidden_layers = ~1e300 is out of range"),
    (-(10**300), "num_hidden_layers = ~-1e300 is out of range"),
    ("x" * 500, "num_hidden_layers must be a whole number, not 'xxxx"),
])
def test_absurd_values_are_shown_short(value, shown):
    with pytest.raises(FitcheckError) as err:
        spec_from_config(dict(BASE, num_hidden_layers=value), "x")
    assert shown in err.value.message and len(err.value.message) < 120, err.value.message


def test_long_model_type_is_shown_short():
    with pytest.raises(FitcheckError) as err:
        spec_from_config(dict(BASE, model_type="m" * 1000), "x")
    assert len(err.value.message) < 200


# ---- the rotary tables vLLM and SGLang cache (hf_config._rope_tables) ----------------------------

@pytest.mark.parametrize("name, tables", [
    # llama3 scaling keeps max_position_embeddings
    ("Llama-3.1-8B-Instruct", ((131072, 128),)),
    # yarn: original_max_position_embeddings × factor (4,096 × 32); MLA rotates qk_rope_head_dim (4,096 × 40)
    ("gpt-oss-20b", ((131072, 64),)),
    ("DeepSeek-V2-Lite", ((163840, 64),)),
    # Gemma 3: the global layers' table linear-scaled × 8 over Gemma3TextConfig's 131,072 default, and the sliding
    # layers' own unscaled one
    ("gemma-3-4b-it", ((1048576, 256), (131072, 256))),
    ("Mistral-7B-v0.1", ((32768, 128),)),
])
def test_rope_tables_follow_vllms_get_rope(name, tables):
    assert spec(name).rope_tables == tables


def _rope(**config):
    base = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 32,
            "intermediate_size": 11008, "vocab_size": 32000, "max_position_embeddings": 4096}
    return spec_from_config({**base, **config}, "m").rope_tables


def test_rope_scaling_types_set_the_positions():
    assert _rope(rope_scaling={"rope_type": "linear", "factor": 4.0}) == ((16384, 128),)
    assert _rope(rope_scaling={"type": "dynamic", "factor": 2.0}) == ((8192, 128),)
    assert _rope(rope_scaling={"type": "dynamic", "alpha": 1000}) == ((4096, 128),)
    assert _rope(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}) == (
        (4096, 128),)
    # Phi-3's longrope: the short table of the original length and the long one
    assert _rope(rope_scaling={"type": "longrope", "short_factor": [1.0], "long_factor": [2.0]},
                 original_max_position_embeddings=1024) == ((5120, 128),)
    assert _rope(partial_rotary_factor=0.5) == ((4096, 64),)
    assert _rope() == ((4096, 128),)


def test_families_without_rotary_positions_have_no_tables():
    mpt = {"model_type": "mpt", "d_model": 4096, "n_heads": 32, "n_layers": 2, "vocab_size": 50432}
    assert spec_from_config(mpt, "m").rope_tables == ()
    # vLLM's baichuan.py: ALiBi unless hidden_size is 4096 (Baichuan2-13B)
    assert _rope(model_type="baichuan", hidden_size=5120, num_attention_heads=40) == ()
    assert _rope(model_type="baichuan") == ((4096, 128),)
    # ChatGLM rotates half of each head over seq_length
    glm = {"model_type": "chatglm", "num_layers": 2, "hidden_size": 4096, "num_attention_heads": 32,
           "kv_channels": 128, "ffn_hidden_size": 13696, "padded_vocab_size": 65024, "seq_length": 32768}
    assert spec_from_config(glm, "m").rope_tables == ((32768, 64),)


def test_partial_rotary_factor_inside_rope_parameters():
    # transformers 5 configs carry it in rope_parameters, where vLLM's get_rope reads it
    assert _rope(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}) == (
        (4096, 64),)


@pytest.mark.parametrize("factor", [0, -2.0, 1e300, float("inf"), float("nan"), 10**400, "8", True])
def test_an_absurd_rope_factor_is_one_clear_error(factor):
    with pytest.raises(FitcheckError, match="rope_scaling.factor"):
        _rope(rope_scaling={"rope_type": "linear", "factor": factor})
