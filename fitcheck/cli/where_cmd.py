"""`fitcheck where MODEL`: which hardware profiles run it, how fast, and at what cost."""

from __future__ import annotations

import click

from fitcheck.cli.options import (
    batch_option,
    complete_model,
    context_option,
    cost_options,
    cost_settings,
    engine_option,
    gpus_option,
    headroom_option,
    json_option,
    kv_dtype_option,
    mode_option,
    params_option,
    precision_option,
    prompt_option,
    tokens_option,
    transformers_version_option,
)

KINDS = ("laptop", "desktop", "workstation", "cloud", "ci")


def _training_options(func):
    from fitcheck.cli.check_cmd import training_options

    return training_options(func)


@click.command("where")
@click.argument("model", shell_complete=complete_model)
@mode_option
@precision_option(help="Weights format. Default: each machine's own default (bf16 on modern GPUs, q4_k_m on CPUs).")
@context_option(help="Tokens per sequence, prompt plus generated.")
@prompt_option
@batch_option
@kv_dtype_option
@engine_option(help="Default: each machine's default (llama.cpp for GGUF types and CPU-only machines).")
@gpus_option(help="GPUs to use on each machine. Default: all of each machine's GPUs (tensor parallel with "
             "vLLM, layer split with transformers and llama.cpp).")
@transformers_version_option
@headroom_option
@click.option("--max-price", type=click.FloatRange(min=0), default=None, metavar="USD",
              help="Only machines with a price of at most USD per hour.")
@click.option("--kind", type=click.Choice(KINDS), default=None, help="Only profiles of this kind.")
@params_option
@_training_options
@tokens_option
@cost_options
@json_option
@click.pass_context
def where(ctx: click.Context, model: str, precision: str | None, context: int, prompt_tokens: int | None, batch: int,
          kv_dtype: str,
          engine: str | None, gpus: int | None, transformers_version: str | None, headroom: float, max_price: float | None, kind: str | None,
          params: str | None, as_json: bool, kwh_price: float | None = None, amortize_years: float = 3.0,
          hours_per_day: float = 8.0, mode: str = "inference", tokens: int | None = None, **training) -> None:
    """Which hardware profiles run MODEL, how fast, and at what cost (cheapest first).

    Every shipped profile is judged with its own default precision and engine unless given;
    those that fit with the headroom are listed with expected decode tokens/s (a range) and,
    for cloud machines, the price per hour and per million generated tokens.

    \b
    Examples:
      fitcheck where qwen-7b
      fitcheck where llama3-70b --context 8192 --kind cloud --max-price 5
      fitcheck where mistral-7b -p q4_k_m --json
      fitcheck where qwen-7b --mode lora --tokens 100M   # which machine to fine-tune on

    Exit codes: 0 some profile fits, 1 none does, 2 bad input.
    """
    from fitcheck.cli.check_cmd import _check_mode_options, _training_request
    from fitcheck.estimate.request import InferenceRequest
    from fitcheck.model.resolve import resolve_model
    from fitcheck.profiles import list_profiles
    from fitcheck.render.where import where_result

    if max_price is not None:
        from fitcheck.bounded import finite_float

        finite_float(max_price, "--max-price", 0)
    _check_mode_options(ctx, mode)
    costs = cost_settings(kwh_price, amortize_years, hours_per_day)
    resolved = resolve_model(model, params=params) if params else resolve_model(model)
    if mode != "inference":
        from fitcheck.render import where_training as wt

        treq = _training_request(mode, precision, batch, gpus, "auto", training)
        treq.validate()
        tresult = wt.where_training_result(resolved, treq, list_profiles(), headroom=headroom / 100, kind=kind,
                                           max_price=max_price, query=model, tokens=tokens, cost=costs)
        if as_json:
            import json

            click.echo(json.dumps(wt.where_training_document(tresult), indent=2, sort_keys=True))
        else:
            click.echo(wt.render_where_training_table(tresult))
        ctx.exit(tresult.exit_code)
    request = InferenceRequest(precision=precision, context=context, batch=batch, kv_dtype=kv_dtype, engine=engine,
                               gpus=gpus, transformers_version=transformers_version, prompt_tokens=prompt_tokens)
    request.validate()
    result = where_result(resolved, request, list_profiles(), headroom=headroom / 100, kind=kind,
                          max_price=max_price, query=model, cost=costs)
    if as_json:
        import json

        from fitcheck.render.where import where_document

        click.echo(json.dumps(where_document(result), indent=2, sort_keys=True))
    else:
        from fitcheck.render.where import render_where_table

        click.echo(render_where_table(result))
    ctx.exit(result.exit_code)
