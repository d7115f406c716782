"""Turn what the user typed (``qwen-7b``, ``Qwen/Qwen2.5-7B-Instruct``, ``./my-model``) into a spec.

Order, first match wins:

1. ``--params`` given: a generic Llama-like shape (:mod:`fitcheck.model.generic`); nothing is looked up.
2. An existing local path: :func:`fitcheck.model.local.spec_from_path`; something that is
   clearly a path (``./x``, ``/x``, ``~/x``, ``x.gguf``) but does not exist: ``no such file or folder``.
3. A full catalog id ``org/name`` (case-insensitive).
4. A short name: ``qwen-7b``, ``llama3-8b``, ``mixtral-8x7b`` ... (separators and case do not
   matter).  Several models can answer to one short name; the newest release wins, then the
   instruct/chat variant, and the note says what else matched.
5. A catalog repository name without its organisation (``Qwen2.5-7B-Instruct``).
6. Any other ``org/name``: read from the Hugging Face Hub (:func:`fitcheck.model.hub.spec_from_hub`).
7. Otherwise: ``unknown model`` with the three closest catalog names.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, replace
from functools import lru_cache

from fitcheck.errors import FitcheckError
from fitcheck.model.catalog import CatalogEntry, load_catalog, normalize_name
from fitcheck.model.spec import ModelSpec

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_MAX_OTHERS = 4
_PATH_PREFIXES = ("/", "./", "../", "~", ".\\", "..\\", "\\")
_FILE_SUFFIXES = (".json", ".gguf", ".safetensors")


@dataclass(frozen=True)
class ResolvedModel:
    spec: ModelSpec
    hf_id: str | None
    source: str                      # 'catalog' | 'local' | 'hub' | 'generic'
    note: str | None = None          # what was chosen and what else matched
    entry: CatalogEntry | None = None


def _rank(entry: CatalogEntry) -> tuple:
    # newest release first, then instruct over base, then the shorter (plainer) id
    return (entry.released, entry.variant == "instruct", -len(entry.hf_id))


@lru_cache(maxsize=1)
def _indexes() -> tuple[dict[str, list[CatalogEntry]], dict[str, list[CatalogEntry]]]:
    """(normalized alias -> entries, normalized repository name -> entries), built once."""
    by_alias: dict[str, list[CatalogEntry]] = {}
    by_name: dict[str, list[CatalogEntry]] = {}
    for e in load_catalog().entries:
        for alias in {normalize_name(a) for a in e.aliases}:
            by_alias.setdefault(alias, []).append(e)
        by_name.setdefault(normalize_name(e.name), []).append(e)
    return by_alias, by_name


def _short_name_matches(key: str) -> list[CatalogEntry]:
    return _indexes()[0].get(key, [])


def _name_matches(key: str) -> list[CatalogEntry]:
    return _indexes()[1].get(key, [])


def _choose(text: str, candidates: list[CatalogEntry]) -> ResolvedModel:
    ranked = sorted(candidates, key=_rank, reverse=True)
    chosen = ranked[0]
    note = None
    if len(ranked) > 1:
        others = [e.hf_id for e in ranked[1:1 + _MAX_OTHERS]]
        more = len(ranked) - 1 - len(others)
        note = f"{text} → {chosen.hf_id}; also: {', '.join(others)}" + (f" and {more} more" if more > 0 else "")
    return ResolvedModel(chosen.spec, chosen.hf_id, "catalog", note, chosen)


def suggestions(text: str, n: int = 3) -> list[str]:
    """The ``n`` catalog names/aliases closest to ``text`` (difflib)."""
    names: dict[str, str] = {}
    for e in load_catalog().entries:
        for label in (e.name, *e.aliases):
            names.setdefault(normalize_name(label), label)
    close = difflib.get_close_matches(normalize_name(text), list(names), n=n, cutoff=0.0)
    return [names[c] for c in close]


def looks_like_path(text: str) -> bool:
    """True when ``text`` is clearly a file system path, not a name or an ``org/name`` Hub id.

    Hub ids contain '/' too, so only a leading ``/``, ``./``, ``../``, ``~`` (or their Windows
    spellings, or a drive letter) or a model-file suffix (.json, .gguf, .safetensors) counts.
    """
    if text.startswith(_PATH_PREFIXES) or re.match(r"^[A-Za-z]:[\\/]", text):
        return True
    return text.lower().endswith(_FILE_SUFFIXES)


def _local(path: str) -> ResolvedModel:
    try:
        from fitcheck.model.local import spec_from_path
    except ImportError as exc:  # pragma: no cover - the module ships with fitcheck
        raise FitcheckError(f"cannot read local model {path!r}: {exc}") from exc
    spec = spec_from_path(path)
    return ResolvedModel(spec, None, "local", f"{path} → read from local files")


def _hub(repo_id: str) -> ResolvedModel:
    try:
        from fitcheck.model.hub import spec_from_hub
    except ImportError as exc:
        raise FitcheckError(f"unknown model {repo_id!r}: not in the catalog, and Hub lookup is unavailable ({exc})",
                            "pass a local path, or --params for a generic estimate") from exc
    spec = spec_from_hub(repo_id)
    return ResolvedModel(spec, repo_id, "hub", f"{repo_id} → read from the Hugging Face Hub")


def resolve_model(text: str, *, params: str | None = None, layers: int | None = None,
                  hidden: int | None = None, kv_heads: int | None = None) -> ResolvedModel:
    """The :class:`ResolvedModel` for what the user typed; :class:`FitcheckError` when unknown."""
    if not isinstance(text, str) or not text.strip():
        raise FitcheckError("no model given", "try: fitcheck qwen-7b, or fitcheck models to list them")
    text = text.strip()

    if params is not None:
        return _generic(text, params, layers, hidden, kv_heads)
    if layers is not None or hidden is not None or kv_heads is not None:
        raise FitcheckError("--layers, --hidden and --kv-heads describe a generic model and need --params",
                            "add --params, e.g. --params 7b")

    folder_note = None
    if os.path.exists(os.path.expanduser(text)):
        path = os.path.expanduser(text)
        if looks_like_path(text) or not os.path.isdir(path) or _has_model_files(path):
            return _local(path)
        # A folder named like the model (./qwen-7b, empty or unrelated) does not hide the name.
        folder_note = f"./{text} is a folder without config.json or weights: {text!r} read as a model name"
    elif looks_like_path(text):
        raise FitcheckError(f"no such file or folder: {text}",
                            "check the path, or give a model name: `fitcheck models` lists them")

    if folder_note is None:
        return _resolve_name(text)
    try:
        resolved = _resolve_name(text)
    except FitcheckError as exc:
        raise FitcheckError(f"{exc.message}; ./{text} is a folder without config.json or weights",
                            exc.hint) from None
    return replace(resolved, note="; ".join(n for n in (resolved.note, folder_note) if n))


def _has_model_files(path: str) -> bool:
    from fitcheck.model.local import has_model_files

    return has_model_files(path)


def _resolve_name(text: str) -> ResolvedModel:
    """A catalog name, short name or Hub id (not a local path)."""
    catalog = load_catalog()
    exact = catalog.get(text)
    if exact is not None:
        return ResolvedModel(exact.spec, exact.hf_id, "catalog", None, exact)

    key = normalize_name(text)
    if "/" not in text:
        short = _short_name_matches(key)
        if short:
            return _choose(text, short)
        named = _name_matches(key)
        if named:
            return _choose(text, named)
    if _REPO_ID.match(text):
        return _hub(text)
    hint = "did you mean: " + ", ".join(suggestions(text))
    raise FitcheckError(f"unknown model {text!r}", hint)


def _generic(text: str, params: str, layers: int | None, hidden: int | None, kv_heads: int | None) -> ResolvedModel:
    from fitcheck.model.generic import generic_spec
    from fitcheck.units import parse_count

    try:
        n_params = parse_count(params)
    except ValueError as exc:
        raise FitcheckError(f"--params: {exc}") from None
    if n_params < 1:
        raise FitcheckError(f"--params must be at least 1 parameter, got {params!r}")
    spec = generic_spec(n_params, layers=layers, hidden=hidden, kv_heads=kv_heads, name=text)
    note = (f"{text} → generic Llama-like shape for {params} parameters "
            f"({spec.num_layers} layers, hidden {spec.hidden_size}, {spec.num_kv_heads} kv heads): approximate")
    return ResolvedModel(spec, None, "generic", note)
