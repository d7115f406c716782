"""`fitcheck serve` under load on loopback: hundreds of concurrent requests, a mix of endpoints and parameters, each
answered exactly as when asked alone, none with a 5xx, and the memory flat from one wave to the next."""

from __future__ import annotations

import gc
import random
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.serve.client import request, url

WAVE = 400          # requests per wave
CLIENTS = 32        # client threads
RSS_MARGIN = 8 * 2**20
P = "profile"
URLS = [url(path, params) for path, params in [
    ("/api/check", [("model", "qwen-7b"), (P, "rtx-4090")]),
    ("/api/check", [("model", "qwen-7b"), (P, "rtx-3060"), ("context", "16384")]),
    ("/api/check", [("model", "llama3-70b"), (P, "rtx-4090")]),
    ("/api/check", [("model", "mistral-7b"), (P, "laptop-16gb")]),
    ("/api/check", [("model", "qwen-7b"), (P, "a100-80gb"), ("engine", "vllm"), ("kv-dtype", "fp8")]),
    ("/api/check", [("model", "qwen-7b"), ("mode", "qlora"), ("seq-len", "4096"), (P, "rtx-4090")]),
    ("/api/check", [("model", "qwen-7b"), ("mode", "full"), (P, "8x-h100"), ("zero", "3")]),
    ("/api/check", [("model", "mixtral-8x7b"), (P, "8x-h100"), ("engine", "vllm")]),
    ("/api/check", [("model", "qwen3-30b-a3b"), (P, "rtx-4070-laptop")]),
    ("/api/check", [("model", "qwen-7b"), (P, "laptop-16gb"), ("engine", "vllm")]),
    ("/api/check", [("model", "qwen-7b")]),
    ("/api/check", [("model", "llama3-8b"), ("gpu", "rtx-3060"), ("ram", "32GiB")]),
    ("/api/check", [("model", "qwen2.5:7b"), (P, "rtx-4090")]),
    ("/api/check", [("model", "qwen-7b"), (P, "h100-sxm"), ("require", "gpus>=2")]),
    ("/api/check", [("model", "qwen-77b")]),
    ("/api/check", [("model", "qwen-7b"), ("context", "-5")]),
    ("/api/check", [("model", "qwen-7b"), ("contxt", "5")]),
    ("/api/check", [("model", "./x.gguf")]),
    ("/api/bars.svg", [("model", "qwen-7b"), (P, "rtx-4090"), ("precision", "q4_k_m"), ("gpu-layers", "10")]),
    ("/api/plot.svg", [("model", "qwen-7b"), (P, "rtx-4090")]),
    ("/api/plot.svg", [("model", "llama3-8b"), (P, "rtx-3090"), ("against", "batch")]),
    ("/api/where", [("model", "qwen-7b"), ("kind", "laptop")]),
    ("/api/where", [("model", "qwen-7b"), ("mode", "lora"), ("kind", "cloud")]),
    ("/api/fits", [(P, "rtx-4090"), ("q", "qwen2.5-7b")]),
    ("/api/fits", [(P, "rtx-3060"), ("family", "llama"), ("top", "5")]),
    ("/api/models", [("q", "qw"), ("limit", "10")]),
    ("/api/models", [("q", "llama")]),
    ("/api/options", []),
    ("/api/profiles", [("kind", "cloud")]),
    ("/api/probe", []),
    ("/api/probe", [(P, "h100-sxm")]),
    ("/api/nope", []),
]]


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def answer_of(server, target: str) -> tuple[int, str, bytes]:
    r = request(server, target)
    return r.status, r.headers["content-type"], r.body


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RSS from /proc/self/status")
def test_hundreds_of_concurrent_requests_answer_as_one_does(server):
    alone = {target: answer_of(server, target) for target in URLS}   # single-threaded, and the caches warm
    assert {status for status, _, _ in alone.values()} <= {200, 400, 404}
    targets = [URLS[i % len(URLS)] for i in range(WAVE)]
    random.Random(39).shuffle(targets)

    def wave() -> tuple[float, int]:
        started = time.monotonic()
        with ThreadPoolExecutor(CLIENTS) as pool:
            answers = list(pool.map(lambda t: answer_of(server, t), targets))
        seconds = time.monotonic() - started
        wrong = [(t, a[0]) for t, a in zip(targets, answers, strict=True) if a != alone[t]]
        assert not wrong, wrong[:5]
        assert not [a for a in answers if a[0] >= 500]
        gc.collect()
        return seconds, rss_bytes()

    before = rss_bytes()
    first_s, first_rss = wave()
    second_s, second_rss = wave()
    statuses = Counter(alone[t][0] for t in targets)
    print(f"\nload: {len(URLS)} URLs, {WAVE} requests a wave from {CLIENTS} threads ({dict(statuses)}): "
          f"{first_s:.2f} s and {second_s:.2f} s; RSS {before / 2**20:.1f} MiB before, {first_rss / 2**20:.1f} MiB "
          f"after the first wave, {second_rss / 2**20:.1f} MiB after the second")
    assert second_rss - first_rss < RSS_MARGIN
    assert first_s < 30 and second_s < 30
