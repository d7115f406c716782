"""Weights in RAM while the GPU runs the rest (issue 21): llama.cpp's MoE expert offload
(--n-cpu-moe / --cpu-moe) and vLLM's --cpu-offload-gb."""

import functools
import json
import shlex

import pytest
from click.testing import CliRunner

from fitcheck import pipeline
from fitcheck.cli import cli
from fitcheck.engines import estimate_inference
from fitcheck.engines.llama_cpp.offload import expert_bytes, offloaded_expert_bytes
from fitcheck.errors import FitcheckError
from fitcheck.estimate.verdict import FITS, TIGHT
from fitcheck.model.resolve import resolve_model
from fitcheck.options import BY_NAME
from fitcheck.plan import resolve_inference
from fitcheck.profiles import load_profile
from fitcheck.request import Request
from fitcheck.speed.decode import estimate_speed
from fitcheck.speed.efficiency import pcie_bytes_per_s
from fitcheck.units import GiB

# These tests read the alternatives to the default as asked (what --strict shows): with --precision and --engine
# left to fitcheck, check answers for the first of them that changes only the weights (pipeline.Chosen).
check = functools.partial(pipeline.check, choose=False)

MOE = "Qwen/Qwen3-30B-A3B"
EIGHT_GB = "rtx-4070-laptop"   # 8 GB RTX 4070 Laptop, 32 GB DDR5


def run(*args):
    return CliRunner().invoke(cli, list(args))


def spec(name):
    return resolve_model(name).spec


def plan_of(name, profile=EIGHT_GB, **request):
    return resolve_inference(Request(**request), spec(name), load_profile(profile))


def device(est, kind):
    return next(d for d in est.devices if d.kind == kind)


def part(dev, name):
    return sum(c.bytes for c in dev.components if c.name == name)


# ---- the option ------------------------------------------------------------------------------
def test_cpu_moe_takes_a_count_or_all():
    opt = BY_NAME["cpu_moe"]
    assert opt.parse("12") == 12 and opt.parse("all") == "all" and opt.parse("ALL") == "all"
    assert opt.parse("none") is None
    with pytest.raises(FitcheckError, match="whole number or all"):
        opt.parse("some")


def test_cpu_moe_is_refused_where_it_cannot_apply():
    r = run(MOE, "--cpu-moe", "all", "--engine", "vllm", "--profile", EIGHT_GB)
    assert r.exit_code == 2 and "llama.cpp option" in r.output
    r = run(MOE, "--cpu-moe", "4", "--gpu-layers", "20", "--profile", EIGHT_GB)
    assert r.exit_code == 2 and "replaces --gpu-layers" in r.output
    r = run("qwen-7b", "--cpu-moe", "4", "--profile", EIGHT_GB)
    assert r.exit_code == 2 and "dense model" in r.output
    r = run(MOE, "--cpu-offload-gb", "4", "--engine", "transformers", "--profile", EIGHT_GB)
    assert r.exit_code == 2 and "vllm option" in r.output.lower()


# ---- memory per device -----------------------------------------------------------------------
def test_expert_offload_memory_per_device():
    s = spec(MOE)
    L = s.num_layers
    whole = estimate_inference(s, plan_of(MOE, precision="q4_k_m", engine="llama.cpp"))
    plan = plan_of(MOE, precision="q4_k_m", cpu_moe=30)
    assert plan.device == "offload" and plan.engine == "llama.cpp" and plan.cpu_moe == 30
    est = estimate_inference(s, plan)
    gpu, ram = device(est, "gpu"), device(est, "cpu")
    moved = offloaded_expert_bytes(s, "q4_k_m", 30)
    assert moved == pytest.approx(expert_bytes(s, "q4_k_m") * 30 / L, rel=1e-6)
    # The GPU loses exactly the offloaded experts; RAM gains them; the whole KV cache stays on the GPU.
    assert part(gpu, "weights") == pytest.approx(part(device(whole, "gpu"), "weights") - moved, rel=1e-6)
    assert part(ram, "weights") == pytest.approx(part(device(whole, "cpu"), "weights") + moved, rel=1e-6)
    assert part(gpu, "kv_cache") == part(device(whole, "gpu"), "kv_cache") and part(ram, "kv_cache") == 0
    # A prompt micro-batch copies one layer's experts into the GPU's compute buffer.
    assert part(gpu, "activations") > part(device(whole, "gpu"), "activations")
    facts = dict(est.facts)
    assert facts["cpu_moe_layers"] == 30 and facts["experts_in_ram_bytes"] == part(ram, "weights") - part(
        device(whole, "cpu"), "weights")


def test_more_layers_in_ram_need_less_gpu_and_all_is_every_layer():
    s = spec(MOE)
    needs = [device(estimate_inference(s, plan_of(MOE, precision="q4_k_m", cpu_moe=n)), "gpu").total_bytes
             for n in (8, 24, 40)]
    assert needs[0] > needs[1] > needs[2]
    every = plan_of(MOE, precision="q4_k_m", cpu_moe="all")
    assert every.cpu_moe == s.num_layers and every.cpu_moe_all
    assert estimate_inference(s, every).devices == estimate_inference(
        s, plan_of(MOE, precision="q4_k_m", cpu_moe=s.num_layers)).devices


def test_dense_layers_hold_no_experts_to_move():
    s = spec("deepseek-v2-lite")  # first_k_dense_replace = 1
    assert s.num_dense_layers >= 1
    assert offloaded_expert_bytes(s, "q4_k_m", s.num_dense_layers) == 0
    assert offloaded_expert_bytes(s, "q4_k_m", s.num_dense_layers + 1) > 0


# ---- speed -----------------------------------------------------------------------------------
def test_decode_reads_the_offloaded_layers_picked_experts_from_ram():
    s, machine = spec(MOE), load_profile(EIGHT_GB)
    few = estimate_speed(s, plan_of(MOE, precision="q4_k_m", cpu_moe=12), machine)
    many = estimate_speed(s, plan_of(MOE, precision="q4_k_m", cpu_moe="all"), machine)
    whole = estimate_speed(s, plan_of(MOE, precision="q4_k_m", engine="llama.cpp"), machine)
    assert whole.decode.mid > few.decode.mid > many.decode.mid
    # Prefill copies the experts over PCIe per 512-token micro-batch: it cannot beat that bound.
    moved = offloaded_expert_bytes(s, "q4_k_m", s.num_layers)
    assert many.prefill.high <= 512 * pcie_bytes_per_s(machine) / moved


# ---- the alternative -------------------------------------------------------------------------
def moe_check():
    return check(MOE, Request(), load_profile(EIGHT_GB))


def test_qwen3_30b_on_8gb_gets_an_expert_offload_alternative_that_fits_and_reproduces():
    result = moe_check()
    experts = [a for a in result.alternatives if a.plan.cpu_moe]
    assert experts, [a.title for a in result.alternatives]
    alt = experts[0]
    assert alt.verdict.status in (FITS, TIGHT)
    assert "--cpu-moe" in alt.fitcheck_command
    assert "-ngl 999" in alt.engine_command and ("--n-cpu-moe" in alt.engine_command
                                                  or alt.engine_command.endswith("--cpu-moe"))
    # The largest GPU share: one layer fewer in RAM no longer fits on the GPU.
    n = alt.plan.cpu_moe
    if n < spec(MOE).num_layers:
        fewer = check(MOE, alt.request.with_changes(cpu_moe=n - 1), load_profile(EIGHT_GB), alternatives=False,
                      search=False)
        assert any(d.status != FITS for d in fewer.verdict.devices if d.kind == "gpu")
    # The printed command reparses and reproduces the status and the bytes.
    args = shlex.split(alt.fitcheck_command)
    r = run(*args[1:], "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["verdict"]["status"] == alt.verdict.status
    assert doc["estimate"]["total_bytes"] == alt.estimate.total_bytes
    assert doc["request"]["cpu_moe"] == n


def test_expert_offload_ranks_above_layer_offload_because_it_is_faster():
    result = moe_check()
    titles = [a.title for a in result.alternatives]
    experts = next(i for i, a in enumerate(result.alternatives) if a.plan.cpu_moe)
    layers = next(i for i, a in enumerate(result.alternatives) if a.plan.gpu_layers is not None)
    assert experts < layers, titles
    machine = load_profile(EIGHT_GB)
    fast = estimate_speed(spec(MOE), result.alternatives[experts].plan, machine).decode
    slow = estimate_speed(spec(MOE), result.alternatives[layers].plan, machine).decode
    assert fast.mid > slow.mid


@pytest.mark.parametrize("model,profile", [("qwen-7b", "rtx-4060-laptop"), ("llama3.3-70b", "rtx-4090")])
def test_a_dense_model_never_gets_expert_offload(model, profile):
    result = check(model, Request(), load_profile(profile))
    assert result.alternatives
    assert not any(a.plan.cpu_moe for a in result.alternatives)
    assert not any("cpu-moe" in a.fitcheck_command + a.engine_command for a in result.alternatives)


# ---- vLLM --cpu-offload-gb -------------------------------------------------------------------
def test_vllm_cpu_offload_moves_weights_to_ram_and_pays_pcie_every_step():
    s, machine = spec("qwen-14b"), load_profile("rtx-4090")
    base = plan_of("qwen-14b", "rtx-4090", engine="vllm")
    off = plan_of("qwen-14b", "rtx-4090", engine="vllm", cpu_offload_gb=9)
    assert off.engine == "vllm" and off.cpu_offload_gb == 9
    before, after = estimate_inference(s, base), estimate_inference(s, off)
    assert part(device(before, "gpu"), "weights") - part(device(after, "gpu"), "weights") == 9 * GiB
    assert part(device(after, "cpu"), "weights") == 9 * GiB
    slow = estimate_speed(s, off, machine)
    assert slow.bound == "PCIe"
    assert 1 / slow.decode.high >= 9 * GiB / pcie_bytes_per_s(machine)
    assert slow.decode.mid < estimate_speed(s, base, machine).decode.mid


def test_vllm_cpu_offload_implies_vllm_and_its_command_says_so():
    plan = plan_of("qwen-14b", "rtx-4090", cpu_offload_gb=9)
    assert plan.engine == "vllm"
    result = check("qwen-14b", Request(cpu_offload_gb=9), load_profile("rtx-4090"))
    assert "--cpu-offload-gb 9" in result.command()
    r = run("qwen-14b", "--cpu-offload-gb", "9", "--profile", "rtx-4090", "--json")
    assert json.loads(r.output)["request"]["cpu_offload_gb"] == 9


def test_vllm_cpu_offload_is_the_last_resort_alternative():
    from fitcheck.pipeline import Evaluator
    from fitcheck.search.alternatives import find_alternatives
    from fitcheck.search.inference_routes import _context, streamed
    from fitcheck.search.rank import COST_STREAMED

    s, machine = spec("qwen-14b"), load_profile("rtx-4090")
    request = Request(engine="vllm")
    evaluate = Evaluator(s, machine)
    plan = evaluate.outcome(request).plan
    c = _context(s, request, plan, machine, evaluate)
    streamed(c)
    (alt,) = c.s.found
    gib = alt.plan.cpu_offload_gb
    assert gib >= 1 and alt.verdict.status in (FITS, TIGHT) and alt.cost >= COST_STREAMED
    # the fewest whole GiB: one less does not run
    assert evaluate(alt.request.with_changes(cpu_offload_gb=gib - 1)).verdict.status not in (FITS, TIGHT)
    # every alternative that runs from VRAM ranks before it
    alts = find_alternatives(s, request, plan, machine, evaluate)
    assert alts and all(a.cost < alt.cost for a in alts if a.plan.device == "gpu" and not a.plan.cpu_offload_gb)
    # Only the engine that has it: a transformers request never gets it.
    t_request = Request(engine="transformers")
    t_plan = evaluate.outcome(t_request).plan
    assert not any(a.plan.cpu_offload_gb for a in find_alternatives(s, t_request, t_plan, machine, evaluate))
