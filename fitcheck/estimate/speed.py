"""How fast: decode and prefill tokens/s for a Plan on a Machine, training time, and CPU vs GPU.  Pure.

Every figure is a range (low, high) from named efficiency factors, shown to the user as
assumptions.  The formulas:

decode (memory-bandwidth bound), one step of a batch of B sequences:
    t = max(bytes read / (bandwidth × e_bw), FLOPs / (peak × MFU), layers × host time per layer)
    bytes read = active weights (read once, shared by the batch) + B × KV-cache traffic
    (kv_traffic: 1× the cache in place; transformers 3 + 2g×, of which its torch.cat's 2× move at
    KV_CONCAT_BANDWIDTH of the bandwidth)
    aggregate tokens/s = B / t;  per sequence = 1 / t
    under CUDA graphs (vLLM, SGLang) the layers' kernels' latency adds to the bytes' time instead:
    t = bytes time + layers × kernels a layer launches × GRAPH_KERNEL_LATENCY_S (graph_layer_kernels);
    transformers where the host waits for the device inside every layer (FP8Linear's synchronize, the MoE
    block's per-expert torch.where): t = device time + host time, the host time counted in operator calls
    (host_layers: the MoE loop over every expert or the hit ones, by release) plus FP8Linear's Triton launches
prefill (compute bound), per prompt token:
    FLOPs = 2 × active parameters + 2 × 2 × layers × (prompt / 2) × (heads × head_dim)
    (the causal average: a prompt token attends to half the prompt; Kaplan et al. 2020, table 1);
    the matmul part at twice the BF16 peak for FP8 GEMMs on FP8 tensor cores (vLLM/SGLang, cc >= 8.9)
partial offload (llama.cpp -ngl): t = GPU layers' time + CPU layers' time (they run in turn).
expert offload (llama.cpp --n-cpu-moe): t = GPU time (all but the offloaded experts, and the whole
    KV cache) + CPU time (the experts the tokens pick in the offloaded layers, read from RAM);
    prefill adds those experts' PCIe copy per 512-token micro-batch (estimate/expert_offload.py).
vLLM --cpu-offload-gb: t += offloaded bytes / PCIe bandwidth (streamed every forward pass).
training: 6 × P FLOPs per token (Kaplan et al. 2020, C ≈ 6N); × 4/3 with activation
    recomputation (one more forward: Chowdhery et al. 2022, PaLM appendix B, 8N vs 6N);
    LoRA ≈ 4 × P (forward 2P + activation gradients 2P, no weight gradients; Hu et al. 2021).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeGuard

from fitcheck.engines import ENGINES, LLAMA_CPP_UBATCH, shard_degree
from fitcheck.errors import FitcheckError
from fitcheck.estimate.activations import vllm_batch_defaults
from fitcheck.estimate.distributed import DecodeComm, NodeTraffic, decode_comm, overlapped_step, training_traffic
from fitcheck.estimate.expert_offload import LLAMA_CPP_OFFLOAD_MIN_BATCH, cpu_offload_bytes, offloaded_expert_bytes
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.kv_cache import kv_cache_bytes
from fitcheck.estimate.lora import lora_params, parse_targets
from fitcheck.estimate.weights import engine_format, weight_bytes
from fitcheck.machine import Machine, known, nodes_of
from fitcheck.model import spec as S
from fitcheck.model.spec import ModelSpec
from fitcheck.plan import Plan, resolve_inference
from fitcheck.request import Request


@dataclass(frozen=True)
class Efficiency:
    """A named fraction of a hardware peak that real engines reach (low and high ends)."""

    name: str
    low: float
    high: float
    why: str


# ---- efficiency factors (the only tuning knobs; each justified by published measurements) -------
# Decode reads weights at a fraction of peak bandwidth.  llama.cpp eval/tg for 7B/8B
# (XiongjieDai/GPU-Benchmarks-on-LLM-Inference; benchmarks/data/speed_reference.csv): Q4 types read
# at 45–60 % of peak (RTX 4090 149 t/s × 3.8 GB = 0.56 of 1,008 GB/s; M2 Ultra 0.44; M3 Max 0.61),
# F16 at 70–80 % (RTX 4090 0.81, M3 Max 0.84, H100 PCIe 0.56).  CPUs: a 13900K with DDR5-6400 reads
# 7B Q4_0 at 70 GB/s of 102 (0.68); a 6-channel Xeon W 0.46; the M2 Pro CPU cluster 0.4.
DECODE_BANDWIDTH = {
    "gpu": Efficiency("decode bandwidth (GPU)", 0.45, 0.8,
                      "llama.cpp reads 7B/8B weights at 45–60 % of peak on RTX 3090/4090 and M-series, "
                      "vLLM/exllama up to 80 %"),
    "cpu": Efficiency("decode bandwidth (CPU)", 0.4, 0.7,
                      "llama.cpp on a 13900K (DDR5-6400) reads 7B Q4_0 at ~70 GB/s of 102 GB/s; "
                      "Xeon and Apple CPU clusters reach 40–50 % of rated bandwidth"),
}
# Prefill runs large matmuls.  llama.cpp pp (7B F16, XiongjieDai/GPU-Benchmarks-on-LLM-Inference):
# RTX 4090 7,245 t/s × 13.5 GFLOP = 98 TFLOP/s of 165 (0.59); M3 Max 0.73; M2 Ultra 0.68; A100 only
# 0.22 (llama.cpp's CUDA kernels then).  CPUs: 0.2–0.5 (llamafile tinyBLAS, J. Tunney 2024,
# "LLaMA Now Goes Faster on CPUs").
PREFILL_MFU = {
    "gpu": Efficiency("prefill MFU (GPU)", 0.25, 0.7, "llama.cpp prompt processing reaches 22–73 % of the 16-bit "
                                                      "peak on A100, RTX 4090 and M-series GPUs"),
    "cpu": Efficiency("prefill MFU (CPU)", 0.2, 0.5, "llama.cpp/llamafile matmuls reach 20–50 % of CPU peak"),
}
# transformers' concatenation of the KV cache (DynamicCache.update, kv_traffic) runs at a fraction of the decode
# bandwidth: PyTorch's torch.cat took vector loads only for 4- and 8-byte types (pytorch/pytorch#102815) until
# pytorch/pytorch#150233 (2025) added 8-byte loads for bf16/fp16, so a bf16 cat moves one 2-byte element per load and
# per index computation.  #150233's own table times the same cat (same shapes, the PR author's GPU) in fp32 with
# vector loads and in bf16 without: at B = 1,000 / 10,000 / 20,000, fp32 0.1336 / 1.3268 / 2.7445 ms for twice the
# bytes bf16 moves in 0.1406 / 1.3038 / 2.6683 ms, so the bf16 cat moves bytes at (1 / 0.1406) / (2 / 0.1336) = 0.475
# to 0.514 of the vectorised rate.  Unitless: a factor on DECODE_BANDWIDTH for the concatenation's bytes (the slow
# end takes 0.475).  repeat_kv's copy is not slowed so: a published profile of Qwen2.5-7B decoding under transformers
# (sdpa, a GA102 card at 711 GB/s measured; the README of the profiling step that github.com/lgoyal6/winnow
# continues, "Result 2", batch 64 at 4,096 tokens) reads repeat_kv's aten::copy_ (elementwise_kernel<128,4>) at
# 581 GB/s, 82 % of the measured peak, and the attention after it at 96 %; so they count at DECODE_BANDWIDTH.
KV_CONCAT_BANDWIDTH = Efficiency("KV-cache torch.cat (transformers), share of the decode bandwidth", 0.475, 0.514,
                                 "torch.cat moves 2-byte elements without vector loads before PyTorch pull request "
                                 "#150233, whose timings put it at 0.48–0.51 of the vectorised byte rate")

# Training MFU: PaLM 46 % (Chowdhery et al. 2022), Megatron-LM 52 % of A100 peak (Narayanan et al.
# 2021); single-GPU Hugging Face fine-tuning is lower (30–40 %).  CPUs: 10–30 %.
TRAINING_MFU = {
    "gpu": Efficiency("training MFU (GPU)", 0.3, 0.5, "PaLM 46 %, Megatron-LM 52 %, Trainer fine-tuning 30–40 %"),
    "cpu": Efficiency("training MFU (CPU)", 0.1, 0.3, "CPU training runs far below peak"),
}
# Host time per layer per decode step (kernel launches, Python).  The accelerator runs while the
# host enqueues, so a step takes max(device time, host time).  transformers (eager PyTorch, batch 1)
# is launch-bound: the Qwen2.5 speed benchmark on A100 decodes 0.5B (24 layers, weights read in
# 0.5 ms) at 47 tok/s in bf16 and 51 tok/s with GPTQ-Int4 (ExLlamaV2 kernels): 0.8–0.9 ms per
# layer; AWQ and 8-bit GPTQ kernels take 1.1–1.2 ms per layer (37 and 35 tok/s).  vLLM replays
# CUDA graphs and llama.cpp builds one graph per step: microseconds per layer.
HOST_OVERHEAD_PER_LAYER_S = {
    "transformers": Efficiency("host time per layer (transformers)", 0.7e-3, 1.05e-3,
                               "eager PyTorch at batch 1 is bound by kernel launches: Qwen2.5-0.5B in bf16 or "
                               "GPTQ-Int4 on A100 spends 0.8–0.9 ms per layer per token"),
    "transformers-slow-kernels": Efficiency("host time per layer (transformers, AWQ/8-bit/bitsandbytes)", 1.0e-3,
                                            1.35e-3, "AWQ and GPTQ-Int8 kernels: Qwen2.5-0.5B on A100 spends "
                                            "1.1–1.2 ms per layer per token"),
    "vllm": Efficiency("host time per layer (vLLM)", 5e-6, 20e-6, "CUDA graphs replay a whole step"),
    "sglang": Efficiency("host time per layer (SGLang)", 5e-6, 20e-6, "CUDA graphs replay a whole step"),
    "llama.cpp": Efficiency("host time per layer (llama.cpp)", 20e-6, 60e-6,
                            "one ggml graph per step; a 1B Q4_K_M (22 layers) decodes at 762 tok/s on an RTX 4090 "
                            "(geerlingguy/ai-benchmarks #43): ~60 µs per layer"),
}
_SLOW_KERNEL_FAMILIES = ("awq", "bnb")
# A decoder layer under CUDA graphs (vLLM, SGLang) at decode batch sizes is bound by its kernels' latency as well as
# by the bytes they read: router, top-k, norms, rotary, the attention kernel and the activations each cost a few µs
# of GPU time whatever they read, and the graph runs them one after the other, after or before the weight-reading
# GEMMs: the step is the bytes' time plus the kernels'.  Dense layers launch the same kinds of kernels (the attention
# block and a dense MLP below), so they pay it too; a dense model's step is its bytes' time plus its layers' kernels.
# What a layer launches (vLLM decode, CUDA graph; the GEMMs' weight reads are counted in the bandwidth term):
#   attention, GQA (llama.py / qwen3_moe.py / mixtral.py / gpt_oss.py): fused add+RMSNorm, QKV GEMM, rotary,
#     KV-cache write (reshape_and_cache_flash), attention, o_proj = 6; per-head q/k RMSNorm (Qwen3) + 2;
#   attention, MLA (deepseek_v2.py DeepseekV2MLAAttention): fused add+RMSNorm, fused_qkv_a_proj, q_a_layernorm,
#     kv_a_layernorm, q_b_proj, split/copy, rotary, W_UK bmm, concat_and_cache_mla, FlashMLA metadata + decode +
#     combine, W_UV bmm, o_proj = 14;
#   dense MLP: fused add+RMSNorm, gate_up GEMM, SiluAndMul, down GEMM = 4;
#   MoE block (fused_moe/fused_moe.py): fused add+RMSNorm, router GEMM, top-k, moe_align_block_size, w13 grouped
#     GEMM, activation, w2 grouped GEMM, moe_sum = 8, the top-k one fused kernel (topk_softmax) for softmax
#     routers, about 8 torch ops for DeepSeek's grouped top-k (fused_moe.grouped_topk: sigmoid, + correction bias,
#     group scores, topk, mask, topk, gather, renormalise; deepseek_v2.py use_grouped_topk=True);
#     shared experts: gate_up, SiluAndMul, down, add = 4;
#   block-FP8 GEMMs (fp8_utils.py apply_w8a8_block_fp8_linear) quantize their input first: + 1 per GEMM.
# DeepSeek-V3/R1 FP8: 14 + 8 + 7 + 4 + 7 = 40 per MoE layer, 23 per dense one, 39.2 on average over its 61.
# Per kernel, from DeepSeek measured on one node (step less its NVLink all-reduces, 2 × 61 × INTRA_NODE_LATENCY
# ≈ 1.2 ms, less reading its ~4.7 GB of active FP8 weights per GPU on H200: 1.2 ms at 80 %, 2.2 ms at 45 % of
# 4.8 TB/s), over 61 × 39.2 = 2,389 kernels:
#   slow end: SGLang v0.4.1, DeepSeek-V3 FP8 on 8× H200 (TP 8), batch 1: 30.29 tok/s = 33.0 ms per token
#             (github.com/sgl-project/sglang/pull/2643) → (33.0 − 1.2 − 2.2) / 2,389 ≈ 12.4 µs per kernel;
#   fast end: SGLang v0.5.7, DeepSeek-R1-0528 FP8 on 8× H200 (TP 8), concurrency 8: mean TPOT 12.8 ms
#             (github.com/SemiAnalysisAI/InferenceX/issues/870) → (12.8 − 1.2 − 1.2) / 2,389 ≈ 4.4 µs per kernel.
# Lighter layers launch fewer: Qwen3-30B-A3B (bf16) 16, Mixtral and gpt-oss 14, a Qwen3 dense layer 12, a Llama one
# 10 (tests/test_moe_kernel_latency.py checks MoE models against published single-GPU decode figures; the Qwen3
# speed benchmark's SGLang rows on H20, benchmarks/data/qwen3_speed_h20.csv, check dense ones).
GRAPH_KERNEL_LATENCY_S = Efficiency("decode latency per kernel (CUDA graphs)", 4.4e-6, 12.4e-6,
                                    "DeepSeek-V3/R1 on one 8× H200 node: 4.4 µs (SGLang 0.5.7) to 12.4 µs "
                                    "(SGLang 0.4.1) per kernel of its ~39 a layer at small batch")
GQA_ATTENTION_KERNELS = 6
QK_NORM_KERNELS = 2
MLA_ATTENTION_KERNELS = 14
DENSE_MLP_KERNELS = 4
MOE_BLOCK_KERNELS = 8
GROUPED_TOPK_EXTRA_KERNELS = 7   # grouped top-k's ~8 torch ops in place of topk_softmax's one
SHARED_EXPERT_KERNELS = 4
_BLOCK_QUANT_PRECISIONS = ("fp8",)


def graph_layer_kernels(spec: ModelSpec, precision: str) -> float:
    """Kernels one decoder layer launches per decode step under CUDA graphs, averaged over a model's MoE and dense
    layers (the table above GRAPH_KERNEL_LATENCY_S)."""
    quant = 1 if precision in _BLOCK_QUANT_PRECISIONS else 0
    if spec.is_mla:
        attention = MLA_ATTENTION_KERNELS + 3 * quant  # fused_qkv_a_proj, q_b_proj, o_proj
    else:
        attention = GQA_ATTENTION_KERNELS + (QK_NORM_KERNELS if spec.qk_norm else 0) + 2 * quant
    moe = MOE_BLOCK_KERNELS + 2 * quant + (GROUPED_TOPK_EXTRA_KERNELS if spec.is_mla else 0)
    if spec.num_shared_experts:
        moe += SHARED_EXPERT_KERNELS + 2 * quant
    dense = DENSE_MLP_KERNELS + 2 * quant
    layers = max(spec.num_layers, 1)
    moe_layers = spec.num_moe_layers
    return attention + (moe_layers * moe + (layers - moe_layers) * dense) / layers


def graph_layer_latency(spec: ModelSpec, precision: str) -> Efficiency:
    """Seconds per decoder layer per decode step under CUDA graphs: its kernels × GRAPH_KERNEL_LATENCY_S."""
    k = graph_layer_kernels(spec, precision)
    e = GRAPH_KERNEL_LATENCY_S
    kind = "MoE" if spec.is_moe else "dense"
    return Efficiency(f"decode kernel latency per layer ({kind}, CUDA graphs, {k:.0f} kernels)",
                      float(f"{k * e.low:.2g}"), float(f"{k * e.high:.2g}"),
                      f"{k:.0f} kernels a layer at {e.low * 1e6:.1f}–{e.high * 1e6:.1f} µs each ({e.why})")




def under_graphs(spec: ModelSpec | None, engine: str) -> bool:
    """A model on vLLM/SGLang: its decode step is its bytes' time plus its kernels' latency."""
    return spec is not None and engine in CUDA_GRAPH_ENGINES


def moe_under_graphs(spec: ModelSpec | None, engine: str) -> bool:
    """An MoE model on vLLM/SGLang."""
    return under_graphs(spec, engine) and spec is not None and spec.is_moe


CUDA_GRAPH_ENGINES = ("vllm", "sglang")

# ---- transformers (eager PyTorch): host work counted in operator calls ------------------------------------------
# HOST_OVERHEAD_PER_LAYER_S["transformers"] is the host time of one decoder layer.  Where a layer does more host
# work than a plain decoder layer (an MoE block's Python loop over experts, FP8Linear's Triton launches and
# synchronisation), the extra is counted in PyTorch operator calls against the calls the plain layer makes, so it
# scales with the same host.  A Qwen2 decoder layer of transformers 4.46 with flash_attention_2 (the release
# HOST_OVERHEAD_PER_LAYER_S was measured on) makes 42 calls per decode step: two RMSNorms × 8 (to, pow, mean,
# add, rsqrt, mul, to, mul), q/k/v projections 3, rotary on q and k 10 (mul, neg, cat, mul, add each),
# DynamicCache.update's 2 cats, repeat_kv's 2 copies, the flash-attention call, o_proj, 2 residual adds, the MLP 5
# (gate, act, up, mul, down); views not counted (modeling_qwen2.py v4.46.0, Qwen2DecoderLayer /
# Qwen2FlashAttention2 / Qwen2RMSNorm / Qwen2MLP).  Per-head q/k RMSNorm (Qwen3) adds 2 × 8.
# https://github.com/huggingface/transformers/blob/v4.46.0/src/transformers/models/qwen2/modeling_qwen2.py
TRANSFORMERS_LAYER_OPS = 42
TRANSFORMERS_QK_NORM_OPS = 16
TRANSFORMERS_MLP_OPS = 5
# The sparse MoE block's Python loop (MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock
# .forward), per expert it visits: torch.where on the routing mask (a nonzero, and the copy of its size to the
# host: a sync), index the tokens, gate/act/up/mul/down, index the routing weights, scale, index_add_ = 11 calls.
# Before the loop: router linear, softmax, topk, sum, div, to, zeros, one_hot = 8 (in place of the MLP's 5).
# https://github.com/huggingface/transformers/blob/v4.51.3/src/transformers/models/qwen3_moe/modeling_qwen3_moe.py#L252-L289
TRANSFORMERS_EXPERT_VISIT_OPS = 11
TRANSFORMERS_ROUTER_OPS = 8
# From the releases below the loop visits only the experts that got tokens, after finding them: sum, gt, nonzero
# and its size's copy, tolist = 5 calls (`expert_hitted = (expert_mask.sum(dim=(-1, -2)) > 0).nonzero(...)
# .tolist()`, modeling_mixtral.py v4.52.4); before them it visits every expert, tokens or not (`for expert_idx in
# range(self.num_experts)`, v4.51.3; Qwen3-MoE kept it through v4.52.4).  Checked in the wheels of 4.51.3, 4.52.4,
# 4.53.3, 4.54.1, 4.55.4: dbrx, deepseek_v3, dots1, glm4_moe, jamba, olmoe and phimoe still visit every expert in
# 4.55.4 (4.56–4.57 not checked); MiniMax (4.53), Ernie 4.5 MoE (4.54) and gpt-oss (4.55) arrived with the hit loop.
TRANSFORMERS_HIT_SCAN_OPS = 5
EXPERT_HIT_LOOP_SINCE = {"mixtral": (4, 52), "qwen2_moe": (4, 52), "qwen3_moe": (4, 53), "minimax": (4, 53),
                         "ernie4_5_moe": (4, 54), "gpt_oss": (4, 55)}
# From 5.0 the experts run through `grouped_mm_experts_forward` by default (integrations/moe.py,
# get_correct_experts_implementation: "grouped_mm" unless asked otherwise; torch >= 2.9): no loop; its calls: arange,
# index, 2 argsorts, 3 gathers, float, histc, cumsum, 2 grouped_mm, act and mul, mul, index, sum = 17, and a router
# of 6 (linear, softmax, topk, sum, div, to), 23 in place of the MLP's 5.
# https://github.com/huggingface/transformers/blob/v5.0.0/src/transformers/integrations/moe.py
GROUPED_MM_EXPERTS_SINCE = (5, 0)
TRANSFORMERS_GROUPED_MOE_OPS = 23


def transformers_layer_ops(spec: ModelSpec) -> int:
    """PyTorch operator calls of one plain decoder layer of this architecture at decode (TRANSFORMERS_LAYER_OPS)."""
    return TRANSFORMERS_LAYER_OPS + (TRANSFORMERS_QK_NORM_OPS if spec.qk_norm else 0)


def transformers_expert_loop(spec: ModelSpec, transformers_version: str | None) -> str:
    """How transformers runs an MoE block's experts: 'every' expert in a Python loop, only the 'hit' ones, or
    'grouped' (grouped_mm, no loop).  A release not given is a current one (5.x: grouped)."""
    from fitcheck.plan import parse_transformers_version

    if transformers_version is None:
        return "grouped"
    v = parse_transformers_version(transformers_version)
    if v >= GROUPED_MM_EXPERTS_SINCE:
        return "grouped"
    since = EXPERT_HIT_LOOP_SINCE.get(spec.architecture)
    return "hit" if since is not None and v >= since else "every"


def expert_visits(spec: ModelSpec, batch: int, loop: str) -> float:
    """Experts one MoE layer's Python loop visits per decode step of `batch` tokens (expected distinct hit ones)."""
    if loop == "every":
        return float(spec.num_experts)
    if loop == "hit":
        return spec.num_experts * experts_touched_fraction(spec, batch)
    return 0.0


# transformers' fine-grained FP8 linear (integrations/finegrained_fp8.py FP8Linear.forward, v4.51.3) allocates the
# quantized input and its scales (act_quant: empty_like, new_empty) and the output (new_empty), launches two
# Triton kernels from Python (act_quant_kernel, _w8a8_block_fp8_matmul), then calls `torch.cuda.synchronize()`:
# every linear waits for the GPU, so the host cannot enqueue ahead and a decode step takes the device time plus the
# host time, not the larger of the two.  Against a plain linear's one call: 3 more calls (4 less the matmul) and
# two Triton launches, and the two kernels' latency the host now waits for.  An MoE expert the loop visits without
# tokens still runs its three FP8Linears' host path (zero-size grids launch nothing, the synchronize still runs).
# vLLM (CUTLASS/Triton FP8 GEMMs in CUDA graphs) and llama.cpp have no such wait.
# https://github.com/huggingface/transformers/blob/v4.51.3/src/transformers/integrations/finegrained_fp8.py#L331-L353
SERIAL_HOST_PRECISIONS = {"transformers": frozenset({"fp8"})}
FP8_LINEAR_EXTRA_OPS = 3
FP8_LINEAR_TRITON_LAUNCHES = 2
# A Triton kernel's launch from Python (JITFunction.run: binding the arguments, the cache lookup, the C launcher):
# tritonbench's launch_latency benchmark times a no-op kernel at 5.7 µs with no arguments and 13.2 µs with 19
# (Triton 3.5, github.com/meta-pytorch/tritonbench/pull/669); _w8a8_block_fp8_matmul takes 21 arguments.
TRITON_LAUNCH_S = Efficiency("Triton kernel launch from Python", 5.7e-6, 13.2e-6,
                             "tritonbench launch_latency: a no-op Triton 3.5 kernel with 0 to 19 arguments")
ATTENTION_LINEARS = 4   # q, k, v, o
MLP_LINEARS = 3         # gate, up, down


def host_serialises(engine: str, precision: str, spec: ModelSpec | None = None,
                    transformers_version: str | None = None) -> bool:
    """Whether the host waits for the device inside every layer: transformers' FP8Linear (torch.cuda.synchronize)
    and its MoE loops (torch.where's nonzero copies its size to the host, once per expert visited)."""
    if precision in SERIAL_HOST_PRECISIONS.get(engine, frozenset()):
        return True
    return (engine == "transformers" and spec is not None and spec.is_moe
            and transformers_expert_loop(spec, transformers_version) != "grouped")


def host_layers(spec: ModelSpec, engine: str, batch: int, transformers_version: str | None = None) -> float:
    """Decode-step host work in units of one decoder layer: the layers, plus transformers' MoE blocks (their Python
    loop over the experts they visit, or the grouped-mm path), counted in operator calls."""
    layers = float(spec.num_layers)
    if engine == "transformers" and spec.is_moe:
        loop = transformers_expert_loop(spec, transformers_version)
        block: float
        if loop == "grouped":
            block = TRANSFORMERS_GROUPED_MOE_OPS
        else:
            block = (TRANSFORMERS_ROUTER_OPS + (TRANSFORMERS_HIT_SCAN_OPS if loop == "hit" else 0)
                     + expert_visits(spec, batch, loop) * TRANSFORMERS_EXPERT_VISIT_OPS)
        layers += spec.num_moe_layers * (block - TRANSFORMERS_MLP_OPS) / transformers_layer_ops(spec)
    return layers


def fp8_linear_calls(spec: ModelSpec, batch: int, transformers_version: str | None) -> tuple[float, float]:
    """(FP8Linear calls per decode step, of which those with tokens), transformers' fine-grained FP8."""
    layers = spec.num_layers
    moe_layers = spec.num_moe_layers if spec.is_moe else 0
    calls = float(layers * ATTENTION_LINEARS + (layers - moe_layers) * MLP_LINEARS)
    busy = calls
    if moe_layers:
        loop = transformers_expert_loop(spec, transformers_version)
        hit = spec.num_experts * experts_touched_fraction(spec, batch)
        visited = expert_visits(spec, batch, loop) if loop != "grouped" else 0.0
        calls += moe_layers * MLP_LINEARS * (visited + spec.num_shared_experts)
        busy += moe_layers * MLP_LINEARS * (min(hit, visited) + spec.num_shared_experts)
    return calls, busy


def fp8_linear_host(spec: ModelSpec, batch: int, transformers_version: str | None,
                    layer: Efficiency) -> Efficiency:
    """Seconds per decode step FP8Linear adds on the host, or waits for on the device, beyond plain linears:
    its extra calls (at the layer's host time per call), two Triton launches each, and the two kernels' latency
    for the calls that have tokens.  `layer` is the host time of one decoder layer."""
    calls, busy = fp8_linear_calls(spec, batch, transformers_version)
    ops = transformers_layer_ops(spec)

    def one(end: str) -> float:
        pick = (lambda e: e.low) if end == "low" else (lambda e: e.high)
        per_call = FP8_LINEAR_EXTRA_OPS * pick(layer) / ops + FP8_LINEAR_TRITON_LAUNCHES * pick(TRITON_LAUNCH_S)
        return calls * per_call + busy * FP8_LINEAR_TRITON_LAUNCHES * pick(GRAPH_KERNEL_LATENCY_S)

    return Efficiency("FP8Linear host work and waits per decode step, s (transformers)", one("low"), one("high"),
                      f"{calls:,.0f} FP8Linear calls per token: {FP8_LINEAR_EXTRA_OPS} more calls, "
                      f"{FP8_LINEAR_TRITON_LAUNCHES} Triton launches and a synchronize each")


def host_overhead(engine: str, precision: str, spec: ModelSpec | None = None) -> Efficiency:
    """The host-time factor for an engine and the kernels its weights format uses (a model under CUDA graphs: its
    layers' kernel latency, graph_layer_latency)."""
    if spec is not None and under_graphs(spec, engine):
        return graph_layer_latency(spec, precision)
    if engine == "transformers" and (weight_format(precision).family in _SLOW_KERNEL_FAMILIES
                                     or precision == "gptq-int8"):
        return HOST_OVERHEAD_PER_LAYER_S["transformers-slow-kernels"]
    return HOST_OVERHEAD_PER_LAYER_S[engine]


# A CPU decodes fast enough for one reader at this rate (people read ~5–10 tokens/s).
CPU_ENOUGH_TOKENS_PER_S = 20.0
GPU_BETTER_RATIO = 1.5  # below this speed-up a GPU "adds little"


@dataclass(frozen=True)
class Rate:
    """tokens/s from the low to the high end of the efficiencies."""

    low: float
    high: float

    @property
    def mid(self) -> float:
        """The geometric middle, used to rank and to compare with measurements."""
        return math.sqrt(self.low * self.high)

    def scaled(self, factor: float) -> Rate:
        return Rate(self.low * factor, self.high * factor)


@dataclass(frozen=True)
class SpeedEstimate:
    """Speed of one plan on one machine."""

    device: str                    # 'gpu', 'cpu' or 'offload'
    engine: str
    precision: str
    batch: int
    context: int                   # the decode position the estimate is for
    decode: Rate | None            # aggregate tokens/s over the batch
    per_sequence: Rate | None      # tokens/s each sequence sees
    prefill: Rate | None           # prompt tokens/s (one sequence)
    weight_bytes_per_step: int     # weights read per decode step
    kv_bytes_per_step: int         # KV-cache traffic per decode step, whole batch
    bandwidth_bytes_per_s: float | None
    bound: str                     # what limits decode: 'memory bandwidth', 'host overhead', 'compute'
    assumptions: tuple[Efficiency, ...] = ()
    unknown: str = ""              # why decode/prefill could not be estimated ('' when they were)
    comm: DecodeComm | None = None  # what a decode step waits for on NVLink and between nodes (vLLM TP/PP)
    ram_bandwidth_source: str = ""  # where the CPU's RAM bandwidth came from, when the CPU takes part
    kv_copy_bytes_per_step: int = 0  # of kv_bytes_per_step, what transformers' cache copies move (kv_traffic)
    kv_copy_share: float = 0.0     # share of the slow end's step those copies cost, against reading the cache in place


@dataclass(frozen=True)
class DeviceAdvice:
    """CPU or GPU for this configuration on this machine, and why."""

    choice: str | None             # 'gpu', 'cpu', or None (neither fits / cannot tell)
    reason: str
    gpu: SpeedEstimate | None      # the plan on the GPU (None: no GPU)
    cpu: SpeedEstimate | None      # the plan on the CPU with llama.cpp
    gpu_fits: bool | None
    cpu_fits: bool | None


# ---- bytes and FLOPs ---------------------------------------------------------------------------
def experts_touched_fraction(spec: ModelSpec, batch: int) -> float:
    """Share of routed experts one decode step reads: k/E for one token; for B tokens routed
    independently and uniformly, 1 − (1 − k/E)^B (each expert is skipped by all B with that chance)."""
    if not spec.is_moe:
        return 1.0
    p = spec.experts_per_token / spec.num_experts
    return 1.0 - (1.0 - p) ** max(batch, 1)


def active_weight_bytes(spec: ModelSpec, precision: str, batch: int = 1, engine: str = "") -> int:
    """Weight bytes one decode step reads, in the plan's storage format.

    Routed experts count by :func:`experts_touched_fraction`; an untied input embedding is not
    read (one row per token is looked up), a tied one is read in full as the output head.
    """
    wb = weight_bytes(spec, engine_format(spec, weight_format(precision), engine))
    share = experts_touched_fraction(spec, batch)
    total = 0.0
    for kind, b in wb.by_group:
        if kind == S.EMBED and not spec.tie_word_embeddings:
            continue
        total += b * share if kind == S.EXPERTS else b
    return int(total)


def ep_weight_bytes(spec: ModelSpec, plan: Plan) -> int:
    """Weight bytes the busiest GPU reads per decode step with expert parallel: its rank's whole attention,
    shared experts, dense MLPs and head, and its share of the routed experts the step touches."""
    wb = weight_bytes(spec, weight_format(plan.precision))
    share = experts_touched_fraction(spec, plan.batch)
    total = 0.0
    for kind, b in wb.by_group:
        if kind == S.EMBED and not spec.tie_word_embeddings:
            continue
        if kind == S.EXPERTS:
            total += b * share / plan.world
        else:
            total += b
    return int(total)


# ---- how many times a decode step moves the KV cache -----------------------------------------
# transformers 4.46 (the Qwen2.5 speed benchmark's release), per layer and decoded token:
#   DynamicCache.update concatenates the layer's cache with the new token, so torch.cat reads the whole cache and
#     writes it again (2×): https://github.com/huggingface/transformers/blob/v4.46.0/src/transformers/cache_utils.py#L447-L448
#     (still so in 4.54+: DynamicLayer.update, `self.keys = torch.cat([self.keys, key_states], dim=-2)`; the legacy
#     tuple cache of older releases concatenates the same way);
#   repeat_kv materialises K and V for every query head before eager, sdpa and flash_attention_2 alike (reads the
#     cache 1×, writes g× with g = heads / KV heads), and the attention kernel reads that copy (g×):
#     https://github.com/huggingface/transformers/blob/v4.46.0/src/transformers/models/qwen2/modeling_qwen2.py#L399-L403
#   copies: 2 + 1 + g times the cache; attention reads: g times; 3 + 2g in all.
# vLLM (paged attention / FlashAttention / FlashInfer on the paged cache, grouped-query aware), SGLang and llama.cpp
# (its flash-attention kernels, or mul_mat over the cache without -fa) read the cache in place, each KV head once:
# they pay 1× the cache per token plus the new token's write.
# The attention kernel is not what slows transformers down: flash-attn 2.5.8 (the benchmark's) splits the KV length
# in flash_attn_func whenever batch × heads fills less than 80 % of twice the SMs
# (https://github.com/Dao-AILab/flash-attention/blob/9a11f440d3a34f618b4ba814c825b109c6d7e8f5/csrc/flash_attn/flash_api.cpp#L235-L296,
# called from mha_fwd at L452): Qwen2.5-7B's 28 repeated heads over 31k positions (248 blocks of 128) get 7 splits,
# 196 CTAs for an A100's 2 × 108 slots, so it streams at the decode bandwidth like the weights.
# The concatenation does not: see KV_CONCAT_BANDWIDTH.


@dataclass(frozen=True)
class KVTraffic:
    """How many times one decode step moves the KV cache: read in place (or its copy) by the attention kernel, read
    and written by the concatenation (torch.cat), read and written by the grouped-query expansion (repeat_kv)."""

    attention_reads: int
    concatenation: int = 0
    expansion: int = 0

    @property
    def copies(self) -> int:
        return self.concatenation + self.expansion

    @property
    def total(self) -> int:
        return self.attention_reads + self.copies


def kv_traffic(spec: ModelSpec, engine: str) -> KVTraffic:
    """transformers: attention reads g×, torch.cat 2×, repeat_kv 1 + g×; every other engine 1×, no copies.
    g = heads / KV heads (1 for MLA's latent cache)."""
    if engine != "transformers":
        return KVTraffic(1)
    groups = 1 if spec.is_mla else max(spec.num_attention_heads // max(spec.num_kv_heads, 1), 1)
    if groups == 1:  # repeat_kv returns its input when n_rep == 1
        return KVTraffic(1, concatenation=2)
    return KVTraffic(groups, concatenation=2, expansion=1 + groups)


def kv_traffic_multiplier(spec: ModelSpec, engine: str) -> int:
    """How many times a decode step moves the KV cache (3 + 2g for transformers with grouped-query heads, else 1)."""
    return kv_traffic(spec, engine).total


def kv_bytes_per_sequence(spec: ModelSpec, plan: Plan, context: int) -> int:
    # the cache a decode step reads (sliding-window layers: what the engine keeps once generation starts)
    return kv_cache_bytes(spec, tokens=context, sequences=1, kv_dtype=plan.kv_dtype, engine=plan.engine,
                          transformers_version=plan.transformers_version)


def matmul_params(spec: ModelSpec) -> int:
    """Active parameters that take part in matmuls (the embedding lookup does not)."""
    embed = spec.vocab_size * spec.hidden_size
    return spec.active_params - (0 if spec.tie_word_embeddings else embed)


def attention_flops_per_token(spec: ModelSpec, positions: float) -> float:
    """QKᵀ and AV for one token attending to `positions` earlier tokens: 2 × 2 × layers × n × d_attn."""
    d_attn = spec.num_attention_heads * (spec.qk_nope_head_dim + spec.qk_rope_head_dim if spec.is_mla
                                         else spec.attn_head_dim)
    return 4.0 * spec.num_attention_layers * positions * d_attn


def prefill_flops_per_token(spec: ModelSpec, prompt_tokens: int) -> float:
    """2 × active parameters + causal attention averaged over the prompt (half the prompt)."""
    return 2.0 * matmul_params(spec) + attention_flops_per_token(spec, prompt_tokens / 2)


# ---- devices -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Device:
    bandwidth: float | None      # bytes/s the device's share of the model is read at
    peak_flops: float | None     # FLOP/s
    kind: str                    # 'gpu' or 'cpu'
    why_unknown: str = ""


def _gpu_device(machine: Machine, plan: Plan) -> _Device:
    if not machine.gpus:
        return _Device(None, None, "gpu", "no GPU")
    g = machine.gpus[0]
    # vLLM tensor parallel reads each GPU's shard at the same time; transformers (device_map) and
    # llama.cpp (layer split) run the GPUs one after another, so one GPU's bandwidth applies.
    # SGLang's tensor parallel spans every node's GPUs; vLLM's pipeline stages (one per node) run in turn: a
    # decode step of one batch passes through them one after another, each idle while the others work (the
    # pipeline's bubble, (P−1)/P of the step at batch sizes below P micro-batches), so one stage's GPUs read; with
    # expert parallel each GPU reads its own weights (ep_weight_bytes: the busiest GPU's).
    n = max(plan.gpus, 1) if ENGINES[plan.engine].splits == "tensor" else 1
    if plan.engine == "sglang":
        n = plan.world
    if plan.expert_parallel:
        n = 1
    bw = g.bandwidth_bytes_per_s * n if _positive(g.bandwidth_bytes_per_s) else None
    peak = g.bf16_tflops * 1e12 * n if _positive(g.bf16_tflops) else None
    why = "" if bw else (f"GPU memory bandwidth {g.bandwidth_bytes_per_s}" if not known(g.bandwidth_bytes_per_s)
                         else "GPU memory bandwidth is 0 (not a usable figure)")
    return _Device(bw, peak, "gpu", why)


def _positive(value: object) -> TypeGuard[float]:
    """A known, positive, finite rate (a profile's 0 bandwidth or TFLOPS makes speed unknown, not a division by 0)."""
    return known(value) and isinstance(value, (int, float)) and 0 < value < float("inf")


def _cpu_device(machine: Machine) -> _Device:
    bw = machine.memory.bandwidth_bytes_per_s
    peak = machine.cpu.bf16_tflops
    why = "" if _positive(bw) else ("RAM bandwidth is 0 (not a usable figure)" if known(bw)
                                    else "RAM bandwidth not known; measure it with `fitcheck probe --bench`")
    return _Device(bw if _positive(bw) else None, peak * 1e12 if _positive(peak) else None, "cpu", why)


def _step_time(weight_b: float, kv_b: float, flops: float, layers: float, dev: _Device, host: Efficiency,
               end: str, serial: bool = False, kv_concat_b: float = 0.0,
               extra_host: Efficiency | None = None) -> tuple[float, str]:
    """Seconds for one decode step on one device at the 'low' or 'high' end, and what bounds it.

    `kv_concat_b`: bytes transformers' torch.cat of the KV cache moves (kv_traffic), at KV_CONCAT_BANDWIDTH of the
    decode bandwidth on a GPU (PyTorch's cat kernel without vector loads for 2-byte types; on a CPU plain bytes).

    `serial`: the host waits for the device inside every layer (host_serialises), or the "host" time is the
    GPU's own kernel latency (a model under CUDA graphs, graph_layer_latency): the two add.

    `extra_host`: seconds of host work (and waits) the step adds beyond `layers` × `host` (fp8_linear_host)."""
    pick = (lambda e: e.low) if end == "low" else (lambda e: e.high)
    e_bw = pick(DECODE_BANDWIDTH[dev.kind])
    concat_share = pick(KV_CONCAT_BANDWIDTH) if dev.kind == "gpu" else 1.0
    mem = (weight_b + kv_b + kv_concat_b / concat_share) / (dev.bandwidth * e_bw)
    comp = flops / (dev.peak_flops * pick(PREFILL_MFU[dev.kind])) if dev.peak_flops else 0.0
    # the slow end takes the high overhead, the fast end the low one
    over = layers * (host.high if end == "low" else host.low)
    if extra_host is not None:
        over += extra_host.high if end == "low" else extra_host.low
    bound = "compute" if comp > mem else "memory bandwidth"
    if over > max(mem, comp):
        bound = "host overhead"
    if serial and dev.kind == "gpu":
        return max(mem, comp) + over, bound
    return max(mem, comp, over), bound


def estimate_speed(spec: ModelSpec, plan: Plan, machine: Machine, *, context: int | None = None) -> SpeedEstimate:
    """Decode and prefill tokens/s of `plan` on `machine`; decode at `context` tokens (default: the
    plan's full context, the slowest point of a generation)."""
    ctx = plan.context if context is None else context
    B = plan.batch
    L = spec.num_layers
    weights = active_weight_bytes(spec, plan.precision, B, plan.engine)
    traffic = kv_traffic(spec, plan.engine)
    kv_once = kv_bytes_per_sequence(spec, plan, ctx)
    sequences = -(-B // plan.world) if plan.expert_parallel else B  # expert parallel: the busiest rank's sequences
    kv = kv_once * traffic.total * sequences        # bytes the step moves through the KV cache
    kv_copied = kv_once * traffic.copies * sequences  # of which transformers' copies (torch.cat, repeat_kv)
    kv_concat = kv_once * traffic.concatenation * sequences  # of which torch.cat's (at KV_CONCAT_BANDWIDTH)
    if plan.expert_parallel:
        weights = ep_weight_bytes(spec, plan)
    step_flops = B * (2.0 * matmul_params(spec) + attention_flops_per_token(spec, ctx))
    cpu, gpu = _cpu_device(machine), _gpu_device(machine, plan)
    # (share of the weights and FLOPs, share of the KV cache, device): the parts run in turn.
    parts: list[tuple[float, float, _Device]]
    if plan.device == "cpu":
        parts = [(1.0, 1.0, cpu)]
    elif plan.device == "gpu":
        parts = [(1.0, 1.0, gpu)]
    elif plan.cpu_moe:  # --n-cpu-moe: the CPU reads the picked experts of the offloaded layers, the GPU the rest
        ram = min(ram_weight_bytes_per_step(spec, plan, B) / max(weights, 1), 1.0)
        parts = [(1.0 - ram, 1.0, gpu), (ram, 0.0, cpu)]
    else:  # offload: -ngl layers on the GPU, the rest on the CPU, run in turn
        on_gpu = min(plan.gpu_layers or 0, L) / max(L, 1)
        parts = [(on_gpu, on_gpu, gpu), (1.0 - on_gpu, 1.0 - on_gpu, cpu)]
    parts = [(share, kv_share, dev) for share, kv_share, dev in parts if share > 0]
    assumptions = tuple(dict.fromkeys(
        [DECODE_BANDWIDTH[d.kind] for _, _, d in parts] + [PREFILL_MFU[d.kind] for _, _, d in parts]
        + [host_overhead(plan.engine, plan.precision, spec)]
        + ([fp8_linear_host(spec, B, plan.transformers_version, host_overhead(plan.engine, plan.precision, spec))]
           if plan.engine == "transformers" and host_serialises(plan.engine, plan.precision) else [])
        + ([KV_CONCAT_BANDWIDTH] if kv_concat and any(d.kind == "gpu" for _, _, d in parts) else [])))
    bw = gpu.bandwidth if plan.device == "gpu" else cpu.bandwidth
    ram_source = machine.memory.bandwidth_source if plan.device != "gpu" and cpu.bandwidth else ""
    missing = [d.why_unknown for _, _, d in parts if d.bandwidth is None]
    if missing:
        return SpeedEstimate(plan.device, plan.engine, plan.precision, B, ctx, None, None, None, weights, kv, bw, "unknown",
                             assumptions, "; ".join(dict.fromkeys(missing)), ram_bandwidth_source=ram_source)
    host_units = host_layers(spec, plan.engine, B, plan.transformers_version)
    host = host_overhead(plan.engine, plan.precision, spec)
    serial = (host_serialises(plan.engine, plan.precision, spec, plan.transformers_version)
              or under_graphs(spec, plan.engine))
    fp8_host = (fp8_linear_host(spec, B, plan.transformers_version, host)
                if plan.engine == "transformers" and host_serialises(plan.engine, plan.precision) else None)

    def step_times(kv_read: float, kv_cat: float) -> tuple[dict[str, float], list[str]]:
        times, bounds = {}, []
        for end in ("low", "high"):
            total = 0.0
            for share, kv_share, dev in parts:
                extra = (Efficiency(fp8_host.name, fp8_host.low * share, fp8_host.high * share, fp8_host.why)
                         if fp8_host is not None else None)
                t, bound = _step_time(weights * share, kv_read * kv_share, step_flops * share, host_units * share,
                                      dev, host, end, serial=serial, kv_concat_b=kv_cat * kv_share,
                                      extra_host=extra)
                total += t
                bounds.append(bound)
            times[end] = total + _streamed_seconds(plan, machine)
        return times, bounds

    times, bounds = step_times(kv - kv_concat, kv_concat)
    copy_cost = 0.0
    if kv_copied:
        # what the copies add to the slow end's step, against the cache read once in place (vLLM, llama.cpp)
        in_place, _ = step_times(kv_once * sequences, 0.0)
        copy_cost = 1.0 - in_place["low"] / times["low"]
    comm = decode_comm(spec, plan, machine) if plan.device == "gpu" else None
    if comm is not None:
        # A decode step waits for its all-reduces, all-to-alls, pipeline sends and RPC round trips in turn: at
        # decode batch sizes they sit on the critical path between layers.  The slow end waits the longer latency.
        times["low"] += comm.seconds[1]
        times["high"] += comm.seconds[0]
    decode = Rate(B / times["low"], B / times["high"])
    prefill = _prefill_rate(spec, plan, parts, machine)
    # The most frequent limit; a tie goes to the one met first (never to set order, which hashing decides).
    bound = max(dict.fromkeys(bounds), key=bounds.count)
    if bound == "host overhead" and under_graphs(spec, plan.engine):
        bound = "kernel latency"
    if _streamed_seconds(plan, machine) > times["high"] / 2:
        bound = "PCIe"  # the weights streamed from RAM take most of the step
    return SpeedEstimate(plan.device, plan.engine, plan.precision, B, ctx, decode, decode.scaled(1 / B), prefill, weights, kv, bw,
                         bound, assumptions, comm=comm, ram_bandwidth_source=ram_source,
                         kv_copy_bytes_per_step=kv_copied, kv_copy_share=copy_cost)


# FP8 tensor cores run twice the dense BF16 rate on NVIDIA GPUs of compute capability 8.9 and later (datasheets:
# H100 SXM 1,979 vs 989 TFLOP/s, L40S 733 vs 362, H20 296 vs 148; RTX 4090 330 vs 165 with FP32 accumulation).
# vLLM and SGLang run an FP8 checkpoint's linears as W8A8 FP8 GEMMs there (the input quantized per token group,
# sglang/srt/layers/quantization/fp8_utils.py apply_w8a8_block_fp8_linear; vllm cutlass_scaled_mm), so a prompt's
# matmul FLOPs go at that rate; attention (BF16 KV) does not.  Below 8.9 (A100) they fall back to weight-only FP8
# (Marlin): BF16 GEMMs.  transformers' FP8Linear runs its own Triton kernel (also tl.dot on FP8 inputs) but is
# bound by its launches and synchronisation at decode; its prefill is not changed here.
FP8_GEMM_SPEEDUP = 2.0
FP8_GEMM_ENGINES = ("vllm", "sglang")


def fp8_gemms(plan: Plan, machine: Machine) -> bool:
    """Whether the plan's linears run as FP8 GEMMs on FP8 tensor cores (FP8_GEMM_SPEEDUP)."""
    if plan.engine not in FP8_GEMM_ENGINES or weight_format(plan.precision).family != "fp8" or not machine.gpus:
        return False
    cc = machine.gpus[0].compute_capability
    try:
        return known(cc) and float(str(cc)) >= 8.9
    except ValueError:
        return False


def _prefill_rate(spec: ModelSpec, plan: Plan, parts, machine: Machine) -> Rate | None:
    flops = prefill_flops_per_token(spec, plan.prompt_tokens)
    gpu_flops = flops
    if fp8_gemms(plan, machine):
        gpu_flops = flops - 2.0 * matmul_params(spec) * (1 - 1 / FP8_GEMM_SPEEDUP)
    copied = 0.0  # seconds per prompt token spent moving weights from RAM to the GPU
    if plan.cpu_moe and plan.prompt_tokens >= LLAMA_CPP_OFFLOAD_MIN_BATCH and machine.gpus:
        # Prompt micro-batches of >= 32 tokens run the offloaded experts on the GPU: the experts the
        # micro-batch routes to are copied over PCIe once per micro-batch (expert_offload.py).
        ubatch = min(plan.prompt_tokens, LLAMA_CPP_UBATCH)
        moved = offloaded_expert_bytes(spec, plan.precision, plan.cpu_moe) * experts_touched_fraction(spec, ubatch)
        copied = moved / (pcie_bytes_per_s(machine) * ubatch)
        parts = [(1.0, 1.0, dev) for _, _, dev in parts if dev.kind == "gpu"]
    elif plan.cpu_offload_gb and machine.gpus:
        # vLLM's chunked prefill runs max_num_batched_tokens per step, the weights streamed once per step
        chunk = min(plan.prompt_tokens, vllm_batch_defaults(plan.gpu_total_bytes, plan.compute_capability)[0])
        copied = cpu_offload_bytes(plan.cpu_offload_gb) / (pcie_bytes_per_s(machine) * chunk)
    ends = []
    for pick in (lambda e: e.low, lambda e: e.high):
        seconds = copied
        for share, _, dev in parts:
            if not dev.peak_flops:
                return None
            work = gpu_flops if dev.kind == "gpu" else flops
            seconds += work * share / (dev.peak_flops * pick(PREFILL_MFU[dev.kind]))
        ends.append(1.0 / seconds)
    return Rate(*ends)


def ram_weight_bytes_per_step(spec: ModelSpec, plan: Plan, batch: int = 1) -> int:
    """Weight bytes a decode step reads from RAM with --n-cpu-moe: the experts the batch's tokens
    pick (experts_touched_fraction) in the layers whose experts stay in RAM."""
    if not plan.cpu_moe:
        return 0
    return int(offloaded_expert_bytes(spec, plan.precision, plan.cpu_moe) * experts_touched_fraction(spec, batch))


def _streamed_seconds(plan: Plan, machine: Machine) -> float:
    """vLLM --cpu-offload-gb: each forward pass moves the offloaded weights over PCIe (each GPU its own)."""
    if not plan.cpu_offload_gb or not machine.gpus:
        return 0.0
    return cpu_offload_bytes(plan.cpu_offload_gb) / pcie_bytes_per_s(machine)


# ---- training ----------------------------------------------------------------------------------
TRAINING_FLOPS_PER_PARAM = {"full": 6.0, "lora": 4.0, "qlora": 4.0}
RECOMPUTE_FLOPS_PER_PARAM = 2.0  # activation checkpointing repeats the forward pass: +2P


def training_flops_per_token(spec: ModelSpec, method: str = "full", gradient_checkpointing: bool = False) -> float:
    """6P (full), 4P (LoRA/QLoRA: no weight gradients), +2P when activations are recomputed.

    With recomputation full training is 8P = 6P × 4/3.  Attention FLOPs are left out (small next
    to 6P below a few thousand tokens of context)."""
    if method not in TRAINING_FLOPS_PER_PARAM:
        raise FitcheckError(f"unknown training method '{method}'", "choose full, lora or qlora")
    per = TRAINING_FLOPS_PER_PARAM[method] + (RECOMPUTE_FLOPS_PER_PARAM if gradient_checkpointing else 0.0)
    return per * matmul_params(spec)


def _training_hardware(machine: Machine, gpus: int, device: str) -> tuple[bool, int, float | None, Efficiency]:
    """(on a GPU, data-parallel devices, 16-bit peak TFLOPS of one or None, the MFU range)."""
    if device == "gpu" and machine.gpus:
        peak = machine.gpus[0].bf16_tflops
        return True, max(min(gpus, len(machine.gpus)), 1), (float(peak) if known(peak) else None), TRAINING_MFU["gpu"]
    peak = machine.cpu.bf16_tflops
    return False, 1, (float(peak) if known(peak) else None), TRAINING_MFU["cpu"]


def training_rate(spec: ModelSpec, machine: Machine, *, method: str = "full", gradient_checkpointing: bool = False,
                  gpus: int = 1, device: str = "gpu") -> Rate | None:
    """Training tokens/s (None when the peak FLOP/s is not known)."""
    _, n, peak, mfu = _training_hardware(machine, gpus, device)
    if peak is None:
        return None
    flops = training_flops_per_token(spec, method, gradient_checkpointing)
    return Rate(peak * 1e12 * n * mfu.low / flops, peak * 1e12 * n * mfu.high / flops)


@dataclass(frozen=True)
class TrainingSpeed:
    """Training throughput of a plan: tokens/s over all its devices and the optimizer step's time."""

    device: str                        # 'gpu' or 'cpu'
    devices: int                       # data-parallel processes
    peak_tflops: float | None          # 16-bit peak of one device (None: unknown)
    flops_per_token: float             # 6P full, 4P adapters, +2P recomputation
    tokens_per_step: int               # effective batch × sequence
    mfu: Efficiency
    rate: Rate | None                  # tokens/s, all devices (offload's PCIe time and the link wait included)
    unknown: str = ""                  # why rate is None
    offload_bytes: int = 0             # host↔GPU bytes one GPU moves per optimizer step (ZeRO-Offload)
    offload_seconds: float = 0.0       # their time over PCIe
    traffic: NodeTraffic | None = None  # what crosses the link between nodes per step (several nodes)
    link_wait: tuple[float, float] | None = None  # seconds of the step spent waiting on that link (in rate)

    @property
    def step_seconds(self) -> tuple[float, float] | None:
        """(fastest, slowest) seconds per optimizer step."""
        return training_seconds(self.tokens_per_step, self.rate) if self.rate else None


# Host↔GPU copies from pinned memory: ~25 GB/s on PCIe 4.0 x16 (31.5 GB/s raw) and ~50 GB/s on
# PCIe 5.0 x16 (the Hopper/Blackwell hosts, compute capability >= 9.0); CUDA samples bandwidthTest,
# NVIDIA nvbandwidth (github.com/NVIDIA/nvbandwidth) host_to_device_memcpy_ce figures.
PCIE_BYTES_PER_S = {4: 25e9, 5: 50e9}


def pcie_bytes_per_s(machine: Machine) -> float:
    cc = None
    if machine.gpus and known(machine.gpus[0].compute_capability):
        try:
            cc = float(machine.gpus[0].compute_capability)
        except ValueError:
            cc = None
    return PCIE_BYTES_PER_S[5 if cc is not None and cc >= 9.0 else 4]


def offload_bytes_per_step(spec: ModelSpec, plan) -> int:
    """Bytes one GPU moves over PCIe per optimizer step with DeepSpeed ZeRO-Offload.

    Optimizer offload (ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840 §4): each micro-batch's
    16-bit gradients of the GPU's partition go to the CPU, and after the CPU Adam step the updated
    16-bit parameters come back once.  Parameter offload (ZeRO-3 Offload / Infinity) adds the GPU's
    partition of the base weights fetched from RAM for every forward and backward pass (a third pass
    with gradient checkpointing's recompute), per micro-batch."""
    if plan.offload == "none":
        return 0
    from fitcheck.estimate.training import _base_format, _trainable_shapes

    n = shard_degree(plan.zero, plan.fsdp, plan.gpus, plan.nodes)  # this GPU's partition: 1/n
    half = 4 if plan.compute_dtype == "fp32" else 2
    trainable = sum(sh.params for sh in _trainable_shapes(spec, plan))
    moved = (plan.grad_accum + 1) * trainable * half // n
    if plan.offload == "optimizer+params":
        passes = 3 if plan.grad_checkpointing else 2
        moved += plan.grad_accum * passes * weight_bytes(spec, _base_format(plan)).total // n
    return moved


def estimate_training_speed(spec: ModelSpec, plan, machine: Machine) -> TrainingSpeed:
    """How fast `plan` (a TrainingPlan) trains on `machine`: compute-bound, 16-bit peak × MFU, plus
    offload's PCIe transfers: overlapped with compute at best, after it at worst."""
    node = machine
    machine = nodes_of(machine, plan.nodes)
    on_gpu, n, peak, mfu = _training_hardware(machine, plan.world, plan.device)
    rate = training_rate(spec, machine, method=plan.mode, gradient_checkpointing=plan.grad_checkpointing,
                         gpus=plan.world, device=plan.device)
    trainable = spec.total_params if plan.mode == "full" else lora_params(
        spec, plan.lora_rank, parse_targets(plan.lora_targets))
    traffic = training_traffic(spec, plan, node, trainable)
    what = machine.gpus[0].name if on_gpu else (machine.cpu.model if known(machine.cpu.model) else "this CPU")
    tokens = plan.effective_batch * plan.seq_len
    moved = offload_bytes_per_step(spec, plan) if on_gpu else 0
    seconds = moved / pcie_bytes_per_s(machine) if moved else 0.0
    if rate is not None and seconds:
        fast, slow = tokens / rate.high, tokens / rate.low
        rate = Rate(tokens / (slow + seconds), tokens / max(fast, seconds))
    wait = None
    if rate is not None and traffic is not None and traffic.seconds:
        # the step waits for what of the link time its compute cannot hide (distributed.overlapped_step)
        fast, slow = tokens / rate.high, tokens / rate.low
        ends = [overlapped_step(c, traffic.seconds, plan, spec.num_layers) for c in (fast, slow)]
        wait = (ends[0] - fast, ends[1] - slow)
        rate = Rate(tokens / ends[1], tokens / ends[0])
    return TrainingSpeed(
        device="gpu" if on_gpu else "cpu", devices=n, peak_tflops=peak,
        flops_per_token=training_flops_per_token(spec, plan.mode, plan.grad_checkpointing),
        tokens_per_step=tokens, mfu=mfu, rate=rate,
        unknown="" if rate else f"the 16-bit peak FLOP/s of {what} is not known",
        offload_bytes=moved, offload_seconds=seconds, traffic=traffic, link_wait=wait)


def training_seconds(tokens: int, rate: Rate) -> tuple[float, float]:
    """(fastest, slowest) seconds to train on `tokens` tokens."""
    return tokens / rate.high, tokens / rate.low


# ---- cost --------------------------------------------------------------------------------------
def usd_per_million_tokens(usd_per_hour: float, rate: Rate) -> tuple[float, float]:
    """(cheapest, dearest) price of a million generated tokens at an aggregate rate."""
    return usd_per_hour / (rate.high * 3600) * 1e6, usd_per_hour / (rate.low * 3600) * 1e6


# ---- CPU or GPU --------------------------------------------------------------------------------
Judge = Callable[[Plan], bool]  # does this plan run (fits, at least tightly)?


def _precision_given(plan: Plan) -> bool:
    return any(a.name == "precision" and a.why == "from --precision" for a in plan.assumptions)


def cpu_plan(spec: ModelSpec, plan: Plan, machine: Machine) -> Plan | None:
    """The same request on the CPU with llama.cpp: the weights asked for when llama.cpp loads them,
    else what CPU users run (q4_k_m, the CPU default of request.default_precision)."""
    fmt = weight_format(plan.precision)
    keep = fmt.gguf or (fmt.family == "float" and _precision_given(plan))
    precision = plan.precision if keep else "q4_k_m"
    kv = plan.kv_dtype if plan.kv_dtype in ("fp16", "q8_0", "q4_0") else "auto"
    req = Request(precision=precision, context=plan.context, batch=plan.batch, kv_dtype=kv,
                  engine="llama.cpp", device="cpu", prompt_tokens=plan.prompt_tokens)
    try:
        cpu = resolve_inference(req, spec, machine)
    except FitcheckError:
        return None
    return None if cpu.problems else cpu


def gpu_plan(spec: ModelSpec, plan: Plan, machine: Machine) -> Plan | None:
    """The same request on the GPU (same weights; the engine default for them)."""
    if not machine.gpus:
        return None
    req = Request(precision=plan.precision, context=plan.context, batch=plan.batch, device="gpu",
                  prompt_tokens=plan.prompt_tokens)
    try:
        gpu = resolve_inference(req, spec, machine)
    except FitcheckError:
        return None
    return None if gpu.problems else gpu


def advise_device(spec: ModelSpec, plan: Plan, machine: Machine, runs: Judge,
                  options: Sequence[Plan] = ()) -> DeviceAdvice:
    """Whether the GPU or the CPU is the better place for this request, and why.

    Each device is represented by the best option that runs on it: the request itself (moved to the
    other device where it is not there), or, where that does not fit, the fastest of ``options``
    (the plans of the runnable alternatives) on that device.  So a GPU whose requested setup does
    not fit but runs q4_k_m fully in VRAM is compared at that speed, not given up for the CPU."""
    g_plan = plan if plan.device in ("gpu", "offload") else gpu_plan(spec, plan, machine)
    c_plan = plan if plan.device == "cpu" else cpu_plan(spec, plan, machine)
    g_plan, g, g_fits = _best_on(spec, machine, runs, g_plan, [o for o in options if o.device in ("gpu", "offload")])
    c_plan, c, c_fits = _best_on(spec, machine, runs, c_plan, [o for o in options if o.device == "cpu"])
    choice, reason = _choose(g, c, g_fits, c_fits, g_plan, c_plan)
    if choice == "cpu" and g_fits and c_plan is not None and g_plan is not None and g_plan.device == "gpu":
        # Before sending someone to the CPU, compare like with like: the CPU's weights (llama.cpp's
        # quant) on the GPU too.  A host-bound engine at batch 1 is slower than the GPU can be; that
        # is no reason to leave the GPU.
        same = gpu_plan(spec, c_plan, machine)
        if same is not None and same.precision != g_plan.precision and runs(same):
            s = estimate_speed(spec, same, machine)
            if s.decode is not None and (g is None or g.decode is None or s.decode.mid > g.decode.mid):
                g_plan, g = same, s
                choice, reason = _choose(g, c, g_fits, c_fits, g_plan, c_plan)
    return DeviceAdvice(choice, reason, g, c, g_fits, c_fits)


def _best_on(spec: ModelSpec, machine: Machine, runs: Judge, first: Plan | None, others: Sequence[Plan]
             ) -> tuple[Plan | None, SpeedEstimate | None, bool | None]:
    """(plan, speed, runs) for one device: ``first`` when it runs, else the fastest runnable of
    ``others`` (already judged runnable), else ``first`` as it is (not running)."""
    speed = estimate_speed(spec, first, machine) if first else None
    fits = runs(first) if first else None
    if fits or not others:
        return first, speed, fits
    scored = [(o, estimate_speed(spec, o, machine)) for o in others]
    known_rate = [(o, sp) for o, sp in scored if sp.decode is not None]
    if known_rate:
        best, best_speed = max(known_rate, key=lambda pair: pair[1].decode.mid if pair[1].decode else 0.0)
    else:
        best, best_speed = scored[0]
    return best, best_speed, True


def _tok(rate: Rate | None) -> str:
    return "unknown" if rate is None else f"~{rate.mid:,.0f} tok/s" if rate.mid >= 10 else f"~{rate.mid:.1f} tok/s"


def _where(p: Plan | None) -> str:
    if p is None:
        return ""
    return {"gpu": "GPU", "cpu": "CPU", "offload": "GPU + CPU"}[p.device]


def _choose(g, c, g_fits, c_fits, g_plan, c_plan) -> tuple[str | None, str]:
    if g is None:
        if not c_fits:
            return None, "no GPU here, and it does not fit in RAM"
        if c.decode is None:
            return "cpu", f"no GPU here; CPU speed unknown: {c.unknown}"
        return "cpu", f"no GPU here; the CPU decodes {c_plan.precision} at {_tok(c.decode)}"
    if not g_fits and not c_fits:
        return None, "it fits neither on the GPU nor in RAM"
    if not c_fits:
        return "gpu", f"{_where(g_plan)}: {_tok(g.decode)}; it does not fit in RAM for the CPU"
    if not g_fits:
        if c.decode is None:  # never send someone to a CPU whose speed is unknown
            return None, f"it does not fit on the GPU; the CPU runs {c_plan.precision}, speed unknown ({c.unknown})"
        return "cpu", f"CPU: {c_plan.precision} at {_tok(c.decode)}; it does not fit on the GPU, nor does an alternative"
    if c.decode is None and g.decode is None:
        return None, f"both speeds are unknown ({g.unknown}; {c.unknown})"
    if c.decode is None or g.decode is None:
        known_one = (f"{_where(g_plan)} {_tok(g.decode)} ({g_plan.precision})" if g.decode
                     else f"CPU {_tok(c.decode)} ({c_plan.precision})")
        return ("gpu" if g.decode else "cpu"), f"{known_one}; the other speed is unknown ({c.unknown or g.unknown})"
    ratio = g.decode.mid / c.decode.mid
    versus = f"{_where(g_plan)} {_tok(g.decode)} ({g_plan.precision}) vs CPU {_tok(c.decode)} ({c_plan.precision})"
    if c.batch == 1 and c.decode.mid >= CPU_ENOUGH_TOKENS_PER_S and ratio < GPU_BETTER_RATIO:
        return "cpu", f"CPU is enough: {versus}; a GPU adds little at batch 1"
    if c.batch == 1 and c.decode.mid >= CPU_ENOUGH_TOKENS_PER_S:
        return "gpu", f"{versus}; the CPU alone is fast enough to read along"
    where = "VRAM" if g_plan.device == "gpu" and not g_plan.cpu_offload_gb else "GPU + RAM"
    return "gpu", f"{versus}; the model fits in {where}"
