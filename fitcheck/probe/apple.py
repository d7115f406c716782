"""Apple Silicon's GPU: unified memory and how much of it Metal lets the GPU use.

The limit, in order of preference:
1. Metal's ``MTLDevice.recommendedMaxWorkingSetSize`` (it already reflects a raised
   ``iogpu.wired_limit_mb``: AlexsJones/llmfit PR #754 verified this on an M3);
2. the ``iogpu.wired_limit_mb`` sysctl when it is set (non-zero);
3. an estimate of macOS's default: about 2/3 of RAM up to 36 GiB and 3/4 above (16 GB M4 ->
   10.67 GB, exo-explore/exo PR #1672; 75% on large Macs, gpustack/gpustack issue #1375).
   Recent macOS releases allow more on large machines (107.5 GiB of 128 GiB, antirez/ds4 issue
   #890), so the estimate errs low.
"""

from __future__ import annotations

import platform
import sys

from fitcheck.machine import GPU, Unknown
from fitcheck.probe.sysctl import read_sysctl
from fitcheck.units import GiB, MiB

SMALL_MAC_LIMIT_BYTES = 36 * GiB


def estimated_working_set(memsize: int) -> int:
    """macOS's default GPU working-set limit for ``memsize`` bytes of unified memory."""
    return memsize * 2 // 3 if memsize <= SMALL_MAC_LIMIT_BYTES else memsize * 3 // 4


def apple_gpu(memsize: int | None, metal_working_set: int | None, wired_limit_mb: int | None,
              chip_name: str | None, free_bytes: int | None = None) -> GPU:
    """The Apple GPU from what could be read (pure): the best-sourced memory limit wins."""
    notes = ["unified memory: the GPU shares system RAM"]
    if metal_working_set:
        total: int | Unknown = metal_working_set
        notes.append("memory limit: Metal recommendedMaxWorkingSetSize")
    elif wired_limit_mb:
        total = wired_limit_mb * MiB
        notes.append("memory limit: sysctl iogpu.wired_limit_mb")
    elif memsize:
        total = estimated_working_set(memsize)
        notes.append("memory limit estimated (macOS default ~2/3 of RAM up to 36 GiB, ~3/4 above); "
                     "Metal limit not readable")
    else:
        total = Unknown("hw.memsize not readable")
    free: int | Unknown
    if isinstance(total, int) and free_bytes is not None:
        free = min(total, free_bytes)
    else:
        free = Unknown("free unified memory not readable")
    return GPU(index=0, vendor="apple", name=chip_name or "Apple GPU", memory_total_bytes=total,
               memory_free_bytes=free, unified_memory=True, notes=tuple(notes))


def _metal_working_set() -> int | None:
    """MTLCreateSystemDefaultDevice().recommendedMaxWorkingSetSize via the Objective-C runtime."""
    try:
        import ctypes

        metal = ctypes.CDLL("/System/Library/Frameworks/Metal.framework/Metal")
        objc = ctypes.CDLL("/usr/lib/libobjc.A.dylib")
        metal.MTLCreateSystemDefaultDevice.restype = ctypes.c_void_p
        metal.MTLCreateSystemDefaultDevice.argtypes = []
        device = metal.MTLCreateSystemDefaultDevice()
        if not device:
            return None
        objc.sel_registerName.restype = ctypes.c_void_p
        objc.sel_registerName.argtypes = [ctypes.c_char_p]
        selector = objc.sel_registerName(b"recommendedMaxWorkingSetSize")
        # objc_msgSend must be called with the exact signature of the method: (id, SEL) -> uint64
        send_address = ctypes.cast(objc.objc_msgSend, ctypes.c_void_p).value
        if send_address is None:  # CFUNCTYPE(...)(None) raises TypeError: the same None as below
            return None
        send = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p)(send_address)
        value = int(send(device, selector))
        return value or None
    except Exception:
        return None


def read_apple_gpus(available_bytes: int | None) -> tuple[GPU, ...]:
    """The Apple Silicon GPU on Darwin arm64; () anywhere else."""
    if sys.platform != "darwin" or platform.machine() != "arm64":
        return ()

    values = read_sysctl(["hw.memsize", "iogpu.wired_limit_mb", "machdep.cpu.brand_string"])
    memsize = values.get("hw.memsize")
    wired = values.get("iogpu.wired_limit_mb")
    chip = values.get("machdep.cpu.brand_string")
    return (apple_gpu(memsize if isinstance(memsize, int) else None, _metal_working_set(),
                      wired if isinstance(wired, int) else None,
                      f"{chip} GPU" if isinstance(chip, str) and chip else None, available_bytes),)
