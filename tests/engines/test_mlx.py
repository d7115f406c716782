"""MLX (mlx-lm) as an engine: what it runs where, its weight formats and KV cache, its commands, and its memory
against published mlx-lm peaks (benchmarks/data/mlx_peak_memory.csv, benchmarks/mlx_peaks.py)."""

from __future__ import annotations

import shlex
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import mlx_peaks  # noqa: E402
from fitcheck import engines  # noqa: E402
from fitcheck.engines.mlx import KV_STEP  # noqa: E402
from fitcheck.estimate.formats import weight_format  # noqa: E402
from fitcheck.estimate.verdict import CANNOT_RUN, FITS  # noqa: E402
from fitcheck.pipeline import check  # noqa: E402
from fitcheck.profiles import list_profiles, load_profile  # noqa: E402
from fitcheck.request import Request  # noqa: E402

APPLE = [m.name for m in list_profiles() if m.gpus and m.gpus[0].vendor == "apple"]
OTHERS = [m.name for m in list_profiles() if not (m.gpus and m.gpus[0].vendor == "apple")]


def test_there_are_apple_and_other_profiles():
    assert len(APPLE) >= 3 and len(OTHERS) >= 10


@pytest.mark.parametrize("profile", OTHERS)
def test_mlx_runs_only_on_apple_gpus(profile):
    """--engine mlx elsewhere is a verdict (exit 1) with what runs there instead, never bad input."""
    r = check("qwen2.5-0.5b", Request(engine="mlx"), load_profile(profile))
    assert r.verdict.status == CANNOT_RUN and r.exit_code == 1
    assert "MLX needs an Apple GPU (Metal)" in r.verdict.summary()
    assert all(a.plan.engine != "mlx" for a in r.alternatives)


@pytest.mark.parametrize("profile", APPLE)
def test_mlx_is_the_default_on_apple_and_gguf_stays_with_llama_cpp(profile):
    machine = load_profile(profile)
    assert check("qwen2.5-0.5b", Request(), machine).plan.engine == "mlx"
    assert check("qwen2.5-0.5b", Request(precision="mlx-4bit"), machine).verdict.status == FITS
    assert check("qwen2.5-0.5b", Request(precision="q4_k_m"), machine).plan.engine == engines.gguf_engine()


@pytest.mark.parametrize("precision, bits", [("mlx-8bit", 8.5), ("mlx-6bit", 6.5), ("mlx-4bit", 4.5),
                                             ("mlx-3bit", 3.5)])
def test_affine_group_64_stores_a_16_bit_scale_and_bias_per_group(precision, bits):
    """mlx.core.quantize (affine, group 64): bits per weight + 2 × 16 bits per 64 weights
    (mlx ops.cpp affine_quantize: scales and biases in the weights' dtype)."""
    fmt = weight_format(precision)
    assert fmt.linear_bits == pytest.approx(bits) and fmt.packs_embeddings


def test_kv_cache_grows_in_256_token_steps():
    """mlx_lm.models.cache.KVCache.step = 256: the cache holds whole steps."""
    machine = load_profile("macbook-pro-m3-max-64gb")
    cells = {ctx: dict(check("qwen2.5-0.5b", Request(engine="mlx", context=ctx), machine).estimate.facts)["kv_cells"]
             for ctx in (256, 257, 4096, 4100)}
    assert KV_STEP == 256 and cells == {256: 256, 257: 512, 4096: 4096, 4100: 4352}


def test_commands_load_a_known_conversion_else_convert_first():
    machine = load_profile("macbook-air-m3-16gb")
    known = check("Qwen/Qwen3-4B-Instruct-2507", Request(precision="mlx-4bit", batch=4), machine)
    assert shlex.split(known.command()) == ["fitcheck", "Qwen/Qwen3-4B-Instruct-2507", "--precision", "mlx-4bit",
                                            "--batch", "4", "--profile", "macbook-air-m3-16gb"]
    from fitcheck.commands import engine_command

    served = engine_command(known.model_id, known.plan, known.model.entry.quantized_repos)
    assert shlex.split(served) == ["mlx_lm.server", "--model", "mlx-community/Qwen3-4B-Instruct-2507-4bit",
                                   "--port", "8080", "--decode-concurrency", "4"]
    unknown = check("qwen2.5-0.5b", Request(precision="mlx-8bit"), machine)
    convert, serve = engine_command(unknown.model_id, unknown.plan, {}).split(" && ")
    assert shlex.split(convert) == ["mlx_lm.convert", "--hf-path", "Qwen/Qwen2.5-0.5B-Instruct", "-q", "--q-bits",
                                    "8", "--q-group-size", "64", "--mlx-path", "Qwen2.5-0.5B-Instruct-8bit"]
    assert shlex.split(serve)[:3] == ["mlx_lm.server", "--model", "Qwen2.5-0.5B-Instruct-8bit"]
    # what is downloaded is what the command loads: the conversion, else the checkpoint mlx_lm.convert reads
    assert known.download.artifact.repo == "mlx-community/Qwen3-4B-Instruct-2507-4bit"
    assert unknown.download.artifact.repo == "Qwen/Qwen2.5-0.5B-Instruct"


# ---- against published mlx-lm peaks ----------------------------------------------------------------------------
ROWS = mlx_peaks.rows()


def test_every_published_row_is_estimated():
    assert len(ROWS) == len(mlx_peaks.read_rows()) >= 15


def test_short_prompts_are_the_weights_and_match():
    """Peaks after prompts of a few dozen tokens are the weights (in MLX's formats) and a small cache: within 7 %."""
    short = [r for r in ROWS if r.prompt < 100]
    assert len(short) >= 6 and all(abs(r.error) < 0.07 for r in short), [(r.id, f"{r.error:+.1%}") for r in short]


def test_long_prefills_are_short_by_at_most_a_fifth():
    """After prompts of 2k–34k tokens the published peaks stand 0.2–0.8 GB above the weights, KV cache and one prefill
    chunk's activations that the estimate holds (docs/accuracy.md, "MLX: published mlx-lm peaks"): every row within −20 % and +10 %, and
    the median row within 6 %."""
    assert all(-0.20 < r.error < 0.10 for r in ROWS), [(r.id, f"{r.error:+.1%}") for r in ROWS]
    assert statistics.median(abs(r.error) for r in ROWS) < 0.06
