"""README's accuracy table is what `python -m benchmarks.report` prints, and the capacity check holds."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import report  # noqa: E402
from benchmarks.capacity import capacities  # noqa: E402


def test_readme_table_is_the_generated_one():
    in_readme = report.readme_table((ROOT / "README.md").read_text())
    assert in_readme is not None, "README.md lost the accuracy-table markers"
    assert in_readme == report.generated(), "README's accuracy table is stale: run `python -m benchmarks.report --write`"


def test_every_source_is_reported_apart_for_inference_and_training():
    srcs = report.sources()
    kinds = {s.kind for s in srcs}
    assert kinds == {"inference", "training"}
    assert len(srcs) >= 8
    assert all(s.errors for s in srcs)


def test_write_readme_replaces_only_between_the_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{report.BEGIN}\nold\n{report.END}\nafter\n")
    assert report.write_readme("| new |", readme)
    assert readme.read_text() == f"before\n{report.BEGIN}\n| new |\n{report.END}\nafter\n"
    assert not report.write_readme("| new |", readme)


# Llama-3.1-8B at 28,000 tokens on 80 GB read 1.11 with the flat 15 % reserve; the caching allocator strands
# one block of the loss's fp32 logits tensor at the loss's backward (fitcheck.estimate.training
# TRAINING_STRANDED_BLOCKS; docs/accuracy.md, "The QLoRA capacity case"), and with that reserve it reads 1.045.
KNOWN_OVER: dict[str, float] = {}
# Conservative beyond 0.8: under transformers 4.40 Llama keeps per-layer rotary tables (80 layers × 2 ×
# 8,192 × 128 × 2 B = 320 MiB, fitcheck.plan.ROTARY_TABLE_RELEASES), which takes 0.809 to 0.798.
KNOWN_UNDER = {"Meta-Llama-3-70B-Instruct on A100 80GB SXM (transformers 4.40)": 0.79}


def test_qlora_capacity_is_never_said_to_fit_beyond_five_percent_of_what_fit():
    rows = capacities()
    measured = [c for c in rows if c.published]
    assert len(measured) >= 4
    for c in measured:
        assert c.ratio <= KNOWN_OVER.get(c.label, 1.05), (c.label, c.predicted, c.published)
        # and not uselessly conservative
        assert c.ratio >= KNOWN_UNDER.get(c.label, 0.8), (c.label, c.predicted, c.published)
    for c in rows:
        if c.published is None:
            assert c.agrees, c.label  # published OOM: fitcheck does not say it fits either


def test_the_8b_capacity_row_is_within_five_percent():
    # 1.112 with the flat 15 % reserve alone (before TRAINING_STRANDED_BLOCKS)
    c = next(c for c in capacities() if c.label == "Llama-3.1-8B-Instruct on 80 GB (transformers 4.47)")
    assert 1.0 < c.ratio <= 1.05


def test_the_replayed_reserve_of_the_8b_step_is_below_the_estimates_reserve():
    """The allocator replayed over the estimate's own step tensors (smallest GPU it fits in) needs less
    than the estimate's reserve at 28,000 tokens (the flat 15 % alone, too): it cannot close the 8B row's over-prediction
    (docs/accuracy.md, "The QLoRA capacity case")."""
    from benchmarks.capacity import read, reserve_check

    row = next(r for r in read() if r["model"].endswith("Llama-3.1-8B-Instruct") and r["max_seq_len"])
    r = reserve_check(row, search=False)
    assert r.peak_at_loss
    assert 0 < r.replayed_reserve < r.estimate_reserve
    assert 0.05 < r.replayed_reserve / r.step_live < 0.25


def test_the_replayed_reserve_in_place_of_the_flat_one_breaks_the_qwen_table():
    """Why the flat reserve stays: the Qwen fine-tuning table's single-GPU rows, with the reserve the
    allocator replay of their step tensors needs instead, read far under the measured figures."""
    import statistics

    from benchmarks.capacity import qwen_table_swap

    swap = qwen_table_swap()
    assert len(swap) >= 40
    flat, replayed = [r[1] for r in swap], [r[2] for r in swap]
    assert min(flat) > -0.15 and min(replayed) < -0.20
    assert statistics.median(abs(e) for e in replayed) > statistics.median(abs(e) for e in flat)
