"""Sliding-window layers (Gemma 2/3, Mistral v0.1, gpt-oss): the KV figure follows what each engine keeps,
and the breakdown's words and its bytes come from one rule (fitcheck.estimate.kv_cache.sliding_cache)."""

from __future__ import annotations

import csv
import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.engines import get
from fitcheck.estimate.formats import KV_DTYPE_BYTES
from fitcheck.estimate.kv_cache import kv_cache_bytes

ROOT = Path(__file__).resolve().parents[2]
SUM = re.compile(r"^\(?(?:(\d+) full-attention layers × ([\d,]+) tokens \+ )?(\d+) sliding-window layers × ([\d,]+) "
                 r"tokens\)? × .* = (\d+) elements/token × (\d+) seq × (\w+)")


def kv_of(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(cli, [*args, "--json"])
    import json

    doc = json.loads(r.output)
    part = next(c for c in doc["estimate"]["devices"][0]["breakdown"] if c["name"] == "kv_cache")
    return part["bytes"], part["detail"]


def layer_tokens(detail: str) -> tuple[int, int, int, int]:
    m = SUM.match(detail)
    assert m, detail
    full, full_t, sliding, sliding_t = (int((g or "0").replace(",", "")) for g in m.groups()[:4])
    return full, full_t, sliding, sliding_t


@pytest.mark.parametrize("args", [
    ("gemma-3-27b", "--profile", "rtx-4090", "--context", "32768"),
    ("gemma-3-27b", "--profile", "h200", "--context", "32768", "--prompt", "1000"),
    ("gemma-3-27b", "--profile", "h200", "--context", "32768", "--engine", "vllm"),
    ("gemma-3-27b", "--profile", "h200", "--context", "32768", "-p", "q4_k_m"),
    ("gemma-3-27b", "--profile", "h200", "--context", "32768", "--transformers-version", "4.50"),
    ("mistral-7b-v0.1", "--profile", "h200", "--context", "16384", "--prompt", "512"),
    ("mistral-7b-v0.1", "--profile", "h200", "--context", "16384", "--transformers-version", "4.50"),
    ("gemma-2-9b", "--profile", "h200", "--context", "8192", "--engine", "vllm", "--batch", "3"),
    ("gpt-oss-20b", "--profile", "h200", "--context", "8192", "-p", "q8_0"),
    ("mistral-7b-v0.1", "--profile", "h200", "--context", "16384", "-p", "q4_k_m"),
    ("llama-4-scout", "--profile", "h200", "--context", "65536", "--engine", "vllm"),
    ("llama-4-scout", "--profile", "h200", "--context", "65536", "-p", "q4_k_m"),
])
def test_the_words_add_up_to_the_figure(args):
    kv, detail = kv_of(*args)
    m = SUM.match(detail)
    full, full_t, sliding, sliding_t = layer_tokens(detail)
    per, seqs, dtype = int(m.group(5)), int(m.group(6)), m.group(7)
    assert kv == pytest.approx((full * full_t + sliding * sliding_t) * per * seqs * KV_DTYPE_BYTES[dtype], rel=1e-6)


def test_gemma3_per_engine():
    # transformers (current): the window is a view of the whole prefill until the first decode step
    kv, detail = kv_of("gemma-3-27b", "--profile", "rtx-4090", "--context", "32768", "-p", "bf16")
    assert layer_tokens(detail) == (10, 32768, 52, 32768) and "view" in detail and "≤" not in detail
    # a short prompt: the peak is at the end of generation, sliding layers at the window
    short, detail = kv_of("gemma-3-27b", "--profile", "h200", "--context", "32768", "--prompt", "1000")
    assert layer_tokens(detail) == (10, 32768, 52, 1024) and short < kv / 4
    # vLLM v0.19.0: the window's last 1,023 tokens and a chunked-prefill step (8,192 on a 140 GB GPU); its KV-cache
    # groups of 10 layers pad the 52 sliding-window layers to 60
    _, vllm = kv_of("gemma-3-27b", "--profile", "h200", "--context", "32768", "--engine", "vllm")
    assert layer_tokens(vllm) == (10, 32768, 60, 1023 + 8192) and "vLLM" in vllm and "pads" in vllm
    _, gguf = kv_of("gemma-3-27b", "--profile", "h200", "--context", "32768", "-p", "q4_k_m")
    assert layer_tokens(gguf) == (10, 32768, 52, 1536) and "--swa-full" in gguf  # 1,024 + n_ubatch 512


def test_older_transformers_releases():
    _, gemma = kv_of("gemma-3-27b", "--profile", "h200", "--context", "32768", "--transformers-version", "4.50")
    assert layer_tokens(gemma) == (10, 32768, 52, 1024) and "HybridCache" in gemma
    _, mistral = kv_of("mistral-7b-v0.1", "--profile", "h200", "--context", "16384", "--transformers-version", "4.50")
    assert layer_tokens(mistral) == (0, 0, 32, 16384) and "every token" in mistral


def test_llama_cpp_swa_cache_is_padded_to_256():
    _, detail = kv_of("gpt-oss-20b", "--profile", "h200", "--context", "8192", "-p", "q8_0")
    assert layer_tokens(detail)[2:] == (12, 768)  # GGML_PAD(128 + 512, 256)
    # architectures llama.cpp runs without a sliding-window cache keep every token there
    _, mistral = kv_of("mistral-7b-v0.1", "--profile", "h200", "--context", "16384", "-p", "q4_k_m")
    assert layer_tokens(mistral) == (0, 0, 32, 16384) and "full attention" in mistral


def test_the_measured_prefill_cache_is_reproduced():
    """transformers 5.24, gemma-3-1b cut to 6 layers (5 sliding, window 512), a 4,096-token prefill:
    the returned cache holds every layer × every token (the window is a view of the prefill's K/V)."""
    from benchmarks.measure.models import HAND_SPECS

    rows = [r for r in csv.DictReader(open(ROOT / "benchmarks/results/cpu-2026-11-30.csv"))
            if r["case_id"] == "prefill-gemma3-L6-bf16-L4096" and r["kv_cache_bytes"]]
    measured = int(rows[0]["kv_cache_bytes"])
    spec = replace(HAND_SPECS["google/gemma-3-1b-pt"], num_layers=6, num_sliding_layers=5)
    est = kv_cache_bytes(spec, tokens=4096, sequences=1, kv_dtype="bf16", engine=get("transformers"), prompt_tokens=4096,
                         transformers_version=rows[0]["transformers_version"])
    assert est == pytest.approx(measured, rel=1e-3)
    # after the first decode step the sliding layers hold the window
    decode = kv_cache_bytes(spec, tokens=4097, sequences=1, kv_dtype="bf16", engine=get("transformers"))
    assert decode == pytest.approx((1 * 4097 + 5 * 512) * 512 * 2, rel=1e-6)
