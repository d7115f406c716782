"""A checkpoint's generation_config.json: what transformers' ``generate()`` samples with by default.

``generate()`` starts from the checkpoint's GenerationConfig (``generation_config.json`` beside
config.json) and adds a logits warper for each sampling setting that is active -- only with
``do_sample``; without it the step is greedy whatever the other values say:
https://github.com/huggingface/transformers/blob/000034a44ef887621d9b36001a5eb7c46e64cb3f/src/transformers/generation/utils.py
(``_get_logits_processor``: TemperatureLogitsWarper when ``temperature`` is not None and != 1.0,
TopKLogitsWarper when ``top_k`` is not None and != 0, TopPLogitsWarper when ``top_p`` is not None
and < 1.0; then MinP, Typical, Epsilon and Eta).  A key the file leaves out takes GenerationConfig's
default (``do_sample`` False, ``temperature`` 1.0, ``top_k`` 50, ``top_p`` 1.0).  ``repetition_penalty``
(not None and != 1.0) adds RepetitionPenaltyLogitsProcessor, a processor that runs greedy or sampled
(Qwen2/Qwen2.5 set 1.05–1.1).

Read like config.json: a bounded regular file, parsed by the bounded JSON reader; nothing in it is
executed.  A file that cannot be read, or a value of the wrong type, is not an error of the request:
the estimate falls back to its default sampling and says why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fitcheck.bounded import KiB, json_loads_bounded, read_regular_file, short_number
from fitcheck.errors import FitcheckError
from fitcheck.estimate.generate_step import PENALTY

FILENAME = "generation_config.json"
# Real generation_config.json files are under 1 KiB (a few token ids and sampling values).
MAX_BYTES = 256 * KiB

# GenerationConfig's default top_k (generation/configuration_utils.py); its do_sample False, temperature 1.0
# and top_p 1.0 add nothing.
DEFAULT_TOP_K = 50
# Warpers fitcheck counts (fitcheck.estimate.generate_step) and those it does not.
_UNMODELLED = ("min_p", "typical_p", "epsilon_cutoff", "eta_cutoff")


@dataclass(frozen=True)
class GenerationDefaults:
    """The sampling values of one generation_config.json (None: the key is absent)."""

    source: str                      # where it was read: a path, or the catalog's citation
    do_sample: bool | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    num_beams: int | None = None
    repetition_penalty: float | None = None
    unmodelled: tuple[str, ...] = ()  # active warpers fitcheck does not count (min_p, typical_p ...)
    problem: str = ""                # why the file's values were not used ('' when they were)
    citation: str = ""               # the catalog's record: where the published file's values were read

    @property
    def sampled(self) -> bool:
        """generate()'s do_sample: the file's, else GenerationConfig's default (False)."""
        return bool(self.do_sample)

    def warpers(self) -> tuple[str, ...]:
        """The warpers generate() adds, in its order ('temperature', 'top-k', 'top-p'); () when greedy.
        An absent key takes GenerationConfig's default (temperature 1.0: none; top_k 50: one; top_p 1.0: none)."""
        if not self.sampled:
            return ()
        top_k = DEFAULT_TOP_K if self.top_k is None else self.top_k
        return tuple(name for name, on in (("temperature", self.temperature not in (None, 1.0)),
                                           ("top-k", top_k != 0),
                                           ("top-p", self.top_p is not None and self.top_p < 1.0)) if on)

    def processors(self) -> tuple[str, ...]:
        """The processors fitcheck counts that generate() adds whether it samples or not: ('repetition-penalty',)
        when repetition_penalty is set and not 1.0 (GenerationConfig's default, None, adds none)."""
        return (PENALTY,) if self.repetition_penalty not in (None, 1.0) else ()

    def describe(self) -> str:
        """'do_sample true, temperature 0.7, top_k 20, top_p 0.8': the keys the file sets."""
        parts = [f"do_sample {'true' if self.sampled else 'false'}" if self.do_sample is not None
                 else "do_sample not set (false)"]
        if self.sampled:
            for key in ("temperature", "top_k", "top_p"):
                own = getattr(self, key)
                if own is not None:
                    parts.append(f"{key} {own:g}")
        if self.repetition_penalty is not None:
            parts.append(f"repetition_penalty {self.repetition_penalty:g}")
        if self.num_beams and self.num_beams > 1:
            parts.append(f"num_beams {self.num_beams}")
        return ", ".join(parts)


def _number(doc: Mapping, key: str, low: float, high: float, integer: bool = False) -> float | int | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} is {short_number(value)}, not a number")
    if integer and not isinstance(value, int):
        if not float(value).is_integer():
            raise ValueError(f"{key} is {short_number(value)}, not a whole number")
        value = int(value)
    if not (math.isfinite(value) and low <= value <= high):
        raise ValueError(f"{key} is {short_number(value)}, outside {low:g}..{high:g}")
    return value


def from_dict(doc: object, source: str, citation: str = "") -> GenerationDefaults:
    """The sampling values of a parsed generation_config.json; a bad value leaves the defaults, said why."""
    if not isinstance(doc, Mapping):
        return GenerationDefaults(source, problem="not a JSON object", citation=citation)
    try:
        do_sample = doc.get("do_sample")
        if do_sample is not None and not isinstance(do_sample, bool):
            raise ValueError(f"do_sample is {short_number(do_sample)}, not true or false")
        temperature = _number(doc, "temperature", 0.0, 1e6)
        top_k = _number(doc, "top_k", 0, 2**31, integer=True)
        top_p = _number(doc, "top_p", 0.0, 1e6)
        num_beams = _number(doc, "num_beams", 1, 2**20, integer=True)
        repetition_penalty = _number(doc, "repetition_penalty", 0.0, 1e6)
        if repetition_penalty is not None and repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty is {short_number(repetition_penalty)}, not above 0")
        unmodelled = []
        for key in _UNMODELLED:
            value = _number(doc, key, 0.0, 1e6)
            if value is None:
                continue
            if key == "min_p" or (key == "typical_p" and value < 1.0) or (key != "typical_p" and 0.0 < value < 1.0):
                unmodelled.append(key)
    except ValueError as exc:
        return GenerationDefaults(source, problem=str(exc), citation=citation)
    return GenerationDefaults(source, do_sample, None if temperature is None else float(temperature),
                              None if top_k is None else int(top_k), None if top_p is None else float(top_p),
                              None if num_beams is None else int(num_beams),
                              None if repetition_penalty is None else float(repetition_penalty),
                              tuple(unmodelled) if do_sample else (), citation=citation)


def read_beside(folder: Path) -> GenerationDefaults | None:
    """The generation_config.json in ``folder`` (a model folder or snapshot), None when there is none."""
    path = folder / FILENAME
    try:
        if not path.is_file():
            return None
    except OSError:
        return None
    try:
        data = read_regular_file(path, FILENAME, MAX_BYTES)
        doc = json_loads_bounded(data.decode("utf-8-sig"))
    except FitcheckError as exc:
        return GenerationDefaults(str(path), problem=exc.message)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return GenerationDefaults(str(path), problem="not valid JSON")
    return from_dict(doc, str(path))
