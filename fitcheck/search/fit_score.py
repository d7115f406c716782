"""The score of one `fitcheck models --fits` row: a number from 0 to 100 for "what should I run here?".

    score = 100 × capability × quality × speed × margin        (each part from 0 to 1)

capability
    How much model: its parameters on a log scale, 0 at CAPABILITY_FLOOR_PARAMS, 1 at CAPABILITY_CEILING_PARAMS
    (each tenfold adds the same).  A mixture of experts counts as the geometric mean of its total and active
    parameters, sqrt(total × active): its total is what it knows, its active count what each token computes
    with, and speed (below) already reads the active count, so counting the total here alone would credit a
    sparse model twice.  Dense models count their total.
quality
    What the row's weights format keeps of the 16-bit model: F16 perplexity ÷ the format's perplexity.  The
    format's step is its ``quality_loss`` rank in fitcheck.estimate.formats (the table the alternatives are
    ranked by); PERPLEXITY_RATIO gives each rank the perplexity ratio that llama.cpp measured for the GGUF type
    of that rank (below).  The KV cache's type is not counted.
speed
    Decode tokens/s per sequence, the low end of the row's estimate (what it at least does; the same figure
    ``--min-speed`` and ``--sort speed`` read).  Below READING_TOKENS_PER_S the part falls with the square of
    the speed (a strong penalty: the reader waits for every word); above it the part rises on a log scale to 1
    at FAST_TOKENS_PER_S.  Training rows have no reading speed: their speed is not scored (the part is None and
    counts as 1), ``--sort speed`` still orders them by training tokens/s.  An inference row whose speed is
    unknown scores UNKNOWN_SPEED_PART, as if it decoded just at reading speed.
margin
    How much of the fullest device's free memory the row leaves: MARGIN_PART_WHEN_FULL when it uses all of it,
    rising linearly to 1 when a MARGIN_COMFORT_SHARE of it is left.

Monotone, each part alone (tests/test_fit_score.py checks it with hypothesis): more parameters (total or a known
active count) never lower the capability, a lossier format never raises the quality, a faster decode never lowers the
speed part, more memory left never lowers the margin; the score is their product, so the same holds for it.

The weights are policy, like fitcheck.search.rank's costs, except the perplexity ratios, which are measurements.
Scores compare across machines: 100 is a trillion-parameter model at 16-bit, decoding fast, with room to spare.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fitcheck.estimate.formats import weight_format

# ---- capability ---------------------------------------------------------------------------------------------
CAPABILITY_FLOOR_PARAMS = 100e6      # parameters: capability 0 (below: toy models, SmolLM2-135M scores ≈ 0.03)
CAPABILITY_CEILING_PARAMS = 1e12     # parameters: capability 1 (a trillion: Kimi K2's total, past the largest dense)

# ---- quality ------------------------------------------------------------------------------------------------
# F16 perplexity ÷ quantized perplexity is 1 / PERPLEXITY_RATIO[rank], rank = estimate.formats quality_loss.
# Source: llama.cpp's perplexity README (examples/perplexity/README.md, now tools/perplexity/README.md), "LLaMA 3
# 8b Scoreboard" (revision f364eb6f, CUDA on an RTX 4090, Wikitext-2), the rows without an importance matrix:
# F16 6.233160; Q8_0 6.234284; Q6_K 6.253382; Q5_K_M 6.288607; Q4_K_M 6.407115; Q4_0 6.700147; Q3_K_M 6.888498;
# Q2_K 9.751568.  Each rank takes its lossiest GGUF type (rank 2: Q5_K_M, of Q6_K and Q5_K_M); the other formats
# of a rank (FP8, LLM.int8 and GPTQ-int8 at 1; AWQ, GPTQ-int4 and NF4 at 3; MLX at 1, 2, 4, 5) share its ratio,
# as they share its rank.  The same Δppl figures are what rank.py's SMALL_QUALITY_LOSS reads (quantize.cpp's
# QUANT_OPTIONS, +ppl @ Llama-3-8B).  A rank past the table takes the last ratio.
PERPLEXITY_RATIO: tuple[float, ...] = (
    1.0,                    # 0: 16-bit (and gpt-oss's own MXFP4)
    6.234284 / 6.233160,    # 1: 8-bit                          1.0002
    6.288607 / 6.233160,    # 2: Q6_K, Q5_K_M, MLX 6-bit          1.0089
    6.407115 / 6.233160,    # 3: Q4_K_M, AWQ, GPTQ-int4, NF4      1.0279
    6.700147 / 6.233160,    # 4: Q4_0, MLX 4-bit                  1.0749
    6.888498 / 6.233160,    # 5: Q3_K_M, MLX 3-bit                1.1051
    9.751568 / 6.233160,    # 6: Q2_K                             1.5645
)

# ---- speed --------------------------------------------------------------------------------------------------
# People read ~5–10 tokens/s (fitcheck.speed.efficiency, CPU_ENOUGH_TOKENS_PER_S): below the fast end of that a
# reader waits on the model.
READING_TOKENS_PER_S = 10.0          # tokens/s per sequence
SPEED_PART_AT_READING = 0.6          # the speed part at exactly reading speed
SLOW_EXPONENT = 2.0                  # below reading speed: part = 0.6 × (speed / 10)²; 5 tok/s → 0.15, 2.5 → 0.04
# Twice speed.efficiency's "fast enough to read along" (CPU_ENOUGH_TOKENS_PER_S, 20 tok/s): past it a faster
# decode shortens only long answers and agent loops, and the part stays at 1.
FAST_TOKENS_PER_S = 40.0             # tokens/s per sequence
UNKNOWN_SPEED_PART = SPEED_PART_AT_READING   # an inference row whose speed is unknown: neither rewarded nor punished

# ---- margin -------------------------------------------------------------------------------------------------
MARGIN_PART_WHEN_FULL = 0.85         # the margin part of a row that uses all of its fullest device's free memory
MARGIN_COMFORT_SHARE = 0.25          # share of that free memory left at which the part reaches 1 (a longer chat,
#                                      a browser beside it; fitcheck's default --headroom keeps 10 %)

# The orders `models --fits --sort` takes (fitcheck.search.fits.rank_rows), here so the CLI needs no search import.
SORTS = ("score", "speed", "params", "size")
DEFAULT_SORT = "score"


@dataclass(frozen=True)
class FitScore:
    """One row's score and its parts."""

    total: float                 # 0–100: 100 × capability × quality × speed × margin
    capability: float            # 0–1
    quality: float               # 0–1
    speed: float | None          # 0–1; None: not scored (training), counted as 1
    margin: float                # 0–1
    effective_params: int        # what capability reads: total, or sqrt(total × active) for a mixture of experts
    tokens_per_s: float | None   # the speed scored (per sequence, low end); None: unknown or training


def effective_params(total: int, active: int | None = None) -> float:
    """sqrt(total × active) for a mixture of experts (active < total), else total."""
    if total <= 0:
        return 0.0
    if not active or active >= total:
        return float(total)
    return math.sqrt(total * active)


def capability(params: float) -> float:
    """0 at CAPABILITY_FLOOR_PARAMS, 1 at CAPABILITY_CEILING_PARAMS, log-linear between."""
    if params <= CAPABILITY_FLOOR_PARAMS:
        return 0.0
    span = math.log(CAPABILITY_CEILING_PARAMS / CAPABILITY_FLOOR_PARAMS)
    return min(1.0, math.log(params / CAPABILITY_FLOOR_PARAMS) / span)


def quality(quality_loss: int) -> float:
    """F16 perplexity ÷ the perplexity at this estimate.formats quality_loss rank (1: nothing given up)."""
    return 1.0 / PERPLEXITY_RATIO[min(max(quality_loss, 0), len(PERPLEXITY_RATIO) - 1)]


def precision_quality(precision: str) -> float:
    """:func:`quality` of a weights format by name (what a plan carries)."""
    return quality(weight_format(precision).quality_loss)


def speed_part(tokens_per_s: float | None) -> float:
    """The speed part of a decode at ``tokens_per_s`` per sequence (None: unknown → UNKNOWN_SPEED_PART)."""
    if tokens_per_s is None:
        return UNKNOWN_SPEED_PART
    if tokens_per_s <= 0:
        return 0.0
    if tokens_per_s < READING_TOKENS_PER_S:
        return SPEED_PART_AT_READING * (tokens_per_s / READING_TOKENS_PER_S) ** SLOW_EXPONENT
    rise = math.log(tokens_per_s / READING_TOKENS_PER_S) / math.log(FAST_TOKENS_PER_S / READING_TOKENS_PER_S)
    return min(1.0, SPEED_PART_AT_READING + (1 - SPEED_PART_AT_READING) * rise)


def margin_part(need_bytes: int | None, free_bytes: int | None) -> float:
    """The margin part of a row needing ``need_bytes`` of ``free_bytes`` on its fullest device (unknown: full)."""
    if need_bytes is None or not free_bytes or free_bytes <= 0:
        return MARGIN_PART_WHEN_FULL
    left = min(max(1 - need_bytes / free_bytes, 0.0), 1.0)
    return MARGIN_PART_WHEN_FULL + (1 - MARGIN_PART_WHEN_FULL) * min(1.0, left / MARGIN_COMFORT_SHARE)


def fit_score(total_params: int, active_params: int | None, quality_loss: int, tokens_per_s: float | None,
              need_bytes: int | None, free_bytes: int | None, *, score_speed: bool = True) -> FitScore:
    """The score of a row from its numbers; ``score_speed=False`` (training) leaves the speed out."""
    eff = effective_params(total_params, active_params)
    cap, qual = capability(eff), quality(quality_loss)
    speed = speed_part(tokens_per_s) if score_speed else None
    margin = margin_part(need_bytes, free_bytes)
    total = 100 * cap * qual * (1.0 if speed is None else speed) * margin
    return FitScore(total, cap, qual, speed, margin, round(eff), tokens_per_s if score_speed else None)
