"""Builders of the on-disk layouts models come from, in a temporary folder, from recorded fixtures:
a Hugging Face Hub cache tree (refs, snapshots linking into blobs), an Ollama store (manifests and
blobs without suffix)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from tests.model.filegen import gguf_llama, write_gguf, write_safetensors

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
COMMIT = "9213176726f574b556790deb65791e0c5aa438b6"


def _link(target: Path, link: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.symlink(os.path.relpath(target, link.parent), link)
    except OSError:  # no symlinks (Windows without privilege): huggingface_hub copies then
        shutil.copyfile(target, link)


def hub_cache(root: Path, repo_id: str, fixture: str, *, commit: str = COMMIT, ref: str = "main",
              weights: bool = True) -> Path:
    """``root/models--org--name`` as huggingface_hub writes it, from tests/fixtures/hub/<fixture>:
    refs/<ref> holding the commit, snapshots/<commit>/<file> linking to blobs/<sha256>."""
    folder = root / ("models--" + repo_id.replace("/", "--"))
    blobs = folder / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / ref).write_text(commit)
    snap = folder / "snapshots" / commit
    config = (FIXTURES / "hub" / fixture / "config.json").read_bytes()
    blob = blobs / hashlib.sha256(config).hexdigest()
    blob.write_bytes(config)
    _link(blob, snap / "config.json")
    if weights:
        meta = json.loads((FIXTURES / "hub" / fixture / "safetensors-metadata.json").read_text())
        for filename, header in meta.items():
            tensors = {n: (t["dtype"], t["shape"]) for n, t in header.items() if n != "__metadata__"}
            tmp = blobs / "tmp"
            write_safetensors(tmp, tensors, header.get("__metadata__"))
            blob = blobs / hashlib.sha256(filename.encode() + commit.encode()).hexdigest()
            tmp.rename(blob)
            _link(blob, snap / filename)
    return folder


def ollama_store(root: Path, model: str = "llama3.1", tag: str = "8b", **gguf_kw) -> tuple[Path, Path]:
    """An Ollama store with one pulled model: the recorded manifest, and a small GGUF as its model
    blob (named by the manifest's digest).  Returns (store, blob)."""
    manifest = json.loads((FIXTURES / "ollama" / "manifest-llama3.1-8b.json").read_text())
    path = root / "manifests" / "registry.ollama.ai" / "library" / model / tag
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest))
    layer = next(x for x in manifest["layers"] if x["mediaType"] == "application/vnd.ollama.image.model")
    blob = root / "blobs" / layer["digest"].replace(":", "-")
    blob.parent.mkdir(parents=True)
    meta, tensors = gguf_llama(**gguf_kw)
    write_gguf(blob, meta, tensors)
    return root, blob
