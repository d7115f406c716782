"""Plan files: parsing, defaults, and one-line errors naming the file and the field."""

from __future__ import annotations

import pytest

from fitcheck.errors import FitcheckError
from fitcheck.preflight.plan_file import parse_plan, read_plan

GOOD = """
[defaults]
profile = "rtx-4090"
context = 8192

[[case]]
name = "chat"
model = "qwen-7b"
precision = "awq"
batch = 8

[[case]]
model = "llama3-8b"
context = 2048
strict = true
"""


def test_cases_merge_defaults():
    plan = parse_plan(GOOD, "p.toml")
    chat, llama = plan.cases
    assert (chat.index, chat.name, chat.model) == (1, "chat", "qwen-7b")
    assert chat.options == {"profile": "rtx-4090", "context": 8192, "precision": "awq", "batch": 8}
    assert llama.name == "llama3-8b" and llama.get("context") == 2048 and llama.get("strict") is True


@pytest.mark.parametrize("text, needle", [
    ("[[case]]\nmodel = 'x'\ncontext = 'big'\n", "p.toml: case 1 (x): field 'context' must be a whole number >= 1"),
    ("[[case]]\nname = 'a'\n", "p.toml: case 1 (a): field 'model' is missing"),
    ("[[case]]\nmodel = 'x'\n[[case]]\nmodel = 'y'\nbacth = 2\n", "p.toml: case 2 (y): unknown field 'bacth'"),
    ("[[case]]\nmodel = 3\n", "p.toml: case 1: field 'model' must be a non-empty string"),   # no usable name
    ("[[case]]\nmodel = 'x'\nheadroom = 150\n", "field 'headroom' must be a percentage"),
    ("[[case]]\nmodel = 'x'\nstrict = 'yes'\n", "field 'strict' must be true or false"),
    ("[[case]]\nmodel = 'x'\ngpu_memory_utilization = 2\n", "between 0.05 and 1"),
    ("[defaults]\nmodel = 'x'\n[[case]]\nmodel = 'y'\n", "p.toml: [defaults]: field 'model' belongs in each"),
    ("[defaults]\nbatch = 0\n[[case]]\nmodel = 'y'\n", "p.toml: [defaults]: field 'batch'"),
    ("", "p.toml: no cases"),
    ("[[case]\nmodel = 'x'\n", "p.toml: not valid TOML"),
    ("[cases]\nmodel = 'x'\n", "p.toml: unknown table or key 'cases'"),
])
def test_malformed_plans_name_file_and_field(text, needle):
    with pytest.raises(FitcheckError) as info:
        parse_plan(text, "p.toml")
    assert needle in info.value.one_line() and info.value.exit_code == 2
    assert "\n" not in info.value.one_line()


def test_read_plan_missing_file(tmp_path):
    with pytest.raises(FitcheckError, match="cannot read plan file"):
        read_plan(str(tmp_path / "nope.toml"))


def test_every_malformed_case_and_field_is_collected():
    from fitcheck.preflight.plan_file import PlanInvalid, parse_plan_errors

    text = ("[defaults]\nbatch = 0\n[[case]]\nmodel = 'x'\n[[case]]\nname = 'a'\n[[case]]\nmodel = 'y'\n"
            "bacth = 2\ncontext = 'big'\n")
    with pytest.raises(PlanInvalid) as info:
        parse_plan(text, "p.toml")
    assert info.value.exit_code == 2 and "\n" not in info.value.one_line()
    assert [e.split(": field")[0].split(": unknown")[0] for e in info.value.errors] == [
        "p.toml: [defaults]", "p.toml: case 2 (a)", "p.toml: case 3 (y)", "p.toml: case 3 (y)"]
    assert "did you mean 'batch'?" in info.value.errors[2]
    plan, errors = parse_plan_errors(text, "p.toml")
    assert [c.index for c in plan.cases] == [1] and len(errors) == 4   # the well-formed case is kept


def test_parsing_and_validating_label_a_case_alike(tmp_path):
    """review: parsing said 'case 1:' and validating 'case 1 (qwen-7b):' for the same unnamed case; both
    name it by its index and its name (the model where it has no name of its own)."""
    from fitcheck.preflight.plan_file import case_label, parse_plan_errors
    from fitcheck.preflight.run import validate_plan
    from fitcheck.profiles import load_profile

    text = ("[[case]]\nmodel = 'qwen-7b'\ncontext = 'big'\n[[case]]\nmodel = 'qwen-7bxyz'\n"
            "[[case]]\nname = 'chat'\nmodel = 'qwen-7b'\nbacth = 2\n[[case]]\nname = 'ok'\nmodel = 'qwen-7bxyz'\n")
    plan, parsed = parse_plan_errors(text, "p.toml")
    _, validated = validate_plan(plan, lambda name: load_profile("rtx-4090"))
    assert parsed[0].startswith("p.toml: case 1 (qwen-7b): ") and parsed[1].startswith("p.toml: case 3 (chat): ")
    assert validated[0].startswith("p.toml: case 2 (qwen-7bxyz): ") and validated[1].startswith("p.toml: case 4 (ok): ")
    assert plan.cases[0].label("p.toml") == case_label("p.toml", 2, "qwen-7bxyz")


def test_a_plan_takes_the_words_the_command_line_takes():
    """`--cpu-moe all` works on the command line, so `cpu_moe = "all"` does in a plan (one vocabulary)."""
    from fitcheck.options import BY_NAME

    plan = parse_plan('[[case]]\nmodel = "mixtral-8x7b"\nprofile = "rtx-4090"\nengine = "llama.cpp"\ncpu_moe = "all"\n')
    assert plan.cases[0].get("cpu_moe") == "all" == BY_NAME["cpu_moe"].parse("all")
    with pytest.raises(FitcheckError, match='or "all"'):
        parse_plan('[[case]]\nmodel = "mixtral-8x7b"\ncpu_moe = "most"\n')


def test_a_plan_of_more_cases_than_the_limit_is_refused_at_once():
    from fitcheck.preflight.plan_file import MAX_CASES

    one = '[[case]]\nmodel = "qwen-7b"\n'
    assert len(parse_plan(one * MAX_CASES).cases) == MAX_CASES
    with pytest.raises(FitcheckError, match=f"{MAX_CASES + 1:,} cases"):
        parse_plan(one * (MAX_CASES + 1))
