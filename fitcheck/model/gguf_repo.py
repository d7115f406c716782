"""GGUF repositories named as llama.cpp's ``-hf`` takes them: ``Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M``.

Offline (and without the hub extra) the name resolves to the base model at that GGUF type: the
catalog model whose official GGUF repository it is, or whose id it is without ``-GGUF``.  With
huggingface_hub installed and HF_HUB_OFFLINE unset, the file itself is read instead: its name is
found in the repository listing (``*-q4_k_m.gguf``, or the first of ``*-q4_k_m-00001-of-0000N.gguf``)
and each shard's header is fetched by HTTP range requests (huggingface_hub's ``HfFileSystem``
reads only the bytes asked for), which gives the exact tensor types and bytes.  A failed read
falls back to the offline answer and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from fitcheck.errors import FitcheckError
from fitcheck.model.catalog import load_catalog
from fitcheck.model.spec import ModelSpec

# The GGUF types fitcheck estimates, as Ollama tags and `repo:QUANT` names spell them -> fitcheck's precisions.
QUANTS = {"q8_0": "q8_0", "q6_k": "q6_k", "q5_k_m": "q5_k_m", "q4_k_m": "q4_k_m", "q4_0": "q4_0",
          "q3_k_m": "q3_k_m", "q2_k": "q2_k", "fp16": "fp16", "f16": "fp16", "bf16": "bf16", "fp32": "fp32"}
_NAME = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+):(?P<quant>[A-Za-z0-9_]+)$")
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
HEADER_READS = (1 << 21, 1 << 23, 1 << 25, 1 << 26)   # bytes tried in turn: 2, 8, 32, 64 MiB
MAX_SHARDS = 64


@dataclass(frozen=True)
class GGUFRepoName:
    repo: str
    quant: str       # as typed, e.g. 'Q4_K_M'

    @property
    def text(self) -> str:
        return f"{self.repo}:{self.quant}"


def parse_name(text: str) -> GGUFRepoName | None:
    """``org/repo:QUANT`` (also as Ollama writes a Hub pull: ``hf.co/org/repo:QUANT``), else None."""
    text = re.sub(r"^(https?://)?(hf\.co|huggingface\.co)/", "", text.strip())
    m = _NAME.match(text)
    return GGUFRepoName(m.group("repo"), m.group("quant")) if m else None


def precision_of(name: GGUFRepoName) -> str:
    key = name.quant.lower()
    if key in QUANTS:
        return QUANTS[key]
    raise FitcheckError(f"{name.text}: fitcheck does not estimate the GGUF type {name.quant.upper()}",
                        "use one of: " + ", ".join(sorted({q.upper() for q in QUANTS})))


def base_entry(repo: str):
    """The catalog entry a GGUF repository is a build of, or None."""
    catalog = load_catalog()
    for e in catalog.entries:
        if e.quantized_repos.get("gguf", "").lower() == repo.lower():
            return e
    base = re.sub(r"[-_]gguf$", "", repo, flags=re.IGNORECASE)
    exact = catalog.get(base)
    if exact is not None:
        return exact
    name = base.rsplit("/", 1)[-1].lower()
    named = [e for e in catalog.entries if e.name.lower() == name]
    return named[0] if len(named) == 1 else None


def files_for(files: list[str], quant: str) -> list[str]:
    """The GGUF file (or its shards, in order) of this type in a repository listing."""
    token = re.compile(rf"(^|[-_.]){re.escape(quant.lower())}([-_.]|$)")
    found = sorted(f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower()
                   and token.search(f.rsplit("/", 1)[-1].lower().removesuffix(".gguf")))
    if not found:
        return []
    first = found[0]
    m = _SPLIT.search(first)
    if m is None:
        return [first]
    stem = first[: m.start()]
    count = int(m.group(2))
    if not 1 <= count <= MAX_SHARDS:
        raise FitcheckError(f"{first}: {count} shards is more than fitcheck reads")
    shards = [f"{stem}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    missing = [s for s in shards if s not in files]
    if missing:
        raise FitcheckError(f"{first}: shard {missing[0]} is not in the repository")
    return shards


class GGUFRepoClient(Protocol):
    """The Hub reads a GGUF repository needs: the file list, a file's size, a byte range."""

    def list_files(self, repo: str, revision: str | None) -> list[str]: ...

    def size(self, repo: str, path: str, revision: str | None) -> int: ...

    def read(self, repo: str, path: str, revision: str | None, length: int) -> bytes: ...


class HfFileSystemClient:
    """:class:`GGUFRepoClient` over huggingface_hub (HfApi listing, HfFileSystem range reads)."""

    def __init__(self) -> None:
        import huggingface_hub  # ImportError: the caller falls back to the offline answer

        self._hub = huggingface_hub
        self._fs = huggingface_hub.HfFileSystem()

    def list_files(self, repo: str, revision: str | None) -> list[str]:
        return list(self._hub.HfApi().list_repo_files(repo, revision=revision))

    def size(self, repo: str, path: str, revision: str | None) -> int:
        return int(self._fs.info(f"{repo}/{path}", revision=revision)["size"])

    def read(self, repo: str, path: str, revision: str | None, length: int) -> bytes:
        with self._fs.open(f"{repo}/{path}", "rb", revision=revision, block_size=length) as fh:
            return fh.read(length)


def read_remote_header(client: GGUFRepoClient, repo: str, path: str, revision: str | None):
    """The GGUF header of one remote file, read with as few bytes as parse: 2 MiB, then more."""
    from fitcheck.model import gguf_header

    size = client.size(repo, path, revision)
    error: FitcheckError | None = None
    for length in HEADER_READS:
        data = client.read(repo, path, revision, min(length, size))
        try:
            header = gguf_header.parse_header(data, source=f"{repo}/{path}")
        except FitcheckError as exc:     # truncated: a longer read may hold the whole header
            error = exc
            if length >= size:
                break
            continue
        gguf_header.check_tensor_extents(header, size)
        return header
    assert error is not None
    raise error


def spec_from_repo(name: GGUFRepoName, client: GGUFRepoClient, revision: str | None = None) -> ModelSpec:
    """The spec read from the repository's file of that type (headers by range requests)."""
    from fitcheck.model import gguf_spec

    files = files_for(client.list_files(name.repo, revision), name.quant)
    if not files:
        raise FitcheckError(f"{name.repo} has no {name.quant.upper()} .gguf file",
                            "check the type in the repository's file list")
    headers = [read_remote_header(client, name.repo, f, revision) for f in files]
    return gguf_spec.spec_from_gguf(headers, name.repo)


def offline_spec(name: GGUFRepoName) -> tuple[ModelSpec, object]:
    """(spec, entry) of the base catalog model stored as the repository's type."""
    entry = base_entry(name.repo)
    if entry is None:
        raise FitcheckError(f"unknown GGUF repository {name.repo!r}: no catalog model is its base",
                            "with the hub extra and a network fitcheck reads the file's header; "
                            "or point at a downloaded .gguf file")
    return entry.spec.as_stored(precision_of(name)), entry
