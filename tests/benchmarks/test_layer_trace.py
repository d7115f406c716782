"""The recorded QLoRA layer trace (benchmarks/measure/layer_trace.py): its fit, the step built from it, and
the stored capacity figures it replays to."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.measure import layer_trace as lt  # noqa: E402
from benchmarks.measure.caching_allocator import CachingAllocator  # noqa: E402
from fitcheck.estimate.varying_lengths import StepTensors  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def _recording(tokens: int, order: tuple[int, int]) -> dict:
    fwd = [["a", 0, 16 * tokens], ["a", 1, 4096], ["a", 2, 8 * tokens], ["f", "forward", order[0]],
           ["f", "forward", order[1]]]
    return {"tokens": tokens, "forward": fwd + [["a", 3, 4 * tokens]], "backward": [["a", 0, 2 * tokens + 64]],
            "survivors": {"forward:3": "output", "backward:0": "input_grad"}}


def test_fit_gives_each_size_as_a_plus_b_tokens_whatever_order_frees_come_in():
    fit = lt.fit(_recording(64, (0, 2)), _recording(128, (2, 0)))
    assert [e for e in fit["forward"] if e[0] == "a"] == [["a", 0, 0, 16], ["a", 1, 4096, 0], ["a", 2, 0, 8],
                                                          ["a", 3, 0, 4]]
    assert fit["backward"] == [["a", 0, 64, 2]]


def test_fit_refuses_recordings_that_do_not_scale_linearly():
    two = _recording(128, (0, 2))
    two["forward"][1] = ["a", 1, 4097]          # 4096 at 64 tokens, 4097 at 128: not a + b·T in whole bytes
    with pytest.raises(ValueError):
        lt.fit(_recording(64, (0, 2)), two)
    three = _recording(128, (0, 2))
    three["forward"].insert(0, ["a", 9, 1])     # an event the other recording lacks
    with pytest.raises(ValueError):
        lt.fit(_recording(64, (0, 2)), three)


@pytest.mark.parametrize("shape", ["llama8b", "llama70b"])
def test_a_step_built_from_the_stored_trace_frees_all_it_allocates(shape):
    trace = lt.LayerTrace.load(lt.trace_path(shape))
    tensors = StepTensors(layers=3, layer_input=4 * 4096, layer_work=0, outside=6 * 4096, vocab=128256,
                          compute_bytes=2, loss_bytes=4, shift_copy=False, checkpointing=True)
    alloc = CachingAllocator()
    for ev in lt.build_step(trace, tensors, 1000):
        if ev[0] == "a":
            alloc.malloc(ev[1], ev[2])
        else:
            alloc.free(ev[1])
    assert alloc.allocated == 0
    assert alloc.peak_allocated > 3 * 1000 * 4 * 4096


def test_the_small_token_trace_predicts_a_recording_at_large_token_counts():
    """Recorded at 64/128 tokens and at 1,750/3,500: every event the same, sizes included, except the CPU
    attention kernel's own buffers (each under 16 MiB at 28,000 tokens)."""
    small = json.loads(lt.trace_path("llama8b").read_text())
    large = json.loads((RESULTS / "qlora-layer-crosscheck-llama8b-2026-12-01.json").read_text())
    assert large["recorded_at_tokens"] == [1750, 3500]
    differ = 0
    for phase in ("forward", "backward"):
        assert len(small[phase]) == len(large[phase])
        for a, b in zip(small[phase], large[phase], strict=True):
            if a != b:
                differ += 1
                assert a[0] == b[0] == "a"
                assert max(a[2] + a[3] * 28000, b[2] + b[3] * 28000) < 16 << 20
    assert differ <= 8
    assert small["survivors"] == large["survivors"]


def test_the_stored_trace_replays_to_the_stored_reserve():
    """benchmarks/results/qlora-trace-reserve-*.csv: the reserve the traced 8B step needs at 28,000 tokens."""
    from benchmarks.capacity import _setup, read
    from fitcheck.engines.training.memory import step_tensors
    from fitcheck.plan import resolve_training

    stored = sorted(RESULTS.glob("qlora-trace-reserve-*.csv"))[-1]
    with stored.open(newline="") as f:
        rows = {r["label"]: r for r in csv.DictReader(f)}
    row = next(r for r in read() if r["model"].endswith("Llama-3.1-8B-Instruct") and r["max_seq_len"])
    want = next(r for label, r in rows.items() if "Llama-3.1-8B" in label)
    spec, machine, base = _setup(row)
    n = int(row["max_seq_len"])
    plan = resolve_training(base.with_changes(seq_len=n), spec, machine)
    live, needed = lt.traced_reserve(lt.LayerTrace.load(RESULTS / want["trace"]), step_tensors(spec, plan), n,
                                     int(want["steps"]))
    assert (live, needed - live) == (int(want["step_live_bytes"]), int(want["traced_reserve_bytes"]))


def test_the_traced_search_stops_at_the_first_length_that_does_not_fit():
    from benchmarks.capacity import _first_failure

    tried: list[int] = []

    def fits(n: int) -> bool:      # fits up to 10,300, fails to 12,000, fits again beyond (not monotone)
        tried.append(n)
        return n <= 10_300 or n > 12_000

    assert _first_failure(fits, 10_000) == 10_000 + 4 * 64
    assert all((n - 10_000) % 64 == 0 for n in tried)
    assert _first_failure(lambda n: False, 10_000) == 0


def test_the_traced_8b_step_strands_one_logits_sized_segment_pinned_by_checkpointed_outputs():
    """The mechanism behind TRAINING_STRANDED_BLOCKS (fitcheck/engines/training/memory.py): one 2 MiB short of the
    room the traced 8B step needs at 28,000 tokens, the second step runs out of memory at the loss's
    backward, asking for a vocabulary-sized fp32 block, while a segment of that size cached from the first
    step's loss holds checkpointed layer outputs of the second step's forward (live, so it cannot be given
    back) and a free remainder too small for the request: about one block stranded."""
    from benchmarks.capacity import _setup, read
    from benchmarks.measure.caching_allocator import OutOfMemory, needed_bytes
    from fitcheck.engines.training.memory import largest_transient_bytes, step_tensors
    from fitcheck.plan import resolve_training

    row = next(r for r in read() if r["model"].endswith("Llama-3.1-8B-Instruct") and r["max_seq_len"])
    spec, machine, base = _setup(row)
    n = int(row["max_seq_len"])
    plan = resolve_training(base.with_changes(seq_len=n), spec, machine)
    tensors = step_tensors(spec, plan)
    events = lt.step_events(lt.LayerTrace.load(sorted(RESULTS.glob("qlora-layer-trace-llama8b-*.json"))[-1]),
                            tensors, n, 2)
    alloc = CachingAllocator(capacity=needed_bytes(events) - (2 << 20))
    with pytest.raises(OutOfMemory):
        for ev in events:
            failing = ev
            if ev[0] == "a":
                alloc.malloc(ev[1], ev[2])
            elif ev[0] == "f" and ev[1] in alloc.live_ids():
                alloc.free(ev[1])
    block = largest_transient_bytes(spec, plan)
    assert failing[0] == "a" and failing[1][0] == ("s", 1) and failing[2] == n * spec.vocab_size * 4
    pinned = [seg for seg in alloc.segment_map()
              if sum(size for _, size in seg) == block and any(ident is None for ident, _ in seg)
              and any(ident is not None for ident, _ in seg)]
    assert len(pinned) == 1
    live = [ident for ident, _ in pinned[0] if ident is not None]
    assert all(ident[0] == ("s", 1) and ident[1] == "x" for ident in live)     # checkpointed layer outputs
    free = sum(size for ident, size in pinned[0] if ident is None)
    assert 0.8 * block < free < failing[2]
