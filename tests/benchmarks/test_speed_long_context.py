"""The Qwen2.5 transformers speed benchmark after long prompts (issue 14, item 9): the KV-cache copies explain
what the reads alone did not (predicted/measured was 1.3–1.73 at 14k–30k prompt tokens)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import speed_accuracy as SA  # noqa: E402


def ratios(prompts: tuple[int, ...]) -> list[float]:
    rows = SA.qwen_rows(SA.DEFAULT_CALIBRATION)
    return [p / m for label, p, m in rows if int(label.rsplit(" ", 1)[1]) in prompts]


def test_long_prompt_rows_within_a_quarter():
    long = ratios((14336, 30720))
    assert len(long) == 56
    within = sum(1 for r in long if 1 / 1.25 <= r <= 1.25)
    assert within >= 54, sorted(long)  # was 30 of 56
    assert max(long) < 1.4 and min(long) > 1 / 1.25  # was 1.73 (Qwen2.5-7B GPTQ-Int4 after 30,720 tokens)


def test_one_token_prompts_stay_where_they_were():
    short = ratios((1,))
    assert len(short) == 28
    # the copies of a 1,024-token mean context are small next to the weights and the host time
    assert all(0.9 <= r <= 1.35 for r in short), sorted(short)
