"""vLLM keeps its CUDA context and graphs beyond its reservation (inference.vllm_outside_reservation): a request that
overflows only by them is told the --gpu-memory-utilization that leaves them room, and alternatives print it."""

from __future__ import annotations

from fitcheck.pipeline import check
from fitcheck.profiles import load_profile
from fitcheck.request import Request


def test_the_verdict_names_the_utilization_that_leaves_the_graphs_room_and_it_fits():
    machine = load_profile("rtx-3060")
    result = check("qwen-7b", Request(precision="gptq-int8", engine="vllm"), machine, alternatives=False, search=False)
    assert result.exit_code == 1
    hint = next(r for r in result.verdict.reasons if "--gpu-memory-utilization" in r)
    utilization = float(hint.split("--gpu-memory-utilization ")[1].split()[0])
    assert 0.5 <= utilization < 0.9
    again = check("qwen-7b", Request(precision="gptq-int8", engine="vllm", gpu_memory_utilization=utilization),
                  machine, alternatives=False, search=False)
    assert again.exit_code == 0


def test_vllm_alternatives_carry_the_utilization_they_were_judged_at():
    result = check("qwen-7b", Request(context=16384), load_profile("rtx-3060"), choose=False)
    vllm = [a for a in result.alternatives if a.plan.engine == "vllm"]
    assert vllm
    for a in vllm:
        assert a.request.gpu_memory_utilization == a.plan.gpu_memory_utilization
        if a.plan.gpu_memory_utilization != 0.9:
            assert f"--gpu-memory-utilization {a.plan.gpu_memory_utilization:g}" in a.engine_command
            assert f"--gpu-memory-utilization {a.plan.gpu_memory_utilization:g}" in a.fitcheck_command
