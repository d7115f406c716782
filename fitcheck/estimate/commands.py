"""The commands that run a configuration: fitcheck's own and the engine's (vLLM, llama.cpp,
transformers).  Pure string building from a Plan; shlex-quoted."""

from __future__ import annotations

import shlex

from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.request import DEFAULT_CONTEXT, DEFAULT_GPU_MEMORY_UTILIZATION, Plan


def fitcheck_command(model: str, plan: Plan, *, profile: str | None = None, extra: tuple[str, ...] = ()) -> str:
    """`fitcheck MODEL ...` reproducing `plan` (only options that differ from defaults, plus the precision)."""
    args = ["fitcheck", model, "--precision", plan.precision]
    if plan.context != DEFAULT_CONTEXT:
        args += ["--context", str(plan.context)]
    if plan.prompt_tokens != plan.context:
        args += ["--prompt", str(plan.prompt_tokens)]
    if plan.batch != 1:
        args += ["--batch", str(plan.batch)]
    args += ["--engine", plan.engine]
    if plan.device == "cpu":
        args += ["--device", "cpu"]
    if plan.gpus > 1:
        args += ["--gpus", str(plan.gpus)]
    if plan.gpu_layers is not None and plan.device == "offload":
        args += ["--gpu-layers", str(plan.gpu_layers)]
    if plan.kv_dtype in ("fp8", "q8_0", "q4_0"):
        args += ["--kv-dtype", plan.kv_dtype]
    if plan.engine == "transformers" and plan.transformers_version:
        args += ["--transformers-version", plan.transformers_version]
    if plan.engine == "transformers" and attention_typed(plan):
        args += ["--attention", plan.attention]
    if plan.engine == "vllm" and plan.gpu_memory_utilization != DEFAULT_GPU_MEMORY_UTILIZATION:
        args += ["--gpu-memory-utilization", f"{plan.gpu_memory_utilization:g}"]
    if profile:
        args += ["--profile", profile]
    args += list(extra)
    return shlex.join(args)


def attention_typed(plan: Plan) -> bool:
    """Whether the plan's attention came from --attention (a release's default reproduces itself)."""
    return any(a.name == "attention" and a.why == "from --attention" for a in plan.assumptions)


_HF_QUANT_KEYS = {"awq": "awq", "gptq-int4": "gptq-int4", "int4": "gptq-int4", "gptq-int8": "gptq-int8", "fp8": "fp8"}


def engine_command(model_id: str, plan: Plan, quantized_repos: dict[str, str] | None = None) -> str:
    """The command that serves `plan` with its engine."""
    repos = quantized_repos or {}
    if plan.engine == "vllm":
        return _vllm(model_id, plan, repos)
    if plan.engine == "llama.cpp":
        return _llama_cpp(model_id, plan, repos)
    return _transformers(model_id, plan, repos)


def _quantized_repo(model_id: str, precision: str, repos: dict[str, str]) -> tuple[str, bool]:
    key = _HF_QUANT_KEYS.get(precision)
    if key and key in repos:
        return repos[key], True
    return model_id, False


def _needs_checkpoint(model_id: str, precision: str) -> str:
    """A trailing shell comment when no pre-quantized repository of this model is known."""
    return f"  # {model_id} as a pre-quantized {precision.upper()} checkpoint: none known to fitcheck, use one you trust"


def _vllm(model_id: str, plan: Plan, repos: dict[str, str]) -> str:
    repo, prequantized = _quantized_repo(model_id, plan.precision, repos)
    args = ["vllm", "serve", repo, "--max-model-len", str(plan.context)]
    if plan.batch > 1:
        args += ["--max-num-seqs", str(plan.batch)]
    fmt = weight_format(plan.precision)
    comment = ""
    if plan.precision == "fp8" and not prequantized:
        args += ["--quantization", "fp8"]  # online dynamic FP8 quantization of a 16-bit checkpoint
    elif fmt.family in ("gptq", "awq") and not prequantized:
        comment = _needs_checkpoint(model_id, plan.precision)
    elif plan.precision in ("int8", "nf4"):
        args += ["--quantization", "bitsandbytes"]
    elif plan.precision in ("fp16", "fp32"):
        args += ["--dtype", {"fp16": "float16", "fp32": "float32"}[plan.precision]]
    if plan.kv_dtype == "fp8":
        args += ["--kv-cache-dtype", "fp8"]
    if plan.gpus > 1:
        args += ["--tensor-parallel-size", str(plan.gpus)]
    if plan.gpu_memory_utilization != DEFAULT_GPU_MEMORY_UTILIZATION:
        args += ["--gpu-memory-utilization", f"{plan.gpu_memory_utilization:g}"]
    return shlex.join(args) + comment


def _llama_cpp(model_id: str, plan: Plan, repos: dict[str, str]) -> str:
    quant = plan.precision.upper() if weight_format(plan.precision).gguf else plan.precision.upper().replace("BF16", "BF16")
    if "gguf" in repos:
        src = ["-hf", f"{repos['gguf']}:{quant}"]
    else:
        base = model_id.split("/")[-1]
        src = ["-m", f"{base}-{quant}.gguf"]
    args = ["llama-server", *src, "-c", str(plan.context * plan.batch)]
    if plan.batch > 1:
        args += ["-np", str(plan.batch)]
    if plan.device == "cpu":
        args += ["-ngl", "0"]
    elif plan.gpu_layers is not None:
        args += ["-ngl", str(plan.gpu_layers)]
    else:
        args += ["-ngl", "999"]
    if plan.kv_dtype in ("q8_0", "q4_0"):
        args += ["-fa", "on", "-ctk", plan.kv_dtype, "-ctv", plan.kv_dtype]
    return shlex.join(args)


def _transformers(model_id: str, plan: Plan, repos: dict[str, str]) -> str:
    repo, prequantized = _quantized_repo(model_id, plan.precision, repos)
    comment = _needs_checkpoint(model_id, plan.precision) if (
        weight_format(plan.precision).family in ("gptq", "awq") and not prequantized) else ""
    # GPTQ/AWQ kernels compute in float16.
    dtype = {"fp32": "torch.float32", "fp16": "torch.float16", "awq": "torch.float16", "gptq-int4": "torch.float16",
             "gptq-int8": "torch.float16", "int4": "torch.float16"}.get(plan.precision, "torch.bfloat16")
    extra = ""
    if plan.precision == "nf4":
        extra = (", quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', "
                 "bnb_4bit_use_double_quant=True)")
    elif plan.precision == "int8":
        extra = ", quantization_config=BitsAndBytesConfig(load_in_8bit=True)"
    if attention_typed(plan):
        impl = {"flash": "flash_attention_2"}.get(plan.attention, plan.attention)
        extra += f", attn_implementation='{impl}'"
    device_map = "'cpu'" if plan.device == "cpu" else "'auto'"
    return (f"python -c \"from transformers import AutoModelForCausalLM{', BitsAndBytesConfig' if 'BitsAndBytes' in extra else ''}; "
            f"import torch; AutoModelForCausalLM.from_pretrained('{repo}', torch_dtype={dtype}, "
            f"device_map={device_map}{extra})\"" + comment)
