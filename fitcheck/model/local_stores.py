"""Models already on this machine, for `fitcheck models --local`: the Hugging Face cache, the Ollama
store, LM Studio's and llama.cpp's model folders.  Only names and headers are read.

Where each keeps them:

* Hugging Face: :func:`fitcheck.model.hf_cache.hub_cache_dir` (``models--org--name``).
* Ollama: ``OLLAMA_MODELS`` or ``~/.ollama/models`` (``manifests/<registry>/<namespace>/<model>/<tag>``).
* LM Studio: ``~/.lmstudio/models/<publisher>/<model>/*.gguf`` (and the older
  ``~/.cache/lm-studio/models``), LM Studio's documented default models folder.
* llama.cpp (``-hf`` downloads): ``LLAMA_CACHE``, else ``XDG_CACHE_HOME/llama.cpp`` or
  ``~/.cache/llama.cpp`` (``~/Library/Caches/llama.cpp`` on macOS; common's fs_get_cache_directory),
  flat ``*.gguf`` files; newer builds write the Hugging Face cache layout, found above.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fitcheck.model.local import _GGUF_SPLIT_RE

MAX_FILES = 2000        # per folder walked: a models folder, not a whole disk


@dataclass(frozen=True)
class LocalModel:
    name: str            # what `fitcheck NAME` takes: a repo id, an Ollama name or a path
    source: str          # hf-cache | ollama | lm-studio | llama.cpp
    where: str           # the folder or file


def lm_studio_dirs() -> list[Path]:
    home = Path("~").expanduser()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def llama_cpp_dir() -> Path:
    """llama.cpp's -hf download folder (fitcheck.probe.disk.llama_cpp_cache_dir), where its GGUF files are."""
    from fitcheck.probe.disk import llama_cpp_cache_dir

    return Path(llama_cpp_cache_dir(os.environ, os.path.expanduser("~")))


def _ggufs(root: Path, depth: int) -> list[Path]:
    """Model .gguf files under root (first shard of a split file only; no mmproj projectors)."""
    found: list[Path] = []
    if not root.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(root):
        if len(Path(dirpath).relative_to(root).parts) >= depth:
            dirnames[:] = []
        for f in sorted(filenames):
            lower = f.lower()
            if not lower.endswith(".gguf") or lower.startswith("mmproj") or "mmproj" in lower:
                continue
            m = _GGUF_SPLIT_RE.match(f)
            if m and int(m.group("no")) != 1:
                continue
            found.append(Path(dirpath) / f)
            if len(found) >= MAX_FILES:
                return found
    return sorted(found)


def ollama_models(store: Path | None = None) -> list[LocalModel]:
    from fitcheck.model.ollama import DEFAULT_REGISTRY, store_dir

    root = (store or store_dir()) / "manifests"
    out: list[LocalModel] = []
    if not root.is_dir():
        return out
    for manifest in sorted(root.glob("*/*/*/*"))[:MAX_FILES]:
        if not manifest.is_file():
            continue
        registry, namespace, model, tag = manifest.relative_to(root).parts
        if registry == DEFAULT_REGISTRY:
            name = (f"{namespace}/" if namespace != "library" else "") + f"{model}:{tag}"
        else:
            continue     # hf.co/... pulls: their GGUF is listed by the Hub cache or LM Studio instead
        out.append(LocalModel(name, "ollama", str(manifest)))
    return out


def discover() -> list[LocalModel]:
    """Every local model fitcheck can read, in the order above."""
    from fitcheck.model import hf_cache

    found = [LocalModel(r.repo_id, "hf-cache", str(r.snapshot)) for r in hf_cache.cached_models()]
    found += ollama_models()
    for root in lm_studio_dirs():
        found += [LocalModel(str(p), "lm-studio", str(p)) for p in _ggufs(root, 3)]
    found += [LocalModel(str(p), "llama.cpp", str(p)) for p in _ggufs(llama_cpp_dir(), 1)]
    return found
