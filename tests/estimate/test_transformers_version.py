"""--transformers-version: which prefill logits transformers keeps, and what that costs."""

import json

import pytest
from click.testing import CliRunner
from estimate_specs import QWEN25_7B
from machines import machine, nvidia

from fitcheck.cli import cli
from fitcheck.cli.interactive_cmd import Answers, Invalid, apply_alternative, validate
from fitcheck.engines import estimate_inference
from fitcheck.engines.transformers.releases import logits_mode
from fitcheck.errors import FitcheckError
from fitcheck.pipeline import check
from fitcheck.plan import resolve_inference
from fitcheck.preflight.plan_file import parse_plan
from fitcheck.preflight.run import request_for
from fitcheck.request import Request
from fitcheck.versions import parse_transformers_version

RTX4090 = machine([nvidia()])


class Resolved:  # what fitcheck.model.resolve returns, minimally
    def __init__(self, spec):
        self.spec, self.hf_id, self.source, self.note, self.entry = spec, spec.name, "test", None, None


@pytest.mark.parametrize("version, mode", [
    (None, "last"), ("4.45", "last"), ("4.46.0", "last"), ("5.2", "last"), ("v4.50.1", "last"),
    ("4.44.2", "all-fp32"), ("4.38.2", "all-fp32"), ("4", "all-fp32"),
])
def test_logits_follow_the_version(version, mode):
    assert logits_mode("qwen2", version)[0] == mode


def test_qwen1_remote_code_keeps_every_position_whatever_the_version():
    assert logits_mode("qwen", None)[0] == "all"
    assert logits_mode("qwen", "4.46")[0] == "all"


@pytest.mark.parametrize("bad", ["", "abc", "four.45", "1.2", "4.x", "100.1"])
def test_malformed_versions_are_bad_input(bad):
    with pytest.raises(FitcheckError, match="--transformers-version"):
        parse_transformers_version(bad)
    with pytest.raises(FitcheckError):
        Request(transformers_version=bad).validate()


def test_resolve_records_the_logits_for_transformers_only():
    plan = resolve_inference(Request(transformers_version="4.38.2"), QWEN25_7B, RTX4090)
    assert (plan.engine, plan.logits, plan.transformers_version) == ("transformers", "all-fp32", "4.38.2")
    assumption = next(a for a in plan.assumptions if a.name == "logits")
    assert assumption.option == "--transformers-version" and "4.38.2" in assumption.why
    vllm = resolve_inference(Request(engine="vllm", transformers_version="4.38.2"), QWEN25_7B, RTX4090)
    assert vllm.transformers_version is None and not any(a.name == "logits" for a in vllm.assumptions)


def test_an_old_release_holds_fp32_logits_for_every_prompt_position():
    def activations(version):
        plan = resolve_inference(Request(context=8192, transformers_version=version), QWEN25_7B, RTX4090)
        return estimate_inference(QWEN25_7B, plan).devices[0].component("activations")

    # a current release: the layers' peak plus the last position's fp32 logits (the first token's
    # sampling tensors come after the layers are freed, and are smaller);
    # before 4.45 every position's bf16 logits and their fp32 copy, after the layers are done
    from fitcheck.engines.transformers.activations import transformers_prefill_bytes

    layers = transformers_prefill_bytes(QWEN25_7B, 8192, 2)
    assert activations(None) == layers + QWEN25_7B.vocab_size * 4
    assert activations("4.38") == max(layers, 8192 * QWEN25_7B.vocab_size * 6)


def test_upgrading_is_the_first_alternative_and_its_command_drops_the_flag():
    old = check(Resolved(QWEN25_7B), Request(context=16384, transformers_version="4.38.2"), RTX4090)
    new = check(Resolved(QWEN25_7B), Request(context=16384), RTX4090)
    assert new.verdict.status == "fits" and old.verdict.status == "does_not_fit"
    first = old.alternatives[0]
    assert first.title.startswith("Upgrade transformers") and first.plan.logits == "last"
    assert first.changes == (("transformers_version", None),)  # typed: unset means a current release
    assert "--transformers-version" not in first.fitcheck_command
    quantized = next(a for a in old.alternatives if ("precision", "awq") in a.changes)
    assert "--transformers-version 4.38.2" in quantized.fitcheck_command


def test_cli_option_bad_value_exits_2_and_training_takes_the_version():
    r = CliRunner().invoke(cli, ["qwen-7b", "--profile", "rtx-4090", "--transformers-version", "4.38", "--json"])
    doc = json.loads(r.output)
    assert any(a["name"] == "logits" and a["value"] == "all-fp32" for a in doc["estimate"]["assumptions"])
    bad = CliRunner().invoke(cli, ["qwen-7b", "--profile", "rtx-4090", "--transformers-version", "latest"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output and "4.46 or 4.38.2" in bad.output
    lora = CliRunner().invoke(cli, ["llama-3.1-8b", "--mode", "qlora", "--profile", "a100-80gb",
                                    "--transformers-version", "4.47", "--json"])
    assert lora.exit_code in (0, 1), lora.output
    notes = {a["name"]: a for a in json.loads(lora.output)["estimate"]["assumptions"]}
    assert notes["transformers_version"]["value"] == "4.47" and "contiguous fp32 copy" in notes["transformers_version"]["why"]


def test_where_judges_every_profile_with_the_version():
    def fitting(*extra):
        r = CliRunner().invoke(cli, ["where", "qwen-7b", "--context", "32768", "-p", "bf16", "--kind", "desktop",
                                     "--json", *extra])
        assert r.exit_code in (0, 1), r.output
        return {row["name"] for row in json.loads(r.output)["machines"]}

    assert fitting("--transformers-version", "4.40") < fitting()


def test_plan_files_take_the_version_as_a_string():
    plan = parse_plan('[[case]]\nmodel = "qwen-7b"\ntransformers_version = "4.38.2"\n', "p.toml")
    assert request_for(plan.cases[0]).transformers_version == "4.38.2"
    with pytest.raises(FitcheckError, match="transformers_version"):
        parse_plan('[[case]]\nmodel = "qwen-7b"\ntransformers_version = 4.38\n', "p.toml")


def test_interactive_answer_and_the_upgrade_alternative():
    assert validate("transformers_version", "4.38.2") == "4.38.2"
    assert validate("transformers_version", "auto") is None
    with pytest.raises(Invalid, match="auto"):
        validate("transformers_version", "old")

    asked = Answers(request=Request(context=16384, transformers_version="4.38.2"))
    result = check(Resolved(QWEN25_7B), asked.request, RTX4090)
    upgrade = next(a for a in result.alternatives if a.title.startswith("Upgrade transformers"))
    answers = apply_alternative(asked, upgrade)
    assert answers.request.transformers_version is None and answers.request.context == 16384
    assert asked.with_answer("transformers_version", "4.40").request.transformers_version == "4.40"
