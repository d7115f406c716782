"""Names people type (issue: advice an expert would give): family names answer with the sizes,
suggestions that continue what was typed, an exact id wins, versioned families resolve to the
newest, --params for a known model is refused, a mistyped command is named, an unknown GGUF
architecture is named."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.errors import FitcheckError
from fitcheck.model.catalog import get_entry
from fitcheck.model.resolve import resolve_model, suggestions


def error_of(text: str, **kw) -> FitcheckError:
    with pytest.raises(FitcheckError) as info:
        resolve_model(text, **kw)
    return info.value


@pytest.mark.parametrize("family, expected", [
    ("qwen3", {"qwen3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b"}),
    ("qwen", {"qwen-7b", "qwen-72b"}),
    ("llama3", {"llama3-8b", "llama3-70b"}),
    ("gemma3", {"gemma3-1b", "gemma3-27b"}),
    ("mixtral", {"mixtral-8x7b", "mixtral-8x22b"}),
    ("phi3", {"phi3-mini", "phi3-medium"}),
    ("gpt-oss", {"gpt-oss-20b", "gpt-oss-120b"}),
    ("smollm2", {"smollm2-135m", "smollm2-1.7b"}),
    ("olmo2", {"olmo2-7b", "olmo2-32b"}),
])
def test_family_names_answer_with_the_sizes(family, expected):
    exc = error_of(family)
    assert "is a model family: choose a size" in str(exc)
    listed = set(exc.one_line().split("(", 1)[1].replace("(e.g.", ",").replace(")", "").replace(",", " ").split())
    assert expected <= listed, listed
    # every size listed resolves
    for name in expected:
        assert resolve_model(name).entry is not None


@pytest.mark.parametrize("typed, first", [
    ("llama-3.3", "llama3.3-70b"),
    ("qwen3-235b", "qwen3-235b-a22b"),
    ("qwen3-moe", "qwen3-30b-a3b"),
])
def test_suggestions_continue_what_was_typed(typed, first):
    assert suggestions(typed)[0] == first
    assert first in error_of(typed).one_line()


def test_an_exact_repository_name_wins():
    assert resolve_model("Qwen-7B").hf_id == "Qwen/Qwen-7B"
    assert resolve_model("qwen-7b").hf_id == "Qwen/Qwen2.5-7B-Instruct"


def test_versioned_families_resolve_to_the_newest():
    r = resolve_model("command-r")
    assert r.hf_id == "CohereForAI/c4ai-command-r-08-2024" and "c4ai-command-r-v01" in r.note


def test_params_for_a_known_model_is_refused():
    exc = error_of("qwen-7b", params="7b")
    assert "Qwen/Qwen2.5-7B-Instruct" in str(exc) and "--params" in str(exc)
    assert resolve_model("my-own-model", params="7b").source == "generic"
    r = CliRunner().invoke(cli, ["llama3-8b", "--params", "8b"])
    assert r.exit_code == 2 and "meta-llama/Llama-3.1-8B-Instruct" in r.output


@pytest.mark.parametrize("hf_id, published", [
    ("meta-llama/Llama-2-13b-hf", 13.0e9), ("meta-llama/Llama-2-70b-hf", 69.0e9)])
def test_base_models_beside_their_chat_versions(hf_id, published):
    e = get_entry(hf_id)
    assert e is not None and e.variant == "base" and e.official_params == published
    assert abs(e.spec.total_params / published - 1) < 0.01
    assert resolve_model(hf_id.split("/")[1]).hf_id == hf_id


@pytest.mark.parametrize("hf_id, active", [("openai/gpt-oss-120b", 5.13e9), ("openai/gpt-oss-20b", 3.61e9)])
def test_gpt_oss_active_parameters_follow_openai(hf_id, active):
    e = get_entry(hf_id)
    assert abs(e.active_params / active - 1) < 0.01        # OpenAI's model card: embedding table excluded
    assert e.spec.active_params > e.active_params          # the spec keeps what a forward pass touches
    r = CliRunner().invoke(cli, ["models", "--show", hf_id.split("/")[1], "--json"])
    assert abs(__import__("json").loads(r.output)["params"]["active"] / active - 1) < 0.01
    # a Mixtral keeps Mistral's convention (12.9B active, embeddings included)
    mixtral = get_entry("mistralai/Mixtral-8x7B-v0.1")
    assert mixtral.active_params == mixtral.spec.active_params


def test_a_mistyped_command_is_named():
    r = CliRunner().invoke(cli, ["chek", "qwen-7b"])
    assert r.exit_code == 2 and "did you mean: check" in r.output
    assert CliRunner().invoke(cli, ["qwen-7b", "--profile", "rtx-4090"]).exit_code == 0


def test_gguf_of_an_unknown_architecture_says_so(tmp_path):
    from tests.model.filegen import write_gguf

    meta = {"general.architecture": "mamba", "general.file_type": 1, "mamba.block_count": 2,
            "mamba.embedding_length": 256, "mamba.context_length": 4096, "mamba.ssm.conv_kernel": 4,
            "tokenizer.ggml.tokens": [f"t{i}" for i in range(300)]}
    path = write_gguf(tmp_path / "mamba.gguf", meta, {"token_embd.weight": ("F16", [256, 300])})
    r = CliRunner().invoke(cli, [str(path)])
    assert r.exit_code == 2 and "unsupported architecture mamba" in r.output
