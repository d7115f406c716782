"""Every printed engine command is one a user can paste (issue 35 item 3): a repository and GGUF type the catalog
records, the flags a context past the model's maximum needs, the dtype the GPU has; an alternative whose
checkpoint fitcheck cannot name ranks after every one it can, and says what to look for."""

from __future__ import annotations

import json
import shlex

import pytest

from fitcheck.model.catalog import load_catalog
from fitcheck.pipeline import check
from fitcheck.profiles import load_profile
from fitcheck.request import Request
from fitcheck.search.rank import checkpoint_known


def gguf_repos() -> dict[str, frozenset[str]]:
    """Each catalog GGUF repository and the types its recorded file list holds (empty: not recorded)."""
    return {e.quantized_repos["gguf"]: frozenset(e.gguf_types) for e in load_catalog().entries if "gguf" in e.quantized_repos}


def assert_pastes(result) -> None:
    """The checks every answer's engine commands pass (tests/test_battery.py runs them on its whole battery)."""
    repos = gguf_repos()
    known = [checkpoint_known(result.spec, a) for a in result.alternatives]
    assert known == sorted(known, reverse=True), [(a.title, k) for a, k in zip(result.alternatives, known, strict=True)]
    for alt, ok in zip(result.alternatives, known, strict=True):
        command = alt.engine_command
        if command.startswith("llama-server"):
            args = shlex.split(command.split("  #")[0])
            if "-hf" in args:
                repo, _, tag = args[args.index("-hf") + 1].partition(":")
                assert repo in repos or ":" in (result.model.hf_id or ""), command
                held = repos.get(repo, frozenset())
                if tag and held:
                    assert tag in held, command          # a type the repository holds
                if not tag:
                    assert held == {alt.plan.precision.upper()}, command   # one type: its own
            else:
                assert not ok or alt.plan.stored_format, command
                assert "  # " in command, command    # says where the file comes from
        if not ok:  # says what to look for, or how to make it
            comment = command.partition("  # ")[2]
            assert "look on the Hub for" in comment or "convert_hf_to_gguf.py" in comment, command


@pytest.mark.parametrize("model, profile", [
    ("gemma-3-27b", "rtx-4090"), ("gpt-oss-20b", "rtx-4060-laptop"), ("llama-3.1-8b", "t4"),
    ("qwen2.5-7b", "rtx-4060-laptop"), ("deepseek-r1", "8x-h100"), ("qwen3-0.6b", "laptop-8gb"),
    ("mixtral-8x7b", "rtx-4090"),
])
def test_alternatives_paste_and_known_checkpoints_come_first(model, profile):
    assert_pastes(check(model, Request(), load_profile(profile), choose=False))


def test_a_gguf_type_the_repository_does_not_hold_is_never_fetched_from_it():
    # google/gemma-3-27b-it-qat-q4_0-gguf holds one Q4_0 file: the llama.cpp default there is Q4_0, fetched with
    # the repository alone; a Q4_K_M says it is not there and how to make one
    machine = load_profile("rtx-4090")
    q4_0 = check("gemma-3-27b", Request(engine="llama.cpp"), machine)
    assert q4_0.plan.precision == "q4_0"
    assert any("the GGUF type the model's GGUF repository holds" in a.why for a in q4_0.plan.assumptions)
    from fitcheck.commands import engine_command
    from fitcheck.model.resolve import resolve_model
    from fitcheck.pipeline import _engine_model

    ref, repos = _engine_model(resolve_model("gemma-3-27b"), ("gemma-3-27b",))
    assert engine_command(ref, q4_0.plan, repos).startswith("llama-server -hf google/gemma-3-27b-it-qat-q4_0-gguf -c")
    k_quant = check("gemma-3-27b", Request(engine="llama.cpp", precision="q4_k_m"), machine).plan
    line = engine_command(ref, k_quant, repos)
    assert "-hf" not in line and "holds Q4_0, no Q4_K_M" in line
    # the download names no repository for it either
    doc = json.loads(_cli("gemma-3-27b", "--engine", "llama.cpp", "-p", "q4_k_m", "--profile", "rtx-4090"))
    assert doc["download"]["repo"] is None


def test_an_official_gguf_repository_is_named_where_one_exists():
    # gpt-oss: ggml-org's MXFP4 build, which llama.cpp's own guide names without a tag
    result = check("gpt-oss-20b", Request(), load_profile("rtx-4060-laptop"))
    assert result.chosen is not None and result.plan.precision == "mxfp4_moe"
    first = check("gpt-oss-20b", Request(), load_profile("rtx-4060-laptop"), choose=False).alternatives[0]
    assert first.engine_command.startswith("llama-server -hf ggml-org/gpt-oss-20b-GGUF -c 4096")


def test_an_unknown_checkpoint_says_what_to_look_for():
    result = check("llama-3.1-8b", Request(precision="bf16"), load_profile("t4"))
    unknown = [a for a in result.alternatives if not checkpoint_known(result.spec, a)]
    assert unknown and all(result.alternatives.index(u) > 0 for u in unknown)
    awq = next(a for a in unknown if a.plan.precision == "awq")
    assert "look on the Hub for Llama-3.1-8B-Instruct-AWQ" in awq.engine_command
    assert "quant_method 'awq'" in awq.engine_command


def test_bitsandbytes_on_a_gpu_without_bf16_computes_in_fp16():
    # a T4 is compute capability 7.5: no bf16
    result = check("mistral-7b", Request(precision="nf4"), load_profile("t4"))
    nf4 = check("mistral-7b", Request(precision="nf4"), load_profile("rtx-4090"))
    from fitcheck.commands import engine_command

    assert "torch_dtype=torch.float16" in engine_command("mistralai/Mistral-7B-Instruct-v0.3", result.plan)
    assert "torch_dtype=torch.bfloat16" in engine_command("mistralai/Mistral-7B-Instruct-v0.3", nf4.plan)


@pytest.mark.parametrize("engine, needs", [
    ("vllm", ['--hf-overrides', '"rope_type": "yarn"', '"factor": 2.0', '"original_max_position_embeddings": 32768',
              '"rope_theta": 1000000.0']),
    ("sglang", ["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 ", "--json-model-override-args", '"rope_type": "yarn"']),
    ("llama.cpp", ["--rope-scaling yarn --rope-scale 2 --yarn-orig-ctx 32768"]),
])
def test_a_context_past_the_maximum_carries_the_flags_the_engine_needs(engine, needs):
    from fitcheck.commands import engine_command

    plan = check("qwen2.5-7b", Request(context=65536, engine=engine), load_profile("h100-sxm")).plan
    line = engine_command("Qwen/Qwen2.5-7B-Instruct", plan)
    assert all(n in line for n in needs), line
    within = check("qwen2.5-7b", Request(context=32768, engine=engine), load_profile("h100-sxm")).plan
    assert "yarn" not in engine_command("Qwen/Qwen2.5-7B-Instruct", within)


def test_vllm_past_the_maximum_with_no_recipe_is_allowed_by_its_environment_variable():
    from fitcheck.commands import engine_command

    plan = check("llama-3.1-8b", Request(context=200_000, engine="vllm"), load_profile("h200")).plan
    line = engine_command("meta-llama/Llama-3.1-8B-Instruct", plan)
    assert line.startswith("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve ") and "--hf-overrides" not in line
    inside = check("llama-3.1-8b", Request(context=100_000, engine="vllm"), load_profile("h200")).plan
    assert engine_command("meta-llama/Llama-3.1-8B-Instruct", inside).startswith("vllm serve ")


def _cli(*args: str) -> str:
    from click.testing import CliRunner

    from fitcheck.cli import cli

    return CliRunner().invoke(cli, [*args, "--json"]).stdout
