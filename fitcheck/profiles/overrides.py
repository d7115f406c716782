"""Quick machine overrides: ``--vram``, ``--ram`` and ``--gpu`` ("what if I had ...") without a TOML file.

Applied to the machine being answered for (this one probed, or a ``--profile``), in this order:

``--gpu [Nx]NAME``
    The machine's GPUs become N (default 1) copies of a GPU from the profile catalogue: NAME is a
    profile (``rtx-4090``: its first GPU) or a GPU model (``"RTX 4090"``, ``h100``, ``a100-80gb``;
    case, spaces and dashes do not matter).  Memory, compute capability, bandwidth and TFLOPS come
    from that profile; free memory is the profile's (what a profile lists as free).
``--vram SIZE`` or ``--vram NxSIZE``
    Every GPU gets SIZE of memory, all of it free (``24GiB``; ``2x24GiB`` also sets the count to 2,
    copying the first GPU).  A machine without a GPU needs ``--gpu`` to say which GPU.
``--ram SIZE``
    Installed RAM; available = SIZE minus the OS allowance, as in a hand-written profile
    (:func:`fitcheck.profiles.schema.os_allowance_bytes`); no cgroup limit.

The changed machine keeps its name and source and records the override arguments in
``Machine.overrides``, so the tables name them and every printed command repeats them.
Pure functions over frozen dataclasses; the catalogue is passed in (``list_profiles()``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from fitcheck.errors import FitcheckError
from fitcheck.machine import GPU, Machine, SystemMemory, Unknown
from fitcheck.profiles.schema import os_allowance_bytes
from fitcheck.profiles.store import list_profiles, load_profile
from fitcheck.units import parse_size

MAX_GPUS = 1024
_COUNT = re.compile(r"^\s*(\d+)\s*[x×]\s*(.+?)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class MachineOverrides:
    """What ``--gpu``, ``--vram`` and ``--ram`` ask for (each None when not given)."""

    gpu: str | None = None
    vram: str | None = None
    ram: str | None = None

    def __bool__(self) -> bool:
        return any((self.gpu, self.vram, self.ram))

    def args(self) -> tuple[str, ...]:
        """The command-line arguments that reproduce these overrides."""
        out: list[str] = []
        for flag, value in (("--gpu", self.gpu), ("--vram", self.vram), ("--ram", self.ram)):
            if value:
                out += [flag, value.strip()]
        return tuple(out)


def parse_count_prefix(text: str, what: str) -> tuple[int | None, str]:
    """``"2x24GiB"`` -> (2, "24GiB"); ``"24GiB"`` -> (None, "24GiB")."""
    m = _COUNT.match(text)
    if not m:
        return None, text.strip()
    count = int(m.group(1))
    if not 1 <= count <= MAX_GPUS:
        raise FitcheckError(f"{what} {text!r}: the GPU count must be between 1 and {MAX_GPUS}")
    return count, m.group(2)


def parse_vram(text: str) -> tuple[int | None, int]:
    """``--vram`` -> (count or None, bytes per GPU); FitcheckError (exit 2) when malformed."""
    count, size = parse_count_prefix(text, "--vram")
    return count, _size(size, f"--vram {text!r}")


def parse_ram(text: str) -> int:
    return _size(text, f"--ram {text!r}")


def _size(text: str, where: str) -> int:
    if re.fullmatch(r"\s*[0-9.]+\s*", text):
        raise FitcheckError(f"{where}: no unit (write {text.strip()}GiB or {text.strip()}GB)")
    try:
        value = parse_size(text)
    except ValueError as exc:
        raise FitcheckError(f"{where}: {exc}") from None
    if value <= 0:
        raise FitcheckError(f"{where}: must be more than 0 bytes")
    return value


def _norm(text: str) -> str:
    text = text.lower().replace("nvidia", "").replace("geforce", "").replace("amd", "")
    return re.sub(r"[^a-z0-9]", "", text)


def catalogue_gpu(name: str, catalogue: Iterable[Machine]) -> GPU:
    """The GPU ``name`` means: a profile's first GPU, else the GPU model it names (exact, then the
    one model that contains it); FitcheckError with suggestions otherwise."""
    machines = [m for m in catalogue if m.gpus]
    wanted = name.strip().lower()
    for m in machines:
        if m.name.lower() == wanted:
            return m.gpus[0]
    key = _norm(name)
    models: dict[str, GPU] = {}
    for m in machines:
        for g in m.gpus:
            models.setdefault(str(g.name), g)
    exact = [g for label, g in models.items() if key and _norm(label) == key]
    if exact:
        return exact[0]
    partial = {label: g for label, g in models.items() if key and key in _norm(label)}
    if len(partial) == 1:
        return next(iter(partial.values()))
    if partial:
        raise FitcheckError(f"--gpu {name!r} matches several GPUs: {', '.join(sorted(partial))}",
                            "name one of them, or a profile such as rtx-4090")
    from fitcheck.profiles.suggest import closest_gpu_profiles

    close = closest_gpu_profiles(name, machines)
    hint = (f"did you mean {', '.join(close)}? " if close else "") + "`fitcheck profiles` lists the GPUs"
    raise FitcheckError(f"--gpu {name!r}: no such GPU in the profile catalogue", hint)


def _copies(gpu: GPU, count: int) -> tuple[GPU, ...]:
    return tuple(replace(gpu, index=i, uuid=Unknown("--gpu/--vram override"), mig_instances=())
                 for i in range(count))


def apply_overrides(machine: Machine, overrides: MachineOverrides, catalogue: Iterable[Machine] = ()) -> Machine:
    """``machine`` with the overrides applied (the same object when there are none)."""
    if not overrides:
        return machine
    gpus = machine.gpus
    changes: dict = {}
    if overrides.gpu:
        count, name = parse_count_prefix(overrides.gpu, "--gpu")
        catalogue = list(catalogue)
        source_gpu = catalogue_gpu(name, catalogue)
        gpus = _copies(source_gpu, count or 1)
        changes["gpu_status"] = ""
        if not machine.gpus:  # the driver facts come with the GPU
            owner = next((m for m in catalogue if source_gpu in m.gpus), None)
            if owner is not None:
                changes.update(driver_version=owner.driver_version, cuda_version=owner.cuda_version)
    if overrides.vram:
        count, size = parse_vram(overrides.vram)
        if not gpus:
            raise FitcheckError(f"--vram {overrides.vram}: {machine.name} has no GPU to resize",
                                "add --gpu NAME (a profile or GPU model, e.g. --gpu rtx-4090) to say which GPU")
        if count is not None and count != len(gpus):
            gpus = _copies(gpus[0], count)
        gpus = tuple(replace(g, memory_total_bytes=size, memory_free_bytes=size, memory_used_bytes=0,
                             memory_reserved_bytes=Unknown("--vram override"), mig_instances=()) for g in gpus)
    if overrides.ram:
        total = parse_ram(overrides.ram)
        mem = machine.memory
        changes["memory"] = SystemMemory(
            total_bytes=total, available_bytes=max(total - os_allowance_bytes(total), 0), cgroup_limit_bytes=None,
            swap_total_bytes=mem.swap_total_bytes, swap_free_bytes=mem.swap_free_bytes,
            bandwidth_bytes_per_s=mem.bandwidth_bytes_per_s, bandwidth_source=mem.bandwidth_source)
    return replace(machine, gpus=gpus, overrides=(*machine.overrides, *overrides.args()), **changes)


def load_machine(profile: str | None, gpu: str | None = None, vram: str | None = None, ram: str | None = None, *,
                 bench: bool = False):
    """The machine to answer for: the named/pathed profile, else this machine probed; then the
    --gpu/--vram/--ram overrides (fitcheck.profiles.overrides), the one place they are applied.

    This machine without a RAM-bandwidth reading (none probed, none kept by an earlier measurement) gets one
    measured now when ``bench`` (fitcheck.probe.bench.with_bandwidth_measured_now: bounded to about half a second,
    kept for later answers); a command passes what its --no-bench and FITCHECK_NO_BENCH say
    (fitcheck.cli.options.bench_requested), a library caller asks for it.  A profile is never measured: it is not
    this machine."""
    if profile:
        machine = load_profile(profile)
    else:
        from fitcheck.probe import probe

        machine = probe()
        if bench:
            from fitcheck.probe.bench import with_bandwidth_measured_now

            machine = with_bandwidth_measured_now(machine)
    return apply_machine_overrides(machine, gpu, vram, ram)


def apply_machine_overrides(machine, gpu: str | None = None, vram: str | None = None, ram: str | None = None):
    """``machine`` with the --gpu/--vram/--ram overrides applied (fitcheck.profiles.overrides; each error
    names its flag); ``machine`` itself when none is given."""
    if gpu or vram or ram:
        machine = apply_overrides(machine, MachineOverrides(gpu=gpu, vram=vram, ram=ram),
                                  list_profiles() if gpu else ())
    return machine
