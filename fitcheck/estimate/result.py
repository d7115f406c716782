"""What an estimate is: named components in bytes, per device, and the assumptions behind them.

Plain frozen dataclasses; the verdict and every renderer (table, JSON, interactive) read these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

# Component names (a stable vocabulary: the JSON document uses them as keys).
WEIGHTS = "weights"
KV_CACHE = "kv_cache"
ACTIVATIONS = "activations"
OVERHEAD = "overhead"
GRADIENTS = "gradients"
OPTIMIZER = "optimizer_states"
MASTER_WEIGHTS = "master_weights"
ADAPTERS = "adapters"
LOGITS = "logits"


@dataclass(frozen=True)
class Component:
    name: str          # one of the names above; a breakdown may split one (e.g. 'activations')
    bytes: int
    detail: str = ""   # how it was computed, in words and numbers
    counted_in: str = "allocated"  # 'allocated' (tensors), 'reserved' (allocator slack), 'runtime'


@dataclass(frozen=True)
class DeviceNeed:
    """What one device (a GPU, or the CPU's RAM) must hold."""

    device: str        # 'gpu0', 'gpu1', ..., 'cpu'
    kind: str          # 'gpu' or 'cpu'
    components: tuple[Component, ...]

    def component(self, name: str) -> int:
        return sum(c.bytes for c in self.components if c.name == name)

    @property
    def peak_allocated_bytes(self) -> int:
        """What torch.cuda.max_memory_allocated would report: tensors only."""
        return sum(c.bytes for c in self.components if c.counted_in == "allocated")

    @property
    def peak_reserved_bytes(self) -> int:
        """Allocated plus the caching allocator's slack."""
        return sum(c.bytes for c in self.components if c.counted_in in ("allocated", "reserved"))

    @property
    def total_bytes(self) -> int:
        """What must be free on the device: reserved plus the runtime (CUDA context, libraries)."""
        return sum(c.bytes for c in self.components)


@dataclass(frozen=True)
class Assumption:
    """One input to the estimate the user can see and change."""

    name: str          # 'precision', 'context', 'engine', ...
    value: str
    why: str           # where the value came from ('default', 'from --context', ...)
    option: str = ""   # the flag that changes it


@dataclass(frozen=True)
class Pool:
    """A serving engine's up-front reservation on each GPU and the KV pool inside it: what the verdict holds the
    request to, and how many sequences the pool takes (requests beyond them queue)."""

    title: str                  # the engine, in words
    share: str                  # what the reservation is called ('reservation', 'mem_fraction_static share')
    flag: str                   # the flag that resizes it
    holds_activations: bool     # everything lives inside (vLLM), or the weights and KV cache only (SGLang)
    reserved_bytes: int         # per GPU
    kv_pool_bytes: int
    kv_pool_tokens: int         # over every data-parallel rank
    max_concurrency: float      # sequences of the request's context the pool holds at once
    ranks: int = 0              # data-parallel ranks, each with a pool of its own (0: none)
    outside_bytes: int = 0      # what the engine keeps beyond its reservation (CUDA context and graphs)


class Memory(NamedTuple):
    """What an engine's memory model returns (fitcheck.engines.estimate_inference)."""

    devices: list[DeviceNeed]
    facts: list[tuple[str, float | int | str]]
    notes: list[str]
    pool: Pool | None = None


@dataclass(frozen=True)
class Estimate:
    """An estimate for one model, request and placement: per-device needs plus assumptions."""

    model_name: str
    mode: str
    devices: tuple[DeviceNeed, ...]
    assumptions: tuple[Assumption, ...] = ()
    notes: tuple[str, ...] = ()
    facts: tuple[tuple[str, float | int | str], ...] = field(default=())  # the JSON document's, e.g. gpu_layers
    pool: Pool | None = None
    nodes: int = 1              # machines whose RAM each holds the cpu device's share (training over nodes)

    def fact(self, name: str, default=None):
        return dict(self.facts).get(name, default)

    def by_component(self) -> dict[str, int]:
        """Bytes per component summed over devices."""
        out: dict[str, int] = {}
        for d in self.devices:
            for c in d.components:
                out[c.name] = out.get(c.name, 0) + c.bytes
        return out

    @property
    def gpu_devices(self) -> tuple[DeviceNeed, ...]:
        return tuple(d for d in self.devices if d.kind == "gpu")

    @property
    def cpu_device(self) -> DeviceNeed | None:
        return next((d for d in self.devices if d.kind == "cpu"), None)

    @property
    def peak_allocated_bytes(self) -> int:
        return sum(d.peak_allocated_bytes for d in self.devices)

    @property
    def peak_reserved_bytes(self) -> int:
        return sum(d.peak_reserved_bytes for d in self.devices)

    @property
    def total_bytes(self) -> int:
        return sum(d.total_bytes for d in self.devices)
