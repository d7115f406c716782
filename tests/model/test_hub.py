"""spec_from_hub with a fake transport over recorded fixtures, and the error translation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fitcheck.errors import EXIT_BAD_INPUT, FitcheckError
from fitcheck.model import hub

FIXTURES = Path(__file__).parent.parent / "fixtures" / "hub"
LLAMA = "unsloth/Llama-3.2-1B-Instruct"
TINY_GPTQ = "TheBloke/TinyLlama-1.1B-Chat-v1.0-GPTQ"


class FakeClient:
    """Serves fixtures/hub/<owner--name>/, or raises the exceptions it was given."""

    def __init__(self, config_error=None, metadata_error=None):
        self.config_error = config_error
        self.metadata_error = metadata_error
        self.calls: list[str] = []

    def _dir(self, repo_id):
        return FIXTURES / repo_id.replace("/", "--")

    def config(self, repo_id, revision):
        self.calls.append("config")
        if self.config_error:
            raise self.config_error
        return json.loads((self._dir(repo_id) / "config.json").read_text())

    def safetensors_headers(self, repo_id, revision):
        self.calls.append("metadata")
        if self.metadata_error:
            raise self.metadata_error
        return json.loads((self._dir(repo_id) / "safetensors-metadata.json").read_text())


@pytest.fixture(autouse=True)
def online(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)


def test_llama_from_recorded_fixture():
    spec = hub.spec_from_hub(LLAMA, client=FakeClient())
    assert spec.name == LLAMA and spec.architecture == "llama" and spec.tie_word_embeddings
    assert (spec.num_layers, spec.hidden_size, spec.num_kv_heads, spec.vocab_size) == (16, 2048, 8, 128256)
    assert spec.total_params == 1_235_814_400               # Meta's "1.24B"
    assert spec.stored_weight_bytes == 2 * 1_235_814_400    # bf16, exact from the header
    assert spec.stored_format is None and spec.stored_dtype == "bfloat16"
    assert ("stored_weight_bytes", "Hugging Face Hub safetensors metadata (exact)") in spec.sources


def test_gptq_repo_counts_as_stored():
    spec = hub.spec_from_hub(TINY_GPTQ, client=FakeClient())
    assert spec.stored_format == "gptq-int4"
    assert spec.stored_dtype == "float16"  # the header's fp16 wins over config torch_dtype bfloat16
    assert spec.stored_weight_bytes == 767_270_912
    # 4-bit linears + fp16 embeddings and lm_head: 0.70 of 2 bytes/param, not 2.
    assert spec.stored_weight_bytes < 0.4 * spec.total_params * 2


def test_offline_reads_cached_config_only(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    client = FakeClient()
    spec = hub.spec_from_hub(LLAMA, client=client)
    assert client.calls == ["config"] and spec.stored_weight_bytes is None
    assert any("HF_HUB_OFFLINE" in where for _, where in spec.sources)


# Stand-ins named like huggingface_hub's exceptions (the translation goes by class name).
class HfHubHTTPError(OSError):
    def __init__(self, message="", status=None):
        super().__init__(message)
        self.response = type("Response", (), {"status_code": status})() if status else None


class RepositoryNotFoundError(HfHubHTTPError):
    pass


class GatedRepoError(RepositoryNotFoundError):
    pass


class EntryNotFoundError(Exception):
    pass


class LocalEntryNotFoundError(FileNotFoundError, EntryNotFoundError):
    pass


class ReadTimeout(Exception):
    pass


class ConnectError(Exception):
    pass


class NotASafetensorsRepoError(Exception):
    pass


@pytest.mark.parametrize("exc, offline, expected", [
    (GatedRepoError("x", 403), False, "accept the licence on https://huggingface.co/o/m and set HF_TOKEN"),
    (HfHubHTTPError("x", 401), False, "set HF_TOKEN"),
    (RepositoryNotFoundError("x", 404), False, "try `fitcheck models QUERY`"),
    (RepositoryNotFoundError("x", 401), False, "set HF_TOKEN"),
    (HfHubHTTPError("x", 404), False, "check the id"),
    (LocalEntryNotFoundError("x"), True, "HF_HUB_OFFLINE is set"),
    (LocalEntryNotFoundError("x"), False, "cannot reach the Hugging Face Hub"),
    (EntryNotFoundError("x"), False, "has no config.json"),
    (ReadTimeout("x"), False, "timed out"),
    (ConnectError("x"), False, "cannot reach"),
    (HfHubHTTPError("x", 500), False, "failed: HfHubHTTPError"),
    (ValueError("weird\nmultiline"), False, "failed: ValueError: weird multiline"),
])
def test_every_failure_is_one_line_exit_2(monkeypatch, exc, offline, expected):
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FitcheckError) as info:
        hub.spec_from_hub("o/m", client=FakeClient(config_error=exc))
    line = info.value.one_line()
    assert expected in line and "\n" not in line
    assert info.value.exit_code == EXIT_BAD_INPUT


def test_metadata_failures_after_config_leave_a_note():
    for exc in (NotASafetensorsRepoError("x"), ConnectError("x"), ReadTimeout("x")):
        spec = hub.spec_from_hub(LLAMA, client=FakeClient(metadata_error=exc))
        assert spec.stored_weight_bytes is None and spec.num_layers == 16
        assert any(type(exc).__name__ in where for _, where in spec.sources)
    with pytest.raises(FitcheckError, match="denied"):
        hub.spec_from_hub(LLAMA, client=FakeClient(metadata_error=HfHubHTTPError("x", 403)))


def test_bad_header_from_the_hub_is_refused():
    class Hostile(FakeClient):
        def safetensors_headers(self, repo_id, revision):
            return {"model.safetensors": {"w": {"dtype": "F16", "shape": [-1], "data_offsets": [0, 0]}}}

    with pytest.raises(FitcheckError, match="not a valid safetensors"):
        hub.spec_from_hub(LLAMA, client=Hostile())


@pytest.mark.parametrize("repo_id", ["", "a/b/c", "../etc", "owner/" + "x" * 200, "with space/x"])
def test_bad_repo_ids(repo_id):
    with pytest.raises(FitcheckError, match="not a Hugging Face model id"):
        hub.spec_from_hub(repo_id, client=FakeClient())


def test_without_huggingface_hub_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import now raises ImportError
    with pytest.raises(FitcheckError) as info:
        hub.spec_from_hub(LLAMA)
    assert "pip install 'fitcheck[hub]'" in info.value.one_line()


def test_real_client_adapts_huggingface_hub_objects(monkeypatch, tmp_path):
    """The adapter against the real package's types, with its network calls replaced."""
    hf = pytest.importorskip("huggingface_hub")
    from huggingface_hub.utils import SafetensorsFileMetadata, SafetensorsRepoMetadata, TensorInfo

    config_path = tmp_path / "config.json"
    config_path.write_text((FIXTURES / LLAMA.replace("/", "--") / "config.json").read_text())
    recorded = json.loads((FIXTURES / LLAMA.replace("/", "--") / "safetensors-metadata.json").read_text())
    files = {}
    for fname, doc in recorded.items():
        tensors = {n: TensorInfo(dtype=v["dtype"], shape=v["shape"], data_offsets=tuple(v["data_offsets"]))
                   for n, v in doc.items() if n != "__metadata__"}
        files[fname] = SafetensorsFileMetadata(metadata=doc.get("__metadata__", {}), tensors=tensors)
    repo_meta = SafetensorsRepoMetadata(metadata=None, sharded=False,
                                        weight_map={n: "model.safetensors" for n in recorded["model.safetensors"]},
                                        files_metadata=files)
    seen = {}
    calls = []
    generation_path = tmp_path / "generation_config.json"
    generation_path.write_text(json.dumps({"do_sample": True, "top_p": 0.9}))

    def fake_download(repo_id, filename, **kw):
        calls.append(filename)
        if filename == "generation_config.json":
            return str(generation_path)
        seen["download"] = (repo_id, filename, kw.get("revision"))
        return str(config_path)

    def fake_metadata(repo_id, **kw):
        calls.append("safetensors metadata")
        seen["metadata"] = (repo_id, kw.get("revision"))
        return repo_meta

    monkeypatch.setattr(hf, "hf_hub_download", fake_download)
    monkeypatch.setattr(hf, "get_safetensors_metadata", fake_metadata)
    monkeypatch.setattr(hf, "get_hf_file_metadata", lambda url, **kw: seen.setdefault("head", url))
    spec = hub.spec_from_hub(LLAMA, revision="main")
    assert seen.pop("head").endswith("/config.json")  # one HEAD first, without the library's retries
    assert seen == {"download": (LLAMA, "config.json", "main"), "metadata": (LLAMA, "main")}
    assert spec.stored_weight_bytes == 2 * spec.total_params == 2_471_628_800
    # the weights' metadata before generation_config.json, which gets what is left of the deadline
    assert calls == ["config.json", "safetensors metadata", "generation_config.json"]
    assert spec.generation is not None and spec.generation.top_p == 0.9


def test_real_exception_classes_translate():
    pytest.importorskip("huggingface_hub")
    from huggingface_hub import errors

    err = hub.explain_hub_error(errors.LocalEntryNotFoundError("not cached"), LLAMA, offline=True)
    assert "HF_HUB_OFFLINE" in err.message
    err = hub.explain_hub_error(errors.OfflineModeIsEnabled("offline"), LLAMA, offline=True)
    assert "HF_HUB_OFFLINE" in err.message
    assert hub.explain_hub_error(errors.NotASafetensorsRepoError("x"), LLAMA).message.startswith(
        "Hugging Face Hub request")
