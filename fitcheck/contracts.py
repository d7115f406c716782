"""The published JSON Schemas of fitcheck's documents (``schemas/*.schema.json``, in the wheel as
``fitcheck.schemas``), found by a document's ``"schema"`` key.

    load_schema("check") -> dict          # schemas/check.schema.json
    schema_name("fitcheck.check/1") -> "check"
    all_schemas() -> {name: dict}          # every schema, to load into one validator registry

Validation itself is left to a JSON Schema library (the tests use ``jsonschema``); fitcheck does
not need one at run time.
"""

from __future__ import annotations

import json
from pathlib import Path

SCHEMAS_PACKAGE = "fitcheck.schemas"
_REPO_FOLDER = Path(__file__).resolve().parents[1] / "schemas"

# document "schema" value -> schema file stem.
DOCUMENTS: dict[str, str] = {
    "fitcheck.check/1": "check",
    "fitcheck.plan/1": "plan",
    "fitcheck.requirements/1": "requirements",
    "fitcheck.where/1": "where",
    "fitcheck.where-training/1": "where-training",
    "fitcheck.probe/1": "probe",
    "fitcheck.profiles/1": "profiles",
    "fitcheck.models/1": "models",
    "fitcheck.model/1": "model",
    "fitcheck.fits/1": "fits",
    "fitcheck.machine/1": "machine",
    "fitcheck.measure/1": "measure",
    "fitcheck.receipt/1": "receipt",
    "fitcheck.receipts/1": "receipts",
    "fitcheck.bandwidth/1": "bandwidth",
    "fitcheck.options/1": "options",
}


def _folder():
    from importlib import resources

    try:
        folder = resources.files(SCHEMAS_PACKAGE)
        if folder.is_dir():
            return folder
    except (ModuleNotFoundError, TypeError, FileNotFoundError):
        pass
    return _REPO_FOLDER


def schema_name(document_schema: str) -> str:
    """The schema file stem for a document's ``"schema"`` value; KeyError when fitcheck has none."""
    return DOCUMENTS[document_schema]


def load_schema(name: str) -> dict:
    """One schema by file stem ('check') or document name ('fitcheck.check/1')."""
    stem = DOCUMENTS.get(name, name)
    return json.loads(_folder().joinpath(f"{stem}.schema.json").read_text(encoding="utf-8"))


def all_schemas() -> dict[str, dict]:
    """Every shipped schema by file stem."""
    folder = _folder()
    return {entry.name[: -len(".schema.json")]: json.loads(entry.read_text(encoding="utf-8"))
            for entry in sorted(folder.iterdir(), key=lambda e: e.name) if entry.name.endswith(".schema.json")}


def document_json(doc: object, **options) -> str:
    """A document as strict JSON: NaN or Infinity in it is a bug (ValueError, exit 70), never an invalid document."""
    return json.dumps(doc, allow_nan=False, **options)
