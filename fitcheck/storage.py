"""Where downloads and saves land on a machine, and the free space there: what fitcheck.probe.disk reads of this
machine (or a hardware profile's ``[disk]`` gives), for fitcheck.engines.download to judge a download against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Where files land (Place.kind).
HF_CACHE = "hf-cache"
LLAMA_CPP = "llama.cpp"
OLLAMA = "ollama"
DOWNLOAD_DIR = "download-dir"
OUTPUT = "output"
PLACE_KINDS = (HF_CACHE, LLAMA_CPP, OLLAMA, DOWNLOAD_DIR, OUTPUT)
PLACE_WORDS = {HF_CACHE: "the Hugging Face cache", LLAMA_CPP: "llama.cpp's cache", OLLAMA: "the Ollama store",
               DOWNLOAD_DIR: "--download-dir", OUTPUT: "the output folder"}
# The variable each engine reads for its download folder (what --download-dir asks the user to set).
PLACE_VARIABLE = {HF_CACHE: "HF_HUB_CACHE", LLAMA_CPP: "LLAMA_CACHE", OLLAMA: "OLLAMA_MODELS"}

PROFILE_DISK = "profile"   # Place.disk_id of a hardware profile's one [disk]


@dataclass(frozen=True)
class Place:
    """A folder files land in, and the free space of the disk holding it (None: unknown)."""

    kind: str                 # one of PLACE_KINDS
    path: str
    free_bytes: int | None
    disk_id: str = ""         # places with the same id share one file system (and its free space)
    why_unknown: str = ""


@dataclass(frozen=True)
class Storage:
    """The places downloads and saves land in, and the copies already on this machine."""

    places: tuple[Place, ...] = ()
    present: tuple[tuple[str, str], ...] = ()   # (Artifact.key, where it is)
    looked: bool = False      # whether this machine was searched for copies already downloaded
    unknown_reason: str = ""  # no disk known: why (a hardware profile without [disk])

    def place(self, kind: str) -> Place | None:
        return next((p for p in self.places if p.kind == kind), None)

    def where_present(self, key: str) -> str | None:
        return next((where for k, where in self.present if k == key), None) if key else None


def profile_storage(machine: Any) -> Storage:
    """A hardware profile's storage: its ``[disk]`` for every place (nothing is on it yet), or unknown."""
    disk = getattr(machine, "disk", None)
    free = getattr(disk, "free_bytes", None)
    if disk is None or not isinstance(free, int):
        why = f"{disk.free_bytes}" if disk is not None else f"the profile {machine.name} has no [disk]"
        return Storage(unknown_reason=f"free disk not checked: {why}")
    path = disk.path or f"the {machine.name} disk"
    return Storage(places=tuple(Place(k, path, free, PROFILE_DISK) for k in PLACE_KINDS))


def lookups(model: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(Hugging Face repositories, GGUF repositories) a plan for ``model`` may download: where the edge
    looks for copies already here."""
    entry = getattr(model, "entry", None)
    repos = dict(getattr(entry, "quantized_repos", None) or {}) if entry is not None else {}
    hf_id = model.hf_id or ""
    hf = [r for k, r in repos.items() if k != "gguf"]
    gguf = [repos["gguf"]] if "gguf" in repos else []
    if ":" in hf_id:
        gguf.append(hf_id.partition(":")[0])
    elif hf_id and model.source in ("catalog", "hub", "hf-cache"):
        hf.insert(0, hf_id)
    if entry is not None and getattr(entry, "hf_id", None) and entry.hf_id not in hf:
        hf.append(entry.hf_id)
    return tuple(dict.fromkeys(hf)), tuple(dict.fromkeys(gguf))
