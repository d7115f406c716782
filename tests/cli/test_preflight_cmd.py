"""CI preflight at the CLI: --require, --format github, --output, --plan, containers (action.yml: test_action.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli

ROOT = Path(__file__).resolve().parents[2]
GIB = 1024**3


def run(*args, env=None):
    return CliRunner().invoke(cli, list(args), env=env)


def test_requirements_alone_met_failed_unknown_malformed():
    r = run("check", "--profile", "2x-rtx-3090", "--require", "gpus>=2", "--require", "vram>=24GiB",
            "--require", "cc>=8.6")
    assert r.exit_code == 0, r.output
    assert r.output.count(": met (") == 3
    r = run("check", "--profile", "2x-rtx-3090", "--require", "vram>=25GiB", "--require", "gpus>=4")
    assert r.exit_code == 1
    assert "vram>=25GiB: FAILED (total memory of the smallest visible GPU: 24.00 GiB)" in r.output
    assert "gpus>=4: FAILED (visible GPUs: 2)" in r.output
    r = run("check", "--profile", "rtx-4090", "--require", "cuda>=12.1")
    assert r.exit_code == 3 and "cuda>=12.1: cannot tell, driver CUDA version is unknown" in r.output
    r = run("check", "--profile", "rtx-4090", "--require", "cuda>=12.1", "--require", "gpus>=2")
    assert r.exit_code == 1  # a known failure beats an unknown
    r = run("check", "qwen-7b", "--require", "vram>=24")
    assert r.exit_code == 2 and "no unit" in r.output and r.output.count("\n") == 1


def test_model_or_plan_is_needed_but_not_both(tmp_path):
    r = run("check")
    assert r.exit_code == 2 and "missing MODEL" in r.output
    plan = tmp_path / "p.toml"
    plan.write_text("[[case]]\nmodel = 'qwen-7b'\n")
    r = run("check", "qwen-7b", "--plan", str(plan))
    assert r.exit_code == 2 and "not both" in r.output


def test_requirement_failure_fails_a_fitting_model():
    r = run("qwen-7b", "--profile", "h100-sxm", "--require", "gpus>=8")
    assert r.exit_code == 1 and "FITS" in r.output and "gpus>=8: FAILED (visible GPUs: 1)" in r.output


def test_github_format_annotations_summary_and_output_file(tmp_path):
    summary, out = tmp_path / "summary.md", tmp_path / "fitcheck.json"
    summary.write_text("earlier step\n")
    r = run("check", "llama-3.1-70b", "--profile", "rtx-4090", "--strict", "--format", "github",
            "--require", "ram>=1GiB", "--output", str(out), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    assert "DOES NOT FIT" in r.output  # the table, for the log
    errors = [line for line in lines if line.startswith("::error title=fitcheck%3A meta-llama/Llama-3.1-70B-Instruct does not fit")]
    assert len(errors) == 1 and "but only 23.99 GiB" in errors[0] and "Fits instead" in errors[0]
    text = summary.read_text()
    assert text.startswith("earlier step\n### ❌ fitcheck: meta-llama/Llama-3.1-70B-Instruct does not fit on rtx-4090")
    assert "| `ram>=1GiB` |" in text
    doc = json.loads(out.read_text())
    assert doc["schema"] == "fitcheck.check/1" and doc["verdict"]["status"] == "does_not_fit"


def test_json_alias_and_format_json_agree(tmp_path):
    a = run("qwen-7b", "--profile", "rtx-3060", "--json")
    b = run("qwen-7b", "--profile", "rtx-3060", "--format", "json", "--output", str(tmp_path / "o.json"))
    strip = lambda doc: {k: v for k, v in doc.items() if k != "fitcheck_version"}
    assert a.exit_code == b.exit_code
    assert strip(json.loads(a.output)) == strip(json.loads(b.output)) == strip(json.loads((tmp_path / "o.json").read_text()))


PLAN = """
[defaults]
profile = "rtx-4090"

[[case]]
name = "chat"
model = "qwen-7b"
precision = "awq"
batch = 8

[[case]]
model = "llama-3.1-70b"
precision = "bf16"

[[case]]
name = "laptop"
model = "qwen-0.5b"
profile = "laptop-8gb"
"""


def test_plan_one_line_per_case_exit_1_if_any_fails(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    summary = tmp_path / "s.md"
    r = run("check", "--plan", str(plan), "--format", "github", "--output", str(tmp_path / "o.json"),
            env={"GITHUB_STEP_SUMMARY": str(summary), "NO_COLOR": ""})
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("FITS ") and "chat: " in lines[0] and "awq" in lines[0] and "on rtx-4090" in lines[0]
    assert lines[1].startswith("DOES NOT FIT ") and "llama-3.1-70b" in lines[1]
    assert lines[2].startswith("FITS ") and "on laptop-8gb" in lines[2]
    assert lines[3] == f"2 of 3 cases pass ({plan})"
    assert sum(line.startswith("::error ") for line in lines) == 1
    assert "\x1b[" not in r.output  # no colour off a terminal
    assert "2 of 3 cases pass" in summary.read_text()
    doc = json.loads((tmp_path / "o.json").read_text())
    assert doc["schema"] == "fitcheck.plan/1" and doc["exit_code"] == 1
    assert [c["exit_code"] for c in doc["cases"]] == [0, 1, 0]
    assert doc["cases"][0]["check"]["request"]["precision"] == "awq"


def test_plan_that_fits_exits_0_and_json(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text("[[case]]\nmodel = 'qwen-7b'\nprofile = 'h100-sxm'\n[[case]]\nmodel = 'qwen-7b'\n"
                    "profile = 'h100-sxm'\ncontext = 8192\n")
    r = run("check", "--plan", str(plan), "--json")
    assert r.exit_code == 0, r.output
    assert [c["check"]["request"]["context"] for c in json.loads(r.output)["cases"]] == [4096, 8192]


def test_malformed_plan_exit_2_one_line(tmp_path):
    plan = tmp_path / "bad.toml"
    plan.write_text("[[case]]\nmodel = 'qwen-7b'\ncontext = 'long'\n")
    r = run("check", "--plan", str(plan))
    assert r.exit_code == 2, r.output
    assert str(plan) in r.output and "case 1 (qwen-7b): field 'context' must be a whole number" in r.output
    assert r.output.count("\n") == 1


@pytest.mark.parametrize("text, needle", [
    ("[[case]]\nmodel = 'qwen-7bxyz'\n", "case 1 (qwen-7bxyz): unknown model"),
    ("[[case]]\nmodel = 'qwen-7b'\nprofile = 'no-such-box'\n", "case 1 (qwen-7b): field 'profile': unknown hardware profile"),
])
def test_a_malformed_case_stops_the_plan_before_any_case_runs(tmp_path, text, needle):
    plan = tmp_path / "bad.toml"
    plan.write_text(text + "[[case]]\nmodel = 'qwen-7b'\nprofile = 'h100-sxm'\n")
    r = run("check", "--plan", str(plan))
    assert r.exit_code == 2, r.output
    (error,) = r.output.splitlines()   # one line, and the valid case did not run
    assert error.startswith(f"fitcheck: {plan}: ") and needle in error


def test_every_malformed_case_is_reported_in_one_go(tmp_path):
    plan = tmp_path / "bad.toml"
    plan.write_text("[[case]]\nname = 'ok'\nmodel = 'qwen-7b'\nprofile = 'h100-sxm'\n"
                    "[[case]]\nname = 'typo'\nmodel = 'qwen-7b'\ncontex = 8192\nbatch = 0\n"
                    "[[case]]\nmodel = 'qwen-7bxyz'\n"
                    "[[case]]\nname = 'box'\nmodel = 'qwen-7b'\nprofile = 'rtx-4909'\n"
                    "[[case]]\nname = 'lora'\nmodel = 'qwen-7b'\nmode = 'lora'\ncontext = 4096\n"
                    "[[case]]\nname = 'clash'\nmodel = 'qwen-7b'\nengine = 'vllm'\ngpu_layers = 10\n"
                    "profile = 'rtx-4090'\n")
    r = run("check", "--plan", str(plan), "--format", "github")
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.startswith("fitcheck: ")]
    assert lines[0] == f"fitcheck: {plan}: case 2 (typo): unknown field 'contex' (did you mean 'context'?)"
    assert lines[1].startswith(f"fitcheck: {plan}: case 2 (typo): field 'batch' must be a whole number >= 1")
    assert f"{plan}: case 3 (qwen-7bxyz): unknown model" in lines[2]
    assert f"{plan}: case 4 (box): field 'profile': unknown hardware profile" in lines[3] and "rtx-4090" in lines[3]
    assert f"{plan}: case 5 (lora): " in lines[4] and "context" in lines[4]
    assert f"{plan}: case 6 (clash): " in lines[5] and "gpu" in lines[5]
    assert lines[6] == f"fitcheck: {plan}: 6 errors, no case was run" and len(lines) == 7
    assert not any(line.startswith(("FITS", "DOES NOT FIT")) for line in r.output.splitlines())  # nothing ran
    assert sum(line.startswith("::error ") for line in r.output.splitlines()) == 6


def test_plans_run_training_and_cannot_run_cases_as_verdicts(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text("[[case]]\nmodel = 'qwen-7b'\nmode = 'qlora'\nprofile = 'rtx-4090'\ngrad_checkpointing = true\n"
                    "[[case]]\nmodel = 'qwen-7b'\nprecision = 'awq'\nprofile = 'macbook-air-m3-16gb'\n"
                    "[[case]]\nmodel = 'qwen-7b'\nprofile = 'h100-sxm'\n")
    r = run("check", "--plan", str(plan), "--json")
    doc = json.loads(r.output)
    assert r.exit_code == 1 and [c["exit_code"] for c in doc["cases"]] == [0, 1, 0]
    assert doc["cases"][0]["check"]["request"]["mode"] == "qlora"
    assert doc["cases"][1]["check"]["verdict"]["status"] == "cannot_run"
    assert doc["cases"][1]["check"]["alternatives"]


def test_in_a_container_the_cgroup_limit_and_cuda_visible_devices_decide(tmp_path, monkeypatch):
    """A host with 2 A100s and 32 GiB RAM, seen from a container limited to 4 GiB and GPU 1."""
    import fitcheck.probe
    from fitcheck.probe import nvidia

    monkeypatch.syspath_prepend(str(ROOT / "tests" / "probe"))
    from fake_nvml import FakeNvml, a100_80gb

    files = {
        "proc/self/cgroup": "0::/\n",
        "proc/meminfo": "MemTotal: 33554432 kB\nMemAvailable: 31457280 kB\n",
        "sys/fs/cgroup/cgroup.controllers": "memory\n",
        "sys/fs/cgroup/memory.max": str(4 * GIB),
        "sys/fs/cgroup/memory.current": "0",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    fake = FakeNvml([a100_80gb(0, "GPU-aaaaaaaa-0000-1111-2222-333344445555"),
                     a100_80gb(1, "GPU-bbbbbbbb-0000-1111-2222-333344445555")])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(nvidia, "_nvml_library_present", lambda: True)
    monkeypatch.setattr(nvidia, "_state", {"module": None, "error": None, "done": False})
    monkeypatch.setattr(fitcheck.probe, "probe", partial(fitcheck.probe.probe, root=str(tmp_path)))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")

    r = run("check", "--require", "gpus>=2", "--require", "ram>=8GiB", "--require", "cuda>=12.1",
            "--require", "vram>=80GB")
    assert r.exit_code == 1, r.output
    assert "gpus>=2: FAILED (visible GPUs: 1)" in r.output
    assert "ram>=8GiB: FAILED (RAM available (cgroup-aware): 4.00 GiB)" in r.output
    assert "cuda>=12.1: met" in r.output and "vram>=80GB: met" in r.output
    r = run("qwen-7b", "--device", "cpu", "--json")
    doc = json.loads(r.output)
    assert "4.0 GiB RAM available" in doc["machine"]["summary"]
    assert [d["free_bytes"] for d in doc["verdict"]["devices"]] == [4 * GIB]


def test_github_format_in_training_mode_shows_training_commands(tmp_path):
    summary, out = tmp_path / "summary.md", tmp_path / "fitcheck.json"
    r = run("qwen-7b", "--mode", "qlora", "--seq-len", "8192", "--profile", "rtx-4090", "--format", "github",
            "--output", str(out),
            env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.exit_code == 1, r.output
    doc = json.loads(out.read_text())
    commands = [a["fitcheck_command"] for a in doc["alternatives"]]
    assert commands and all("--mode qlora" in c for c in commands)
    (error,) = [line for line in r.output.splitlines() if line.startswith("::error ")]
    assert commands[0] in error and "--context" not in error and "--engine" not in error
    text = summary.read_text()
    assert all(f"`{c}`" in text for c in commands) and "--context" not in text


def test_plain_json_loads_no_github_or_plan_modules():
    code = ("import sys\nfrom click.testing import CliRunner\nfrom fitcheck.cli import cli\n"
            "r = CliRunner().invoke(cli, ['qwen-7b', '--profile', 'rtx-4090', '--json'])\n"
            "assert r.exit_code == 0, r.output\n"
            "print(sorted(m for m in sys.modules if m.startswith('fitcheck.preflight')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    loaded = set(eval(out))
    assert loaded.isdisjoint({"fitcheck.preflight.github", "fitcheck.preflight.lines", "fitcheck.preflight.run",
                              "fitcheck.preflight.plan_file"}), loaded


def test_output_file_records_requirements_with_measured_values_and_the_exit_code(tmp_path):
    out = tmp_path / "o.json"
    r = run("qwen-7b", "--profile", "h100-sxm", "--require", "gpus>=8", "--require", "vram>=40GiB",
            "--output", str(out))
    assert r.exit_code == 1, r.output
    doc = json.loads(out.read_text())
    assert doc["verdict"]["status"] == "fits" and doc["verdict"]["exit_code"] == 0
    assert doc["exit_code"] == 1  # the command's outcome: a requirement failed
    gpus, vram = doc["requirements"]
    assert (gpus["requirement"], gpus["status"], gpus["measured"]) == ("gpus>=8", "failed", 1)
    assert vram["status"] == "ok" and vram["measured"] > 40 * GIB and "GiB" in vram["shown"]
    r = run("qwen-7b", "--profile", "h100-sxm", "--json")
    doc = json.loads(r.output)
    assert doc["requirements"] == [] and doc["exit_code"] == r.exit_code == 0


def test_summary_headline_shows_the_steps_real_outcome(tmp_path):
    """A model that fits but a --require that fails: the step fails, and the headline says so."""
    summary = tmp_path / "s.md"
    r = run("qwen-7b", "--profile", "h100-sxm", "--require", "gpus>=8", "--format", "github",
            env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.exit_code == 1
    head = summary.read_text().splitlines()[0]
    assert head.startswith("### ❌ fitcheck: Qwen/Qwen2.5-7B-Instruct fits on h100-sxm")
    assert "1 requirement failed" in head
    summary.unlink()
    r = run("qwen-7b", "--profile", "h100-sxm", "--require", "gpus>=1", "--format", "github",
            env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.exit_code == 0
    assert summary.read_text().startswith("### ✅ fitcheck: Qwen/Qwen2.5-7B-Instruct fits on h100-sxm\n")
    summary.unlink()
    r = run("qwen-7b", "--profile", "rtx-4090", "--require", "cuda>=12.1", "--format", "github",
            env={"GITHUB_STEP_SUMMARY": str(summary)})
    text = summary.read_text()
    assert r.exit_code == 3 and text.startswith("### ❔ ") and "requirement unknown" in text


@pytest.mark.parametrize("text, args, field", [
    # review: a machine that cannot be loaded was always "field 'profile'", wherever it came from
    ("[[case]]\nmodel = 'qwen-7b'\nprofile = 'no-such-box'\n", (), "case 1 (qwen-7b): field 'profile': unknown"),
    ("[defaults]\nprofile = 'no-such-box'\n[[case]]\nmodel = 'qwen-7b'\n", (),
     "case 1 (qwen-7b): [defaults] field 'profile': unknown"),
    ("[[case]]\nmodel = 'qwen-7b'\n", ("--profile", "no-such-box"), "case 1 (qwen-7b): --profile: unknown"),
    ("[[case]]\nmodel = 'qwen-7b'\nprofile = 'rtx-4090'\n", ("--gpu", "no-such-gpu"),
     "case 1 (qwen-7b): --gpu: --gpu 'no-such-gpu': no such GPU"),
])
def test_a_machine_that_cannot_be_loaded_names_the_field_the_user_wrote(tmp_path, text, args, field):
    plan = tmp_path / "plan.toml"
    plan.write_text(text)
    r = run("check", "--plan", str(plan), *args)
    assert r.exit_code == 2, r.output
    (error,) = r.output.splitlines()
    assert error.startswith(f"fitcheck: {plan}: {field}"), error
