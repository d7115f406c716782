"""The measuring process: runs ONE job and reports each phase on stdout as it ends.

    python -m fitcheck.measure.child '<job json>'

A fresh process, so nothing an earlier run allocated or imported is counted.  Order: imports
(torch, transformers, the model's modeling module, peft) and the config -> the meter's
**baseline** -> build -> the request's phases.  Every reading is relative to the baseline, so the
interpreter and the imports (0.3-0.5 GiB of RSS) are not charged to the model.

Protocol, one JSON object per line (a run killed for time or memory still reports the phases it
finished): ``@@info {...}`` after the baseline, ``@@phase {...}`` after each phase, then
``@@done {...}``, or ``@@oom {...}`` when the allocator ran out of memory (torch.OutOfMemoryError,
MemoryError), or ``@@error {...}`` for anything else.  Other output is library chatter.
"""

from __future__ import annotations

import json
import platform
import sys
import time

MARK_INFO, MARK_PHASE, MARK_DONE, MARK_OOM, MARK_ERROR = "@@info", "@@phase", "@@done", "@@oom", "@@error"


def emit(mark: str, payload: dict) -> None:
    sys.stdout.write(f"{mark} {json.dumps(payload, sort_keys=True)}\n")
    sys.stdout.flush()


def phase_runner(meter):
    """``phase(name, work)``: `work()` between the meter's begin and end, its reading emitted; returns its result.

    `work` returns ``(result, counted)``: what the phase leaves alive and the tensor bytes it counted.
    """
    def phase(name: str, work):
        meter.begin(name)
        result, counted = work()
        reading = meter.end()
        reading.counted = counted
        emit(MARK_PHASE, reading.as_dict())
        return result

    return phase


def _device_name(device: str, torch) -> str:
    if device == "cuda":
        return str(torch.cuda.get_device_name(0))
    if device == "mps":
        return "Apple GPU (mps)"
    return cpu_name()


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _meter(device: str):
    from fitcheck.measure import meter

    if device == "cuda":
        return meter.CudaMeter(used_bytes=meter.nvml_used_reader(_nvml_index()))
    return meter.make_meter(device)


def _nvml_index() -> int:
    """NVML's index of CUDA device 0 (CUDA_VISIBLE_DEVICES may renumber; UUIDs are not mapped)."""
    import os

    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def run(job) -> None:
    t0 = time.perf_counter()
    import torch  # before the baseline on purpose

    from fitcheck.measure import workload as W

    if job.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False (a CPU build of torch?)")
    if job.device == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError("torch.backends.mps.is_available() is False")
    config = W.make_config(job.hf_config)
    if job.mode in ("lora", "qlora"):
        import peft  # noqa: F401  (imported before the baseline)
    meter = _meter(job.device)
    if job.device == "cpu":
        _start_threads(torch)
    meter.start()
    if job.device == "cuda" and job.memory_limit_bytes:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, job.memory_limit_bytes / total))
    meter.take_baseline()
    address_space = _limit_address_space(job) if job.device == "cpu" else None
    emit(MARK_INFO, {
        "device": job.device, "device_name": _device_name(job.device, torch),
        "baseline_bytes": meter.baseline_bytes, "context_bytes": getattr(meter, "context_bytes", None),
        "baseline_reserved_bytes": getattr(meter, "baseline_reserved_bytes", None),
        "torch_threads": torch.get_num_threads(), "python": platform.python_version(), **W.versions(),
        "address_space_limit_bytes": address_space,
    })

    phase = phase_runner(meter)
    model = phase("build", lambda: W.build_model(job, config))
    vocab = config.vocab_size
    if job.mode == "inference":
        ids = W.random_ids(job.batch, job.prompt_tokens, vocab, job.device, job.seed)
        output = phase("prefill", lambda: W.prefill(model, ids))
        del output
        if job.new_tokens:
            sequences = phase("generate", lambda: W.generate(model, ids, job.new_tokens, job.sampling))
            del sequences
    else:
        optimizer = W.make_optimizer(job.optimizer, model)
        batches = [W.random_ids(job.batch, job.seq_len, vocab, job.device, job.seed + i)
                   for i in range(job.grad_accum)]

        def step() -> tuple[None, dict[str, int]]:
            counted: dict[str, int] = {}
            for ids in batches:
                loss, logits = W.forward_loss(model, ids)
                counted.update(logits)
                counted.update(W.backward(loss, model))
                del loss
            counted.update(W.optimizer_step(optimizer))
            return None, counted

        for n in range(1, job.steps + 1):
            phase(f"step{n}", step)
    meter.stop()
    emit(MARK_DONE, {"wall_s": round(time.perf_counter() - t0, 3)})


# Address space a CPU run may map beyond its baseline's and its RAM limit: thread stacks and malloc arenas are
# reserved, not resident (glibc reserves 64 MiB an arena), so RLIMIT_AS at exactly the RAM limit would fail
# runs that fit.  The parent's resident-memory guard holds the RAM limit itself; this bounds what it cannot
# catch between two polls (a single allocation far past the limit).
ADDRESS_SPACE_SLACK_BYTES = 1024 * 2**20


def _start_threads(torch) -> None:
    """Run one parallel op so torch's intra-op threads (their stacks and arenas) exist before the baseline."""
    x = torch.ones(1 << 16)
    (x @ x).item()


def _limit_address_space(job) -> int | None:
    """RLIMIT_AS at the address space mapped now + the RAM limit + the slack (Linux; None where not set).

    An allocation past it fails in this process (MemoryError, or torch's "can't allocate memory"), which is
    reported as out of memory; the kernel's out-of-memory killer, which may pick any process, is never reached.
    """
    if not job.host_limit_bytes:
        return None
    try:
        import resource

        with open("/proc/self/statm", encoding="ascii") as statm:
            mapped = int(statm.read().split()[0]) * resource.getpagesize()
        limit = mapped + job.host_limit_bytes + ADDRESS_SPACE_SLACK_BYTES
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError):
        return None
    return limit


_OOM_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory")


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__
    return name == "OutOfMemoryError" or any(w in str(exc).lower() for w in _OOM_WORDS)


def main(argv: list[str] | None = None) -> int:
    from fitcheck.measure.job import Job

    args = sys.argv[1:] if argv is None else argv
    job = Job.from_json(args[0])
    try:
        run(job)
    except BaseException as exc:  # noqa: BLE001 - every failure is reported on the protocol
        if isinstance(exc, KeyboardInterrupt):
            raise
        mark = MARK_OOM if _is_oom(exc) else MARK_ERROR
        emit(mark, {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
