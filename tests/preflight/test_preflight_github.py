"""GitHub Actions output: escaping, annotation levels, the step summary."""

from __future__ import annotations

from fitcheck.pipeline import check
from fitcheck.preflight import github
from fitcheck.preflight.requirements import evaluate, parse_requirement
from fitcheck.profiles import load_profile
from fitcheck.request import Request


def test_escaping_matches_the_runner():
    assert github.escape_data("50%\r\nnext") == "50%25%0D%0Anext"
    assert github.escape_property("a: b, c") == "a%3A b%2C c"
    assert github.annotation("error", "t: x", "line1\nline2") == "::error title=t%3A x::line1%0Aline2"


def test_does_not_fit_is_an_error_naming_why_and_what_fits():
    result = check("llama-3.1-70b", Request(precision="bf16"), load_profile("rtx-4090"))
    (line,) = github.check_annotations(result)
    assert line.startswith("::error title=fitcheck%3A llama-3.1-70b does not fit on rtx-4090::")
    assert "GiB but only" in line and "Fits instead: " in line and "fitcheck meta-llama/Llama-3.1-70B-Instruct --precision" in line
    md = github.check_summary(result, evaluate([parse_requirement("gpus>=2")], result.machine))
    assert md.startswith("### ❌ fitcheck: llama-3.1-70b does not fit on rtx-4090")
    assert "| GPU0 |" in md and "| `gpus>=2` | 1 | ❌ failed |" in md and "**What fits instead" in md


def test_tight_is_a_warning_or_an_error_when_strict():
    # about 16 GiB of 24 free: inside a 50 % headroom
    result = check("qwen-7b", Request(headroom=50), load_profile("rtx-4090"))
    assert result.verdict.status == "tight", result.verdict.summary()
    assert github.check_annotations(result)[0].startswith("::warning ")
    assert github.check_annotations(result, strict=True)[0].startswith("::error ")
    assert "(--strict)" in github.check_annotations(result, strict=True)[0]


def test_fits_is_a_notice():
    result = check("qwen-7b", Request(), load_profile("h100-sxm"))
    assert github.check_annotations(result)[0].startswith("::notice title=fitcheck%3A qwen-7b fits on h100-sxm::")


def test_training_alternatives_show_training_commands_from_the_json_document():
    from fitcheck.pipeline import check
    from fitcheck.render.check import check_document
    from fitcheck.request import Request

    result = check("qwen-7b", Request(mode="qlora", seq_len=8192), load_profile("rtx-4090"))
    assert result.verdict.status == "does_not_fit" and result.alternatives
    doc = check_document(result)
    expected = [a["fitcheck_command"] for a in doc["alternatives"]]
    assert github.alternative_commands(result) == expected
    (line,) = github.check_annotations(result)
    assert f"Fits instead: {result.alternatives[0].title} — {expected[0]}" in line
    assert "--mode qlora" in line and "--context" not in line and "--engine" not in line
    assert "sequence 8192, micro-batch 1" in line
    md = github.check_summary(result)
    for i, (a, cmd) in enumerate(zip(result.alternatives, expected, strict=True), 1):
        assert f"{i}. {a.title}: `{cmd}`" in md
    assert "--mode qlora" in md and "--context" not in md


def test_inference_commands_match_the_json_document():
    from fitcheck.render.check import check_document

    result = check("llama-3.1-70b", Request(precision="bf16"), load_profile("rtx-4090"))
    expected = [a["fitcheck_command"] for a in check_document(result)["alternatives"]]
    assert expected and github.alternative_commands(result) == expected
    assert expected[0] in github.check_annotations(result)[0]


def test_the_summary_and_annotation_carry_the_disk():
    from fitcheck.storage import HF_CACHE, Place, Storage

    storage = Storage((Place(HF_CACHE, "/runner/hub", 5 * 2**30, "d"),), looked=True)
    result = check("qwen-7b", Request(), load_profile("rtx-4090"), storage=storage)
    (line,) = github.check_annotations(result)
    assert line.startswith("::error title=fitcheck%3A qwen-7b does not fit on disk on rtx-4090::")
    assert "on disk at /runner/hub but only 5.00 GiB is free" in line
    md = github.check_summary(result)
    assert "| Download to `/runner/hub` | 14.19 GiB | 5.00 GiB | does not fit |" in md
    assert "| Download to disk not known |" in github.check_summary(check("qwen-7b", Request(), load_profile("rtx-4090")))
