"""The download itself (fitcheck.engines.download): what a plan downloads, its size, where it lands,
the free disk there, what fine-tuning saves, and how the disk verdict combines with the memory one."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcheck.engines.download import (
    DISK_DOES_NOT_FIT,
    DISK_FITS,
    DISK_UNKNOWN,
    artifact_for,
    checkpoint_bytes,
    plan_download,
    training_saves,
    with_disk,
)
from fitcheck.estimate.verdict import DOES_NOT_FIT, DOES_NOT_FIT_ON_DISK, FITS, TIGHT, UNKNOWN, Verdict
from fitcheck.model.resolve import resolve_model
from fitcheck.pipeline import check
from fitcheck.plan import resolve
from fitcheck.profiles import load_profile
from fitcheck.request import Request
from fitcheck.storage import DOWNLOAD_DIR, HF_CACHE, LLAMA_CPP, OUTPUT, Place, Storage, profile_storage

GB = 10**9
GiB = 2**30


def _plan(model: str, profile: str = "rtx-4090", **request):
    resolved = resolve_model(model)
    return resolved, resolve(Request(**request), resolved.spec, load_profile(profile))


# Published safetensors totals of the repositories (the Hub's "Files" tab, Dec 2026).
@pytest.mark.parametrize("model, precision, repo, published", [
    ("qwen-7b", None, "Qwen/Qwen2.5-7B-Instruct", 15.23 * GB),
    ("qwen-7b", "awq", "Qwen/Qwen2.5-7B-Instruct-AWQ", 5.58 * GB),
    ("qwen-7b", "q4_k_m", "Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M", 4.68 * GB),   # qwen2.5-7b-instruct-q4_k_m.gguf
    ("llama-3.1-70b", None, "meta-llama/Llama-3.1-70B-Instruct", 141.1 * GB),
    ("gpt-oss-20b", None, "openai/gpt-oss-20b", 13.76 * GB),                    # experts in MXFP4
])
def test_the_download_is_the_checkpoint_or_the_build_the_engine_command_loads(model, precision, repo, published):
    resolved, plan = _plan(model, precision=precision)
    art = artifact_for(resolved, plan)
    assert art.repo == repo and not art.exact and "estimated from" in art.basis
    assert abs(art.bytes - published) / published < 0.03, (art.bytes / GB, published / GB)


def test_load_time_conversions_download_the_checkpoint_as_stored():
    # bitsandbytes int8/nf4 and fp16 of a bf16 checkpoint: transformers converts at load time.
    resolved = resolve_model("qwen-7b")
    base = artifact_for(resolved, _plan("qwen-7b", precision="bf16")[1])
    for precision in ("int8", "nf4", "fp16"):
        art = artifact_for(resolved, _plan("qwen-7b", precision=precision)[1])
        assert (art.key, art.bytes) == (base.key, base.bytes) == ("hf:Qwen/Qwen2.5-7B-Instruct", checkpoint_bytes(
            resolved.spec))
    # QLoRA's nf4 base is the 16-bit checkpoint too.
    assert artifact_for(resolved, _plan("qwen-7b", mode="qlora")[1]).key == base.key


def test_fp8_is_the_prequantized_repository_when_known_else_the_checkpoint():
    from fitcheck.model.catalog import load_catalog

    entry = next(e for e in load_catalog().entries if "fp8" in e.quantized_repos and not e.spec.stored_format)
    resolved = resolve_model(entry.hf_id)
    _, plan = _plan(entry.hf_id, profile="h100-sxm", precision="fp8", engine="vllm")
    assert artifact_for(resolved, plan).repo == entry.quantized_repos["fp8"]
    bare = replace(resolved, entry=replace(entry, quantized_repos={}))
    assert artifact_for(bare, plan).repo == entry.hf_id      # vLLM --quantization fp8 of the checkpoint


def test_a_gguf_build_without_a_known_repository_says_so():
    resolved, plan = _plan("mistral-7b", profile="laptop-16gb")
    art = artifact_for(resolved, plan)
    assert plan.precision == "q4_k_m" and art.repo is None and art.place == LLAMA_CPP and art.format == "GGUF Q4_K_M"


def test_exact_stored_bytes_from_headers_are_used():
    resolved = resolve_model("qwen-7b")
    read = replace(resolved, spec=replace(resolved.spec, stored_weight_bytes=15_231_233_024), source="hub")
    art = artifact_for(read, _plan("qwen-7b")[1])
    assert art.exact and art.bytes == 15_231_233_024 and "headers" in art.basis


def _storage(free: int, *, present=(), output_free: int | None = None, disk_id: str = "d1", out_disk: str = "d1"):
    places = (Place(HF_CACHE, "/cache/hub", free, disk_id), Place(LLAMA_CPP, "/cache/llama.cpp", free, disk_id),
              Place(OUTPUT, "/work", free if output_free is None else output_free, out_disk),
              Place(DOWNLOAD_DIR, "/big", 1000 * GiB, "d9"))
    return Storage(places, tuple(present), looked=True)


def test_free_space_decides_and_a_copy_already_here_downloads_nothing():
    resolved, plan = _plan("qwen-7b")
    fits = plan_download(resolved, plan, _storage(100 * GiB))
    assert fits.status == DISK_FITS and fits.download_bytes == fits.artifact.bytes and fits.place.path == "/cache/hub"
    short = plan_download(resolved, plan, _storage(5 * GiB))
    assert short.status == DISK_DOES_NOT_FIT and "/cache/hub" in short.reason and "5.00 GiB" in short.reason
    here = plan_download(resolved, plan, _storage(1 * GiB, present=[("hf:Qwen/Qwen2.5-7B-Instruct", "/cache/snap")]))
    assert here.status == DISK_FITS and here.download_bytes == 0 and here.present_at == "/cache/snap"
    moved = plan_download(resolved, plan, _storage(5 * GiB), download_dir="/big")
    assert moved.status == DISK_FITS and moved.place.kind == DOWNLOAD_DIR


def test_no_disk_known_is_unknown_and_said_so():
    resolved, plan = _plan("qwen-7b")
    d = plan_download(resolved, plan, profile_storage(load_profile("rtx-4090")))
    assert d.status == DISK_UNKNOWN and d.place is None and "rtx-4090 has no [disk]" in d.reason
    ci = plan_download(resolved, plan, profile_storage(load_profile("github-ubuntu-latest")))
    assert ci.place is not None and ci.place.free_bytes == 14 * GB and ci.status == DISK_DOES_NOT_FIT


def test_training_checkpoints_land_in_the_output_folder_and_share_its_disk():
    resolved, plan = _plan("qwen-7b", mode="lora")
    saves = training_saves(resolved.spec, plan)
    need = checkpoint_bytes(resolved.spec) + saves.total_bytes
    same = plan_download(resolved, plan, _storage(need - 1))                         # one disk: the sum counts
    assert same.status == DISK_DOES_NOT_FIT and "the download and a checkpoint" in same.reason
    other = plan_download(resolved, plan, _storage(need - 1, output_free=10 * GiB, out_disk="d2"))
    assert other.status == DISK_FITS


def test_lora_adapter_size_is_rank_times_in_plus_out_per_module_in_the_adapter_dtype():
    # peft print_trainable_parameters for Llama-2-7B, r=8 on q_proj+v_proj: 4,194,304; fp32 adapters
    # (autocast_adapter_dtype) give adapter_model.safetensors of 16 MiB.
    resolved, plan = _plan("meta-llama/Llama-2-7b-chat-hf", mode="lora", lora_rank=8, lora_targets="q_proj,v_proj")
    saves = training_saves(resolved.spec, plan)
    assert saves.weights_bytes == 4_194_304 * 4
    assert saves.optimizer_bytes == 4_194_304 * 8                                    # AdamW: two fp32 states
    assert "×save_total_limit" in saves.detail


def test_full_fine_tuning_saves_full_weights_and_the_optimizer_states():
    resolved, plan = _plan("qwen-7b", profile="a100-80gb", mode="full", optimizer="adamw-8bit", master_weights="none")
    saves = training_saves(resolved.spec, plan)
    n = resolved.spec.total_params
    assert saves.weights_bytes == 2 * n                    # pure bf16 weights
    assert 2 * n <= saves.optimizer_bytes < 2.01 * n       # two 8-bit states per parameter


def _verdict(status: str) -> Verdict:
    return Verdict(status, (), 0.1, ("GPU0 needs 15 GiB of 24 GiB",) if status != FITS else ())


@pytest.mark.parametrize("memory", [FITS, TIGHT, UNKNOWN])
def test_memory_fits_but_disk_does_not_is_does_not_fit_on_disk_exit_1(memory):
    resolved, plan = _plan("qwen-7b")
    d = plan_download(resolved, plan, _storage(1 * GiB))
    v = with_disk(_verdict(memory), d)
    assert v.status == DOES_NOT_FIT_ON_DISK and v.exit_code == 1
    assert v.reasons[0] == d.reason and v.reasons[1].startswith("memory: ")


def test_a_memory_verdict_that_fails_stays_and_a_disk_that_fits_changes_nothing():
    resolved, plan = _plan("qwen-7b")
    short = plan_download(resolved, plan, _storage(1 * GiB))
    assert with_disk(_verdict(DOES_NOT_FIT), short).status == DOES_NOT_FIT
    roomy = plan_download(resolved, plan, _storage(100 * GiB))
    assert with_disk(_verdict(FITS), roomy).status == FITS


def test_check_offers_smaller_formats_that_fit_on_the_disk():
    machine = load_profile("rtx-4090")
    result = check("qwen-7b", Request(), machine, storage=_storage(6 * GiB))
    assert result.verdict.status == DOES_NOT_FIT_ON_DISK and result.exit_code == 1
    assert result.alternatives
    for alt in result.alternatives:
        assert alt.download is not None and alt.download.download_bytes <= 6 * GiB, alt.title
    assert result.max_context is not None        # the memory's largest context still shows
    assert check("qwen-7b", Request(), machine).verdict.status == FITS   # no storage: the disk is not checked


def test_an_ollama_name_served_by_transformers_downloads_the_base_checkpoint():
    resolved = resolve_model("llama3.1:8b")
    _, plan = _plan("llama3.1:8b", precision="bf16", engine="transformers")
    art = artifact_for(resolved, plan)
    assert art.repo == resolved.entry.hf_id == "meta-llama/Llama-3.1-8B-Instruct" and art.format == "safetensors, bf16"
    assert abs(art.bytes - 16.06 * GB) / (16.06 * GB) < 0.03          # the repository's four shards
    gguf = artifact_for(resolved, _plan("llama3.1:8b")[1])
    assert gguf.place == "ollama" and gguf.format == "GGUF Q4_K_M" and abs(gguf.bytes - 4.92 * GB) < 0.15 * GB


def test_download_dir_on_a_profile_is_its_disk_at_that_folder():
    resolved, plan = _plan("qwen-7b", profile="github-gpu-t4", precision="fp16")
    d = plan_download(resolved, plan, profile_storage(load_profile("github-gpu-t4")), download_dir="/mnt/models")
    assert d.place.path == "/mnt/models" and d.place.free_bytes == 176 * GB and d.status == DISK_FITS


@settings(max_examples=60, deadline=None)
@given(free=st.integers(0, 40 * GiB), present=st.booleans())
def test_the_disk_fits_exactly_when_the_download_is_at_most_the_free_space(free, present):
    resolved, plan = _plan("qwen-7b")
    here = [("hf:Qwen/Qwen2.5-7B-Instruct", "/snap")] if present else []
    d = plan_download(resolved, plan, _storage(free, present=here))
    assert 0 <= d.download_bytes <= d.artifact.bytes and (d.download_bytes == 0) == present
    assert (d.status == DISK_FITS) == (d.download_bytes <= free)
    assert with_disk(_verdict(FITS), d).exit_code == (0 if d.status == DISK_FITS else 1)
