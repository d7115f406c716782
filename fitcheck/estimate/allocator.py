"""PyTorch's CUDA caching allocator, as rules (pure: no torch, no I/O).

`torch.cuda.max_memory_allocated` counts live tensors; what a process takes from the GPU is the
segments the caching allocator obtained with cudaMalloc.  The difference depends only on the
order and sizes of requests, so the rules of c10/cuda/CUDACachingAllocator.cpp (default
settings: no PYTORCH_CUDA_ALLOC_CONF, one stream) are enough to compute it:

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

The estimator uses it for the segments a model's weights occupy when they load tensor by tensor
(:func:`load_waste`); benchmarks/measure/caching_allocator.py replays whole recorded runs with it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

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
    prev: Block | None = None
    next: Block | None = None


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
    _pools: dict = field(default_factory=lambda: {True: [], False: []})   # small? -> sorted (size, addr) of free blocks
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

    def segment_map(self) -> list[list[tuple[object, int]]]:
        """Every segment, in address order, as its blocks in order: (the live allocation's id, or None for a
        free block; bytes).  A segment with a live block cannot be given back; its free blocks are stranded
        for any request larger than each of them."""
        ids = {id(b): k for k, b in self._live.items()}
        heads = [b for b in (*self._by_key.values(), *self._live.values()) if b.prev is None]
        out = []
        for head in sorted(heads, key=lambda b: b.addr):
            seg, b = [], head
            while b is not None:
                seg.append((None if b.free else ids[id(b)], b.size))
                b = b.next
            out.append(seg)
        return out


def load_waste_runs(runs: Sequence[tuple[Sequence[int], int]]) -> int:
    """:func:`load_waste` of ``runs`` (each a list of sizes and how many times it repeats, in order, e.g.
    one decoder layer's tensors × layers) without replaying every repeat.

    Nothing is freed while weights load, so what the allocator does next depends only on its free
    blocks' sizes (best fit takes the smallest block large enough; which of equal blocks it takes
    changes no size, and with no frees nothing merges), and only on those some later request could
    still take (best fit never picks a block smaller than the request).  So each pool is a sorted
    list of free block sizes, as in :func:`load_waste`.  When that state recurs at a layer boundary,
    the layers since then form a cycle whose waste repeats exactly; the remaining whole cycles are
    added, not replayed.  Cost then follows the number of distinct layer shapes and the cycle's
    length, not the layer count.
    """
    small_pool: list[int] = []     # free block sizes, sorted, of the small and the large pool
    large_pool: list[int] = []
    reserved = requested = skipped = 0
    # the smallest rounded request of each pool from run k on: free blocks below it are dead
    floors: list[dict[bool, int]] = []
    floor = {True: 1 << 62, False: 1 << 62}
    for sizes, _ in reversed(runs):
        for size in sizes:
            r = round_size(size)
            small = r <= SMALL_SIZE
            floor = {**floor, small: min(floor[small], r)}
        floors.append(floor)
    floors.reverse()
    for k, (sizes, count) in enumerate(runs):
        small_floor, large_floor = floors[k][True], floors[k][False]
        del small_pool[:bisect.bisect_left(small_pool, small_floor)]   # dead from this run on
        del large_pool[:bisect.bisect_left(large_pool, large_floor)]
        # the layer's requests as runs of equal rounded sizes (a MoE layer's experts): (size, small, segment, n)
        rounded: list[tuple[int, bool, int, int]] = []
        for r in map(round_size, sizes):
            if rounded and rounded[-1][0] == r:
                rounded[-1] = (*rounded[-1][:3], rounded[-1][3] + 1)
            else:
                rounded.append((r, r <= SMALL_SIZE, segment_size(r), 1))
        layer_bytes = sum(sizes)
        seen: dict[tuple, tuple[int, int]] = {}
        done = 0
        while done < count:
            state = (tuple(small_pool), tuple(large_pool))
            waste = reserved - requested
            if state in seen:
                then_done, then_waste = seen[state]
                cycles = (count - done) // (done - then_done)
                skipped += cycles * (waste - then_waste)
                done += cycles * (done - then_done)
                seen = {}
                if done >= count:
                    break
            seen[state] = (done, waste)
            for size, small, segment, n in rounded:
                reserved += _allocate(small_pool if small else large_pool, size, small, segment, n,
                                      small_floor if small else large_floor)
            requested += layer_bytes
            done += 1
    return reserved - requested + skipped


def _allocate(pool: list[int], size: int, small: bool, segment: int, n: int, floor: int) -> int:
    """``n`` requests of ``size`` bytes (rounded) from ``pool`` (the sorted free block sizes of its pool, those
    below ``floor`` dropped: no later request takes them), as the allocator serves them; the bytes of the new
    segments.  Within the run the blocks at least as large as ``size`` repeat after a few requests: whole
    periods are then added at once (:func:`load_waste` runs each of its runs through it), each the same new segments and the same smaller
    remainders, inert for this run."""
    reserved = 0
    seen: dict[tuple[int, ...], tuple[int, int, int]] = {}
    inert: list[int] = []     # remainders smaller than `size` kept during this run
    k = 0
    while k < n:
        if n - k > 1:
            state = tuple(pool[bisect.bisect_left(pool, size):])
            if state in seen:
                k0, reserved0, inert0 = seen[state]
                cycles = (n - k) // (k - k0)
                reserved += cycles * (reserved - reserved0)
                pool.extend(inert[inert0:] * cycles)
                pool.sort()
                k += cycles * (k - k0)
                seen.clear()
                if k >= n:
                    break
            else:
                seen[state] = (k, reserved, len(inert))
        at = bisect.bisect_left(pool, size)
        if at < len(pool):
            block = pool.pop(at)
        else:
            block = segment
            reserved += segment
        remaining = block - size
        # a remainder below every later request of its pool is dead: never taken, never in the state
        if (remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE) and remaining >= floor:
            bisect.insort(pool, remaining)
            if remaining < size:
                inert.append(remaining)
        k += 1
    return reserved


def load_waste(sizes: Iterable[int]) -> int:
    """Bytes the segments of tensors allocated in this order (and kept) hold beyond the tensors:
    a tensor of 10 MiB or more gets its own segment rounded up to 2 MiB; smaller ones share 20 MiB
    (or 2 MiB) segments, and what is left at a segment's end when the next tensor does not fit
    stays unused.

    The same rules as :class:`CachingAllocator` (tests compare the two), computed faster: with no
    frees only the multiset of free block sizes per pool matters (best fit takes the smallest
    block large enough; which of equal blocks it takes changes no size), and within a run of
    equal requests (a MoE layer's experts) the free blocks at least as large as the request
    repeat after a few allocations, so whole periods are added at once: each adds the same
    reserved bytes and the same smaller (for this run inert) remainders.
    """
    pools: dict[bool, list[int]] = {True: [], False: []}
    reserved = requested = 0
    items = list(sizes)
    i, n = 0, len(items)
    while i < n:
        raw = items[i]
        j = i
        while j < n and items[j] == raw:
            j += 1
        run, size = j - i, round_size(raw)
        small = size <= SMALL_SIZE
        reserved += _allocate(pools[small], size, small, segment_size(size), run, 0)
        requested += run * raw
        i = j
    return reserved - requested


def load_waste_replayed(sizes: Iterable[int]) -> int:
    """:func:`load_waste` by replaying every request through :class:`CachingAllocator` (slow;
    the reference the tests hold :func:`load_waste` to)."""
    alloc = CachingAllocator()
    requested = 0
    for i, size in enumerate(sizes):
        alloc.malloc(i, size)
        requested += size
    return alloc.reserved - requested


def smallest_capacity(runs_in, peak_allocated: int, peak_reserved: int) -> int:
    """The smallest capacity (a multiple of 2 MiB: segments are) in which `runs_in(capacity)` does not
    raise OutOfMemory, searched between the replay's live peak (too small unless exactly at it) and
    its peak reserve on a GPU with room (runs: nothing was given back)."""

    def runs(k: int) -> bool:
        try:
            runs_in(k * ROUND_LARGE)
        except OutOfMemory:
            return False
        return True

    low, high = peak_allocated // ROUND_LARGE, -(-peak_reserved // ROUND_LARGE)
    if runs(low):
        return low * ROUND_LARGE
    while high - low > 1:  # invariant: low fails, high runs
        mid = (low + high) // 2
        if runs(mid):
            high = mid
        else:
            low = mid
    return high * ROUND_LARGE
