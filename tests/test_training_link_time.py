"""Training over several nodes: the step time includes what of the inter-node link time compute cannot hide
(fitcheck.estimate.distributed.overlapped_step), so --tokens wall time and cost use it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.estimate.distributed import BACKWARD_SHARE, overlapped_step
from fitcheck.pipeline import check
from fitcheck.profiles import load_profile
from fitcheck.request import Request
from fitcheck.speed.training import estimate_training_speed


@pytest.fixture(scope="module")
def node():
    return load_profile("8x-h100")


def _slow_link(node, gbps: float):
    assert node.cluster is not None
    return replace(node, cluster=replace(node.cluster, inter_node="ethernet", inter_node_gbps=gbps))


def _speed(model: str, machine, **kw):
    r = check(model, Request(**kw), machine, alternatives=False, search=False)
    return estimate_training_speed(r.spec, r.plan, machine)


def test_full_shard_step_is_max_of_compute_and_link_plus_one_layer(node):
    r = check("llama-3.1-70b", Request(mode="full", fsdp="full-shard", nodes=2, grad_checkpointing=True), node,
              alternatives=False, search=False)
    layers = r.spec.num_layers
    # link shorter than compute: only about one layer's share shows
    assert overlapped_step(10.0, 4.0, r.plan, layers) == pytest.approx(10.0 + 4.0 / layers)
    # link longer than compute: the step is the link time (plus the share no prefetch hides)
    assert overlapped_step(10.0, 30.0, r.plan, layers) == pytest.approx(30.0 + 30.0 / layers)


def test_ddp_like_overlap_is_the_last_micro_batch_backward(node):
    r = check("llama-3.1-8b", Request(mode="full", zero=2, nodes=2, grad_accum=4, grad_checkpointing=True), node,
              alternatives=False, search=False)
    window = 12.0 * BACKWARD_SHARE / 4
    assert overlapped_step(12.0, 5.0, r.plan, 32) == pytest.approx(12.0 - window + 5.0 + 5.0 / 32)


def test_a_slow_link_slows_the_step_and_the_rate(node):
    fast = _speed("llama-3.1-70b", node, mode="full", fsdp="full-shard", nodes=2, grad_checkpointing=True)
    slow_node = _slow_link(node, 12.5)  # 100 GbE per node
    slow = _speed("llama-3.1-70b", slow_node, mode="full", fsdp="full-shard", nodes=2, grad_checkpointing=True)
    assert slow.traffic is not None and slow.traffic.seconds is not None and slow.link_wait is not None
    assert slow.step_seconds is not None and fast.step_seconds is not None
    # 100 GbE carries the ~265 GB of full-shard traffic in ~20 s, longer than the compute: the step waits for it
    assert slow.step_seconds[0] >= slow.traffic.seconds
    assert slow.rate is not None and fast.rate is not None and slow.rate.high < fast.rate.high
    assert slow.step_seconds[1] == pytest.approx(fast.step_seconds[1] - fast.link_wait[1] + slow.link_wait[1])


def test_tokens_wall_time_uses_the_link(node, tmp_path):
    args = ["llama-3.1-70b", "--mode", "full", "--profile", "8x-h100", "--nodes", "2", "--fsdp", "full-shard",
            "--grad-checkpointing", "--json"]
    doc = json.loads(CliRunner().invoke(cli, args).output)
    speed = doc["speed"]
    wait = speed["inter_node"]["wait_seconds_per_step"]
    assert wait is not None and wait["high"] > 0
    rate = speed["training_tokens_per_s"]
    assert speed["tokens_per_step"] / rate["low"] == pytest.approx(speed["step_seconds"]["high"], rel=1e-2)
    out = CliRunner().invoke(cli, [*args[:-1], "-v"])
    assert "the step waits" in out.output and "in the step time above" in out.output
