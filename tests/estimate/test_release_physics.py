"""What older transformers releases, eager attention, FP8 checkpoints and vLLM tensor parallelism hold."""

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner
from estimate_specs import LLAMA3_8B, QWEN25_05B, QWEN25_7B
from machines import machine, nvidia

from fitcheck.cli import cli
from fitcheck.commands import fitcheck_command
from fitcheck.engines import estimate_inference, get
from fitcheck.engines.transformers.releases import attention_mode, legacy_cache_mode
from fitcheck.engines.vllm import profile as VP
from fitcheck.engines.vllm.memory import VLLM_NCCL_TP
from fitcheck.errors import FitcheckError
from fitcheck.estimate.kv_cache import kv_cache_bytes
from fitcheck.plan import resolve_inference
from fitcheck.request import Request

H100x2 = machine([nvidia("H100 80GB", 81559, cc="9.0"), nvidia("H100 80GB", 81559, cc="9.0", index=1)])
RTX4090 = machine([nvidia()])


def _dev(spec, m=RTX4090, **req):
    plan = resolve_inference(Request(**req), spec, m)
    return plan, estimate_inference(spec, plan).devices[0]


@pytest.mark.parametrize("arch, version, mode", [
    ("llama", "4.35.2", "eager"), ("llama", "4.36", "sdpa"), ("llama", None, "sdpa"), ("qwen2", "4.38.2", "sdpa"),
    ("qwen", "4.32", "sdpa"),
])
def test_the_attention_default_follows_the_release(arch, version, mode):
    assert attention_mode(arch, version, None)[0] == mode
    assert attention_mode(arch, version, "eager")[0] == "eager"


def test_eager_attention_holds_the_scores_and_an_fp32_softmax():
    _, sdpa = _dev(LLAMA3_8B, context=4096)
    plan, eager = _dev(LLAMA3_8B, context=4096, attention="eager")
    assert plan.attention == "eager"
    heads, p = LLAMA3_8B.num_attention_heads, 4096
    scores = heads * p * p * (2 + 4 + 2) + p * p * 2
    attn_phase = p * (4 * 4096 + 3 * 4096 + 3 * 1024) * 2
    assert eager.component("activations") - sdpa.component("activations") == attn_phase + scores - p * (
        3 * 14336 + 4 * 4096) * 2
    # the scores follow the prompt, not the generated tokens
    _, short = _dev(LLAMA3_8B, context=4096, prompt_tokens=64, attention="eager")
    _, short_sdpa = _dev(LLAMA3_8B, context=4096, prompt_tokens=64)
    assert short.component("activations") - short_sdpa.component("activations") < 64 * 64 * 32 * 10


def test_old_releases_default_to_eager_and_the_alternative_switches_to_sdpa():
    r = CliRunner().invoke(cli, ["llama3-8b", "--profile", "rtx-4090", "--context", "16384",
                                 "--transformers-version", "4.35", "--json"])
    doc = json.loads(r.output)
    assert any(a["name"] == "attention" and a["value"] == "eager" for a in doc["estimate"]["assumptions"])
    titles = [a["title"] for a in doc["alternatives"]]
    assert any("SDPA" in t for t in titles) or any("Upgrade transformers" in t for t in titles)


def test_attention_option_for_inference_and_its_command():
    plan, _ = _dev(LLAMA3_8B, context=4096, attention="eager")
    assert plan.attention == "eager"
    assert "--attention eager" in fitcheck_command(("llama3-8b",), Request(context=4096, attention="eager"))
    old, _ = _dev(LLAMA3_8B, context=4096, transformers_version="4.35")
    assert old.attention == "eager"
    assert "--attention" not in fitcheck_command(("llama3-8b",), Request(transformers_version="4.35"))
    with pytest.raises(FitcheckError, match="attention"):
        Request(attention="paged").validate()
    # flash-attention on the CPU: a verdict (cannot run here, from the capability table), not bad input
    cpu = resolve_inference(Request(attention="flash", device="cpu", precision="bf16", engine="transformers"),
                            LLAMA3_8B, RTX4090)
    assert "flash-attention 2" in cpu.problems[0] and "NVIDIA" in cpu.problems[0]
    r = CliRunner().invoke(cli, ["llama3-8b", "--profile", "rtx-4090", "--attention", "eager", "--json"])
    assert r.exit_code in (0, 1) and json.loads(r.output)["request"]["context"] == 4096


@pytest.mark.parametrize("arch, version, legacy", [
    ("llama", "4.38.2", True), ("llama", "4.35", True), ("llama", "4.44.2", False), ("llama", None, False),
    ("qwen", None, True),
])
def test_the_legacy_tuple_cache_follows_the_release(arch, version, legacy):
    assert legacy_cache_mode(arch, version) is legacy


def test_a_legacy_cache_holds_two_caches_at_the_last_decode_step():
    plan, old = _dev(QWEN25_7B, context=32768, prompt_tokens=16, batch=4, transformers_version="4.38.2")
    _, new = _dev(QWEN25_7B, context=32768, prompt_tokens=16, batch=4)
    kv = kv_cache_bytes(QWEN25_7B, tokens=32768, sequences=4, kv_dtype="bf16", engine=get("transformers"))
    assert plan.legacy_cache
    assert old.component("kv_cache") - new.component("kv_cache") == pytest.approx(kv, rel=0.01)
    # a prefill-only request decodes nothing: no second cache
    _, prefill = _dev(QWEN25_7B, context=512, transformers_version="4.38.2")
    _, prefill_new = _dev(QWEN25_7B, context=512)
    assert prefill.component("kv_cache") == prefill_new.component("kv_cache")


def test_vllm_activation_peak_does_not_shrink_with_tensor_parallelism_and_nccl_is_counted():
    assert VP.vllm_profile_bytes(LLAMA3_8B, 1, 2) == VP.vllm_profile_bytes(LLAMA3_8B, 2, 2)
    # vLLM PR #10511's log: 1.26 GiB for Meta-Llama-3-8B at tp 1 and 2 (that branch's sort-based sampler, 256 rows);
    # the formula within 15 %
    assert VP.vllm_profile_bytes(LLAMA3_8B, 2, 2, sampler="sort") / 2**30 == pytest.approx(1.26, rel=0.15)
    _, one = _dev(LLAMA3_8B, m=H100x2, engine="vllm", gpus=1)
    _, two = _dev(LLAMA3_8B, m=H100x2, engine="vllm", gpus=2)
    # inside the reservation NCCL's buffers; beyond it the context with NCCL's communicators (vllm_outside_reservation)
    from fitcheck.engines.vllm.memory import vllm_outside_reservation

    outside = vllm_outside_reservation(LLAMA3_8B, LLAMA3_8B.num_layers, 2) - vllm_outside_reservation(
        LLAMA3_8B, LLAMA3_8B.num_layers, 1)
    assert two.component("overhead") - one.component("overhead") == VLLM_NCCL_TP + outside
    assert two.component("activations") == one.component("activations")


def test_a_tied_fp8_checkpoint_stores_its_own_lm_head():
    fp8_ckpt = replace(QWEN25_05B, stored_format="fp8")
    h100 = machine([nvidia("H100 80GB", 81559, cc="9.0")])
    _, ckpt = _dev(fp8_ckpt, m=h100, precision="fp8")
    _, online = _dev(QWEN25_05B, m=h100, precision="fp8")
    head = QWEN25_05B.vocab_size * QWEN25_05B.hidden_size * 2
    assert ckpt.component("weights") - online.component("weights") == head


def test_transformers_pays_host_time_per_expert_its_release_visits_and_other_engines_do_not():
    from estimate_specs import MIXTRAL

    from fitcheck.engines.transformers import speed as TF

    ops = TF.TRANSFORMERS_LAYER_OPS                      # a Qwen2/Mixtral-like layer: 42 calls
    visit, router, mlp = TF.TRANSFORMERS_EXPERT_VISIT_OPS, TF.TRANSFORMERS_ROUTER_OPS, TF.TRANSFORMERS_MLP_OPS
    # 4.51: MixtralSparseMoeBlock loops over all 8 experts whatever the batch
    every = 32 + 32 * (router + 8 * visit - mlp) / ops
    assert get("transformers").host_layers(MIXTRAL, 1, "4.51.3") == pytest.approx(every)
    assert get("transformers").host_layers(MIXTRAL, 64, "4.51.3") == pytest.approx(every)
    # 4.52: only the experts that got tokens (2 of 8 for one token; all 8 for 64), after finding them
    hit = TF.TRANSFORMERS_HIT_SCAN_OPS
    assert get("transformers").host_layers(MIXTRAL, 1, "4.52") == pytest.approx(32 + 32 * (router + hit + 2 * visit - mlp) / ops)
    assert get("transformers").host_layers(MIXTRAL, 64, "4.52") == pytest.approx(every + 32 * hit / ops, rel=1e-3)
    # 5.x (and a release not given: a current one): grouped_mm, no loop
    grouped = 32 + 32 * (TF.TRANSFORMERS_GROUPED_MOE_OPS - mlp) / ops
    assert get("transformers").host_layers(MIXTRAL, 1, "5.0") == get("transformers").host_layers(MIXTRAL, 1, None) == grouped
    assert get("vllm").host_layers(MIXTRAL, 1, None) == get("llama.cpp").host_layers(MIXTRAL, 1, None) == 32
    assert get("transformers").host_layers(LLAMA3_8B, 1, "4.51.3") == 32


def test_each_architecture_leaves_the_every_expert_loop_at_its_own_release():
    from estimate_specs import MIXTRAL

    from fitcheck.engines.transformers.speed import transformers_expert_loop

    qwen3_moe = replace(MIXTRAL, architecture="qwen3_moe")
    olmoe = replace(MIXTRAL, architecture="olmoe")
    # modeling_qwen3_moe.py loops over range(num_experts) through 4.52.4, over expert_hitted from 4.53.3
    assert transformers_expert_loop(qwen3_moe, "4.52.4") == "every"
    assert transformers_expert_loop(qwen3_moe, "4.53") == "hit"
    assert transformers_expert_loop(MIXTRAL, "4.51.3") == "every" and transformers_expert_loop(MIXTRAL, "4.52") == "hit"
    assert transformers_expert_loop(olmoe, "4.55.4") == "every"  # still range(num_experts) in 4.55.4
    assert transformers_expert_loop(olmoe, "5.0") == transformers_expert_loop(olmoe, None) == "grouped"


def test_vllm_profiles_its_sampler_with_top_k_and_top_p_so_the_sampler_is_inside_the_reserved_peak():
    # _dummy_sampler_run: temperature 0.5, top_p 0.9, top_k vocab - 1 for min(max_num_seqs, max_num_batched_tokens)
    # rows.  Before vLLM's Triton top-k/top-p: apply_top_k_top_p's sort beside the model's 16-bit and the sampler's
    # fp32 logits: values, int64 indices, ATen's reverse indices and cub's third key and value buffers, 38 B per
    # vocabulary entry with 16-bit logits
    assert VP.vllm_sampler_bytes_per_entry(2) == 38
    sort = VP.VLLM_MAX_NUM_SEQS * LLAMA3_8B.vocab_size * 38
    held = VP.VLLM_PROFILE_TOKENS * LLAMA3_8B.hidden_size * 2       # the profile batch's hidden states
    forward = VP.vllm_profile_bytes(LLAMA3_8B, 1, 2, sampler="none")
    # the two phases run one after the other: the peak is the larger (here the sampler's)
    assert VP.vllm_profile_bytes(LLAMA3_8B, 1, 2, sampler="sort") == max(forward, held + sort) == held + sort
    # v0.19.0: the Triton kernel masks in place; the model's logits, their fp32 copy, the probabilities and the
    # exponential draw stay (14 B per entry), with one fp32 vocabulary row per SM (132 on an H100)
    assert VP.vllm_triton_sampler_bytes_per_entry(2) == 14 and VP.vllm_triton_sampler_bytes_per_entry(4) == 12
    rows, h, v = 1024, LLAMA3_8B.hidden_size, LLAMA3_8B.vocab_size
    triton = 8192 * h * 2 + 2 * rows * h * 2 + rows * v * 14 + 132 * v * 4
    assert VP.vllm_profile_bytes(LLAMA3_8B, 1, 2, tokens=8192, seqs=rows, sms=132) == triton
    # v0.19.0's logs read 1.89 GiB for Llama-3.1-8B (the same shapes) on an H100: within 3 %
    assert triton / 2**30 == pytest.approx(1.89, rel=0.03)
    # an 80 GB H100 gets `vllm serve`'s larger defaults: 8,192 batched tokens, 1,024 sequences
    plan = resolve_inference(Request(engine="vllm", gpus=1), LLAMA3_8B, H100x2)
    est = estimate_inference(LLAMA3_8B, plan)
    assert est.devices[0].component("activations") == triton
    assert (est.fact("vllm_max_num_batched_tokens"), est.fact("vllm_max_num_seqs")) == (8192, 1024)
    assert any("sampler (14 B per vocabulary entry" in n and "inside the activation peak" in n for n in est.notes)
    # below 8 rows vLLM sorts again
    assert VP.vllm_profile_bytes(LLAMA3_8B, 1, 2, tokens=8192, seqs=4) == max(
        forward, held + 4 * v * VP.vllm_sampler_bytes_per_entry(2))


def test_vllm_batch_defaults_follow_the_gpu():
    # EngineArgs.get_batch_defaults (v0.19.0): 70 GiB or more and not an A100 → 8192 / 1024; else 2048 / 256
    gib = 2**30
    assert VP.vllm_batch_defaults(int(79.2 * gib), 9.0) == (8192, 1024)     # H100 80GB
    assert VP.vllm_batch_defaults(int(79.2 * gib), 8.0) == (2048, 256)      # A100 80GB
    assert VP.vllm_batch_defaults(int(23.6 * gib), 8.9) == (2048, 256)      # RTX 4090
    assert VP.vllm_batch_defaults(int(139.8 * gib), 9.0) == (8192, 1024)    # H200
    assert VP.vllm_batch_defaults(None, None) == (8192, 1024)               # unknown: the larger peak
    small = VP.vllm_profile_bytes(LLAMA3_8B, 1, 2, tokens=2048, seqs=256, sms=128)
    large = VP.vllm_profile_bytes(LLAMA3_8B, 1, 2, tokens=8192, seqs=1024, sms=132)
    assert small < large / 3


def test_vllm_keeps_the_fused_moe_workspace_through_the_sampler():
    from estimate_specs import MIXTRAL

    # TritonExperts at tp 2: workspace13 = M × top-k × max(N/2, K), workspace2 = M × top-k × max(N, K), N = 2I/tp
    n, k, m = 2 * MIXTRAL.moe_intermediate_size // 2, MIXTRAL.hidden_size, 8192
    ws = (max(m * 2 * max(n // 2, k), m * k) + m * 2 * max(n, k)) * 2
    assert VP.vllm_moe_workspace_bytes(MIXTRAL, 2, 2, m) == ws
    assert VP.vllm_moe_workspace_bytes(LLAMA3_8B, 2, 2, m) == 0
    plain = VP.vllm_profile_bytes(MIXTRAL, 2, 2, tokens=m, seqs=1024, sms=132)
    assert VP.vllm_profile_bytes(MIXTRAL, 2, 2, tokens=m, seqs=1024, sms=132, moe_workspace=True) == plain + ws
    # v0.19.0's log for Mixtral-8x7B-Instruct at tp 2 on H100s: 1.21 GiB
    assert (plain + ws) / 2**30 == pytest.approx(1.21, rel=0.05)
