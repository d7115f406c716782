"""The estimator against the measured live-tensor peaks of transformers inference across releases
(benchmarks/results/cpu-inference-peaks-*.csv, `python -m benchmarks.measure.inference_peak`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.measure.inference_peak import predicted_bytes, read_rows  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
ROWS = [row for path in sorted(RESULTS.glob("cpu-inference-peaks-*.csv")) for row in read_rows(path)]


def _row(case_id: str, release: str) -> dict | None:
    return next((r for r in ROWS if r["case_id"] == case_id and r["transformers_version"].startswith(release)), None)


def test_the_results_cover_several_releases():
    assert len({r["transformers_version"] for r in ROWS}) >= 2
    assert len(ROWS) >= 8


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['case_id']}@{r['transformers_version']}")
def test_each_measured_peak_is_within_the_band(row):
    measured = int(row["peak_above_weights_bytes"])
    predicted = predicted_bytes(row)
    # generate()'s decoding-step tensors are counted from each release's source (generate_step.py): the
    # rows built so that they are the peak (inf-step-*) are held tighter than the others
    band = 0.05 if row["case_id"].startswith("inf-step-") else 0.12
    assert abs(predicted - measured) / measured <= band, (predicted, measured)


def test_the_decoding_step_rows_cover_greedy_and_sampling_across_releases():
    steps = [r for r in ROWS if r["case_id"].startswith("inf-step-")]
    assert {r["sampling"] for r in steps} == {"greedy", "sample", "sample-top-p", "greedy:repetition-penalty",
                                              "sample:repetition-penalty+temperature+top-k+top-p"}
    assert len({r["transformers_version"] for r in steps}) >= 4
    assert {r["dtype"] for r in steps} == {"fp32", "bf16"}


def test_the_repetition_penalty_rows_add_its_scatter_output_where_it_is_alive():
    # 5.24, batch 16, 128,256 entries: greedy + 8 B per entry (16.4 MB: the padded copy and the scatter's output,
    # 128,257 entries each, with the gather over 9 positions); with Qwen2.5 Instruct's warpers top-p's sort stays
    # the peak, byte for byte
    def peak(case_id):
        row = _row(case_id, "5.24")
        assert row is not None, case_id
        return int(row["peak_above_weights_bytes"])

    added = peak("inf-step-llama1b-1+8x16-greedy-penalty") - peak("inf-step-llama1b-1+8x16-greedy")
    assert 0 <= added - 16 * 128_256 * 8 <= 4 * 1024
    assert peak("inf-step-llama1b-1+8x16-top-p-penalty") == peak("inf-step-llama1b-1+8x16-sample-top-p")
    # 4.44: the warpers ran as a second list, with the processors' result held by generate() through them
    top_p_444 = _row("inf-step-llama1b-1+8x16-sample-top-p", "4.44")
    penalty_444 = _row("inf-step-llama1b-1+8x16-top-p-penalty", "4.44")
    assert top_p_444 and penalty_444
    added = int(penalty_444["peak_above_weights_bytes"]) - int(top_p_444["peak_above_weights_bytes"])
    assert 0 <= added - 16 * 128_256 * 4 <= 4 * 1024
