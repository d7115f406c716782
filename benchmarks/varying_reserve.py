"""ms-swift's benchmark against the caching allocator replayed over steps of varying length.

    python -m benchmarks.varying_reserve [--orders 16] [--max-orders 64] [--extend] [--jobs 2] [--write]
    python -m benchmarks.varying_reserve --lengths FILE [--jobs 2]   (another reading of the lengths)
    python -m benchmarks.varying_reserve --shared-order

The ms-swift table reads `torch.cuda.max_memory_reserved` at the end of a run on an 80 GB A100
(swift/trainers/trainers.py @4312aeb, Seq2SeqTrainer.train) whose samples vary in length: ms-swift
deletes samples longer than max_length (truncation_strategy 'delete', swift/llm/utils/template.py
@4312aeb `_encode`) and trains on all 4,959 samples of cls-fudan-news-zh, 1,000 drawn ones when
max_length > 2048 (scripts/benchmark/test_memory_time/run_single.py @4312aeb); batch 1 is one
sample.  Its earlier table (docs/source/LLM/Benchmark.md @e650d8b96, made by run_single.py @cfcb672)
truncates instead (truncation_strategy truncation_left: the last max_length tokens) and trains on the
file's first 1,000 rows at every max_length; each row's notes name its strategy and sample count, and
its rows published as out of memory are judged apart (`oom_rows`).  For each row this prints the measured figure, the estimate (the reserve the run needs:
the smallest GPU it fits in) and what a roomy GPU's counter reads when the estimate's own step
tensors are replayed through the allocator's rules over that many samples of the data set's lengths
(cls-fudan-news-zh's as its tables' time columns give them, benchmarks/swift_lengths.py: `_lengths`),
for several sample orders (fitcheck.estimate.varying_lengths), with the
recipe's own loss-path tensors and, for full fine-tuning, its gradients, AdamW states and step
temporaries (`recipe_tensors`), and how many orders read at most the measured
figure.  No constant is taken from the table.  What it finds and leaves: docs/accuracy.md,
"ms-swift's counter, replayed".
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import re
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from benchmarks.accuracy import Skip, _gpu_bytes, generic_training_plan, is_oom, row_spec, training_row
from benchmarks.report import DATA, RESULTS
from fitcheck.calibration import TORCH_CUDA_CONTEXT
from fitcheck.engines.training.memory import estimate_training, step_activations, step_tensors, trained_params
from fitcheck.errors import FitcheckError
from fitcheck.estimate.allocator import OutOfMemory
from fitcheck.estimate.result import MASTER_WEIGHTS, WEIGHTS
from fitcheck.estimate.varying_lengths import BinnedLengths, LengthMix, StepTensors, replay_steps
from fitcheck.units import GiB


def _mix(notes: str) -> LengthMix | None:
    m = re.search(r"token lengths\s+([\d.]+)\s*±\s*([\d.]+),\s*min\s+(\d+),\s*max\s+(\d+)", notes)
    return LengthMix(float(m.group(1)), float(m.group(2)), int(m.group(3)), int(m.group(4))) if m else None


def _lengths(notes: str, histogram: Path | None = None) -> LengthMix | BinnedLengths | None:
    """What the replay draws a row's sample lengths from: for cls-fudan-news-zh the histogram its tables'
    time columns give with the mean and sd of the card the notes state (benchmarks/swift_lengths.py: the
    card's log-normal misses the later table's times by 13–18 % rms, the histogram by 0.6–2 %, and the
    earlier table's, not fitted, by 0.5–1.6 %), or the one in `histogram` (`--lengths`: another reading, as
    `python -m benchmarks.swift_lengths --within log-uniform --write --out` gives); another data set's card, a
    log-normal with its moments."""
    card = _mix(notes)
    if card is None or "cls-fudan-news-zh" not in notes:
        return card
    from benchmarks.swift_lengths import CARD
    from benchmarks.swift_lengths import stored as stored_lengths

    # the notes round the card's 3234.4 ± 2547.5 to whole tokens
    assert abs(card.mean - CARD.mean) < 1 and abs(card.sd - CARD.sd) < 1, "another card than the histogram's"
    assert (card.minimum, card.maximum) == (CARD.minimum, CARD.maximum), "another card than the histogram's"
    return stored_lengths() if histogram is None else stored_lengths(histogram)


def _delete_longer(notes: str) -> bool:
    """Whether the row's samples longer than max_length were deleted (ms-swift's truncation_strategy
    'delete', the default @4312aeb) or truncated to their last max_length tokens ('truncation_left',
    the earlier table's setting): the notes name the strategy; rows that name none and say "deleted"
    are the delete rows."""
    m = re.search(r"truncation_strategy\s+(delete|truncation_left)\b", notes)
    return m.group(1) == "delete" if m else "deleted" in notes


def _samples(notes: str, max_length: int) -> int:
    total = int(re.search(r"(\d+) samples", notes).group(1))  # type: ignore[union-attr]
    m = re.search(r"(\d+) drawn when max_length > (\d+)", notes)
    return int(m.group(1)) if m and max_length > int(m.group(2)) else total


def recipe_tensors(spec, plan) -> StepTensors:
    """The estimate's step tensors as ms-swift's recipe allocates them: Qwen(1)'s loss over the shifted
    positions (modeling_qwen.py `lm_logits[..., :-1, :]`) and, since its Seq2SeqTrainer is the HF Trainer
    (transformers 4.36) running bf16 through accelerate's autocast, the fp32 copy of the logits that
    accelerate's ConvertOutputsToFp32 makes as forward returns (accelerate v0.25.0 accelerator.py
    prepare_model); and CUDA autocast's loss: 16-bit log-softmax, nll_loss's fp32 copy of the log-probs
    (`StepTensors.upcast_log_probs`).  The live peak stays 12 bytes per logit (forward: 2 + 2 + 4 + 4 as
    accelerate copies the logits); what changes is that at most two fp32 vocabulary-sized tensors are live
    at once, not three, and which blocks the allocator hands out.  Full fine-tuning's gradients, AdamW's
    states and its step's temporaries are made and freed where the Trainer's loop makes them
    (`StepTensors.params`: fitcheck.estimate.training.trained_params).  Without flash-attention, Qwen(1)'s
    float attention mask goes to torch 2.1.1's memory-efficient SDPA, which materializes it for every head
    at lengths that are not a multiple of 16 (`StepTensors.expanded_mask_heads`); ms-swift's collator passes
    an attention mask and pads a batch only to its longest sample (swift/llm/utils/utils.py @4312aeb
    data_collate_fn)."""
    qwen_sdpa_mask = spec.architecture == "qwen" and plan.attention != "flash"
    return replace(step_tensors(spec, plan), shifted_loss=True, output_fp32_copy=plan.zero is None,
                   upcast_log_probs=True, params=trained_params(spec, plan),
                   expanded_mask_heads=spec.num_attention_heads if qwen_sdpa_mask else 0)


# The replayed counter per row, as `--write` stores it (the report reads it: a replay takes minutes).
STORED = RESULTS / "ms-swift-counter-replay-2026-12-01.csv"
FIELDS = ("key", "row", "measured", "needed", "orders", "roomy_min", "roomy_median", "roomy_max",
          "orders_at_or_below", "roomy_by_order")


def row_key(r: dict) -> str:
    """A row of training_reference.csv, uniquely: its setup columns and a digest of its notes."""
    digest = hashlib.sha1(r.get("notes", "").encode()).hexdigest()[:8]
    return "|".join([*(r[k] for k in ("model", "mode", "precision", "batch", "input_len", "grad_checkpointing",
                                      "flash_attn")), digest])


def stored() -> dict[str, dict]:
    """`STORED` by row key."""
    with STORED.open(newline="") as f:
        return {x["key"]: x for x in csv.DictReader(f)}


# Sample orders replayed per row.  The measured figure is one run's order, the report scores it against
# the replayed orders' median, and the median of n orders has a sampling error of about 1.25 σ / √n: over
# 60 orders (`rows(60, select=…)`) the widest row, Qwen-1.8B full fine-tuning at 2,048 tokens (about 2,200
# samples), spreads 21.9–49.2 GiB (quartiles 26.4 and 32.7, σ ≈ 5 GiB about a median of 30.6), so 4
# orders left ±3.1 GiB (10 %) of noise in the figure scored, 16 leave ±1.5 GiB (5 %).  Unit: orders; a
# Monte Carlo precision, not a fit (docs/accuracy.md, "Orders until the median is precise").
ORDERS = 16
# ... and more, ORDERS_STEP at a time, until that error is at most MEDIAN_PRECISION of the median, up to
# MAX_ORDERS: a row whose orders all read alike (the fixed-length floor) stops at 16, the row above at 112
# (±0.58 GiB, 2.0 %), the widest at 256.  At 3 % (up to 64) that row's median carried ±2.6 %, as much as its
# distance from the −15 % target.  Units: orders; a share of the median.
ORDERS_STEP = 16
MEDIAN_PRECISION = 0.02
MAX_ORDERS = 256


def rows(orders: int = ORDERS, select=None, jobs: int = 1, max_orders: int | None = None,
         extend: bool = False, lengths: Path | None = None) -> list[dict]:
    """Every varying-length `max_memory_reserved` row (or those `select(row)` keeps), replayed over
    `orders` sample orders (seeds 0 … orders − 1) and more where the median is not yet precise, up to
    `max_orders` (default: `orders`, no more), `jobs` rows at a time in worker processes; `extend`
    starts from the stored orders' figures instead of replaying them again; `lengths`: a histogram file to draw
    cls-fudan-news-zh's lengths from instead of the stored one (`_lengths`)."""
    max_orders = orders if max_orders is None else max_orders
    kept = stored() if extend else {}
    configs = json.loads((DATA / "calibration" / "model-configs.json").read_text())
    todo = []
    seen = set()
    with (DATA / "training_reference.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            if _mix(r.get("notes", "")) is None or "reserved" not in r.get("metric", ""):
                continue
            key = tuple(r[k] for k in ("model", "mode", "precision", "batch", "input_len", "grad_checkpointing",
                                       "flash_attn", "notes"))
            if key in seen or (select is not None and not select(r)):
                continue
            seen.add(key)
            todo.append(r)
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs) as pool:
            done = list(pool.map(_row, todo, [configs] * len(todo), [orders] * len(todo), [max_orders] * len(todo),
                                 [_known(kept, r) for r in todo], [lengths] * len(todo)))
    else:
        done = [_row(r, configs, orders, max_orders, _known(kept, r), lengths) for r in todo]
    return [x for x in done if x is not None]


def _known(kept: dict[str, dict], r: dict) -> tuple[list[float], float] | None:
    """The stored figures of a row's orders and the estimate's need they were floored at."""
    x = kept.get(row_key(r))
    if not (x and x.get("roomy_by_order")):
        return None
    return [float(v) for v in x["roomy_by_order"].split()], float(x["needed"])


def _precise(values: list[float]) -> bool:
    """Whether the median of these orders is known to MEDIAN_PRECISION (its standard error, about
    1.25 σ / √n, at most that share of it)."""
    if len(values) < 2 or any(math.isinf(v) for v in values):
        return True
    med = statistics.median(values)
    return 1.2533 * statistics.stdev(values) / math.sqrt(len(values)) <= MEDIAN_PRECISION * med


def _row(r: dict, configs: dict, orders: int, max_orders: int = MAX_ORDERS,
         known: tuple[list[float], float] | None = None, lengths: Path | None = None) -> dict | None:
    """One row replayed (None where the row does not map onto a request): `orders` sample orders, then
    ORDERS_STEP more at a time until the median is precise (`_precise`) or `max_orders` are replayed;
    `known`: the figures of the first orders already replayed and the need they were floored at (the
    store's, to extend it).  An order's figure is the larger of the estimate's need and the replay's, so
    where the estimate's need has changed since, the orders that read the old floor are replayed again and
    the others take the new floor: the store follows the estimate without replaying every order."""
    mix = _lengths(r["notes"], lengths)
    assert mix is not None
    try:
        row = training_row(r, configs)
        spec = row_spec(r, configs)
        plan = generic_training_plan(r, spec)
        dev = estimate_training(spec, plan).gpu_devices[0]
    except (Skip, FitcheckError):
        return None
    delete = _delete_longer(r["notes"])
    n = _samples(r["notes"], plan.seq_len)
    # the static tensors' share of the GPU: what the allocated peak holds besides the step's
    acts = step_activations(spec, plan)
    static = dev.peak_allocated_bytes - (acts.saved + max(acts.recompute, acts.logits))
    if trained_params(spec, plan) is not None:
        # the replay makes the gradients, the optimizer states and the step's temporaries itself
        static = sum(c.bytes for c in dev.components if c.counted_in == "allocated"
                     and c.name in (WEIGHTS, MASTER_WEIGHTS))
    room = _gpu_bytes(r.get("gpu", "")) - TORCH_CUDA_CONTEXT - static
    # the live peak of steps at max_length once every static tensor is there (full fine-tuning: the
    # gradients from the second micro-batch on, AdamW's states after the first optimizer step: two
    # accumulation windows and two micro-batches), which the estimate's allocated peak holds; a
    # replayed run whose own live peak is higher (tensors only some lengths make: the padded
    # attention mask) adds the difference
    steady = (plan.seq_len,) * plan.batch * (2 * max(plan.grad_accum, 1) + 2)
    fixed = replay_steps(recipe_tensors(spec, plan), steady, plan.batch).peak_allocated

    def order(seed: int) -> float:
        lengths = mix.draw(n, plan.seq_len, delete_longer=delete, seed=seed)
        try:
            rep = replay_steps(recipe_tensors(spec, plan.with_changes(seq_len=max(lengths))), lengths,
                               plan.batch, capacity=room)
        except OutOfMemory:
            return float("inf")
        live_extra = max(rep.peak_allocated - fixed, 0)
        return max(dev.peak_reserved_bytes, dev.peak_allocated_bytes + live_extra + rep.excess) / GiB

    roomy = []
    if known:
        floor = dev.peak_reserved_bytes / GiB
        values, old_floor = known
        same = round(floor, 2) == round(old_floor, 2)
        roomy = [x if same or x > old_floor + 0.005 else order(seed) for seed, x in enumerate(values[:max_orders])]
        roomy = [max(x, round(floor, 2)) for x in roomy]
        # the rule on the figures as they now read: as many orders as the first precise median needs
        roomy = roomy[:next((n for n in range(orders, len(roomy), ORDERS_STEP) if _precise(roomy[:n])), len(roomy))]
    roomy += [order(seed) for seed in range(len(roomy), orders)]
    while len(roomy) < max_orders and not _precise(roomy):
        roomy += [order(seed) for seed in range(len(roomy), min(len(roomy) + ORDERS_STEP, max_orders))]
    first = r["notes"].split(";")[0]
    variant = first if first.startswith("lora rank") and first != "lora rank 8" else ""
    variant += " all-linear" if "all-linear" in r["notes"] else ""
    label = (f"{r['model']} {r['mode']} {r['precision']} len={plan.seq_len} b={plan.batch}"
             f"{'' if plan.grad_checkpointing else ' no-ckpt'}{'' if plan.attention == 'flash' else ' no-flash'}"
             f"{(' ' + variant.strip()) if variant.strip() else ''}"
             f"{'' if delete else f' truncated, {n} samples'}")
    return {"key": row_key(r), "row": label, "measured": row.measured_gib, "needed": row.predicted_gib,
            "roomy_min": min(roomy), "roomy_median": statistics.median(roomy), "roomy_max": max(roomy),
            "orders_at_or_below": sum(x <= row.measured_gib for x in roomy), "orders": len(roomy),
            "roomy_by_order": " ".join(f"{x:.2f}" for x in roomy)}


def shared_order(saved: dict[str, dict] | None = None, best: int = 1) -> list[dict]:
    """Each stored row read on the orders its siblings pick: every run at one `max_length` of one table
    trains on the same sample order (`run_single.py` builds RandomState(42) in every process and the
    sample count is the same), and seed k draws the same lengths for every row of a length, so the
    orders that reproduce the *other* rows of that length and table (leave-one-out: the row's own figure
    is never read) are the best guess at the run's order.  Per row: the `best` seeds with the smallest
    mean |log(replayed / measured)| over its siblings whose replay varies with the order, the siblings'
    mean error on them, and the row's replayed figure there (median over those seeds).  A diagnostic,
    not scored: with 16 orders the closest seed still misses the siblings by several per cent."""
    saved = stored() if saved is None else saved
    got = list(saved.values())

    def group(x: dict) -> tuple[str, str]:
        m = re.search(r"len=(\d+) ", x["row"])
        return (m.group(1) if m else "", "truncated" if "truncated" in x["row"] else "deleted")

    def orders(x: dict) -> list[float]:
        return [float(v) for v in x["roomy_by_order"].split()]

    out = []
    for x in got:
        sibs = [y for y in got if y is not x and group(y) == group(x) and max(orders(y)) > min(orders(y)) + 0.01]
        if not sibs:
            continue
        n = min(len(orders(y)) for y in [x, *sibs])
        scores = []
        for k in range(n):
            errs = [math.log(orders(y)[k] / float(y["measured"])) for y in sibs]
            scores.append((statistics.fmean(abs(e) for e in errs), statistics.fmean(errs), k))
        picked = sorted(scores)[:best]
        value = statistics.median(orders(x)[k] for _, _, k in picked)
        out.append({"key": x["key"], "row": x["row"], "measured": float(x["measured"]), "siblings": len(sibs),
                    "seeds": [k for _, _, k in picked],
                    "siblings_error": statistics.fmean(m for _, m, _ in picked),
                    "replayed": value, "error": value / float(x["measured"]) - 1,
                    "median_error": float(x["roomy_median"]) / float(x["measured"]) - 1})
    return out


def oom_rows() -> list[tuple[str, float, str]]:
    """The ms-swift rows published as out of memory, as fitcheck judges them on the row's GPU (the
    a100-80gb profile, its memory as the row states it): (row, the GiB the estimate needs, the
    verdict's status for the GPU) -- "does_not_fit" where fitcheck agrees with the run."""
    from fitcheck.estimate.verdict import judge
    from fitcheck.options import DEFAULTS
    from fitcheck.profiles import load_profile
    from fitcheck.profiles.overrides import MachineOverrides, apply_overrides

    configs = json.loads((DATA / "calibration" / "model-configs.json").read_text())
    out = []
    with (DATA / "training_reference.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            if not is_oom(r) or "ms-swift" not in r.get("source", ""):
                continue
            spec = row_spec(r, configs)
            plan = generic_training_plan(r, spec)
            est = estimate_training(spec, plan)
            machine = apply_overrides(load_profile("a100-80gb"),
                                      MachineOverrides(vram=f"{_gpu_bytes(r.get('gpu', '')) // GiB}GiB"))
            verdict = judge(est, machine, DEFAULTS["headroom"] / 100)
            gpu = next(d for d in verdict.devices if d.kind == "gpu")
            out.append((f"{r['model']} {r['mode']} {r['precision']} len={plan.seq_len} b={plan.batch}",
                         gpu.need_bytes / GiB, gpu.status))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=ORDERS, help="sample orders replayed per row, at least")
    ap.add_argument("--max-orders", type=int, default=MAX_ORDERS,
                    help="more orders, ORDERS_STEP at a time, until the median is precise (MEDIAN_PRECISION)")
    ap.add_argument("--extend", action="store_true", help="start from the stored orders instead of replaying them")
    ap.add_argument("--jobs", type=int, default=1, help="rows replayed at a time (worker processes)")
    ap.add_argument("--write", action="store_true", help=f"store the rows in {STORED.relative_to(RESULTS.parent.parent)}")
    ap.add_argument("--lengths", type=Path,
                    help="draw cls-fudan-news-zh's lengths from this histogram file (a check; not with --write)")
    ap.add_argument("--shared-order", action="store_true",
                    help="read the stored rows on the orders their siblings pick (no replay; see shared_order)")
    args = ap.parse_args(argv)
    if args.shared_order:
        print("| row | measured GiB | siblings | seed | siblings' error there | replayed there | error | "
              "error at the median of the orders |")
        print("|---|---|---|---|---|---|---|---|")
        for y in shared_order():
            print(f"| {y['row']} | {y['measured']:.2f} | {y['siblings']} | {' '.join(map(str, y['seeds']))} | "
                  f"{y['siblings_error']:+.1%} | {y['replayed']:.2f} | {y['error']:+.1%} | {y['median_error']:+.1%} |")
        return 0
    if args.lengths and (args.write or args.extend):
        ap.error("--lengths replays another reading of the lengths: the store keeps the stored histogram's")
    res = rows(args.orders, jobs=args.jobs, max_orders=args.max_orders, extend=args.extend, lengths=args.lengths)
    if args.write:
        with STORED.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore", lineterminator="\n")
            w.writeheader()
            for x in res:
                w.writerow({k: (f"{v:.2f}" if isinstance(v, float) else v) for k, v in x.items()})
    print("| row | measured GiB | estimate (needed) | roomy GPU, replayed: min / median / max | orders ≤ measured |")
    print("|---|---|---|---|---|")
    inside = between = 0
    for x in res:
        inside += x["roomy_min"] <= x["measured"] <= x["roomy_max"]
        between += x["needed"] <= x["measured"] <= x["roomy_max"]
        print(f"| {x['row']} | {x['measured']:.2f} | {x['needed']:.2f} | {x['roomy_min']:.2f} / "
              f"{x['roomy_median']:.2f} / {x['roomy_max']:.2f} | {x['orders_at_or_below']} / {x['orders']} |")
    print(f"\n{len(res)} rows: {between} between the estimate and the largest replayed reserve, "
          f"{inside} within the replayed orders' range")
    for name, truncated in (("later table (deleted)", False), ("earlier table (truncated)", True)):
        errs = [x["roomy_median"] / x["measured"] - 1 for x in res if ("truncated" in x["row"]) == truncated]
        if errs:
            print(f"{name}: the median of the orders against the counter, median |error| "
                  f"{statistics.median(abs(e) for e in errs):.2%}, worst {min(errs):+.2%} ({len(errs)} rows)")
    for label, need, status in oom_rows():
        print(f"published out of memory: {label}: fitcheck needs {need:.2f} GiB on the GPU, {status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
