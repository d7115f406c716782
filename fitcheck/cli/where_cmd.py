"""`fitcheck where MODEL`: which hardware profiles run it (or train it), how fast, and at what cost."""

from __future__ import annotations

import click

from fitcheck.cli.options import (
    complete_model,
    cost_options,
    cost_settings,
    json_option,
    params_option,
    request_from,
    tokens_option,
    typed_for_other_mode,
)
from fitcheck.contracts import document_json
from fitcheck.machine import PROFILE_KINDS as KINDS
from fitcheck.options import OPTIONS, click_options, finite_float_range

# The widest a `where` answer is (columns): its table is built to fit, the prose under it is wrapped to it.
WIDTH = 120


@click.command("where")
@click.argument("model", shell_complete=complete_model)
# --download-dir is this machine's disk: `where` judges hardware profiles.
@click_options([o.name for o in OPTIONS if not o.this_machine], help_overrides={
    "precision": "Weights format. Default: each machine's own default (bf16 on modern GPUs, q4_k_m on CPUs).",
    "engine": "Default: each machine's default (llama.cpp for GGUF types and CPU-only machines).",
    "gpus": "GPUs to use on each machine. Default: all of each machine's GPUs for inference (tensor parallel "
            "with vLLM, layer split with transformers and llama.cpp); for training with --zero/--fsdp.",
})
@click.option("--max-price", type=finite_float_range(0), default=None, metavar="USD",
              help="Only machines with a price of at most USD per hour.")
@click.option("--kind", type=click.Choice(KINDS), default=None, help="Only profiles of this kind.")
@params_option
@tokens_option
@cost_options
@json_option
@click.option("--verbose", "-v", "verbose", is_flag=True,
              help="Every column (kind, what each machine runs on, energy), when buying pays off, the speed "
                   "assumptions (the default fits 120 columns).")
@click.pass_context
def where(ctx: click.Context, model: str, max_price: float | None, kind: str | None, params: str | None,
          tokens: int | None, kwh_price: float | None, amortize_years: float, hours_per_day: float,
          as_json: bool, verbose: bool = False, **options) -> None:
    """Which hardware profiles run MODEL (or fine-tune it), how fast, and at what cost (cheapest first).

    Every shipped profile is judged exactly as `fitcheck MODEL --profile NAME` judges it, with its
    own default precision, engine and GPUs unless given; those that run it (fits or tight) are listed
    with expected tokens/s (a range) and, for cloud machines, the price per hour and per million
    generated tokens.  With no --precision, a machine whose default does not fit is listed as check
    advises there, changing only the weights (format and engine; for a mixture of experts, llama.cpp's
    --n-cpu-moe), else at the best precision that does (marked *); profiles that cannot run the request at all (kernels,
    compute capability, engine) are listed apart from those where it does not fit.

    \b
    Examples:
      fitcheck where qwen-7b
      fitcheck where llama3-70b --context 8192 --kind cloud --max-price 5
      fitcheck where mistral-7b -p q4_k_m --json
      fitcheck where qwen-7b --mode lora --tokens 100M   # which machine to fine-tune on

    Exit codes: 0 some profile runs it, 1 none does, 2 bad input.
    """
    result = where_answer(ctx, model, max_price=max_price, kind=kind, params=params, tokens=tokens,
                          kwh_price=kwh_price, amortize_years=amortize_years, hours_per_day=hours_per_day,
                          options=options)
    document, table = renderers(result)
    if as_json:
        click.echo(document_json(document(result), indent=2, sort_keys=True))
    else:
        from fitcheck.render.layout import terminal_width

        click.echo(table(result, verbose=verbose, width=min(terminal_width() or WIDTH, WIDTH)))
    ctx.exit(result.exit_code)


def where_answer(ctx: click.Context, model: str, *, max_price: float | None, kind: str | None, params: str | None,
                 tokens: int | None, kwh_price: float | None, amortize_years: float, hours_per_day: float,
                 options: dict):
    """The where result of the parsed command line ``ctx`` (`fitcheck where` prints it, `fitcheck serve`
    answers it); FitcheckError or click.UsageError for bad input."""
    from fitcheck.model.resolve import resolve_model
    from fitcheck.profiles import list_profiles

    if max_price is not None:
        from fitcheck.bounded import finite_float

        finite_float(max_price, "--max-price", 0)
    typed_for_other_mode(ctx, options["mode"])
    request = request_from(options)
    from fitcheck.plan import validate_request

    validate_request(request)
    costs = cost_settings(kwh_price, amortize_years, hours_per_day)
    resolved = resolve_model(model, params=params) if params else resolve_model(model)
    headroom = request.headroom / 100
    from fitcheck.search.where import where_result

    return where_result(resolved, request, list_profiles(), headroom=headroom, kind=kind, max_price=max_price,
                        query=model, tokens=tokens if request.training else None, cost=costs,
                        model_args=(model,) + (("--params", params) if params else ()))


def renderers(result):
    """(document, table) functions of a where result: training's or inference's."""
    if result.request.training:
        from fitcheck.render.where_training import render_where_training_table as table
        from fitcheck.render.where_training import where_training_document as document
    else:
        from fitcheck.render.where import render_where_table as table
        from fitcheck.render.where import where_document as document
    return document, table
