"""transformers copies the KV cache every decoded token (torch.cat, repeat_kv); vLLM, SGLang and llama.cpp do not."""

from __future__ import annotations

import pytest
from estimate_specs import LLAMA2_7B, QWEN25_05B, QWEN25_7B

from fitcheck.engines import get
from fitcheck.machine import CPU, GPU, Host, Machine, SystemMemory
from fitcheck.plan import resolve_inference
from fitcheck.render.speed import speed_document, speed_line
from fitcheck.request import Request
from fitcheck.speed.decode import estimate_speed, kv_bytes_per_sequence
from fitcheck.speed.efficiency import DECODE_BANDWIDTH, KV_CONCAT_BANDWIDTH, KVTraffic
from fitcheck.units import GiB

A100 = Machine("a100", "desktop", Host("linux"), SystemMemory(256 * GiB, 256 * GiB, None),
               CPU("cpu", "x86_64", 16, 8, 16),
               gpus=(GPU(0, "nvidia", "A100", 80 * GiB, 80 * GiB, compute_capability="8.0",
                         bandwidth_bytes_per_s=int(2039e9), bf16_tflops=312.0),))


def speed(spec, context, **kw):
    plan = resolve_inference(Request(context=context, **kw), spec, A100)
    return plan, estimate_speed(spec, plan, A100)


def test_transformers_copies_split_from_the_attention_reads():
    # cat reads and writes the cache (2×), repeat_kv reads it once and writes g copies, attention reads the g copies
    assert get("transformers").kv_traffic(QWEN25_7B) == KVTraffic(attention_reads=7, concatenation=2, expansion=1 + 7)
    assert get("transformers").kv_traffic(QWEN25_7B).total == 3 + 2 * 7
    # no grouped-query heads: repeat_kv returns its input, only the concatenation copies
    assert get("transformers").kv_traffic(LLAMA2_7B) == KVTraffic(1, concatenation=2)
    for engine in ("vllm", "sglang", "llama.cpp"):
        assert get(engine).kv_traffic(QWEN25_7B) == KVTraffic(1)


def test_the_concatenation_runs_at_the_cat_kernels_share_of_the_bandwidth():
    plan, s = speed(QWEN25_7B, 32768, engine="transformers")
    kv = kv_bytes_per_sequence(QWEN25_7B, plan, 32768)
    assert s.kv_bytes_per_step == 17 * kv and s.kv_copy_bytes_per_step == 10 * kv
    assert s.bound == "memory bandwidth"
    e, c = DECODE_BANDWIDTH["gpu"], KV_CONCAT_BANDWIDTH
    # repeat_kv (1 + 7) and the attention (7) at the decode bandwidth, torch.cat (2) at its share of it
    moved = s.weight_bytes_per_step + 15 * kv + 2 * kv / c.high
    assert s.decode.high == pytest.approx(2039e9 * e.high / moved)
    assert KV_CONCAT_BANDWIDTH in s.assumptions
    # the copies are much of what a long context costs: against the cache read once in place
    assert 0.35 < s.kv_copy_share < 0.6


def test_engines_reading_the_cache_in_place_pay_no_copy():
    for engine in ("vllm", "llama.cpp"):
        _, s = speed(QWEN25_7B, 32768, engine=engine, **({"precision": "q8_0"} if engine == "llama.cpp" else {}))
        assert s.kv_copy_bytes_per_step == 0 and s.kv_copy_share == 0.0
        assert KV_CONCAT_BANDWIDTH not in s.assumptions


def test_a_host_bound_step_hides_the_copies():
    # Qwen2.5-0.5B under transformers is bound by kernel launches: its copies fit under the host time
    # (the Qwen2.5 benchmark reads 47.4 tok/s after 1 prompt token and 47.2 after 30,720)
    _, short = speed(QWEN25_05B, 2048, engine="transformers")
    _, long = speed(QWEN25_05B, 32768, engine="transformers")
    assert long.bound == "host overhead"
    assert long.decode.mid == pytest.approx(short.decode.mid, rel=0.02)
    assert long.kv_copy_share < 0.1


def test_the_speed_line_says_where_the_slow_down_comes_from_and_who_avoids_it():
    _, s = speed(QWEN25_7B, 32768, engine="transformers")
    line = speed_line(s, None)
    assert "transformers copies the KV cache every token" in line
    assert "torch.cat" in line and "repeat_kv" in line
    assert "vLLM, SGLang and llama.cpp read the cache in place" in line
    doc = speed_document(s)
    assert doc["kv_cache_copies"]["bytes_per_step"] == s.kv_copy_bytes_per_step
    assert doc["kv_cache_copies"]["share_of_step"] == pytest.approx(s.kv_copy_share, abs=1e-4)
    # a short context, or an engine that reads in place, says nothing of it
    _, short = speed(QWEN25_7B, 2048, engine="transformers")
    _, vllm = speed(QWEN25_7B, 32768, engine="vllm")
    assert "copies the KV cache" not in speed_line(short, None)
    assert "copies the KV cache" not in speed_line(vllm, None)
    assert speed_document(vllm)["kv_cache_copies"] is None
