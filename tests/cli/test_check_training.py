"""`fitcheck MODEL --mode full|lora|qlora`: exit codes, the JSON contract for training, commands."""

import json

import pytest
from click.testing import CliRunner
from test_check_cmd import ALT_KEYS, ESTIMATE_KEYS, REQUEST_KEYS, VERDICT_KEYS

from fitcheck.cli import cli

# Training adds these request keys (additive to the inference contract).
TRAINING_REQUEST_KEYS = {"seq_len", "grad_accum", "effective_batch", "compute_dtype", "optimizer", "master_weights",
                         "grad_checkpointing", "attention", "lora_rank", "lora_targets", "lora_train_embeddings",
                         "zero", "fsdp", "offload"}


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_training_json_contract():
    r = run("qwen-7b", "--mode", "full", "--profile", "rtx-4090", "--json")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output)
    assert doc["schema"] == "fitcheck.check/1"
    assert set(doc["request"]) == REQUEST_KEYS | TRAINING_REQUEST_KEYS
    assert doc["request"]["mode"] == "full" and doc["request"]["seq_len"] == 2048
    assert set(doc["estimate"]) == ESTIMATE_KEYS
    assert set(doc["verdict"]) == VERDICT_KEYS
    comps = doc["estimate"]["components"]
    for name in ("weights", "gradients", "optimizer_states", "master_weights", "activations", "logits", "overhead"):
        assert name in comps and isinstance(comps[name], int)
    assert doc["alternatives"] and set(doc["alternatives"][0]) == ALT_KEYS
    for alt in doc["alternatives"]:
        assert alt["fitcheck_command"].startswith("fitcheck ") and "--mode" in alt["fitcheck_command"]
        assert alt["engine_command"].startswith("accelerate launch")


def test_qlora_fits_on_a_24gb_card_exit_0():
    r = run("qwen-7b", "--mode", "qlora", "--grad-checkpointing", "--profile", "rtx-4090")
    assert r.exit_code == 0, r.output
    assert "FITS" in r.output and "adapters" in r.output
    assert "Largest that fits: sequence" in r.output


def test_alternatives_rerun_as_they_say():
    r = run("qwen-7b", "--mode", "full", "--profile", "rtx-4090", "--json")
    alt = json.loads(r.output)["alternatives"][0]
    args = alt["fitcheck_command"].split()[1:]
    again = run(*args, "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["estimate"]["total_bytes"] == alt["total_bytes"]


def test_sharding_alternative_on_a_multi_gpu_machine():
    r = run("qwen-7b", "--mode", "full", "--grad-checkpointing", "--profile", "8x-h100", "--json")
    doc = json.loads(r.output)
    assert r.exit_code == 1, r.output
    titles = " ".join(a["title"] for a in doc["alternatives"])
    assert "ZeRO" in titles or "FSDP" in titles


def test_zero3_offload_reports_ram():
    r = run("qwen-7b", "--mode", "full", "--zero", "3", "--offload", "optimizer+params", "--grad-checkpointing",
            "--profile", "a100-80gb", "--json")
    assert r.exit_code in (0, 1), r.output
    devices = json.loads(r.output)["estimate"]["devices"]
    assert [d["kind"] for d in devices] == ["gpu", "cpu"]


def test_unknown_free_memory_exits_3(tmp_path):
    profile = tmp_path / "m.toml"
    profile.write_text(
        'schema = "fitcheck.machine/1"\nname = "mystery"\nkind = "desktop"\n'
        '[memory]\ntotal_gib = 64\navailable_gib = 60\n'
        '[cpu]\nmodel = "x"\narchitecture = "x86_64"\nlogical_cores = 8\nphysical_cores = 4\n'
        '[[gpus]]\nvendor = "nvidia"\nname = "Mystery"\nmemory_total_gib = 24\ncompute_capability = "8.9"\n'
        '[gpus.unknown]\nmemory_free_bytes = "not readable"\n'
    )
    r = run("qwen-0.5b", "--mode", "qlora", "--profile", str(profile))
    assert r.exit_code == 3, r.output
    assert "UNKNOWN" in r.output


@pytest.mark.parametrize("args, needle", [
    (["qwen-7b", "--mode", "lora", "--precision", "nf4"], "precision"),
    (["qwen-7b", "--mode", "full", "--offload", "optimizer"], "zero"),
    (["qwen-7b", "--mode", "full", "--zero", "2", "--fsdp", "full-shard"], "fsdp"),
    (["qwen-7b", "--mode", "lora", "--lora-targets", "nope_proj"], "lora"),
    (["qwen-7b", "--mode", "lora", "--seq-len", "0"], "seq-len"),
])
def test_bad_training_input_exit_2(args, needle):
    r = run(*args, "--profile", "rtx-4090")
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert needle.lower() in r.output.lower()


def test_training_speed_line_and_json_section():
    r = CliRunner().invoke(cli, ["qwen-7b", "--mode", "lora", "--seq-len", "1024", "--profile", "l4", "-v"])
    line = next(ln for ln in r.output.splitlines() if ln.startswith("Speed:"))
    assert "tok/s training" in line and "121 TFLOPS" in line and "one step of 1,024 tokens" in line
    doc = json.loads(CliRunner().invoke(cli, ["qwen-7b", "--mode", "lora", "--seq-len", "1024", "--grad-accum", "4",
                                             "--profile", "l4", "--json"]).output)
    speed = doc["speed"]
    assert speed["tokens_per_step"] == 4096
    rate, step = speed["training_tokens_per_s"], speed["step_seconds"]
    # the step is the effective batch's tokens at the rate's two ends
    assert step["low"] == pytest.approx(4096 / rate["high"], rel=1e-2)
    assert step["high"] == pytest.approx(4096 / rate["low"], rel=1e-2)
    # LoRA: 4 × matmul params FLOPs per token, at 30–50 % of the L4's 121 TFLOPS
    assert rate["high"] == pytest.approx(121e12 * 0.5 / speed["flops_per_token"], rel=1e-3)


def test_a_gpu_without_bf16_trains_at_its_fp16_peak():
    # a T4 (cc 7.5): fine-tuning computes in fp16, whose tensor peak (65 TFLOP/s) its profile gives
    doc = json.loads(CliRunner().invoke(cli, ["mistral-7b", "--mode", "qlora", "--profile", "t4", "--json"]).output)
    speed = doc["speed"]
    assert speed["peak_tflops"] == 65
    assert speed["training_tokens_per_s"]["high"] == pytest.approx(65e12 * 0.5 / speed["flops_per_token"], rel=1e-3)


def test_training_speed_unknown_without_a_peak_says_why():
    r = CliRunner().invoke(cli, ["qwen2.5-0.5b", "--mode", "lora", "--profile", "github-ubuntu-latest"])
    line = next(ln for ln in r.output.splitlines() if ln.startswith("Speed:"))
    assert line.startswith("Speed:    unknown (the bf16 peak FLOP/s of")
