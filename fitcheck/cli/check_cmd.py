"""`fitcheck check MODEL` (and `fitcheck MODEL`): will it run here, and if not, what will?"""

from __future__ import annotations

import click

from fitcheck.cli.options import (
    json_option,
    load_machine,
    params_option,
    profile_option,
    request_from,
    typed_for_other_mode,
)
from fitcheck.options import click_options


@click.command("check")
@click.argument("model", required=False)
@click_options()
@click.option("--strict", is_flag=True, help="Exit 1 when it fits only inside the headroom (tight).")
@params_option
@profile_option
@json_option
@click.option("--format", "fmt", type=click.Choice(["table", "json", "github"]), default=None,
              help="Output: table (default), json (same as --json), github (tables, then GitHub Actions "
                   "annotations; a Markdown summary is appended to $GITHUB_STEP_SUMMARY when set).")
@click.option("--output", "-o", "output", metavar="FILE", default=None,
              help="Also write the JSON document to FILE (a CI artifact), whatever the --format.")
@click.option("--require", "require", multiple=True, metavar="FACT>=VALUE",
              help="Machine assertion, repeatable: vram>=24GiB, vram_free>=20GiB, gpus>=2, cc>=8.0, "
                   "ram>=32GiB, ram_total>=64GiB, disk>=40GB, cuda>=12.1. Exit 1 when one fails (whatever "
                   "else happens), 3 when its fact is unknown here.")
@click.option("--plan", "plan_file", metavar="PLAN.toml", default=None,
              help="Check every [[case]] of a plan file (model, mode, precision, context, batch, engine, gpus, "
                   "profile, and every other option): one verdict line each; exit 1 if any fails.")
@click.pass_context
def check(ctx: click.Context, model: str | None, strict: bool, params: str | None, profile: str | None,
          as_json: bool, fmt: str | None, output: str | None, require: tuple[str, ...], plan_file: str | None,
          **options) -> None:
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

    Exit codes: 0 fits, 1 does not fit or cannot run here (or tight with --strict), 2 bad input, 3 unknown.
    """
    from fitcheck.preflight import emit
    from fitcheck.preflight.requirements import evaluate, parse_requirements

    fmt = "json" if as_json else (fmt or "table")
    requirements = parse_requirements(require)  # a malformed one: exit 2 before any probing
    if plan_file:
        if model:
            raise click.UsageError("give MODEL or --plan, not both")
        ctx.exit(emit.run_plan_file(plan_file, profile=profile, strict=strict, requirements=requirements,
                                    fmt=fmt, output=output))
    if not model:
        if not requirements:
            raise click.UsageError("missing MODEL (or --plan PLAN.toml, or --require for machine checks only)")
        machine = load_machine(profile)
        ctx.exit(emit.emit_requirements(machine, evaluate(requirements, machine), fmt=fmt, output=output))

    typed_for_other_mode(ctx, options["mode"])
    request = request_from(options)
    machine = load_machine(profile)
    outcomes = evaluate(requirements, machine)
    ctx.exit(emit.run_check(model, request, machine, params=params, fmt=fmt, output=output, strict=strict,
                            outcomes=outcomes))
