"""generate()'s vocabulary-sized tensors per decoding step (fitcheck/estimate/generate_step.py), against the
tensors the profiler saw alive at the peak (benchmarks/results/cpu-inference-peaks-sampling-2026-12-01.csv,
`python -m benchmarks.measure.inference_peak --explain CASE`)."""

from dataclasses import replace

import pytest
from estimate_specs import LLAMA3_8B

from fitcheck.engines import estimate_inference
from fitcheck.estimate.generate_step import (
    MIN_LENGTH,
    MIN_LENGTH_IN_PLACE,
    REPETITION_PENALTY,
    REPETITION_PENALTY_IN_PLACE,
    REPETITION_PENALTY_PADDED,
    min_length_processor,
    repetition_penalty_processor,
    step_tensors,
)
from fitcheck.plan import Plan


@pytest.mark.parametrize("release, sampling, act_bytes, steady", [
    # 5.24, fp32: the logits, their fp32 copy, the previous step's scores (greedy: 3 × 4 B)
    ((5, 24), "greedy", 4, 12),
    # + the previous step's probabilities, top-k's mask and output (5.25 × 4 B)
    ((5, 24), "sample", 4, 21),
    # + temperature's output, top-p's sort (fp32 values, int64 indices), cumsum, two masks (10.5 × 4 B)
    ((5, 24), "top-p", 4, 42),
    ((5, 24), "top-p", 2, 40),    # 16-bit logits from 4.46 on
    ((4, 46), "top-p", 4, 42),
    # before 4.45 the warpers ran after the processors' result had freed the previous step's scores, and
    # the logits were fp32 (the forward upcast them) before 4.46
    ((4, 44), "top-p", 2, 38),
    ((4, 44), "sample", 4, 20),   # here the copy is the peak: the previous step's scores, copy and probs
    ((4, 38), "greedy", 4, 8),    # before 4.42 generate() takes a view, no copy
])
def test_a_steady_step_per_release_and_sampling(release, sampling, act_bytes, steady):
    assert step_tensors(release, sampling, act_bytes).steady == steady


def test_min_new_tokens_processors_clone_from_4_40():
    assert min_length_processor((4, 38)) == MIN_LENGTH_IN_PLACE and min_length_processor((4, 40)) == MIN_LENGTH
    # 5.24 greedy with min_new_tokens (MinLength + MinNewTokens, each a clone and a where()): 6 × 4 B,
    # what the 2-layer Llama-3.2-1B row at batch 8 measured (26.6 MiB with 2 MiB of cache)
    assert step_tensors((5, 24), "greedy", 4, (MIN_LENGTH, MIN_LENGTH)).steady == 24
    assert step_tensors((4, 35), "greedy", 4, (MIN_LENGTH_IN_PLACE,) * 2).steady == 8


QWEN_INSTRUCT = "sample:repetition-penalty+temperature+top-k+top-p"


@pytest.mark.parametrize("release, processor, greedy_steady, per_position", [
    # before 4.40 `scores.scatter_(1, input_ids, score)`: in place, nothing vocabulary-sized
    ((4, 38), REPETITION_PENALTY_IN_PLACE, 8, 17),
    # 4.40-5.17 `scores.scatter(...)`: a new fp32 batch × vocabulary tensor (greedy 4.44: 12 -> 16)
    ((4, 40), REPETITION_PENALTY, 12, 17),
    ((4, 44), REPETITION_PENALTY, 16, 17),
    ((5, 17), REPETITION_PENALTY, 16, 17),
    # from 5.18 `functional.pad(scores, (0, 1))` beside the scatter's output, and the clamped int64 ids
    ((5, 18), REPETITION_PENALTY_PADDED, 20, 25),
    ((5, 24), REPETITION_PENALTY_PADDED, 20, 25),
])
def test_repetition_penalty_per_release(release, processor, greedy_steady, per_position):
    assert repetition_penalty_processor(release) == processor
    step = step_tensors(release, "greedy:repetition-penalty", 4)
    assert step.steady == greedy_steady and step.per_position == per_position
    # the gather, the where() temporaries: bytes per context position per sequence
    assert step_tensors(release, "greedy", 4).per_position == 0


def test_repetition_penalty_sits_before_the_warpers():
    # sampled, from 4.45 its output is the merged list's input, freed once temperature's output replaces it:
    # top-p's sort stays the step's peak, the penalty adds its per-position gather only
    with_penalty, without = step_tensors((5, 24), QWEN_INSTRUCT, 2), step_tensors((5, 24), "top-p", 2)
    assert with_penalty.steady == without.steady and with_penalty.per_position > 0
    # before 4.45 `next_token_scores` holds the processors' result through the warpers' list: +4 B at top-p's
    # sort (measured: 4.44, batch 16, 78.5 -> 86.7 MB; cpu-inference-peaks-penalty-2026-12-01.csv)
    assert step_tensors((4, 44), QWEN_INSTRUCT, 4).steady == step_tensors((4, 44), "top-p", 4).steady + 4
    # before MinLength's clones: its padded copy and output (8 B) are below a clone and where() over its
    # output (12 B), so greedy 5.24 with min_new_tokens stays at 24 B
    assert step_tensors((5, 24), "greedy:repetition-penalty", 4, (MIN_LENGTH, MIN_LENGTH)).steady == 24


def test_the_estimate_counts_the_penalty_s_gather_over_the_context():
    plan = _plan(batch=1, prompt_tokens=2, context=32_768)
    base = estimate_inference(LLAMA3_8B, replace(plan, sampling="greedy")).devices[0].component("activations")
    penal = estimate_inference(LLAMA3_8B, replace(plan, sampling="greedy:repetition-penalty")).devices[0]
    # 5.24: the scatter's output and the padded copy (8 B per vocabulary entry), the gather at 32,768 positions
    assert penal.component("activations") == base + LLAMA3_8B.vocab_size * 8 + 32_768 * 25


def _plan(**kw) -> Plan:
    base = dict(precision="bf16", engine="transformers", device="gpu", gpus=1, context=1024, batch=64,
                prompt_tokens=2, kv_dtype="bf16", gpu_layers=None, gpu_memory_utilization=0.9,
                gpu_total_bytes=None, compute_capability=8.0)
    return Plan(**{**base, **kw})


def test_sampling_tensors_set_the_peak_of_a_short_prompt_at_a_large_batch():
    acts = {s: estimate_inference(LLAMA3_8B, _plan(sampling=s)).devices[0].component("activations")
            for s in ("greedy", "sample", "top-p")}
    entries = 64 * LLAMA3_8B.vocab_size
    # 2-token prompts at batch 64: a decoding step's tensors exceed the prefill's layers
    assert acts["greedy"] == entries * step_tensors(None, "greedy", 2).steady
    assert acts["top-p"] == entries * 40  # 0.31 GiB for Llama-3-8B's 128,256-token vocabulary
    assert acts["greedy"] < acts["sample"] < acts["top-p"]


def test_the_decoding_step_and_the_prefill_do_not_add_up():
    long = _plan(prompt_tokens=1000, batch=1)
    act = estimate_inference(LLAMA3_8B, long).devices[0].component("activations")
    prefill_only = estimate_inference(LLAMA3_8B, replace(long, decodes=False)).devices[0].component("activations")
    assert act == prefill_only  # a 1,000-token prefill's layers outweigh one sequence's sampling tensors


def test_before_4_42_the_prompt_logits_outlive_the_first_decoding_forward():
    # 4.38: every position's fp32 logits (a view keeps them) and the next step's logits at once
    plan = _plan(precision="fp32", kv_dtype="fp32", prompt_tokens=64, batch=8, logits="all-fp32",
                 transformers_version="4.41", sampling="greedy", attention="eager")
    act = estimate_inference(LLAMA3_8B, plan).devices[0].component("activations")
    entries = 8 * LLAMA3_8B.vocab_size
    assert act >= 64 * entries * 4 + entries * 4
