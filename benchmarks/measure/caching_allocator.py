"""A replay of PyTorch's CUDA caching allocator: what `max_memory_reserved` would read for a
sequence of tensor allocations and frees.

    python -m benchmarks.measure.caching_allocator TRACE.jsonl [...]

`torch.cuda.max_memory_allocated` counts live tensors; `max_memory_reserved` counts the segments
the allocator took from the driver with cudaMalloc and keeps cached.  The difference is the
allocator's slack: blocks rounded up, freed blocks kept for reuse, and free space that no request
fits (fragmentation).  It depends only on the order and sizes of requests, so replaying a
recorded allocation trace (``benchmarks.measure.alloc_trace``, recorded on the CPU) through the
same rules shows the slack a CUDA run of the same step would have, without a GPU.

The rules are those of c10/cuda/CUDACachingAllocator.cpp with default settings (no
`PYTORCH_CUDA_ALLOC_CONF`, one stream, no memory pressure):

* sizes round up to 512 B (kMinBlockSize); requests of at most 1 MiB (kSmallSize) use the small
  pool, larger ones the large pool;
* a request takes the smallest cached free block of its pool that is large enough (best fit;
  the lowest address among equal sizes);
* none fits: a new segment is allocated, 2 MiB (kSmallBuffer) for a small request, 20 MiB
  (kLargeBuffer) for one under 10 MiB (kMinLargeAlloc), else the size rounded up to 2 MiB;
* a block larger than the request is split, the request taking its start, when what remains is
  at least 512 B (small pool) or more than 1 MiB (large pool);
* a freed block merges with free neighbours of its own segment; segments are never returned to
  the driver, except when cudaMalloc fails: then every cached segment that is wholly free is
  released and the allocation retried once (release_cached_blocks; release_available_cached_blocks
  does nothing without max_split_size_mb), and only if that fails too is it out of memory.

So a run needs less than its unconstrained `max_memory_reserved`: on a GPU with less memory the
allocator gives cached segments back instead of growing.  :func:`needed_bytes` finds the smallest
capacity the trace runs in, which is what must be free for it, with fragmentation that cannot be
given back included.

`expandable_segments:True` (PyTorch >= 2.1) maps one growing segment instead, which removes most
fragmentation; it is not the default and is not modelled here.
"""

from __future__ import annotations

import bisect
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20            # kSmallSize: requests up to this use the small pool
SMALL_BUFFER = 2 << 20          # kSmallBuffer: segment size of the small pool
LARGE_BUFFER = 20 << 20         # kLargeBuffer: segment for large requests under kMinLargeAlloc
MIN_LARGE_ALLOC = 10 << 20      # kMinLargeAlloc
ROUND_LARGE = 2 << 20           # kRoundLarge


def round_size(size: int) -> int:
    """The block size a request of `size` bytes takes."""
    if size < MIN_BLOCK:
        return MIN_BLOCK
    return -(-size // MIN_BLOCK) * MIN_BLOCK


def segment_size(size: int) -> int:
    """How much cudaMalloc asks for when no cached block fits a (rounded) request."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


@dataclass(eq=False)
class Block:
    addr: int
    size: int
    small: bool
    free: bool = True
    prev: "Block | None" = None
    next: "Block | None" = None


class OutOfMemory(RuntimeError):
    pass


@dataclass
class CachingAllocator:
    """Allocate/free by caller-chosen ids; tracks allocated and reserved bytes and their peaks.

    With a `capacity`, growing beyond it first releases the wholly free cached segments, then
    raises OutOfMemory.
    """

    capacity: int | None = None
    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    segments: int = 0
    _next_addr: int = 0
    _pools: dict = field(default_factory=lambda: {True: [], False: []})   # small? -> sorted (size, addr, id)
    _by_key: dict = field(default_factory=dict)   # (size, addr) -> Block, free blocks only
    _live: dict = field(default_factory=dict)     # id -> Block

    # -- pool bookkeeping (a sorted list of (size, addr) stands in for the allocator's std::set) --
    def _insert(self, block: Block) -> None:
        key = (block.size, block.addr)
        bisect.insort(self._pools[block.small], key)
        self._by_key[key] = block

    def _remove(self, block: Block) -> None:
        key = (block.size, block.addr)
        pool = self._pools[block.small]
        del pool[bisect.bisect_left(pool, key)]
        del self._by_key[key]

    def malloc(self, ident, nbytes: int) -> None:
        if ident in self._live:
            raise ValueError(f"allocation id {ident!r} is already live")
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):
            block = self._by_key[pool[i]]
            self._remove(block)
        else:
            seg = segment_size(size)
            if self.capacity is not None and self.reserved + seg > self.capacity:
                self._release_free_segments()
                if self.reserved + seg > self.capacity:
                    raise OutOfMemory(f"{nbytes} B with {self.allocated} B allocated, {self.reserved} B reserved")
            block = Block(self._next_addr, seg, small)
            self._next_addr += seg
            self.reserved += seg
            self.segments += 1
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        remaining = block.size - size
        if remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE:
            rest = Block(block.addr + size, remaining, small, True, block, block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._insert(rest)
        block.free = False
        self._live[ident] = block
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, ident) -> None:
        block = self._live.pop(ident)
        self.allocated -= block.size
        block.free = True
        for neighbour in (block.prev, block.next):
            if neighbour is not None and neighbour.free:
                self._remove(neighbour)
                if neighbour is block.prev:
                    neighbour.size += block.size
                    neighbour.next = block.next
                    if block.next is not None:
                        block.next.prev = neighbour
                    block = neighbour
                else:
                    block.size += neighbour.size
                    block.next = neighbour.next
                    if neighbour.next is not None:
                        neighbour.next.prev = block
        self._insert(block)

    def _release_free_segments(self) -> None:
        for small in (True, False):
            for key in list(self._pools[small]):
                block = self._by_key[key]
                if block.prev is None and block.next is None:
                    self._remove(block)
                    self.reserved -= block.size
                    self.segments -= 1

    def live_ids(self):
        return self._live.keys()


@dataclass(frozen=True)
class Replay:
    peak_allocated: int     # the live-tensor peak of the trace (request sizes rounded to 512 B)
    peak_reserved: int      # the segments the allocator holds at its highest
    segments: int
    step_peaks: tuple[tuple[int, int], ...] = ()  # (allocated, reserved) peak within each marked step


def replay(events, start_live: dict | None = None, capacity: int | None = None) -> Replay:
    """Run a trace: ("a", id, bytes) allocates, ("f", id) frees, ("step",) marks a step boundary.

    Frees of ids never allocated (tensors that existed before the trace began) are ignored.
    With `capacity`, raises OutOfMemory where a GPU of that size would.
    """
    alloc = CachingAllocator(capacity=capacity)
    for ident, nbytes in (start_live or {}).items():
        alloc.malloc(ident, nbytes)
    steps: list[tuple[int, int]] = []
    mark_a, mark_r = alloc.allocated, alloc.reserved
    for ev in events:
        kind = ev[0]
        if kind == "a":
            alloc.malloc(ev[1], ev[2])
            mark_a, mark_r = max(mark_a, alloc.allocated), max(mark_r, alloc.reserved)
        elif kind == "f":
            if ev[1] in alloc.live_ids():
                alloc.free(ev[1])
        elif kind == "step":
            steps.append((mark_a, mark_r))
            mark_a, mark_r = alloc.allocated, alloc.reserved
    steps.append((mark_a, mark_r))
    return Replay(alloc.peak_allocated, alloc.peak_reserved, alloc.segments, tuple(steps))


def needed_bytes(events, start_live: dict | None = None) -> int:
    """The smallest capacity in which the trace runs without OutOfMemory (exact: segments are
    whole multiples of 2 MiB, so only such capacities need trying)."""
    events = list(events)
    unconstrained = replay(events, start_live)

    def runs(k: int) -> bool:
        try:
            replay(events, start_live, capacity=k * ROUND_LARGE)
            return True
        except OutOfMemory:
            return False

    low = unconstrained.peak_allocated // ROUND_LARGE          # too small unless exactly at it
    high = -(-unconstrained.peak_reserved // ROUND_LARGE)      # runs
    if runs(low):
        return low * ROUND_LARGE
    while high - low > 1:                                       # invariant: low fails, high runs
        mid = (low + high) // 2
        if runs(mid):
            high = mid
        else:
            low = mid
    return high * ROUND_LARGE


def read_trace(path: Path):
    """Events of a JSON-lines trace written by benchmarks.measure.alloc_trace."""
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield tuple(json.loads(line))


def main(argv: list[str] | None = None) -> int:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    if not paths:
        print(__doc__.splitlines()[3].strip(), file=sys.stderr)
        return 2
    for path in paths:
        r = replay(read_trace(path))
        slack = r.peak_reserved - r.peak_allocated
        print(f"{path.name}: peak allocated {r.peak_allocated / 2**20:,.0f} MiB, reserved {r.peak_reserved / 2**20:,.0f} MiB "
              f"(+{slack / 2**20:,.0f} MiB, {slack / max(r.peak_allocated, 1):.1%}), {r.segments} segments")
    return 0


if __name__ == "__main__":
    sys.exit(main())
