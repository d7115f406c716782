"""The web API of `fitcheck serve`: pure functions from a request's path and query to an :class:`Answer`.

Every answer is built by the command line's own code, so the page cannot drift from the CLI:

- the query becomes the argv of the matching click command and is parsed by that command's own parser
  (fitcheck.serve.query): every type, range, choice, envvar and callback is the CLI's;
- then the same library functions the command calls build the document (fitcheck.preflight.emit.check_result and
  check_answer, where_cmd.where_answer, models_cmd.fits_answer, probe_document, profiles_document, plot_svg), and
  it is serialised exactly as the command prints it: ``GET /api/check?...`` is byte for byte the stdout of
  ``fitcheck check ... --json``.

Bad input is 400 with the one line the CLI prints for it (without "fitcheck: "), an internal error 500 with one
line and never a traceback.  Requests never reach the network (fitcheck.model.network.network_refused), never name a
file (a model or profile that is a path is refused), never write (no receipts, no RAM bench), and answer for this
machine as probed once at start (:class:`Here`; ``/api/probe?refresh=1`` probes again).
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import click

from fitcheck.contracts import document_json
from fitcheck.errors import EXIT_BAD_INPUT, EXIT_INTERNAL_ERROR, FitcheckError, redact_credentials
from fitcheck.serve.query import (
    OFF,
    ON,
    PROBE_EXCLUDED,
    WHERE_EXCLUDED,
    ApiError,
    argv_of,
    check_command,
    check_params,
    fits_params,
    params_of,
    parse,
    plot_params,
    unknown_parameter,
    usage_errors_of,
)
from fitcheck.serve.vocabulary import MODELS_LIMIT, options_document

JSON = "application/json; charset=utf-8"
SVG = "image/svg+xml"
NETWORK_REFUSAL = "the fitcheck server never reads the Hugging Face Hub"
PATH_REFUSAL = "the server answers for catalog, Hub-cache and Ollama names only"
PROFILE_REFUSAL = "the server answers for profile names only (`fitcheck profiles` lists them)"
MAX_PARAMS = 100                # query parameters in one request
_MODEL_FILE_SUFFIXES = (".gguf", ".safetensors", ".json")


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes


def error_answer(status: int, message: str, exit_code: int) -> Answer:
    return json_answer({"error": message, "exit_code": exit_code}, status)


def json_answer(doc: Any, status: int = 200, **dump: Any) -> Answer:
    """``doc`` as the commands print documents: ``dump`` are json.dumps' settings (indent 2 by default)."""
    return text_answer(document_json(doc, **{"indent": 2, **dump}) + "\n", JSON, status)


def text_answer(text: str, content_type: str, status: int = 200) -> Answer:
    return Answer(status, content_type, text.encode("utf-8"))


# ---- this machine, read once --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Snapshot:
    """What the server read of this machine: the machine probed (bench off), the edge context (the installed
    engines and stack, fitcheck.context), the stack checked against the machine (probe's "software"), and the
    local models it may name (Hugging Face cache and Ollama store: names, never paths)."""

    machine: Any
    context: Any
    software: Any
    local: tuple[tuple[str, str], ...]   # (name, source)


def read_here() -> Snapshot:
    """This machine as `fitcheck probe` and `fitcheck MODEL` read it, without measuring RAM bandwidth."""
    from fitcheck.context import read_context
    from fitcheck.engines.stack import check_stack
    from fitcheck.profiles.overrides import load_machine

    machine = load_machine(None, bench=False)
    context = read_context(True)
    return Snapshot(machine, context, check_stack(context.stack, machine), _local_names())


def _local_names() -> tuple[tuple[str, str], ...]:
    from fitcheck.model.local_stores import discover

    try:
        return tuple((m.name, m.source) for m in discover() if m.source in ("hf-cache", "ollama"))
    except (OSError, FitcheckError):
        return ()


class Here:
    """The server's view of this machine: one :class:`Snapshot`, replaced whole by :meth:`refresh` (a request
    reads one snapshot, never half of two)."""

    def __init__(self, read: Callable[[], Snapshot] = read_here):
        self._read = read
        self._lock = threading.Lock()
        self.snapshot = read()

    def refresh(self) -> Snapshot:
        with self._lock:
            self.snapshot = self._read()
        return self.snapshot


def _machine(snap: Snapshot, profile: str | None, gpu: str | None = None, vram: str | None = None,
             ram: str | None = None):
    """As fitcheck.profiles.overrides.load_machine gives it: the profile, else this machine; then the what-ifs."""
    from fitcheck.profiles.overrides import apply_machine_overrides
    from fitcheck.profiles.store import load_profile

    machine = load_profile(refuse_profile_path(profile)) if profile else snap.machine
    return apply_machine_overrides(machine, gpu, vram, ram)


def _context(snap: Snapshot, this_machine: bool, cost=None, tokens: int | None = None):
    """As fitcheck.context.read_context gives it, this machine's part read once."""
    from fitcheck.context import Context

    return replace(snap.context, cost=cost, tokens=tokens) if this_machine else Context(cost=cost, tokens=tokens)


# ---- refusing files -----------------------------------------------------------------------------------------
def refuse_model_path(model: str | None) -> str | None:
    """``model`` unless it names a file or folder (what fitcheck.model.resolve would read from disk)."""
    if model is None:
        return None
    text = model.strip()
    lower = text.lower()
    if (text.startswith((".", "/", "~", "\\")) or "\\" in text or re.match(r"^[A-Za-z]:", text)
            or lower.endswith(_MODEL_FILE_SUFFIXES) or "\x00" in text):
        raise ApiError(400, f"{text[:200]!r}: {PATH_REFUSAL}, not files or folders")
    if os.path.lexists(text) and ("/" in text or not os.path.isdir(text) or _reads_folder(text)):
        raise ApiError(400, f"{text[:200]!r}: {PATH_REFUSAL}, not files or folders")
    return model


def _reads_folder(path: str) -> bool:
    from fitcheck.model.local import has_model_files
    from fitcheck.model.resolve import _is_hf_cache_folder

    return has_model_files(path) or _is_hf_cache_folder(path)


def refuse_profile_path(profile: str) -> str:
    text = profile.strip()
    if "/" in text or "\\" in text or os.sep in text or text.startswith((".", "~")) or text.lower().endswith(".toml"):
        raise ApiError(400, f"--profile {text[:200]!r}: {PROFILE_REFUSAL}, not files")
    return profile


# ---- the endpoints ------------------------------------------------------------------------------------------
def _check(query: list[tuple[str, str]], here: Here, *, need_model: bool = False):
    """(the CheckResult or None, the document) of `fitcheck check ... --json`, in the command's order of checks."""
    from fitcheck.cli.options import cost_settings, request_from, typed_for_other_mode
    from fitcheck.preflight import emit
    from fitcheck.preflight.requirements import evaluate, machine_only, parse_requirements
    from fitcheck.preflight.requirements import exit_code as requirements_exit_code

    ctx = parse(check_command(), argv_of(check_params(), query, command=check_command()))
    p = ctx.params
    snap = here.snapshot
    with usage_errors_of(ctx):
        requirements = parse_requirements(p["require"])
        what_if = any(p[k] for k in ("gpu", "vram", "ram"))
        edge = _context(snap, p["profile"] is None and not what_if,
                        cost_settings(p["kwh_price"], p["amortize_years"], p["hours_per_day"]), p["tokens"])
        model = p["model"]
        if not model:
            if need_model or not requirements:
                raise click.UsageError("missing MODEL (or --plan PLAN.toml, or --require for machine checks only)")
            machine = _machine(snap, p["profile"], p["gpu"], p["vram"], p["ram"])
            machine_only(requirements)
            return None, emit.requirements_document(machine, evaluate(requirements, machine, edge.stack))
        refuse_model_path(model)
        typed_for_other_mode(ctx, p["mode"])
        request = request_from(p)
        machine = _machine(snap, p["profile"], p["gpu"], p["vram"], p["ram"])
        outcomes = evaluate(requirements, machine, edge.stack)
        try:
            result = emit.check_result(model, request, machine, params=p["params"], revision=p["revision"],
                                       context=edge, choose=not p["strict"])
        except FitcheckError as exc:
            if requirements_exit_code(outcomes) == 1:  # the CLI: a failed --require is exit 1 whatever else happens
                raise ApiError(400, redact_credentials(exc.one_line()), 1) from None
            raise
        doc, _ = emit.check_answer(result, strict=p["strict"], outcomes=outcomes)
        return result, doc


def api_check(query, here: Here) -> Answer:
    from fitcheck.preflight.emit import document_text

    _, doc = _check(query, here)
    return text_answer(document_text(doc) + "\n", JSON)


def api_bars(query, here: Here) -> Answer:
    from fitcheck.render.charts.svg import device_bars_svg

    result, _ = _check(query, here, need_model=True)
    return text_answer(device_bars_svg(result), SVG)


def api_where(query, here: Here) -> Answer:
    from fitcheck.cli.where_cmd import renderers, where, where_answer

    ctx = parse(where, argv_of(params_of(where, WHERE_EXCLUDED), query, command=where))
    p = dict(ctx.params)
    named = ("model", "max_price", "kind", "params", "tokens", "kwh_price", "amortize_years", "hours_per_day")
    given = {k: p.pop(k) for k in named}
    for k in WHERE_EXCLUDED:
        p.pop(k, None)
    with usage_errors_of(ctx):
        refuse_model_path(given["model"])
        result = where_answer(ctx, given.pop("model"), **given, options=p)
    document, _ = renderers(result)
    return json_answer(document(result), sort_keys=True)


def api_fits(query, here: Here) -> Answer:
    from fitcheck.cli.models_cmd import fits_answer, models
    from fitcheck.render.fits import fits_document

    ctx = parse(models, argv_of(fits_params(), query, fixed=["--fits"], command=models))
    p = ctx.params
    snap = here.snapshot
    with usage_errors_of(ctx):
        result = fits_answer(ctx, p["query"], p["family"], p["profile"], p["mode"], p["context"], p["batch"],
                             p["engine"], p["seq_len"], p["headroom"], p["kind"], p["local"],
                             (p["sort"], p["top"], p["min_speed"]),
                             machine_for=lambda name: _machine(snap, name),
                             context_for=lambda name: _context(snap, name is None))
    return json_answer(fits_document(result))


def api_probe(query, here: Here) -> Answer:
    from fitcheck.cli.probe_cmd import probe
    from fitcheck.render.machine import probe_document

    refresh = [v for k, v in query if k == "refresh"]
    rest = [(k, v) for k, v in query if k != "refresh"]
    params = params_of(probe, PROBE_EXCLUDED)
    if len(refresh) > 1:
        raise ApiError(400, "parameter 'refresh' is given more than once")
    ctx = parse(probe, argv_of(params, rest, command=probe))
    p = ctx.params
    with usage_errors_of(ctx):
        snap = here.refresh() if refresh and _on_off("refresh", refresh[0]) else here.snapshot
        machine = _machine(snap, p["profile"], p["gpu"], p["vram"], p["ram"])
        software = None if (p["profile"] or p["gpu"] or p["vram"] or p["ram"]) else snap.software
    return json_answer(probe_document(machine, software), ensure_ascii=False)


def _on_off(name: str, value: str) -> bool:
    low = value.strip().lower()
    if low in ON or low in OFF or low == "":
        return low in ON
    raise ApiError(400, f"{name} is on or off, got {value[:40]!r}")


def api_profiles(query, here: Here) -> Answer:
    from fitcheck.cli.profiles_cmd import profiles
    from fitcheck.profiles import list_profiles, machines_of_kind
    from fitcheck.render.profiles import profiles_document

    ctx = parse(profiles, argv_of(params_of(profiles, ("as_json",)), query))
    machines = machines_of_kind(list_profiles(), ctx.params["kind"])
    return json_answer(profiles_document(machines), ensure_ascii=False)


def api_plot(query, here: Here) -> Answer:
    from fitcheck.cli.options import request_from, typed_for_other_mode
    from fitcheck.cli.plot_cmd import plot
    from fitcheck.render.plot import plot_svg
    from fitcheck.search.sweep import sweep

    ctx = parse(plot, argv_of(plot_params(), query, command=plot))
    p = ctx.params
    snap = here.snapshot
    with usage_errors_of(ctx):
        refuse_model_path(p["model"])
        typed_for_other_mode(ctx, p["mode"])
        request = request_from(p)
        machine = _machine(snap, p["profile"], p["gpu"], p["vram"], p["ram"])
        edge = _context(snap, p["profile"] is None and not (p["gpu"] or p["vram"] or p["ram"]))
        result = sweep(p["model"], request, machine, against=p["against"], params=p["params"],
                       revision=p["revision"], ctx=edge)
    return text_answer(plot_svg(result), SVG)


def api_models(query, here: Here) -> Answer:
    """The model box's completion: catalog models whose id, alias or family holds ``q`` (those that start with it
    first), ``limit`` of them, as `fitcheck models q --json` lists them; and the local ones it may name."""
    from fitcheck.cli.models_cmd import list_row, models_document
    from fitcheck.model.catalog import load_catalog

    given = _single(query, {"q", "limit"})
    text = given.get("q", "").strip()
    limit = _limit(given.get("limit", ""))
    found = load_catalog().search(text or None)
    key = text.lower()

    def starts(e) -> bool:
        return any(n.lower().startswith(key) for n in (e.hf_id, e.hf_id.split("/")[-1], *e.aliases))

    ranked = sorted(found, key=lambda e: not starts(e)) if key else list(found)
    doc = models_document([list_row(e) for e in ranked[:limit]])
    doc["total"] = len(ranked)
    doc["local"] = [{"id": name, "source": source} for name, source in here.snapshot.local
                    if not key or key in name.lower()][:limit]
    return json_answer(doc)


def _single(query: list[tuple[str, str]], names: set[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in query:
        if name not in names:
            raise ApiError(400, unknown_parameter(name, names))
        if name in out:
            raise ApiError(400, f"parameter {name!r} is given more than once")
        out[name] = value
    return out


def _limit(text: str) -> int:
    low, high, default = MODELS_LIMIT
    if not text.strip():
        return default
    if not (text.strip().isascii() and text.strip().isdigit()) or not low <= int(text.strip()[:6]) <= high:
        raise ApiError(400, f"limit must be a whole number between {low} and {high}, got {text[:24]!r}")
    return int(text.strip())


def api_options(query, here: Here) -> Answer:
    _single(query, set())
    return json_answer(options_document())


ENDPOINTS: dict[str, Callable[[list[tuple[str, str]], Here], Answer]] = {
    "/api/options": api_options,
    "/api/models": api_models,
    "/api/check": api_check,
    "/api/where": api_where,
    "/api/fits": api_fits,
    "/api/probe": api_probe,
    "/api/profiles": api_profiles,
    "/api/plot.svg": api_plot,
    "/api/bars.svg": api_bars,
}


def answer(path: str, query: list[tuple[str, str]], here: Here) -> Answer:
    """The answer to ``GET path?query`` (an /api/ path): 200 with the document, 400 for bad input, 404 for no such
    endpoint, 500 for a bug (one line, never a traceback)."""
    from fitcheck.cli import usage_error_line
    from fitcheck.model.network import network_refused

    endpoint = ENDPOINTS.get(path)
    if endpoint is None:
        close = difflib.get_close_matches(path, list(ENDPOINTS), n=1, cutoff=0.6)
        hint = f" (did you mean: {close[0]})" if close else f" (endpoints: {', '.join(ENDPOINTS)})"
        return error_answer(404, f"no such endpoint {path[:100]!r}{hint}", EXIT_BAD_INPUT)
    if len(query) > MAX_PARAMS:
        return error_answer(400, f"{len(query)} query parameters: at most {MAX_PARAMS}", EXIT_BAD_INPUT)
    try:
        with network_refused(NETWORK_REFUSAL):
            return endpoint(query, here)
    except ApiError as exc:
        return error_answer(exc.status, redact_credentials(exc.message), exc.exit_code)
    except FitcheckError as exc:
        return error_answer(400, redact_credentials(exc.one_line()), exc.exit_code)
    except click.ClickException as exc:
        return error_answer(400, usage_error_line(exc), EXIT_BAD_INPUT)
    except Exception as exc:  # a bug: one line here, the traceback on the server's stderr only when debugging
        return internal_error(path, exc)


def internal_error(path: str, exc: BaseException) -> Answer:
    detail = redact_credentials(" ".join(str(exc).split()))[:200]
    line = (f"{path.removeprefix('/api/')}: internal error ({type(exc).__name__}{': ' + detail if detail else ''}); "
            "this is a bug in fitcheck: please report it with the request")
    debug = os.environ.get("FITCHECK_DEBUG", "") not in ("", "0")
    if debug:
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    print(f"fitcheck serve: {line}", file=sys.stderr, flush=True)
    return error_answer(500, line, EXIT_INTERNAL_ERROR)

