"""`fitcheck probe --bench`: measure this machine's RAM bandwidth in well under a second.

A pure-Python loop is far too slow to load memory, so the copy runs in C: ``ctypes.memmove``
over a 256 MiB buffer (bigger than any CPU cache), split across threads (ctypes releases the GIL
during a foreign call, so the threads copy in parallel).  One untimed pass faults the pages in;
then the best of several timed passes counts.  Bandwidth follows STREAM's "Copy" convention:
bytes read + bytes written = 2 × size per pass (McCalpin, STREAM benchmark).  A copy also
write-allocates, so read-only bandwidth (what decoding needs) is usually somewhat higher:
the measurement errs low.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from fitcheck.machine import Machine
from fitcheck.units import MiB

DEFAULT_BYTES = 256 * MiB
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
    def source(self) -> str:
        return (f"measured: memmove of {self.size_bytes // MiB} MiB on {self.threads} thread"
                f"{'s' if self.threads != 1 else ''}, best of {self.passes} (STREAM copy, read + write)")


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


def measure_bandwidth(size_bytes: int = DEFAULT_BYTES, passes: int = DEFAULT_PASSES, threads: int | None = None,
                      clock: Callable[[], float] = time.perf_counter) -> BandwidthReading:
    """Copy `size_bytes` between two buffers `passes` times on `threads` threads; keep the fastest."""
    threads = threads or default_threads()
    src = bytearray(size_bytes)
    dst = bytearray(size_bytes)
    src_addr = ctypes.addressof((ctypes.c_char * size_bytes).from_buffer(src))
    dst_addr = ctypes.addressof((ctypes.c_char * size_bytes).from_buffer(dst))
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

    one_pass()  # fault the pages in (bytearray memory is mapped lazily)
    best = min(one_pass() for _ in range(passes))
    return BandwidthReading(copy_bandwidth(size_bytes, best), size_bytes, len(spans), passes, best)


def with_measured_bandwidth(machine: Machine, reading: BandwidthReading) -> Machine:
    """`machine` with its RAM bandwidth replaced by the measurement."""
    memory = replace(machine.memory, bandwidth_bytes_per_s=reading.bytes_per_s, bandwidth_source=reading.source)
    return replace(machine, memory=memory)
