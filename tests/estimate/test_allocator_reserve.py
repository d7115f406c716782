"""The GPU training reserve: the larger of the flat share and one stranded block of the step's largest
transient tensor (TRAINING_STRANDED_BLOCKS; docs/accuracy.md, "The QLoRA capacity case")."""

from estimate_specs import LLAMA3_8B
from hypothesis import given, settings
from hypothesis import strategies as st
from machines import machine, nvidia

from fitcheck.calibration import ALLOCATOR_SLACK_MIN
from fitcheck.engines.training.memory import (
    TRAINING_ALLOCATOR_SLACK,
    cpu_heap_retention,
    estimate_training,
    gpu_allocator_reserve,
    largest_transient_bytes,
)
from fitcheck.estimate.allocator import ROUND_LARGE
from fitcheck.estimate.result import OVERHEAD
from fitcheck.plan import resolve_training
from fitcheck.request import Request

A100 = machine([nvidia("NVIDIA A100-SXM4-80GB", 81920, cc="8.0")])
CPU = machine([])


def _plan(seq_len: int, mode: str = "qlora", on=A100, **kw):
    req = Request(**{"mode": mode, "seq_len": seq_len, "lora_rank": 32, "lora_targets": "all-linear",
                     "grad_checkpointing": True, "attention": "flash", "transformers_version": "4.47", **kw})
    return resolve_training(req, LLAMA3_8B, on)


def _reserve(plan) -> tuple[int, int]:
    """(the reserve, the allocated bytes) of the estimate's first device."""
    dev = estimate_training(LLAMA3_8B, plan).devices[0]
    reserve = next(c.bytes for c in dev.components if c.name == OVERHEAD and c.counted_in == "reserved")
    return reserve, dev.peak_allocated_bytes


def test_a_long_context_big_vocabulary_lora_reserves_at_least_one_fp32_logits_block():
    plan = _plan(28_000)
    reserve, allocated = _reserve(plan)
    block = 28_000 * LLAMA3_8B.vocab_size * 4          # the loss's fp32 tensor (autocast cross_entropy)
    assert largest_transient_bytes(LLAMA3_8B, plan) == -(-block // ROUND_LARGE) * ROUND_LARGE
    assert reserve >= block > allocated * TRAINING_ALLOCATOR_SLACK


def test_a_short_context_keeps_the_flat_share():
    reserve, allocated = _reserve(_plan(512))
    assert reserve == max(int(allocated * TRAINING_ALLOCATOR_SLACK), ALLOCATOR_SLACK_MIN)


def test_a_peak_above_the_losss_backward_takes_the_block_only_beyond_it():
    # the block strands at the loss's backward: where the estimate's peak (the optimizer step, a recomputed
    # layer) lies `headroom` above the live tensors there, only what the block exceeds that by is added
    plan = _plan(28_000)
    _, allocated = _reserve(plan)
    block = largest_transient_bytes(LLAMA3_8B, plan)
    share = int(allocated * TRAINING_ALLOCATOR_SLACK)
    assert gpu_allocator_reserve(LLAMA3_8B, plan, allocated, headroom=0)[0] == block
    assert gpu_allocator_reserve(LLAMA3_8B, plan, allocated, headroom=block - share - 1)[0] == share + 1
    assert gpu_allocator_reserve(LLAMA3_8B, plan, allocated, headroom=block)[0] == share


def test_the_cpu_heap_reserve_is_not_this_rule():
    # glibc's heap on the CPU keeps its own rule (cpu_heap_retention), the stranded block plays no part
    plan = _plan(1024, mode="lora", on=CPU, precision="bf16")
    dev = estimate_training(LLAMA3_8B, plan).devices[0]
    heap = next(c for c in dev.components if c.name == OVERHEAD and c.counted_in == "reserved")
    assert heap.detail.startswith("glibc heap")
    assert (heap.bytes, heap.detail) == cpu_heap_retention(LLAMA3_8B, plan, 2, dev.peak_allocated_bytes)


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=128, max_value=60_000), st.integers(min_value=1, max_value=4_000))
def test_the_reserve_and_the_need_grow_with_the_sequence(n, more):
    (r1, a1), (r2, a2) = _reserve(_plan(n)), _reserve(_plan(n + more))
    assert r2 >= r1
    assert r2 + a2 >= r1 + a1
    assert r1 >= max(int(a1 * TRAINING_ALLOCATOR_SLACK), ALLOCATOR_SLACK_MIN)
