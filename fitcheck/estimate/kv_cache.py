"""KV-cache bytes: grows with tokens and sequences; the only part of inference that does.

bytes = Σ over attention layers of (elements per token) × (tokens that layer keeps) × sequences
        × bytes per element
- GQA: elements per token = 2 × kv_heads × head_dim (K and V), head_dim explicit when given.
- Sliding-window layers (Mistral v0.1, Gemma 2/3, gpt-oss) keep what each engine keeps: its
  ``sliding_cache`` (fitcheck.engines.*).
- MLA (DeepSeek-V2/V3): engines that cache the compressed latent keep kv_lora_rank + qk_rope_head_dim per
  token per layer; the others full per-head K and V (the engine's ``kv_elements_per_token``).
- Linear-attention / SSM layers keep a constant state per sequence (fp32).

Which tokens and layers an engine keeps is the engine's (a :class:`KvLayout`); the sum is here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from fitcheck.estimate.formats import KV_DTYPE_BYTES
from fitcheck.model.spec import ModelSpec


@dataclass(frozen=True)
class SlidingCache:
    """Tokens per sequence held at the cache's peak by each full-attention and each sliding-window layer,
    and why (the text the breakdown shows: one source for the figure and the words)."""

    full_tokens: int
    sliding_tokens: int
    why: str


class KvLayout(Protocol):
    """How an engine lays out its KV cache (fitcheck.engines.base.Engine)."""

    def kv_elements_per_token(self, spec: ModelSpec) -> int: ...

    def kv_layer_slots(self, spec: ModelSpec) -> tuple[int, int]: ...

    def sliding_cache(self, spec: ModelSpec, *, tokens: int, prompt_tokens: int | None = None,
                      transformers_version: str | None = None, batched_tokens: int | None = None) -> SlidingCache: ...


def layer_counts(spec: ModelSpec) -> tuple[int, int]:
    """(full-attention, sliding-window) attention layers."""
    attn_layers = spec.num_attention_layers
    sliding = min(spec.num_sliding_layers, attn_layers) if spec.sliding_window else 0
    return attn_layers - sliding, sliding


def every_token(tokens: int, why: str) -> SlidingCache:
    """A sliding-window layer that keeps every token."""
    return SlidingCache(tokens, tokens, why)


def sliding_kept(spec: ModelSpec, engine: KvLayout, *, tokens: int, prompt_tokens: int | None = None,
                 transformers_version: str | None = None, batched_tokens: int | None = None) -> SlidingCache:
    """What ``engine`` keeps per sequence in each kind of layer (every token where the model has no window)."""
    if not spec.sliding_window or not spec.num_sliding_layers:
        return SlidingCache(tokens, tokens, "")
    return engine.sliding_cache(spec, tokens=tokens, prompt_tokens=prompt_tokens,
                                transformers_version=transformers_version, batched_tokens=batched_tokens)


def kv_cache_bytes(spec: ModelSpec, *, tokens: int, sequences: int, kv_dtype: str, engine: KvLayout,
                   layers: int | None = None, prompt_tokens: int | None = None,
                   transformers_version: str | None = None, batched_tokens: int | None = None) -> int:
    """KV-cache bytes for `sequences` sequences of `tokens` tokens each, at the cache's peak, as `engine` keeps them.

    `layers`: count only this many attention layers (partial offload, pipeline split); the
    sliding/full mix is kept in proportion.  `prompt_tokens`, `transformers_version`, `batched_tokens`: see
    the engine's ``sliding_cache`` (which tokens the sliding-window layers hold).
    """
    elem = KV_DTYPE_BYTES[kv_dtype]
    per_token = engine.kv_elements_per_token(spec)
    attn_layers = spec.num_attention_layers
    full: float
    sliding: float  # whole layers, or a share of them when `layers` is given
    full, sliding = engine.kv_layer_slots(spec)
    if layers is not None and attn_layers:
        share = min(layers, attn_layers) / attn_layers
        full, sliding = full * share, sliding * share
    kept = sliding_kept(spec, engine, tokens=tokens, prompt_tokens=prompt_tokens,
                        transformers_version=transformers_version, batched_tokens=batched_tokens)
    total = (full * kept.full_tokens + sliding * kept.sliding_tokens) * per_token * elem * sequences
    if spec.num_linear_layers and spec.linear_state_elements:
        lin = spec.num_linear_layers if layers is None else spec.num_linear_layers * min(layers, spec.num_layers) / spec.num_layers
        total += lin * spec.linear_state_elements * 4 * sequences
    return int(total)
