"""`fitcheck check MODEL` (and `fitcheck MODEL`): will it run here, and if not, what will?"""

from __future__ import annotations

import click

from fitcheck.cli.options import json_option, load_machine, profile_option

PRECISION_CHOICES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4", "gptq-int4", "gptq-int8", "awq", "nf4",
                     "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0", "q3_k_m", "q2_k")


@click.command("check")
@click.argument("model")
@click.option("--mode", type=click.Choice(["inference"]), default="inference", show_default=True,
              help="What to estimate.")
@click.option("--precision", "-p", type=click.Choice(PRECISION_CHOICES, case_sensitive=False), default=None,
              help="Weights format. Default: bf16 on GPUs with compute capability >= 8.0 and Apple, fp16 on "
                   "older GPUs, q4_k_m on CPU-only machines; a checkpoint read from files keeps its format.")
@click.option("--context", "-c", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Tokens per sequence, prompt plus generated (not the model's maximum).")
@click.option("--batch", "-b", type=click.IntRange(min=1), default=1, show_default=True, help="Concurrent sequences.")
@click.option("--kv-dtype", type=click.Choice(["auto", "fp16", "bf16", "fp8", "q8_0", "q4_0"]), default="auto",
              show_default=True, help="KV-cache element type.")
@click.option("--engine", type=click.Choice(["transformers", "vllm", "llama.cpp"]), default=None,
              help="Default: llama.cpp for GGUF types and CPU-only machines, transformers otherwise.")
@click.option("--gpu-memory-utilization", type=click.FloatRange(0.05, 1.0), default=0.9, show_default=True,
              help="vLLM's reservation, a fraction of total GPU memory.")
@click.option("--gpus", type=click.IntRange(min=1), default=None, help="GPUs to use (tensor parallel with vLLM).")
@click.option("--device", type=click.Choice(["auto", "gpu", "cpu"]), default="auto", show_default=True)
@click.option("--gpu-layers", "-ngl", type=click.IntRange(min=0), default=None,
              help="llama.cpp: layers on the GPU (partial offload); the rest run from RAM.")
@click.option("--headroom", type=click.FloatRange(0, 99), default=10.0, show_default=True,
              help="Safety margin, percent of free memory kept unused.")
@click.option("--strict", is_flag=True, help="Exit 1 when it fits only inside the headroom (tight).")
@click.option("--params", default=None, metavar="COUNT",
              help="For a model fitcheck does not know: its parameter count (7b, 1.5b) for a generic estimate.")
@profile_option
@json_option
@click.pass_context
def check(ctx: click.Context, model: str, mode: str, precision: str | None, context: int, batch: int, kv_dtype: str,
          engine: str | None, gpu_memory_utilization: float, gpus: int | None, device: str, gpu_layers: int | None,
          headroom: float, strict: bool, params: str | None, profile: str | None, as_json: bool) -> None:
    """Will MODEL run here? Estimate the memory, give a verdict, and list what fits instead.

    MODEL is a catalog name (qwen-7b, llama3-8b), a Hugging Face id, or a local folder,
    config.json, .safetensors or .gguf file.

    \b
    Examples:
      fitcheck qwen-7b
      fitcheck llama-3.1-8b --context 32768 --profile rtx-4090
      fitcheck mistral-7b -p awq --engine vllm --batch 16 --json

    Exit codes: 0 fits, 1 does not fit (or tight with --strict), 2 bad input, 3 unknown.
    """
    from fitcheck.check import check_inference
    from fitcheck.estimate.request import InferenceRequest
    from fitcheck.model.resolve import resolve_model

    resolved = resolve_model(model, params=params) if params else resolve_model(model)
    request = InferenceRequest(precision=precision, context=context, batch=batch, kv_dtype=kv_dtype, engine=engine,
                               gpus=gpus, device=device, gpu_layers=gpu_layers,
                               gpu_memory_utilization=gpu_memory_utilization)
    machine = load_machine(profile)
    result = check_inference(resolved, request, machine, headroom=headroom / 100)
    if as_json:
        import json

        from fitcheck.render.check import check_document

        click.echo(json.dumps(check_document(result), indent=2, sort_keys=True))
    else:
        from fitcheck.render.check import render_check_table

        click.echo(render_check_table(result))
    code = result.exit_code
    if strict and result.verdict.status == "tight":
        code = 1
    ctx.exit(code)
