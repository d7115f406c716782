"""The one machine schema, ``fitcheck.machine/1``: Machine <-> plain dict, with human units.

``probe --save`` writes it, ``--profile`` reads it, ``probe --json`` prints it, and the shipped
hardware profiles are written in it.  Pure functions, no I/O; the TOML text lives in
:mod:`fitcheck.profiles.toml_writer` (writing) and ``tomllib`` (reading).

Layout (every key is optional unless marked *required*)::

    schema = "fitcheck.machine/1"
    name = "rtx-4090"                 # default: the file's stem
    kind = "desktop"                  # *required*: laptop|desktop|workstation|cloud|ci|probed
    description = "..."
    power_watts = 450                 # typical draw under load, W
    driver_version = "550.54"   cuda_version = "12.4"   gpu_status = "..."   notes = ["..."]

    [host]    os = "linux" (default), os_version, architecture (default: cpu.architecture),
              container, wsl, hostname
    [memory]  total_bytes *required*, available_bytes, cgroup_limit_bytes (absent: no limit),
              swap_total_bytes, swap_free_bytes, bandwidth_bytes_per_s, bandwidth_source
    [cpu]     architecture *required*, logical_cores *required*, physical_cores, usable_cores,
              model, features = ["avx2", ...], features_source, bf16_tflops
    [[gpus]]  vendor *required*, name *required*, memory_total_bytes *required*, index,
              memory_free_bytes, memory_used_bytes, memory_reserved_bytes, unified_memory,
              uuid, compute_capability = "8.9", bandwidth_bytes_per_s, bf16_tflops, fp16_tflops, fp8,
              mig_mode, notes, count (hand-written only: N identical GPUs)
    [[gpus.mig_instances]]  index, uuid, name, memory_total_bytes, memory_free_bytes
    [disk]    path, free_bytes, total_bytes
    [price]   usd_per_hour, provider, instance_type, read_on (ISO date) *all required*, source
    [purchase]  usd, read_on (ISO date) *both required*, source: an owned machine's indicative price

Human units.  Every ``X_bytes`` field may instead be written ``X_gib`` (GiB, 2^30), ``X_mib``,
``X_gb`` (10^9) or ``X = "24 GiB"`` (a size string); in ``[[gpus]]`` ``memory_*`` means
``memory_total_*`` (``memory_gib = 24``).  ``bandwidth_bytes_per_s`` may be written
``bandwidth_gbps`` (gigaBYTES per second, as vendors quote it: 1008 for an RTX 4090),
``bandwidth_tbps`` or ``bandwidth = "3.35 TB/s"``.

Unknown facts.  A fact that could not be read has no value; its reason goes in the ``unknown``
table of the same table: ``[gpus.unknown] uuid = "NVML: not supported"``.  In the JSON form the
key is present with ``null`` and the same sibling ``"unknown": {"uuid": "..."}`` map.  A key the
document leaves out altogether is ``Unknown("not in profile")``, except for these documented
defaults for hand-written profiles:

* GPU memory free = total (a profile lists what is free), used = total - free;
* RAM available = total - :func:`os_allowance_bytes` (what the OS and desktop keep);
* usable cores = logical cores; ``fp8`` = compute capability >= 8.9 on NVIDIA;
* ``bandwidth_source`` / ``features_source`` = "profile" when the value is given.

Every field of :class:`fitcheck.machine.Machine` round-trips exactly: ``machine_from_dict(
machine_to_dict(m)) == m``, Unknown reasons included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fitcheck.machine import (
    CPU,
    GPU,
    MACHINE_KINDS,
    Cluster,
    Disk,
    Host,
    Machine,
    MigInstance,
    Price,
    Purchase,
    SystemMemory,
    Unknown,
)
from fitcheck.units import GiB

SCHEMA = "fitcheck.machine/1"
KINDS = MACHINE_KINDS
NOT_IN_PROFILE = "not in profile"

# What the OS, its services and a desktop session keep for themselves when a profile gives no
# RAM "available" figure.  An assumption, not a measurement: an idle Linux server uses ~1 GiB,
# an idle macOS/Windows desktop 3-6 GiB; 10 % of RAM, at least 2 GiB, at most 16 GiB.
OS_ALLOWANCE_MIN = 2 * GiB
OS_ALLOWANCE_MAX = 16 * GiB
OS_ALLOWANCE_FRACTION = 0.10

# Bounds beyond which a number cannot describe a real machine (a typo, or a corrupt or hostile
# file): sizes and bandwidths up to 1 EiB(/s), whole numbers (cores, watts) up to ten million,
# other numbers (TFLOPS, USD per hour) up to a billion, and at most 1024 GPUs in one profile.
MAX_BYTES = 2**60
MAX_INT = 10**7
MAX_FLOAT = 1e9
MAX_GPUS = 1024
CC_RE = re.compile(r"^[0-9]+\.[0-9]+$")


def os_allowance_bytes(total_bytes: int) -> int:
    """RAM assumed kept by the OS when a profile does not say how much is available."""
    return int(max(OS_ALLOWANCE_MIN, min(total_bytes * OS_ALLOWANCE_FRACTION, OS_ALLOWANCE_MAX)))


# ---------------------------------------------------------------------------------------------
# The field tables: one row per dataclass field, in the order they are written.


@dataclass(frozen=True)
class FieldSpec:
    name: str  # the dataclass attribute and the canonical key
    kind: str  # 'bytes' | 'bandwidth' | 'int' | 'float' | 'str' | 'bool' | 'strings' | 'features' | 'date' | 'cc'
    required: bool = False
    fact: bool = True  # may be Unknown(reason)
    absent: Any = ...  # value when a document leaves it out; ... = Unknown("not in profile")
    positive: bool = False  # sizes that must be > 0 (a total is never 0: unknown is Unknown)


HOST_FIELDS = (
    FieldSpec("os", "str", fact=False, absent="linux"),
    FieldSpec("os_version", "str"),
    FieldSpec("architecture", "str", fact=False, absent=None),  # None: derived from cpu
    FieldSpec("container", "bool"),
    FieldSpec("wsl", "bool"),
    FieldSpec("hostname", "str", fact=False, absent=""),
)
MEMORY_FIELDS = (
    FieldSpec("total_bytes", "bytes", required=True, positive=True),
    FieldSpec("available_bytes", "bytes", absent=None),  # derived: total - OS allowance
    FieldSpec("cgroup_limit_bytes", "bytes", absent=None),  # None: no cgroup limit
    FieldSpec("swap_total_bytes", "bytes"),
    FieldSpec("swap_free_bytes", "bytes"),
    FieldSpec("bandwidth_bytes_per_s", "bandwidth"),
    FieldSpec("bandwidth_source", "str", fact=False, absent=None),  # derived
)
CPU_FIELDS = (
    FieldSpec("model", "str"),
    FieldSpec("architecture", "str", required=True, fact=False),
    FieldSpec("logical_cores", "int", required=True, positive=True),
    FieldSpec("physical_cores", "int", positive=True),
    FieldSpec("usable_cores", "int", absent=None, positive=True),  # derived: logical
    FieldSpec("features", "features", fact=False, absent=frozenset()),
    FieldSpec("features_source", "str", fact=False, absent=None),  # derived
    FieldSpec("bf16_tflops", "float"),
)
MIG_FIELDS = (
    FieldSpec("index", "int", fact=False, absent=None),  # derived: position
    FieldSpec("uuid", "str"),
    FieldSpec("name", "str"),
    FieldSpec("memory_total_bytes", "bytes", required=True),
    FieldSpec("memory_free_bytes", "bytes", absent=None),  # derived: total
)
GPU_FIELDS = (
    FieldSpec("index", "int", fact=False, absent=None),  # derived: position
    FieldSpec("vendor", "str", required=True, fact=False),
    FieldSpec("name", "str", required=True),
    FieldSpec("memory_total_bytes", "bytes", required=True, positive=True),
    FieldSpec("memory_free_bytes", "bytes", absent=None),  # derived: total
    FieldSpec("memory_used_bytes", "bytes", absent=None),  # derived: total - free
    FieldSpec("memory_reserved_bytes", "bytes"),
    FieldSpec("unified_memory", "bool", fact=False, absent=False),
    FieldSpec("uuid", "str"),
    FieldSpec("compute_capability", "cc"),
    FieldSpec("bandwidth_bytes_per_s", "bandwidth"),
    FieldSpec("bf16_tflops", "float"),
    FieldSpec("fp16_tflops", "float"),
    FieldSpec("fp8", "bool", absent=None),  # derived from compute capability on NVIDIA
    FieldSpec("mig_mode", "bool"),
    FieldSpec("mig_instances", "mig", fact=False, absent=()),
    FieldSpec("notes", "strings", fact=False, absent=()),
)
DISK_FIELDS = (
    FieldSpec("path", "str", fact=False, absent=""),
    FieldSpec("free_bytes", "bytes", required=True),
    FieldSpec("total_bytes", "bytes"),
)
PRICE_FIELDS = (
    FieldSpec("usd_per_hour", "float", required=True, fact=False),
    FieldSpec("provider", "str", required=True, fact=False),
    FieldSpec("instance_type", "str", required=True, fact=False),
    FieldSpec("read_on", "date", required=True, fact=False),
    FieldSpec("source", "str", fact=False, absent=""),
)
PURCHASE_FIELDS = (
    FieldSpec("usd", "float", required=True, fact=False),
    FieldSpec("read_on", "date", required=True, fact=False),
    FieldSpec("source", "str", fact=False, absent=""),
)
CLUSTER_FIELDS = (
    FieldSpec("intra_node", "str", fact=False, absent="pcie"),
    FieldSpec("intra_node_gbps", "float", fact=False, absent=None),
    FieldSpec("inter_node", "str", fact=False, absent="ethernet"),
    FieldSpec("inter_node_gbps", "float", fact=False, absent=None),
    FieldSpec("nodes", "int", fact=False, absent=None, positive=True),
)
MACHINE_FIELDS = (
    FieldSpec("name", "str", fact=False, absent=None),  # derived: the file's stem
    FieldSpec("kind", "kind", required=True, fact=False),
    FieldSpec("description", "str", fact=False, absent=""),
    FieldSpec("source", "str", fact=False, absent=None),  # derived: where it was read from
    FieldSpec("gpu_status", "str", fact=False, absent=None),  # derived
    FieldSpec("driver_version", "str"),
    FieldSpec("cuda_version", "str"),
    FieldSpec("power_watts", "int", positive=True),
    FieldSpec("notes", "strings", fact=False, absent=()),
    FieldSpec("host", "host", fact=False, absent=None),
    FieldSpec("memory", "memory", required=True, fact=False),
    FieldSpec("cpu", "cpu", required=True, fact=False),
    FieldSpec("disk", "disk", fact=False, absent=None),
    FieldSpec("price", "price", fact=False, absent=None),
    FieldSpec("purchase", "purchase", fact=False, absent=None),
    FieldSpec("gpus", "gpus", fact=False, absent=()),
    FieldSpec("cluster", "cluster", fact=False, absent=None),
)

# The dataclass each table builds, so tests can check every dataclass field is described.
SPECS_BY_CLASS: dict[type, tuple[FieldSpec, ...]] = {
    Host: HOST_FIELDS, SystemMemory: MEMORY_FIELDS, CPU: CPU_FIELDS, MigInstance: MIG_FIELDS,
    GPU: GPU_FIELDS, Disk: DISK_FIELDS, Price: PRICE_FIELDS, Purchase: PURCHASE_FIELDS, Machine: MACHINE_FIELDS,
    Cluster: CLUSTER_FIELDS,
}
_NESTED = {"host", "memory", "cpu", "disk", "price", "purchase", "gpus", "mig", "cluster"}

# ---------------------------------------------------------------------------------------------
# Machine -> dict


def machine_to_dict(machine: Machine) -> dict[str, Any]:
    """The schema dict of ``machine``: JSON-ready; Unknown -> None plus an ``unknown`` entry."""
    return {"schema": SCHEMA, **_object_to_dict(machine, MACHINE_FIELDS)}


def _object_to_dict(obj: Any, specs: tuple[FieldSpec, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    unknown: dict[str, str] = {}
    for spec in specs:
        value = getattr(obj, spec.name)
        if isinstance(value, Unknown):
            out[spec.name] = None
            unknown[spec.name] = value.reason
        elif value is None:
            continue  # no value and nothing unknown: no cgroup limit, no disk, no price
        elif spec.kind in ("host", "memory", "cpu", "disk", "price", "purchase", "cluster"):
            out[spec.name] = _object_to_dict(value, SPECS_BY_CLASS[type(value)])
        elif spec.kind == "gpus":
            out[spec.name] = [_object_to_dict(gpu, GPU_FIELDS) for gpu in value]
        elif spec.kind == "mig":
            out[spec.name] = [_object_to_dict(mig, MIG_FIELDS) for mig in value]
        elif spec.kind == "features":
            out[spec.name] = sorted(value)
        elif spec.kind == "strings":
            out[spec.name] = list(value)
        else:
            out[spec.name] = value
    if unknown:
        out["unknown"] = unknown
    return out


# ---------------------------------------------------------------------------------------------
# dict -> Machine
