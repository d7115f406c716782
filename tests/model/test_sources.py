"""Where models come from besides the catalog: the local Hugging Face cache, Ollama names and
store, GGUF repositories (``repo:QUANT``), offline; the remote GGUF header through a fake client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fitcheck.errors import FitcheckError
from fitcheck.model import gguf_repo, hf_cache, ollama
from fitcheck.model.resolve import resolve_model
from fitcheck.pipeline import check
from fitcheck.profiles import load_profile
from fitcheck.request import Request
from tests.model.filegen import gguf_bytes, gguf_llama
from tests.model.layouts import COMMIT, FIXTURES, hub_cache, ollama_store

LLAMA = "unsloth/Llama-3.2-1B-Instruct"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    return root


# ---- the Hugging Face cache -----------------------------------------------------------------------
def test_cache_dir_follows_huggingface_hub_precedence(monkeypatch, tmp_path):
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hf_cache.hub_cache_dir() == tmp_path / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hf_cache.hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
    assert hf_cache.hub_cache_dir() == tmp_path / "hfhome" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "direct"))
    assert hf_cache.hub_cache_dir() == tmp_path / "direct"


def test_cached_repo_resolves_offline_by_repo_id_with_exact_stored_bytes(cache, monkeypatch):
    import fitcheck.model.resolve as resolve

    hub_cache(cache, LLAMA, "unsloth--Llama-3.2-1B-Instruct")
    monkeypatch.setattr("fitcheck.model.hub.spec_from_hub", lambda *a, **k: pytest.fail("network"))
    r = resolve_model(LLAMA)
    assert r.source == "hf-cache" and r.hf_id == LLAMA and r.spec.name == LLAMA
    assert r.spec.stored_weight_bytes == 2_471_628_800          # the header's bytes (fixture README)
    assert "refs/main" in r.note and COMMIT[:8] in r.note and str(cache) in r.note
    assert resolve is not None


def test_config_only_snapshot_is_enough(cache):
    hub_cache(cache, LLAMA, "unsloth--Llama-3.2-1B-Instruct", weights=False)
    r = resolve_model(LLAMA)
    assert r.source == "hf-cache" and r.spec.stored_weight_bytes is None and r.spec.num_layers == 16


def test_revision_picks_the_ref_or_commit(cache):
    other = "a" * 40
    hub_cache(cache, LLAMA, "unsloth--Llama-3.2-1B-Instruct")
    hub_cache(cache, LLAMA, "unsloth--Llama-3.2-1B-Instruct", commit=other, ref="v2", weights=False)
    assert resolve_model(LLAMA).spec.stored_weight_bytes == 2_471_628_800
    assert other[:8] in resolve_model(LLAMA, revision="v2").note
    assert other[:8] in resolve_model(LLAMA, revision=other).note
    with pytest.raises(FitcheckError) as err:   # not cached, no hub extra: one clear error, naming what is cached
        resolve_model(LLAMA, revision="nope")
    assert "in the local cache, but not at revision 'nope'" in err.value.message
    assert "main" in err.value.message and "v2" in err.value.message and COMMIT[:12] in err.value.message
    assert "huggingface_hub" not in err.value.one_line()


def test_a_models_folder_path_and_a_snapshot_path_are_named_by_repo_id(cache):
    folder = hub_cache(cache, LLAMA, "unsloth--Llama-3.2-1B-Instruct")
    for path in (folder, folder / "snapshots" / COMMIT):
        r = resolve_model(str(path))
        assert r.hf_id == LLAMA and r.spec.name == LLAMA and r.source == "hf-cache"


def test_catalog_ids_stay_catalog_unless_a_revision_is_asked(cache):
    hub_cache(cache, "Qwen/Qwen2.5-7B-Instruct", "unsloth--Llama-3.2-1B-Instruct")
    assert resolve_model("Qwen/Qwen2.5-7B-Instruct").source == "catalog"   # printed commands reproduce
    cached = resolve_model("Qwen/Qwen2.5-7B-Instruct", revision="main")
    assert cached.source == "hf-cache" and cached.entry is not None and cached.spec.family == "qwen"


def test_check_cli_takes_revision(cache):
    from click.testing import CliRunner

    from fitcheck.cli import cli

    hub_cache(cache, LLAMA, "unsloth--Llama-3.2-1B-Instruct")
    r = CliRunner().invoke(cli, ["check", LLAMA, "--revision", "main", "--profile", "rtx-4090", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["model"]["id"] == LLAMA


# ---- Ollama -----------------------------------------------------------------------------------------
@pytest.fixture
def no_store(tmp_path, monkeypatch):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "empty"))


@pytest.mark.parametrize("name, hf_id, precision", [
    ("llama3.1:8b", "meta-llama/Llama-3.1-8B-Instruct", "q4_k_m"),
    ("qwen2.5:7b-instruct-q8_0", "Qwen/Qwen2.5-7B-Instruct", "q8_0"),
    ("qwen2.5:7b-text-q4_K_M", "Qwen/Qwen2.5-7B", "q4_k_m"),
    ("llama3.1:latest", "meta-llama/Llama-3.1-8B-Instruct", "q4_k_m"),
    ("mistral:7b-instruct-q6_K", "mistralai/Mistral-7B-Instruct-v0.3", "q6_k"),
])
def test_ollama_names_resolve_to_the_catalog_at_the_tags_type(no_store, name, hf_id, precision):
    r = resolve_model(name)
    assert r.entry.hf_id == hf_id and r.source == "ollama" and r.hf_id == name
    result = check(r, Request(), load_profile("rtx-4090"))
    assert result.plan.precision == precision and result.plan.engine == "llama.cpp"
    assert "llama.cpp" in r.note and precision.upper() in r.note


def test_ollama_tag_parsing():
    n = ollama.parse_name("qwen2.5:72b-instruct-q4_K_M")
    assert (n.model, n.size, n.variant, n.quant) == ("qwen2.5", "72b", "instruct", "q4_k_m")
    assert ollama.parse_name("Qwen/Qwen2.5-7B") is None and ollama.parse_name("qwen-7b") is None
    assert ollama.precision_of(ollama.parse_name("llama3.1:8b")) == "q4_k_m"   # Ollama's default type
    with pytest.raises(FitcheckError, match="Q4_1"):
        ollama.precision_of(ollama.parse_name("llama3.1:8b-instruct-q4_1"))


def test_pulled_ollama_model_is_read_from_its_blob_header(tmp_path, monkeypatch):
    store, blob = ollama_store(tmp_path / "models", layers=3, hidden=512, ff=1024, heads=8, kv_heads=4)
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    r = resolve_model("llama3.1:8b")
    assert r.source == "ollama" and str(blob) in r.note
    assert r.spec.num_layers == 3 and r.spec.hidden_size == 512 and r.spec.stored_format == "q4_k_m"
    assert r.spec.stored_weight_bytes and r.entry.hf_id == "meta-llama/Llama-3.1-8B-Instruct"
    result = check(r, Request(), load_profile("rtx-4090"))
    assert result.plan.engine == "llama.cpp"
    assert result.estimate.devices[0].components  # estimated from the blob's exact bytes


def test_default_store_is_home_ollama(monkeypatch, tmp_path):
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ollama.store_dir() == tmp_path / ".ollama" / "models"


def test_unknown_ollama_name_is_one_line(no_store):
    with pytest.raises(FitcheckError, match="unknown Ollama model"):
        resolve_model("nosuchmodel:7b")


# ---- GGUF repositories ---------------------------------------------------------------------------
LISTING = json.loads((FIXTURES / "hub" / "Qwen--Qwen2.5-7B-Instruct-GGUF" / "files.json").read_text())


def test_gguf_repo_offline_is_the_base_model_at_that_type(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = resolve_model("Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M")
    assert r.entry.hf_id == "Qwen/Qwen2.5-7B-Instruct" and r.spec.stored_format == "q4_k_m"
    result = check(r, Request(), load_profile("rtx-4090"))
    assert result.plan.precision == "q4_k_m" and result.plan.engine == "llama.cpp"
    with pytest.raises(FitcheckError, match="unknown GGUF repository"):
        resolve_model("someone/Unknown-Model-GGUF:Q4_K_M")


def test_file_selection_from_the_listing():
    assert gguf_repo.files_for(LISTING, "Q4_K_M") == ["qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf",
                                                      "qwen2.5-7b-instruct-q4_k_m-00002-of-00002.gguf"]
    assert gguf_repo.files_for(LISTING, "q2_k") == ["qwen2.5-7b-instruct-q2_k.gguf"]
    assert gguf_repo.files_for(LISTING, "Q4_0")[0].startswith("qwen2.5-7b-instruct-q4_0-")
    assert gguf_repo.files_for(LISTING, "IQ4_XS") == []


class FakeRepo:
    """Serves the recorded listing; each file is a small generated GGUF header (range reads)."""

    def __init__(self):
        self.reads: list[tuple[str, int]] = []
        meta, tensors = gguf_llama(layers=4, hidden=512, ff=1024, heads=8, kv_heads=4, arch="qwen2", qkv_bias=True)
        half = len(tensors) // 2
        names = list(tensors)
        self.files = {}
        for i, part in enumerate((names[:half], names[half:])):
            m = dict(meta) if i == 0 else {"general.architecture": "qwen2"}
            self.files[f"qwen2.5-7b-instruct-q4_k_m-0000{i + 1}-of-00002.gguf"] = gguf_bytes(
                m, {n: tensors[n] for n in part}, with_data=True)

    def list_files(self, repo, revision):
        return LISTING

    def size(self, repo, path, revision):
        return len(self.files[path])

    def read(self, repo, path, revision, length):
        self.reads.append((path, length))
        return self.files[path][:length]


def test_remote_header_by_range_reads_through_a_fake_client():
    fake = FakeRepo()
    spec = gguf_repo.spec_from_repo(gguf_repo.parse_name("Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M"), fake)
    assert spec.num_layers == 4 and spec.hidden_size == 512
    assert spec.stored_weight_bytes and spec.stored_format == "q4_k_m"
    assert [p for p, _ in fake.reads] == list(fake.files)      # both shards, headers only
    assert all(n <= gguf_repo.HEADER_READS[0] for _, n in fake.reads)


def test_resolve_uses_the_remote_header_when_the_hub_is_there(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(gguf_repo, "HfFileSystemClient", FakeRepo)
    r = resolve_model("Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M")
    assert r.source == "hub" and r.spec.num_layers == 4 and r.entry.hf_id == "Qwen/Qwen2.5-7B-Instruct"

    class Broken(FakeRepo):
        def list_files(self, repo, revision):
            raise ConnectionError("no network")

    monkeypatch.setattr(gguf_repo, "HfFileSystemClient", Broken)
    r = resolve_model("Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M")
    assert r.source == "catalog" and "ConnectionError" in r.note and r.spec.num_layers == 28


def test_a_hub_that_does_not_answer_is_given_the_config_lookups_deadline(monkeypatch):
    # without HF_HUB_OFFLINE and without a network, huggingface_hub retries for about 23 s: the GGUF
    # repository's listing gets the deadline config.json's lookup has, then the catalog's answer
    import threading

    from fitcheck.model import hub

    release = threading.Event()

    class Hanging(FakeRepo):
        def list_files(self, repo, revision):
            release.wait(5)
            return super().list_files(repo, revision)

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "HUB_DEADLINE_S", 0.2)
    monkeypatch.setattr(gguf_repo, "HfFileSystemClient", Hanging)
    try:
        r = resolve_model("Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M")
        assert r.source == "catalog" and "no answer from the Hub within 0.2 s" in r.note
        # a repository the catalog does not know: one line, exit 2's error
        with pytest.raises(FitcheckError, match="no answer from the Hugging Face Hub within 0.2 s"):
            resolve_model("someone/Unknown-Model-GGUF:Q4_K_M")
    finally:
        release.set()


def test_no_hub_extra_falls_back_offline(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def missing():
        raise ImportError("no huggingface_hub")

    monkeypatch.setattr(gguf_repo, "HfFileSystemClient", missing)
    r = resolve_model("Qwen/Qwen2.5-7B-Instruct-GGUF:Q8_0")
    assert r.spec.stored_format == "q8_0" and "hub extra" in r.note
    assert Path(__file__).exists()


# ---- models --local ------------------------------------------------------------------------------
def test_models_local_lists_every_store_with_what_fits(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from fitcheck.cli import cli
    from tests.model.filegen import write_gguf

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    hub_cache(tmp_path / "hub", LLAMA, "unsloth--Llama-3.2-1B-Instruct")
    store, _ = ollama_store(tmp_path / "ollama")
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    lms = home / ".lmstudio" / "models" / "lmstudio-community" / "Tiny-GGUF"
    lms.mkdir(parents=True)
    write_gguf(lms / "Tiny-Q4_K_M.gguf", *gguf_llama())
    write_gguf(lms / "mmproj-Tiny-F16.gguf", *gguf_llama())        # a vision projector: not a model
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "llamacpp"))
    (tmp_path / "llamacpp").mkdir()
    write_gguf(tmp_path / "llamacpp" / "org_Tiny-GGUF_tiny-q8_0.gguf", *gguf_llama(wtype="Q8_0", file_type=7))
    (tmp_path / "llamacpp" / "broken.gguf").write_bytes(b"GGUF" + b"\0" * 40)

    r = CliRunner().invoke(cli, ["models", "--local", "--profile", "rtx-4090", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    rows = doc["models"] + doc["not_fitting"]
    assert {row["source"] for row in rows} == {"hf-cache", "ollama", "lm-studio", "llama.cpp"}
    assert {row["id"] for row in rows if row["source"] in ("hf-cache", "ollama")} == {LLAMA, "llama3.1:8b"}
    assert not any("mmproj" in row["id"] for row in rows)
    assert [u["source"] for u in doc["unreadable"]] == ["llama.cpp"]
    for row in doc["models"]:
        again = CliRunner().invoke(cli, [*__import__("shlex").split(row["fitcheck_command"])[1:], "--json"])
        assert again.exit_code == 0 and json.loads(again.output)["verdict"]["status"] == row["status"]
    text = CliRunner().invoke(cli, ["models", "--local", "--profile", "rtx-4090"]).output
    assert "(ollama)" in text and "Not read: " in text


def test_models_local_says_where_it_looked(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from fitcheck.cli import cli

    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("HF_HUB_CACHE", "HF_HOME", "OLLAMA_MODELS", "LLAMA_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    r = CliRunner().invoke(cli, ["models", "--local", "--profile", "rtx-4090"])
    assert r.exit_code == 0 and "No local models found in: " in r.output and ".ollama" in r.output


def test_engine_commands_of_an_ollama_name_load_the_base_repository(no_store):
    from click.testing import CliRunner

    from fitcheck.cli import cli

    r = CliRunner().invoke(cli, ["qwen2.5:7b-instruct-fp16", "--profile", "rtx-3060", "--json"])
    doc = json.loads(r.output)
    commands = [a["engine_command"] for a in doc["alternatives"]]
    assert commands and not any("qwen2.5:7b" in c for c in commands)
    assert all(a["fitcheck_command"].startswith("fitcheck qwen2.5:7b-instruct-fp16 ") for a in doc["alternatives"])
    assert any("Qwen/Qwen2.5-7B-Instruct" in c for c in commands)


def test_ollama_hub_pull_names_are_gguf_repos(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert gguf_repo.parse_name("hf.co/Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M").repo == "Qwen/Qwen2.5-7B-Instruct-GGUF"
    r = resolve_model("hf.co/Qwen/Qwen2.5-7B-Instruct-GGUF:Q6_K")
    assert r.entry.hf_id == "Qwen/Qwen2.5-7B-Instruct" and r.spec.stored_format == "q6_k"
