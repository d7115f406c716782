"""A replay of PyTorch's CUDA caching allocator: what `max_memory_reserved` would read for a
sequence of tensor allocations and frees.

    python -m benchmarks.measure.caching_allocator TRACE.jsonl [...]

`torch.cuda.max_memory_allocated` counts live tensors; `max_memory_reserved` counts the segments
the allocator took from the driver with cudaMalloc and keeps cached.  The difference is the
allocator's slack: blocks rounded up, freed blocks kept for reuse, and free space that no request
fits (fragmentation).  It depends only on the order and sizes of requests, so replaying a
recorded allocation trace (``benchmarks.measure.alloc_trace``, recorded on the CPU) through the
same rules shows the slack a CUDA run of the same step would have, without a GPU.

The rules are fitcheck.estimate.allocator's (c10/cuda/CUDACachingAllocator.cpp with default
settings), which the estimator uses for the segments a model's weights load into.

A run needs less than its unconstrained `max_memory_reserved`: when cudaMalloc fails, the
allocator gives wholly free cached segments back instead of growing.  :func:`needed_bytes` finds the smallest
capacity the trace runs in, which is what must be free for it, with fragmentation that cannot be
given back included.

`expandable_segments:True` (PyTorch >= 2.1) maps one growing segment instead, which removes most
fragmentation; it is not the default and is not modelled here.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from fitcheck.estimate.allocator import (  # noqa: F401 (re-exported)
    ROUND_LARGE,
    CachingAllocator,
    OutOfMemory,
    round_size,
    segment_size,
    smallest_capacity,
)


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
    return smallest_capacity(lambda cap: replay(events, start_live, capacity=cap),
                             unconstrained.peak_allocated, unconstrained.peak_reserved)


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
        print(f"{path.name}: peak allocated {r.peak_allocated / 2**20:,.0f} MiB, "
              f"reserved {r.peak_reserved / 2**20:,.0f} MiB "
              f"(+{slack / 2**20:,.0f} MiB, {slack / max(r.peak_allocated, 1):.1%}), {r.segments} segments")
    return 0


if __name__ == "__main__":
    sys.exit(main())
