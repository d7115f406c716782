"""Writers for tiny safetensors and GGUF files used by the model-file tests.

Only headers carry information; tensor data is zero bytes (written sparse where the OS allows),
so a "7B" header costs a few KiB of real disk.  No torch, no gguf package.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

# ---- safetensors -------------------------------------------------------------------------------

_ST_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "I16": 16, "F16": 16,
            "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "F64": 64, "F4": 4}


def st_nbytes(dtype: str, shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return (n * _ST_BITS[dtype] + 7) // 8


def safetensors_header(tensors: dict[str, tuple[str, list[int]]], metadata: dict | None = None) -> dict:
    """Header dict with consecutive data_offsets for {name: (dtype, shape)}."""
    doc: dict = {}
    if metadata is not None:
        doc["__metadata__"] = metadata
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = st_nbytes(dtype, shape)
        doc[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    return doc


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]],
                      metadata: dict | None = None, *, data_bytes: int | None = None) -> int:
    """Write a safetensors file whose data is zeros; returns the data size in bytes.

    ``data_bytes`` overrides how much data is written (to make truncated files).
    """
    doc = safetensors_header(tensors, metadata)
    raw = json.dumps(doc).encode()
    size = sum(st_nbytes(d, s) for d, s in tensors.values()) if data_bytes is None else data_bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        if size:
            f.seek(size - 1, 1)
            f.write(b"\0")
    return size


def llama_tensors(layers=2, hidden=64, inter=128, heads=4, kv_heads=2, vocab=256,
                  head_dim=None, dtype="BF16", tied=False, qkv_bias=False, prefix="model.",
                  qk_norm=False) -> dict[str, tuple[str, list[int]]]:
    """Tensor names and shapes of a llama-style checkpoint (as transformers saves it)."""
    d = head_dim or hidden // heads
    t = {f"{prefix}embed_tokens.weight": (dtype, [vocab, hidden])}
    for i in range(layers):
        p = f"{prefix}layers.{i}."
        t[p + "self_attn.q_proj.weight"] = (dtype, [heads * d, hidden])
        t[p + "self_attn.k_proj.weight"] = (dtype, [kv_heads * d, hidden])
        t[p + "self_attn.v_proj.weight"] = (dtype, [kv_heads * d, hidden])
        t[p + "self_attn.o_proj.weight"] = (dtype, [hidden, heads * d])
        if qkv_bias:
            t[p + "self_attn.q_proj.bias"] = (dtype, [heads * d])
            t[p + "self_attn.k_proj.bias"] = (dtype, [kv_heads * d])
            t[p + "self_attn.v_proj.bias"] = (dtype, [kv_heads * d])
        if qk_norm:
            t[p + "self_attn.q_norm.weight"] = (dtype, [d])
            t[p + "self_attn.k_norm.weight"] = (dtype, [d])
        t[p + "mlp.gate_proj.weight"] = (dtype, [inter, hidden])
        t[p + "mlp.up_proj.weight"] = (dtype, [inter, hidden])
        t[p + "mlp.down_proj.weight"] = (dtype, [hidden, inter])
        t[p + "input_layernorm.weight"] = (dtype, [hidden])
        t[p + "post_attention_layernorm.weight"] = (dtype, [hidden])
    t[f"{prefix}norm.weight"] = (dtype, [hidden])
    if not tied:
        t["lm_head.weight"] = (dtype, [vocab, hidden])
    return t


def gptq_tensors(layers=2, hidden=256, inter=512, heads=4, kv_heads=2, vocab=256, bits=4,
                 group=128) -> dict[str, tuple[str, list[int]]]:
    """A GPTQ checkpoint as AutoGPTQ/optimum save it: qweight [in*bits/32, out] int32,
    qzeros [in/group, out*bits/32] int32, scales [in/group, out] fp16, g_idx [in] int32."""
    d = hidden // heads
    t = {"model.embed_tokens.weight": ("F16", [vocab, hidden])}
    linears = {"self_attn.q_proj": (hidden, heads * d), "self_attn.k_proj": (hidden, kv_heads * d),
               "self_attn.v_proj": (hidden, kv_heads * d), "self_attn.o_proj": (heads * d, hidden),
               "mlp.gate_proj": (hidden, inter), "mlp.up_proj": (hidden, inter),
               "mlp.down_proj": (inter, hidden)}
    for i in range(layers):
        for lin, (n_in, n_out) in linears.items():
            p = f"model.layers.{i}.{lin}."
            t[p + "qweight"] = ("I32", [n_in * bits // 32, n_out])
            t[p + "qzeros"] = ("I32", [n_in // group, n_out * bits // 32])
            t[p + "scales"] = ("F16", [n_in // group, n_out])
            t[p + "g_idx"] = ("I32", [n_in])
        t[f"model.layers.{i}.input_layernorm.weight"] = ("F16", [hidden])
        t[f"model.layers.{i}.post_attention_layernorm.weight"] = ("F16", [hidden])
    t["model.norm.weight"] = ("F16", [hidden])
    t["lm_head.weight"] = ("F16", [vocab, hidden])
    return t


def llama_config(layers=2, hidden=64, inter=128, heads=4, kv_heads=2, vocab=256, tied=False,
                 **extra) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "num_hidden_layers": layers, "hidden_size": hidden, "intermediate_size": inter,
            "num_attention_heads": heads, "num_key_value_heads": kv_heads, "vocab_size": vocab,
            "tie_word_embeddings": tied, "max_position_embeddings": 4096,
            "torch_dtype": "bfloat16", "rms_norm_eps": 1e-5, **extra}


# ---- GGUF --------------------------------------------------------------------------------------

GGUF_TYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q8_0": (8, 32, 34),
              "Q4_K": (12, 256, 144), "Q6_K": (14, 256, 210), "BF16": (30, 1, 2),
              "MXFP4": (39, 32, 17)}


def _gguf_string(s: str | bytes) -> bytes:
    raw = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(raw)) + raw


def _gguf_value(value) -> bytes:
    """Type tag + payload for a Python value (int -> uint32/uint64, float -> f32, list -> array)."""
    if isinstance(value, bool):
        return struct.pack("<I?", 7, value)
    if isinstance(value, int):
        return struct.pack("<IQ", 10, value) if value >= 2**32 else struct.pack("<II", 4, value)
    if isinstance(value, float):
        return struct.pack("<If", 6, value)
    if isinstance(value, str):
        return struct.pack("<I", 8) + _gguf_string(value)
    if isinstance(value, list):
        if value and isinstance(value[0], str):
            return struct.pack("<IIQ", 9, 8, len(value)) + b"".join(_gguf_string(v) for v in value)
        if value and isinstance(value[0], bool):
            return struct.pack("<IIQ", 9, 7, len(value)) + struct.pack(f"<{len(value)}?", *value)
        if value and isinstance(value[0], float):
            return struct.pack("<IIQ", 9, 6, len(value)) + struct.pack(f"<{len(value)}f", *value)
        return struct.pack("<IIQ", 9, 5, len(value)) + struct.pack(f"<{len(value)}i", *value)
    raise TypeError(value)


def gguf_bytes(metadata: dict, tensors: dict[str, tuple[str, list[int]]], *, version=3,
               with_data=False) -> bytes:
    """A GGUF file image.  ``tensors``: name -> (type name, dims in ggml order)."""
    out = [b"GGUF", struct.pack("<IQQ", version, len(tensors), len(metadata))]
    for k, v in metadata.items():
        out.append(_gguf_string(k) + _gguf_value(v))
    offset = 0
    sizes = []
    for name, (tname, dims) in tensors.items():
        t_id, block, tsize = GGUF_TYPES[tname]
        n = 1
        for d in dims:
            n *= d
        size = n // block * tsize
        out.append(_gguf_string(name) + struct.pack("<I", len(dims))
                   + struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", t_id, offset))
        sizes.append(size)
        offset += -(-size // 32) * 32
    head = b"".join(out)
    head += b"\0" * (-len(head) % 32)
    if with_data:
        head += b"\0" * offset
    return head


def write_gguf(path: Path, metadata: dict, tensors: dict[str, tuple[str, list[int]]], **kw) -> Path:
    """Write a GGUF file with zero (sparse) tensor data so tensor extents check out."""
    head = gguf_bytes(metadata, tensors, **kw)
    data = 0
    for tname, dims in tensors.values():
        t_id, block, tsize = GGUF_TYPES[tname]
        n = 1
        for d in dims:
            n *= d
        data += -(-(n // block * tsize) // 32) * 32
    with open(path, "wb") as f:
        f.write(head)
        if data:
            f.seek(data - 1, 1)
            f.write(b"\0")
    return path


def gguf_llama(layers=2, hidden=256, ff=512, heads=4, kv_heads=2, vocab=300, *, arch="llama",
               tied=False, wtype="Q4_K", qkv_bias=False, extra_meta=None, file_type=15,
               head_dim=None):
    """(metadata, tensors) of a small llama-style GGUF."""
    d = head_dim or hidden // heads
    meta = {"general.architecture": arch, "general.name": "tiny", "general.file_type": file_type,
            f"{arch}.block_count": layers, f"{arch}.context_length": 8192,
            f"{arch}.embedding_length": hidden, f"{arch}.feed_forward_length": ff,
            f"{arch}.attention.head_count": heads, f"{arch}.attention.head_count_kv": kv_heads,
            "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.tokens": [f"t{i}" for i in range(vocab)]}
    if head_dim:
        meta[f"{arch}.attention.key_length"] = head_dim
        meta[f"{arch}.attention.value_length"] = head_dim
    meta.update(extra_meta or {})
    t = {"token_embd.weight": ("Q6_K", [hidden, vocab])}
    for i in range(layers):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = ("F32", [hidden])
        t[p + "attn_q.weight"] = (wtype, [hidden, heads * d])
        t[p + "attn_k.weight"] = (wtype, [hidden, kv_heads * d])
        t[p + "attn_v.weight"] = (wtype, [hidden, kv_heads * d])
        t[p + "attn_output.weight"] = (wtype, [heads * d, hidden])
        if qkv_bias:
            t[p + "attn_q.bias"] = ("F32", [heads * d])
            t[p + "attn_k.bias"] = ("F32", [kv_heads * d])
            t[p + "attn_v.bias"] = ("F32", [kv_heads * d])
        t[p + "ffn_norm.weight"] = ("F32", [hidden])
        t[p + "ffn_gate.weight"] = (wtype, [hidden, ff])
        t[p + "ffn_up.weight"] = (wtype, [hidden, ff])
        t[p + "ffn_down.weight"] = (wtype, [ff, hidden])
    t["output_norm.weight"] = ("F32", [hidden])
    if not tied:
        t["output.weight"] = ("Q6_K", [hidden, vocab])
    return meta, t


def gguf_qwen3moe(layers=2, hidden=256, heads=4, kv_heads=2, vocab=300, experts=8, used=2,
                  expert_ff=256, head_dim=64):
    """(metadata, tensors) of a small qwen3moe-style GGUF (all layers MoE, q/k norm, untied)."""
    arch = "qwen3moe"
    d = head_dim
    meta = {"general.architecture": arch, "general.file_type": 7,
            f"{arch}.block_count": layers, f"{arch}.context_length": 32768,
            f"{arch}.embedding_length": hidden, f"{arch}.feed_forward_length": 768,
            f"{arch}.attention.head_count": heads, f"{arch}.attention.head_count_kv": kv_heads,
            f"{arch}.attention.key_length": d, f"{arch}.attention.value_length": d,
            f"{arch}.expert_count": experts, f"{arch}.expert_used_count": used,
            f"{arch}.expert_feed_forward_length": expert_ff,
            "tokenizer.ggml.tokens": [f"t{i}" for i in range(vocab)]}
    t = {"token_embd.weight": ("Q8_0", [hidden, vocab])}
    for i in range(layers):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = ("F32", [hidden])
        t[p + "attn_q.weight"] = ("Q8_0", [hidden, heads * d])
        t[p + "attn_k.weight"] = ("Q8_0", [hidden, kv_heads * d])
        t[p + "attn_v.weight"] = ("Q8_0", [hidden, kv_heads * d])
        t[p + "attn_output.weight"] = ("Q8_0", [heads * d, hidden])
        t[p + "attn_q_norm.weight"] = ("F32", [d])
        t[p + "attn_k_norm.weight"] = ("F32", [d])
        t[p + "ffn_norm.weight"] = ("F32", [hidden])
        t[p + "ffn_gate_inp.weight"] = ("F32", [hidden, experts])
        t[p + "ffn_gate_exps.weight"] = ("Q8_0", [hidden, expert_ff, experts])
        t[p + "ffn_up_exps.weight"] = ("Q8_0", [hidden, expert_ff, experts])
        t[p + "ffn_down_exps.weight"] = ("Q8_0", [expert_ff, hidden, experts])
    t["output_norm.weight"] = ("F32", [hidden])
    t["output.weight"] = ("Q8_0", [hidden, vocab])
    return meta, t
