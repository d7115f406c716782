"""Symlinks out of a model folder are refused (a shard pointing at ~/.cache/huggingface/token would be
read); Hugging Face cache snapshots and --local-dir links into the cache's blobs still work."""

from __future__ import annotations

import json

import pytest
from filegen import llama_config, llama_tensors, write_safetensors

from fitcheck.errors import FitcheckError
from fitcheck.model.local import spec_from_path


def test_a_shard_linked_to_a_token_is_refused_without_printing_its_bytes(tmp_path):
    token = tmp_path / "token"
    token.write_text("hf_abcdefghSECRET")
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").symlink_to(token)
    with pytest.raises(FitcheckError, match="resolves outside the model folder") as info:
        spec_from_path(folder)
    assert "SECRET" not in info.value.one_line() and "hf_" not in info.value.one_line().replace(str(tmp_path), "")


def test_a_safetensors_error_never_echoes_the_first_bytes(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"hf_abcdefghSECRET")
    with pytest.raises(FitcheckError) as info:
        spec_from_path(path)
    n = int.from_bytes(b"hf_abcde", "little")
    assert str(n) not in info.value.one_line() and f"{n:,}" not in info.value.one_line()


def test_hf_cache_snapshot_and_local_dir_links_into_blobs_are_read(tmp_path):
    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "cfg").write_text(json.dumps(llama_config()))
    write_safetensors(repo / "blobs" / "w", llama_tensors())
    snap = repo / "snapshots" / "rev"
    snap.mkdir(parents=True)
    (snap / "config.json").symlink_to("../../blobs/cfg")
    (snap / "model.safetensors").symlink_to("../../blobs/w")
    assert spec_from_path(snap).stored_weight_bytes > 0
    local = tmp_path / "local-dir"
    local.mkdir()
    (local / "config.json").symlink_to(repo / "blobs" / "cfg")
    (local / "model.safetensors").symlink_to(repo / "blobs" / "w")
    assert spec_from_path(local).stored_weight_bytes > 0


def test_a_file_named_directly_may_be_a_symlink(tmp_path):
    target = tmp_path / "elsewhere" / "model.safetensors"
    target.parent.mkdir()
    write_safetensors(target, llama_tensors())
    (tmp_path / "m").mkdir()
    link = tmp_path / "m" / "model.safetensors"
    link.symlink_to(target)
    assert spec_from_path(link).num_layers == 2
