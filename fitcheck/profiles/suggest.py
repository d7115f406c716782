"""Which profiles to suggest for a name that is none (``--profile cpu-only``, ``--profile rtx-4080``): the ones
of the kind the name asks for, closest first.  Pure functions over the profiles passed in (the store's).

What a name asks for, read from its words (lower case, split at anything not a letter or digit; ``rtx4090`` is
``rtx`` and ``4090``), the first rule that matches:

1. **no GPU**: the word ``cpu``, or ``nogpu`` / ``no-gpu`` / ``without-gpu``: the profiles without a GPU;
2. **a Mac**: ``mac``, ``macbook``, ``mbp``, ``imac``, ``apple`` or an Apple chip (``m1`` ... ``m9``): the
   profiles with an Apple GPU;
3. **a GPU**: a GPU model as the catalogue's GPUs spell it (``4090``, ``a100``, ``t4``, ``l40s``, ``mi300x``),
   a word shaped like one (a 4-digit number, ``rtx``/``gtx``/``rx`` with a number, ``mi`` and digits, or one of
   NVIDIA's data-centre letters a, b, h, k, l, p, t, v followed by digits: ``b200``, ``v100``) or a GPU word
   (``gpu``, ``cuda``, ``nvidia``, ``geforce``, ``tesla``, ``quadro``, ``radeon``, ``instinct``): the profiles
   with a discrete GPU, closest GPU model first;
4. **a CPU machine**: ``laptop``, ``desktop``, ``pc``, ``server``, ``vm``, ``ubuntu``, ``linux``, ``windows``,
   ``ci``, ``runner``, ``github``, a CPU brand (``intel``, ``ryzen``, ``epyc``, ``xeon``) and the like: the profiles
   without a GPU (a laptop or desktop named after its GPU matched rule 3);
5. otherwise the closest names by spelling (difflib), as before.

Within a kind: the most words in common (a GPU model counts by how alike it is: ``4080`` is closest to ``4090``),
then the nearest memory when the name has a size (``laptop-64gb``: RAM; ``a100-96gb``: GPU memory), then the
nearest GPU count (``4x-h100``; one GPU when the name gives no count), then spelling.  Fewer than three of the kind are topped up by spelling.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fitcheck.machine import Machine, known
from fitcheck.units import GiB

NO_GPU, MAC, GPU, CPU_MACHINE, ANY = "no GPU", "Mac", "GPU", "CPU machine", "any"
SUGGESTED = 3

_NO_GPU_WORDS = frozenset({"cpu", "cpus", "nogpu", "gpuless", "cpuonly"})
_MAC_WORDS = frozenset({"mac", "macbook", "mbp", "imac", "macmini", "apple"})
_APPLE_CHIP = re.compile(r"^m[1-9]$")
_GPU_WORDS = frozenset({"gpu", "gpus", "cuda", "nvidia", "geforce", "rtx", "gtx", "rx", "tesla", "quadro", "radeon",
                        "instinct"})
_GPU_SHAPED = re.compile(r"^(?:\d{4}[a-z]{0,2}|(?:rtx|gtx|rx)\d+[a-z]*|mi\d{2,3}[a-z]?|[abhklptv]\d{1,4}[a-z]{0,2})$")
_CPU_WORDS = frozenset({"laptop", "notebook", "desktop", "pc", "workstation", "server", "vm", "ubuntu", "linux",
                        "debian", "fedora", "windows", "win", "ci", "runner", "github", "intel", "ryzen", "epyc",
                        "xeon", "threadripper", "x86", "amd64", "arm64", "aarch64", "raspberry"})
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:g|gb|gib)(?![a-z])")
_COUNT = re.compile(r"^(\d+)x$")


@dataclass(frozen=True)
class Suggestion:
    """The profiles to name (closest first) and the kind of machine the typed name asks for."""

    names: tuple[str, ...]
    intent: str


def words(text: str) -> list[str]:
    """``"RTX4090-laptop"`` -> ['rtx', '4090', 'laptop']: lower-case words, a GPU family split from its number."""
    out: list[str] = []
    for chunk in re.findall(r"[a-z0-9.]+", text.lower()):
        chunk = chunk.strip(".")
        m = re.fullmatch(r"(rtx|gtx|rx|nvidia|geforce|macbook|mac)(\d.*)", chunk)
        out += [m.group(1), m.group(2)] if m else [chunk] if chunk else []
    return out


def intent_of(text: str, gpu_models: Iterable[str] = ()) -> str:
    """What kind of machine a profile name asks for (NO_GPU, MAC, GPU, CPU_MACHINE or ANY); ``gpu_models`` are
    the catalogue's GPU model words (:func:`gpu_words` of its GPUs)."""
    ws = words(text)
    joined = "".join(ws)
    pairs = set(zip(ws, ws[1:], strict=False))
    if _NO_GPU_WORDS & set(ws) or "nogpu" in joined or {("no", "gpu"), ("without", "gpu")} & pairs:
        return NO_GPU
    if _MAC_WORDS & set(ws) or any(_APPLE_CHIP.match(w) for w in ws):
        return MAC
    models = set(gpu_models)
    if any(w in _GPU_WORDS or w in models or _GPU_SHAPED.match(w) for w in ws):
        return GPU
    if _CPU_WORDS & set(ws):
        return CPU_MACHINE
    return ANY


def gpu_words(name: str) -> set[str]:
    """The words of a GPU model that tell it apart (its numbers and model codes): ``NVIDIA GeForce RTX 4090`` ->
    {'4090'}, ``NVIDIA A100-SXM4-80GB`` -> {'a100', 'sxm4'}."""
    return set(_model_words(words(name)))


def _model_words(ws: Iterable[str]) -> list[str]:
    """The words with a digit that name a model: not a size (80gb), a count (2x) or a short number (the 10 of
    "10-core")."""
    return [w for w in ws if any(c.isdigit() for c in w) and not _SIZE.fullmatch(w) and not _COUNT.match(w)
            and not (w.isdigit() and len(w) < 3)]


def suggest(typed: str, machines: Sequence[Machine], n: int = SUGGESTED) -> Suggestion:
    """The ``n`` profiles closest to ``typed`` of the kind it asks for (see the module docstring)."""
    catalogue_models = {w for m in machines for g in m.gpus for w in gpu_words(str(g.name))}
    intent = intent_of(typed, catalogue_models)
    wanted = typed.strip().lower()
    if intent == ANY:
        close = difflib.get_close_matches(wanted, [m.name for m in machines], n=n, cutoff=0.0)
        return Suggestion(tuple(close), ANY)
    kind = [m for m in machines if _of_kind(m, intent)]
    ranked = sorted(kind, key=lambda m: _rank(typed, m, intent))
    names = [m.name for m in ranked[:n]]
    if len(names) < n:
        rest = [m.name for m in machines if m.name not in names]
        names += difflib.get_close_matches(wanted, rest, n=n - len(names), cutoff=0.0)
    return Suggestion(tuple(names), intent)


def closest_gpu_profiles(typed: str, machines: Sequence[Machine], n: int = SUGGESTED) -> list[str]:
    """The profiles whose GPU is most like the GPU model ``typed`` (``--gpu 4080``): closest model first; for a
    name with no model number, the GPU profiles closest by spelling (none when nothing is alike)."""
    kind = [m for m in machines if _of_kind(m, GPU)]
    if not _model_words(words(typed)):
        return difflib.get_close_matches(typed.strip().lower(), [m.name for m in kind], n=n, cutoff=0.3)
    return [m.name for m in sorted(kind, key=lambda m: _rank(typed, m, GPU))[:n]]


def _apple(machine: Machine) -> bool:
    return any(str(g.vendor) == "apple" for g in machine.gpus)


def _of_kind(machine: Machine, intent: str) -> bool:
    if intent in (NO_GPU, CPU_MACHINE):
        return not machine.gpus
    if intent == MAC:
        return _apple(machine)
    return bool(machine.gpus) and not _apple(machine)


def _rank(typed: str, machine: Machine, intent: str) -> tuple:
    """Sort key: most alike first (see the module docstring)."""
    ws = words(typed)
    own = set(words(machine.name)) | {w for g in machine.gpus for w in words(str(g.name))}
    sizes = [float(m.group(1)) * GiB for w in ws for m in [_SIZE.fullmatch(w)] if m]
    counts = [int(m.group(1)) for w in ws for m in [_COUNT.match(w)] if m]
    if intent == GPU:
        models = _model_words(ws)
        theirs = {w for g in machine.gpus for w in gpu_words(str(g.name))} | set(_model_words(words(machine.name)))
        alike = sum(max((_likeness(w, t) for t in theirs), default=0.0) for w in models)
        alike += 0.1 * len(set(ws) - set(models) & own)
        memory = _first_gpu_memory(machine)
    else:
        alike = float(len(set(ws) & own))
        memory = machine.memory.total_bytes if known(machine.memory.total_bytes) else None
    size_gap = _log_gap(sizes[0], memory) if sizes else 0.0
    count_gap = _log_gap(counts[0] if counts else 1, len(machine.gpus)) if intent == GPU else 0.0
    spelling = difflib.SequenceMatcher(None, typed.strip().lower(), machine.name.lower()).ratio()
    return (-round(alike, 6), size_gap, count_gap, -spelling, machine.name)


def _likeness(a: str, b: str) -> float:
    return 1.0 if a == b else difflib.SequenceMatcher(None, a, b).ratio()


def _first_gpu_memory(machine: Machine) -> int | None:
    total = machine.gpus[0].memory_total_bytes if machine.gpus else None
    return total if isinstance(total, int) and known(total) else None


def _log_gap(wanted: float, have: float | int | None) -> float:
    if not isinstance(have, (int, float)) or have <= 0 or wanted <= 0:
        return math.inf
    return abs(math.log(wanted / have))


def unknown_profile_hint(typed: str, machines: Sequence[Machine]) -> str:
    """The one-line hint of an unknown ``--profile`` name: the profiles of the kind it asks for, and the what-ifs
    that answer for this machine instead."""
    s = suggest(typed, machines)
    listed = ", ".join(s.names)
    tail = "`fitcheck profiles` lists them all"
    if not s.names:
        return tail
    if s.intent in (NO_GPU, CPU_MACHINE):
        return (f"did you mean {listed} (no GPU)? or drop --profile: `fitcheck MODEL --device cpu` answers for "
                f"this machine's CPU, --ram SIZE as if it had SIZE of RAM; {tail}")
    if s.intent == GPU:
        by_name = {m.name: m for m in machines}
        single = next((name for name in s.names if len(by_name[name].gpus) == 1), s.names[0])
        counts = [int(m.group(1)) for w in words(typed) for m in [_COUNT.match(w)] if m]
        many = bool(counts) and counts[0] > 1
        arg = f"{counts[0]}x{single}" if many else single
        return (f"did you mean {listed}? --gpu {arg} answers as if this machine had {'those GPUs' if many else 'that GPU'}; "
                f"{tail}")
    return f"did you mean {listed}? {tail}"
