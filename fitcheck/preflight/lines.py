"""One-line texts for plan cases and requirements, with colour only where it is welcome.

Colour is used only when the stream is a terminal and NO_COLOR is unset or empty
(https://no-color.org); CI logs, pipes and files get plain text.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from fitcheck.estimate.verdict import CANNOT_RUN, DOES_NOT_FIT, DOES_NOT_FIT_ON_DISK, FITS, TIGHT, UNKNOWN, WORDS
from fitcheck.preflight.requirements import FAILED, OK

ERROR = "error"   # a plan case that failed as bad input while running (exit 2); plans are validated first
_COLOURS = {FITS: "green", TIGHT: "yellow", DOES_NOT_FIT: "red", CANNOT_RUN: "red", UNKNOWN: "yellow", OK: "green",
            FAILED: "red", ERROR: "red", DOES_NOT_FIT_ON_DISK: "red"}
# requirements.UNKNOWN is the same word as the verdict's UNKNOWN ("unknown"): yellow for both
# (the column fits "TIGHT (strict)"; "DOES NOT FIT ON DISK" fits in it too)
_WIDTH = max(len(w) for s, w in WORDS.items() if s != DOES_NOT_FIT_ON_DISK)


def use_color(stream, env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    # NO_COLOR (https://no-color.org); TERM=dumb is a terminal without escape sequences (terminfo's
    # "dumb" entry has no colours; readline and git treat it so).
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(text: str, status: str, color: bool) -> str:
    if not color or status not in _COLOURS:
        return text
    import click

    return click.style(text, fg=_COLOURS[status], bold=True)


def case_line(case_result, color: bool = False) -> str:
    """'FITS          chat: qwen-7b, awq, vllm, context 8,192, batch 8 on rtx-4090 — GPU0 needs ...'."""
    r = case_result.result
    if r is None:
        return f"{paint('ERROR'.ljust(_WIDTH + 9), ERROR, color)} {case_result.case.name}: {case_result.error}"
    status = r.verdict.status
    word = WORDS[status] + (" (strict)" if status == TIGHT and case_result.exit_code == 1 else "")
    plan = r.plan
    length = f"context {plan.context:,}" if not plan.training else f"{plan.mode}, sequence {plan.context:,}"
    what = (f"{case_result.case.name}: {r.query}, {plan.precision}, {plan.engine}, {length}, "
            f"batch {plan.batch} on {r.machine.name}")
    why = r.verdict.summary().split(": ", 1)[-1]
    return f"{paint(word.ljust(_WIDTH + 9), status, color)} {what} — {why}"


def requirement_line(outcome, color: bool = False) -> str:
    """'Requirement vram>=24GiB: FAILED (total memory of the smallest visible GPU: 16.00 GiB)'."""
    return paint(f"Requirement {outcome.message}", outcome.status, color)
