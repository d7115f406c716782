"""``fitcheck models``: search the catalog, or show one model's full spec and where it came from."""

from __future__ import annotations

from dataclasses import replace

import click

from fitcheck.cli.options import bench_requested, complete_model, json_option, profile_option
from fitcheck.contracts import document_json
from fitcheck.options import click_options
from fitcheck.search.fit_score import DEFAULT_SORT, SORTS

_FITS_ONLY = ("profile", "mode", "context", "batch", "engine", "seq_len", "headroom", "show_all", "sort", "top",
              "min_speed")
DEFAULT_TOP = 20        # --fits: rows listed unless --top says otherwise (--local lists every local model)

MODELS_SCHEMA = "fitcheck.models/1"   # `fitcheck models --json`: the catalog search
MODEL_SCHEMA = "fitcheck.model/1"     # `fitcheck models --show ID --json`: one model


@click.command("models")
@click.argument("query", required=False)
@click.option("--family", metavar="FAMILY", default=None, help="Only this family (qwen, llama, mistral, gemma ...).")
@click.option("--show", "show", metavar="ID", default=None, shell_complete=complete_model,
              help="Print one model's full spec, parameter breakdown and sources.")
@click.option("--fits", "fits", is_flag=True,
              help="Which models run (or train, with --mode) on this machine or --profile: each at the best "
                   "precision that fits, best score first.")
@profile_option
@click_options(["mode", "context", "batch", "engine", "seq_len", "headroom"], help_overrides={
    "mode": "--fits: inference, or fine-tuning (full, lora, qlora).",
    "context": "--fits: tokens per sequence (inference).",
    "batch": "--fits: concurrent sequences (inference) or micro-batch (training).",
    "engine": "--fits: only this engine. Default: each model's own default, else its best alternative.",
    "seq_len": "--fits with --mode full|lora|qlora: tokens per training sequence.",
})
@click.option("--kind", type=click.Choice(["instruct", "base", "dense", "moe"]), default=None,
              help="--fits (and the list): only instruct/chat or base models, dense or mixture-of-experts.")
@click.option("--all", "show_all", is_flag=True, help="--fits: list the models that do not fit too.")
@click.option("--sort", type=click.Choice(SORTS), default=DEFAULT_SORT, show_default=True,
              help="--fits: order by score (0–100: capability from parameters × quality its precision keeps × "
                   "decode speed, strongly penalised below reading speed × memory left; documented in "
                   "fitcheck/search/fit_score.py), speed, params or size (memory needed), the higher first.")
@click.option("-n", "--top", type=click.IntRange(min=0), default=DEFAULT_TOP, show_default=True, metavar="N",
              help="--fits: list the first N models that fit (0: all of them; --local: all unless given).")
@click.option("--min-speed", type=click.FloatRange(min=0), default=None, metavar="TOK_S",
              help="--fits: leave out models slower than TOK_S tokens/s (decode per sequence, or training), "
                   "the low end of the estimate; those of unknown speed stay.")
@click.option("--local", "local", is_flag=True,
              help="The models already on this machine (Hugging Face cache, Ollama store, LM Studio and "
                   "llama.cpp folders), each judged as --fits judges the catalog.")
@json_option
@click.pass_context
def models(ctx: click.Context, query: str | None, family: str | None, show: str | None, fits: bool,
           profile: str | None, mode: str, context: int, batch: int, engine: str | None, seq_len: int,
           headroom: float, kind: str | None, show_all: bool, sort: str, top: int, min_speed: float | None,
           local: bool, as_json: bool) -> None:
    """Search the model catalog, show one model's spec, or list what runs here (--fits).

    \b
    Examples:
      fitcheck models                 # every catalog model
      fitcheck models qwen            # ids, aliases or family containing 'qwen'
      fitcheck models --family llama
      fitcheck models --show qwen-7b  # every number, and where it came from
      fitcheck models --fits --profile rtx-4090 --context 8192
      fitcheck models --fits --min-speed 10 --top 5   # the five best here that decode 10 tok/s or faster
      fitcheck models --fits --sort params --top 0    # every model that fits, the largest first
      fitcheck models --fits --mode qlora --seq-len 4096 --profile rtx-4090 --json
      fitcheck models --local         # what is downloaded here, and what of it fits
    """
    if fits or local:
        if show:
            raise click.UsageError(f"give {'--local' if local else '--fits'} or --show, not both")
        _fits(ctx, query, family, profile, mode, context, batch, engine, seq_len, headroom, kind, show_all, as_json,
              local, ranking=(sort, top, min_speed))
        return
    _refuse_fits_options(ctx)
    if show:
        from fitcheck.model.resolve import resolve_model

        resolved = resolve_model(show)
        doc = show_document(resolved)
        click.echo(document_json(doc, indent=2) if as_json else render_show(doc))
        return

    from fitcheck.errors import FitcheckError
    from fitcheck.model.catalog import load_catalog

    catalog = load_catalog()
    if family and family.strip().lower() not in catalog.families():
        raise FitcheckError(f"unknown family {family!r}", "families: " + ", ".join(catalog.families()))
    found = catalog.search(query, family)
    if kind:
        from fitcheck.search.fits import select_entries

        found = select_entries(query, family, kind)
    if not found:
        from fitcheck.model.suggest import hint

        raise FitcheckError(f"no catalog model matches {query!r}", hint(query or ""))
    rows = [list_row(e) for e in found]
    if as_json:
        click.echo(document_json(models_document(rows), indent=2))
    else:
        click.echo(render_list(rows))


def models_document(rows: list[dict]) -> dict:
    """The versioned JSON document of ``fitcheck models --json``."""
    from fitcheck import __version__

    return {"schema": MODELS_SCHEMA, "fitcheck_version": __version__, "models": rows}


def _refuse_fits_options(ctx: click.Context) -> None:
    from click.core import ParameterSource

    typed = [n for n in _FITS_ONLY if ctx.get_parameter_source(n) == ParameterSource.COMMANDLINE]
    if typed:
        flags = ", ".join("--" + n.replace("_", "-").replace("show-all", "all") for n in typed)
        raise click.UsageError(f"{flags} applies to --fits: add --fits")


def _fits(ctx: click.Context, query: str | None, family: str | None, profile: str | None, mode: str, context: int,
          batch: int, engine: str | None, seq_len: int, headroom: float, kind: str | None, show_all: bool,
          as_json: bool, local: bool = False, ranking: tuple[str, int, float | None] = ("score", DEFAULT_TOP, None)
          ) -> None:
    from fitcheck.profiles.overrides import load_machine
    from fitcheck.render.fits import fits_document, render_fits_table

    result = fits_answer(ctx, query, family, profile, mode, context, batch, engine, seq_len, headroom, kind, local,
                         ranking, machine_for=lambda name: load_machine(name, bench=bench_requested()))
    show_all = show_all or local     # every local model is listed, fitting or not
    if as_json:
        click.echo(document_json(fits_document(result), indent=2))
    elif local and not result.rows and not result.unreadable:
        from fitcheck.model import hf_cache
        from fitcheck.model.local_stores import llama_cpp_dir, lm_studio_dirs
        from fitcheck.model.ollama import store_dir

        places = [hf_cache.hub_cache_dir(), store_dir(), *lm_studio_dirs(), llama_cpp_dir()]
        click.echo("No local models found in: " + ", ".join(str(p) for p in places))
    else:
        from fitcheck.render.layout import terminal_width

        click.echo(render_fits_table(result, show_all=show_all, width=min(terminal_width() or 120, 120)))


def fits_answer(ctx: click.Context, query: str | None, family: str | None, profile: str | None, mode: str,
                context: int, batch: int, engine: str | None, seq_len: int, headroom: float, kind: str | None,
                local: bool, ranking: tuple[str, int, float | None], *, machine_for, context_for=None):
    """The FitsResult of `fitcheck models --fits` (or ``local``: --local) as parsed in ``ctx``, on
    ``machine_for(profile)`` with ``context_for(profile)`` (default: what `fitcheck MODEL` reads of that machine);
    `models` prints it, `fitcheck serve` answers it.  click.UsageError or FitcheckError for bad input."""
    from click.core import ParameterSource

    from fitcheck.errors import FitcheckError
    from fitcheck.search.fits import local_models, models_that_fit, select_entries

    def typed(name: str) -> bool:
        return ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE

    if mode == "inference":
        if typed("seq_len"):
            raise click.UsageError("--seq-len applies to training: add --mode full, lora or qlora")
        from fitcheck.request import Request

        request = Request(context=context, batch=batch, engine=engine)
    else:
        if typed("context") or typed("engine"):
            raise click.UsageError(f"--context and --engine apply to inference, not --mode {mode} "
                                   "(training uses --seq-len)")
        from fitcheck.request import Request

        request = Request(mode=mode, seq_len=seq_len, batch=batch)
    context_for = context_for or _context_here
    sort, top, min_speed = ranking
    if local:
        if query or family or kind:
            raise click.UsageError("--local lists every local model: QUERY, --family and --kind filter the catalog")
        refs, unreadable = local_models()
        machine = machine_for(profile)
        result = models_that_fit(machine, request, models=refs, headroom=headroom / 100, profile=profile,
                                 unreadable=unreadable, context=context_for(profile), sort=sort,
                                 top=top if typed("top") else 0, min_speed=min_speed)
        return replace(result, local=True)
    entries = select_entries(query, family, kind)
    if not entries:
        within = f" (family {family}, kind {kind})" if family or kind else ""
        raise FitcheckError(f"no catalog model matches {query!r}{within}")
    machine = machine_for(profile)
    return models_that_fit(machine, request, entries=entries, headroom=headroom / 100, profile=profile,
                           context=context_for(profile), sort=sort, top=top, min_speed=min_speed)


def _context_here(profile: str | None):
    """What `fitcheck MODEL` reads of the machine an answer is for (fitcheck.context): this one without a profile."""
    from fitcheck.context import read_context

    return read_context(profile is None)


def list_row(entry) -> dict:
    spec = entry.spec
    return {
        "id": entry.hf_id,
        "family": entry.family,
        "released": entry.released,
        "params": spec.total_params,
        "active_params": entry.active_params,
        "layers": spec.num_layers,
        "max_context": spec.max_context,
        "aliases": list(entry.aliases),
    }


def render_list(rows: list[dict]) -> str:
    from tabulate import tabulate

    from fitcheck.units import format_count

    table = [
        (r["id"], format_count(r["params"]),
         format_count(r["active_params"]) if r["active_params"] != r["params"] else "",
         r["layers"], f"{r['max_context']:,}" if r["max_context"] else "unknown", r["family"], r["released"] or "")
        for r in rows
    ]
    headers = ("id", "params", "active", "layers", "context", "family", "released")
    return tabulate(table, headers=headers, disable_numparse=True) + f"\n\n{len(rows)} model(s)"


def show_document(resolved) -> dict:
    """Everything about one resolved model, as plain data (the JSON form and the text form's source)."""
    from dataclasses import fields

    from fitcheck.model.catalog import published_active_params

    spec = resolved.spec
    spec_fields = {f.name: getattr(spec, f.name) for f in fields(spec) if f.name not in ("sources", "generation")}
    entry = resolved.entry
    from fitcheck import __version__

    return {
        "schema": MODEL_SCHEMA,
        "fitcheck_version": __version__,
        "id": resolved.hf_id or spec.name,
        "source": resolved.source,
        "note": resolved.note,
        "spec": spec_fields,
        "params": {
            "total": spec.total_params,
            "embedding": spec.embedding_params,
            "non_embedding": spec.non_embedding_params,
            "active": published_active_params(spec, entry),
            "largest_layer": spec.layer_params(),
            "groups": [{"kind": g.kind, "params": g.params, "layers": g.layers} for g in spec.tensor_groups()],
        },
        "sources": {name: where for name, where in spec.sources},
        "official_params": entry.official_params if entry else None,
        "official_params_source": entry.official_params_source if entry else None,
        "family": entry.family if entry else spec.family,
        "released": entry.released if entry else None,
        "aliases": list(entry.aliases) if entry else [],
        "quantized_repos": dict(entry.quantized_repos) if entry else {},
        "generation": _generation_document(spec),
    }


def _generation_document(spec) -> dict | None:
    """The generation_config.json values read (None: none), and the sampling fitcheck assumes from
    them (fitcheck.plan.sampling_mode, what `--sampling auto` takes) with why."""
    g = spec.generation
    if g is None:
        return None
    from fitcheck.engines.transformers import sampling_mode

    sampling, why = sampling_mode(None, spec)
    return {"sampling": sampling, "why": why,
            "do_sample": g.do_sample, "temperature": g.temperature, "top_k": g.top_k, "top_p": g.top_p,
            "num_beams": g.num_beams, "repetition_penalty": g.repetition_penalty, "unmodelled": list(g.unmodelled), "problem": g.problem or None,
            "source": g.source, "citation": g.citation or None}


def render_show(doc: dict) -> str:
    from tabulate import tabulate

    from fitcheck.units import format_count

    lines = [f"{doc['id']}  ({doc['source']})"]
    if doc["note"]:
        lines.append(doc["note"])
    if doc["aliases"]:
        lines.append("aliases: " + ", ".join(doc["aliases"]))
    if doc["released"]:
        lines.append(f"family: {doc['family']}, released {doc['released']}")
    sources = doc["sources"]
    lines += ["", "Spec"]
    spec_rows = [(name, "" if value is None else value, sources.get(name, "")) for name, value in doc["spec"].items()]
    lines.append(tabulate(spec_rows, headers=("field", "value", "from"), disable_numparse=True))
    p = doc["params"]
    lines += ["", "Parameters"]
    rows = [("total", f"{p['total']:,}", format_count(p["total"])),
            ("embedding", f"{p['embedding']:,}", format_count(p["embedding"])),
            ("non-embedding", f"{p['non_embedding']:,}", format_count(p["non_embedding"])),
            ("active per token", f"{p['active']:,}", format_count(p["active"])),
            ("largest layer", f"{p['largest_layer']:,}", format_count(p["largest_layer"]))]
    rows += [(f"  {g['kind']}", f"{g['params']:,}", format_count(g["params"])) for g in p["groups"]]
    lines.append(tabulate(rows, headers=("", "count", ""), disable_numparse=True, colalign=("left", "right", "right")))
    if doc["official_params"]:
        diff = (p["total"] / doc["official_params"] - 1) * 100
        lines += ["", f"official: {format_count(doc['official_params'])} ({doc['official_params_source']}); "
                      f"computed differs by {diff:+.2f} %"]
    elif doc["official_params_source"]:
        lines += ["", f"official: {doc['official_params_source']}"]
    g = doc["generation"]
    if g:
        cited = f" ({g['citation']})" if g["citation"] else ""
        lines += ["", f"generation_config.json: fitcheck assumes --sampling {g['sampling']}, {g['why']}{cited}"]
    if doc["quantized_repos"]:
        lines += ["", "official pre-quantized repositories:"]
        lines += [f"  {fmt}: {repo}" for fmt, repo in doc["quantized_repos"].items()]
    return "\n".join(lines)
