"""The measured case lists, the CSV columns and the summary table (pure parts, no torch)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

# benchmarks/ is a top-level folder of the repository, not part of the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.measure.cases import CPU_CASES, CUDA_CASES, MODES, Case, select  # noqa: E402
from benchmarks.measure.columns import COLUMN_NAMES, COLUMNS, rows_for  # noqa: E402
from benchmarks.measure.hf_config import scaled_spec, spec_to_hf_config  # noqa: E402
from benchmarks.measure.models import spec_for  # noqa: E402
from benchmarks.measure.table import render, summary_rows  # noqa: E402

ALL_CASES = CPU_CASES + CUDA_CASES


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id)
def test_case_is_valid_and_its_model_builds_a_config(case):
    assert case.problems() == []
    spec, _source = spec_for(case.model)
    config = spec_to_hf_config(spec, case.layers)
    assert config["num_hidden_layers"] == (case.layers or spec.num_layers)


def test_case_ids_are_unique_across_lists():
    ids = [c.id for c in ALL_CASES]
    assert len(ids) == len(set(ids))


def test_case_json_round_trips_and_rejects_unknown_fields():
    case = CPU_CASES[0]
    assert Case.from_json(case.to_json()) == case
    with pytest.raises(ValueError):
        Case.from_json(json.dumps({**json.loads(case.to_json()), "surprise": 1}))


@pytest.mark.parametrize("change", [
    dict(mode="decode"), dict(dtype="int8"), dict(attn="flash"), dict(seq_len=0),
    dict(new_tokens=8), dict(optimizer="adamw"), dict(grad_checkpointing=True),
    dict(lora_rank=8, lora_targets="attn"), dict(lora_targets="attn"), dict(layers=0),
])
def test_invalid_prefill_cases_are_reported(change):
    case = select(CPU_CASES, "prefill-qwen05-bf16-L128")[0]
    assert replace(case, **change).problems()


def test_cpu_list_exercises_every_estimator_component():
    cpu = CPU_CASES
    assert {c.mode for c in cpu} == set(MODES)
    assert {"float32", "bfloat16"} <= {c.dtype for c in cpu if c.mode == "load"}
    assert {128, 1024, 4096} <= {c.seq_len for c in cpu if c.mode == "prefill"}
    assert any(c.logits_to_keep == 0 for c in cpu if c.mode == "prefill")
    assert any(c.attn == "eager" for c in cpu if c.mode == "prefill")
    assert {1, 4} <= {c.batch for c in cpu if c.mode == "generate"}
    full = [c for c in cpu if c.mode == "train_full"]
    assert {"float32", "bfloat16"} <= {c.dtype for c in full}
    assert {True, False} == {c.grad_checkpointing for c in full}
    assert any(c.autocast for c in full)
    lora = [c for c in cpu if c.mode == "train_lora"]
    assert {8, 64} <= {c.lora_rank for c in lora}
    assert {"attn", "all-linear"} == {c.lora_targets for c in lora}
    assert {"float32", "bfloat16"} <= {c.dtype for c in lora}
    assert {True, False} == {c.grad_checkpointing for c in lora}
    archs = {spec_for(c.model)[0].architecture for c in cpu}
    assert {"llama", "qwen2", "qwen3", "mistral", "mixtral", "qwen2_moe", "gemma2",
            "gemma3_text"} <= archs
    assert any(c.layers for c in cpu), "larger families are measured scaled down"


def test_cpu_cases_fit_the_shared_machine():
    """Weights of every CPU case (x4 for AdamW state when fully trained) stay under ~6 GiB."""
    bytes_per = {"float32": 4, "bfloat16": 2, "float16": 2}
    for case in CPU_CASES:
        spec = scaled_spec(spec_for(case.model)[0], case.layers)
        factor = 4 if case.mode == "train_full" else 1
        weights = spec.total_params * bytes_per[case.dtype] * factor
        assert weights < 6 * 2**30, case.id


def test_select_by_glob():
    assert [c.id for c in select(CPU_CASES, "load-smol135-*")] == \
        ["load-smol135-fp32", "load-smol135-bf16"]
    assert len(select(CPU_CASES, "load-smol135-fp32, lora-*")) == 1 + sum(
        c.mode == "train_lora" for c in CPU_CASES)
    assert select(CPU_CASES, None) == list(CPU_CASES)
    assert select(CPU_CASES, "nothing-*") == []


def test_every_column_is_documented_once():
    assert len(COLUMN_NAMES) == len(set(COLUMN_NAMES))
    assert all(description.strip() for _, description in COLUMNS)


def _reading(phase, peak, steady, **counted):
    return {"phase": phase, "start_bytes": 0, "peak_bytes": peak, "steady_bytes": steady,
            "wall_s": 1.5, "peak_sampled_bytes": peak, "peak_hwm_bytes": peak,
            "ru_maxrss_bytes": peak * 2, "peak_reserved_bytes": None,
            "steady_reserved_bytes": None, "device_used_bytes": None, "counted": counted}


def test_rows_hold_every_column_and_put_counted_bytes_on_their_phase():
    case = select(CPU_CASES, "full-smol135-fp32-S512-b2")[0]
    info = {"architecture": "llama", "layers_used": 30, "device": "cpu", "torch_version": "x"}
    phases = [_reading("build", 600, 540, param_bytes=538), _reading("forward", 2700, 2500),
              _reading("backward", 2600, 1600, grad_bytes=538)]
    rows = rows_for(case, info, phases, "ok", "", 30.0, "2026-01-01T00:00:00Z")
    assert [r["phase"] for r in rows] == ["build", "forward", "backward"]
    assert all(tuple(r) == COLUMN_NAMES for r in rows)
    assert rows[0]["param_bytes"] == 538 and rows[1]["param_bytes"] == ""
    assert rows[2]["grad_bytes"] == 538 and rows[2]["phase_index"] == 2
    assert rows[0]["case_id"] == case.id and rows[0]["attn_impl"] == "sdpa"
    assert rows[0]["architecture"] == "llama" and rows[0]["peak_reserved_bytes"] == ""


def test_a_case_that_finished_no_phase_still_gets_a_row():
    case = CPU_CASES[0]
    rows = rows_for(case, {}, [], "timeout", "exceeded 300 s", None, "d")
    assert len(rows) == 1 and rows[0]["status"] == "timeout" and rows[0]["phase"] == ""


def test_summary_table_shows_weights_and_phase_peaks_in_mib():
    case = select(CPU_CASES, "full-smol135-fp32-S512-b2")[0]
    phases = [_reading("build", 600 * 2**20, 540 * 2**20), _reading("step2", 4000 * 2**20, 0)]
    rows = rows_for(case, {}, phases, "ok", "", 1.0, "d")
    line = summary_rows(rows)[0]
    assert line[:4] == [case.id, "ok", "540", "600"] and line[-1] == "4,000"
    assert case.id in render(rows)


def test_child_report_lines_are_parsed_and_rows_can_be_replaced(tmp_path):
    from benchmarks.measure.runner import CaseResult, _parse, drop_cases, write_rows

    case = CPU_CASES[0]
    stdout = "\n".join([
        "some library chatter",
        '@@info {"architecture": "llama", "device": "cpu"}',
        '@@phase ' + json.dumps(_reading("build", 10, 8, param_bytes=8)),
        '@@done {"case_wall_s": 3.5}',
    ])
    result = CaseResult(case=case, date="d")
    assert _parse(result, stdout) is True
    assert result.info["architecture"] == "llama" and result.case_wall_s == 3.5
    out = tmp_path / "r.csv"
    other = CaseResult(case=CPU_CASES[1], date="d")
    write_rows(out, result.rows(), append=False)
    write_rows(out, other.rows(), append=True)
    assert drop_cases(out, {case.id}) == 1
    assert out.read_text().count(CPU_CASES[1].id) == 1 and case.id not in out.read_text()
