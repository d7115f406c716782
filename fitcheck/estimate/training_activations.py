"""Activation memory of one training step: what the forward pass saves for backward.

Per decoder layer, counted from the real block (after Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", section 4.1, which gives
s·b·h·(34 + 5·a·s/h) bytes for a GPT block with a 4h GeLU MLP and dropout; here the block's own
shapes and what autograd really keeps replace the GPT ones).  Saved per token (b = bytes of the
compute dtype), checked tensor by tensor with torch.autograd.graph.saved_tensors_hooks:

  each RMSNorm: its input upcast to fp32 (4·h B, whatever b) and, if its weight trains, the
       normalised tensor (h·b); a LayerNorm its input (h·b) ....................... per norm
  q and k after rotary, v (GQA: kv_heads × head_dim), the attention output ........ (2·q + 2·kv)·b
  MLP: SiLU's input and the product's two factors (gated); a plain MLP's
       activation input .......................................................... 3·I·b (I·b)
  linear inputs, only for linears whose weight trains (a frozen LoRA base keeps none):
       the attention input h, the MLP input h, down_proj's input I ............... (2·h + I)·b
  LoRA: what the adapter branches save (lora.adapter_saved_bytes_per_token: fp32 input copies
       when the adapters are fp32 on a 16-bit base, dropout copies + masks; adapters in the
       compute dtype without dropout read the input itself: counted as a linear input above)

Attention: flash-attention 2 and PyTorch SDPA (flash / memory-efficient kernels) keep only the
output and a per-head fp32 logsumexp, no s×s matrix (Dao 2023).  Eager attention keeps the
softmax probabilities: transformers computes softmax in fp32 and casts back (modeling_llama.py
eager_attention_forward), so heads × s × (4 + b) bytes per token (4 in fp32), and the k/v
copies repeat_kv makes for GQA.

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
from fitcheck.estimate.activations import MOE_IMBALANCE, attn_dims, ffn_width_per_token
from fitcheck.model.spec import ModelSpec


@dataclass(frozen=True)
class ActivationBytes:
    saved: int          # kept across the whole forward/backward (all layers, or layer inputs)
    recompute: int      # one layer's activations during backward (checkpointing), else 0
    logits: int         # logits and the loss function's copies
    detail: str
    outputs_peak: bool = False  # the loss path peaks once the forward has returned (after_forward_bytes)


# Which tensor each linear role reads (linears reading one tensor save it once), and its width.
_INPUT_SITE = {
    "attn_q": "attn_in", "attn_k": "attn_in", "attn_v": "attn_in", "attn_qkv": "attn_in", "attn_q_a": "attn_in",
    "attn_kv_a_mqa": "attn_in", "attn_q_b": "q_latent", "attn_kv_b": "kv_latent",
    "attn_output": "attn_out",  # the attention output, which the attention kernel saves anyway
    "ffn_gate": "mlp_in", "ffn_up": "mlp_in", "ffn_gate_up": "mlp_in", "ffn_gate_exps": "mlp_in",
    "ffn_up_exps": "mlp_in", "ffn_gate_shexp": "mlp_in", "ffn_up_shexp": "mlp_in",
    "ffn_down": "mlp_mid", "ffn_down_exps": "mlp_mid", "ffn_down_shexp": "mlp_mid",
}
ALL_INPUT_SITES = frozenset(_INPUT_SITE.values())


def input_sites(roles) -> frozenset[str]:
    """The input tensors that linears of these roles keep for backward."""
    return frozenset(_INPUT_SITE[r] for r in roles if r in _INPUT_SITE)


def norm_bytes_per_token(spec: ModelSpec, act_bytes: int, trainable: bool) -> int:
    """What one norm keeps per token.

    RMSNorm (modeling_llama.py LlamaRMSNorm): x.to(fp32) is kept for the variance's backward (4 B
    per element whatever the compute dtype) plus the fp32 rsqrt; the normalised 16-bit tensor
    only when the norm's weight trains.  LayerNorm (models with norm biases) runs one kernel that
    keeps its input and the fp32 mean and rstd.
    """
    h = spec.hidden_size
    if spec.norm_has_bias:
        return h * act_bytes + 8
    return 4 * h + 4 + (h * act_bytes if trainable else 0)


def layer_bytes_per_token(spec: ModelSpec, *, attention: str, seq_len: int, act_bytes: int,
                          trainable_base: bool = True, saved_inputs: frozenset[str] = ALL_INPUT_SITES,
                          lora_saved_bytes: int = 0) -> int:
    """Bytes one token leaves saved in one decoder layer (forward, for backward).

    Autograd keeps a tensor only for a gradient someone needs: a linear keeps its input only when
    its weight trains (`saved_inputs`: the input tensors of trainable linears, or of LoRA branches
    that read the input as it is), and a norm keeps its normalised input only when its own weight
    trains (`trainable_base`).  Measured per op with torch.autograd.graph.saved_tensors_hooks on
    Qwen2.5-0.5B and SmolLM2-135M (transformers 5.24, fp32 and bf16, full and LoRA): exact.
    """
    h = spec.hidden_size
    b = act_bytes
    q, kv = attn_dims(spec)
    ffn = ffn_width_per_token(spec, dispatch_imbalance=MOE_IMBALANCE)
    total: float = spec.norms_per_layer * norm_bytes_per_token(spec, b, trainable_base)
    if spec.qk_norm:
        total += 4 * (q + kv) + ((q + kv) * b if trainable_base else 0)  # per-head q/k norms, same rule
    # Attention: q and k after rotary, v and the output (o_proj reads that same tensor).  Eager
    # attention matmuls k and v after repeat_kv (GQA copies at q width) and keeps the fp32
    # softmax, plus its cast to the compute dtype when that is 16-bit (modeling_llama.py
    # eager_attention_forward).
    if attention == "eager":
        total += 4 * q * b + spec.num_attention_heads * seq_len * (4 + (b if b < 4 else 0))
    else:
        total += (2 * q + 2 * kv) * b + spec.num_attention_heads * 4  # fp32 logsumexp per head
    # MLP: the activation keeps its input; the product keeps both factors (gate·up), or the
    # plain MLP's activation keeps the up projection.
    total += (3 if spec.gated_mlp else 1) * ffn * b
    # mlp_mid: down_proj's input (the product), or a plain MLP's activation output.
    width = {"attn_in": h, "mlp_in": h, "mlp_mid": ffn, "attn_out": 0,
             "q_latent": spec.q_lora_rank or 0, "kv_latent": spec.kv_lora_rank}
    total += sum(width[site] for site in saved_inputs) * b
    if spec.is_moe:
        total += spec.num_experts * 4 * 2  # router logits and softmax in fp32
    # peft's adapter branches (fp32 input casts, dropout copies): lora.adapter_saved_bytes_per_token.
    total += lora_saved_bytes
    return int(total)


def logits_bytes_per_token(spec: ModelSpec, *, act_bytes: int, upcast: bool, shifts_logits: bool,
                           shift_copy_fp32: bool = False) -> int:
    """Peak bytes of the lm_head output and the cross-entropy loss, per token.

    - the logits in the compute dtype (vocab × act_bytes);
    - a contiguous shifted copy when the model's code shifts logits before the loss (Qwen1's
      modeling_qwen.py: `lm_logits[..., :-1, :].contiguous()`; transformers >= 4.46 shifts the
      labels instead, loss_utils.ForCausalLMLoss);
    - `upcast`: an fp32 copy and fp32 log-softmax output (transformers' ForCausalLMLoss does
      `logits.float()`; PyTorch autocast runs cross_entropy in fp32), else the log-softmax in the
      compute dtype (a model run entirely in 16 bits, as DeepSpeed runs it, whose code does not
      upcast);
    - `shift_copy_fp32`: transformers 4.46–4.48's ForCausalLMLoss shifted the fp32 upcast with a
      contiguous copy (`logits[..., :-1, :].contiguous()`, removed by transformers#35646) — a copy
      only at batch > 1 (at batch 1 the slice is contiguous and `.contiguous()` returns it): while
      log_softmax runs, the 16-bit logits (the model's frame), the fp32 upcast (the loss's frame),
      the shifted copy and the log-softmax output are all alive: act_bytes + 3 × 4 B, 14 B for
      bf16 (the HF Trainer under 4.47.1 and 5.24: benchmarks/results/cpu-kbit-step-*.csv).
    """
    v = spec.vocab_size
    b = v * act_bytes
    if shifts_logits:
        b += v * act_bytes
    b += v * 8 if upcast else v * act_bytes
    if upcast and shift_copy_fp32 and not shifts_logits:
        b += v * 4
    if upcast and not shifts_logits:
        # Backward of the fp32 loss: the saved log-softmax output, nll_loss's full-size gradient
        # and log_softmax_backward's output, 3 × 4 B, once the 16-bit logits are gone.
        b = max(b, v * 12)
    return b


def training_activations(spec: ModelSpec, *, tokens_per_gpu: int, seq_len: int, attention: str, act_bytes: int,
                         checkpointing: bool, upcast_loss: bool, shifts_logits: bool, trainable_base: bool = True,
                         saved_inputs: frozenset[str] = ALL_INPUT_SITES, lm_head_trains: bool = True,
                         lora_saved_bytes: int = 0, shift_copy_fp32: bool = False,
                         residual_bytes: int | None = None, head_cast_bytes: int = 0,
                         remote_layer_bytes: int = 0, after_forward_bytes: int = 0) -> ActivationBytes:
    """Activation bytes on one GPU for a micro-batch of `tokens_per_gpu` tokens (batch × seq_len).

    `trainable_base`: the base's weights train (full fine-tuning); else only the linears whose
    inputs `saved_inputs` names keep them (LoRA branches reading the input as it is).
    `residual_bytes`: bytes per element of the residual stream, which checkpointing keeps at each
    layer's input (default `act_bytes`).  It follows the embedding's output dtype: with the
    embeddings upcast to fp32 (peft prepare_model_for_kbit_training) it is fp32 under autocast
    too, since every `residual + hidden_states` of a 16-bit branch output onto fp32 stays fp32
    (modeling_llama.py LlamaDecoderLayer.forward).
    `head_cast_bytes`: a 16-bit copy of an fp32 lm_head weight that autocast makes for the matmul
    and that the matmul keeps for its backward (autocast caches no cast of a frozen weight:
    torch/csrc/autograd/autocast_mode.cpp `cached_cast` needs a leaf that requires grad): it lives
    from lm_head's forward to its backward, through the loss's peak.
    `remote_layer_bytes`: bytes per token a model's remote code leaves saved in each layer beyond the
    block counted here (training.remote_code_layer_bytes: Qwen(1)'s per-layer SDPA mask and fused
    qkv output).  `after_forward_bytes`: what is alive per token, besides the saved activations, once
    the forward has returned its outputs (training.after_forward_bytes: the fp32 copies accelerate
    makes of a returned tuple cache); the loss path's peak is the larger of it and the loss's own.
    """
    rb = act_bytes if residual_bytes is None else residual_bytes
    h = spec.hidden_size
    L = spec.num_layers
    per_layer = layer_bytes_per_token(spec, attention=attention, seq_len=seq_len, act_bytes=act_bytes,
                                      trainable_base=trainable_base, saved_inputs=saved_inputs,
                                      lora_saved_bytes=lora_saved_bytes) + remote_layer_bytes
    # Outside the layers: the final norm (as in a layer) and lm_head's input when lm_head trains.
    outside = norm_bytes_per_token(spec, act_bytes, trainable_base) + (h * act_bytes if lm_head_trains else 0)
    if checkpointing:
        saved = tokens_per_gpu * (L * h * rb + outside)
        # One layer recomputed, plus the gradient w.r.t. its output and input.
        recompute = tokens_per_gpu * (per_layer + 2 * h * rb)
        how = (f"checkpointing: {L} layer inputs × {h} × {rb} B per token; one layer recomputed "
               f"({per_layer:,} B/token)")
    else:
        saved = tokens_per_gpu * (L * per_layer + outside)
        recompute = 0
        how = f"{L} layers × {per_layer:,} B per token saved for backward"
    loss_path = logits_bytes_per_token(spec, act_bytes=act_bytes, upcast=upcast_loss, shifts_logits=shifts_logits,
                                       shift_copy_fp32=shift_copy_fp32)
    logits = tokens_per_gpu * max(loss_path, after_forward_bytes)
    logits += head_cast_bytes
    attn = {"eager": "eager attention keeps heads × seq softmax probabilities",
            "flash": "flash attention: no seq² matrix", "sdpa": "SDPA (flash/memory-efficient): no seq² matrix"}[attention]
    return ActivationBytes(int(saved), int(recompute), int(logits), f"{how}; {attn}; {tokens_per_gpu:,} tokens per GPU",
                           outputs_peak=after_forward_bytes > loss_path)
