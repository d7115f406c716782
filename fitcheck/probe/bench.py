"""`fitcheck probe --bench`: measure this machine's RAM bandwidth (about 0.25 s on top of the probe,
measured on a quiet 2-core VM with a 32 MiB L3: 128 MiB buffers; about 0.7 s when it was busy).

A pure-Python loop is far too slow to load memory, so the copy runs in C: ``ctypes.memmove``
between two buffers of 4 × the last-level cache (STREAM's rule for its arrays; at least 64 MiB,
at most 1 GiB; 256 MiB when the cache size cannot be read), split across threads (ctypes releases
the GIL during a foreign call, so the threads copy in parallel).  Most of the time goes to mapping
the buffers' pages, not to the copy: they are mapped with MAP_POPULATE where the OS has it (the
kernel faults them in at once, faster than a fault per page), the source is written once (an
untouched page would read as the shared zero page), one untimed pass warms up; then the best of
several timed passes counts.  Bandwidth follows STREAM's "Copy" convention:
bytes read + bytes written = 2 × size per pass (McCalpin, STREAM benchmark).  A copy also
write-allocates, so read-only bandwidth (what decoding needs) is usually somewhat higher:
the measurement errs low.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from fitcheck.machine import Machine
from fitcheck.units import MiB

DEFAULT_BYTES = 256 * MiB      # when the last-level cache cannot be read
MIN_BYTES = 64 * MiB
MAX_BYTES = 1024 * MiB
CACHE_MULTIPLE = 4             # STREAM: each array at least 4 × the caches
DEFAULT_PASSES = 4
MAX_THREADS = 16


@dataclass(frozen=True)
class BandwidthReading:
    bytes_per_s: int
    size_bytes: int
    threads: int
    passes: int
    best_seconds: float

    @property
    def how(self) -> str:
        return (f"memmove of {self.size_bytes // MiB} MiB on {self.threads} thread"
                f"{'s' if self.threads != 1 else ''}, best of {self.passes}, STREAM copy: read + write")

    @property
    def source(self) -> str:
        return f"measured: {self.how}"


def copy_bandwidth(size_bytes: int, seconds: float) -> int:
    """STREAM Copy: (read + write) bytes / time."""
    return int(2 * size_bytes / seconds)


def default_threads() -> int:
    """Threads to copy with: the CPUs this process may use, at most MAX_THREADS."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_THREADS))


def read_last_level_cache_bytes(root: str = "/") -> int | None:
    """The machine's last-level caches added up (each shared group once), from Linux sysfs; None elsewhere."""
    base = os.path.join(root, "sys/devices/system/cpu")
    try:
        cpus = [d for d in os.listdir(base) if d.startswith("cpu") and d[3:].isdigit()]
    except OSError:
        return None
    groups: dict[tuple[int, str], int] = {}
    for cpu in cpus[:4096]:
        cache = os.path.join(base, cpu, "cache")
        try:
            indexes = [d for d in os.listdir(cache) if d.startswith("index")]
        except OSError:
            continue
        for index in indexes[:16]:
            level, size, shared = (_small_text(os.path.join(cache, index, f)) for f in ("level", "size", "shared_cpu_list"))
            if not (level and level.isdigit() and size):
                continue
            number = size.rstrip("KkMm")
            if not number.isdigit():
                continue
            unit = {"K": 1024, "M": MiB}.get(size[-1].upper(), 1)
            groups[(int(level), shared or cpu)] = int(number) * unit
    if not groups:
        return None
    top = max(level for level, _ in groups)
    return sum(size for (level, _), size in groups.items() if level == top)


def _small_text(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(64).strip()
    except OSError:
        return ""


def buffer_bytes(cache_bytes: int | None) -> int:
    """The size of each buffer: CACHE_MULTIPLE × the caches, within [MIN_BYTES, MAX_BYTES]."""
    if not cache_bytes:
        return DEFAULT_BYTES
    return max(MIN_BYTES, min(MAX_BYTES, CACHE_MULTIPLE * cache_bytes))


def _buffer(size: int):
    """An anonymous mapping of ``size`` bytes, its pages faulted in by the kernel where it can (Linux)."""
    try:
        return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0))
    except (OSError, ValueError, AttributeError):  # no anonymous mmap flags (Windows)
        return bytearray(size)


def measure_bandwidth(size_bytes: int | None = None, passes: int = DEFAULT_PASSES, threads: int | None = None,
                      clock: Callable[[], float] = time.perf_counter) -> BandwidthReading:
    """Copy `size_bytes` (default: buffer_bytes of this machine's caches) between two buffers `passes`
    times on `threads` threads; keep the fastest."""
    threads = threads or default_threads()
    size_bytes = size_bytes or buffer_bytes(read_last_level_cache_bytes())
    src = _buffer(size_bytes)
    dst = _buffer(size_bytes)
    src_addr = ctypes.addressof((ctypes.c_char * size_bytes).from_buffer(src))
    dst_addr = ctypes.addressof((ctypes.c_char * size_bytes).from_buffer(dst))
    ctypes.memset(src_addr, 1, size_bytes)  # real pages, not the zero page
    chunk = -(-size_bytes // threads)
    spans = [(i * chunk, min(chunk, size_bytes - i * chunk)) for i in range(threads) if i * chunk < size_bytes]

    def one_pass() -> float:
        start_gate = threading.Barrier(len(spans) + 1)

        def worker(offset: int, length: int) -> None:
            start_gate.wait()
            ctypes.memmove(dst_addr + offset, src_addr + offset, length)

        workers = [threading.Thread(target=worker, args=span) for span in spans]
        for w in workers:
            w.start()
        start_gate.wait()
        t0 = clock()
        for w in workers:
            w.join()
        return clock() - t0

    one_pass()  # warm up (and fault in any page MAP_POPULATE did not)
    best = min(one_pass() for _ in range(passes))
    return BandwidthReading(copy_bandwidth(size_bytes, best), size_bytes, len(spans), passes, best)


def with_measured_bandwidth(machine: Machine, reading: BandwidthReading) -> Machine:
    """`machine` with its RAM bandwidth replaced by the measurement."""
    memory = replace(machine.memory, bandwidth_bytes_per_s=reading.bytes_per_s, bandwidth_source=reading.source)
    return replace(machine, memory=memory)
