"""The CLI edge of ``fitcheck check``'s output formats: prints, writes --output and the step summary.

    table   the tables people read (default)
    json    the versioned JSON document on stdout (``--json`` is an alias)
    github  the tables, then GitHub Actions annotations; Markdown appended to $GITHUB_STEP_SUMMARY

``--output FILE`` writes the JSON document whatever the display format.  Each ``emit_*`` returns
the exit code; requirement results are combined with the verdict (1 beats 3 beats 0).
"""

from __future__ import annotations

import os
import sys

import click

from fitcheck import __version__
from fitcheck.contracts import document_json
from fitcheck.errors import FitcheckError
from fitcheck.preflight.requirements import combine, outcome_dict
from fitcheck.preflight.requirements import exit_code as requirements_exit_code

# Each format's modules (github, lines, the plan runner) are imported where they are used, so a
# plain `fitcheck MODEL --json` loads none of them.

FORMATS = ("table", "json", "github")
REQUIREMENTS_SCHEMA = "fitcheck.requirements/1"
PLAN_SCHEMA = "fitcheck.plan/1"


def document_text(doc: dict) -> str:
    """A check, plan or requirements document as `--json` prints it (without the final newline)."""
    return document_json(doc, indent=2, sort_keys=True)


_dumps = document_text


def write_output(path: str | None, doc: dict) -> None:
    if not path:
        return
    from fitcheck.bounded import write_regular_file

    write_regular_file(path, _dumps(doc) + "\n", "--output")


def append_summary(markdown: str, env=None) -> None:
    """Append to $GITHUB_STEP_SUMMARY when it is set (GitHub Actions sets it for every step)."""
    env = os.environ if env is None else env
    path = env.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    from fitcheck.bounded import append_regular_file

    try:
        append_regular_file(path, markdown + "\n", "the step summary")  # a FIFO is refused, never waited on
    except FitcheckError as exc:
        click.echo(f"fitcheck: {exc.message}", err=True)


def _requirement_lines(outcomes, err: bool) -> None:
    if not outcomes:
        return
    from fitcheck.preflight.lines import requirement_line, use_color

    color = use_color(sys.stderr if err else sys.stdout)
    for o in outcomes:
        click.echo(requirement_line(o, color), err=err)


def run_check(model: str, request, machine, *, params: str | None, fmt: str, output: str | None, strict: bool,
              outcomes=(), revision: str | None = None, context=None, after=None, view: str = "default") -> int:
    """Check ``model`` as ``request`` asks on ``machine`` and show it.  A malformed request is bad input
    (exit 2), except that a failed --require stays exit 1 whatever else happens."""
    try:
        result = check_result(model, request, machine, params=params, revision=revision, context=context,
                              choose=not strict)
    except FitcheckError as exc:
        if requirements_exit_code(outcomes) == 1:
            _requirement_lines(outcomes, err=True)
            click.echo(f"fitcheck: {exc.one_line()}", err=True)
            return 1
        raise
    code = emit_check(result, fmt=fmt, output=output, strict=strict, outcomes=outcomes, view=view)
    if after is not None:
        after(result)
    return code


def check_result(model: str, request, machine, *, params: str | None = None, revision: str | None = None,
                 context=None, choose: bool = True):
    """The CheckResult of ``model`` (as typed) for ``request`` on ``machine``: what `fitcheck MODEL` shows and
    `fitcheck serve` answers; ``choose`` False (--strict) judges the default weights as they are (pipeline.check).
    FitcheckError for an unknown model or a malformed request."""
    from fitcheck.model.resolve import resolve_model
    from fitcheck.pipeline import check
    from fitcheck.probe.disk import storage_for

    # Resolved here, as typed: the result names a catalog model by its id, a local one by its path.
    resolved = resolve_model(model, params=params) if params else resolve_model(model, revision=revision)
    typed = ((model.strip(),) + (("--params", params) if params else ())
             + (("--revision", revision) if revision else ()))
    storage = storage_for(resolved, model, request.download_dir, machine)
    return check(resolved, request, machine, as_typed=typed, storage=storage, ctx=context, choose=choose)


def check_answer(result, *, strict: bool, outcomes=()) -> tuple[dict, int]:
    """(the JSON document, the exit code) of one CheckResult: the verdict, --strict and the requirements."""
    from fitcheck.preflight.requirements import with_answer
    from fitcheck.render.check import check_document, check_exit_code

    outcomes = with_answer(outcomes, result)
    code = check_exit_code(result, strict, outcomes)
    return check_document(result, outcomes=outcomes, exit_code=code), code


def emit_check(result, *, fmt: str, output: str | None, strict: bool, outcomes=(), view: str = "default") -> int:
    """Show one CheckResult; returns the exit code (verdict, --strict, requirements). ``view`` is the table's:
    "default" (one screen), "verbose" (-v: everything) or "brief" (--brief: the verdict line)."""
    from fitcheck.preflight.requirements import with_answer

    outcomes = with_answer(outcomes, result)
    doc, code = check_answer(result, strict=strict, outcomes=outcomes)
    if fmt == "json":
        click.echo(_dumps(doc))
        _requirement_lines(outcomes, err=True)
    else:
        click.echo(table_text(result, view))
        if outcomes:
            click.echo("")
            _requirement_lines(outcomes, err=False)
        if fmt == "github":
            from fitcheck.preflight import github

            for line in github.check_annotations(result, strict) + github.requirement_annotations(outcomes):
                click.echo(line)
            append_summary(github.check_summary(result, outcomes, strict, exit_code=code))
    write_output(output, doc)
    return code


def table_text(result, view: str = "default") -> str:
    """The answer as this terminal shows it: its width, colour only on a terminal without NO_COLOR, ASCII
    pictures on TERM=dumb or a console that cannot encode blocks (fitcheck.render.layout)."""
    import sys

    from fitcheck.preflight.lines import use_color
    from fitcheck.render.answer import brief_line, render_check_table
    from fitcheck.render.layout import terminal_width, wants_ascii

    if view == "brief":
        return brief_line(result)
    return render_check_table(result, verbose=view == "verbose", width=terminal_width(),
                              color=use_color(sys.stdout), ascii=wants_ascii())


def requirements_document(machine, outcomes) -> dict:
    from fitcheck.render.check import machine_line

    return {
        "schema": REQUIREMENTS_SCHEMA,
        "fitcheck_version": __version__,
        "machine": {"name": machine.name, "kind": machine.kind, "source": machine.source,
                    "summary": machine_line(machine)},
        "requirements": [outcome_dict(o) for o in outcomes],
        "exit_code": requirements_exit_code(outcomes),
    }


def emit_requirements(machine, outcomes, *, fmt: str, output: str | None) -> int:
    """Machine requirements only (no MODEL): one line each."""
    from fitcheck.preflight.requirements import machine_only
    from fitcheck.render.check import machine_line

    machine_only(outcome.requirement for outcome in outcomes)
    doc = requirements_document(machine, outcomes)
    if fmt == "json":
        click.echo(_dumps(doc))
    else:
        click.echo(f"Machine:  {machine_line(machine)}")
        _requirement_lines(outcomes, err=False)
        if fmt == "github":
            from fitcheck.preflight import github

            for line in github.requirement_annotations(outcomes):
                click.echo(line)
            append_summary(github.requirements_summary(machine_line(machine), outcomes))
    write_output(output, doc)
    return requirements_exit_code(outcomes)


def plan_document(path: str, case_results, outcomes=()) -> dict:
    from fitcheck.render.check import check_document

    codes = [c.exit_code for c in case_results] + [requirements_exit_code(outcomes)]
    return {
        "schema": PLAN_SCHEMA,
        "fitcheck_version": __version__,
        "plan": path,
        "exit_code": combine(codes),
        "cases": [{"name": c.case.name, "exit_code": c.exit_code,
                   "check": check_document(c.result, exit_code=c.exit_code) if c.result is not None else None,
                   **({"error": c.error} if c.result is None else {})}
                  for c in case_results],
        "requirements": [outcome_dict(o) for o in outcomes],
    }


def emit_plan(path: str, case_results, *, fmt: str, output: str | None, strict: bool, outcomes=()) -> int:
    """A plan: one verdict line per case (github: plus an annotation for each case that fails)."""
    doc = plan_document(path, case_results, outcomes)
    if fmt == "json":
        click.echo(_dumps(doc))
        _requirement_lines(outcomes, err=True)
    else:
        from fitcheck.preflight.lines import case_line, use_color

        color = use_color(sys.stdout)
        for c in case_results:
            click.echo(case_line(c, color))
        _requirement_lines(outcomes, err=False)
        passed = sum(1 for c in case_results if c.exit_code == 0)
        click.echo(f"{passed} of {len(case_results)} cases pass ({path})")
        if fmt == "github":
            from fitcheck.preflight import github

            for c in case_results:
                if c.result is None:
                    click.echo(github.annotation("error", f"fitcheck: {c.case.name}", c.error))
                elif c.exit_code != 0:
                    click.echo(github.check_annotations(c.result, strict or c.case.get("strict", False),
                                                        name=c.case.name)[0])
            for line in github.requirement_annotations(outcomes):
                click.echo(line)
            append_summary(github.plan_summary(path, case_results, outcomes))
    write_output(output, doc)
    return doc["exit_code"]


def run_plan_file(path: str, *, profile: str | None, strict: bool, requirements, fmt: str,
                  output: str | None, overrides: dict | None = None, context_for=None) -> int:
    """`fitcheck check --plan PATH`: read, check every case for bad input, run every case (machines loaded
    once each), show, exit code.  A plan with malformed cases runs none: each is a line on stderr (and an
    annotation with --format github), exit 2.

    ``overrides`` (--gpu/--vram/--ram) apply to every case's machine; ``context_for(profile)``: what the edge read
    of a case's machine (fitcheck.context), the same as `fitcheck MODEL` reads for it."""
    from fitcheck.preflight.plan_file import read_plan_errors
    from fitcheck.preflight.requirements import evaluate
    from fitcheck.preflight.run import MachineError, run_plan, validate_plan
    from fitcheck.profiles.overrides import apply_machine_overrides, load_machine

    plan, errors = read_plan_errors(path)
    machines: dict = {}
    given = {k: v for k, v in (overrides or {}).items() if v}

    def machine_for(name: str | None):
        if name not in machines:
            base = load_machine(name)  # its errors name where the case's machine came from (run.machine_field)
            try:
                machines[name] = apply_machine_overrides(base, **given)
            except FitcheckError as exc:
                raise MachineError(", ".join(f"--{flag}" for flag in given), exc) from None
        return machines[name]

    prepared, invalid = validate_plan(plan, machine_for, default_profile=profile)
    errors = sorted(errors + invalid, key=_case_order)
    if errors:
        return emit_plan_errors(path, errors, fmt=fmt)
    case_results = run_plan(plan, machine_for, strict=strict, default_profile=profile, prepared=prepared,
                            context_for=context_for)
    stack = context_for(profile).stack if context_for is not None else None
    from fitcheck.preflight.requirements import machine_only

    machine_only(requirements)
    outcomes = evaluate(requirements, machine_for(profile), stack) if requirements else ()
    return emit_plan(path, case_results, fmt=fmt, output=output, strict=strict, outcomes=outcomes)


def _case_order(line: str) -> tuple[int, int]:
    """[defaults] first, then by case number (a line names its case as 'case N')."""
    import re

    m = re.search(r": case (\d+)\b", line)
    return (1, int(m.group(1))) if m else (0, 0)


def emit_plan_errors(path: str, errors: list[str], *, fmt: str) -> int:
    """Every malformed case of a plan, one line each on stderr (and an ::error annotation each with --format
    github), then, for more than one, the count; nothing ran (exit 2)."""
    from fitcheck.errors import EXIT_BAD_INPUT, redact_credentials
    from fitcheck.preflight.plan_file import PlanInvalid

    summary = PlanInvalid(path, errors).summary
    for line in errors:
        click.echo(f"fitcheck: {redact_credentials(line)}", err=True)
    if len(errors) > 1:  # one error is one line, as any bad input
        click.echo(f"fitcheck: {summary}", err=True)
    if fmt == "github":
        from fitcheck.preflight import github

        for line in errors:
            click.echo(github.annotation("error", "fitcheck: bad plan", redact_credentials(line)))
    return EXIT_BAD_INPUT
