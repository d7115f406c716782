"""Run ONE case in this (fresh) process and report each phase on stdout as it finishes.

    python -m benchmarks.measure.run_case '<case json>' [--device cpu|cuda]

Protocol (one JSON object per line, so a case killed by its time limit still reports the
phases it finished): ``@@info {...}`` once after the baseline, ``@@phase {...}`` after every
phase, ``@@done {...}`` at the end.  Everything else on stdout/stderr is library chatter.

Order: imports (torch, transformers, peft) -> meter baseline -> build -> the mode's phases.
The baseline is taken after the imports, so import memory is not charged to any phase; it is
reported separately as ``baseline_bytes`` (absolute RSS, or allocated bytes on CUDA).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from fitcheck.measure.child import MARK_DONE, MARK_INFO, cpu_name, emit, phase_runner

from .cases import Case
from .meter import make_meter

MALLOC_ENV_KEYS = ("MALLOC_ARENA_MAX", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                   "MALLOC_TOP_PAD_", "PYTORCH_CUDA_ALLOC_CONF", "LD_PRELOAD")


def run(case: Case, device: str) -> None:
    t_case = time.perf_counter()
    import torch  # imported before the baseline on purpose

    from . import workloads

    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda but torch.cuda.is_available() is False")
    meter = make_meter(device)
    meter.start()
    device_name = torch.cuda.get_device_name(0) if device == "cuda" else cpu_name()
    prepared = workloads.prepare(case)
    library_versions = workloads.versions()
    meter.take_baseline()

    phase = phase_runner(meter)

    env = {
        "device": device,
        "device_name": device_name,
        "baseline_bytes": meter.baseline_bytes,
        "context_bytes": getattr(meter, "context_bytes", None),
        "torch_threads": torch.get_num_threads(),
        "python_version": platform.python_version(),
        "malloc_env": ";".join(f"{k}={os.environ[k]}" for k in MALLOC_ENV_KEYS if k in os.environ),
        **library_versions,
    }

    def build():
        model, counted, info = workloads.build(case, device, prepared)
        env.update(info)
        emit(MARK_INFO, env)
        return model, counted

    model = phase("build", build)

    if case.mode in ("prefill", "generate"):
        ids = workloads.random_ids(case, model, device)
        output = phase("prefill", lambda: workloads.prefill(case, model, ids))
        del output
        if case.mode == "generate":
            sequences = phase("generate", lambda: workloads.generate(case, model, ids))
            del sequences
    elif case.mode.startswith("train"):
        ids = workloads.random_ids(case, model, device)
        optimizer = workloads.make_optimizer(case, model)

        def full_step():
            loss, counted = workloads.forward_loss(case, model, ids, device)
            counted.update(workloads.backward(loss, model))
            del loss
            counted.update(workloads.optimizer_step(optimizer))
            return None, counted

        loss = phase("forward", lambda: workloads.forward_loss(case, model, ids, device))
        phase("backward", lambda: (None, workloads.backward(loss, model)))
        del loss
        phase("optimizer", lambda: (None, workloads.optimizer_step(optimizer)))
        for step in range(2, case.train_steps + 1):
            phase(f"step{step}", full_step)
    meter.stop()
    emit(MARK_DONE, {"case_wall_s": round(time.perf_counter() - t_case, 3)})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.measure.run_case")
    parser.add_argument("case_json")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args(argv)
    case = Case.from_json(args.case_json)
    problems = case.problems()
    if problems:
        raise SystemExit(f"invalid case {case.id}: " + "; ".join(problems))
    run(case, args.device)


if __name__ == "__main__":
    main()
