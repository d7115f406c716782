"""spec_from_path: folders, config.json, safetensors (single, sharded, GPTQ), GGUF."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from filegen import (  # noqa: E402
    gguf_llama,
    gptq_tensors,
    llama_config,
    llama_tensors,
    safetensors_header,
    st_nbytes,
    write_gguf,
    write_safetensors,
)

from fitcheck.errors import FitcheckError
from fitcheck.model import local
from fitcheck.model.safetensors_header import TensorInfo


def _data_bytes(tensors) -> int:
    return sum(st_nbytes(d, s) for d, s in tensors.values())


def test_folder_with_config_and_safetensors(tmp_path):
    tensors = llama_tensors(layers=2, hidden=64, inter=128, heads=4, kv_heads=2, vocab=256)
    write_safetensors(tmp_path / "model.safetensors", tensors)
    (tmp_path / "config.json").write_text(json.dumps(llama_config()))
    spec = local.spec_from_path(tmp_path)
    assert spec.name == tmp_path.name and spec.architecture == "llama"
    assert spec.num_layers == 2 and spec.num_kv_heads == 2
    assert spec.stored_weight_bytes == _data_bytes(tensors)
    assert spec.stored_format is None and spec.stored_dtype == "bfloat16"
    assert spec.total_params == sum(TensorInfo(d, tuple(s), 0).elements for d, s in tensors.values())
    assert ("stored_weight_bytes", "safetensors header (exact)") in spec.sources


def test_sharded_index_and_missing_shard(tmp_path):
    tensors = llama_tensors(layers=4)
    names = list(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:20], "model-00002-of-00002.safetensors": names[20:]}
    weight_map = {}
    for fname, part in shards.items():
        write_safetensors(tmp_path / fname, {n: tensors[n] for n in part})
        weight_map.update({n: fname for n in part})
    index = {"metadata": {"total_size": _data_bytes(tensors)}, "weight_map": weight_map}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "config.json").write_text(json.dumps(llama_config(layers=4)))

    for path in (tmp_path, tmp_path / "model.safetensors.index.json"):
        spec = local.spec_from_path(path)
        assert spec.stored_weight_bytes == _data_bytes(tensors)
        assert spec.num_layers == 4

    with pytest.raises(FitcheckError, match="one shard"):
        local.spec_from_path(tmp_path / "model-00001-of-00002.safetensors")

    # Weights not downloaded: the index's total_size stands in for the headers.
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    spec = local.spec_from_path(tmp_path)
    assert spec.stored_weight_bytes == _data_bytes(tensors)
    assert any("total_size" in where for _, where in spec.sources)
    (tmp_path / "config.json").unlink()
    with pytest.raises(FitcheckError, match="missing"):
        local.spec_from_path(tmp_path)


def test_index_with_path_traversal_is_refused(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "../../etc/passwd"}}))
    with pytest.raises(FitcheckError, match="outside"):
        local.spec_from_path(tmp_path)


def test_gptq_checkpoint_counts_as_stored(tmp_path):
    tensors = gptq_tensors(layers=2, hidden=256, inter=512, heads=4, kv_heads=2, vocab=256, bits=4)
    write_safetensors(tmp_path / "model.safetensors", tensors)
    config = llama_config(layers=2, hidden=256, inter=512, heads=4, kv_heads=2, vocab=256,
                          torch_dtype="float16",
                          quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 128})
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = local.spec_from_path(tmp_path)
    assert spec.stored_format == "gptq-int4"
    assert spec.stored_weight_bytes == _data_bytes(tensors)
    # Packed: far below what the same model takes in fp16.
    assert spec.stored_weight_bytes < 0.5 * spec.total_params * 2


@pytest.mark.parametrize("tensors, expected", [
    (gptq_tensors(bits=4), "gptq-int4"),
    (gptq_tensors(bits=8), "gptq-int8"),
    ({"l.qweight": ("I32", [64, 64]), "l.qzeros": ("I32", [4, 8]), "l.scales": ("F16", [4, 512])}, "awq"),
    ({"l.weight": ("F8_E4M3", [64, 64]), "l.weight_scale": ("F32", [1])}, "fp8"),
    ({"experts.gate_up_proj_blocks": ("U8", [4, 64, 2, 16]),
      "experts.gate_up_proj_scales": ("U8", [4, 64, 2])}, "mxfp4"),
    ({"l.weight": ("U8", [2048, 1]), "l.weight.absmax": ("F32", [64]),
      "l.weight.quant_state.bitsandbytes__nf4": ("U8", [100])}, "bnb-nf4"),
    ({"l.weight": ("I8", [64, 64]), "l.SCB": ("F32", [64])}, "bnb-int8"),
    (llama_tensors(), None),
])
def test_format_from_tensors(tensors, expected):
    header = local.SafetensorsHeader(
        {n: TensorInfo(d, tuple(s), st_nbytes(d, s)) for n, (d, s) in tensors.items()})
    assert local.stored_weights({"f": header}).stored_format == expected


def test_lone_safetensors_infers_llama_architecture(tmp_path):
    tensors = llama_tensors(layers=3, hidden=512, inter=1024, heads=4, kv_heads=2, vocab=1000,
                            tied=True, qkv_bias=True)
    path = tmp_path / "model.safetensors"
    write_safetensors(path, tensors)
    spec = local.spec_from_path(path)
    assert (spec.num_layers, spec.hidden_size, spec.intermediate_size, spec.vocab_size) == (3, 512, 1024, 1000)
    assert (spec.num_attention_heads, spec.num_kv_heads) == (4, 2)  # head_dim 128 assumed
    assert spec.tie_word_embeddings and spec.qkv_bias and spec.extra_params == 0
    assert spec.stored_weight_bytes == _data_bytes(tensors)
    assert spec.total_params == sum(TensorInfo(d, tuple(s), 0).elements for d, s in tensors.values())
    assert any("assumed head_dim 128" in where for _, where in spec.sources)


def test_lone_safetensors_uses_q_norm_for_head_dim(tmp_path):
    tensors = llama_tensors(layers=2, hidden=256, inter=512, heads=8, kv_heads=2, head_dim=64,
                            vocab=300, qk_norm=True)
    write_safetensors(tmp_path / "m.safetensors", tensors)
    spec = local.spec_from_path(tmp_path / "m.safetensors")
    assert (spec.num_attention_heads, spec.num_kv_heads, spec.attn_head_dim) == (8, 2, 64)
    assert spec.qk_norm and spec.total_params == sum(
        TensorInfo(d, tuple(s), 0).elements for d, s in tensors.values())


def test_lone_safetensors_that_is_not_llama_style(tmp_path):
    write_safetensors(tmp_path / "m.safetensors", {"transformer.h.0.attn.c_attn.weight": ("F16", [8, 8])})
    with pytest.raises(FitcheckError) as info:
        local.spec_from_path(tmp_path / "m.safetensors")
    assert "point at the model folder that holds config.json" in info.value.one_line()
    moe = llama_tensors(layers=1)
    moe["model.layers.0.mlp.experts.0.gate_proj.weight"] = ("BF16", [8, 64])
    write_safetensors(tmp_path / "moe.safetensors", moe)
    with pytest.raises(FitcheckError, match="mixture-of-experts"):
        local.spec_from_path(tmp_path / "moe.safetensors")


def test_config_json_alone(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(llama_config(layers=5)))
    spec = local.spec_from_path(tmp_path / "config.json")
    assert spec.num_layers == 5 and spec.stored_weight_bytes is None
    assert local.spec_from_path(tmp_path).num_layers == 5


def test_gguf_file_and_folder(tmp_path):
    meta, tensors = gguf_llama(layers=2)
    path = write_gguf(tmp_path / "tiny-Q4_K_M.gguf", meta, tensors)
    (tmp_path / "mmproj-tiny-f16.gguf").write_bytes(b"ignored: a vision projector")
    by_file = local.spec_from_path(path)
    by_dir = local.spec_from_path(tmp_path)
    assert by_file.name == "tiny-Q4_K_M" and by_file.stored_format == "q4_k_m"
    assert by_dir.stored_weight_bytes == by_file.stored_weight_bytes > 0
    write_gguf(tmp_path / "tiny-Q8_0.gguf", meta, tensors)
    with pytest.raises(FitcheckError, match="2 GGUF models"):
        local.spec_from_path(tmp_path)


def test_split_gguf_needs_every_shard(tmp_path):
    meta, tensors = gguf_llama(layers=2)
    names = list(tensors)
    write_gguf(tmp_path / "m-00001-of-00002.gguf", meta, {n: tensors[n] for n in names[:5]})
    with pytest.raises(FitcheckError, match="00002-of-00002 is missing|m-00002-of-00002.gguf is missing"):
        local.spec_from_path(tmp_path / "m-00001-of-00002.gguf")
    write_gguf(tmp_path / "m-00002-of-00002.gguf", {"general.architecture": "llama"},
               {n: tensors[n] for n in names[5:]})
    spec = local.spec_from_path(tmp_path / "m-00001-of-00002.gguf")
    assert spec.name == "m" and not spec.tie_word_embeddings


@pytest.mark.parametrize("setup, match", [
    (lambda p: None, "no config.json"),
    (lambda p: (p / "config.json").write_text("{not json"), "not valid JSON"),
    (lambda p: (p / "config.json").write_text("[1]"), "not a JSON object"),
    (lambda p: (p / "model.safetensors").write_bytes(b"\x05\0\0\0\0\0\0\0{}"), "truncated"),
])
def test_bad_folders(tmp_path, setup, match):
    setup(tmp_path)
    with pytest.raises(FitcheckError, match=match):
        local.spec_from_path(tmp_path)


def test_missing_path_and_unknown_file(tmp_path):
    with pytest.raises(FitcheckError, match="no such file"):
        local.spec_from_path(tmp_path / "nope")
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(FitcheckError, match="not a model file"):
        local.spec_from_path(tmp_path / "weights.bin")


def test_safetensors_header_helper_is_consistent():
    doc = safetensors_header({"a": ("BF16", [2, 3])})
    assert doc["a"]["data_offsets"] == [0, 12]
