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

The buffers are mapped CHUNK_BYTES at a time, so a measurement with a time budget checks the clock between
chunks and passes.  A check on this machine without a reading (neither probed nor kept) measures it once itself
(:func:`with_bandwidth_measured_now`, called where the machine is loaded, fitcheck.profiles.overrides.load_machine):
at most AUTO_MAX_BYTES per buffer, the buffers mapped within 3/4 of AUTO_BUDGET_S (else no reading), then passes
while the budget lasts; it keeps the reading as ``probe --bench`` does.  Mapping pages is where a busy or
memory-ballooned VM loses time (16 MiB took 6 ms here when quiet, 70 ms when not), so the budget bounds that part.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from fitcheck.machine import Machine, Unknown, known
from fitcheck.units import MiB

DEFAULT_BYTES = 256 * MiB      # when the last-level cache cannot be read
MIN_BYTES = 64 * MiB
MAX_BYTES = 1024 * MiB
CACHE_MULTIPLE = 4             # STREAM: each array at least 4 × the caches
DEFAULT_PASSES = 4
MAX_THREADS = 16
CHUNK_BYTES = 16 * MiB         # the buffers are mapped this much at a time (a budget is checked in between)
# The measurement a check runs by itself: bounded so that it never costs the answer more than about half a second.
AUTO_BUDGET_S = 0.4
AUTO_SETUP_SHARE = 0.75        # the buffers must be mapped within this share of the budget, else no reading
AUTO_MAX_BYTES = 256 * MiB
AUTO_MIN_FREE_MULTIPLE = 8     # measure only with 8 × the buffer size of RAM available (the two buffers and room)
MEASURED_NOW = "measured now by fitcheck"


class OutOfTime(Exception):
    """The measurement could not finish within its budget (no reading)."""


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


def _chunked_buffers(size_bytes: int, setup_by: float | None, clock: Callable[[], float]) -> tuple[list, list]:
    """(the mappings, [(offset, dst address, src address, length)]): source and destination mapped CHUNK_BYTES at a
    time, the source written (real pages, not the zero page); OutOfTime once ``setup_by`` has passed."""
    keep: list = []
    chunks: list[tuple[int, int, int, int]] = []
    for offset in range(0, size_bytes, CHUNK_BYTES):
        length = min(CHUNK_BYTES, size_bytes - offset)
        src, dst = _buffer(length), _buffer(length)
        src_view, dst_view = (ctypes.c_char * length).from_buffer(src), (ctypes.c_char * length).from_buffer(dst)
        keep += [src, dst, src_view, dst_view]
        ctypes.memset(ctypes.addressof(src_view), 1, length)
        chunks.append((offset, ctypes.addressof(dst_view), ctypes.addressof(src_view), length))
        if setup_by is not None and clock() > setup_by:
            raise OutOfTime(f"mapping {size_bytes // MiB} MiB took longer than its budget")
    return keep, chunks


def _pieces(chunks: list[tuple[int, int, int, int]], start: int, length: int) -> list[tuple[int, int, int]]:
    """The (dst, src, length) copies of bytes [start, start + length) of the buffers, chunk by chunk."""
    end = start + length
    out = []
    for offset, dst, src, size in chunks:
        lo, hi = max(start, offset), min(end, offset + size)
        if lo < hi:
            out.append((dst + lo - offset, src + lo - offset, hi - lo))
    return out


def measure_bandwidth(size_bytes: int | None = None, passes: int = DEFAULT_PASSES, threads: int | None = None,
                      clock: Callable[[], float] = time.perf_counter,
                      budget_s: float | None = None) -> BandwidthReading:
    """Copy `size_bytes` (default: buffer_bytes of this machine's caches) between two buffers `passes`
    times on `threads` threads; keep the fastest.

    With ``budget_s``: OutOfTime unless the buffers are mapped within AUTO_SETUP_SHARE of it; then the timed passes
    that fit in what is left (the warm-up pass is the reading when none does: it errs low)."""
    threads = threads or default_threads()
    size_bytes = size_bytes or buffer_bytes(read_last_level_cache_bytes())
    start = clock() if budget_s is not None else 0.0
    setup_by = start + budget_s * AUTO_SETUP_SHARE if budget_s is not None else None
    keep, chunks = _chunked_buffers(size_bytes, setup_by, clock)
    span = -(-size_bytes // threads)
    work = [_pieces(chunks, i * span, min(span, size_bytes - i * span)) for i in range(threads) if i * span < size_bytes]

    def one_pass() -> float:
        start_gate = threading.Barrier(len(work) + 1)

        def worker(pieces: list[tuple[int, int, int]]) -> None:
            start_gate.wait()
            for dst, src, length in pieces:
                ctypes.memmove(dst, src, length)

        workers = [threading.Thread(target=worker, args=(pieces,)) for pieces in work]
        for w in workers:
            w.start()
        start_gate.wait()
        t0 = clock()
        for w in workers:
            w.join()
        return clock() - t0

    warm = one_pass()  # warm up (and fault in any page MAP_POPULATE did not)
    times: list[float] = []
    for _ in range(passes):
        if budget_s is not None and clock() + warm > start + budget_s:
            break
        times.append(one_pass())
    times = times or [warm]
    best = min(times)
    del keep
    return BandwidthReading(copy_bandwidth(size_bytes, best), size_bytes, len(work), len(times), best)


def measure_quickly(budget_s: float = AUTO_BUDGET_S) -> BandwidthReading | None:
    """The bounded measurement a check runs by itself (buffers of at most AUTO_MAX_BYTES, ``budget_s`` of
    mapping and copying); None when the machine was too slow to map them in time."""
    size = min(buffer_bytes(read_last_level_cache_bytes()), AUTO_MAX_BYTES)
    try:
        return measure_bandwidth(size, budget_s=budget_s)
    except OutOfTime:
        return None


def with_bandwidth_measured_now(machine: Machine, env: Mapping[str, str] | None = None) -> Machine:
    """``machine`` (this one, probed, before any --gpu/--vram/--ram what-if) with its RAM bandwidth measured now
    (:func:`measure_quickly`) where neither the probe nor the cache had one, and the reading kept for later
    answers as ``probe --bench`` keeps it.  Its source says so: "measured now by fitcheck (cached for next time;
    --no-bench skips): memmove of ...".  Too little RAM available to map the buffers, or out of time: the
    bandwidth stays unknown, with the reason."""
    memory = machine.memory
    if known(memory.bandwidth_bytes_per_s):
        return machine
    size = min(buffer_bytes(read_last_level_cache_bytes()), AUTO_MAX_BYTES)
    available = memory.available_bytes
    if isinstance(available, int) and known(available) and available < AUTO_MIN_FREE_MULTIPLE * size:
        return replace(machine, memory=replace(memory, bandwidth_bytes_per_s=Unknown(
            f"not measured: {available // MiB} MiB of RAM available is too little to measure it")))
    reading = measure_quickly()
    if reading is None:
        return replace(machine, memory=replace(memory, bandwidth_bytes_per_s=Unknown(
            f"not measured: the machine was too busy to measure it within {AUTO_BUDGET_S:g} s")))
    from fitcheck.errors import FitcheckError
    from fitcheck.probe import bandwidth_cache

    try:
        bandwidth_cache.store(machine, reading.bytes_per_s, reading.how, env=env, by="fitcheck")
        kept = "cached for next time"
    except FitcheckError:  # an unwritable cache loses the reading for later, not for this answer
        kept = "not cached, the cache folder cannot be written"  # no ": " (the speed line cuts there)
    source = f"{MEASURED_NOW} ({kept}; --no-bench skips): {reading.how}"
    return replace(machine, memory=replace(memory, bandwidth_bytes_per_s=reading.bytes_per_s, bandwidth_source=source))


def with_measured_bandwidth(machine: Machine, reading: BandwidthReading) -> Machine:
    """`machine` with its RAM bandwidth replaced by the measurement."""
    memory = replace(machine.memory, bandwidth_bytes_per_s=reading.bytes_per_s, bandwidth_source=reading.source)
    return replace(machine, memory=memory)
