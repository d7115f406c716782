"""``GET /api/options`` (``fitcheck.options/1``): every query parameter of every endpoint with its declaration — from
fitcheck.options where it is a request option, from the click option otherwise — the modes and the profiles.  The
page builds its form from it, so the page and the command line cannot drift."""

from __future__ import annotations

from typing import Any

import click

from fitcheck import __version__
from fitcheck.serve.query import (
    PROBE_EXCLUDED,
    WHERE_EXCLUDED,
    Param,
    check_params,
    fits_params,
    params_of,
    plot_params,
)

OPTIONS_SCHEMA = "fitcheck.options/1"
MODELS_LIMIT = (1, 100, 20)     # /api/models?limit=: lowest, highest, default


def options_document() -> dict[str, Any]:
    """Every query parameter of /api/check with its declaration (fitcheck.options where it is a request option,
    the click option otherwise), the modes, the profiles, and each endpoint's parameters."""
    from fitcheck.options import MODES
    from fitcheck.profiles import list_profiles
    from fitcheck.render.profiles import sorted_for_listing

    machines = sorted_for_listing(list_profiles())
    names = [m.name for m in machines]
    check = check_params()
    endpoints: dict[str, dict[str, Any]] = {}
    for path, params in _endpoint_params().items():
        own = [_entry(p, names) for q, p in params.items() if q not in check]
        endpoints[path] = {"params": list(params), "options": own}
    endpoints["/api/models"] = {"params": ["q", "limit"], "options": _models_entries()}
    endpoints["/api/probe"]["params"].append("refresh")
    endpoints["/api/probe"]["options"].append(_plain_entry(
        "refresh", "flag", False, "Probe this machine again (GPU memory in use changes): later answers use it."))
    return {
        "schema": OPTIONS_SCHEMA,
        "fitcheck_version": __version__,
        "options": [_entry(p, names) for p in check.values()],
        "modes": list(MODES),
        "profiles": [{"name": m.name, "kind": m.kind, "description": m.description} for m in machines],
        "endpoints": endpoints,
    }


def _endpoint_params() -> dict[str, dict[str, Param]]:
    from fitcheck.cli.probe_cmd import probe
    from fitcheck.cli.profiles_cmd import profiles
    from fitcheck.cli.where_cmd import where

    check = check_params()
    return {"/api/check": check, "/api/bars.svg": check, "/api/where": params_of(where, WHERE_EXCLUDED),
            "/api/fits": fits_params(), "/api/plot.svg": plot_params(), "/api/probe": params_of(probe, PROBE_EXCLUDED),
            "/api/profiles": params_of(profiles, ("as_json",)), "/api/options": {}}


MODEL_HELP = ("The model: a catalog name (qwen-7b, llama3-8b), a repository id in the local Hugging Face cache, or "
              "an Ollama name (qwen2.5:7b).")
QUERY_HELP = "Only catalog models whose id, alias or family holds this text."
_SIZES = ("vram", "ram")


def _entry(p: Param, profile_names: list[str]) -> dict[str, Any]:
    from fitcheck.options import BY_NAME, MODES, TRAINING_MODES

    param = p.param
    opt = BY_NAME.get(param.name or "")
    flags = [*param.opts, *param.secondary_opts] if isinstance(param, click.Option) else []
    helps = param.help if isinstance(param, click.Option) else (MODEL_HELP if p.query == "model" else QUERY_HELP)
    entry: dict[str, Any] = {"name": param.name, "param": p.query, "flags": flags, "help": helps or "",
                             "multiple": p.multiple, "metavar": getattr(param, "metavar", None)}
    if opt is not None:
        entry.update(type=opt.kind, default=opt.default, choices=list(opt.choices) or None,
                     modes=[m for m in MODES if m in opt.modes], low=opt.low, high=opt.high)
        return entry
    kind, choices, low, high = _click_kind(param)
    if p.query == "profile":
        kind, choices = "choice", profile_names
    elif p.query in _SIZES:
        kind = "size"
    default = param.default
    if not isinstance(default, (str, int, float, bool, tuple, list)):   # None, or click's UNSET
        default = [] if p.multiple else False if kind == "flag" else None
    entry.update(type=kind, default=list(default) if isinstance(default, (tuple, list)) else default,
                 choices=choices, modes=list(TRAINING_MODES) if p.query == "tokens" else list(MODES), low=low,
                 high=high)
    return entry


def _click_kind(param: click.Parameter) -> tuple[str, list | None, float | None, float | None]:
    t = param.type
    if isinstance(param, click.Option) and param.is_flag:
        return "flag", None, None, None
    if isinstance(t, click.Choice):
        return "choice", [str(c) for c in t.choices], None, None
    if isinstance(t, (click.IntRange, click.FloatRange)):
        return ("int" if isinstance(t, click.IntRange) else "float"), None, t.min, t.max
    if t is click.INT:
        return "int", None, None, None
    if t is click.FLOAT:
        return "float", None, None, None
    return "str", None, None, None


def _plain_entry(name: str, kind: str, default: Any, help: str, low: float | None = None,
                 high: float | None = None) -> dict[str, Any]:
    from fitcheck.options import MODES

    return {"name": name, "param": name, "flags": [], "help": help, "multiple": False, "metavar": None, "type": kind,
            "default": default, "choices": None, "modes": list(MODES), "low": low, "high": high}


def _models_entries() -> list[dict[str, Any]]:
    low, high, default = MODELS_LIMIT
    return [_plain_entry("q", "str", None, "Catalog models whose id, alias or family holds this text (those that "
                                           "start with it first), and the local models whose name holds it."),
            _plain_entry("limit", "int", default, "At most this many of each.", low, high)]
