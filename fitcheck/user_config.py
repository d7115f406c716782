"""Where a user's own fitcheck files live: saved hardware profiles and extra catalog models.

The folder (nothing in it is required; fitcheck never writes there unless asked)::

    <config>/profiles/NAME.toml              # `fitcheck probe --save NAME` writes these; --profile NAME
                                             # and `fitcheck profiles` find them
    <config>/models/ORG/NAME/config.json     # a Hugging Face config.json: `fitcheck ORG/NAME` and
                                             # `fitcheck models` know the model without a release

``<config>`` is, in order:

* ``$FITCHECK_CONFIG_DIR`` when set (one folder for tests, CI caches or several setups);
* Linux and other Unix: ``$XDG_CONFIG_HOME/fitcheck``, else ``~/.config/fitcheck``
  (the XDG Base Directory specification);
* macOS: ``~/Library/Application Support/fitcheck`` (``$XDG_CONFIG_HOME/fitcheck`` when that is set);
* Windows: ``%APPDATA%\\fitcheck`` (the roaming profile), else ``~\\AppData\\Roaming\\fitcheck``.

What fitcheck measured itself (``fitcheck probe --bench``'s RAM bandwidth) goes to the user's cache,
:func:`cache_dir`: ``$FITCHECK_CACHE_DIR``, else ``$XDG_CACHE_HOME/fitcheck``, else ``~/.cache/fitcheck``.

Pure path arithmetic over an environment mapping and a platform name, so tests pass both.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

APP = "fitcheck"
ENV_DIR = "FITCHECK_CONFIG_DIR"
PROFILES = "profiles"
MODELS = "models"
# a bare profile name `probe --save NAME` accepts: a file stem, no folders, no leading dot
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")


def config_dir(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    """The user's fitcheck folder (it may not exist)."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if env.get(ENV_DIR):
        return Path(env[ENV_DIR]).expanduser()
    home = Path(env.get("HOME") or env.get("USERPROFILE") or Path.home())
    if platform.startswith("win"):
        appdata = env.get("APPDATA")
        return (Path(appdata) if appdata else home / "AppData" / "Roaming") / APP
    xdg = env.get("XDG_CONFIG_HOME")
    if xdg and Path(xdg).is_absolute():  # the spec: a relative value is invalid and ignored
        return Path(xdg) / APP
    if platform == "darwin":
        return home / "Library" / "Application Support" / APP
    return home / ".config" / APP


# The variables that name a folder fitcheck reads or writes: its own caches, the user's config, the stores and
# caches of the engines, the active Python environment.
PATH_VARIABLES = ("HOME", "USERPROFILE", "APPDATA", "LOCALAPPDATA", "XDG_CACHE_HOME", "XDG_CONFIG_HOME",
                  "FITCHECK_CACHE_DIR", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "LLAMA_CACHE",
                  "OLLAMA_MODELS", "VIRTUAL_ENV", "CONDA_PREFIX")


def check_path_variables(env: Mapping[str, str] | None = None) -> None:
    """FitcheckError (bad input, one line) for a PATH_VARIABLES value no system call could take (over
    PATH_MAX, a name over NAME_MAX, a NUL): checked once at the edge, before any reader meets it."""
    from fitcheck.bounded import checked_path

    env = os.environ if env is None else env
    for var in PATH_VARIABLES:
        if env.get(var):
            checked_path(env[var], f"${var}")


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The user's fitcheck cache folder (it may not exist): what fitcheck measured on this machine."""
    env = os.environ if env is None else env
    if env.get("FITCHECK_CACHE_DIR"):
        return Path(env["FITCHECK_CACHE_DIR"]).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else \
        Path(env.get("HOME") or env.get("USERPROFILE") or Path.home()) / ".cache"
    return base / APP


def profiles_dir(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    return config_dir(env, platform) / PROFILES


def models_dir(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    return config_dir(env, platform) / MODELS


def is_bare_name(text: str) -> bool:
    """True for a profile name (``my-box``), False for a path (``my-box.toml``, ``./x``, ``a/b``)."""
    text = text.strip()
    return bool(_NAME.match(text)) and not text.lower().endswith(".toml") and os.sep not in text and "/" not in text


def user_profile_files() -> dict[str, Path]:
    """Stem (lower case) -> the user's saved profile file, sorted by stem."""
    folder = profiles_dir()
    try:
        files = [p for p in folder.iterdir() if p.suffix.lower() == ".toml" and p.is_file()]
    except OSError:  # no folder (the usual case), or unreadable
        return {}
    return {p.stem.lower(): p for p in sorted(files, key=lambda p: p.name.lower())}
