"""KV-cache bytes: grows with tokens and sequences; the only part of inference that does.

bytes = Σ over attention layers of (elements per token) × (tokens that layer keeps) × sequences
        × bytes per element
- GQA: elements per token = 2 × kv_heads × head_dim (K and V), head_dim explicit when given.
- Sliding-window layers keep at most `window` tokens (Mistral v0.1, Gemma 2/3, gpt-oss).
- MLA (DeepSeek-V2/V3): vLLM and llama.cpp cache the compressed latent (kv_lora_rank +
  qk_rope_head_dim per token per layer); transformers caches full per-head K and V.
- Linear-attention / SSM layers keep a constant state per sequence (fp32).
"""

from __future__ import annotations

from fitcheck.engines import ENGINES
from fitcheck.estimate.formats import KV_DTYPE_BYTES
from fitcheck.model.spec import ModelSpec


def kv_elements_per_token(spec: ModelSpec, engine: str) -> int:
    """Cached elements per token per full-attention layer, as `engine` stores them."""
    if spec.is_mla and not ENGINES[engine].kv_mla_latent:
        return spec.mla_expanded_kv_elements_per_token
    return spec.kv_elements_per_token


def kv_cache_bytes(spec: ModelSpec, *, tokens: int, sequences: int, kv_dtype: str, engine: str,
                   layers: int | None = None) -> int:
    """KV-cache bytes for `sequences` sequences of `tokens` tokens each.

    `layers`: count only this many attention layers (partial offload, pipeline split); the
    sliding/full mix is kept in proportion.
    """
    elem = KV_DTYPE_BYTES[kv_dtype]
    per_token = kv_elements_per_token(spec, engine)
    attn_layers = spec.num_attention_layers
    sliding = min(spec.num_sliding_layers, attn_layers) if spec.sliding_window else 0
    full = attn_layers - sliding
    if layers is not None and attn_layers:
        share = min(layers, attn_layers) / attn_layers
        full, sliding = full * share, sliding * share
    kept_sliding = tokens
    # transformers' DynamicCache keeps every token of sliding-window layers too (measured:
    # gemma-3-1b, 4,096-token prefill, 6 layers: 24 MiB held, the full-length figure).
    extra = ENGINES[engine].kv_sliding_extra
    if sliding and spec.sliding_window and extra is not None:
        kept_sliding = min(tokens, spec.sliding_window + extra)
    total = (full * tokens + sliding * kept_sliding) * per_token * elem * sequences
    if spec.num_linear_layers and spec.linear_state_elements:
        lin = spec.num_linear_layers if layers is None else spec.num_linear_layers * min(layers, spec.num_layers) / spec.num_layers
        total += lin * spec.linear_state_elements * 4 * sequences
    return int(total)
