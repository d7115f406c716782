"""The model shapes the measured cases use, as :class:`fitcheck.model.spec.ModelSpec`.

The project's catalog (``fitcheck.model.catalog``, what ``resolve_model`` reads for a full
catalog id) is the first choice.  The specs
below are transcribed by hand from each model's config.json so the benchmark also works before
the catalog exists, and they are the cross-check when it does: :func:`spec_for` uses the catalog
spec only when it agrees with the hand spec on every field that shapes memory.

Sources:
* benchmarks/data/calibration/model-configs.json (config.json transcriptions) for the
  Qwen2.5, Qwen3, Llama 3.x, Mistral, Mixtral and Gemma-2 shape numbers.
* SmolLM2-135M: huggingface.co/HuggingFaceTB/SmolLM2-135M/blob/main/config.json (576 hidden,
  30 layers, 9/3 heads, 1536 MLP, vocab 49152, tied) -> 134,515,008 params as counted here.
* SmolLM2-360M: huggingface.co/HuggingFaceTB/SmolLM2-360M/blob/main/config.json (960 hidden,
  32 layers, 15/5 heads, 2560 MLP, vocab 49152, tied) -> 361,821,120 params ("362M").
* Qwen1.5-MoE-A2.7B: huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json (60 experts,
  top-4, moe_intermediate 1408, shared expert 5632, MHA 16 heads) -> 14.3B total as published.
* Gemma-2-2B: huggingface.co/google/gemma-2-2b/blob/main/config.json -> 2,614,341,888 params.
* Gemma-3-1B: huggingface.co/google/gemma-3-1b-pt/blob/main/config.json (1152 hidden, 26
  layers, 4/1 heads, head_dim 256, 6912 MLP, vocab 262144, window 512, 5 local : 1 global)
  -> 999,885,952 params, equal to keras-hub gemma3_presets.py "gemma3_1b".
"""

from __future__ import annotations

from fitcheck.model.spec import ModelSpec

# Fields that decide how much memory a model takes; the catalog must agree on all of them.
SHAPE_FIELDS = (
    "num_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_kv_heads",
    "vocab_size", "attn_head_dim", "tie_word_embeddings", "gated_mlp", "qkv_bias",
    "attn_out_bias", "mlp_bias", "norms_per_layer", "qk_norm", "num_experts",
    "experts_per_token", "moe_intermediate_size", "num_shared_experts",
    "shared_expert_intermediate_size", "num_dense_layers", "sliding_window",
    "num_sliding_layers",
)

_QWEN25_COMMON = dict(architecture="qwen2", family="qwen2.5", qkv_bias=True, max_context=32768)
_LLAMA3_COMMON = dict(architecture="llama", family="llama3", max_context=131072)
_SMOLLM2_COMMON = dict(architecture="llama", family="smollm2", vocab_size=49152,
                       tie_word_embeddings=True, max_context=8192)

HAND_SPECS: dict[str, ModelSpec] = {spec.name: spec for spec in (
    ModelSpec(name="HuggingFaceTB/SmolLM2-135M", num_layers=30, hidden_size=576,
              intermediate_size=1536, num_attention_heads=9, num_kv_heads=3, head_dim=64,
              **_SMOLLM2_COMMON),
    ModelSpec(name="HuggingFaceTB/SmolLM2-360M", num_layers=32, hidden_size=960,
              intermediate_size=2560, num_attention_heads=15, num_kv_heads=5, head_dim=64,
              **_SMOLLM2_COMMON),
    ModelSpec(name="Qwen/Qwen2.5-0.5B", num_layers=24, hidden_size=896, intermediate_size=4864,
              num_attention_heads=14, num_kv_heads=2, head_dim=64, vocab_size=151936,
              tie_word_embeddings=True, **_QWEN25_COMMON),
    ModelSpec(name="Qwen/Qwen2.5-1.5B", num_layers=28, hidden_size=1536, intermediate_size=8960,
              num_attention_heads=12, num_kv_heads=2, head_dim=128, vocab_size=151936,
              tie_word_embeddings=True, **_QWEN25_COMMON),
    ModelSpec(name="Qwen/Qwen2.5-7B", num_layers=28, hidden_size=3584, intermediate_size=18944,
              num_attention_heads=28, num_kv_heads=4, head_dim=128, vocab_size=152064,
              tie_word_embeddings=False, **_QWEN25_COMMON),
    ModelSpec(name="Qwen/Qwen3-0.6B", num_layers=28, hidden_size=1024, intermediate_size=3072,
              num_attention_heads=16, num_kv_heads=8, head_dim=128, vocab_size=151936,
              tie_word_embeddings=True, qk_norm=True, architecture="qwen3", family="qwen3",
              max_context=40960),
    ModelSpec(name="meta-llama/Llama-3.2-1B", num_layers=16, hidden_size=2048,
              intermediate_size=8192, num_attention_heads=32, num_kv_heads=8, head_dim=64,
              vocab_size=128256, tie_word_embeddings=True, **_LLAMA3_COMMON),
    ModelSpec(name="meta-llama/Llama-3.1-8B", num_layers=32, hidden_size=4096,
              intermediate_size=14336, num_attention_heads=32, num_kv_heads=8, head_dim=128,
              vocab_size=128256, tie_word_embeddings=False, **_LLAMA3_COMMON),
    ModelSpec(name="mistralai/Mistral-7B-v0.1", num_layers=32, hidden_size=4096,
              intermediate_size=14336, num_attention_heads=32, num_kv_heads=8, head_dim=128,
              vocab_size=32000, tie_word_embeddings=False, sliding_window=4096,
              num_sliding_layers=32, architecture="mistral", family="mistral",
              max_context=32768),
    ModelSpec(name="mistralai/Mixtral-8x7B-v0.1", num_layers=32, hidden_size=4096,
              intermediate_size=14336, num_attention_heads=32, num_kv_heads=8, head_dim=128,
              vocab_size=32000, tie_word_embeddings=False, num_experts=8, experts_per_token=2,
              moe_intermediate_size=14336, architecture="mixtral", family="mixtral",
              max_context=32768),
    ModelSpec(name="Qwen/Qwen1.5-MoE-A2.7B", num_layers=24, hidden_size=2048,
              intermediate_size=5632, num_attention_heads=16, num_kv_heads=16, head_dim=128,
              vocab_size=151936, tie_word_embeddings=False, qkv_bias=True, num_experts=60,
              experts_per_token=4, moe_intermediate_size=1408, num_shared_experts=1,
              shared_expert_intermediate_size=5632, architecture="qwen2_moe",
              family="qwen1.5-moe", max_context=8192),
    ModelSpec(name="google/gemma-2-2b", num_layers=26, hidden_size=2304, intermediate_size=9216,
              num_attention_heads=8, num_kv_heads=4, head_dim=256, vocab_size=256000,
              tie_word_embeddings=True, norms_per_layer=4, sliding_window=4096,
              num_sliding_layers=13, architecture="gemma2", family="gemma2", max_context=8192),
    ModelSpec(name="google/gemma-3-1b-pt", num_layers=26, hidden_size=1152,
              intermediate_size=6912, num_attention_heads=4, num_kv_heads=1, head_dim=256,
              vocab_size=262144, tie_word_embeddings=True, norms_per_layer=4, qk_norm=True,
              sliding_window=512, num_sliding_layers=22, architecture="gemma3_text",
              family="gemma3", max_context=32768),
)}


def shape_differences(a: ModelSpec, b: ModelSpec) -> list[str]:
    """Names of the memory-shaping fields on which two specs differ."""
    return [name for name in SHAPE_FIELDS if getattr(a, name) != getattr(b, name)]


def _catalog_spec(hf_id: str) -> ModelSpec | None:
    """The catalog's spec for this exact id, else None.

    Only the shipped catalog is consulted (``get_entry``), never ``resolve_model``'s Hub
    fallback: a measurement must not depend on the network.
    """
    try:
        from fitcheck.model.catalog import get_entry
    except ImportError:  # catalog not there (yet)
        return None
    try:
        entry = get_entry(hf_id)
    except Exception:  # noqa: BLE001 - a broken catalog means "use the hand spec"
        return None
    return entry.spec if entry is not None else None


def spec_for(hf_id: str) -> tuple[ModelSpec, str]:
    """The spec to build ``hf_id`` from, and where it came from ('catalog' or 'hand ...')."""
    hand = HAND_SPECS.get(hf_id)
    catalog = _catalog_spec(hf_id)
    if hand is None:
        if catalog is None:
            raise KeyError(f"no spec for {hf_id!r}: not in the catalog nor in HAND_SPECS")
        return catalog, "catalog"
    if catalog is None:
        return hand, "hand"
    differing = shape_differences(hand, catalog)
    if differing:
        return hand, "hand (catalog differs: " + ",".join(differing) + ")"
    # Keep the hand spec's architecture if the catalog left it blank: the config builder needs it.
    if not catalog.architecture:
        return hand, "hand (catalog lacks architecture)"
    return catalog, "catalog"


__all__ = ["HAND_SPECS", "SHAPE_FIELDS", "shape_differences", "spec_for"]
