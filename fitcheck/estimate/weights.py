"""Bytes of a model's weights in a given format, tensor group by tensor group.

Quantized formats pack only the linear layers; embeddings, lm_head, norms, biases and routers
stay 16-bit (bitsandbytes, GPTQ, AWQ, FP8 checkpoints all leave them so).  GGUF files follow
llama.cpp's per-tensor type rules, which give some tensors more bits (`q4_k_m` is a mixture).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from fitcheck.estimate.formats import (
    GGML_K_FALLBACK,
    GGML_TYPE_BITS,
    WeightFormat,
)
from fitcheck.model import spec as S
from fitcheck.model.spec import ModelSpec


@dataclass(frozen=True)
class Matrix:
    """One kind of linear weight matrix: `count` copies per layer over `layers` layers."""

    role: str      # llama.cpp-style role: attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down ...
    rows_in: int   # input features (GGUF row length)
    cols_out: int  # output features
    per_layer: int
    layers: int

    @property
    def params(self) -> int:
        return self.rows_in * self.cols_out * self.per_layer * self.layers


def linear_matrices(spec: ModelSpec) -> tuple[Matrix, ...]:
    """The transformer's linear layers, matrix by matrix (embeddings and lm_head excluded)."""
    h, L = spec.hidden_size, spec.num_layers
    heads = spec.num_attention_heads
    out: list[Matrix] = []
    if spec.is_mla:
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        if spec.q_lora_rank:
            out += [Matrix("attn_q_a", h, spec.q_lora_rank, 1, L), Matrix("attn_q_b", spec.q_lora_rank, heads * qk, 1, L)]
        else:
            out.append(Matrix("attn_q", h, heads * qk, 1, L))
        out += [
            Matrix("attn_kv_a_mqa", h, spec.kv_lora_rank + spec.qk_rope_head_dim, 1, L),
            Matrix("attn_kv_b", spec.kv_lora_rank, heads * (spec.qk_nope_head_dim + spec.v_head_dim), 1, L),
            Matrix("attn_output", heads * spec.v_head_dim, h, 1, L),
        ]
    else:
        d = spec.attn_head_dim
        out += [
            Matrix("attn_q", h, heads * d, 1, L),
            Matrix("attn_k", h, spec.num_kv_heads * d, 1, L),
            Matrix("attn_v", h, spec.num_kv_heads * d, 1, L),
            Matrix("attn_output", heads * d, h, 1, L),
        ]
    dense = spec.num_dense_layers if spec.is_moe else L
    if dense:
        if spec.gated_mlp:
            out.append(Matrix("ffn_gate", h, spec.intermediate_size, 1, dense))
        out += [Matrix("ffn_up", h, spec.intermediate_size, 1, dense), Matrix("ffn_down", spec.intermediate_size, h, 1, dense)]
    if spec.is_moe:
        m, E = spec.num_moe_layers, spec.num_experts
        if spec.gated_mlp:
            out.append(Matrix("ffn_gate_exps", h, spec.moe_intermediate_size, E, m))
        out += [Matrix("ffn_up_exps", h, spec.moe_intermediate_size, E, m),
                Matrix("ffn_down_exps", spec.moe_intermediate_size, h, E, m)]
        if spec.num_shared_experts:
            w = (spec.shared_expert_intermediate_size or spec.moe_intermediate_size) * spec.num_shared_experts
            if spec.gated_mlp:
                out.append(Matrix("ffn_gate_shexp", h, w, 1, m))
            out += [Matrix("ffn_up_shexp", h, w, 1, m), Matrix("ffn_down_shexp", w, h, 1, m)]
    return tuple(out)


def weight_tensor_sizes(spec: ModelSpec, fmt: WeightFormat) -> list[int]:
    """Bytes of each large weight tensor in the order a model's modules create them: the input
    embeddings, then layer by layer its linear matrices (attention, then MLP or experts), then an
    untied lm_head.  Norms and biases (kilobytes: the allocator's small pool) are left out;
    a quantized matrix counts as one tensor of its packed size."""
    keep = fmt.keep_bits / 8
    embedding = int(spec.vocab_size * spec.hidden_size * keep)
    matrices = linear_matrices(spec)
    sizes = [embedding]
    for layer in range(spec.num_layers):
        for m in matrices:
            if layer < m.layers:
                sizes += [int(m.rows_in * m.cols_out * fmt.linear_bits / 8)] * m.per_layer
    if not spec.tie_word_embeddings:
        sizes.append(embedding)
    return sizes


def weight_tensor_runs(spec: ModelSpec, fmt: WeightFormat) -> list[tuple[list[int], int]]:
    """:func:`weight_tensor_sizes` as runs: (one layer's sizes, how many consecutive layers have them),
    so a 100,000-layer config costs as much as its distinct layer shapes."""
    keep = fmt.keep_bits / 8
    embedding = int(spec.vocab_size * spec.hidden_size * keep)
    matrices = linear_matrices(spec)
    runs: list[tuple[list[int], int]] = [([embedding], 1)]
    bounds = sorted({0, spec.num_layers, *(min(m.layers, spec.num_layers) for m in matrices)})
    for start, end in zip(bounds, bounds[1:], strict=False):
        sizes: list[int] = []
        for m in matrices:
            if start < m.layers:
                sizes += [int(m.rows_in * m.cols_out * fmt.linear_bits / 8)] * m.per_layer
        if end > start:
            runs.append((sizes, end - start))
    if not spec.tie_word_embeddings:
        runs.append(([embedding], 1))
    return runs


def largest_matrix_params(spec: ModelSpec) -> int:
    """Parameters of the largest single linear matrix (one expert for MoE)."""
    return max(m.rows_in * m.cols_out for m in linear_matrices(spec))


@dataclass(frozen=True)
class WeightBytes:
    """Weight bytes by tensor group, plus the per-layer part (for offload and sharding)."""

    by_group: tuple[tuple[str, int], ...]
    per_layer_bytes: int        # one transformer layer's weights (average over layers)
    embed_bytes: int            # token embedding
    lm_head_bytes: int          # output projection (0 when tied)

    @property
    def total(self) -> int:
        return sum(b for _, b in self.by_group)


@lru_cache(maxsize=1024)  # pure, and searches ask for the same (spec, format) many times
def weight_bytes(spec: ModelSpec, fmt: WeightFormat, *, untie_lm_head: bool = False) -> WeightBytes:
    """Bytes of every tensor group of `spec` stored as `fmt`.

    `untie_lm_head`: count a separate lm_head even when the checkpoint ties it to the embedding
    (AutoAWQ loads tied Qwen2.5 checkpoints with an untied fp16 head: measured, see accuracy notes).
    """
    if fmt.gguf:
        return _gguf_weight_bytes(spec, fmt.name)
    groups = {g.kind: g.params for g in spec.tensor_groups()}
    keep = fmt.keep_bits / 8
    lin = fmt.linear_bits / 8
    # Every format is counted from the full-precision model: a 16-bit request of an MXFP4 or FP8
    # checkpoint is its dequantized size, and int8/nf4/AWQ/GPTQ quantize that dequantized base
    # (bitsandbytes and the 4-bit quantizers start from bf16 weights).  MXFP4 packs the experts only.
    out: list[tuple[str, int]] = []
    for kind, params in groups.items():
        packed = (kind in S.LINEAR_KINDS or (fmt.packs_embeddings and kind in (S.EMBED, S.LM_HEAD))) \
            and fmt.packs_kind(kind)
        out.append((kind, int(params * (lin if packed else keep))))
    if untie_lm_head and spec.tie_word_embeddings:
        out.append((S.LM_HEAD, int(groups[S.EMBED] * keep)))
    total_layers = sum(b for k, b in out if k not in (S.EMBED, S.LM_HEAD, S.OTHER))
    embed = dict(out).get(S.EMBED, 0)
    head = sum(b for k, b in out if k == S.LM_HEAD)
    return WeightBytes(tuple(out), total_layers // max(spec.num_layers, 1), embed, head)


def packed_experts(spec: ModelSpec, fmt: WeightFormat) -> WeightFormat:
    """``fmt`` with an MXFP4 checkpoint's experts kept MXFP4 at 16/32 bits: what an engine that loads them as
    stored holds (llama.cpp's converter writes them as ggml's MXFP4 type, vLLM's Mxfp4 method loads the
    checkpoint as stored; only the rest is 16/32-bit); other formats and checkpoints as they are."""
    if fmt.family == "float" and spec.stored_groups().get(S.EXPERTS) == "mxfp4":
        return replace(fmt, linear_bits=GGML_TYPE_BITS["mxfp4"], packs=frozenset({S.EXPERTS}))
    return fmt


def rotary_table_bytes(spec: ModelSpec, dtype_bytes: int) -> tuple[int, str]:
    """The per-layer cos/sin tables older transformers releases build at load (plan.rotary_table_mode):
    2 tables × max_position_embeddings × rotary dim in the load dtype, in every attention layer."""
    if not spec.max_context:
        return 0, ""
    dim = spec.attn_head_dim
    n = 2 * spec.max_context * dim * dtype_bytes * spec.num_layers
    return n, (f"rotary cos/sin tables: 2 × {spec.max_context:,} positions × {dim} × {dtype_bytes} B "
               f"in each of {spec.num_layers} layers (older transformers releases)")


# ---- GGUF mixtures -------------------------------------------------------------------------
# llama.cpp src/llama-quant.cpp, llama_tensor_get_type() (b4500-b6000 behave the same here):
#   output.weight -> Q6_K unless the file type is Q8_0 (then Q8_0); Q8_0 when cols % 256 != 0.
#   attn_v:  Q2_K -> Q4_K if n_gqa >= 4 else Q3_K;  Q3_K_M -> Q5_K for the first 2 layers else Q4_K;
#            Q4_K_M/Q5_K_M -> Q6_K on use_more_bits layers;  8 experts (Mixtral) -> Q8_0.
#   attn_k:  8 experts -> Q8_0.
#   ffn_down: Q2_K -> Q3_K;  Q3_K_M -> Q5_K for the first n/16 layers else Q4_K;
#            Q4_K_M/Q5_K_M -> Q6_K on use_more_bits layers.
#   attn_output: Q2_K -> Q3_K; Q3_K_M -> Q4_K (dense); 8 experts with Q2_K/Q3_K_* -> Q5_K.
#   1-D tensors (norms, biases) stay F32.  token_embd keeps the file's base type, except when
#   there is no output.weight (tied embeddings): then it is treated as the output tensor.
#   MXFP4_MOE: "MoE tensors -> MXFP4, other tensors -> Q8_0" (tensor->ne[2] > 1), after the output
#   rule above (output.weight Q6_K).
# MXFP4 checkpoints (gpt-oss) keep their experts MXFP4 in every GGUF build: the expert tensors are
# written as ggml's MXFP4 at conversion and the published quantizations (ggml-org/gpt-oss-*-GGUF,
# unsloth/gpt-oss-*-GGUF) retype only the other tensors, so their q4_k_m and F16 files differ by
# the attention and embedding bytes.
_BASE_TYPE = {"q8_0": "q8_0", "q6_k": "q6_k", "q5_k_m": "q5_k", "q4_k_m": "q4_k", "q4_0": "q4_0",
              "q3_k_m": "q3_k", "q2_k": "q2_k", "mxfp4_moe": "q8_0"}


def _use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _gguf_tensor_type(ftype: str, role: str, layer: int, n_layers: int, spec: ModelSpec) -> str:
    if role.endswith("_exps") and (ftype == "mxfp4_moe" or spec.stored_groups().get(S.EXPERTS) == "mxfp4"):
        return "mxfp4"
    base = _BASE_TYPE[ftype]
    eight_experts = spec.num_experts == 8
    if role == "attn_v":
        return "q8_0" if eight_experts else _attn_v_type(ftype, base, layer, n_layers, spec)
    if role == "attn_k" and eight_experts:
        return "q8_0"
    if role.startswith("ffn_down"):
        if ftype == "q2_k":
            return "q3_k"
        if ftype == "q3_k_m":
            return "q5_k" if layer < n_layers // 16 else "q4_k"
        return "q6_k" if ftype in ("q4_k_m", "q5_k_m") and _use_more_bits(layer, n_layers) else base
    if role == "attn_output":
        if eight_experts and ftype in ("q2_k", "q3_k_m"):
            return "q5_k"
        return {"q2_k": "q3_k", "q3_k_m": "q4_k"}.get(ftype, base)
    return base


def _attn_v_type(ftype: str, base: str, layer: int, n_layers: int, spec: ModelSpec) -> str:
    if ftype == "q2_k":
        return "q4_k" if spec.num_attention_heads // max(spec.num_kv_heads, 1) >= 4 else "q3_k"
    if ftype == "q3_k_m":
        return "q5_k" if layer < 2 else "q4_k"
    return "q6_k" if ftype in ("q4_k_m", "q5_k_m") and _use_more_bits(layer, n_layers) else base


def _overlap(a: int, b: int, lo: int, hi: int) -> int:
    return max(0, min(b, hi) - max(a, lo))


def _count_more_bits(a: int, b: int, n: int) -> int:
    """How many layers i in [a, b) have _use_more_bits(i, n), by arithmetic (no loop over layers)."""
    lo, hi = n // 8, 7 * n // 8
    count = _overlap(a, b, 0, lo) + _overlap(a, b, max(hi, lo), n)
    mid_a, mid_b = max(a, lo), min(b, hi)
    if mid_b > mid_a:  # (i - lo) % 3 == 2 for j = i - lo in [mid_a - lo, mid_b - lo): j//3 counts them from 0
        count += (mid_b - lo) // 3 - (mid_a - lo) // 3
    # layers at or past n (never asked) and layers both < lo and >= hi (n < 8) are counted once above
    return count


def _gguf_layer_types(ftype: str, role: str, first: int, count: int, n_layers: int,
                      spec: ModelSpec) -> list[tuple[str, int]]:
    """(ggml type, layers) for layers first .. first+count-1 of one role: the rules depend on the layer only
    through one predicate per (file type, role), so two evaluations and a count replace a loop."""
    last = first + count
    if role == "attn_v" and ftype in ("q4_k_m", "q5_k_m") or role.startswith("ffn_down") and ftype in (
            "q4_k_m", "q5_k_m"):
        hits = _count_more_bits(first, last, n_layers)
        # a layer of each kind (n >= 8: layer 0 takes more bits, layer n // 8 does not; fewer: search them all)
        candidates = [*range(min(n_layers, 16)), n_layers // 8]
        yes = next((i for i in candidates if _use_more_bits(i, n_layers)), None)
        no = next((i for i in candidates if not _use_more_bits(i, n_layers)), None)
    elif role == "attn_v" and ftype == "q3_k_m":
        hits, yes, no = _overlap(first, last, 0, 2), 0, 2
    elif role.startswith("ffn_down") and ftype == "q3_k_m":
        edge = n_layers // 16
        hits, yes, no = _overlap(first, last, 0, edge), 0, edge
    else:
        return [(_gguf_tensor_type(ftype, role, first, n_layers, spec), count)]
    out = []
    if hits:
        out.append((_gguf_tensor_type(ftype, role, yes if yes is not None else first, n_layers, spec), hits))
    if count - hits:
        out.append((_gguf_tensor_type(ftype, role, no if no is not None else last - 1, n_layers, spec), count - hits))
    return out


def _gguf_bits(ggml_type: str, rows_in: int) -> float:
    if ggml_type in GGML_K_FALLBACK and rows_in % 256:
        ggml_type = GGML_K_FALLBACK[ggml_type]
    return GGML_TYPE_BITS[ggml_type]


def _gguf_weight_bytes(spec: ModelSpec, ftype: str) -> WeightBytes:
    h = spec.hidden_size
    L = spec.num_layers
    groups: dict[str, float] = {}
    for m in linear_matrices(spec):
        first = L - m.layers  # dense layers come first, MoE layers after (DeepSeek, Llama 4 differ only in order)
        kind = _group_of_role(m.role)
        start = first if m.layers != L else 0
        for ggml_type, layers in _gguf_layer_types(ftype, m.role, start, m.layers, L, spec):
            bits = _gguf_bits(ggml_type, m.rows_in)
            groups[kind] = groups.get(kind, 0.0) + m.rows_in * m.cols_out * m.per_layer * bits / 8 * layers
    head_type = "q8_0" if ftype == "q8_0" else "q6_k"
    head = spec.vocab_size * h * _gguf_bits(head_type, h) / 8
    # With tied embeddings there is no output.weight and token_embd takes the output's type.
    embed = head if spec.tie_word_embeddings else spec.vocab_size * h * _gguf_bits(_BASE_TYPE[ftype], h) / 8
    out = [(S.EMBED, int(embed))]
    if not spec.tie_word_embeddings:
        out.append((S.LM_HEAD, int(head)))
    out += [(k, int(v)) for k, v in groups.items()]
    # Norms, biases, routers (small, F32 in GGUF) and any extra tensors in 16-bit.
    rest = {g.kind: g.params for g in spec.tensor_groups()}
    f32 = sum(rest.get(k, 0) for k in (S.NORM, S.BIAS, S.ROUTER)) * 4
    out.append((S.NORM, int(f32)))
    if rest.get(S.OTHER):
        out.append((S.OTHER, rest[S.OTHER] * 2))
    per_layer = sum(int(v) for v in groups.values()) + f32
    return WeightBytes(tuple(out), int(per_layer // max(L, 1)), int(embed), 0 if spec.tie_word_embeddings else int(head))


def _group_of_role(role: str) -> str:
    if role.startswith("attn"):
        return S.ATTN
    if role.endswith("_exps"):
        return S.EXPERTS
    if role.endswith("_shexp"):
        return S.SHARED_EXPERTS
    return S.MLP
