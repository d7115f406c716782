"""GGUF metadata -> ModelSpec: a llama.cpp file's architecture numbers from its header (fitcheck.model.gguf_header),
its flags (biases, q/k norms, tied output, shared experts) from which tensors exist."""

from __future__ import annotations

from typing import Any, Literal, TypedDict, overload

from fitcheck.errors import FitcheckError
from fitcheck.model.gguf_header import FILE_TYPE_PRECISIONS, UNQUANTIZED_FILE_TYPES, ArrayInfo, GGUFHeader, GGUFTensor
from fitcheck.model.spec import ModelSpec

# ---- GGUF metadata -> ModelSpec -------------------------------------------------------------
# Keys are llama.cpp's (gguf-py constants.py, class Keys: LLM, Attention, Rope); tensor names
# are its MODEL_TENSOR names (blk.N.attn_q.weight, ffn_gate_exps, ...).

# GGUF architecture -> Hugging Face model_type, so the rest of fitcheck sees one vocabulary.
_HF_MODEL_TYPES = {
    "gpt-oss": "gpt_oss", "qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe",
    "deepseek2": "deepseek_v2", "gemma3": "gemma3_text", "command-r": "cohere",
}

# Layers with sliding-window attention, as llama.cpp's llama_hparams::set_swa_pattern(n) marks
# them (layer il slides when il % n < n - 1): gemma2 and gpt-oss n = 2, gemma3 n = 6, cohere2 n = 4
# (src/llama-model.cpp, load_hparams).
_SWA_PATTERN = {"gemma2": 2, "gpt-oss": 2, "gemma3": 6, "cohere2": 4}

_MAX_LAYERS = 10_000
_MAX_WIDTH = 1 << 24


@overload
def _meta_int(header: GGUFHeader, key: str, *, required: Literal[True], default: int | None = None) -> int: ...


@overload
def _meta_int(header: GGUFHeader, key: str, *, required: bool = False,
              default: int | None = None) -> int | None: ...


def _meta_int(header: GGUFHeader, key: str, *, required: bool = False,
              default: int | None = None) -> int | None:
    """An integer metadata value; a per-layer array counts as its largest entry."""
    value = header.metadata.get(key)
    if isinstance(value, ArrayInfo):
        value = max(value.values) if value.values else None
    if value is None:
        if required:
            raise FitcheckError(f"{header.source}: GGUF metadata lacks {key}",
                                "fitcheck reads llama.cpp GGUF files of decoder LLMs")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > _MAX_WIDTH:
        raise FitcheckError(f"{header.source}: GGUF metadata {key} = {str(value)[:40]} is not a valid count",
                            "re-download it, or point at another file")
    return value


def _dominant_type(tensors: dict[str, GGUFTensor]) -> str:
    """The ggml type holding most bytes among 2-D tensors (for files without general.file_type)."""
    totals: dict[str, int] = {}
    for t in tensors.values():
        if len(t.dims) >= 2:
            totals[t.type_name] = totals.get(t.type_name, 0) + t.nbytes
    return max(totals, key=totals.__getitem__).lower() if totals else "f32"


class _MLAFields(TypedDict, total=False):
    """The ModelSpec fields of multi-head latent attention, as spec_from_gguf passes them."""

    kv_lora_rank: int
    q_lora_rank: int | None
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int


def _vocab_from_metadata(first: Any, arch: str) -> tuple[int, str]:
    """The vocabulary size where no token_embd tensor says it: the tokenizer's token list, else vocab_size."""
    tokens = first.metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, ArrayInfo):
        return len(tokens), "tokenizer.ggml.tokens length"
    return _meta_int(first, f"{arch}.vocab_size", required=True), f"GGUF {arch}.vocab_size"


def _dense_layers(leading: int | None, tensors: dict, layers: int) -> int:
    """A mixture of experts' dense layers: leading_dense_block_count, else the blocks without a router."""
    if leading is not None:
        return leading
    return sum(1 for i in range(layers) if f"blk.{i}.ffn_gate_inp.weight" not in tensors) if tensors else 0


def _sliding_layers(first: Any, arch: str, layers: int) -> int:
    """Layers with a sliding window: the file's pattern, else llama.cpp's for the architecture, else every one."""
    pattern = first.metadata.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, ArrayInfo) and pattern.values is not None:
        return sum(1 for v in pattern.values if v)
    if arch in _SWA_PATTERN:
        n = _SWA_PATTERN[arch]
        return sum(1 for il in range(layers) if il % n < n - 1)
    return layers


def spec_from_gguf(headers, name: str):
    """ModelSpec from the header(s) of one GGUF model (several when it is split into shards).

    Architecture numbers come from the first shard's metadata, flags (biases, q/k norms, tied
    output, shared experts) from which tensors exist, and ``stored_weight_bytes`` is the exact sum
    of all shards' tensor bytes.
    """
    headers = list(headers)
    first = headers[0]
    arch = first.architecture
    if not arch:
        raise FitcheckError(f"{first.source}: GGUF metadata lacks general.architecture",
                            "fitcheck reads llama.cpp GGUF files of decoder LLMs")
    if f"{arch}.attention.head_count" not in first.metadata:
        raise FitcheckError(f"{first.source}: unsupported architecture {arch} (no {arch}.attention.head_count)",
                            "fitcheck estimates attention decoders (llama, qwen2, gemma, mistral, ...)")
    tensors = {t.name: t for h in headers for t in h.tensors}
    src = f"GGUF {arch}."

    def key(k: str, **kw) -> int | None:
        return _meta_int(first, f"{arch}.{k}", **kw)

    def required_key(k: str) -> int:
        return _meta_int(first, f"{arch}.{k}", required=True)

    def has(suffix: str, block: int | None = None) -> bool:
        if block is not None:
            return f"blk.{block}.{suffix}" in tensors
        return any(f"blk.{i}.{suffix}" in tensors for i in range(layers))

    sources: list[tuple[str, str]] = []
    layers = required_key("block_count")
    hidden = required_key("embedding_length")
    heads = required_key("attention.head_count")
    if not 0 < layers <= _MAX_LAYERS or not hidden or not heads:
        raise FitcheckError(f"{first.source}: GGUF metadata has zero or absurd layer/width/head counts",
                            "re-download it, or point at another file")
    kv_heads = key("attention.head_count_kv", default=heads) or heads
    sources += [("num_layers", src + "block_count"), ("hidden_size", src + "embedding_length"),
                ("num_attention_heads", src + "attention.head_count")]

    embd = tensors.get("token_embd.weight")
    if embd is not None and len(embd.dims) == 2:
        vocab, vocab_src = embd.dims[1], "token_embd.weight shape"
    else:
        vocab, vocab_src = _vocab_from_metadata(first, arch)
    sources.append(("vocab_size", vocab_src))

    # MoE: expert counts from metadata; dense layers are blocks without a router tensor.
    experts = key("expert_count", default=0) or 0
    used = key("expert_used_count", default=0) or 0
    ff = key("feed_forward_length")
    expert_ff = key("expert_feed_forward_length") or (ff if experts else 0) or 0
    if ff is None:
        ff = expert_ff
    if not ff:
        raise FitcheckError(f"{first.source}: GGUF metadata lacks {arch}.feed_forward_length",
                            "fitcheck reads llama.cpp GGUF files of decoder LLMs")
    shared = shared_ff = dense_layers = 0
    if experts:
        shared = key("expert_shared_count", default=0) or (1 if has("ffn_up_shexp.weight") else 0)
        shared_ff = key("expert_shared_feed_forward_length", default=0) or 0
        dense_layers = _dense_layers(key("leading_dense_block_count"), tensors, layers)
        sources.append(("num_experts", src + "expert_count"))

    # Multi-head latent attention (deepseek2): newer files store the absorbed widths in
    # key_length/value_length and the per-head ones in key_length_mla/value_length_mla.
    kv_lora = key("attention.kv_lora_rank", default=0) or 0
    q_lora = key("attention.q_lora_rank")
    rope_dim = key("rope.dimension_count", default=0) or 0
    key_len = key("attention.key_length")
    value_len = key("attention.value_length")
    mla: _MLAFields = {}
    head_dim = None
    if kv_lora:
        k_mla = key("attention.key_length_mla") or key_len or 0
        v_mla = key("attention.value_length_mla") or value_len or 0
        mla = _MLAFields(kv_lora_rank=kv_lora, q_lora_rank=q_lora or None, qk_rope_head_dim=rope_dim,
                         qk_nope_head_dim=max(k_mla - rope_dim, 0), v_head_dim=v_mla)
        sources.append(("kv_lora_rank", src + "attention.kv_lora_rank"))
    elif key_len:
        head_dim = key_len
        sources.append(("head_dim", src + "attention.key_length"))

    window = key("attention.sliding_window")
    sliding_layers = _sliding_layers(first, arch, layers) if window else 0
    if window:
        sources.append(("num_sliding_layers", f"llama.cpp sliding-window pattern for {arch}"))

    _check_gguf_shape(first.source, arch, heads=heads, kv_heads=kv_heads, hidden=hidden, head_dim=head_dim,
                      mla=bool(kv_lora), experts=experts, used=used, vocab=vocab)

    norm_names = ("attn_norm.weight", "ffn_norm.weight", "post_attention_norm.weight",
                  "post_ffw_norm.weight")
    norms = sum(1 for n in norm_names if has(n, 0)) or 2
    moe_block = dense_layers if experts and dense_layers < layers else 0
    gated = (has("ffn_gate.weight") or has("ffn_gate_exps.weight") or has("ffn_gate_up_exps.weight")
             or (has("ffn_up.weight", 0) and tensors["blk.0.ffn_up.weight"].dims[-1:] == (2 * ff,)))
    file_type = first.file_type or _dominant_type(tensors)
    stored_dtype = UNQUANTIZED_FILE_TYPES.get(file_type, "bfloat16")
    sources.append(("stored_format", "GGUF general.file_type" if first.file_type
                    else "GGUF dominant tensor type (no general.file_type)"))
    sources.append(("stored_weight_bytes", "GGUF tensor infos (exact)"))

    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        intermediate_size=ff,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        vocab_size=vocab,
        head_dim=head_dim,
        tie_word_embeddings="output.weight" not in tensors,
        architecture=_HF_MODEL_TYPES.get(arch, arch),
        gated_mlp=bool(gated) or not has("ffn_up.weight"),
        qkv_bias=has("attn_q.bias", 0) or has("attn_qkv.bias", 0),
        attn_out_bias=has("attn_output.bias", 0),
        mlp_bias=has("ffn_up.bias") or has("ffn_down.bias"),
        norm_has_bias=has("attn_norm.bias", 0),
        norms_per_layer=norms,
        qk_norm=not kv_lora and has("attn_q_norm.weight", 0),
        attention_sinks=has("attn_sinks.weight", 0) or has("attn_sinks", 0),
        num_experts=experts,
        experts_per_token=used,
        moe_intermediate_size=expert_ff if experts else 0,
        num_shared_experts=shared,
        shared_expert_intermediate_size=shared_ff,
        num_dense_layers=dense_layers,
        router_bias=bool(experts) and (has("ffn_gate_inp.bias", moe_block)
                                       or has("exp_probs_b.bias", moe_block)),
        expert_bias=bool(experts) and (has("ffn_up_exps.bias", moe_block)
                                       or has("ffn_gate_up_exps.bias", moe_block)),
        sliding_window=window or None,
        num_sliding_layers=sliding_layers,
        max_context=key("context_length"),
        stored_dtype=stored_dtype,
        stored_format=FILE_TYPE_PRECISIONS.get(file_type, file_type),
        stored_file_type=file_type.upper(),
        group_formats=(("experts", "mxfp4"),) if any(
            n.endswith("_exps.weight") and t.type_name == "MXFP4" for n, t in tensors.items()) else (),
        stored_weight_bytes=sum(t.nbytes for t in tensors.values()),
        sources=tuple(sources),
        **mla,
    )


def _check_gguf_shape(source: str, arch: str, *, heads: int, kv_heads: int, hidden: int, head_dim: int | None,
                      mla: bool, experts: int, used: int, vocab: int) -> None:
    """The same consistency checks config.json gets (hf_config._validate), on GGUF metadata."""
    def bad(what: str) -> FitcheckError:
        return FitcheckError(f"{source}: GGUF metadata: {what}", "re-download it, or point at another file")

    if kv_heads > heads or heads % kv_heads:
        raise bad(f"{arch}.attention.head_count_kv {kv_heads} does not divide head_count {heads}")
    if not head_dim and not mla and hidden % heads:
        raise bad(f"{arch}.embedding_length {hidden} is not divisible by head_count {heads} "
                  "(and there is no attention.key_length)")
    if experts and not 1 <= used <= experts:
        raise bad(f"{arch}.expert_used_count {used} must be 1..{experts} (expert_count)")
    if not experts and used:
        raise bad(f"{arch}.expert_used_count {used} without expert_count")
    if not vocab:
        raise bad("vocabulary size 0")
