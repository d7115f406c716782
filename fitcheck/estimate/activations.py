"""Activation shapes every engine's forward shares: the feed-forward width one token materialises and the widths of
its attention projections (MoE and MLA included).  The engines' peaks are built from these
(fitcheck.engines.transformers.activations, fitcheck.engines.vllm.profile).
"""

from __future__ import annotations

from fitcheck.model.spec import ModelSpec

# MoE dispatch in transformers runs experts one after another on the tokens routed to each;
# the busiest expert gets more than the mean share T·k/E.  Factor 2 for routing imbalance.
MOE_IMBALANCE = 2.0


def ffn_width_per_token(spec: ModelSpec, *, dispatch_imbalance: float) -> float:
    """Feed-forward intermediate elements one token materialises at the MLP peak."""
    if not spec.is_moe:
        return float(spec.intermediate_size)
    routed = dispatch_imbalance * spec.experts_per_token / spec.num_experts * spec.moe_intermediate_size
    shared = (spec.shared_expert_intermediate_size or spec.moe_intermediate_size) * spec.num_shared_experts
    dense = spec.intermediate_size if spec.num_dense_layers else 0
    return max(routed + shared, float(dense))


def attn_dims(spec: ModelSpec) -> tuple[int, int]:
    """(q width, k+v width / 2) of one token's attention projections."""
    if spec.is_mla:
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        return spec.num_attention_heads * qk, spec.num_attention_heads * (qk + spec.v_head_dim) // 2
    d = spec.attn_head_dim
    return spec.num_attention_heads * d, spec.num_kv_heads * d


