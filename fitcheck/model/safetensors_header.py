"""Read the header of a .safetensors file (and nothing else), hostile input included.

Format (https://github.com/huggingface/safetensors, README "Format"): 8 bytes little-endian
unsigned N, then N bytes of UTF-8 JSON ``{"__metadata__": {str: str}, name: {"dtype": ...,
"shape": [...], "data_offsets": [begin, end]}, ...}``, then the tensor bytes; offsets are
relative to the first byte after the header.

Every number in the header is checked before it is used: N is bounded, each tensor's dtype must
be known, its shape made of non-negative ints with a bounded product, and its data_offsets must
lie inside the file and match dtype x shape.  Anything else is a :class:`FitcheckError` with one
line, after reading at most 8 + N bytes.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

from fitcheck.bounded import json_loads_bounded, open_regular_file
from fitcheck.errors import FitcheckError

# The safetensors reference implementation refuses headers over 100 MB (safetensors/src/tensor.rs,
# MAX_HEADER_SIZE = 100_000_000); a real 1,000-shard index header is a few MiB.
MAX_HEADER_BYTES = 100_000_000
# Tensors per file: the largest real shards hold a few thousand (DeepSeek-V3's whole checkpoint ~92k);
# 200,000 keeps a hostile header's parse under a second or two and ~200 MB.
MAX_TENSORS = 200_000
MAX_RANK = 16
# 2^48 elements = 256 Ti elements: far above any real tensor, small enough that products of
# bounded dims never become huge Python ints.
MAX_ELEMENTS = 2**48

# Bits per element of each safetensors dtype (safetensors/src/tensor.rs, enum Dtype and
# Dtype::bitsize).  Sub-byte types (F4, F6_*) are packed; a tensor's size is rounded up to bytes.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8, "I8": 8,
    "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "U16": 16, "I16": 16, "F16": 16, "BF16": 16,
    "U32": 32, "I32": 32, "F32": 32,
    "U64": 64, "I64": 64, "F64": 64,
    "C64": 64,
}

# safetensors dtype -> torch dtype name as config.json writes it (for ModelSpec.stored_dtype).
TORCH_DTYPE_NAMES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class SafetensorsHeader:
    """What one .safetensors header says: its tensors, its free-form metadata and sizes."""

    tensors: dict[str, TensorInfo]
    metadata: dict[str, str] = field(default_factory=dict)
    source: str = ""

    @property
    def total_bytes(self) -> int:
        """Bytes of tensor data (the file minus its header)."""
        return sum(t.nbytes for t in self.tensors.values())

    def params_by_dtype(self) -> dict[str, int]:
        """Stored elements per dtype (packed int32 GPTQ weights count as int32 elements)."""
        out: dict[str, int] = {}
        for t in self.tensors.values():
            out[t.dtype] = out.get(t.dtype, 0) + t.elements
        return out

    def bytes_by_dtype(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors.values():
            out[t.dtype] = out.get(t.dtype, 0) + t.nbytes
        return out


def _bad(source: str, what: str) -> FitcheckError:
    return FitcheckError(f"{source}: not a valid safetensors file ({what})",
                         "re-download it, or point at another file")


def tensor_nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    """Bytes a tensor of ``dtype`` and ``shape`` occupies (sub-byte types rounded up)."""
    elements = 1
    for d in shape:
        elements *= d
    return (elements * DTYPE_BITS[dtype] + 7) // 8


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tensor_info(name: str, entry: object, data_size: int | None, source: str) -> TensorInfo:
    if not isinstance(entry, dict):
        raise _bad(source, f"tensor {name[:80]!r} is not an object")
    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise _bad(source, f"tensor {name[:80]!r} has unknown dtype {str(dtype)[:20]!r}")
    shape = entry.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_RANK:
        raise _bad(source, f"tensor {name[:80]!r} has no valid shape")
    elements = 1
    for d in shape:
        if not _is_int(d) or d < 0:
            raise _bad(source, f"tensor {name[:80]!r} has a negative or non-integer dimension")
        elements *= d
        if elements > MAX_ELEMENTS:
            raise _bad(source, f"tensor {name[:80]!r} claims more than 2^48 elements")
    nbytes = tensor_nbytes(dtype, tuple(shape))
    offsets = entry.get("data_offsets")
    if offsets is not None or data_size is not None:
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(_is_int(o) for o in offsets)):
            raise _bad(source, f"tensor {name[:80]!r} has no valid data_offsets")
        begin, end = offsets
        if begin < 0 or end < begin:
            raise _bad(source, f"tensor {name[:80]!r} has data_offsets out of order")
        if end - begin != nbytes:
            raise _bad(source, f"tensor {name[:80]!r} spans {end - begin} bytes, "
                               f"but {dtype} x {shape} needs {nbytes}")
        if data_size is not None and end > data_size:
            raise _bad(source, f"tensor {name[:80]!r} ends past the end of the file (truncated?)")
    return TensorInfo(dtype, tuple(shape), nbytes)


def header_from_json(doc: object, *, data_size: int | None = None,
                     source: str = "safetensors header") -> SafetensorsHeader:
    """Validate a decoded header; ``data_size`` (bytes after the header) when the file is known.

    Also used for headers the Hugging Face Hub serves (no file size then, offsets still checked
    for consistency).
    """
    if not isinstance(doc, dict):
        raise _bad(source, "header is not a JSON object")
    if len(doc) > MAX_TENSORS + 1:
        raise _bad(source, f"more than {MAX_TENSORS:,} tensors")
    metadata_raw = doc.get("__metadata__", {})
    if metadata_raw is None:
        metadata_raw = {}
    if not isinstance(metadata_raw, dict):
        raise _bad(source, "__metadata__ is not an object")
    metadata = {str(k): v if isinstance(v, str) else json.dumps(v)[:1000]
                for k, v in metadata_raw.items()}
    tensors = {name: _tensor_info(name, entry, data_size, source)
               for name, entry in doc.items() if name != "__metadata__"}
    _check_no_overlap(doc, source)
    return SafetensorsHeader(tensors=tensors, metadata=metadata, source=source)


def _check_no_overlap(doc: dict, source: str) -> None:
    """Tensors' data_offsets (already validated) must not overlap: each byte belongs to one tensor."""
    spans = sorted((e["data_offsets"][0], e["data_offsets"][1], name) for name, e in doc.items()
                   if name != "__metadata__" and isinstance(e, dict) and isinstance(e.get("data_offsets"), list)
                   and e["data_offsets"][1] > e["data_offsets"][0])
    for (_, end, name), (begin, _, other) in zip(spans, spans[1:], strict=False):
        if begin < end:
            raise _bad(source, f"tensors {name[:80]!r} and {other[:80]!r} overlap (data_offsets)")


def parse_header_bytes(data: bytes, *, file_size: int | None = None,
                       source: str = "safetensors header") -> SafetensorsHeader:
    """Parse the start of a safetensors file held in ``data`` (at least 8 + N bytes of it).

    ``file_size`` defaults to ``len(data)``: pass the real size when ``data`` is only the start.
    """
    size = len(data) if file_size is None else file_size
    if size < 8 or len(data) < 8:
        raise _bad(source, "shorter than the 8-byte header length")
    (n,) = struct.unpack_from("<Q", data, 0)
    if n > MAX_HEADER_BYTES:
        raise _bad(source, f"header length is over the {MAX_HEADER_BYTES:,}-byte limit (not a safetensors file?)")
    if 8 + n > size or 8 + n > len(data):
        raise _bad(source, "file ends inside the header (truncated?)")
    return _decode(bytes(data[8:8 + n]), size - 8 - n, source)


def _decode(raw: bytes, data_size: int, source: str) -> SafetensorsHeader:
    # Refuse a header with too many tensors before parsing it (each tensor has one "dtype" key).
    if raw.count(b'"dtype"') > MAX_TENSORS:
        raise _bad(source, f"more than {MAX_TENSORS:,} tensors")
    try:
        doc = json_loads_bounded(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _bad(source, "header is not UTF-8 JSON") from None
    return header_from_json(doc, data_size=data_size, source=source)


def read_header(path: str | os.PathLike) -> SafetensorsHeader:
    """Read and validate the header of the .safetensors file at ``path`` (8 + N bytes only)."""
    source = os.fspath(path)
    try:
        with open_regular_file(path, "safetensors file") as f:
            size = os.fstat(f.fileno()).st_size
            first = f.read(8)
            if len(first) < 8:
                raise _bad(source, "shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", first)
            if n > MAX_HEADER_BYTES:
                raise _bad(source, f"header length is over the {MAX_HEADER_BYTES:,}-byte limit "
                                   "(not a safetensors file?)")
            if 8 + n > size:
                raise _bad(source, "file ends inside the header (truncated?)")
            raw = f.read(n)
    except OSError as exc:
        raise FitcheckError(f"cannot read {source}: {exc.strerror or exc}") from None
    if len(raw) < n:
        raise _bad(source, "file ends inside the header (truncated?)")
    return _decode(raw, size - 8 - n, source)
