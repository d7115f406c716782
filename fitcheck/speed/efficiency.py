"""The named efficiency factors speed estimates use (each a range with its published source), the Rate they give,
and the hardware figures they apply to.  Pure data; the formulas are in fitcheck.speed.decode and .training, the
engines' own terms in their modules (host time per layer, kernels per layer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fitcheck.machine import Machine, known
from fitcheck.model.spec import ModelSpec


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


# ---- bytes and FLOPs ---------------------------------------------------------------------------
def experts_touched_fraction(spec: ModelSpec, batch: int) -> float:
    """Share of routed experts one decode step reads: k/E for one token; for B tokens routed
    independently and uniformly, 1 − (1 − k/E)^B (each expert is skipped by all B with that chance)."""
    if not spec.is_moe:
        return 1.0
    p = spec.experts_per_token / spec.num_experts
    return 1.0 - (1.0 - p) ** max(batch, 1)


def matmul_params(spec: ModelSpec) -> int:
    """Active parameters that take part in matmuls (the embedding lookup does not)."""
    embed = spec.vocab_size * spec.hidden_size
    return spec.active_params - (0 if spec.tie_word_embeddings else embed)


