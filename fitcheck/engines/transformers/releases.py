"""What each transformers release does that changes memory: the prefill's logits, the default attention, the
KV cache generate() keeps, per-layer rotary tables, 4.38's causal mask, the loss's shifted copy, how sliding
windows are cached, and where MXFP4 experts stay packed.  Pure functions of (architecture, release); a release
not given is a current one.
"""

from __future__ import annotations

from fitcheck.estimate.kv_cache import SlidingCache, layer_counts
from fitcheck.versions import parse_transformers_version

# ---- transformers' prefill logits ------------------------------------------------------------
# transformers 4.45 added `logits_to_keep` (then `num_logits_to_keep`) to generate(): the prefill
# computes logits for the last position only.  Before it, Llama-style models computed them for
# every prompt position and upcast them (`logits = logits.float()` in *ForCausalLM.forward).
LAST_LOGITS_SINCE = (4, 45)
# Remote-code architectures whose forward has no logits_to_keep and keeps the compute dtype
# (Qwen(1) modeling_qwen.py: `lm_logits = self.lm_head(hidden_states)`).
_ALL_LOGITS_ARCHITECTURES = frozenset({"qwen"})
# transformers 4.36 made SDPA the default attn_implementation (`_autoset_attn_implementation`,
# torch >= 2.1.1); before it Llama-family models ran LlamaAttention (eager): `attn_weights =
# torch.matmul(query_states, key_states.transpose(2, 3))`, then `softmax(attn_weights, dim=-1,
# dtype=torch.float32).to(query_states.dtype)`.  https://github.com/huggingface/transformers/blob/
# v4.35.2/src/transformers/models/llama/modeling_llama.py (LlamaAttention.forward); measured:
# benchmarks/results/cpu-inference-peaks-2026-12-01.csv (4.35.2 runs eager only).
SDPA_DEFAULT_SINCE = (4, 36)
# Releases whose generate() passed the legacy tuple cache between steps: the model's
# DynamicCache.from_legacy_cache wraps the old tensors, torch.cat builds new ones, and the old tuple
# stays referenced by generate's model_kwargs until the step returns (v4.38.2 generation/utils.py,
# `model_kwargs["past_key_values"] = outputs.past_key_values`; models/llama/modeling_llama.py
# `next_cache = next_decoder_cache.to_legacy_cache() if use_legacy_cache`).  Measured across releases:
# benchmarks/results/cpu-inference-peaks-2026-12-01.csv.
DYNAMIC_CACHE_SINCE = (4, 42)
# Training's loss: transformers 4.46 moved it into loss_utils.ForCausalLMLoss, which upcast the
# logits to fp32 and then shifted them with a contiguous copy (`logits = logits.float()`,
# `shift_logits = logits[..., :-1, :].contiguous()`): at batch > 1 one more fp32 vocabulary-sized
# tensor per token while the model's 16-bit logits are still referenced (at batch 1 the slice is
# contiguous and nothing is copied).  Pull request #35646 (merged
# 2025-01-13, first released in 4.49) dropped the copy; labels are padded and shifted instead.
# https://github.com/huggingface/transformers/pull/35646; measured with the HF Trainer:
# benchmarks/results/cpu-kbit-step-2026-12-01.csv (4.47.1 against 5.24.0).
LOSS_SHIFT_COPY_RELEASES = ((4, 46), (4, 49))  # [first, last + 1)
# transformers 4.38 expands a max_position_embeddings² causal mask per forward for these
# (activations.static_causal_mask_bytes); 4.39 sizes the mask to the sequence again.
STATIC_MASK_RELEASES = frozenset({(4, 38)})
STATIC_MASK_ARCHITECTURES = frozenset({"llama", "gemma"})
# Releases whose rotary embedding precomputes cos/sin tables for every position in every attention
# layer: `self.rotary_emb = Qwen2RotaryEmbedding(head_dim, max_position_embeddings=...)` in each
# attention module, whose __init__ calls `_set_cos_sin_cache(seq_len=max_position_embeddings, ...,
# dtype=torch.get_default_dtype())` and registers cos_cached and sin_cached (Llama: _cos_cached /
# _sin_cached, kept for backward compatibility) — the default dtype being the load's torch_dtype
# (modeling_utils `_set_default_torch_dtype`).  Checked in the released wheels: v4.38.2
# models/qwen2/modeling_qwen2.py Qwen2RotaryEmbedding and Qwen2Attention.__init__; present for qwen2
# in 4.37.2–4.44.2 and gone in 4.45.2 (one Qwen2RotaryEmbedding(config) per model, cos/sin computed
# per forward from position_ids); qwen2_moe 4.41.2–4.44.2, gone in 4.45.2; mistral 4.37.2–4.41.2, gone
# in 4.42.4; llama 4.37.2–4.40.2, gone in 4.41.2.  Per architecture: [first release, first without); the
# releases before those checked kept the same Llama-style rotary module since the model was added.
ROTARY_TABLE_RELEASES = {"qwen2": ((4, 37), (4, 45)), "qwen2_moe": ((4, 40), (4, 45)),
                         "mistral": ((4, 34), (4, 42)), "llama": ((4, 0), (4, 41))}
# Remote-code architectures that keep tuple caches whatever the release (Qwen(1) modeling_qwen.py:
# `present = (key, value)` after `torch.cat((past_key, key), dim=1)`; ChatGLM likewise).
_LEGACY_CACHE_ARCHITECTURES = frozenset({"qwen", "chatglm"})


def logits_mode(architecture: str, transformers_version: str | None) -> tuple[str, str]:
    """(Plan.logits, why) for transformers' prefill with this architecture and version."""
    if architecture in _ALL_LOGITS_ARCHITECTURES:
        return "all", f"{architecture} remote code computes logits for every prompt position"
    if transformers_version is None:
        return "last", "transformers >= 4.45 assumed: logits for the last prompt position"
    if parse_transformers_version(transformers_version) < LAST_LOGITS_SINCE:
        return "all-fp32", f"transformers {transformers_version}: fp32 logits for every prompt position"
    return "last", f"transformers {transformers_version}: logits for the last prompt position"


def attention_mode(architecture: str, transformers_version: str | None, typed: str | None) -> tuple[str, str]:
    """(Plan.attention, why) for transformers inference."""
    if typed:
        return typed, "from --attention"
    if transformers_version is not None and architecture not in _ALL_LOGITS_ARCHITECTURES \
            and parse_transformers_version(transformers_version) < SDPA_DEFAULT_SINCE:
        return "eager", f"transformers {transformers_version}: eager attention is the default before 4.36"
    return "sdpa", "transformers' default attn_implementation (sdpa)"


def static_mask_mode(architecture: str, transformers_version: str | None) -> bool:
    """Whether the release expands a full max_positions² causal mask in every forward (4.38, Llama/Gemma)."""
    return (transformers_version is not None and architecture in STATIC_MASK_ARCHITECTURES
            and parse_transformers_version(transformers_version) in STATIC_MASK_RELEASES)


def loss_shift_copy_mode(architecture: str, transformers_version: str | None) -> bool:
    """Whether transformers' ForCausalLMLoss makes a shifted fp32 copy of the logits (4.46–4.48)."""
    if transformers_version is None or architecture in _ALL_LOGITS_ARCHITECTURES:
        return False
    first, end = LOSS_SHIFT_COPY_RELEASES
    return first <= parse_transformers_version(transformers_version) < end


def rotary_table_mode(architecture: str, transformers_version: str | None) -> bool:
    """Whether the release keeps per-layer cos/sin tables for every position (ROTARY_TABLE_RELEASES)."""
    if transformers_version is None or architecture not in ROTARY_TABLE_RELEASES:
        return False
    first, end = ROTARY_TABLE_RELEASES[architecture]
    return first <= parse_transformers_version(transformers_version) < end


def legacy_cache_mode(architecture: str, transformers_version: str | None) -> bool:
    """Whether generate() keeps two KV caches alive at a decode step (the legacy tuple cache)."""
    if architecture in _LEGACY_CACHE_ARCHITECTURES:
        return True
    return transformers_version is not None and parse_transformers_version(transformers_version) < DYNAMIC_CACHE_SINCE


# ---- sliding-window layers ------------------------------------------------------------------
# transformers >= 4.56: DynamicCache(config=...) gives those layers a DynamicSlidingWindowLayer
# (https://github.com/huggingface/transformers/blob/v4.56.0/src/transformers/cache_utils.py), whose
# update() keeps ``full_key_states[:, :, -W + 1:, :]``: a view, so the prefill's whole K/V storage
# stays alive until the next update (the first decode step) replaces it with a W-token tensor.
# Measured (transformers 5.24): gemma-3-1b, 6 layers (5 sliding, W 512), a 4,096-token prefill holds
# 24 MiB, every layer × every token (benchmarks/results/cpu-2026-11-30.csv, prefill-gemma3-L6-bf16-L4096).
# Before 4.56 generate() builds DynamicCache() with no config (every token), except for the models
# whose generation_config asks for cache_implementation "hybrid" (Gemma 2 and 3: HybridCache, static,
# sliding layers min(W, max_cache_len); the default 4.56 dropped, see its generation/utils.py, #40039).
TRANSFORMERS_SLIDING_SINCE = (4, 56)
HYBRID_CACHE_ARCHITECTURES = frozenset({"gemma2", "gemma3", "gemma3_text"})


def sliding_cache(spec, *, tokens: int, prompt_tokens: int | None, transformers_version: str | None):
    """What a release's generate() keeps per sequence in a sliding-window layer (``prompt_tokens``: the
    prefill's length when the peak may come at its end; None: the cache at a decode step)."""
    window = spec.sliding_window or 0
    if transformers_version is not None and parse_transformers_version(transformers_version) \
            < TRANSFORMERS_SLIDING_SINCE:
        if spec.architecture in HYBRID_CACHE_ARCHITECTURES:
            return SlidingCache(tokens, min(tokens, window), f"window {window:,}: transformers {transformers_version} "
                                                             "generates with HybridCache (cache_implementation "
                                                             "\"hybrid\"), sliding layers sized to the window")
        return SlidingCache(tokens, tokens, f"window {window:,}, but transformers {transformers_version}'s "
                                            "DynamicCache keeps every token (sliding layers cap from 4.56)")
    decode = SlidingCache(tokens, min(tokens, window),
                          f"window {window:,}: transformers' DynamicSlidingWindowLayer keeps the last "
                          f"{window:,} tokens once generation starts")
    if prompt_tokens is None or prompt_tokens <= window:
        return decode
    full, sliding = layer_counts(spec)
    if (full + sliding) * prompt_tokens >= full * tokens + sliding * decode.sliding_tokens:
        return SlidingCache(prompt_tokens, prompt_tokens,
                            f"window {window:,}, but at the end of the prefill transformers' DynamicSlidingWindowLayer "
                            f"keeps the window as a view of the whole {prompt_tokens:,}-token prefill's K/V, freed "
                            f"at the first decode step ({window:,} tokens after it)")
    return decode


# ---- MXFP4 checkpoints (gpt-oss) ------------------------------------------------------------
# transformers' Mxfp4HfQuantizer.validate_environment keeps the experts packed on CUDA compute capability >= 7.5
# (or an Intel XPU) with triton >= 3.4 and the kernels package, and otherwise dequantizes them to bf16 at load
# ("we will default to dequantizing the model to bf16"); 4.55.0 asked for compute capability >= 9.0 (lowered in
# 4.56, PR #39940).
# https://github.com/huggingface/transformers/blob/0001b3ee40be23bcac4f361e7684f1391a49a56b/src/transformers/quantizers/quantizer_mxfp4.py
MXFP4_KERNELS_MIN_CC = 7.5
# Without the version or the kernels package in view, fitcheck takes the dequantized size below the
# compute capability every transformers release with gpt-oss keeps MXFP4 on (4.55: >= 9.0); from
# --transformers-version 4.56 the kernels' own 7.5.
MXFP4_TRANSFORMERS_DEFAULT_CC = 9.0
MXFP4_TRANSFORMERS_NEEDS = "transformers >= 4.56 with triton >= 3.4 and the kernels package"
MXFP4_TRANSFORMERS_LOWER_SINCE = (4, 56)


def keeps_mxfp4(cc: float | None, transformers_version: str | None) -> bool:
    """Whether a default transformers plan counts an MXFP4 checkpoint's experts packed (else dequantized)."""
    if cc is None:
        return False
    if transformers_version is not None \
            and parse_transformers_version(transformers_version) >= MXFP4_TRANSFORMERS_LOWER_SINCE:
        return cc >= MXFP4_KERNELS_MIN_CC
    return cc >= MXFP4_TRANSFORMERS_DEFAULT_CC
