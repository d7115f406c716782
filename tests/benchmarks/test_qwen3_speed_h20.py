"""The Qwen3 speed benchmark (transformers 4.51.3 and SGLang 0.4.6.post1 on NVIDIA H20, batch 1, 2,048 tokens after
prompts of 1–129,042; benchmarks/data/qwen3_speed_h20.csv): its speed counts the prompt's tokens over the request's
wall time, and fitcheck's figures for it must not regress.  Limits sit a little outside what the model scores now
(docs/accuracy.md "Speed"); the figures before this table was scored are in the comments."""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import speed_accuracy as SA  # noqa: E402


@pytest.fixture(scope="module")
def groups() -> dict[str, list[tuple[str, float, float]]]:
    return SA.generate_rows(SA.DEFAULT_GENERATE)


def ratios(rows, *words: str) -> list[float]:
    return [p / m for label, p, m in rows if all(w in label for w in words)]


def within(rs: list[float], factor: float = 1.5) -> int:
    return sum(1 for r in rs if 1 / factor <= r <= factor)


def test_the_table_is_transcribed_with_its_source_and_speed_definition():
    with open(SA.DEFAULT_GENERATE, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 212
    assert sum(r["engine"] == "transformers" for r in rows) == 80 and sum(r["engine"] == "sglang" for r in rows) == 132
    assert all(r["source"].startswith("github.com/QwenLM/Qwen3 ") and "@c7f51a1" in r["source"] for r in rows)
    assert {r["speed_definition"] for r in rows} == {"(prompt+generated)/wall"}
    assert {r["generated_tokens"] for r in rows} == {"2048"}

    def speed(model, engine, precision, prompt):
        return next(r["measured_tok_s"] for r in rows if (r["model"], r["engine"], r["precision"], r["prompt_tokens"])
                    == (f"Qwen/{model}", engine, precision, prompt))

    # spot checks against the page
    assert speed("Qwen3-30B-A3B", "transformers", "bf16", "1") == "1.89"
    assert speed("Qwen3-30B-A3B", "transformers", "fp8", "14336") == "3.5"
    assert speed("Qwen3-0.6B", "sglang", "gptq-int8", "30720") == "3342.06"
    assert speed("Qwen3-235B-A22B", "sglang", "bf16", "129042") == "1639.54"
    assert next(r["gpus"] for r in rows if r["model"] == "Qwen/Qwen3-32B" and r["engine"] == "sglang"
                and r["precision"] == "bf16" and r["prompt_tokens"] == "129042") == "2"


def test_the_prefill_is_inside_the_wall_time_and_the_prompt_counted():
    # 6,144 prompt tokens at 3,072 tok/s (2 s) and 2,048 generated at 1,024 tok/s (2 s): 8,192 tokens in 4 s
    assert SA.request_speed(6144, 2048, 3072.0, 1024.0, "(prompt+generated)/wall") == pytest.approx(2048.0)
    # the Qwen2.5 table's definition counts only the generated tokens over the same 4 s
    assert SA.request_speed(6144, 2048, 3072.0, 1024.0, "generated/wall") == pytest.approx(512.0)
    assert SA.request_speed(1, 2048, 3072.0, 1024.0, "(prompt+generated)/wall") == pytest.approx(2049 / (1 / 3072 + 2))


def test_transformers_group(groups):
    rs = ratios(groups["transformers"])
    assert len(rs) == 80
    # was median 1.51, 33/80 within ×1.5, highest 15.99 (30B-A3B FP8) before the MoE loop and FP8Linear were counted
    assert 0.95 <= statistics.median(rs) <= 1.25, statistics.median(rs)
    assert within(rs) >= 56, sorted(rs)
    assert max(rs) < 3.8 and min(rs) > 0.3, (min(rs), max(rs))


def test_transformers_moe_rows_pay_the_loop_over_all_128_experts(groups):
    bf16 = ratios(groups["transformers"], "A3B", " bf16 ")
    fp8 = ratios(groups["transformers"], "A3B", " fp8 ")
    assert len(bf16) == len(fp8) == 4
    # were 3.8–4.1 (BF16) and 13.5–16 (FP8): the loop counted only the 8 routed experts and no FP8Linear work;
    # BF16 now 0.51–0.55: the H20 host runs a layer faster than the A100 host the layer time was measured on
    # (dense BF16 after a 1-token prompt: 0.69–0.72), and an expert without tokens launches no kernels
    assert all(0.45 <= r <= 1.2 for r in bf16), bf16
    assert all(0.8 <= r <= 1.3 for r in fp8), fp8


def test_transformers_fp8_rows_pay_each_fp8_linear(groups):
    rs = ratios(groups["transformers"], " fp8 ")
    assert len(rs) == 28
    # were 1.56–1.96 for the dense models (median 1.85): FP8Linear's two Triton launches and synchronize per call
    assert statistics.median(rs) <= 1.35, sorted(rs)
    assert all(0.9 <= r <= 2.4 for r in rs), sorted(rs)
    short = ratios(groups["transformers"], " fp8 ", "prompt      1")
    assert all(0.9 <= r <= 1.35 for r in short), short


def test_sglang_group(groups):
    rs = ratios(groups["sglang"])
    assert len(rs) == 132
    # was median 1.43, 65/132 within ×1.5, highest 7.39 (0.6B GPTQ-Int8 after a 1-token prompt)
    assert 0.85 <= statistics.median(rs) <= 1.1, statistics.median(rs)
    assert within(rs) >= 110, sorted(rs)
    # the 12 GPTQ-INT4 MoE rows stay the worst (vLLM 0.7.2's Marlin MoE launches a kernel per expert; not modelled)
    assert max(r for r in rs) < 5.0


def test_sglang_dense_rows_pay_their_kernels_latency(groups):
    dense = [(label, p / m) for label, p, m in groups["sglang"] if "A3B" not in label and "A22B" not in label]
    short = [r for label, r in dense if label.endswith(" 1")]
    assert len(dense) == 96 and len(short) == 18
    # after a 1-token prompt: were 1.57–7.39 (median 2.7) with the step bound by the bytes alone
    assert all(0.55 <= r <= 1.65 for r in short), sorted(short)  # 0.59: 0.6B FP8, its small kernels
    assert within([r for _, r in dense]) >= 85
