"""One answer to "does X run on Y": every engine × precision × device kind × compute capability walked through the
capability table (fitcheck.engines.runs_here), validation (bad input only where the engine never loads the format),
the verdict (CANNOT RUN exactly where the table says no, with its reason), the defaults (never a refused pair) and
the alternatives (only pairs that run there)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fitcheck import engines
from fitcheck.errors import FitcheckError
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.verdict import CANNOT_RUN
from fitcheck.machine import Machine
from fitcheck.options import PRECISIONS
from fitcheck.pipeline import check
from fitcheck.profiles import load_profile
from fitcheck.request import Request

MODEL = "qwen2.5-0.5b"
STORED_MXFP4 = "gpt-oss-20b"   # the formats only a checkpoint stored in them has (mxfp4, mxfp4_moe)


def model_for(precision: str) -> str:
    return STORED_MXFP4 if weight_format(precision).stored_only else MODEL


def with_cc(profile: str, cc: str) -> Machine:
    m = load_profile(profile)
    return replace(m, name=f"{profile}@{cc}", gpus=tuple(replace(g, compute_capability=cc) for g in m.gpus))


MACHINES = {
    "cuda 6.0 (P100)": with_cc("t4", "6.0"),
    "cuda 7.0 (V100)": with_cc("t4", "7.0"),
    "cuda 7.5 (T4)": load_profile("t4"),
    "cuda 8.0 (A100)": load_profile("a100-80gb"),
    "cuda 8.9 (RTX 4090)": load_profile("rtx-4090"),
    "cuda 9.0 (H100)": load_profile("h100-sxm"),
    "rocm (MI300X)": load_profile("mi300x"),
    "metal (M3 Max)": load_profile("macbook-pro-m3-max-64gb"),
    "cpu": load_profile("laptop-32gb"),
}
ASKED = [p for p in PRECISIONS if p != "auto"]


def table(engine: str, precision: str, machine: Machine) -> str | None:
    kind, cc = engines.machine_kind(machine, "gpu" if machine.gpus else "cpu")
    return engines.runs_here(engine, precision, kind, cc)


@pytest.mark.parametrize("where", list(MACHINES))
@pytest.mark.parametrize("engine", list(engines.ENGINES))
def test_the_verdict_says_what_the_table_says(engine, where):
    machine = MACHINES[where]
    for precision in ASKED:
        try:
            result = check(model_for(precision), Request(engine=engine, precision=precision), machine, search=False)
        except FitcheckError:
            # bad input only where the engine never loads the format
            assert engines.engine_precision_problem(engine, precision) is not None, (engine, precision, where)
            continue
        why_not = table(engine, precision, machine)
        if why_not is not None:
            assert result.verdict.status == CANNOT_RUN and why_not in result.verdict.summary(), \
                (engine, precision, where, why_not)
        else:  # the table lets it run: the verdict is about memory (this model fits every machine here)
            assert result.verdict.status != CANNOT_RUN, (engine, precision, where, result.verdict.summary())
        for alt in result.alternatives:
            assert table(alt.plan.engine, alt.plan.precision, machine) is None, (engine, precision, where, alt.title)


@pytest.mark.parametrize("where", list(MACHINES))
def test_defaults_never_land_on_a_refused_pair(where):
    machine = MACHINES[where]
    for precision in [None, *ASKED]:
        try:
            result = check(model_for(precision or "bf16"), Request(precision=precision), machine, alternatives=False,
                           search=False)
        except FitcheckError:
            continue
        if result.verdict.status != CANNOT_RUN:
            assert table(result.plan.engine, result.plan.precision, machine) is None, (precision, where)
        if precision is None:
            assert result.verdict.runs, where


def test_vllm_on_a_p100_cannot_run_here():
    result = check(MODEL, Request(engine="vllm"), MACHINES["cuda 6.0 (P100)"])
    assert result.verdict.status == CANNOT_RUN and result.exit_code == 1
    assert "vLLM needs compute capability >= 7.0 (this GPU: 6.0)" in result.verdict.summary()
    assert result.alternatives and all(a.plan.engine != "vllm" for a in result.alternatives)
