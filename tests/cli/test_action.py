"""action.yml, run the way a GitHub runner runs a composite action: each step's ``run`` with bash,
the inputs in environment variables, $GITHUB_OUTPUT, $GITHUB_STEP_SUMMARY and $RUNNER_TEMP set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fitcheck.preflight.action import OUTPUTS, ActionInputError, build_command, step_outputs

ROOT = Path(__file__).resolve().parents[2]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
STEPS = ACTION["runs"]["steps"]


def _step(step_id: str) -> dict:
    return next(s for s in STEPS if s.get("id") == step_id)


def read_github_output(path: Path) -> dict[str, str]:
    """Parse $GITHUB_OUTPUT as the runner does: ``name=value`` lines and ``name<<DELIM`` blocks."""
    out: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            j = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:j])
            i = j + 1
        else:
            name, value = line.split("=", 1)
            out[name] = value
            i += 1
    return out


def run_step(tmp_path: Path, **inputs: str) -> tuple[subprocess.CompletedProcess, dict[str, str], Path]:
    step = _step("fitcheck")
    summary, gh_output = tmp_path / "summary.md", tmp_path / "github_output"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FITCHECK_", "INPUT_", "GITHUB_"))}
    env.update({"FITCHECK_ACTION_PYTHON": sys.executable, "RUNNER_TEMP": str(tmp_path), "NO_COLOR": "1",
                "GITHUB_OUTPUT": str(gh_output), "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_ACTIONS": "true",
                "INPUT_MODEL": "", "INPUT_ARGS": "", "INPUT_REQUIRE": "", "INPUT_STRICT": "true", "INPUT_PLAN": "",
                "INPUT_OUTPUT": "fitcheck.json"})
    env.update({f"INPUT_{k.upper()}": v for k, v in inputs.items()})
    assert set(step["env"]) <= set(env)  # the test sets every variable the step is given
    p = subprocess.run(["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", step["run"]], env=env,
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return p, (read_github_output(gh_output) if gh_output.exists() else {}), summary


def test_action_yml_declares_the_outputs_a_workflow_branches_on():
    assert ACTION["runs"]["using"] == "composite"
    assert {"model", "args", "require", "strict", "plan", "output", "python-version"} <= set(ACTION["inputs"])
    assert set(ACTION["outputs"]) == set(OUTPUTS)
    for name, spec in ACTION["outputs"].items():
        assert spec["value"] == f"${{{{ steps.fitcheck.outputs.{name} }}}}"


def test_install_uses_a_venv_in_runner_temp_from_the_runners_python_and_the_hub_extra():
    setup = [s for s in STEPS if str(s.get("uses", "")).startswith("actions/setup-python@")]
    assert len(setup) == 1 and setup[0]["if"] == "inputs.python-version != ''"  # opt-in only
    assert ACTION["inputs"]["python-version"]["default"] == ""
    assert int(setup[0]["uses"].split("@v")[1]) >= 6  # v5 and older run on a retired Node runtime
    for s in STEPS:  # ${{ github.action_path }} is the host's path, wrong inside a container job
        assert "github.action_path" not in s.get("run", "")
    run = _step("install")["run"]
    assert '"${GITHUB_ACTION_PATH:?}$extra"' in run and "RUNNER_TEMP" in run and "-m venv" in run
    assert 'extra="[hub]"' in run and 'extra="[hub,measure]"' in run  # measure: "true" adds the measure extra


def test_install_step_runs_as_a_runner_would(tmp_path):
    """With a stand-in python3 on PATH: the venv goes to $RUNNER_TEMP, pip installs the action's
    checkout with the hub extra, and the next step is handed the venv's python."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls.log"
    stub = bindir / "python3"
    stub.write_text(f"""#!/bin/sh
echo "python3 $*" >> {log}
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin"
  printf '#!/bin/sh\\necho "venv-python $*" >> {log}\\n' > "$3/bin/python"
  chmod +x "$3/bin/python"
fi
""")
    stub.chmod(0o755)
    gh_output = tmp_path / "out"
    env = {"PATH": f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin", "RUNNER_TEMP": str(tmp_path / "temp"),
           "GITHUB_ACTION_PATH": str(ROOT), "GITHUB_OUTPUT": str(gh_output)}
    (tmp_path / "temp").mkdir()
    p = subprocess.run(["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", _step("install")["run"]],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    venv = tmp_path / "temp" / "fitcheck-venv"
    calls = log.read_text().splitlines()
    assert calls[0] == f"python3 -m venv {venv}"
    assert calls[1] == f"venv-python -m pip install --disable-pip-version-check --quiet {ROOT}[hub]"
    assert read_github_output(gh_output) == {"python": str(venv / "bin" / "python")}


def test_step_fails_with_outputs_summary_and_report(tmp_path):
    p, out, summary = run_step(tmp_path, model="llama-3.1-70b", args="--profile rtx-4090",
                               require="gpus>=1\n\nvram>=20GiB\n")
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout.splitlines()[0].startswith("+ fitcheck check --format github llama-3.1-70b --require 'gpus>=1'")
    assert "gpus>=1: met" in p.stdout and "vram>=20GiB: met" in p.stdout
    assert "::error title=fitcheck%3A meta-llama/Llama-3.1-70B-Instruct does not fit on rtx-4090" in p.stdout
    assert summary.read_text().startswith("### ❌")
    assert out == {"status": "does_not_fit", "exit-code": "1", "max-context": "", "max-batch": "",
                   "report": "fitcheck.json"}
    doc = json.loads((tmp_path / "fitcheck.json").read_text())
    assert doc["exit_code"] == 1 and [r["status"] for r in doc["requirements"]] == ["ok", "ok"]


def test_step_passes_and_reports_the_largest_context_and_batch(tmp_path):
    p, out, summary = run_step(tmp_path, model="qwen-7b", args="--profile h100-sxm --context 8192", output="")
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((tmp_path / "fitcheck.json").read_text())
    assert out["status"] == "fits" and out["exit-code"] == "0" and out["report"] == str(tmp_path / "fitcheck.json")
    assert int(out["max-context"]) == doc["verdict"]["max_context"] > 8192
    assert int(out["max-batch"]) == doc["verdict"]["max_batch"] > 1
    assert summary.read_text().startswith("### ✅")


def test_quoted_arguments_are_split_as_a_shell_would(tmp_path):
    p, out, _ = run_step(tmp_path, model="qwen-7b",
                         args='--mode lora --lora-targets "q_proj,v_proj" --profile \'h100-sxm\'')
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((tmp_path / "fitcheck.json").read_text())
    assert doc["request"]["lora_targets"] == "q_proj,v_proj"


def test_a_fitting_model_with_a_failed_requirement_fails_and_says_so(tmp_path):
    p, out, summary = run_step(tmp_path, model="qwen-7b", args="--profile h100-sxm", require="gpus>=8")
    assert p.returncode == 1
    assert out["status"] == "fits" and out["exit-code"] == "1"
    assert summary.read_text().startswith("### ❌ ") and "requirement failed" in summary.read_text().splitlines()[0]


def test_requirements_only_and_bad_input(tmp_path):
    p, out, _ = run_step(tmp_path, args="--profile github-gpu-t4", require="cc>=8.0")
    assert p.returncode == 1 and out["status"] == "failed" and out["exit-code"] == "1"
    p, out, _ = run_step(tmp_path, model="qwen-7b", args="--profile h100-sxm --contex 8192")
    assert p.returncode == 2 and out == {"status": "error", "exit-code": "2", "max-context": "", "max-batch": "",
                                         "report": ""}
    assert "No such option '--contex'" in p.stderr
    p, out, _ = run_step(tmp_path, model="qwen-7b", args='--profile "h100-sxm')
    assert p.returncode == 2 and out["status"] == "error" and "input 'args'" in p.stderr


def test_build_command_and_outputs_units():
    argv, report = build_command({"INPUT_PLAN": "plan.toml", "INPUT_STRICT": "false", "INPUT_OUTPUT": "",
                                  "RUNNER_TEMP": "/tmp/r", "INPUT_ARGS": "--headroom 5"})
    assert argv == ["check", "--format", "github", "--plan", "plan.toml", "--output", "/tmp/r/fitcheck.json",
                    "--headroom", "5"]
    with pytest.raises(ActionInputError):
        build_command({"INPUT_STRICT": "yes"})
    plan = {"schema": "fitcheck.plan/1", "cases": [{"check": {"verdict": {"status": "fits"}}},
                                                   {"check": {"verdict": {"status": "tight"}}}]}
    assert step_outputs(plan, 0, "r.json")["status"] == "tight"
