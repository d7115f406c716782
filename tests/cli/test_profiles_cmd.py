"""`fitcheck profiles`: the table, --kind and --json."""

from __future__ import annotations

import json

from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.profiles import profile_names


def test_table_lists_every_shipped_profile():
    result = CliRunner().invoke(cli, ["profiles"])
    assert result.exit_code == 0, result.output
    for name in profile_names():
        assert name in result.output
    assert "2× RTX 3090 24 GiB" in result.output
    assert "8× H100 80GB HBM3 79.6 GiB" in result.output
    assert "$3.39/h" in result.output


def test_kind_filter():
    result = CliRunner().invoke(cli, ["profiles", "--kind", "ci"])
    assert result.exit_code == 0
    rows = [line.split()[0] for line in result.output.splitlines()[2:] if line.strip()]
    assert rows == ["github-gpu-t4", "github-ubuntu-latest"]


def test_bad_kind_is_exit_2():
    assert CliRunner().invoke(cli, ["profiles", "--kind", "mainframe"]).exit_code == 2


def test_json_document():
    result = CliRunner().invoke(cli, ["profiles", "--json", "--kind", "cloud"])
    doc = json.loads(result.stdout)
    assert doc["schema"] == "fitcheck.profiles/1"
    kinds = {p["kind"] for p in doc["profiles"]}
    assert kinds == {"cloud"}
    h100 = next(p for p in doc["profiles"] if p["name"] == "h100-sxm")
    assert h100["gpus"][0]["bf16_tflops"] == 989.0 and h100["price"]["usd_per_hour"] == 3.39
