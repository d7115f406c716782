"""The GitHub Action's step (``action.yml``): inputs from the environment, ``fitcheck check``, outputs.

``action.yml`` installs fitcheck into a virtual environment and runs ``python -m
fitcheck.preflight.action`` with the action's inputs in environment variables (never pasted into
a script)::

    INPUT_MODEL    model to check ('' with a plan or for requirements only)
    INPUT_ARGS     more `fitcheck check` options, split as a POSIX shell would (quotes work)
    INPUT_REQUIRE  requirements, one per line
    INPUT_STRICT   "true": tight fails too
    INPUT_PLAN     a plan TOML file instead of the model
    INPUT_OUTPUT   where to write the JSON document ('' : $RUNNER_TEMP/fitcheck.json)

It prints the command, runs it in this process (tables, annotations, and the Markdown summary that
``--format github`` appends to ``$GITHUB_STEP_SUMMARY``), then appends the step outputs a workflow
branches on to ``$GITHUB_OUTPUT``:

    status       fits | tight | does_not_fit | does_not_fit_on_disk | unknown (the verdict; a plan: its worst
                 case);
                 met | failed | unknown (requirements only); error (bad input: exit 2)
    exit-code    the step's exit status: 0 passes, 1 fails, 2 bad input, 3 unknown
    max-context  the largest context (tokens) that fits at the requested batch ('' when none/plan)
    max-batch    the largest batch that fits at the requested context ('' when none/plan)
    report       the path of the JSON document ('' when none was written)

and exits with fitcheck's exit status, so the step fails when the check does.
"""

from __future__ import annotations

import os
import shlex
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path

from fitcheck.errors import EXIT_BAD_INPUT, FitcheckError

OUTPUTS = ("status", "exit-code", "max-context", "max-batch", "report")
# worst first: a plan's status is that of its worst case
_STATUS_ORDER = ("does_not_fit", "does_not_fit_on_disk", "unknown", "tight", "fits")


class ActionInputError(ValueError):
    """An action input that cannot be turned into a command (exit 2)."""


def build_command(env: Mapping[str, str]) -> tuple[list[str], str]:
    """(argv for ``fitcheck``, the JSON document's path) from the action's inputs in ``env``."""
    model = env.get("INPUT_MODEL", "").strip()
    plan = env.get("INPUT_PLAN", "").strip()
    output = env.get("INPUT_OUTPUT", "").strip()
    if not output:
        output = str(Path(env.get("RUNNER_TEMP") or ".") / "fitcheck.json")
    try:
        extra = shlex.split(env.get("INPUT_ARGS", ""), comments=False, posix=True)
    except ValueError as exc:  # an unbalanced quote
        raise ActionInputError(f"input 'args': cannot split {env.get('INPUT_ARGS', '')!r}: {exc}") from None
    argv = ["check", "--format", "github"]
    if plan:
        argv += ["--plan", plan]
    if model:
        argv.append(model)
    for line in env.get("INPUT_REQUIRE", "").splitlines():
        if line.strip():
            argv += ["--require", line.strip()]
    strict = env.get("INPUT_STRICT", "true").strip().lower()
    if strict not in ("true", "false", ""):
        raise ActionInputError(f"input 'strict' must be \"true\" or \"false\", got {strict!r}")
    if strict == "true":
        argv.append("--strict")
    argv += ["--output", output]
    return argv + extra, output


def step_outputs(doc: dict | None, exit_code: int, report: str) -> dict[str, str]:
    """The action's outputs from the JSON document fitcheck wrote (None when it wrote none)."""
    out = {"status": "error" if exit_code == EXIT_BAD_INPUT else "unknown", "exit-code": str(exit_code),
           "max-context": "", "max-batch": "", "report": report if doc is not None else ""}
    if doc is None:
        return out
    schema = str(doc.get("schema", ""))
    if schema.startswith("fitcheck.check/"):
        verdict = doc.get("verdict") or {}
        out["status"] = str(verdict.get("status", "unknown"))
        out["max-context"] = _number(verdict.get("max_context"))
        out["max-batch"] = _number(verdict.get("max_batch"))
    elif schema.startswith("fitcheck.plan/"):
        statuses = {str(((c.get("check") or {}).get("verdict") or {}).get("status")) for c in doc.get("cases", ())}
        out["status"] = next((s for s in _STATUS_ORDER if s in statuses), "unknown")
    elif schema.startswith("fitcheck.requirements/"):
        statuses = {r.get("status") for r in doc.get("requirements", ())}
        out["status"] = "failed" if "failed" in statuses else "unknown" if statuses - {"ok"} else "met"
    return out


def _number(value) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else ""


def write_github_output(path: str, outputs: Mapping[str, str]) -> None:
    """Append ``outputs`` to the file ``$GITHUB_OUTPUT`` names, in the multi-line form
    (``name<<DELIMITER``) so a value can hold any character."""
    from fitcheck.bounded import append_regular_file

    text = ""
    for name, value in outputs.items():
        delimiter = f"ghadelimiter_{uuid.uuid4()}"
        text += f"{name}<<{delimiter}\n{value}\n{delimiter}\n"
    append_regular_file(path, text, "$GITHUB_OUTPUT")


def run(env: Mapping[str, str] | None = None) -> int:
    """Run the step; returns fitcheck's exit status (outputs written when $GITHUB_OUTPUT is set)."""
    env = os.environ if env is None else env
    try:
        argv, report = build_command(env)
    except ActionInputError as exc:
        print(f"fitcheck: {exc}", file=sys.stderr)
        code, doc, report = EXIT_BAD_INPUT, None, ""
    else:
        print("+ fitcheck " + shlex.join(argv), flush=True)
        Path(report).unlink(missing_ok=True)  # a stale document must not pass for this run's
        code = _run_cli(argv)
        doc = _read_document(report)
    if env.get("GITHUB_OUTPUT"):
        try:
            write_github_output(env["GITHUB_OUTPUT"], step_outputs(doc, code, report))
        except FitcheckError as exc:  # the verdict's exit code stands; the outputs are said to be lost
            print(f"fitcheck: {exc.message}", file=sys.stderr)
    return code


def _run_cli(argv: list[str]) -> int:
    from fitcheck.cli import main

    try:
        main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def _read_document(path: str) -> dict | None:
    from fitcheck.bounded import loads_json, read_regular_file

    try:
        doc = loads_json(read_regular_file(path, "fitcheck's document"), path)
    except FitcheckError:
        return None
    return doc if isinstance(doc, dict) else None


if __name__ == "__main__":
    sys.exit(run())
