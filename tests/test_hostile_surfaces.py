"""The readers and writers added since the first hostile battery: bounded like the rest (issue: hostile input on
the new surfaces).  Each case is a file or value a user could meet; none may hang, blow up or mislead."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.errors import FitcheckError
from fitcheck.measure import receipts
from fitcheck.model import hf_cache

GOOD = {"schema": receipts.SCHEMA, "measured": {"peak_bytes": 5 * 2**20}, "estimated": {"peak_bytes": 6 * 2**20},
        "error_pct": 20.0, "date": "2026-12-03T10:00:00Z", "model": "m", "request": {}, "status": "measured"}


@pytest.mark.parametrize("bad", [{"peak_bytes": "x"}, {"peak_bytes": True}, {"peak_bytes": -1},
                                 {"peak_bytes": 2**70}], ids=["string", "bool", "negative", "exabytes"])
def test_a_receipt_with_a_peak_that_is_no_byte_count_is_skipped(tmp_path, bad):
    path = tmp_path / "receipts.jsonl"
    lines = [json.dumps(GOOD), json.dumps({**GOOD, "measured": bad}), json.dumps({**GOOD, "error_pct": "nan"}),
             '{"schema": "fitcheck.receipt/1", "measured": {"peak_bytes": NaN}}',
             '{"schema": "fitcheck.receipt/1", "measured": {"peak_bytes": ' + "9" * 400 + "}}",
             "[" * 5000 + "]" * 5000]
    path.write_text("\n".join(lines) + "\n")
    assert list(receipts.read(path)) == [GOOD]
    assert "+20.0 %" in receipts.receipt_line(GOOD)


def test_receipts_that_are_no_regular_file_or_too_large_are_bounded(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert list(receipts.read(fifo)) == []                      # refused, never waited on
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    assert list(receipts.read(zero)) == []
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as fh:                              # 2 GiB without a newline
        fh.truncate(2 * 2**30)
    assert list(receipts.read(sparse)) == []
    big = tmp_path / "big.jsonl"                                # more than the cap: the newest receipts kept
    line = json.dumps(GOOD) + "\n"
    with open(big, "w") as fh:
        fh.write(json.dumps({**GOOD, "model": "oldest"}) + "\n")
        fh.write(line * (receipts.MAX_FILE_BYTES // len(line) + 10))
    read = list(receipts.read(big))
    assert read and all(r["model"] == "m" for r in read)
    with pytest.raises(OSError, match="not a regular file"):
        receipts.append(GOOD, fifo)


def test_hf_cache_names_that_leave_the_cache_and_refs_that_are_fifos(tmp_path):
    assert hf_cache.repo_id_from_folder("models--..--..") is None
    assert hf_cache.repo_id_from_folder("models--Qwen--Qwen2.5-7B") == "Qwen/Qwen2.5-7B"
    folder = tmp_path / "models--Qwen--Qwen2.5-0.5B"
    (folder / "refs").mkdir(parents=True)
    (folder / "snapshots" / ("a" * 40)).mkdir(parents=True)
    (folder / "snapshots" / ("a" * 40) / "config.json").write_text("{}")
    os.mkfifo(folder / "refs" / "main")
    repo = hf_cache.find_snapshot(folder, "Qwen/Qwen2.5-0.5B")     # the FIFO ref is skipped: newest snapshot
    assert repo is not None and repo.ref is None
    with pytest.raises(FitcheckError, match="5,000 characters"):
        hf_cache.find_snapshot(folder, "Qwen/Qwen2.5-0.5B", "r" * 5000)
    outside = tmp_path / "elsewhere" / "models--x--y"
    (outside / "snapshots" / ("b" * 40)).mkdir(parents=True)
    (outside / "snapshots" / ("b" * 40) / "config.json").write_text("{}")
    (tmp_path / "models--x--y").symlink_to(outside)
    assert [r.repo_id for r in hf_cache.cached_models(tmp_path)] == ["Qwen/Qwen2.5-0.5B"]


@pytest.mark.parametrize("var", ["HF_HOME", "OLLAMA_MODELS", "XDG_CACHE_HOME", "FITCHECK_CACHE_DIR"])
def test_a_path_variable_no_system_call_could_take_is_one_line(var, monkeypatch):
    monkeypatch.setenv(var, "/tmp/" + "x" * 5000)
    res = CliRunner().invoke(cli, ["qwen-7b", "--profile", "rtx-4090"])
    assert res.exit_code == 2 and f"${var} is 5,005 characters long" in res.output


def test_probe_save_never_claims_a_write_it_did_not_make(tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for target in ("/dev/null", str(fifo)):
        res = CliRunner().invoke(cli, ["probe", "--profile", "rtx-4090", "--save", target])
        assert res.exit_code == 2 and "Saved profile" not in res.output and "not a regular file" in res.output


@pytest.mark.parametrize("kind", ["file", "fifo", "device", "proc", "file-parent"])
def test_a_download_dir_that_is_not_a_writable_folder_is_said_to_be_so(tmp_path, kind):
    target = {"file": tmp_path / "f", "fifo": tmp_path / "p", "device": Path("/dev/null"), "proc": Path("/proc"),
              "file-parent": tmp_path / "f" / "sub"}[kind]
    (tmp_path / "f").write_text("")
    os.mkfifo(tmp_path / "p")
    res = CliRunner().invoke(cli, ["qwen-7b", "--download-dir", str(target)])
    assert res.exit_code == 2 and "GiB free" not in res.output and "--download-dir" in res.output


@pytest.mark.parametrize("flag", ["--kwh-price", "--amortize-years", "--hours-per-day", "--headroom"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_number_option_is_finite(flag, value):
    res = CliRunner().invoke(cli, ["qwen-7b", "--profile", "rtx-4090", flag, value])
    assert res.exit_code == 2, res.output


def test_symlink_loops_in_a_model_folder_are_one_line(tmp_path):
    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "config.json").symlink_to("a")
    (loop / "a").symlink_to("config.json")
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                                                     "num_attention_heads": 2, "intermediate_size": 128,
                                                     "vocab_size": 100}))
    (shards / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "model-1.safetensors"}}))
    (shards / "model-1.safetensors").symlink_to("model-2.safetensors")
    (shards / "model-2.safetensors").symlink_to("model-1.safetensors")
    for folder in (loop, shards):
        res = CliRunner().invoke(cli, [str(folder), "--profile", "rtx-4090"])
        assert res.exit_code == 2 and "symlink loop" in res.output, res.output
