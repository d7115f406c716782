"""The option vocabulary: one declaration per option, and everything derived from it agrees."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcheck.cli.check_cmd import check
from fitcheck.cli.options import request_from
from fitcheck.cli.where_cmd import where
from fitcheck.commands import fitcheck_command
from fitcheck.errors import FitcheckError
from fitcheck.options import BY_NAME, DEFAULTS, OPTIONS, PLAN_ALIASES, PLAN_FIELDS
from fitcheck.pipeline import check as check_api
from fitcheck.profiles import list_profiles
from fitcheck.request import Request


def test_every_request_option_is_a_request_field_with_the_vocabulary_default():
    fields = {f.name: f.default for f in dataclasses.fields(Request)}
    for opt in OPTIONS:
        assert fields[opt.name] == opt.default == DEFAULTS[opt.name], opt.name


@pytest.mark.parametrize("command", [check, where], ids=["check", "where"])
def test_click_options_come_from_the_vocabulary(command):
    params = {p.name: p for p in command.params}
    for opt in OPTIONS:
        if command is where and opt.this_machine:
            assert opt.name not in params, opt.name  # --download-dir: this machine's disk, not a profile's
            continue
        param = params[opt.name]
        assert param.default == opt.default, opt.name
        assert opt.flags[0].split("/")[0] in param.opts, opt.name
        if opt.kind == "choice":
            assert tuple(param.type.choices) == tuple(str(c) for c in opt.choices)


def test_plan_fields_are_the_request_options_plus_the_case_fields():
    assert set(PLAN_FIELDS) == set(BY_NAME) | set(PLAN_ALIASES) | {"model", "name", "params", "profile", "strict"}


def _values(opt):
    if opt.kind == "choice":
        values = st.sampled_from(opt.choices)
    elif opt.kind == "int":
        values = st.integers(int(opt.low or 0), min(int(opt.high or 10**6), 10**6))
    elif opt.kind == "float":
        values = st.floats(opt.low, opt.high, allow_nan=False).map(lambda x: float(f"{x:g}"))
    elif opt.kind == "flag":
        values = st.booleans()
    elif opt.name == "transformers_version":
        values = st.sampled_from(["4.38.2", "4.45", "4.46.1"])
    else:
        values = st.sampled_from(["all-linear", "attention", "q_proj,v_proj"])
    return st.none() | values if opt.nullable or opt.default is None else values


@st.composite
def requests(draw):
    mode = draw(st.sampled_from(BY_NAME["mode"].choices))
    values = {o.name: draw(_values(o)) for o in OPTIONS if o.name != "mode" and o.applies(mode)}
    return Request(mode=mode, **values)


@settings(max_examples=200, deadline=None)
@given(requests())
def test_the_printed_command_parses_back_to_the_same_request(request):
    """What any alternative prints is read back by the CLI as exactly the request it came from."""
    import shlex

    args = shlex.split(fitcheck_command(("qwen-7b",), request))[2:]
    ctx = check.make_context("check", ["qwen-7b", *args])
    assert request_from(ctx.params) == request


@pytest.mark.parametrize("machine", list_profiles(), ids=lambda m: m.name)
@pytest.mark.parametrize("mode", ["inference", "lora", "full"])
def test_defaults_never_land_on_a_pair_the_capability_table_refuses(machine, mode):
    gptq = str(Path(__file__).parent / "fixtures" / "configs" / "Qwen2.5-7B-Instruct-GPTQ-Int4.json")
    for model in ("qwen-7b", "deepseek-v3", gptq, "gpt-oss-20b"):  # bf16, fp8, gptq-int4, mxfp4 checkpoints
        result = check_api(model, Request(mode=mode), machine, alternatives=False, search=False)
        assert result.plan.problems == (), (model, machine.name, result.plan.problems)


def test_values_typed_anywhere_are_checked_by_the_declaration():
    with pytest.raises(FitcheckError, match="--context must be between 1 and"):
        BY_NAME["context"].parse(0)
    with pytest.raises(FitcheckError, match="'fp4' is not one of"):
        BY_NAME["kv_dtype"].parse("fp4")
    assert BY_NAME["zero"].parse("3") == 3 and BY_NAME["grad_checkpointing"].parse("on") is True
    assert BY_NAME["context"].parse("32k") == 32768 and BY_NAME["gpus"].parse("auto") is None
    assert BY_NAME["master_weights"].parse("none") == "none"  # a choice, not "unset"
    with pytest.raises(click.BadParameter):
        check.make_context("check", ["qwen-7b", "--lora-targets", ""])
