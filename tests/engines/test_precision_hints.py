"""A precision an engine never loads: bad input (exit 2), one line, and a hint naming what does load — the
precisions that engine takes for that model (fitcheck.engines.precisions_taking, from the capability table) and
the engines that load the precision asked.  Every name in the hint works when typed."""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck import engines
from fitcheck.cli import cli
from fitcheck.errors import FitcheckError
from fitcheck.estimate.formats import weight_format
from fitcheck.model.resolve import resolve_model
from fitcheck.options import PRECISIONS
from fitcheck.pipeline import check
from fitcheck.profiles import load_profile
from fitcheck.request import Request

GPTQ = str(Path(__file__).parents[1] / "fixtures" / "configs" / "Qwen2.5-7B-Instruct-GPTQ-Int4.json")
MODELS = {"bf16": "qwen2.5-0.5b", "mxfp4": "gpt-oss-20b", "gptq-int4": GPTQ}
MACHINE = load_profile("h100-sxm")


def refusal(model: str, engine: str, precision: str) -> FitcheckError | None:
    try:
        check(model, Request(engine=engine, precision=precision), MACHINE, search=False, alternatives=False, device_advice=False)
    except FitcheckError as exc:
        return exc
    return None


def suggested(hint: str) -> tuple[list[str], list[str]]:
    """(the -p precisions, the --engine engines) a hint names."""
    precisions = []
    m = re.search(r"-p (.+?) with ", hint)
    if m:
        precisions = re.split(r", | or ", m.group(1))
    return precisions, re.findall(r"--engine ([\w.]+)", hint.replace("drop --engine or ", ""))


def test_an_mxfp4_checkpoint_in_llama_cpp_is_pointed_at_mxfp4_moe():
    r = CliRunner().invoke(cli, ["gpt-oss-20b", "-p", "mxfp4", "--engine", "llama.cpp", "--profile", "rtx-4090"])
    assert r.exit_code == 2  # a pair no machine runs, both typed: bad input, as before
    assert r.stderr.strip() == ("fitcheck: llama.cpp does not load mxfp4 checkpoints (use -p mxfp4_moe, q4_k_m or "
                                "q4_0 with llama.cpp, or --engine transformers or --engine vllm or --engine mlx "
                                "for mxfp4)")
    followed = CliRunner().invoke(cli, ["gpt-oss-20b", "-p", "mxfp4_moe", "--engine", "llama.cpp",
                                        "--profile", "rtx-4090"])
    assert followed.exit_code == 0 and "Verdict:  FITS" in followed.output


def test_a_model_without_the_format_is_not_sent_to_another_engine_for_it():
    # Qwen is no MXFP4 checkpoint: nothing loads it as mxfp4, so only llama.cpp's own types are named
    e = refusal("qwen2.5-0.5b", "llama.cpp", "mxfp4")
    assert e is not None and e.hint == "use -p q4_k_m, q4_0 or q3_k_m with llama.cpp"


def test_a_gguf_type_in_vllm_names_llama_cpp_and_what_vllm_takes():
    e = refusal("gpt-oss-20b", "vllm", "q4_k_m")
    assert e.message == "precision q4_k_m is a GGUF type: only --engine llama.cpp runs it"
    assert e.hint.startswith("drop --engine or add --engine llama.cpp, or use -p mxfp4, ")  # its own format first


def test_the_checkpoints_own_format_comes_first():
    assert engines.precisions_taking("sglang", "nf4", frozenset({"gptq-int4"}))[0] == "gptq-int4"
    assert engines.precisions_taking("llama.cpp", "mxfp4", frozenset({"mxfp4"}))[0] == "mxfp4_moe"
    assert "mxfp4_moe" not in engines.precisions_taking("llama.cpp", "awq", frozenset({"bf16"}), n=99)
    # a model not known yet is taken as stored in what was asked
    assert engines.precisions_taking("llama.cpp", "mxfp4", None)[0] == "mxfp4_moe"


@pytest.mark.parametrize("stored", list(MODELS))
@pytest.mark.parametrize("engine", list(engines.ENGINES))
def test_every_refusal_names_only_what_runs(engine, stored):
    """engines × models × every precision the engine never loads: each precision the hint names is one the engine
    takes and the model has or can get (it resolves), each engine it names loads the precision asked."""
    model = MODELS[stored]
    spec = resolve_model(model).spec
    for precision in (p for p in PRECISIONS if p != "auto"):
        name = weight_format(precision).name
        if name in engines.get(engine).precisions:
            continue
        e = refusal(model, engine, precision)
        if e is None or "does not load" not in e.message and "GGUF type" not in e.message:
            # a stored-only format the model does not have is refused before the engine is asked
            assert e is not None and "stored format" in e.message, (engine, precision, stored)
            continue
        assert e.exit_code == 2 and "\n" not in e.one_line()
        precisions, others = suggested(e.hint)
        assert precisions, (engine, precision, e.hint)
        assert precisions == engines.precisions_taking(engine, name, spec.stored_formats())
        for p in precisions:
            assert p in engines.get(engine).precisions, (engine, p)
            assert refusal(model, engine, p) is None, (engine, precision, stored, p, e.hint)
        for other in others:
            assert name in engines.get(other).precisions, (engine, precision, other)
            if other != engines.gguf_engine() or name in engines.GGUF_TYPES:
                assert refusal(model, other, precision) is None, (engine, precision, stored, other, e.hint)
