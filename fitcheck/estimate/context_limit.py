"""A context beyond the model's maximum: name the maximum, and where the publisher documents RoPE
scaling (YaRN) for the architecture, what to set to go past it.

The maximum is the config's ``max_position_embeddings`` (or its equivalent, ModelSpec.max_context).
Beyond it positions the model never saw in training are extrapolated: the memory estimate still
holds, the answers do not.  YaRN (Peng et al. 2023, arXiv:2309.00071) stretches RoPE by a factor;
the Qwen publishers document it for their checkpoints:

- Qwen2.5 (model card, "Processing Long Texts"): add ``"rope_scaling": {"factor": 4.0,
  "original_max_position_embeddings": 32768, "type": "yarn"}`` to config.json; vLLM takes the same
  as ``--rope-scaling``; https://huggingface.co/Qwen/Qwen2.5-7B-Instruct#processing-long-texts
- Qwen3 (model card, "Processing Long Texts"): native 32,768, YaRN factor 4 to 131,072;
  llama.cpp ``--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32768``;
  https://huggingface.co/Qwen/Qwen3-8B#processing-long-texts

The factor is the smallest whole number that reaches the asked context from the native one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fitcheck.model.spec import ModelSpec

# config model_type -> the native context YaRN is applied over (None: the config's maximum).
# Qwen3's config says max_position_embeddings 40,960 (32,768 for input plus 8,192 for output); the
# card's YaRN recipe is over 32,768.
YARN_NATIVE: dict[str, int | None] = {"qwen2": None, "qwen2_moe": None, "qwen3": 32768, "qwen3_moe": 32768}
YARN_MAX_FACTOR = 4  # the factor the cards document (131,072 over 32,768); beyond it untested
# config model_type -> rope_theta, which vLLM's --hf-overrides must repeat: under transformers 5 the override
# replaces the whole rope_parameters dict (docs.vllm.ai/en/stable/features/context_extension/: Qwen3-0.6B,
# "rope_theta": 1000000).  Qwen2.5's config.json: "rope_theta": 1000000.0 (tests/fixtures/configs/
# Qwen2.5-7B-Instruct.json); Qwen3's: 1000000 (the vLLM example's Qwen3-0.6B).
YARN_ROPE_THETA: dict[str, float] = {"qwen2": 1e6, "qwen2_moe": 1e6, "qwen3": 1e6, "qwen3_moe": 1e6}


@dataclass(frozen=True)
class Yarn:
    """The publisher's YaRN recipe for a context past the model's maximum: factor over the native context."""

    factor: int
    native: int
    rope_theta: float | None = None

    def rope(self, with_theta: bool = False) -> dict[str, object]:
        """The config's rope_scaling dict (transformers 4's YaRN keys); ``with_theta``: rope_parameters, which
        holds rope_theta too (transformers 5)."""
        out: dict[str, object] = {"rope_type": "yarn", "factor": float(self.factor),
                                  "original_max_position_embeddings": self.native}
        if with_theta and self.rope_theta is not None:
            out["rope_theta"] = self.rope_theta
        return out


def yarn_for(spec: ModelSpec, context: int) -> Yarn | None:
    """The YaRN recipe a context past the maximum needs, or None (within the maximum, or none documented)."""
    if not beyond_maximum(spec, context):
        return None
    found = yarn_factor(spec, context)
    return None if found is None else Yarn(found[0], found[1], YARN_ROPE_THETA.get(spec.architecture))


def beyond_maximum(spec: ModelSpec, context: int) -> bool:
    return spec.max_context is not None and context > spec.max_context


def yarn_factor(spec: ModelSpec, context: int) -> tuple[int, int] | None:
    """(factor, native context) of the publisher's YaRN recipe reaching ``context``, or None."""
    if spec.architecture not in YARN_NATIVE or spec.max_context is None:
        return None
    native = YARN_NATIVE[spec.architecture] or spec.max_context
    factor = max(2, math.ceil(context / native))
    return (factor, native) if factor <= YARN_MAX_FACTOR else None


def context_note(spec: ModelSpec, context: int, what: str = "--context") -> str | None:
    """One line for a request past the model's maximum, or None when it is within it."""
    if not beyond_maximum(spec, context):
        return None
    line = (f"{what} {context:,} is beyond the model's maximum of {spec.max_context:,} tokens "
            "(max_position_embeddings): memory is estimated, quality past the maximum is not")
    yarn = yarn_factor(spec, context)
    if yarn is None and spec.architecture in YARN_NATIVE:
        native = YARN_NATIVE[spec.architecture] or spec.max_context or context
        return line + (f"; the publisher's RoPE scaling (YaRN, factor {YARN_MAX_FACTOR}) reaches "
                       f"{YARN_MAX_FACTOR * native:,} at most")
    if yarn is None:
        return line + "; no RoPE scaling (YaRN) recipe is known for this model"
    factor, native = yarn
    return (line + f"; the publisher's RoPE scaling reaches {factor * native:,}: rope_scaling "
            f'{{"rope_type": "yarn", "factor": {factor:.1f}, "original_max_position_embeddings": {native}}} '
            "(the engines' commands below set it: vLLM --hf-overrides, SGLang --json-model-override-args, "
            f"llama.cpp --rope-scaling yarn --rope-scale {factor} --yarn-orig-ctx {native})")


def search_limit(spec: ModelSpec, context: int) -> int:
    """The longest context a largest-that-fits search goes to: the model's maximum when it is known
    (past it the answer is not the model's), else the request's own."""
    return spec.max_context if spec.max_context is not None else context
