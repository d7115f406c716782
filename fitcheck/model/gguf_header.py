"""Read the header of a GGUF file (metadata and tensor infos, never the weights), bounded.

Layout (ggml docs/gguf.md; gguf-py gguf/gguf_reader.py): magic ``GGUF``, uint32 version (2 or
3; version 1 used 32-bit counts and is not read), uint64 tensor_count, uint64 kv_count, then
kv_count pairs of (string key, uint32 value type, value), then tensor_count infos of (string
name, uint32 n_dims, uint64 dims[n_dims], uint32 ggml type, uint64 offset).  Strings are a uint64
length plus UTF-8 bytes.  Tensor data starts at the next multiple of ``general.alignment``
(default 32) and offsets count from there.  All little-endian.

The file is memory-mapped, so nothing is read that the parser does not touch; big arrays (the
tokenizer's token list, scores, merges) are skipped over, keeping only their length.  Every count
and length is checked against a limit and against the bytes left in the file before it is used,
so a hostile or truncated file fails with one line in bounded time and memory.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, overload

from fitcheck.bounded import open_regular_file
from fitcheck.errors import FitcheckError
from fitcheck.estimate.formats import GGML_TYPES, GGMLType  # noqa: F401  (GGMLType: part of this module's API)

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT, gguf-py constants.py

MAX_TENSORS = 1_000_000
# Strings held in arrays, summed over the header: each must be read to find the next (its length comes
# first), so this bounds the parse's time.  Real files: tokens + merges stay under ~1 Mi (Gemma 3: 262k + 514k).
MAX_TOTAL_ARRAY_STRINGS = 1 << 22   # 4 Mi
MAX_KV = 100_000
MAX_STRING_BYTES = 16 * 1024**2
MAX_ARRAY_LEN = 100_000_000
MAX_STRING_ARRAY_LEN = 1 << 22      # 4 Mi strings: real vocabularies/merges stay below 1 Mi
MAX_HEADER_BYTES = 1024**3          # metadata + tensor infos; real headers are a few tens of MiB
MAX_DIMS = 8                        # GGML_MAX_DIMS is 4
MAX_ELEMENTS = 2**48
KEEP_ARRAY_LEN = 4096               # arrays up to this length are kept; longer ones only counted

# GGUF metadata value types (gguf-py constants.py, GGUFValueType).
_SCALARS = {
    0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
    6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8),
}
_STRING, _ARRAY = 8, 9


# The ggml block layouts live with the other storage formats (fitcheck.estimate.formats).


# general.file_type (enum llama_ftype in llama.h; LlamaFileType in gguf-py constants.py) -> the
# name llama.cpp's quantize tool uses, lower-cased.  The 16/32-bit types are not quantized.
FILE_TYPES: dict[int, str] = {
    0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 4: "q4_1_some_f16", 7: "q8_0", 8: "q5_0",
    9: "q5_1", 10: "q2_k", 11: "q3_k_s", 12: "q3_k_m", 13: "q3_k_l", 14: "q4_k_s",
    15: "q4_k_m", 16: "q5_k_s", 17: "q5_k_m", 18: "q6_k", 19: "iq2_xxs", 20: "iq2_xs",
    21: "q2_k_s", 22: "iq3_xs", 23: "iq3_xxs", 24: "iq1_s", 25: "iq4_nl", 26: "iq3_s",
    27: "iq3_m", 28: "iq2_s", 29: "iq2_m", 30: "iq4_xs", 31: "iq1_m", 32: "bf16",
    33: "q4_0_4_4", 34: "q4_0_4_8", 35: "q4_0_8_8", 36: "tq1_0", 37: "tq2_0", 38: "mxfp4_moe",
}
UNQUANTIZED_FILE_TYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
# The --precision that names a file's own type (a GGUF file's type is its default precision): the
# 16/32-bit types by their precision names; types fitcheck has no mixture rules for by the nearest one it
# has (the file's exact bytes are what is counted; the assumption names the file's type).
_FILE_TYPE_PRECISIONS = {
    "f32": "fp32", "f16": "fp16", "bf16": "bf16", "mxfp4": "mxfp4_moe",
    "q4_1": "q4_0", "q4_1_some_f16": "q4_0", "iq4_nl": "q4_0", "q4_k_s": "q4_k_m", "iq4_xs": "q4_k_m",
    "q5_0": "q5_k_m", "q5_1": "q5_k_m", "q5_k_s": "q5_k_m",
    "q3_k_s": "q3_k_m", "q3_k_l": "q3_k_m", "iq3_xs": "q3_k_m", "iq3_xxs": "q3_k_m", "iq3_s": "q3_k_m",
    "iq3_m": "q3_k_m",
    "q2_k_s": "q2_k", "iq2_xxs": "q2_k", "iq2_xs": "q2_k", "iq2_s": "q2_k", "iq2_m": "q2_k", "iq1_s": "q2_k",
    "iq1_m": "q2_k", "tq1_0": "q2_k", "tq2_0": "q2_k",
}


@dataclass(frozen=True)
class ArrayInfo:
    """A metadata array: its element type and length; ``values`` only when it is short."""

    item_type: int
    length: int
    values: tuple | None = None

    def __len__(self) -> int:
        return self.length


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    dims: tuple[int, ...]   # ggml order: dims[0] is the row length (e.g. token_embd: hidden, vocab)
    ggml_type: int
    offset: int             # from the start of the tensor data
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ggml_type].name

    @property
    def elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    metadata: dict[str, object]
    tensors: tuple[GGUFTensor, ...]
    data_offset: int          # where tensor data starts in the file
    source: str = ""
    _by_name: dict[str, GGUFTensor] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {t.name: t for t in self.tensors})

    def tensor(self, name: str) -> GGUFTensor | None:
        return self._by_name.get(name)

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else ""

    @property
    def total_tensor_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def file_type(self) -> str | None:
        """'q4_k_m' etc. from general.file_type, or None when absent/unknown."""
        ft = self.metadata.get("general.file_type")
        return FILE_TYPES.get(ft) if isinstance(ft, int) and not isinstance(ft, bool) else None

    def bytes_by_type(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.type_name] = out.get(t.type_name, 0) + t.nbytes
        return out

    def bytes_by_role(self) -> dict[str, int]:
        """Bytes of the token embedding, the output head and everything else."""
        out = {"token_embd": 0, "output": 0, "rest": 0}
        for t in self.tensors:
            role = {"token_embd.weight": "token_embd", "output.weight": "output"}.get(t.name, "rest")
            out[role] += t.nbytes
        return out


class _Cursor:
    """Bounds-checked little-endian reads over a bytes-like buffer (bytes or mmap)."""

    def __init__(self, buf, source: str):
        self.buf = buf
        self.size = len(buf)
        self.pos = 0
        self.source = source
        self.strings_left = MAX_TOTAL_ARRAY_STRINGS

    def fail(self, what: str) -> FitcheckError:
        return FitcheckError(f"{self.source}: not a valid GGUF file ({what})",
                             "re-download it, or point at another file")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"file ends inside {what} (truncated?)")
        if self.pos + n > MAX_HEADER_BYTES:
            raise self.fail("header larger than 1 GiB")

    def unpack(self, fmt: str, size: int, what: str):
        self.need(size, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def u32(self, what: str) -> int:
        return self.unpack("<I", 4, what)

    def u64(self, what: str) -> int:
        return self.unpack("<Q", 8, what)

    def string_length(self, what: str) -> int:
        n = self.u64(what)
        if n > MAX_STRING_BYTES:
            raise self.fail(f"{what} claims {n} bytes (limit 16 MiB)")
        self.need(n, what)
        return n

    def string(self, what: str) -> str:
        n = self.string_length(what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def skip_string(self, what: str) -> None:
        n = self.string_length(what)  # advances past the length first
        self.pos += n


def _read_value(cur: _Cursor, vtype: int, key: str, *, in_array: bool = False):
    if vtype in _SCALARS:
        fmt, size = _SCALARS[vtype]
        return cur.unpack(fmt, size, f"the value of {key[:80]!r}")
    if vtype == _STRING:
        return cur.string(f"the string value of {key[:80]!r}")
    if vtype == _ARRAY and not in_array:
        return _read_array(cur, key)
    raise cur.fail(f"unknown value type {vtype} for {key[:80]!r}")


def _read_array(cur: _Cursor, key: str) -> ArrayInfo:
    item_type = cur.u32(f"the array type of {key[:80]!r}")
    length = cur.u64(f"the array length of {key[:80]!r}")
    if length > MAX_ARRAY_LEN:
        raise cur.fail(f"array {key[:80]!r} claims {length} items (limit 10^8)")
    if item_type in _SCALARS:
        fmt, size = _SCALARS[item_type]
        cur.need(length * size, f"array {key[:80]!r}")
        if length <= KEEP_ARRAY_LEN:
            values = struct.unpack_from(f"<{length}{fmt[1]}", cur.buf, cur.pos)
        else:
            values = None
        cur.pos += length * size
        return ArrayInfo(item_type, length, values)
    if item_type == _STRING:
        if length > MAX_STRING_ARRAY_LEN:
            raise cur.fail(f"string array {key[:80]!r} claims {length} items")
        if length > cur.strings_left:
            raise cur.fail(f"string arrays hold more than {MAX_TOTAL_ARRAY_STRINGS:,} strings in all")
        cur.strings_left -= length
        cur.need(length * 8, f"array {key[:80]!r}")  # each string is at least its length
        if length <= KEEP_ARRAY_LEN:
            values = tuple(cur.string(f"an item of {key[:80]!r}") for _ in range(length))
            return ArrayInfo(item_type, length, values)
        _skip_strings(cur, length, f"an item of {key[:80]!r}")
        return ArrayInfo(item_type, length, None)
    # Nested arrays are legal in the format but no llama.cpp key uses them.
    raise cur.fail(f"array {key[:80]!r} has unsupported item type {item_type}")


_U64 = struct.Struct("<Q")


def _skip_strings(cur: _Cursor, count: int, what: str) -> None:
    """Step over ``count`` strings without decoding them (a tight loop: only their lengths are read)."""
    buf, pos, end = cur.buf, cur.pos, min(cur.size, MAX_HEADER_BYTES)
    unpack = _U64.unpack_from
    for _ in range(count):
        if pos + 8 > end:
            cur.pos = pos
            cur.need(8, what)
        (n,) = unpack(buf, pos)
        if n > MAX_STRING_BYTES:
            cur.pos = pos
            raise cur.fail(f"{what} claims {n} bytes (limit 16 MiB)")
        pos += 8 + n
        if pos > end:
            cur.pos = pos - n
            cur.need(n, what)
    cur.pos = pos


def parse_header(buf, *, source: str = "GGUF file") -> GGUFHeader:
    """Parse a GGUF header from a bytes-like buffer holding the file (or at least its header)."""
    cur = _Cursor(buf, source)
    cur.need(4, "the magic")
    if bytes(buf[0:4]) != GGUF_MAGIC:
        raise cur.fail("no GGUF magic")
    cur.pos = 4
    version = cur.u32("the version")
    if version not in (2, 3):
        raise cur.fail(f"version {version}; only GGUF v2 and v3 are read")
    tensor_count = cur.u64("the tensor count")
    kv_count = cur.u64("the metadata count")
    if tensor_count > MAX_TENSORS:
        raise cur.fail(f"claims {tensor_count} tensors (limit 10^6)")
    if kv_count > MAX_KV:
        raise cur.fail(f"claims {kv_count} metadata entries (limit 10^5)")

    metadata: dict[str, object] = {}
    for _ in range(kv_count):
        key = cur.string("a metadata key")
        vtype = cur.u32(f"the type of {key[:80]!r}")
        metadata[key] = _read_value(cur, vtype, key)

    tensors = []
    for _ in range(tensor_count):
        name = cur.string("a tensor name")
        n_dims = cur.u32(f"the rank of {name[:80]!r}")
        if n_dims > MAX_DIMS:
            raise cur.fail(f"tensor {name[:80]!r} claims {n_dims} dimensions")
        dims = tuple(cur.u64(f"the shape of {name[:80]!r}") for _ in range(n_dims))
        elements = 1
        for d in dims:
            elements *= d
            if elements > MAX_ELEMENTS:
                raise cur.fail(f"tensor {name[:80]!r} claims more than 2^48 elements")
        ggml_type = cur.u32(f"the type of {name[:80]!r}")
        if ggml_type not in GGML_TYPES:
            raise cur.fail(f"tensor {name[:80]!r} has unknown ggml type {ggml_type}")
        gtype = GGML_TYPES[ggml_type]
        if dims and dims[0] % gtype.block_size:
            raise cur.fail(f"tensor {name[:80]!r} rows are not whole {gtype.name} blocks")
        offset = cur.u64(f"the offset of {name[:80]!r}")
        tensors.append(GGUFTensor(name, dims, ggml_type, offset, gtype.nbytes(elements)))

    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or not 1 <= alignment <= 1 << 20:
        raise cur.fail("general.alignment is not a small positive integer")
    data_offset = -(-cur.pos // alignment) * alignment
    return GGUFHeader(version, metadata, tuple(tensors), data_offset, source)


def check_tensor_extents(header: GGUFHeader, file_size: int) -> None:
    """Raise when a tensor's bytes would lie past the end of the file (a truncated download)."""
    data_size = file_size - header.data_offset
    for t in header.tensors:
        if t.offset + t.nbytes > data_size:
            raise FitcheckError(
                f"{header.source}: tensor {t.name[:80]!r} ends past the end of the file (truncated?)",
                "re-download it, or point at another file")


def read_header(path: str | os.PathLike, *, check_extents: bool = True) -> GGUFHeader:
    """Read and validate the header of the GGUF file at ``path`` via a read-only memory map."""
    source = os.fspath(path)
    try:
        with open_regular_file(path, "GGUF file") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 24:
                raise FitcheckError(f"{source}: not a valid GGUF file (only {size} bytes)",
                                    "re-download it, or point at another file")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                header = parse_header(buf, source=source)
    except OSError as exc:
        raise FitcheckError(f"cannot read {source}: {exc.strerror or exc}") from None
    if check_extents:
        check_tensor_extents(header, size)
    return header


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
    from fitcheck.model.spec import ModelSpec

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
        stored_format=_FILE_TYPE_PRECISIONS.get(file_type, file_type),
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
