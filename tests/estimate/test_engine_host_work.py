"""Per-step work that is not bytes: transformers' MoE loop and FP8Linear (host calls, Triton launches, waits), the
kernels a layer launches under CUDA graphs (dense layers too), and FP8 GEMMs at prefill
(fitcheck.estimate.speed), each against a hand computation from the counts the source gives."""

from dataclasses import replace

import pytest
from estimate_specs import LLAMA3_8B, QWEN25_7B

from fitcheck.engines.serving import graph_layer_kernels, graph_layer_latency
from fitcheck.engines.transformers import speed as TF
from fitcheck.machine import CPU, GPU, Host, Machine, SystemMemory
from fitcheck.model.resolve import resolve_model
from fitcheck.plan import resolve_inference
from fitcheck.request import Request
from fitcheck.speed.decode import estimate_speed, fp8_gemms, prefill_flops_per_token
from fitcheck.speed.efficiency import DECODE_BANDWIDTH, GRAPH_KERNEL_LATENCY_S, PREFILL_MFU, matmul_params
from fitcheck.units import GiB

# Qwen3-30B-A3B (the catalog's): 48 layers, all MoE, 128 experts of 768, 8 routed per token, q/k norm
QWEN3_MOE = resolve_model("Qwen/Qwen3-30B-A3B").spec


def gpu_box(cc="9.0", bw=4000e9, tflops=148.0):
    gpu = GPU(0, "nvidia", "Test GPU", 96 * GiB, 96 * GiB, compute_capability=cc, bandwidth_bytes_per_s=int(bw),
              bf16_tflops=tflops)
    return Machine("box", "desktop", Host("linux"), SystemMemory(256 * GiB, 256 * GiB, None),
                   CPU("cpu", "x86_64", 16, 8, 16), gpus=(gpu,))


def test_qwen3_moe_under_4_51_visits_all_128_experts_and_each_visit_is_eleven_calls():
    assert QWEN3_MOE.architecture == "qwen3_moe" and QWEN3_MOE.num_moe_layers == 48 and QWEN3_MOE.qk_norm
    # modeling_qwen3_moe.py v4.51.3: for expert_idx in range(self.num_experts) — 128 visits of 11 calls; the router's
    # 8 calls replace the MLP's 5; a Qwen3 layer makes 42 + 16 (q/k norm) calls
    units = TF.host_layers(QWEN3_MOE, 1, "4.51.3")
    assert units == pytest.approx(48 + 48 * (8 + 128 * 11 - 5) / 58)
    # from 4.53 only the 8 experts the token picked, after the 5-call scan
    assert TF.host_layers(QWEN3_MOE, 1, "4.53") == pytest.approx(48 + 48 * (8 + 5 + 8 * 11 - 5) / 58)
    assert TF.host_layers(QWEN3_MOE, 1, "4.53") < units / 9


def test_the_loops_make_the_host_wait_for_the_device_and_grouped_mm_does_not():
    assert TF.host_serialises(QWEN3_MOE, "bf16", "4.51.3")   # torch.where's nonzero per visit
    assert TF.host_serialises(QWEN3_MOE, "bf16", "4.53")
    assert not TF.host_serialises(QWEN3_MOE, "bf16", "5.0")
    assert not TF.host_serialises(LLAMA3_8B, "bf16", "4.51.3")
    assert TF.host_serialises(LLAMA3_8B, "fp8")              # FP8Linear's torch.cuda.synchronize


def test_fp8_linears_of_every_visited_expert_run_their_host_path_but_only_hit_ones_wait_for_kernels():
    calls, busy = TF.fp8_linear_calls(QWEN3_MOE, 1, "4.51.3")
    assert calls == 48 * 4 + 48 * 3 * 128          # q/k/v/o, and gate/up/down of all 128 experts visited
    assert busy == pytest.approx(48 * 4 + 48 * 3 * 8)  # kernels launch only for the 8 experts with the token
    host = TF.HOST_PER_LAYER
    extra = TF.fp8_linear_host(QWEN3_MOE, 1, "4.51.3", host)
    per_call = 3 * host.high / 58 + 2 * TF.TRITON_LAUNCH_S.high
    assert extra.high == pytest.approx(calls * per_call + busy * 2 * GRAPH_KERNEL_LATENCY_S.high)
    # a dense model: 7 FP8Linears a layer, each with its token
    assert TF.fp8_linear_calls(LLAMA3_8B, 1, None) == (32 * 7, 32 * 7)


def test_transformers_moe_decode_is_host_bound_by_the_loop_of_its_release():
    m = gpu_box()
    old = resolve_inference(Request(engine="transformers", precision="bf16", context=2048,
                                    transformers_version="4.51.3"), QWEN3_MOE, m)
    new = resolve_inference(Request(engine="transformers", precision="bf16", context=2048,
                                    transformers_version="4.53"), QWEN3_MOE, m)
    slow, fast = estimate_speed(QWEN3_MOE, old, m), estimate_speed(QWEN3_MOE, new, m)
    host = TF.HOST_PER_LAYER
    assert slow.bound == "host overhead"
    # serial (a sync per visit): the bytes' time and the host time add
    units = TF.host_layers(QWEN3_MOE, 1, "4.51.3")
    assert 1 / slow.decode.low > units * host.high
    assert fast.decode.mid > 8 * slow.decode.mid


def test_a_dense_layer_under_cuda_graphs_pays_its_kernels_latency_after_its_bytes():
    # GQA attention 6 + dense MLP 4; Qwen3's q/k norms 2 more; block FP8: a quantization kernel per GEMM (4)
    assert graph_layer_kernels(LLAMA3_8B, "bf16") == 10
    assert graph_layer_kernels(replace(LLAMA3_8B, qk_norm=True), "bf16") == 12
    assert graph_layer_kernels(replace(LLAMA3_8B, qk_norm=True), "fp8") == 16
    m = gpu_box()
    plan = resolve_inference(Request(engine="vllm", precision="bf16", context=1024), QWEN25_7B, m)
    s = estimate_speed(QWEN25_7B, plan, m, context=1024)
    e = DECODE_BANDWIDTH["gpu"]
    moved = s.weight_bytes_per_step + s.kv_bytes_per_step
    latency = graph_layer_latency(QWEN25_7B, "bf16")
    assert 1 / s.decode.high == pytest.approx(moved / (4000e9 * e.high) + QWEN25_7B.num_layers * latency.low)
    assert 1 / s.decode.low == pytest.approx(moved / (4000e9 * e.low) + QWEN25_7B.num_layers * latency.high)


def test_fp8_prompts_run_their_matmuls_on_fp8_tensor_cores_from_compute_capability_8_9():
    hopper, ampere = gpu_box("9.0"), gpu_box("8.0")
    req = Request(engine="sglang", precision="fp8", context=8192, prompt_tokens=8192)
    fp8 = estimate_speed(QWEN25_7B, resolve_inference(req, QWEN25_7B, hopper), hopper)
    bf16 = estimate_speed(QWEN25_7B, resolve_inference(replace(req, precision="bf16"), QWEN25_7B, hopper), hopper)
    flops = prefill_flops_per_token(QWEN25_7B, 8192)
    mm = 2.0 * matmul_params(QWEN25_7B)
    mfu = PREFILL_MFU["gpu"]
    assert 1 / fp8.prefill.high == pytest.approx((flops - mm / 2) / (148e12 * mfu.high))
    assert 1 / bf16.prefill.high == pytest.approx(flops / (148e12 * mfu.high))
    assert fp8_gemms(resolve_inference(req, QWEN25_7B, hopper), hopper)
    assert not fp8_gemms(resolve_inference(req, QWEN25_7B, ampere), ampere)   # Marlin weight-only FP8
    tf = resolve_inference(replace(req, engine="transformers"), QWEN25_7B, hopper)
    assert not fp8_gemms(tf, hopper)
