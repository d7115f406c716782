"""--prompt N: prefill-sized terms follow the prompt, the KV cache follows the context."""

import json

import pytest
from click.testing import CliRunner
from estimate_specs import QWEN25_7B
from machines import machine, nvidia

from fitcheck.cli import cli
from fitcheck.cli.interactive_cmd import Answers, validate
from fitcheck.commands import fitcheck_command
from fitcheck.engines import estimate_inference
from fitcheck.errors import FitcheckError
from fitcheck.pipeline import check as check_api
from fitcheck.plan import resolve_inference
from fitcheck.preflight.plan_file import parse_plan
from fitcheck.preflight.run import request_for
from fitcheck.request import Request

RTX4090 = machine([nvidia()])


class Resolved:  # what fitcheck.model.resolve returns, minimally
    def __init__(self, spec):
        self.spec, self.hf_id, self.source, self.note, self.entry = spec, spec.name, "test", None, None


def _estimate(**req):
    plan = resolve_inference(Request(**req), QWEN25_7B, RTX4090)
    return plan, estimate_inference(QWEN25_7B, plan).devices[0]


def test_the_cache_follows_the_context_and_the_prefill_follows_the_prompt():
    _, whole = _estimate(context=8192)
    _, short = _estimate(context=8192, prompt_tokens=1)
    assert short.component("kv_cache") == whole.component("kv_cache") > 0
    assert short.component("activations") < whole.component("activations") / 100
    _, half = _estimate(context=8192, prompt_tokens=4096)
    _, half_ctx = _estimate(context=4096)
    assert half.component("activations") == half_ctx.component("activations")
    assert half.component("kv_cache") == 2 * half_ctx.component("kv_cache")


def test_old_transformers_logits_follow_the_prompt_not_the_generated_tokens():
    # a 1-token prompt generating 2,048 tokens under transformers 4.38: one position's logits
    _, gen = _estimate(context=2049, prompt_tokens=1, transformers_version="4.38")
    _, prefill = _estimate(context=2049, transformers_version="4.38")
    assert prefill.component("activations") - gen.component("activations") > 2048 * QWEN25_7B.vocab_size * 6 * 0.99


def test_a_prompt_longer_than_the_context_is_bad_input():
    with pytest.raises(FitcheckError, match="prompt"):
        Request(context=512, prompt_tokens=513).validate()
    r = CliRunner().invoke(cli, ["qwen-7b", "--profile", "rtx-4090", "--context", "512", "--prompt", "1000"])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_cli_json_and_the_reproducing_command():
    r = CliRunner().invoke(cli, ["qwen-7b", "--profile", "rtx-4090", "--context", "8192", "--prompt", "128", "--json"])
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.output)
    assert (doc["request"]["context"], doc["request"]["prompt_tokens"]) == (8192, 128)
    table = CliRunner().invoke(cli, ["qwen-7b", "--profile", "rtx-4090", "--context", "8192", "--prompt", "128"])
    assert "context 8,192 tokens (prompt 128)" in table.output
    assert "--context 8192 --prompt 128" in fitcheck_command(("qwen-7b",), Request(context=8192, prompt_tokens=128))
    assert "--prompt" not in fitcheck_command(("qwen-7b",), Request(context=8192))
    lora = CliRunner().invoke(cli, ["qwen-7b", "--mode", "lora", "--prompt", "16"])
    assert lora.exit_code == 2 and "--prompt applies to inference" in lora.output


def test_a_shorter_context_alternative_keeps_the_prompt_inside_it():
    result = check_api(Resolved(QWEN25_7B), Request(context=200_000, prompt_tokens=150_000), RTX4090)
    assert result.verdict.status == "does_not_fit"
    for alt in result.alternatives:
        assert 1 <= alt.plan.prompt_tokens <= alt.plan.context


def test_where_plan_files_and_interactive_take_it():
    def fitting(*extra):
        r = CliRunner().invoke(cli, ["where", "qwen-7b", "--context", "32768", "-p", "bf16", "--kind", "desktop",
                                     "--transformers-version", "4.40", "--json", *extra])
        assert r.exit_code in (0, 1), r.output
        return {row["name"] for row in json.loads(r.output)["machines"]}

    assert fitting() < fitting("--prompt", "64")
    plan = parse_plan('[[case]]\nmodel = "qwen-7b"\ncontext = 8192\nprompt = 100\n', "p.toml")
    assert request_for(plan.cases[0]).prompt_tokens == 100
    with pytest.raises(FitcheckError, match="prompt"):
        parse_plan('[[case]]\nmodel = "qwen-7b"\nprompt = 0\n', "p.toml")
    assert validate("prompt_tokens", "256") == 256 and validate("prompt_tokens", "auto") is None
    assert Answers().with_answer("prompt_tokens", 4096).with_answer("context", 1024).request.prompt_tokens == 1024
    assert Answers().with_answer("prompt_tokens", None).request.prompt_tokens is None
