"""Catalog entries from the user's config folder: ``<config>/models/ORG/NAME/config.json``.

A Hugging Face ``config.json`` saved under the repository id it belongs to adds that model to the
catalog (``fitcheck ORG/NAME``, ``fitcheck models``, shell completion) without a fitcheck release
and without the network::

    mkdir -p ~/.config/fitcheck/models/my-org/my-model
    cp config.json ~/.config/fitcheck/models/my-org/my-model/

The config goes through the same parser as every other config.json; a file for an id the shipped
catalog already has replaces that entry's numbers and keeps its aliases.  Files are read with the
same size bound as local model files; a malformed one is one error line naming it, when used.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from fitcheck.user_config import models_dir

USER_KEY_PREFIX = "user:"
MAX_USER_MODELS = 10_000
_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")  # a Hub organisation or repository name


@dataclass(frozen=True)
class UserModel:
    hf_id: str      # 'my-org/my-model'
    path: Path      # its config.json

    @property
    def config_key(self) -> str:
        return USER_KEY_PREFIX + self.hf_id


def find_user_models(folder: Path | None = None) -> tuple[UserModel, ...]:
    """Every ``ORG/NAME/config.json`` under the models folder, sorted by id (none when it is absent)."""
    folder = models_dir() if folder is None else folder
    found: list[UserModel] = []
    try:
        orgs = sorted(p for p in folder.iterdir() if p.is_dir() and _PART.match(p.name))
    except OSError:
        return ()
    for org in orgs:
        try:
            names = sorted(p for p in org.iterdir() if p.is_dir() and _PART.match(p.name))
        except OSError:
            continue
        for name in names:
            config = name / "config.json"
            if config.is_file():
                found.append(UserModel(f"{org.name}/{name.name}", config))
            if len(found) >= MAX_USER_MODELS:
                return tuple(found)
    return tuple(found)


def file_identity(path: Path) -> tuple[str, int, int] | None:
    """(path, mtime in ns, size) of a file, what a cached read of it is keyed on; None when it cannot be
    stat'ed (then it is read, and its error reported, as without a cache)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return str(path), st.st_mtime_ns, st.st_size


# Parsed user configs kept per file identity: a listing, a lookup and an estimate each ask for the same file,
# which is read once until it changes (another mtime or size is another key).
READ_CACHE_SIZE = 256


@lru_cache(maxsize=READ_CACHE_SIZE)
def _read_identified(identity: tuple[str, int, int]) -> dict:
    from fitcheck.model.local import read_json_file

    return read_json_file(Path(identity[0]), "config.json")


def read_user_config(path: Path) -> dict:
    """The user's config.json at ``path`` (a fresh copy), read once per file identity (file_identity)."""
    identity = file_identity(path)
    if identity is None:
        from fitcheck.model.local import read_json_file

        return read_json_file(path, "config.json")
    return copy.deepcopy(_read_identified(identity))
