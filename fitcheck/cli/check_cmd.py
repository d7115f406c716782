"""`fitcheck check MODEL` (and `fitcheck MODEL`): will it run here, and if not, what will?"""

from __future__ import annotations

import click

from fitcheck.cli.options import (
    PRECISION_CHOICES,  # noqa: F401  (re-exported: interactive mode reads the choices from here)
    batch_option,
    complete_model,
    context_option,
    cost_options,
    cost_settings,
    prompt_option,
    engine_option,
    gpus_option,
    headroom_option,
    json_option,
    kv_dtype_option,
    load_machine,
    mode_option,
    machine_override_options,
    params_option,
    precision_option,
    profile_option,
    python_env_option,
    tokens_option,
    revision_option,
    transformers_version_option,
)


def training_options(func):
    """Options of --mode full|lora|qlora (fitcheck.estimate.training_request.TrainingRequest)."""
    opts = [
        click.option("--seq-len", type=click.IntRange(min=1), default=2048, show_default=True,
                     help="Training: tokens per sequence."),
        click.option("--grad-accum", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Training: gradient accumulation steps (reported; no memory effect)."),
        click.option("--optimizer", type=click.Choice(["adamw", "adamw-8bit", "paged-adamw-8bit", "sgd", "adafactor"]),
                     default="adamw", show_default=True, help="Training: optimizer."),
        click.option("--master-weights", type=click.Choice(["fp32", "none"]), default=None,
                     help="Training: fp32 master copy of the trainable weights (default fp32)."),
        click.option("--grad-checkpointing/--no-grad-checkpointing", default=False, show_default=True,
                     help="Training: recompute activations in backward (keeps only layer inputs)."),
        click.option("--attention", type=click.Choice(["flash", "sdpa", "eager"]), default=None,
                     help="Attention kernel (eager holds prompt² scores and an fp32 softmax per layer). Default: "
                          "sdpa for training; for inference with transformers the release's default (eager "
                          "before 4.36, see --transformers-version)."),
        click.option("--lora-rank", type=click.IntRange(min=1), default=16, show_default=True, help="LoRA/QLoRA rank r."),
        click.option("--lora-targets", default="all-linear", show_default=True, metavar="all-linear|attention|q_proj,v_proj,...",
                     help="LoRA/QLoRA: modules that get adapters."),
        click.option("--lora-train-embeddings", is_flag=True,
                     help="LoRA/QLoRA: also train embeddings and lm_head (peft modules_to_save)."),
        click.option("--zero", type=click.Choice(["0", "1", "2", "3"]), default=None,
                     help="Training: DeepSpeed ZeRO stage across --gpus."),
        click.option("--fsdp", type=click.Choice(["full-shard", "shard-grad-op"]), default=None,
                     help="Training: PyTorch FSDP sharding across --gpus."),
        click.option("--offload", type=click.Choice(["none", "optimizer", "optimizer+params"]), default="none",
                     show_default=True, help="Training: ZeRO-Offload to RAM (RAM need is checked too)."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


@click.command("check")
@click.argument("model", required=False, shell_complete=complete_model)
@mode_option
@precision_option
@context_option
@prompt_option
@batch_option
@kv_dtype_option
@engine_option
@click.option("--gpu-memory-utilization", type=click.FloatRange(0.05, 1.0), default=0.9, show_default=True,
              help="vLLM's reservation, a fraction of total GPU memory.")
@gpus_option
@click.option("--device", type=click.Choice(["auto", "gpu", "cpu"]), default="auto", show_default=True,
              help="Where to run or train: auto (the GPU when there is one), gpu, or cpu.")
@click.option("--gpu-layers", "-ngl", type=click.IntRange(min=0), default=None,
              help="llama.cpp: layers on the GPU (partial offload); the rest run from RAM.")
@transformers_version_option
@headroom_option
@click.option("--strict", is_flag=True, help="Exit 1 when it fits only inside the headroom (tight).")
@params_option
@revision_option
@profile_option
@machine_override_options
@json_option
@click.option("--format", "fmt", type=click.Choice(["table", "json", "github"]), default=None,
              help="Output: table (default), json (same as --json), github (tables, then GitHub Actions "
                   "annotations; a Markdown summary is appended to $GITHUB_STEP_SUMMARY when set).")
@click.option("--output", "-o", "output", metavar="FILE", default=None,
              help="Also write the JSON document to FILE (a CI artifact), whatever the --format.")
@click.option("--require", "require", multiple=True, metavar="FACT>=VALUE",
              help="Machine assertion, repeatable: vram>=24GiB, vram_free>=20GiB, gpus>=2, cc>=8.0, "
                   "ram>=32GiB, ram_total>=64GiB, disk>=40GB, cuda>=12.1, driver>=550, torch>=2.4, "
                   "torch_cuda<=driver. Exit 1 when one fails, 3 when its fact is unknown here.")
@click.option("--plan", "plan_file", metavar="PLAN.toml", default=None,
              help="Check every [[case]] of a plan file (model, precision, context, batch, engine, gpus, "
                   "profile...): one verdict line each; exit 1 if any fails.")
@training_options
@tokens_option
@cost_options
@python_env_option
@click.pass_context
def check(ctx: click.Context, model: str, mode: str, precision: str | None, context: int, prompt_tokens: int | None,
          batch: int, kv_dtype: str,
          engine: str | None, gpu_memory_utilization: float, gpus: int | None, device: str, gpu_layers: int | None,
          transformers_version: str | None, headroom: float, strict: bool, params: str | None, revision: str | None,
          profile: str | None, as_json: bool,
          fmt: str | None, output: str | None, require: tuple[str, ...], plan_file: str | None,
          gpu: str | None = None, vram: str | None = None, ram: str | None = None, **training) -> None:
    """Will MODEL run here? Estimate the memory, give a verdict, and list what fits instead.

    MODEL is a catalog name (qwen-7b, llama3-8b), a Hugging Face id, or a local folder,
    config.json, .safetensors or .gguf file.

    \b
    Examples:
      fitcheck qwen-7b
      fitcheck llama-3.1-8b --context 32768 --profile rtx-4090
      fitcheck mistral-7b -p awq --engine vllm --batch 16 --json
      fitcheck qwen-7b --mode qlora --seq-len 4096 --grad-checkpointing
      fitcheck check qwen-7b --strict --require "vram>=24GiB" --format github   # CI preflight
      fitcheck check --plan plan.toml --output fitcheck.json

    Exit codes: 0 fits, 1 does not fit (or tight with --strict), 2 bad input, 3 unknown.
    """
    from fitcheck.check import check_inference
    from fitcheck.estimate.request import InferenceRequest
    from fitcheck.model.resolve import resolve_model
    from fitcheck.preflight import emit
    from fitcheck.preflight.requirements import evaluate, parse_requirements

    fmt = "json" if as_json else (fmt or "table")
    python_envs = training.pop("python_envs", ())
    if output:
        from fitcheck.bounded import check_output_target

        check_output_target(output, "--output")  # a FIFO or folder: exit 2 before any work
    requirements = parse_requirements(require)  # a malformed one: exit 2 before any probing
    overrides = {"gpu": gpu, "vram": vram, "ram": ram}
    if plan_file:
        if model:
            raise click.UsageError("give MODEL or --plan, not both")
        ctx.exit(emit.run_plan_file(plan_file, profile=profile, strict=strict, requirements=requirements,
                                    fmt=fmt, output=output, overrides=overrides))
    if not model:
        if not requirements:
            raise click.UsageError("missing MODEL (or --plan PLAN.toml, or --require for machine checks only)")
        machine = load_machine(profile, **overrides)
        ctx.exit(emit.emit_requirements(machine, evaluate(requirements, machine, _stack(profile, python_envs, overrides)),
                                        fmt=fmt, output=output))

    _check_mode_options(ctx, mode)
    from dataclasses import replace

    costs = cost_settings(training.pop("kwh_price"), training.pop("amortize_years"), training.pop("hours_per_day"))
    tokens = training.pop("tokens")
    resolved = resolve_model(model, params=params) if params else resolve_model(model, revision=revision)
    if mode != "inference":
        from fitcheck.check import check_training

        machine = load_machine(profile, **overrides)
        result = check_training(resolved, _training_request(mode, precision, batch, gpus, device, training), machine,
                                headroom=headroom / 100)
        result = replace(result, cost=costs, tokens=tokens)
        stack = _stack(profile, python_envs, overrides)
        result = _checked(result, stack)
        code = emit.emit_check(result, fmt=fmt, output=output, strict=strict,
                               outcomes=evaluate(requirements, machine, stack))
        _mention_receipt(result, fmt)
        ctx.exit(code)
    versions: dict[str, str] = {}
    from_env = False
    if profile is None:      # this machine: its installed engines are the defaults (package metadata only)
        from fitcheck.model.installed import default_transformers_version, installed_versions

        versions = installed_versions()
        if transformers_version is None and default_transformers_version(versions):
            transformers_version, from_env = default_transformers_version(versions), True
    request = InferenceRequest(precision=precision, context=context, batch=batch, kv_dtype=kv_dtype, engine=engine,
                               gpus=gpus, device=device, gpu_layers=gpu_layers, prompt_tokens=prompt_tokens,
                               gpu_memory_utilization=gpu_memory_utilization,
                               transformers_version=transformers_version, attention=training["attention"])
    machine = load_machine(profile, **overrides)
    result = replace(check_inference(resolved, request, machine, headroom=headroom / 100), cost=costs)
    stack = _stack(profile, python_envs, overrides)
    result = _checked(result, stack)
    if versions:
        from fitcheck.model.installed import name_in_assumptions

        result = name_in_assumptions(result, versions, from_env)
    code = emit.emit_check(result, fmt=fmt, output=output, strict=strict,
                           outcomes=evaluate(requirements, machine, stack))
    _mention_receipt(result, fmt)
    ctx.exit(code)


def _stack(profile: str | None, python_envs: tuple[str, ...], overrides: dict[str, str | None]):
    """The installed stack when answering for this machine (never for a --profile or a --gpu/--vram/--ram
    what-if: those describe another machine)."""
    if profile or any(overrides.values()):
        if python_envs:
            raise click.UsageError("--python-env reads this machine's packages; it cannot be combined with --profile, "
                                   "--gpu, --vram or --ram")
        return None
    from fitcheck.probe.software import read_stack

    return read_stack(extra=tuple(python_envs))


def _checked(result, stack):
    if stack is None:
        return result
    from fitcheck.check import with_stack

    return with_stack(result, stack)


def _mention_receipt(result, fmt: str) -> None:
    """'Measured on this machine on DATE: X GiB peak' when `fitcheck measure` ran this request here."""
    if result.machine.source != "probe":
        return  # a profile is not this machine
    from fitcheck.measure import receipts

    if not receipts.receipts_path().is_file():
        return
    from fitcheck.render.check import check_document

    doc = check_document(result)
    found = receipts.matching(doc["model"]["id"], doc["request"], result.machine)
    if found:
        click.echo(f"Measured {receipts.receipt_line(found)}", err=fmt == "json")


_INFERENCE_ONLY = ("context", "prompt_tokens", "kv_dtype", "engine", "gpu_memory_utilization", "gpu_layers", "transformers_version")
_TRAINING_ONLY = ("tokens", "seq_len", "grad_accum", "optimizer", "master_weights", "grad_checkpointing",
                  "lora_rank", "lora_targets", "lora_train_embeddings", "zero", "fsdp", "offload")


def _check_mode_options(ctx: click.Context, mode: str) -> None:
    """An option typed for the other mode is a mistake to point out, not to ignore."""
    from click.core import ParameterSource

    wrong = _TRAINING_ONLY if mode == "inference" else _INFERENCE_ONLY
    typed = [name for name in wrong if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]
    if typed:
        opts = {p.name: p.opts[0] for p in ctx.command.params if p.opts}
        flags = ", ".join(opts.get(name, "--" + name.replace("_", "-")) for name in typed)
        if mode == "inference":
            raise click.UsageError(f"{flags} applies to training: add --mode full, lora or qlora")
        hint = " (training uses --seq-len)" if "context" in typed else ""
        raise click.UsageError(f"{flags} applies to inference, not --mode {mode}{hint}")


def _training_request(mode: str, precision: str | None, batch: int, gpus: int | None, device: str, opts: dict):
    from fitcheck.estimate.training_request import TrainingRequest

    return TrainingRequest(
        mode=mode, seq_len=opts["seq_len"], batch=batch, grad_accum=opts["grad_accum"],
        precision=precision.lower() if precision else None, optimizer=opts["optimizer"],
        master_weights=opts["master_weights"], grad_checkpointing=opts["grad_checkpointing"],
        attention=opts["attention"] or "sdpa", lora_rank=opts["lora_rank"], lora_targets=opts["lora_targets"],
        lora_train_embeddings=opts["lora_train_embeddings"], gpus=gpus,
        zero=int(opts["zero"]) if opts["zero"] is not None else None, fsdp=opts["fsdp"], offload=opts["offload"],
        device=device,
    )
