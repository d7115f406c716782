"""Models already in the local Hugging Face cache, read offline and without the hub extra.

The layout is huggingface_hub's (https://huggingface.co/docs/hub/local-cache)::

    <cache>/models--<org>--<name>/refs/<branch or tag>    # a file holding the commit hash
    <cache>/models--<org>--<name>/snapshots/<commit>/...  # the files (links into ../../blobs)
    <cache>/models--<org>--<name>/blobs/<etag>

``<cache>`` is ``HF_HUB_CACHE`` (or the older ``HUGGINGFACE_HUB_CACHE``), else ``HF_HOME/hub``,
else ``XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``.  A snapshot with only
config.json (``AutoConfig.from_pretrained``) is enough; with safetensors files their headers give
the exact stored bytes and format (:func:`fitcheck.model.local.spec_from_path`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from fitcheck.errors import FitcheckError
from fitcheck.model.spec import ModelSpec

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_REPO_FOLDER = re.compile(r"^models--(?P<id>[^/\\]+)$")
# A Hub repository id: an optional owner and a name, each of letters, digits, '-', '_' and '.', not '.' or '..'
_REPO_ID = re.compile(r"^(?:(?!\.\.?/)[A-Za-z0-9_.-]{1,96}/)?(?!\.\.?$)[A-Za-z0-9_.-]{1,96}$")
# Longest --revision read (a branch or tag name; a commit is 40): a longer one is no ref the Hub serves.
MAX_REVISION_CHARS = 255
_MAX_REF_BYTES = 256
_MODEL_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json")


def hub_cache_dir() -> Path:
    """Where huggingface_hub keeps downloaded repositories (its own precedence of variables)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(base).expanduser() / "huggingface" / "hub"


def repo_folder_name(repo_id: str) -> str:
    """'Qwen/Qwen2.5-7B' -> 'models--Qwen--Qwen2.5-7B' (huggingface_hub's repo_folder_name)."""
    return "models--" + repo_id.replace("/", "--")


def repo_id_from_folder(folder: str | os.PathLike) -> str | None:
    """'models--Qwen--Qwen2.5-7B' -> 'Qwen/Qwen2.5-7B'; None for another name."""
    m = _REPO_FOLDER.match(Path(folder).name)
    if not m:
        return None
    repo_id = m.group("id").replace("--", "/")
    return repo_id if _REPO_ID.match(repo_id) else None  # 'models--..--..' names no repository


@dataclass(frozen=True)
class CachedRepo:
    repo_id: str
    folder: Path
    snapshot: Path
    commit: str
    ref: str | None          # the ref that named it ('main'), None when named by commit or chosen


def _read_ref(path: Path) -> str | None:
    from fitcheck.bounded import open_regular_file

    try:
        with open_regular_file(path, "a cache ref") as fh:  # a FIFO is refused, never waited on
            text = fh.read(_MAX_REF_BYTES).decode("ascii", "replace").strip()
    except (OSError, FitcheckError):
        return None
    return text if _COMMIT.match(text) else None


def find_snapshot(folder: Path, repo_id: str, revision: str | None = None) -> CachedRepo | None:
    """The snapshot of a ``models--org--name`` folder for ``revision`` (default: refs/main, else the
    most recently written snapshot); None when the folder holds none for it."""
    snapshots = folder / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = revision or "main"
    if len(ref) > MAX_REVISION_CHARS:
        raise FitcheckError(f"--revision of {len(ref):,} characters is not a branch, tag or commit",
                            f"a revision is at most {MAX_REVISION_CHARS} characters")
    if ".." in Path(ref).parts or os.path.isabs(ref):
        raise FitcheckError(f"--revision {ref!r} is not a branch, tag or commit")
    commit = _read_ref(folder / "refs" / ref)
    if commit and (snapshots / commit).is_dir():
        return CachedRepo(repo_id, folder, snapshots / commit, commit, ref)
    if revision and (snapshots / revision).is_dir():
        return CachedRepo(repo_id, folder, snapshots / revision, revision, None)
    if revision:
        return None
    found = [p for p in snapshots.iterdir() if p.is_dir() and any((p / f).exists() for f in _MODEL_FILES)]
    if not found:
        return None
    newest = max(found, key=lambda p: p.stat().st_mtime)
    return CachedRepo(repo_id, folder, newest, newest.name, None)


def cached_repo(repo_id: str, revision: str | None = None, cache: Path | None = None) -> CachedRepo | None:
    """The cached snapshot of ``repo_id`` (in ``cache``, default :func:`hub_cache_dir`), or None."""
    folder = (cache or hub_cache_dir()) / repo_folder_name(repo_id)
    if not folder.is_dir():
        return None
    return find_snapshot(folder, repo_id, revision)


def spec_from_cached(repo: CachedRepo) -> ModelSpec:
    """The spec of a cached snapshot, named by its repo id (not the snapshot hash)."""
    from fitcheck.model.local import spec_from_path

    spec = spec_from_path(repo.snapshot)
    return replace(spec, name=repo.repo_id)


def describe(repo: CachedRepo) -> str:
    how = f"refs/{repo.ref}" if repo.ref else "the newest cached snapshot"
    return (f"{repo.repo_id} → read from the local Hugging Face cache ({repo.folder.parent}, {how}, "
            f"snapshot {repo.commit[:8]})")


def cached_models(cache: Path | None = None) -> list[CachedRepo]:
    """Every model repository with a usable snapshot in the cache (for `fitcheck models --local`)."""
    root = cache or hub_cache_dir()
    if not root.is_dir():
        return []
    out = []
    inside = root.resolve()
    for folder in sorted(root.iterdir()):
        repo_id = repo_id_from_folder(folder)
        if repo_id and folder.is_dir() and folder.resolve().parent == inside:  # a link out of the cache: not its
            repo = find_snapshot(folder, repo_id)
            if repo is not None:
                out.append(repo)
    return out
