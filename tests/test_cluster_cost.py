"""A cluster is a cost like quality (fitcheck.search.rank.COST_CLUSTER): one machine at 4-bit before 16-bit over
several nodes, and full fine-tuning over more nodes after LoRA and QLoRA on one."""

from __future__ import annotations

import json
import shlex

from fitcheck.request import Request
from fitcheck.search.rank import COST_CLUSTER, COST_PER_NODE, COST_PER_QUALITY_STEP, SMALL_QUALITY_LOSS, cluster_cost
from tests.test_training_ranking import alternatives, every_candidate, run


def index(alts: list[dict], *needles: str) -> int:
    return next(i for i, a in enumerate(alts) if all(n in a["fitcheck_command"] for n in needles))


def test_the_cluster_costs_the_small_quality_step_once():
    assert COST_CLUSTER == SMALL_QUALITY_LOSS * COST_PER_QUALITY_STEP
    assert cluster_cost(1, 2) == COST_CLUSTER + COST_PER_NODE
    assert cluster_cost(2, 3) == COST_PER_NODE          # already a cluster: only the node more


def test_one_machine_at_4bit_before_bf16_over_two_nodes():
    # Qwen2-72B on one H100: vLLM's AWQ build on the one machine (~37 tok/s, 3.6× the two nodes': under the speed
    # order's 5×) ranked after bf16 over two nodes (cost 13 against 33); a practitioner rents no cluster for it.
    alts = alternatives("qwen2-72b", "--profile", "h100-sxm", "--strict")  # the alternatives to the default
    awq = index(alts, "--precision awq", "--engine vllm")
    nodes = index(alts, "--nodes 2")
    assert awq < nodes and alts[awq]["cost"] < alts[nodes]["cost"]
    assert index(alts, "--precision q4_k_m") < nodes
    # the cluster is still offered, and its command reproduces it
    again = json.loads(run(*shlex.split(alts[nodes]["fitcheck_command"])[1:], "--json").output)
    assert again["verdict"]["status"] == alts[nodes]["status"]


def test_full_fine_tuning_over_more_nodes_after_lora_and_qlora():
    # Qwen2.5-7B full fine-tuning on one A100 80GB: LoRA (25) and QLoRA (35) rank before FSDP over 3 nodes (20 + the
    # cluster's 30); the check itself keeps the mode the user set and offers the nodes.
    every = every_candidate("qwen-7b", Request(mode="full"), "a100-80gb")
    lora = next(i for i, a in enumerate(every) if a.request.mode == "lora")
    qlora = next(i for i, a in enumerate(every) if a.request.mode == "qlora")
    fsdp = next(i for i, a in enumerate(every) if a.plan.nodes > 1 and a.request.fsdp == "full-shard")
    assert lora < qlora < fsdp
    alts = alternatives("qwen-7b", "--mode", "full", "--profile", "a100-80gb")
    assert all("--mode full" in a["fitcheck_command"] for a in alts) and index(alts, "--nodes", "--fsdp full-shard")
