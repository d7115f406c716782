"""Memory meters: the readings one phase of a case leaves behind.

Two meters share one interface (``begin`` / ``end`` around a phase, ``baseline`` once):

* :class:`RssMeter` (CPU): resident set size of this process from ``/proc/self/statm``, minus
  the baseline taken after imports and before the model is built.  The phase peak is the larger
  of two readings: a sampling thread reading ``statm`` every ``interval_s`` (1 ms), and the
  kernel's own high-water mark ``VmHWM`` from ``/proc/self/status``, which we reset to the
  current RSS at the start of each phase by writing ``5`` to ``/proc/self/clear_refs``
  (Documentation/filesystems/proc.rst, "clear_refs": "5 - reset the peak resident set size").
  ``ru_maxrss`` from ``getrusage`` is recorded as a cross-check; it equals VmHWM after a reset
  and otherwise holds the lifetime peak, import peak included.
* :class:`CudaMeter` (CUDA): ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``,
  reset before each phase with ``torch.cuda.reset_peak_memory_stats``
  (https://pytorch.org/docs/stable/torch_cuda_memory.html), and the device-wide used memory
  from ``torch.cuda.mem_get_info`` (what nvidia-smi shows, CUDA context included).  With NVML
  (``used_bytes``, e.g. :func:`nvml_used_reader`) a thread also samples the device's used memory
  during each phase; its peak minus the reading taken before CUDA was initialised is
  ``device_used_peak_bytes``: the process's share as nvidia-smi sees it, context included.
* :class:`MpsMeter` (Apple): ``torch.mps.driver_allocated_memory`` (Metal's view, allocator
  caches included) and ``torch.mps.current_allocated_memory``, sampled during each phase.

Every meter takes its ``torch`` module as an argument when one is given, so the CUDA and MPS
paths are tested with fakes on machines that have neither.

At each phase start the meter runs ``gc.collect()`` and glibc ``malloc_trim(0)`` so memory a
previous phase freed but the allocator kept is handed back before the phase is measured; the
steady reading at the end of a phase is taken after ``gc.collect()`` but *before* any trim, so
it shows what a real process would hold.  All byte counts are integers.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import resource
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PhaseReading:
    """What one phase left behind, in bytes relative to the case's baseline."""

    phase: str
    start_bytes: int              # before the phase, after gc + malloc_trim
    peak_bytes: int               # highest reading during the phase (best of the methods)
    steady_bytes: int             # after the phase (gc, no trim), its products still alive
    wall_s: float
    # CPU detail (None on CUDA)
    peak_sampled_bytes: int | None = None   # sampling thread, /proc/self/statm
    peak_hwm_bytes: int | None = None       # kernel VmHWM after a clear_refs reset
    ru_maxrss_bytes: int | None = None      # getrusage ru_maxrss, absolute (not baseline-relative)
    # CUDA detail (None on CPU)
    peak_reserved_bytes: int | None = None  # max_memory_reserved during the phase
    steady_reserved_bytes: int | None = None
    device_used_bytes: int | None = None    # total - free on the device after the phase (absolute)
    device_used_peak_bytes: int | None = None  # NVML: peak used during the phase minus before CUDA init
    counted: dict[str, int] = field(default_factory=dict)  # tensor bytes counted by the case

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _read_status_kib(key: str) -> int | None:
    """A ``kB`` field of /proc/self/status (VmHWM, VmRSS), in bytes."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_hwm() -> bool:
    """Reset the kernel's peak-RSS mark to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


def _malloc_trim() -> None:
    """Return freed heap memory to the OS (glibc only; a no-op elsewhere)."""
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim(ctypes.c_size_t(0))
    except (OSError, AttributeError):
        pass


class _SamplingMeter:
    """A meter whose ``_note`` a daemon thread calls every ``interval_s`` between ``start`` and ``stop``."""

    sampler_name = "sampler"

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._running = False
        self._thread: threading.Thread | None = None
        self._peak = 0
        self._lock = threading.Lock()
        self.baseline_bytes = 0
        self._phase = ""
        self._t0 = 0.0
        self._start = 0

    def _note(self) -> None:
        raise NotImplementedError

    def _reading(self, peak: int, steady: int, wall: float, **detail: Any) -> PhaseReading:
        """The reading of the phase now ending: start, peak and steady relative to the baseline."""
        base = self.baseline_bytes
        return PhaseReading(phase=self._phase, start_bytes=self._start - base, peak_bytes=peak - base,
                            steady_bytes=steady - base, wall_s=round(wall, 3), **detail)

    def _raise_peak(self, now: int) -> None:
        if now > self._peak:
            with self._lock:
                if now > self._peak:
                    self._peak = now

    def _sample(self) -> None:
        while self._running:
            self._note()
            time.sleep(self._interval_s)

    def start(self) -> None:
        self._start_sampling()

    def _start_sampling(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._sample, name=self.sampler_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._running = False
        if self._thread is not None:
            self._thread.join()


class RssMeter(_SamplingMeter):
    """Peak and steady resident memory of this process, relative to a baseline."""

    device = "cpu"
    sampler_name = "rss-sampler"

    def __init__(self, interval_s: float = 0.001):
        super().__init__(interval_s)
        self._page_bytes = os.sysconf("SC_PAGE_SIZE")
        self._statm = os.open("/proc/self/statm", os.O_RDONLY)
        self.hwm_resettable = False

    def rss(self) -> int:
        """Resident bytes now (second field of /proc/self/statm, in pages)."""
        fields = os.pread(self._statm, 128, 0).split()
        return int(fields[1]) * self._page_bytes

    def _note(self) -> None:
        self._raise_peak(self.rss())

    def _settle(self) -> int:
        gc.collect()
        _malloc_trim()
        return self.rss()

    def take_baseline(self) -> int:
        """Absolute RSS after imports, before anything is built; later readings subtract it."""
        self.baseline_bytes = self._settle()
        return self.baseline_bytes

    def begin(self, phase: str) -> None:
        self._phase = phase
        self._start = self._settle()
        self.hwm_resettable = _reset_hwm()
        with self._lock:
            self._peak = self.rss()
        self._t0 = time.perf_counter()

    def end(self) -> PhaseReading:
        wall = time.perf_counter() - self._t0
        sampled = max(self._peak, self.rss())
        hwm = _read_status_kib("VmHWM") if self.hwm_resettable else None
        ru_maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        gc.collect()
        steady = self.rss()
        base = self.baseline_bytes
        return self._reading(max(sampled, hwm or 0), steady, wall, peak_sampled_bytes=sampled - base,
                             peak_hwm_bytes=(hwm - base) if hwm is not None else None, ru_maxrss_bytes=ru_maxrss)


class CudaMeter(_SamplingMeter):
    """Allocated and reserved CUDA memory of this process (PyTorch caching allocator)."""

    device = "cuda"
    sampler_name = "nvml-sampler"

    def __init__(self, torch_module=None, used_bytes=None, interval_s: float = 0.005):
        if torch_module is None:
            import torch as torch_module  # only the CUDA meter needs torch at construction

        super().__init__(interval_s)
        self._torch = torch_module
        self._used_bytes = used_bytes      # device-wide used bytes (NVML), or None
        self.baseline_reserved_bytes = 0
        self.context_bytes: int | None = None
        self.used_before_bytes: int | None = None  # device used before this process's CUDA context
        self._used_peak = 0

    def _note(self) -> None:
        if self._used_bytes is None:
            return
        try:
            now = self._used_bytes()
        except Exception:  # noqa: BLE001 - a failed NVML read must not end the measurement
            return
        if now is not None and now > self._used_peak:
            self._used_peak = now

    def start(self) -> None:
        torch = self._torch
        if self._used_bytes is not None:
            try:
                self.used_before_bytes = self._used_bytes()
            except Exception:  # noqa: BLE001
                self.used_before_bytes = None
        torch.cuda.init()
        torch.empty(1, device="cuda")  # create the context and the allocator's first block
        torch.cuda.synchronize()
        if self._used_bytes is not None and self.used_before_bytes is not None:
            self._start_sampling()

    def _device_used(self) -> int:
        free, total = self._torch.cuda.mem_get_info()
        return total - free

    def take_baseline(self) -> int:
        torch = self._torch
        gc.collect()
        torch.cuda.synchronize()
        self.baseline_bytes = torch.cuda.memory_allocated()
        self.baseline_reserved_bytes = torch.cuda.memory_reserved()
        # Device memory in use with (almost) nothing allocated: CUDA context, libraries and any
        # other process on the device.  nvidia-smi-like, not counted by the torch counters.
        self.context_bytes = self._device_used() - torch.cuda.memory_reserved()
        if self.used_before_bytes is not None:
            # What this process added before the model: the context itself (other processes excluded).
            self.context_bytes = max(0, self._device_used() - self.used_before_bytes - torch.cuda.memory_reserved())
        return self.baseline_bytes

    def begin(self, phase: str) -> None:
        torch = self._torch
        self._phase = phase
        gc.collect()
        torch.cuda.synchronize()
        self._start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        self._used_peak = 0
        self._note()
        self._t0 = time.perf_counter()

    def end(self) -> PhaseReading:
        torch = self._torch
        torch.cuda.synchronize()
        wall = time.perf_counter() - self._t0
        peak = torch.cuda.max_memory_allocated()
        peak_reserved = torch.cuda.max_memory_reserved()
        self._note()
        gc.collect()
        steady = torch.cuda.memory_allocated()
        used_now = self._device_used()
        used_peak = None
        if self.used_before_bytes is not None:
            used_peak = max(self._used_peak, used_now) - self.used_before_bytes
        return self._reading(peak, steady, wall, peak_reserved_bytes=peak_reserved,
                             steady_reserved_bytes=torch.cuda.memory_reserved(), device_used_bytes=used_now,
                             device_used_peak_bytes=used_peak)


def nvml_used_reader(index: int = 0):
    """A function returning device ``index``'s used bytes from NVML, or None without NVML.

    ``index`` is the NVML index; with ``CUDA_VISIBLE_DEVICES`` set the caller maps it first.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - no NVML: fall back to torch's mem_get_info readings
        return None

    def used() -> int:
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)

    return used


class MpsMeter(_SamplingMeter):
    """Apple GPU memory of this process: Metal's driver-allocated bytes (torch.mps)."""

    device = "mps"
    sampler_name = "mps-sampler"

    def __init__(self, torch_module=None, interval_s: float = 0.005):
        if torch_module is None:
            import torch as torch_module

        super().__init__(interval_s)
        self._torch = torch_module
        self.context_bytes: int | None = None

    def _driver(self) -> int:
        return int(self._torch.mps.driver_allocated_memory())

    def _note(self) -> None:
        self._raise_peak(self._driver())

    def take_baseline(self) -> int:
        gc.collect()
        self._torch.mps.synchronize()
        self._torch.mps.empty_cache()
        self.baseline_bytes = self._driver()
        return self.baseline_bytes

    def begin(self, phase: str) -> None:
        self._phase = phase
        gc.collect()
        self._torch.mps.synchronize()
        self._start = self._driver()
        self._peak = self._start
        self._t0 = time.perf_counter()

    def end(self) -> PhaseReading:
        self._torch.mps.synchronize()
        wall = time.perf_counter() - self._t0
        self._note()
        gc.collect()
        steady = self._driver()
        return self._reading(self._peak, steady, wall,
                             device_used_bytes=int(self._torch.mps.current_allocated_memory()))


def make_meter(device: str):
    if device == "cpu":
        return RssMeter()
    if device == "cuda":
        return CudaMeter()
    if device == "mps":
        return MpsMeter()
    raise ValueError(f"unknown device {device!r} (cpu, cuda or mps)")
