"""Decode and prefill tokens/s for a Plan on a Machine.  Pure.

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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

from fitcheck import engines
from fitcheck.engines.llama_cpp.offload import offloaded_expert_bytes
from fitcheck.estimate.distributed import DecodeComm
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.kv_cache import kv_cache_bytes
from fitcheck.estimate.weights import weight_bytes
from fitcheck.machine import Machine, known
from fitcheck.model import spec as S
from fitcheck.model.spec import ModelSpec
from fitcheck.plan import Plan
from fitcheck.speed.efficiency import (
    DECODE_BANDWIDTH,
    KV_CONCAT_BANDWIDTH,
    PREFILL_MFU,
    Efficiency,
    Rate,
    experts_touched_fraction,
    matmul_params,
    pcie_bytes_per_s,
)


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


def active_weight_bytes(spec: ModelSpec, precision: str, batch: int = 1, engine: str | None = None) -> int:
    """Weight bytes one decode step reads, in the plan's storage format.

    Routed experts count by :func:`experts_touched_fraction`; an untied input embedding is not
    read (one row per token is looked up), a tied one is read in full as the output head.
    """
    fmt = engines.get(engine).weight_format(spec, precision) if engine else weight_format(precision)
    wb = weight_bytes(spec, fmt)
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


def kv_bytes_per_sequence(spec: ModelSpec, plan: Plan, context: int) -> int:
    # the cache a decode step reads (sliding-window layers: what the engine keeps once generation starts)
    return kv_cache_bytes(spec, tokens=context, sequences=1, kv_dtype=plan.kv_dtype, engine=engines.get(plan.engine),
                          transformers_version=plan.transformers_version)


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
    n = engines.get(plan.engine).read_devices(plan)
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
    engine = engines.get(plan.engine)
    weights = active_weight_bytes(spec, plan.precision, B, plan.engine)
    traffic = engine.kv_traffic(spec)
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
    host = engine.host_overhead(spec, plan.precision)
    fp8_host = engine.extra_host(spec, plan.precision, B, plan.transformers_version, host)
    assumptions = tuple(dict.fromkeys(
        [DECODE_BANDWIDTH[d.kind] for _, _, d in parts] + [PREFILL_MFU[d.kind] for _, _, d in parts]
        + [host] + ([fp8_host] if fp8_host is not None else [])
        + ([KV_CONCAT_BANDWIDTH] if kv_concat and any(d.kind == "gpu" for _, _, d in parts) else [])))
    bw = gpu.bandwidth if plan.device == "gpu" else cpu.bandwidth
    ram_source = machine.memory.bandwidth_source if plan.device != "gpu" and cpu.bandwidth else ""
    missing = [d.why_unknown for _, _, d in parts if d.bandwidth is None]
    if missing:
        return SpeedEstimate(plan.device, plan.engine, plan.precision, B, ctx, None, None, None, weights, kv, bw,
                             "unknown",
                             assumptions, "; ".join(dict.fromkeys(missing)), ram_bandwidth_source=ram_source)
    host_units = engine.host_layers(spec, B, plan.transformers_version)
    serial = engine.serial_host(spec, plan.precision, plan.transformers_version)
    streamed = _streamed_seconds(plan, machine)

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
            times[end] = total + streamed
        return times, bounds

    times, bounds = step_times(kv - kv_concat, kv_concat)
    copy_cost = 0.0
    if kv_copied:
        # what the copies add to the slow end's step, against the cache read once in place (vLLM, llama.cpp)
        in_place, _ = step_times(kv_once * sequences, 0.0)
        copy_cost = 1.0 - in_place["low"] / times["low"]
    comm = engine.decode_comm(spec, plan, machine) if plan.device == "gpu" else None
    if comm is not None:
        # A decode step waits for its all-reduces, all-to-alls, pipeline sends and RPC round trips in turn: at
        # decode batch sizes they sit on the critical path between layers.  The slow end waits the longer latency.
        times["low"] += comm.seconds[1]
        times["high"] += comm.seconds[0]
    decode = Rate(B / times["low"], B / times["high"])
    prefill = _prefill_rate(spec, plan, parts, machine)
    # The most frequent limit; a tie goes to the one met first (never to set order, which hashing decides).
    bound = max(dict.fromkeys(bounds), key=bounds.count)
    if bound == "host overhead" and engine.cuda_graphs:
        bound = "kernel latency"
    if streamed > times["high"] / 2:
        bound = "PCIe"  # the weights streamed from RAM take most of the step
    return SpeedEstimate(plan.device, plan.engine, plan.precision, B, ctx, decode, decode.scaled(1 / B), prefill,
                         weights, kv, bw,
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


def fp8_gemms(plan: Plan, machine: Machine) -> bool:
    """Whether the plan's linears run as FP8 GEMMs on FP8 tensor cores (FP8_GEMM_SPEEDUP)."""
    if not engines.get(plan.engine).fp8_gemms or weight_format(plan.precision).family != "fp8" or not machine.gpus:
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
    # seconds per prompt token spent moving weights from RAM to the GPU (llama.cpp's expert copies, vLLM's streaming)
    copied, gpu_runs_all = engines.get(plan.engine).prefill_copy_seconds(spec, plan, machine)
    if gpu_runs_all:
        parts = [(1.0, 1.0, dev) for _, _, dev in parts if dev.kind == "gpu"]
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
    """Weights streamed from RAM over PCIe in every forward pass (vLLM --cpu-offload-gb; each GPU its own)."""
    streamed = engines.get(plan.engine).streamed_bytes(plan)
    return streamed / pcie_bytes_per_s(machine) if streamed and machine.gpus else 0.0
