"""spec_to_hf_config: ModelSpec -> transformers config dict, for every supported family.

The pure checks need neither torch nor transformers.  The last two tests build the config with
transformers (and the model on torch's meta device) and are skipped where those are absent.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

# benchmarks/ is a top-level folder of the repository, not part of the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.measure.hf_config import (  # noqa: E402
    FULL,
    SLIDING,
    SUPPORTED_ARCHITECTURES,
    UnsupportedSpec,
    layer_types,
    scaled_spec,
    spec_to_hf_config,
)
from benchmarks.measure.models import HAND_SPECS  # noqa: E402
from fitcheck.model.spec import ModelSpec  # noqa: E402

QWEN05 = HAND_SPECS["Qwen/Qwen2.5-0.5B"]
GEMMA2 = HAND_SPECS["google/gemma-2-2b"]
GEMMA3 = HAND_SPECS["google/gemma-3-1b-pt"]
MOE = HAND_SPECS["Qwen/Qwen1.5-MoE-A2.7B"]
MIXTRAL = HAND_SPECS["mistralai/Mixtral-8x7B-v0.1"]


def test_every_family_is_covered_by_a_hand_spec():
    covered = {spec.architecture for spec in HAND_SPECS.values()}
    assert covered == set(SUPPORTED_ARCHITECTURES)


@pytest.mark.parametrize("name", sorted(HAND_SPECS))
def test_config_carries_the_layer_shapes(name):
    spec = HAND_SPECS[name]
    config = spec_to_hf_config(spec)
    assert config["model_type"] == spec.architecture
    assert config["num_hidden_layers"] == spec.num_layers
    assert config["hidden_size"] == spec.hidden_size
    assert config["num_attention_heads"] == spec.num_attention_heads
    assert config["num_key_value_heads"] == spec.num_kv_heads
    assert config["vocab_size"] == spec.vocab_size
    assert config["tie_word_embeddings"] == spec.tie_word_embeddings
    assert config.get("head_dim", spec.hidden_size // spec.num_attention_heads) == spec.attn_head_dim


@pytest.mark.parametrize("name", sorted(HAND_SPECS))
def test_scaled_config_keeps_shapes_and_cuts_layers(name):
    spec = HAND_SPECS[name]
    full, two = spec_to_hf_config(spec), spec_to_hf_config(spec, 2)
    assert two["num_hidden_layers"] == 2
    assert {k: v for k, v in two.items() if k not in ("num_hidden_layers", "layer_types")} == \
        {k: v for k, v in full.items() if k not in ("num_hidden_layers", "layer_types")}


def test_scaled_spec_counts_embeddings_once_and_layers_per_layer():
    one, two = scaled_spec(QWEN05, 1), scaled_spec(QWEN05, 2)
    per_layer = two.total_params - one.total_params
    assert QWEN05.total_params == one.total_params + per_layer * (QWEN05.num_layers - 1)
    assert scaled_spec(QWEN05, None) is QWEN05


def test_family_specific_keys():
    assert spec_to_hf_config(HAND_SPECS["meta-llama/Llama-3.2-1B"])["attention_bias"] is False
    assert "attention_bias" not in spec_to_hf_config(QWEN05)  # Qwen2 hard-codes its biases
    assert spec_to_hf_config(HAND_SPECS["mistralai/Mistral-7B-v0.1"])["sliding_window"] == 4096
    mixtral = spec_to_hf_config(MIXTRAL)
    assert (mixtral["num_local_experts"], mixtral["num_experts_per_tok"]) == (8, 2)
    assert mixtral["intermediate_size"] == MIXTRAL.moe_intermediate_size
    moe = spec_to_hf_config(MOE)
    assert (moe["num_experts"], moe["num_experts_per_tok"], moe["moe_intermediate_size"],
            moe["shared_expert_intermediate_size"], moe["mlp_only_layers"]) == (60, 4, 1408, 5632, [])
    gemma3 = spec_to_hf_config(GEMMA3)
    assert gemma3["sliding_window"] == 512 and gemma3["head_dim"] == 256


def test_layer_types_follow_the_family_pattern():
    g2 = layer_types(GEMMA2)
    assert g2[:4] == [SLIDING, FULL, SLIDING, FULL] and g2.count(SLIDING) == 13
    g3 = layer_types(GEMMA3)
    assert [i for i, kind in enumerate(g3) if kind == FULL] == [5, 11, 17, 23]
    assert spec_to_hf_config(GEMMA3, 6)["layer_types"] == [SLIDING] * 5 + [FULL]
    assert scaled_spec(GEMMA3, 6).num_sliding_layers == 5
    assert layer_types(QWEN05) == [FULL] * QWEN05.num_layers


def test_a_sliding_count_the_family_cannot_lay_out_is_refused():
    with pytest.raises(UnsupportedSpec):
        layer_types(replace(GEMMA3, num_sliding_layers=20))


@pytest.mark.parametrize("change", [
    dict(architecture="deepseek_v3"),
    dict(kv_lora_rank=512, qk_rope_head_dim=64),
    dict(gated_mlp=False),
    dict(attn_out_bias=True),                      # Qwen2's o_proj has no bias
    dict(head_dim=128),                            # Qwen2 derives head_dim from hidden / heads
    dict(num_experts=8, experts_per_token=2, moe_intermediate_size=64),  # qwen2 is dense
])
def test_shapes_the_architecture_cannot_express_are_refused(change):
    with pytest.raises(UnsupportedSpec):
        spec_to_hf_config(replace(QWEN05, **change))


def test_layer_count_out_of_range_is_refused():
    with pytest.raises(UnsupportedSpec):
        spec_to_hf_config(QWEN05, QWEN05.num_layers + 1)


def test_generic_llama_spec_builds():
    spec = ModelSpec(name="x", num_layers=4, hidden_size=256, intermediate_size=512,
                     num_attention_heads=4, num_kv_heads=2, vocab_size=1000, architecture="llama")
    assert spec_to_hf_config(spec)["head_dim"] == 64


@pytest.mark.parametrize("name", sorted(HAND_SPECS))
def test_transformers_accepts_the_config(name):
    transformers = pytest.importorskip("transformers")
    config = dict(spec_to_hf_config(HAND_SPECS[name], 2))
    built = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
    assert built.num_hidden_layers == 2


@pytest.mark.parametrize("name", sorted(HAND_SPECS))
def test_built_model_has_the_spec_parameter_count(name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    spec = HAND_SPECS[name]
    config = dict(spec_to_hf_config(spec, 2))
    hf = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf)
    built = sum(p.numel() for p in model.parameters())
    # ModelSpec does not count Qwen2-MoE's shared_expert_gate (a hidden x 1 linear per layer).
    known_gap = spec.hidden_size * 2 if spec.architecture == "qwen2_moe" else 0
    assert built - scaled_spec(spec, 2).total_params in (0, known_gap)
