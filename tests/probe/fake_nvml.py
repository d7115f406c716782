"""A fake ``pynvml`` for tests: real NVMLError classes from nvidia-ml-py, fake devices.

Each device is a dict of NVML function name -> value or an exception instance to raise, so a
test can make any one call fail the way the real driver does.
"""

from __future__ import annotations

import types
from typing import Any

import pynvml as real

GIB = 1024**3


def memory_v1(total: int, free: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(total=total, free=free, used=total - free)


def memory_v2(total: int, free: int, reserved: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(total=total, free=free, used=total - free - reserved, reserved=reserved)


def a100_80gb(index: int = 0, uuid: str = "GPU-a1b2c3d4-0000-1111-2222-333344445555") -> dict[str, Any]:
    """An A100-SXM4-80GB as NVML 12.x reports it (bus 5120 bit, max memory clock 1593 MHz)."""
    return {
        "nvmlDeviceGetName": "NVIDIA A100-SXM4-80GB",
        "nvmlDeviceGetUUID": uuid,
        "memory_v2": memory_v2(85899345920, 84540784640, 669515776),
        "memory_v1": memory_v1(85899345920, 84540784640),
        "nvmlDeviceGetCudaComputeCapability": (8, 0),
        "nvmlDeviceGetMemoryBusWidth": 5120,
        "nvmlDeviceGetMaxClockInfo": 1593,
        "nvmlDeviceGetMigMode": real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED),
    }


class FakeNvml(types.ModuleType):
    """Module-like fake: ``FakeNvml(devices, init_error=..., missing=...)``."""

    def __init__(self, devices: list[dict[str, Any]] | None = None, *, init_error: Exception | None = None,
                 missing: tuple[str, ...] = (), driver: str = "550.54.15", cuda: int = 12040,
                 mig: dict[int, dict[int, Any]] | None = None):
        super().__init__("pynvml")
        self.devices = devices or []
        self.init_error = init_error
        self.driver, self.cuda = driver, cuda
        self.mig = mig or {}  # parent index -> {mig index: device dict or exception}
        self.calls: list[str] = []
        self.shutdowns = 0
        for name in dir(real):
            if name.startswith(("NVMLError", "NVML_", "nvmlMemory_v")):
                setattr(self, name, getattr(real, name))
        for name in missing:
            setattr(self, name, None)  # what an old binding lacks (the probe treats None as absent)

    # --- library -----------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.cuda

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    # --- devices: a handle is the device dict itself -------------------------------------------
    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        device = self.devices[index]
        error = device.get("nvmlDeviceGetHandleByIndex")
        if isinstance(error, Exception):
            raise error
        return device

    def _get(self, handle: dict[str, Any], key: str) -> Any:
        value = handle.get(key, real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED))
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlDeviceGetName(self, handle):
        return self._get(handle, "nvmlDeviceGetName")

    def nvmlDeviceGetUUID(self, handle):
        return self._get(handle, "nvmlDeviceGetUUID")

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        if version is None:
            return self._get(handle, "memory_v1")
        if "memory_v2" not in handle:  # an old driver: the _v2 symbol is missing
            raise real.NVMLError(real.NVML_ERROR_FUNCTION_NOT_FOUND)
        return self._get(handle, "memory_v2")

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return self._get(handle, "nvmlDeviceGetCudaComputeCapability")

    def nvmlDeviceGetMemoryBusWidth(self, handle):
        return self._get(handle, "nvmlDeviceGetMemoryBusWidth")

    def nvmlDeviceGetMaxClockInfo(self, handle, clock_type):
        assert clock_type == real.NVML_CLOCK_MEM
        return self._get(handle, "nvmlDeviceGetMaxClockInfo")

    def nvmlDeviceGetMigMode(self, handle):
        return self._get(handle, "nvmlDeviceGetMigMode")

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return self._get(handle, "nvmlDeviceGetMaxMigDeviceCount")

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, mig_index):
        parent = self.devices.index(handle)
        instance = self.mig.get(parent, {}).get(mig_index, real.NVMLError(real.NVML_ERROR_NOT_FOUND))
        if isinstance(instance, Exception):
            raise instance
        return instance
