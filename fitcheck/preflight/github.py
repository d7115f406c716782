"""GitHub Actions output (``--format github``): workflow-command annotations and a Markdown summary.

Pure string building.  Annotations are ``::error title=T::MESSAGE`` lines on stdout
(docs.github.com/actions/reference/workflows-and-actions/workflow-commands); the message and
the title are escaped the way the runner unescapes them (% CR LF, and : , in properties).
The summary is Markdown the CLI appends to ``$GITHUB_STEP_SUMMARY``.

The commands shown for the alternatives come with the check result (fitcheck.pipeline), the same
ones the table and the JSON document print.
"""

from __future__ import annotations

from fitcheck.estimate.verdict import CANNOT_RUN, DOES_NOT_FIT, DOES_NOT_FIT_ON_DISK, FITS, TIGHT, UNKNOWN
from fitcheck.preflight.requirements import FAILED, OK
from fitcheck.render.answer import nothing_fits
from fitcheck.units import format_gib

_WORD = {FITS: "fits", TIGHT: "fits only tightly", DOES_NOT_FIT: "does not fit", CANNOT_RUN: "cannot run",
         UNKNOWN: "cannot be judged", DOES_NOT_FIT_ON_DISK: "does not fit on disk"}
_ICON = {FITS: "✅", TIGHT: "⚠️", DOES_NOT_FIT: "❌", CANNOT_RUN: "❌", UNKNOWN: "❔", DOES_NOT_FIT_ON_DISK: "❌"}


def escape_data(text: str) -> str:
    return str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, title: str, message: str) -> str:
    """``::error title=...::message`` (level: error, warning or notice)."""
    return f"::{level} title={escape_property(title)}::{escape_data(message)}"


def _machine_name(result) -> str:
    return result.machine.name


def alternative_commands(result) -> list[str]:
    """The `fitcheck ...` command of each alternative, best first (inference or training, with --profile)."""
    return [a.fitcheck_command for a in result.alternatives]


def _level(status: str, strict: bool) -> str:
    if status == FITS:
        return "notice"
    if status == TIGHT:
        return "error" if strict else "warning"
    return "error"  # does not fit (exit 1), unknown (exit 3): both fail the step


def check_title(result, name: str | None = None) -> str:
    label = name or result.query
    return f"fitcheck: {label} {_WORD[result.verdict.status]} on {_machine_name(result)}"


def check_message(result, strict: bool = False) -> str:
    """One paragraph a developer understands from the log alone: why, and what fits instead."""
    plan = result.plan
    if plan.training:
        how = f"{plan.mode}, {plan.precision}, sequence {plan.seq_len}, micro-batch {plan.batch}"
    else:
        how = f"{result.estimate.mode}, {plan.precision}, {plan.engine}, context {plan.context}, batch {plan.batch}"
    msg = f"{result.query} ({how}): {result.verdict.summary()}."
    if result.verdict.status == TIGHT:
        msg += f" It fits only inside the {result.headroom:.0%} headroom" + (" (--strict)." if strict else ".")
    if result.alternatives:
        best = result.alternatives[0]
        msg += f" Fits instead: {best.title} — {alternative_commands(result)[0]}"
    elif result.verdict.status in (DOES_NOT_FIT, CANNOT_RUN):
        msg += f" {nothing_fits(result.plan, result.profile)}."
    elif result.verdict.status == DOES_NOT_FIT_ON_DISK:
        msg += " Use --download-dir PATH on a disk with room, or a smaller format."
    return msg


def check_annotations(result, strict: bool = False, name: str | None = None) -> list[str]:
    return [annotation(_level(result.verdict.status, strict), check_title(result, name),
                       check_message(result, strict))]


def requirement_annotations(outcomes) -> list[str]:
    out = []
    for o in outcomes:
        if o.status == OK:
            continue
        title = "fitcheck: requirement failed" if o.status == FAILED else "fitcheck: requirement unknown"
        out.append(annotation("error", title, o.message))
    return out


def _gib(n) -> str:
    return "unknown" if n is None else format_gib(n)


def _requirements_md(outcomes) -> list[str]:
    if not outcomes:
        return []
    lines = ["", "| Requirement | Measured | Result |", "|---|---|---|"]
    for o in outcomes:
        result = {OK: "✅ met", FAILED: "❌ failed"}.get(o.status, "❔ unknown")
        lines.append(f"| `{o.requirement.text}` | {o.shown} | {result} |")
    return lines


def _outcome_icon(status: str, exit_code: int) -> str:
    """The headline's icon: the step's real outcome (exit 1 is ❌ even when the model fits)."""
    if exit_code == 1:
        return "❌"
    if exit_code == 3:
        return "❔"
    return _ICON[status]


def _headline(result, outcomes, strict: bool, exit_code: int) -> str:
    """``✅ fitcheck: X fits on M``, or with the reason the step fails although the verdict alone passes."""
    status = result.verdict.status
    title = check_title(result)
    failed = [o for o in outcomes if o.status == FAILED]
    unknown = [o for o in outcomes if o.status not in (OK, FAILED)]
    if exit_code == 1 and status in (FITS, TIGHT):
        why = [f"{len(failed)} requirement{'s' if len(failed) > 1 else ''} failed"] if failed else []
        if status == TIGHT and strict:
            why.insert(0, "tight with --strict")
        title += f" — step fails: {', '.join(why)}" if why else ""
    elif exit_code == 3 and status != UNKNOWN and unknown:
        title += f" — step fails: {len(unknown)} requirement{'s' if len(unknown) > 1 else ''} unknown"
    return f"### {_outcome_icon(status, exit_code)} {title}"


_DISK_WORD = {"fits": "fits", "does_not_fit": "does not fit", "unknown": "not checked"}


def _disk_rows(download) -> list[str]:
    """The download as a row of the summary's table: where it lands, its bytes, the free space there."""
    if download is None:
        return []
    if download.present_at:
        return [f"| Download (already at `{download.present_at}`) | 0 | - | fits |"]
    place = download.place
    where = f"`{place.path}`" if place is not None else "disk not known"
    free = place.free_bytes if place is not None else None
    return [f"| Download to {where} | {_gib(download.download_bytes)} | {_gib(free)} | {_DISK_WORD[download.status]} |"]


SUMMARY_WIDTH = 80  # columns of the memory bars in the summary's code block


def _memory_bars(result) -> list[str]:
    """Each device's memory as a stacked bar against its free memory (fitcheck.render.charts.bar), in a text fence."""
    from fitcheck.render.charts.bar import device_bars

    bars = device_bars(result, SUMMARY_WIDTH)
    return ["", "```text", *bars, "```"] if bars else []


def check_summary(result, outcomes=(), strict: bool = False, exit_code: int | None = None) -> str:
    """Markdown for one check: the step's outcome, memory per device, requirements, what fits instead.

    The headline shows the step's real outcome (``exit_code``, default: the verdict's combined with
    the requirements and ``strict``), so a fitting model whose ``--require`` failed is ❌."""
    from fitcheck.render.check import check_exit_code

    code = check_exit_code(result, strict, outcomes) if exit_code is None else exit_code
    commands = alternative_commands(result)
    lines = [_headline(result, outcomes, strict, code), "", check_message(result, strict), "",
             "| Device | Needs | Free | Verdict |", "|---|---|---|---|"]
    for d in result.verdict.devices:
        label = d.device.upper() if d.kind == "gpu" else "RAM"
        lines.append(f"| {label} | {_gib(d.need_bytes)} | {_gib(d.free_bytes)} | {_WORD[d.status]} |")
    lines += _disk_rows(getattr(result, "download", None))
    lines += _memory_bars(result)
    lines += _requirements_md(outcomes)
    if result.alternatives:
        lines += ["", "**What fits instead (best first)**", ""]
        for i, (a, command) in enumerate(zip(result.alternatives, commands, strict=True), 1):
            lines.append(f"{i}. {a.title}: `{command}`")
    return "\n".join(lines) + "\n"


def requirements_summary(machine_line: str, outcomes) -> str:
    statuses = {o.status for o in outcomes}
    icon = "❌" if FAILED in statuses else "❔" if statuses - {OK} else "✅"
    lines = [f"### {icon} fitcheck: machine requirements", "", f"Machine: {machine_line}"]
    return "\n".join(lines + _requirements_md(outcomes)) + "\n"


def plan_summary(path: str, case_results, outcomes=()) -> str:
    """Markdown for a plan: one row per case."""
    from fitcheck.preflight.requirements import exit_code as requirements_exit_code

    failed = sum(1 for c in case_results if c.exit_code != 0)
    req_code = requirements_exit_code(outcomes)
    head = "❌" if failed or req_code == 1 else "❔" if req_code == 3 else "✅"
    lines = [f"### {head} fitcheck plan {path}: {len(case_results) - failed} of {len(case_results)} cases pass", "",
             "| Case | Model | Machine | Verdict | Why |", "|---|---|---|---|---|"]
    for c in case_results:
        r = c.result
        if r is None:
            lines.append(f"| {c.case.name} | {c.case.model} | - | ❌ error | {c.error.replace('|', chr(92) + '|')} |")
            continue
        why = r.verdict.summary().split(": ", 1)[-1].replace("|", "\\|")
        lines.append(f"| {c.case.name} | {r.query} | {r.machine.name} | {_ICON[r.verdict.status]} "
                     f"{_WORD[r.verdict.status]} | {why} |")
    lines += _requirements_md(outcomes)
    return "\n".join(lines) + "\n"
