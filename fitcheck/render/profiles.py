"""Render the list of hardware profiles (``fitcheck profiles``): a table, or JSON.

JSON: ``{"schema": "fitcheck.profiles/1", "fitcheck_version": str, "profiles": [<fitcheck.machine/1 dict>, ...]}``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fitcheck import __version__
from fitcheck.machine import MACHINE_KINDS, Machine
from fitcheck.profiles import machine_to_dict
from fitcheck.render.facts import gib_text, gpu_group_text, price_text, show

PROFILES_SCHEMA = "fitcheck.profiles/1"
KIND_ORDER = MACHINE_KINDS


def sorted_for_listing(machines: Iterable[Machine]) -> list[Machine]:
    """Laptops first, then desktops, workstations, cloud, CI; by name within a kind."""
    rank = {kind: i for i, kind in enumerate(KIND_ORDER)}
    return sorted(machines, key=lambda m: (rank.get(m.kind, len(rank)), m.name))


def profiles_document(machines: Iterable[Machine]) -> dict[str, Any]:
    return {"schema": PROFILES_SCHEMA, "fitcheck_version": __version__,
            "profiles": [machine_to_dict(m) for m in sorted_for_listing(machines)]}


def render_profiles(machines: Iterable[Machine]) -> str:
    from tabulate import tabulate

    rows = [
        [m.name, m.kind, show(m.cpu.logical_cores), gib_text(m.memory.total_bytes), gpu_group_text(m.gpus),
         price_text(m.price)]
        for m in sorted_for_listing(machines)
    ]
    headers = ["name", "kind", "CPU cores", "RAM", "GPUs", "price/h"]
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
