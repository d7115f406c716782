"""What a new user's trial of the CLI found: each test is one finding, failing before its fix."""

import json
import re

from click.testing import CliRunner

from fitcheck.cli import cli


def run(*args, **kwargs):
    return CliRunner().invoke(cli, list(args), **kwargs)


def test_verdict_names_the_fullest_gpu_of_a_layer_split():
    # transformers' layer split puts more layers on GPU1..5 than on GPU0 (embeddings) and GPU7 (lm_head):
    # the headline must name the GPU closest to its limit, not GPU0's smaller need.
    r = run("qwen-7b", "--profile", "8x-h100", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    devices = doc["verdict"]["devices"]
    fullest = max(devices, key=lambda d: d["need_bytes"] / d["free_bytes"])
    assert fullest["device"] != "gpu0"
    assert doc["verdict"]["summary"] == f"Fits: {fullest['reason']}"
    text = run("qwen-7b", "--profile", "8x-h100").output
    line = next(li for li in text.splitlines() if li.startswith("Verdict:"))
    assert re.search(rf"— {fullest['device'].upper()} needs {fullest['need_bytes'] / 2**30:.2f} GiB", line), line


def test_vllm_bf16_below_compute_capability_8_cannot_run_and_is_never_offered():
    # vLLM raises "Bfloat16 is only supported on GPUs with compute capability of at least 8.0" on a T4
    # (7.5): a verdict (exit 1, the reason, what runs), and no alternative may print that command.
    r = run("qwen-7b", "--precision", "bf16", "--engine", "vllm", "--profile", "t4")
    assert r.exit_code == 1, r.output
    assert "CANNOT RUN HERE — bf16 with vllm: vLLM's bf16 kernels need compute capability >= 8 (this GPU: 7.5)" \
        in r.output
    assert "KV pool: 0 tokens" not in r.output     # no pool figures for a request that cannot start
    doc = json.loads(run("qwen-7b", "--precision", "bf16", "--profile", "t4", "--json").output)
    assert doc["alternatives"]
    for alt in doc["alternatives"]:
        assert not ("--precision bf16" in alt["fitcheck_command"] and "--engine vllm" in alt["fitcheck_command"]), alt
    # fp16, what vLLM's message says to use instead, still runs there
    assert run("qwen-0.5b", "--precision", "fp16", "--engine", "vllm", "--profile", "t4").exit_code == 0


def test_cannot_run_reason_is_grammatical_for_a_singular_engine():
    r = run("qwen-7b", "--engine", "vllm", "--profile", "macbook-air-m3-16gb")
    assert r.exit_code == 1, r.output
    assert "vLLM needs an NVIDIA GPU (CUDA) or an AMD GPU (ROCm)" in r.output
    assert "KV pool" not in r.output
