"""Finding, reading and writing hardware profiles (the I/O around :mod:`.schema`).

Shipped profiles are the ``*.toml`` files of the ``fitcheck.hardware_profiles`` package (the
repository's top-level ``hardware_profiles/`` folder, mapped into the wheel by pyproject), found
where the package's folder lies (else with :func:`importlib.resources.files`, for a zipped install);
a source checkout that is not installed falls back to the folder itself.  A profile is named by its file stem, case-insensitively.

The user's own profiles (``<config>/profiles/*.toml``, :mod:`fitcheck.user_config`; what
``fitcheck probe --save NAME`` writes) are found the same way and come first: a saved profile of
the same name as a shipped one answers for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any

from fitcheck.bounded import loads_toml, read_text_file, write_regular_file
from fitcheck.errors import FitcheckError
from fitcheck.machine import Machine
from fitcheck.profiles.reader import machine_from_dict
from fitcheck.profiles.schema import machine_to_dict
from fitcheck.profiles.toml_writer import dumps
from fitcheck.user_config import is_bare_name, profiles_dir, user_profile_files

SHIPPED_PACKAGE = "fitcheck.hardware_profiles"
SHIPPED_LABEL = "hardware_profiles"  # how shipped files are named in messages and Machine.source
_REPO_FOLDER = Path(__file__).resolve().parents[2] / "hardware_profiles"


def shipped_profile_files() -> dict[str, object]:
    """Stem (lower case) -> the shipped profile file (a Traversable or a Path), sorted by stem."""
    return dict(_shipped_files())


@lru_cache(maxsize=1)  # the installed package's files: listed once per process (`where` asks per machine)
def _shipped_files() -> tuple[tuple[str, object], ...]:
    folder = _shipped_folder()
    if folder is None:
        return ()
    files = [entry for entry in folder.iterdir() if entry.name.endswith(".toml") and entry.is_file()]
    return tuple((entry.name[: -len(".toml")].lower(), entry) for entry in sorted(files, key=lambda e: e.name.lower()))


def _shipped_folder():
    # A package installed as a folder (wheel, editable or source checkout) is read where it lies, without
    # importing importlib.resources (which costs more than a check's estimate); a zipped one goes through it.
    import importlib.util

    try:
        found = importlib.util.find_spec(SHIPPED_PACKAGE)
    except (ModuleNotFoundError, ValueError):
        found = None
    for location in (found.submodule_search_locations or []) if found is not None else []:
        if Path(location).is_dir():
            return Path(location)
    from importlib import resources

    try:
        folder = resources.files(SHIPPED_PACKAGE)
        if folder.is_dir():
            return folder
    except (ModuleNotFoundError, TypeError, FileNotFoundError):
        pass
    return _REPO_FOLDER if _REPO_FOLDER.is_dir() else None


def profile_names() -> list[str]:
    """Names of the user's saved and the shipped profiles, sorted."""
    return sorted({*shipped_profile_files(), *user_profile_files()})


def list_profiles() -> list[Machine]:
    """Every profile, loaded (sorted by name): the user's saved ones, then the shipped ones not shadowed."""
    user = user_profile_files()
    machines = {stem: _load_user(path) for stem, path in user.items()}
    machines.update({stem: _load_shipped(stem) for stem in shipped_profile_files()
                     if stem not in user})
    return [machines[stem] for stem in sorted(machines)]


def load_profile(name_or_path: str) -> Machine:
    """A profile by path (has a '/' or ends in .toml, and exists) or by shipped name.

    An unknown name raises FitcheckError naming the three closest profiles of the kind it asks for
    (fitcheck.profiles.suggest: ``cpu-only`` the profiles without a GPU, ``rtx-4080`` the closest GPUs).  A shipped profile can
    also be named by its cloud instance type (``g5.xlarge``).
    """
    text = name_or_path.strip()
    looks_like_path = "/" in text or os.sep in text or text.lower().endswith(".toml")
    if looks_like_path:
        path = Path(text).expanduser()
        if os.path.lexists(path):  # a FIFO or folder is refused by the reader, never waited on
            return load_profile_file(path)
        if "/" in text or os.sep in text:
            raise FitcheckError(f"profile file not found: {text}", "give an existing .toml file or a name from `fitcheck profiles`")
        text = text[: -len(".toml")]

    files = shipped_profile_files()
    wanted = text.lower()
    user = user_profile_files()
    if wanted in user:
        return _load_user(user[wanted])
    if wanted in files:
        return _load_shipped(wanted)
    for machine in (_load_shipped(stem) for stem in files):
        if machine.price and machine.price.instance_type.lower() == wanted:
            return machine
    from fitcheck.profiles.suggest import unknown_profile_hint

    raise FitcheckError(f"unknown hardware profile {text!r}", unknown_profile_hint(text, _suggestable(files, user)))


def _suggestable(files: dict[str, object], user: dict[str, Path]) -> list[Machine]:
    """Every profile an unknown name may be suggested from: the user's saved ones (one that does not load is
    left out: the error is about the name typed), then the shipped ones not shadowed."""
    machines = []
    for path in user.values():
        try:
            machines.append(_load_user(path))
        except FitcheckError:
            continue
    return machines + [_load_shipped(stem) for stem in files if stem not in user]


def load_profile_file(path: str | os.PathLike[str]) -> Machine:
    """Read one profile file; any problem is one FitcheckError line naming the file and field."""
    where = str(path)
    text = read_text_file(path, "profile", "TOML")
    return read_profile_text(text, where, default_name=Path(path).stem)


def read_profile_text(text: str, where: str, default_name: str = "") -> Machine:
    """Parse TOML ``text`` as a machine profile; ``where`` names it in error messages."""
    document = loads_toml(text, where, "profile", check_numbers=False)
    return machine_from_dict(document, where=where, default_name=default_name)


def machine_to_toml(machine: Machine, header: str = "") -> str:
    """The TOML text of ``machine`` in the fitcheck.machine/1 schema."""
    return dumps(machine_to_dict(machine), header=header)


def save_target(name_or_path: str | os.PathLike[str]) -> Path:
    """Where ``probe --save`` writes: a bare name (``my-box``) goes to the user's profiles folder as
    ``my-box.toml`` (then ``--profile my-box`` finds it); anything else is a file path."""
    text = os.fspath(name_or_path)
    if is_bare_name(text):
        return profiles_dir() / f"{text.strip()}.toml"
    if not ("/" in text or os.sep in text or text.strip().lower().endswith(".toml")):
        # neither a name --profile finds nor a path it reads (load_profile): refuse, never write a file
        # in the current folder that `--profile` would then look up as an unknown name
        raise FitcheckError(f"--save {text!r}: not a profile name",
                            "a name is letters, digits and . _ + - (e.g. my-box), or give a file ending in .toml")
    return Path(text).expanduser()


def save_profile(machine: Machine, path: str | os.PathLike[str]) -> Path:
    """Write ``machine`` as a TOML profile at ``path``, or under the user's profiles folder when
    ``path`` is a bare name (the machine then takes that name); returns the path written."""
    from dataclasses import replace

    target = save_target(path)
    if is_bare_name(os.fspath(path)):
        machine = replace(machine, name=os.fspath(path).strip())
    how = "--profile NAME" if is_bare_name(os.fspath(path)) else "--profile FILE"
    header = (
        f"fitcheck hardware profile, written by `fitcheck probe --save` on {date.today().isoformat()}.\n"
        f"Schema: fitcheck.machine/1 (see hardware_profiles/README.md). Load it with {how}."
    )
    try:
        if is_bare_name(os.fspath(path)):
            target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FitcheckError(f"cannot write profile {target}: {exc.strerror or exc}") from None
    # a regular file only: /dev/null or a FIFO would take the text and keep nothing (or block)
    write_regular_file(target, machine_to_toml(machine, header=header), "profile")
    return target


def _load_user(path: Path) -> Machine:
    """A saved profile, its source the file it was read from (so printed commands say --profile NAME)."""
    from dataclasses import replace

    return replace(load_profile_file(path), source=str(path))


@lru_cache(maxsize=256)  # a shipped file does not change while fitcheck runs, and a Machine is frozen
def _load_shipped(stem: str) -> Machine:
    entry: Any = dict(_shipped_files())[stem]   # a Traversable or a Path
    where = f"{SHIPPED_LABEL}/{entry.name}"
    return read_profile_text(entry.read_text(encoding="utf-8"), where, default_name=stem)


def machines_of_kind(machines: Iterable[Machine], kind: str | None) -> list[Machine]:
    """The machines of one kind (all when ``kind`` is None)."""
    return [m for m in machines if kind is None or m.kind == kind.lower()]
