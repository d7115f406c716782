"""What the latency caches rely on, and that none of them leaks one question's answer into another's:
shared Evaluators inside `where` (fitcheck.pipeline.shared_evaluations), the memo of valid requests
(Request.validate) and the field-dict copy behind Request/Plan.with_changes (fitcheck.frozen)."""

from __future__ import annotations

import dataclasses

import pytest

from fitcheck.errors import FitcheckError
from fitcheck.frozen import replaced
from fitcheck.model.catalog import get_entry
from fitcheck.pipeline import Evaluator, check, evaluator, shared_evaluations
from fitcheck.plan import Plan, TrainingPlan, resolve
from fitcheck.profiles import load_profile
from fitcheck.request import Request


@pytest.mark.parametrize("cls", [Request, Plan, TrainingPlan])
def test_with_changes_types_meet_what_the_field_copy_needs(cls):
    # fitcheck.frozen.replaced skips __init__: it is dataclasses.replace only without these
    assert not hasattr(cls, "__post_init__")
    assert all(f.init for f in dataclasses.fields(cls))
    assert not hasattr(cls, "__slots__")


def test_with_changes_equals_dataclasses_replace():
    spec = get_entry("Qwen/Qwen2.5-7B-Instruct").spec
    request = Request(context=8192, batch=4)
    plan = resolve(request, spec, load_profile("rtx-4090"))
    training = resolve(Request(mode="qlora"), spec, load_profile("rtx-4090"))
    for obj, changes in [(request, {"batch": 2, "engine": "vllm"}), (plan, {"assumptions": ()}),
                         (training, {"seq_len": 1024})]:
        new = obj.with_changes(**changes)
        assert new == dataclasses.replace(obj, **changes) and hash(new) == hash(dataclasses.replace(obj, **changes))
        assert type(new) is type(obj) and new is not obj and obj != new
    assert request.batch == 4  # the original is untouched
    with pytest.raises(TypeError):
        replaced(request, {"bacth": 2})


def test_a_malformed_request_raises_every_time_after_valid_ones():
    Request().validate()
    Request().validate()  # remembered
    for _ in range(2):
        with pytest.raises(FitcheckError):
            Request(context=0).validate()
    # equal to the valid default (4096.0 == 4096) but not a whole number: not taken for it
    with pytest.raises(FitcheckError):
        Request(context=4096.0).validate()


def test_evaluators_are_shared_only_inside_the_block_and_per_model_and_machine():
    spec = get_entry("Qwen/Qwen2.5-7B-Instruct").spec
    other = get_entry("meta-llama/Llama-3.1-8B-Instruct").spec
    a, b = load_profile("rtx-4090"), load_profile("t4")
    assert evaluator(spec, a) is not evaluator(spec, a)  # no block: a fresh one each time
    with shared_evaluations():
        shared = evaluator(spec, a)
        assert evaluator(spec, a) is shared
        assert evaluator(spec, b) is not shared and evaluator(other, a) is not shared
        # by identity: an equal copy of the machine gets its own (never another object's answers)
        assert evaluator(spec, dataclasses.replace(a)) is not shared
        with shared_evaluations():  # nested: the outer block's
            assert evaluator(spec, a) is shared
    assert evaluator(spec, a) is not shared
    assert isinstance(shared, Evaluator)


@pytest.mark.parametrize("model", ["qwen-7b", "qwen3-30b-a3b"])
def test_shared_checks_answer_each_request_as_a_fresh_check_does(model):
    # the same requests on machines whose plans coincide (a 4090 and a 4090 laptop's GPU differ; the CPU
    # fallback and llama.cpp plans may not): the shared estimates never carry one machine's answer to another
    from fitcheck.model.resolve import resolve_model

    resolved = resolve_model(model)
    machines = [load_profile(n) for n in ("rtx-4090", "rtx-4090-laptop", "laptop-16gb", "8x-h100")]
    requests = [Request(), Request(context=32768), Request(batch=8), Request(precision="q4_k_m"),
                Request(mode="lora"), Request(context=32768)]
    asked = [(r, m) for m in machines for r in requests]
    alone = [check(resolved, r, m) for r, m in asked]
    with shared_evaluations():
        shared = [check(resolved, r, m) for r, m in asked]
    assert len({(r.estimate.total_bytes, r.plan.precision, r.max_context, r.max_batch) for r in alone}) > 12
    for x, y in zip(alone, shared, strict=True):
        assert x.request == y.request and x.plan == y.plan and x.estimate == y.estimate and x.verdict == y.verdict
        assert (x.max_context, x.max_batch, x.speed, x.device_advice) == (y.max_context, y.max_batch, y.speed,
                                                                          y.device_advice)
        assert [(a.fitcheck_command, a.plan, a.verdict, a.cost) for a in x.alternatives] \
            == [(a.fitcheck_command, a.plan, a.verdict, a.cost) for a in y.alternatives]


def test_check_without_device_advice_changes_nothing_else():
    machine = load_profile("laptop-16gb")
    full = check("llama-3.1-70b", Request(), machine)
    brief = check("llama-3.1-70b", Request(), machine, device_advice=False)
    assert full.device_advice is not None and brief.device_advice is None
    assert dataclasses.replace(brief, device_advice=full.device_advice) == full
