"""Small model files built from scratch for the hostile battery: safetensors and GGUF images.

The GGUF encoding and the llama GGUF layout are the model-file tests' (tests/model/filegen.py); what is
added here is what only the battery needs: overlapping safetensors extents, ``("strings", count)``
arrays, and a GGUF writer that streams, so a huge metadata array never sits whole in memory.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from tests.model.filegen import GGUF_TYPES, _gguf_value, gguf_llama
from tests.model.filegen import _gguf_string as _gstr

ST_BITS = {"BF16": 16, "F16": 16, "F32": 32, "I32": 32, "U8": 8}


def st_bytes(tensors: dict[str, tuple[str, list[int]]], *, overlap: bool = False) -> bytes:
    """A complete safetensors image (header + zero data) for {name: (dtype, shape)}."""
    doc: dict = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        size = (n * ST_BITS[dtype] + 7) // 8
        begin = 0 if overlap and size else offset
        doc[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, begin + size]}
        offset = max(offset, begin + size)
    raw = json.dumps(doc).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * offset


def llama_tensors(layers: int = 2, hidden: int = 64, inter: int = 128, heads: int = 4, kv_heads: int = 2,
                  vocab: int = 256) -> dict[str, tuple[str, list[int]]]:
    d = hidden // heads
    t = {"model.embed_tokens.weight": ("BF16", [vocab, hidden])}
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = ("BF16", [hidden])
        t[p + "self_attn.q_proj.weight"] = ("BF16", [heads * d, hidden])
        t[p + "self_attn.k_proj.weight"] = ("BF16", [kv_heads * d, hidden])
        t[p + "self_attn.v_proj.weight"] = ("BF16", [kv_heads * d, hidden])
        t[p + "self_attn.o_proj.weight"] = ("BF16", [hidden, heads * d])
        t[p + "post_attention_layernorm.weight"] = ("BF16", [hidden])
        t[p + "mlp.gate_proj.weight"] = ("BF16", [inter, hidden])
        t[p + "mlp.up_proj.weight"] = ("BF16", [inter, hidden])
        t[p + "mlp.down_proj.weight"] = ("BF16", [hidden, inter])
    t["model.norm.weight"] = ("BF16", [hidden])
    t["lm_head.weight"] = ("BF16", [vocab, hidden])
    return t


def llama_config(layers: int = 2, hidden: int = 64, inter: int = 128, heads: int = 4, kv_heads: int = 2,
                 vocab: int = 256) -> dict:
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": layers,
            "hidden_size": hidden, "intermediate_size": inter, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "vocab_size": vocab, "max_position_embeddings": 4096,
            "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def _gval(value) -> bytes:
    """A typed GGUF value; also ``("strings", count)``: an array of ``count`` empty strings."""
    if isinstance(value, tuple) and value[0] == "strings":
        return struct.pack("<IIQ", 9, 8, value[1]) + struct.pack("<Q", 0) * value[1]
    return _gguf_value(value)


def _tensor_infos(tensors: dict[str, tuple[str, list[int]]]) -> tuple[bytes, int]:
    out = []
    offset = 0
    for name, (tname, dims) in tensors.items():
        t_id, block, tsize = GGUF_TYPES[tname]
        n = 1
        for d in dims:
            n *= d
        out.append(_gstr(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
                   + struct.pack("<IQ", t_id, offset))
        offset += -(-(n // block * tsize) // 32) * 32
    return b"".join(out), offset


def gguf_bytes(metadata: dict, tensors: dict[str, tuple[str, list[int]]], with_data: bool = True) -> bytes:
    infos, data = _tensor_infos(tensors)
    head = b"".join([b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(metadata)),
                     *(_gstr(k) + _gval(v) for k, v in metadata.items()), infos])
    head += b"\0" * (-len(head) % 32)
    return head + (b"\0" * data if with_data else b"")


def write_gguf(path: Path, metadata: dict, tensors: dict[str, tuple[str, list[int]]]) -> Path:
    """Write a GGUF image item by item, so a huge metadata array never sits whole in this process
    (the battery's children inherit its peak RSS in their rusage)."""
    infos, data = _tensor_infos(tensors)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)))
        for k, v in metadata.items():
            if isinstance(v, tuple) and v[0] == "strings":
                fh.write(_gstr(k) + struct.pack("<IIQ", 9, 8, v[1]))
                left = v[1]
                while left:
                    step = min(left, 1 << 16)
                    fh.write(bytes(8 * step))
                    left -= step
            else:
                fh.write(_gstr(k) + _gval(v))
        fh.write(infos)
        fh.write(b"\0" * (-fh.tell() % 32))
        if data:
            fh.seek(data - 1, 1)
            fh.write(b"\0")
    return path


def gguf_llama_meta(layers: int = 2, hidden: int = 256, ff: int = 512, heads: int = 4, kv_heads: int = 2,
                    vocab: int = 300, **extra) -> tuple[dict, dict]:
    """A small llama GGUF's (metadata, tensors); ``extra`` adds metadata, ``__`` standing for ``.`` in keys."""
    return gguf_llama(layers, hidden, ff, heads, kv_heads, vocab,
                      extra_meta={k.replace("__", "."): v for k, v in extra.items()})


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path


def write_json(path: Path, doc) -> Path:
    return write(path, json.dumps(doc))
