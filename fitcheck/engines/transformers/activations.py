"""Transient memory of one transformers forward pass (inference prefill).

Derived from the real block, not a constant: which tensors are alive at the peak of a decoder
layer, for the shapes of this model.

Hugging Face transformers (modeling_llama/qwen2.py, eager module graph, SDPA/flash attention so
no s×s score matrix): at the MLP peak these are alive, per token,
  the layer input (held by the caller's loop), the attention residual sum, its RMSNorm output,
  inputs_embeds (held by the model's forward) ............................ 4 × h
  act_fn(gate_proj(x)) (gate_proj's output is freed once act_fn returns), up_proj(x),
  and their product ....................................................... 3 × I
all in the activation dtype.  The attention phase holds the layer input, inputs_embeds, the
norm output, q/k/v, rotated q/k and the attention output: 4 × h + 3 × q_dim + 3 × kv_dim.
Checked against the Qwen2.5 speed benchmark (A100, transformers 4.46, max_memory_allocated):
Qwen2.5-7B at 30,720 prompt tokens leaves 4.1 GiB beyond weights and KV cache; the formula gives
30,720 × (3 × 18,944 + 4 × 3,584) × 2 B = 4.07 GiB.
"""

from __future__ import annotations

from fitcheck.estimate.activations import MOE_IMBALANCE, attn_dims, ffn_width_per_token
from fitcheck.model.spec import ModelSpec


def transformers_prefill_bytes(spec: ModelSpec, tokens: int, act_bytes: int, *, score_bytes: int = 0) -> int:
    """Peak transient bytes of a transformers forward over `tokens` tokens (all sequences).

    `score_bytes`: what eager attention adds to the attention phase (`eager_score_bytes`)."""
    h = spec.hidden_size
    ffn = ffn_width_per_token(spec, dispatch_imbalance=MOE_IMBALANCE)
    q, kv = attn_dims(spec)
    mlp_phase = 3 * ffn + 4 * h
    attn_phase = 4 * h + 3 * q + 3 * kv
    peak = max(tokens * mlp_phase * act_bytes, tokens * attn_phase * act_bytes + score_bytes)
    router = tokens * spec.num_experts * 4 if spec.is_moe else 0  # fp32 router logits
    return int(peak + router)


def eager_score_bytes(spec: ModelSpec, *, batch: int, prompt: int, act_bytes: int) -> int:
    """Bytes eager attention holds at its softmax, one layer at a time (the prefill's peak layer).

    transformers' eager_attention_forward (and LlamaAttention before 4.36):
    `attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling` (batch × heads ×
    prompt × prompt, compute dtype), then `softmax(attn_weights, dim=-1, dtype=torch.float32)
    .to(query.dtype)`: while the cast runs the scores, their fp32 softmax and the cast copy are
    alive (2 + 4 + 2 B per element in 16 bits; 4 + 4 B in fp32, where `.to` is a no-op).  The
    4-D additive causal mask (batch × 1 × prompt × prompt, compute dtype) lives through every layer.
    https://github.com/huggingface/transformers/blob/v4.46.0/src/transformers/models/llama/modeling_llama.py
    (LlamaAttention.forward); measured on the CPU, benchmarks/results/cpu-inference-peaks-2026-12-01.csv.
    """
    per_element = act_bytes + 4 + (act_bytes if act_bytes < 4 else 0)
    scores = batch * spec.num_attention_heads * prompt * prompt * per_element
    mask = batch * prompt * prompt * act_bytes
    return int(scores + mask)


def logits_bytes(spec: ModelSpec, positions: int) -> int:
    """fp32 logits for `positions` positions (transformers >= 4.45 keeps only the last one)."""
    return positions * spec.vocab_size * 4


def static_causal_mask_bytes(spec: ModelSpec, *, batch: int, act_bytes: int) -> tuple[int, int]:
    """(held, peak) bytes of transformers 4.38's full-size causal mask for Llama-family models.

    v4.38 LlamaModel keeps a `causal_mask` buffer of max_position_embeddings² bools and, in each
    forward, `_update_causal_mask` expands it: `self.causal_mask[None, None, :, :].repeat(batch_size,
    1, 1, 1).to(dtype) * min_dtype` -- batch × max_positions² in the compute dtype, held through the
    forward (the layers get a slice of it), with a second one alive while the product is made.
    https://github.com/huggingface/transformers/blob/v4.38.2/src/transformers/models/llama/modeling_llama.py
    (LlamaModel.__init__ and _update_causal_mask); measured on the CPU with 4.38.2
    (benchmarks/results/cpu-inference-peaks-2026-12-01.csv: a 1,024-token SmolLM2 prefill peaks at
    514 MiB above the weights, 2 × 256 MiB of it the expanded 8,192² fp32 mask).
    """
    n = spec.max_context or 0
    held = batch * n * n * act_bytes
    return held, 2 * held


