"""Training on the CPU (`--mode full|lora` on a machine without GPU, or `--device cpu`).

The plan, the refusals of what only GPUs do, the CLI, the JSON document, the alternatives and the
commands they print.
"""

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.commands import engine_command, fitcheck_command
from fitcheck.errors import FitcheckError
from fitcheck.estimate.verdict import DOES_NOT_FIT, FITS, Verdict
from fitcheck.model.resolve import resolve_model
from fitcheck.pipeline import Evaluator
from fitcheck.plan import resolve_training
from fitcheck.profiles import load_profile
from fitcheck.request import Request
from fitcheck.search.alternatives import find_alternatives

NO_GPU = "github-ubuntu-latest"
GPU = "rtx-4090"
GPU_ONLY_FLAGS = ("--gpus", "--zero", "--fsdp", "--offload", "qlora", "adamw-8bit")


def run(*args):
    return CliRunner().invoke(cli, list(args))


def spec(name="qwen2.5-0.5b"):
    return resolve_model(name).spec


def request_for(**kw):
    return Request(**{"mode": "lora", **kw})


def plan_for(profile=NO_GPU, model="qwen2.5-0.5b", **kw):
    return resolve_training(request_for(**kw), spec(model), load_profile(profile))


def training_fitcheck_command(model, request, profile=None):
    return fitcheck_command((model,), request, profile=profile)


def assumption(plan, name):
    return next((a for a in plan.assumptions if a.name == name), None)


# ---- resolve_training --------------------------------------------------------------------------
def test_no_gpu_machine_trains_on_the_cpu():
    plan = plan_for(NO_GPU)
    assert plan.device == "cpu"
    assert plan.gpus == 1 and plan.framework == "single"  # one process
    assert plan.compute_capability is None
    dev = assumption(plan, "device")
    assert (dev.value, dev.why, dev.option) == ("cpu", "no GPU on this machine", "--device")
    prec = assumption(plan, "precision")
    assert (prec.value, prec.why) == ("bf16", "CPU training: bf16 assumed")
    assert assumption(plan, "gpus") is None          # no GPU count to assume on the CPU
    assert "GPU" not in assumption(plan, "batch").why


def test_device_cpu_on_a_gpu_machine():
    plan = plan_for(GPU, device="cpu")
    assert plan.device == "cpu" and plan.compute_capability is None
    dev = assumption(plan, "device")
    assert (dev.value, dev.why) == ("cpu", "from --device")
    assert assumption(plan, "precision").why == "CPU training: bf16 assumed"


def test_auto_on_a_gpu_machine_stays_on_the_gpu():
    plan = plan_for(GPU)
    assert plan.device == "gpu" and plan.compute_capability == 8.9
    dev = assumption(plan, "device")
    assert (dev.value, dev.why) == ("gpu", "a GPU is present")
    assert assumption(plan, "gpus").value == "1"
    assert plan_for(GPU, device="gpu").device == "gpu"


def test_full_fp32_is_allowed_on_the_cpu():
    plan = plan_for(NO_GPU, mode="full", precision="fp32")
    assert (plan.device, plan.precision, plan.compute_dtype) == ("cpu", "fp32", "fp32")


def test_device_gpu_without_a_gpu_cannot_run_here():
    assert plan_for(NO_GPU, device="gpu").problems == (f"--device gpu needs a GPU, but {NO_GPU} has none "
                                                       "(no GPU in this profile)",)


def test_unknown_device_is_bad_input():
    with pytest.raises(FitcheckError, match="'tpu' is not one of: auto, gpu, cpu"):
        plan_for(GPU, device="tpu")


CPU_REFUSALS = [
    ({"mode": "qlora"}, "QLoRA"),
    ({"zero": 2}, "--zero 2"),
    ({"fsdp": "full-shard"}, "--fsdp full-shard"),
    ({"zero": 2, "offload": "optimizer"}, "--zero 2"),
    ({"zero": 3, "offload": "optimizer+params"}, "--zero 3"),
    ({"attention": "flash"}, "flash"),
    ({"optimizer": "adamw-8bit"}, "adamw-8bit"),
    ({"optimizer": "paged-adamw-8bit"}, "paged-adamw-8bit"),
    ({"precision": "int8"}, "int8"),
]


@pytest.mark.parametrize("kw, what", CPU_REFUSALS, ids=lambda v: str(v) if isinstance(v, dict) else None)
@pytest.mark.parametrize("profile, device, why", [(NO_GPU, "auto", f"{NO_GPU} has no GPU"),
                                                  (GPU, "cpu", "--device cpu")])
def test_gpu_only_options_cannot_run_on_the_cpu(kw, what, profile, device, why):
    """A verdict (cannot run here, exit 1), not bad input: the plan names the reason."""
    problems = " ".join(plan_for(profile, device=device, **kw).problems)
    assert what in problems and why in problems


def test_contradictory_options_are_still_bad_input():
    with pytest.raises(FitcheckError, match="--offload needs DeepSpeed ZeRO"):
        plan_for(NO_GPU, offload="optimizer")
    with pytest.raises(FitcheckError, match="pick one"):
        plan_for(GPU, device="cpu", gpus=2)
    assert "--gpus 2 needs a GPU" in plan_for(NO_GPU, gpus=2).problems[0]


def test_the_same_options_still_resolve_on_a_gpu():
    assert plan_for(GPU, mode="qlora").precision == "nf4"
    assert plan_for(GPU, attention="flash").attention == "flash"
    assert plan_for(GPU, optimizer="adamw-8bit").device == "gpu"
    assert plan_for("2x-rtx-3090", gpus=2, zero=2).zero == 2
    assert not any(plan_for(GPU, **kw).problems for kw, _ in CPU_REFUSALS)


# ---- the CLI -----------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [
    ["--mode", "qlora"],
    ["--mode", "lora", "--zero", "2"],
    ["--mode", "lora", "--fsdp", "full-shard"],
    ["--mode", "lora", "--zero", "2", "--offload", "optimizer"],
    ["--mode", "lora", "--gpus", "2"],
    ["--mode", "lora", "--attention", "flash"],
    ["--mode", "full", "--optimizer", "adamw-8bit"],
    ["--mode", "lora", "--device", "gpu"],
])
def test_cli_what_the_cpu_cannot_run_is_a_verdict_with_what_runs(args):
    r = run("qwen2.5-0.5b", *args, "--profile", NO_GPU)
    assert r.exit_code == 1, r.output
    assert "Verdict:  CANNOT RUN HERE" in r.output and "What runs here instead" in r.output
    assert "Traceback" not in r.output


def test_cli_malformed_training_options_exit_2_with_one_line():
    r = run("qwen2.5-0.5b", "--mode", "lora", "--offload", "optimizer", "--profile", NO_GPU)
    assert r.exit_code == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fitcheck: ") and "ZeRO" in lines[0], r.stderr


def test_cli_qlora_on_the_cpu_suggests_lora():
    r = run("qwen2.5-0.5b", "--mode", "qlora", "--device", "cpu", "--profile", GPU)
    assert r.exit_code == 1
    assert "QLoRA" in r.output and "--mode lora" in r.output


def test_cli_lora_without_a_gpu_answers_for_the_cpu():
    r = run("qwen2.5-0.5b", "--mode", "lora", "--profile", NO_GPU, "-v")
    assert r.exit_code in (0, 1), r.output
    request = next(line for line in r.output.splitlines() if line.startswith("Request:"))
    assert "on the CPU" in request and "GPU" not in request
    assert "device cpu (no GPU on this machine, --device)" in r.output
    assert "even quantized or offloaded" not in r.output   # inference wording


def test_cli_lora_without_a_gpu_is_judged_against_ram():
    r = run("qwen2.5-0.5b", "--mode", "lora", "--profile", NO_GPU, "-v")
    assert r.exit_code in (0, 1), r.output
    assert "needs 1 GPUs" not in r.output
    assert "CPU (RAM)" in r.output and "GPU0" not in r.output


def test_cli_device_is_a_training_option_now():
    r = run("qwen2.5-0.5b", "--mode", "lora", "--device", "cpu", "--profile", GPU, "-v")
    assert r.exit_code in (0, 1), r.output
    assert "applies to inference" not in r.output
    assert "on the CPU" in r.output and "device cpu (from --device, --device)" in r.output
    r = run("qwen2.5-0.5b", "--mode", "lora", "--gpu-layers", "4", "--profile", GPU)
    assert r.exit_code == 2 and "--gpu-layers applies to inference" in r.stderr


def test_cli_gpu_training_is_unchanged_apart_from_the_device_assumption():
    r = run("qwen2.5-0.5b", "--mode", "lora", "--profile", GPU, "-v")
    assert r.exit_code == 0, r.output
    request = next(line for line in r.output.splitlines() if line.startswith("Request:"))
    assert "bf16 base, 1 GPU," in request
    assert "device gpu (a GPU is present, --device)" in r.output and "gpus 1 (one GPU, --gpus)" in r.output


def test_cli_nothing_fits_on_the_cpu_is_worded_for_training():
    r = run("qwen2.5-7b", "--mode", "full", "--profile", "laptop-8gb")
    assert r.exit_code == 1, r.output
    assert "Nothing fits on laptop-8gb, even with LoRA, gradient checkpointing or a shorter sequence" in r.output
    assert "quantized or offloaded" not in r.output


def test_json_for_a_cpu_plan():
    gpu_doc = json.loads(run("qwen2.5-0.5b", "--mode", "lora", "--profile", GPU, "--json").output)
    r = run("qwen2.5-0.5b", "--mode", "lora", "--profile", NO_GPU, "--json")
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.output)
    assert set(doc) == set(gpu_doc)
    assert set(doc["request"]) == set(gpu_doc["request"])        # the same contract as on a GPU
    assert doc["request"]["device"] == "cpu" and doc["request"]["gpus"] == 0
    assert doc["request"]["mode"] == "lora" and doc["request"]["attention"] == "sdpa"
    assert {"name": "device", "value": "cpu", "why": "no GPU on this machine", "option": "--device"} \
        in doc["estimate"]["assumptions"]


def test_json_devices_of_a_cpu_plan_are_the_cpu():
    doc = json.loads(run("qwen2.5-0.5b", "--mode", "lora", "--profile", NO_GPU, "--json").output)
    assert [(d["device"], d["kind"]) for d in doc["estimate"]["devices"]] == [("cpu", "cpu")]
    assert [d["kind"] for d in doc["verdict"]["devices"]] == ["cpu"]


# ---- alternatives ------------------------------------------------------------------------------
def _recording_evaluator(plan, machine):
    """Every candidate fits except the plan itself; remembers every plan the search asked about."""
    asked = []
    real = Evaluator(spec(), machine)

    def evaluate(request):
        out = real(request)
        if out is None:
            return None
        asked.append(out.plan)
        same = out.plan.with_changes(assumptions=()) == plan.with_changes(assumptions=())
        return replace(out, verdict=Verdict(DOES_NOT_FIT if same else FITS, (), 0.1))

    return evaluate, asked


def _alternatives(profile, **kw):
    request = request_for(**kw)
    plan = resolve_training(request, spec(), load_profile(profile))
    evaluate, asked = _recording_evaluator(plan, load_profile(profile))
    return find_alternatives(spec(), request, plan, load_profile(profile), evaluate), asked


def _gpu_only(p) -> list[str]:
    return [what for what, bad in (("gpus", p.gpus > 1), ("zero", p.zero is not None), ("fsdp", p.fsdp is not None),
                                   ("offload", p.offload != "none"), ("qlora", p.mode == "qlora"),
                                   ("8-bit optimizer", "8bit" in p.optimizer), ("flash", p.attention == "flash"),
                                   ("gpu", p.device != "cpu")) if bad]


@pytest.mark.parametrize("profile, device", [(NO_GPU, "auto"), ("2x-rtx-3090", "cpu")])
@pytest.mark.parametrize("mode", ["full", "lora"])
def test_cpu_alternatives_never_consider_gpu_only_changes(profile, device, mode):
    alts, asked = _alternatives(profile, mode=mode, device=device, batch=4, lora_rank=16)
    assert alts and len(asked) > 3
    assert [(_gpu_only(p), p) for p in asked if _gpu_only(p)] == []
    for a in alts:
        assert not _gpu_only(a.plan)
        keys = {k for k, _ in a.changes}
        assert not keys & {"gpus", "zero", "fsdp", "offload", "optimizer"}
        cmd = training_fitcheck_command("qwen2.5-0.5b", a.request, profile=profile)
        assert ("--device cpu" in cmd) == (device == "cpu")
        assert not [flag for flag in GPU_ONLY_FLAGS if flag in cmd], cmd
        engine = engine_command("Qwen/Qwen2.5-0.5B-Instruct", a.plan)
        assert engine.startswith("accelerate launch --cpu --num_processes 1 ") and "use_cpu=True" in engine
        assert "BitsAndBytesConfig" not in engine and "deepspeed" not in engine


def test_cpu_alternatives_keep_what_applies_on_the_cpu():
    alts, _ = _alternatives(NO_GPU, mode="full", batch=4)
    kinds = {k for a in alts for k, _ in a.changes}
    assert {"grad_checkpointing", "batch"} <= kinds and "mode" not in kinds  # --mode is the user's


def test_gpu_alternatives_still_offer_gpu_levers():
    # The recorder sees the GPU-only candidates on a GPU plan: the CPU test above can fail.
    _, asked = _alternatives("2x-rtx-3090", mode="full")
    found = {what for p in asked for what in _gpu_only(p)}
    assert {"gpus", "zero", "fsdp", "offload", "qlora", "8-bit optimizer", "gpu"} <= found


def test_cli_cpu_alternatives_carry_device_cpu():
    r = run("qwen2.5-1.5b", "--mode", "full", "--device", "cpu", "--profile", "rtx-4060-laptop", "--json")
    doc = json.loads(r.output)
    assert r.exit_code == 1 and doc["alternatives"]
    for alt in doc["alternatives"]:
        assert "--device cpu" in alt["fitcheck_command"]
        assert not [flag for flag in GPU_ONLY_FLAGS if flag in alt["fitcheck_command"]]
        assert alt["engine_command"].startswith("accelerate launch --cpu ")
        assert [d["device"] for d in alt["devices"]] == ["cpu"]


# ---- commands ----------------------------------------------------------------------------------
def test_commands_of_a_cpu_plan():
    request = request_for(device="cpu", grad_checkpointing=True, precision="bf16")
    plan = plan_for(GPU, device="cpu", mode="lora", grad_checkpointing=True)
    cmd = training_fitcheck_command("qwen2.5-0.5b", request, profile=GPU)
    assert cmd == ("fitcheck qwen2.5-0.5b --mode lora --precision bf16 --device cpu --grad-checkpointing "
                   "--profile rtx-4090")
    engine = engine_command("Qwen/Qwen2.5-0.5B-Instruct", plan)
    assert engine.startswith("accelerate launch --cpu --num_processes 1 --mixed_precision bf16 ")
    assert "TrainingArguments(" in engine and "use_cpu=True" in engine


def test_commands_of_a_gpu_plan_do_not_mention_the_cpu():
    plan = plan_for(GPU, mode="lora")
    assert "--device" not in training_fitcheck_command("qwen2.5-0.5b", request_for(precision="bf16"))
    engine = engine_command("Qwen/Qwen2.5-0.5B-Instruct", plan)
    assert engine.startswith("accelerate launch --num_processes 1 ") and "use_cpu" not in engine


def test_interactive_answers_pass_the_device_to_training():
    from fitcheck.cli.interactive_cmd import Answers

    lora = Answers().with_answer("mode", "lora")
    assert lora.with_answer("device", "cpu").request.device == "cpu"
    assert lora.request.device == "auto" and lora.request.mode == "lora"
