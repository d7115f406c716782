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
rarely reaches the line rate.  What of it the step waits for is ``overlapped_step``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fitcheck.estimate.sharding import FSDP_STRATEGIES, sharding_stage
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


# Expert parallel: each MoE layer dispatches the tokens to their experts' GPUs and combines the results back,
# two all-to-alls per MoE layer (vllm/model_executor/layers/fused_moe/modular_kernel.py: prepare → experts →
# finalize; SGLang's DeepEP dispatcher: dispatch / combine).  At decode batch sizes each is latency-bound: the
# small-message latency of the link it crosses (INTRA_/INTER_NODE_LATENCY) is its floor.
ALL_TO_ALLS_PER_MOE_LAYER = 2
# llama.cpp's RPC backend (ggml/src/ggml-rpc/ggml-rpc.cpp): per token, each remote layer group is one
# RPC_CMD_GRAPH_COMPUTE (the serialized graph sent, the status awaited) and one RPC_CMD_GET_TENSOR of its output
# for the next device (send_rpc_cmd waits for the reply): two round trips; the input goes out with SET_TENSOR.
RPC_ROUND_TRIPS_PER_GROUP = 2
# The graph goes over the wire every token: each tensor serialized as an rpc_tensor of 296 bytes (ggml-rpc.cpp:
# id, type, buffer, ne[4], nb[4], op, op_params[16], flags, src[10], view_src, view_offs, data, name[64]),
# about 60 per decoder layer (the ~30 graph nodes of a llama layer and the weights and views they read).
RPC_TENSOR_BYTES = 296
RPC_TENSORS_PER_LAYER = 60
# TCP request/response round trip on a LAN (netperf TCP_RR on 1–10 GbE with the kernel's TCP stack: ~50 µs
# on 10 GbE, ~100–200 µs on gigabit through a switch).
TCP_ROUND_TRIP = (50e-6, 200e-6)
# llama.cpp RPC without a link figure in the profile: gigabit Ethernet, the setting of the RPC backend's own
# tests (github.com/ggml-org/llama.cpp/pull/6829: two hosts "connected on a local gigabit network"), in GB/s.
RPC_DEFAULT_GBPS = 0.125


@dataclass(frozen=True)
class DecodeComm:
    """Seconds one decode step spends on communication (low, high), and the alternative layout's figure."""

    seconds: tuple[float, float]
    what: str
    tp_across_nodes: tuple[float, float] | None   # the same GPUs as one tensor-parallel group across nodes
    inter_node: tuple[float, float] = (0.0, 0.0)  # the part on the link between nodes
    pp_across_nodes: tuple[float, float] | None = None  # SGLang TP over nodes: vLLM's TP within × PP across instead
    link: str = ""                                # the inter-node link as used ('' when none is crossed)


def _links(machine: Machine) -> tuple[float | None, float | None]:
    cluster = machine.cluster
    inter_bw = cluster.inter_node_gbps * 1e9 if cluster and cluster.inter_node_gbps else None
    intra_bw = cluster.intra_node_gbps * 1e9 if cluster and cluster.intra_node_gbps else None
    return intra_bw, inter_bw


def _over(latency: float, bw: float | None, size: float) -> float:
    return latency + (size / bw if bw else 0.0)


def _tp_pp(layers: int, message: float, tp: int, pp: int, intra_bw, inter_bw, i: int) -> tuple[float, float]:
    """(total, inter-node part) of vLLM's TP within a node × PP across nodes, end ``i`` (0 low, 1 high)."""
    t = 0.0
    if tp > 1:
        t += ALLREDUCES_PER_LAYER * layers * _over(INTRA_NODE_LATENCY[i], intra_bw, 2 * (tp - 1) / tp * message)
    inter = (pp - 1) * _over(INTER_NODE_LATENCY[i], inter_bw, PP_TENSORS * message) if pp > 1 else 0.0
    return t + inter, inter


def _tp_all(layers: int, message: float, world: int, nodes: int, intra_bw, inter_bw, i: int) -> float:
    """One tensor-parallel group over all ``world`` GPUs: every all-reduce on the slowest link it spans."""
    latency, bw = (INTER_NODE_LATENCY[i], inter_bw) if nodes > 1 else (INTRA_NODE_LATENCY[i], intra_bw)
    return ALLREDUCES_PER_LAYER * layers * _over(latency, bw, 2 * (world - 1) / world * message)


def decode_comm(spec: ModelSpec, plan, machine: Machine, *, tp_over_nodes: bool) -> DecodeComm | None:
    """Per-step communication of a tensor-parallel server: its all-reduces within a node and pipeline sends
    between nodes (``tp_over_nodes`` False: vLLM's TP × PP), or all-reduces over every GPU of every node (True:
    SGLang's TP over the nodes); with expert parallel its all-to-alls.  None on one GPU of one node."""
    tp, pp = max(plan.gpus, 1), max(plan.nodes, 1)
    if tp == 1 and pp == 1:
        return None
    layers = spec.num_layers
    message = plan.batch * spec.hidden_size * 2  # bf16 activations of the step's tokens
    intra_bw, inter_bw = _links(machine)
    world = tp * pp
    link = _link_name(machine) if pp > 1 else ""
    if plan.expert_parallel:
        moe = spec.num_moe_layers
        latency = INTER_NODE_LATENCY if pp > 1 else INTRA_NODE_LATENCY
        bw = inter_bw if pp > 1 else intra_bw
        # each GPU sends its tokens' hidden states to the experts' GPUs (k of them per token) and gets them back
        size = max(-(-plan.batch // world), 1) * spec.hidden_size * 2 * spec.experts_per_token
        ends = tuple(ALL_TO_ALLS_PER_MOE_LAYER * moe * _over(latency[i], bw, size) for i in (0, 1))
        what = (f"{ALL_TO_ALLS_PER_MOE_LAYER * moe} all-to-alls (expert dispatch and combine) over {world} GPUs"
                + (f" of {pp} nodes" if pp > 1 else ""))
        return DecodeComm((ends[0], ends[1]), what, None, (ends[0], ends[1]) if pp > 1 else (0.0, 0.0), link=link)
    if tp_over_nodes:
        ends = tuple(_tp_all(layers, message, world, pp, intra_bw, inter_bw, i) for i in (0, 1))
        what = (f"{ALLREDUCES_PER_LAYER * layers} all-reduces over {world} GPUs"
                + (f" of {pp} nodes, each on the inter-node link" if pp > 1 else " within a node"))
        pp_alt = tuple(_tp_pp(layers, message, tp, pp, intra_bw, inter_bw, i)[0] for i in (0, 1)) if pp > 1 else None
        return DecodeComm((ends[0], ends[1]), what, None, (ends[0], ends[1]) if pp > 1 else (0.0, 0.0),
                          (pp_alt[0], pp_alt[1]) if pp_alt else None, link=link)
    pairs = [_tp_pp(layers, message, tp, pp, intra_bw, inter_bw, i) for i in (0, 1)]
    across = [_tp_all(layers, message, world, pp, intra_bw, inter_bw, i) for i in (0, 1)] if pp > 1 else None
    parts = []
    if tp > 1:
        parts.append(f"{ALLREDUCES_PER_LAYER * layers} all-reduces within a node (TP {tp})")
    if pp > 1:
        parts.append(f"{pp - 1} point-to-point send{'s' if pp > 2 else ''} between nodes (PP {pp})")
    return DecodeComm((pairs[0][0], pairs[1][0]), " and ".join(parts), (across[0], across[1]) if across else None,
                      (pairs[0][1], pairs[1][1]), link=link)


def _link_name(machine: Machine) -> str:
    c = machine.cluster
    if c is None or c.inter_node_gbps is None:
        return "inter-node link not in the profile"
    return f"{c.inter_node} {c.inter_node_gbps:g} GB/s"


def rpc_link(machine: Machine) -> tuple[float, str]:
    """(bytes/s, words) of the link llama.cpp's RPC backend talks over: the profile's, else gigabit Ethernet."""
    c = machine.cluster
    if c is not None and c.inter_node_gbps:
        return c.inter_node_gbps * 1e9, f"{c.inter_node} {c.inter_node_gbps:g} GB/s"
    return RPC_DEFAULT_GBPS * 1e9, "gigabit Ethernet assumed (no [cluster] inter_node_gbps in the profile)"


def rpc_comm(spec: ModelSpec, plan, machine: Machine) -> DecodeComm | None:
    """llama.cpp RPC: per token, each remote node's layer group costs round trips and its serialized graph on
    the link; the hidden state crosses at each group boundary; the last group's logits come back (slow end)."""
    if plan.nodes <= 1 or plan.device != "gpu":
        return None
    bw, words = rpc_link(machine)
    remote = plan.nodes - 1
    layers_per_node = spec.num_layers / plan.nodes
    graph = layers_per_node * RPC_TENSORS_PER_LAYER * RPC_TENSOR_BYTES
    hidden = plan.batch * spec.hidden_size * 4  # f32 activations between ggml backends
    logits = plan.batch * spec.vocab_size * 4
    ends = []
    for i in (0, 1):
        per_group = RPC_ROUND_TRIPS_PER_GROUP * TCP_ROUND_TRIP[i] + (graph + hidden) / bw
        ends.append(remote * per_group + (logits / bw if i == 1 else 0.0))
    what = (f"{RPC_ROUND_TRIPS_PER_GROUP * remote} RPC round trip{'s' if remote * RPC_ROUND_TRIPS_PER_GROUP > 1 else ''}"
            f" per token to {remote} rpc-server node{'s' if remote > 1 else ''} and "
            f"{graph * remote / 1024:,.0f} KiB of serialized graph over {words}")
    return DecodeComm((ends[0], ends[1]), what, None, (ends[0], ends[1]), link=words)


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


# ---- training: how much of the link time the step waits for -----------------------------------------
# Backward is two of the three matmul passes of a training step (dL/dx and dL/dW: 4P of the 6P FLOPs per
# token, Kaplan et al. 2020 §2.1), the window in which gradient collectives can run behind compute.
BACKWARD_SHARE = 2.0 / 3.0


def overlapped_step(compute: float, link: float, plan, layers: int) -> float:
    """Seconds of one optimizer step whose compute takes ``compute`` and whose inter-node collectives take
    ``link`` at line rate, with the overlap each sharding scheme gets:

    * ZeRO-3 / FSDP FULL_SHARD: each layer's all-gather is issued ahead of its compute (FSDP
      ``forward_prefetch`` / ``BackwardPrefetch.BACKWARD_PRE``, pytorch.org/docs/stable/fsdp.html; DeepSpeed
      ``stage3_prefetch_bucket_size`` and ``overlap_comm``, deepspeed.ai/docs/config-json/#parameter-offloading)
      and its reduce-scatter runs behind the next layer's backward: per layer max(compute, comm), the whole
      step as the window;
    * DDP, ZeRO-1/2, FSDP SHARD_GRAD_OP and HYBRID_SHARD: the gradient buckets are reduced while backward
      runs (pytorch.org/docs/stable/notes/ddp.html "overlapping gradient reduction with backward computation";
      DeepSpeed ``overlap_comm``), the backward share of the compute as the window — of the last micro-batch only
      where gradients are synchronised once per step (``no_sync`` / ``gradient_accumulation_steps``);
    * in every case about one layer's share cannot hide: the first all-gather before any compute and the last
      reduction before the optimizer step.
    """
    if link <= 0.0:
        return compute
    accum = max(plan.grad_accum, 1)
    stage = sharding_stage(plan.zero, plan.fsdp)
    hybrid = bool(plan.fsdp) and FSDP_STRATEGIES[plan.fsdp].within_node
    if stage == 3 and not hybrid:
        window = compute
    elif stage == 3:  # hybrid full shard: the cross-node gradient all-reduce in every micro-batch's backward
        window = compute * BACKWARD_SHARE
    else:
        window = compute * BACKWARD_SHARE / accum
    exposed = link / max(layers, 1)
    return compute - window + max(window, link) + exposed
