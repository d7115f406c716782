"""`fitcheck models --fits`: every listed model re-checks as fitting with its own command, nothing
that fits is left out, the JSON rows keep their keys, and the list answers "what should I run here?":
ranked by score (fitcheck.search.fit_score), cut by --top and --min-speed."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

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
from fitcheck.search.fit_score import READING_TOKENS_PER_S
from fitcheck.search.fits import models_that_fit, rank_rows, select_entries

ROW_KEYS = {"id", "family", "params", "active_params", "precision", "engine", "device", "status", "need_bytes",
            "free_bytes", "decode_tokens_per_s", "training_tokens_per_s", "fitcheck_command", "change", "reason",
            "score", "checkpoint_known"}
SCORE_KEYS = {"total", "capability", "quality", "speed", "margin", "effective_params", "tokens_per_s"}
RANKING_KEYS = {"sort", "top", "min_speed", "fitting", "left_out_by_min_speed", "left_out_by_top"}


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
    doc = fits_json("--profile", "rtx-4090", "--family", "qwen", "--sort", "params", "--top", "0")
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
    assert r.output.splitlines()[2].split()[:4] == ["model", "score", "params", "runs"]
    for args, word in [(("models", "--context", "8192"), "--fits"),
                       (("models", "--top", "5"), "--top"),
                       (("models", "--min-speed", "10"), "--min-speed"),
                       (("models", "--fits", "--sort", "name"), "name"),
                       (("models", "--fits", "--top", "-1"), "-1"),
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


# ---- "what should I run here?": the score, --sort, --top, --min-speed ---------------------------------------
LAPTOP = ("--profile", "rtx-4060-laptop")


@pytest.fixture(scope="module")
def laptop_all() -> dict:
    return fits_json(*LAPTOP, "--top", "0")


def table_rows(output: str) -> list[str]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("-----")) + 1
    return lines[start:lines.index("", start)]


@pytest.mark.parametrize("profile", ["rtx-4060-laptop", "rtx-4090"])
def test_the_default_lists_the_twenty_best_by_score(profile):
    doc = fits_json("--profile", profile)
    fitting = doc["ranking"]["fitting"]
    assert fitting > 20
    assert doc["ranking"] == {"sort": "score", "top": 20, "min_speed": None, "fitting": fitting,
                              "left_out_by_min_speed": 0, "left_out_by_top": fitting - 20}
    assert len(doc["models"]) == 20
    # ranked by the score shown (a whole number), the best first, and none left out scores higher
    result = models_that_fit(load_profile(profile), Request())
    shown = [round(r.score.total) for r in result.fitting]
    assert shown == sorted(shown, reverse=True)
    assert [r["id"] for r in doc["models"]] == [r.model.id for r in result.fitting[:20]]
    table = run("models", "--fits", "--profile", profile)
    assert len(table_rows(table.output)) == 20
    assert f"{fitting - 20} more fit: --top 0 lists them all." in table.output
    assert "Ranked by score" in table.output


def test_the_laptop_list_no_longer_starts_with_a_slow_2bit_40b_model(laptop_all):
    top = fits_json(*LAPTOP)["models"]
    first = top[0]
    assert first["precision"] != "q2_k" and first["decode_tokens_per_s"]["low"] >= READING_TOKENS_PER_S
    # every one of the first ten reads along; the old first rows (2- and 3-bit 34-46B models at 2.7-9 tok/s) are not
    # among them
    assert all(r["decode_tokens_per_s"]["low"] >= READING_TOKENS_PER_S for r in top[:10])
    assert not {"tiiuae/falcon-40b", "mistralai/Mixtral-8x7B-Instruct-v0.1", "01-ai/Yi-34B-Chat"} & {r["id"] for r in top}
    assert all(r["score"]["total"] >= top[0]["score"]["total"] - 1 for r in top[:5])
    slow = next(r for r in laptop_all["models"] if r["id"] == "tiiuae/falcon-40b")
    assert slow["precision"] == "q2_k" and slow["score"]["total"] < first["score"]["total"] / 5


def test_sort_params_gives_the_old_order(laptop_all):
    doc = fits_json(*LAPTOP, "--sort", "params", "--top", "0")
    rows = doc["models"]
    assert len(rows) == doc["ranking"]["fitting"] == laptop_all["ranking"]["fitting"]
    assert [r["params"] for r in rows] == sorted((r["params"] for r in rows), reverse=True)
    assert [r["id"] for r in rows[:4]] == ["mistralai/Mixtral-8x7B-Instruct-v0.1", "mistralai/Mixtral-8x7B-v0.1",
                                           "tiiuae/falcon-40b", "tiiuae/falcon-40b-instruct"]
    assert "Ranked by parameter count" in run("models", "--fits", *LAPTOP, "--sort", "params").output


def test_min_speed_drops_the_slow_rows(laptop_all):
    doc = fits_json(*LAPTOP, "--min-speed", "10", "--top", "0")
    slow = {r["id"] for r in laptop_all["models"] if r["decode_tokens_per_s"]["low"] < 10}
    assert "tiiuae/falcon-40b" in slow and "mistralai/Mixtral-8x7B-Instruct-v0.1" in slow
    assert [r["id"] for r in doc["models"]] == [r["id"] for r in laptop_all["models"] if r["id"] not in slow]
    assert doc["ranking"]["min_speed"] == 10 and doc["ranking"]["left_out_by_min_speed"] == len(slow)
    table = run("models", "--fits", *LAPTOP, "--min-speed", "10", "--top", "0").output
    assert f"{len(slow)} more fit below --min-speed 10 tok/s." in table and "--top 0 lists" not in table
    none = run("models", "--fits", *LAPTOP, "--min-speed", "10000").output
    assert "No model that fits here decodes at --min-speed 10000 tok/s." in none


def test_top_5(laptop_all):
    doc = fits_json(*LAPTOP, "--top", "5")
    assert [r["id"] for r in doc["models"]] == [r["id"] for r in laptop_all["models"][:5]]
    assert doc["ranking"]["left_out_by_top"] == laptop_all["ranking"]["fitting"] - 5
    out = run("models", "--fits", *LAPTOP, "-n", "5").output
    assert len(table_rows(out)) == 5
    assert f"{laptop_all['ranking']['fitting'] - 5} more fit: --top 0 lists them all." in out
    assert laptop_all["ranking"]["left_out_by_top"] == 0
    assert "more fit: --top 0" not in run("models", "--fits", *LAPTOP, "--top", "0").output


def test_all_still_lists_what_does_not_fit_after_the_top_rows(laptop_all):
    out = run("models", "--fits", *LAPTOP, "--top", "3", "--all").output
    rows = table_rows(out)
    assert len(rows) == 3 + len(laptop_all["not_fitting"])
    assert all(r.split()[-1] in ("fits", "tight") for r in rows[:3])
    assert not any(r.split()[-1] in ("fits", "tight") for r in rows[3:])


def test_json_carries_the_score_and_its_parts(laptop_all):
    for row in laptop_all["models"]:
        s = row["score"]
        assert set(s) == SCORE_KEYS
        assert s["total"] == pytest.approx(100 * s["capability"] * s["quality"] * s["speed"] * s["margin"], abs=0.06)
        assert s["tokens_per_s"] == pytest.approx(row["decode_tokens_per_s"]["low"], abs=0.01)   # batch 1
        assert s["effective_params"] <= row["params"]
    assert all(r["score"] is None for r in laptop_all["not_fitting"])
    assert set(laptop_all["ranking"]) == RANKING_KEYS
    # per sequence: a batch of 4 shares the decode
    batch = fits_json("--profile", "rtx-4090", "--family", "qwen", "--batch", "4", "--top", "3")
    for row in batch["models"]:
        assert row["score"]["tokens_per_s"] == pytest.approx(row["decode_tokens_per_s"]["low"] / 4, abs=0.01)
    # training: no reading speed, the speed is not scored
    training = fits_json("--profile", "rtx-4090", "--mode", "qlora", "--family", "llama", "--top", "3")
    assert len(training["models"]) == 3
    assert all(r["score"]["speed"] is None and r["score"]["tokens_per_s"] is None for r in training["models"])


def test_sort_speed_puts_unknown_speeds_last_and_min_speed_keeps_them():
    machine = load_profile("rtx-4060-laptop")
    entries = tuple(get_entry(i) for i in SAMPLE)
    result = models_that_fit(machine, Request(), entries=entries, sort="speed")
    speeds = [r.speed for r in result.fitting]
    assert len(speeds) >= 3 and None not in speeds and speeds == sorted(speeds, reverse=True)
    unknown = replace(result.fitting[0], decode_tokens_per_s=None)
    rows = rank_rows([unknown, *result.rows[1:]], "speed")
    fitting = [r for r in rows if r.fits]
    assert fitting[-1] is unknown and rows.index(unknown) == len(fitting) - 1
    cut = replace(result, rows=tuple(rows), min_speed=1e6)
    assert cut.listed == (unknown,) and cut.left_out_by_min_speed == len(fitting) - 1
    assert unknown.score is not None and unknown.score.tokens_per_s is None


def test_sort_size_puts_the_largest_memory_first():
    result = models_that_fit(load_profile("rtx-4090"), Request(), entries=select_entries("qwen"), sort="size")
    sizes = [r.need_in_all for r in result.fitting]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]
