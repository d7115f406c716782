"""Probe this machine: RAM (with cgroup limits), CPU, GPUs, disk and host, as a :class:`Machine`.

``probe()`` never raises for a missing part (each fact is a value or ``Unknown(reason)``), starts
no subprocess, and imports NVML only when the NVIDIA library is present.  Each part lives in its
own module with pure parsing functions that tests feed recorded samples.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import TypeVar

from fitcheck.machine import CPU, GPU, Disk, Host, Machine, SystemMemory, Unknown, value_or_none

__all__ = ["probe"]

T = TypeVar("T")


def _guarded(read: Callable[[], T], fallback: Callable[[str], T]) -> T:
    """``read()``, or ``fallback(reason)`` if it raised: one broken part never sinks the probe."""
    try:
        return read()
    except Exception as exc:  # a bug or an exotic OS: report it as unknown, do not crash
        import traceback

        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return fallback(f"{type(exc).__name__}: {exc} ({os.path.basename(frame.filename)}:{frame.lineno})")


def _gpu_status(nvidia_status: str, drm_status: str) -> str:
    """One line: why no GPU was found ('NVIDIA driver not found (...); no AMD/Intel GPU ...')."""
    return "; ".join(part for part in (nvidia_status, drm_status) if part)


def probe(*, root: str = "/", env: Mapping[str, str] | None = None) -> Machine:
    """This machine as a :class:`~fitcheck.machine.Machine` (kind 'probed', source 'probe').

    ``root`` re-roots /proc, /sys and /etc reads (tests pass a fake tree); ``env`` replaces
    os.environ for CUDA/ROCR/HIP_VISIBLE_DEVICES and the Hugging Face cache variables.
    """
    from fitcheck.probe.amd import read_drm_gpus
    from fitcheck.probe.apple import read_apple_gpus
    from fitcheck.probe.cpu import read_cpu
    from fitcheck.probe.disk import read_disk
    from fitcheck.probe.host import read_host
    from fitcheck.probe.memory import read_memory
    from fitcheck.probe.nvidia import NvidiaReading, read_nvidia

    env = os.environ if env is None else env
    host = _guarded(lambda: read_host(root), lambda why: Host(os=sys.platform, os_version=Unknown(why)))
    memory = _guarded(lambda: read_memory(root), lambda why: SystemMemory(Unknown(why), Unknown(why), Unknown(why)))
    cpu = _guarded(lambda: read_cpu(root),
                   lambda why: CPU(Unknown(why), host.architecture, Unknown(why), Unknown(why), Unknown(why)))
    nvidia = _guarded(lambda: read_nvidia(env, memory),
                      lambda why: NvidiaReading((), Unknown(why), Unknown(why), f"NVIDIA probe failed: {why}"))
    drm_gpus, drm_status = _guarded(lambda: read_drm_gpus(root, env), lambda why: ((), f"sysfs GPU probe failed: {why}"))
    apple_gpus: tuple[GPU, ...] = _guarded(
        lambda: read_apple_gpus(value_or_none(memory.available_bytes)), lambda why: ())
    disk = _guarded(lambda: read_disk(env), lambda why: Disk("", Unknown(why)))

    gpus = (*nvidia.gpus, *drm_gpus, *apple_gpus)
    machine = Machine(
        name=host.hostname or "this machine",
        kind="probed",
        host=host,
        memory=memory,
        cpu=cpu,
        gpus=gpus,
        gpu_status="" if gpus else _gpu_status(nvidia.status, drm_status),
        driver_version=nvidia.driver_version,
        cuda_version=nvidia.cuda_version,
        disk=disk,
        source="probe",
    )
    if root != "/":  # a re-rooted (fake) tree is not this machine: no reading of its own
        return machine
    from fitcheck.probe.bandwidth_cache import with_stored_bandwidth

    return _guarded(lambda: with_stored_bandwidth(machine, env), lambda why: machine)
