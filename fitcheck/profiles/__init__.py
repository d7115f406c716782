"""Hardware profiles: machines described in TOML, in the same schema ``fitcheck probe --save`` writes.

Public API::

    load_profile(name_or_path) -> Machine       # a shipped name ('rtx-4090') or a .toml path
    list_profiles() -> list[Machine]            # every shipped profile
    profile_names() -> list[str]
    load_profile_file(path) -> Machine
    save_profile(machine, path) -> Path         # what `probe --save` writes
    machine_to_dict(machine) -> dict            # the schema dict (JSON: Unknown -> null + "unknown")
    machine_from_dict(doc, where=...) -> Machine
    machine_to_toml(machine) -> str

The schema itself is documented in :mod:`fitcheck.profiles.schema` and hardware_profiles/README.md.
"""

from __future__ import annotations

from fitcheck.profiles.reader import machine_from_dict
from fitcheck.profiles.schema import SCHEMA, machine_to_dict, os_allowance_bytes
from fitcheck.profiles.store import (
    list_profiles,
    load_profile,
    load_profile_file,
    machine_to_toml,
    machines_of_kind,
    profile_names,
    read_profile_text,
    save_profile,
)

__all__ = [
    "SCHEMA", "list_profiles", "load_profile", "load_profile_file", "machine_from_dict", "machine_to_dict",
    "machine_to_toml", "machines_of_kind", "os_allowance_bytes", "profile_names", "read_profile_text",
    "save_profile",
]
