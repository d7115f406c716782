"""resolve_model: short names, ids, ambiguity notes, generic shapes, unknown names."""

from __future__ import annotations

import sys
import types

import pytest

from fitcheck.errors import FitcheckError
from fitcheck.model.resolve import resolve_model

TABLE = [
    ("qwen-7b", "Qwen/Qwen2.5-7B-Instruct"),
    ("Qwen-7B", "Qwen/Qwen-7B"),           # an exact repository name wins over the short name
    ("QWEN-7b", "Qwen/Qwen2.5-7B-Instruct"),
    ("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct"),
    ("qwen2-7b", "Qwen/Qwen2-7B-Instruct"),
    ("llama3-8b", "meta-llama/Llama-3.1-8B-Instruct"),
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct"),
    ("LLAMA_3.2_1B", "meta-llama/Llama-3.2-1B-Instruct"),
    ("mistral-7b", "mistralai/Mistral-7B-Instruct-v0.3"),
    ("deepseek-r1-distill-qwen-7b", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"),
    ("gpt-oss-20b", "openai/gpt-oss-20b"),
    ("mixtral-8x7b", "mistralai/Mixtral-8x7B-Instruct-v0.1"),
    ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B-Instruct-2507"),
    ("gemma-3-4b", "google/gemma-3-4b-it"),
    ("llama-4-scout", "meta-llama/Llama-4-Scout-17B-16E-Instruct"),
    # full ids (any case) and org-less repository names are exact
    ("qwen/QWEN-7B", "Qwen/Qwen-7B"),
    ("Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B"),
    ("Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
    ("mistral-7b-instruct-v0.1", "mistralai/Mistral-7B-Instruct-v0.1"),
    ("Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-8B"),
]


@pytest.mark.parametrize("text,hf_id", TABLE)
def test_resolution_table(text, hf_id):
    resolved = resolve_model(text)
    assert resolved.hf_id == hf_id and resolved.source == "catalog"
    assert resolved.entry is not None and resolved.spec.name == hf_id


def test_ambiguous_short_name_says_what_was_chosen_and_what_else_matched():
    note = resolve_model("qwen-7b").note
    assert note.startswith("qwen-7b → Qwen/Qwen2.5-7B-Instruct; also: ")
    assert "Qwen/Qwen2-7B-Instruct" in note
    assert resolve_model("Qwen/Qwen2.5-7B-Instruct").note is None


def test_unknown_name_suggests_three_close_names():
    with pytest.raises(FitcheckError) as err:
        resolve_model("lama3-8b")
    assert err.value.message == "unknown model 'lama3-8b'"
    assert err.value.hint.startswith("did you mean: ")
    # the same family and size only (within 2x): Llama 3's 8B models, not CodeLlama or another size
    assert err.value.hint == "did you mean: llama3-8b, llama3.1-8b"


def test_generic_from_params():
    r = resolve_model("my-private-model", params="7b")
    assert r.source == "generic" and r.spec.generic and r.hf_id is None
    assert abs(r.spec.total_params / 7e9 - 1) < 0.001
    assert (r.spec.num_layers, r.spec.hidden_size, r.spec.num_kv_heads) == (32, 4096, 8)
    r = resolve_model("x", params="13b", layers=40, hidden=5120, kv_heads=40)
    assert (r.spec.num_layers, r.spec.hidden_size, r.spec.num_kv_heads) == (40, 5120, 40)
    assert abs(r.spec.total_params / 13e9 - 1) < 0.001


@pytest.mark.parametrize("kwargs", [dict(params="lots"), dict(params="7b", kv_heads=5), dict(params="1k"),
                                    dict(layers=32), dict(params="1b", layers=5000, hidden=8192)])
def test_bad_generic_input(kwargs):
    with pytest.raises(FitcheckError):
        resolve_model("x", **kwargs)


def test_local_path_goes_to_local_reader(tmp_path, monkeypatch):
    seen = {}
    fake = types.ModuleType("fitcheck.model.local")

    def spec_from_path(path):
        seen["path"] = path
        return resolve_model("qwen2.5-0.5b").spec

    fake.spec_from_path = spec_from_path
    monkeypatch.setitem(sys.modules, "fitcheck.model.local", fake)
    r = resolve_model(str(tmp_path))
    assert r.source == "local" and seen["path"] == str(tmp_path)


def test_unknown_repo_id_goes_to_the_hub(monkeypatch):
    fake = types.ModuleType("fitcheck.model.hub")
    fake.spec_from_hub = lambda repo_id: resolve_model("qwen2.5-0.5b").spec
    monkeypatch.setitem(sys.modules, "fitcheck.model.hub", fake)
    r = resolve_model("someone/some-model")
    assert r.source == "hub" and r.hf_id == "someone/some-model"


def test_empty_name():
    with pytest.raises(FitcheckError):
        resolve_model("  ")


@pytest.mark.parametrize("text", [
    "/tmp/fitcheck-no-such-dir/nonexist/config.json", "./no-such-model-dir", "../no-such-model-dir",
    "~/no-such-fitcheck-model.gguf", "no-such-model.safetensors", "some/dir/model.gguf",
])
def test_missing_path_says_no_such_file_not_unknown_model(text):
    with pytest.raises(FitcheckError) as err:
        resolve_model(text)
    assert err.value.message == f"no such file or folder: {text}"
    assert "did you mean" not in err.value.one_line()


def test_hub_ids_with_a_slash_are_not_taken_for_paths(monkeypatch):
    import fitcheck.model.resolve as resolve

    seen = []
    monkeypatch.setattr(resolve, "_hub", lambda repo_id: seen.append(repo_id) or "hub")
    assert resolve_model("some-org/Some-Model-7B") == "hub" and seen == ["some-org/Some-Model-7B"]
