"""Advice a practitioner would give (issue 21): defaults follow the recipe of the library that runs
them, and what the help says is what the estimate counts."""

import functools
import json

import pytest
from click.testing import CliRunner

from fitcheck import pipeline
from fitcheck.cli import cli
from fitcheck.model.resolve import resolve_model
from fitcheck.options import BY_NAME
from fitcheck.plan import grad_checkpointing, resolve_training
from fitcheck.profiles import load_profile
from fitcheck.request import Request
from fitcheck.search.rank import checkpoint_known

# These tests read the alternatives to the default as asked (what --strict shows): with --precision and --engine
# left to fitcheck, check answers for the first of them that changes only the weights (pipeline.Chosen).
check = functools.partial(pipeline.check, choose=False)


def run(*args):
    return CliRunner().invoke(cli, list(args))


def spec(name):
    return resolve_model(name).spec


def assumption(plan, name):
    return next(a for a in plan.assumptions if a.name == name)


# ---- QLoRA: peft's prepare_model_for_kbit_training turns gradient checkpointing on -------------
def test_qlora_default_has_gradient_checkpointing_on_and_says_why():
    plan = resolve_training(Request(mode="qlora"), spec("llama3.1-8b"), load_profile("rtx-4090"))
    assert plan.grad_checkpointing is True
    note = assumption(plan, "grad_checkpointing")
    assert note.value == "on" and "prepare_model_for_kbit_training" in note.why
    assert note.option == "--no-grad-checkpointing"


def test_full_and_lora_defaults_stay_off_as_the_trainer():
    for mode in ("full", "lora"):
        on, why = grad_checkpointing(Request(mode=mode))
        assert not on and "Trainer" in why


def test_no_grad_checkpointing_turns_the_qlora_recipe_off():
    plan = resolve_training(Request(mode="qlora", grad_checkpointing=False), spec("llama3.1-8b"),
                            load_profile("rtx-4090"))
    assert plan.grad_checkpointing is False
    assert assumption(plan, "grad_checkpointing").why == "from --no-grad-checkpointing"


def test_llama31_8b_qlora_fits_a_24gib_gpu_with_the_standard_recipe():
    result = run("llama3.1-8b", "--mode", "qlora", "--profile", "rtx-4090", "--json")
    doc = json.loads(result.output)
    assert doc["verdict"]["status"] == "fits", doc["verdict"]
    total = doc["estimate"]["devices"][0]["total_bytes"] / 2**30
    assert 11 < total < 16  # ~13.5 GiB: nf4 weights, checkpointed activations, logits


def test_the_cli_off_switch_reaches_the_plan():
    on = run("llama3.1-8b", "--mode", "qlora", "--profile", "rtx-4090")
    off = run("llama3.1-8b", "--mode", "qlora", "--profile", "rtx-4090", "--no-grad-checkpointing")
    assert "checkpointing on" in on.output and "checkpointing off" in off.output


def test_a_checkpointing_flag_typed_off_is_off_not_the_default():
    assert BY_NAME["grad_checkpointing"].parse("off") is False
    assert BY_NAME["grad_checkpointing"].parse("auto") is None


def test_qlora_alternatives_do_not_offer_checkpointing_it_already_has():
    result = check("llama3.1-8b", Request(mode="qlora", seq_len=32768), load_profile("rtx-4090"))
    assert result.verdict.status != "fits"
    titles = [a.title for a in result.alternatives]
    assert not any("checkpointing" in t.lower() for t in titles), titles


# ---- --grad-accum: the help says what the estimate counts ------------------------------------
def test_grad_accum_help_and_estimate_agree():
    assert "keeps gradients allocated" in BY_NAME["grad_accum"].help
    assert "no memory effect" not in BY_NAME["grad_accum"].help
    profile = load_profile("rtx-4090")
    one = check("qwen2.5-0.5b", Request(mode="full"), profile)
    four = check("qwen2.5-0.5b", Request(mode="full", grad_accum=4), profile)
    assert four.estimate.devices[0].total_bytes > one.estimate.devices[0].total_bytes
    assert any("gradients stay allocated" in n for n in four.estimate.notes)


# ---- LoRA on an fp32 or fp16 base: CPUs without bf16, T4, V100 ---------------------------------
def test_lora_on_an_fp32_base_is_estimated_on_the_cpu():
    result = run("qwen2.5-0.5b", "--mode", "lora", "-p", "fp32", "--profile", "github-ubuntu-latest")
    assert result.exit_code in (0, 1), result.output
    assert "lora fine-tuning, fp32 base, on the CPU" in result.output


def test_lora_on_fp32_and_fp16_bases_on_a_t4():
    for precision in ("fp32", "fp16"):
        plan = resolve_training(Request(mode="lora", precision=precision), spec("qwen2.5-0.5b"), load_profile("t4"))
        assert (plan.precision, plan.compute_dtype, plan.problems) == (precision, precision, ())
    fp32 = check("qwen2.5-0.5b", Request(mode="lora", precision="fp32"), load_profile("t4"))
    fp16 = check("qwen2.5-0.5b", Request(mode="lora", precision="fp16"), load_profile("t4"))
    assert fp32.estimate.devices[0].total_bytes > fp16.estimate.devices[0].total_bytes


# ---- "better here": the best runnable option on each device ------------------------------------
def best_device(*args):
    doc = json.loads(run(*args, "--json").output)
    return doc["speed"]["best_device"]


def test_better_here_compares_the_gpu_alternative_that_runs_not_the_cpu():
    # README's RTX 3060 case: bf16 at 16k does not fit, q4_k_m fully on the GPU (~41 tok/s) does;
    # the CPU decodes q4_k_m at ~5 tok/s.
    advice = best_device("qwen-7b", "--context", "16384", "--profile", "rtx-3060", "--strict")
    assert advice["choice"] == "gpu", advice
    assert advice["gpu"]["fits"] and advice["gpu"]["decode_tokens_per_s"]["low"] > 10 * 2
    assert advice["cpu"]["decode_tokens_per_s"]["high"] < advice["gpu"]["decode_tokens_per_s"]["low"]


@pytest.mark.parametrize("profile", ["macbook-air-m3-16gb", "macbook-pro-m3-pro-36gb", "macbook-pro-m3-max-64gb",
                                     "rtx-4060-laptop", "rtx-3060", "t4"])
def test_better_here_never_contradicts_its_own_figures(profile):
    # issue 35 item 8: "GPU (~4.8 tok/s bf16) vs CPU (~17 tok/s q4_k_m)" chose the slower; each device is its
    # best option (the CPU's weights on the GPU too), and the device named is the faster unless the CPU is
    # already fast enough to read along and the GPU adds little
    advice = best_device("qwen-7b", "--profile", profile)
    g, c = advice["gpu"]["decode_tokens_per_s"], advice["cpu"]["decode_tokens_per_s"]
    mid = {k: (v["low"] * v["high"]) ** 0.5 for k, v in (("gpu", g), ("cpu", c)) if v}
    if advice["choice"] == "gpu" and "cpu" in mid:
        assert mid["gpu"] >= mid["cpu"], advice
    if advice["choice"] == "cpu" and "gpu" in mid and mid["gpu"] > mid["cpu"]:
        assert "CPU is enough" in advice["reason"], advice
    assert " with " in advice["reason"], advice  # the engine each would use


def test_better_here_never_picks_a_cpu_of_unknown_speed():
    advice = best_device("llama3.3-70b", "-p", "fp8", "--context", "131072", "--profile", "h100-sxm")
    assert advice["cpu"]["decode_tokens_per_s"] is None
    assert advice["choice"] != "cpu", advice


def test_no_gpu_option_and_an_unknown_cpu_speed_is_no_choice():
    from fitcheck.search.device import _choose
    from fitcheck.speed.decode import SpeedEstimate
    from fitcheck.speed.efficiency import Rate

    common = dict(batch=1, context=4096, per_sequence=None, prefill=None, weight_bytes_per_step=0,
                  kv_bytes_per_step=0, bandwidth_bytes_per_s=None)
    g = SpeedEstimate(device="gpu", engine="vllm", precision="bf16", decode=Rate(10, 20), bound="memory bandwidth",
                      **common)
    c = SpeedEstimate(device="cpu", engine="llama.cpp", precision="q4_k_m", decode=None, bound="",
                      unknown="RAM bandwidth not known", **common)
    plan = resolve_inference_plan()
    choice, reason = _choose(g, c, False, True, plan, plan)
    assert choice is None and "speed unknown" in reason


def resolve_inference_plan():
    from fitcheck.plan import resolve_inference

    return resolve_inference(Request(), spec("qwen2.5-0.5b"), load_profile("rtx-4090"))


# ---- a context past the model's maximum ----------------------------------------------------------
def test_context_past_the_maximum_is_named_and_the_largest_is_capped():
    doc = json.loads(run("qwen-7b", "--context", "100000", "--profile", "h100-sxm", "--json").output)
    notes = " ".join(doc["estimate"]["notes"])
    assert "beyond the model's maximum of 32,768" in notes
    assert '"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768' in notes
    assert doc["verdict"]["max_context"] <= 32768


def test_a_shorter_context_alternative_never_goes_past_the_maximum():
    # on one desktop GPU nothing holds the 10M tokens the user set: the alternatives change --context, say so, and
    # never go past the model's maximum
    result = check("qwen-7b", Request(context=10_000_000), load_profile("rtx-4090"))
    shorten = [a for a in result.alternatives if a.title.startswith("Shorten the context")]
    assert shorten and all(a.request.context <= 32768 for a in shorten)
    assert all("(changes --context, which you set)" in a.title for a in result.alternatives)
    assert "reaches 131,072 at most" in " ".join(result.estimate.notes)


def test_no_yarn_recipe_named_where_none_is_known():
    from fitcheck.estimate.context_limit import context_note

    note = context_note(spec("mistral-7b"), 65536)
    assert note is not None and "maximum of 32,768" in note and "no RoPE scaling" in note
    assert context_note(spec("mistral-7b"), 32768) is None


# ---- the full fine-tuning ladder -------------------------------------------------------------------
def test_full_fine_tuning_tries_the_cheap_steps_before_lora():
    # 7B full fine-tuning on one A100-80GB: pure bf16 alone runs, tight (~75 GiB: weights, gradients,
    # AdamW's states and its step's temporaries); checkpointing + 8-bit AdamW + pure bf16 fits at ~50 GiB.
    result = check("qwen-7b", Request(mode="full"), load_profile("a100-80gb"))
    first = result.alternatives[0]
    assert first.request.mode == "full", [a.title for a in result.alternatives]
    assert (first.plan.optimizer, first.plan.master_weights) == ("adamw", "none")
    assert first.verdict.runs and first.estimate.devices[0].total_bytes < 80 * 2**30
    cheap = next(a for a in result.alternatives if a.plan.optimizer == "adamw-8bit")
    assert (cheap.request.mode, cheap.plan.master_weights, cheap.plan.grad_checkpointing) == ("full", "none", True)
    assert cheap.estimate.devices[0].total_bytes < 60 * 2**30
    # LoRA changes the mode the user set: not offered while full fine-tuning fits some way
    assert all(a.request.mode == "full" for a in result.alternatives)


def test_pure_bf16_and_paged_optimizers_are_candidates():
    from fitcheck.search.rank import COST_8BIT_OPTIMIZER, COST_CHECKPOINTING, COST_LORA, COST_PURE_BF16

    assert COST_LORA > COST_CHECKPOINTING + COST_8BIT_OPTIMIZER + COST_PURE_BF16
    result = check("qwen2.5-1.5b", Request(mode="full", batch=4), load_profile("rtx-4090"))
    changed = {name for alt in result.alternatives for name, _ in alt.changes}
    assert result.alternatives and ("master_weights" in changed or "optimizer" in changed), \
        [a.title for a in result.alternatives]


# ---- output: --json with another --format, TERM=dumb ------------------------------------------------
def test_json_with_format_table_is_refused():
    result = run("qwen-7b", "--json", "--format", "table")
    assert result.exit_code == 2 and "--json and --format table" in result.output
    assert run("qwen-7b", "--json", "--format", "json", "--profile", "rtx-4090").exit_code == 0


def test_term_dumb_gets_no_colour():
    from fitcheck.preflight.lines import use_color

    class Tty:
        def isatty(self):
            return True

    assert use_color(Tty(), {"TERM": "xterm-256color"})
    assert not use_color(Tty(), {"TERM": "dumb"})


# ---- offload: PCIe time per step in the speed and the ranking ----------------------------------------
def test_offload_shows_its_pcie_time_and_slows_the_step():
    from fitcheck.speed.training import estimate_training_speed, offload_bytes_per_step

    machine = load_profile("rtx-4090")
    s = spec("llama3.1-8b")
    plain = resolve_training(Request(mode="qlora", seq_len=8192), s, machine)
    offload = resolve_training(Request(mode="qlora", seq_len=8192, zero=3, offload="optimizer+params"), s, machine)
    assert offload_bytes_per_step(s, plain) == 0
    # three passes (forward, recompute, backward) over the ~7.3 GiB 4-bit base, plus the adapters' traffic
    assert 3 * 7 * 2**30 < offload_bytes_per_step(s, offload) < 3 * 8 * 2**30
    fast, slow = estimate_training_speed(s, offload, machine).step_seconds
    plain_fast, plain_slow = estimate_training_speed(s, plain, machine).step_seconds
    assert slow > plain_slow and fast >= plain_fast
    out = run("llama3.1-8b", "--mode", "qlora", "--seq-len", "8192", "--zero", "3", "--offload", "optimizer+params",
              "--profile", "rtx-4090", "-v")
    assert "offload moves" in out.output and "over PCIe" in out.output


def test_offload_ranks_after_a_cheaper_change_and_pays_for_its_transfers():
    from fitcheck.search.rank import COST_OFFLOAD_PARAMS
    from tests.test_training_ranking import every_candidate

    every = every_candidate("llama3.1-8b", Request(mode="qlora", seq_len=8192), "rtx-4090")
    titles = [a.title for a in every]
    assert "Offload" not in titles[0], titles
    offload = next(a for a in every if a.request.offload != "none")
    assert offload.cost > COST_OFFLOAD_PARAMS
    # the check keeps the 8,192-token sequence the user set: offload is what does
    result = check("llama3.1-8b", Request(mode="qlora", seq_len=8192), load_profile("rtx-4090"))
    assert result.alternatives and all(a.request.seq_len == 8192 for a in result.alternatives)


# ---- quantize and serve: where fitcheck chose the engine, the serving engines' quantized weights too --------
def test_qwen2_72b_on_one_h100_offers_awq_served_with_vllm_before_transformers():
    # bf16 does not fit one H100; Qwen's published AWQ checkpoint served by vLLM does, several times faster
    # than transformers' device_map='auto' at the same weights.
    result = check("qwen2-72b", Request(), load_profile("h100-sxm"))
    alts = list(result.alternatives)
    served = [i for i, a in enumerate(alts) if a.plan.engine == "vllm" and a.plan.nodes == 1
              and a.plan.precision in ("awq", "gptq-int4")]
    assert served, [a.title for a in alts]
    first = alts[served[0]]
    assert "served with vLLM" in first.title and first.plan.gpus == 1
    assert first.engine_command.startswith("vllm serve Qwen/Qwen2-72B-Instruct-AWQ ")
    assert f"--precision {first.plan.precision} --engine vllm" in first.fitcheck_command
    slower = [i for i, a in enumerate(alts) if a.plan.engine == "transformers" and a.plan.precision == first.plan.precision]
    assert all(i > served[0] for i in slower)
    # the printed command reproduces it
    doc = json.loads(run(*first.fitcheck_command.split()[1:], "--json").output)
    assert doc["verdict"]["status"] == first.verdict.status
    assert doc["estimate"]["total_bytes"] == first.estimate.total_bytes


def test_where_lists_one_8x_h100_node_at_4bit_as_check_advises(no_one_node_holds_deepseek):
    # `where` lists the node as `fitcheck deepseek-r1 --profile 8x-h100` advises it on one node (its first
    # alternative that changes only the weights): a 4-bit build, not transformers' device_map.
    doc = json.loads(run("where", "deepseek-r1", "--json").output)
    single = [m for m in doc["machines"] if m["name"] == "8x-h100" and m["nodes"] == 1]
    assert len(single) == 1 and single[0]["engine"] in ("vllm", "llama.cpp"), single
    assert single[0]["precision"] in ("awq", "gptq-int4", "q4_k_m") and single[0]["precision_choice"] == "best_fitting"
    advised = next(a for a in check("deepseek-r1", Request(), load_profile("8x-h100")).alternatives
                   if a.plan.nodes == 1)
    assert (advised.plan.precision, advised.plan.engine) == (single[0]["precision"], single[0]["engine"])
    # cheaper per token than two nodes at fp8, and far cheaper than transformers' device_map
    two = [m for m in doc["machines"] if m["name"] == "8x-h100" and m["nodes"] == 2]
    assert two and single[0]["usd_per_million_tokens"]["high"] < two[0]["usd_per_million_tokens"]["high"]
    transformers_awq = json.loads(run("where", "deepseek-r1", "-p", "awq", "--engine", "transformers", "--json").output)
    slow = [m for m in transformers_awq["machines"] if m["name"] == "8x-h100" and m["nodes"] == 1]
    assert slow and single[0]["usd_per_million_tokens"]["high"] < slow[0]["usd_per_million_tokens"]["low"] / 3


def test_no_serving_engine_alternatives_where_none_runs_the_precision_or_the_engine_was_named():
    from fitcheck.plan import resolve
    from fitcheck.search.inference_routes import lower_precision_engines as _lower_precision_engines

    # Apple: vLLM does not run on Metal (nor AWQ/GPTQ/bitsandbytes): the answer is today's, no vLLM in it
    apple = check("llama3.3-70b", Request(), load_profile("macbook-pro-m3-max-64gb"))
    assert apple.alternatives and all(a.plan.engine != "vllm" for a in apple.alternatives)
    # the CPU: no serving engine either
    cpu = check("qwen-7b", Request(device="cpu", engine="transformers", precision="bf16"),
                load_profile("laptop-8gb"))
    assert all(a.plan.engine != "vllm" for a in cpu.alternatives)
    # the engine named: its own ladder only, as before
    named = check("llama3.3-70b", Request(engine="transformers"), load_profile("a100-80gb"))
    quantized = [a for a in named.alternatives if a.title.startswith("Quantize the weights")]
    assert quantized and all(a.plan.engine == "transformers" for a in quantized)
    # on a CUDA GPU where fitcheck chooses, each precision lists the engines that run it there
    machine = load_profile("8x-h100")
    plan = resolve(Request(), spec("llama3.3-70b"), machine)
    by_precision = _lower_precision_engines(plan_spec := spec("llama3.3-70b"), Request(), plan, "cuda", 9.0)
    assert by_precision["awq"][:2] == ["transformers", "vllm"] and by_precision["nf4"] == ["transformers"]
    assert _lower_precision_engines(plan_spec, Request(engine="transformers"), plan, "cuda", 9.0)["awq"] \
        == ["transformers"]


# ---- the inference ladder as a practitioner reads it: one good option per route ------------------
SERVING = ("vllm", "sglang")


def _kinds(alternatives):
    return [(a.plan.engine, a.plan.precision, a.plan.nodes) for a in alternatives]


def test_one_consumer_gpu_shows_llama_cpp_beside_at_most_two_serving_engine_variants():
    for model in ("gpt-oss-20b", "qwen-14b"):
        result = check(model, Request(), load_profile("rtx-4090"))
        engines = [a.plan.engine for a in result.alternatives]
        assert len(engines) == 5 and "llama.cpp" in engines, _kinds(result.alternatives)
        first = engines.index("llama.cpp")
        # before the GGUF build: no more than two of vLLM/SGLang's quantized variants
        assert sum(e in SERVING for e in engines[:first]) <= 2, _kinds(result.alternatives)


def test_a_second_4bit_format_on_the_same_engine_comes_after_the_other_routes():
    # Qwen-14B on a 16 GB T4 (vLLM's GPTQ 8-bit does not fit there): vLLM's second 4-bit format after its first,
    # llama.cpp's GGUF build and transformers' 4-bit route
    result = check("qwen-14b", Request(), load_profile("t4"))
    order = [(a.plan.engine, a.plan.precision) for a in result.alternatives]
    assert order.index(("vllm", "awq")) < order.index(("vllm", "gptq-int4")), order
    assert order.index(("llama.cpp", "q4_k_m")) < order.index(("vllm", "gptq-int4")), order
    transformers_4bit = next(i for i, (engine, precision) in enumerate(order)
                             if engine == "transformers" and precision in ("awq", "nf4", "gptq-int4"))
    assert transformers_4bit < order.index(("vllm", "gptq-int4")), order


def test_diversity_keeps_cost_order_within_what_is_shown_first():
    from fitcheck.search.rank import MAX_PER_ROUTE
    from fitcheck.search.rank import route_of as _route

    result = check("gpt-oss-20b", Request(), load_profile("rtx-4090"))
    alts = list(result.alternatives)
    seen: dict = {}
    for i, a in enumerate(alts):
        seen.setdefault(_route(a), []).append(i)
    # a route's third option (or a second of the same quality) is shown only after every other route's
    deferred = [a for a in alts if seen[_route(a)].index(alts.index(a)) >= MAX_PER_ROUTE]
    assert all(alts.index(d) > alts.index(b) for d in deferred for b in alts if _route(b) != _route(d)
               and b not in deferred)
    leading = alts[:len(alts) - len(deferred)]
    # in cost order, the builds whose checkpoint fitcheck can name before the others (known_first)
    known = [a for a in leading if checkpoint_known(result.spec, a)]
    unknown = [a for a in leading if not checkpoint_known(result.spec, a)]
    assert leading == known + unknown
    for group in (known, unknown):
        assert [a.cost for a in group] == sorted(a.cost for a in group)


def test_no_more_nodes_when_one_machine_already_fits_at_the_same_quality():
    result = check("gpt-oss-120b", Request(), load_profile("a100-80gb"))
    assert result.alternatives[0].plan.precision == "mxfp4" and result.alternatives[0].plan.nodes == 1
    assert result.alternatives[0].verdict.status == "fits"
    assert all(a.plan.nodes == 1 for a in result.alternatives), _kinds(result.alternatives)


def test_more_nodes_after_one_machine_that_gives_up_a_small_quality_step():
    # Llama-3.1-405B in bf16 does not fit 8×H100: two nodes keep bf16; one node takes Meta's FP8 checkpoint.  The
    # cluster costs what 16-bit → 4-bit costs (COST_CLUSTER), so the one node's FP8 comes first and the two nodes
    # at bf16 are still offered.
    result = check("llama-3.1-405b", Request(), load_profile("8x-h100"))
    first = result.alternatives[0]
    assert first.plan.nodes == 1 and first.plan.precision == "fp8", _kinds(result.alternatives)
    assert "meta-llama/Llama-3.1-405B-Instruct-FP8" in first.engine_command
    assert any(a.plan.nodes == 2 and a.plan.precision == "bf16" for a in result.alternatives)


def test_a_checkpoint_stored_quantized_is_not_requantized_and_an_unknown_build_ranks_last():
    # DeepSeek-R1 is stored in FP8: NF4, LLM.int8, AWQ or GPTQ of it would re-quantize a quantized checkpoint
    # (none is published in the catalog): not offered.  Two nodes at its own FP8 come before one node's GGUF
    # build, which no GGUF repository fitcheck knows holds; that one says what to look for.
    result = check("deepseek-r1", Request(), load_profile("8x-h100"))
    kinds = _kinds(result.alternatives)
    assert not any(a.plan.precision in ("nf4", "int8", "awq", "gptq-int4", "gptq-int8")
                   for a in result.alternatives), kinds
    assert result.alternatives[0].plan.precision == "fp8" and result.alternatives[0].plan.nodes == 2, kinds
    gguf = next(a for a in result.alternatives if a.plan.engine == "llama.cpp")
    assert not checkpoint_known(result.spec, gguf) and "no GGUF repository" in gguf.engine_command
    assert all(checkpoint_known(result.spec, a) for a in result.alternatives[:result.alternatives.index(gguf)])


def test_llama_cpp_pays_for_the_decode_speed_it_gives_up_as_vllm_does():
    from fitcheck.search.rank import COST_GGUF, COST_PER_QUALITY_STEP
    from fitcheck.search.rank import gives_up as _gives_up
    from fitcheck.search.rank import slowdown_cost as _slowdown_cost
    from fitcheck.speed.decode import estimate_speed

    machine = load_profile("a100-80gb")
    result = check("qwen2.5-72b", Request(), machine)  # 80 layers; Qwen publishes the AWQ and GGUF builds
    s = result.spec
    gguf = next(a for a in result.alternatives if a.plan.engine == "llama.cpp" and a.plan.gpu_layers is None)
    awq = next(a for a in result.alternatives if a.plan.engine == "vllm" and a.plan.precision == "awq")
    rated = [(_gives_up(a.plan), estimate_speed(s, a.plan, machine).decode) for a in (awq, gguf)]
    pays = [_slowdown_cost(r, g, rated) for g, r in rated]
    # the slower of the two pays, whichever it is (vLLM's AWQ reads fewer bytes, but pays its kernels' latency
    # under CUDA graphs, GRAPH_KERNEL_LATENCY_S, on 80 layers): the faster pays nothing, and llama.cpp's cost is
    # its quality step, the GGUF build's and what it pays
    faster = 0 if rated[0][1].mid >= rated[1][1].mid else 1
    assert pays[faster] == 0 and pays[1 - faster] >= 0
    assert pays[1 - faster] == round(10 * min(rated[faster][1].mid / rated[1 - faster][1].mid - 1, 4.0))
    assert gguf.cost == 3 * COST_PER_QUALITY_STEP + COST_GGUF + pays[1]


def test_transformers_4bit_pays_against_a_faster_gguf_build_of_the_same_quality():
    # 8 GB laptop GPU: llama.cpp's q4_k_m decodes about twice as fast as transformers' AWQ (Qwen publishes both)
    result = check("qwen2.5-7b", Request(), load_profile("rtx-4060-laptop"))
    first = result.alternatives[0]
    assert (first.plan.engine, first.plan.precision) == ("llama.cpp", "q4_k_m"), _kinds(result.alternatives)
    awq = next(a for a in result.alternatives if a.plan.precision == "awq")
    assert awq.cost > first.cost


def test_quantized_variants_at_the_longest_context_that_fits_are_one_kind_but_shortening_alone_is_not():
    # vLLM named, 128k context on a 16 GiB laptop GPU (one sequence of it does not fit vLLM's pool): FP8 and
    # GPTQ-int8, each at the context that fits, are one option twice, and so are AWQ and GPTQ-int4
    result = check("llama3.1-8b", Request(engine="vllm", context=131072, batch=2), load_profile("rtx-4090-laptop"))
    order = [(a.plan.engine, a.plan.precision) for a in result.alternatives]
    assert order.index(("vllm", "fp8")) < order.index(("llama.cpp", "q4_k_m")) < order.index(("vllm", "gptq-int8"))
    assert order.index(("vllm", "awq")) < order.index(("llama.cpp", "q4_k_m")) < order.index(("vllm", "gptq-int4"))
