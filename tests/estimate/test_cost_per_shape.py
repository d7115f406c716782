"""Cost per distinct layer shape: the shortcuts give exactly what the per-layer loops gave."""

from __future__ import annotations

import time
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from fitcheck.estimate import weights as W
from fitcheck.estimate.allocator import load_waste, load_waste_runs
from fitcheck.estimate.formats import weight_format
from fitcheck.model.catalog import load_catalog

SPECS = [e.spec for e in load_catalog().entries]


def _per_layer_gguf(spec, ftype: str) -> dict[str, int]:
    """The former loop: one tensor type decision per layer and role."""
    L = spec.num_layers
    groups: dict[str, float] = {}
    for m in W.linear_matrices(spec):
        first = L - m.layers
        for i in range(m.layers):
            layer = first + i if m.layers != L else i
            bits = W._gguf_bits(W._gguf_tensor_type(ftype, m.role, layer, L, spec), m.rows_in)
            kind = W._group_of_role(m.role)
            groups[kind] = groups.get(kind, 0.0) + m.rows_in * m.cols_out * m.per_layer * bits / 8
    return {k: int(v) for k, v in groups.items()}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(SPECS), st.integers(1, 300), st.sampled_from(["q4_k_m", "q5_k_m", "q3_k_m", "q2_k", "q8_0"]))
def test_gguf_mixture_by_arithmetic_equals_the_per_layer_loop(spec, layers, ftype):
    spec = replace(spec, num_layers=layers, num_dense_layers=min(spec.num_dense_layers, layers))
    new = dict(W._gguf_weight_bytes(spec, ftype).by_group)
    for kind, value in _per_layer_gguf(spec, ftype).items():
        assert abs(new[kind] - value) <= 2


def test_more_bits_count_equals_brute_force():
    for n in range(1, 80):
        for a in range(n):
            for b in range(a, n + 1):
                assert W._count_more_bits(a, b, n) == sum(W._use_more_bits(i, n) for i in range(a, b))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(SPECS), st.integers(1, 120), st.sampled_from(["bf16", "fp16", "awq", "int8", "nf4", "fp32"]))
def test_load_waste_by_cycles_equals_the_full_replay(spec, layers, precision):
    spec = replace(spec, num_layers=layers, num_dense_layers=min(spec.num_dense_layers, layers))
    fmt = weight_format(precision)
    assert load_waste_runs(W.weight_tensor_runs(spec, fmt)) == load_waste(W.weight_tensor_sizes(spec, fmt))


def test_a_million_layers_cost_like_a_few():
    spec = replace(next(s for s in SPECS if s.name == "Qwen/Qwen2.5-7B-Instruct"), num_layers=1_000_000)
    start = time.process_time()
    load_waste_runs(W.weight_tensor_runs(spec, weight_format("bf16")))
    W._gguf_weight_bytes(spec, "q4_k_m")
    assert time.process_time() - start < 2.0
