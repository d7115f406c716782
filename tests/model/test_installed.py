"""Installed engines: versions from package metadata only, the default --transformers-version for
this machine, named in the assumptions; a --profile is another machine and ignores them."""

from __future__ import annotations

import json

from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.model import installed


def fake_versions(monkeypatch, versions):
    monkeypatch.setattr(installed, "_version", lambda dist: versions.get(dist))


def run_json(*args):
    r = CliRunner().invoke(cli, [*args, "--json"])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.output)


def assumptions(doc):
    return {a["name"]: a for a in doc["estimate"]["assumptions"]}


def test_versions_come_from_metadata_without_importing(monkeypatch):
    import sys

    from fitcheck.context import read_context

    fake_versions(monkeypatch, {"transformers": "4.38.2", "llama-cpp-python": "0.3.2"})
    ctx = read_context(True)
    assert dict(ctx.versions) == {"transformers": "4.38.2", "llama.cpp": "0.3.2"}
    assert "vllm" not in sys.modules and ctx.installed_transformers == "4.38.2"


def test_installed_transformers_is_the_default_here_and_said_so(monkeypatch):
    fake_versions(monkeypatch, {"transformers": "4.38.2"})
    doc = run_json("qwen-0.5b", "--device", "cpu", "--engine", "transformers", "-p", "fp32")
    a = assumptions(doc)
    assert a["logits"]["value"] == "all-fp32" and "transformers 4.38.2 installed here" in a["logits"]["why"]
    typed = run_json("qwen-0.5b", "--device", "cpu", "--engine", "transformers", "-p", "fp32",
                     "--transformers-version", "4.46")
    assert assumptions(typed)["logits"]["value"] == "last"
    other = run_json("qwen-0.5b", "--engine", "transformers", "--profile", "rtx-4090")
    assert "installed" not in assumptions(other)["logits"]["why"]


def test_engine_version_is_named(monkeypatch):
    fake_versions(monkeypatch, {"llama-cpp-python": "0.3.2"})
    doc = run_json("qwen-0.5b", "--device", "cpu")
    a = assumptions(doc)
    assert a["engine_version"]["value"] == "llama-cpp-python 0.3.2"
