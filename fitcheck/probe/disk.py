"""Free disk space where models would be downloaded, and the copies already downloaded (the I/O
edge of fitcheck.engines.download)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from fitcheck.errors import FitcheckError
from fitcheck.machine import Disk, Unknown
from fitcheck.storage import DOWNLOAD_DIR, HF_CACHE, LLAMA_CPP, OLLAMA, OUTPUT, Place, Storage, lookups, profile_storage


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
    path = nearest_existing(hub_cache_dir(env, os.path.expanduser("~")))
    try:
        usage = shutil.disk_usage(path)
    except OSError as exc:
        reason = f"disk usage of {path} not readable: {exc.strerror or exc}"
        return Disk(path, Unknown(reason), Unknown(reason))
    return Disk(path, usage.free, usage.total)


# ---- where a download lands, and what is already here (check, plan files, interactive) -------------
MAX_ENTRIES = 2000      # names listed per folder: a cache folder, never a walk of the disk
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.(safetensors|bin)$")
_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "consolidated.safetensors")
_GGUF_QUANT = re.compile(r"(?:^|[^a-z0-9])(q8_0|q6_k|q5_k_m|q4_k_m|q4_0|q3_k_m|q2_k)(?=[^a-z0-9_]|$)")


def hub_cache_dir(env: Mapping[str, str], home: str) -> str:
    """huggingface_hub's cache: HF_HUB_CACHE (or its older name HUGGINGFACE_HUB_CACHE), else HF_HOME/hub,
    else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (huggingface_hub/constants.py:
    HF_HOME = HF_HOME or XDG_CACHE_HOME/huggingface; HF_HUB_CACHE = HF_HUB_CACHE or HUGGINGFACE_HUB_CACHE
    or HF_HOME/hub)."""
    if env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE"):
        return os.path.expanduser(env.get("HF_HUB_CACHE") or env["HUGGINGFACE_HUB_CACHE"])
    return model_cache_dir(env, home)


def llama_cpp_cache_dir(env: Mapping[str, str], home: str) -> str:
    """llama.cpp's -hf download folder: LLAMA_CACHE, else the OS cache folder (common's fs_get_cache_directory:
    XDG_CACHE_HOME or ~/.cache on Linux, ~/Library/Caches on macOS, LOCALAPPDATA on Windows) + llama.cpp."""
    if env.get("LLAMA_CACHE"):
        return os.path.expanduser(env["LLAMA_CACHE"])
    if sys.platform == "darwin":
        return os.path.join(home, "Library", "Caches", "llama.cpp")
    if os.name == "nt" and env.get("LOCALAPPDATA"):
        return os.path.join(env["LOCALAPPDATA"], "llama.cpp")
    return os.path.join(os.path.expanduser(env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")), "llama.cpp")


def ollama_store_dir(env: Mapping[str, str], home: str) -> str:
    """Ollama's model store: OLLAMA_MODELS, else ~/.ollama/models."""
    return os.path.expanduser(env.get("OLLAMA_MODELS") or os.path.join(home, ".ollama", "models"))


def read_place(kind: str, path: str):
    """The free space of the disk ``path`` would be written to (its nearest existing folder)."""
    path = os.path.abspath(os.path.expanduser(path))
    near = nearest_existing(path)
    try:
        usage = shutil.disk_usage(near)
        disk_id = str(os.stat(near).st_dev)
    except OSError as exc:
        return Place(kind, path, None, "", f"disk usage of {near} not readable: {exc.strerror or exc}")
    return Place(kind, path, int(usage.free), disk_id)


def check_download_dir(path: str) -> None:
    """Refuse (FitcheckError, exit 2) a ``--download-dir`` that is not a folder a download could be written to:
    a file, FIFO or device, a folder this user cannot write, a read-only mount, or a filesystem with no blocks
    (``/proc``, ``/sys``).  A folder that does not exist yet is judged by its nearest existing folder."""
    import stat

    full = os.path.abspath(os.path.expanduser(path))
    near = nearest_existing(full)
    what = f"--download-dir {path}"
    try:
        mode = os.stat(near).st_mode
        fs = os.statvfs(near)
    except OSError as exc:
        raise FitcheckError(f"{what}: cannot read it: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(mode):
        kind = "a file" if stat.S_ISREG(mode) else "not a folder (a pipe, socket or device)"
        raise FitcheckError(f"{what}: {kind}" + (f" ({near})" if near != full else ""),
                            "give a folder on a disk with room")
    if fs.f_blocks == 0:
        raise FitcheckError(f"{what}: not on a disk ({near} is on a filesystem with no blocks)",
                            "give a folder on a disk with room")
    if fs.f_flag & getattr(os, "ST_RDONLY", 1) or not os.access(near, os.W_OK | os.X_OK):
        raise FitcheckError(f"{what}: {near} is not writable here", "give a folder you can write to")


def _names(folder: str) -> list[str]:
    """Up to MAX_ENTRIES names in ``folder`` ([] when it is not a readable folder)."""
    out: list[str] = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                out.append(entry.name)
                if len(out) >= MAX_ENTRIES:
                    break
    except OSError:
        return []
    return out


def has_weights(snapshot: str) -> bool:
    """A Hugging Face snapshot holding the weights, not only config.json: a single weights file, or every
    shard of a sharded checkpoint (a snapshot links a file only once its download completed)."""
    names = _names(snapshot)
    if any(n in names for n in _WEIGHTS):
        return True
    shards: dict[str, set[str]] = {}
    for n in names:
        m = _SHARD.search(n)
        if m:
            shards.setdefault(m.group(2), set()).add(m.group(1))
    return any(len(found) >= int(total) for total, found in shards.items())


def _gguf_quants(names: list[str]) -> set[str]:
    return {m.group(1).upper() for n in names if n.lower().endswith(".gguf")
            for m in [_GGUF_QUANT.search(n.lower())] if m}


def read_storage(model, query: str, download_dir: str | None, machine, env: Mapping[str, str] | None = None):
    """The places a download for ``model`` lands in and their free space, and its copies already here.

    This machine only; a hardware profile gets its ``[disk]`` (fitcheck.storage.profile_storage).
    Bounded: one disk_usage per place, a few stats per repository, one listing of llama.cpp's cache."""
    if machine.source != "probe":
        return profile_storage(machine)
    env = os.environ if env is None else env
    home = os.path.expanduser("~")
    hub = hub_cache_dir(env, home)
    llama = llama_cpp_cache_dir(env, home)
    places = [read_place(HF_CACHE, hub), read_place(LLAMA_CPP, llama), read_place(OLLAMA, ollama_store_dir(env, home)),
              read_place(OUTPUT, os.getcwd())]
    if download_dir:
        check_download_dir(download_dir)
        places.append(read_place(DOWNLOAD_DIR, download_dir))
    present: list[tuple[str, str]] = []
    if model.source == "local":
        present.append(("own", os.path.abspath(os.path.expanduser(query))))
    elif model.source == "ollama":
        from fitcheck.model import ollama

        name = ollama.parse_name(model.hf_id or "")
        if name is not None:
            manifest = ollama.manifest_path(name, Path(ollama_store_dir(env, home)))
            blob = ollama.model_blob(manifest, Path(ollama_store_dir(env, home))) if manifest.is_file() else None
            if blob is not None:
                present.append((f"ollama:{model.hf_id}", str(blob)))
    hf_repos, gguf_repos = lookups(model)
    from fitcheck.model import hf_cache

    for repo in hf_repos:
        cached = hf_cache.cached_repo(repo, cache=Path(hub))
        if cached is not None and has_weights(str(cached.snapshot)):
            present.append((f"hf:{repo}", str(cached.snapshot)))
    if gguf_repos:
        llama_names = _names(llama)
        for repo in gguf_repos:
            prefix = repo.replace("/", "_").lower() + "_"
            for n in sorted(n for n in llama_names if n.lower().startswith(prefix)):
                for quant in _gguf_quants([n]):
                    present.append((f"gguf:{repo}:{quant}", os.path.join(llama, n)))
            cached = hf_cache.cached_repo(repo, cache=Path(hub))
            if cached is not None:
                names = _names(str(cached.snapshot))
                names += [f"{d}/{n}" for d in names if "." not in d for n in _names(str(cached.snapshot / d))]
                for quant in sorted(_gguf_quants(names)):
                    present.append((f"gguf:{repo}:{quant}", str(cached.snapshot)))
    return Storage(places=tuple(places), present=tuple(present), looked=True)


def storage_for(model, query: str, download_dir: str | None, machine, env: Mapping[str, str] | None = None):
    """:func:`read_storage`, or an unknown storage saying why when reading failed (raises only for a
    ``--download-dir`` that is not a writable folder: bad input)."""
    try:
        return read_storage(model, query, download_dir, machine, env)
    except FitcheckError:
        raise
    except Exception as exc:  # an exotic file system: the disk is unknown, the answer still comes
        return Storage(unknown_reason=f"free disk not read: {type(exc).__name__}: {exc}")
