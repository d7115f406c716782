"""`fitcheck check MODEL` (and `fitcheck MODEL`): will it run here, and if not, what will?"""

from __future__ import annotations

import click

from fitcheck.cli.options import (
    bench_requested,
    complete_model,
    cost_options,
    cost_settings,
    json_option,
    machine_override_options,
    params_option,
    profile_option,
    python_env_option,
    request_from,
    revision_option,
    tokens_option,
    typed_for_other_mode,
)
from fitcheck.options import click_options
from fitcheck.profiles.overrides import load_machine


@click.command("check")
@click.argument("model", required=False, shell_complete=complete_model)
@click_options()
@click.option("--strict", is_flag=True,
              help="Exit 1 when it fits only inside the headroom (tight), and judge the default weights as they are "
                   "(without --precision and --engine, a default that does not fit is otherwise answered for the "
                   "best weights that do).")
@click.option("--verbose", "-v", "verbose", is_flag=True,
              help="The whole answer: the table in GiB, every assumption and why, the notes, cost and every "
                   "alternative (the default fits one screen).")
@click.option("--brief", is_flag=True, help="One line: the verdict and the largest context (scripts, prompts).")
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
                   "torch_cuda<=driver; and of the answer, concurrency>=8 (sequences at full length that run "
                   "at once). Exit 1 when one fails (whatever else happens), 3 when its fact is unknown here.")
@click.option("--plan", "plan_file", metavar="PLAN.toml", default=None,
              help="Check every [[case]] of a plan file (model, mode, precision, context, batch, engine, gpus, "
                   "profile, and every other option): one verdict line each; exit 1 if any fails.")
@tokens_option
@cost_options
@python_env_option
@click.pass_context
def check(ctx: click.Context, model: str | None, strict: bool, verbose: bool, brief: bool, params: str | None,
          revision: str | None, profile: str | None, as_json: bool, fmt: str | None, output: str | None,
          require: tuple[str, ...], plan_file: str | None, tokens: int | None, kwh_price: float | None,
          amortize_years: float, hours_per_day: float, python_envs: tuple[str, ...] = (), gpu: str | None = None,
          vram: str | None = None, ram: str | None = None, **options) -> None:
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

    The default answer fits one screen; -v/--verbose gives everything, --brief one line.

    Exit codes: 0 fits, 1 does not fit or cannot run here (or tight with --strict), 2 bad input, 3 unknown,
    70 an internal error (a bug in fitcheck).
    """
    from fitcheck.context import Context, read_context
    from fitcheck.preflight import emit
    from fitcheck.preflight.requirements import evaluate, parse_requirements

    if verbose and brief:
        raise click.UsageError("--verbose and --brief ask for two lengths of answer: pass one of them")
    view = "verbose" if verbose else "brief" if brief else "default"
    if as_json and fmt not in (None, "json"):
        raise click.UsageError(f"--json and --format {fmt} ask for two outputs: pass one of them")
    fmt = "json" if as_json else (fmt or "table")
    if output:
        from fitcheck.bounded import check_output_target

        check_output_target(output, "--output")  # a FIFO or folder: exit 2 before any work
    requirements = parse_requirements(require)  # a malformed one: exit 2 before any probing
    overrides = {"gpu": gpu, "vram": vram, "ram": ram}
    what_if = any(overrides.values())
    if (profile or what_if) and python_envs:
        raise click.UsageError("--python-env reads this machine's packages; it cannot be combined with --profile, "
                               "--gpu, --vram or --ram")
    costs = cost_settings(kwh_price, amortize_years, hours_per_day)
    contexts: dict[str | None, Context] = {}

    def context_for(name: str | None) -> Context:
        """The context of an answer for the machine ``name`` (None: this one), read once: the installed stack
        only for this machine (a --profile or a --gpu/--vram/--ram what-if describes another)."""
        if name not in contexts:
            contexts[name] = read_context(name is None and not what_if, python_envs=python_envs, cost=costs,
                                          tokens=tokens)
        return contexts[name]

    if plan_file:
        if model:
            raise click.UsageError("give MODEL or --plan, not both")
        ctx.exit(emit.run_plan_file(plan_file, profile=profile, strict=strict, requirements=requirements,
                                    fmt=fmt, output=output, overrides=overrides, context_for=context_for))
    if not model:
        if not requirements:
            raise click.UsageError("missing MODEL (or --plan PLAN.toml, or --require for machine checks only)")
        machine = load_machine(profile, gpu=gpu, vram=vram, ram=ram, bench=bench_requested())
        outcomes = evaluate(requirements, machine, context_for(profile).stack)
        ctx.exit(emit.emit_requirements(machine, outcomes, fmt=fmt, output=output))

    typed_for_other_mode(ctx, options["mode"])
    request = request_from(options)
    machine = load_machine(profile, gpu=gpu, vram=vram, ram=ram, bench=bench_requested())
    edge = context_for(profile)
    ctx.exit(emit.run_check(model, request, machine, params=params, revision=revision, fmt=fmt, output=output,
                            strict=strict, outcomes=evaluate(requirements, machine, edge.stack), context=edge,
                            view=view, after=lambda result: _mention_receipt(result, fmt)))


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
