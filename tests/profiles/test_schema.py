"""The fitcheck.machine/1 schema: exact round trips, human units, and one-line errors."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcheck.errors import FitcheckError
from fitcheck.machine import CPU, GPU, Disk, Host, Machine, MigInstance, Price, Purchase, SystemMemory, Unknown
from fitcheck.profiles import machine_from_dict, machine_to_dict, machine_to_toml, read_profile_text
from fitcheck.profiles.schema import KINDS, SPECS_BY_CLASS, os_allowance_bytes
from fitcheck.units import GB, GiB, MiB

# -- strategies: any Machine the probe could produce -----------------------------------------

texts = st.text(max_size=20)
reasons = st.builds(Unknown, st.text(min_size=1, max_size=30))
sizes = st.integers(min_value=0, max_value=2**50)
positive_sizes = st.integers(min_value=1, max_value=2**50)
counts = st.integers(min_value=1, max_value=4096)


def fact(values):
    return st.one_of(values, reasons)


migs = st.builds(MigInstance, index=st.integers(0, 7), uuid=fact(texts), name=fact(texts),
                 memory_total_bytes=fact(sizes), memory_free_bytes=fact(sizes))
gpus = st.builds(
    GPU, index=st.integers(0, 15), vendor=st.sampled_from(["nvidia", "amd", "apple", "intel"]), name=fact(texts),
    memory_total_bytes=fact(positive_sizes), memory_free_bytes=fact(sizes), memory_used_bytes=fact(sizes),
    memory_reserved_bytes=fact(sizes), unified_memory=st.booleans(), uuid=fact(texts),
    compute_capability=fact(st.sampled_from(["7.5", "8.0", "8.9", "9.0", "12.0"])),
    bandwidth_bytes_per_s=fact(sizes), bf16_tflops=fact(st.floats(0, 1e4, allow_nan=False)),
    fp8=fact(st.booleans()), mig_mode=fact(st.booleans()), mig_instances=st.lists(migs, max_size=2).map(tuple),
    notes=st.lists(texts, max_size=2).map(tuple),
)


def _free_at_most_total(total, free):
    return min(free, total) if isinstance(total, int) and isinstance(free, int) else free


# A profile never has more free than total (the schema rejects it), so neither do these machines.
gpus = gpus.map(lambda g: dataclasses.replace(
    g, memory_free_bytes=_free_at_most_total(g.memory_total_bytes, g.memory_free_bytes)))
memories = st.builds(SystemMemory, total_bytes=fact(positive_sizes), available_bytes=fact(sizes),
                     cgroup_limit_bytes=st.one_of(st.none(), sizes, reasons), swap_total_bytes=fact(sizes),
                     swap_free_bytes=fact(sizes), bandwidth_bytes_per_s=fact(sizes), bandwidth_source=texts,
                     ).map(lambda m: dataclasses.replace(
                         m, available_bytes=_free_at_most_total(m.total_bytes, m.available_bytes)))
machines = st.builds(
    Machine,
    name=texts, kind=st.sampled_from(KINDS),
    host=st.builds(Host, os=st.sampled_from(["linux", "darwin", "windows"]), os_version=fact(texts),
                   architecture=texts, container=fact(st.booleans()), wsl=fact(st.booleans()), hostname=texts),
    memory=memories,
    cpu=st.builds(CPU, model=fact(texts), architecture=texts, logical_cores=fact(counts),
                  physical_cores=fact(counts), usable_cores=fact(counts),
                  features=st.frozensets(texts, max_size=4), features_source=texts,
                  bf16_tflops=fact(st.floats(0, 100, allow_nan=False))),
    gpus=st.lists(gpus, max_size=3).map(tuple), gpu_status=texts, driver_version=fact(texts),
    cuda_version=fact(texts),
    disk=st.one_of(st.none(), st.builds(Disk, path=texts, free_bytes=fact(sizes), total_bytes=fact(sizes))),
    price=st.one_of(st.none(), st.builds(Price, usd_per_hour=st.floats(0, 1000, allow_nan=False),
                                         provider=texts, instance_type=texts,
                                         read_on=st.dates().map(lambda d: d.isoformat()), source=texts)),
    purchase=st.one_of(st.none(), st.builds(Purchase, usd=st.floats(0, 100000, allow_nan=False),
                                            read_on=st.dates().map(lambda d: d.isoformat()), source=texts)),
    power_watts=fact(counts), description=texts, source=texts, notes=st.lists(texts, max_size=2).map(tuple),
)


@settings(max_examples=60, deadline=None)
@given(machines)
def test_any_machine_round_trips_through_toml_exactly(machine):
    assert read_profile_text(machine_to_toml(machine), "x.toml") == machine


@settings(max_examples=30, deadline=None)
@given(machines)
def test_any_machine_round_trips_through_json_exactly(machine):
    doc = json.loads(json.dumps(machine_to_dict(machine)))
    assert machine_from_dict(doc, "x.json") == machine


def test_every_dataclass_field_is_in_the_schema():
    # A field added to fitcheck.machine without a schema row would silently not round-trip. Only
    # Machine.overrides (the --gpu/--vram/--ram arguments, not a fact of the machine) is outside it.
    for cls, specs in SPECS_BY_CLASS.items():
        names = sorted(f.name for f in dataclasses.fields(cls) if f.metadata.get("profile", True))
        assert names == sorted(s.name for s in specs), cls.__name__


def test_unknown_is_null_with_a_sibling_reason_in_json():
    machine = _minimal(gpus=(GPU(0, "nvidia", "A100", 80 * GiB, 80 * GiB, uuid=Unknown("NVML: not supported")),))
    doc = machine_to_dict(machine)
    gpu = doc["gpus"][0]
    assert gpu["uuid"] is None
    assert gpu["unknown"]["uuid"] == "NVML: not supported"
    assert doc["schema"] == "fitcheck.machine/1"


# -- hand-written profiles ----------------------------------------------------------------------

MINIMAL = """
kind = "desktop"
[memory]
total_gib = 64
[cpu]
architecture = "x86_64"
logical_cores = 16
"""


def test_human_units_and_documented_defaults():
    text = MINIMAL + """
[[gpus]]
vendor = "nvidia"
name = "NVIDIA GeForce RTX 4090"
memory_mib = 24564
compute_capability = "8.9"
bandwidth_gbps = 1008
bf16_tflops = 165.2
"""
    m = read_profile_text(text, "p.toml", default_name="p")
    gpu = m.gpus[0]
    assert m.name == "p" and m.source == "p.toml"
    assert m.memory.total_bytes == 64 * GiB
    assert m.memory.available_bytes == 64 * GiB - os_allowance_bytes(64 * GiB) == 64 * GiB - int(6.4 * GiB)
    assert m.memory.cgroup_limit_bytes is None
    assert m.cpu.usable_cores == 16
    assert gpu.memory_total_bytes == gpu.memory_free_bytes == 24564 * MiB  # free = total in a profile
    assert gpu.memory_used_bytes == 0
    assert gpu.bandwidth_bytes_per_s == 1008 * GB
    assert gpu.fp8 is True  # cc 8.9
    assert m.host.architecture == "x86_64"
    assert m.cpu.bf16_tflops == Unknown("not in profile")


@pytest.mark.parametrize("line, expected", [
    ('memory = "24 GiB"', 24 * GiB), ("memory_gib = 24", 24 * GiB), ("memory_gb = 24", 24 * GB),
    ("memory_total_bytes = 1000", 1000), ('memory_total = "512MiB"', 512 * MiB),
])
def test_gpu_memory_spellings(line, expected):
    text = MINIMAL + f'[[gpus]]\nvendor = "amd"\nname = "x"\n{line}\n'
    assert read_profile_text(text, "p.toml").gpus[0].memory_total_bytes == expected


@pytest.mark.parametrize("line, expected", [
    ("bandwidth_gbps = 51.2", 51_200_000_000), ("bandwidth_tbps = 3.35", 3_350_000_000_000),
    ('bandwidth = "1008 GB/s"', 1_008_000_000_000), ("bandwidth_bytes_per_s = 7", 7),
])
def test_bandwidth_spellings(line, expected):
    text = MINIMAL.replace("total_gib = 64", f"total_gib = 64\n{line}")
    memory = read_profile_text(text, "p.toml").memory
    assert memory.bandwidth_bytes_per_s == expected and memory.bandwidth_source == "profile"


def test_count_expands_identical_gpus_with_indexes():
    text = MINIMAL + '[[gpus]]\ncount = 8\nvendor = "nvidia"\nname = "H100"\nmemory_gib = 80\n'
    assert [g.index for g in read_profile_text(text, "p.toml").gpus] == list(range(8))


@pytest.mark.parametrize("change, message", [
    (("memory_gib = 24", 'memory_total = "lots"'), 'x.toml: gpus[0].memory_total: expected a size (like "24 GiB"), got "lots"'),
    (("memory_gib = 24", "memory_gib = -1"), "x.toml: gpus[0].memory_gib: must not be negative, got -1"),
    (("memory_gib = 24", "memory_gib = 0"), "x.toml: gpus[0].memory_gib: must be more than 0"),
    (("memory_gib = 24", ""), "x.toml: gpus[0].memory_total: missing (required)"),
    (("logical_cores = 16", 'logical_cores = "many"'), 'x.toml: cpu.logical_cores: expected a whole number, got "many"'),
    (("logical_cores = 16", ""), "x.toml: cpu.logical_cores: missing (required)"),
    (('kind = "desktop"', 'kind = "server"'), 'x.toml: kind: expected one of'),
    (("memory_gib = 24", "memory_gib = 24\nmemry = 3"), "x.toml: gpus[0].memry: unknown field (did you mean memory?)"),
    (("memory_gib = 24", "memory_gib = 24\nmemory_mib = 3"), "x.toml: gpus[0].memory_mib: given twice"),
    (("memory_gib = 24", "memory_gib = 24\nunknown = { memory_total_bytes = \"x\" }"),
     "x.toml: gpus[0].memory_gib: has both a value and an unknown reason"),
    (("total_gib = 64", "total_gib = 64\nunknown = { hostname = \"x\" }"), "x.toml: memory.unknown.hostname: not a fact"),
])
def test_malformed_profiles_name_file_and_field(change, message):
    text = MINIMAL + '[[gpus]]\nvendor = "nvidia"\nname = "x"\nmemory_gib = 24\n'
    old, new = change
    assert old in text
    with pytest.raises(FitcheckError) as info:
        read_profile_text(text.replace(old, new, 1), "x.toml")
    assert info.value.one_line().startswith(message), info.value.one_line()
    assert "\n" not in info.value.one_line()


def test_bad_toml_and_wrong_schema_are_one_line_errors():
    with pytest.raises(FitcheckError, match=r"^x.toml: not valid TOML"):
        read_profile_text("kind = = 1", "x.toml")
    with pytest.raises(FitcheckError, match=r"^x.toml: schema: expected \"fitcheck.machine/1\""):
        read_profile_text('schema = "fitcheck.machine/9"\n' + MINIMAL, "x.toml")


def test_unknown_table_records_reasons_in_hand_written_profiles():
    text = MINIMAL + '[[gpus]]\nvendor = "nvidia"\nname = "Tesla T4"\nmemory_mib = 15360\n' \
                     '[gpus.unknown]\nbf16_tflops = "no bf16 on cc 7.5"\n'
    assert read_profile_text(text, "p.toml").gpus[0].bf16_tflops == Unknown("no bf16 on cc 7.5")


def _minimal(**changes) -> Machine:
    base = Machine(name="m", kind="desktop", host=Host(os="linux", architecture="x86_64"),
                   memory=SystemMemory(total_bytes=8 * GiB, available_bytes=6 * GiB),
                   cpu=CPU(model="x", architecture="x86_64", logical_cores=4, physical_cores=2, usable_cores=4))
    return dataclasses.replace(base, **changes)


# -- hostile numbers: one line naming the field, never a traceback or an out-of-memory kill ------

GPU_TEXT = MINIMAL + '[[gpus]]\nvendor = "nvidia"\nname = "x"\nmemory_gib = 24\n'


@pytest.mark.parametrize("old, new, message", [
    ("total_gib = 64", "total_gib = nan", "x.toml: memory.total_gib: expected a finite number, got NaN"),
    ("total_gib = 64", "total_gib = inf", "x.toml: memory.total_gib: expected a finite number, got Infinity"),
    ("total_gib = 64", "total_gib = -inf", "x.toml: memory.total_gib: expected a finite number, got -Infinity"),
    ("total_gib = 64", "total_gib = 1e300", "x.toml: memory.total_gib: is too large, got 1e+300"),
    ("total_gib = 64", "total_gib = 2e9", "x.toml: memory.total_gib: is too large"),
    ("total_gib = 64", "total_bytes = 1e300", "x.toml: memory.total_bytes: expected a whole number of bytes"),
    ("total_gib = 64", 'total = "nan GiB"', "x.toml: memory.total: expected a size"),
    ("total_gib = 64", 'total = "' + "9" * 400 + ' GiB"', "x.toml: memory.total: expected a size"),
    ("total_gib = 64", "total_gib = 64\nbandwidth_gbps = nan", "x.toml: memory.bandwidth_gbps: expected a finite number"),
    ("total_gib = 64", 'total_gib = 64\nbandwidth = "nan GB/s"', "x.toml: memory.bandwidth: expected a bandwidth"),
    ("total_gib = 64", 'total_gib = 64\nbandwidth = "1e400 GB/s"', "x.toml: memory.bandwidth: expected a bandwidth"),
    ("logical_cores = 16", "logical_cores = nan", "x.toml: cpu.logical_cores: expected a whole number, got NaN"),
    ("logical_cores = 16", "logical_cores = 9223372036854775807", "x.toml: cpu.logical_cores: is too large"),
    ("memory_gib = 24", "memory_gib = 24\nbf16_tflops = nan", "x.toml: gpus[0].bf16_tflops: expected a finite number"),
    ("memory_gib = 24", "memory_gib = 24\nbf16_tflops = inf", "x.toml: gpus[0].bf16_tflops: expected a finite number"),
    ("memory_gib = 24", "memory_gib = 24\nbf16_tflops = 1e30", "x.toml: gpus[0].bf16_tflops: is too large"),
    ("memory_gib = 24", "memory_gib = 24\ncount = 100000000", "x.toml: gpus[0].count: too many GPUs"),
    ("memory_gib = 24", "memory_gib = 24\ncount = 1025", "x.toml: gpus[0].count: too many GPUs"),
    ("memory_gib = 24", "memory_gib = 24\ncount = 0", "x.toml: gpus[0].count: expected a whole number of GPUs"),
    ("memory_gib = 24", 'memory_gib = 24\ncompute_capability = "abc"',
     'x.toml: gpus[0].compute_capability: expected a compute capability like "8.9", got "abc"'),
    ("memory_gib = 24", 'memory_gib = 24\ncompute_capability = "8"', "x.toml: gpus[0].compute_capability: expected"),
    ("memory_gib = 24", 'memory_gib = 24\ncompute_capability = "8.9.1"', "x.toml: gpus[0].compute_capability: expected"),
    ("memory_gib = 24", "memory_gib = 24\ncompute_capability = nan", "x.toml: gpus[0].compute_capability: expected"),
    ("memory_gib = 24", "memory_gib = 24\nmemory_free_gib = 30",
     "x.toml: gpus[0].memory_free: more than memory_total (30.0 GiB > 24.0 GiB)"),
    ("total_gib = 64", "total_gib = 64\navailable_gib = 65", "x.toml: memory.available: more than total"),
])
def test_hostile_numbers_are_one_line_errors_naming_the_field(old, new, message):
    assert old in GPU_TEXT
    with pytest.raises(FitcheckError) as info:
        read_profile_text(GPU_TEXT.replace(old, new, 1), "x.toml")
    line = info.value.one_line()
    assert line.startswith(message), line
    assert "\n" not in line and len(line) < 300


def test_gpu_count_cap_counts_every_gpus_table():
    table = '[[gpus]]\ncount = 1000\nvendor = "nvidia"\nname = "x"\nmemory_gib = 24\n'
    assert len(read_profile_text(MINIMAL + table, "p.toml").gpus) == 1000
    with pytest.raises(FitcheckError, match=r"^p.toml: gpus\[1\].count: too many GPUs"):
        read_profile_text(MINIMAL + table + table, "p.toml")


def test_compute_capability_and_free_memory_that_are_fine_still_load():
    text = GPU_TEXT.replace("memory_gib = 24", "memory_gib = 24\nmemory_free_gib = 24\ncompute_capability = 12.0", 1)
    gpu = read_profile_text(text.replace("total_gib = 64", "total_gib = 64\navailable_gib = 64"), "p.toml").gpus[0]
    assert gpu.compute_capability == "12.0" and gpu.memory_free_bytes == gpu.memory_total_bytes == 24 * GiB


def test_json_nan_from_probe_json_is_rejected_too():
    doc = json.loads('{"kind": "desktop", "memory": {"total_bytes": 1, "available_bytes": NaN},'
                     ' "cpu": {"architecture": "x86_64", "logical_cores": 1}}')
    with pytest.raises(FitcheckError, match=r"^j.json: memory.available_bytes: expected a finite number"):
        machine_from_dict(doc, "j.json")
