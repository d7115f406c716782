"""Property tests (hypothesis) over every parser and numeric option: any input is a value or one
FitcheckError/ValueError, never another exception, and numbers are bounded before arithmetic."""

from __future__ import annotations

import contextlib
import json
import math
import struct

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcheck.bounded import bounded_int, finite_float, json_loads_bounded, loads_toml, short_number
from fitcheck.errors import FitcheckError

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

huge_ints = st.one_of(st.integers(), st.integers(min_value=-10**450, max_value=10**450),
                      st.sampled_from([2**63, 2**64, 10**400, -(10**400)]))
floats = st.floats(allow_nan=True, allow_infinity=True)
number_text = st.one_of(huge_ints.map(str), floats.map(repr), st.text(max_size=30),
                        st.from_regex(r"\A[0-9]{1,500}(\.[0-9]{0,20})?\Z"))
units = st.sampled_from(["", "b", "k", "m", "g", "t", "kb", "gb", "gib", "GiB", "GB", "MiB", "B", "T"])


@FAST
@given(number_text, units)
def test_parse_size_and_count_are_bounded_or_value_error(number, unit):
    from fitcheck.units import MAX_COUNT, MAX_SIZE_BYTES, parse_count, parse_size

    for parse, high in ((parse_size, MAX_SIZE_BYTES), (parse_count, MAX_COUNT)):
        try:
            value = parse(number + unit)
        except ValueError:
            continue
        assert isinstance(value, int) and 0 <= value <= high


@FAST
@given(st.sampled_from(["vram", "vram_free", "gpus", "cc", "ram", "ram_total", "disk", "cuda", "x"]),
       st.sampled_from([">=", ">", "<=", "<", "==", "=>", ""]), number_text, units)
def test_parse_requirement_is_a_requirement_or_one_line(fact, op, number, unit):
    from fitcheck.preflight.requirements import parse_requirement

    try:
        req = parse_requirement(f"{fact}{op}{number}{unit}")
    except FitcheckError as exc:
        assert "\n" not in exc.one_line() and len(exc.one_line()) < 600
        return
    assert req.fact == fact


@FAST
@given(huge_ints, huge_ints, st.one_of(st.none(), huge_ints), st.one_of(st.none(), huge_ints))
def test_inference_request_bounds_any_integer(context, batch, gpus, gpu_layers):
    from fitcheck.request import Request

    try:
        Request(context=context, batch=batch, gpus=gpus, gpu_layers=gpu_layers).validate()
    except FitcheckError as exc:
        assert len(exc.one_line()) < 300


@FAST
@given(huge_ints, huge_ints, huge_ints, huge_ints)
def test_training_request_bounds_any_integer(seq_len, batch, grad_accum, rank):
    from fitcheck.request import Request

    try:
        Request(mode="lora", seq_len=seq_len, batch=batch, grad_accum=grad_accum, lora_rank=rank).validate()
    except FitcheckError as exc:
        assert len(exc.one_line()) < 300


@FAST
@given(st.one_of(huge_ints, floats, st.text(max_size=5), st.booleans(), st.none()))
def test_bounded_helpers_never_raise_anything_else(value):
    assert len(short_number(value)) < 60
    with contextlib.suppress(FitcheckError):
        assert -5 <= bounded_int(value, "--x", -5, 5) <= 5
    with contextlib.suppress(FitcheckError):
        assert math.isfinite(finite_float(value, "--x", 0, 10))


toml_values = st.recursive(
    st.one_of(huge_ints, floats, st.text(max_size=10), st.booleans()),
    lambda inner: st.lists(inner, max_size=3), max_leaves=10)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
    if isinstance(v, int):
        return str(v) if abs(v) < 10**4000 else "1" + "0" * 4000
    if isinstance(v, str):
        return json.dumps(v)
    return "[" + ", ".join(_toml_value(x) for x in v) + "]"


plan_fields = st.sampled_from(["context", "batch", "gpus", "gpu_layers", "headroom", "gpu_memory_utilization",
                               "precision", "strict", "model", "name", "bogus"])


@FAST
@given(st.dictionaries(plan_fields, toml_values, max_size=5), st.integers(0, 60))
def test_plan_text_is_a_plan_or_one_line(fields, depth):
    from fitcheck.preflight.plan_file import parse_plan

    body = "\n".join(f"{k} = {_toml_value(v)}" for k, v in fields.items())
    nested = "\nx = " + "[" * depth + "]" * depth if depth > 30 else ""
    for text in (f'[[case]]\nmodel = "qwen-7b"\n{body}\n', f"[defaults]\n{body}\n[[case]]\nmodel = 'a'\n{nested}"):
        try:
            parse_plan(text, "p.toml")
        except FitcheckError as exc:
            assert exc.one_line().startswith("p.toml") and "\n" not in exc.one_line()


@FAST
@given(st.dictionaries(st.sampled_from(["total_bytes", "total_gib", "available_gib", "bandwidth_gbps"]),
                       toml_values, max_size=3))
def test_profile_text_is_a_machine_or_one_line(memory):
    from fitcheck.profiles import read_profile_text

    body = "\n".join(f"{k} = {_toml_value(v)}" for k, v in memory.items())
    try:
        read_profile_text(f'kind = "desktop"\n[memory]\n{body}\n[cpu]\narchitecture = "x86_64"\n', "p.toml")
    except FitcheckError as exc:
        assert exc.one_line().startswith("p.toml")


@FAST
@given(st.text(max_size=200))
def test_bounded_json_and_toml_loaders(text):
    with contextlib.suppress(ValueError):
        json_loads_bounded(text)
    with contextlib.suppress(FitcheckError):
        loads_toml(text, "t.toml")


json_values = st.recursive(st.one_of(st.none(), st.booleans(), huge_ints, st.floats(allow_nan=False),
                                     st.text(max_size=8)),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                        max_size=3), max_leaves=12)
config_keys = st.sampled_from(["num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                               "num_key_value_heads", "vocab_size", "head_dim", "num_local_experts",
                               "num_experts_per_tok", "max_position_embeddings", "sliding_window", "torch_dtype",
                               "tie_word_embeddings", "rope_scaling", "quantization_config"])


@FAST
@given(st.sampled_from(["llama", "qwen2", "mixtral", "gemma3_text", "deepseek_v2", "phi3", "falcon", "gpt_oss"]),
       st.dictionaries(config_keys, json_values, max_size=6))
def test_config_json_is_a_spec_or_one_line(model_type, overrides):
    from fitcheck.model.hf_config import spec_from_config

    config = {"model_type": model_type, "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, **overrides}
    try:
        spec = spec_from_config(config, "fuzz")
    except FitcheckError:
        return
    assert spec.total_params >= 0


@FAST
@given(st.binary(max_size=300), st.integers(0, 2**64 - 1))
def test_safetensors_header_bytes(blob, length):
    from fitcheck.model.safetensors_header import parse_header_bytes

    for data in (blob, struct.pack("<Q", length) + blob, struct.pack("<Q", len(blob)) + blob):
        try:
            parse_header_bytes(data)
        except FitcheckError as exc:
            assert "\n" not in exc.one_line()


shape = st.lists(st.one_of(st.integers(-2, 5000), huge_ints, st.text(max_size=2)), max_size=5)


@FAST
@given(st.dictionaries(st.text(max_size=30), st.fixed_dictionaries(
    {"dtype": st.sampled_from(["BF16", "F32", "I32", "U8", "F8_E4M3", "??"]), "shape": shape,
     "data_offsets": st.lists(huge_ints, min_size=0, max_size=3)}), max_size=6))
def test_safetensors_header_json_and_inferred_architecture(doc):
    from fitcheck.model.local import spec_from_tensors, stored_weights
    from fitcheck.model.safetensors_header import header_from_json

    try:
        header = header_from_json(doc, data_size=10**6)
        stored_weights({"x": header})
        spec_from_tensors(header.tensors, "x")
    except FitcheckError:
        pass


def _gguf_image(meta: dict[str, int], dims: list[int]) -> bytes:
    def s(x: str) -> bytes:
        return struct.pack("<Q", len(x)) + x.encode()
    items = b"".join(s(k) + struct.pack("<IQ", 10, v & (2**64 - 1)) for k, v in meta.items())
    items += s("general.architecture") + struct.pack("<I", 8) + s("llama")
    tensor = s("blk.0.ffn_up.weight") + struct.pack("<I", len(dims)) + b"".join(
        struct.pack("<Q", d & (2**64 - 1)) for d in dims) + struct.pack("<IQ", 0, 0)
    return b"GGUF" + struct.pack("<IQQ", 3, 1, len(meta) + 1) + items + tensor


@FAST
@given(st.dictionaries(st.sampled_from(["llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
                                        "llama.attention.head_count", "llama.attention.head_count_kv",
                                        "llama.expert_count", "llama.expert_used_count", "llama.vocab_size",
                                        "llama.attention.key_length", "llama.attention.sliding_window"]),
                       st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1)), max_size=10),
       st.lists(st.integers(0, 2**64 - 1), max_size=5), st.binary(max_size=40))
def test_gguf_header_and_spec(meta, dims, tail):
    from fitcheck.model.gguf_header import parse_header
    from fitcheck.model.gguf_spec import spec_from_gguf

    try:
        header = parse_header(_gguf_image(meta, dims) + tail)
        spec = spec_from_gguf([header], "x")
        assert spec.hidden_size > 0 and spec.num_attention_heads % spec.num_kv_heads == 0
    except FitcheckError:
        pass


@FAST
@given(st.text(max_size=40), st.integers(0, 8))
def test_visible_devices_parse_to_valid_indices(value, count):
    from fitcheck.probe.amd import parse_visible_indices
    from fitcheck.probe.cuda_visible import parse_cuda_visible_devices

    uuids = [f"GPU-{i:04d}" for i in range(count)]
    chosen = parse_cuda_visible_devices(value, count, uuids)
    assert all(isinstance(d, str) or 0 <= d < count for d in chosen) and len(set(chosen)) == len(chosen)
    indices = parse_visible_indices(value)
    assert indices is None or all(0 <= i < 10**6 for i in indices)


@FAST
@given(st.dictionaries(st.sampled_from(["MemTotal", "MemAvailable", "SwapTotal", "SwapFree"]),
                       st.one_of(huge_ints, st.text(max_size=6)), max_size=4))
def test_meminfo_readings_are_facts_only_when_possible(values):
    from fitcheck.machine import Unknown
    from fitcheck.probe.memory import parse_meminfo, system_memory_from

    info = parse_meminfo("".join(f"{k}: {v} kB\n" for k, v in values.items()))
    mem = system_memory_from(info.get("MemTotal"), info.get("MemAvailable"), info.get("SwapTotal"),
                             info.get("SwapFree"), [], "/proc/meminfo")
    for fact in (mem.total_bytes, mem.available_bytes, mem.swap_total_bytes, mem.swap_free_bytes):
        assert isinstance(fact, Unknown) or 0 <= fact <= 2**56
    if not isinstance(mem.total_bytes, Unknown) and not isinstance(mem.available_bytes, Unknown):
        assert mem.available_bytes <= mem.total_bytes


numeric_options = st.sampled_from(["--context", "--batch", "--gpus", "--gpu-layers", "--headroom",
                                   "--gpu-memory-utilization", "--params", "--require"])


@SLOW
@given(numeric_options, number_text)
def test_cli_numeric_options_answer_or_exit_2(option, value):
    from fitcheck.cli import cli

    args = {"--params": ["nosuch-x", "--params", value],
            "--require": ["check", "--profile", "rtx-4090", "--require", f"vram>={value}GiB"]}.get(
        option, ["qwen-7b", option, value, "--profile", "rtx-4090", "--json"])
    r = CliRunner().invoke(cli, args)
    assert r.exit_code in (0, 1, 2, 3), r.output
    assert "Traceback" not in r.output


@SLOW
@given(st.sampled_from(["--seq-len", "--grad-accum", "--lora-rank", "--batch"]), number_text)
def test_cli_training_numbers_answer_or_exit_2(option, value):
    from fitcheck.cli import cli

    r = CliRunner().invoke(cli, ["qwen-7b", "--mode", "lora", option, value, "--profile", "rtx-4090", "--json"])
    assert r.exit_code in (0, 1, 2, 3), r.output


@SLOW
@given(st.sampled_from(["nan", "inf", "-inf", "-1", "1e400", "0", "5"]))
def test_where_max_price(value):
    from fitcheck.cli import cli

    r = CliRunner().invoke(cli, ["where", "qwen-0.5b", "--max-price", value, "--json"])
    assert r.exit_code in (0, 1, 2), r.output
    if value in ("nan", "inf", "-inf", "-1", "1e400"):
        assert r.exit_code == 2


@FAST
@given(st.text(max_size=300))
def test_probe_text_parsers_never_raise(text):
    from fitcheck.probe.cgroup import parse_proc_cgroup
    from fitcheck.probe.cpu import parse_cfs_quota, parse_cpu_max, parse_cpuinfo
    from fitcheck.probe.host import parse_os_release
    from fitcheck.probe.memory import parse_limit, parse_memory_stat

    parse_proc_cgroup(text)
    parse_cpuinfo(text)
    quota = parse_cpu_max(text)
    assert quota is None or math.isfinite(quota)
    parse_cfs_quota(text, text)
    parse_os_release(text)
    limit = parse_limit(text)
    assert limit is None or 0 <= limit < 2**60
    parse_memory_stat(text)


@FAST
@given(st.one_of(st.text(max_size=40), number_text))
def test_transformers_version_and_interactive_answers(text):
    from fitcheck.cli.interactive_cmd import Invalid, parse_command, validate
    from fitcheck.versions import parse_transformers_version

    try:
        parse_transformers_version(text)
    except FitcheckError as exc:
        assert len(exc.one_line()) < 200
    for field in ("context", "batch", "gpus", "lora-rank"):
        with contextlib.suppress(Invalid):
            validate(field, text)
    with contextlib.suppress(Invalid):
        parse_command(text, 5)
