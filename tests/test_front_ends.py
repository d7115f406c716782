"""One request, one answer: `fitcheck MODEL`, a plan file's case, `where`, `models --fits` and interactive mode give
the same estimate for the same request on the same machine, on a profile and on this machine (whose installed
transformers release is the default --transformers-version, read once at the edge: fitcheck.context).
"""

from __future__ import annotations

import json
import shlex

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcheck.cli import cli

RUNNER = CliRunner()
MODELS = ("qwen-7b", "llama-3.1-8b", "qwen2.5-0.5b", "mixtral-8x7b", "gemma-3-4b")
PROFILES = ("rtx-4090", "laptop-16gb", "a100-80gb", "macbook-pro-m3-max-64gb", "t4")


def invoke(*args: str, input: str | None = None):
    r = RUNNER.invoke(cli, list(args), input=input)
    assert r.exit_code in (0, 1), (args, r.output)
    return r


def plan_case(tmp_path, model: str, fields: dict[str, object], profile: str | None) -> dict:
    """The check document of a one-case plan file."""
    lines = ["[[case]]", f"model = {json.dumps(model)}"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in fields.items()]
    if profile:
        lines.append(f"profile = {json.dumps(profile)}")
    path = tmp_path / "plan.toml"
    path.write_text("\n".join(lines) + "\n")
    doc = json.loads(invoke("check", "--plan", str(path), "--json").stdout)
    return doc["cases"][0]["check"]


def flags(fields: dict[str, object]) -> list[str]:
    return [a for k, v in fields.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def same_answer(a: dict, b: dict, probed: bool = False) -> None:
    """The same answer; ``probed`` (this machine, probed once for each): its free memory moves between probes."""
    for key in ("estimate", "request") if probed else ("estimate", "verdict", "request", "speed", "alternatives"):
        assert a[key] == b[key], key
    assert a["verdict"]["status"] == b["verdict"]["status"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(MODELS), profile=st.sampled_from(PROFILES),
       context=st.sampled_from([2048, 8192, 32768]), batch=st.sampled_from([1, 4]),
       precision=st.sampled_from([None, "bf16", "q4_k_m", "awq"]))
def test_check_plan_where_and_fits_give_one_answer(tmp_path, model, profile, context, batch, precision):
    fields: dict[str, object] = {"context": context, "batch": batch}
    if precision:
        fields["precision"] = precision
    check = json.loads(invoke(model, *flags(fields), "--profile", profile, "--json").stdout)
    same_answer(check, plan_case(tmp_path, model, fields, profile))
    need = max((d for d in check["verdict"]["devices"] if d["free_bytes"]),
               key=lambda d: d["need_bytes"] / d["free_bytes"], default=None)
    where = json.loads(invoke("where", model, *flags(fields), "--json").stdout)
    row = next((m for m in where["machines"] if m["name"] == profile and m["nodes"] == 1), None)
    if check["exit_code"] == 0:
        assert row is not None and row["status"] == check["verdict"]["status"]
        assert (row["need_bytes"], row["free_bytes"]) == (need["need_bytes"], need["free_bytes"])
        assert shlex.split(row["command"])[1:] == [model, *shlex.split(row["command"])[2:]]
    elif row is not None:  # the machine's default did not fit: the row is what check advises there
        assert precision is None and row["precision_choice"] == "best_fitting"
    if precision is None and batch == 1:
        fits = json.loads(invoke("models", "--fits", "--profile", profile, "--context", str(context), "--top", "0",
                                 "--json").stdout)
        ours = [m for m in fits["models"] + fits["not_fitting"] if m["id"] == check["model"]["id"]]
        if ours and ours[0]["change"] is None and check["exit_code"] == 0:
            assert (ours[0]["need_bytes"], ours[0]["status"]) == (need["need_bytes"], check["verdict"]["status"])


@pytest.mark.parametrize("profile", ["rtx-4090", "laptop-16gb"])
def test_interactive_shows_the_check_table(profile):
    answers = ["qwen-7b", "inference", "", "8192", "2", profile, "q"]
    shown = invoke("interactive", input="".join(a + "\n" for a in answers)).output
    table = invoke("qwen-7b", "--context", "8192", "--batch", "2", "--profile", profile).output
    head = table.split("\nWhat fits instead")[0].split("\nAssumptions:")[0]
    assert head.strip() in shown


@pytest.fixture
def transformers_440(monkeypatch):
    """This machine with transformers 4.40 installed: the prefill then returns every position's logits in
    fp32 (transformers < 4.45), and that is the default --transformers-version here."""
    import fitcheck.model.installed as installed

    monkeypatch.setattr(installed, "_version", lambda dist: "4.40.0" if dist == "transformers" else None)


def test_this_machines_installed_transformers_is_read_once_for_every_front_end(tmp_path, transformers_440):
    fields = {"precision": "bf16", "engine": "transformers", "device": "cpu", "context": 8192}
    check = json.loads(invoke("qwen2.5-0.5b", *flags(fields), "--json").stdout)
    logits = next(a for a in check["estimate"]["assumptions"] if a["name"] == "logits")
    assert "transformers 4.40.0 installed here" in logits["why"] and "every prompt position" in logits["why"]
    same_answer(check, plan_case(tmp_path, "qwen2.5-0.5b", fields, None), probed=True)
    # a profile is another machine: the installed release is not its default, through either front end
    on_profile = json.loads(invoke("qwen2.5-0.5b", *flags(fields), "--profile", "laptop-16gb", "--json").stdout)
    assert "installed" not in next(a for a in on_profile["estimate"]["assumptions"] if a["name"] == "logits")["why"]
    same_answer(on_profile, plan_case(tmp_path, "qwen2.5-0.5b", fields, "laptop-16gb"))
    assert on_profile["estimate"]["total_bytes"] < check["estimate"]["total_bytes"]  # the last position's logits
