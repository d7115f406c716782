"""Render one Machine (this computer probed, or a hardware profile): a text table, or JSON.

The JSON document is versioned::

    {"schema": "fitcheck.probe/1", "fitcheck_version": "0.1.0", "machine": {...}, "software": {...} | null}

where ``machine`` is exactly the ``fitcheck.machine/1`` dict of
:func:`fitcheck.profiles.machine_to_dict` (the TOML profile schema): a fact that could not be
read is ``null`` and its reason is in the sibling ``"unknown": {"field": "reason"}`` map of the
same object.
"""

from __future__ import annotations

from typing import Any

from fitcheck import __version__
from fitcheck.machine import GPU, Machine, Unknown
from fitcheck.profiles import machine_to_dict
from fitcheck.profiles.schema import NOT_IN_PROFILE
from fitcheck.render.facts import bandwidth_text, gib_text, show, tflops_text
from fitcheck.render.software import probe_software_section, software_document

PROBE_SCHEMA = "fitcheck.probe/1"


def probe_document(machine: Machine, software=None) -> dict[str, Any]:
    """The versioned JSON document of ``fitcheck probe --json``; "software" (this machine's installed stack
    checked against it, fitcheck.render.software) is null for a profile."""
    return {"schema": PROBE_SCHEMA, "fitcheck_version": __version__, "machine": machine_to_dict(machine),
            "software": software_document(software)}


def render_machine(machine: Machine, software=None) -> str:
    """The readable table of ``fitcheck probe`` (with a "Software" section for this machine)."""
    from tabulate import tabulate

    rows = [(label, text) for label, text in _fact_rows(machine) if text is not None]
    parts = [_title(machine), tabulate(rows, tablefmt="plain")]
    if machine.gpus:
        parts.append(_gpu_table(machine.gpus))

    section = probe_software_section(software, bool(machine.gpus))
    if section:
        parts.append(section)
    return "\n\n".join(parts)


def _title(machine: Machine) -> str:
    if machine.kind == "probed":
        title = f"This machine ({machine.host.hostname})" if machine.host.hostname else "This machine"
        return title + (f", read from {machine.source}" if machine.source not in ("", "probe") else "")
    title = f"Profile {machine.name} ({machine.kind})"
    if machine.description:
        title += f": {machine.description}"
    return title + (f"\nfrom {machine.source}" if machine.source else "")


def _fact_rows(machine: Machine) -> list[tuple[str, str | None]]:
    host, memory, cpu = machine.host, machine.memory, machine.cpu
    return [
        ("Host", _host_text(machine)),
        ("RAM", _ram_text(machine)),
        ("RAM bandwidth", _with_source(bandwidth_text(memory.bandwidth_bytes_per_s), memory.bandwidth_source)),
        ("Swap", None if machine.kind != "probed" and _both_unknown(memory.swap_total_bytes, memory.swap_free_bytes)
         else f"total {gib_text(memory.swap_total_bytes)}, free {gib_text(memory.swap_free_bytes)}"),
        ("CPU", f"{show(cpu.model)} ({cpu.architecture or host.architecture})"),
        ("CPU cores", f"{show(cpu.logical_cores)} logical / {show(cpu.physical_cores)} physical / "
                      f"{show(cpu.usable_cores)} usable"),
        ("CPU features", _with_source(", ".join(sorted(cpu.features)) or "none listed", cpu.features_source)),
        ("CPU bf16 peak", tflops_text(cpu.bf16_tflops)),
        ("GPUs", f"{len(machine.gpus)} (table below)" if machine.gpus
         else f"none — {machine.gpu_status or 'no GPU found'}"),
        ("Driver", None if (machine.kind != "probed" or not machine.gpus)
         and _both_unknown(machine.driver_version, machine.cuda_version)
         else f"{show(machine.driver_version)}, CUDA {show(machine.cuda_version)}"),
        ("Disk", _disk_text(machine)),
        ("Price", _price_text(machine)),
        ("Purchase", None if machine.purchase is None else
         f"${machine.purchase.usd:,.0f} (indicative, {machine.purchase.read_on}; {machine.purchase.source})"),
        ("Power", None if isinstance(machine.power_watts, Unknown) and machine.kind == "probed"
         else show(machine.power_watts, lambda w: f"{w:,} W")),
        ("Notes", "; ".join(machine.notes) or None),
    ]


def _host_text(machine: Machine) -> str:
    host = machine.host
    parts = [host.os]
    if not isinstance(host.os_version, Unknown):
        parts[0] += f" {host.os_version}"
    if host.architecture:
        parts.append(host.architecture)
    if host.container is True:
        parts.append("in a container")
    if host.wsl is True:
        parts.append("WSL")
    return ", ".join(parts)


def _ram_text(machine: Machine) -> str:
    memory = machine.memory
    text = f"total {gib_text(memory.total_bytes)}, available {gib_text(memory.available_bytes)}"
    if memory.cgroup_limit_bytes is not None:
        text += f" (cgroup limit {gib_text(memory.cgroup_limit_bytes)})"
    elif machine.source == "probe":
        text += " (no cgroup memory limit applies)"
    return text


def _disk_text(machine: Machine) -> str | None:
    disk = machine.disk
    if disk is None:
        return None if machine.kind != "probed" else "unknown (not read)"
    text = f"{gib_text(disk.free_bytes)} free"
    if not isinstance(disk.total_bytes, Unknown):
        text += f" of {gib_text(disk.total_bytes)}"
    return text + (f" at {disk.path}" if disk.path else "")


def _price_text(machine: Machine) -> str | None:
    price = machine.price
    if price is None:
        return None
    text = f"${price.usd_per_hour:,.2f}/h on-demand, {price.provider} {price.instance_type} (indicative, read {price.read_on})"
    return text + (f"; {price.source}" if price.source else "")


def _with_source(text: str, source: str) -> str:
    return f"{text} ({source})" if source and not text.startswith("unknown") else text


def _both_unknown(a: object, b: object) -> bool:
    return isinstance(a, Unknown) and isinstance(b, Unknown)


def _gpu_table(gpus: tuple[GPU, ...]) -> str:
    """One row per GPU (and MIG instance); an unknown cell says 'unknown' and its reason is listed
    under the table, so the table stays narrow ('—' for a fact a profile simply does not give)."""
    from tabulate import tabulate

    headers = ["GPU", "name", "memory total", "free", "cc", "bandwidth", "bf16 peak", "MIG"]
    rows: list[list[str]] = []
    notes: list[str] = []

    def cell(label: str, value: object, text: str) -> str:
        if not isinstance(value, Unknown):
            return text
        if value.reason == NOT_IN_PROFILE:
            return "—"
        notes.append(f"{label}: {value}")
        return "unknown"

    for gpu in gpus:
        tag = f"GPU {gpu.index}"
        total = gib_text(gpu.memory_total_bytes, digits=2) + (" unified" if gpu.unified_memory else "")
        rows.append([
            str(gpu.index),
            cell(f"{tag} name", gpu.name, show(gpu.name)),
            cell(f"{tag} memory total", gpu.memory_total_bytes, total),
            cell(f"{tag} memory free", gpu.memory_free_bytes, gib_text(gpu.memory_free_bytes, digits=2)),
            cell(f"{tag} compute capability", gpu.compute_capability, show(gpu.compute_capability)),
            cell(f"{tag} bandwidth", gpu.bandwidth_bytes_per_s, bandwidth_text(gpu.bandwidth_bytes_per_s)),
            cell(f"{tag} bf16 peak", gpu.bf16_tflops, tflops_text(gpu.bf16_tflops)),
            cell(f"{tag} MIG mode", gpu.mig_mode, _mig_text(gpu)),
        ])
        for mig in gpu.mig_instances:
            mig_tag = f"{tag} MIG {mig.index}"
            rows.append([
                f"{gpu.index}:{mig.index}",
                "  MIG " + cell(f"{mig_tag} name", mig.name, show(mig.name)),
                cell(f"{mig_tag} memory total", mig.memory_total_bytes, gib_text(mig.memory_total_bytes, digits=2)),
                cell(f"{mig_tag} memory free", mig.memory_free_bytes, gib_text(mig.memory_free_bytes, digits=2)),
                "", "", "", "",
            ])
        notes.extend(f"{tag}: {note}" for note in gpu.notes)
    table = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
    return table + ("\n" + "\n".join(notes) if notes else "")


def _mig_text(gpu: GPU) -> str:
    if gpu.mig_mode is True:
        return f"on, {len(gpu.mig_instances)} instance(s)"
    return "off"
