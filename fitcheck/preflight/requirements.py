"""Machine requirements for CI: ``--require "vram>=24GiB"``, parsed and judged (pure: no probing).

A requirement is ``FACT OP VALUE`` with OP one of ``>= > <= < ==``.  The facts, measured on the
machine being checked (this one, or the ``--profile``):

    vram       total memory of the smallest visible GPU (bytes; after CUDA_VISIBLE_DEVICES)
    vram_free  free memory of the GPU with the least free memory (bytes)
    gpus       number of visible GPUs
    cc         the lowest compute capability among visible NVIDIA GPUs (8.0, 8.6, 9.0)
    ram        RAM available to this process (bytes; the cgroup limit applies in containers)
    ram_total  RAM installed (bytes)
    disk       free space where models are downloaded (the Hugging Face cache; bytes)
    cuda       the CUDA version the driver supports (12.1, 12.4)
    driver     the NVIDIA driver version (550, 550.54.14)
    torch      the installed torch version (2.5.1), read from package metadata (this machine only)
    torch_cuda the CUDA version torch was built for (12.4 for 2.5.1+cu124); ``torch_cuda<=driver`` (or
               ``<=cuda``) compares it with the CUDA version the driver supports

and one fact of the answer, judged with it (``fitcheck MODEL --require``, not ``--plan`` or machine checks alone):

    concurrency  sequences of the request's context that run at once: a pooled engine's KV pool (vLLM, SGLang;
                 more than it holds queue), else the batch when it fits and 0 when it does not

Sizes need a unit (``24GiB``, ``40GB``, ``512MiB``; GB is 10^9 bytes, GiB 2^30), versions are
compared part by part (12.10 > 12.9).  On a machine with no GPU the GPU facts (vram, vram_free,
cc, cuda) are not unknown: the requirement fails with "no GPU".  A fact the machine could not
read is UNKNOWN, and the caller exits 3 for it unless another requirement failed outright.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fitcheck.errors import EXIT_BAD_INPUT, FitcheckError
from fitcheck.machine import Machine, known
from fitcheck.units import GB, GiB, format_gib, parse_size

SIZE, COUNT, VERSION = "size", "count", "version"

# fact -> (kind, what it measures: shown in messages)
FACTS: dict[str, tuple[str, str]] = {
    "vram": (SIZE, "total memory of the smallest visible GPU"),
    "vram_free": (SIZE, "free memory of the least-free visible GPU"),
    "gpus": (COUNT, "visible GPUs"),
    "cc": (VERSION, "lowest compute capability of the visible GPUs"),
    "ram": (SIZE, "RAM available (cgroup-aware)"),
    "ram_total": (SIZE, "RAM installed"),
    "disk": (SIZE, "free disk at the model cache"),
    "cuda": (VERSION, "driver CUDA version"),
    "driver": (VERSION, "NVIDIA driver version"),
    "torch": (VERSION, "installed torch version"),
    "torch_cuda": (VERSION, "CUDA version of the installed torch build"),
    "concurrency": (COUNT, "sequences at full length that run at once"),
}
ANSWER_FACTS = ("concurrency",)
_GPU_FACTS = ("vram", "vram_free", "cc", "cuda", "driver")
_STACK_FACTS = ("torch", "torch_cuda")
_REFERENCES = {"driver": "cuda", "cuda": "cuda"}  # torch_cuda<=driver: the CUDA version the driver supports
OPERATORS = (">=", "<=", "==", ">", "<")  # two-character operators first for the regex
_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_-]*)\s*(>=|<=|==|>|<)\s*(\S(?:.*\S)?)\s*$")

OK, FAILED, UNKNOWN = "ok", "failed", "unknown"


@dataclass(frozen=True)
class Requirement:
    text: str        # as typed, trimmed
    fact: str
    op: str
    value: object    # int bytes, int count, or tuple[int, ...] version
    decimal: bool = False  # a size written in decimal units (GB): shown in GB too
    ref: str | None = None  # compared with another fact of the machine (torch_cuda<=driver), not a value

    def holds(self, measured) -> bool:
        return _compare(measured, self.op, self.value)


@dataclass(frozen=True)
class Outcome:
    requirement: Requirement
    status: str            # ok | failed | unknown
    measured: object       # the value compared (None when unknown or no GPU)
    shown: str             # the measured value for people: '23.99 GiB', '2', '8.6', 'no GPU', 'unknown (why)'

    @property
    def message(self) -> str:
        what = FACTS[self.requirement.fact][1]
        if self.status == UNKNOWN:
            return f"{self.requirement.text}: cannot tell, {what} is {self.shown}"
        verb = "met" if self.status == OK else "FAILED"
        return f"{self.requirement.text}: {verb} ({what}: {self.shown})"


def _compare(a, op: str, b) -> bool:
    return {">=": a >= b, "<=": a <= b, "==": a == b, ">": a > b, "<": a < b}[op]


def parse_version(text: str) -> tuple[int, ...]:
    """'12.1' -> (12, 1); '8' -> (8,); trailing zeros do not matter when compared (see _norm)."""
    parts = str(text).strip().split(".")
    if not parts or len(parts) > 8 or not all(p.isascii() and p.isdigit() and len(p) <= 6 for p in parts):
        raise ValueError(f"not a version: {_shown(text)} (try 8.0 or 12.1)")
    return _norm(tuple(int(p) for p in parts))


def _norm(version: tuple[int, ...]) -> tuple[int, ...]:
    while len(version) > 1 and version[-1] == 0:
        version = version[:-1]
    return version


def parse_requirement(text: str) -> Requirement:
    """``"vram>=24GiB"`` -> Requirement; FitcheckError (exit 2) naming what is wrong."""
    m = _RE.match(str(text))
    if not m:
        raise FitcheckError(f"--require {_shown(text)}: expected FACT OP VALUE, e.g. \"vram>=24GiB\"",
                            "facts: " + ", ".join(FACTS) + "; operators: " + " ".join(OPERATORS))
    fact, op, raw = m.group(1).lower().replace("-", "_"), m.group(2), m.group(3)
    if fact not in FACTS:
        raise FitcheckError(f"--require {_shown(text)}: unknown fact {m.group(1)!r}", "facts: " + ", ".join(FACTS))
    kind = FACTS[fact][0]
    if fact == "torch_cuda" and raw.strip().lower() in _REFERENCES:
        return Requirement(" ".join(str(text).split()), fact, op, None, ref=_REFERENCES[raw.strip().lower()])
    try:
        if kind == SIZE:
            if re.fullmatch(r"[0-9.]+", raw.strip()):
                n = raw.strip() if len(raw.strip()) <= 20 else raw.strip()[:17] + "…"
                raise ValueError(f"{n!r} has no unit (write {n}GiB or {n}GB)")
            value: object = parse_size(raw)
        elif kind == COUNT:
            if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
                raise ValueError(f"not a whole number up to 999,999,999: {_shown(raw)}")
            value = int(raw)
        else:
            value = parse_version(raw)
    except ValueError as exc:
        raise FitcheckError(f"--require {_shown(text)}: {exc}") from None
    decimal = kind == SIZE and bool(re.search(r"[kmgt]b\s*$", raw, re.IGNORECASE))
    return Requirement(" ".join(str(text).split()), fact, op, value, decimal)


def _shown(text: object) -> str:
    """The requirement as typed, for a message: quoted, cut at 60 characters."""
    t = str(text)
    return repr(t if len(t) <= 60 else t[:57] + "…")


def parse_requirements(texts) -> tuple[Requirement, ...]:
    return tuple(parse_requirement(t) for t in texts)


def _size(n: int, decimal: bool = False) -> str:
    return f"{n / GB:.2f} GB ({format_gib(n)})" if decimal else format_gib(n)


def _show_version(v: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in (v if len(v) > 1 else (*v, 0)))


# A GPU's total memory as the driver reports it is a little under the size it is sold with (an RTX 4090's
# 24 GiB of GDDR6X reads 24,564 MiB in NVML; an H100 80GB 81,559 MiB): the firmware keeps a few MiB.
# A total within this fraction below a whole GiB counts as that whole GiB, so "vram>=24GiB" holds on a
# 24 GiB card as its owner means it (the exact figure is shown beside it).
MARKETED_SLACK = 0.01


def marketed_size(total_bytes: int) -> int:
    """The whole-GiB size a GPU of ``total_bytes`` usable memory is sold with, when within 1 % of it."""
    whole = -(-total_bytes // GiB) * GiB
    return whole if whole - total_bytes <= MARKETED_SLACK * whole else total_bytes


def measure(fact: str, machine: Machine, decimal: bool = False):
    """(value, shown): the machine's value for ``fact`` (None when unknown or absent) and how to show
    it (sizes in GiB, or in GB too when ``decimal``: the requirement was written in GB)."""
    gpus = machine.gpus
    if fact in _GPU_FACTS and not gpus:
        return None, "no GPU" + (f" ({machine.gpu_status})" if machine.gpu_status else "")
    if fact == "gpus":
        return len(gpus), str(len(gpus))
    if fact in ("vram", "vram_free"):
        return _vram(machine, fact, decimal)
    if fact == "cc":
        ccs = []
        for g in gpus:
            if not known(g.compute_capability):
                return None, str(g.compute_capability) if g.vendor == "nvidia" else f"unknown ({g.vendor} GPU)"
            ccs.append(parse_version(g.compute_capability))
        low = min(ccs)
        return low, _show_version(low)
    if fact in ("driver", "cuda"):
        return _version_fact(fact, machine.driver_version if fact == "driver" else machine.cuda_version)
    if fact in ("ram", "ram_total"):
        ram = machine.memory.available_bytes if fact == "ram" else machine.memory.total_bytes
        return (ram, _size(ram, decimal)) if known(ram) else (None, str(ram))
    if fact == "disk":
        if machine.disk is None:
            return None, "unknown (no disk in this profile)"
        free = machine.disk.free_bytes
        return (free, _size(free, decimal) + f" at {machine.disk.path}") if known(free) else (None, str(free))
    raise FitcheckError(f"unknown fact {fact!r}")  # parse_requirement already refuses these


def _vram(machine: Machine, fact: str, decimal: bool):
    """The smallest GPU's total (vram: as sold, when within 1 % of a whole GiB) or free memory."""
    values = [g.memory_total_bytes if fact == "vram" else g.memory_free_bytes for g in machine.gpus]
    unknown = [v for v in values if not known(v)]
    if unknown:
        return None, str(unknown[0])
    smallest = min(v for v in values if known(v))
    if fact == "vram":
        marketed = marketed_size(smallest)
        if marketed != smallest:
            return marketed, (f"{_size(smallest, decimal)} usable; sold as {marketed // GiB} GiB, "
                              f"compared as {_size(marketed, decimal)}")
    return smallest, _size(smallest, decimal)


def _version_fact(fact: str, v: Any):
    """The driver's or the CUDA runtime's version, parsed (shown as the driver reports it)."""
    if not known(v):
        return None, str(v)
    try:
        parsed = parse_version(str(v))
    except ValueError:
        return None, f"unknown (unreadable {'driver' if fact == 'driver' else 'CUDA'} version {v!r})"
    return parsed, (str(v) if fact == "driver" else _show_version(parsed))


def measure_stack(fact: str, stack):
    """(value, shown, failed) for torch / torch_cuda from the installed stack (None: not read here)."""
    if stack is None:
        return None, "unknown (installed packages are read only for this machine, not a --profile)", False
    t = stack.torch
    if t is None:
        return None, "torch is not installed (" + (", ".join(stack.environments) or "no environment read") + ")", True
    if fact == "torch":
        try:
            return parse_version(t.version), t.version, False
        except ValueError:
            return None, f"unknown (unreadable torch version {t.version!r})", False
    if t.backend != "cuda" or not t.backend_version:
        return None, f"torch {t.version} is not a CUDA build ({t.backend}: {t.how})", t.backend != "unknown"
    return parse_version(t.backend_version), f"{t.backend_version} (torch {t.version}, {t.how})", False


def evaluate(requirements, machine: Machine, stack=None) -> tuple[Outcome, ...]:
    """Each requirement judged against ``machine`` (and ``stack``, the installed packages, for torch facts)."""
    out = []
    for req in requirements:
        if req.fact in ANSWER_FACTS:  # judged with the answer (with_answer)
            out.append(Outcome(req, UNKNOWN, None, "judged with the answer"))
            continue
        if req.fact in _STACK_FACTS:
            value, shown, failed = measure_stack(req.fact, stack)
            if value is None:
                out.append(Outcome(req, FAILED if failed else UNKNOWN, None, shown))
                continue
            if req.ref is not None:
                other, other_shown = measure(req.ref, machine)
                if other is None:
                    out.append(Outcome(req, FAILED if not machine.gpus else UNKNOWN, value,
                                       f"{shown}; the driver's CUDA version is {other_shown}"))
                    continue
                ok = _compare(value, req.op, other)
                out.append(Outcome(req, OK if ok else FAILED, value,
                                   f"{shown}; the driver supports CUDA {other_shown}"))
                continue
            out.append(Outcome(req, OK if req.holds(value) else FAILED, value, shown))
            continue
        value, shown = measure(req.fact, machine, decimal=req.decimal)
        if value is None:
            no_gpu = req.fact in _GPU_FACTS and not machine.gpus
            out.append(Outcome(req, FAILED if no_gpu else UNKNOWN, None, shown))
        else:
            out.append(Outcome(req, OK if req.holds(value) else FAILED, value, shown))
    return tuple(out)


def machine_only(requirements) -> None:
    """FitcheckError (exit 2) for a fact of the answer asked without a model to answer (machine checks alone, a
    plan's shared --require)."""
    answer = [r.text for r in requirements if r.fact in ANSWER_FACTS]
    if answer:
        raise FitcheckError(f"--require {answer[0]} judges an answer: give a MODEL", "fitcheck MODEL --require "
                            f"{answer[0]!r}")


def with_answer(outcomes, result) -> tuple[Outcome, ...]:
    """``outcomes`` with the answer's facts judged against ``result`` (a CheckResult): concurrency is a pooled
    engine's KV pool at the request's context (its max_concurrency), else the batch when it fits, 0 when not."""
    def judged(o: Outcome) -> Outcome:
        if o.requirement.fact not in ANSWER_FACTS:
            return o
        pool = getattr(result.estimate, "pool", None)
        batch = getattr(result.plan, "batch", 1)
        if pool is not None and result.verdict.runs:
            value: float = pool.max_concurrency
            shown = f"{value:g} in {pool.title}'s KV pool at {result.plan.context:,} tokens"
        else:
            value = batch if result.verdict.runs else 0
            shown = f"{value} ({'the batch, which fits' if value else 'it does not fit'})"
        return Outcome(o.requirement, OK if o.requirement.holds(value) else FAILED, value, shown)

    return tuple(judged(o) for o in outcomes)


def outcome_dict(o: Outcome) -> dict:
    """One requirement's result as the JSON documents carry it (check, plan, requirements)."""
    value = o.measured
    if isinstance(value, tuple):  # a version
        value = ".".join(str(p) for p in value)
    return {"requirement": o.requirement.text, "fact": o.requirement.fact, "status": o.status,
            "measured": value, "shown": o.shown, "message": o.message}


def combine(codes) -> int:
    """The exit code of several checks: 1 if any failed (a failed check is never masked), else 2 bad
    input, else 3 if any unknown, else 0."""
    codes = set(codes)
    for code in (1, EXIT_BAD_INPUT, 3):
        if code in codes:
            return code
    return 0


def exit_code(outcomes) -> int:
    """0 all met, 1 one failed, 3 one unknown (and none failed)."""
    statuses = {o.status for o in outcomes}
    return 1 if FAILED in statuses else 3 if UNKNOWN in statuses else 0
