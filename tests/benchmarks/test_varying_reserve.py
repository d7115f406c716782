"""benchmarks.varying_reserve: ms-swift's rows replayed with the recipe's own tensors and sample counts."""

import csv
import json

from benchmarks.accuracy import generic_training_plan, row_spec
from benchmarks.report import DATA
from benchmarks.varying_reserve import _mix, _samples, recipe_tensors
from fitcheck.estimate.training import step_tensors


def _swift_rows():
    with (DATA / "training_reference.csv").open(newline="") as f:
        return [r for r in csv.DictReader(f) if "ms-swift" in r["source"]]


def test_rows_above_2048_tokens_train_on_1000_rows_the_others_on_all():
    # scripts/benchmark/test_memory_time/run_single.py @4312aeb: train_dataset_sample 1000 above 2048
    notes = _swift_rows()[0]["notes"]
    assert _samples(notes, 2048) == 4959 and _samples(notes, 4096) == 1000
    mix = _mix(notes)
    assert mix is not None and (mix.minimum, mix.maximum) == (91, 19548)


def test_the_recipe_tensors_are_the_estimates_with_the_shifted_loss_and_accelerates_fp32_copy():
    configs = json.loads((DATA / "calibration" / "model-configs.json").read_text())
    r = _swift_rows()[0]
    spec = row_spec(r, configs)
    plan = generic_training_plan(r, spec)
    got = recipe_tensors(spec, plan)
    assert got.shifted_loss and got.output_fp32_copy
    base = step_tensors(spec, plan)
    assert (got.layer_work, got.vocab, got.loss_bytes) == (base.layer_work, base.vocab, base.loss_bytes)


def test_full_fine_tuning_replays_its_gradients_and_adamw_tensors_lora_keeps_its_adapters_static():
    configs = json.loads((DATA / "calibration" / "model-configs.json").read_text())
    for r in _swift_rows():
        if r["input_len"] != "2048" or r["model"] != "qwen-1_8b-chat":
            continue
        spec = row_spec(r, configs)
        plan = generic_training_plan(r, spec)
        got = recipe_tensors(spec, plan).params
        assert (got is not None) == (r["mode"] == "full"), r["notes"][:40]
        if got is not None:
            assert got.accumulation == 16 and got.grad_bytes == got.state_bytes == 2


def test_the_stored_counter_is_what_the_replay_gives():
    # the report reads benchmarks/results' stored replay (minutes to recompute); the 512-token rows are
    # recomputed here and must match it
    from benchmarks.varying_reserve import rows, stored

    saved = stored()
    orders = {int(x["orders"]) for x in saved.values()}
    assert len(orders) == 1
    got = rows(orders=orders.pop(), select=lambda r: r["input_len"] == "512" and r["mode"] == "lora")
    assert len(got) == 3
    for x in got:
        kept = saved[x["key"]]
        for k in ("measured", "needed", "roomy_min", "roomy_median", "roomy_max"):
            assert abs(float(kept[k]) - x[k]) < 0.006, (x["row"], k)


def test_the_stored_full_fine_tuning_row_is_the_replay_with_its_gradients_and_adamw_tensors():
    # Qwen-1.8B full fine-tuning at 1,024 tokens (~600 samples): with gradients and states static the
    # replay read 20.08 / 22.05 / 23.82 GiB; with them replayed the states and the step's temporaries
    # reuse the cached activation blocks, and the estimate's own reserve (19.67) is the floor
    from benchmarks.varying_reserve import rows, stored

    saved = stored()
    orders = int(next(iter(saved.values()))["orders"])
    got = rows(orders=orders, select=lambda r: r["input_len"] == "1024" and r["mode"] == "full"
               and r["model"] == "qwen-1_8b-chat")
    assert len(got) == 1
    kept = saved[got[0]["key"]]
    for k in ("roomy_min", "roomy_median", "roomy_max"):
        assert abs(float(kept[k]) - got[0][k]) < 0.006, k
    assert got[0]["roomy_max"] < 20.0


def test_the_report_scores_every_stored_row_against_its_replayed_counter():
    from benchmarks import report
    from benchmarks.varying_reserve import stored

    saved = stored()
    assert len(saved) == 37
    errs = report._swift_counter()
    assert len(errs) == len(saved)
    need = next(s for s in report.sources() if not s.pooled)
    assert "fixed-length" in need.name and len(need.errors) == len(saved)
