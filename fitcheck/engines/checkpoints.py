"""The checkpoint an engine command loads: the catalog's pre-quantized repository for a weights format when one is
known, else the model's own repository (and a comment saying what to look for).  Pure string building.
"""

from __future__ import annotations

from collections.abc import Mapping

# Weights format -> the catalog's quantized_repos key of the repository that stores it.
HF_QUANT_KEYS = {"awq": "awq", "gptq-int4": "gptq-int4", "int4": "gptq-int4", "gptq-int8": "gptq-int8", "fp8": "fp8"}


def quantized_repo(model_id: str, precision: str, repos: Mapping[str, str]) -> tuple[str, bool]:
    """(repository to load, whether it is a pre-quantized one of ``precision``)."""
    key = HF_QUANT_KEYS.get(precision)
    if key and key in repos:
        return repos[key], True
    return model_id, False


def needs_checkpoint(model_id: str, precision: str) -> str:
    """A trailing shell comment when no pre-quantized repository of this model is known."""
    return (f"  # {model_id} as a pre-quantized {precision.upper()} checkpoint: none known to fitcheck, "
            "use one you trust")
