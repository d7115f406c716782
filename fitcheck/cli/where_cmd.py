"""`fitcheck where MODEL`: which hardware profiles run it (or train it), how fast, and at what cost."""

from __future__ import annotations

import click

from fitcheck.cli.options import json_option, params_option, request_from, typed_for_other_mode
from fitcheck.machine import PROFILE_KINDS as KINDS
from fitcheck.options import click_options


@click.command("where")
@click.argument("model")
@click_options(help_overrides={
    "precision": "Weights format. Default: each machine's own default (bf16 on modern GPUs, q4_k_m on CPUs).",
    "engine": "Default: each machine's default (llama.cpp for GGUF types and CPU-only machines).",
    "gpus": "GPUs to use on each machine. Default: all of each machine's GPUs for inference (tensor parallel "
            "with vLLM, layer split with transformers and llama.cpp); for training with --zero/--fsdp.",
})
@click.option("--max-price", type=click.FloatRange(min=0), default=None, metavar="USD",
              help="Only machines with a price of at most USD per hour.")
@click.option("--kind", type=click.Choice(KINDS), default=None, help="Only profiles of this kind.")
@params_option
@json_option
@click.pass_context
def where(ctx: click.Context, model: str, max_price: float | None, kind: str | None, params: str | None,
          as_json: bool, **options) -> None:
    """Which hardware profiles run MODEL (or fine-tune it), how fast, and at what cost (cheapest first).

    Every shipped profile is judged exactly as `fitcheck MODEL --profile NAME` judges it, with its
    own default precision, engine and GPUs unless given; those that run it (fits or tight) are listed
    with expected tokens/s (a range) and, for cloud machines, the price per hour and per million
    generated tokens.

    \b
    Examples:
      fitcheck where qwen-7b
      fitcheck where llama3-70b --context 8192 --kind cloud --max-price 5
      fitcheck where mistral-7b -p q4_k_m --json
      fitcheck where llama-3.1-8b --mode qlora --seq-len 4096

    Exit codes: 0 some profile runs it, 1 none does, 2 bad input.
    """
    import json

    from fitcheck.pipeline import where as where_api
    from fitcheck.profiles import list_profiles
    from fitcheck.render.where import render_where_table, where_document

    typed_for_other_mode(ctx, options["mode"])
    result = where_api(model, request_from(options), list_profiles(), kind=kind, max_price=max_price, params=params)
    if as_json:
        click.echo(json.dumps(where_document(result), indent=2, sort_keys=True))
    else:
        click.echo(render_where_table(result))
    ctx.exit(result.exit_code)
