"""`fitcheck interactive`: questions with defaults and validation, alternatives, changes, quitting.

Driven with CliRunner input=..., and in a real pseudo-terminal with pexpect (the installed program).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.cli.interactive_cmd import Answers, Invalid, apply_alternative, choices, parse_command, validate
from fitcheck.request import Request


def talk(*lines: str):
    return CliRunner().invoke(cli, ["interactive"], input="".join(line + "\n" for line in lines))


def test_bad_answers_are_asked_again_with_the_reason_then_alternatives_and_changes():
    # bf16 named: with the precision left to fitcheck it would answer for the weights that fit (pipeline.Chosen)
    r = talk("qwen7", "qwen-7b", "", "awqq", "bf16", "128k", "1", "rtx-409", "rtx-4090",
             "1", "context 8192", "batch zero", "machine h100-sxm", "quit")
    assert r.exit_code == 0, r.output
    out = r.output
    assert "unknown model 'qwen7' (did you mean: " in out  # close names suggested
    assert "'awqq' is not a precision; choose one of: auto, fp32" in out
    assert "unknown hardware profile 'rtx-409' (did you mean rtx-4090" in out
    first, rest = out.split("Taking 1. ", 1)
    assert "context 131,072 tokens" in first and "DOES NOT FIT" in first and "What fits instead" in first
    assert "Changed: " in rest and "Verdict:  FITS" in rest.split("Changed: context")[0]
    assert "Changed: context 131072 → 8192" in rest
    assert "the batch must be a whole number from 1 to 1,048,576, got 'zero'" in rest
    assert "Changed: machine rtx-4090 → h100-sxm" in rest and "Machine:  h100-sxm" in rest
    assert "Traceback" not in out


def test_end_of_input_exits_0_anywhere():
    assert talk().exit_code == 0
    r = talk("qwen-7b", "inference")
    assert r.exit_code == 0 and "Traceback" not in r.output
    r = talk("qwen-7b", "", "", "", "", "h100-sxm")  # Ctrl-D at the > prompt
    assert r.exit_code == 0 and "Verdict:  FITS" in r.output


def test_what_the_machine_cannot_run_is_a_verdict_with_what_runs():
    r = talk("qwen-7b", "", "awq", "", "", "laptop-8gb", "1", "q")
    assert r.exit_code == 0
    first, rest = r.output.split("Taking 1. ", 1)
    assert "CANNOT RUN HERE — awq with transformers: AWQ kernels need" in first  # CPU-only: no AWQ kernels
    assert "Changed: precision awq → q4_k_m" in rest and "Verdict:  FITS" in rest


def test_a_malformed_combination_asks_for_a_change():
    r = talk("qwen-7b", "", "awq", "", "", "laptop-8gb", "engine llama.cpp", "precision q4_k_m", "q")
    assert r.exit_code == 0
    # refused at entry with the flag's message (exit 2 on the command line), the answers kept as they were
    assert "  llama.cpp does not load awq checkpoints" in r.output and "Changed: engine" not in r.output
    assert "Changed: precision awq → q4_k_m" in r.output and "FITS" in r.output


def test_mode_choices_come_from_the_vocabulary():
    from fitcheck.cli.check_cmd import check

    assert choices("mode") == ("inference", "full", "lora", "qlora")
    assert tuple(next(p for p in check.params if p.name == "mode").type.choices) == choices("mode")
    r = talk("qwen-7b", "lora", "", "2048", "", "h100-sxm", "q")
    assert "Mode (inference, full, lora, qlora) [inference]: " in r.output
    assert "Sequence length, tokens [2048]: " in r.output
    assert "Request:  lora fine-tuning" in r.output  # the same table as `fitcheck check --mode lora ...`
    assert r.exit_code == 0


def test_parse_command():
    assert parse_command(" q ", 0) == ("quit",)
    assert parse_command("2", 3) == ("alternative", 1)
    assert parse_command("context 8192", 0) == ("set", "context", "8192")
    assert parse_command("precision=awq", 0) == ("set", "precision", "awq")
    assert parse_command("machine rtx-4090", 0) == ("set", "machine", "rtx-4090")
    for bad, needle in (("4", "between 1 and 3"), ("colour red", "not an answer"), ("context", "give a value")):
        with pytest.raises(Invalid, match=needle):
            parse_command(bad, 3)
    with pytest.raises(Invalid, match=r"no alternatives to pick \(it fits as asked\)"):
        parse_command("1", 0)
    with pytest.raises(Invalid, match="nothing found fits; change an answer"):  # after DOES NOT FIT, none found
        parse_command("2", 0, runs=False)


def test_validate_and_apply_alternative():
    assert validate("context", "32k") == 32768 and validate("precision", "AWQ") == "awq"
    assert validate("machine", "This") == "this" and validate("model", "llama3-8b") == "llama3-8b"
    with pytest.raises(Invalid, match="from 1 to 1,073,741,824"):
        validate("context", "0")

    class Alt:  # an alternative carries its whole request (typed), not strings to parse
        request = Request(engine="llama.cpp", precision="q4_k_m", gpu_layers=42)

    a = apply_alternative(Answers(request=Request(precision="bf16")), Alt())
    assert (a.request.engine, a.request.precision, a.request.gpu_layers) == ("llama.cpp", "q4_k_m", 42)
    assert a.changes_from(Answers()) == ["precision auto → q4_k_m", "engine auto → llama.cpp", "gpu-layers auto → 42"]


def test_plain_fitcheck_off_a_terminal_prints_help():
    r = CliRunner().invoke(cli, [])
    assert r.exit_code == 0 and "Commands" in r.output and "interactive" in r.output


# --- a real pseudo-terminal ---------------------------------------------------------------------
pexpect = pytest.importorskip("pexpect")


def _program() -> list[str]:
    exe = Path(sys.executable).parent / "fitcheck"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "fitcheck"]


def _spawn(*args: str):
    cmd = _program() + list(args)
    env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "200"}
    # a suite started as a background job of a shell without job control inherits SIGINT ignored (bash: "asynchronous
    # commands ignore SIGINT"), and so would the child; a user's terminal delivers it, as here
    return pexpect.spawn(cmd[0], cmd[1:], env=env, encoding="utf-8", timeout=20, dimensions=(50, 200),
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_in_a_pty_answer_change_and_ctrl_d():
    child = _spawn("interactive")
    child.expect_exact("Model (a catalog name")
    child.sendline("mistral-7b")
    for _ in range(3):  # mode, precision, context: defaults
        child.expect_exact("]: ")
        child.sendline("")
    child.expect_exact("Batch (concurrent sequences) [1]: ")
    child.sendline("")
    child.expect_exact("Machine (this")
    child.sendline("rtx-3060")
    child.expect_exact("Verdict:  ")
    child.expect_exact("> ")
    child.sendline("precision q4_k_m")
    child.expect_exact("Changed: precision auto → q4_k_m")
    child.expect_exact("Verdict:  FITS")
    child.expect_exact("> ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "Traceback" not in child.before


def test_in_a_pty_plain_fitcheck_starts_it_and_ctrl_c_exits_130():
    child = _spawn()
    child.expect_exact("fitcheck interactive")
    child.expect_exact("[qwen-7b]: ")
    time.sleep(0.5)  # the prompt is written before the read starts: let a loaded machine reach it
    child.sendintr()
    child.expect(pexpect.EOF, timeout=60)
    child.close()
    assert child.exitstatus == 130, child.before
    assert "Traceback" not in child.before


def test_training_mode_alternatives_can_be_picked():
    r = talk("qwen-7b", "lora", "", "2048", "", "rtx-4090", "1", "q")
    assert r.exit_code == 0, r.output
    first, rest = r.output.split("Taking 1. Turn on gradient checkpointing", 1)
    assert "DOES NOT FIT" in first and "What fits instead" in first and "no alternatives" not in first
    assert "Changed: grad-checkpointing auto → on" in rest and "checkpointing on" in rest
    assert "Verdict:  TIGHT" in rest and "Traceback" not in r.output


def test_training_answers_and_alternatives():
    from fitcheck.pipeline import check
    from fitcheck.profiles import load_profile

    a = Answers().with_answer("mode", "lora").with_answer("context", 2048)
    req = a.request
    assert (req.mode, req.seq_len, req.precision, req.grad_checkpointing) == ("lora", 2048, None, None)
    result = check("qwen-7b", req, load_profile("rtx-4090"))
    assert result.alternatives
    for alt in result.alternatives:  # every training alternative applies, and reproduces its plan
        b = apply_alternative(a, alt)
        plan = check("qwen-7b", b.request, load_profile("rtx-4090")).plan
        assert plan.with_changes(assumptions=()) == alt.plan.with_changes(assumptions=()), alt.title

    # Changing the mode keeps the answers that apply to both and resets the others.
    full = Answers(request=Request(mode="lora", lora_rank=8, batch=4)).with_answer("mode", "full")
    assert (full.request.mode, full.request.batch, full.request.lora_rank) == ("full", 4, 16)
    b = Answers(request=Request(mode="lora")).with_answer("context", "1585")
    assert b.request.seq_len == "1585" or b.request.seq_len == 1585
    assert validate("grad_checkpointing", "on") is True and validate("zero", "3") == 3
    assert validate("optimizer", "ADAMW-8bit") == "adamw-8bit"
    with pytest.raises(Invalid, match="on or off"):
        validate("grad_checkpointing", "maybe")
    assert parse_command("checkpointing on", 0) == ("set", "grad_checkpointing", "on")


# ---- answers validated by the rules the flags follow --------------------------------------------------
def test_training_questions_say_micro_batch_and_take_the_cli_default_length():
    from fitcheck.options import DEFAULTS

    r = talk("qwen-7b", "lora", "", "", "", "rtx-4090", "q")
    assert r.exit_code == 0, r.output
    assert "concurrent sequences" not in r.output.split("Machine (")[0]  # the micro-batch in training
    assert "Micro-batch (" in r.output
    assert f"Sequence length, tokens [{DEFAULTS['seq_len']}]" in r.output  # the CLI's --seq-len default
    assert "sequence 2,048 tokens" in r.output and DEFAULTS["seq_len"] == 2048
    inference = talk("qwen-7b", "", "", "", "", "rtx-4090", "q").output
    assert f"Context length, tokens (prompt + generated) [{DEFAULTS['context']}]" in inference
    assert "Batch (concurrent sequences) [1]" in inference


def test_more_gpus_than_the_profile_has_are_refused_with_the_flags_message():
    r = talk("qwen-7b", "", "", "", "", "rtx-4090", "gpus 2", "context 2048", "gpus auto", "q")
    assert r.exit_code == 0, r.output
    flag = CliRunner().invoke(cli, ["qwen-7b", "--profile", "rtx-4090", "--gpus", "2"]).output
    assert "--gpus 2, but rtx-4090 has 1 GPU" in flag
    assert "not changed: --gpus 2, but rtx-4090 has 1 GPU; `gpus auto` runs here" in r.output
    assert "Changed: gpus" not in r.output  # refused: the answers stay as they were
    assert "Changed: context 4096 → 2048" in r.output and "CANNOT RUN" not in r.output


def test_gpu_layers_is_listed_echoed_under_its_option_name_and_refused_where_the_flag_is():
    r = talk("qwen-7b", "", "", "", "", "rtx-4090", "gpu-layers 10", "ngl 12", "mode lora", "gpu-layers 5", "q")
    assert r.exit_code == 0, r.output
    assert "gpu-layers" in r.output.split("Next: ")[1].split(";")[1]  # in the field list
    assert "Changed: gpu-layers auto → 10" in r.output and "Changed: gpu-layers 10 → 12" in r.output
    assert "gpu_layers" not in r.output
    flag = CliRunner().invoke(cli, ["qwen-7b", "--mode", "lora", "--gpu-layers", "5", "--profile", "rtx-4090"])
    assert flag.exit_code == 2
    assert "  --gpu-layers applies to inference, not --mode lora" in r.output.split("Changed: mode")[1]


def test_what_a_cpu_machine_cannot_run_is_refused_at_entry():
    r = talk("qwen-7b", "", "", "", "", "laptop-16gb", "precision awq", "engine vllm", "machine rtx-4090",
             "precision awq", "machine laptop-16gb", "q")
    assert r.exit_code == 0, r.output
    out = r.output
    assert "not changed: awq with transformers: AWQ kernels need an NVIDIA GPU (CUDA) or an AMD GPU (ROCm); " \
           "here: the CPU; `precision auto` runs here" in out
    assert "not changed: vLLM need" in out and "`engine auto` runs here" in out
    assert "Changed: precision q4_k_m → awq" in out or "Changed: precision auto → awq" in out  # on the GPU
    # back to the CPU machine with awq: refused, saying which answer to change
    assert out.rstrip().endswith(">") and "`precision auto` runs here" in out.split("Changed: precision")[-1]
    assert "Machine:  rtx-4090" in out.split("Changed: precision")[-1]


# ---- sharding, where training has several GPUs or nodes -----------------------------------------------
def test_training_on_several_gpus_asks_fsdp_then_zero():
    from fitcheck.options import BY_NAME, FSDP_MODES

    r = talk("llama-3.1-8b", "full", "", "2048", "", "8x-h100", "full-shard", "q")
    assert r.exit_code == 0, r.output
    assert f"{BY_NAME['fsdp'].question} [none]" in r.output
    assert all(m in BY_NAME["fsdp"].question for m in FSDP_MODES)
    assert "DeepSpeed ZeRO stage" not in r.output  # FSDP chosen: no ZeRO question
    assert "FSDP" in r.output.split("Shard over the GPUs")[1] and "Traceback" not in r.output
    z = talk("llama-3.1-8b", "full", "", "2048", "", "8x-h100", "", "3", "q")
    assert z.exit_code == 0, z.output
    assert f"{BY_NAME['zero'].question} [none]" in z.output and "ZeRO-3" in z.output
    bad = talk("llama-3.1-8b", "full", "", "2048", "", "8x-h100", "fully", "hybrid-shard", "none", "q")
    assert "is not a fsdp; choose one of: auto, " + ", ".join(FSDP_MODES) in bad.output


def test_sharding_is_not_asked_on_one_gpu_nor_for_inference():
    one = talk("qwen-7b", "lora", "", "2048", "", "rtx-4090", "q").output
    assert "FSDP" not in one.split("Verdict")[0] and "ZeRO stage" not in one
    serve = talk("llama-3.1-8b", "", "", "", "", "8x-h100", "q").output
    assert "Shard over the GPUs" not in serve


def test_training_after_a_gguf_alternative_falls_back_to_a_training_base():
    # Taking llama.cpp's GGUF alternative, then `mode lora`, was refused ("--precision q4_k_m is not a lora
    # base") and left the session in inference: a GGUF type is no training base, so the mode change takes the
    # precision back to auto (the plan's default for the machine), and says so.
    r = talk("qwen-7b", "", "bf16", "16384", "", "rtx-3060", "3", "mode lora", "mode qlora", "q")
    assert r.exit_code == 0, r.output
    taken, rest = r.output.split("Taking 3. Run a GGUF q4_k_m build", 1)[1].split("Changed: mode inference → lora", 1)
    assert "Changed: precision bf16 → q4_k_m; engine auto → llama.cpp" in taken
    assert "is not a lora base" not in r.output
    assert rest.startswith("; precision q4_k_m → auto")
    # the inference answers lora does not take are said once as reset, with what they were (not "context → 4096")
    assert rest.startswith("; precision q4_k_m → auto; reset (not for lora): context 16384, engine llama.cpp\n"), rest
    lora, qlora = rest.split("Changed: mode lora → qlora", 1)
    assert "Request:  lora fine-tuning, bf16 base" in lora
    assert "Request:  qlora fine-tuning, nf4 base" in qlora and "Traceback" not in r.output
    # a precision the new mode takes is kept (awq is a QLoRA base), one it does not is reset
    awq = Answers(request=Request(precision="awq", engine="vllm"))
    assert awq.with_answer("mode", "qlora").request.precision == "awq"
    assert awq.with_answer("mode", "lora").request.precision is None
    assert Answers(request=Request(mode="lora", precision="bf16")).with_answer("mode", "full").request.precision \
        == "bf16"
