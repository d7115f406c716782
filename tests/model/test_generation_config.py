"""generation_config.json: the sampling transformers' generate() runs by default, read from a model's
folder, the Hub cache, the Hub or the catalog's record; --sampling given explicitly wins."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.estimate.generate_step import generate_kwargs, sampling_for, sampling_processors, step_tensors
from fitcheck.model import hub
from fitcheck.model.generation_config import from_dict, read_beside

FIXTURES = Path(__file__).parent.parent / "fixtures"
GENERATION = FIXTURES / "generation"
CONFIG = FIXTURES / "configs" / "Llama-3.1-8B-Instruct.json"


def _mode(doc: object) -> str:
    g = from_dict(doc, "test")
    return sampling_for(g.sampled, g.warpers(), g.processors())


@pytest.mark.parametrize(("fixture", "mode"), [
    # temperature, top-k 20, top-p, after the repetition penalty (1.05)
    ("Qwen2.5-7B-Instruct.json", "sample:repetition-penalty+temperature+top-k+top-p"),
    ("Meta-Llama-3.1-8B-Instruct.json", "top-p"),    # temperature, top-k (GenerationConfig's 50), top-p
    ("Qwen3-4B.json", "top-p"),
    ("gemma-2-9b-it.json", "greedy"),                # no do_sample
])
def test_published_files_map_to_the_warpers_generate_adds(fixture, mode):
    assert _mode(json.loads((GENERATION / fixture).read_text())) == mode


def test_warpers_follow_transformers_conditions():
    assert _mode({"do_sample": True}) == "sample"                       # top_k 50 alone
    assert _mode({"do_sample": True, "top_k": 0, "top_p": 0.9}) == "sample:top-p"
    assert _mode({"do_sample": True, "top_k": 64, "top_p": 0.95}) == "sample:top-k+top-p"   # gemma-3's shape
    assert _mode({"do_sample": True, "top_k": 0}) == "sample:none"
    assert _mode({"do_sample": False, "temperature": 0.6, "top_p": 0.9}) == "greedy"
    # what each adds, per vocabulary entry per sequence with 16-bit weights (a current release)
    assert step_tensors(None, "sample:top-p", 2).steady < step_tensors(None, "top-p", 2).steady
    assert [p.name for p in sampling_processors("sample:top-k+top-p")] == ["top-k", "top-p"]
    assert generate_kwargs("sample:top-p") == {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 0.9}


@pytest.mark.parametrize("doc", [[1, 2], {"do_sample": "yes"}, {"do_sample": True, "top_k": 1e300},
                                 {"do_sample": True, "top_p": "0.9"}, {"do_sample": True, "top_k": 2.5}])
def test_a_bad_value_is_a_problem_not_a_crash(doc):
    g = from_dict(doc, "test")
    assert g.problem and g.warpers() == ()


def _folder(tmp_path: Path, generation: str | None) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(CONFIG, folder / "config.json")
    if generation is not None:
        (folder / "generation_config.json").write_text(generation)
    return folder


def _sampling(args: list[str]) -> tuple[dict, int]:
    r = CliRunner().invoke(cli, [*args, "--batch", "16", "--prompt", "1", "--context", "64",
                                 "--profile", "rtx-4090", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    gpu = next(d for d in doc["estimate"]["devices"] if d["kind"] == "gpu")
    note = next(a for a in doc["estimate"]["assumptions"] if a["name"] == "sampling")
    return note, gpu["components"]["activations"]


def test_a_local_folder_samples_as_its_generation_config_says(tmp_path):
    greedy = _folder(tmp_path, (GENERATION / "gemma-2-9b-it.json").read_text())
    note, activations = _sampling([str(greedy)])
    assert note["value"] == "greedy"
    assert note["why"].startswith("from generation_config.json: do_sample not set (false)")
    assert activations == _sampling([str(greedy), "--sampling", "greedy"])[1]
    # --sampling given explicitly wins
    note, forced = _sampling([str(greedy), "--sampling", "top-p"])
    assert note["value"] == "top-p" and note["why"] == "from --sampling" and forced > activations


def test_the_values_are_said(tmp_path):
    folder = _folder(tmp_path, (GENERATION / "Qwen2.5-7B-Instruct.json").read_text())
    note, _ = _sampling([str(folder)])
    assert note["value"] == "sample:repetition-penalty+temperature+top-k+top-p"
    assert ("from generation_config.json: do_sample true, temperature 0.7, top_k 20, top_p 0.8, "
            "repetition_penalty 1.05") in note["why"]


def test_without_the_file_the_default_says_so(tmp_path):
    note, _ = _sampling([str(_folder(tmp_path, None))])
    assert note["value"] == "top-p" and note["why"].startswith("default (no generation_config.json read)")


@pytest.mark.parametrize("content", ["{not json", "[1]", '{"do_sample": "yes"}', "{" * 10_000 + "}" * 10_000])
def test_a_hostile_file_falls_back_to_the_default(tmp_path, content):
    note, _ = _sampling([str(_folder(tmp_path, content))])
    assert note["value"] == "top-p" and note["why"].startswith("default (")


def test_an_oversized_or_special_file_is_never_read(tmp_path):
    folder = _folder(tmp_path, None)
    (folder / "generation_config.json").write_bytes(b" " * (300 * 1024) + b"{}")
    g = read_beside(folder)
    assert g is not None and "too large" in g.problem
    if hasattr(os, "mkfifo"):
        fifo_folder = tmp_path / "fifo"
        fifo_folder.mkdir()
        os.mkfifo(fifo_folder / "generation_config.json")
        assert read_beside(fifo_folder) is None  # not a regular file: never opened


def test_catalog_records_the_published_values():
    note, greedy = _sampling(["google/gemma-2-9b-it"])
    assert note["value"] == "greedy" and "recorded in the catalog" in note["why"]
    note, _ = _sampling(["meta-llama/Llama-3.1-8B-Instruct"])
    assert note["value"] == "top-p" and "do_sample true, temperature 0.6, top_p 0.9" in note["why"]
    # a catalog model without a record keeps the default, said so
    note, _ = _sampling(["mistralai/Mistral-7B-Instruct-v0.3"])
    assert note["value"] == "top-p" and note["why"].startswith("default (no generation_config.json read)")


def test_the_hub_path_reads_it_beside_config_json(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    folder = FIXTURES / "hub" / "unsloth--Llama-3.2-1B-Instruct"

    class Client:
        def config(self, repo_id, revision):
            return json.loads((folder / "config.json").read_text())

        def generation_config(self, repo_id, revision):
            return json.loads((GENERATION / "Meta-Llama-3.1-8B-Instruct.json").read_text())

        def safetensors_headers(self, repo_id, revision):
            return json.loads((folder / "safetensors-metadata.json").read_text())

    spec = hub.spec_from_hub("unsloth/Llama-3.2-1B-Instruct", client=Client())
    assert spec.generation is not None and spec.generation.warpers() == ("temperature", "top-k", "top-p")

    class Missing(Client):
        def generation_config(self, repo_id, revision):
            return None

    assert hub.spec_from_hub("unsloth/Llama-3.2-1B-Instruct", client=Missing()).generation is None


def test_auto_is_the_default_and_can_be_typed():
    from fitcheck.options import DEFAULTS, command_args
    from fitcheck.preflight.plan_file import parse_plan

    assert DEFAULTS["sampling"] == "auto"
    assert _sampling(["google/gemma-2-9b-it", "--sampling", "auto"]) == _sampling(["google/gemma-2-9b-it"])
    assert parse_plan("[[case]]\nmodel = 'qwen-7b'\nsampling = 'auto'\n", "p.toml").cases[0].options["sampling"] \
        == "auto"
    assert "--sampling" not in command_args({"sampling": "auto"}, "inference")
    assert command_args({"sampling": "greedy"}, "inference") == ["--sampling", "greedy"]


def test_a_hub_cache_snapshot_is_read_and_the_catalog_fills_a_missing_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    commit = "a" * 40
    for repo, generation in (("someone/own-llama", "gemma-2-9b-it.json"), ("google/gemma-2-9b-it", None)):
        folder = tmp_path / ("models--" + repo.replace("/", "--"))
        snapshot = folder / "snapshots" / commit
        snapshot.mkdir(parents=True)
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(commit)
        shutil.copy(CONFIG, snapshot / "config.json")
        if generation:
            shutil.copy(GENERATION / generation, snapshot / "generation_config.json")
    note, _ = _sampling(["someone/own-llama"])
    assert note["value"] == "greedy" and note["why"].startswith("from generation_config.json")
    assert "snapshots" in note["why"]  # the file it read
    # a cached catalog model whose snapshot lacks the file: the catalog's record of the published one
    note, _ = _sampling(["google/gemma-2-9b-it", "--revision", "main"])
    assert note["value"] == "greedy" and "recorded in the catalog" in note["why"]


def test_every_catalog_record_cites_its_source_and_parses():
    from fitcheck.model.catalog import _raw, load_catalog

    recorded = {m["hf_id"]: m["generation"] for m in _raw()["models"] if "generation" in m}
    assert len(recorded) >= 15
    modes = {}
    for hf_id, values in recorded.items():
        assert values.get("source"), hf_id
        g = load_catalog().get(hf_id).spec.generation
        assert g is not None and not g.problem, hf_id
        modes[hf_id] = sampling_for(g.sampled, g.warpers(), g.processors())
    assert modes["openai/gpt-oss-20b"] == "sample"                       # do_sample alone: top-k 50
    # Qwen2.5 Instruct's published files set repetition_penalty (1.05; the Coder 1.1)
    assert modes["Qwen/Qwen2.5-Coder-7B-Instruct"] == "sample:repetition-penalty+temperature+top-k+top-p"
    assert modes["HuggingFaceTB/SmolLM2-1.7B-Instruct"] == "greedy"
    assert modes["deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"] == "top-p"


def test_a_user_catalog_model_reads_its_own_file_else_keeps_the_catalog_record(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for repo in ("my-org/my-llama", "google/gemma-2-9b-it"):
        folder = tmp_path / "fitcheck" / "models" / repo
        folder.mkdir(parents=True)
        shutil.copy(CONFIG, folder / "config.json")
    shutil.copy(GENERATION / "gemma-2-9b-it.json", tmp_path / "fitcheck" / "models" / "my-org" / "my-llama"
                / "generation_config.json")
    note, _ = _sampling(["my-org/my-llama"])
    assert note["value"] == "greedy" and "my-llama" in note["why"]
    # a user config for a shipped id, without a file of its own: the catalog's record of the published one
    note, _ = _sampling(["google/gemma-2-9b-it"])
    assert note["value"] == "greedy" and "recorded in the catalog" in note["why"]


def test_models_show_says_what_generate_samples_with():
    r = CliRunner().invoke(cli, ["models", "--show", "openai/gpt-oss-20b", "--json"])
    assert r.exit_code == 0, r.output
    g = json.loads(r.output)["generation"]
    assert g["sampling"] == "sample" and g["do_sample"] is True and g["citation"]
    assert "generation" not in json.loads(r.output)["spec"]
    text = CliRunner().invoke(cli, ["models", "--show", "google/gemma-2-9b-it"]).output
    assert "generation_config.json: fitcheck assumes --sampling greedy, from generation_config.json" in text
    assert json.loads(CliRunner().invoke(cli, ["models", "--show", "mistralai/Mistral-7B-Instruct-v0.3",
                                               "--json"]).output)["generation"] is None


def test_models_show_says_what_fitcheck_assumes_where_generate_would_beam_search(tmp_path):
    # review: a beam-search file read as "generate() samples top-p"; it is fitcheck's fallback, said so
    folder = tmp_path / "beams"
    folder.mkdir()
    shutil.copy(CONFIG, folder / "config.json")
    (folder / "generation_config.json").write_text(json.dumps({"do_sample": False, "num_beams": 4}))
    doc = json.loads(CliRunner().invoke(cli, ["models", "--show", str(folder), "--json"]).output)["generation"]
    assert doc["sampling"] == "top-p" and "beam search, not modelled" in doc["why"]


def test_a_sampling_an_auto_default_prints_can_be_typed_back():
    from fitcheck.estimate.generate_step import CUSTOM_SAMPLINGS, sampling_for

    # every set of warpers generate() may run has a --sampling value, and the CLI takes each
    assert "sample:temperature+top-p" in CUSTOM_SAMPLINGS and "sample:none" in CUSTOM_SAMPLINGS
    assert sampling_for(True, ("temperature", "top-k", "top-p")) == "top-p"
    for value in CUSTOM_SAMPLINGS:
        r = CliRunner().invoke(cli, ["qwen-0.5b", "--sampling", value, "--profile", "rtx-4090", "--json"])
        assert r.exit_code == 0, (value, r.output)
    assert CliRunner().invoke(cli, ["qwen-0.5b", "--sampling", "sample:bogus"]).exit_code == 2
    # the repetition penalty too, sampled or greedy (a processor: generate() runs it either way)
    assert "sample:repetition-penalty+temperature+top-k+top-p" in CUSTOM_SAMPLINGS
    assert "greedy:repetition-penalty" in CUSTOM_SAMPLINGS
    assert sampling_for(False, (), ("repetition-penalty",)) == "greedy:repetition-penalty"


def test_repetition_penalty_is_read_and_runs_greedy_or_sampled():
    assert _mode({"repetition_penalty": 1.1}) == "greedy:repetition-penalty"
    assert _mode({"do_sample": True, "repetition_penalty": 1.0}) == "sample"        # 1.0: no processor
    assert _mode({"do_sample": True, "top_k": 0, "repetition_penalty": 1.05}) == "sample:repetition-penalty"
    assert from_dict({"repetition_penalty": 0}, "test").problem
    assert generate_kwargs("greedy:repetition-penalty") == {"do_sample": False, "repetition_penalty": 1.05}
    assert generate_kwargs("sample:repetition-penalty+top-p")["repetition_penalty"] == 1.05


def test_models_show_says_the_repetition_penalty():
    r = CliRunner().invoke(cli, ["models", "--show", "Qwen/Qwen2.5-7B-Instruct", "--json"])
    assert r.exit_code == 0, r.output
    g = json.loads(r.output)["generation"]
    assert g["repetition_penalty"] == 1.05 and g["sampling"] == "sample:repetition-penalty+temperature+top-k+top-p"
    text = CliRunner().invoke(cli, ["models", "--show", "Qwen/Qwen2.5-7B-Instruct"]).output
    assert "fitcheck assumes --sampling sample:repetition-penalty+temperature+top-k+top-p" in text
    assert "repetition_penalty 1.05" in text
