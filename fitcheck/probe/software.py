"""The installed Python stack, from package metadata only: never importing it, starting no process.

Which environments are read (first listed wins when a package is in several):

1. each ``--python-env PATH`` (a venv or conda prefix, or a site-packages folder itself),
2. ``$VIRTUAL_ENV`` and ``$CONDA_PREFIX`` (the active environment: a pipx-installed fitcheck then
   sees the project's torch),
3. fitcheck's own environment (``sysconfig``'s purelib and platlib).

In each, ``*.dist-info`` folders (and ``*.egg-info``) give the name and version; torch's build comes
from its local version (``2.5.1+cu124``, ``+rocm6.2``, ``+cpu``), else from its ``Requires-Dist`` on
``nvidia-cuda-runtime-cu12==12.4.127`` (the Linux wheels on PyPI), else from a conda package record
(``conda-meta/pytorch-2.5.1-py3.11_cuda12.4_cudnn9.1.0_0.json``: the file name only).  Reads are
bounded (a METADATA file's first 256 KiB, at most 5,000 entries per folder).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fitcheck.errors import FitcheckError, redact_credentials

# The packages fitcheck reports and checks (PEP 503 normalised names).
WATCHED = ("torch", "vllm", "bitsandbytes", "flash-attn", "llama-cpp-python", "transformers", "peft",
           "accelerate", "deepspeed", "autoawq", "auto-gptq", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11")
MAX_METADATA_BYTES = 256 * 1024
MAX_ENTRIES = 5000

_DIST_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._]*?)-(?P<version>[0-9][^-]*?)(?:-py[0-9.]+)?\.(?:dist|egg)-info$")
# Build tags as the PyTorch indexes name them; a version past two digits (cu999999999) is no real build.
_CUDA_LOCAL = re.compile(r"^cu(\d{1,2})(\d)$")          # cu124 -> 12.4, cu118 -> 11.8
_ROCM_LOCAL = re.compile(r"^rocm(\d{1,2}(?:\.\d{1,3}){0,3})$")
_CUDA_REQ = re.compile(r"^nvidia-cuda-runtime-cu(\d{1,2})\s*==\s*(\d{1,2})\.(\d{1,3})(?!\d)", re.I)
_CONDA_TORCH = re.compile(r"^pytorch-(?P<version>[0-9][^-]*)-(?P<build>[^-]+)\.json$")
_CONDA_CUDA = re.compile(r"cuda(\d{1,2})\.?(\d)(?!\d)")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Package:
    name: str                       # normalised: 'torch', 'flash-attn'
    version: str                    # as installed: '2.5.1+cu124'
    location: str                   # the site-packages folder it was found in
    requires: tuple[str, ...] = ()  # Requires-Dist lines (torch's, vllm's)


@dataclass(frozen=True)
class TorchBuild:
    version: str                    # '2.5.1' (no local part)
    backend: str                    # 'cuda' | 'rocm' | 'cpu' | 'unknown'
    backend_version: str | None     # '12.4', '6.2'
    how: str                        # how the build was read
    tag: str | None = None          # 'cu124', 'rocm6.2', 'cpu' (the build's index name)

    @property
    def text(self) -> str:
        build = {"cuda": f"CUDA {self.backend_version}", "rocm": f"ROCm {self.backend_version}",
                 "cpu": "CPU-only (or Apple MPS)", "unknown": "build unknown"}[self.backend]
        return f"torch {self.version} ({build})"


@dataclass(frozen=True)
class SoftwareStack:
    """What is installed, across the environments read (see the module docstring)."""

    environments: tuple[str, ...]               # site-packages folders read, in priority order
    packages: tuple[Package, ...] = ()          # WATCHED packages found, first environment wins
    torch: TorchBuild | None = None
    problems: tuple[str, ...] = field(default=())  # environments that could not be read, and why

    def get(self, name: str) -> Package | None:
        wanted = normalise(name)
        return next((p for p in self.packages if p.name == wanted), None)

    def version(self, name: str) -> str | None:
        p = self.get(name)
        return p.version if p else None


# ---- where to look ---------------------------------------------------------------------------------
def site_packages(path: str) -> list[str]:
    """The site-packages folders of a prefix (venv, conda), or the folder itself when it holds dist-info."""
    p = Path(path)
    if p.name in ("site-packages", "dist-packages") or _holds_dist_info(p):
        return [str(p)]
    found: list[str] = []
    for pattern in ("lib/python3*/site-packages", "lib64/python3*/site-packages", "Lib/site-packages",
                    "lib/python3*/dist-packages"):
        found += sorted(str(x) for x in p.glob(pattern) if x.is_dir())
    return found


def _holds_dist_info(p: Path) -> bool:
    try:
        with os.scandir(p) as it:
            for i, entry in enumerate(it):
                if entry.name.endswith(".dist-info"):
                    return True
                if i > MAX_ENTRIES:
                    break
    except OSError:
        pass
    return False


def environment_paths(env: Mapping[str, str] | None = None, extra: tuple[str, ...] = (),
                      own: tuple[str, ...] | None = None) -> list[tuple[str, str]]:
    """(label, site-packages folder) to read, in priority order, without duplicates."""
    import sysconfig

    env = os.environ if env is None else env
    if own is None:
        own = tuple(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")))
    out: list[tuple[str, str]] = []
    sources = [("--python-env", p) for p in extra]
    sources += [(var, env[var]) for var in ("VIRTUAL_ENV", "CONDA_PREFIX") if env.get(var)]
    for label, prefix in sources:
        for folder in site_packages(prefix) or [prefix]:
            out.append((label, folder))
    out += [("fitcheck's environment", p) for p in own]
    seen: set[str] = set()
    unique = []
    for label, folder in out:
        key = os.path.realpath(folder)
        if key not in seen:
            seen.add(key)
            unique.append((label, folder))
    return unique


# ---- reading ---------------------------------------------------------------------------------------
def read_packages(folder: str) -> list[Package]:
    """The WATCHED packages installed in one site-packages folder (metadata only)."""
    found = []
    with os.scandir(folder) as it:
        for i, entry in enumerate(it):
            if i >= MAX_ENTRIES:
                break
            m = _DIST_RE.match(entry.name)
            if not m or normalise(m.group("name")) not in WATCHED:
                continue
            name, version, requires = normalise(m.group("name")), m.group("version"), ()
            meta = _metadata(Path(entry.path))
            if meta is not None:
                version = meta.get("version", version)
                requires = tuple(meta.get("requires", ()))
            found.append(Package(name, version, folder, requires))
    return found


def _metadata(path: Path) -> dict | None:
    """Version and Requires-Dist from METADATA / PKG-INFO (the headers only, bounded)."""
    from fitcheck.bounded import open_regular_file

    file = path / "METADATA" if path.is_dir() else path
    if path.is_dir() and not os.path.lexists(file):
        file = path / "PKG-INFO"
    try:
        with open_regular_file(file, "package metadata") as fh:  # a FIFO or device refused, never waited on
            text = fh.read(MAX_METADATA_BYTES).decode("utf-8", "replace")
    except (OSError, FitcheckError):
        return None
    out: dict = {"requires": []}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "version" and value:
            out["version"] = value
        elif key == "requires-dist":
            out["requires"].append(value)
    return out


def torch_build(pkg: Package, conda_records: tuple[str, ...] = ()) -> TorchBuild:
    """torch's version and its CUDA/ROCm build, from the local version, its requirements, or conda."""
    base, _, local = pkg.version.partition("+")
    if local:
        m = _CUDA_LOCAL.match(local)
        if m:
            return TorchBuild(base, "cuda", f"{m.group(1)}.{m.group(2)}", f"local version +{local}", local)
        m = _ROCM_LOCAL.match(local)
        if m:
            return TorchBuild(base, "rocm", m.group(1), f"local version +{local}", local)
        if local == "cpu":
            return TorchBuild(base, "cpu", None, "local version +cpu", "cpu")
    for req in pkg.requires:
        m = _CUDA_REQ.match(req.replace(" ", ""))
        if m:
            cuda = f"{m.group(2)}.{m.group(3)}"
            return TorchBuild(base, "cuda", cuda, f"requires {req.split(';')[0].strip()}",
                              f"cu{m.group(2)}{m.group(3)}")
    for record in conda_records:
        m = _CONDA_TORCH.match(record)
        if m and m.group("version") == base:
            build = m.group("build")
            c = _CONDA_CUDA.search(build)
            if c:
                return TorchBuild(base, "cuda", f"{c.group(1)}.{c.group(2)}", f"conda build {build}",
                                  f"cu{c.group(1)}{c.group(2)}")
            if "cpu" in build:
                return TorchBuild(base, "cpu", None, f"conda build {build}", "cpu")
    if not local and pkg.requires:
        return TorchBuild(base, "cpu", None, "no CUDA or ROCm runtime among its requirements", "cpu")
    return TorchBuild(base, "unknown", None, "no build in its version or requirements")


def _conda_records(folder: str) -> tuple[str, ...]:
    """pytorch-*.json names in the conda-meta folder of the prefix holding `folder`."""
    p = Path(folder)
    for parent in (p, *p.parents[:4]):
        meta = parent / "conda-meta"
        if meta.is_dir():
            try:
                return tuple(sorted(n for n in os.listdir(meta)[:MAX_ENTRIES] if n.startswith("pytorch-")))
            except OSError:
                return ()
    return ()


def read_stack(env: Mapping[str, str] | None = None, extra: tuple[str, ...] = (),
               own: tuple[str, ...] | None = None) -> SoftwareStack:
    """The installed stack across the environments (see the module docstring)."""
    folders = environment_paths(env, extra, own)
    packages: dict[str, Package] = {}
    problems: list[str] = []
    read: list[str] = []
    for label, folder in folders:
        try:
            found = read_packages(folder)
        except OSError as exc:
            problems.append(redact_credentials(f"{label} {folder}: {exc.strerror or exc}"))  # a URL typed as a path
            continue
        read.append(folder)
        for pkg in found:
            packages.setdefault(pkg.name, pkg)
    torch = packages.get("torch")
    build = torch_build(torch, _conda_records(torch.location)) if torch else None
    order = {name: i for i, name in enumerate(WATCHED)}
    return SoftwareStack(tuple(read), tuple(sorted(packages.values(), key=lambda p: order[p.name])), build,
                         tuple(problems))


def stack_document(stack: SoftwareStack | None) -> dict | None:
    """The JSON form: {environments, torch: {version, backend, backend_version, how, location} | null,
    packages: {name: {version, location}}, problems}."""
    if stack is None:
        return None
    torch = stack.get("torch")
    return {
        "environments": list(stack.environments),
        "torch": None if stack.torch is None else {
            "version": stack.torch.version, "backend": stack.torch.backend,
            "backend_version": stack.torch.backend_version, "how": stack.torch.how,
            "location": torch.location if torch else None},
        "packages": {p.name: {"version": p.version, "location": p.location} for p in stack.packages},
        "problems": list(stack.problems),
    }


__all__ = ["Package", "SoftwareStack", "TorchBuild", "WATCHED", "environment_paths", "read_packages", "read_stack",
           "site_packages", "stack_document", "torch_build"]
