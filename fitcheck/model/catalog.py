"""The model catalog: open models fitcheck knows by name, read from the shipped ``catalog.json``.

Each entry names a Hugging Face repository and points at a config-like dict of architecture
numbers (transcribed from that model's config.json).  The dict goes through the same parser as a
local or downloaded config.json (:func:`fitcheck.model.hf_config.spec_from_config`), so the catalog
and real files can never disagree about what a key means.

Loading is lazy and cached: the JSON is read on first use (a few ms) and each entry's
:class:`ModelSpec` is built only when asked for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from fitcheck.model.generation_config import FILENAME, from_dict
from fitcheck.model.hf_config import spec_from_config
from fitcheck.model.spec import ModelSpec
from fitcheck.model.user_models import file_identity, find_user_models, read_user_config

if TYPE_CHECKING:
    from fitcheck.model.generation_config import GenerationDefaults
from fitcheck.model.user_models import USER_KEY_PREFIX

CATALOG_PATH = Path(__file__).with_name("catalog.json")


def normalize_name(text: str) -> str:
    """A model name reduced for matching: lower case, no org, '-' between words and numbers.

    'Qwen/Qwen2.5-7B' -> 'qwen-2.5-7b'; 'llama3.1_8b' -> 'llama-3.1-8b'; 'Mixtral 8x7B' -> 'mixtral-8x-7b'.
    """
    name = text.strip().lower().rsplit("/", 1)[-1]
    name = re.sub(r"[\s_]+", "-", name)
    name = re.sub(r"([a-z])(\d)", r"\1-\2", name)
    return re.sub(r"-+", "-", name).strip("-")


@dataclass(frozen=True)
class CatalogEntry:
    """One catalog model.  ``spec`` is built from the entry's config on first access."""

    hf_id: str
    aliases: tuple[str, ...]          # short names it answers to, e.g. 'qwen2.5-7b', 'qwen-7b'
    family: str                       # 'qwen', 'llama', 'mistral' ...
    released: str                     # 'YYYY-MM'
    official_params: int | None       # published parameter count; None when no precise figure exists
    official_params_source: str | None
    quantized_repos: Mapping[str, str] = field(compare=False, hash=False)  # format -> official repo
    variant: str = "instruct"         # 'instruct' (chat/instruct/it) or 'base'
    config_key: str = ""              # which catalog config holds its numbers
    # The publisher counts active parameters without the input embedding table (a decode reads one
    # row of it): OpenAI's gpt-oss model card, 5.13B of 116.83B and 3.61B of 20.91B.
    active_excludes_embedding: bool = False
    # The GGUF file types its GGUF repository holds (quantized_repos['gguf']), read from that repository's file
    # list (the entry's gguf_files.source); empty where none was recorded.
    gguf_types: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The repository name without its organisation."""
        return self.hf_id.rsplit("/", 1)[-1]

    @property
    def config(self) -> dict:
        """The entry's config-like dict (a copy)."""
        if self.config_key.startswith(USER_KEY_PREFIX):
            return _user_config(self.config_key, self.user_path)
        return json.loads(json.dumps(_raw()["configs"][self.config_key]))

    @property
    def spec(self) -> ModelSpec:
        if self.config_key.startswith(USER_KEY_PREFIX):
            # the user's numbers; its own generation_config.json, else the catalog's record of the published one
            spec = _user_spec(self.hf_id, self.family, self.user_path)
            return spec if spec.generation is not None else replace(spec, generation=_generation(self.hf_id))
        return _spec_for(self.hf_id)

    @property
    def user_path(self) -> str:
        """The config.json in the user's models folder this entry reads ('' for a shipped entry)."""
        return self.config_key[len(USER_KEY_PREFIX):].split("|", 1)[-1] if "|" in self.config_key else ""

    @property
    def active_params(self) -> int:
        """Active parameters per token as the publisher counts them (see active_excludes_embedding)."""
        return published_active_params(self.spec, self)


@dataclass(frozen=True)
class Catalog:
    entries: tuple[CatalogEntry, ...]
    _by_id: Mapping[str, CatalogEntry] = field(compare=False, hash=False, repr=False)

    def get(self, hf_id: str) -> CatalogEntry | None:
        """The entry with this exact Hugging Face id (case-insensitive), else None."""
        return self._by_id.get(hf_id.strip().lower())

    def families(self) -> tuple[str, ...]:
        return tuple(sorted({e.family for e in self.entries}))

    def search(self, query: str | None = None, family: str | None = None) -> tuple[CatalogEntry, ...]:
        """Entries whose id, alias or family contains ``query`` (case- and separator-insensitive)."""
        found = []
        q_raw = query.strip().lower() if query else ""
        # a normalized query matches whole words: 'qwen3' finds 'qwen-3-8b', not 'qwen-32b'
        word = re.compile(r"(^|[-/])" + re.escape(normalize_name(query)) + r"($|[-.])") if query else None
        for e in self.entries:
            if family and e.family.lower() != family.strip().lower():
                continue
            if word is not None:
                names = [e.name, e.family, *e.aliases]
                if q_raw not in e.hf_id.lower() and not any(word.search(normalize_name(n)) for n in names):
                    continue
            found.append(e)
        return tuple(found)


@lru_cache(maxsize=1)
def _raw() -> dict:
    with open(CATALOG_PATH, encoding="utf-8") as fh:
        return json.load(fh)


def _aliases(item: dict) -> tuple[str, ...]:
    size = item.get("size") or ""
    names = [f"{n}-{size}" for n in item.get("names", ())]
    return tuple(dict.fromkeys(a.lower() for a in [*names, *item.get("aliases", ())]))


def load_catalog() -> Catalog:
    """The shipped catalog with the user's models folder (fitcheck.model.user_models) laid over it."""
    return _load_catalog(find_user_models())  # a listing of the folder: microseconds when it is absent


@lru_cache(maxsize=4)
def _load_catalog(user: tuple) -> Catalog:
    shipped = _shipped_entries()
    if not user:
        return Catalog(shipped, MappingProxyType({e.hf_id.lower(): e for e in shipped}))
    by_id = {e.hf_id.lower(): e for e in shipped}
    added = []
    for model in user:
        key = f"{model.config_key}|{model.path}"
        known = by_id.get(model.hf_id.lower())
        if known is not None:  # the user's numbers, the catalog's names
            by_id[model.hf_id.lower()] = replace(known, config_key=key)
        else:
            family = _family_of(model.path)
            entry = CatalogEntry(hf_id=model.hf_id, aliases=(), family=family, released="",
                                 official_params=None, official_params_source=None,
                                 quantized_repos=MappingProxyType({}), variant="instruct", config_key=key)
            by_id[model.hf_id.lower()] = entry
            added.append(entry)
    entries = tuple(by_id[e.hf_id.lower()] for e in shipped) + tuple(added)
    return Catalog(entries, MappingProxyType({e.hf_id.lower(): e for e in entries}))


def _family_of(path: Path) -> str:
    """The family of a user model: its config's model_type ('llama', 'qwen2' -> 'qwen'), else 'user'."""
    try:
        model_type = str(read_user_config(path).get("model_type") or "user")
    except Exception:  # noqa: BLE001 - a bad file is reported when the model is used, not when listing
        return "user"
    return re.sub(r"[0-9_].*$", "", model_type.lower()) or "user"


def _user_config(config_key: str, path: str) -> dict:
    return read_user_config(Path(path))


def _user_spec(hf_id: str, family: str, path: str) -> ModelSpec:
    """The spec of a user catalog entry, built once per identity of its config.json and of the
    generation_config.json beside it (user_models.file_identity): each access does not re-read them."""
    config = file_identity(Path(path))
    if config is None:  # cannot be stat'ed: read as is, so its error is reported
        return _build_user_spec(hf_id, family, path)
    return _user_spec_of(hf_id, family, path, config, file_identity(Path(path).parent / FILENAME))


@lru_cache(maxsize=256)
def _user_spec_of(hf_id: str, family: str, path: str, config: tuple, generation: tuple | None) -> ModelSpec:
    del config, generation  # the cache's key: another mtime or size of either file builds the spec anew
    return _build_user_spec(hf_id, family, path)


def _build_user_spec(hf_id: str, family: str, path: str) -> ModelSpec:
    from fitcheck.model.generation_config import read_beside

    config = _user_config("", path)
    spec = _with_family(spec_from_config(config, hf_id, source=f"user catalog ({path})"), family)
    return replace(spec, generation=read_beside(Path(path).parent))


@lru_cache(maxsize=1)
def _shipped_entries() -> tuple[CatalogEntry, ...]:
    """The shipped catalog's entries (read once per process)."""
    raw = _raw()
    entries = tuple(
        CatalogEntry(
            hf_id=item["hf_id"],
            aliases=_aliases(item),
            family=item["family"],
            released=item["released"],
            official_params=item.get("official_params"),
            official_params_source=item.get("official_params_source"),
            quantized_repos=MappingProxyType(dict(item.get("quantized_repos") or {})),
            variant=item.get("variant", "instruct"),
            config_key=item["config"],
            active_excludes_embedding=bool(item.get("active_excludes_embedding", False)),
            gguf_types=tuple(t.upper() for t in (item.get("gguf_files") or {}).get("types", ())),
        )
        for item in raw["models"]
    )
    return entries


@cache
def _spec_for(hf_id: str) -> ModelSpec:
    entry = next((e for e in _shipped_entries() if e.hf_id == hf_id), None)
    assert entry is not None, hf_id
    spec = spec_from_config(_raw()["configs"][entry.config_key], entry.hf_id,
                            source=f"catalog ({entry.hf_id} config.json)")
    family = entry.family
    return replace(_with_family(spec, family), generation=_generation(hf_id),
                   prequantized=tuple(sorted(entry.quantized_repos)), gguf_types=entry.gguf_types)


def _generation(hf_id: str) -> GenerationDefaults | None:
    """The sampling values recorded from the model's published generation_config.json (its 'generation'
    entry, with the citation in 'source'); None where none was recorded."""
    item = next((m for m in _raw()["models"] if m["hf_id"] == hf_id), None)
    recorded = item.get("generation") if item else None
    if not isinstance(recorded, dict):
        return None
    values = {k: v for k, v in recorded.items() if k != "source"}
    return from_dict(values, "the published file, recorded in the catalog", str(recorded.get("source") or ""))


def _with_family(spec: ModelSpec, family: str) -> ModelSpec:
    from dataclasses import replace

    return replace(spec, family=family)


def published_active_params(spec: ModelSpec, entry: CatalogEntry | None) -> int:
    """spec.active_params, less the input embedding table where the publisher counts that way."""
    if entry is not None and entry.active_excludes_embedding and spec.is_moe:
        return spec.active_params - spec.vocab_size * spec.hidden_size
    return spec.active_params


def entries() -> tuple[CatalogEntry, ...]:
    """Every catalog entry, in catalog order."""
    return load_catalog().entries


def get_entry(hf_id: str) -> CatalogEntry | None:
    """The entry with this Hugging Face id (case-insensitive), else None."""
    return load_catalog().get(hf_id)


# ---- lookups by name: what fitcheck.model.resolve and the Ollama names match against ----------------------
def rank(entry: CatalogEntry) -> tuple:
    """How entries that share a name are ordered: newest release first"""
    # newest release first, then instruct over base, then the shorter (plainer) id
    return (entry.released, entry.variant == "instruct", -len(entry.hf_id))


def indexes() -> tuple[dict[str, list[CatalogEntry]], dict[str, list[CatalogEntry]]]:
    """(normalized alias -> entries, normalized repository name -> entries) of the catalog in use."""
    return indexes_for(load_catalog())


@lru_cache(maxsize=4)
def indexes_for(catalog) -> tuple[dict[str, list[CatalogEntry]], dict[str, list[CatalogEntry]]]:
    by_alias: dict[str, list[CatalogEntry]] = {}
    by_name: dict[str, list[CatalogEntry]] = {}
    for e in catalog.entries:
        for alias in {normalize_name(a) for a in e.aliases}:
            by_alias.setdefault(alias, []).append(e)
        by_name.setdefault(normalize_name(e.name), []).append(e)
    return by_alias, by_name


def alias_matches(key: str) -> list[CatalogEntry]:
    """The entries one of whose aliases normalizes to ``key``."""
    return indexes()[0].get(key, [])


def name_matches(key: str) -> list[CatalogEntry]:
    """The entries whose repository name normalizes to ``key``."""
    return indexes()[1].get(key, [])
