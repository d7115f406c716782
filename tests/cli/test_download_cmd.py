"""`fitcheck MODEL` on this machine says the download: its bytes, where it lands, the free space there
(shutil.disk_usage faked here), a copy already downloaded, and DOES NOT FIT ON DISK; plan files and
--download-dir too.  The disk is read at the edge (fitcheck.probe.disk), never for a --profile."""

from __future__ import annotations

import json
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli

GiB = 2**30
Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def disk(tmp_path, monkeypatch):
    """Empty caches under tmp_path, and a disk_usage whose free space a test sets per folder."""
    hub, llama, ollama, work = (tmp_path / n for n in ("hub", "llama.cpp", "ollama", "work"))
    hub.mkdir()
    work.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("LLAMA_CACHE", str(llama))
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama))
    monkeypatch.chdir(work)
    free: dict[str, int] = {"": 500 * GiB}

    def fake_usage(path):
        best = max((k for k in free if str(path).startswith(k)), key=len)
        return Usage(1000 * GiB, 1000 * GiB - free[best], free[best])

    monkeypatch.setattr(shutil, "disk_usage", fake_usage)
    return tmp_path, free


def run(*args):
    return CliRunner().invoke(cli, list(args))


# --gpu rtx-4090: this machine (its disk) with a known GPU, so the memory verdict is the same everywhere.
GPU = ("--gpu", "rtx-4090")


def test_the_download_line_names_the_bytes_the_place_and_the_free_space(disk):
    tmp, free = disk
    r = run("qwen-7b", *GPU)
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("Download:"))
    assert "14.19 GiB (safetensors, bf16, Qwen/Qwen2.5-7B-Instruct; estimated" in line
    assert f"to {tmp / 'hub'}" in line and line.endswith("500.0 GiB free")
    doc = json.loads(run("qwen-7b", *GPU, "--json").output)["download"]
    assert doc["download_bytes"] == doc["checkpoint_bytes"] > 15 * 10**9 and doc["exact"] is False
    assert doc["download_dir"] == str(tmp / "hub") and doc["disk_free_bytes"] == 500 * GiB
    assert doc["place"] == "hf-cache" and doc["status"] == "fits" and doc["saves"] is None


def test_a_download_larger_than_the_free_space_does_not_fit_on_disk(disk):
    tmp, free = disk
    free[str(tmp / "hub")] = 8 * GiB
    r = run("qwen-7b", *GPU)
    assert r.exit_code == 1, r.output
    assert "Verdict:  DOES NOT FIT ON DISK — the download needs 14.19 GiB on disk at" in r.output
    assert "memory: Fits: GPU0 needs" in r.output                          # both verdicts shown
    assert "does not fit on disk; use --download-dir PATH on a disk with room, or a smaller format" in r.output
    doc = json.loads(run("qwen-7b", *GPU, "--json").output)
    assert doc["verdict"]["status"] == "does_not_fit_on_disk" and doc["exit_code"] == 1
    assert doc["download"]["status"] == "does_not_fit" and doc["download"]["disk_free_bytes"] == 8 * GiB
    assert doc["alternatives"]                                            # smaller formats, each fitting the disk
    for alt in doc["alternatives"]:
        assert alt["download_bytes"] <= 8 * GiB and alt["status"] in ("fits", "tight"), alt["title"]
    taken = run(*json.loads(run("qwen-7b", *GPU, "--json").output)["alternatives"][0]["fitcheck_command"]
                .split()[1:])
    assert taken.exit_code == 0, taken.output                             # its command reproduces it


def test_download_dir_moves_the_download_to_a_disk_with_room(disk):
    tmp, free = disk
    free[str(tmp / "hub")] = 8 * GiB
    big = tmp / "big" / "models"                                          # not there yet: its parent's disk
    big.parent.mkdir()
    free[str(tmp / "big")] = 300 * GiB
    r = run("qwen-7b", *GPU, "--download-dir", str(big))
    assert r.exit_code == 0, r.output
    assert f"to {big} (set HF_HUB_CACHE={big} for the download to land there) — 300.0 GiB free" in r.output
    doc = json.loads(run("qwen-7b", *GPU, "--download-dir", str(big), "--json").output)["download"]
    assert doc["place"] == "download-dir" and doc["download_dir"] == str(big)


def test_a_model_already_in_the_hugging_face_cache_downloads_nothing(disk):
    tmp, free = disk
    free[str(tmp / "hub")] = 1 * GiB
    repo = tmp / "hub" / "models--Qwen--Qwen2.5-7B-Instruct"
    commit = "a" * 40
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for i in (1, 2):
        (snap / f"model-0000{i}-of-00002.safetensors").write_bytes(b"")
    r = run("qwen-7b", *GPU)
    assert r.exit_code == 0, r.output
    assert f"Download: none — already here: {snap} (14.19 GiB, safetensors, bf16)" in r.output
    assert json.loads(run("qwen-7b", *GPU, "--json").output)["download"]["download_bytes"] == 0
    (snap / "model-00002-of-00002.safetensors").unlink()                  # one shard missing: not downloaded yet
    assert run("qwen-7b", *GPU).exit_code == 1


def test_a_gguf_build_lands_in_llama_cpps_cache_and_is_found_there(disk):
    tmp, free = disk
    llama = tmp / "llama.cpp"
    llama.mkdir()
    r = run("qwen-7b", *GPU, "-p", "q4_k_m")
    assert "(GGUF Q4_K_M, Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M; estimated" in r.output and f"to {llama}" in r.output
    (llama / "Qwen_Qwen2.5-7B-Instruct-GGUF_qwen2.5-7b-instruct-q4_k_m.gguf").write_bytes(b"")
    assert "Download: none — already here:" in run("qwen-7b", *GPU, "-p", "q4_k_m").output
    assert "Download: none" not in run("qwen-7b", *GPU, "-p", "q8_0").output


def test_fine_tuning_adds_a_checkpoint_in_the_output_folder(disk):
    tmp, free = disk
    r = run("qwen-7b", *GPU, "--mode", "qlora", "--json")
    doc = json.loads(r.output)["download"]
    saves = doc["saves"]
    assert saves["output_dir"] == str(tmp / "work") and saves["disk_free_bytes"] == 500 * GiB
    assert saves["bytes_per_checkpoint"] == saves["weights_bytes"] + saves["optimizer_bytes"] > 0
    # The disk holds the download but not the download and a checkpoint: does not fit on disk.
    free[""] = doc["download_bytes"] + saves["bytes_per_checkpoint"] // 2
    r = run("qwen-7b", *GPU, "--mode", "qlora")
    assert r.exit_code == 1 and "the download and a checkpoint need" in r.output, r.output
    assert "Saves:" in r.output and "per checkpoint" in r.output


def test_a_profile_without_disk_is_not_checked_and_says_so(disk):
    tmp, free = disk
    free[""] = 1 * GiB                                                    # this machine's disk: not the profile's
    r = run("qwen-7b", "--profile", "rtx-4090", "-v")
    assert r.exit_code == 0, r.output
    assert "— free disk not checked: the profile rtx-4090 has no [disk]" in r.output
    doc = json.loads(run("qwen-7b", "--profile", "rtx-4090", "--json").output)["download"]
    assert doc["disk_free_bytes"] is None and doc["status"] == "unknown" and doc["already_at"] is None


def test_a_profile_with_disk_is_checked_against_it(disk):
    r = run("llama-3.1-70b", "--profile", "github-gpu-t4", "-p", "q2_k", "--device", "cpu")
    assert "to /home/runner —" in r.output, r.output


def test_plan_file_cases_check_the_disk_and_take_download_dir(disk):
    tmp, free = disk
    free[str(tmp / "hub")] = 8 * GiB
    (tmp / "big").mkdir()
    free[str(tmp / "big")] = 300 * GiB
    plan = tmp / "plan.toml"
    plan.write_text(f'[[case]]\nmodel = "qwen-7b"\n[[case]]\nname = "moved"\nmodel = "qwen-7b"\n'
                    f'download_dir = "{tmp / "big"}"\n')
    r = run("check", "--plan", str(plan), *GPU)
    assert r.exit_code == 1, r.output
    first, second = r.output.splitlines()[:2]
    assert first.startswith("DOES NOT FIT ON DISK") and second.startswith("FITS"), r.output


def test_an_unreadable_disk_is_unknown_not_a_crash(disk, monkeypatch):
    def broken(path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(shutil, "disk_usage", broken)
    r = run("qwen-7b", *GPU, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)["download"]
    assert doc["disk_free_bytes"] is None and doc["status"] == "unknown" and "not readable" in doc["reason"]


def test_download_dir_is_an_interactive_answer():
    from fitcheck.cli.interactive_cmd import parse_command

    assert parse_command("download-dir /mnt/models", 0) == ("set", "download_dir", "/mnt/models")


def test_where_does_not_take_download_dir():
    r = run("where", "qwen-7b", "--download-dir", "/x")
    assert r.exit_code == 2 and "--download-dir" in r.output


def test_reading_the_storage_is_bounded(tmp_path, monkeypatch):
    """A huge llama.cpp cache is listed up to MAX_ENTRIES names, never walked."""
    from fitcheck.probe import disk as disk_mod

    llama = tmp_path / "llama"
    llama.mkdir()
    for i in range(30):
        (llama / f"x_{i}.gguf").write_bytes(b"")
    monkeypatch.setattr(disk_mod, "MAX_ENTRIES", 10)
    assert len(disk_mod._names(str(llama))) == 10
    assert disk_mod.nearest_existing(str(Path(tmp_path) / "a" / "b" / "c")) == str(tmp_path)


def test_an_ollama_model_already_pulled_is_found_in_the_store(disk):
    from tests.model.layouts import ollama_store

    tmp, free = disk
    r = run("llama3.1:8b", *GPU)
    assert f"to {tmp / 'ollama'}" in r.output and "Download: none" not in r.output     # not pulled: the store
    store, blob = ollama_store(tmp / "ollama", layers=3, hidden=512, ff=1024, heads=8, kv_heads=4)
    r = run("llama3.1:8b", *GPU)
    assert f"Download: none — already here: {blob}" in r.output, r.output


def test_a_hugging_face_cache_snapshot_gives_exact_bytes_and_config_only_is_not_downloaded(disk, monkeypatch):
    from tests.model.layouts import hub_cache

    tmp, free = disk
    hub_cache(tmp / "hub", "unsloth/Llama-3.2-1B-Instruct", "unsloth--Llama-3.2-1B-Instruct")
    doc = json.loads(run("unsloth/Llama-3.2-1B-Instruct", *GPU, "--json").output)["download"]
    assert doc["exact"] and doc["download_bytes"] == 0 and "/snapshots/" in doc["already_at"]
    assert doc["basis"] == "exact, from the safetensors headers"
    other = tmp / "other"
    other.mkdir()
    hub_cache(other, "unsloth/Llama-3.2-1B-Instruct", "unsloth--Llama-3.2-1B-Instruct", weights=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(other))
    doc = json.loads(run("unsloth/Llama-3.2-1B-Instruct", *GPU, "--json").output)["download"]
    assert doc["already_at"] is None and doc["download_bytes"] == doc["checkpoint_bytes"] > 0 and not doc["exact"]


def test_interactive_this_machine_checks_the_disk_and_download_dir_changes_it(disk):
    tmp, free = disk
    free[str(tmp / "hub")] = 8 * GiB
    (tmp / "big").mkdir()
    free[str(tmp / "big")] = 300 * GiB
    lines = ("qwen-7b", "", "bf16", "", "", "this", f"download-dir {tmp / 'big'}", "quit")
    r = CliRunner().invoke(cli, ["interactive"], input="".join(x + "\n" for x in lines))
    assert r.exit_code == 0, r.output
    first, after = r.output.split("Changed: download-dir", 1)
    assert f"to {tmp / 'hub'}" in first and "only 8.0 GiB free: does not fit on disk" in first
    assert f"to {tmp / 'big'}" in after and "300.0 GiB free" in after
