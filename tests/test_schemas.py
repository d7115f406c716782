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
    "probe, this machine": ["probe", "--json"],
    "probe, a profile": ["probe", "--profile", "macbook-pro-m3-max-64gb", "--json"],
    "profiles": ["profiles", "--json"],
    "models": ["models", "qwen", "--json"],
    "models --show": ["models", "--show", "deepseek-ai/DeepSeek-V2-Lite", "--json"],
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


def test_the_schemas_ship_in_the_wheel():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"fitcheck.schemas" = "schemas"' in text and '"fitcheck.schemas" = ["*.json"]' in text
