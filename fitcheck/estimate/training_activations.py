"""Activation memory of one training step: what the forward pass saves for backward.

Per decoder layer, counted from the real block (after Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", section 4.1, which gives
s·b·h·(34 + 5·a·s/h) bytes for a GPT block with a 4h GeLU MLP and dropout; here the block's own
shapes replace the GPT ones).  Saved per token, in the compute dtype:

  the two norms' inputs and outputs (input norm, post-attention norm) ............ 4 × h
  q (after rotary), k, v (GQA: kv_heads × head_dim each) ......................... q + 2·kv
  attention output (also o_proj's input) ......................................... q
  MLP: gate output (SiLU's input), SiLU output, up output, their product
       (down_proj's input); a plain MLP keeps up output and activation ........... 4·I (3·I)
  LoRA: what the adapter branches save beyond the base (lora.adapter_saved_bytes_per_token:
       fp32 input copies when the adapters are fp32 on a 16-bit base, dropout copies + masks)

Attention: flash-attention 2 and PyTorch SDPA (flash / memory-efficient kernels) keep only the
output and a per-head fp32 logsumexp, no s×s matrix (Dao 2023).  Eager attention keeps the
softmax probabilities: transformers computes softmax in fp32 and casts back (modeling_llama.py
eager_attention_forward), so heads × s × (4 + 2) bytes per token.

Gradient checkpointing (transformers `gradient_checkpointing_enable`, one checkpoint per decoder
layer): each layer keeps only its input (h per token); backward recomputes one layer at a time,
so one layer's activations (plus the gradient flowing through it) exist at once.

The loss: logits over the vocabulary, plus the copies the loss function makes (see
`logits_bytes_per_token`).
"""

from __future__ import annotations

from dataclasses import dataclass

# MOE_IMBALANCE: transformers' MoE blocks run experts one after another and the busiest expert
# gets more than the mean share of tokens (the inference estimator uses the same factor).
from fitcheck.estimate.activations import MOE_IMBALANCE, _attn_dims, _ffn_width_per_token
from fitcheck.model.spec import ModelSpec


@dataclass(frozen=True)
class ActivationBytes:
    saved: int          # kept across the whole forward/backward (all layers, or layer inputs)
    recompute: int      # one layer's activations during backward (checkpointing), else 0
    logits: int         # logits and the loss function's copies
    detail: str


def layer_bytes_per_token(spec: ModelSpec, *, attention: str, seq_len: int, act_bytes: int,
                          lora_saved_bytes: int = 0) -> int:
    """Bytes one token leaves saved in one decoder layer (forward, for backward)."""
    h = spec.hidden_size
    q, kv = _attn_dims(spec)
    ffn = _ffn_width_per_token(spec, dispatch_imbalance=MOE_IMBALANCE)
    mlp = (4 if spec.gated_mlp else 3) * ffn
    elements = 4 * h + 2 * q + 2 * kv + mlp
    b = elements * act_bytes
    if spec.is_moe:
        b += spec.num_experts * 4 * 2  # router logits and softmax in fp32
    if attention == "eager":
        b += spec.num_attention_heads * seq_len * (4 + 2)
    else:
        b += spec.num_attention_heads * 4  # fp32 logsumexp per head
    # peft's adapter branches (fp32 input casts, dropout copies): lora.adapter_saved_bytes_per_token.
    b += lora_saved_bytes
    return int(b)


def logits_bytes_per_token(spec: ModelSpec, *, act_bytes: int, upcast: bool, shifts_logits: bool) -> int:
    """Peak bytes of the lm_head output and the cross-entropy loss, per token.

    - the logits in the compute dtype (vocab × act_bytes);
    - a contiguous shifted copy when the model's code shifts logits before the loss (Qwen1's
      modeling_qwen.py: `lm_logits[..., :-1, :].contiguous()`; transformers >= 4.46 shifts the
      labels instead, loss_utils.ForCausalLMLoss);
    - `upcast`: an fp32 copy and fp32 log-softmax output (transformers' ForCausalLMLoss does
      `logits.float()`; PyTorch autocast runs cross_entropy in fp32), else the log-softmax in the
      compute dtype (a model run entirely in 16 bits, as DeepSpeed runs it, whose code does not
      upcast).
    """
    v = spec.vocab_size
    b = v * act_bytes
    if shifts_logits:
        b += v * act_bytes
    b += v * 8 if upcast else v * act_bytes
    if upcast and not shifts_logits:
        # Backward of the fp32 loss: the saved log-softmax output, nll_loss's full-size gradient
        # and log_softmax_backward's output, 3 × 4 B, once the 16-bit logits are gone.
        b = max(b, v * 12)
    return b


def training_activations(spec: ModelSpec, *, tokens_per_gpu: int, seq_len: int, attention: str, act_bytes: int,
                         checkpointing: bool, upcast_loss: bool, shifts_logits: bool,
                         lora_saved_bytes: int = 0) -> ActivationBytes:
    """Activation bytes on one GPU for a micro-batch of `tokens_per_gpu` tokens (batch × seq_len)."""
    h = spec.hidden_size
    L = spec.num_layers
    per_layer = layer_bytes_per_token(spec, attention=attention, seq_len=seq_len, act_bytes=act_bytes,
                                      lora_saved_bytes=lora_saved_bytes)
    # Outside the layers: the embedding output and the final norm's input and output.
    outside = 3 * h * act_bytes
    if checkpointing:
        saved = tokens_per_gpu * (L * h * act_bytes + outside)
        # One layer recomputed, plus the gradient w.r.t. its output and input.
        recompute = tokens_per_gpu * (per_layer + 2 * h * act_bytes)
        how = (f"checkpointing: {L} layer inputs × {h} × {act_bytes} B per token; one layer recomputed "
               f"({per_layer:,} B/token)")
    else:
        saved = tokens_per_gpu * (L * per_layer + outside)
        recompute = 0
        how = f"{L} layers × {per_layer:,} B per token saved for backward"
    logits = tokens_per_gpu * logits_bytes_per_token(spec, act_bytes=act_bytes, upcast=upcast_loss,
                                                     shifts_logits=shifts_logits)
    attn = {"eager": "eager attention keeps heads × seq softmax probabilities",
            "flash": "flash attention: no seq² matrix", "sdpa": "SDPA (flash/memory-efficient): no seq² matrix"}[attention]
    return ActivationBytes(int(saved), int(recompute), int(logits), f"{how}; {attn}; {tokens_per_gpu:,} tokens per GPU")
