"""Reading one ``config.json`` dict: every value checked (type, range) and where it came from recorded, so that a
missing, mistyped or absurd field raises one FitcheckError naming it (fitcheck.model.hf_config)."""

from __future__ import annotations

import builtins
import math
from typing import Any

from fitcheck.errors import FitcheckError

# Bounds beyond which a number cannot describe a real model (a corrupt or hostile file).
MAX = {
    "num_layers": 10**6,
    "hidden_size": 10**7,
    "intermediate_size": 10**8,
    "num_attention_heads": 10**5,
    "num_kv_heads": 10**5,
    "head_dim": 10**5,
    "vocab_size": 10**8,
    "num_experts": 10**5,
    "max_context": 10**9,
}
DEFAULT_MAX = 10**8

REQUIRED = object()
SHOW_MAX = 40


def show(value: Any) -> str:
    """A config value for an error message, never longer than ~40 characters (1e300 stays short)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 120:
        return f"~{'-' if value < 0 else ''}1e{int(abs(value).bit_length() * 0.30103)}"
    text = repr(value)
    return text if len(text) <= SHOW_MAX else text[: SHOW_MAX - 3] + "..."


DTYPES = {
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "float32": "float32", "fp32": "float32", "float": "float32",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
}


class ConfigReader:
    """Typed, bounded access to one config dict, remembering where each value came from."""

    def __init__(self, raw: dict, source: str, prefix: str = ""):
        self.raw = raw
        self.source = source
        self.prefix = prefix
        self.sources: list[tuple[str, str]] = []

    def _where(self, key: str) -> str:
        return f"{self.source}: {self.prefix}{key}"

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def _find(self, keys: tuple[str, ...]) -> tuple[str | None, Any]:
        for key in keys:
            if self.raw.get(key) is not None:
                return key, self.raw[key]
        return None, None

    def int(self, field: str, *keys: str, default: Any = REQUIRED, minimum: int = 1,
            maximum: int | None = None, default_note: str = "") -> int:
        value = self.opt_int(field, *keys, minimum=minimum, maximum=maximum)
        if value is not None:
            return value
        if default is REQUIRED:
            raise FitcheckError(f"{self.source}: missing {self.prefix}{keys[0]} ({field})",
                                "is this a decoder-only language model config.json?")
        if default is not None:
            self.sources.append((field, default_note or f"default {default} ({self.prefix}{keys[0]} absent)"))
        return default

    # ``int`` in this class body is the method above: the annotations below name the builtin
    def opt_int(self, field: str, *keys: str, minimum: builtins.int = 1,
                maximum: builtins.int | None = None) -> builtins.int | None:
        key, value = self._find(keys)
        if key is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FitcheckError(f"{self._where(key)} must be a whole number, not {show(value)}")
        shown = show(value)  # as written: 1e300 stays 1e+300, not a 300-digit number
        if isinstance(value, float):
            if not math.isfinite(value) or not value.is_integer():
                raise FitcheckError(f"{self._where(key)} must be a whole number, not {shown}")
            value = int(value)
        upper = maximum if maximum is not None else MAX.get(field, DEFAULT_MAX)
        if value < minimum or value > upper:
            raise FitcheckError(f"{self._where(key)} = {shown} is out of range ({minimum}..{upper})")
        self.sources.append((field, self._where(key)))
        return value

    def bool(self, field: str, *keys: str, default: bool, record: bool = True) -> bool:
        key, value = self._find(keys)
        if key is None:
            return default
        if not isinstance(value, bool):
            raise FitcheckError(f"{self._where(key)} must be true or false, not {show(value)}")
        if record:
            self.sources.append((field, self._where(key)))
        return value

    def list_of_str(self, key: str) -> list[str] | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise FitcheckError(f"{self._where(key)} must be a list of strings")
        return value

    def list_of_int(self, key: str) -> list[builtins.int] | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise FitcheckError(f"{self._where(key)} must be a list of whole numbers")
        return value

    def sub(self, key: str) -> ConfigReader | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise FitcheckError(f"{self._where(key)} must be an object")
        reader = ConfigReader(value, self.source, f"{self.prefix}{key}.")
        reader.sources = self.sources  # one shared list
        return reader
