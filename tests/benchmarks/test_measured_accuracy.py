"""The estimator against the committed measurements: the accuracy README reports must hold.

Reads benchmarks/results/*.csv (our CPU runs and the profiler's live-tensor peaks); no torch
needed.  A formula change that breaks a
target fails here, not only in a benchmark nobody reruns.
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.measure.compare import RESULTS, TENSOR_PEAKS, compare_rows, run_csvs  # noqa: E402


def _groups():
    rows, peaks = [], {}
    for path in run_csvs():
        with path.open(newline="") as f:
            rows += list(csv.DictReader(f))
    for path in sorted(RESULTS.glob(TENSOR_PEAKS + "*.csv")):
        with path.open(newline="") as f:
            peaks.update({r["case_id"]: int(r["tensor_peak_bytes"]) for r in csv.DictReader(f)})
    comparisons, _ = compare_rows(rows, peaks)
    groups: dict[str, list[float]] = {}
    for c in comparisons:
        key = "inference peak" if c.component in ("prefill peak", "generate peak") else c.component
        groups.setdefault(key, []).append(c.error_pct)
    return groups


GROUPS = _groups()


@pytest.mark.parametrize("group, median_max, worst_under", [
    ("weights", 1.0, -3.0),
    ("kv_cache", 0.1, -0.1),
    ("gradients", 0.1, -0.1),
    ("optimizer_states", 0.1, -0.1),
    ("inference peak", 5.0, -10.0),
    ("training tensors", 1.0, -1.0),
    # SmolLM2-135M's LoRA step (30 narrow layers: resident 40 % above its live tensors) read -17.8 %
    # before the CPU heap counted freed blocks per layer; the median rose from 4.4 to 6.6 % with it
    # (python -m benchmarks.measure.compare --rows).
    ("training peak", 8.0, -10.0),
])
def test_cpu_runs_meet_the_targets(group, median_max, worst_under):
    errors = GROUPS[group]
    assert len(errors) >= 10
    assert statistics.median(abs(e) for e in errors) <= median_max
    assert min(errors) >= worst_under


@pytest.mark.parametrize("modes, runs_min", [(("lora", "full"), 9), (("generate",), 4)])
def test_reserve_meets_the_caching_allocator_replay(modes, runs_min):
    """The estimate's allocated and reserved bytes vs each recorded run's live-tensor peak and the
    smallest GPU it fits in under the CUDA caching allocator's rules (benchmarks/measure/alloc_trace.py,
    every sweep, as the report pools them): training, then transformers' generate."""
    from benchmarks.measure.alloc_trace import replay_comparisons
    from benchmarks.measure.compare import ALLOCATOR_REPLAY

    comparisons = [c for path in sorted(RESULTS.glob(ALLOCATOR_REPLAY + "*.csv"))
                   for c in replay_comparisons(path) if c.mode in modes]
    assert len(comparisons) >= runs_min
    allocated = [c.allocated_error for c in comparisons]
    needed = [c.needed_error for c in comparisons]
    assert statistics.median(abs(e) for e in allocated) <= 0.01 and min(allocated) >= -0.02
    # 4.1 % with the flat 15 % alone; the stranded logits block (TRAINING_STRANDED_BLOCKS, a worst case)
    # reserves 594 MiB for the Qwen2.5-0.5B LoRA runs at 1,024 tokens, whose recorded steps needed 70 MiB
    # (fixed lengths) and 356 MiB (varying) above their live peak: +17 % and +7 %, median 7.0 %
    assert statistics.median(abs(e) for e in needed) <= (0.08 if "lora" in modes else 0.05) and min(needed) >= -0.10
    # a GPU with memory to spare reads more: freed blocks stay cached until memory runs short
    assert all(c.roomy_reserved >= c.needed for c in comparisons)


def test_small_deep_models_resident_excess_is_glibcs_heap():
    """SmolLM2-135M's LoRA step (benchmarks.measure.rss_parts): with glibc's defaults the resident peak is
    far above the live tensors; with MALLOC_MMAP_THRESHOLD_=65536 (freed blocks unmapped, none kept in
    the heap) it falls to them, and arenas, threads and later steps change little."""
    from benchmarks.measure.compare import RSS_PARTS

    rows = []
    for path in sorted(RESULTS.glob(RSS_PARTS + "*.csv")):
        with path.open(newline="") as f:
            rows += list(csv.DictReader(f))
    case = "lora-smol135-fp32-r8-attn-S512-b2"
    with (RESULTS / "cpu-tensor-peaks-2026-12-01.csv").open(newline="") as f:
        tensors = next(int(r["tensor_peak_bytes"]) for r in csv.DictReader(f) if r["case_id"] == case)
    peak = {r["env"]: int(r["peak_bytes"]) for r in rows if r["case_id"] == case}
    assert peak["MALLOC_MMAP_THRESHOLD_=65536"] < 1.03 * tensors
    assert min(peak["MALLOC_ARENA_MAX=1"], peak["MALLOC_ARENA_MAX=8"]) > 1.25 * tensors
    threads = {r["env"]: int(r["peak_bytes"]) for r in rows if r["case_id"] == "gen-smol135-fp32-P1024-b4"}
    assert abs(threads["OMP_NUM_THREADS=8"] - threads["OMP_NUM_THREADS=2"]) < 0.02 * threads["OMP_NUM_THREADS=2"]


def test_small_deep_models_heap_excess_grows_per_layer():
    """The same LoRA step built with 10, 20 and 30 of SmolLM2-135M's layers (rss_parts --layers): each 10
    layers add about the same to the resident peak, well beyond the live tensors they add."""
    from benchmarks.measure.compare import RSS_PARTS

    rows = []
    for path in sorted(RESULTS.glob(RSS_PARTS + "*.csv")):
        with path.open(newline="") as f:
            rows += list(csv.DictReader(f))
    case = "lora-smol135-fp32-r8-attn-S512-b2"
    peak = {r["case_id"]: int(r["peak_bytes"]) for r in rows if r["env"] in ("", "MALLOC_ARENA_MAX=8")}
    p10, p20, p30 = peak[case + "-L10"], peak[case + "-L20"], peak[case]
    assert 0.7 < (p30 - p20) / (p20 - p10) < 1.3
    tensors_per_10_layers = 447 * 2**20  # the estimate's allocated bytes, exact to 0.1 % (training tensors)
    assert min(p30 - p20, p20 - p10) > 1.25 * tensors_per_10_layers
