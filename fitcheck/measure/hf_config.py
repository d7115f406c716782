"""Map a :class:`~fitcheck.model.spec.ModelSpec` back to a transformers config dict.

Pure: no torch, no transformers.  The dict holds only keys that every transformers version
since 4.45 understands for the model type (``AutoConfig.for_model(**d)``), so a model built
from it with ``AutoModelForCausalLM.from_config`` has the spec's layer shapes exactly.  Values
that do not change memory (rope theta, norm eps, activation) keep the library defaults.

``num_layers`` builds a shallower model with the real layer shapes: per-layer numbers measured
on it are real, and embeddings / lm_head stay full size.  :func:`scaled_spec` gives the spec of
that shallower model, so its parameter count can be compared with the built one.
"""

from __future__ import annotations

from dataclasses import replace

from fitcheck.model.spec import ModelSpec

SUPPORTED_ARCHITECTURES = (
    "llama", "qwen2", "qwen3", "mistral", "mixtral", "qwen2_moe", "gemma2", "gemma3_text",
)
# A multimodal Gemma 3 config ('gemma3') nests the same text decoder as 'gemma3_text'.
_ALIASES = {"gemma3": "gemma3_text"}

# Local (sliding) : global layer pattern, as transformers lays out ``layer_types``:
#   Gemma2Config: layer i is sliding when (i + 1) % 2 != 0 (configuration_gemma2.py);
#   Gemma3TextConfig: sliding_window_pattern = 6, layer i is global when (i + 1) % 6 == 0
#   (configuration_gemma3.py).
_GLOBAL_EVERY = {"gemma2": 2, "gemma3_text": 6}

SLIDING = "sliding_attention"
FULL = "full_attention"


class UnsupportedSpec(ValueError):
    """The spec has a shape this transformers model type cannot express."""


def architecture_of(spec: ModelSpec) -> str:
    arch = _ALIASES.get(spec.architecture, spec.architecture)
    if arch not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedSpec(
            f"{spec.name}: architecture {spec.architecture!r} not supported "
            f"(one of {', '.join(SUPPORTED_ARCHITECTURES)})")
    return arch


def layer_types(spec: ModelSpec) -> list[str]:
    """Each layer's attention kind at full depth, checked against ``spec.num_sliding_layers``."""
    arch = architecture_of(spec)
    n = spec.num_layers
    if arch in _GLOBAL_EVERY:
        every = _GLOBAL_EVERY[arch]
        kinds = [FULL if (i + 1) % every == 0 else SLIDING for i in range(n)]
    elif spec.sliding_window and spec.num_sliding_layers == n:
        kinds = [SLIDING] * n
    else:
        kinds = [FULL] * n
    sliding = kinds.count(SLIDING)
    expected = spec.num_sliding_layers if spec.sliding_window else 0
    if sliding != expected:
        raise UnsupportedSpec(
            f"{spec.name}: {arch} lays out {sliding} sliding layers of {n}, "
            f"spec says {expected}")
    return kinds


def scaled_spec(spec: ModelSpec, num_layers: int | None) -> ModelSpec:
    """The spec of the model built with only the first ``num_layers`` layers."""
    if num_layers is None or num_layers == spec.num_layers:
        return spec
    if not 1 <= num_layers <= spec.num_layers:
        raise UnsupportedSpec(f"{spec.name}: num_layers {num_layers} not in 1..{spec.num_layers}")
    kinds = layer_types(spec)[:num_layers]
    return replace(
        spec,
        num_layers=num_layers,
        num_sliding_layers=kinds.count(SLIDING) if spec.sliding_window else 0,
        num_dense_layers=min(spec.num_dense_layers, num_layers),
    )


def _check(condition: bool, spec: ModelSpec, arch: str, what: str) -> None:
    if not condition:
        raise UnsupportedSpec(f"{spec.name}: transformers {arch} cannot express {what}")


def spec_to_hf_config(spec: ModelSpec, num_layers: int | None = None) -> dict:
    """A transformers config dict (with ``model_type``) for ``spec``, optionally shallower."""
    arch = architecture_of(spec)
    built = scaled_spec(spec, num_layers)
    head_dim = spec.attn_head_dim
    _check(not spec.is_mla and not spec.num_linear_layers, spec, arch, "MLA or linear attention")
    _check(spec.gated_mlp, spec, arch, "a non-gated MLP")
    _check(not spec.norm_has_bias, spec, arch, "LayerNorm biases")

    config: dict = {
        "model_type": arch,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": built.num_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "max_position_embeddings": spec.max_context or 32768,
        "use_cache": True,
    }

    if arch in ("llama", "qwen3"):
        # LlamaAttention / Qwen3Attention: one ``attention_bias`` flag for q, k, v and o_proj.
        _check(spec.qkv_bias == spec.attn_out_bias, spec, arch,
               "q/k/v bias differing from o_proj bias")
        config["attention_bias"] = spec.qkv_bias
        config["head_dim"] = head_dim
        if arch == "llama":
            config["mlp_bias"] = spec.mlp_bias
        else:
            _check(spec.qk_norm, spec, arch, "no q/k norm (Qwen3 always has it)")
            _check(not spec.mlp_bias, spec, arch, "MLP biases")
    elif arch == "qwen2":
        # Qwen2Attention hard-codes bias=True on q/k/v and False on o_proj; head_dim is
        # hidden_size // num_attention_heads (modeling_qwen2.py).
        _check(spec.qkv_bias and not spec.attn_out_bias, spec, arch, "its q/k/v bias layout")
        _check(head_dim * spec.num_attention_heads == spec.hidden_size, spec, arch,
               "head_dim != hidden_size / heads")
        _check(not spec.mlp_bias, spec, arch, "MLP biases")
    elif arch in ("mistral", "mixtral"):
        _check(not (spec.qkv_bias or spec.attn_out_bias or spec.mlp_bias), spec, arch, "biases")
        config["head_dim"] = head_dim
        config["sliding_window"] = spec.sliding_window
    elif arch in ("gemma2", "gemma3_text"):
        _check(not (spec.qkv_bias or spec.attn_out_bias or spec.mlp_bias), spec, arch, "biases")
        _check(spec.norms_per_layer == 4, spec, arch, "other than 4 norms per layer")
        _check((arch == "gemma3_text") == spec.qk_norm, spec, arch, "this q/k norm setting")
        config["head_dim"] = head_dim
        config["sliding_window"] = spec.sliding_window
        # Scaling only changes memory, not the score scale: keep the real query_pre_attn_scalar
        # default of the 2B/9B and 1B/4B models (= head_dim).
        config["query_pre_attn_scalar"] = head_dim
        config["layer_types"] = layer_types(spec)[:built.num_layers]

    if arch not in ("gemma2", "gemma3_text"):
        _check(spec.norms_per_layer == 2, spec, arch, "other than 2 norms per layer")
        _check(arch == "qwen3" or not spec.qk_norm, spec, arch, "q/k norms")
    if arch in ("llama", "qwen2", "qwen3"):
        _check(not spec.sliding_window or spec.num_sliding_layers == 0, spec, arch,
               "sliding-window layers")

    if spec.is_moe:
        _check(arch in ("mixtral", "qwen2_moe"), spec, arch, "mixture of experts")
        _check(not (spec.router_bias or spec.expert_bias), spec, arch, "router/expert biases")
    else:
        _check(arch not in ("mixtral", "qwen2_moe"), spec, arch, "a dense model")

    if arch == "mixtral":
        # Every Mixtral layer is sparse; each expert's width is ``intermediate_size``.
        _check(spec.num_dense_layers == 0 and spec.num_shared_experts == 0, spec, arch,
               "dense layers or shared experts")
        config["intermediate_size"] = spec.moe_intermediate_size or spec.intermediate_size
        config["num_local_experts"] = spec.num_experts
        config["num_experts_per_tok"] = spec.experts_per_token
    elif arch == "qwen2_moe":
        # Qwen2MoeSparseMoeBlock: routed experts of moe_intermediate_size, one shared expert of
        # shared_expert_intermediate_size behind a 1-wide sigmoid gate; layers listed in
        # mlp_only_layers keep a dense MLP of intermediate_size (modeling_qwen2_moe.py).
        _check(spec.num_shared_experts in (0, 1), spec, arch, "more than one shared expert")
        _check(spec.qkv_bias and not spec.attn_out_bias, spec, arch, "its q/k/v bias layout")
        _check(head_dim * spec.num_attention_heads == spec.hidden_size, spec, arch,
               "head_dim != hidden_size / heads")
        _check(spec.num_shared_experts == 1, spec, arch, "no shared expert")
        config.update(
            num_experts=spec.num_experts,
            num_experts_per_tok=spec.experts_per_token,
            moe_intermediate_size=spec.moe_intermediate_size,
            shared_expert_intermediate_size=(spec.shared_expert_intermediate_size
                                             or spec.moe_intermediate_size),
            decoder_sparse_step=1,
            mlp_only_layers=list(range(built.num_dense_layers)),
            norm_topk_prob=False,
        )
    return config
