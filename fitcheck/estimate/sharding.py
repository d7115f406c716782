"""How training shards its model states over processes: DeepSpeed ZeRO stages and PyTorch FSDP's strategies,
as the ZeRO stage each amounts to and the processes it shards over.  Pure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FsdpStrategy:
    """One `--fsdp` value: PyTorch FSDP's sharding strategy and what it shards over."""

    name: str                  # the --fsdp value
    strategy: str              # torch.distributed.fsdp.ShardingStrategy member, as accelerate's
                               # `fsdp_sharding_strategy` names it (accelerate/utils/constants.py)
    stage: int                 # the ZeRO stage it matches: 2 = gradients and optimizer sharded, 3 = + parameters
    within_node: bool = False  # hybrid: sharded over one node's GPUs, replicated across nodes


# torch/distributed/fsdp/api.py ShardingStrategy: FULL_SHARD (ZeRO-3), SHARD_GRAD_OP (ZeRO-2), HYBRID_SHARD
# ("FULL_SHARD within a node, and replicates parameters across nodes"), _HYBRID_SHARD_ZERO2 (SHARD_GRAD_OP
# within a node, replicated across nodes).  FSDP2 spells hybrid as fully_shard(mesh=init_device_mesh("cuda",
# (nodes, gpus), mesh_dim_names=("replicate", "shard"))), HSDP.  accelerate accepts the names below
# (FSDP_SHARDING_STRATEGY = [FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2]).
FSDP_STRATEGIES: dict[str, FsdpStrategy] = {s.name: s for s in (
    FsdpStrategy("full-shard", "FULL_SHARD", 3),
    FsdpStrategy("shard-grad-op", "SHARD_GRAD_OP", 2),
    FsdpStrategy("hybrid-shard", "HYBRID_SHARD", 3, within_node=True),
    FsdpStrategy("hybrid-shard-zero2", "HYBRID_SHARD_ZERO2", 2, within_node=True),
)}


def sharding_stage(zero: int | None, fsdp: str | None) -> int:
    """The ZeRO stage a plan's sharding amounts to (0: none, DDP or one process)."""
    if zero is not None:
        return zero
    return FSDP_STRATEGIES[fsdp].stage if fsdp else 0


def shard_degree(zero: int | None, fsdp: str | None, gpus: int, nodes: int) -> int:
    """Over how many processes the sharded model states are split: all of them (ZeRO, FSDP full/grad-op),
    or one node's GPUs (FSDP hybrid: each node holds a full replica, sharded over its GPUs)."""
    if fsdp is not None and FSDP_STRATEGIES[fsdp].within_node:
        return max(gpus, 1)
    return max(gpus, 1) * max(nodes, 1)


