"""Hugging Face transformers: `AutoModelForCausalLM.from_pretrained(...)` and `generate()`, on any device.

Its rows of the capability table, its memory model (fitcheck.engines.transformers.memory: every sequence of the
batch resident, `device_map="auto"` layer split), what each release changes (releases), generate()'s per-step
tensors (generate_step), its host-bound decode (speed) and the command that loads a plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fitcheck.engines.base import RESIDENT, Engine
from fitcheck.engines.capabilities import ANY, AWQ, BNB, BNB_INT8, CUDA, FP8, GPTQ, XPU, Runs, has_bf16
from fitcheck.engines.checkpoints import hf_checkpoint_known, needs_checkpoint, quantized_repo
from fitcheck.engines.transformers import releases
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.generate_step import AUTO_SAMPLING, DEFAULT_SAMPLING, sampling_for
from fitcheck.estimate.weights import weight_bytes

if TYPE_CHECKING:
    from fitcheck.estimate.kv_cache import SlidingCache
    from fitcheck.estimate.weights import WeightBytes
    from fitcheck.model.spec import ModelSpec
    from fitcheck.plan import Plan

# transformers' MXFP4 kernels (releases.MXFP4_KERNELS_MIN_CC): CUDA or an Intel XPU.
MXFP4 = Runs(frozenset({CUDA, XPU}), releases.MXFP4_KERNELS_MIN_CC,
             why="transformers' MXFP4 kernels (triton >= 3.4, kernels)")
# transformers' attn_implementation names.
HF_ATTENTION = {"flash": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}
# GPTQ/AWQ kernels compute in float16.
_DTYPES = {"fp32": "torch.float32", "fp16": "torch.float16", "awq": "torch.float16", "gptq-int4": "torch.float16",
           "gptq-int8": "torch.float16", "int4": "torch.float16"}


class Transformers(Engine):
    name = "transformers"
    title = "transformers"
    runs = ANY
    precisions = {"fp32": ANY, "bf16": ANY, "fp16": ANY, "fp8": FP8, "int8": BNB_INT8, "nf4": BNB,
                  "gptq-int4": GPTQ, "gptq-int8": GPTQ, "int4": GPTQ, "awq": AWQ, "mxfp4": MXFP4}
    kv_dtypes = ("fp16", "bf16", "fp32")
    splits = "layers"
    kv_mla_latent = False
    batch = RESIDENT
    distribution = "transformers"
    lower_precisions = ("mxfp4", "int8", "awq", "gptq-int4", "nf4")

    def stored_needs(self, precision: str) -> str:
        return releases.MXFP4_TRANSFORMERS_NEEDS if precision == "mxfp4" else ""

    def default_why(self, precision: str) -> str:
        return "GPU with a non-GGUF precision"

    def keeps_stored(self, name: str, kind: str, cc: float | None,
                     transformers_version: str | None) -> tuple[bool, str] | None:
        """transformers dequantizes MXFP4 experts to bf16 where its kernels do not run (releases.keeps_mxfp4)."""
        if name != "mxfp4" or kind != CUDA:
            return None
        if releases.keeps_mxfp4(cc, transformers_version):
            return True, ""
        return False, ("transformers keeps MXFP4 experts packed with its triton kernels on compute capability "
                       f">= {releases.MXFP4_TRANSFORMERS_DEFAULT_CC:g} (7.5 from 4.56 with the kernels package: "
                       "-p mxfp4 to count that) and dequantizes them elsewhere")

    def settings(self, step: Any) -> None:
        """The release's prefill logits, default attention, generate()'s sampling and KV cache; the attention
        kernel where it does not run here; an MXFP4 checkpoint loaded at 16/32 bits is dequantized."""
        from fitcheck.engines.capabilities import ATTENTION_RUNS, here_text

        req, spec = step.req, step.spec
        logits, why = releases.logits_mode(spec.architecture, req.transformers_version)
        step.note("logits", logits, why, "--transformers-version")
        attention, why = releases.attention_mode(spec.architecture, req.transformers_version, req.attention)
        step.note("attention", attention, why, "--attention")
        sampling, why = sampling_mode(req.sampling, spec)
        step.note("sampling", sampling, why, "--sampling")
        kernel = ATTENTION_RUNS[attention].problem(step.kind, step.cc)
        if kernel:
            step.problem(f"--attention {attention}: {kernel}" + here_text(step.kind, None))
        step.fields.update(logits=logits, attention=attention, sampling=sampling,
                           legacy_cache=releases.legacy_cache_mode(spec.architecture, req.transformers_version),
                           transformers_version=req.transformers_version,
                           dequantize=dequantize(spec, step.precision))

    # ---- speed: eager PyTorch, launch-bound (fitcheck.engines.transformers.speed) --------------------
    def host_overhead(self, spec: ModelSpec | None, precision: str) -> Any:
        from fitcheck.engines.transformers.speed import host_overhead

        return host_overhead(precision)

    def host_layers(self, spec: ModelSpec, batch: int, transformers_version: str | None) -> float:
        from fitcheck.engines.transformers.speed import host_layers

        return host_layers(spec, batch, transformers_version)

    def serial_host(self, spec: ModelSpec, precision: str, transformers_version: str | None) -> bool:
        from fitcheck.engines.transformers.speed import host_serialises

        return host_serialises(spec, precision, transformers_version)

    def extra_host(self, spec: ModelSpec, precision: str, batch: int, transformers_version: str | None,
                   host: Any) -> Any:
        from fitcheck.engines.transformers.speed import SERIAL_HOST_PRECISIONS, fp8_linear_host

        return fp8_linear_host(spec, batch, transformers_version, host) if precision in SERIAL_HOST_PRECISIONS \
            else None

    def kv_traffic(self, spec: ModelSpec) -> Any:
        from fitcheck.engines.transformers.speed import kv_traffic

        return kv_traffic(spec)

    def weights(self, spec: ModelSpec, precision: str) -> WeightBytes:
        return weight_bytes(spec, self.weight_format(spec, precision),
                            untie_lm_head=separate_fp8_head(spec, precision))

    def sliding_cache(self, spec: ModelSpec, *, tokens: int, prompt_tokens: int | None = None,
                      transformers_version: str | None = None, batched_tokens: int | None = None) -> SlidingCache:
        return releases.sliding_cache(spec, tokens=tokens, prompt_tokens=prompt_tokens,
                                      transformers_version=transformers_version)

    def memory(self, spec: ModelSpec, plan: Plan) -> Any:
        from fitcheck.engines.transformers.memory import memory

        return memory(self, spec, plan)

    def checkpoint_known(self, spec: ModelSpec, plan: Plan) -> bool:
        return hf_checkpoint_known(spec, plan)

    def command(self, model_id: str, plan: Plan, repos: Mapping[str, str], local: bool = False) -> str:
        return command(model_id, plan, repos)


def sampling_mode(requested: str | None, spec: ModelSpec) -> tuple[str, str]:
    """How transformers' generate() picks each token, and why: --sampling when given; else what the
    checkpoint's generation_config.json makes generate() run (fitcheck.model.generation_config); else
    the default (do_sample with temperature, top-k and top-p, the larger of the common cases)."""
    if requested and requested != AUTO_SAMPLING:
        return requested, "from --sampling"
    g = spec.generation
    default = "generate() with do_sample, temperature, top-k and top-p, the larger of the common cases"
    if g is None:
        return DEFAULT_SAMPLING, f"default (no generation_config.json read): {default}"
    if g.problem:
        return DEFAULT_SAMPLING, f"default ({g.source}: {g.problem}): {default}"
    if g.num_beams and g.num_beams > 1:
        return DEFAULT_SAMPLING, f"default (generation_config.json asks for beam search, not modelled): {default}"
    why = f"from generation_config.json: {g.describe()} ({g.source})"
    if g.unmodelled:
        why += f"; its {', '.join(g.unmodelled)} warper{'s' if len(g.unmodelled) > 1 else ''} not counted"
    return sampling_for(g.sampled, g.warpers(), g.processors()), why


def dequantize(spec: ModelSpec, precision: str) -> str:
    """'mxfp4' when transformers loads an MXFP4 checkpoint as 16/32-bit weights: Mxfp4Config(dequantize=True)
    makes it so on every GPU (where its kernels run it would otherwise keep the experts packed)."""
    return "mxfp4" if spec.stored_format == "mxfp4" and weight_format(precision).family == "float" else ""


def separate_fp8_head(spec: ModelSpec, precision: str) -> bool:
    """transformers holds a tied-embedding model's pre-quantized FP8 checkpoint with lm_head on its own.

    The quantizer leaves lm_head unquantized (`ignore: ["lm_head"]` in llm-compressor's FP8 recipes;
    `modules_to_not_convert` in the fine-grained FP8 configs) and the checkpoint stores it as a bf16
    tensor next to the bf16 embedding (Qwen3-0.6B/1.7B/4B-FP8 carry `lm_head.weight`).  Measured under
    transformers 4.51.3: the Qwen3 speed benchmark's FP8 rows of the three tied models sit one bf16
    vocabulary × hidden matrix (297 / 594 / 742 MiB) above their tied count, within 63 MiB
    (benchmarks/data/qwen3_speed_benchmark.csv; the untied 8B/14B/32B read within 0.7 %).
    vLLM and SGLang keep the tie: their Qwen2/Qwen3/Llama classes point lm_head at embed_tokens when
    the config ties and skip the checkpoint's `lm_head.` tensors
    (https://github.com/vllm-project/vllm/blob/002456df36fc7a63ca4463f335a49d05634ab2ab/vllm/model_executor/models/qwen3.py,
    `Qwen3ForCausalLM.__init__` and `load_weights(skip_prefixes=["lm_head."])`).  A pre-quantized
    checkpoint is what transformers loads: the model's own FP8 files, or the catalog's FP8 repository
    (:func:`command` prints it); without one, `FineGrainedFP8Config()` quantizes the 16-bit checkpoint
    at load, leaving lm_head out of the conversion and tied.
    """
    return (precision == "fp8" and spec.tie_word_embeddings
            and (spec.stored_format == "fp8" or "fp8" in spec.prequantized))


def attention_typed(plan: Plan) -> bool:
    """Whether the plan's attention came from --attention (a release's default reproduces itself)."""
    return any(a.name == "attention" and a.why == "from --attention" for a in plan.assumptions)


def command(model_id: str, plan: Plan, repos: Mapping[str, str]) -> str:
    """`python -c "... AutoModelForCausalLM.from_pretrained(...)"` for the plan."""
    repo, prequantized = quantized_repo(model_id, plan.precision, repos)
    comment = needs_checkpoint(model_id, plan.precision) if (
        weight_format(plan.precision).family in ("gptq", "awq") and not prequantized) else ""
    if plan.precision == "mxfp4":
        comment = (f"  # MXFP4 experts stay packed with {releases.MXFP4_TRANSFORMERS_NEEDS}; else they load "
                   "dequantized to bf16")
    dtype = _DTYPES.get(plan.precision, "torch.bfloat16")
    if dtype == "torch.bfloat16" and plan.device != "cpu" and not has_bf16(CUDA, plan.compute_capability):
        dtype = "torch.float16"  # bitsandbytes' compute dtype on a GPU with no bf16 (T4, V100: cc < 8.0)
    extra = ""
    if plan.precision == "nf4":
        extra = (", quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', "
                 "bnb_4bit_use_double_quant=True)")
    elif plan.precision == "int8":
        extra = ", quantization_config=BitsAndBytesConfig(load_in_8bit=True)"
    elif plan.dequantize == "mxfp4":
        extra = ", quantization_config=Mxfp4Config(dequantize=True)"
    elif plan.precision == "fp8" and not prequantized and not plan.stored_format:
        # no FP8 checkpoint known: quantize the 16-bit one at load, 128×128 blocks (transformers >= 4.50,
        # integrations/finegrained_fp8.py); lm_head stays out of the conversion and tied
        extra = ", quantization_config=FineGrainedFP8Config()"
    config = next((c for c in ("BitsAndBytesConfig", "Mxfp4Config", "FineGrainedFP8Config") if c in extra), "")
    bnb = f", {config}" if config else ""
    if attention_typed(plan):
        extra += f", attn_implementation='{HF_ATTENTION.get(plan.attention, plan.attention)}'"
    device_map = "'cpu'" if plan.device == "cpu" else "'auto'"
    return (f"python -c \"from transformers import AutoModelForCausalLM{bnb}; "
            f"import torch; AutoModelForCausalLM.from_pretrained('{repo}', torch_dtype={dtype}, "
            f"device_map={device_map}{extra})\"" + comment)


ENGINE = Transformers()
