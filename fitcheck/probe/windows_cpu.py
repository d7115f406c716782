"""The CPU on Windows, read directly: the registry for the model, ``IsProcessorFeaturePresent``
for SIMD features, ``os.cpu_count()`` / psutil for cores.

This replaces py-cpuinfo there, which starts processes and took 1.48-1.60 s per call on this
project's machine (``cpuinfo.get_cpu_info()``, 3 calls, py-cpuinfo 9.0) where these reads take
well under a millisecond.

Sources: the model is ``ProcessorNameString`` under
``HKEY_LOCAL_MACHINE\\HARDWARE\\DESCRIPTION\\System\\CentralProcessor\\0``; the feature numbers are
winnt.h's ``PF_*`` constants (learn.microsoft.com/windows/win32/api/processthreadsapi/
nf-processthreadsapi-isprocessorfeaturepresent).  Windows reports AVX, AVX2 and AVX-512F, and
NEON on ARM; other features (FMA, F16C, AMX) are not reported and so not listed.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from fitcheck.machine import CPU, Unknown

REGISTRY_KEY = r"HARDWARE\DESCRIPTION\System\CentralProcessor\0"
# winnt.h PF_* -> the normalised feature name (fitcheck.probe.cpu)
WINDOWS_FEATURES = {
    39: "avx",      # PF_AVX_INSTRUCTIONS_AVAILABLE
    40: "avx2",     # PF_AVX2_INSTRUCTIONS_AVAILABLE
    41: "avx512f",  # PF_AVX512F_INSTRUCTIONS_AVAILABLE
    19: "neon",     # PF_ARM_NEON_INSTRUCTIONS_AVAILABLE
}


def cpu_from_windows(brand: str | None, logical: int | None, physical: int | None,
                     present: Callable[[int], bool], architecture: str) -> CPU:
    """Assemble :class:`CPU` from what Windows reports (pure: ``present`` answers for a PF_* number)."""
    features = frozenset(name for number, name in WINDOWS_FEATURES.items() if _safe(present, number))
    missing = Unknown("os.cpu_count() is None")
    return CPU(
        model=brand.strip() if brand and brand.strip() else Unknown("registry gave no ProcessorNameString"),
        architecture=architecture,
        logical_cores=logical or missing,
        physical_cores=physical or Unknown("not reported (psutil unavailable)"),
        usable_cores=logical or missing,
        features=features,
        features_source="IsProcessorFeaturePresent",
    )


def _safe(present: Callable[[int], bool], number: int) -> bool:
    try:
        return bool(present(number))
    except Exception:  # noqa: BLE001 - an old Windows without the call: the feature is not reported
        return False


def read_windows_cpu(architecture: str) -> CPU:
    """This Windows machine's CPU (never starts a process)."""
    return cpu_from_windows(_registry_brand(), _affinity_count(), _physical_cores(), _feature_present(), architecture)


def _registry_brand() -> str | None:
    try:
        import winreg

        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, REGISTRY_KEY) as key:  # type: ignore[attr-defined]
            value, _ = winreg.QueryValueEx(key, "ProcessorNameString")  # type: ignore[attr-defined]
        return str(value)
    except Exception:  # noqa: BLE001 - not Windows, or the key is missing
        return None


def _feature_present() -> Callable[[int], bool]:
    try:
        import ctypes

        return ctypes.windll.kernel32.IsProcessorFeaturePresent  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001
        return lambda number: False


def _affinity_count() -> int | None:
    return os.cpu_count()


def _physical_cores() -> int | None:
    try:
        import psutil

        return psutil.cpu_count(logical=False)
    except Exception:  # noqa: BLE001 - psutil is a dependency off Linux, but a probe never fails for it
        return None
