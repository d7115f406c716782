"""The verdict: an estimate compared with what is *free* on each device, minus the headroom.

fits          need <= free × (1 − headroom) on every device
tight         need <= free on every device, but inside the headroom on one
does not fit  need > free on some device (or more GPUs asked than there are)
unknown       a device's free memory could not be read (and nothing already fails)
does not fit on disk
              the memory fits (or is unknown) but the download does not fit in the free disk space where
              it lands (fitcheck.engines.download.with_disk; the memory verdict is the next reason)
cannot run    this machine cannot run the request at all: kernels missing, compute capability too
              low, no GPU or fewer GPUs than asked (the plan's problems, from fitcheck.engines), or the
              installed software stack cannot run it (driver older than the CUDA build, no kernels for
              this GPU, a package the request needs: with_software())
"""

from __future__ import annotations

from dataclasses import dataclass

from fitcheck.errors import EXIT_DOES_NOT_FIT, EXIT_FITS, EXIT_UNKNOWN
from fitcheck.estimate.result import DeviceNeed, Estimate, Pool
from fitcheck.machine import Machine, known
from fitcheck.units import format_gib

FITS = "fits"
TIGHT = "tight"
DOES_NOT_FIT = "does_not_fit"
UNKNOWN = "unknown"
CANNOT_RUN = "cannot_run"
DOES_NOT_FIT_ON_DISK = "does_not_fit_on_disk"
STATUSES = (FITS, TIGHT, DOES_NOT_FIT, CANNOT_RUN, UNKNOWN, DOES_NOT_FIT_ON_DISK)
_ORDER = {FITS: 0, TIGHT: 1, UNKNOWN: 2, DOES_NOT_FIT_ON_DISK: 3, DOES_NOT_FIT: 3, CANNOT_RUN: 4}
# How each status reads: in the table's verdict line (WORDS) and in a sentence (SENTENCE_WORDS).
WORDS = {FITS: "FITS", TIGHT: "TIGHT", DOES_NOT_FIT: "DOES NOT FIT", CANNOT_RUN: "CANNOT RUN HERE",
         UNKNOWN: "UNKNOWN", DOES_NOT_FIT_ON_DISK: "DOES NOT FIT ON DISK"}
SENTENCE_WORDS = {FITS: "Fits", TIGHT: "Fits, tightly", DOES_NOT_FIT: "Does not fit",
                  CANNOT_RUN: "Cannot run here", UNKNOWN: "Unknown", DOES_NOT_FIT_ON_DISK: "Does not fit on disk"}
EXIT_CODES = {FITS: EXIT_FITS, TIGHT: EXIT_FITS, DOES_NOT_FIT: EXIT_DOES_NOT_FIT, CANNOT_RUN: EXIT_DOES_NOT_FIT,
              UNKNOWN: EXIT_UNKNOWN, DOES_NOT_FIT_ON_DISK: EXIT_DOES_NOT_FIT}


@dataclass(frozen=True)
class DeviceVerdict:
    device: str
    kind: str
    need_bytes: int
    free_bytes: int | None       # None: unknown
    usable_bytes: int | None     # free minus the headroom
    status: str
    reason: str


@dataclass(frozen=True)
class Verdict:
    status: str
    devices: tuple[DeviceVerdict, ...]
    headroom: float
    reasons: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    @property
    def fits(self) -> bool:
        return self.status == FITS

    @property
    def runs(self) -> bool:
        """Fits, at least tightly."""
        return self.status in (FITS, TIGHT)

    def summary(self) -> str:
        # The device that decides: the worst status, and among equals the fullest, so a layer split's
        # headline names the GPU with the most layers, not GPU0.
        worst = max(self.devices, key=lambda d: (_ORDER[d.status], fullness(d)), default=None)
        word = SENTENCE_WORDS[self.status]
        if self.reasons:
            return f"{word}: {self.reasons[0]}"
        return f"{word}: {worst.reason}" if worst else word


def _free(machine: Machine, kind: str, index: int) -> tuple[int | None, str]:
    if kind == "cpu":
        avail = machine.memory.available_bytes
        return (avail, "RAM available") if known(avail) else (None, f"available RAM {avail}")
    if index >= len(machine.gpus):
        return None, "no such GPU"
    gpu = machine.gpus[index]
    free = gpu.memory_free_bytes
    name = gpu.name if known(gpu.name) else f"GPU {index}"
    return (free, f"free on {name}") if known(free) else (None, f"free memory of {name}: {free}")


def judge(estimate: Estimate, machine: Machine, headroom: float) -> Verdict:
    """Compare each device's need with what is free on it."""
    reasons: list[str] = []
    devices: list[DeviceVerdict] = []
    gpu_needs = estimate.gpu_devices
    if len(gpu_needs) > len(machine.gpus):
        reasons.append(f"needs {len(gpu_needs)} GPUs; {machine.name} has {len(machine.gpus)}"
                       + (f" ({machine.gpu_status})" if machine.gpu_status and not machine.gpus else ""))
    # With several GPUs the least-free one limits: pair the largest needs with the least-free GPUs.
    gpu_order = sorted(range(len(machine.gpus)), key=lambda i: _free(machine, "gpu", i)[0] or 0)
    gi = 0
    unified_gpu_need = 0
    # A serving engine reserves its share itself, leaving the rest free: its reservation (and what it keeps beyond
    # it: the CUDA context and CUDA graphs) only has to be free; the headroom applies to what must fit inside the
    # reservation (_judge_pool).
    pool = estimate.pool
    for need in estimate.devices:
        if need.kind == "gpu":
            index = gpu_order[gi] if gi < len(gpu_order) else len(machine.gpus) + gi
            gi += 1
            free, what = _free(machine, "gpu", index)
            if index < len(machine.gpus) and machine.gpus[index].unified_memory:
                unified_gpu_need += need.total_bytes
        else:
            free, what = _free(machine, "cpu", 0)
            if estimate.nodes > 1:
                what += " per node"  # each node's RAM holds its own ranks' share (training over nodes)
            if unified_gpu_need and free is not None:
                free = max(free - unified_gpu_need, 0)  # unified memory: the GPU's share comes out of RAM
                what += " after the GPU's share of unified memory"
        room = 0.0 if (pool is not None and need.kind == "gpu") else headroom
        devices.append(_judge_device(need.device, need.kind, need.total_bytes, free, what, room))
    if pool is not None:
        devices = _judge_pool(pool, gpu_needs, devices, machine, reasons)
    status = max((d.status for d in devices), key=lambda s: _ORDER[s], default=UNKNOWN)
    if reasons:
        status = DOES_NOT_FIT
    return Verdict(status, tuple(devices), headroom, tuple(reasons))


def _judge_pool(pool: Pool, gpu_needs: tuple[DeviceNeed, ...], devices: list[DeviceVerdict], machine: Machine,
                reasons: list[str]) -> list[DeviceVerdict]:
    """A serving engine's reservation: DOES NOT FIT (a reason) when what the request needs inside it is more than
    it holds, i.e. its KV pool cannot hold one sequence at full length (more sequences than it holds queue:
    engines.serving.queued_kv).  No headroom is taken inside it: the reservation (gpu_memory_utilization,
    mem_fraction_static) already is the engine's own margin, so a second one would refuse what the engine starts
    (issue 35 item 4).  Inside are all of the GPU's parts but what the engine keeps beyond it (vLLM), or the weights
    and KV cache only (SGLang)."""
    reserved = pool.reserved_bytes
    if pool.holds_activations:
        inner, kv = max(((d.total_bytes - d.component("kv_pool_spare") - pool.outside_bytes, d.component("kv_cache"))
                         for d in gpu_needs), default=(0, 0))
        beyond, what = pool.outside_bytes, ""
    else:
        inner, kv = max(((d.component("weights") + d.component("kv_cache"), d.component("kv_cache"))
                         for d in gpu_needs), default=(0, 0))
        beyond = max((d.total_bytes - d.component("kv_pool_spare") - d.component("weights")
                      - d.component("kv_cache") for d in gpu_needs), default=0)
        what = "of weights and KV cache "
    owner = f"{pool.title}'s"
    if inner > reserved:
        free = _least_free(devices)
        reasons.append(f"needs {format_gib(inner)} {what}inside {owner} {pool.share} of {format_gib(reserved)} "
                       + _pool_fix(inner, kv, reserved, None if free is None else free - beyond, pool.flag))
    free = _least_free(devices)
    total = _gpu_total(machine)
    if (pool.holds_activations and any(d.kind == "gpu" and d.status == DOES_NOT_FIT for d in devices)
            and inner <= reserved and free is not None and total):
        # what overflows is what the engine keeps beyond its reservation: a smaller reservation that still holds
        # the request leaves room for it
        utilization = room_utilization(free, beyond, total)
        if inner <= utilization * total:
            reasons.append(f"{pool.title} keeps {format_gib(beyond)} beyond its {pool.share} of {format_gib(reserved)} "
                           f"(CUDA context and graphs): {pool.flag} {utilization:.2f} leaves room "
                           "for them and still holds this request")
    return devices


def room_utilization(free: int, outside: int, total: int) -> float:
    """The largest --gpu-memory-utilization (two decimals, rounded down) whose reservation leaves ``outside``
    bytes (what vLLM keeps beyond it) room in ``free`` on a GPU of ``total`` bytes."""
    return int((free - outside) / total * 100) / 100


def _gpu_total(machine: Machine) -> int | None:
    """The smallest GPU's total memory, where known."""
    totals = [g.memory_total_bytes for g in machine.gpus if isinstance(g.memory_total_bytes, int)]
    return min(totals) if totals else None


def _least_free(devices: list[DeviceVerdict]) -> int | None:
    free = [d.free_bytes for d in devices if d.kind == "gpu" and d.free_bytes is not None]
    return min(free) if free else None


def _pool_fix(inner: int, kv: int, reserved: int, room: int | None, flag: str) -> str:
    """What makes ``inner`` (KV cache ``kv`` included) fit a reservation of ``reserved`` on a GPU with ``room``
    for it: a larger reservation, a shorter context, both; or nothing short of smaller weights or more GPUs."""
    rest = inner - kv
    fits_room = room is not None and inner <= room
    # more sequences than the pool holds queue: only a shorter context makes one sequence fit (issue 35 item 4)
    fixes = ([f"raise {flag}"] if fits_room else []) + (["shorten --context"] if rest < reserved else [])
    if fixes:
        return "(" + ", or ".join(fixes) + ")"
    if room is not None and rest < room:
        return f"(raise {flag} and shorten --context)"
    return (f"(without the KV cache it still needs {format_gib(rest)}, more than this GPU can give it: "
            "lower-precision weights or more GPUs)")


def _judge_device(device: str, kind: str, need: int, free: int | None, what: str, headroom: float) -> DeviceVerdict:
    if free is None:
        return DeviceVerdict(device, kind, need, None, None, UNKNOWN, f"cannot tell: {what}")
    usable = int(free * (1 - headroom))
    label = "RAM" if kind == "cpu" else device.upper()
    if need <= usable:
        status, reason = FITS, f"{label} needs {format_gib(need)} of {format_gib(free)} {what}"
    elif need <= free:
        status, reason = TIGHT, (f"{label} needs {format_gib(need)} of {format_gib(free)} {what}, "
                                 f"inside the {headroom:.0%} headroom")
    else:
        status, reason = DOES_NOT_FIT, f"{label} needs {format_gib(need)} but only {format_gib(free)} {what}"
    return DeviceVerdict(device, kind, need, free, usable, status, reason)


def with_software(verdict: Verdict, blocking: tuple[str, ...]) -> Verdict:
    """The verdict once the installed stack is checked: any blocking reason makes it CANNOT_RUN, the
    memory verdict kept as the last reason (it is what holds once the stack is fixed)."""
    if not blocking:
        return verdict
    return Verdict(CANNOT_RUN, verdict.devices, verdict.headroom,
                   (*blocking, f"once that is fixed: {verdict.summary()}"))


def fullness(d: DeviceVerdict) -> float:
    """need ÷ free (0 when free is unknown): how close a device is to its limit, whatever its size."""
    return d.need_bytes / d.free_bytes if d.free_bytes else 0.0


def tightest_device(verdict: Verdict | None):
    """The fullest device verdict (need ÷ free), or None: what a one-line summary shows, the same
    device as the verdict's own summary."""
    devs = [d for d in (verdict.devices if verdict else ()) if d.free_bytes]
    return max(devs, key=fullness, default=None)
