"""--sampling: how transformers' generate() picks each token sets the decoding step's vocabulary-sized
tensors (fitcheck.estimate.generate_step); one option of the vocabulary, so the CLI, plan files and the
alternatives' commands all carry it."""

from __future__ import annotations

import json

from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.preflight.plan_file import parse_plan

# A decoding step at batch 16 with a 1-token prompt: the step's tensors are the activation peak.
STEP = ("qwen-0.5b", "--batch", "16", "--prompt", "1", "--context", "64", "--profile", "rtx-4090", "--json")


def _doc(*extra: str) -> dict:
    r = CliRunner().invoke(cli, [*STEP, *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _activations(doc: dict) -> int:
    gpu = next(d for d in doc["estimate"]["devices"] if d["kind"] == "gpu")
    return gpu["components"]["activations"]


def _assumption(doc: dict) -> dict:
    return next(a for a in doc["estimate"]["assumptions"] if a["name"] == "sampling")


def test_greedy_holds_fewer_logits_copies_than_the_default_top_p():
    default, greedy, sample = _doc(), _doc("--sampling", "greedy"), _doc("--sampling", "sample")
    assert _activations(greedy) < _activations(sample) < _activations(default)
    assert _assumption(default)["value"] == "top-p" and _assumption(greedy)["value"] == "greedy"
    assert _assumption(greedy)["option"] == "--sampling" and _assumption(greedy)["why"] == "from --sampling"


def test_an_unknown_sampling_is_malformed_input():
    r = CliRunner().invoke(cli, ["qwen-0.5b", "--sampling", "beam"])
    assert r.exit_code == 2 and "'beam' is not one of 'auto', 'greedy', 'sample', 'top-p'" in r.output


def test_other_engines_keep_it_and_say_it_is_not_modelled_there():
    r = CliRunner().invoke(cli, ["qwen-0.5b", "--sampling", "greedy", "--engine", "vllm", "--profile", "rtx-4090", "-v"])
    assert r.exit_code == 0, r.output
    assert "vllm's own sampler buffers are not counted" in r.output


def test_alternatives_carry_it_and_plan_files_take_it():
    r = CliRunner().invoke(cli, ["qwen-7b", "--sampling", "greedy", "--profile", "rtx-3060", "--strict"])
    commands = [line.strip() for line in r.output.splitlines() if line.strip().startswith("fitcheck ")]
    assert commands and all("--sampling greedy" in c for c in commands)
    plan = parse_plan("[[case]]\nmodel = 'qwen-7b'\nsampling = 'greedy'\n", "p.toml")
    assert plan.cases[0].options["sampling"] == "greedy"
