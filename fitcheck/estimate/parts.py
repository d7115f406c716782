"""Parts every engine's memory model is made of: the weights' component, the KV cache's words, the activation
dtype.  Pure; no engine is named here (each engine module, fitcheck.engines.*, composes them).
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

from fitcheck.estimate.allocator import load_waste_runs
from fitcheck.estimate.formats import weight_format, weight_format_or_none
from fitcheck.estimate.kv_cache import KvLayout, layer_counts, sliding_kept
from fitcheck.estimate.result import WEIGHTS, Component
from fitcheck.estimate.weights import WeightBytes, weight_tensor_runs
from fitcheck.model.spec import ModelSpec


class KvWords(KvLayout, Protocol):
    """A KV layout with the names its words use (fitcheck.engines.base.Engine)."""

    @property
    def title(self) -> str: ...

    @property
    def kv_mla_latent(self) -> bool: ...


@functools.lru_cache(maxsize=2048)  # every catalog model × the precisions tried stays (`models --fits`)
def weight_load_waste(spec: ModelSpec, precision: str) -> int:
    """Bytes the caching allocator's segments hold beyond a model's weights once loaded."""
    return load_waste_runs(weight_tensor_runs(spec, weight_format(precision)))


def act_bytes(precision: str) -> int:
    """Bytes of one activation element: fp32 weights compute in fp32, every other format in 16 bits."""
    return 4 if precision == "fp32" else 2


def stored_weight_total(spec: ModelSpec, precision: str, computed: int) -> tuple[int, str]:
    """Exact stored bytes when the checkpoint's own format is what will be loaded."""
    stored = weight_format_or_none(spec.stored_format) if spec.stored_format else None
    if spec.stored_weight_bytes and stored and stored.name == precision:
        return spec.stored_weight_bytes, "exact, from the checkpoint header"
    return computed, ""


def stored_scale(spec: ModelSpec, precision: str, wb: WeightBytes) -> float:
    """Exact stored bytes ÷ computed bytes (1.0 unless the checkpoint's own format is loaded)."""
    total, _ = stored_weight_total(spec, precision, wb.total)
    return total / wb.total if wb.total else 1.0


def weights_component(spec: ModelSpec, plan: Any, wb: WeightBytes, share: float = 1.0) -> Component:
    total, exact = stored_weight_total(spec, plan.precision, wb.total)
    fmt = weight_format(plan.precision)
    parts = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in wb.by_group if v >= 2**20)
    detail = f"{spec.total_params / 1e9:.2f}B params as {fmt.description}"
    if fmt.family not in ("float", "gguf"):
        detail += "; embeddings, lm_head and norms stay 16-bit"
    if exact:
        detail += f"; {exact}"
    if share != 1.0:
        detail += f"; this device holds {share:.0%}"
    return Component(WEIGHTS, int(total * share), f"{detail} (GiB by group: {parts})")


def kv_detail(spec: ModelSpec, plan: Any, engine: KvWords, share: float, *, prompt_tokens: int | None = None,
              transformers_version: str | None = None, batched_tokens: int | None = None) -> str:
    """The KV cache's sum in words, from the same rule as its bytes (the engine's sliding_cache and layer slots)."""
    per = engine.kv_elements_per_token(spec)
    how = ("MLA latent" if spec.is_mla and engine.kv_mla_latent else
           "MLA expanded per head" if spec.is_mla else f"2 × {spec.num_kv_heads} KV heads × {spec.attn_head_dim}")
    kept = sliding_kept(spec, engine, tokens=plan.context, prompt_tokens=prompt_tokens,
                        transformers_version=transformers_version, batched_tokens=batched_tokens)
    full, sliding = layer_counts(spec)
    padded = ""
    if sliding:
        slots = engine.kv_layer_slots(spec)
        if slots != (full, sliding):
            padded = (f"; {engine.title}'s hybrid KV-cache manager pads the {full} full-attention and {sliding} "
                      f"sliding-window layers to {slots[0]} and {slots[1]} (KV-cache groups of one size)")
        full, sliding = slots
    if sliding:
        parts = [f"{full} full-attention layers × {kept.full_tokens:,} tokens"] if full else []
        parts.append(f"{sliding} sliding-window layers × {kept.sliding_tokens:,} tokens")
        layers = f"({' + '.join(parts)})" if full else parts[0]
    else:
        layers = f"{spec.num_attention_layers} layers × {plan.context:,} tokens"
    text = f"{layers} × {how} = {per} elements/token × {plan.batch} seq × {plan.kv_dtype}"
    if kept.why:
        text += f"; sliding-window layers: {kept.why}"
    text += padded
    if share != 1.0:
        text += f"; this device holds {share:.0%}"
    return text
