"""`fitcheck models --fits`: which catalog models run (or train) on this machine, and how.

Every model is judged with :func:`fitcheck.pipeline.check` exactly as ``fitcheck MODEL`` would
judge it, and takes the configuration check itself would point to:
the request as asked when it fits, else check's best alternative that keeps what the user asked
for (the context and batch, the mode and sequence length of a training run, the engine when one
was named, and the one machine: never more nodes).  So each row's ``fitcheck_command`` re-checks
as fitting, with the same numbers.

Ranking: the most capable first, read as the most parameters (total, as published), then the
newer release; models that do not fit follow in the same order.

Each model's answer is memoised per (model, request, machine, headroom): the machine is probed
once by the caller, never here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from fitcheck.errors import FitcheckError
from fitcheck.estimate.verdict import FITS, TIGHT
from fitcheck.machine import Machine
from fitcheck.model.catalog import CatalogEntry, load_catalog
from fitcheck.model.spec import ModelSpec
from fitcheck.options import DEFAULTS
from fitcheck.request import Request

DEFAULT_HEADROOM = DEFAULTS["headroom"] / 100

SCHEMA = "fitcheck.fits/1"
KINDS = ("instruct", "base", "dense", "moe")
# Alternatives that change one of these answer a different question than the one asked (more nodes: other
# machines than this one).
_KEEP_INFERENCE = frozenset({"context", "batch", "nodes"})
_KEEP_TRAINING = frozenset({"mode", "seq_len", "nodes"})
REFUSED = "refused"        # check refuses the request for this model here (e.g. an fp8 checkpoint on a CPU)


@dataclass(frozen=True)
class ModelRef:
    """A model to judge: the name its fitcheck command takes, and its spec."""

    id: str                      # catalog id, Ollama name, repo id or path: what `fitcheck ID` resolves
    spec: ModelSpec
    family: str
    released: str = ""           # 'YYYY-MM' for catalog models
    source: str = "catalog"      # catalog | hf-cache | ollama | lm-studio | llama.cpp
    where: str | None = None     # the file or folder, for local models
    active_params: int = 0       # as the publisher counts them

    @classmethod
    def of(cls, entry: CatalogEntry) -> ModelRef:
        return cls(entry.hf_id, entry.spec, entry.family, entry.released, active_params=entry.active_params)


@dataclass(frozen=True)
class FitRow:
    """One model judged on the machine: the configuration chosen, or why nothing fits."""

    model: ModelRef
    status: str                         # fits | tight | does_not_fit | unknown | refused
    plan: Any                           # Plan or TrainingPlan of the chosen configuration
    need_bytes: int | None              # on the fullest device (need ÷ free)
    free_bytes: int | None
    device: str | None                  # that device ('GPU0', 'RAM')
    decode_tokens_per_s: tuple[float, float] | None    # inference: (low, high)
    training_tokens_per_s: tuple[float, float] | None  # training: (low, high)
    fitcheck_command: str | None
    change: str | None                  # the alternative taken (None: the request as asked)
    reason: str = ""                    # why it does not fit
    devices: tuple[tuple[str, int, int], ...] = ()   # (device, need, free) of every device used

    @property
    def fits(self) -> bool:
        return self.status in (FITS, TIGHT)

    @property
    def params(self) -> int:
        return self.model.spec.total_params


@dataclass(frozen=True)
class FitsResult:
    machine: Machine
    profile: str | None
    request: Any                        # fitcheck.request.Request
    headroom: float
    rows: tuple[FitRow, ...]            # ranked: fitting first, most capable first
    unreadable: tuple[tuple[str, str, str], ...] = ()   # local models not read: (name, source, reason)
    local: bool = False

    @property
    def fitting(self) -> tuple[FitRow, ...]:
        return tuple(r for r in self.rows if r.fits)

    @property
    def mode(self) -> str:
        return getattr(self.request, "mode", "inference")


def select_entries(query: str | None = None, family: str | None = None, kind: str | None = None
                   ) -> tuple[CatalogEntry, ...]:
    """Catalog entries matching the same filters as ``fitcheck models`` (plus --kind)."""
    catalog = load_catalog()
    if family and family.strip().lower() not in catalog.families():
        raise FitcheckError(f"unknown family {family!r}", "families: " + ", ".join(catalog.families()))
    if kind is not None and kind not in KINDS:
        raise FitcheckError(f"unknown kind {kind!r}", "choose one of: " + ", ".join(KINDS))
    found = catalog.search(query, family)
    if kind in ("instruct", "base"):
        found = tuple(e for e in found if e.variant == kind)
    elif kind in ("dense", "moe"):
        found = tuple(e for e in found if e.spec.is_moe == (kind == "moe"))
    return found


def local_models(found=None) -> tuple[tuple[ModelRef, ...], tuple[tuple[str, str, str], ...]]:
    """(the local models read, those that could not be: (name, source, reason)), from
    :func:`fitcheck.model.local_stores.discover` (or the LocalModel list given)."""
    from fitcheck.model.local_stores import discover
    from fitcheck.model.resolve import resolve_model

    refs: list[ModelRef] = []
    failed: list[tuple[str, str, str]] = []
    for lm in (discover() if found is None else found):
        try:
            r = resolve_model(lm.name)
        except FitcheckError as exc:
            failed.append((lm.name, lm.source, exc.one_line()))
            continue
        entry = r.entry
        refs.append(ModelRef(lm.name, r.spec, entry.family if entry else (r.spec.family or ""),
                             entry.released if entry else "", lm.source, lm.where, r.spec.active_params))
    return tuple(refs), tuple(failed)


def models_that_fit(machine: Machine, request: Any = None, *, entries: tuple[CatalogEntry, ...] | None = None,
                    models: tuple[ModelRef, ...] | None = None, headroom: float = DEFAULT_HEADROOM,
                    profile: str | None = None, unreadable: tuple[tuple[str, str, str], ...] = ()) -> FitsResult:
    """Every entry (default: the whole catalog; or `models`, e.g. the local ones) judged on
    `machine` for `request` (a Request of any mode; default: inference as `fitcheck MODEL` asks), ranked."""
    request = request if request is not None else Request()
    from fitcheck.plan import validate_request

    validate_request(request)
    if models is None:
        models = tuple(ModelRef.of(e) for e in (entries if entries is not None else load_catalog().entries))
    rows = [judge_model(m, request, machine, headroom, profile) for m in models]
    rows.sort(key=lambda r: (not r.fits, -r.params, _negated(r.model.released), r.model.id))
    return FitsResult(machine, profile, request, headroom, tuple(rows), unreadable, local=entries is None
                      and models is not None and any(m.source != "catalog" for m in models))


def _negated(released: str) -> tuple[int, ...]:
    return tuple(-int(p) for p in released.split("-") if p.isdigit())


@lru_cache(maxsize=4096)
def judge_model(model: ModelRef, request: Any, machine: Machine, headroom: float,
                profile: str | None) -> FitRow:
    """One model's row (memoised: the same question is answered once per process)."""
    from fitcheck.model.resolve import ResolvedModel
    from fitcheck.pipeline import check

    entry = model
    resolved = ResolvedModel(model.spec, model.id, model.source, None, None)
    training = request.training
    try:
        # the row needs the verdict and check's alternatives: not the largest context and batch, nor CPU-or-GPU
        result = check(resolved, request.with_changes(headroom=headroom * 100), machine, profile=profile,
                       search=False, device_advice=False)
    except FitcheckError as exc:
        return FitRow(entry, REFUSED, None, None, None, None, None, None, None, None, exc.one_line())
    if result.verdict.status in (FITS, TIGHT):
        return _row(entry, result.plan, result.verdict, machine, result.command(), None)
    keep = _KEEP_TRAINING if training else _KEEP_INFERENCE | ({"engine"} if request.engine else set())
    for alt in result.alternatives:          # best first: check's own ranking, each one check accepts
        if not keep & {name for name, _ in alt.changes}:
            return _row(entry, alt.plan, alt.verdict, machine, alt.fitcheck_command, alt.title)
    reason = "; ".join(result.verdict.reasons) or result.verdict.summary()
    return FitRow(entry, result.verdict.status, result.plan, *_room(result.verdict), None, None, None, None, reason,
                  _devices(result.verdict))


def _room(verdict) -> tuple[int | None, int | None, str | None]:
    """(need, free, device) of the fullest device: the one check's verdict line and `where` name."""
    from fitcheck.estimate.verdict import tightest_device

    d = tightest_device(verdict)
    if d is None:
        return None, None, None
    return d.need_bytes, d.free_bytes, d.device


def _row(entry: ModelRef, plan, verdict, machine: Machine, command: str, change: str | None) -> FitRow:
    """A fitting row: the command is the one check prints (it reproduces this row)."""
    decode = training = None
    if plan.training:
        from fitcheck.speed.training import estimate_training_speed

        rate = estimate_training_speed(entry.spec, plan, machine).rate
        training = None if rate is None else (rate.low, rate.high)
    else:
        from fitcheck.speed.decode import estimate_speed

        speed = estimate_speed(entry.spec, plan, machine)
        decode = None if speed.decode is None else (speed.decode.low, speed.decode.high)
    return FitRow(entry, verdict.status, plan, *_room(verdict), decode, training, command, change, "",
                  _devices(verdict))


def _devices(verdict) -> tuple[tuple[str, int, int], ...]:
    return tuple((d.device, d.need_bytes, d.free_bytes) for d in verdict.devices
                 if d.free_bytes is not None and d.need_bytes > 0)


# ---- rendering ----------------------------------------------------------------------------------
def fits_document(result: FitsResult) -> dict:
    """The JSON document (schema "fitcheck.fits/1"; tests lock the row keys)."""
    from fitcheck import __version__

    def rate(r: tuple[float, float] | None) -> dict | None:
        return None if r is None else {"low": round(r[0], 2), "high": round(r[1], 2)}

    def row(r: FitRow) -> dict:
        plan = r.plan if r.fits else None
        return {
            "id": r.model.id, "family": r.model.family, "params": r.params,
            "active_params": r.model.active_params,
            "precision": plan.precision if plan else None,
            "engine": getattr(plan, "engine", None) if plan else None,
            "device": getattr(plan, "device", None) if plan else None,
            "status": r.status, "need_bytes": r.need_bytes, "free_bytes": r.free_bytes,
            "decode_tokens_per_s": rate(r.decode_tokens_per_s),
            "training_tokens_per_s": rate(r.training_tokens_per_s),
            "fitcheck_command": r.fitcheck_command, "change": r.change, "reason": r.reason or None,
            **({"source": r.model.source, "where": r.model.where} if result.local else {}),
        }

    req = result.request
    request = {"mode": result.mode, "headroom_pct": round(result.headroom * 100, 2)}
    if result.mode == "inference":
        request.update(context=req.context, batch=req.batch, engine=req.engine)
    else:
        request.update(seq_len=req.seq_len, batch=req.batch)
    return {
        "schema": SCHEMA, "fitcheck_version": __version__,
        "machine": result.machine.name, "profile": result.profile, "request": request,
        "models": [row(r) for r in result.fitting],
        "not_fitting": [row(r) for r in result.rows if not r.fits],
        **({"unreadable": [{"name": n, "source": src, "reason": why} for n, src, why in result.unreadable]}
           if result.local or result.unreadable else {}),
    }


def render_fits_table(result: FitsResult, *, show_all: bool = False) -> str:
    from tabulate import tabulate

    from fitcheck.render.where import rate_text
    from fitcheck.speed.efficiency import Rate
    from fitcheck.units import GiB, format_count

    def speed(r: FitRow) -> str:
        pair = r.decode_tokens_per_s or r.training_tokens_per_s
        if pair is None:
            return "unknown"
        return rate_text(Rate(*pair), "").strip()

    def label(device: str | None) -> str:
        return device.upper() if device and device.startswith("gpu") else "RAM"

    def memory(r: FitRow) -> str:
        if len(r.devices) > 1:     # a split between GPU and RAM: both
            return ", ".join(f"{need / GiB:.1f}/{free / GiB:.0f} {label(d)}" for d, need, free in r.devices)
        if r.need_bytes is None or r.free_bytes is None:
            return ""
        return f"{r.need_bytes / GiB:.1f}/{r.free_bytes / GiB:.0f} {label(r.device)}"

    def runs_as(plan: Any) -> str:
        if plan.training:        # training: the base's format and what the recipe changed
            parts = [plan.precision]
            if plan.grad_checkpointing:
                parts.append("checkpointing")
            if plan.optimizer != "adamw":
                parts.append(plan.optimizer)
            if plan.zero is not None:
                parts.append(f"ZeRO-{plan.zero}" + (f" offload {plan.offload}" if plan.offload != "none" else ""))
            if plan.fsdp:
                parts.append(f"FSDP {plan.fsdp}")
            if plan.gpus > 1:
                parts.append(f"{plan.gpus} GPUs")
            return ", ".join(parts)
        how = f"{plan.precision} {plan.engine}"
        how += {"cpu": " CPU", "offload": f" {plan.offload_flag}"}.get(plan.device, "")
        if plan.gpus > 1:
            how += f" ×{plan.gpus} GPUs"
        if plan.kv_dtype in ("fp8", "q8_0", "q4_0"):
            how += f", KV {plan.kv_dtype}"
        return how

    req = result.request
    if result.mode == "inference":
        what = f"inference at {req.context:,} tokens, batch {req.batch}" + (f", {req.engine}" if req.engine else "")
        rate_head = "decode tok/s"
    else:
        what = f"{req.mode} fine-tuning, sequence {req.seq_len:,} tokens, micro-batch {req.batch}"
        rate_head = "train tok/s"
    lines = [f"Machine:  {result.machine.name} — {what}", ""]
    shown = result.rows if show_all else result.fitting
    if shown:
        table = []
        for r in shown:
            plan: Any = r.plan if r.fits else None
            how = runs_as(plan) if plan is not None else ""
            name = f"{r.model.id} ({r.model.source})" if result.local else r.model.id
            table.append((name, format_count(r.params), how or "—", memory(r), speed(r) if r.fits else "",
                          r.status.replace("_", " ")))
        lines.append(tabulate(table, headers=("model", "params", "runs as", "memory needed (GiB)", rate_head, "status"),
                              disable_numparse=True))
    else:
        lines.append("No local model fits this request here." if result.local else
                     "No catalog model fits this request here.")
    n_not = len(result.rows) - len(result.fitting)
    lines += ["", f"{len(result.fitting)} of {len(result.rows)} model(s) fit"
              + (f"; {n_not} do not (--all lists them, --json says why)" if n_not and not show_all else "")
              + ". Ranked by parameter count; each runs as check would choose (its default, else its best "
                "alternative at this context and batch)."]
    lines += [f"Not read: {n} ({src}): {why}" for n, src, why in result.unreadable]
    first = result.fitting[0].fitcheck_command if result.fitting else None
    if first:
        lines.append("Look closer: " + first)
    return "\n".join(lines)

