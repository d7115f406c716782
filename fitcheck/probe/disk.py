"""Free disk space where Hugging Face models would be downloaded."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

from fitcheck.machine import Disk, Unknown


def model_cache_dir(env: Mapping[str, str], home: str) -> str:
    """The hub cache folder huggingface_hub uses: HF_HUB_CACHE, else HF_HOME/hub, else
    $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub
    (https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables)."""
    if env.get("HF_HUB_CACHE"):
        return os.path.expanduser(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return os.path.join(os.path.expanduser(env["HF_HOME"]), "hub")
    cache = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(os.path.expanduser(cache), "huggingface", "hub")


def nearest_existing(path: str) -> str:
    """``path`` or its nearest ancestor that exists (the disk a download would land on)."""
    current = os.path.abspath(path)
    while not os.path.exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def read_disk(env: Mapping[str, str]) -> Disk:
    """Free and total bytes on the disk holding the model cache."""
    path = nearest_existing(model_cache_dir(env, os.path.expanduser("~")))
    try:
        usage = shutil.disk_usage(path)
    except OSError as exc:
        reason = f"disk usage of {path} not readable: {exc.strerror or exc}"
        return Disk(path, Unknown(reason), Unknown(reason))
    return Disk(path, usage.free, usage.total)
