"""safetensors header reader: real layouts, exact sizes, and hostile files."""

from __future__ import annotations

import json
import struct
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from filegen import llama_tensors, write_safetensors  # noqa: E402
from filegen import safetensors_header as make_header

from fitcheck.errors import FitcheckError
from fitcheck.model import safetensors_header as sth


def test_reads_tensors_and_sizes(tmp_path):
    tensors = llama_tensors(layers=2, hidden=64, inter=128, vocab=256)
    path = tmp_path / "model.safetensors"
    data = write_safetensors(path, tensors, {"format": "pt"})
    header = sth.read_header(path)
    assert header.metadata == {"format": "pt"}
    assert set(header.tensors) == set(tensors)
    assert header.tensors["model.embed_tokens.weight"] == sth.TensorInfo("BF16", (256, 64), 256 * 64 * 2)
    assert header.total_bytes == data
    elements = sum(t.elements for t in header.tensors.values())
    assert header.params_by_dtype() == {"BF16": elements}
    assert header.bytes_by_dtype() == {"BF16": 2 * elements}


def test_sub_byte_and_mixed_dtypes(tmp_path):
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"a": ("F4", [3, 5]), "b": ("F8_E4M3", [4]), "c": ("I32", [2, 2])})
    header = sth.read_header(path)
    assert header.tensors["a"].nbytes == 8  # 15 x 4 bits = 60 bits, rounded up to 8 bytes
    assert header.bytes_by_dtype() == {"F4": 8, "F8_E4M3": 4, "I32": 16}


def _raw_file(tmp_path, header_bytes: bytes, length: int | None = None, tail: bytes = b"") -> Path:
    path = tmp_path / "bad.safetensors"
    n = len(header_bytes) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + header_bytes + tail)
    return path


def _fails_fast(path) -> FitcheckError:
    start = time.perf_counter()
    with pytest.raises(FitcheckError) as info:
        sth.read_header(path)
    assert time.perf_counter() - start < 1.0
    assert "\n" not in info.value.one_line()
    return info.value


def test_header_claiming_2_to_60_bytes(tmp_path):
    err = _fails_fast(_raw_file(tmp_path, b"{}", length=2**60))
    assert "limit" in err.message


def test_tensor_claiming_2_to_60_bytes(tmp_path):
    doc = {"w": {"dtype": "U8", "shape": [2**30, 2**30], "data_offsets": [0, 2**60]}}
    err = _fails_fast(_raw_file(tmp_path, json.dumps(doc).encode()))
    assert "2^48" in err.message


def test_data_offsets_past_the_end_is_truncation(tmp_path):
    doc = make_header({"w": ("F32", [1024, 1024])})
    err = _fails_fast(_raw_file(tmp_path, json.dumps(doc).encode(), tail=b"\0" * 100))
    assert "truncated" in err.message


@pytest.mark.parametrize("cut", [0, 3, 8, 20])
def test_truncated_header(tmp_path, cut):
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"w": ("F16", [4, 4])})
    path.write_bytes(path.read_bytes()[:cut])
    _fails_fast(path)


@pytest.mark.parametrize("body", [
    b"not json at all",
    b"\xff\xfe\x00garbage",
    b"[1, 2, 3]",
    b"[" * 100_000,                        # deep nesting: RecursionError inside json
    json.dumps({"w": {"dtype": "F16", "shape": [-4, 4], "data_offsets": [0, 0]}}).encode(),
    json.dumps({"w": {"dtype": "F17", "shape": [4], "data_offsets": [0, 8]}}).encode(),
    json.dumps({"w": {"dtype": "F16", "shape": [4], "data_offsets": [0, 9]}}).encode(),
    json.dumps({"w": {"dtype": "F16", "shape": [4], "data_offsets": [8, 0]}}).encode(),
    json.dumps({"w": {"dtype": "F16", "shape": [True], "data_offsets": [0, 2]}}).encode(),
    json.dumps({"w": {"dtype": "F16", "shape": [2.0], "data_offsets": [0, 4]}}).encode(),
    json.dumps({"w": {"dtype": "F16", "shape": [4]}}).encode(),
    json.dumps({"w": [1, 2]}).encode(),
    json.dumps({"__metadata__": [1]}).encode(),
])
def test_hostile_headers(tmp_path, body):
    _fails_fast(_raw_file(tmp_path, body, tail=b"\0" * 16))


def test_header_from_json_without_file_size_checks_consistency():
    doc = make_header({"a": ("BF16", [8, 8])})
    assert sth.header_from_json(doc).total_bytes == 128
    doc["a"]["data_offsets"] = [0, 100]
    with pytest.raises(FitcheckError):
        sth.header_from_json(doc)


def test_unreadable_path(tmp_path):
    with pytest.raises(FitcheckError, match="cannot read"):
        sth.read_header(tmp_path / "missing.safetensors")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_arbitrary_bytes_give_a_header_or_fitcheck_error(data):
    start = time.perf_counter()
    try:
        header = sth.parse_header_bytes(data)
    except FitcheckError as exc:
        assert exc.message
    else:
        assert header.total_bytes <= len(data)
    assert time.perf_counter() - start < 1.0


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["w", "b", "__metadata__"]),
                       st.fixed_dictionaries({}, optional={
                           "dtype": st.sampled_from(["F16", "BF16", "I32", "F4", "X"]) | _json_values,
                           "shape": st.lists(st.integers(-3, 2**40), max_size=5) | _json_values,
                           "data_offsets": st.lists(st.integers(-3, 2**50), max_size=3) | _json_values,
                       }) | _json_values, max_size=3),
       st.integers(0, 2**20))
def test_structured_json_gives_a_header_or_fitcheck_error(doc, data_size):
    try:
        header = sth.header_from_json(doc, data_size=data_size)
    except FitcheckError:
        return
    for t in header.tensors.values():
        assert t.nbytes <= data_size
