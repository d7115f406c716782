"""One request, one pipeline, every mode: request → plan → estimate → verdict → alternatives →
largest context/batch → speed.  `fitcheck check`, `where` (fitcheck.render.where and where_training
judge each machine with :func:`check`), plan files, interactive mode and the CI formats all run
through :func:`check`.

    from fitcheck.pipeline import check
    from fitcheck.request import Request
    from fitcheck.profiles import load_profile
    result = check("qwen-7b", Request(context=8192), load_profile("rtx-4090"))
    result.verdict.status, result.estimate.total_bytes, [a.fitcheck_command for a in result.alternatives]

No printing and no probing here: the caller passes the machine.  Rendering only formats the
result; the commands that reproduce each alternative come with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fitcheck import engines
from fitcheck.commands import engine_command, fitcheck_command, launch_lines
from fitcheck.engines import estimate_inference
from fitcheck.engines.checkpoints import Checkpoints, checkpoints_of
from fitcheck.engines.download import plan_download, with_disk
from fitcheck.errors import FitcheckError
from fitcheck.estimate.context_limit import context_note, search_limit
from fitcheck.estimate.result import Estimate
from fitcheck.estimate.verdict import (
    CANNOT_RUN,
    DOES_NOT_FIT,
    FITS,
    TIGHT,
    UNKNOWN,
    Verdict,
    judge,
    room_utilization,
    with_software,
)
from fitcheck.machine import Machine, nodes_of
from fitcheck.model.resolve import resolve_model
from fitcheck.model.spec import ModelSpec
from fitcheck.plan import DEFAULT_GPU_MEMORY_UTILIZATION, AnyPlan, Plan, TrainingPlan, resolve
from fitcheck.profiles import profile_names
from fitcheck.request import Request
from fitcheck.search.alternatives import find_alternatives
from fitcheck.search.device import DeviceAdvice, advise_device
from fitcheck.search.largest import largest_fitting
from fitcheck.search.routes import Alternative, Outcome, changed_fields, with_context
from fitcheck.search.training_routes import hybrid_advice
from fitcheck.speed.cost import CheckCost, CostSettings, check_cost
from fitcheck.speed.decode import SpeedEstimate, estimate_speed
from fitcheck.speed.training import TrainingSpeed, estimate_training_speed

if TYPE_CHECKING:
    from fitcheck.context import Context
    from fitcheck.engines.download import Download
    from fitcheck.engines.stack import StackCheck
    from fitcheck.storage import Storage

MAX_BATCH_SEARCHED = 4096
MAX_MICRO_BATCH_SEARCHED = 1024


@dataclass(frozen=True)
class Chosen:
    """Why the answer is for weights the user did not name: with --precision and --engine left to fitcheck, the
    default (``precision`` with ``engine``) does not fit here, and the best that does (search.best.best_precision,
    as `where` and `models --fits` choose: quality first, then speed) is answered instead."""

    precision: str                # the default's
    engine: str
    total_bytes: int              # what the default needs
    summary: str                  # the default's verdict line ("Does not fit: GPU0 needs …")
    title: str                    # what was chosen ("GGUF q4_k_m with llama.cpp")


@dataclass(frozen=True)
class CheckResult:
    """Everything a renderer needs, built first and rendered last (table, JSON, CI, interactive)."""

    query: str
    model: Any                  # fitcheck.model.resolve.ResolvedModel
    machine: Machine
    request: Request
    plan: AnyPlan
    estimate: Estimate
    verdict: Verdict
    max_context: int | None     # the largest context (training: sequence) that fits at this batch
    max_batch: int | None       # the largest batch (training: micro-batch) that fits at this length
    alternatives: tuple[Alternative, ...]
    speed: SpeedEstimate | None = None            # inference decode/prefill tokens/s
    device_advice: DeviceAdvice | None = None     # CPU or GPU for this request here, and why
    training_speed: TrainingSpeed | None = None   # training tokens/s and step time
    model_args: tuple[str, ...] = ()              # what to type for the same model (MODEL [--params N])
    profile: str | None = None                    # what to pass to --profile for the same machine
    cost: CostSettings | None = None              # electricity price and amortisation (fitcheck.estimate.cost)
    tokens: int | None = None                     # training: tokens to train on (--tokens), for time and cost
    software: StackCheck | None = None            # the installed stack checked for this request (this machine)
    launch: tuple[str, ...] = ()                  # what to run on each node (plans over several nodes)
    download: Download | None = None              # the bytes to download, where, the free disk (engines.download)
    better_layout: Alternative | None = None      # MoE: expert parallel where it holds more sequences than TP
    chosen: Chosen | None = None                  # the weights fitcheck chose, the default not fitting (choose)

    @property
    def spec(self) -> ModelSpec:
        return self.model.spec

    @property
    def headroom(self) -> float:
        return self.request.headroom / 100

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def model_id(self) -> str:
        return self.model.hf_id or self.spec.name

    @property
    def costs(self) -> CheckCost:
        """What the answer costs here: serving per million tokens, or the fine-tuning run of --tokens."""
        ts, sp = self.training_speed, self.speed
        if ts is not None:
            rate = (ts.rate.low, ts.rate.high) if ts.rate else None
        else:
            rate = (sp.decode.low, sp.decode.high) if sp is not None and sp.decode else None
        return check_cost(self.machine, rate, ts is not None, self.tokens, self.cost or CostSettings())

    def command(self, request: Request | None = None) -> str:
        """The `fitcheck` command that asks ``request`` (default: this one) again."""
        return fitcheck_command(self.model_args, request or self.request, profile=self.profile,
                                extra=machine_args(self.machine))


class Evaluator:
    """request → Outcome (plan, estimate, verdict), cached by plan: searches ask the same many times."""

    def __init__(self, spec: ModelSpec, machine: Machine, estimates: dict[Any, Estimate] | None = None):
        self.spec = spec
        self.machine = machine
        self._by_plan: dict[Any, tuple[Estimate, Verdict]] = {}
        self._by_request: dict[Request, Outcome] = {}
        # plan -> estimate: pure over (spec, plan) (the estimate carries the plan's assumptions), so shareable by
        # the Evaluators of one spec on other machines (shared_evaluations), where a plan recurs (the same GPUs)
        self._estimates: dict[Any, Estimate] = {} if estimates is None else estimates

    def outcome(self, request: Request) -> Outcome:
        """Raises FitcheckError for a malformed request."""
        if request not in self._by_request:
            plan = resolve(request, self.spec, self.machine)
            est, verdict = self.judge(plan, request.headroom / 100)
            self._by_request[request] = Outcome(request, plan, est, verdict)
        return self._by_request[request]

    def __call__(self, request: Request) -> Outcome | None:
        """The outcome, or None for a request fitcheck refuses as malformed (never offered)."""
        try:
            return self.outcome(request)
        except FitcheckError:
            return None

    def judge(self, plan: AnyPlan, headroom: float) -> tuple[Estimate, Verdict]:
        key = (plan.with_changes(assumptions=()), headroom)
        if key not in self._by_plan:
            est = self._estimates.get(plan)
            if est is None:
                est = self._estimates[plan] = _estimate(self.spec, plan)
            verdict = judge(est, nodes_of(self.machine, plan.nodes), headroom)
            if plan.problems:
                verdict = Verdict(CANNOT_RUN, verdict.devices, headroom, plan.problems)
            self._by_plan[key] = (est, verdict)
        return self._by_plan[key]


# While a shared_evaluations() block runs: (id(spec), id(machine)) -> its Evaluator (which holds both, so the ids
# stay theirs), for every check() inside it, and id(spec) -> the estimates its Evaluators share.  By identity: the
# same objects recur (where's profiles, the one resolved model), and a big frozen spec is slow to hash.
_SHARED: ContextVar[tuple[dict[tuple[int, int], Evaluator], dict[int, dict[Any, Estimate]]] | None] \
    = ContextVar("fitcheck_shared", default=None)


@contextmanager
def shared_evaluations() -> Iterator[None]:
    """Within the block, every check() (and evaluator()) of the same model on the same machine shares one
    Evaluator: `where` asks check several times per machine (its default, then check's advice there, expert
    parallel, more nodes), and the same requests recur; and the Evaluators of one model share its estimates
    across machines.  Outcomes depend only on (spec, machine, request) and estimates only on (spec, plan), so
    sharing changes no answer; the cache lives as long as the block (nested blocks share the outer one)."""
    if _SHARED.get() is not None:
        yield
        return
    token = _SHARED.set(({}, {}))
    try:
        yield
    finally:
        _SHARED.reset(token)


def evaluator(spec: ModelSpec, machine: Machine) -> Evaluator:
    """The Evaluator for ``spec`` on ``machine``: the shared one inside shared_evaluations(), else a new one."""
    shared = _SHARED.get()
    if shared is None:
        return Evaluator(spec, machine)
    evaluators, estimates = shared
    key = (id(spec), id(machine))
    if key not in evaluators:
        evaluators[key] = Evaluator(spec, machine, estimates.setdefault(id(spec), {}))
    return evaluators[key]


def _estimate(spec: ModelSpec, plan: AnyPlan) -> Estimate:
    if isinstance(plan, TrainingPlan):
        from fitcheck.engines.training.memory import estimate_training

        return estimate_training(spec, plan)

    return estimate_inference(spec, plan)


def all_at_once(estimate: Any, batch: int) -> bool:
    """Whether a pooled engine's KV pool holds every one of ``batch`` sequences at full length at once (more start
    and queue: engines.serving.queued_kv); True for the other engines."""
    pool = getattr(estimate, "pool", None)
    return pool is None or pool.max_concurrency >= batch


def largest(evaluate: Evaluator, request: Request, field: str, high: int) -> int | None:
    """The largest value of ``field`` (context, seq_len, batch) that fits with the rest of ``request``
    as asked: the request with that one field replaced, checked as if typed; for a pooled engine, with every
    sequence running at once (all_at_once)."""
    def fits(value: int) -> bool:
        asked = with_context(request, value) if field == "context" else request.with_changes(**{field: value})
        out = evaluate(asked)
        return out is not None and out.verdict.status == FITS and all_at_once(out.estimate, asked.batch)

    return largest_fitting(fits, 1, high)


def profile_arg(machine: Machine) -> str | None:
    """What to pass to --profile to get this machine again: a shipped profile's name, else its path."""
    if machine.source == "probe":
        return None

    return machine.name if Path(machine.source).stem == machine.name and machine.name in profile_names() \
        else machine.source


def machine_args(machine: Machine) -> tuple[str, ...]:
    """The --gpu/--vram/--ram overrides that made this machine (repeated in every printed command)."""
    return tuple(getattr(machine, "overrides", ()))


def resolve_model_arg(model: Any, params: str | None = None,
                      revision: str | None = None) -> tuple[Any, str, tuple[str, ...]]:
    """(ResolvedModel, query, model_args) for a name/path (or a model already resolved)."""
    if isinstance(model, str):
        resolved = resolve_model(model, params=params) if params else resolve_model(model, revision=revision)
        # The canonical id for catalog and Hub models (a short name may pick another model one day);
        # a local path or a generic name as typed, with its --params.
        name = resolved.hf_id if resolved.source in ("catalog", "hub") and resolved.hf_id else model.strip()
        args = (name,) + (("--params", params) if params else ()) + (("--revision", revision) if revision else ())
        return resolved, model.strip(), args
    query = model.hf_id or model.spec.name
    return model, query, (query,)


# What the chosen weights may change (`where` rows change the same): the weights' format, the engine that runs it,
# llama.cpp's layers or experts in RAM, what that engine needs (vLLM's utilization; no transformers release or
# attention for llama.cpp), and the device they run on.
WEIGHTS_ONLY = frozenset({"precision", "engine", "cpu_moe", "gpu_layers", "transformers_version", "attention",
                          "gpu_memory_utilization", "device"})


def check(model: Any, request: Request, machine: Machine, *, params: str | None = None,
          revision: str | None = None, alternatives: bool = True, search: bool = True,
          profile: str | None = None, as_typed: tuple[str, ...] | None = None,
          storage: Storage | None = None, device_advice: bool = True, ctx: Context | None = None,
          choose: bool = True) -> CheckResult:
    """Will ``model`` (a name, path or ResolvedModel) serve or train as ``request`` says on ``machine``?

    With ``choose`` (and ``alternatives``), an inference request that leaves both --precision and --engine to
    fitcheck and does not fit at its default is answered for the best weights that do fit here (Chosen: check's
    best alternative that changes only the weights, else search.best.best_precision; the answer says what the
    default needs), as `where` and `models --fits` answer;
    --precision, --engine or ``choose=False`` (--strict) judge the default as it is.  See _check for the rest."""
    kw: dict[str, Any] = dict(params=params, revision=revision, profile=profile, as_typed=as_typed, storage=storage,
                              ctx=ctx, search=search, device_advice=device_advice)
    result = _check(model, request, machine, alternatives=alternatives, **kw)
    picked = _chosen(result, request) if choose and alternatives else None
    if picked is None:
        return result
    again = _check(model, picked[0], machine, alternatives=True, **kw)
    return replace(again, chosen=picked[1]) if again.verdict.status in (FITS, TIGHT) else result


def _chosen(result: CheckResult, asked: Request) -> tuple[Request, Chosen] | None:
    """The request (``asked`` with the weights changed) and Chosen for the best weights that fit where ``result``
    (the default, judged) does not; None when it fits or cannot run, when the user set --precision or --engine or
    named a model file or an Ollama build (its weights are chosen), or when no change of weights fits."""
    from fitcheck.search.best import best_precision

    plan = result.plan
    if (asked.training or asked.precision is not None or asked.engine is not None
            or result.verdict.status != DOES_NOT_FIT or not isinstance(plan, Plan) or plan.problems
            or result.model.source not in ("catalog", "hub", "where")):
        return None
    best = next((a for a in result.alternatives if {k for k, _ in a.changes} <= WEIGHTS_ONLY
                 and a.plan.device in (plan.device, "offload")), None)
    if best is None:
        best = best_precision(result.spec, result.request, plan, result.machine,
                              evaluator(result.spec, result.machine))
    if best is None:
        return None
    changes = dict(changed_fields(result.request, best.request))
    if set(changes) - WEIGHTS_ONLY or set(asked.given()) & set(changes):
        return None
    return asked.with_changes(**changes), Chosen(plan.precision, plan.engine, result.estimate.total_bytes,
                                                 result.verdict.summary(), best.title)


def _check(model: Any, request: Request, machine: Machine, *, params: str | None = None,
           revision: str | None = None, alternatives: bool = True, search: bool = True,
           profile: str | None = None, as_typed: tuple[str, ...] | None = None,
           storage: Storage | None = None, device_advice: bool = True, ctx: Context | None = None) -> CheckResult:
    """Will ``model`` (a name, path or ResolvedModel) serve or train as ``request`` says on ``machine``?

    Malformed input raises FitcheckError (exit 2); anything else is a verdict: fits, tight, does
    not fit, cannot run here (kernels, compute capability, GPUs missing), does not fit on disk
    (``storage``: the free space where downloads land and the copies already here, read at the
    edge by fitcheck.probe.disk.read_storage; None: the disk is not checked) or unknown.
    ``alternatives``, ``search`` and ``device_advice`` (CPU or GPU) False skip what a caller
    does not show (`where`, `models --fits`); nothing else of the result changes.  ``ctx``: what the front end
    read of the machine (fitcheck.context: the installed engines and stack on this machine, cost settings).
    """
    asked = request
    if ctx is not None:
        request = ctx.ask(request)

    resolved, query, model_args = resolve_model_arg(model, params, revision)
    if as_typed is not None and resolved.source in ("local", "generic"):
        # A model resolved (and perhaps altered) by the caller: its commands name it as the user typed it.
        query, model_args = as_typed[0], as_typed
    elif as_typed is not None:
        model_args = model_args[:1] + as_typed[1:]  # the canonical id, with the flags typed (--revision)
    spec = resolved.spec
    model_ref, repos = _engine_model(resolved, model_args)
    local = resolved.source == "local"
    evaluate = evaluator(spec, machine)
    outcome = evaluate.outcome(request)
    plan, estimate, verdict = outcome.plan, outcome.estimate, outcome.verdict
    if estimate.assumptions != plan.assumptions:
        # an equal plan reached by another request first (evaluations shared across checks): this one's reasons
        estimate = replace(estimate, assumptions=plan.assumptions)
    download_of = _Downloads(resolved, storage, request.download_dir)
    download = download_of(plan)
    verdict = with_disk(verdict, download)
    checked = download_of.judged(evaluate) if storage is not None and storage.places else evaluate
    past = context_note(spec, request.seq_len if request.training else request.context,
                        "--seq-len" if request.training else "--context")
    if past:
        estimate = replace(estimate, notes=(past, *estimate.notes))
    profile = profile if profile is not None else profile_arg(machine)

    alts: tuple[Alternative, ...] = ()
    if alternatives and verdict.status != FITS:
        extra = machine_args(machine)
        alts = tuple(replace(a, fitcheck_command=fitcheck_command(model_args, a.request, profile=profile, extra=extra),
                             engine_command=engine_command(model_ref, a.plan, repos, local=local),
                             download=download_of(a.plan), speed=plan_speed(spec, a.plan, machine, a.estimate))
                     for a in find_alternatives(spec, request, plan, machine, pool_room(checked, machine)))

    max_context, max_batch = _largest(spec, request, evaluate) if search and verdict.status not in (
        CANNOT_RUN, UNKNOWN) else (None, None)

    better = None
    if alternatives and isinstance(plan, Plan) and verdict.runs:
        better = _expert_parallel_layout(spec, request, plan, estimate, evaluate)
        if better is not None:
            better = replace(better, fitcheck_command=fitcheck_command(model_args, better.request, profile=profile,
                                                                       extra=machine_args(machine)),
                             engine_command=engine_command(model_ref, better.plan, repos, local=local))

    speed = advice = training_speed = None
    if isinstance(plan, TrainingPlan):
        training_speed = estimate_training_speed(spec, plan, machine)
        hint = hybrid_advice(spec, request, plan, machine, evaluate) if verdict.status == FITS else None
        if hint:
            estimate = replace(estimate, notes=(*estimate.notes, hint))
    else:
        speed = estimate_speed(spec, running_plan(plan, estimate), machine)
        # With a free-memory figure unknown, "does it fit" is unknown too: no advice to give.
        if device_advice and verdict.status != UNKNOWN and not plan.problems:
            advice = _device_advice(spec, request, plan, machine, evaluate, alts)
    result = CheckResult(
        query=query, model=resolved, machine=machine, request=request, plan=plan, estimate=estimate,
        verdict=verdict, max_context=max_context, max_batch=max_batch, alternatives=alts, speed=speed,
        device_advice=advice, training_speed=training_speed, model_args=model_args, profile=profile,
        launch=launch_lines(model_ref, plan, repos) if not plan.problems else (), download=download,
        better_layout=better,
    )
    return ctx.finish(result, asked) if ctx is not None else result


def plan_speed(spec: ModelSpec, plan: AnyPlan, machine: Machine, estimate: Any = None
               ) -> SpeedEstimate | TrainingSpeed:
    """How fast ``plan`` runs on ``machine``: training tokens/s for a TrainingPlan, decode and prefill otherwise; a
    pooled engine's decode at the sequences its KV pool runs at once (``estimate``'s pool), the rest queued."""
    if isinstance(plan, TrainingPlan):
        return estimate_training_speed(spec, plan, machine)
    return estimate_speed(spec, running_plan(plan, estimate), machine)


def running_plan(plan: Plan, estimate: Any) -> Plan:
    """``plan`` with its batch cut to the sequences a pooled engine's KV pool runs at once at full length, when it
    holds fewer than the batch (engines.serving.queued_kv); else ``plan``."""
    pool = getattr(estimate, "pool", None)
    if pool is None or all_at_once(estimate, plan.batch):
        return plan
    return plan.with_changes(batch=max(int(pool.max_concurrency), 1))


class _Downloads:
    """Each plan's download (fitcheck.engines.download), once: the alternatives' plans recur."""

    def __init__(self, resolved: Any, storage: Storage | None, download_dir: str | None):
        self.resolved, self.storage, self.download_dir = resolved, storage, download_dir
        self._by_plan: dict[Any, Download] = {}

    def __call__(self, plan: AnyPlan) -> Download:
        key = plan.with_changes(assumptions=())
        if key not in self._by_plan:
            self._by_plan[key] = plan_download(self.resolved, plan, self.storage, self.download_dir)
        return self._by_plan[key]

    def judged(self, evaluate: Evaluator) -> Callable[[Request], Outcome | None]:
        """``evaluate`` with each outcome's download judged with its memory (an alternative must fit on disk too)."""
        def checked(req: Request) -> Outcome | None:
            out = evaluate(req)
            return None if out is None else replace(out, verdict=with_disk(out.verdict, self(out.plan)))

        return checked


def _device_advice(spec: ModelSpec, request: Request, plan: Plan, machine: Machine, evaluate: Evaluator,
                   alts: tuple[Alternative, ...]) -> DeviceAdvice | None:
    """CPU or GPU for this request here (fitcheck.search.device), among the plan and the alternatives that run."""
    options = [a.plan for a in alts if isinstance(a.plan, Plan) and a.verdict.runs and not a.plan.problems]
    return advise_device(spec, plan, machine, lambda p: evaluate.judge(p, request.headroom / 100)[1].runs, options)


def _engine_model(resolved: Any, model_args: tuple[str, ...]) -> tuple[str, Checkpoints]:
    """What the engines' commands load (a local model's path as typed; an Ollama name's or repo:QUANT's base
    repository), and the catalog's pre-quantized repositories."""
    ref = model_args[0] if resolved.source == "local" else (resolved.hf_id or resolved.spec.name)
    if resolved.entry is not None and ":" in ref:
        ref = resolved.entry.hf_id
    return ref, checkpoints_of(resolved.entry)


def _largest(spec: ModelSpec, request: Request, evaluate: Evaluator) -> tuple[int | None, int | None]:
    """The longest context (training: sequence) and the largest batch (micro-batch) that fit, the other kept."""
    if request.training:
        return (largest(evaluate, request, "seq_len", search_limit(spec, request.seq_len)),
                largest(evaluate, request, "batch", MAX_MICRO_BATCH_SEARCHED))
    return (largest(evaluate, request, "context", search_limit(spec, request.context)),
            largest(evaluate, request, "batch", MAX_BATCH_SEARCHED))


def pool_room(evaluate: Any, machine: Machine) -> Any:
    """``evaluate`` where a request at the default --gpu-memory-utilization overflows only by what its engine keeps
    beyond its reservation (vLLM: the CUDA context and graphs): the same request at the largest utilization that
    leaves them room, when that still holds it (an alternative then prints the flag)."""
    totals = [g.memory_total_bytes for g in machine.gpus if isinstance(g.memory_total_bytes, int)]
    frees = [g.memory_free_bytes for g in machine.gpus if isinstance(g.memory_free_bytes, int)]

    def evaluate_with_room(req: Request) -> Outcome | None:
        out = evaluate(req)
        pool = out.estimate.pool if out is not None else None
        if (out is None or out.verdict.status != DOES_NOT_FIT or pool is None or not pool.holds_activations
                or req.gpu_memory_utilization != DEFAULT_GPU_MEMORY_UTILIZATION or not totals or not frees):
            return out
        utilization = room_utilization(min(frees), pool.outside_bytes, min(totals))
        if not 0.5 <= utilization < req.gpu_memory_utilization:
            return out
        lowered = evaluate(req.with_changes(gpu_memory_utilization=utilization))
        return lowered if lowered is not None and lowered.verdict.status != DOES_NOT_FIT else out

    return evaluate_with_room


def _concurrency(est: Estimate) -> float | None:
    return est.pool.max_concurrency if est.pool is not None else None


def _expert_parallel_layout(spec: ModelSpec, request: Request, plan: Plan, estimate: Estimate,
                            evaluate: Evaluator) -> Alternative | None:
    """For an MoE model served tensor parallel over several GPUs: the same GPUs expert parallel with attention
    data parallel, when it holds more concurrent sequences (the KV cache no longer replicated over TP ranks)."""
    if not spec.is_moe or plan.expert_parallel or plan.world < 2 or plan.engine not in engines.EXPERT_PARALLEL_ENGINES:
        return None
    asked = request.with_changes(expert_parallel=True, engine=plan.engine)
    out = evaluate(asked)
    if out is None or not out.verdict.runs or out.plan.problems:
        return None
    now, then = _concurrency(estimate), _concurrency(out.estimate)
    if now is None or then is None or then <= now:
        return None
    return Alternative(f"Expert parallel with data-parallel attention: maximum concurrency {then:g}× instead of "
                       f"{now:g}× at {plan.context:,} tokens", asked, out.plan, out.estimate, out.verdict, 0.0,
                       changed_fields(request, asked))


# ---- the installed software stack (this machine only) ---------------------------------------------
def with_stack(result: CheckResult, stack: Any) -> CheckResult:
    """`result` with the installed stack (a fitcheck.probe.software.SoftwareStack) checked against its plan:
    a blocking issue makes the verdict CANNOT_RUN (exit 1), and alternatives the stack cannot run are
    dropped.  Only for the machine the stack was read on: never with a --profile."""
    from fitcheck.engines.stack import check_stack

    checked = check_stack(stack, result.machine, result.plan)
    alts = tuple(a for a in result.alternatives if not check_stack(stack, result.machine, a.plan).blocking)
    return replace(result, verdict=with_software(result.verdict, tuple(i.text for i in checked.blocking)),
                   alternatives=alts, software=checked)
