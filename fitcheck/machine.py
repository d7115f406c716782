"""What a machine is: the data both the probe and hardware profiles produce.

Plain frozen dataclasses, no I/O.  Every fact is either a value or :class:`Unknown` carrying the
reason it could not be read ("unknown" is never shown as 0).  Bytes are integers; bandwidth is
bytes per second; compute is TFLOP/s.

``fitcheck probe`` builds a :class:`Machine` from this computer; ``fitcheck.profiles`` reads and
writes the same structure as TOML (``probe --save`` writes exactly what ``--profile`` loads).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TypeGuard, TypeVar, Union

T = TypeVar("T")


# What a machine is: the kinds a profile declares (and "probed" for this machine), in listing order.
PROFILE_KINDS = ("laptop", "desktop", "workstation", "cloud", "ci")
MACHINE_KINDS = (*PROFILE_KINDS, "probed")


@dataclass(frozen=True)
class Unknown:
    """A fact that could not be read, with the reason (shown as 'unknown (reason)')."""

    reason: str

    def __bool__(self) -> bool:  # an Unknown is never a truthy value
        return False

    def __str__(self) -> str:
        return f"unknown ({self.reason})"


# A value of type T, or Unknown(reason).  Spelled out as a Union for Python 3.10.
Fact = Union[T, Unknown]  # noqa: UP007


def known(value: T | Unknown | None) -> TypeGuard[T]:
    """True when ``value`` is a real value (not Unknown and not None); type checkers narrow on it."""
    return value is not None and not isinstance(value, Unknown)


def value_or_none(value: object):
    """The value, or None when it is Unknown: for arithmetic that must skip unknowns."""
    return None if isinstance(value, Unknown) else value


@dataclass(frozen=True)
class SystemMemory:
    """System RAM as this process can use it.

    ``available_bytes`` is the *effective* figure: min(what the OS reports available,
    the tightest cgroup limit minus the cgroup's working set).  ``cgroup_limit_bytes`` is None
    when no cgroup limit applies (not unknown: there is simply none).
    """

    total_bytes: Fact[int]
    available_bytes: Fact[int]
    cgroup_limit_bytes: Fact[int | None] = None
    swap_total_bytes: Fact[int] = Unknown("not read")
    swap_free_bytes: Fact[int] = Unknown("not read")
    bandwidth_bytes_per_s: Fact[int] = Unknown("not measured")  # from a profile or probe --bench
    bandwidth_source: str = ""  # 'profile', 'measured', 'estimated from ...'


@dataclass(frozen=True)
class CPU:
    model: Fact[str]
    architecture: str  # 'x86_64', 'arm64', ...
    logical_cores: Fact[int]
    physical_cores: Fact[int]
    usable_cores: Fact[int]  # affinity and cgroup CPU quota applied
    features: frozenset[str] = frozenset()  # normalised: avx2, avx512f, amx_bf16, neon, ...
    features_source: str = ""  # '/proc/cpuinfo', 'sysctl', 'py-cpuinfo', 'profile'
    bf16_tflops: Fact[float] = Unknown("not in profile")  # peak dense, for speed estimates


@dataclass(frozen=True)
class MigInstance:
    """One MIG GPU instance of a parent GPU (memory from the instance's own handle)."""

    index: int
    uuid: Fact[str]
    name: Fact[str]
    memory_total_bytes: Fact[int]
    memory_free_bytes: Fact[int]


@dataclass(frozen=True)
class GPU:
    """One accelerator visible to this process (after CUDA/ROCR/HIP_VISIBLE_DEVICES)."""

    index: int  # index as the framework will see it (after *_VISIBLE_DEVICES)
    vendor: str  # 'nvidia', 'amd', 'apple', 'intel'
    name: Fact[str]
    memory_total_bytes: Fact[int]
    memory_free_bytes: Fact[int]
    memory_used_bytes: Fact[int] = Unknown("not read")
    memory_reserved_bytes: Fact[int] = Unknown("not read")  # driver/firmware reserved (NVML v2)
    unified_memory: bool = False  # shares system RAM (Apple, GB10, Jetson)
    uuid: Fact[str] = Unknown("not read")
    compute_capability: Fact[str] = Unknown("not read")  # '8.0', '9.0'; NVIDIA only
    bandwidth_bytes_per_s: Fact[int] = Unknown("not read")
    bf16_tflops: Fact[float] = Unknown("not read")  # peak dense
    # fp16 tensor peak, dense: read where it differs from bf16's (a GPU with no bf16, cc < 8.0: a T4's 65 TFLOP/s)
    fp16_tflops: Fact[float] = Unknown("not read")
    fp8: Fact[bool] = Unknown("not read")  # hardware fp8 support (cc >= 8.9 on NVIDIA)
    mig_mode: Fact[bool] = Unknown("not read")
    mig_instances: tuple[MigInstance, ...] = ()
    notes: tuple[str, ...] = ()  # e.g. 'memory estimated: Metal limit not readable'


@dataclass(frozen=True)
class Disk:
    """Free space where models would be downloaded (the nearest existing folder)."""

    path: str
    free_bytes: Fact[int]
    total_bytes: Fact[int] = Unknown("not read")


@dataclass(frozen=True)
class Host:
    os: str  # 'linux', 'darwin', 'windows'
    os_version: Fact[str] = Unknown("not read")
    architecture: str = ""
    container: Fact[bool] = Unknown("not read")
    wsl: Fact[bool] = Unknown("not read")
    hostname: str = ""


@dataclass(frozen=True)
class Price:
    """An indicative on-demand price of a cloud machine."""

    usd_per_hour: float
    provider: str
    instance_type: str
    read_on: str  # ISO date the price was read
    source: str = ""


@dataclass(frozen=True)
class Purchase:
    """An indicative purchase price of a machine you would own (whole system, USD)."""

    usd: float
    read_on: str  # ISO date the price was read (or announced)
    source: str = ""


INTERCONNECTS = ("nvlink", "pcie", "infiniband", "roce", "ethernet", "efa")


@dataclass(frozen=True)
class Cluster:
    """How a machine's GPUs talk: within the node and, where the machine is one node of several, between nodes.

    ``intra_node_gbps`` is per GPU, one direction (NVLink 4 on H100 SXM: 450 GB/s); ``inter_node_gbps``
    is per node, one direction, all of its NICs together (8x 400 Gb/s InfiniBand NDR: 400 GB/s).
    ``nodes`` is how many such nodes the cluster has (None: as many as one rents)."""

    intra_node: str = "pcie"
    intra_node_gbps: float | None = None
    inter_node: str = "ethernet"
    inter_node_gbps: float | None = None
    nodes: int | None = None


@dataclass(frozen=True)
class Machine:
    """A whole machine: this one (probed) or one described by a hardware profile."""

    name: str
    kind: str  # one of MACHINE_KINDS
    host: Host
    memory: SystemMemory
    cpu: CPU
    gpus: tuple[GPU, ...] = ()
    gpu_status: str = ""  # why there are no GPUs ('no NVIDIA driver: ...'), or '' when some
    driver_version: Fact[str] = Unknown("no GPU driver")
    cuda_version: Fact[str] = Unknown("no GPU driver")
    disk: Disk | None = None
    price: Price | None = None
    purchase: Purchase | None = None  # owned machines: what buying it costs
    power_watts: Fact[int] = Unknown("not in profile")
    description: str = ""
    source: str = "probe"  # 'probe' or the profile's path
    notes: tuple[str, ...] = field(default=())
    cluster: Cluster | None = None  # the interconnect within a node and between nodes
    # the --gpu/--vram/--ram arguments that changed this machine (fitcheck.profiles.overrides), so
    # tables name them and printed commands repeat them; not part of the profile schema
    overrides: tuple[str, ...] = field(default=(), compare=False, metadata={"profile": False})

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)


@lru_cache(maxsize=256)  # pure; the verdict and speed of every multi-node candidate ask it
def nodes_of(machine: Machine, nodes: int) -> Machine:
    """``nodes`` copies of ``machine`` seen as one pool: its GPUs repeated (node-major), RAM and CPU per node.
    What the verdict compares a multi-node estimate with."""
    if nodes <= 1:
        return machine
    from dataclasses import replace

    count = len(machine.gpus)
    gpus = tuple(replace(g, index=n * count + g.index) for n in range(nodes) for g in machine.gpus)
    return replace(machine, gpus=gpus, name=f"{nodes}x {machine.name}")
