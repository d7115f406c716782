"""`fitcheck models --fits`: which catalog models run (or train) on this machine, and how.

Every model is judged with :func:`fitcheck.pipeline.check` exactly as ``fitcheck MODEL`` would
judge it, and takes the configuration check itself would point to:
the request as asked when it fits, else check's best alternative that keeps what the user asked
for (the context and batch, the mode and sequence length of a training run, the engine when one
was named, and the one machine: never more nodes).  So each row's ``fitcheck_command`` re-checks
as fitting, with the same numbers.

Ranking (``sort``): by score (default; fitcheck.search.fit_score: capability × quality × speed × fit margin),
decode speed (unknown last), parameter count (total, as published) or memory needed, the higher first, then the
newer release; models that do not fit follow by parameter count.  ``min_speed`` and ``top`` leave rows out of
what is listed (FitsResult.listed) and say how many.

Each model's answer is memoised per (model, request, machine, headroom): the machine is probed
once by the caller, never here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from fitcheck import engines
from fitcheck.context import Context
from fitcheck.errors import FitcheckError
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.verdict import FITS, TIGHT, tightest_device
from fitcheck.machine import Machine
from fitcheck.model.catalog import CatalogEntry, get_entry, load_catalog
from fitcheck.model.resolve import ResolvedModel, resolve_model
from fitcheck.model.spec import ModelSpec
from fitcheck.options import DEFAULTS
from fitcheck.pipeline import check
from fitcheck.plan import validate_request
from fitcheck.request import Request
from fitcheck.search.fit_score import DEFAULT_SORT, SORTS, FitScore, fit_score
from fitcheck.speed.decode import estimate_speed
from fitcheck.speed.training import estimate_training_speed

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
    # whether its engine command loads a checkpoint that exists (Engine.checkpoint_known): the model's own, a format
    # the engine makes at load, a published build of it; False: fitcheck knows of no build of that format
    checkpoint_known: bool = True

    @property
    def fits(self) -> bool:
        return self.status in (FITS, TIGHT)

    @property
    def params(self) -> int:
        return self.model.spec.total_params

    @property
    def speed(self) -> float | None:
        """What --min-speed and --sort speed read (tokens/s, the estimate's low end): decode per sequence
        (inference), training tokens/s (training); None: unknown, or the row does not fit."""
        if self.decode_tokens_per_s is not None:
            return self.decode_tokens_per_s[0] / max(getattr(self.plan, "batch", 1) or 1, 1)
        return self.training_tokens_per_s[0] if self.training_tokens_per_s is not None else None

    @property
    def need_in_all(self) -> int:
        """Bytes the row needs over every device it uses (--sort size)."""
        return sum(need for _, need, _ in self.devices) if self.devices else (self.need_bytes or 0)

    @property
    def score(self) -> FitScore | None:
        """fitcheck.search.fit_score of a fitting row (None: it does not fit); from the row's own numbers."""
        if not self.fits or self.plan is None:
            return None
        training = bool(getattr(self.plan, "training", False))
        return fit_score(self.params, self.model.active_params or self.model.spec.active_params,
                         weight_format(self.plan.precision).quality_loss, self.speed, self.need_bytes,
                         self.free_bytes, score_speed=not training)


@dataclass(frozen=True)
class FitsResult:
    machine: Machine
    profile: str | None
    request: Any                        # fitcheck.request.Request
    headroom: float
    rows: tuple[FitRow, ...]            # ranked (``sort``): fitting first, then those that do not, by params
    unreadable: tuple[tuple[str, str, str], ...] = ()   # local models not read: (name, source, reason)
    local: bool = False
    sort: str = DEFAULT_SORT            # SORTS
    top: int = 0                        # the most fitting rows listed (0: all)
    min_speed: float | None = None      # tokens/s: fitting rows with a known speed below it are not listed

    @property
    def fitting(self) -> tuple[FitRow, ...]:
        """Every row that fits, ranked, before --min-speed and --top."""
        return tuple(r for r in self.rows if r.fits)

    @property
    def fast_enough(self) -> tuple[FitRow, ...]:
        """The fitting rows --min-speed keeps: a known speed at least ``min_speed``, or an unknown one."""
        floor = self.min_speed
        return tuple(r for r in self.fitting if floor is None or r.speed is None or r.speed >= floor)

    @property
    def listed(self) -> tuple[FitRow, ...]:
        """The fitting rows shown: fast_enough, the first ``top`` of them (0: all)."""
        kept = self.fast_enough
        return kept[:self.top] if self.top else kept

    @property
    def left_out_by_min_speed(self) -> int:
        return len(self.fitting) - len(self.fast_enough)

    @property
    def left_out_by_top(self) -> int:
        return len(self.fast_enough) - len(self.listed)

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
                    profile: str | None = None, unreadable: tuple[tuple[str, str, str], ...] = (),
                    context: Context | None = None, sort: str = DEFAULT_SORT, top: int = 0,
                    min_speed: float | None = None) -> FitsResult:
    """Every entry (default: the whole catalog; or `models`, e.g. the local ones) judged on
    `machine` for `request` (a Request of any mode; default: inference as `fitcheck MODEL` asks), ranked by
    ``sort`` (SORTS); ``top`` and ``min_speed`` choose what FitsResult.listed shows (every row stays in
    ``rows``); ``context``: what `fitcheck MODEL` reads of the machine (fitcheck.context)."""
    request = request if request is not None else Request()

    validate_request(request)
    if sort not in SORTS:
        raise FitcheckError(f"unknown sort {sort!r}", "choose one of: " + ", ".join(SORTS))
    if top < 0 or (min_speed is not None and min_speed < 0):
        raise FitcheckError("--top and --min-speed take a number of at least 0")
    if models is None:
        models = tuple(ModelRef.of(e) for e in (entries if entries is not None else load_catalog().entries))
    rows = rank_rows([judge_model(m, request, machine, headroom, profile, context) for m in models], sort)
    return FitsResult(machine, profile, request, headroom, tuple(rows), unreadable, local=entries is None
                      and models is not None and any(m.source != "catalog" for m in models),
                      sort=sort, top=top, min_speed=min_speed)


def rank_rows(rows: list[FitRow], sort: str = DEFAULT_SORT) -> list[FitRow]:
    """Fitting rows first, ranked by ``sort``, the higher first: "score" by the score shown (a whole number), ties
    by a build fitcheck can name before one it cannot (FitRow.checkpoint_known), then the newer release, then more
    parameters; "speed" by FitRow.speed, unknown last; "params" by parameters (total), "size" by memory needed in
    all, ties of these by more parameters, then the newer release.  The rows that do not fit after, by parameters.
    The model id settles what is still tied."""
    def by_params(r: FitRow) -> tuple[Any, ...]:
        return (-r.params, _negated(r.model.released), r.model.id)

    def key(r: FitRow) -> tuple[Any, ...]:
        if not r.fits:
            return (1, 0.0, *by_params(r))
        if sort == "score":
            score = r.score
            first = -round(score.total) if score is not None else 0.0
            return (0, first, not r.checkpoint_known, _negated(r.model.released), -r.params, r.model.id)
        if sort == "speed":
            return (0, -r.speed if r.speed is not None else math.inf, *by_params(r))
        if sort == "size":
            return (0, -r.need_in_all, *by_params(r))
        return (0, 0.0, *by_params(r))

    return sorted(rows, key=key)


def _negated(released: str) -> tuple[int, ...]:
    return tuple(-int(p) for p in released.split("-") if p.isdigit())


@lru_cache(maxsize=4096)
def judge_model(model: ModelRef, request: Any, machine: Machine, headroom: float,
                profile: str | None, context: Context | None = None) -> FitRow:
    """One model's row (memoised: the same question is answered once per process)."""
    entry = model
    # with its catalog entry: the pre-quantized repositories a check's commands and its choice of weights read
    resolved = ResolvedModel(model.spec, model.id, model.source, None,
                             get_entry(model.spec.name) if model.source == "catalog" else None)
    training = request.training
    try:
        # the row needs the verdict and check's alternatives: not the largest context and batch, nor CPU-or-GPU
        result = check(resolved, request.with_changes(headroom=headroom * 100), machine, profile=profile,
                       search=False, device_advice=False, ctx=context)
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
    d = tightest_device(verdict)
    if d is None:
        return None, None, None
    return d.need_bytes, d.free_bytes, d.device


def _row(entry: ModelRef, plan, verdict, machine: Machine, command: str, change: str | None) -> FitRow:
    """A fitting row: the command is the one check prints (it reproduces this row)."""
    decode = training = None
    if plan.training:
        rate = estimate_training_speed(entry.spec, plan, machine).rate
        training = None if rate is None else (rate.low, rate.high)
    else:
        speed = estimate_speed(entry.spec, plan, machine)
        decode = None if speed.decode is None else (speed.decode.low, speed.decode.high)
    known = engines.checkpoint_known(entry.spec, plan)
    return FitRow(entry, verdict.status, plan, *_room(verdict), decode, training, command, change, "",
                  _devices(verdict), known)


def _devices(verdict) -> tuple[tuple[str, int, int], ...]:
    return tuple((d.device, d.need_bytes, d.free_bytes) for d in verdict.devices
                 if d.free_bytes is not None and d.need_bytes > 0)
