"""CPU or GPU for this request on this machine: the best option that runs on each device, compared at its speed,
with the engine each would use.  It re-plans the request on the other device, so it is a search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fitcheck import engines
from fitcheck.errors import FitcheckError
from fitcheck.estimate.formats import weight_format
from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec
from fitcheck.plan import Plan, resolve_inference
from fitcheck.request import Request
from fitcheck.speed.decode import SpeedEstimate, estimate_speed
from fitcheck.speed.efficiency import CPU_ENOUGH_TOKENS_PER_S, GPU_BETTER_RATIO, Rate


@dataclass(frozen=True)
class DeviceAdvice:
    """CPU or GPU for this configuration on this machine, and why."""

    choice: str | None             # 'gpu', 'cpu', or None (neither fits / cannot tell)
    reason: str
    gpu: SpeedEstimate | None      # the plan on the GPU (None: no GPU)
    cpu: SpeedEstimate | None      # the plan on the CPU with llama.cpp
    gpu_fits: bool | None
    cpu_fits: bool | None


# ---- CPU or GPU --------------------------------------------------------------------------------
Judge = Callable[[Plan], bool]  # does this plan run (fits, at least tightly)?


def _precision_given(plan: Plan) -> bool:
    return any(a.name == "precision" and a.why == "from --precision" for a in plan.assumptions)


def cpu_plan(spec: ModelSpec, plan: Plan, machine: Machine) -> Plan | None:
    """The same request on the CPU with llama.cpp: the weights asked for when llama.cpp loads them,
    else what CPU users run (q4_k_m, the CPU default of request.default_precision)."""
    fmt = weight_format(plan.precision)
    keep = fmt.gguf or (fmt.family == "float" and _precision_given(plan))
    precision = plan.precision if keep else "q4_k_m"
    engine = engines.gguf_engine()
    kv = plan.kv_dtype if plan.kv_dtype in engines.get(engine).kv_dtypes else "auto"
    req = Request(precision=precision, context=plan.context, batch=plan.batch, kv_dtype=kv,
                  engine=engine, device="cpu", prompt_tokens=plan.prompt_tokens)
    try:
        cpu = resolve_inference(req, spec, machine)
    except FitcheckError:
        return None
    return None if cpu.problems else cpu


def gpu_plan(spec: ModelSpec, plan: Plan, machine: Machine) -> Plan | None:
    """The same request on the GPU (same weights; the engine default for them)."""
    if not machine.gpus:
        return None
    req = Request(precision=plan.precision, context=plan.context, batch=plan.batch, device="gpu",
                  prompt_tokens=plan.prompt_tokens)
    try:
        gpu = resolve_inference(req, spec, machine)
    except FitcheckError:
        return None
    return None if gpu.problems else gpu


def advise_device(spec: ModelSpec, plan: Plan, machine: Machine, runs: Judge,
                  options: Sequence[Plan] = ()) -> DeviceAdvice:
    """Whether the GPU or the CPU is the better place for this request, and why.

    Each device is represented by the best option that runs on it: the request itself (moved to the
    other device where it is not there), or, where that does not fit, the fastest of ``options``
    (the plans of the runnable alternatives) on that device.  So a GPU whose requested setup does
    not fit but runs q4_k_m fully in VRAM is compared at that speed, not given up for the CPU."""
    g_plan = plan if plan.device in ("gpu", "offload") else gpu_plan(spec, plan, machine)
    c_plan = plan if plan.device == "cpu" else cpu_plan(spec, plan, machine)
    g_plan, g, g_fits = _best_on(spec, machine, runs, g_plan, [o for o in options if o.device in ("gpu", "offload")])
    c_plan, c, c_fits = _best_on(spec, machine, runs, c_plan, [o for o in options if o.device == "cpu"])
    slower = g is not None and c is not None and g.decode is not None and c.decode is not None \
        and g.decode.mid < c.decode.mid
    choice, reason = _choose(g, c, g_fits, c_fits, g_plan, c_plan)
    if (choice == "cpu" or slower) and g_fits and c_plan is not None and g_plan is not None \
            and g_plan.device == "gpu":
        # Before sending someone to the CPU, compare like with like: the CPU's weights (llama.cpp's
        # quant) on the GPU too.  A host-bound engine at batch 1, or 8-bit weights against the CPU's
        # 4-bit, is slower than the GPU can be; that is no reason to leave the GPU.
        same = gpu_plan(spec, c_plan, machine)
        if same is not None and same.precision != g_plan.precision and runs(same):
            s = estimate_speed(spec, same, machine)
            if s.decode is not None and (g is None or g.decode is None or s.decode.mid > g.decode.mid):
                g_plan, g = same, s
                choice, reason = _choose(g, c, g_fits, c_fits, g_plan, c_plan)
    return DeviceAdvice(choice, reason, g, c, g_fits, c_fits)


def _best_on(spec: ModelSpec, machine: Machine, runs: Judge, first: Plan | None, others: Sequence[Plan]
             ) -> tuple[Plan | None, SpeedEstimate | None, bool | None]:
    """(plan, speed, runs) for one device: ``first`` when it runs, else the fastest runnable of
    ``others`` (already judged runnable), else ``first`` as it is (not running)."""
    speed = estimate_speed(spec, first, machine) if first else None
    fits = runs(first) if first else None
    if fits or not others:
        return first, speed, fits
    scored = [(o, estimate_speed(spec, o, machine)) for o in others]
    known_rate = [(o, sp) for o, sp in scored if sp.decode is not None]
    if known_rate:
        best, best_speed = max(known_rate, key=lambda pair: pair[1].decode.mid if pair[1].decode else 0.0)
    else:
        best, best_speed = scored[0]
    return best, best_speed, True


def _tok(rate: Rate | None) -> str:
    return "unknown" if rate is None else f"~{rate.mid:,.0f} tok/s" if rate.mid >= 10 else f"~{rate.mid:.1f} tok/s"


def _how(p: Plan) -> str:
    """The weights and the engine a device's best option runs (issue 35 item 8: the engine each would use)."""
    return f"{p.precision} with {engines.get(p.engine).title}"


def _where(p: Plan | None) -> str:
    if p is None:
        return ""
    return {"gpu": "GPU", "cpu": "CPU", "offload": "GPU + CPU"}[p.device]


def _choose(g, c, g_fits, c_fits, g_plan, c_plan) -> tuple[str | None, str]:
    if g is None:
        if not c_fits:
            return None, "no GPU here, and it does not fit in RAM"
        if c.decode is None:
            return "cpu", f"no GPU here; CPU speed unknown: {c.unknown}"
        return "cpu", f"no GPU here; the CPU decodes {c_plan.precision} at {_tok(c.decode)}"
    if not g_fits and not c_fits:
        return None, "it fits neither on the GPU nor in RAM"
    if not c_fits:
        return "gpu", f"{_where(g_plan)}: {_tok(g.decode)}; it does not fit in RAM for the CPU"
    if not g_fits:
        if c.decode is None:  # never send someone to a CPU whose speed is unknown
            return None, f"it does not fit on the GPU; the CPU runs {c_plan.precision}, speed unknown ({c.unknown})"
        return "cpu", (f"CPU: {c_plan.precision} at {_tok(c.decode)}; it does not fit on the GPU, nor does an "
                       "alternative")
    if c.decode is None and g.decode is None:
        return None, f"both speeds are unknown ({g.unknown}; {c.unknown})"
    if c.decode is None or g.decode is None:
        known_one = (f"{_where(g_plan)} {_tok(g.decode)} ({g_plan.precision})" if g.decode
                     else f"CPU {_tok(c.decode)} ({c_plan.precision})")
        return ("gpu" if g.decode else "cpu"), f"{known_one}; the other speed is unknown ({c.unknown or g.unknown})"
    ratio = g.decode.mid / c.decode.mid
    versus = f"{_where(g_plan)} {_tok(g.decode)} ({_how(g_plan)}) vs CPU {_tok(c.decode)} ({_how(c_plan)})"
    if c.batch == 1 and c.decode.mid >= CPU_ENOUGH_TOKENS_PER_S and ratio < GPU_BETTER_RATIO:
        return "cpu", f"CPU is enough: {versus}; a GPU adds little at batch 1"
    if ratio < 1:  # the best each device runs: the CPU's is the faster
        return "cpu", f"{versus}; the CPU is the faster here"
    if c.batch == 1 and c.decode.mid >= CPU_ENOUGH_TOKENS_PER_S:
        return "gpu", f"{versus}; the CPU alone is fast enough to read along"
    where = "VRAM" if g_plan.device == "gpu" and not g_plan.cpu_offload_gb else "GPU + RAM"
    return "gpu", f"{versus}; the model fits in {where}"


