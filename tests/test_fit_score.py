"""The `models --fits` score (fitcheck.search.fit_score): each part from 0 to 1, the total from 0 to 100, and monotone:
more parameters never lower it, a lossier precision never raises it, a faster decode never lowers it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fitcheck.estimate.formats import WEIGHT_FORMATS
from fitcheck.search import fit_score as fs

PROPS = settings(max_examples=300, deadline=None)
params = st.integers(min_value=1, max_value=5 * 10**12)
ranks = st.integers(min_value=0, max_value=10)
speeds = st.one_of(st.none(), st.floats(min_value=0, max_value=1e5, allow_nan=False))
known_speeds = st.floats(min_value=0, max_value=1e5, allow_nan=False)
free = st.integers(min_value=1, max_value=2**42)
share = st.floats(min_value=0, max_value=1.5, allow_nan=False)


def score(total=8 * 10**9, active=None, rank=3, speed=25.0, need=5 * 2**30, free_bytes=8 * 2**30, **kw):
    return fs.fit_score(total, active, rank, speed, need, free_bytes, **kw)


@PROPS
@given(params, params, ranks, speeds, share, free)
def test_parts_and_total_stay_in_range(total, active, rank, speed, used, free_bytes):
    s = score(total, min(active, total), rank, speed, int(used * free_bytes), free_bytes)
    for part in (s.capability, s.quality, s.speed, s.margin):
        assert part is not None and 0 <= part <= 1
    assert 0 <= s.total <= 100
    assert s.effective_params <= total


@PROPS
@given(params, params, params, ranks, speeds)
def test_more_parameters_never_lower_the_score(a, b, active, rank, speed):
    small, large = sorted((a, b))
    # dense: more total parameters
    assert score(small, None, rank, speed).total <= score(large, None, rank, speed).total
    assert fs.capability(fs.effective_params(small)) <= fs.capability(fs.effective_params(large))
    # a mixture of experts: more total at the same active, and more active at the same total
    act = min(active, small)
    assert fs.effective_params(small, act) <= fs.effective_params(large, act)
    assert score(small, act, rank, speed).total <= score(large, act, rank, speed).total
    lo, hi = sorted((min(a, large), min(b, large)))
    assert fs.effective_params(large, lo) <= fs.effective_params(large, hi)


@PROPS
@given(ranks, ranks, params, speeds)
def test_a_lossier_precision_never_raises_the_score(a, b, total, speed):
    better, worse = sorted((a, b))
    assert fs.quality(better) >= fs.quality(worse)
    assert score(total, None, better, speed).total >= score(total, None, worse, speed).total


def test_quality_follows_the_formats_table():
    """Every weights format's quality comes from its own quality_loss rank (estimate.formats), nothing else."""
    for name, fmt in WEIGHT_FORMATS.items():
        assert fs.precision_quality(name) == fs.quality(fmt.quality_loss)
    assert fs.precision_quality("bf16") == 1.0
    assert fs.precision_quality("q8_0") > 0.999
    assert fs.precision_quality("q4_k_m") == fs.precision_quality("awq") > fs.precision_quality("q3_k_m")
    assert fs.precision_quality("q2_k") < 0.65
    assert list(fs.PERPLEXITY_RATIO) == sorted(fs.PERPLEXITY_RATIO)


@PROPS
@given(known_speeds, known_speeds, params, ranks)
def test_a_faster_decode_never_lowers_the_score(a, b, total, rank):
    slow, fast = sorted((a, b))
    assert fs.speed_part(slow) <= fs.speed_part(fast)
    assert score(total, None, rank, slow).total <= score(total, None, rank, fast).total


@PROPS
@given(share, share, free)
def test_more_memory_left_never_lowers_the_margin(a, b, free_bytes):
    less, more = sorted((a, b))     # shares of the free memory used
    assert fs.margin_part(int(more * free_bytes), free_bytes) <= fs.margin_part(int(less * free_bytes), free_bytes)


def test_below_reading_speed_is_penalised_strongly():
    at = fs.speed_part(fs.READING_TOKENS_PER_S)
    assert at == fs.SPEED_PART_AT_READING
    assert fs.speed_part(fs.READING_TOKENS_PER_S / 2) == at / 4      # the square
    assert fs.speed_part(3.0) < at / 10                                 # 3 tok/s: under a tenth
    assert fs.speed_part(fs.FAST_TOKENS_PER_S) == fs.speed_part(10 * fs.FAST_TOKENS_PER_S) == 1.0
    assert fs.speed_part(None) == fs.UNKNOWN_SPEED_PART
    # a 40B model at 2-bit and 3 tok/s scores below an 8B one at 4-bit and 25 tok/s
    assert score(41 * 10**9, None, 6, 3.0).total < score(8 * 10**9, None, 3, 25.0).total / 5


def test_training_rows_leave_the_speed_out():
    s = score(speed=1.0, score_speed=False)
    assert s.speed is None and s.tokens_per_s is None
    assert s.total == 100 * s.capability * s.quality * s.margin


def test_a_mixture_of_experts_counts_between_its_active_and_total_parameters():
    eff = fs.effective_params(30_500_000_000, 3_300_000_000)      # Qwen3-30B-A3B
    assert 3.3e9 < eff < 30.5e9 and round(eff / 1e9) == 10
    assert fs.effective_params(8 * 10**9, 8 * 10**9) == fs.effective_params(8 * 10**9) == 8e9
