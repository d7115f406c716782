"""Stored formats are honoured (issue 21): a checkpoint's own format per tensor group is its default
and its size; a 16-bit request of a quantized checkpoint is the dequantized model; transformers
dequantizes MXFP4 where its kernels do not run; GGUF builds keep MXFP4 experts; a .gguf file's own
type is the default for that file."""

from __future__ import annotations

import functools
import json

import pytest
from click.testing import CliRunner

from fitcheck import pipeline
from fitcheck.cli import cli
from fitcheck.errors import FitcheckError
from fitcheck.estimate.formats import GGML_TYPES, MXFP4_BITS, WEIGHT_FORMATS, weight_format
from fitcheck.estimate.weights import weight_bytes
from fitcheck.model import spec as S
from fitcheck.model.resolve import resolve_model
from fitcheck.plan import resolve_inference, resolve_training
from fitcheck.profiles import load_profile
from fitcheck.request import Request
from tests.model.filegen import gguf_llama, write_gguf

# These tests read the alternatives to the default as asked (what --strict shows): with --precision and --engine
# left to fitcheck, check answers for the first of them that changes only the weights (pipeline.Chosen).
check = functools.partial(pipeline.check, choose=False)

GIB = 2**30


def spec(name):
    return resolve_model(name).spec


def gib(model, precision):
    return weight_bytes(spec(model), weight_format(precision)).total / GIB


def why(plan, name="precision"):
    return next(a for a in plan.assumptions if a.name == name).why


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


# ---- sizes: every format counted from the full-precision model -----------------------------------
def test_mxfp4_block_is_ggmls_block_mxfp4():
    t = next(t for t in GGML_TYPES.values() if t.name == "MXFP4")
    assert (t.block_size, t.type_size) == (32, 17) and MXFP4_BITS == 4.25


def test_bf16_of_gpt_oss_is_the_dequantized_model_and_mxfp4_its_stored_size():
    s = spec("gpt-oss-20b")
    assert s.stored_format == "mxfp4"
    bf16 = gib("gpt-oss-20b", "bf16")
    assert bf16 == gib("gpt-oss-20b", "fp16")
    assert abs(bf16 * GIB - 2 * s.total_params) < 2**20     # all 16-bit: ~39 GiB
    assert 38 < bf16 < 40
    groups = dict(weight_bytes(s, weight_format("mxfp4")).by_group)
    experts = next(g.params for g in s.tensor_groups() if g.kind == S.EXPERTS)
    assert groups[S.EXPERTS] == int(experts * 17 / 32)     # 4.25 bits a weight
    attn = next(g.params for g in s.tensor_groups() if g.kind == S.ATTN)
    assert groups[S.ATTN] == 2 * attn                       # attention stays bf16
    assert 12.5 < gib("gpt-oss-20b", "mxfp4") < 13.2


@pytest.mark.parametrize("precision", [p for p, f in WEIGHT_FORMATS.items() if f.family not in ("float",)])
def test_no_quantized_format_of_gpt_oss_is_larger_than_bf16(precision):
    assert gib("gpt-oss-20b", precision) < gib("gpt-oss-20b", "bf16")


def test_gguf_builds_of_gpt_oss_keep_the_experts_mxfp4():
    s = spec("gpt-oss-20b")
    experts = next(g.params for g in s.tensor_groups() if g.kind == S.EXPERTS)
    for ftype in ("q8_0", "q4_k_m", "q2_k", "mxfp4_moe"):
        groups = dict(weight_bytes(s, weight_format(ftype)).by_group)
        assert groups[S.EXPERTS] == int(experts * 17 / 32), ftype
    # MXFP4_MOE: "other tensors -> Q8_0" (8.5 bits) for attention.
    attn = next(g.params for g in s.tensor_groups() if g.kind == S.ATTN)
    assert dict(weight_bytes(s, weight_format("mxfp4_moe")).by_group)[S.ATTN] == int(attn * 34 / 32)
    # Published sizes: ggml-org's gpt-oss-20b-mxfp4.gguf ~12.1 GB, a q4_k_m ~11.6 GB.
    assert 11.0 < gib("gpt-oss-20b", "mxfp4_moe") < 11.6
    assert 10.5 < gib("gpt-oss-20b", "q4_k_m") < 11.0
    # A dense model's q4_k_m is unchanged by the rule (no experts, not stored MXFP4).
    assert weight_bytes(spec("qwen-7b"), weight_format("q4_k_m")).total < gib("qwen-7b", "q8_0") * GIB


# ---- defaults: the stored format where it runs, else the dequantized model, named -----------------
@pytest.mark.parametrize("profile,version,expected", [
    ("h100-sxm", None, "mxfp4"),      # compute capability 9.0: transformers keeps MXFP4
    ("a100-80gb", None, "bf16"),      # 8.0: dequantized unless the release says otherwise
    ("rtx-4090", None, "bf16"),
    ("rtx-3090", None, "bf16"),
    ("rtx-4090", "4.56", "mxfp4"),    # 4.56 lowered the kernels' floor to 7.5
    ("t4", "4.57", "mxfp4"),          # 7.5
    ("t4", "4.55", "fp16"),           # 4.55: >= 9.0; the T4 has no bf16
])
def test_transformers_keeps_mxfp4_only_where_its_kernels_run(profile, version, expected):
    plan = resolve_inference(Request(transformers_version=version), spec("gpt-oss-20b"), load_profile(profile))
    assert plan.precision == expected and plan.engine == "transformers" and not plan.problems
    if expected == "mxfp4":
        assert "stored format" in why(plan)
    else:
        assert why(plan).startswith("dequantized from the checkpoint's MXFP4")


def test_vllm_serves_mxfp4_natively_where_its_docs_list():
    plan = resolve_inference(Request(engine="vllm"), spec("gpt-oss-20b"), load_profile("rtx-4090"))
    assert plan.precision == "mxfp4" and not plan.problems


def test_typed_bf16_says_dequantized_and_int8_says_quantized_from_the_dequantized_base():
    s, machine = spec("gpt-oss-20b"), load_profile("rtx-4090")
    assert "dequantized from the checkpoint's MXFP4" in why(resolve_inference(Request(precision="bf16"), s, machine))
    assert "dequantized 16-bit weights" in why(resolve_inference(Request(precision="int8"), s, machine))
    assert "experts stay MXFP4" in why(resolve_inference(Request(precision="q4_k_m"), s, machine))


def test_fp8_checkpoint_stored_format_is_the_default_and_named():
    s = spec("deepseek-v3")
    assert s.stored_format == "fp8"
    on_h100 = resolve_inference(Request(), s, load_profile("h100-sxm"))
    assert on_h100.precision == "fp8" and "stored format (fp8)" in why(on_h100)
    on_a100 = resolve_inference(Request(), s, load_profile("a100-80gb"))
    assert on_a100.precision == "bf16" and why(on_a100).startswith("dequantized from the checkpoint's FP8")


def test_mxfp4_is_refused_for_a_model_not_stored_in_it():
    with pytest.raises(FitcheckError, match="stored format of MXFP4 checkpoints"):
        resolve_inference(Request(precision="mxfp4"), spec("qwen-7b"), load_profile("h100-sxm"))
    result = run("qwen-7b", "-p", "mxfp4_moe", "--profile", "rtx-4090")
    assert result.exit_code == 2 and "not stored in it" in result.output


# ---- alternatives: never a bigger format offered as smaller ---------------------------------------
def test_alternatives_for_gpt_oss_on_a_4090_start_with_the_checkpoints_own_mxfp4():
    result = check("gpt-oss-20b", Request(), load_profile("rtx-4090"))
    assert result.plan.precision == "bf16" and result.verdict.status == "does_not_fit"
    first = result.alternatives[0]
    assert first.plan.precision == "mxfp4" and first.title.startswith("Keep the checkpoint's own MXFP4")
    # transformers keeps MXFP4 only with its kernels (named); vLLM serves it as stored (the faster route)
    assert "kernels" in first.title if first.plan.engine == "transformers" else first.plan.engine == "vllm"


@pytest.mark.parametrize("precision", ["int8", "mxfp4", "nf4"])
def test_no_alternative_precision_is_larger_than_the_plans(precision):
    s = spec("gpt-oss-20b")
    result = check("gpt-oss-20b", Request(precision=precision), load_profile("rtx-3060"))
    current = weight_bytes(s, weight_format(result.plan.precision)).total
    for alt in result.alternatives:
        if alt.plan.precision != result.plan.precision:
            assert weight_bytes(s, weight_format(alt.plan.precision)).total < current, alt.title


# ---- training: transformers trains on the dequantized base ---------------------------------------
def test_lora_on_gpt_oss_trains_on_the_dequantized_base_and_does_not_fit_a_4090():
    s = spec("gpt-oss-20b")
    plan = resolve_training(Request(mode="lora", grad_checkpointing=True), s, load_profile("rtx-4090"))
    assert plan.precision == "bf16" and "dequantized from the checkpoint's MXFP4" in why(plan)
    result = check("gpt-oss-20b", Request(mode="lora", grad_checkpointing=True), load_profile("rtx-4090"))
    weights = next(c.bytes for c in result.estimate.devices[0].components if c.name == "weights")
    assert weights / GIB > 38
    assert result.verdict.status == "does_not_fit"
    assert result.alternatives and result.alternatives[0].plan.mode == "qlora"


# ---- a .gguf file's own type is the default for that file ----------------------------------------
def _f16_gguf(tmp_path):
    meta, tensors = gguf_llama(wtype="F16", file_type=1)
    tensors = {k: ("F16" if t == "Q6_K" else t, dims) for k, (t, dims) in tensors.items()}
    return write_gguf(tmp_path / "tiny-F16.gguf", meta, tensors)


@pytest.mark.parametrize("profile", ["rtx-4090", "laptop-16gb"])
def test_an_f16_gguf_defaults_to_its_own_type_with_llama_cpp(tmp_path, profile):
    path = _f16_gguf(tmp_path)
    doc = json.loads(run(path, "--profile", profile, "--json").output)
    assert doc["request"]["precision"] == "fp16" and doc["request"]["engine"] == "llama.cpp"
    resolved = resolve_model(str(path))
    result = check(resolved, Request(), load_profile(profile), alternatives=False, search=False)
    weights = sum(c.bytes for d in result.estimate.devices for c in d.components if c.name == "weights")
    assert abs(weights - resolved.spec.stored_weight_bytes) <= 2  # the file's exact bytes (split GPU/RAM)
    assert "this file's own type (F16)" in why(result.plan)


def test_a_different_precision_of_a_gguf_file_is_named_as_a_different_file(tmp_path):
    path = _f16_gguf(tmp_path)
    result = check(resolve_model(str(path)), Request(precision="q4_k_m"), load_profile("rtx-4090"),
                   alternatives=False, search=False)
    assert result.plan.engine == "llama.cpp"
    assert "this file is F16: -p q4_k_m means a different file" in why(result.plan)


def test_an_mxfp4_moe_gguf_defaults_to_its_type(tmp_path):
    arch, hidden, heads, kv, d, experts, ff, layers = "gpt-oss", 256, 4, 2, 64, 4, 256, 2
    meta = {"general.architecture": arch, "general.file_type": 38,
            f"{arch}.block_count": layers, f"{arch}.context_length": 131072,
            f"{arch}.embedding_length": hidden, f"{arch}.feed_forward_length": ff,
            f"{arch}.attention.head_count": heads, f"{arch}.attention.head_count_kv": kv,
            f"{arch}.attention.key_length": d, f"{arch}.attention.value_length": d,
            f"{arch}.expert_count": experts, f"{arch}.expert_used_count": 2,
            f"{arch}.expert_feed_forward_length": ff}
    t = {"token_embd.weight": ("Q8_0", [hidden, 512])}
    for i in range(layers):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = ("F32", [hidden])
        for n, width in (("attn_q", heads * d), ("attn_k", kv * d), ("attn_v", kv * d)):
            t[p + n + ".weight"] = ("Q8_0", [hidden, width])
        t[p + "attn_output.weight"] = ("Q8_0", [heads * d, hidden])
        t[p + "ffn_norm.weight"] = ("F32", [hidden])
        t[p + "ffn_gate_inp.weight"] = ("F32", [hidden, experts])
        for n, dims in (("ffn_gate_exps", [hidden, ff, experts]), ("ffn_up_exps", [hidden, ff, experts]),
                        ("ffn_down_exps", [ff, hidden, experts])):
            t[p + n + ".weight"] = ("MXFP4", dims)
    t["output_norm.weight"] = ("F32", [hidden])
    t["output.weight"] = ("Q8_0", [hidden, 512])
    path = write_gguf(tmp_path / "gpt-oss-mxfp4.gguf", meta, t)
    plan = check(resolve_model(str(path)), Request(), load_profile("h100-sxm"), alternatives=False,
                 search=False).plan
    assert (plan.precision, plan.engine) == ("mxfp4_moe", "llama.cpp")


def test_a_gguf_type_without_mixture_rules_counts_its_exact_bytes_under_the_nearest_type(tmp_path):
    meta, tensors = gguf_llama(wtype="Q4_K", file_type=14)  # LLAMA_FTYPE_MOSTLY_Q4_K_S
    resolved = resolve_model(str(write_gguf(tmp_path / "tiny-Q4_K_S.gguf", meta, tensors)))
    assert resolved.spec.stored_file_type == "Q4_K_S"
    result = check(resolved, Request(), load_profile("laptop-16gb"), alternatives=False, search=False)
    assert (result.plan.precision, result.plan.engine) == ("q4_k_m", "llama.cpp")
    assert "this file's own type (Q4_K_S: its exact bytes" in why(result.plan)
    weights = sum(c.bytes for d in result.estimate.devices for c in d.components if c.name == "weights")
    assert abs(weights - resolved.spec.stored_weight_bytes) <= 2


def test_the_json_names_the_stored_format(tmp_path):
    doc = json.loads(run("gpt-oss-20b", "--profile", "rtx-4090", "--json").output)
    assert doc["model"]["stored_format"] == "mxfp4" and doc["model"]["stored_file_type"] is None
    doc = json.loads(run(_f16_gguf(tmp_path), "--json").output)
    assert doc["model"]["stored_format"] == "fp16" and doc["model"]["stored_file_type"] == "F16"


def test_commands_load_a_dequantized_mxfp4_checkpoint_with_mxfp4config():
    from fitcheck.commands import engine_command

    s = spec("gpt-oss-20b")
    plan = resolve_inference(Request(precision="bf16"), s, load_profile("h100-sxm"))
    assert "quantization_config=Mxfp4Config(dequantize=True)" in engine_command("openai/gpt-oss-20b", plan)
    kept = resolve_inference(Request(), s, load_profile("h100-sxm"))
    assert kept.precision == "mxfp4" and "Mxfp4Config" not in engine_command("openai/gpt-oss-20b", kept)
    lora = resolve_training(Request(mode="lora"), s, load_profile("h100-sxm"))
    assert "Mxfp4Config(dequantize=True)" in engine_command("openai/gpt-oss-20b", lora)
    assert "Mxfp4Config" not in engine_command("Qwen/Qwen2.5-7B-Instruct", resolve_inference(
        Request(), spec("qwen-7b"), load_profile("h100-sxm")))


def test_llama_cpps_16_bit_gguf_of_gpt_oss_keeps_the_experts_mxfp4():
    s = spec("gpt-oss-20b")
    result = check("gpt-oss-20b", Request(precision="bf16", engine="llama.cpp"), load_profile("h100-sxm"),
                   alternatives=False, search=False)
    weights = sum(c.bytes for d in result.estimate.devices for c in d.components if c.name == "weights")
    assert abs(weights - weight_bytes(s, weight_format("mxfp4")).total) < 2**20   # ~12.8 GiB, not ~39
    assert "experts stay MXFP4" in why(result.plan)


@pytest.mark.parametrize("name", ["gpt-oss:20b-q4_K_M", "unsloth/gpt-oss-20b-GGUF:Q4_K_M"])
def test_builds_named_by_their_gguf_type_keep_the_bases_mxfp4_experts(name, monkeypatch):
    # the offline answer (tests never need the network): with huggingface_hub installed (transformers brings
    # it) the repository name was looked up on the Hub, 23 s of retries without a network
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    s = resolve_model(name).spec
    assert s.stored_format == "q4_k_m" and s.stored_groups() == {S.EXPERTS: "mxfp4"}
    assert weight_bytes(s, weight_format("q4_k_m")).total == weight_bytes(spec("gpt-oss-20b"),
                                                                          weight_format("q4_k_m")).total


def test_a_dequantized_plan_offers_the_checkpoints_own_format_with_vllm():
    result = check("gpt-oss-120b", Request(), load_profile("a100-80gb"))
    assert result.plan.precision == "bf16" and result.verdict.status == "does_not_fit"
    vllm = [a for a in result.alternatives if a.plan.engine == "vllm" and a.plan.precision == "mxfp4"]
    assert vllm and "checkpoint's own MXFP4" in vllm[0].title and "vLLM" in vllm[0].title
    assert vllm[0].verdict.status in ("fits", "tight")


def test_vllm_loads_an_mxfp4_checkpoint_as_stored_whatever_the_dtype():
    s = spec("gpt-oss-20b")
    result = check("gpt-oss-20b", Request(precision="bf16", engine="vllm"), load_profile("h100-sxm"),
                   alternatives=False, search=False)
    weights = sum(c.bytes for d in result.estimate.devices for c in d.components if c.name == "weights")
    rope = s.rope_table_elements() * 4  # vLLM's rotary cos/sin cache (fp32 for gpt-oss), beside the parameters
    assert abs(weights - weight_bytes(s, weight_format("mxfp4")).total - rope) < 2**20
    assert "vLLM loads the checkpoint's MXFP4 experts as stored" in why(result.plan)


def test_ollamas_gpt_oss_tag_is_the_published_mxfp4_experts_with_the_rest_bf16():
    resolved = resolve_model("gpt-oss:20b")
    assert "the published MXFP4 experts, the rest BF16" in resolved.note
    result = check(resolved, Request(), load_profile("h100-sxm"), alternatives=False, search=False)
    assert (result.plan.precision, result.plan.engine) == ("bf16", "llama.cpp")
    weights = sum(c.bytes for d in result.estimate.devices for c in d.components if c.name == "weights")
    assert 12.5 < weights / GIB < 13.2           # ollama.com lists gpt-oss:20b at 14 GB
    # Other Ollama tags: the tag's GGUF type, with llama.cpp.
    plan = check(resolve_model("qwen2.5:7b"), Request(), load_profile("h100-sxm"), alternatives=False,
                 search=False).plan
    assert (plan.precision, plan.engine) == ("q4_k_m", "llama.cpp")


def _weights_bytes(model, request, profile="h100-sxm"):
    result = check(model, request, load_profile(profile), alternatives=False, search=False)
    return sum(c.bytes for d in result.estimate.devices for c in d.components if c.name == "weights"), result


def test_a_tied_models_fp8_checkpoint_under_transformers_holds_lm_head_apart():
    """Qwen3-0.6B-FP8 under transformers: the bf16 lm_head of the FP8 checkpoint beside the bf16 embedding
    (the Qwen3 speed benchmark's FP8 rows); vLLM and SGLang keep the tie; the download holds the head."""
    s = spec("Qwen/Qwen3-0.6B")
    assert s.tie_word_embeddings and "fp8" in s.prequantized
    head = s.vocab_size * s.hidden_size * 2
    tied = weight_bytes(s, weight_format("fp8")).total
    hf, result = _weights_bytes("Qwen/Qwen3-0.6B", Request(precision="fp8", engine="transformers"))
    assert hf - tied == pytest.approx(head, abs=2**20)
    assert result.download.artifact.bytes == pytest.approx(tied + head, abs=2**20)
    for engine in ("vllm", "sglang"):
        served, _ = _weights_bytes("Qwen/Qwen3-0.6B", Request(precision="fp8", engine=engine))
        assert served < tied + head / 2, engine


def test_a_tied_model_without_an_fp8_checkpoint_is_quantized_at_load_and_keeps_the_tie():
    from fitcheck.commands import engine_command

    s = spec("Qwen/Qwen2.5-0.5B-Instruct")
    assert s.tie_word_embeddings and "fp8" not in s.prequantized
    hf, result = _weights_bytes("Qwen/Qwen2.5-0.5B-Instruct", Request(precision="fp8", engine="transformers"))
    assert hf < weight_bytes(s, weight_format("fp8")).total + 2**20
    command = engine_command("Qwen/Qwen2.5-0.5B-Instruct", result.plan)
    assert "from transformers import AutoModelForCausalLM, FineGrainedFP8Config" in command
    assert "quantization_config=FineGrainedFP8Config()" in command
    prequantized = engine_command("Qwen/Qwen3-0.6B", resolve_inference(
        Request(precision="fp8", engine="transformers"), spec("Qwen/Qwen3-0.6B"), load_profile("h100-sxm")),
        {"fp8": "Qwen/Qwen3-0.6B-FP8"})
    assert "'Qwen/Qwen3-0.6B-FP8'" in prequantized and "FineGrainedFP8Config" not in prequantized
