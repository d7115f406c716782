"""Turn what the user typed (``qwen-7b``, ``Qwen/Qwen2.5-7B-Instruct``, ``./my-model``) into a spec.

Order, first match wins:

1. ``--params`` given: a generic Llama-like shape (:mod:`fitcheck.model.generic`); nothing is looked up.
2. An existing local path: :func:`fitcheck.model.local.spec_from_path` (a Hugging Face cache folder
   ``models--org--name`` reads its snapshot, named by the repo id); something that is clearly a
   path (``./x``, ``/x``, ``~/x``, ``x.gguf``) but does not exist: ``no such file or folder``.
2a. ``org/repo-GGUF:QUANT`` (llama.cpp's ``-hf`` form): :mod:`fitcheck.model.gguf_repo`.
2b. ``model:tag`` (an Ollama name): :mod:`fitcheck.model.ollama`, the local Ollama store first.
3. A full catalog id ``org/name`` (case-insensitive); with ``revision``, its snapshot in the local
   Hugging Face cache when there is one.
4. A short name: ``qwen-7b``, ``llama3-8b``, ``mixtral-8x7b`` ... (separators and case do not
   matter).  Several models can answer to one short name; the newest release wins, then the
   instruct/chat variant, and the note says what else matched.
5. A catalog repository name without its organisation (``Qwen2.5-7B-Instruct``).
6. Any other ``org/name``: the local Hugging Face cache (:mod:`fitcheck.model.hf_cache`, offline),
   else read from the Hugging Face Hub (:func:`fitcheck.model.hub.spec_from_hub`).
7. Otherwise: ``unknown model`` with the three closest catalog names.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace

from fitcheck.errors import FitcheckError
from fitcheck.model.catalog import CatalogEntry, alias_matches, load_catalog, name_matches, normalize_name, rank
from fitcheck.model.spec import ModelSpec
from fitcheck.units import parse_count

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_MAX_OTHERS = 4
_PATH_PREFIXES = ("/", "./", "../", "~", ".\\", "..\\", "\\")
_FILE_SUFFIXES = (".json", ".gguf", ".safetensors")
_SIZE_WORD = re.compile(r"^(\d+x|\d+(\.\d+)?[bm]|mini|small|medium|large|nano|tiny|plus)$")


@dataclass(frozen=True)
class ResolvedModel:
    spec: ModelSpec
    hf_id: str | None
    source: str                      # 'catalog' | 'local' | 'hub' | 'generic'
    note: str | None = None          # what was chosen and what else matched
    entry: CatalogEntry | None = None


def _choose(text: str, candidates: list[CatalogEntry]) -> ResolvedModel:
    ranked = sorted(candidates, key=rank, reverse=True)
    chosen = ranked[0]
    note = None
    if len(ranked) > 1:
        others = [e.hf_id for e in ranked[1:1 + _MAX_OTHERS]]
        more = len(ranked) - 1 - len(others)
        note = f"{text} → {chosen.hf_id}; also: {', '.join(others)}" + (f" and {more} more" if more > 0 else "")
    return ResolvedModel(chosen.spec, chosen.hf_id, "catalog", note, chosen)


def suggestions(text: str, n: int = 3) -> list[str]:
    """The ``n`` catalog names closest to ``text`` that do not mislead (fitcheck.model.suggest): names that
    continue it first (``llama-3.3`` -> llama3.3-70b), then the same family and variant within 2x of its size."""
    from fitcheck.model import suggest

    out = suggest.continuations(text) + [suggest.label(e) for e in suggest.close_entries(text)]
    return list(dict.fromkeys(out))[:n]


# Hub failures that a mistyped id gives (no such repository, not cached offline, no hub extra): the
# ones a close catalog id is worth suggesting for; never a gated or private repository's.
_MISSING_ON_HUB = ("not found on the Hugging Face Hub", "needs huggingface_hub", "Hub lookup is unavailable",
                   "is not cached", "not in the Hugging Face cache")


def _with_close_ids(exc: FitcheckError, repo_id: str) -> FitcheckError:
    """``exc`` with "did you mean" the catalog ids closest to ``repo_id`` (``Qwen/Qwen2.5-7B-Instrct``),
    when it says the repository could not be found or read; else ``exc`` unchanged."""
    if "private" in exc.message or not any(marker in exc.message for marker in _MISSING_ON_HUB):
        return exc
    from fitcheck.model.suggest import close_ids

    close = close_ids(repo_id)  # never another size or an older release (Qwen3-Coder-30B is not Qwen2.5-Coder-3B)
    if not close:
        return exc
    hint = f"did you mean {', '.join(close)}?" + (f" {exc.hint}" if exc.hint else "")
    out = FitcheckError(exc.message, hint)
    out.exit_code = exc.exit_code
    return out


def family_sizes(text: str, limit: int = 20) -> list[str]:
    """When ``text`` names a family or a generation (``qwen3``, ``llama3``, ``gpt-oss``), the short
    names of its sizes, smallest first; else []."""
    key = normalize_name(text)
    if not key or any(ch.isdigit() for ch in key.rsplit("-", 1)[-1]) and key.rsplit("-", 1)[-1][-1:] in "bm":
        return []       # it has a size already ('qwen3-8b'): not a family name
    sizes: dict[str, int] = {}
    for by_family in (False, True):     # its own short names first; else the family's models
        for e in load_catalog().entries:
            if by_family:
                labels = list(e.aliases[:1]) if e.family.lower() == text.strip().lower() else []
            else:
                labels = [a for a in e.aliases if normalize_name(a).startswith(key + "-")
                          and _SIZE_WORD.match(normalize_name(a)[len(key) + 1:].split("-")[0])]
            if labels:
                label = min(labels, key=len)
                sizes[label] = min(sizes.get(label, e.spec.total_params), e.spec.total_params)
        if sizes:
            break
    return sorted(sizes, key=lambda a: (sizes[a], a))[:limit]


def looks_like_path(text: str) -> bool:
    """True when ``text`` is clearly a file system path, not a name or an ``org/name`` Hub id.

    Hub ids contain '/' too, so only a leading ``/``, ``./``, ``../``, ``~`` (or their Windows
    spellings, or a drive letter) or a model-file suffix (.json, .gguf, .safetensors) counts.
    """
    if text.startswith(_PATH_PREFIXES) or re.match(r"^[A-Za-z]:[\\/]", text):
        return True
    return text.lower().endswith(_FILE_SUFFIXES)


def _local(path: str, revision: str | None = None) -> ResolvedModel:
    from pathlib import Path

    from fitcheck.model import hf_cache
    from fitcheck.model.local import spec_from_path

    p = Path(path)
    repo_id = hf_cache.repo_id_from_folder(p)
    if repo_id and p.is_dir() and (p / "snapshots").is_dir():
        cached = hf_cache.find_snapshot(p, repo_id, revision)
        if cached is None:
            raise FitcheckError(f"{path}: no snapshot" + (f" for revision {revision}" if revision else ""),
                                "download the model again, or point at a snapshot folder")
        return _cached(cached)
    if p.parent.name == "snapshots" and (snapshot_repo := hf_cache.repo_id_from_folder(p.parent.parent)):
        return _cached(hf_cache.CachedRepo(snapshot_repo, p.parent.parent, p, p.name, None))
    spec = spec_from_path(path)
    return ResolvedModel(spec, None, "local", f"{path} → read from local files")


def _cached(cached) -> ResolvedModel:
    from dataclasses import replace

    from fitcheck.model import hf_cache

    spec = hf_cache.spec_from_cached(cached)
    entry = load_catalog().get(cached.repo_id)
    if entry is not None:
        # a snapshot without generation_config.json: the catalog's record of the published one
        spec = replace(spec, family=entry.family, generation=spec.generation or entry.spec.generation)
    return ResolvedModel(spec, cached.repo_id, "hf-cache", hf_cache.describe(cached), entry)


def _hub(repo_id: str, revision: str | None = None) -> ResolvedModel:
    from fitcheck.model import hf_cache

    cached = hf_cache.cached_repo(repo_id, revision)
    if cached is not None:
        return _cached(cached)
    try:
        from fitcheck.model.hub import spec_from_hub
    except ImportError as exc:
        raise FitcheckError(f"unknown model {repo_id!r}: not in the catalog, and Hub lookup is unavailable ({exc})",
                            "pass a local path, or --params for a generic estimate") from exc
    from fitcheck.model.network import network_refusal

    refused = network_refusal()
    if refused:
        raise FitcheckError(f"unknown model {repo_id!r}: not in the catalog, and not in the Hugging Face cache here "
                            f"({refused})", "give a catalog name (`fitcheck models` lists them) or a cached repository")
    try:
        spec = spec_from_hub(repo_id, revision=revision) if revision else spec_from_hub(repo_id)
    except FitcheckError as exc:
        raise _not_at_revision(repo_id, revision) or exc from None
    return ResolvedModel(spec, repo_id, "hub", f"{repo_id} → read from the Hugging Face Hub")


def _not_at_revision(repo_id: str, revision: str | None) -> FitcheckError | None:
    """The error for a repository the local cache holds, but not at ``revision`` (None otherwise)."""
    from fitcheck.model import hf_cache

    if revision is None or hf_cache.cached_repo(repo_id) is None:
        return None
    folder = hf_cache.hub_cache_dir() / hf_cache.repo_folder_name(repo_id)
    refs = sorted(p.name for p in (folder / "refs").iterdir() if p.is_file()) if (folder / "refs").is_dir() else []
    commits = sorted(p.name[:12] for p in (folder / "snapshots").iterdir() if p.is_dir())
    held = ", ".join([*refs, *commits][:6]) or "none"
    return FitcheckError(f"{repo_id} is in the local cache, but not at revision {revision!r} (cached: {held})",
                         "drop --revision, or pass one of those")


def _offline_gguf(name) -> tuple[ModelSpec, CatalogEntry]:
    """gguf_repo.offline_spec(name): the spec, and the catalog entry it is stored from."""
    from fitcheck.model import gguf_repo

    spec, entry = gguf_repo.offline_spec(name)
    assert isinstance(entry, CatalogEntry)  # offline_spec returns base_entry's CatalogEntry, typed object
    return spec, entry


def _gguf_repo(name, revision: str | None) -> ResolvedModel:
    import time

    from fitcheck.model import gguf_repo
    from fitcheck.model import hub as hub_mod

    spec, entry = _offline_gguf(name) if gguf_repo.base_entry(name.repo) else (None, None)
    why = "offline"
    if not hub_mod.hub_offline():
        try:
            client = gguf_repo.HfFileSystemClient()
        except ImportError:
            why = "the hub extra is not installed"
        else:
            hub_mod.silence_hub_logs()
            deadline_s = hub_mod.HUB_DEADLINE_S   # the same bound as a config.json lookup
            try:
                remote = hub_mod.call_within(time.monotonic() + deadline_s, gguf_repo.spec_from_repo, name,
                                             client, revision)
            except hub_mod.DeadlineExceeded:
                if spec is None:
                    raise FitcheckError(f"no answer from the Hugging Face Hub within {deadline_s:g} s for "
                                        f"{name.repo}", "check the network (or HF_ENDPOINT), or set "
                                        "HF_HUB_OFFLINE=1 for the catalog's answer") from None
                why = f"no answer from the Hub within {deadline_s:g} s"
            except Exception as exc:  # any transport failure: the offline answer, said so
                if spec is None:
                    from fitcheck.model.hub import explain_hub_error

                    raise explain_hub_error(exc, name.repo, revision=revision) from None
                why = f"its header could not be read ({type(exc).__name__})"
            else:
                if entry is not None:
                    from dataclasses import replace

                    remote = replace(remote, family=entry.family)
                return ResolvedModel(remote, name.text, "hub", f"{name.text} → GGUF header read from the Hugging "
                                     "Face Hub (range requests)", entry)
    if spec is None or entry is None:   # both None, or neither
        spec, entry = _offline_gguf(name)   # raises: unknown repository
    note = (f"{name.text} → {entry.hf_id} as {name.quant.upper()} (the repository's file not read: {why}; "
            "its bytes are computed from the architecture)")
    return ResolvedModel(spec, name.text, "catalog", note, entry)


def _ollama(name) -> ResolvedModel:
    from dataclasses import replace

    from fitcheck.model import ollama

    entry = ollama.catalog_entry(name)
    manifest = ollama.manifest_path(name)
    blob = ollama.model_blob(manifest) if manifest.is_file() else None
    if blob is not None:
        spec = ollama.spec_from_blob(blob, name.text)
        if entry is not None:
            spec = replace(spec, family=entry.family)
        return ResolvedModel(spec, name.text, "ollama",
                             f"{name.text} → read from the local Ollama store ({blob}); Ollama runs llama.cpp", entry)
    if entry is None:
        from fitcheck.model import suggest

        size = name.size or "no size"
        raise FitcheckError(f"unknown Ollama model {name.text!r} ({size}; not pulled in {ollama.store_dir()})",
                            suggest.hint(name.model + "-" + (name.size or "")))
    precision = ollama.precision_of(name, entry.spec)
    # An Ollama model is one GGUF blob: its type is the default, with llama.cpp (Ollama's runtime).
    spec = replace(entry.spec.as_stored(precision), stored_file_type=name.quant.upper() if name.quant
                   else precision.upper())
    default = "" if name.quant else (", the published MXFP4 experts, the rest BF16" if spec.stored_groups()
                                     else ", Ollama's default quantization")
    engine = "llama.cpp, Ollama's runtime"  # the blob's type is the default, so llama.cpp runs it
    note = (f"{name.text} → {entry.hf_id}{ollama.size_note(name)} as {precision.upper()}{default} "
            f"(engine {engine}); not pulled here, so bytes are computed")
    return ResolvedModel(spec, name.text, "ollama", note, entry)


def resolve_model(text: str, *, params: str | None = None, layers: int | None = None,
                  hidden: int | None = None, kv_heads: int | None = None,
                  revision: str | None = None) -> ResolvedModel:
    """The :class:`ResolvedModel` for what the user typed; :class:`FitcheckError` when unknown."""
    if not isinstance(text, str) or not text.strip():
        raise FitcheckError("no model given", "try: fitcheck qwen-7b, or fitcheck models to list them")
    text = text.strip()

    if params is not None:
        known_model = _known(text)
        if known_model is not None:
            raise FitcheckError(f"--params is for a model fitcheck does not know, and {text!r} is "
                                f"{known_model.hf_id} ({known_model.spec.total_params / 1e9:.2f}B parameters)",
                                "drop --params (or give the generic model another name)")
        return _generic(text, params, layers, hidden, kv_heads)
    if layers is not None or hidden is not None or kv_heads is not None:
        raise FitcheckError("--layers, --hidden and --kv-heads describe a generic model and need --params",
                            "add --params, e.g. --params 7b")

    folder_note = None
    if os.path.exists(os.path.expanduser(text)):
        path = os.path.expanduser(text)
        if looks_like_path(text) or not os.path.isdir(path) or _has_model_files(path) or _is_hf_cache_folder(path):
            return _local(path, revision)
        # A folder named like the model (./qwen-7b, empty or unrelated) does not hide the name.
        folder_note = f"./{text} is a folder without config.json or weights: {text!r} read as a model name"
    elif looks_like_path(text):
        raise FitcheckError(f"no such file or folder: {text}",
                            "check the path, or give a model name: `fitcheck models` lists them")
    if ":" in text:
        from fitcheck.model import gguf_repo, ollama

        gguf = gguf_repo.parse_name(text)
        if gguf is not None:
            return _gguf_repo(gguf, revision)
        named = ollama.parse_name(text)
        if named is not None:
            return _ollama(named)

    if folder_note is None:
        return _resolve_name(text, revision)
    try:
        resolved = _resolve_name(text, revision)
    except FitcheckError as exc:
        raise FitcheckError(f"{exc.message}; ./{text} is a folder without config.json or weights",
                            exc.hint) from None
    return replace(resolved, note="; ".join(n for n in (resolved.note, folder_note) if n))


def _is_hf_cache_folder(path: str) -> bool:
    """A Hugging Face cache repo folder (models--org--name, holding snapshots/) or one of its snapshots."""
    from pathlib import Path

    from fitcheck.model import hf_cache

    p = Path(path)
    return bool(hf_cache.repo_id_from_folder(p) and (p / "snapshots").is_dir()) or (
        p.parent.name == "snapshots" and bool(hf_cache.repo_id_from_folder(p.parent.parent)))


def _has_model_files(path: str) -> bool:
    from fitcheck.model.local import has_model_files

    return has_model_files(path)


def _resolve_name(text: str, revision: str | None = None) -> ResolvedModel:
    """A catalog name, short name or Hub id (not a local path)."""
    catalog = load_catalog()
    exact = catalog.get(text)
    if exact is not None:
        if revision is not None:
            from fitcheck.model import hf_cache

            cached = hf_cache.cached_repo(exact.hf_id, revision)
            if cached is not None:
                return _cached(cached)
        return ResolvedModel(exact.spec, exact.hf_id, "catalog", None, exact)

    key = normalize_name(text)
    if "/" not in text:
        exact_name = [e for e in name_matches(key) if e.name == text]
        if exact_name:          # 'Qwen-7B' is Qwen/Qwen-7B, not the newest model called qwen-7b
            return _choose(text, exact_name)
        short = alias_matches(key)
        if short:
            return _choose(text, short)
        named = name_matches(key)
        if named:
            return _choose(text, named)
    if _REPO_ID.match(text):
        try:
            return _hub(text, revision) if revision else _hub(text)
        except FitcheckError as exc:
            raise _with_close_ids(exc, text) from None
    sizes = family_sizes(text)
    if len(sizes) > 1:
        raise FitcheckError(f"{text!r} is a model family: choose a size",
                            f"{', '.join(sizes)} (e.g. fitcheck {sizes[len(sizes) // 2]})")
    from fitcheck.model.suggest import hint

    raise FitcheckError(f"unknown model {text!r}", hint(text))


def _known(text: str) -> CatalogEntry | None:
    """The catalog entry ``text`` names (id, short name or repository name), else None."""
    exact = load_catalog().get(text)
    if exact is not None:
        return exact
    if "/" in text:
        return None
    key = normalize_name(text)
    matches = alias_matches(key) or name_matches(key)
    return max(matches, key=rank) if matches else None


def _generic(text: str, params: str, layers: int | None, hidden: int | None, kv_heads: int | None) -> ResolvedModel:
    from fitcheck.model.generic import generic_spec

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
