"""The QLoRA recipe's measured loss path and residual dtype (benchmarks/results/cpu-kbit-step-*.csv,
`python -m benchmarks.measure.kbit_step`) against the training estimator's terms."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fitcheck.estimate.training_activations import logits_bytes_per_token
from fitcheck.model.spec import ModelSpec

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
ROWS = [r for p in sorted(RESULTS.glob("cpu-kbit-step-*.csv")) for r in csv.DictReader(p.open(newline=""))]


def _spec(r: dict) -> ModelSpec:
    return ModelSpec("kbit-step", int(r["layers"]), int(r["hidden"]), 256, 2, 1, int(r["vocab"]))


@pytest.mark.parametrize("row", [r for r in ROWS if r["case"].startswith("loss")],
                         ids=lambda r: f"{r['case']}@{r['transformers_version']}")
def test_the_measured_loss_path_is_the_estimate(row):
    spec, tokens = _spec(row), int(row["tokens"])
    release = tuple(int(x) for x in row["transformers_version"].split(".")[:2])
    copy = row["case"] == "loss-b2" and (4, 46) <= release < (4, 49)
    per_token = logits_bytes_per_token(spec, act_bytes=2, upcast=True, shifts_logits=False, shift_copy_fp32=copy)
    predicted = tokens * per_token + spec.vocab_size * spec.hidden_size * 2  # + autocast's bf16 lm_head copy
    assert abs(predicted - int(row["step_peak_bytes"])) / int(row["step_peak_bytes"]) < 0.02


def test_the_residual_stream_is_fp32_under_autocast_in_every_release_measured():
    rows = [r for r in ROWS if r["case"] == "residual-dtype"]
    assert len({r["transformers_version"] for r in rows}) >= 2
    for r in rows:
        assert r["op_at_peak"].startswith("layer inputs float32/float32")
