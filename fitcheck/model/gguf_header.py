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
FILE_TYPE_PRECISIONS = {
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
