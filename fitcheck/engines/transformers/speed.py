"""transformers' decode on the host: eager PyTorch launches every operator from Python, so a decode step's host
time is counted in operator calls per layer; FP8Linear and the MoE blocks' Python loops make the host wait for the
device; the KV cache is concatenated and expanded every token.
"""

from __future__ import annotations

from fitcheck.estimate.formats import weight_format
from fitcheck.model.spec import ModelSpec
from fitcheck.speed.efficiency import GRAPH_KERNEL_LATENCY_S, Efficiency, KVTraffic, experts_touched_fraction
from fitcheck.versions import parse_transformers_version

# Host time per layer per decode step (kernel launches, Python).  The accelerator runs while the
# host enqueues, so a step takes max(device time, host time).  transformers (eager PyTorch, batch 1)
# is launch-bound: the Qwen2.5 speed benchmark on A100 decodes 0.5B (24 layers, weights read in
# 0.5 ms) at 47 tok/s in bf16 and 51 tok/s with GPTQ-Int4 (ExLlamaV2 kernels): 0.8–0.9 ms per
# layer; AWQ and 8-bit GPTQ kernels take 1.1–1.2 ms per layer (37 and 35 tok/s).  vLLM replays
# CUDA graphs and llama.cpp builds one graph per step: microseconds per layer.
HOST_PER_LAYER = Efficiency("host time per layer (transformers)", 0.7e-3, 1.05e-3,
                            "eager PyTorch at batch 1 is bound by kernel launches: Qwen2.5-0.5B in bf16 or "
                            "GPTQ-Int4 on A100 spends 0.8–0.9 ms per layer per token")
HOST_PER_LAYER_SLOW_KERNELS = Efficiency("host time per layer (transformers, AWQ/8-bit/bitsandbytes)", 1.0e-3,
                                         1.35e-3, "AWQ and GPTQ-Int8 kernels: Qwen2.5-0.5B on A100 spends "
                                         "1.1–1.2 ms per layer per token")
_SLOW_KERNEL_FAMILIES = ("awq", "bnb")
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
SERIAL_HOST_PRECISIONS = frozenset({"fp8"})
FP8_LINEAR_EXTRA_OPS = 3
FP8_LINEAR_TRITON_LAUNCHES = 2
# A Triton kernel's launch from Python (JITFunction.run: binding the arguments, the cache lookup, the C launcher):
# tritonbench's launch_latency benchmark times a no-op kernel at 5.7 µs with no arguments and 13.2 µs with 19
# (Triton 3.5, github.com/meta-pytorch/tritonbench/pull/669); _w8a8_block_fp8_matmul takes 21 arguments.
TRITON_LAUNCH_S = Efficiency("Triton kernel launch from Python", 5.7e-6, 13.2e-6,
                             "tritonbench launch_latency: a no-op Triton 3.5 kernel with 0 to 19 arguments")
ATTENTION_LINEARS = 4   # q, k, v, o
MLP_LINEARS = 3         # gate, up, down


def host_serialises(spec: ModelSpec | None, precision: str, transformers_version: str | None = None) -> bool:
    """Whether the host waits for the device inside every layer: FP8Linear (torch.cuda.synchronize) and the MoE
    loops (torch.where's nonzero copies its size to the host, once per expert visited)."""
    if precision in SERIAL_HOST_PRECISIONS:
        return True
    return spec is not None and spec.is_moe and transformers_expert_loop(spec, transformers_version) != "grouped"


def host_layers(spec: ModelSpec, batch: int, transformers_version: str | None = None) -> float:
    """Decode-step host work in units of one decoder layer: the layers, plus the MoE blocks (their Python loop over
    the experts they visit, or the grouped-mm path), counted in operator calls."""
    layers = float(spec.num_layers)
    if spec.is_moe:
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


def host_overhead(precision: str) -> Efficiency:
    """The host time per layer for the kernels this weights format uses."""
    if weight_format(precision).family in _SLOW_KERNEL_FAMILIES or precision == "gptq-int8":
        return HOST_PER_LAYER_SLOW_KERNELS
    return HOST_PER_LAYER


def kv_traffic(spec: ModelSpec) -> KVTraffic:
    """Attention reads g×, torch.cat 2×, repeat_kv 1 + g× (KVTraffic): g = heads / KV heads (1 for MLA's latent
    cache).  transformers 4.46 (the Qwen2.5 speed benchmark's release), per layer and decoded token:
    DynamicCache.update concatenates the layer's cache with the new token, so torch.cat reads the whole cache and
    writes it again (2×): https://github.com/huggingface/transformers/blob/v4.46.0/src/transformers/cache_utils.py#L447-L448
    (still so in 4.54+: DynamicLayer.update, `self.keys = torch.cat([self.keys, key_states], dim=-2)`; the legacy
    tuple cache of older releases concatenates the same way); repeat_kv materialises K and V for every query head
    before eager, sdpa and flash_attention_2 alike (reads the cache 1×, writes g×), and the attention kernel reads
    that copy (g×): https://github.com/huggingface/transformers/blob/v4.46.0/src/transformers/models/qwen2/modeling_qwen2.py#L399-L403
    The concatenation moves its bytes at KV_CONCAT_BANDWIDTH of the decode bandwidth."""
    groups = 1 if spec.is_mla else max(spec.num_attention_heads // max(spec.num_kv_heads, 1), 1)
    if groups == 1:  # repeat_kv returns its input when n_rep == 1
        return KVTraffic(1, concatenation=2)
    return KVTraffic(groups, concatenation=2, expansion=1 + groups)
