"""What crosses the link between nodes: per-step traffic of data-parallel training.

Per optimizer step, with Ψ the parameters sharded or replicated and W processes over N nodes
(Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC'20,
§7.2: DP and ZeRO-2 move 2Ψ per step — a reduce-scatter and an all-gather — and ZeRO-3 3Ψ: the
parameters all-gathered in forward and again in backward, then the gradients reduce-scattered):

  DDP / ZeRO-0/1:            all-reduce of the gradients               2Ψ
  ZeRO-2 / FSDP SHARD_GRAD_OP: reduce-scatter + all-gather             2Ψ
  ZeRO-3 / FSDP FULL_SHARD:    all-gather ×2 + reduce-scatter          3Ψ   (per micro-batch: FSDP and ZeRO-3
                                                                          reshard after each forward/backward)

FSDP HYBRID_SHARD / _HYBRID_SHARD_ZERO2 (torch/distributed/fsdp/api.py) run those collectives within a node
and add one all-reduce of each rank's gradient shard (Ψ/G) across the N nodes' peers
(`_HYBRID_SHARD` inter-node process group, torch/distributed/fsdp/_runtime_utils.py `_reduce_grad`): the link
carries 2(N-1)/N · Ψ per node instead of (W-1)/W · 3Ψ.

in 16-bit elements.  A ring collective moves (W-1)/W of the buffer out of every rank; the ring crosses each
node boundary once, so a node's NICs together send (W-1)/W of it (NCCL spreads its rings over the NICs).
The time is that over the profile's inter-node bandwidth (``[cluster] inter_node_gbps``), a floor: NCCL
overlaps some of it with compute and rarely reaches the line rate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fitcheck.engines import FSDP_STRATEGIES, sharding_stage
from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec

# ---- serving: what one decode step waits for on the links -------------------------------------------
# Small-message latency of one NCCL collective (seconds), low and high ends.  Within a node (NVLink):
# ~6 µs for an all-reduce on 2 H100s with NVLS, rising with the GPU count (github.com/NVIDIA/nccl/issues/1259,
# nccl-tests all_reduce_perf -b 128 on HGX 8x H100).  Between nodes: ~19-20 µs for an 8-byte all-reduce on
# 2 nodes of A100s over HDR InfiniBand (github.com/NVIDIA/nccl-tests/issues/150); EFA and RoCE sit higher.
INTRA_NODE_LATENCY = (6e-6, 15e-6)
INTER_NODE_LATENCY = (19e-6, 40e-6)
# vLLM: two all-reduces per layer under tensor parallelism (RowParallelLinear after attention and after the
# MLP, vllm/model_executor/layers/linear.py reduce_results); pipeline stages pass hidden_states and residual
# (IntermediateTensors, vllm/model_executor/models/deepseek_v2.py / llama.py) once per stage boundary.
ALLREDUCES_PER_LAYER = 2
PP_TENSORS = 2


@dataclass(frozen=True)
class DecodeComm:
    """Seconds one decode step spends on communication (low, high), and the alternative layout's figure."""

    seconds: tuple[float, float]
    what: str
    tp_across_nodes: tuple[float, float] | None   # the same GPUs as one tensor-parallel group across nodes
    inter_node: tuple[float, float] = (0.0, 0.0)  # the part on the link between nodes (PP sends)


def decode_comm(spec: ModelSpec, plan, machine: Machine) -> DecodeComm | None:
    """Per-step communication of a vLLM plan: TP all-reduces within a node, PP sends between nodes."""
    tp, pp = max(plan.gpus, 1), max(plan.nodes, 1)
    if plan.engine != "vllm" or (tp == 1 and pp == 1):
        return None
    layers = spec.num_layers
    message = plan.batch * spec.hidden_size * 2  # bf16 activations of the step's tokens
    cluster = machine.cluster
    inter_bw = cluster.inter_node_gbps * 1e9 if cluster and cluster.inter_node_gbps else None
    intra_bw = cluster.intra_node_gbps * 1e9 if cluster and cluster.intra_node_gbps else None

    def over(latency: float, bw: float | None, size: float) -> float:
        return latency + (size / bw if bw else 0.0)

    ends = []
    across = []
    inter = []
    for i in (0, 1):
        t = 0.0
        if tp > 1:
            t += ALLREDUCES_PER_LAYER * layers * over(INTRA_NODE_LATENCY[i], intra_bw, 2 * (tp - 1) / tp * message)
        inter.append((pp - 1) * over(INTER_NODE_LATENCY[i], inter_bw, PP_TENSORS * message) if pp > 1 else 0.0)
        t += inter[-1]
        if pp > 1:
            world = tp * pp
            across.append(ALLREDUCES_PER_LAYER * layers
                          * over(INTER_NODE_LATENCY[i], inter_bw, 2 * (world - 1) / world * message))
        ends.append(t)
    parts = []
    if tp > 1:
        parts.append(f"{ALLREDUCES_PER_LAYER * layers} all-reduces within a node (TP {tp})")
    if pp > 1:
        parts.append(f"{pp - 1} point-to-point send{'s' if pp > 2 else ''} between nodes (PP {pp})")
    return DecodeComm((ends[0], ends[1]), " and ".join(parts), (across[0], across[1]) if across else None,
                      (inter[0], inter[1]))


ELEMENT_BYTES = 2  # bf16/fp16 collectives (FSDP MixedPrecision param_dtype/reduce_dtype, DeepSpeed bf16)


def gb_text(n: float) -> str:
    """Bytes as decimal GB: '2,359 GB', '0.21 GB' (link bandwidths are quoted in GB/s)."""
    gb = n / 1e9
    return f"{gb:,.0f} GB" if gb >= 10 else f"{gb:.2g} GB"


@dataclass(frozen=True)
class NodeTraffic:
    """Bytes a node sends to the others per optimizer step, and the seconds that takes on the link."""

    bytes_per_step: int
    what: str                    # which collectives
    link: str                    # 'efa 400 GB/s per node' or why unknown
    seconds: float | None        # None: the link's bandwidth is not in the profile
    full_shard_bytes: int | None = None  # FSDP hybrid: what full-shard over every GPU would send instead
    full_shard_seconds: float | None = None


def _volume(plan) -> tuple[float, str]:
    """(multiples of Ψ per step, the collectives)."""
    accum = max(plan.grad_accum, 1)
    stage = sharding_stage(plan.zero, plan.fsdp)
    if plan.fsdp and FSDP_STRATEGIES[plan.fsdp].within_node:
        times = 2.0 * (accum if stage == 3 else 1)
        inside = ("parameters all-gathered and gradients reduce-scattered within each node" if stage == 3 else
                  "gradients reduce-scattered and parameters all-gathered within each node")
        return times, inside + ", gradient shards all-reduced across nodes" + (
            f", per micro-batch (× {accum})" if stage == 3 and accum > 1 else "")
    if stage == 3:
        return 3.0 * accum, "parameters all-gathered in forward and backward, gradients reduce-scattered" + (
            f", per micro-batch (× {accum})" if accum > 1 else "")
    if stage == 2:
        return 2.0, "gradients reduce-scattered, parameters all-gathered after the step"
    return 2.0, "gradients all-reduced"


def training_traffic(spec: ModelSpec, plan, machine: Machine, trainable: int) -> NodeTraffic | None:
    """Per-node inter-node traffic of one step of a multi-node TrainingPlan (None on one node)."""
    if plan.nodes <= 1:
        return None
    cluster = machine.cluster
    bw = cluster.inter_node_gbps * 1e9 if cluster is not None and cluster.inter_node_gbps else None
    if plan.fsdp and FSDP_STRATEGIES[plan.fsdp].within_node:
        # Only the gradients' all-reduce among the nodes' peers crosses the link: each of the G ranks
        # all-reduces its Ψ/G shard over N peers (a ring sends 2(N-1)/N of it), G × that per node.
        times, what = _volume(plan)
        per_node = int(times * trainable * ELEMENT_BYTES * (plan.nodes - 1) / plan.nodes)
        full = training_traffic(spec, plan.with_changes(fsdp="full-shard"), machine, trainable)
        assert full is not None
        return replace(_on_link(per_node, what, cluster, bw), full_shard_bytes=full.bytes_per_step,
                       full_shard_seconds=full.seconds)
    sharded_params = sharding_stage(plan.zero, plan.fsdp) == 3
    world = plan.world
    times, what = _volume(plan)
    # Ψ: what is communicated.  Gradients are the trainable parameters'; a sharded frozen base
    # (LoRA over FSDP full-shard) is all-gathered too, its gradients are not.
    if sharded_params:
        gathered = 2.0 * spec.total_params  # forward + backward all-gathers of every parameter
        scattered = 1.0 * trainable
        psi = (gathered + scattered) * (times / 3.0)
    else:
        psi = times * trainable
    per_node = int(psi * ELEMENT_BYTES * (world - 1) / world)
    return _on_link(per_node, what, cluster, bw)


def _on_link(per_node: int, what: str, cluster, bw: float | None) -> NodeTraffic:
    if cluster is None or bw is None:
        return NodeTraffic(per_node, what, "inter-node bandwidth not in the profile ([cluster] inter_node_gbps)", None)
    return NodeTraffic(per_node, what, f"{cluster.inter_node} {cluster.inter_node_gbps:g} GB/s per node",
                       per_node / bw)
