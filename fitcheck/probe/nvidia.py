"""NVIDIA GPUs through NVML (the nvidia-ml-py package, ``import pynvml``).

NVML is imported and initialised lazily, once, under a lock, and shut down at exit.  Every query
goes through :func:`query`, which turns any ``NVMLError`` into ``Unknown('NVML: <error>')``, so
one GPU or one function the driver lacks hides nothing else (the approach of nvitop's
``libnvml.nvmlQuery``, XuehaiPan/nvitop nvitop/api/libnvml.py).
"""

from __future__ import annotations

import atexit
import contextlib
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

from fitcheck.machine import GPU, MigInstance, SystemMemory, Unknown, known
from fitcheck.probe.cuda_visible import parse_cuda_visible_devices
from fitcheck.probe.files import plausible_bytes

__all__ = ["NvidiaReading", "read_nvidia", "parse_cuda_visible_devices", "memory_bandwidth", "query"]

NVML_CLOCK_MEM = 2  # nvmlClockType_t NVML_CLOCK_MEM (nvml.h)
NVML_DEVICE_MIG_ENABLE = 1  # nvml.h

_lock = threading.Lock()
_state: dict[str, Any] = {"module": None, "error": None, "done": False}


@dataclass(frozen=True)
class NvidiaReading:
    """What NVML says: the visible GPUs, the driver, and why there are none when there are none."""

    gpus: tuple[GPU, ...]
    driver_version: str | Unknown
    cuda_version: str | Unknown
    status: str  # '' when GPUs were found, else one line saying why not


def memory_bandwidth(bus_width_bits: int, max_memory_clock_mhz: int) -> int:
    """Peak memory bandwidth in bytes/s = bus width/8 x max memory clock x 2 (double data rate).

    NVML's memory clock is the command clock for HBM and half the effective data rate for
    GDDR6X, so one factor 2 fits both.  Checked against NVIDIA's datasheets:
    A100 80GB SXM 5120 bit x 1593 MHz -> 2039 GB/s (datasheet 2039 GB/s);
    H100 SXM 5120 bit x 2619 MHz -> 3352 GB/s (3.35 TB/s);
    RTX 4090 384 bit x 10501 MHz -> 1008 GB/s (1008 GB/s).
    """
    return bus_width_bits // 8 * max_memory_clock_mhz * 1_000_000 * 2


def query(nvml: ModuleType, function: str, *args: Any, **kwargs: Any) -> Any:
    """``nvml.<function>(*args)``, or Unknown naming the error; never raises."""
    func = getattr(nvml, function, None)
    if func is None:
        return Unknown(f"NVML: {function} missing (nvidia-ml-py too old)")
    try:
        return func(*args, **kwargs)
    except nvml.NVMLError as exc:
        return Unknown(f"NVML: {exc}")
    except Exception as exc:  # a binding/driver mismatch shows up as TypeError, AttributeError...
        return Unknown(f"NVML: {function} failed ({type(exc).__name__}: {exc})")


def _text(value: Any) -> Any:
    """A string NVML returned (bytes decoded); anything else becomes Unknown(reason)."""
    if isinstance(value, Unknown):
        return value
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return Unknown(f"NVML returned {type(value).__name__}, not text")
    return value[:200]


def _int(value: Any, what: str, low: int = 0, high: int = 2**40) -> Any:
    """An integer NVML returned, within [low, high]; anything else becomes Unknown(reason)."""
    if isinstance(value, Unknown):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        return Unknown(f"NVML {what}: {type(value).__name__}, not a number")
    if not low <= value <= high:
        return Unknown(f"NVML {what}: impossible reading ({value})")
    return value


def _init_reason(nvml: ModuleType, exc: Exception) -> str:
    """One line saying why NVML could not start."""
    kinds = {
        "NVMLError_LibraryNotFound": "NVIDIA driver not found (NVML library missing)",
        "NVMLError_DriverNotLoaded": "NVIDIA driver not loaded",
        "NVMLError_LibRmVersionMismatch": "NVIDIA driver/library version mismatch "
                                          "(reload the nvidia kernel module or reboot)",
        "NVMLError_NoPermission": "no permission to use the NVIDIA driver",
    }
    for name, reason in kinds.items():
        cls = getattr(nvml, name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return reason
    return f"NVML could not start: {exc}"


def _shutdown() -> None:
    with _lock:
        module = _state["module"]
        if module is not None and _state["error"] is None:
            with contextlib.suppress(Exception):  # shutting down: nothing left to report to
                module.nvmlShutdown()
        _state.update(module=None, error=None, done=False)


def _nvml_library_present() -> bool:
    """On Linux, dlopen the NVML library first: when it is absent we skip importing pynvml
    (~25 ms) altogether.  Elsewhere pynvml does its own search."""
    if not sys.platform.startswith("linux"):
        return True
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def nvml_module(nvml: ModuleType | None = None) -> tuple[ModuleType | None, str | None]:
    """(initialised pynvml, None) or (None or pynvml, reason NVML cannot be used); once per process.

    ``nvml`` injects a (fake) module for tests; it is initialised the same way.
    """
    with _lock:
        if _state["done"] and (nvml is None or nvml is _state["module"]):
            return _state["module"], _state["error"]
        if nvml is None:
            if not _nvml_library_present():
                _state.update(module=None, error="NVIDIA driver not found (libnvidia-ml.so.1 missing)", done=True)
                return None, _state["error"]
            try:
                import pynvml
            except ImportError:
                _state.update(module=None, error="nvidia-ml-py is not installed", done=True)
                return None, _state["error"]
            nvml = pynvml
        error = None
        try:
            nvml.nvmlInit()
        except Exception as exc:
            error = _init_reason(nvml, exc) if hasattr(nvml, "NVMLError") else f"NVML: {exc}"
        else:
            atexit.register(_shutdown)
        _state.update(module=nvml, error=error, done=True)
        return nvml, error


def _memory(nvml: ModuleType, handle: Any) -> tuple[Any, Any, Any, Any, Unknown | None]:
    """(total, free, used, reserved, error): NVML memory v2 (reports reserved), else v1."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    if version is not None:
        info = query(nvml, "nvmlDeviceGetMemoryInfo", handle, version=version)
        if not isinstance(info, Unknown):
            return _checked_memory(info, getattr(info, "reserved", Unknown("NVML memory v2 without reserved")))
    info = query(nvml, "nvmlDeviceGetMemoryInfo", handle)
    if isinstance(info, Unknown):
        return info, info, info, info, info
    return _checked_memory(info, Unknown("NVML memory v2 not available"))


def _checked_memory(info: Any, reserved: Any) -> tuple[Any, Any, Any, Any, Unknown | None]:
    """NVML's memory figures, each a plausible byte count or Unknown(reason); free above total is impossible."""
    total = plausible_bytes(getattr(info, "total", Unknown("NVML memory info without total")), "NVML memory total")
    free = plausible_bytes(getattr(info, "free", Unknown("NVML memory info without free")), "NVML memory free")
    used = plausible_bytes(getattr(info, "used", Unknown("NVML memory info without used")), "NVML memory used")
    reserved = plausible_bytes(reserved, "NVML memory reserved")
    if isinstance(total, int) and isinstance(free, int) and free > total:
        free = Unknown(f"NVML memory free ({free:,}) above total ({total:,})")
    return total, free, used, reserved, None


def _is_not_supported(error: Unknown) -> bool:
    return "Not Supported" in error.reason


def _mig_instances(nvml: ModuleType, handle: Any) -> tuple[tuple[MigInstance, ...], tuple[str, ...]]:
    """The MIG instances of a MIG-enabled GPU; gaps (NotFound) are normal, other errors noted."""
    count = _int(query(nvml, "nvmlDeviceGetMaxMigDeviceCount", handle), "MIG device count", 0, 64)
    if isinstance(count, Unknown):
        return (), (f"MIG instances not listed: {count.reason}",)
    instances, notes = [], []
    for mig_index in range(count):
        mig_handle = query(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", handle, mig_index)
        if isinstance(mig_handle, Unknown):
            if "Not Found" not in mig_handle.reason:
                notes.append(f"MIG instance {mig_index}: {mig_handle.reason}")
            continue
        total, free, _, _, _ = _memory(nvml, mig_handle)
        instances.append(MigInstance(
            index=mig_index,
            uuid=_text(query(nvml, "nvmlDeviceGetUUID", mig_handle)),
            name=_text(query(nvml, "nvmlDeviceGetName", mig_handle)),
            memory_total_bytes=total,
            memory_free_bytes=free,
        ))
    return tuple(instances), tuple(notes)


def read_gpu(nvml: ModuleType, index: int, system_memory: SystemMemory) -> GPU:
    """Everything NVML tells about GPU ``index`` (NVML order); each fact read independently."""
    handle = query(nvml, "nvmlDeviceGetHandleByIndex", index)
    if isinstance(handle, Unknown):
        return GPU(index=index, vendor="nvidia", name=handle, memory_total_bytes=handle,
                   memory_free_bytes=handle, memory_used_bytes=handle, memory_reserved_bytes=handle,
                   uuid=handle, compute_capability=handle, bandwidth_bytes_per_s=handle, fp8=handle,
                   mig_mode=handle, notes=(f"GPU {index} could not be opened: {handle.reason}",))
    notes: list[str] = []
    total, free, used, reserved, memory_error = _memory(nvml, handle)
    unified = False
    if memory_error is not None and _is_not_supported(memory_error):
        # Unified-memory devices (GB10 / DGX Spark, Jetson) report no framebuffer: the GPU uses
        # system RAM, as nvitop does for the same case.
        unified = True
        total, free = system_memory.total_bytes, system_memory.available_bytes
        used = reserved = Unknown("unified memory: shares system RAM")
        notes.append("unified memory: GPU memory is system RAM (NVML reports no framebuffer)")

    capability = query(nvml, "nvmlDeviceGetCudaComputeCapability", handle)
    if not isinstance(capability, Unknown) and not (
            isinstance(capability, (tuple, list)) and len(capability) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 100 for v in capability)):
        capability = Unknown(f"NVML compute capability: unexpected {type(capability).__name__}")
    compute_capability: str | Unknown
    fp8: bool | Unknown
    if isinstance(capability, Unknown):
        compute_capability, fp8 = capability, capability
    else:
        major, minor = capability
        compute_capability, fp8 = f"{major}.{minor}", (major, minor) >= (8, 9)  # Ada/Hopper+ have fp8

    bus_width = _int(query(nvml, "nvmlDeviceGetMemoryBusWidth", handle), "memory bus width", 0, 65536)
    memory_clock = _int(query(nvml, "nvmlDeviceGetMaxClockInfo", handle, NVML_CLOCK_MEM), "memory clock",
                        0, 1_000_000)
    bandwidth: int | Unknown
    if isinstance(bus_width, Unknown):
        bandwidth = bus_width
    elif isinstance(memory_clock, Unknown):
        bandwidth = memory_clock
    elif bus_width > 0 and memory_clock > 0:
        bandwidth = memory_bandwidth(bus_width, memory_clock)
        notes.append("bandwidth estimated from bus width x max memory clock x 2")
    else:
        bandwidth = Unknown("NVML reported a zero bus width or memory clock")

    mig = query(nvml, "nvmlDeviceGetMigMode", handle)
    instances: tuple[MigInstance, ...] = ()
    if isinstance(mig, Unknown):
        mig_mode = False if _is_not_supported(mig) else mig
    elif not isinstance(mig, (tuple, list)) or not mig:
        mig_mode = Unknown(f"NVML MIG mode: unexpected {type(mig).__name__}")
    else:
        mig_mode = mig[0] == NVML_DEVICE_MIG_ENABLE
        if mig_mode:
            instances, mig_notes = _mig_instances(nvml, handle)
            notes.append("MIG enabled: CUDA runs on MIG instances, not the whole GPU")
            notes.extend(mig_notes)

    return GPU(
        index=index,
        vendor="nvidia",
        name=_text(query(nvml, "nvmlDeviceGetName", handle)),
        memory_total_bytes=total,
        memory_free_bytes=free,
        memory_used_bytes=used,
        memory_reserved_bytes=reserved,
        unified_memory=unified,
        uuid=_text(query(nvml, "nvmlDeviceGetUUID", handle)),
        compute_capability=compute_capability,
        bandwidth_bytes_per_s=bandwidth,
        fp8=fp8,
        mig_mode=mig_mode,
        mig_instances=instances,
        notes=tuple(notes),
    )


def _cuda_version(value: Any) -> Any:
    """NVML's CUDA driver version integer (12040) -> '12.4'."""
    value = _int(value, "CUDA driver version", 1000, 10_000_000)
    if isinstance(value, Unknown):
        return value
    return f"{value // 1000}.{value % 1000 // 10}"


def _mig_gpu(parent: GPU, instance: MigInstance, position: int) -> GPU:
    """A MIG instance named in CUDA_VISIBLE_DEVICES, as the one device CUDA shows."""
    return GPU(
        index=position, vendor="nvidia", name=instance.name,
        memory_total_bytes=instance.memory_total_bytes, memory_free_bytes=instance.memory_free_bytes,
        uuid=instance.uuid, compute_capability=parent.compute_capability, fp8=parent.fp8,
        mig_mode=True, notes=(f"MIG instance {instance.index} of GPU {parent.index}",),
    )


def select_visible(gpus: list[GPU], visible_value: str | None) -> tuple[GPU, ...]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves visible, re-indexed in CUDA order (pure)."""
    mig_by_uuid = {instance.uuid: (gpu, instance) for gpu in gpus for instance in gpu.mig_instances
                   if known(instance.uuid)}
    uuids = [gpu.uuid if known(gpu.uuid) else "" for gpu in gpus] + list(mig_by_uuid)
    chosen = []
    for position, device in enumerate(parse_cuda_visible_devices(visible_value, len(gpus), uuids)):
        if isinstance(device, int):
            chosen.append(replace(gpus[device], index=position))
        else:
            parent, instance = mig_by_uuid[device]
            chosen.append(_mig_gpu(parent, instance, position))
    return tuple(chosen)


def read_nvidia(env: Mapping[str, str], system_memory: SystemMemory,
                nvml: ModuleType | None = None) -> NvidiaReading:
    """The NVIDIA GPUs visible to CUDA in this process, the driver and CUDA versions."""
    module, error = nvml_module(nvml)
    no_driver = Unknown("no NVIDIA driver")
    if module is None or error is not None:
        return NvidiaReading((), no_driver, no_driver, error or "NVML unavailable")
    count = _int(query(module, "nvmlDeviceGetCount"), "device count", 0, 4096)
    driver = _text(query(module, "nvmlSystemGetDriverVersion"))
    cuda = query(module, "nvmlSystemGetCudaDriverVersion_v2")
    if isinstance(cuda, Unknown):
        cuda = query(module, "nvmlSystemGetCudaDriverVersion")
    cuda = _cuda_version(cuda)
    if isinstance(count, Unknown):
        return NvidiaReading((), driver, cuda, f"NVIDIA GPUs not counted: {count.reason}")
    if count == 0:
        return NvidiaReading((), driver, cuda, "NVIDIA driver loaded but no NVIDIA GPU")
    gpus = [read_gpu(module, index, system_memory) for index in range(count)]
    visible_value = env.get("CUDA_VISIBLE_DEVICES")
    visible = select_visible(gpus, visible_value)
    status = "" if visible else f"CUDA_VISIBLE_DEVICES={visible_value!r} hides all {count} NVIDIA GPU(s)"
    return NvidiaReading(visible, driver, cuda, status)
