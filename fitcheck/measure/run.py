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
from fitcheck.estimate.verdict import DOES_NOT_FIT, DOES_NOT_FIT_ON_DISK, FITS, TIGHT, UNKNOWN, WORDS
from fitcheck.machine import Machine, known
from fitcheck.measure import figures, receipts
from fitcheck.measure.job import DEFAULT_NEW_TOKENS, DEFAULT_STEPS, Job, device_for, inference_job, training_job
from fitcheck.measure.runner import ERROR, MEASURED, OUT_OF_MEMORY, RunResult, run_job
from fitcheck.model.resolve import resolve_model
from fitcheck.pipeline import check as check_api
from fitcheck.plan import DEFAULT_CONTEXT, Plan
from fitcheck.render.check import check_document
from fitcheck.request import Request
from fitcheck.search.routes import changes_what_you_set

REFUSED = "refused"
DEFAULT_TIME_LIMIT_S = 600.0
MEASURE_ENGINE_WHY = "fitcheck measure runs transformers"


@dataclass(frozen=True)
class MemoryLimit:
    """What the measuring process may hold above its baseline (its imports), and where that number came from.

    Every run has one: ``--memory-limit``, else what the check counted as usable (free minus the headroom) less
    the estimate's runtime part, which the baseline already holds.  ``device_bytes`` bounds the device the model
    runs on (the CPU run's RAM; CUDA's set_per_process_memory_fraction); ``host_bytes`` bounds the process's RAM
    on every device (the parent's resident-memory guard, and on a Linux CPU run RLIMIT_AS as well, so an
    allocation past it fails in the run instead of waking the kernel's out-of-memory killer).
    """

    device_bytes: int
    host_bytes: int
    source: str

    def as_dict(self) -> dict:
        return {"device_bytes": self.device_bytes, "host_bytes": self.host_bytes, "source": self.source}


@dataclass(frozen=True)
class MeasureOptions:
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    memory_limit_bytes: int | None = None  # --memory-limit; None: the default limit (MemoryLimit)
    force: bool = False                    # run a request the estimate says does not fit (still under the limit)
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
    limit: MemoryLimit | None = None            # what the run ran under (None: refused before a limit was set)

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


def _refusal(check, options: MeasureOptions, limit: MemoryLimit | None) -> str:
    """Why the run is refused ('' when it may run): without --force, anything the estimate does not call FITS
    (a run it expects to fail, or to fit only tightly, would press the machine into swap or the kernel's
    out-of-memory killer, where other processes are candidates too); with it, a run no limit can be set for."""
    if limit is None:
        return ("how much memory is free here is not known, so no memory limit can be set: not measured "
                "(give --memory-limit SIZE)")
    status = check.verdict.status
    if status == FITS or options.force:
        return ""
    _, _, why = check.verdict.summary().partition(": ")
    said = f"the estimate says {WORDS[status]}" + (f" ({why})" if why else "")
    if status in (TIGHT, DOES_NOT_FIT, DOES_NOT_FIT_ON_DISK, UNKNOWN):
        return (f"{said}; --force runs it anyway, under a {_gib(limit.host_bytes)} memory limit, where running "
                "out ends in this run's own out-of-memory verdict")
    return said


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def memory_limit(check, device: str, options: MeasureOptions) -> MemoryLimit | None:
    """The limit the run goes under (see MemoryLimit); None when this machine's free memory is not known."""
    headroom = check.verdict.headroom
    runtime = _runtime_bytes(check.estimate, device)
    avail = check.machine.memory.available_bytes
    host = int(avail * (1 - headroom)) - _runtime_bytes(check.estimate, "cpu") if known(avail) else None
    if options.memory_limit_bytes:
        given = options.memory_limit_bytes
        if host is not None and given > host and device == "cpu":
            return MemoryLimit(max(host, 0), max(host, 0),
                               f"--memory-limit, capped at the RAM available less the {headroom:.0%} headroom")
        return MemoryLimit(given, given if device == "cpu" or host is None else max(host, 0), "--memory-limit")
    if device == "cpu":
        return None if host is None else MemoryLimit(max(host, 0), max(host, 0),
                                                     f"RAM available less the {headroom:.0%} headroom")
    gpu = next((d for d in check.verdict.devices if d.kind == "gpu"), None)
    if host is None or gpu is None or gpu.usable_bytes is None:
        return None
    return MemoryLimit(max(gpu.usable_bytes - runtime, 0), max(host, 0),
                       f"GPU memory free and RAM available, each less the {headroom:.0%} headroom")


def _runtime_bytes(estimate, device: str) -> int:
    """The estimate's runtime part on the device (libraries, CUDA context): held before the baseline."""
    need = estimate.cpu_device if device == "cpu" else (estimate.gpu_devices or estimate.devices)[0]
    return sum(c.bytes for c in need.components if c.counted_in == "runtime") if need else 0


def _limited(machine: Machine, device: str, limit: int, estimate) -> Machine:
    """This machine with only `limit` bytes free where the run went (RAM, or the first GPU).

    The limit is above the baseline (imports, CUDA context excluded), so the estimate's runtime
    component (libraries, context), which its verdict counts, is added back.
    """
    limit += _runtime_bytes(estimate, device)
    if device == "cpu":
        return replace(machine, memory=replace(machine.memory, available_bytes=limit))
    gpus = (replace(machine.gpus[0], memory_free_bytes=limit), *machine.gpus[1:])
    return replace(machine, gpus=gpus)


def _measure(check, device: str, job_for, options: MeasureOptions, recheck=None) -> MeasureResult:
    date = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: UP017 (Python 3.10)
    result = MeasureResult(check=check, device=device, status=REFUSED, options=options, date=date)
    limit = memory_limit(check, device, options)
    job = job_for(limit)
    result.job = job
    from fitcheck.measure import require_job_libraries

    require_job_libraries(job)
    refusal = _refusal(check, options, limit)
    if refusal or limit is None:
        result.reason = refusal
        return result
    result.limit = limit

    run = run_job(job, options.time_limit_s)
    result.run, result.status, result.reason = run, run.status, run.error
    if run.status == OUT_OF_MEMORY:
        said = "" if "limit" in run.error else f", under its {_gib(limit.host_bytes)} limit"
        result.reason = f"{run.error}{said} ({limit.source})"
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
    check = _measured_engine(check_api(resolved, request, machine, as_typed=_typed(model, params),
                                       ctx=options.context, choose=False))
    return _measure(check, where, lambda limit: inference_job(check.spec, check.plan, where, new_tokens,
                                                               *_bytes(limit)), options,
                    lambda m: check_api(resolved, request, m, as_typed=_typed(model, params), ctx=options.context,
                                        choose=False))


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
    check = check_api(resolved, request, machine, as_typed=_typed(model, params), ctx=options.context, choose=False)
    if plain_loop:
        check = _reason(check, "master_weights", "measure runs a plain PyTorch loop (parameters in their dtype)")
    return _measure(check, where, lambda limit: training_job(check.spec, check.plan, where, steps,
                                                              *_bytes(limit)), options,
                    lambda m: check_api(resolved, request, m, as_typed=_typed(model, params), ctx=options.context,
                                        choose=False))


def _measured_engine(check):
    """The check with the engine explained as measure's (it runs transformers; the user set no --engine), and
    the alternatives on another engine said to be what `fitcheck MODEL` estimates, not what measure runs."""
    check = _reason(check, "engine", MEASURE_ENGINE_WHY)
    set_by_us = changes_what_you_set("--engine")
    alternatives = tuple(replace(a, title=a.title.replace(set_by_us, f"(not measurable: {MEASURE_ENGINE_WHY})"))
                         for a in check.alternatives)
    return replace(check, alternatives=alternatives)


def _bytes(limit: MemoryLimit | None) -> tuple[int | None, int | None]:
    return (limit.device_bytes, limit.host_bytes) if limit else (None, None)


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
