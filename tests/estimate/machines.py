"""Hand-built machines for estimator and verdict tests."""

from fitcheck.machine import CPU, GPU, Host, Machine, SystemMemory, Unknown
from fitcheck.units import GiB, MiB


def machine(gpus=(), ram_gib=64, name="test"):
    return Machine(
        name=name, kind="desktop", host=Host("linux", architecture="x86_64"),
        memory=SystemMemory(ram_gib * GiB, int(ram_gib * 0.9 * GiB), None),
        cpu=CPU("test cpu", "x86_64", 16, 8, 16, frozenset({"avx2"})),
        gpus=tuple(gpus), gpu_status="" if gpus else "no GPU in this test machine", source="test",
    )


def nvidia(name="NVIDIA GeForce RTX 4090", total_mib=24564, free_mib=None, cc="8.9", index=0):
    free = total_mib if free_mib is None else free_mib
    return GPU(index, "nvidia", name, total_mib * MiB, free * MiB if free is not None else Unknown("test"),
               compute_capability=cc)


def unknown_free_gpu():
    return GPU(0, "nvidia", "Mystery GPU", 24 * GiB, Unknown("NVML: Not Supported"), compute_capability="8.0")
