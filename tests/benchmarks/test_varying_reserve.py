"""benchmarks.varying_reserve: ms-swift's rows replayed with the recipe's own tensors and sample counts."""

import csv
import json

from benchmarks.accuracy import generic_training_plan, row_spec
from benchmarks.report import DATA
from benchmarks.varying_reserve import _delete_longer, _lengths, _mix, _samples, recipe_tensors
from fitcheck.engines.training.memory import step_tensors


def _swift_rows(source: str = "@4692215"):
    with (DATA / "training_reference.csv").open(newline="") as f:
        return [r for r in csv.DictReader(f) if "ms-swift" in r["source"] and source in r["source"]]


# The store keeps every order's figure; the tests recompute the first orders (seeds 0, 1) of a few rows,
# which a stale store fails, and check the stored summary is that of the stored orders.
RECOMPUTED = 2


def _matches_store(got: list[dict], saved: dict[str, dict]) -> None:
    import statistics

    for x in got:
        kept = saved[x["key"]]
        for k in ("measured", "needed"):
            assert abs(float(kept[k]) - x[k]) < 0.006, (x["row"], k)
        by_order = [float(v) for v in kept["roomy_by_order"].split()]
        assert len(by_order) == int(kept["orders"]) >= 16
        for a, b in zip(x["roomy_by_order"].split(), by_order[:RECOMPUTED], strict=True):
            assert abs(float(a) - b) < 0.006, x["row"]
        assert abs(min(by_order) - float(kept["roomy_min"])) < 0.006
        assert abs(max(by_order) - float(kept["roomy_max"])) < 0.006
        assert abs(statistics.median(by_order) - float(kept["roomy_median"])) < 0.006
        assert int(kept["orders_at_or_below"]) == sum(v <= float(kept["measured"]) for v in by_order)


def test_rows_above_2048_tokens_train_on_1000_rows_the_others_on_all():
    # scripts/benchmark/test_memory_time/run_single.py @4312aeb: train_dataset_sample 1000 above 2048
    notes = _swift_rows()[0]["notes"]
    assert _samples(notes, 2048) == 4959 and _samples(notes, 4096) == 1000
    mix = _mix(notes)
    assert mix is not None and (mix.minimum, mix.maximum) == (91, 19548)


def test_both_tables_draw_cls_fudan_news_zh_lengths_from_the_histogram_its_time_columns_give():
    from benchmarks.swift_lengths import stored
    from fitcheck.estimate.varying_lengths import LengthMix

    for source in ("@4692215", "@e650d8b96"):
        for r in _swift_rows(source):
            assert _lengths(r["notes"]) == stored()
    # another data set's card keeps the log-normal with its moments
    other = "token lengths 1000 ± 500, min 10, max 4000"
    assert _lengths(other) == LengthMix(1000, 500, 10, 4000)


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
    got = rows(orders=RECOMPUTED, select=lambda r: r["input_len"] == "512" and r["mode"] == "lora"
               and "@4692215" in r["source"])
    assert len(got) == 3
    _matches_store(got, saved)


def test_the_stored_full_fine_tuning_row_is_the_replay_with_its_gradients_and_adamw_tensors():
    # Qwen-1.8B full fine-tuning at 1,024 tokens (~600 samples): with gradients and states static the
    # replay read 20.08 / 22.05 / 23.82 GiB; with them replayed the states and the step's temporaries
    # reuse the cached activation blocks, and the estimate's own reserve (19.67) is the floor
    from benchmarks.varying_reserve import rows, stored

    saved = stored()
    got = rows(orders=RECOMPUTED, select=lambda r: r["input_len"] == "1024" and r["mode"] == "full"
               and r["model"] == "qwen-1_8b-chat" and "@4692215" in r["source"])
    assert len(got) == 1
    _matches_store(got, saved)
    assert float(saved[got[0]["key"]]["roomy_max"]) < 20.0


def test_the_report_scores_every_stored_row_against_its_replayed_counter():
    from benchmarks import report
    from benchmarks.varying_reserve import stored

    saved = stored()
    assert len(saved) == 37 + 39
    assert len(report._swift_counter()) == 37 and len(report._swift_counter(report.SWIFT_EARLIER)) == 39
    need = [s for s in report.sources() if not s.pooled and "fixed-length" in s.name]
    assert [len(s.errors) for s in need] == [37, 39]
    assert "earlier" in need[1].name
    shared = [s for s in report.sources() if not s.pooled and "sample order" in s.name]
    assert [len(s.errors) for s in shared] == [37]


def _stored_row(key: str, length: int, measured: float, by_order: list[float]) -> dict:
    import statistics

    return {"key": key, "row": f"m lora bf16 len={length} b=1", "measured": str(measured),
            "roomy_median": str(statistics.median(by_order)), "roomy_by_order": " ".join(map(str, by_order))}


def test_every_stored_row_has_its_orders_until_its_median_is_precise():
    from benchmarks.varying_reserve import MAX_ORDERS, ORDERS, ORDERS_STEP, _precise, stored

    counts = []
    for x in stored().values():
        by_order = [float(v) for v in x["roomy_by_order"].split()]
        counts.append(len(by_order))
        assert ORDERS <= len(by_order) <= MAX_ORDERS and (len(by_order) - ORDERS) % ORDERS_STEP == 0
        # stopped early only once precise, and not one step later than needed
        assert len(by_order) == MAX_ORDERS or _precise(by_order), x["row"]
        assert len(by_order) == ORDERS or not _precise(by_order[:-ORDERS_STEP]), x["row"]
    # rows whose orders all read the estimate's floor stop at 16; the widest go further
    assert min(counts) == ORDERS and max(counts) > 4 * ORDERS


def test_the_median_is_precise_when_its_error_is_small_against_it():
    from benchmarks.varying_reserve import MEDIAN_PRECISION, _precise

    assert _precise([20.0] * 16)                     # every order alike
    assert not _precise([10.0, 30.0] * 8)            # σ ≈ 10 about 20: ±3.2, 16 %
    spread = [20.0 - 0.5, 20.0 + 0.5] * 8            # σ ≈ 0.5 about 20: ±0.16, 0.8 %
    assert _precise(spread) and MEDIAN_PRECISION > 0.008
    assert _precise([1.0, float("inf")])             # out of memory in one order: nothing to refine


def test_a_row_is_read_on_the_order_its_siblings_pick_never_on_its_own_figure():
    from benchmarks.varying_reserve import shared_order

    # seed 1 reproduces both siblings at 2,048 tokens; the row reads 30 there, whatever its own figure
    saved = {"a": _stored_row("a", 2048, 10.0, [8.0, 10.0, 14.0]),
             "b": _stored_row("b", 2048, 20.0, [15.0, 20.5, 30.0]),
             "c": _stored_row("c", 2048, 31.0, [20.0, 30.0, 40.0]),
             "d": _stored_row("d", 4096, 50.0, [10.0, 11.0, 12.0])}
    got = {x["key"]: x for x in shared_order(saved)}
    assert got["c"]["seeds"] == [1] and got["c"]["replayed"] == 30.0
    assert abs(got["c"]["error"] - (30.0 / 31.0 - 1)) < 1e-12
    assert got["c"]["median_error"] == got["c"]["error"]
    saved["c"] = _stored_row("c", 2048, 60.0, [20.0, 30.0, 40.0])
    assert {x["key"]: x for x in shared_order(saved)}["c"]["replayed"] == 30.0
    # a length with no sibling whose replay varies is not read
    assert "d" not in got
    # a row of the other table (truncated) is no sibling
    saved["e"] = dict(_stored_row("e", 2048, 1.0, [100.0, 1.0, 100.0]), row="m lora bf16 len=2048 b=1 truncated, 1000 samples")
    assert {x["key"]: x for x in shared_order(saved)}["c"]["seeds"] == [1]


# ms-swift's earlier table (docs/source/LLM/Benchmark.md @e650d8b96, as added at cfcb672): truncation_left,
# train_dataset_sample 1000 at every max_length, held out


def test_the_earlier_tables_rows_load_with_their_provenance():
    got = _swift_rows("@e650d8b96")
    assert len(got) == 43
    assert all("docs/source/LLM/Benchmark.md @e650d8b96" in r["source"] for r in got)
    assert {r["model"] for r in got} == {"qwen-1_8b-chat", "qwen-7b-chat", "qwen-14b-chat", "yi-6b-chat",
                                         "yi-34b-chat"}
    # published in MiB, stored in GiB: 7B LoRA at 2,048 tokens read 19362 MiB
    seven = [r for r in got if r["model"] == "qwen-7b-chat" and r["mode"] == "lora" and r["precision"] == "bf16"
             and r["input_len"] == "2048" and r["batch"] == "1" and r["grad_checkpointing"] == "yes"
             and r["flash_attn"] == "yes" and r["notes"].startswith("lora rank 8; target_modules")]
    assert len(seven) == 1 and abs(float(seven[0]["measured_gb"]) * 1024 - 19362) < 0.1
    assert "published 19362 MiB" in seven[0]["notes"]
    assert sorted((r["model"], r["input_len"]) for r in got if r["measured_gb"] == "OOM") == [
        ("qwen-14b-chat", "512"), ("qwen-7b-chat", "8192")]


def test_the_earlier_table_truncates_to_max_length_over_the_first_1000_rows_the_later_deletes():
    for r in _swift_rows("@e650d8b96"):
        assert not _delete_longer(r["notes"])
        for n in (512, 2048, 4096, 8192):
            assert _samples(r["notes"], n) == 1000
        mix = _mix(r["notes"])
        assert mix is not None and (mix.mean, mix.sd, mix.minimum, mix.maximum) == (3234, 2547, 91, 19548)
    assert all(_delete_longer(r["notes"]) for r in _swift_rows())
    # notes naming no strategy keep the old reading: "deleted" deletes, anything else truncates
    assert _delete_longer("samples longer than max_length deleted") and not _delete_longer("")
    # batch 8: gradient_accumulation_steps = ceil(16 / 8) (argument.py @cfcb672)
    configs = json.loads((DATA / "calibration" / "model-configs.json").read_text())
    r = next(r for r in _swift_rows("@e650d8b96") if r["batch"] == "8")
    assert generic_training_plan(r, row_spec(r, configs)).grad_accum == 2


def test_the_earlier_tables_stored_counter_is_the_truncated_replay():
    # the 512-token LoRA rows of the earlier table, recomputed: each order draws 1,000 lengths truncated to
    # 512, and the store must match (a stale store fails here)
    from benchmarks.varying_reserve import rows, stored

    saved = stored()
    got = rows(orders=RECOMPUTED, select=lambda r: r["input_len"] == "512" and r["mode"] == "lora"
               and "@e650d8b96" in r["source"])
    assert len(got) == 3
    assert all("truncated, 1000 samples" in x["row"] for x in got)
    _matches_store(got, saved)


def test_the_earlier_tables_out_of_memory_rows_do_not_fit_an_80gb_a100():
    from benchmarks.accuracy import Skip, training_row
    from benchmarks.varying_reserve import oom_rows

    got = oom_rows()
    # Qwen-14B at 512 tokens needs more than the GPU; Qwen-7B at 8,192 tokens a fixed-length step fits only
    # inside the headroom (78.8 GiB: the loss's stranded fp32 block, 4.6 GiB, decides its reserve), and the
    # run's varying lengths (truncated to 8,192) are what ran it out of memory: oom_orders_replayed
    assert len(got) == 2 and all(status in ("does_not_fit", "tight") for _, _, status in got)
    assert all(need > 0.9 * 80 for _, need, _ in got)
    assert sum(status == "does_not_fit" for _, _, status in got) == 1
    r = next(r for r in _swift_rows("@e650d8b96") if r["measured_gb"] == "OOM")
    try:
        training_row(r)
    except Skip as exc:
        assert "out of memory" in str(exc)
    else:
        raise AssertionError("an OOM row has no figure to score")


def test_the_7b_8192_oom_row_runs_out_of_memory_over_its_varying_lengths():
    # Qwen-7B-Chat full fine-tuning at max_length 8,192 (the earlier table: truncated, 1,000 samples) went out
    # of memory on an 80 GB A100.  A fixed-length step at 8,192 tokens needs 76.3 GiB replayed (with the
    # weights), inside the GPU; the caching allocator replayed over the recipe's lengths in the GPU's room runs
    # out of memory for two of the first six sample orders and the others come within 3.2 % of the room (7 of
    # 16 orders run out, the others reach 63.1-65.1 of its 65.1 GiB, with the lengths the tables' time columns
    # give; with the card's log-normal two of the first three ran out)
    from benchmarks.accuracy import _gpu_bytes
    from fitcheck.calibration import TORCH_CUDA_CONTEXT
    from fitcheck.engines.training.memory import estimate_training
    from fitcheck.estimate.allocator import OutOfMemory
    from fitcheck.estimate.result import WEIGHTS
    from fitcheck.estimate.varying_lengths import replay_steps

    configs = json.loads((DATA / "calibration" / "model-configs.json").read_text())
    r = next(r for r in _swift_rows("@e650d8b96") if r["measured_gb"] == "OOM" and r["model"] == "qwen-7b-chat")
    spec = row_spec(r, configs)
    plan = generic_training_plan(r, spec)
    dev = estimate_training(spec, plan).gpu_devices[0]
    room = _gpu_bytes(r["gpu"]) - TORCH_CUDA_CONTEXT - dev.component(WEIGHTS)
    mix = _lengths(r["notes"])
    assert mix is not None
    outcomes: list[float | str] = []
    for seed in range(6):
        lengths = mix.draw(_samples(r["notes"], plan.seq_len), plan.seq_len, delete_longer=_delete_longer(r["notes"]),
                           seed=seed)
        try:
            rep = replay_steps(recipe_tensors(spec, plan.with_changes(seq_len=max(lengths))), lengths, 1, capacity=room)
            outcomes.append(rep.peak_reserved / room)
        except OutOfMemory:
            outcomes.append("oom")
    assert outcomes.count("oom") >= 2, outcomes
    assert all(x == "oom" or x > 0.968 for x in outcomes), outcomes


def test_an_extended_row_replays_again_only_the_orders_that_read_an_old_floor():
    # an order's figure is max(the estimate's need, the replay's): where the need has changed since the
    # store was written, the orders at the old floor are replayed, the others only take the new floor
    from benchmarks.varying_reserve import _row, row_key, stored

    configs = json.loads((DATA / "calibration" / "model-configs.json").read_text())
    saved = stored()
    r = next(r for r in _swift_rows() if r["input_len"] == "512" and r["model"] == "qwen-1_8b-chat"
             and r["mode"] == "lora")
    kept = saved[row_key(r)]
    values, need = [float(v) for v in kept["roomy_by_order"].split()][:RECOMPUTED], float(kept["needed"])
    # the same floor: the stored figures stand as they are (a wrong figure is kept, not replayed)
    got = _row(r, configs, RECOMPUTED, RECOMPUTED, ([99.0, values[1]], need))
    assert got is not None and got["roomy_by_order"].split()[0] == "99.00"
    # an old floor above every figure: each order is replayed again, and reads what the store holds
    got = _row(r, configs, RECOMPUTED, RECOMPUTED, ([0.0, 0.0], 100.0))
    assert got is not None
    assert [abs(float(a) - b) < 0.006 for a, b in zip(got["roomy_by_order"].split(), values, strict=True)] == [True] * 2
    # an old floor below every figure, a new one above some: those take the new floor, unreplayed
    got = _row(r, configs, RECOMPUTED, RECOMPUTED, ([need - 1.0, need + 5.0], need - 2.0))
    assert got is not None and got["roomy_by_order"].split() == [f"{need:.2f}", f"{need + 5.0:.2f}"]
