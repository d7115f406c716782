"""vLLM's own startup logs (benchmarks/data/vllm_startup_logs.csv) against the vLLM estimate's parts."""

import csv
from pathlib import Path

import pytest

from fitcheck.estimate import activations as A
from fitcheck.estimate.inference import VLLM_NCCL_TP, VLLM_NON_TORCH
from fitcheck.model.spec import ModelSpec

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "vllm_startup_logs.csv"
LLAMA3_8B = ModelSpec("meta-llama/Meta-Llama-3-8B", 32, 4096, 14336, 32, 8, 128256, architecture="llama",
                      max_context=8192)
ROWS = list(csv.DictReader(DATA.open()))


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"tp{r['tensor_parallel']}")
def test_activation_peak_and_the_growth_of_non_torch_memory(row):
    tp = int(row["tensor_parallel"])
    act = A.vllm_profile_bytes(LLAMA3_8B, tp, 2) / 2**30
    # the larger of the profiling run's two phases: the forward, or the batch's hidden states and the sampler's
    # top-k/top-p sort for 256 sequences (vllm_sampler_bytes_per_entry): 1.22 vs 1.26 GiB
    assert act == pytest.approx(float(row["activation_peak_gib"]), rel=0.05)
    base = next(float(r["non_torch_gib"]) for r in ROWS if r["tensor_parallel"] == "1")
    growth = float(row["non_torch_gib"]) - base
    counted = (VLLM_NCCL_TP if tp > 1 else 0) / 2**30
    assert counted == pytest.approx(growth, abs=0.02)
    assert base >= VLLM_NON_TORCH / 2**30  # the base is a CUDA-graph-free profile of that release
