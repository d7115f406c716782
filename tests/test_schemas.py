"""Every document fitcheck prints validates against its published JSON Schema (schemas/), and the
schemas themselves are valid, complete and shipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck import __version__
from fitcheck.cli import cli
from fitcheck.contracts import DOCUMENTS, all_schemas, load_schema

jsonschema = pytest.importorskip("jsonschema")
referencing = pytest.importorskip("referencing")

ROOT = Path(__file__).resolve().parents[1]
PLAN = """
[[case]]
name = "chat"
model = "qwen-7b"
profile = "rtx-4090"
[[case]]
model = "llama-3.1-70b"
profile = "github-gpu-t4"
"""


def _registry():
    resources = [(s["$id"], referencing.Resource.from_contents(s)) for s in all_schemas().values()]
    return referencing.Registry().with_resources(resources)


REGISTRY = _registry()


def validate(doc: dict) -> None:
    schema = load_schema(doc["schema"])
    jsonschema.Draft202012Validator(schema, registry=REGISTRY).validate(doc)


def document(*args: str) -> dict:
    r = CliRunner().invoke(cli, list(args), prog_name="fitcheck")
    assert r.exit_code in (0, 1, 3), r.output
    return json.loads(r.stdout)


COMMANDS = {
    "check, inference on a GPU": ["qwen-7b", "--profile", "rtx-3060", "--context", "16384", "--json"],
    "check, with requirements": ["qwen-7b", "--profile", "h100-sxm", "--require", "gpus>=2", "--require",
                                 "cuda>=12.1", "--require", "vram>=40GiB", "--json"],
    "check, CPU": ["mistral-7b", "--profile", "laptop-16gb", "--json"],
    "check, offload": ["llama-3.1-70b", "--profile", "rtx-4090", "--precision", "q4_k_m", "--gpu-layers", "40",
                       "--json"],
    "check, vLLM": ["qwen-7b", "--profile", "a100-80gb", "--engine", "vllm", "--json"],
    "check, qlora": ["qwen-7b", "--mode", "qlora", "--profile", "rtx-4090", "--json"],
    "check, full fine-tuning with ZeRO-3": ["qwen-7b", "--mode", "full", "--profile", "8x-h100", "--gpus", "8",
                                           "--zero", "3", "--json"],
    "check, a generic model": ["some-unknown-model", "--params", "7b", "--profile", "rtx-4090", "--json"],
    "requirements": ["check", "--profile", "github-gpu-t4", "--require", "gpus>=1", "--require", "cc>=8.0", "--json"],
    "where": ["where", "qwen-7b", "--json"],
    "where, a mixture of experts (--n-cpu-moe rows)": ["where", "qwen3-30b-a3b", "--kind", "laptop", "--json"],
    "probe, this machine": ["probe", "--json"],
    "probe, a profile": ["probe", "--profile", "macbook-pro-m3-max-64gb", "--json"],
    "profiles": ["profiles", "--json"],
    "models": ["models", "qwen", "--json"],
    "models --show": ["models", "--show", "deepseek-ai/DeepSeek-V2-Lite", "--json"],
    "models --fits, inference": ["models", "--fits", "--profile", "rtx-4090", "--json"],
    "models --fits, --sort speed --min-speed --top": ["models", "--fits", "--profile", "rtx-4060-laptop", "--sort",
                                                      "speed", "--min-speed", "12.5", "--top", "5", "--json"],
    "models --fits, training": ["models", "--fits", "--mode", "qlora", "--profile", "rtx-4090", "--family", "llama",
                                "--json"],
    "where, training with --tokens": ["where", "qwen-7b", "--mode", "qlora", "--tokens", "100M", "--json"],
    "where, training without --tokens": ["where", "qwen-7b", "--mode", "lora", "--kind", "cloud", "--json"],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_document_validates_against_its_schema(name):
    doc = document(*COMMANDS[name])
    assert doc["fitcheck_version"] == __version__
    validate(doc)


def test_plan_document_validates(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    doc = document("check", "--plan", str(plan), "--require", "gpus>=1", "--json")
    assert doc["schema"] == "fitcheck.plan/1"
    validate(doc)


@pytest.fixture
def local_stores(tmp_path, monkeypatch):
    """Every store `models --local` reads, under tmp_path (empty until a test fills one)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in ("XDG_CACHE_HOME", "HF_HOME", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    stores = {"HF_HUB_CACHE": tmp_path / "hub", "OLLAMA_MODELS": tmp_path / "ollama",
              "LLAMA_CACHE": tmp_path / "llamacpp"}
    for var, folder in stores.items():
        folder.mkdir()
        monkeypatch.setenv(var, str(folder))
    return stores


def test_models_local_validates_empty_and_with_models(local_stores):
    from tests.model.layouts import hub_cache

    empty = document("models", "--local", "--profile", "rtx-4090", "--json")
    assert empty["schema"] == "fitcheck.fits/1" and empty["models"] == empty["unreadable"] == []
    validate(empty)
    hub_cache(local_stores["HF_HUB_CACHE"], "unsloth/Llama-3.2-1B-Instruct", "unsloth--Llama-3.2-1B-Instruct")
    (local_stores["LLAMA_CACHE"] / "broken.gguf").write_bytes(b"GGUF" + b"\0" * 40)
    doc = document("models", "--local", "--profile", "rtx-4090", "--json")
    assert [(r["id"], r["source"]) for r in doc["models"]] == [("unsloth/Llama-3.2-1B-Instruct", "hf-cache")]
    assert [u["source"] for u in doc["unreadable"]] == ["llama.cpp"]
    validate(doc)
    for broken in ({**doc, "models": [{**doc["models"][0], "source": "somewhere"}]},
                   {**doc, "models": [{**doc["models"][0], "status": "does_not_fit"}]},
                   {**doc, "unreadable": [{"name": "broken.gguf"}]}):
        with pytest.raises(jsonschema.ValidationError):
            validate(broken)


def test_fits_and_where_training_schemas_reject_what_the_commands_never_print():
    fits = document("models", "--fits", "--profile", "rtx-3060", "--family", "qwen", "--json")
    row = fits["models"][0]
    training = document("where", "qwen-7b", "--mode", "qlora", "--tokens", "1M", "--json")
    machine = training["machines"][0]
    for broken in ({**fits, "models": [{**row, "rank": 1}]},                       # row keys are locked
                   {**fits, "models": [{**row, "fitcheck_command": None}]},         # a fitting row has its command
                   {**fits, "models": [{**row, "score": None}]},                    # ... and its score
                   {**fits, "models": [{**row, "score": {**row["score"], "total": 101}}]},   # 0-100
                   {**fits, "ranking": {**fits["ranking"], "sort": "name"}},        # the sorts --sort takes
                   {k: v for k, v in fits.items() if k != "ranking"},
                   {**fits, "request": {**fits["request"], "seq_len": 2048}},       # inference has no seq_len
                   {k: v for k, v in fits.items() if k != "fitcheck_version"}):
        with pytest.raises(jsonschema.ValidationError):
            validate(broken)
    for broken in ({**training, "request": {**training["request"], "context": 4096}},
                   {**training, "machines": [{**machine, "status": "does_not_fit"}]},  # listed: fits or tight
                   {**training, "machines": [{**machine, "run": {**machine["run"], "hours": None}}]},
                   {k: v for k, v in training.items() if k != "cheapest"}):
        with pytest.raises(jsonschema.ValidationError):
            validate(broken)


def test_a_cannot_run_verdict_validates(tmp_path, monkeypatch):
    """`cannot_run` (the installed stack cannot run the request on this machine) is a verdict status."""
    from tests.estimate.test_compat import machine, make_env

    env = make_env(tmp_path / "venv", ("torch", "2.5.1+cu124", ()))
    monkeypatch.setattr("fitcheck.probe.probe", lambda **kw: machine(driver="470.82.01", cuda="11.4"))
    r = CliRunner().invoke(cli, ["qwen-0.5b", "--json"], env={"VIRTUAL_ENV": str(env)})
    doc = json.loads(r.stdout)
    assert doc["verdict"]["status"] == "cannot_run"
    validate(doc)


def test_an_output_file_validates_and_a_broken_document_does_not(tmp_path):
    out = tmp_path / "o.json"
    CliRunner().invoke(cli, ["qwen-7b", "--profile", "rtx-4090", "--require", "gpus>=2", "--output", str(out)])
    doc = json.loads(out.read_text())
    validate(doc)
    for broken in ({k: v for k, v in doc.items() if k != "verdict"},
                   {**doc, "exit_code": "1"},
                   {**doc, "verdict": {**doc["verdict"], "status": "maybe"}},
                   {**doc, "requirements": [{**doc["requirements"][0], "measured_value": 1}]}):
        with pytest.raises(jsonschema.ValidationError):
            validate(broken)


def test_every_schema_is_valid_named_and_listed():
    schemas = all_schemas()
    on_disk = {p.name[: -len(".schema.json")] for p in (ROOT / "schemas").glob("*.schema.json")}
    assert set(schemas) == on_disk == set(DOCUMENTS.values())
    for stem, schema in schemas.items():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$id"] == f"urn:fitcheck:schema:{stem}"
    for document_name, stem in DOCUMENTS.items():
        assert schemas[stem]["properties"]["schema"]["const"] == document_name
        if stem != "machine":  # the machine is a part of probe and profiles, not a document of its own
            assert "fitcheck_version" in schemas[stem]["required"]


def test_every_document_name_in_the_code_has_a_published_schema():
    """A new document ("schema": "fitcheck.NAME/N") gets its schema file and a DOCUMENTS entry."""
    import re

    named = {m for p in (ROOT / "fitcheck").rglob("*.py")
             for m in re.findall(r'"(fitcheck\.[a-z][a-z-]*/\d+)"', p.read_text(encoding="utf-8"))}
    assert {"fitcheck.fits/1", "fitcheck.where-training/1"} <= named
    assert named <= set(DOCUMENTS), sorted(named - set(DOCUMENTS))


def test_the_schemas_ship_in_the_wheel():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"fitcheck.schemas" = "schemas"' in text and '"fitcheck.schemas" = ["*.json"]' in text


# ---- fitcheck measure: one real run on the tiny fixture model (skipped without torch) --------------
TINY = str(ROOT / "tests" / "fixtures" / "measure" / "tiny-llama")
MEASURE_KEYS = {"check_schema", "status", "reason", "run", "versions", "measured", "comparison", "measured_verdict"}
RECEIPT_KEYS = {"schema", "fitcheck_version", "date", "model", "request", "run", "status", "machine",
                "machine_fingerprint", "device", "device_name", "versions", "measured", "estimated", "error_pct",
                "reason"}


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One `fitcheck measure` of the tiny model (a fresh measuring process, a few seconds), then the
    receipts it wrote as `--receipts --json` and `--export` give them, the cache under tmp_path."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    cache = tmp_path_factory.mktemp("fitcheck-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FITCHECK_CACHE_DIR", str(cache))   # fitcheck.measure.receipts.receipts_path
        mp.setenv("OMP_NUM_THREADS", "2")
        doc = document("measure", TINY, "-p", "fp32", "--context", "64", "--new-tokens", "4", "--json")
        export = cache / "export.jsonl"
        listing = document("measure", "--receipts", "--export", str(export), "--json")
    return doc, listing, [json.loads(line) for line in export.read_text().splitlines()]


def test_measure_document_validates_and_rejects_what_measure_never_prints(measured):
    from tests.cli.test_check_cmd import TOP_KEYS

    doc = measured[0]
    assert doc["schema"] == "fitcheck.measure/1" and doc["status"] == "measured"
    assert doc["fitcheck_version"] == __version__ and set(doc) == TOP_KEYS | MEASURE_KEYS
    validate(doc)
    cmp, m, run = doc["comparison"][0], doc["measured"], doc["run"]
    for broken in ({**doc, "exit_code": 1},                                              # measured is exit 0
                   {**doc, "measured_verdict": {**doc["measured_verdict"], "status": "does_not_fit"}},
                   {**doc, "status": "refused"},                                         # a refused run has no figures
                   {**doc, "check_schema": "fitcheck.check/2"},
                   {**doc, "verdict": {**doc["verdict"], "status": "maybe"}},            # the embedded check, by $ref
                   {**doc, "estimate": {**doc["estimate"], "total_bytes": -1}},
                   {**doc, "run": {**run, "seq_len": 64}},                               # inference has no seq_len
                   {**doc, "run": {**run, "wall_s": None}},                              # it ran
                   {**doc, "comparison": [{**cmp, "name": "everything"}]},
                   {**doc, "comparison": [{**cmp, "estimated_bytes": 1.5}]},
                   {**doc, "measured": {**m, "peak_allocated_bytes": 1}},                # a CUDA figure on the CPU
                   {**doc, "measured": {k: v for k, v in m.items() if k != "phases"}},
                   {**doc, "measured": {**m, "phases": [{**m["phases"][0], "phase": "warmup"}]}},
                   {**doc, "versions": {**doc["versions"], "numpy": "2.0"}},
                   {k: v for k, v in doc.items() if k != "speed"},
                   {k: v for k, v in doc.items() if k != "fitcheck_version"}):
        with pytest.raises(jsonschema.ValidationError):
            validate(broken)


def test_a_refused_measure_document_validates():
    """Refused (the estimate needs far more than the machine has): not run, no figures, no receipt."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    r = CliRunner().invoke(cli, ["measure", TINY, "-p", "fp32", "--context", "64", "--batch", "100000", "--json",
                                 "--no-receipt"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and doc["status"] == "refused" and doc["measured"] == {} and doc["run"]["wall_s"] is None
    validate(doc)
    with pytest.raises(jsonschema.ValidationError):
        validate({**doc, "exit_code": 3})


def test_receipts_validate_and_reject_what_measure_never_writes(measured):
    doc, listing, exported = measured
    assert listing["schema"] == "fitcheck.receipts/1" and listing["fitcheck_version"] == __version__
    assert set(listing) == {"schema", "fitcheck_version", "path", "receipts"}
    (receipt,) = listing["receipts"]
    assert exported == [receipt] and set(receipt) == RECEIPT_KEYS
    assert receipt["measured"]["peak_bytes"] == doc["measured"]["peak_bytes"] and receipt["run"] == doc["run"]
    validate(listing)
    validate(receipt)
    for broken in ({**receipt, "machine_fingerprint": "not-a-hash"},
                   {**receipt, "status": "refused"},                                     # refused: never receipted
                   {**receipt, "error_pct": None},                                       # a measured one has its error
                   {**receipt, "measured": doc["measured"]},                             # phases: the document only
                   {**receipt, "request": {**receipt["request"], "mode": "pretraining"}},
                   {**receipt, "estimated": {**receipt["estimated"], "peak_bytes": "1 GiB"}},
                   {**receipt, "run": {**receipt["run"], "prompt_tokens": None}},
                   {k: v for k, v in receipt.items() if k != "fitcheck_version"}):
        with pytest.raises(jsonschema.ValidationError):
            validate(broken)
    for broken in ({**listing, "receipts": [{**receipt, "date": "yesterday"}]},
                   {**listing, "count": 1},
                   {k: v for k, v in listing.items() if k != "fitcheck_version"}):
        with pytest.raises(jsonschema.ValidationError):
            validate(broken)


def test_an_empty_receipts_listing_validates(tmp_path, monkeypatch):
    monkeypatch.setenv("FITCHECK_CACHE_DIR", str(tmp_path))
    listing = document("measure", "--receipts", "--json")
    assert listing["receipts"] == [] and listing["path"] == str(tmp_path / "receipts.jsonl")
    validate(listing)
