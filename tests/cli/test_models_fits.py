"""`fitcheck models --fits`: every listed model re-checks as fitting with its own command, nothing
that fits is left out, and the JSON rows keep their keys."""

from __future__ import annotations

import json
import shlex

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.errors import FitcheckError
from fitcheck.estimate.verdict import FITS
from fitcheck.model.catalog import get_entry
from fitcheck.options import ENGINES as ENGINE_CHOICES
from fitcheck.options import PRECISIONS as PRECISION_CHOICES
from fitcheck.pipeline import check
from fitcheck.profiles import load_profile
from fitcheck.request import Request
from fitcheck.search.fits import models_that_fit, select_entries

ROW_KEYS = {"id", "family", "params", "active_params", "precision", "engine", "device", "status", "need_bytes",
            "free_bytes", "decode_tokens_per_s", "training_tokens_per_s", "fitcheck_command", "change", "reason"}


def run(*args):
    return CliRunner().invoke(cli, list(args))


def fits_json(*args) -> dict:
    r = run("models", "--fits", "--json", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def recheck(command: str) -> dict:
    argv = shlex.split(command)
    assert argv[0] == "fitcheck"
    r = run(*argv[1:], "--json")
    assert r.exit_code == 0, (command, r.output)
    return json.loads(r.output)


@pytest.mark.parametrize("args", [
    ("--profile", "rtx-4090"),
    ("--profile", "laptop-16gb", "--context", "8192"),
    ("--profile", "macbook-pro-m3-pro-36gb", "--family", "qwen"),
    ("--profile", "2x-rtx-3090", "--batch", "4", "--kind", "moe"),
])
def test_every_listed_model_rechecks_as_fitting_with_its_own_command(args):
    doc = fits_json(*args)
    assert doc["schema"] == "fitcheck.fits/1" and doc["models"]
    for row in doc["models"]:
        assert set(row) == ROW_KEYS
        again = recheck(row["fitcheck_command"])
        assert again["verdict"]["status"] == row["status"], row["fitcheck_command"]
        assert again["request"]["precision"] == row["precision"] and again["request"]["engine"] == row["engine"]
        # the fullest device (need ÷ free), the one check's verdict line names
        tightest = max((d for d in again["verdict"]["devices"] if d["free_bytes"]),
                       key=lambda d: d["need_bytes"] / d["free_bytes"])
        assert (tightest["need_bytes"], tightest["free_bytes"]) == (row["need_bytes"], row["free_bytes"])


def test_training_rows_recheck_too():
    doc = fits_json("--profile", "rtx-4090", "--mode", "qlora", "--seq-len", "4096", "--family", "llama")
    assert doc["request"] == {"mode": "qlora", "headroom_pct": 10.0, "seq_len": 4096, "batch": 1}
    assert doc["models"]
    for row in doc["models"]:
        assert row["training_tokens_per_s"] and row["decode_tokens_per_s"] is None
        assert "--mode qlora" in row["fitcheck_command"] and "--seq-len 4096" in row["fitcheck_command"]
        assert recheck(row["fitcheck_command"])["verdict"]["status"] == row["status"]
    # a 70B model cannot be QLoRA-trained at 4,096 tokens on 24 GiB
    assert "meta-llama/Llama-3.3-70B-Instruct" in {r["id"] for r in doc["not_fitting"]}


SAMPLE = ("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.3-70B-Instruct", "Qwen/Qwen3-30B-A3B",
          "google/gemma-3-27b-it", "mistralai/Mixtral-8x7B-Instruct-v0.1", "HuggingFaceTB/SmolLM2-135M-Instruct",
          "deepseek-ai/DeepSeek-V3", "microsoft/phi-4", "openai/gpt-oss-20b", "tiiuae/falcon-40b")


@pytest.mark.parametrize("profile", ["rtx-3060", "laptop-8gb", "a100-40gb"])
def test_nothing_that_fits_is_missing(profile):
    machine = load_profile(profile)
    entries = tuple(get_entry(i) for i in SAMPLE)
    assert all(entries)
    listed = {r.model.id for r in models_that_fit(machine, Request(), entries=entries).fitting}
    for entry in entries:
        fits_somehow = False
        for precision in PRECISION_CHOICES:
            for engine in ENGINE_CHOICES:
                try:
                    result = check(entry.hf_id, Request(precision=precision, engine=engine), machine,
                                   alternatives=False, search=False)
                except FitcheckError:
                    continue
                fits_somehow |= result.verdict.status == FITS
            if fits_somehow:
                break
        if fits_somehow:
            assert entry.hf_id in listed, (profile, entry.hf_id)


def test_ranking_puts_the_largest_fitting_first_and_the_rest_after():
    doc = fits_json("--profile", "rtx-4090", "--family", "qwen")
    params = [r["params"] for r in doc["models"]]
    assert params == sorted(params, reverse=True)
    assert all(r["status"] in ("fits", "tight") for r in doc["models"])
    assert all(r["status"] not in ("fits", "tight") for r in doc["not_fitting"])
    assert all(r["reason"] for r in doc["not_fitting"])


def test_engine_filter_keeps_the_engine():
    doc = fits_json("--profile", "rtx-4090", "--engine", "vllm", "--family", "qwen")
    assert doc["models"] and all(r["engine"] == "vllm" for r in doc["models"])


def test_table_and_refusals():
    r = run("models", "--fits", "--profile", "rtx-4090", "--family", "gemma")
    assert r.exit_code == 0, r.output
    assert "google/gemma-3-27b-it" in r.output and "Look closer: fitcheck " in r.output
    assert r.output.splitlines()[2].split()[:3] == ["model", "params", "runs"]
    for args, word in [(("models", "--context", "8192"), "--fits"),
                       (("models", "--fits", "--seq-len", "4096"), "--mode"),
                       (("models", "--fits", "--mode", "lora", "--context", "100"), "--seq-len"),
                       (("models", "--fits", "--kind", "sparse"), "sparse")]:
        r = run(*args)
        assert r.exit_code == 2 and word in r.output, (args, r.output)


def test_kind_filters():
    assert all(e.spec.is_moe for e in select_entries(kind="moe"))
    assert all(e.variant == "base" for e in select_entries("qwen", kind="base"))


def test_nothing_that_trains_is_missing():
    from fitcheck.pipeline import check

    machine = load_profile("rtx-4090")
    entries = tuple(get_entry(i) for i in SAMPLE)
    request = Request(mode="qlora", seq_len=4096)
    listed = {r.model.id for r in models_that_fit(machine, request, entries=entries).fitting}
    for entry in entries:
        fits_somehow = False
        for checkpointing in (False, True):
            for optimizer in ("adamw", "paged-adamw-8bit"):
                try:
                    result = check(entry.hf_id, Request(
                        mode="qlora", seq_len=4096, grad_checkpointing=checkpointing, optimizer=optimizer),
                        machine, alternatives=False, search=False)
                except FitcheckError:
                    continue
                fits_somehow |= result.verdict.status == FITS
        if fits_somehow:
            assert entry.hf_id in listed, entry.hf_id
