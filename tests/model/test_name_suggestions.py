"""Suggestions that never mislead (issue 40 item 4): the same family and variant within 2x of the size typed, a
newer release said to be missing instead of an older one offered, and a plain line when nothing close is known."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcheck.errors import FitcheckError
from fitcheck.model import suggest
from fitcheck.model.catalog import load_catalog
from fitcheck.model.resolve import resolve_model


def hint_of(text: str) -> str:
    with pytest.raises(FitcheckError) as err:
        resolve_model(text)
    return err.value.hint or ""


@pytest.mark.parametrize("typed, says", [
    # the cases: another model ten times smaller, another family
    ("qwen3-coder", "not in the catalog: the newest release of that family it knows is 2.5 (qwen2.5-coder-"),
    ("kimi-k2", "no model of that family is in the catalog"),
    ("glm-4.5-air", "no model of that family is in the catalog"),
    ("smollm3", "not in the catalog: the newest release of that family it knows is 2 (smollm2-"),
    ("deepseek-v3.1", "not in the catalog: the newest release of that family it knows is 3 (deepseek-v3)"),
    ("qwen2.5-vl-7b", "nothing close to it is in the catalog"),
    ("gemma3n", "nothing close to it is in the catalog"),
    # what is close still is
    ("lama3-8b", "did you mean: llama3-8b, llama3.1-8b"),
    ("qwen2.5-coder-8b", "did you mean: qwen2.5-coder-7b, qwen2.5-coder-14b"),
    ("llama-3.3", "did you mean: llama3.3-70b"),
    ("qwen7", "did you mean: qwen-7b"),
])
def test_an_unknown_name_gets_a_hint_that_does_not_mislead(typed, says):
    hint = hint_of(typed)
    assert hint.startswith(says) or says in hint, hint
    if not hint.startswith("did you mean"):
        assert "fitcheck ORG/NAME" in hint and "--params" in hint   # how to ask for it anyway


def test_a_hub_id_that_is_not_found_is_never_offered_another_size():
    assert suggest.close_ids("Qwen/Qwen3-Coder-30B-A3B-Instruct") == []    # was Qwen/Qwen2.5-Coder-3B-Instruct
    assert suggest.close_ids("Qwen/Qwen2.5-7B-Instrct") == ["Qwen/Qwen2.5-7B-Instruct"]


SIZED = [e for e in load_catalog().entries if e.spec.total_params > 0]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(SIZED), st.sampled_from(["", "-instrct", "-chatt", "-awq", "-gguf"]),
       st.sampled_from([0.6, 1.0, 1.5]))
def test_every_suggestion_shares_the_family_and_is_within_twice_the_size(entry, suffix, scale):
    typed = f"{entry.family}-{entry.spec.total_params * scale / 1e9:.1f}b{suffix}"
    name = suggest.parse_typed(typed)
    for e in suggest.close_entries(typed):
        assert e.family == entry.family
        if name.params:
            assert 0.5 <= e.spec.total_params / name.params <= 2.0, (typed, e.hf_id)
