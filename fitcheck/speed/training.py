"""Training throughput: 6 × P FLOPs per token (Kaplan et al. 2020, C ≈ 6N); × 4/3 with activation
recomputation (one more forward: Chowdhery et al. 2022, PaLM appendix B, 8N vs 6N); LoRA ≈ 4 × P (forward 2P +
activation gradients 2P, no weight gradients; Hu et al. 2021); the step waits for ZeRO-Offload's PCIe transfers
and for what the link between nodes cannot overlap.  Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from fitcheck.errors import FitcheckError
from fitcheck.estimate.distributed import NodeTraffic, overlapped_step, training_traffic
from fitcheck.estimate.lora import lora_params, trainable_shapes
from fitcheck.estimate.lora_targets import parse_targets
from fitcheck.estimate.sharding import shard_degree
from fitcheck.estimate.weights import weight_bytes
from fitcheck.machine import Machine, known, nodes_of
from fitcheck.model.spec import ModelSpec
from fitcheck.speed.efficiency import TRAINING_MFU, Efficiency, Rate, matmul_params, pcie_bytes_per_s

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


def _training_hardware(machine: Machine, gpus: int, device: str, dtype: str = "bf16"
                       ) -> tuple[bool, int, float | None, Efficiency]:
    """(on a GPU, data-parallel devices, 16-bit peak TFLOPS of one or None, the MFU range).  ``dtype``: the compute
    dtype; fp16 reads the GPU's fp16 peak where the profile gives one (a T4 has no bf16), else its bf16 peak (the
    same tensor-core rate on GPUs that have both)."""
    if device == "gpu" and machine.gpus:
        gpu = machine.gpus[0]
        peak = gpu.fp16_tflops if dtype == "fp16" and known(gpu.fp16_tflops) else gpu.bf16_tflops
        return True, max(min(gpus, len(machine.gpus)), 1), (float(peak) if known(peak) else None), TRAINING_MFU["gpu"]
    peak = machine.cpu.bf16_tflops
    return False, 1, (float(peak) if known(peak) else None), TRAINING_MFU["cpu"]


def training_rate(spec: ModelSpec, machine: Machine, *, method: str = "full", gradient_checkpointing: bool = False,
                  gpus: int = 1, device: str = "gpu", dtype: str = "bf16") -> Rate | None:
    """Training tokens/s (None when the peak FLOP/s is not known)."""
    _, n, peak, mfu = _training_hardware(machine, gpus, device, dtype)
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


def offload_bytes_per_step(spec: ModelSpec, plan) -> int:
    """Bytes one GPU moves over PCIe per optimizer step with DeepSpeed ZeRO-Offload.

    Optimizer offload (ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840 §4): each micro-batch's
    16-bit gradients of the GPU's partition go to the CPU, and after the CPU Adam step the updated
    16-bit parameters come back once.  Parameter offload (ZeRO-3 Offload / Infinity) adds the GPU's
    partition of the base weights fetched from RAM for every forward and backward pass (a third pass
    with gradient checkpointing's recompute), per micro-batch."""
    if plan.offload == "none":
        return 0
    from fitcheck.engines.training.states import base_format

    n = shard_degree(plan.zero, plan.fsdp, plan.gpus, plan.nodes)  # this GPU's partition: 1/n
    half = 4 if plan.compute_dtype == "fp32" else 2
    trainable = sum(sh.params for sh in trainable_shapes(spec, plan))
    moved = (plan.grad_accum + 1) * trainable * half // n
    if plan.offload == "optimizer+params":
        passes = 3 if plan.grad_checkpointing else 2
        moved += plan.grad_accum * passes * weight_bytes(spec, base_format(plan)).total // n
    return moved


def estimate_training_speed(spec: ModelSpec, plan, machine: Machine) -> TrainingSpeed:
    """How fast `plan` (a TrainingPlan) trains on `machine`: compute-bound, 16-bit peak × MFU, plus
    offload's PCIe transfers: overlapped with compute at best, after it at worst."""
    node = machine
    machine = nodes_of(machine, plan.nodes)
    on_gpu, n, peak, mfu = _training_hardware(machine, plan.world, plan.device, plan.compute_dtype)
    rate = training_rate(spec, machine, method=plan.mode, gradient_checkpointing=plan.grad_checkpointing,
                         gpus=plan.world, device=plan.device, dtype=plan.compute_dtype)
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
        unknown="" if rate else f"the {plan.compute_dtype} peak FLOP/s of {what} is not known",
        offload_bytes=moved, offload_seconds=seconds, traffic=traffic, link_wait=wait)


def training_seconds(tokens: int, rate: Rate) -> tuple[float, float]:
    """(fastest, slowest) seconds to train on `tokens` tokens."""
    return tokens / rate.high, tokens / rate.low

