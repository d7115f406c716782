"""Each model family's ``config.json``, read as its transformers ``configuration_*.py`` / ``modeling_*.py`` (or the
remote code its repository ships) reads it: the comment on each reader says what is special.  Keys a real
config.json may omit fall back to the transformers config class default, and ``sources`` says so.
"""

from __future__ import annotations

from collections.abc import Callable

from fitcheck.errors import FitcheckError
from fitcheck.model.config_reader import REQUIRED, ConfigReader

# ---- shared pieces ---------------------------------------------------------------------------


def _attention_shape(r: ConfigReader, fields: dict, *, layers=("num_hidden_layers",), hidden=("hidden_size",),
                     heads=("num_attention_heads",), kv=("num_key_value_heads",),
                     defaults: dict | None = None, default_note: str = "") -> None:
    """Layers, hidden, heads, kv heads, head_dim, vocab: the part nearly every family shares."""
    d = defaults or {}
    note = default_note
    fields["num_layers"] = r.int("num_layers", *layers, default=d.get("num_layers", REQUIRED), default_note=note)
    fields["hidden_size"] = r.int("hidden_size", *hidden, default=d.get("hidden_size", REQUIRED), default_note=note)
    fields["num_attention_heads"] = r.int("num_attention_heads", *heads,
                                          default=d.get("num_attention_heads", REQUIRED), default_note=note)
    fields["num_kv_heads"] = r.int("num_kv_heads", *kv, default=d.get("num_kv_heads", fields["num_attention_heads"]),
                                   default_note=note or "= num_attention_heads (no key/value head count: MHA)")
    head_dim = r.opt_int("head_dim", "head_dim")
    if head_dim is None and "head_dim" in d:
        head_dim = d["head_dim"]
        r.sources.append(("head_dim", note or f"default {head_dim}"))
    fields["head_dim"] = head_dim
    fields["vocab_size"] = r.int("vocab_size", "vocab_size", "padded_vocab_size",
                                 default=d.get("vocab_size", REQUIRED), default_note=note)


def _max_context(r: ConfigReader, fields: dict, *keys: str, default: int | None = None, note: str = "") -> None:
    keys = keys or ("max_position_embeddings",)
    value = r.opt_int("max_context", *keys)
    if value is None and default is not None:
        value = default
        r.sources.append(("max_context", note or f"default {default}"))
    fields["max_context"] = value


def _sliding_from_layer_types(r: ConfigReader, fields: dict, types: list[str]) -> None:
    """A ``layer_types`` list names each layer's attention: it wins over any pattern rule."""
    if len(types) != fields["num_layers"]:
        raise FitcheckError(f"{r._where('layer_types')} has {len(types)} entries for "
                            f"{fields['num_layers']} layers")
    n = sum(1 for t in types if t in ("sliding_attention", "chunked_attention"))
    window = r.opt_int("sliding_window", "sliding_window", "attention_chunk_size")
    if n and window:
        fields["sliding_window"], fields["num_sliding_layers"] = window, n
        r.sources.append(("num_sliding_layers", r._where("layer_types")))


def _sliding(r: ConfigReader, fields: dict, rule: Callable[[int], int] | None) -> None:
    """(sliding_window, num_sliding_layers) from layer_types, else the family's rule."""
    types = r.list_of_str("layer_types")
    if types is not None:
        _sliding_from_layer_types(r, fields, types)
        return
    if rule is None:
        return
    window = r.opt_int("sliding_window", "sliding_window")
    if window:
        n = rule(fields["num_layers"])
        if n:
            fields["sliding_window"], fields["num_sliding_layers"] = window, n


def _all_layers(n: int) -> int:
    return n


def _every_other(n: int) -> int:
    # Gemma 2 / gpt-oss: even-indexed layers slide (modeling_gemma2: `not bool(layer_idx % 2)`)
    return (n + 1) // 2


def finish_moe(fields: dict, r: ConfigReader) -> None:
    if fields.get("num_experts"):
        k = fields.get("experts_per_token", 0)
        if k < 1 or k > fields["num_experts"]:
            raise FitcheckError(f"{r.source}: experts per token ({k}) must be 1..{fields['num_experts']}")


# ---- families --------------------------------------------------------------------------------

def _llama(r: ConfigReader, f: dict, sliding_rule: Callable[[int], int] | None = None) -> None:
    """Llama 1/2/3.x, CodeLlama, Vicuna, TinyLlama, Yi, DeepSeek LLM/Coder, SmolLM (modeling_llama)."""
    _attention_shape(r, f)
    f["intermediate_size"] = r.int("intermediate_size", "intermediate_size")
    bias = r.bool("qkv_bias", "attention_bias", default=False)
    f["qkv_bias"] = f["attn_out_bias"] = bias
    f["mlp_bias"] = r.bool("mlp_bias", "mlp_bias", default=False)
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=False)
    _max_context(r, f)
    _sliding(r, f, sliding_rule)


def _mistral(r: ConfigReader, f: dict) -> None:
    """Mistral: Llama block; v0.1 slides a 4096 window on every layer, later versions set null."""
    _llama(r, f, _all_layers)


def _mixtral(r: ConfigReader, f: dict) -> None:
    """Mixtral: Mistral attention, every layer's MLP is `num_local_experts` SwiGLU experts."""
    _mistral(r, f)
    f["num_experts"] = r.int("num_experts", "num_local_experts", "num_experts")
    f["experts_per_token"] = r.int("experts_per_token", "num_experts_per_tok", default=2)
    f["moe_intermediate_size"] = f["intermediate_size"]


def _qwen_sliding(r: ConfigReader, f: dict) -> None:
    # modeling_qwen2: sliding only when use_sliding_window, on layers >= max_window_layers
    if r.list_of_str("layer_types") is not None:
        _sliding(r, f, None)
    elif r.bool("use_sliding_window", "use_sliding_window", default=False, record=False):
        first = r.int("max_window_layers", "max_window_layers", default=f["num_layers"], minimum=0,
                      maximum=10**6)
        _sliding(r, f, lambda n: max(0, n - first))


def _qwen2(r: ConfigReader, f: dict) -> None:
    """Qwen1.5 / Qwen2 / Qwen2.5 / QwQ: Llama block with q/k/v biases (o_proj has none)."""
    _attention_shape(r, f)
    f["intermediate_size"] = r.int("intermediate_size", "intermediate_size")
    f["qkv_bias"] = True
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=False)
    _max_context(r, f)
    _qwen_sliding(r, f)


def _qwen_moe_layers(r: ConfigReader, f: dict) -> None:
    # modeling_qwen2_moe / qwen3_moe: a layer is sparse unless listed in mlp_only_layers, and only
    # every decoder_sparse_step-th layer ((i + 1) % step == 0).
    L = f["num_layers"]
    only = set(r.list_of_int("mlp_only_layers") or [])
    step = r.int("decoder_sparse_step", "decoder_sparse_step", default=1)
    sparse = sum(1 for i in range(L) if i not in only and (i + 1) % step == 0) if L <= 10**5 else L // step
    f["num_dense_layers"] = L - sparse


def _qwen2_moe(r: ConfigReader, f: dict) -> None:
    """Qwen1.5-MoE / Qwen2-MoE: routed experts + one gated shared expert per layer.

    The shared expert's 1-wide sigmoid gate (hidden_size per layer) is not counted (<0.01 %).
    """
    _qwen2(r, f)
    f["num_experts"] = r.int("num_experts", "num_experts")
    f["experts_per_token"] = r.int("experts_per_token", "num_experts_per_tok")
    f["moe_intermediate_size"] = r.int("moe_intermediate_size", "moe_intermediate_size")
    shared = r.opt_int("shared_expert_intermediate_size", "shared_expert_intermediate_size", minimum=0)
    if shared:
        f["num_shared_experts"], f["shared_expert_intermediate_size"] = 1, shared
    _qwen_moe_layers(r, f)


def _qwen3(r: ConfigReader, f: dict) -> None:
    """Qwen3: no biases, per-head q/k RMSNorm, head_dim explicit (128 even when hidden/heads differs)."""
    _attention_shape(r, f)
    f["intermediate_size"] = r.int("intermediate_size", "intermediate_size")
    bias = r.bool("qkv_bias", "attention_bias", default=False)
    f["qkv_bias"] = f["attn_out_bias"] = bias
    f["qk_norm"] = True
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=False)
    _max_context(r, f)
    _qwen_sliding(r, f)


def _qwen3_moe(r: ConfigReader, f: dict) -> None:
    """Qwen3-MoE (30B-A3B, 235B-A22B): Qwen3 attention, routed experts only."""
    _qwen3(r, f)
    f["num_experts"] = r.int("num_experts", "num_experts")
    f["experts_per_token"] = r.int("experts_per_token", "num_experts_per_tok")
    f["moe_intermediate_size"] = r.int("moe_intermediate_size", "moe_intermediate_size")
    _qwen_moe_layers(r, f)


def _qwen1(r: ConfigReader, f: dict) -> None:
    """Qwen (1st gen, remote code QWenLMHeadModel).

    modeling_qwen.py: c_attn (fused qkv) always has a bias, c_proj none (no_bias); the MLP's w1/w2
    are `intermediate_size // 2` wide, so the config's intermediate_size is twice the real width.
    The first release (August 2023: Qwen-7B / -Chat, e.g. github.com/undefdev/Qwen-7B-Chat
    config.json @26fad65, modeling_qwen.py @04df5dd) spells the shape GPT-2's way (n_layer, n_embd,
    n_head, n_positions, ffn_hidden_size; QWenConfig's attribute_map), and its QWenAttention.__init__
    registers `self.register_buffer("bias", torch.tril(torch.ones((max_positions, max_positions),
    dtype=torch.bool)).view(1, 1, max_positions, max_positions), persistent=False)` in every layer,
    flash-attention or not: layers × n_positions² bytes at load (Qwen-7B: 32 × 6,144² = 1.1 GiB).
    The September 2023 code keeps one such buffer in QWenModel without flash-attention and the code
    since 2023-11-14 none (github.com/zhangningboo/Qwen-7B @f7bc352, "remove fix-sized causal mask");
    their configs use hidden_size/num_hidden_layers, so the GPT-2 spelling marks the first release.
    """
    _attention_shape(r, f, layers=("num_hidden_layers", "n_layer"), hidden=("hidden_size", "n_embd"),
                     heads=("num_attention_heads", "n_head"))
    f["intermediate_size"] = r.int("intermediate_size", "intermediate_size", "ffn_hidden_size", minimum=2) // 2
    r.sources.append(("intermediate_size", "= config intermediate_size / 2 (modeling_qwen.py QWenMLP)"))
    kv_channels = r.opt_int("head_dim", "kv_channels")
    if kv_channels:
        f["head_dim"] = kv_channels
    f["qkv_bias"] = True
    f["tie_word_embeddings"] = False
    _max_context(r, f, "seq_length", "max_position_embeddings")
    positions = r.opt_int("n_positions", "n_positions") if r.has("n_layer") else None
    if positions:
        f["load_buffer_bytes"] = f["num_layers"] * positions * positions
        f["load_buffer_note"] = (f"the first Qwen remote code's causal-mask buffer in every layer ({f['num_layers']} × "
                                 f"{positions:,}² bool, modeling_qwen.py QWenAttention)")


def _gemma_common(r: ConfigReader, f: dict, defaults: dict, note: str) -> None:
    _attention_shape(r, f, defaults=defaults, default_note=note)
    f["intermediate_size"] = r.int("intermediate_size", "intermediate_size",
                                   default=defaults.get("intermediate_size", REQUIRED), default_note=note)
    f["norms_per_layer"] = 4  # input, post-attention, pre- and post-feedforward RMSNorm
    bias = r.bool("qkv_bias", "attention_bias", default=False)
    f["qkv_bias"] = f["attn_out_bias"] = bias
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=True)
    _max_context(r, f, default=defaults.get("max_context"), note=note)


def _gemma2(r: ConfigReader, f: dict) -> None:
    """Gemma 2: 4 norms per layer, tied embeddings, every other layer a 4096 sliding window."""
    _gemma_common(r, f, {"max_context": 8192, "head_dim": 256}, "transformers Gemma2Config default")
    _sliding(r, f, _every_other)


# transformers Gemma3TextConfig defaults (the multimodal 4B/12B/27B config.json text_config omits them)
_GEMMA3_DEFAULTS = {
    "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_layers": 26,
    "num_attention_heads": 8, "num_kv_heads": 4, "head_dim": 256, "max_context": 131072,
}


def _gemma3(r: ConfigReader, f: dict) -> None:
    """Gemma 3 text: Gemma 2 block plus per-head q/k norm; 5 of every 6 layers slide."""
    _gemma_common(r, f, _GEMMA3_DEFAULTS, "transformers Gemma3TextConfig default")
    f["qk_norm"] = True
    pattern = r.int("sliding_window_pattern", "sliding_window_pattern", default=6,
                    default_note="sliding_window_pattern 6 (Gemma3TextConfig default)")
    window = r.int("sliding_window", "sliding_window", default=4096,
                   default_note="4096 (Gemma3TextConfig default)")
    types = r.list_of_str("layer_types")
    if types is not None:
        _sliding(r, f, None)
    else:
        # modeling_gemma3: layer i is global when (i + 1) % pattern == 0
        f["sliding_window"] = window
        f["num_sliding_layers"] = f["num_layers"] - f["num_layers"] // pattern


def _phi3(r: ConfigReader, f: dict) -> None:
    """Phi-3 / 3.5 / 4 / 4-mini: fused qkv_proj and gate_up_proj, same counts as separate ones.

    Phi-3-mini-4k's config has sliding_window 2047; llama.cpp and vLLM serve it with full
    attention, so it is not applied (the cache estimate stays an upper bound).
    """
    _llama(r, f)
    f["qkv_bias"] = f["attn_out_bias"] = False
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=False)


def _deepseek(r: ConfigReader, f: dict) -> None:
    """DeepSeek-V2 / V3 / R1: multi-head latent attention and fine-grained MoE.

    modeling_deepseek: the first `first_k_dense_replace` layers keep a dense MLP
    (intermediate_size); later layers (every `moe_layer_freq`) hold `n_routed_experts` experts of
    `moe_intermediate_size` plus `n_shared_experts` shared ones.  V3's router adds a per-expert
    score-correction bias.  The V3 multi-token-prediction layer is not loaded for inference and
    not counted (it is the 685B - 671B difference on the Hub).
    """
    _attention_shape(r, f)
    f["num_kv_heads"] = f["num_attention_heads"]
    f["intermediate_size"] = r.int("intermediate_size", "intermediate_size")
    f["q_lora_rank"] = r.opt_int("q_lora_rank", "q_lora_rank")
    f["kv_lora_rank"] = r.int("kv_lora_rank", "kv_lora_rank")
    f["qk_rope_head_dim"] = r.int("qk_rope_head_dim", "qk_rope_head_dim")
    f["qk_nope_head_dim"] = r.int("qk_nope_head_dim", "qk_nope_head_dim")
    f["v_head_dim"] = r.int("v_head_dim", "v_head_dim")
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=False)
    _max_context(r, f)
    routed = r.opt_int("num_experts", "n_routed_experts")
    if routed:
        f["num_experts"] = routed
        f["experts_per_token"] = r.int("experts_per_token", "num_experts_per_tok")
        f["moe_intermediate_size"] = r.int("moe_intermediate_size", "moe_intermediate_size")
        f["num_shared_experts"] = r.int("num_shared_experts", "n_shared_experts", default=0, minimum=0)
        first = r.int("num_dense_layers", "first_k_dense_replace", default=0, minimum=0, maximum=f["num_layers"])
        freq = r.int("moe_layer_freq", "moe_layer_freq", default=1)
        L = f["num_layers"]
        moe = sum(1 for i in range(first, L) if i % freq == 0) if L <= 10**5 else (L - first) // freq
        f["num_dense_layers"] = L - moe
        f["router_bias"] = r.raw.get("topk_method") == "noaux_tc"


def _gpt_oss(r: ConfigReader, f: dict) -> None:
    """gpt-oss: MoE with biased experts and router, biased attention, a learned sink per head,
    sliding window (128) on alternate layers (`layer_types`), experts stored as MXFP4."""
    _attention_shape(r, f)
    f["intermediate_size"] = r.int("intermediate_size", "intermediate_size")
    f["num_experts"] = r.int("num_experts", "num_local_experts", "num_experts")
    f["experts_per_token"] = r.int("experts_per_token", "num_experts_per_tok", "experts_per_token")
    f["moe_intermediate_size"] = f["intermediate_size"]
    f["qkv_bias"] = f["attn_out_bias"] = r.bool("qkv_bias", "attention_bias", default=True)
    f["router_bias"] = f["expert_bias"] = True
    f["attention_sinks"] = True
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=False)
    _max_context(r, f)
    _sliding(r, f, _every_other)


def _llama4(r: ConfigReader, f: dict) -> None:
    """Llama 4 text model: MoE layers every `interleave_moe_layer_step` (one routed expert of 16/128
    plus a shared expert of intermediate_size), dense layers of intermediate_size_mlp.

    Three of every four layers use chunked attention (attention_chunk_size 8192), which bounds their
    KV cache like a sliding window; every fourth layer (no RoPE) is global.
    """
    _attention_shape(r, f)
    expert_width = r.int("moe_intermediate_size", "intermediate_size")
    f["intermediate_size"] = r.int("intermediate_size", "intermediate_size_mlp", default=expert_width)
    f["num_experts"] = r.int("num_experts", "num_local_experts")
    f["experts_per_token"] = r.int("experts_per_token", "num_experts_per_tok", default=1)
    f["moe_intermediate_size"] = expert_width
    f["num_shared_experts"] = 1
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=False)
    L = f["num_layers"]
    moe_layers = r.list_of_int("moe_layers")
    if moe_layers is None:
        step = r.int("interleave_moe_layer_step", "interleave_moe_layer_step", default=1)
        moe_count = len(range(step - 1, L, step))
    else:
        moe_count = len({i for i in moe_layers if 0 <= i < L})
    if moe_count == 0:
        raise FitcheckError(f"{r.source}: llama4 config has no MoE layers")
    f["num_dense_layers"] = L - moe_count
    _max_context(r, f)
    types = r.list_of_str("layer_types")
    if types is not None:
        _sliding(r, f, None)
    else:
        chunk = r.opt_int("sliding_window", "attention_chunk_size")
        if chunk:
            f["sliding_window"] = chunk
            f["num_sliding_layers"] = L - L // 4  # modeling_llama4: layer (i + 1) % 4 == 0 is NoPE/global


def _baichuan(r: ConfigReader, f: dict) -> None:
    """Baichuan 2: fused W_pack qkv without bias, SwiGLU, RMSNorm, untied NormHead lm_head."""
    _llama(r, f)
    f["tie_word_embeddings"] = False
    _max_context(r, f, "max_position_embeddings", "model_max_length")


def _chatglm(r: ConfigReader, f: dict) -> None:
    """ChatGLM2/3 (remote code): multi-query groups as kv heads, kv_channels per head,
    ffn_hidden_size SwiGLU (dense_h_to_4h is 2 x ffn wide), qkv bias, untied output_layer."""
    _attention_shape(r, f, layers=("num_layers", "num_hidden_layers"),
                     kv=("multi_query_group_num",) if r.raw.get("multi_query_attention") else ("__none__",))
    kv_channels = r.opt_int("head_dim", "kv_channels")
    if kv_channels:
        f["head_dim"] = kv_channels
    f["intermediate_size"] = r.int("intermediate_size", "ffn_hidden_size")
    f["qkv_bias"] = r.bool("qkv_bias", "add_qkv_bias", default=False)
    linear_bias = r.bool("attn_out_bias", "add_bias_linear", default=False)
    f["attn_out_bias"] = f["mlp_bias"] = linear_bias
    f["tie_word_embeddings"] = False
    _max_context(r, f, "seq_length", "max_position_embeddings")


def _internlm2(r: ConfigReader, f: dict) -> None:
    """InternLM2 / 2.5: Llama block with fused wqkv (same count), `bias` flag on linears."""
    _llama(r, f)
    bias = r.bool("qkv_bias", "bias", default=False)
    f["qkv_bias"] = f["attn_out_bias"] = bias


def _falcon(r: ConfigReader, f: dict) -> None:
    """Falcon (7B: multi-query, one LayerNorm, parallel attention; 40B/180B new decoder: num_kv_heads
    groups, two LayerNorms): LayerNorm with bias, plain GELU MLP of 4 x hidden, tied embeddings."""
    new_arch = r.bool("new_decoder_architecture", "new_decoder_architecture", default=False)
    multi_query = r.bool("multi_query", "multi_query", default=True)
    kv: tuple[str, ...]
    if new_arch:
        kv = ("num_kv_heads", "n_head_kv")
    elif multi_query:
        kv = ("__multi_query__",)
    else:
        kv = ("__none__",)
    _attention_shape(r, f, layers=("num_hidden_layers", "n_layer"), heads=("num_attention_heads", "n_head"), kv=kv)
    if not new_arch and multi_query:
        f["num_kv_heads"] = 1
        r.sources.append(("num_kv_heads", r._where("multi_query") + " (one kv head)"))
    f["intermediate_size"] = r.int("intermediate_size", "ffn_hidden_size", default=4 * f["hidden_size"],
                                   default_note="4 x hidden_size (FalconMLP)")
    f["gated_mlp"] = False
    bias = r.bool("qkv_bias", "bias", default=False)
    f["qkv_bias"] = f["attn_out_bias"] = f["mlp_bias"] = bias
    f["norm_has_bias"] = True
    parallel = r.bool("parallel_attn", "parallel_attn", default=True)
    f["norms_per_layer"] = 2 if new_arch or not parallel else 1
    if new_arch:
        f["norms_per_layer"] = r.int("norms_per_layer", "num_ln_in_parallel_attn", default=2)
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=True)
    _max_context(r, f, default=2048, note="2048 (FalconConfig default)")


def _mpt(r: ConfigReader, f: dict) -> None:
    """MPT: d_model/n_heads/n_layers, MLP expansion_ratio x d_model (GELU, not gated), no biases
    when no_bias, LayerNorm weight only, embeddings always tied (modeling_mpt)."""
    attn = r.sub("attn_config")
    _attention_shape(r, f, layers=("n_layers",), hidden=("d_model",), heads=("n_heads",), kv=("__none__",))
    if attn is not None:
        kv = attn.opt_int("num_kv_heads", "kv_n_heads")
        if kv:
            f["num_kv_heads"] = kv
    ratio = r.int("expansion_ratio", "expansion_ratio", default=4)
    f["intermediate_size"] = ratio * f["hidden_size"]
    f["gated_mlp"] = False
    no_bias = r.bool("no_bias", "no_bias", default=True)
    f["qkv_bias"] = f["attn_out_bias"] = f["mlp_bias"] = f["norm_has_bias"] = not no_bias
    f["tie_word_embeddings"] = True
    _max_context(r, f, "max_seq_len", default=2048, note="2048 (MPTConfig default)")


def _gpt_bigcode(r: ConfigReader, f: dict) -> None:
    """StarCoder / OctoCoder / SantaCoder (gpt_bigcode): multi-query attention, biases on every
    linear, LayerNorm with bias, GELU MLP of n_inner, learned positions (wpe), tied lm_head."""
    multi_query = r.bool("multi_query", "multi_query", default=True)
    _attention_shape(r, f, layers=("n_layer", "num_hidden_layers"), hidden=("n_embd", "hidden_size"),
                     heads=("n_head", "num_attention_heads"), kv=("__none__",))
    if multi_query:
        f["num_kv_heads"] = 1
        r.sources.append(("num_kv_heads", r._where("multi_query") + " (one kv head)"))
    f["intermediate_size"] = r.int("intermediate_size", "n_inner", default=4 * f["hidden_size"],
                                   default_note="4 x n_embd (GPTBigCodeConfig n_inner None)")
    f["gated_mlp"] = False
    f["qkv_bias"] = f["attn_out_bias"] = f["mlp_bias"] = f["norm_has_bias"] = True
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=True)
    _max_context(r, f, "n_positions", "max_position_embeddings")
    if f["max_context"]:
        f["extra_params"] = f["max_context"] * f["hidden_size"]
        f["extra_params_note"] = "learned position embeddings (wpe)"


def _starcoder2(r: ConfigReader, f: dict) -> None:
    """StarCoder2: GQA, biases (use_bias), LayerNorm with bias, GELU MLP, sliding window on all layers."""
    _attention_shape(r, f)
    f["intermediate_size"] = r.int("intermediate_size", "intermediate_size")
    f["gated_mlp"] = False
    bias = r.bool("qkv_bias", "use_bias", default=True)
    f["qkv_bias"] = f["attn_out_bias"] = f["mlp_bias"] = bias
    f["norm_has_bias"] = True
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=True)
    _max_context(r, f)
    _sliding(r, f, _all_layers)


def _olmo2(r: ConfigReader, f: dict) -> None:
    """OLMo 2: post-attention and post-feedforward RMSNorms (no pre-norms), q/k RMSNorm over the
    full q and k projection widths (modeling_olmo2 q_norm: heads x head_dim)."""
    _llama(r, f)
    f["qk_norm"] = f["qk_norm_full_width"] = True


def _cohere(r: ConfigReader, f: dict) -> None:
    """Command-R (cohere): parallel block with one LayerNorm (weight only), tied embeddings, and
    optional per-head q/k LayerNorm of shape (heads, head_dim) (use_qk_norm, Command-R+)."""
    _llama(r, f)
    f["norms_per_layer"] = 1
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=True)
    if r.bool("qk_norm", "use_qk_norm", default=False):
        f["qk_norm"] = f["qk_norm_full_width"] = True


FAMILIES: dict[str, Callable[[ConfigReader, dict], None]] = {
    "llama": _llama, "mistral": _mistral, "mixtral": _mixtral,
    "qwen": _qwen1, "qwen2": _qwen2, "qwen2_moe": _qwen2_moe, "qwen3": _qwen3, "qwen3_moe": _qwen3_moe,
    "gemma2": _gemma2, "gemma3": _gemma3, "gemma3_text": _gemma3,
    "phi3": _phi3, "deepseek_v2": _deepseek, "deepseek_v3": _deepseek,
    "gpt_oss": _gpt_oss, "llama4": _llama4, "llama4_text": _llama4,
    "baichuan": _baichuan, "chatglm": _chatglm, "internlm2": _internlm2,
    "falcon": _falcon, "mpt": _mpt, "gpt_bigcode": _gpt_bigcode, "starcoder2": _starcoder2,
    "olmo2": _olmo2, "cohere": _cohere,
}

# Old remote-code configs name their class but not always a model_type we know.
_ARCHITECTURE_TYPES = {
    "QWenLMHeadModel": "qwen", "BaichuanForCausalLM": "baichuan", "ChatGLMModel": "chatglm",
    "ChatGLMForConditionalGeneration": "chatglm", "InternLM2ForCausalLM": "internlm2",
    "RWForCausalLM": "falcon", "FalconForCausalLM": "falcon", "MPTForCausalLM": "mpt",
    "GPTBigCodeForCausalLM": "gpt_bigcode",
}
_TYPE_ALIASES = {"RefinedWebModel": "falcon", "RefinedWeb": "falcon", "llama4_text": "llama4"}

SUPPORTED_ARCHITECTURES = tuple(sorted(FAMILIES))


def family_of(config: dict, source: str) -> str:
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise FitcheckError(f"{source}: model_type must be a string")
    if model_type in _TYPE_ALIASES:
        return _TYPE_ALIASES[model_type]
    if model_type in FAMILIES:
        return model_type
    archs = config.get("architectures")
    if isinstance(archs, list):
        for arch in archs:
            if isinstance(arch, str) and arch in _ARCHITECTURE_TYPES:
                return _ARCHITECTURE_TYPES[arch]
    return model_type or ""
