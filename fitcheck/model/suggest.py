"""Suggestions for a model name the catalog does not know, that never mislead (issue 40 item 4): a suggestion shares
the family and the variant (coder, vl, math, ...) of what was typed and is within a factor of two of its size; a
newer release of a known family says it is not in the catalog instead of offering an older one; and where nothing
close is known, the answer says so and how to ask for the model anyway.  Pure: reads the catalog only.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache

from fitcheck.model.catalog import Catalog, CatalogEntry, load_catalog, normalize_name

# Words of a name that say how it was tuned, not what it is: they do not make a variant.
_TUNING = frozenset({"instruct", "chat", "it", "base", "hf", "v", "preview", "latest", "thinking", "distill"})
# Words of a name that say how its weights are stored: the same model.
_STORAGE = frozenset({"awq", "gptq", "gguf", "fp8", "fp16", "bf16", "int4", "int8", "bnb", "mlx", "exl2", "nf4",
                      "q4", "q5", "q6", "q8", "k", "m", "s", "xl", "l", "qat", "w4a16", "w8a8", "dynamic", "fp",
                      "int", "q", "w", "a"})
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([bm])$")
_VERSION = re.compile(r"^(\d+(?:\.\d+)?)([a-z]*)$")
SIZE_FACTOR = 2.0   # a suggestion is within this factor of the typed size (issue 40 item 4)
# A number after a family word more than this past the family's newest release is a size without its unit ('qwen7'
# with Qwen3 the newest), not a release no one has made; one or two ahead is a newer release ('deepseek-v4').
RELEASE_GAP = 2.0
NOT_KNOWN = ("name its Hugging Face id (fitcheck ORG/NAME reads its config.json, online), a local folder or "
             "config.json, or --params N for a dense estimate")


@dataclass(frozen=True)
class Name:
    """What a typed (or catalog) name says: its family, version, variant words and size in parameters."""

    family: str | None
    version: float | None
    variants: frozenset[str]
    params: float | None


def _family_words() -> dict[str, str]:
    return _words_of(load_catalog())   # the catalog of now: a user's catalog models may come and go


@lru_cache(maxsize=4)
def _words_of(catalog: Catalog) -> dict[str, str]:
    """The first word of every catalog name and alias -> its entry's family ('mixtral' -> 'mistral')."""
    words: dict[str, str] = {}
    for e in catalog.entries:
        for text in (e.name, *e.aliases, e.family):
            first = normalize_name(text).split("-", 1)[0]
            if first.isalpha() and len(first) >= 3:   # not 'r' of 'r1-distill-qwen-14b'
                words.setdefault(first, e.family)
    for e in catalog.entries:   # a family's own name always maps to it
        words[normalize_name(e.family).split("-", 1)[0]] = e.family
    return words


def parse(text: str) -> Name:
    tokens = normalize_name(text.rsplit("/", 1)[-1]).split("-")
    words = _family_words()
    family = next((words[t] for t in tokens[:2] if t in words), None)
    if family is None and tokens and tokens[0].isalpha():  # a misspelled family word ('lama3-8b')
        near = difflib.get_close_matches(tokens[0], list(words), n=1, cutoff=0.75)
        family = words[near[0]] if near else None
        if near:
            tokens = [near[0], *tokens[1:]]
    version: float | None = None
    variants: set[str] = set()
    params: float | None = None
    skip = False
    for i, t in enumerate(tokens):
        if skip:
            skip = False
            continue
        if t == "a" and i + 1 < len(tokens) and _SIZE.match(tokens[i + 1]):
            skip = True            # 'a3b': the active parameters of a mixture of experts
            continue
        if m := re.match(r"^(\d+)x$", t):   # 'mixtral-8x7b': experts x size
            if i + 1 < len(tokens) and (s := _SIZE.match(tokens[i + 1])):
                params = int(m.group(1)) * float(s.group(1)) * (1e9 if s.group(2) == "b" else 1e6)
            skip = True
            continue
        if (s := _SIZE.match(t) or re.match(r"^(\d+(?:\.\d+)?)([bm])\2+$", t)) and params is None:
            params = float(s.group(1)) * (1e9 if s.group(2) == "b" else 1e6)   # '7b', and '7bb' mistyped
            continue
        # a release number has one digit before its point (Qwen 2.5, Llama 3.3, DeepSeek V3): 'qwq-32' is a size
        if (v := _VERSION.match(t)) and version is None and params is None and float(v.group(1)) < 10:
            version = float(v.group(1))
            if v.group(2):
                variants.add(v.group(2))   # 'gemma-3n'
            continue
        if t.isalpha() and words.get(t) == family and t != normalize_name(family or "").split("-", 1)[0] \
                and t not in ("meta", "llama"):
            variants.add(t)    # a line of its own in the family ('codellama', 'qwq', 'mixtral', 'vicuna')
        elif t.isalpha() and words.get(t) != family and not _tuning_or_storage(t):
            variants.add(t)
    return Name(family, version, frozenset(variants), params)


def parse_typed(text: str) -> Name:
    """parse() of what a user typed: a number past the family's newest release by more than RELEASE_GAP is a
    size without its unit ('qwen7' with Qwen3 the newest), not a release no one has made."""
    n = parse(text)
    if n.family is not None and n.version is not None and n.params is None and not n.variants \
            and n.version > _newest(n.family) + RELEASE_GAP:
        return Name(n.family, None, n.variants, n.version * 1e9)
    return n


def _newest(family: str) -> float:
    """The newest release number of ``family`` in the catalog (0 where none is numbered)."""
    return _newest_in(load_catalog(), family)


@lru_cache(maxsize=64)
def _newest_in(catalog: Catalog, family: str) -> float:
    return max((n.version for e in catalog.entries if e.family == family
                and (n := parse(e.name)).version is not None), default=0.0)


def _tuning_or_storage(word: str) -> bool:
    """A word that does not change which model it is: how it was tuned or stored, or a misspelling of one
    ('instrct')."""
    return word in _TUNING or word in _STORAGE or bool(difflib.get_close_matches(word, _TUNING, n=1, cutoff=0.8))


def _entry_name(e: CatalogEntry) -> Name:
    n = parse(e.name)
    return Name(e.family, n.version, n.variants, float(e.spec.total_params))


def close_entries(text: str) -> list[CatalogEntry]:
    """The catalog entries a suggestion may name for ``text``: its family and variant words, its size within
    SIZE_FACTOR, never an older release than the one typed; closest by spelling first."""
    typed = parse_typed(text)
    if typed.family is None:
        return []
    out = []
    for e in load_catalog().entries:
        n = _entry_name(e)
        if n.family != typed.family or n.variants != typed.variants:
            continue
        if typed.params and n.params and not 1 / SIZE_FACTOR <= n.params / typed.params <= SIZE_FACTOR:
            continue
        if typed.version is not None and n.version is not None and n.version < typed.version:
            continue
        out.append(e)
    key = normalize_name(text.rsplit("/", 1)[-1])
    return sorted(out, key=lambda e: -max(difflib.SequenceMatcher(None, key, normalize_name(name)).ratio()
                                          for name in (e.name, *e.aliases)))


def newest_known(text: str) -> tuple[float, list[CatalogEntry]] | None:
    """(the newest version the catalog has of ``text``'s family and variant, its entries) when ``text`` names a
    newer one (``qwen3-coder`` with Qwen2.5-Coder known); else None."""
    typed = parse_typed(text)
    if typed.family is None or typed.version is None:
        return None
    same = [(n.version, e) for e in load_catalog().entries
            if (n := _entry_name(e)).family == typed.family and n.version is not None and typed.variants == n.variants]
    if not same:
        return None
    newest = max(v for v, _ in same)
    if newest >= typed.version:
        return None
    return newest, [e for v, e in same if v == newest]


def label(e: CatalogEntry) -> str:
    return e.aliases[0] if e.aliases else e.name


def continuations(text: str) -> list[str]:
    """Catalog names that continue ``text`` (``llama-3.3`` -> llama3.3-70b, ``qwen3-235b`` -> the 235B-A22B), with
    ``moe`` the family's mixtures of experts, smallest first: what was typed, completed."""
    names: dict[str, CatalogEntry] = {}
    for e in load_catalog().entries:
        for name in (*e.aliases, e.name):
            names.setdefault(normalize_name(name), e)
    key = normalize_name(text)
    out: list[str] = []
    if key.endswith("-moe") or key.startswith("moe-") or "-moe-" in key:
        family = key.replace("-moe", "").replace("moe-", "")
        moe = sorted((e for e in load_catalog().search(family) if e.spec.is_moe), key=lambda e: e.spec.total_params)
        out += [label(e) for e in moe]
    out += [label(names[k]) for k in sorted((k for k in names if k.startswith(key + "-")), key=lambda k: (len(k), k))]
    return list(dict.fromkeys(out))   # one name per model


def hint(text: str, n: int = 3) -> str:
    """The line under "unknown model": close names that do not mislead, or what the catalog lacks and how to ask."""
    completed = continuations(text)
    if completed:
        return "did you mean: " + ", ".join(completed[:n])
    newer = newest_known(text)
    if newer is not None:
        version, entries = newer
        examples = ", ".join(list(dict.fromkeys(label(e) for e in sorted(entries,
                                                                      key=lambda e: e.spec.total_params)))[:n])
        return (f"not in the catalog: the newest release of that family it knows is {version:g} ({examples}); "
                + NOT_KNOWN)
    close = close_entries(text)
    if close:
        return "did you mean: " + ", ".join(list(dict.fromkeys(label(e) for e in close))[:n])
    typed = parse_typed(text)
    if typed.family is None:
        return "no model of that family is in the catalog: " + NOT_KNOWN
    return "nothing close to it is in the catalog (same family and variant, within 2x of its size): " + NOT_KNOWN


def close_ids(repo_id: str, n: int = 3) -> list[str]:
    """Catalog ids close to a Hub id that was not found (``Qwen/Qwen2.5-7B-Instrct``): spelled within 0.85 and
    compatible as close_entries says (never another size or an older release)."""
    allowed = {e.hf_id for e in close_entries(repo_id)}
    ids = {e.hf_id.lower(): e.hf_id for e in load_catalog().entries if e.hf_id in allowed}
    return [ids[k] for k in difflib.get_close_matches(repo_id.lower(), list(ids), n=n, cutoff=0.85)]
