"""The Python API behind `fitcheck measure`: estimate with the check pipeline, then run it for real.

    from fitcheck.measure.run import measure_inference
    from fitcheck.probe import probe
    result = measure_inference("Qwen/Qwen2.5-0.5B", prompt=1024, new_tokens=16, machine=probe())
    result.status, result.measured["peak_bytes"], result.check.estimate.total_bytes

The estimate is `fitcheck.pipeline.check` on the same request (nothing
estimated twice); the job is built from its resolved plan; the run happens in a fresh process
(:mod:`fitcheck.measure.runner`).  No printing here.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from fitcheck import __version__
from fitcheck.engines import get
from fitcheck.errors import FitcheckError
from fitcheck.estimate.kv_cache import kv_cache_bytes
from fitcheck.machine import Machine
from fitcheck.measure import figures, receipts
from fitcheck.measure.job import DEFAULT_NEW_TOKENS, DEFAULT_STEPS, Job, device_for, inference_job, training_job
from fitcheck.measure.runner import ERROR, MEASURED, OUT_OF_MEMORY, RunResult, run_job
from fitcheck.model.resolve import resolve_model
from fitcheck.pipeline import check as check_api
from fitcheck.plan import DEFAULT_CONTEXT, Plan
from fitcheck.render.check import check_document
from fitcheck.request import Request

REFUSED = "refused"
# A run whose estimate needs more than this × the free memory is refused without --force: the
# estimate's worst under-prediction in the accuracy tables is about 30 %, so 1.5 × is far outside
# what a measurement could show to fit, and it would only push the machine into swap or the OOM killer.
FORCE_MARGIN = 1.5
DEFAULT_TIME_LIMIT_S = 600.0


@dataclass(frozen=True)
class MeasureOptions:
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    memory_limit_bytes: int | None = None  # CPU: RSS guard; CUDA: set_per_process_memory_fraction
    force: bool = False
    layers: int | None = None              # build only the first N layers (the estimate uses the same depth)
    context: Any = None                    # fitcheck.context.Context read of this machine (the installed stack)


@dataclass
class MeasureResult:
    """The check (estimate, verdict, alternatives), the run, and the two side by side."""

    check: Any                             # fitcheck.check.CheckResult
    device: str                            # cpu | cuda | mps
    status: str                            # measured | out_of_memory | refused | timeout | error
    job: Job | None = None
    run: RunResult | None = None
    measured: dict = field(default_factory=dict)
    pairs: list = field(default_factory=list)   # figures.Pair
    reason: str = ""
    options: MeasureOptions = MeasureOptions()
    date: str = ""
    alternatives: tuple = ()                    # out of memory under --memory-limit: what fits that limit
    alternatives_doc: list = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 measured, 1 out of memory (or refused: the estimate says far too big), 3 timeout or error."""
        if self.status == MEASURED:
            return 0
        if self.status in (OUT_OF_MEMORY, REFUSED):
            return 1
        return 3

    @property
    def peak_pair(self):
        return next((p for p in self.pairs if p.name == "peak"), None)


def _shallower(resolved, layers: int | None):
    """The resolved model built with only `layers` layers (same shapes), for both estimate and run."""
    if layers is None:
        return resolved
    from fitcheck.measure.hf_config import UnsupportedSpec, scaled_spec

    try:
        spec = scaled_spec(resolved.spec, layers)
    except UnsupportedSpec as exc:
        raise FitcheckError(f"--layers {layers}: {exc}") from None
    return replace(resolved, spec=replace(spec, name=f"{spec.name} ({layers} layers)"),
                   note=f"built with {layers} of {resolved.spec.num_layers} layers (--layers)")


def _refusal(check, device: str, options: MeasureOptions) -> str:
    """Why the run is refused without --force ('' when it may run)."""
    if options.force or options.memory_limit_bytes:
        return ""
    for d in check.verdict.devices:
        if d.free_bytes and d.need_bytes > FORCE_MARGIN * d.free_bytes:
            where = "RAM" if d.kind == "cpu" else d.device.upper()
            return (f"the estimate needs {d.need_bytes / 2**30:.2f} GiB of {where}, more than {FORCE_MARGIN:g} × the "
                    f"{d.free_bytes / 2**30:.2f} GiB free: not measured (--force runs it anyway)")
    return ""


def _limited(machine: Machine, device: str, limit: int, estimate) -> Machine:
    """This machine with only `limit` bytes free where the run went (RAM, or the first GPU).

    The limit is above the baseline (imports, CUDA context excluded), so the estimate's runtime
    component (libraries, context), which its verdict counts, is added back.
    """
    need = estimate.cpu_device if device == "cpu" else (estimate.gpu_devices or estimate.devices)[0]
    limit += sum(c.bytes for c in need.components if c.counted_in == "runtime") if need else 0
    if device == "cpu":
        return replace(machine, memory=replace(machine.memory, available_bytes=limit))
    gpus = (replace(machine.gpus[0], memory_free_bytes=limit), *machine.gpus[1:])
    return replace(machine, gpus=gpus)


def _measure(check, device: str, job_for, options: MeasureOptions, recheck=None) -> MeasureResult:
    date = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: UP017 (Python 3.10)
    result = MeasureResult(check=check, device=device, status=REFUSED, options=options, date=date)
    job = job_for()
    result.job = job
    from fitcheck.measure import require_job_libraries

    require_job_libraries(job)
    refusal = _refusal(check, device, options)
    if refusal:
        result.reason = refusal
        return result

    run = run_job(job, options.time_limit_s)
    result.run, result.status, result.reason = run, run.status, run.error
    doc = check_document(check)
    result.measured = figures.measured_figures(device, run.info, run.phases)
    if run.status == OUT_OF_MEMORY and run.guard_peak_bytes:
        # Stopped by the guard mid-phase: its last reading is the highest seen.
        peak = max(run.guard_peak_bytes, result.measured.get("peak_bytes") or 0)
        result.measured["peak_bytes"] = result.measured["peak_rss_bytes"] = peak
    if run.status == OUT_OF_MEMORY and not check.alternatives and options.memory_limit_bytes and recheck:
        # The estimate said it fits the machine; what fits the memory the run had is the useful answer.
        limited = recheck(_limited(check.machine, device, options.memory_limit_bytes, check.estimate))
        result.alternatives = limited.alternatives
        result.alternatives_doc = check_document(limited)["alternatives"]
    if run.status == MEASURED:
        result.pairs = figures.compared(device, result.measured, figures.estimate_device_entry(doc, device),
                                        doc["estimate"]["facts"], doc["request"]["mode"], _kv_after_prefill(check))
    return result


def _kv_after_prefill(check) -> int | None:
    """The estimator's KV cache for the prompt alone (the prefill's), or None for training."""
    plan = check.plan
    if not isinstance(plan, Plan):
        return None

    return kv_cache_bytes(check.spec, tokens=plan.prompt_tokens, sequences=plan.batch, kv_dtype=plan.kv_dtype,
                          engine=get(plan.engine), prompt_tokens=plan.prompt_tokens,
                          transformers_version=plan.transformers_version)


def measure_inference(model, *, machine: Machine, precision: str | None = None, context: int | None = None,
                      prompt: int | None = None, new_tokens: int = DEFAULT_NEW_TOKENS, batch: int = 1,
                      device: str = "auto", kv_dtype: str = "auto", headroom: float = 0.10, params: str | None = None,
                      options: MeasureOptions = MeasureOptions()) -> MeasureResult:
    """Estimate and measure inference: a prefill of `prompt` tokens, then `new_tokens` generated.

    `context` is prompt + new tokens; give either (the prompt defaults to context - new_tokens).
    """
    if prompt is None:
        context = context or DEFAULT_CONTEXT
        prompt = context - new_tokens
        if prompt < 1:
            raise FitcheckError(f"--context {context} leaves no prompt before {new_tokens} new tokens",
                                "raise --context or lower --new-tokens")
    elif context is None:
        context = prompt + new_tokens
    elif prompt + new_tokens != context:
        raise FitcheckError(f"--prompt {prompt} + --new-tokens {new_tokens} is not --context {context}",
                            "give --prompt or --context, not both")
    resolved = _shallower(_resolve(model, params), options.layers)
    request = Request(precision=precision, context=context, batch=batch, kv_dtype=kv_dtype,
                      engine="transformers", device=device, prompt_tokens=prompt, headroom=headroom * 100)
    where = device_for(machine, device)
    check = check_api(resolved, request, machine, as_typed=_typed(model, params), ctx=options.context)
    return _measure(check, where, lambda: inference_job(check.spec, check.plan, where, new_tokens,
                                                         options.memory_limit_bytes), options,
                    lambda m: check_api(resolved, request, m, as_typed=_typed(model, params), ctx=options.context))


def measure_training(model, request, *, machine: Machine, steps: int = DEFAULT_STEPS, headroom: float = 0.10,
                     params: str | None = None, options: MeasureOptions = MeasureOptions()) -> MeasureResult:
    """Estimate and measure `steps` optimizer steps of a training Request (fitcheck.request)."""
    plain_loop = request.mode == "full" and request.master_weights is None
    if plain_loop:
        # A plain PyTorch loop keeps parameters in their dtype; fp32 masters are DeepSpeed/apex's.
        request = replace(request, master_weights="none")
    resolved = _shallower(_resolve(model, params), options.layers)
    request = request.with_changes(headroom=headroom * 100)
    where = device_for(machine, request.device)
    check = check_api(resolved, request, machine, as_typed=_typed(model, params), ctx=options.context)
    if plain_loop:
        check = _reason(check, "master_weights", "measure runs a plain PyTorch loop (parameters in their dtype)")
    return _measure(check, where, lambda: training_job(check.spec, check.plan, where, steps,
                                                        options.memory_limit_bytes), options,
                    lambda m: check_api(resolved, request, m, as_typed=_typed(model, params), ctx=options.context))


def _reason(check, name: str, why: str):
    """The check with assumption `name` explained by `why` (a default measure chose, not one typed)."""
    def fixed(assumptions):
        return tuple(replace(a, why=why) if a.name == name else a for a in assumptions)

    return replace(check, plan=replace(check.plan, assumptions=fixed(check.plan.assumptions)),
                   estimate=replace(check.estimate, assumptions=fixed(check.estimate.assumptions)))


def _typed(model, params: str | None) -> tuple[str, ...] | None:
    """What to type for the model in printed commands: a local folder or file as typed, with its --params."""
    if not isinstance(model, str):
        return None
    return (model.strip(),) + (("--params", params) if params else ())


def _resolve(model, params: str | None):
    if not isinstance(model, str):
        return model

    return resolve_model(model, params=params) if params else resolve_model(model)


def receipt_of(result: MeasureResult, doc: dict) -> dict:
    """The receipt line of a finished run (see fitcheck.measure.receipts)."""
    pair = result.peak_pair
    versions = dict(result.run.info) if result.run else {}
    return {
        "date": result.date,
        "fitcheck_version": __version__,
        # A shallower build (--layers) is another model: it must never match a full-depth check.
        "model": doc["model"]["id"] + (f" ({result.options.layers} layers)" if result.options.layers else ""),
        "request": doc["request"],
        "run": doc["run"],
        "status": result.status,
        "machine": doc["machine"]["summary"],
        "machine_fingerprint": receipts.fingerprint(result.check.machine),
        "device": result.device,
        "device_name": versions.get("device_name", ""),
        "versions": {k: versions.get(k, "") for k in ("torch", "transformers", "peft", "bitsandbytes", "cuda")}
        | {"python": platform.python_version()},
        "measured": {k: v for k, v in result.measured.items() if k != "phases"},
        "estimated": {"peak_bytes": pair.estimated_bytes if pair else None,
                      "peak_allocated_bytes": doc["estimate"]["peak_allocated_bytes"],
                      "peak_reserved_bytes": doc["estimate"]["peak_reserved_bytes"],
                      "total_bytes": doc["estimate"]["total_bytes"]},
        "error_pct": pair.error_pct if pair else None,
        "reason": result.reason,
    }


__all__ = ["ERROR", "MEASURED", "OUT_OF_MEMORY", "REFUSED", "MeasureOptions", "MeasureResult",
           "measure_inference", "measure_training", "receipt_of"]
