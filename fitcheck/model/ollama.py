"""Ollama model names (``llama3.1:8b``, ``qwen2.5:7b-instruct-q8_0``) and the local Ollama store.

A name is ``[namespace/]model:tag``; the tag is ``size[-variant][-quant]`` as on ollama.com's tag
lists (``8b``, ``7b-instruct-q8_0``, ``70b-text-q4_K_M``, ``latest``).  It resolves to the catalog
model of that size (the instruct build unless the variant says ``text``/``base``), stored as the
tag's GGUF type; a tag without one is Ollama's default, Q4_K_M.  Ollama runs llama.cpp, so that
is the engine (GGUF types run only there).

When the model is pulled, the local store is read instead (``OLLAMA_MODELS``, default
``~/.ollama/models``; layout of ollama's server/internal/manifest)::

    manifests/registry.ollama.ai/library/<model>/<tag>   # JSON: {"layers": [{"mediaType", "digest", "size"}]}
    blobs/sha256-<hex>                                    # the layer named by digest "sha256:<hex>"

The layer of media type ``application/vnd.ollama.image.model`` is a GGUF file (no ``.gguf``
suffix); its header gives the exact architecture, tensor types and bytes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from fitcheck.errors import FitcheckError
from fitcheck.model.catalog import alias_matches, normalize_name, rank
from fitcheck.model.gguf_repo import QUANTS
from fitcheck.model.spec import ModelSpec

MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
DEFAULT_REGISTRY = "registry.ollama.ai"
DEFAULT_QUANT = "q4_k_m"        # the GGUF type of Ollama's default tags
_MAX_MANIFEST_BYTES = 1 << 20

_NAME = re.compile(r"^(?:(?P<ns>[a-z0-9][\w.-]*)/)?(?P<model>[a-z0-9][\w.-]*):(?P<tag>[\w.-]+)$", re.IGNORECASE)
_SIZE = re.compile(r"^(?:\d+x)?\d+(?:\.\d+)?[bm]$", re.IGNORECASE)
_DIGEST = re.compile(r"^sha256[:-](?P<hex>[0-9a-f]{64})$")
# Ollama tag quantization names -> fitcheck precision (llama.cpp types fitcheck estimates).
_OTHER_QUANTS = re.compile(r"^(q\d_[01]|q\d_k(_[sml])?|iq\d\w*|mxfp4)$", re.IGNORECASE)
_TEXT_VARIANTS = {"text", "base"}
# The size Ollama's `latest` tag (and a tag without a size) points at, from each model's page on
# ollama.com/library ("latest" is listed with that size).
LATEST_SIZE = {"llama3": "8b", "llama3.1": "8b", "llama3.2": "3b", "llama3.3": "70b", "qwen2": "7b",
               "qwen2.5": "7b", "qwen3": "8b", "mistral": "7b", "mixtral": "8x7b", "gemma2": "9b",
               "gemma3": "4b", "phi4": "14b", "gpt-oss": "20b", "tinyllama": "1.1b", "smollm2": "1.7b"}


@dataclass(frozen=True)
class OllamaName:
    namespace: str | None
    model: str
    tag: str
    size: str | None
    variant: str | None
    quant: str | None          # the tag's quantization as written, lower case

    @property
    def text(self) -> str:
        return (f"{self.namespace}/" if self.namespace else "") + f"{self.model}:{self.tag}"


def parse_name(text: str) -> OllamaName | None:
    """The parts of an Ollama name, or None when ``text`` is not one (it needs ``:tag``)."""
    m = _NAME.match(text.strip())
    if not m:
        return None
    tag = m.group("tag")
    size = variant = quant = None
    parts = tag.lower().split("-") if tag.lower() != "latest" else []
    if parts and _SIZE.match(parts[0]):
        size = parts.pop(0)
    # the quantization is the last part(s): 'q4_K_M' is one part, 'fp16' too
    if parts and (parts[-1] in QUANTS or _OTHER_QUANTS.match(parts[-1])):
        quant = parts.pop()
    if parts:
        variant = "-".join(parts)
    return OllamaName(m.group("ns"), m.group("model").lower(), tag, size, variant, quant)


# Ollama's gpt-oss tags carry the checkpoint's own values: "We distribute the original values for the
# weights" (an Ollama maintainer, r/ollama "How does Ollama run gpt-oss?"), i.e. the MXFP4 experts as
# published and the rest in BF16 (ollama/convert/convert_gptoss.go): 14 GB and 65 GB on ollama.com.
MXFP4_DEFAULT = "bf16"


def precision_of(name: OllamaName, base: ModelSpec | None = None) -> str:
    """The fitcheck precision of the tag's quantization (Q4_K_M when the tag names none; a model whose
    experts are stored MXFP4 as published: bf16, which llama.cpp holds with those experts MXFP4)."""
    if name.quant is None:
        if base is not None and base.stored_groups().get("experts") == "mxfp4":
            return MXFP4_DEFAULT
        return DEFAULT_QUANT
    if name.quant in QUANTS:
        return QUANTS[name.quant]
    raise FitcheckError(f"{name.text}: fitcheck does not estimate the GGUF type {name.quant.upper()}",
                        "use a tag with one of: " + ", ".join(sorted({q.upper() for q in QUANTS})))


def store_dir() -> Path:
    """Ollama's model store: OLLAMA_MODELS, else ~/.ollama/models."""
    from fitcheck.bounded import checked_path

    given = os.environ.get("OLLAMA_MODELS")
    return Path(checked_path(given, "OLLAMA_MODELS") if given else os.path.join("~", ".ollama", "models")).expanduser()


def manifest_path(name: OllamaName, store: Path | None = None) -> Path:
    root = (store or store_dir()) / "manifests"
    if name.namespace and "." in name.namespace:   # a registry host of its own (hf.co/org/repo is not parsed here)
        return root / name.namespace / name.model / name.tag
    return root / DEFAULT_REGISTRY / (name.namespace or "library") / name.model / name.tag


def model_blob(manifest: Path, store: Path | None = None) -> Path | None:
    """The GGUF blob a manifest's model layer names, when it is on disk."""
    from fitcheck.bounded import loads_json, read_regular_file

    if not os.path.lexists(manifest):
        return None
    raw = read_regular_file(manifest, "Ollama manifest", _MAX_MANIFEST_BYTES)  # a FIFO or device refused
    try:
        doc = loads_json(raw, str(manifest), "Ollama manifest")   # nesting, long integers, NaN refused
    except FitcheckError as exc:
        raise FitcheckError(exc.message, "run `ollama pull` again") from None
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list):
        raise FitcheckError(f"{manifest}: not an Ollama manifest (no layers)", "run `ollama pull` again")
    for layer in layers:
        if isinstance(layer, dict) and layer.get("mediaType") == MODEL_MEDIA_TYPE:
            m = _DIGEST.match(str(layer.get("digest", "")))
            if not m:
                raise FitcheckError(f"{manifest}: the model layer's digest is not sha256", "run `ollama pull` again")
            blob = (store or store_dir()) / "blobs" / f"sha256-{m.group('hex')}"
            return blob if blob.is_file() else None
    return None


def spec_from_blob(blob: Path, name: str) -> ModelSpec:
    from fitcheck.model import gguf_header, gguf_spec

    return gguf_spec.spec_from_gguf([gguf_header.read_header(blob)], name)


def catalog_entry(name: OllamaName):
    """The catalog entry an Ollama name stands for, or None."""
    size = name.size or LATEST_SIZE.get(name.model)
    if size is None:
        return None
    matches = alias_matches(normalize_name(f"{name.model}-{size}"))
    if not matches:
        return None
    want = "base" if name.variant in _TEXT_VARIANTS else "instruct"
    preferred = [e for e in matches if e.variant == want] or matches
    return max(preferred, key=rank)


def size_note(name: OllamaName) -> str:
    if name.size:
        return ""
    size = LATEST_SIZE.get(name.model)
    return f" ({name.tag} is {size} on ollama.com)" if size else ""
