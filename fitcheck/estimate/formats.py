"""Storage formats: one table of what each precision stores per weight, and KV-cache element sizes.

Every figure carries its source.  Block formats are counted from their block layout, so scales
and zero points are included, and each format says which tensors stay 16-bit.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from fitcheck.errors import FitcheckError


@dataclass(frozen=True)
class WeightFormat:
    name: str
    family: str            # 'float', 'fp8', 'bnb', 'gptq', 'awq', 'gguf', 'mxfp4', 'mlx'
    linear_bits: float     # bits per weight of quantized linear layers, scales included
    keep_bits: float       # embeddings, lm_head, norms, biases, routers (not quantized)
    description: str
    quality_loss: int      # rank for alternatives: 0 none .. higher = more loss
    gguf: bool = False     # a llama.cpp type (per-tensor mixture rules apply)
    # Tensor groups (fitcheck.model.spec kinds) the format packs: None = every linear layer.  MXFP4
    # checkpoints pack only the routed experts; their attention and shared layers stay 16-bit.
    packs: frozenset[str] | None = None
    # Only a checkpoint stored in this format (or in one of `converted_from`) has it: nothing
    # quantizes other models to it.
    stored_only: bool = False
    converted_from: tuple[str, ...] = ()
    # The token embedding and lm_head are quantized too (MLX quantizes every nn.Embedding and nn.Linear).
    packs_embeddings: bool = False

    def packs_kind(self, kind: str) -> bool:
        return self.packs is None or kind in self.packs


# Group-quantized 4-bit (GPTQ/AWQ, group 128): 4 bits + an fp16 scale and a packed 4-bit zero
# per 128 weights = 4 + 16/128 + 4/128 = 4.156 bits (AutoGPTQ qweight/qzeros/scales layout).
_G128_4BIT = 4 + 16 / 128 + 4 / 128
# GPTQ 8-bit, group 128: 8 + 16/128 + 8/128.
_G128_8BIT = 8 + 16 / 128 + 8 / 128
# bitsandbytes NF4 with double quantization: 64-weight blocks with an 8-bit absmax, plus an fp32
# scale per 256 absmax values: 4 + 8/64 + 32/(64*256) = 4.127 bits (QLoRA paper, section 2).
_NF4_DQ = 4 + 8 / 64 + 32 / (64 * 256)
# LLM.int8 (bitsandbytes): int8 weights + one fp32 scale per output row (negligible per weight).
_INT8_ROW = 8.0
# MLX affine quantization (mx.quantize, mlx_lm.convert -q): groups of 64 weights, each with a scale and a bias in
# the weights' own 16-bit dtype: bits + 2 × 16 / 64 per weight (mlx/ops.cpp affine_quantize: `scales =
# astype(scales, w.dtype())`, `biases = astype(biases, w.dtype())`, one of each per group; group size 64 and 4 bits
# by default, mlx_lm/utils.py quantize_model `"affine": (64, 4)`).  nn.quantize converts every module with a
# to_quantized method: nn.Linear and nn.Embedding (so the embedding and lm_head too); norms stay 16-bit.
# https://github.com/ml-explore/mlx/blob/846d176227a0ac13d2667e58d2bb68b322109ab0/mlx/ops.cpp,
# https://github.com/ml-explore/mlx-lm/blob/d78bf58e217c904ec282ed8da9b947491f78c022/mlx_lm/utils.py
MLX_GROUP = 64


def _mlx_bits(bits: int) -> float:
    return bits + 2 * 16 / MLX_GROUP


@dataclass(frozen=True)
class GGMLType:
    name: str
    block_size: int      # elements per block
    type_size: int       # bytes per block

    def nbytes(self, elements: int) -> int:
        return elements // self.block_size * self.type_size


# ggml type id -> (name, elements per block, bytes per block).  From GGML_QUANT_SIZES in
# llama.cpp gguf-py/gguf/constants.py (which mirrors the block structs and static_asserts of
# ggml/src/ggml-common.h); QK_K = 256.  Ids 4, 5 (Q4_2, Q4_3) and 31-33, 36-38 (removed
# Q4_0_4_4 ... and IQ4_NL_4_4 repacks) are gone upstream and rejected here.
_QK_K = 256
GGML_TYPES: dict[int, GGMLType] = {t_id: GGMLType(*spec) for t_id, spec in {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 2 + 16),
    3: ("Q4_1", 32, 2 + 2 + 16),
    6: ("Q5_0", 32, 2 + 4 + 16),
    7: ("Q5_1", 32, 2 + 2 + 4 + 16),
    8: ("Q8_0", 32, 2 + 32),
    9: ("Q8_1", 32, 4 + 4 + 32),
    10: ("Q2_K", 256, 2 + 2 + _QK_K // 16 + _QK_K // 4),
    11: ("Q3_K", 256, 2 + _QK_K // 4 + _QK_K // 8 + 12),
    12: ("Q4_K", 256, 2 + 2 + _QK_K // 2 + 12),
    13: ("Q5_K", 256, 2 + 2 + _QK_K // 2 + _QK_K // 8 + 12),
    14: ("Q6_K", 256, 2 + _QK_K // 2 + _QK_K // 4 + _QK_K // 16),
    15: ("Q8_K", 256, 4 + _QK_K + _QK_K // 8),
    16: ("IQ2_XXS", 256, 2 + _QK_K // 4),
    17: ("IQ2_XS", 256, 2 + _QK_K // 4 + _QK_K // 32),
    18: ("IQ3_XXS", 256, 2 + _QK_K // 4 + _QK_K // 8),
    19: ("IQ1_S", 256, 2 + _QK_K // 8 + _QK_K // 16),
    20: ("IQ4_NL", 32, 2 + 16),
    21: ("IQ3_S", 256, 2 + _QK_K // 4 + _QK_K // 8 + _QK_K // 32 + 4),
    22: ("IQ2_S", 256, 2 + _QK_K // 4 + _QK_K // 16),
    23: ("IQ4_XS", 256, 2 + 2 + _QK_K // 2 + _QK_K // 64),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, _QK_K // 8 + _QK_K // 16 + _QK_K // 32),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 2 + 4 * 13),
    35: ("TQ2_0", 256, 2 + 64),
    39: ("MXFP4", 32, 1 + 16),
}.items()}


# Bits per weight of each ggml block type, from the block layouts above (block_q4_0 = 2 + 16 bytes
# per 32 weights = 4.5 bits; block_q4_K = 144 bytes / 256 = 4.5; block_q6_K = 210 / 256 = 6.5625 ...).
GGML_TYPE_BITS: dict[str, float] = {
    t.name.lower(): t.type_size * 8 / t.block_size for t in GGML_TYPES.values()
    if t.name.lower() in ("f32", "f16", "bf16", "q8_0", "q6_k", "q5_k", "q4_k", "q3_k", "q2_k",
                          "q4_0", "q4_1", "q5_0", "q5_1", "mxfp4")
}
# k-quants need rows (input dimension) divisible by 256; llama.cpp falls back per tensor
# (llama-quant.cpp, "tensor cols are not divisible by 256, required for k-quants").
GGML_K_FALLBACK = {"q2_k": "q4_0", "q3_k": "q4_0", "q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0"}

# MXFP4 (gpt-oss experts): 32-value blocks of 4-bit E2M1 with one E8M0 scale = 4.25 bits (OCP
# Microscaling spec v1.0).  The same layout in every engine: the checkpoint's *_blocks (uint8, two
# values a byte) and *_scales (one uint8 per 32) tensors, and ggml's block_mxfp4 (type 39 above).
MXFP4_BITS = GGML_TYPE_BITS["mxfp4"]
_EXPERTS_ONLY = frozenset({"experts"})   # fitcheck.model.spec.EXPERTS

WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("fp32", "float", 32, 32, "32-bit floats", 0),
        WeightFormat("bf16", "float", 16, 16, "bfloat16", 0),
        WeightFormat("fp16", "float", 16, 16, "float16", 0),
        WeightFormat("fp8", "fp8", 8 + 32 / 4096, 16, "FP8 E4M3 weights, per-channel scales", 1),
        WeightFormat("int8", "bnb", _INT8_ROW, 16, "bitsandbytes LLM.int8, per-row scales", 1),
        WeightFormat("gptq-int8", "gptq", _G128_8BIT, 16, "GPTQ 8-bit, group 128", 1),
        WeightFormat("int4", "gptq", _G128_4BIT, 16, "4-bit, group 128 with fp16 scales", 3),
        WeightFormat("gptq-int4", "gptq", _G128_4BIT, 16, "GPTQ 4-bit, group 128", 3),
        WeightFormat("awq", "awq", _G128_4BIT, 16, "AWQ 4-bit, group 128", 3),
        WeightFormat("nf4", "bnb", _NF4_DQ, 16, "bitsandbytes NF4 with double quantization", 3),
        # The checkpoint's own format (gpt-oss): nothing is lost against it, so no quality step.
        WeightFormat("mxfp4", "mxfp4", MXFP4_BITS, 16, "MXFP4 experts (the rest bf16)", 0,
                     packs=_EXPERTS_ONLY, stored_only=True),
        # MLX's quantized checkpoints (mlx-community's -8bit, -6bit, -4bit, -3bit conversions).  Round-to-nearest
        # without calibration: a step below the calibrated 4-bit formats (AWQ, GPTQ) at 4 bits, as Q4_0 is.
        WeightFormat("mlx-8bit", "mlx", _mlx_bits(8), 16, "MLX 8-bit, group 64", 1, packs_embeddings=True),
        WeightFormat("mlx-6bit", "mlx", _mlx_bits(6), 16, "MLX 6-bit, group 64", 2, packs_embeddings=True),
        WeightFormat("mlx-4bit", "mlx", _mlx_bits(4), 16, "MLX 4-bit, group 64", 4, packs_embeddings=True),
        WeightFormat("mlx-3bit", "mlx", _mlx_bits(3), 16, "MLX 3-bit, group 64", 5, packs_embeddings=True),
        WeightFormat("q8_0", "gguf", 8.5, 32, "GGUF Q8_0", 1, gguf=True),
        WeightFormat("q6_k", "gguf", 6.5625, 32, "GGUF Q6_K", 2, gguf=True),
        WeightFormat("q5_k_m", "gguf", 5.5, 32, "GGUF Q5_K_M (Q5_K, some Q6_K)", 2, gguf=True),
        WeightFormat("q4_k_m", "gguf", 4.5, 32, "GGUF Q4_K_M (Q4_K, some Q6_K)", 3, gguf=True),
        WeightFormat("q4_0", "gguf", 4.5, 32, "GGUF Q4_0", 4, gguf=True),
        WeightFormat("q3_k_m", "gguf", 3.4375, 32, "GGUF Q3_K_M (Q3_K, some Q4_K/Q5_K)", 5, gguf=True),
        WeightFormat("q2_k", "gguf", 2.625, 32, "GGUF Q2_K (Q2_K, some Q3_K/Q4_K)", 6, gguf=True),
        # llama.cpp's MXFP4_MOE file type: expert tensors MXFP4, the other matrices Q8_0 (llama-quant.cpp).
        WeightFormat("mxfp4_moe", "gguf", MXFP4_BITS, 32, "GGUF MXFP4_MOE (MXFP4 experts, Q8_0 the rest)", 1,
                     gguf=True, stored_only=True, converted_from=("mxfp4",)),
    )
}

PRECISIONS = tuple(WEIGHT_FORMATS)


_FORMAT_ALIASES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "gptq": "gptq-int4",
                   "gptq-4bit": "gptq-int4", "gptq-8bit": "gptq-int8", "q4_k": "q4_k_m", "q5_k": "q5_k_m",
                   "q3_k": "q3_k_m", "mxfp4-moe": "mxfp4_moe"}


def weight_format(name: str) -> WeightFormat:
    fmt = WEIGHT_FORMATS.get(name)  # a canonical name (what plans carry) is its own key
    if fmt is not None:
        return fmt
    key = name.lower().replace("_", "-") if not name.lower().startswith("q") else name.lower()
    key = _FORMAT_ALIASES.get(key, key)
    if key not in WEIGHT_FORMATS:
        raise FitcheckError(f"unknown precision '{name}'", "choose one of: " + ", ".join(PRECISIONS))
    return WEIGHT_FORMATS[key]


def weight_format_or_none(name: str) -> WeightFormat | None:
    """The format a stored checkpoint name stands for, or None when it is not a selectable precision
    (e.g. 'compressed-tensors', or a GGUF type such as 'iq2_xs' fitcheck does not model)."""
    try:
        return weight_format(name)
    except FitcheckError:
        return None


def stored_only_problem(fmt: WeightFormat, stored_formats: Collection[str], model: str) -> tuple[str, str] | None:
    """(message, hint) when ``fmt`` exists only as a stored checkpoint format and ``model`` (stored in
    ``stored_formats``, fitcheck.model.spec.ModelSpec.stored_formats) is not stored in it: MXFP4 is gpt-oss's
    own expert format, nothing quantizes another model to it."""
    if not fmt.stored_only or fmt.name in stored_formats or set(fmt.converted_from) & set(stored_formats):
        return None
    return (f"precision {fmt.name} is the stored format of MXFP4 checkpoints (gpt-oss); {model} is not "
            f"stored in it", "drop --precision, or choose another one")


def derived_note(fmt: WeightFormat, stored_format: str | None, engine: Any = None) -> str:
    """How weights in ``fmt`` (with ``engine``, a fitcheck.engines Engine, when known) come from a checkpoint
    stored as ``stored_format`` ('' when they are the stored ones, or the checkpoint is 16/32-bit)."""
    stored = weight_format_or_none(stored_format) if stored_format else None
    if stored is None or stored.family == "float" or stored.name == fmt.name:
        return ""
    gguf = fmt.gguf or (engine is not None and engine.loads_gguf_files)
    if fmt.family == "float" and engine is not None and engine.keeps_packed_experts and not gguf \
            and stored.packs is not None:
        return (f"{engine.title} loads the checkpoint's {stored.name.upper()} {', '.join(sorted(stored.packs))} as "
                f"stored; {fmt.name} is the rest")
    if fmt.family == "float" and not (gguf and stored.packs is not None):
        return f"dequantized from the checkpoint's {stored.name.upper()}"
    if gguf and stored.packs is not None:
        return f"a GGUF build of the {stored.name.upper()} checkpoint: its {', '.join(sorted(stored.packs))} stay " \
               f"{stored.name.upper()}"
    return f"quantized from the dequantized 16-bit weights of the {stored.name.upper()} checkpoint"


# KV-cache element sizes in bytes.  q8_0/q4_0 are llama.cpp block types (8.5 / 4.5 bits).
KV_DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "q8_0": 8.5 / 8, "q4_0": 4.5 / 8,
}
KV_DTYPES = ("auto",) + tuple(KV_DTYPE_BYTES)
