"""The Qwen2.5 transformers speed benchmark after long prompts (issue 14, item 9): transformers' concatenation of
the KV cache at its cat kernel's rate explains part of what the reads alone did not (predicted/measured was up to
1.73 at 14k–30k prompt tokens)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import speed_accuracy as SA  # noqa: E402


def ratios(prompts: tuple[int, ...]) -> list[float]:
    rows = SA.qwen_rows(SA.DEFAULT_CALIBRATION)
    return [p / m for label, p, m in rows if int(label.rsplit(" ", 1)[1]) in prompts]


def test_long_prompt_rows_move_towards_the_table():
    long = ratios((14336, 30720))
    assert len(long) == 56
    assert max(long) < 1.6 and min(long) > 0.9, sorted(long)  # max was 1.73 (7B GPTQ-Int4 after 30,720 tokens)
    assert sum(1 for r in long if 1 / 1.25 <= r <= 1.25) >= 32  # was 30


def test_bf16_long_prompt_rows_within_a_quarter():
    # bf16 rows: the weights' read is plain GEMV, so what is left after the copies is the model's own range;
    # the quantized rows' 4-bit/8-bit kernels are not modelled here (docs/accuracy.md)
    rows = SA.qwen_rows(SA.DEFAULT_CALIBRATION)
    bf16 = [p / m for label, p, m in rows if " BF16 " in label and int(label.rsplit(" ", 1)[1]) >= 14336]
    assert len(bf16) == 14
    assert all(1 / 1.25 <= r <= 1.27 for r in bf16), sorted(bf16)  # were up to 1.36 (7B after 30,720 tokens)


def test_one_token_prompts_stay_where_they_were():
    short = ratios((1,))
    assert len(short) == 28
    # the copies of a 1,024-token mean context are small next to the weights and the host time
    assert all(0.9 <= r <= 1.35 for r in short), sorted(short)


def test_the_kv_copy_measurement_plans_the_bytes_the_model_counts(capsys):
    from benchmarks.measure import kv_copy_bandwidth as KB

    # Qwen2.5-7B: 4 KV heads of 128, g = 7; one layer's K at 30,720 positions is 31.5 MB
    ops = {op.name: op.bytes_moved for op in KB.planned_ops(4, 28, 128, 30720)}
    k = 4 * 30720 * 128 * 2
    assert ops == {"clone": 2 * k, "cat": 2 * k + 2 * 4 * 128 * 2, "repeat": 8 * k, "attention": 14 * k}
    # cat and repeat act on K (V repeats them), the attention reads the repeated K and V: over K and V together
    # that is kv_traffic's 3 + 2g times the cache (2k bytes)
    per_kv = 2 * (ops["cat"] - 2 * 4 * 128 * 2) + 2 * ops["repeat"] + ops["attention"]
    assert per_kv == (3 + 2 * 7) * 2 * k
    assert KB.main(["--model", "Qwen/Qwen2.5-7B-Instruct", "--contexts", "30720", "--dry-run"]) == 0
    assert "repeat" in capsys.readouterr().out
