"""One-line texts for plan cases and requirements, with colour only where it is welcome.

Colour is used only when the stream is a terminal and NO_COLOR is unset or empty
(https://no-color.org); CI logs, pipes and files get plain text.
"""

from __future__ import annotations

import os
from typing import Mapping

from fitcheck.estimate.verdict import CANNOT_RUN, DOES_NOT_FIT, FITS, TIGHT, UNKNOWN
from fitcheck.preflight.requirements import FAILED, OK

WORDS = {FITS: "FITS", TIGHT: "TIGHT", DOES_NOT_FIT: "DOES NOT FIT", UNKNOWN: "UNKNOWN", CANNOT_RUN: "CANNOT RUN"}
_COLOURS = {FITS: "green", TIGHT: "yellow", DOES_NOT_FIT: "red", UNKNOWN: "yellow", CANNOT_RUN: "red", OK: "green", FAILED: "red"}
# requirements.UNKNOWN is the same word as the verdict's UNKNOWN ("unknown"): yellow for both
_WIDTH = max(len(w) for w in WORDS.values())


def use_color(stream, env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    if env.get("NO_COLOR"):
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
    status = r.verdict.status
    word = WORDS[status] + (" (strict)" if status == TIGHT and case_result.exit_code == 1 else "")
    plan = r.plan
    what = (f"{case_result.case.name}: {r.query}, {plan.precision}, {plan.engine}, context {plan.context:,}, "
            f"batch {plan.batch} on {r.machine.name}")
    why = r.verdict.summary().split(": ", 1)[-1]
    return f"{paint(word.ljust(_WIDTH + 9), status, color)} {what} — {why}"


def requirement_line(outcome, color: bool = False) -> str:
    """'Requirement vram>=24GiB: FAILED (total memory of the smallest visible GPU: 16.00 GiB)'."""
    return paint(f"Requirement {outcome.message}", outcome.status, color)
