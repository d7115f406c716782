"""The checkpoint an engine command loads: the catalog's pre-quantized repository for a weights format when one is
known, else the model's own repository (and a comment saying what to look for).  Pure string building.

Whether an engine's command loads a checkpoint that exists (Engine.checkpoint_known) ranks the alternatives: one
whose checkpoint fitcheck knows of (the model's own, a format the engine makes at load, a catalog repository that
holds it) before any that needs a checkpoint fitcheck cannot name (fitcheck.search.rank.known_first).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

# Weights format -> the catalog's quantized_repos key of the repository that stores it.
HF_QUANT_KEYS = {"awq": "awq", "gptq-int4": "gptq-int4", "int4": "gptq-int4", "gptq-int8": "gptq-int8", "fp8": "fp8"}
# How each pre-quantized format's checkpoint says what it is (config.json's quantization_config.quant_method), for
# the comment that tells a user what to look for when fitcheck knows no repository.
QUANT_METHOD = {"awq": "awq", "gptq-int4": "gptq", "int4": "gptq", "gptq-int8": "gptq", "fp8": "fp8"}


@dataclass(frozen=True)
class Checkpoints(Mapping[str, str]):
    """The catalog's pre-quantized repositories of a model (format -> repository), and the GGUF file types its
    GGUF repository holds (empty: not recorded)."""

    repos: Mapping[str, str] = field(default_factory=dict)
    gguf_types: frozenset[str] = frozenset()

    def __getitem__(self, key: str) -> str:
        return self.repos[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.repos)

    def __len__(self) -> int:
        return len(self.repos)


def checkpoints_of(entry: Any) -> Checkpoints:
    """A catalog entry's checkpoints (none for a model outside the catalog)."""
    if entry is None:
        return Checkpoints()
    return Checkpoints(dict(getattr(entry, "quantized_repos", None) or {}),
                       frozenset(getattr(entry, "gguf_types", ()) or ()))


def gguf_types_of(repos: Mapping[str, str]) -> frozenset[str]:
    return repos.gguf_types if isinstance(repos, Checkpoints) else frozenset()


def holds_gguf(types: frozenset[str] | tuple[str, ...], quant: str) -> bool:
    """Whether a GGUF repository whose recorded file types are ``types`` holds ``quant`` (llama.cpp's type name, any
    case); a repository with no recorded file list is taken at its word."""
    return not types or quant.upper() in types


def quantized_repo(model_id: str, precision: str, repos: Mapping[str, str]) -> tuple[str, bool]:
    """(repository to load, whether it is a pre-quantized one of ``precision``)."""
    key = HF_QUANT_KEYS.get(precision)
    if key and key in repos:
        return repos[key], True
    return model_id, False


def hf_checkpoint_known(spec: Any, plan: Any) -> bool:
    """Whether a Hugging Face engine's command for ``plan`` loads a checkpoint that exists: a GPTQ or AWQ format
    needs the model's own files in it or a catalog repository of it; every other format is the model's own
    checkpoint or one the engine makes at load (bitsandbytes, online FP8)."""
    from fitcheck.estimate.formats import weight_format

    if weight_format(plan.precision).family not in ("gptq", "awq"):
        return True
    return bool(plan.stored_format) or HF_QUANT_KEYS.get(plan.precision, "") in spec.prequantized


def needs_checkpoint(model_id: str, precision: str) -> str:
    """A trailing shell comment when no pre-quantized repository of this model is known: what to look for."""
    name = model_id.rstrip("/").rsplit("/", 1)[-1]
    method = QUANT_METHOD.get(precision, precision)
    bits = " with bits 8" if precision == "gptq-int8" else " with bits 4" if method == "gptq" else ""
    return (f"  # no {precision.upper()} checkpoint of {model_id} known to fitcheck: look on the Hub for "
            f"{name}-{precision.split('-')[0].upper()} (config.json quantization_config.quant_method "
            f"'{method}'{bits}) and put its repository here")
