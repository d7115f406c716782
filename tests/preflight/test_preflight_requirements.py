"""--require: the parser (hypothesis) and the evaluator against hand-built machines."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcheck.errors import FitcheckError
from fitcheck.machine import CPU, GPU, Disk, Host, Machine, SystemMemory, Unknown
from fitcheck.preflight.requirements import (
    FACTS,
    FAILED,
    OK,
    OPERATORS,
    UNKNOWN,
    evaluate,
    exit_code,
    parse_requirement,
    parse_version,
)
from fitcheck.units import GB, GiB, MiB

SIZE_FACTS = [f for f, (kind, _) in FACTS.items() if kind == "size"]
UNITS = {"GiB": GiB, "GB": GB, "MiB": MiB, "TiB": 1024**4, "g": GiB}


def machine(gpus=(), ram_gib=32, cuda="12.4", disk_free=100 * GB, gpu_status="no GPU in this test"):
    return Machine(
        name="t", kind="desktop", host=Host("linux"),
        memory=SystemMemory(ram_gib * GiB, ram_gib * GiB // 2, None),
        cpu=CPU("cpu", "x86_64", 8, 4, 8), gpus=tuple(gpus), gpu_status="" if gpus else gpu_status,
        cuda_version=cuda if gpus else Unknown("no GPU driver"), disk=Disk("/cache", disk_free),
    )


def gpu(total_gib=24, free_gib=20, cc="8.9", index=0, vendor="nvidia"):
    return GPU(index, vendor, "G", total_gib * GiB, free_gib * GiB, compute_capability=cc)


@given(fact=st.sampled_from(SIZE_FACTS), op=st.sampled_from(OPERATORS),
       number=st.integers(min_value=0, max_value=10**6), unit=st.sampled_from(sorted(UNITS)),
       spaces=st.sampled_from(["", " ", "  "]))
def test_size_requirements_round_trip(fact, op, number, unit, spaces):
    req = parse_requirement(f"{spaces}{fact.upper()}{spaces}{op}{spaces}{number}{unit}{spaces}")
    assert (req.fact, req.op, req.value) == (fact, op, number * UNITS[unit])
    assert req.decimal == (unit == "GB")
    assert req.text == req.text.strip()


@given(op=st.sampled_from(OPERATORS), parts=st.lists(st.integers(0, 99), min_size=1, max_size=3))
def test_versions_compare_part_by_part(op, parts):
    text = ".".join(map(str, parts))
    req = parse_requirement(f"cuda{op}{text}")
    assert req.value == parse_version(text)
    assert parse_version(text + ".0") == parse_version(text)  # 12.1 == 12.1.0


@settings(max_examples=200)
@given(st.text(max_size=30))
def test_any_text_parses_or_raises_one_line_fitcheck_error(text):
    try:
        req = parse_requirement(text)
    except FitcheckError as exc:
        assert exc.exit_code == 2 and "\n" not in exc.one_line()
    else:
        assert req.fact in FACTS and req.op in OPERATORS


@pytest.mark.parametrize("text, needle", [
    ("vram>=24", "no unit"), ("vram=>24GiB", "expected FACT OP VALUE"), ("gpu>=2", "unknown fact"),
    ("gpus>=two", "whole number"), ("cc>=eight", "not a version"), ("ram>=lots", "not a size"), ("", "expected"),
])
def test_malformed_requirements(text, needle):
    with pytest.raises(FitcheckError, match=needle):
        parse_requirement(text)


def test_version_order_is_numeric():
    assert parse_version("12.10") > parse_version("12.9")
    assert parse_requirement("cc>=8.0").holds(parse_version("8.6"))
    assert not parse_requirement("cc>=8.0").holds(parse_version("7.5"))


def judged(texts, m):
    return {o.requirement.text: o for o in evaluate([parse_requirement(t) for t in texts], m)}


def test_gpu_facts_use_the_smallest_and_lowest_gpu():
    m = machine([gpu(80, 70, "9.0", 0), gpu(24, 10, "8.6", 1)], cuda="12.4")
    out = judged(["vram>=24GiB", "vram>=25GiB", "vram_free>=12GiB", "gpus>=2", "gpus>=3", "cc>=8.6",
                  "cc>=9.0", "cuda>=12.1", "cuda>=12.10"], m)
    assert {k: o.status for k, o in out.items()} == {
        "vram>=24GiB": OK, "vram>=25GiB": FAILED, "vram_free>=12GiB": FAILED, "gpus>=2": OK, "gpus>=3": FAILED,
        "cc>=8.6": OK, "cc>=9.0": FAILED, "cuda>=12.1": OK, "cuda>=12.10": FAILED}
    assert "24.00 GiB" in out["vram>=25GiB"].message and "FAILED" in out["vram>=25GiB"].message
    assert out["cc>=9.0"].shown == "8.6"


def test_no_gpu_fails_gpu_facts_but_unknown_facts_say_so():
    out = judged(["vram>=1GiB", "cuda>=12.1", "gpus>=1", "ram>=8GiB", "disk>=40GB"], machine())
    assert out["vram>=1GiB"].status == FAILED and "no GPU" in out["vram>=1GiB"].shown
    assert out["cuda>=12.1"].status == FAILED and out["gpus>=1"].status == FAILED
    assert out["ram>=8GiB"].status == OK  # 16 GiB available of 32
    assert out["disk>=40GB"].status == OK and "100.00 GB" in out["disk>=40GB"].shown
    unknown_free = machine([GPU(0, "nvidia", "G", 24 * GiB, Unknown("NVML: Not Supported"), compute_capability="8.0")])
    out = judged(["vram_free>=1GiB", "vram>=1GiB"], unknown_free)
    assert out["vram_free>=1GiB"].status == UNKNOWN and "NVML: Not Supported" in out["vram_free>=1GiB"].message
    assert out["vram>=1GiB"].status == OK


def test_exit_code_failed_beats_unknown():
    m = machine([GPU(0, "nvidia", "G", 24 * GiB, Unknown("x"), compute_capability="8.0")])
    assert exit_code(evaluate([parse_requirement("vram_free>=1GiB")], m)) == 3
    assert exit_code(evaluate([parse_requirement("vram_free>=1GiB"), parse_requirement("gpus>=2")], m)) == 1
    assert exit_code(evaluate([parse_requirement("gpus>=1")], m)) == 0
    assert exit_code(()) == 0


def test_colour_only_on_a_terminal_without_no_color():
    from fitcheck.preflight.lines import paint, use_color

    class Tty:
        def isatty(self):
            return True

    assert use_color(Tty(), {}) and use_color(Tty(), {"NO_COLOR": ""})
    assert not use_color(Tty(), {"NO_COLOR": "1"}) and not use_color(object(), {})
    assert paint("FITS", "fits", True).startswith("\x1b[") and paint("FITS", "fits", False) == "FITS"
