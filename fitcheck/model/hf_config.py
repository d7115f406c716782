"""Map a Hugging Face ``config.json`` (already parsed into a dict) to a :class:`ModelSpec`.

One parser for every source: the catalog stores config-like dicts and goes through here, and so
do local checkpoints and Hub downloads.  Pure: no I/O.

Each family's reading follows its transformers ``configuration_*.py`` / ``modeling_*.py`` (or the
remote code its repo ships); the comment on each reader says what is special.  Keys a real
config.json may omit fall back to the transformers config class default, and ``sources`` says so.
Anything missing, of the wrong type, or absurd raises :class:`FitcheckError` naming the field.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from typing import Any

from fitcheck.errors import FitcheckError
from fitcheck.model.spec import ModelSpec

# Bounds beyond which a number cannot describe a real model (a corrupt or hostile file).
_MAX = {
    "num_layers": 10**6,
    "hidden_size": 10**7,
    "intermediate_size": 10**8,
    "num_attention_heads": 10**5,
    "num_kv_heads": 10**5,
    "head_dim": 10**5,
    "vocab_size": 10**8,
    "num_experts": 10**5,
    "max_context": 10**9,
}
_DEFAULT_MAX = 10**8

_REQUIRED = object()
_SHOW_MAX = 40


def _show(value: Any) -> str:
    """A config value for an error message, never longer than ~40 characters (1e300 stays short)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 120:
        return f"~{'-' if value < 0 else ''}1e{int(abs(value).bit_length() * 0.30103)}"
    text = repr(value)
    return text if len(text) <= _SHOW_MAX else text[: _SHOW_MAX - 3] + "..."

_DTYPES = {
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "float32": "float32", "fp32": "float32", "float": "float32",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
}


class _Reader:
    """Typed, bounded access to one config dict, remembering where each value came from."""

    def __init__(self, raw: dict, source: str, prefix: str = ""):
        self.raw = raw
        self.source = source
        self.prefix = prefix
        self.sources: list[tuple[str, str]] = []

    def _where(self, key: str) -> str:
        return f"{self.source}: {self.prefix}{key}"

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def _find(self, keys: tuple[str, ...]) -> tuple[str | None, Any]:
        for key in keys:
            if self.raw.get(key) is not None:
                return key, self.raw[key]
        return None, None

    def int(self, field: str, *keys: str, default: Any = _REQUIRED, minimum: int = 1,
            maximum: int | None = None, default_note: str = "") -> int:
        value = self.opt_int(field, *keys, minimum=minimum, maximum=maximum)
        if value is not None:
            return value
        if default is _REQUIRED:
            raise FitcheckError(f"{self.source}: missing {self.prefix}{keys[0]} ({field})",
                                "is this a decoder-only language model config.json?")
        if default is not None:
            self.sources.append((field, default_note or f"default {default} ({self.prefix}{keys[0]} absent)"))
        return default

    # ``int`` in this class body is the method above: the annotations below name the builtin
    def opt_int(self, field: str, *keys: str, minimum: builtins.int = 1,
                maximum: builtins.int | None = None) -> builtins.int | None:
        key, value = self._find(keys)
        if key is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FitcheckError(f"{self._where(key)} must be a whole number, not {_show(value)}")
        shown = _show(value)  # as written: 1e300 stays 1e+300, not a 300-digit number
        if isinstance(value, float):
            if not math.isfinite(value) or not value.is_integer():
                raise FitcheckError(f"{self._where(key)} must be a whole number, not {shown}")
            value = int(value)
        upper = maximum if maximum is not None else _MAX.get(field, _DEFAULT_MAX)
        if value < minimum or value > upper:
            raise FitcheckError(f"{self._where(key)} = {shown} is out of range ({minimum}..{upper})")
        self.sources.append((field, self._where(key)))
        return value

    def bool(self, field: str, *keys: str, default: bool, record: bool = True) -> bool:
        key, value = self._find(keys)
        if key is None:
            return default
        if not isinstance(value, bool):
            raise FitcheckError(f"{self._where(key)} must be true or false, not {_show(value)}")
        if record:
            self.sources.append((field, self._where(key)))
        return value

    def list_of_str(self, key: str) -> list[str] | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise FitcheckError(f"{self._where(key)} must be a list of strings")
        return value

    def list_of_int(self, key: str) -> list[builtins.int] | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise FitcheckError(f"{self._where(key)} must be a list of whole numbers")
        return value

    def sub(self, key: str) -> _Reader | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise FitcheckError(f"{self._where(key)} must be an object")
        reader = _Reader(value, self.source, f"{self.prefix}{key}.")
        reader.sources = self.sources  # one shared list
        return reader


# ---- shared pieces ---------------------------------------------------------------------------

def _attention_shape(r: _Reader, fields: dict, *, layers=("num_hidden_layers",), hidden=("hidden_size",),
                     heads=("num_attention_heads",), kv=("num_key_value_heads",),
                     defaults: dict | None = None, default_note: str = "") -> None:
    """Layers, hidden, heads, kv heads, head_dim, vocab: the part nearly every family shares."""
    d = defaults or {}
    note = default_note
    fields["num_layers"] = r.int("num_layers", *layers, default=d.get("num_layers", _REQUIRED), default_note=note)
    fields["hidden_size"] = r.int("hidden_size", *hidden, default=d.get("hidden_size", _REQUIRED), default_note=note)
    fields["num_attention_heads"] = r.int("num_attention_heads", *heads,
                                          default=d.get("num_attention_heads", _REQUIRED), default_note=note)
    fields["num_kv_heads"] = r.int("num_kv_heads", *kv, default=d.get("num_kv_heads", fields["num_attention_heads"]),
                                   default_note=note or "= num_attention_heads (no key/value head count: MHA)")
    head_dim = r.opt_int("head_dim", "head_dim")
    if head_dim is None and "head_dim" in d:
        head_dim = d["head_dim"]
        r.sources.append(("head_dim", note or f"default {head_dim}"))
    fields["head_dim"] = head_dim
    fields["vocab_size"] = r.int("vocab_size", "vocab_size", "padded_vocab_size",
                                 default=d.get("vocab_size", _REQUIRED), default_note=note)


def _max_context(r: _Reader, fields: dict, *keys: str, default: int | None = None, note: str = "") -> None:
    keys = keys or ("max_position_embeddings",)
    value = r.opt_int("max_context", *keys)
    if value is None and default is not None:
        value = default
        r.sources.append(("max_context", note or f"default {default}"))
    fields["max_context"] = value


def _sliding_from_layer_types(r: _Reader, fields: dict, types: list[str]) -> None:
    """A ``layer_types`` list names each layer's attention: it wins over any pattern rule."""
    if len(types) != fields["num_layers"]:
        raise FitcheckError(f"{r._where('layer_types')} has {len(types)} entries for "
                            f"{fields['num_layers']} layers")
    n = sum(1 for t in types if t in ("sliding_attention", "chunked_attention"))
    window = r.opt_int("sliding_window", "sliding_window", "attention_chunk_size")
    if n and window:
        fields["sliding_window"], fields["num_sliding_layers"] = window, n
        r.sources.append(("num_sliding_layers", r._where("layer_types")))


def _sliding(r: _Reader, fields: dict, rule: Callable[[int], int] | None) -> None:
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


def _finish_moe(fields: dict, r: _Reader) -> None:
    if fields.get("num_experts"):
        k = fields.get("experts_per_token", 0)
        if k < 1 or k > fields["num_experts"]:
            raise FitcheckError(f"{r.source}: experts per token ({k}) must be 1..{fields['num_experts']}")


# ---- families --------------------------------------------------------------------------------

def _llama(r: _Reader, f: dict, sliding_rule: Callable[[int], int] | None = None) -> None:
    """Llama 1/2/3.x, CodeLlama, Vicuna, TinyLlama, Yi, DeepSeek LLM/Coder, SmolLM (modeling_llama)."""
    _attention_shape(r, f)
    f["intermediate_size"] = r.int("intermediate_size", "intermediate_size")
    bias = r.bool("qkv_bias", "attention_bias", default=False)
    f["qkv_bias"] = f["attn_out_bias"] = bias
    f["mlp_bias"] = r.bool("mlp_bias", "mlp_bias", default=False)
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=False)
    _max_context(r, f)
    _sliding(r, f, sliding_rule)


def _mistral(r: _Reader, f: dict) -> None:
    """Mistral: Llama block; v0.1 slides a 4096 window on every layer, later versions set null."""
    _llama(r, f, _all_layers)


def _mixtral(r: _Reader, f: dict) -> None:
    """Mixtral: Mistral attention, every layer's MLP is `num_local_experts` SwiGLU experts."""
    _mistral(r, f)
    f["num_experts"] = r.int("num_experts", "num_local_experts", "num_experts")
    f["experts_per_token"] = r.int("experts_per_token", "num_experts_per_tok", default=2)
    f["moe_intermediate_size"] = f["intermediate_size"]


def _qwen_sliding(r: _Reader, f: dict) -> None:
    # modeling_qwen2: sliding only when use_sliding_window, on layers >= max_window_layers
    if r.list_of_str("layer_types") is not None:
        _sliding(r, f, None)
    elif r.bool("use_sliding_window", "use_sliding_window", default=False, record=False):
        first = r.int("max_window_layers", "max_window_layers", default=f["num_layers"], minimum=0,
                      maximum=10**6)
        _sliding(r, f, lambda n: max(0, n - first))


def _qwen2(r: _Reader, f: dict) -> None:
    """Qwen1.5 / Qwen2 / Qwen2.5 / QwQ: Llama block with q/k/v biases (o_proj has none)."""
    _attention_shape(r, f)
    f["intermediate_size"] = r.int("intermediate_size", "intermediate_size")
    f["qkv_bias"] = True
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=False)
    _max_context(r, f)
    _qwen_sliding(r, f)


def _qwen_moe_layers(r: _Reader, f: dict) -> None:
    # modeling_qwen2_moe / qwen3_moe: a layer is sparse unless listed in mlp_only_layers, and only
    # every decoder_sparse_step-th layer ((i + 1) % step == 0).
    L = f["num_layers"]
    only = set(r.list_of_int("mlp_only_layers") or [])
    step = r.int("decoder_sparse_step", "decoder_sparse_step", default=1)
    sparse = sum(1 for i in range(L) if i not in only and (i + 1) % step == 0) if L <= 10**5 else L // step
    f["num_dense_layers"] = L - sparse


def _qwen2_moe(r: _Reader, f: dict) -> None:
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


def _qwen3(r: _Reader, f: dict) -> None:
    """Qwen3: no biases, per-head q/k RMSNorm, head_dim explicit (128 even when hidden/heads differs)."""
    _attention_shape(r, f)
    f["intermediate_size"] = r.int("intermediate_size", "intermediate_size")
    bias = r.bool("qkv_bias", "attention_bias", default=False)
    f["qkv_bias"] = f["attn_out_bias"] = bias
    f["qk_norm"] = True
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=False)
    _max_context(r, f)
    _qwen_sliding(r, f)


def _qwen3_moe(r: _Reader, f: dict) -> None:
    """Qwen3-MoE (30B-A3B, 235B-A22B): Qwen3 attention, routed experts only."""
    _qwen3(r, f)
    f["num_experts"] = r.int("num_experts", "num_experts")
    f["experts_per_token"] = r.int("experts_per_token", "num_experts_per_tok")
    f["moe_intermediate_size"] = r.int("moe_intermediate_size", "moe_intermediate_size")
    _qwen_moe_layers(r, f)


def _qwen1(r: _Reader, f: dict) -> None:
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


def _gemma_common(r: _Reader, f: dict, defaults: dict, note: str) -> None:
    _attention_shape(r, f, defaults=defaults, default_note=note)
    f["intermediate_size"] = r.int("intermediate_size", "intermediate_size",
                                   default=defaults.get("intermediate_size", _REQUIRED), default_note=note)
    f["norms_per_layer"] = 4  # input, post-attention, pre- and post-feedforward RMSNorm
    bias = r.bool("qkv_bias", "attention_bias", default=False)
    f["qkv_bias"] = f["attn_out_bias"] = bias
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=True)
    _max_context(r, f, default=defaults.get("max_context"), note=note)


def _gemma2(r: _Reader, f: dict) -> None:
    """Gemma 2: 4 norms per layer, tied embeddings, every other layer a 4096 sliding window."""
    _gemma_common(r, f, {"max_context": 8192, "head_dim": 256}, "transformers Gemma2Config default")
    _sliding(r, f, _every_other)


# transformers Gemma3TextConfig defaults (the multimodal 4B/12B/27B config.json text_config omits them)
_GEMMA3_DEFAULTS = {
    "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_layers": 26,
    "num_attention_heads": 8, "num_kv_heads": 4, "head_dim": 256, "max_context": 131072,
}


def _gemma3(r: _Reader, f: dict) -> None:
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


def _phi3(r: _Reader, f: dict) -> None:
    """Phi-3 / 3.5 / 4 / 4-mini: fused qkv_proj and gate_up_proj, same counts as separate ones.

    Phi-3-mini-4k's config has sliding_window 2047; llama.cpp and vLLM serve it with full
    attention, so it is not applied (the cache estimate stays an upper bound).
    """
    _llama(r, f)
    f["qkv_bias"] = f["attn_out_bias"] = False
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=False)


def _deepseek(r: _Reader, f: dict) -> None:
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


def _gpt_oss(r: _Reader, f: dict) -> None:
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


def _llama4(r: _Reader, f: dict) -> None:
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


def _baichuan(r: _Reader, f: dict) -> None:
    """Baichuan 2: fused W_pack qkv without bias, SwiGLU, RMSNorm, untied NormHead lm_head."""
    _llama(r, f)
    f["tie_word_embeddings"] = False
    _max_context(r, f, "max_position_embeddings", "model_max_length")


def _chatglm(r: _Reader, f: dict) -> None:
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


def _internlm2(r: _Reader, f: dict) -> None:
    """InternLM2 / 2.5: Llama block with fused wqkv (same count), `bias` flag on linears."""
    _llama(r, f)
    bias = r.bool("qkv_bias", "bias", default=False)
    f["qkv_bias"] = f["attn_out_bias"] = bias


def _falcon(r: _Reader, f: dict) -> None:
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


def _mpt(r: _Reader, f: dict) -> None:
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


def _gpt_bigcode(r: _Reader, f: dict) -> None:
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


def _starcoder2(r: _Reader, f: dict) -> None:
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


def _olmo2(r: _Reader, f: dict) -> None:
    """OLMo 2: post-attention and post-feedforward RMSNorms (no pre-norms), q/k RMSNorm over the
    full q and k projection widths (modeling_olmo2 q_norm: heads x head_dim)."""
    _llama(r, f)
    f["qk_norm"] = f["qk_norm_full_width"] = True


def _cohere(r: _Reader, f: dict) -> None:
    """Command-R (cohere): parallel block with one LayerNorm (weight only), tied embeddings, and
    optional per-head q/k LayerNorm of shape (heads, head_dim) (use_qk_norm, Command-R+)."""
    _llama(r, f)
    f["norms_per_layer"] = 1
    f["tie_word_embeddings"] = r.bool("tie_word_embeddings", "tie_word_embeddings", default=True)
    if r.bool("qk_norm", "use_qk_norm", default=False):
        f["qk_norm"] = f["qk_norm_full_width"] = True


_FAMILIES: dict[str, Callable[[_Reader, dict], None]] = {
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

SUPPORTED_ARCHITECTURES = tuple(sorted(_FAMILIES))


def _model_type(config: dict, source: str) -> str:
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise FitcheckError(f"{source}: model_type must be a string")
    if model_type in _TYPE_ALIASES:
        return _TYPE_ALIASES[model_type]
    if model_type in _FAMILIES:
        return model_type
    archs = config.get("architectures")
    if isinstance(archs, list):
        for arch in archs:
            if isinstance(arch, str) and arch in _ARCHITECTURE_TYPES:
                return _ARCHITECTURE_TYPES[arch]
    return model_type or ""


# ---- vision towers (parameters outside the text decoder) ---------------------------------------

def _siglip_params(v: _Reader, text_hidden: int) -> int:
    """SigLIP vision tower (modeling_siglip) + Gemma 3 projector (input projection and soft-emb norm)."""
    d = v.int("vision_hidden_size", "hidden_size", default=1152)
    inner = v.int("vision_intermediate_size", "intermediate_size", default=4304)
    layers = v.int("vision_layers", "num_hidden_layers", default=27)
    patch = v.int("vision_patch_size", "patch_size", default=14)
    image = v.int("vision_image_size", "image_size", default=896)
    channels = v.int("vision_channels", "num_channels", default=3)
    embeddings = channels * patch * patch * d + d + (image // patch) ** 2 * d
    per_layer = 4 * (d * d + d) + (d * inner + inner) + (inner * d + d) + 2 * 2 * d
    projector = d * text_hidden + d
    return embeddings + layers * per_layer + 2 * d + projector


def _llama4_vision_params(v: _Reader, text_hidden: int) -> int:
    """Llama 4 vision encoder (modeling_llama4 Llama4VisionModel), pixel-shuffle adapter, projector."""
    d = v.int("vision_hidden_size", "hidden_size", default=1408)
    inner = v.int("vision_intermediate_size", "intermediate_size", default=5632)
    layers = v.int("vision_layers", "num_hidden_layers", default=34)
    patch = v.int("vision_patch_size", "patch_size", default=14)
    image = v.int("vision_image_size", "image_size", default=336)
    channels = v.int("vision_channels", "num_channels", default=3)
    proj_in = v.int("projector_input_dim", "projector_input_dim", default=4096)
    proj_out = v.int("projector_output_dim", "projector_output_dim", default=4096)
    out_dim = v.int("vision_output_dim", "vision_output_dim", default=4096)
    shuffled = d * 4  # pixel_shuffle_ratio 0.5 folds 2 x 2 patches into one token
    embeddings = channels * patch * patch * d + d + ((image // patch) ** 2 + 1) * d + 2 * 2 * d
    per_layer = 4 * (d * d + d) + (d * inner + inner) + (inner * d + d) + 2 * 2 * d
    adapter = shuffled * proj_in + proj_in * proj_out
    return embeddings + layers * per_layer + adapter + out_dim * text_hidden


# ---- storage: dtype and pre-quantized formats -------------------------------------------------

def _stored_dtype(config: dict, source: str, fields: dict, sources: list) -> None:
    for key in ("torch_dtype", "dtype"):
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise FitcheckError(f"{source}: {key} must be a string such as 'bfloat16'")
        dtype = _DTYPES.get(value.lower().removeprefix("torch."))
        if dtype:
            fields["stored_dtype"] = dtype
            sources.append(("stored_dtype", f"{source}: {key}"))
        return


def stored_format_of(quant: Any, source: str = "config.json") -> str | None:
    """'gptq-int4', 'gptq-int8', 'awq', 'fp8', 'mxfp4', 'nf4' / 'fp4' / 'int8' (bitsandbytes), or the
    quant_method itself for a scheme fitcheck does not model separately; None when not quantized."""
    if quant is None:
        return None
    if not isinstance(quant, dict):
        raise FitcheckError(f"{source}: quantization_config must be an object")
    method = quant.get("quant_method")
    if not isinstance(method, str):
        raise FitcheckError(f"{source}: quantization_config.quant_method must be a string")
    method = method.lower()
    bits = quant.get("bits", quant.get("w_bit"))
    if method == "gptq":
        if bits not in (2, 3, 4, 8) or isinstance(bits, bool):
            raise FitcheckError(f"{source}: quantization_config.bits must be 2, 3, 4 or 8 for GPTQ")
        return f"gptq-int{bits}"
    if method == "awq":
        return "awq"
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8"
    if method == "mxfp4":
        return "mxfp4"
    if method == "bitsandbytes":
        if quant.get("load_in_4bit") is True:
            return "fp4" if quant.get("bnb_4bit_quant_type") == "fp4" else "nf4"
        return "int8"
    if method == "compressed-tensors":
        return "fp8" if quant.get("format") == "float-quantized" else "compressed-tensors"
    return method


# ---- rotary tables: what vLLM and SGLang cache at load ------------------------------------------
# vLLM's get_rope builds one RotaryEmbedding per distinct setting (_ROPE_DICT) and each registers a cos/sin cache
# of [positions, rotary_dim] (base.py RotaryEmbedding.__init__, _compute_cos_sin_cache); the positions follow the
# scaling type: `linear` and `dynamic` (factor) max_position × factor, `yarn` and `deepseek_yarn`
# original_max_position_embeddings × factor, `longrope` the short table of original_max_position_embeddings and
# the long one of max_position, every other type max_position
# (https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/model_executor/layers/rotary_embedding/__init__.py and
# linear_scaling_rope.py, dynamic_ntk_scaling_rope.py, yarn_scaling_rope.py, phi3_long_rope_scaled_rope.py).
# SGLang's rotary_embedding.py is the same code.  Families without rotary positions: MPT (ALiBi), GPTBigCode
# (learned positions), Baichuan unless hidden_size is 4096 (vLLM baichuan.py: "ROPE" for the 7B, "ALIBI" else),
# Falcon with alibi.  The model files pass max_position_embeddings (the config class's default where config.json
# has none, else vLLM's 8192); ChatGLM passes seq_length and rotates half of each head (chatglm.py); MLA rotates
# qk_rope_head_dim; Gemma 3's sliding layers use their own unscaled rope (gemma3.py), a second table.
_NO_ROPE = {"mpt", "gpt_bigcode"}
_ROPE_FACTOR_MAX = 10**4


def _rope_positions(r: _Reader, positions: int, scaling: Any, where: str) -> int:
    if not isinstance(scaling, dict):
        return positions
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    factor = scaling.get("factor", 1.0)
    # the comparison alone refuses nan, ±inf and integers too large for a float
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= _ROPE_FACTOR_MAX:
        raise FitcheckError(f"{r._where(where)}.factor must be a number in (0, {_ROPE_FACTOR_MAX}], "
                            f"not {_show(factor)}")
    original = scaling.get("original_max_position_embeddings", r.raw.get("original_max_position_embeddings"))
    if isinstance(original, bool) or not isinstance(original, int) or not 0 < original <= _MAX["max_context"]:
        original = None
    if kind == "linear" or (kind == "dynamic" and "alpha" not in scaling):
        return int(positions * factor)
    if kind in ("yarn", "deepseek_yarn", "deepseek_llama_scaling") and original:
        return math.ceil(original * factor)
    if kind in ("longrope", "su") and original:
        return positions + original
    return positions


def _rope_tables(r: _Reader, f: dict, model_type: str) -> tuple[tuple[int, int], ...]:
    """(positions, rotary dims) of each cos/sin table vLLM and SGLang build for this model (comment above)."""
    raw = r.raw
    if model_type in _NO_ROPE or (model_type == "baichuan" and f["hidden_size"] != 4096) \
            or (model_type == "falcon" and raw.get("alibi") is True):
        return ()
    head = f.get("head_dim") or f["hidden_size"] // f["num_attention_heads"]
    if model_type in ("deepseek_v2", "deepseek_v3"):
        dims = f["qk_rope_head_dim"]
    elif model_type == "chatglm":
        dims = head // 2
    else:
        # transformers 5 moves partial_rotary_factor into rope_parameters, where vLLM's get_rope reads it
        params = raw.get("rope_parameters")
        nested = params.get("partial_rotary_factor") if isinstance(params, dict) else None
        fraction = raw.get("partial_rotary_factor", nested if nested is not None else raw.get("rotary_pct", 1.0))
        ok = not isinstance(fraction, bool) and isinstance(fraction, (int, float)) and 0 < fraction <= 1
        dims = int(head * fraction) if ok else head
    key = ("seq_length",) if model_type == "chatglm" else ("max_position_embeddings",)
    positions = r.opt_int("rope_tables", *key, maximum=_MAX["max_context"]) or f.get("max_context") or 8192
    where = "rope_scaling" if raw.get("rope_scaling") else "rope_parameters"
    scaling = raw.get(where)
    if model_type in ("gemma3", "gemma3_text"):
        if isinstance(scaling, dict) and isinstance(scaling.get("full_attention"), dict):
            scaling, where = scaling["full_attention"], where + ".full_attention"
        tables = [(_rope_positions(r, positions, scaling, where), dims)]
        if f.get("num_sliding_layers"):
            tables.append((positions, dims))
        return tuple(tables)
    return ((_rope_positions(r, positions, scaling, where), dims),)


# ---- entry point ------------------------------------------------------------------------------

_NESTED_TEXT_TYPES = {"gemma3": "gemma3", "llama4": "llama4"}


def spec_from_config(config: dict, name: str, *, source: str = "config.json") -> ModelSpec:
    """The :class:`ModelSpec` a Hugging Face config.json describes.

    Raises :class:`FitcheckError` (one line, naming the field) for an architecture fitcheck cannot
    read, a missing field, a wrong type or an absurd value.
    """
    if not isinstance(config, dict):
        raise FitcheckError(f"{source}: expected a JSON object, got {type(config).__name__}")
    model_type = _model_type(config, source)
    top = _Reader(config, source)
    reader = top
    vision = None
    text = top.sub("text_config") if model_type in _NESTED_TEXT_TYPES else None
    if text is not None:
        reader = text
        vision = top.sub("vision_config")
    family_reader = _FAMILIES.get(model_type)
    fields: dict[str, Any] = {}
    if family_reader is None:
        known = ", ".join(SUPPORTED_ARCHITECTURES)
        raise FitcheckError(f"{source}: model_type {_show(model_type) if model_type else '(none)'} is not an architecture fitcheck reads",
                            f"known: {known}; or give --params for a generic estimate")
    family_reader(reader, fields)
    _validate(fields, reader)
    fields["rope_tables"] = _rope_tables(reader, fields, model_type)
    if fields["rope_tables"]:
        top.sources.append(("rope_tables", f"{source}: max_position_embeddings, rope_scaling (vLLM's get_rope)"))

    quant = reader.raw.get("quantization_config", config.get("quantization_config"))
    stored_format = stored_format_of(quant, source)
    if stored_format:
        fields["stored_format"] = stored_format
        top.sources.append(("stored_format", f"{source}: quantization_config.quant_method"))
    _stored_dtype(reader.raw if reader.raw.get("torch_dtype") or reader.raw.get("dtype") else config,
                  source, fields, top.sources)

    if vision is not None:
        if model_type == "gemma3":
            fields["extra_params"] = _siglip_params(vision, fields["hidden_size"])
            fields["extra_params_note"] = "SigLIP vision tower and projector (counted from vision_config)"
        else:
            fields["extra_params"] = _llama4_vision_params(vision, fields["hidden_size"])
            fields["extra_params_note"] = "vision encoder, adapter and projector (counted from vision_config)"
        top.sources.append(("extra_params", f"{source}: vision_config"))

    latest = dict(top.sources)  # a field read twice keeps where its final value came from
    sources = tuple((key, latest[key]) for key in dict.fromkeys(k for k, _ in top.sources))
    return ModelSpec(name=name, architecture=model_type, sources=sources, **fields)


def _validate(f: dict, r: _Reader) -> None:
    heads, kv, h = f["num_attention_heads"], f["num_kv_heads"], f["hidden_size"]
    if kv > heads or heads % kv:
        raise FitcheckError(f"{r.source}: {kv} key/value heads do not divide {heads} attention heads")
    if not f.get("head_dim") and not f.get("kv_lora_rank") and h % heads:
        raise FitcheckError(f"{r.source}: hidden_size {h} is not divisible by num_attention_heads {heads}",
                            "give head_dim explicitly")
    _finish_moe(f, r)
    if f.get("num_sliding_layers", 0) > f["num_layers"]:
        raise FitcheckError(f"{r.source}: more sliding-window layers than layers")
