"""KV-cache bytes: grows with tokens and sequences; the only part of inference that does.

bytes = Σ over attention layers of (elements per token) × (tokens that layer keeps) × sequences
        × bytes per element
- GQA: elements per token = 2 × kv_heads × head_dim (K and V), head_dim explicit when given.
- Sliding-window layers (Mistral v0.1, Gemma 2/3, gpt-oss) keep what each engine keeps: sliding_cache().
- MLA (DeepSeek-V2/V3): vLLM and llama.cpp cache the compressed latent (kv_lora_rank +
  qk_rope_head_dim per token per layer); transformers caches full per-head K and V.
- Linear-attention / SSM layers keep a constant state per sequence (fp32).
"""

from __future__ import annotations

from dataclasses import dataclass

from fitcheck.engines import ENGINES
from fitcheck.estimate.formats import KV_DTYPE_BYTES
from fitcheck.model.spec import ModelSpec


def kv_elements_per_token(spec: ModelSpec, engine: str) -> int:
    """Cached elements per token per full-attention layer, as `engine` stores them."""
    if spec.is_mla and not ENGINES[engine].kv_mla_latent:
        return spec.mla_expanded_kv_elements_per_token
    return spec.kv_elements_per_token


# Which tokens an engine keeps in a sliding-window layer (the window W from the model's config):
# - transformers >= 4.56: DynamicCache(config=...) gives those layers a DynamicSlidingWindowLayer
#   (https://github.com/huggingface/transformers/blob/v4.56.0/src/transformers/cache_utils.py), whose
#   update() keeps ``full_key_states[:, :, -W + 1:, :]``: a view, so the prefill's whole K/V storage
#   stays alive until the next update (the first decode step) replaces it with a W-token tensor.
#   Measured (transformers 5.24): gemma-3-1b, 6 layers (5 sliding, W 512), a 4,096-token prefill holds
#   24 MiB, every layer × every token (benchmarks/results/cpu-2026-11-30.csv, prefill-gemma3-L6-bf16-L4096).
#   Before 4.56 generate() builds DynamicCache() with no config (every token), except for the models
#   whose generation_config asks for cache_implementation "hybrid" (Gemma 2 and 3: HybridCache, static,
#   sliding layers min(W, max_cache_len); the default 4.56 dropped, see its generation/utils.py, #40039).
# - vLLM's hybrid KV-cache manager frees the blocks that fall outside the window: W tokens.
# - llama.cpp's SWA cache (src/llama-kv-cache-iswa.cpp): size_swa = GGML_PAD(min(size_base,
#   n_swa × (unified ? n_seq_max : 1) + n_ubatch), 256) cells per stream, one stream per sequence;
#   --swa-full keeps size_base (every token).  Only the architectures whose loader sets a SWA pattern
#   (src/llama-model.cpp, load_hparams: set_swa_pattern; gguf_header._SWA_PATTERN, llama4's chunked
#   attention n_swa 8192) have that cache; the others (Mistral v0.1, StarCoder2) keep every token.
TRANSFORMERS_SLIDING_SINCE = (4, 56)
HYBRID_CACHE_ARCHITECTURES = frozenset({"gemma2", "gemma3", "gemma3_text"})
LLAMA_CPP_SWA_ARCHITECTURES = frozenset({"gemma2", "gemma3", "gemma3_text", "gpt_oss", "cohere2", "llama4"})
LLAMA_CPP_SWA_PAD = 256
# vLLM v0.19.0 turns its hybrid KV-cache manager off for chunked local attention (Llama 4) unless
# VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 ("There is a latency regression when using chunked local
# attention with the hybrid KV cache manager. Disabling it, by default.",
# https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/config/vllm.py): every layer keeps every token.
VLLM_FULL_CACHE_ARCHITECTURES = frozenset({"llama4"})


@dataclass(frozen=True)
class SlidingCache:
    """Tokens per sequence held at the cache's peak by each full-attention and each sliding-window layer,
    and why (the text the breakdown shows: one source for the figure and the words)."""

    full_tokens: int
    sliding_tokens: int
    why: str


def sliding_cache(spec: ModelSpec, engine: str, *, tokens: int, prompt_tokens: int | None = None,
                  transformers_version: str | None = None, batched_tokens: int | None = None) -> SlidingCache:
    """What ``engine`` keeps per sequence of a ``tokens``-token context.  ``prompt_tokens``: the prefill's
    length when the peak may come at its end (transformers keeps the window as a view of the prefill's
    K/V until the first decode step); None: the cache at a decode step.  ``batched_tokens``: vLLM's
    max_num_batched_tokens (None: the window alone)."""
    window = spec.sliding_window or 0
    if not window or not spec.num_sliding_layers:
        return SlidingCache(tokens, tokens, "")
    if engine == "llama.cpp" and spec.architecture not in LLAMA_CPP_SWA_ARCHITECTURES:
        return SlidingCache(tokens, tokens, f"window {window:,}, but llama.cpp runs {spec.architecture} with full "
                                            "attention: every token")
    if engine == "llama.cpp":
        extra = ENGINES[engine].kv_sliding_extra or 0
        cells = -(-(window + extra) // LLAMA_CPP_SWA_PAD) * LLAMA_CPP_SWA_PAD
        return SlidingCache(tokens, min(tokens, cells),
                            f"llama.cpp's SWA cache: window {window:,} + n_ubatch {extra}, padded to "
                            f"{LLAMA_CPP_SWA_PAD}; --swa-full keeps every token")
    if engine == "vllm" and spec.architecture in VLLM_FULL_CACHE_ARCHITECTURES:
        return SlidingCache(tokens, tokens, f"window {window:,} (chunked local attention), but vLLM v0.19.0 turns its "
                                            "hybrid KV-cache manager off for it by default: every token")
    if engine == "vllm":
        # vLLM v0.19.0 sizes a sliding-window layer's blocks per request for the window's last window - 1 tokens
        # plus a whole chunked-prefill step: min(window - 1 + max_num_batched_tokens, max_model_len)
        # (SlidingWindowSpec.max_memory_usage_bytes, plus one block for a window that starts mid-block,
        # https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/v1/kv_cache_interface.py)
        held = min(tokens, window - 1 + batched_tokens) if batched_tokens else min(tokens, window)
        return SlidingCache(tokens, held,
                            f"window {window:,}" + (f" + a chunked-prefill step of {batched_tokens:,} tokens"
                                                    if batched_tokens else "")
                            + ": vLLM's hybrid KV-cache manager frees the blocks outside it")
    if transformers_version is not None and _version(transformers_version) < TRANSFORMERS_SLIDING_SINCE:
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
    full, sliding = _layer_counts(spec)
    if (full + sliding) * prompt_tokens >= full * tokens + sliding * decode.sliding_tokens:
        return SlidingCache(prompt_tokens, prompt_tokens,
                            f"window {window:,}, but at the end of the prefill transformers' DynamicSlidingWindowLayer "
                            f"keeps the window as a view of the whole {prompt_tokens:,}-token prefill's K/V, freed "
                            f"at the first decode step ({window:,} tokens after it)")
    return decode


def _version(text: str) -> tuple[int, int]:
    from fitcheck.plan import parse_transformers_version

    return parse_transformers_version(text)


def vllm_layer_slots(spec: ModelSpec) -> tuple[int, int]:
    """(full-attention, sliding-window) layers vLLM v0.19.0's hybrid KV-cache manager allots blocks for.

    With both kinds, it groups the layers of each kind into KV-cache groups of one size (the smaller count, or
    the larger when it is under 1.5 × the smaller) and pads the last group of a kind with empty layers; every
    group's block takes a page in each of the group-size memory pools, so a kind of n layers costs
    ceil(n / size) × size layers' memory (_get_kv_cache_groups_uniform_page_size and
    get_kv_cache_config_from_groups, https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/v1/core/kv_cache_utils.py;
    "Add %d padding layers, may waste at most ... KV cache memory").  Gemma 3 27B: 10 full + 52 sliding layers in
    groups of 10, so 10 + 60 layers' memory."""
    full, sliding = _layer_counts(spec)
    if not full or not sliding or spec.architecture in VLLM_FULL_CACHE_ARCHITECTURES:
        return full, sliding
    size = min(full, sliding)
    if max(full, sliding) < size * 1.5:
        size = max(full, sliding)
    return -(-full // size) * size, -(-sliding // size) * size


def _layer_counts(spec: ModelSpec) -> tuple[int, int]:
    """(full-attention, sliding-window) attention layers."""
    attn_layers = spec.num_attention_layers
    sliding = min(spec.num_sliding_layers, attn_layers) if spec.sliding_window else 0
    return attn_layers - sliding, sliding


def kv_cache_bytes(spec: ModelSpec, *, tokens: int, sequences: int, kv_dtype: str, engine: str,
                   layers: int | None = None, prompt_tokens: int | None = None,
                   transformers_version: str | None = None, batched_tokens: int | None = None) -> int:
    """KV-cache bytes for `sequences` sequences of `tokens` tokens each, at the cache's peak.

    `layers`: count only this many attention layers (partial offload, pipeline split); the
    sliding/full mix is kept in proportion.  `prompt_tokens`, `transformers_version`, `batched_tokens`: see
    :func:`sliding_cache` (which tokens the sliding-window layers hold).
    """
    elem = KV_DTYPE_BYTES[kv_dtype]
    per_token = kv_elements_per_token(spec, engine)
    attn_layers = spec.num_attention_layers
    full, sliding = vllm_layer_slots(spec) if engine == "vllm" else _layer_counts(spec)
    if layers is not None and attn_layers:
        share = min(layers, attn_layers) / attn_layers
        full, sliding = full * share, sliding * share
    kept = sliding_cache(spec, engine, tokens=tokens, prompt_tokens=prompt_tokens,
                         transformers_version=transformers_version, batched_tokens=batched_tokens)
    total = (full * kept.full_tokens + sliding * kept.sliding_tokens) * per_token * elem * sequences
    if spec.num_linear_layers and spec.linear_state_elements:
        lin = spec.num_linear_layers if layers is None else spec.num_linear_layers * min(layers, spec.num_layers) / spec.num_layers
        total += lin * spec.linear_state_elements * 4 * sequences
    return int(total)
