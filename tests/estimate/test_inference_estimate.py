"""Whole inference estimates: invariants, engines, and the verdict against a machine."""

import pytest
from estimate_specs import DEEPSEEK_V3, LLAMA3_8B, MIXTRAL, QWEN25_7B
from hypothesis import given, settings
from hypothesis import strategies as st
from machines import machine, nvidia, unknown_free_gpu

from fitcheck.engines import estimate_inference
from fitcheck.errors import FitcheckError
from fitcheck.estimate.verdict import DOES_NOT_FIT, FITS, TIGHT, UNKNOWN, judge
from fitcheck.pipeline import check
from fitcheck.plan import resolve_inference
from fitcheck.request import Request


class Resolved:  # what fitcheck.model.resolve returns, minimally
    def __init__(self, spec):
        self.spec, self.hf_id, self.source, self.note, self.entry = spec, spec.name, "test", None, None


def est(spec, m, **req):
    plan = resolve_inference(Request(**req), spec, m)
    return estimate_inference(spec, plan)


RTX4090 = machine([nvidia()])
CPU_ONLY = machine([], ram_gib=16)


def test_defaults_bf16_transformers_on_ampere_or_newer_and_q4_on_cpu():
    assert resolve_inference(Request(), QWEN25_7B, RTX4090).precision == "bf16"
    assert resolve_inference(Request(), QWEN25_7B, machine([nvidia("Tesla T4", 15360, cc="7.5")])).precision == "fp16"
    plan = resolve_inference(Request(), QWEN25_7B, CPU_ONLY)
    assert (plan.precision, plan.engine, plan.device) == ("q4_k_m", "llama.cpp", "cpu")


def test_qwen7b_bf16_two_32k_sequences_do_not_fit_a_4090_but_awq_does():
    e = est(QWEN25_7B, RTX4090, context=32768, batch=2)
    assert judge(e, RTX4090, 0.1).status == DOES_NOT_FIT
    e2 = est(QWEN25_7B, RTX4090, context=32768, batch=2, precision="awq")
    assert judge(e2, RTX4090, 0.1).status == FITS


def test_peak_figures_are_ordered():
    e = est(QWEN25_7B, RTX4090)
    d = e.devices[0]
    assert d.peak_allocated_bytes < d.peak_reserved_bytes < d.total_bytes


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60000), st.integers(1, 32), st.sampled_from(["transformers", "vllm", "llama.cpp"]))
def test_total_monotone_in_context_and_batch(ctx, batch, engine):
    precision = "q4_k_m" if engine == "llama.cpp" else "bf16"
    kw = dict(engine=engine, precision=precision)
    big = machine([nvidia("NVIDIA H100 80GB HBM3", 81559, cc="9.0")])

    def need(c, b):
        e = est(QWEN25_7B, big, context=c, batch=b, **kw)
        return sum(d.total_bytes - d.component("kv_pool_spare") for d in e.devices)
    assert need(ctx + 1, batch) >= need(ctx, batch)
    assert need(ctx, batch + 1) >= need(ctx, batch)


def test_total_monotone_in_bits_per_weight():
    totals = [est(LLAMA3_8B, RTX4090, precision=p).total_bytes for p in ("fp32", "bf16", "int8", "nf4")]
    assert totals == sorted(totals, reverse=True)
    gguf = [est(LLAMA3_8B, RTX4090, precision=p).total_bytes for p in ("q8_0", "q6_k", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k")]
    assert gguf == sorted(gguf, reverse=True)


def test_moe_total_covers_its_active_dense_part():
    e = est(MIXTRAL, machine([nvidia("H100", 81559, cc="9.0")] * 2), precision="bf16", gpus=2)
    assert sum(d.component("weights") for d in e.devices) >= MIXTRAL.active_params * 2
    assert sum(d.component("weights") for d in e.devices) == pytest.approx(MIXTRAL.total_params * 2, rel=0.01)


def test_vllm_reserves_a_fraction_and_reports_concurrency():
    h100 = machine([nvidia("NVIDIA H100 80GB HBM3", 81559, cc="9.0")])
    e = est(LLAMA3_8B, h100, engine="vllm", context=8192)
    reserved = e.fact("vllm_reserved_bytes")
    assert reserved == int(81559 * 2**20 * 0.9)
    # what must be free: the reservation and what vLLM v0.19.0 keeps beyond it (CUDA context, CUDA graphs)
    assert e.devices[0].total_bytes == reserved + e.fact("vllm_outside_reservation_bytes") > reserved
    # KV pool ≈ reserved − 16 GB weights − activations − overhead ≈ 50+ GiB → ≈ 400k tokens.
    assert 300_000 < e.fact("vllm_kv_pool_tokens") < 500_000
    assert e.fact("vllm_max_concurrency") == pytest.approx(e.fact("vllm_kv_pool_tokens") / 8192, rel=0.01)


def test_vllm_fails_when_the_reservation_is_too_small():
    small = machine([nvidia("NVIDIA A10G", 23028, cc="8.6")])
    e = est(QWEN25_7B, small, engine="vllm", context=32768, gpu_memory_utilization=0.7)
    v = judge(e, small, 0.1)
    assert v.status == DOES_NOT_FIT and "gpu-memory-utilization" in v.reasons[0]


def test_llama_cpp_partial_offload_moves_layers_to_ram():
    small = machine([nvidia("NVIDIA GeForce RTX 3060", 12288, cc="8.6")], ram_gib=32)
    full = est(LLAMA3_8B, small, precision="q8_0", engine="llama.cpp")
    half = est(LLAMA3_8B, small, precision="q8_0", engine="llama.cpp", gpu_layers=16)
    assert half.gpu_devices[0].total_bytes < full.gpu_devices[0].total_bytes
    assert half.cpu_device.component("weights") > full.cpu_device.component("weights")
    # Same total weights, split differently.
    assert sum(d.component("weights") for d in half.devices) == pytest.approx(
        sum(d.component("weights") for d in full.devices), rel=0.02)


def test_mla_cache_is_latent_in_vllm():
    node = machine([nvidia("NVIDIA H200", 143771, cc="9.0")] * 8)
    e = est(DEEPSEEK_V3, node, engine="vllm", precision="fp8", gpus=8, context=32768)
    # latent 576 elements × 61 layers × 2 bytes × 32768 tokens, replicated on each rank
    assert e.devices[0].component("kv_cache") == 576 * 61 * 2 * 32768


def test_tight_and_unknown_verdicts():
    e = est(QWEN25_7B, RTX4090, precision="bf16", context=4096)
    need = e.devices[0].total_bytes
    tight_gpu = machine([nvidia(total_mib=24564, free_mib=int(need / 2**20 * 1.05))])
    assert judge(e, tight_gpu, 0.10).status == TIGHT
    mystery = machine([unknown_free_gpu()])
    e2 = est(QWEN25_7B, mystery)
    assert judge(e2, mystery, 0.1).status == UNKNOWN


def test_more_gpus_than_the_machine_has_cannot_run_here():
    assert resolve_inference(Request(gpus=2), QWEN25_7B, RTX4090).problems == ("--gpus 2, but test has 1 GPU",)


def test_verdict_still_catches_a_plan_with_more_gpus_than_the_machine():
    # Plans built by hand (API users, searches) bypass resolve_inference's check.
    plan = resolve_inference(Request(), QWEN25_7B, RTX4090).with_changes(gpus=2)
    v = judge(estimate_inference(QWEN25_7B, plan), RTX4090, 0.1)
    assert v.status == DOES_NOT_FIT and "2 GPUs" in v.reasons[0]


def test_default_precision_follows_a_named_engine():
    assert resolve_inference(Request(engine="transformers"), QWEN25_7B, CPU_ONLY).precision in ("bf16", "fp32")
    assert resolve_inference(Request(engine="llama.cpp"), QWEN25_7B, RTX4090).precision == "q4_k_m"


def test_check_reports_largest_context_and_batch_and_alternatives():
    r = check(Resolved(QWEN25_7B), Request(context=32768, batch=2), RTX4090)
    assert r.verdict.status == DOES_NOT_FIT
    assert r.max_context and 4096 < r.max_context < 32768
    assert r.alternatives, "something must fit on a 24 GB GPU"
    for a in r.alternatives:
        assert a.verdict.status in (FITS, TIGHT)
    # Cheapest first.
    assert [a.cost for a in r.alternatives] == sorted(a.cost for a in r.alternatives)


def test_fp8_needs_ada_or_hopper():
    a100 = machine([nvidia("NVIDIA A100-SXM4-80GB", 81920, cc="8.0")])
    (problem,) = resolve_inference(Request(precision="fp8"), QWEN25_7B, a100).problems
    assert "compute capability >= 8.9 (this GPU: 8.0)" in problem
    assert not resolve_inference(Request(precision="fp8"), QWEN25_7B, RTX4090).problems


@pytest.mark.parametrize("req, msg", [
    (dict(precision="q4_k_m", engine="vllm"), "GGUF"),
    (dict(kv_dtype="q8_0", engine="vllm"), "llama.cpp type"),
])
def test_incompatible_requests_are_one_line_errors(req, msg):
    with pytest.raises(FitcheckError, match=msg):
        resolve_inference(Request(**req), QWEN25_7B, RTX4090)


def test_a_gpu_asked_of_a_machine_without_one_cannot_run_here():
    (problem,) = resolve_inference(Request(device="gpu"), QWEN25_7B, CPU_ONLY).problems
    assert "--device gpu needs a GPU" in problem


def test_cpu_inference_keeps_a_kv_cache():
    e = est(QWEN25_7B, CPU_ONLY, context=8192)
    assert e.cpu_device.component("kv_cache") == 2 * 4 * 128 * 28 * 2 * 8192


def test_prefill_logits_for_every_position():
    from dataclasses import replace as _replace

    from estimate_specs import QWEN25_05B as S

    from fitcheck.engines import estimate_inference as _est
    from fitcheck.plan import Plan as _Plan
    base = _Plan(precision="bf16", engine="transformers", device="gpu", gpus=1, context=1024, batch=1,
                 prompt_tokens=1024, kv_dtype="bf16", gpu_layers=None, gpu_memory_utilization=0.9,
                 gpu_total_bytes=None, compute_capability=8.0, decodes=False)
    last = _est(S, base).devices[0].component("activations")
    every = _est(S, _replace(base, logits="all")).devices[0].component("activations")
    upcast = _est(S, _replace(base, logits="all-fp32")).devices[0].component("activations")
    # every position's logits (2 B in bf16, 2 + 4 B upcast before 4.45) made after the layers'
    # transients are freed: the prefill peaks at the larger of the two phases
    from fitcheck.engines.transformers import activations as _A
    layers = _A.transformers_prefill_bytes(S, 1024, 2)
    assert last == layers + S.vocab_size * 4
    assert every == max(layers, 1024 * S.vocab_size * 2)
    assert upcast == max(layers, 1024 * S.vocab_size * 6)
    # on the CPU that single large tensor is unmapped when freed: glibc does not keep it
    cpu = _replace(base, device="cpu", gpus=0)
    keep = [c.bytes for c in _est(S, cpu).devices[0].components if c.counted_in == "reserved"]
    keep_all = [c.bytes for c in _est(S, _replace(cpu, logits="all")).devices[0].components if c.counted_in == "reserved"]
    assert keep_all[0] == keep[0] - S.vocab_size * 4
