"""Speed estimates: each formula checked against a hand computation (fitcheck.estimate.speed)."""

import math

import pytest
from estimate_specs import LLAMA2_7B, MIXTRAL, QWEN25_05B, QWEN25_7B

from fitcheck.engines import get
from fitcheck.engines.transformers import speed as TF
from fitcheck.errors import FitcheckError
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.weights import weight_bytes
from fitcheck.machine import CPU, GPU, Host, Machine, SystemMemory, Unknown
from fitcheck.plan import resolve_inference
from fitcheck.request import Request
from fitcheck.search.device import advise_device
from fitcheck.speed.cost import usd_per_million_tokens
from fitcheck.speed.decode import active_weight_bytes, estimate_speed, kv_bytes_per_sequence, prefill_flops_per_token
from fitcheck.speed.efficiency import (
    DECODE_BANDWIDTH,
    GRAPH_KERNEL_LATENCY_S,
    KV_CONCAT_BANDWIDTH,
    PREFILL_MFU,
    Rate,
    experts_touched_fraction,
    matmul_params,
)
from fitcheck.speed.training import training_flops_per_token, training_rate, training_seconds
from fitcheck.units import GiB


def box(gpu_bw=None, cpu_bw=100e9, gpu_tflops=100.0, cpu_tflops=2.0, vram_gib=80, ram_gib=256):
    gpus = ()
    if gpu_bw:
        gpus = (GPU(0, "nvidia", "Test GPU", vram_gib * GiB, vram_gib * GiB, compute_capability="8.9",
                    bandwidth_bytes_per_s=int(gpu_bw), bf16_tflops=gpu_tflops),)
    return Machine("box", "desktop", Host("linux"),
                   SystemMemory(ram_gib * GiB, ram_gib * GiB, None,
                                bandwidth_bytes_per_s=int(cpu_bw) if cpu_bw else Unknown("not measured")),
                   CPU("cpu", "x86_64", 16, 8, 16, bf16_tflops=cpu_tflops if cpu_tflops else Unknown("n/a")), gpus=gpus)


def plan_for(spec, machine, **kw):
    return resolve_inference(Request(**kw), spec, machine)


def test_gpu_decode_is_bytes_over_bandwidth_times_efficiency():
    m = box(gpu_bw=1000e9)
    p = plan_for(LLAMA2_7B, m, precision="q4_0", engine="llama.cpp", context=512)
    s = estimate_speed(LLAMA2_7B, p, m)
    kv = kv_bytes_per_sequence(LLAMA2_7B, p, 512)
    w = active_weight_bytes(LLAMA2_7B, "q4_0")
    e = DECODE_BANDWIDTH["gpu"]
    assert s.bound == "memory bandwidth"
    assert s.decode.high == pytest.approx(1000e9 * e.high / (w + kv))
    assert s.decode.low == pytest.approx(1000e9 * e.low / (w + kv))
    assert 3.4e9 < w < 4.0e9  # 7B Q4_0 is 3.56 GiB (llama.cpp) with the embedding, which decode does not read


def test_untied_embedding_is_not_read_but_a_tied_one_is():
    wb = weight_bytes(LLAMA2_7B, weight_format("bf16"))
    assert active_weight_bytes(LLAMA2_7B, "bf16") == wb.total - wb.embed_bytes
    tied = weight_bytes(QWEN25_05B, weight_format("bf16"))
    assert active_weight_bytes(QWEN25_05B, "bf16") == tied.total


def test_moe_reads_only_the_active_experts_and_more_of_them_at_larger_batches():
    one = active_weight_bytes(MIXTRAL, "bf16", batch=1)
    total = weight_bytes(MIXTRAL, weight_format("bf16")).total
    assert one < 0.4 * total  # 2 of 8 experts: ~13B of ~47B parameters
    assert experts_touched_fraction(MIXTRAL, 1) == pytest.approx(2 / 8)
    assert experts_touched_fraction(MIXTRAL, 4) == pytest.approx(1 - (6 / 8) ** 4)
    assert one < active_weight_bytes(MIXTRAL, "bf16", batch=16) < total


def test_batch_shares_the_weight_read():
    m = box(gpu_bw=1000e9)
    one = estimate_speed(QWEN25_7B, plan_for(QWEN25_7B, m, engine="vllm", batch=1), m)
    eight = estimate_speed(QWEN25_7B, plan_for(QWEN25_7B, m, engine="vllm", batch=8), m)
    assert eight.decode.mid > 4 * one.decode.mid          # aggregate grows almost with B
    assert eight.per_sequence.mid < one.per_sequence.mid  # each sequence is a little slower
    assert eight.per_sequence.mid == pytest.approx(eight.decode.mid / 8)


def test_transformers_small_model_is_host_bound():
    m = box(gpu_bw=2039e9, gpu_tflops=312)
    s = estimate_speed(QWEN25_05B, plan_for(QWEN25_05B, m, context=2048), m)
    host = TF.HOST_PER_LAYER
    assert s.bound == "host overhead"
    assert s.decode.high == pytest.approx(1 / (24 * host.low))
    assert 35 < s.decode.mid < 65  # Qwen2.5 speed benchmark, A100: 47.4 tok/s


def test_transformers_moves_the_kv_cache_3_plus_2g_times():
    assert get("transformers").kv_traffic(QWEN25_7B).total == 3 + 2 * 7
    assert get("vllm").kv_traffic(QWEN25_7B).total == 1


def test_offload_time_is_the_sum_of_both_parts():
    m = box(gpu_bw=1000e9, cpu_bw=50e9, vram_gib=8)
    full = estimate_speed(LLAMA2_7B, plan_for(LLAMA2_7B, m, precision="q4_0"), m)
    cpu = estimate_speed(LLAMA2_7B, plan_for(LLAMA2_7B, m, precision="q4_0", device="cpu"), m)
    half = estimate_speed(LLAMA2_7B, plan_for(LLAMA2_7B, m, precision="q4_0", gpu_layers=16), m)
    assert half.device == "offload"
    assert cpu.decode.mid < half.decode.mid < full.decode.mid
    # time per token ≈ half the GPU's time + half the CPU's time
    expect = 1 / (0.5 / full.decode.high + 0.5 / cpu.decode.high)
    assert half.decode.high == pytest.approx(expect, rel=0.05)


def test_unknown_ram_bandwidth_is_unknown_with_the_way_to_measure_it():
    m = box(cpu_bw=None)
    s = estimate_speed(QWEN25_05B, plan_for(QWEN25_05B, m), m)
    assert s.decode is None and s.prefill is None
    assert "probe --bench" in s.unknown


def test_prefill_is_two_flops_per_parameter_plus_causal_attention():
    f = prefill_flops_per_token(LLAMA2_7B, 1000)
    attn = 4 * 32 * 500 * 4096
    assert f == pytest.approx(2 * matmul_params(LLAMA2_7B) + attn)
    m = box(gpu_bw=1000e9, gpu_tflops=100)
    s = estimate_speed(LLAMA2_7B, plan_for(LLAMA2_7B, m, precision="fp16", engine="llama.cpp",
                                              context=2000, prompt_tokens=1000), m)
    assert s.prefill.high == pytest.approx(100e12 * PREFILL_MFU["gpu"].high / f)


def test_training_flops_and_time():
    p = matmul_params(LLAMA2_7B)
    assert training_flops_per_token(LLAMA2_7B) == 6 * p
    assert training_flops_per_token(LLAMA2_7B, gradient_checkpointing=True) == pytest.approx(6 * p * 4 / 3)
    assert training_flops_per_token(LLAMA2_7B, "lora") == 4 * p
    m = box(gpu_bw=1000e9, gpu_tflops=312)
    rate = training_rate(LLAMA2_7B, m)
    assert rate.high == pytest.approx(312e12 * 0.5 / (6 * p))
    fast, slow = training_seconds(10**9, rate)
    assert fast == pytest.approx(1e9 / rate.high) and slow > fast
    with pytest.raises(FitcheckError):
        training_flops_per_token(LLAMA2_7B, "dpo")


def test_price_per_million_tokens():
    cheap, dear = usd_per_million_tokens(3.6, Rate(100, 200))
    assert cheap == pytest.approx(3.6 / (200 * 3600) * 1e6) == pytest.approx(5.0)
    assert dear == pytest.approx(10.0)


def test_advice_cpu_only_machine_says_cpu():
    m = box()
    p = plan_for(QWEN25_05B, m)
    a = advise_device(QWEN25_05B, p, m, lambda _: True)
    assert a.choice == "cpu" and a.gpu is None and "no GPU" in a.reason


def test_advice_prefers_gpu_for_a_7b_and_says_why():
    m = box(gpu_bw=1000e9, cpu_bw=60e9)
    p = plan_for(QWEN25_7B, m)
    a = advise_device(QWEN25_7B, p, m, lambda _: True)
    assert a.choice == "gpu" and "GPU ~" in a.reason and "CPU ~" in a.reason
    assert a.cpu.precision == "q4_k_m"  # the CPU side runs what CPU users run


def test_advice_cpu_is_enough_for_a_tiny_model_on_a_fast_cpu():
    m = box(gpu_bw=300e9, cpu_bw=400e9, cpu_tflops=10)  # a slow GPU next to a server CPU
    p = plan_for(QWEN25_05B, m, precision="q4_k_m")
    a = advise_device(QWEN25_05B, p, m, lambda _: True)
    assert a.choice == "cpu" and a.reason.startswith("CPU is enough")


def test_advice_follows_what_fits():
    m = box(gpu_bw=1000e9)
    p = plan_for(QWEN25_7B, m)
    gpu_only = advise_device(QWEN25_7B, p, m, lambda q: q.device == "gpu")
    cpu_only = advise_device(QWEN25_7B, p, m, lambda q: q.device == "cpu")
    neither = advise_device(QWEN25_7B, p, m, lambda q: False)
    assert gpu_only.choice == "gpu" and "does not fit in RAM" in gpu_only.reason
    assert cpu_only.choice == "cpu" and "does not fit on the GPU" in cpu_only.reason
    assert neither.choice is None


def test_rate_mid_is_geometric():
    assert Rate(10, 40).mid == pytest.approx(20)
    assert math.isclose(Rate(10, 40).scaled(0.5).high, 20)


def test_transformers_fp8_waits_for_the_gpu_at_every_linear():
    # finegrained_fp8.py FP8Linear.forward synchronizes after each block matmul: device and host
    # times add instead of overlapping; vLLM's FP8 GEMMs do not wait.
    m = box(gpu_bw=3350e9, gpu_tflops=989)
    assert TF.host_serialises(None, "fp8")
    assert not TF.host_serialises(None, "bf16")
    fp8_plan = plan_for(QWEN25_7B, m, precision="fp8", context=2048)
    fp8 = estimate_speed(QWEN25_7B, fp8_plan, m)
    host = TF.HOST_PER_LAYER
    cat = 2 * kv_bytes_per_sequence(QWEN25_7B, fp8_plan, 2048)  # torch.cat runs at KV_CONCAT_BANDWIDTH
    moved = fp8.weight_bytes_per_step + fp8.kv_bytes_per_step - cat + cat / KV_CONCAT_BANDWIDTH.high
    mem_fast = moved / (fp8.bandwidth_bytes_per_s * DECODE_BANDWIDTH["gpu"].high)
    # and each FP8Linear's extra calls, two Triton launches and the wait for its two kernels (fp8_linear_host)
    linears = TF.fp8_linear_host(QWEN25_7B, 1, None, host)
    assert 1 / fp8.decode.high == pytest.approx(mem_fast + QWEN25_7B.num_layers * host.low + linears.low, rel=1e-6)


def test_fp8_linear_host_work_is_counted_per_call():
    # Qwen2.5-7B: 28 layers × 7 linears, all with the token; per call 3 calls of the layer's 42, two Triton
    # launches, two kernel latencies
    host = TF.HOST_PER_LAYER
    calls, busy = TF.fp8_linear_calls(QWEN25_7B, 1, None)
    assert calls == busy == 28 * 7
    extra = TF.fp8_linear_host(QWEN25_7B, 1, None, host)
    per_call = (3 * host.low / 42 + 2 * TF.TRITON_LAUNCH_S.low + 2 * GRAPH_KERNEL_LATENCY_S.low)
    assert extra.low == pytest.approx(calls * per_call)
    assert extra.low < extra.high
