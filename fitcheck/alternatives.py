"""What runs instead: alternative requests, each re-checked through the same pipeline, ranked.

An alternative is the request with a few fields replaced (typed changes, never strings).  Each
candidate is resolved and estimated exactly as a request typed by the user would be, so one the
capability table refuses, or one whose options contradict each other, never shows up, and its
command (built from the changed request) reproduces its status and bytes.

Candidates are drawn from the capability table: only precisions, KV types, optimizers and
sharding the machine's device kind runs.  Cost (lower is better) ranks them: quality first
(precision ranks in estimate/formats.py), then speed (offload, CPU, checkpointing; where fitcheck chose
the engine, the decode speed a quantized candidate gives up against the fastest engine that runs it),
then what the user gives up of the request (context, batch, sequence length), and more machines (renting and
setting up a cluster costs what 16-bit → 4-bit costs, COST_CLUSTER, then COST_PER_NODE each).  The inference list shown
is read as a practitioner's advice: one good option per route (serving engine, llama.cpp, transformers)
before a third of the same route, no more nodes where this machine already fits at the same quality, and an
option too slow to read along after one much faster that gives up at most a small quality step more
(speed_order: the cost's speed term stops growing at SLOWDOWN_CAP).  The training list leaves out an option that
makes another's changes and more without fitting better (_gives_up_more_for_nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from fitcheck import engines
from fitcheck.engines.transformers.releases import MXFP4_TRANSFORMERS_NEEDS
from fitcheck.estimate.context_limit import search_limit
from fitcheck.estimate.formats import stored_only_problem, weight_format
from fitcheck.estimate.result import Estimate
from fitcheck.estimate.sharding import FSDP_STRATEGIES
from fitcheck.estimate.verdict import FITS, TIGHT, Verdict
from fitcheck.estimate.weights import weight_bytes
from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec
from fitcheck.plan import AnyPlan, Plan, TrainingPlan, grad_checkpointing
from fitcheck.request import Request
from fitcheck.search.largest import largest_fitting
from fitcheck.speed.efficiency import CPU_ENOUGH_TOKENS_PER_S

MAX_ALTERNATIVES = 5
MAX_TRAINING_ALTERNATIVES = 6
MIN_USEFUL_CONTEXT = 512
MIN_USEFUL_SEQ = 256

# Inference costs: a precision step of quality loss costs 10; offloading to CPU is slow (15 + share),
# CPU-only slower (45); giving up context or sequences costs in proportion to what is given up.
COST_PER_QUALITY_STEP = 10
COST_SHORTER = 10           # a shorter context or sequence than asked: it changes what the request can do,
COST_SHORTER_SPAN = 40      # and more, the more of the asked length it gives up (shorter_cost)
COST_KV = {"fp8": 4, "q8_0": 4, "q4_0": 9}
COST_PER_GPU = 2            # using more of the machine's own GPUs costs little
COST_TIGHT = 3              # fits only inside the headroom
COST_GGUF = 5               # a GGUF build instead of the checkpoint: another download, another server to run
# Partial offload with llama.cpp: 15, plus 30 × the share of a decode step's weights read from RAM
# (-ngl: the layers on the CPU; --n-cpu-moe: the picked experts of the offloaded layers).
COST_OFFLOAD = 15
COST_PER_RAM_SHARE = 30
# vLLM --cpu-offload-gb moves the offloaded bytes over PCIe in every forward pass: a last resort,
# after the GGUF builds and the CPU (45), plus COST_PER_SLOWDOWN per multiple of the step it adds.
COST_STREAMED = 50
# Another engine than the request's default (vLLM's paged KV cache instead of transformers' device_map):
# one more thing to install and launch, a little less than a quality step.
COST_ENGINE_SWITCH = 3
# Training costs.
COST_CHECKPOINTING = 5      # ≈ 30 % more compute (one extra forward per step)
COST_ACCUMULATION = 2
COST_8BIT_OPTIMIZER = 4
COST_PAGED_OPTIMIZER = 5    # 8-bit states that page to RAM under pressure (slower only when they do)
# Pure bf16 weights (--master-weights none): updates rounded to bf16's 8-bit mantissa lose small
# steps (Zamirai et al. 2020, "Revisiting BFloat16 Training"; Kahan summation or stochastic rounding
# recover most of it): a quality cost, dearer than the speed costs, cheaper than LoRA.
COST_PURE_BF16 = 8
# full → LoRA changes what is trained (a low-rank update instead of every weight): a practitioner
# who asked for full fine-tuning tries the cheap steps (checkpointing, 8-bit optimizer, pure bf16,
# accumulation: 5 + 4 + 8 + 2) and sharding before it; optimizer offload (20) costs PCIe time only.
COST_LORA = 25
COST_QLORA = 10             # LoRA → QLoRA: a 4-bit base
COST_SHARDING = 5           # ZeRO / FSDP communication
COST_OFFLOAD_OPTIMIZER = 20
COST_OFFLOAD_PARAMS = 30
COST_PER_SLOWDOWN = 10      # offload: per step time its PCIe transfers may add, as a multiple of compute
COST_RUNNABLE = 8           # what the request named does not run here: swapped for what does
COST_PER_NODE = 10          # each machine more (rented or owned) beside this one: one quantization step, so a
#                             single machine's cheap steps (checkpointing, 8-bit AdamW) come before renting more
# Going from one machine to several: a cluster to rent (or own) with a fast network between its nodes, a launcher
# on every node (Ray for vLLM, torchrun or DeepSpeed's hostfile over ssh, llama.cpp's rpc-server), a run that
# fails when one node does.  A practitioner takes one machine unless the quality it gives up matters: the cluster
# costs what 16-bit → 4-bit costs (SMALL_QUALITY_LOSS quality steps: AWQ, GPTQ-int4, NF4, Q4_K_M), so one machine
# at 4-bit ranks before a cluster at 16-bit (Qwen2-72B on an H100: vLLM AWQ on one node before bf16 over two),
# and a cluster before one machine that gives up more (Q3_K_M, or the layers in RAM); in training LoRA (25)
# and QLoRA (35) come before full fine-tuning over more nodes.  Paid once: a plan already over several nodes
# pays COST_PER_NODE only for each node more (cluster_cost).
COST_CLUSTER = COST_PER_QUALITY_STEP * weight_format("q4_k_m").quality_loss
MAX_NODES_SEARCHED = 64     # the most nodes an alternative proposes
COST_EXPERT_PARALLEL = 2    # another layout of the same GPUs (all-to-alls instead of all-reduces): no quality lost

# The lower-precision weights a practitioner reaches for with each engine; a serving engine without an
# entry here (vLLM-like: the pre-quantized checkpoints and online fp8) gets _SERVING_QUANTIZED.
_SERVING_QUANTIZED = ("fp8", "gptq-int8", "awq", "gptq-int4")
_LOWER_PRECISIONS = {name: e.lower_precisions for name, e in engines.ENGINES.items()}
_ENGINE_TITLES = {"vllm": "vLLM", "sglang": "SGLang"}
_GGUF_LADDER = ("q8_0", "q6_k", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k")


@dataclass(frozen=True)
class Outcome:
    """One request checked: its plan, estimate and verdict."""

    request: Request
    plan: AnyPlan
    estimate: Estimate
    verdict: Verdict


T = TypeVar("T")
Evaluate = Callable[[Request], "Outcome | None"]   # None: the request is malformed (never offered)


@dataclass(frozen=True)
class Alternative:
    title: str
    request: Request                          # the whole request to ask instead
    plan: AnyPlan
    estimate: Estimate
    verdict: Verdict
    cost: float
    changes: tuple[tuple[str, Any], ...]      # request fields replaced, with their new (typed) values
    fitcheck_command: str = ""
    engine_command: str = ""
    download: Any = None                      # fitcheck.estimate.download.Download of its plan


def shorter_cost(got: int, asked: int) -> float:
    """What a shorter context or sequence than the one asked costs."""
    return COST_SHORTER + COST_SHORTER_SPAN * (1 - got / asked)


def changed_fields(before: Request, after: Request) -> tuple[tuple[str, Any], ...]:
    return tuple((f.name, getattr(after, f.name)) for f in fields(Request)
                 if getattr(before, f.name) != getattr(after, f.name))


class _Search:
    """Collects candidates: each evaluated once (by plan), kept when it fits or fits tightly."""

    def __init__(self, base: Request, evaluate: Evaluate):
        self.base = base
        self.evaluate = evaluate
        self.found: list[Alternative] = []
        self.seen: set = set()

    def fits(self, request: Request) -> bool:
        out = self.evaluate(request)
        return out is not None and out.verdict.status == FITS

    def consider(self, title: str, request: Request, cost: float) -> Outcome | None:
        out = self.evaluate(request)
        if out is None:
            return None
        key = out.plan.with_changes(assumptions=())
        if key in self.seen:
            return out
        self.seen.add(key)
        if out.verdict.status in (FITS, TIGHT):
            # out.request: the request evaluated, which may carry what made it fit (pipeline.vllm_room's utilization)
            self.found.append(Alternative(title, out.request, out.plan, out.estimate, out.verdict,
                                          cost + (COST_TIGHT if out.verdict.status == TIGHT else 0),
                                          changed_fields(self.base, out.request)))
        return out

    def ranked(self, n: int) -> tuple[Alternative, ...]:
        return tuple(sorted(self.found, key=_rank)[:n])

    def ranked_for_training(self, n: int) -> tuple[Alternative, ...]:
        """By cost, without an option that gives up more than another for nothing (_gives_up_more_for_nothing)."""
        return tuple(a for a in sorted(self.found, key=_rank) if not _gives_up_more_for_nothing(a, self.found))[:n]

    def ranked_for_serving(self, n: int, plan: AnyPlan, spec: ModelSpec, machine: Machine) -> tuple[Alternative, ...]:
        """The inference alternatives a practitioner would read: by cost, without the multi-node ones a
        single machine's fitting alternative makes needless (_needless_nodes), a much slower option after a
        much faster one that gives up little more (speed_order), one good option per route before a third of
        the same route (_diverse)."""
        found = sorted(self.found, key=_rank)
        kept = [a for a in found if not _needless_nodes(a, found, plan)]
        footings = {id(a): _footing(spec, machine, a) for a in kept}
        return _diverse(speed_order(kept, lambda a: footings[id(a)]))[:n]


def _gives_up_more_for_nothing(a: Alternative, found: list[Alternative]) -> bool:
    """Whether another alternative makes some of ``a``'s changes and no other, fits at least as well and costs
    no more: ``a`` gives up the rest for nothing (8-bit AdamW or a lower LoRA rank on top of gradient
    checkpointing, still tight, beside gradient checkpointing alone, tight: 0.3 GiB less of the same 22 GiB)."""
    mine = set(a.changes)
    tight = a.verdict.status == TIGHT
    return any(set(b.changes) < mine and (tight or b.verdict.status == FITS) and b.cost <= a.cost
               for b in found if b is not a)


def _rank(a: Alternative) -> tuple[float, bool]:
    """Cost order (COST_TIGHT already in the cost); at equal cost a comfortable fit before a tight one."""
    return a.cost, a.verdict.status == TIGHT


# Routes a practitioner tells apart: the serving engines (vLLM, SGLang: paged KV cache, pre-quantized or
# online-quantized checkpoints), llama.cpp's GGUF builds, transformers (bitsandbytes on load).
_ROUTES = {"vllm": "serving", "sglang": "serving"}
MAX_PER_ROUTE = 2           # options of one route (differing only in weights format) shown before other routes'
_FORMAT_ONLY = frozenset({"precision", "engine", "transformers_version", "attention", "gpu_memory_utilization"})


def _route(a: Alternative) -> tuple[Any, ...]:
    """What kind of option ``a`` is: its engine's route and what else it changes than the weights format (and
    the options an engine switch resets), by name: vLLM's AWQ and SGLang's GPTQ-int4 are one kind, and so are
    FP8 and GPTQ-int8 each at the longest context that fits (36,365 and 35,767 tokens); the same weights over
    more GPUs or nodes, offloaded, or with another KV cache type are another."""
    return _ROUTES.get(a.plan.engine, a.plan.engine), tuple(k for k, _ in a.changes if k not in _FORMAT_ONLY)


def _diverse(ranked: list[Alternative]) -> tuple[Alternative, ...]:
    """Cost order, except that an option is put after the other routes' when its kind (_route) already has
    MAX_PER_ROUTE options above it, or one of the same quality (another 4-bit format of the same size: GPTQ-int4
    beside AWQ on one engine adds nothing to read): on one consumer GPU the serving engines' quantized
    variants would otherwise fill every slot and hide llama.cpp's GGUF build."""
    shown: list[Alternative] = []
    later: list[Alternative] = []
    for a in ranked:
        # only another weights format is put after: a shorter context or more GPUs alone is another option
        same = [b for b in shown if _route(b) == _route(a) and "precision" in dict(b.changes)] \
            if "precision" in dict(a.changes) else []
        if len(same) >= MAX_PER_ROUTE or any(_quality(b.plan.precision) == _quality(a.plan.precision) for b in same):
            later.append(a)
        else:
            shown.append(a)
    return tuple(shown + later)


# ---- speed in the order ---------------------------------------------------------------------------
# The costs charge a slower decode only against the options that give up no more quality (_slowdown_cost),
# and that charge stops growing at SLOWDOWN_CAP: an option at 5 tok/s that keeps a little more quality
# ranked before one at 350 tok/s (Qwen3-30B-A3B on an RTX 5090: bitsandbytes LLM.int8 through transformers'
# per-expert loop, cost 13, before llama.cpp's Q4_K_M build, cost 35).  A practitioner takes the 4-bit
# build: 8-bit → 4-bit K-quant costs little quality, 70× the decode speed is a lot.  So, after the cost
# order: an option whose decode is below READ_ALONG_TOKENS_PER_S per sequence ranks after every other
# option that decodes at least MUCH_SLOWER times faster (low ends of the estimates: what each at least
# does) and gives up at most a small quality step more (much_faster).
SLOWDOWN_CAP = 4.0          # multiples of a decode (or training) step added: the most a speed cost counts
MUCH_SLOWER = 1 + SLOWDOWN_CAP   # × decode tok/s: past what the speed cost tells apart (a 5× slower step)
# A reader reads ~5–10 tokens/s: below this rate per sequence (estimate.speed, the rate it calls "fast enough
# to read along") an option's speed is a loss the user feels; above it, quality decides.
READ_ALONG_TOKENS_PER_S = CPU_ENOUGH_TOKENS_PER_S
# The most quality loss (estimate.formats quality_loss) the faster option may have: Q4_K_M's rank, shared by
# the 4-bit group formats (AWQ, GPTQ-int4, NF4).  llama.cpp's perplexity table (tools/quantize/quantize.cpp,
# QUANT_OPTIONS, +ppl @ Llama-3-8B, github.com/ggml-org/llama.cpp/blob/42ea59bcf104ce81f167a66020a5eeafa428ecb2/
# tools/quantize/quantize.cpp): Q8_0 +0.0026, Q6_K +0.0217, Q5_K_M +0.0569, Q4_K_M +0.1754, then Q4_0 +0.4685,
# Q3_K_M +0.6569, Q2_K +3.5199: Q4_K_M is the last type before the loss grows several-fold.  (LLM.int8 is
# ≈ lossless, Dettmers et al. 2022, as Q8_0 is: 8-bit → Q4_K_M is the one small step.)
SMALL_QUALITY_LOSS = weight_format("q4_k_m").quality_loss


@dataclass(frozen=True)
class Footing:
    """What the speed order reads of an alternative: what it gives up, whether it fits with headroom, how fast."""

    quality_loss: int            # estimate.formats rank of its weights
    kv_loss: float               # COST_KV of its KV cache type (0: 16-bit)
    context: int
    batch: int
    nodes: int
    fits: bool                   # with headroom (not tight)
    decode_low: float | None     # tokens/s over the batch, the estimate's low end (None: unknown)


def much_faster(fast: Footing, slow: Footing) -> bool:
    """Whether ``slow`` ranks after ``fast``: ``slow`` decodes below READ_ALONG_TOKENS_PER_S per sequence and
    ``fast`` at least MUCH_SLOWER times as fast, fits at least as well (a tight option never overtakes one that
    fits with headroom), needs no more nodes, gives up no more context, batch or KV precision, and no more
    quality than ``slow`` or than SMALL_QUALITY_LOSS."""
    if fast.decode_low is None or slow.decode_low is None or slow.decode_low <= 0:
        return False
    return (slow.decode_low / max(slow.batch, 1) < READ_ALONG_TOKENS_PER_S
            and fast.decode_low >= MUCH_SLOWER * slow.decode_low
            and (fast.fits or not slow.fits) and fast.nodes <= slow.nodes
            and fast.context >= slow.context and fast.batch >= slow.batch and fast.kv_loss <= slow.kv_loss
            and fast.quality_loss <= max(slow.quality_loss, SMALL_QUALITY_LOSS))


def speed_order(ranked: list[T], footing: Callable[[T], Footing]) -> list[T]:
    """``ranked`` (cost order) with each option put after every option much_faster than it, the rest kept in
    order: each time, the first not overtaken by a remaining one is taken.  much_faster needs the faster to be
    strictly faster (MUCH_SLOWER > 1, a positive rate), so there is no cycle and one is always found."""
    rest = list(ranked)
    feet = [footing(a) for a in rest]
    out: list[T] = []
    while rest:
        i = next(i for i, f in enumerate(feet) if not any(much_faster(g, f) for g in feet if g is not f))
        out.append(rest.pop(i))
        feet.pop(i)
    return out


def _footing(spec: ModelSpec, machine: Machine, a: Alternative) -> Footing:
    rate = _decode(spec, machine, a.plan)
    return Footing(_quality(a.plan.precision), COST_KV.get(getattr(a.plan, "kv_dtype", ""), 0),
                   getattr(a.plan, "context", 0), getattr(a.plan, "batch", 0), a.plan.nodes,
                   a.verdict.status == FITS, None if rate is None else rate.low)


def _needless_nodes(a: Alternative, found: list[Alternative], plan: AnyPlan) -> bool:
    """More nodes than the request's add nothing when an alternative on the request's nodes already fits
    (with headroom) and gives up no more (quality, context, batch: _gives_up) than they do."""
    if a.plan.nodes <= plan.nodes:
        return False
    mine = _gives_up(a.plan)
    return any(b.plan.nodes <= plan.nodes and b.verdict.status == FITS
               and all(x >= y for x, y in zip(_gives_up(b.plan), mine, strict=True)) for b in found)


def with_context(request: Request, context: int) -> Request:
    """The request at another context length, its prompt (--prompt) cut to fit in it."""
    prompt = request.prompt_tokens
    return request.with_changes(context=context, prompt_tokens=None if prompt is None else min(prompt, context))


def _pcie_cost(s: _Search, spec: ModelSpec, request: Request, machine: Machine) -> float:
    """What offload's PCIe time costs in the ranking: COST_PER_SLOWDOWN for each doubling of the
    step's compute time it could add (estimate.speed.offload_bytes_per_step over PCIe)."""
    from fitcheck.speed.training import estimate_training_speed

    out = s.evaluate(request)
    if out is None or not isinstance(out.plan, TrainingPlan):
        return 0.0
    speed = estimate_training_speed(spec, out.plan, machine)
    compute = speed.step_seconds
    if not speed.offload_seconds or compute is None:
        return 0.0
    link = speed.link_wait[1] if speed.link_wait else 0.0
    fastest_compute = compute[1] - speed.offload_seconds - link  # the slow end is compute + transfer
    return COST_PER_SLOWDOWN * min(speed.offload_seconds / max(fastest_compute, 1e-9), SLOWDOWN_CAP)


def _runs(out: Outcome | None) -> bool:
    return out is not None and out.verdict.status in (FITS, TIGHT)


def _smaller(spec: ModelSpec, precision: str, than: str) -> bool:
    """Whether ``precision`` exists for this checkpoint and stores its weights in fewer bytes than ``than``
    (sizes, not bits per weight: an MXFP4 checkpoint's experts are already 4-bit, so int8 of it is larger)."""
    fmt = weight_format(precision)
    if stored_only_problem(fmt, spec.stored_formats(), spec.name):
        return False
    return weight_bytes(spec, fmt).total < weight_bytes(spec, weight_format(than)).total


def _quality(precision: str) -> int:
    return weight_format(precision).quality_loss


def _engine_chosen(request: Request, plan: AnyPlan) -> bool:
    """The request left the engine to fitcheck (no --engine, nor a transformers-only option: --attention,
    --transformers-version) and runs non-GGUF weights on GPUs: its quantized alternatives may serve with
    another engine, and pay for the decode speed they give up."""
    return request.engine is None and request.transformers_version is None and request.attention is None \
        and plan.device == "gpu" and not weight_format(plan.precision).gguf


def _lower_precision_engines(spec: ModelSpec, request: Request, plan: Plan, kind: str,
                             cc: float | None) -> dict[str, list[str]]:
    """The lower-precision weights the ladder tries, each with the engines that try them: the plan's engine
    (its _LOWER_PRECISIONS) and, where fitcheck chose the engine, every other engine of the capability table
    that runs that (non-GGUF) precision here: a practitioner who quantizes to serve on GPUs serves with
    vLLM (paged KV cache, tensor parallel), not transformers' device_map='auto'."""
    names = [plan.engine] + ([e for e in engines.ENGINES if e != plan.engine] if _engine_chosen(request, plan) else [])
    found: dict[str, list[str]] = {}
    for e in names:
        for p in _LOWER_PRECISIONS.get(e, _SERVING_QUANTIZED):
            if not _smaller(spec, p, plan.precision) or engines.runs_here(e, p, kind, cc) is not None \
                    or (e != plan.engine and weight_format(p).gguf):
                continue
            found.setdefault(p, []).append(e)
    return found


def _with_engine(base: Request, engine: str, plan: AnyPlan) -> Request:
    """``base`` served by ``engine`` (the transformers-only options reset to their defaults)."""
    if engine == plan.engine:
        return base
    return base.with_changes(engine=engine, transformers_version=None, attention=None)


def _decode(spec: ModelSpec, machine: Machine, plan: AnyPlan) -> Any:
    """The plan's decode Rate (tokens/s over the batch), or None when unknown."""
    from fitcheck.speed.decode import estimate_speed

    return estimate_speed(spec, plan, machine).decode if isinstance(plan, Plan) else None


def _gives_up(plan: AnyPlan) -> tuple[int, int, int]:
    """What a candidate gives up, each larger is better: (-quality loss, context, batch)."""
    return -_quality(plan.precision), getattr(plan, "context", 0), getattr(plan, "batch", 0)


def _slowdown_cost(rate: Any, gives_up: tuple[int, int, int], others: list[tuple[tuple[int, int, int], Any]]) -> float:
    """COST_PER_SLOWDOWN per multiple of a decode step ``rate`` adds to the fastest of ``others``
    (_gives_up, Rate) that gives up no more (quality, context, batch) (capped at SLOWDOWN_CAP, as offload's);
    0 where a speed is unknown.  Rates compare by their geometric middle (Rate.mid, the one used to rank) and
    the cost is rounded to whole units: a few per cent (NF4's slightly smaller weights than AWQ's) is no
    reason to reorder.  Past the cap, speed_order puts a much slower option after a much faster one."""
    fastest = max((r.mid for g, r in others if r is not None and all(a >= b for a, b in zip(g, gives_up, strict=True))),
                  default=None)
    if rate is None or fastest is None:
        return 0.0
    return float(round(COST_PER_SLOWDOWN * min(max(fastest / max(rate.mid, 1e-9) - 1, 0.0), SLOWDOWN_CAP)))


def _slowdown_costs(spec: ModelSpec, machine: Machine, outs: list[Outcome]) -> list[float]:
    """What each candidate's decode speed gives up against the fastest of them that gives up no more."""
    rated = [(_gives_up(o.plan), _decode(spec, machine, o.plan)) for o in outs]
    return [_slowdown_cost(r, g, rated) for g, r in rated]


Rated = list[tuple[tuple[int, int, int], Any]]   # (_gives_up, decode Rate) of the candidates compared for speed


def _consider_fastest(s: _Search, spec: ModelSpec, machine: Machine,
                      tries: list[tuple[str, Request, float, Outcome]], speed_costs: bool,
                      references: tuple[Outcome, ...] = ()) -> Rated:
    """Offer the candidates that run, each engine's paying for the decode speed it gives up
    (_slowdown_costs) where fitcheck chose the engine, against the fastest of them and of ``references``
    (llama.cpp's GGUF build on the same GPUs, offered later at the same footing); of one precision at one
    context and batch, only the cheapest (transformers' AWQ is not offered beside vLLM's faster AWQ at the
    same settings).  Returns the candidates rated for speed (empty where speed costs nothing)."""
    rated: Rated = [(_gives_up(o.plan), _decode(spec, machine, o.plan))
                    for o in [t[3] for t in tries] + list(references)] if speed_costs else []
    extra = [_slowdown_cost(r, g, rated) for g, r in rated[:len(tries)]] if speed_costs else [0.0] * len(tries)
    best: dict[tuple, tuple[str, Request, float, float]] = {}
    for (title, cand, cost, out), slow in zip(tries, extra, strict=True):
        key = (out.plan.precision, getattr(out.plan, "context", None), getattr(out.plan, "batch", None))
        tight = COST_TIGHT if out.verdict.status == TIGHT else 0
        if key not in best or cost + slow + tight < best[key][2] + best[key][3]:
            best[key] = (title, cand, cost + slow, tight)
    for title, cand, cost, _ in best.values():
        s.consider(title, cand, cost)
    return rated


def _gpus_fit(out: Outcome | None) -> bool:
    if out is None:
        return False
    v = out.verdict
    return not v.reasons and all(d.status == FITS for d in v.devices if d.kind == "gpu")


def _multi_node(machine: Machine) -> bool:
    """Machines one runs several of: cloud nodes, or a profile that describes its cluster."""
    return bool(machine.gpus) and (machine.cluster is not None or machine.kind == "cloud")


def fewest_nodes(fits: Callable[[int], bool], start: int, high: int = MAX_NODES_SEARCHED) -> int | None:
    """The smallest node count in [start, high] for which ``fits`` holds.  Counted up, not bisected: more nodes
    need less per GPU, but not every count is a layout (SGLang's TP over all nodes must divide the heads)."""
    if start > high or not fits(high):
        return None
    return next(n for n in range(start, high + 1) if n == high or fits(n))


def _more_nodes(s: _Search, cand: Request, plan: AnyPlan, title: str, extra: float = 0.0) -> bool:
    """Offer the fewest nodes (more than the plan's) on which ``cand`` runs; False when none up to the limit."""
    n = fewest_nodes(lambda k: _runs(s.evaluate(cand.with_changes(nodes=k))), plan.nodes + 1)
    if n is not None:
        s.consider(f"{title} over {n} nodes", cand.with_changes(nodes=n), extra + cluster_cost(plan.nodes, n))
    return n is not None


def same_effective_batch(fitting: int, effective: int) -> tuple[int, int]:
    """(micro-batch, accumulation) keeping ``effective`` sequences per optimizer step exactly (the same math): the
    largest micro-batch up to ``fitting`` that divides it (8 at most 5 a step: 4 × 2, not 5 × 2 = 10)."""
    micro = max(d for d in range(1, max(fitting, 1) + 1) if effective % d == 0)
    return micro, effective // micro


def cluster_cost(nodes: int, more: int) -> float:
    """What going from ``nodes`` machines to ``more`` costs: COST_PER_NODE each, and COST_CLUSTER when this
    is the step from one machine to a cluster."""
    return COST_PER_NODE * (more - nodes) + (COST_CLUSTER if nodes <= 1 < more else 0)


def hybrid_advice(spec: ModelSpec, request: Request, plan: AnyPlan, machine: Machine,
                  evaluate: Evaluate) -> str | None:
    """A note for FSDP full-shard / shard-grad-op over several nodes when the hybrid twin (sharded within a
    node, replicated across nodes) fits as well: it keeps the parameter all-gathers on NVLink and sends only
    the gradients' all-reduce between nodes."""
    if not isinstance(plan, TrainingPlan) or plan.nodes <= 1 or plan.fsdp not in ("full-shard", "shard-grad-op"):
        return None
    from fitcheck.estimate.distributed import gb_text, training_traffic
    from fitcheck.estimate.lora import lora_params, parse_targets

    twin = "hybrid-shard" if plan.fsdp == "full-shard" else "hybrid-shard-zero2"
    out = evaluate(request.with_changes(fsdp=twin))
    if out is None or out.verdict.status != FITS or not isinstance(out.plan, TrainingPlan):
        return None
    trainable = spec.total_params if plan.mode == "full" else lora_params(
        spec, plan.lora_rank, parse_targets(plan.lora_targets))
    ours, theirs = (training_traffic(spec, p, machine, trainable) for p in (plan, out.plan))
    if ours is None or theirs is None or theirs.bytes_per_step >= ours.bytes_per_step:
        return None
    need = max(d.total_bytes for d in out.estimate.gpu_devices)
    return (f"--fsdp {twin} fits too ({need / 2**30:.2f} GiB per GPU, the model states replicated on each node): "
            f"{gb_text(theirs.bytes_per_step)} per node per step between nodes instead of "
            f"{gb_text(ours.bytes_per_step)}")


def find_alternatives(spec: ModelSpec, request: Request, plan: AnyPlan, machine: Machine,
                      evaluate: Evaluate) -> tuple[Alternative, ...]:
    if isinstance(plan, TrainingPlan):
        return _training(spec, request, plan, machine, evaluate)
    return _inference(spec, request, plan, machine, evaluate)


# ---- inference -----------------------------------------------------------------------------------
def _inference(spec: ModelSpec, request: Request, plan: Plan, machine: Machine,
               evaluate: Evaluate) -> tuple[Alternative, ...]:
    visible = len(machine.gpus)
    if plan.problems and request.gpus is not None and 0 < visible < request.gpus:
        # --gpus N on a machine with fewer: the same request on the GPUs it has (--gpus dropped), and where that
        # does not fit with headroom the alternatives from there, each changing --gpus too (COST_RUNNABLE, as
        # training's).
        fixed = request.with_changes(gpus=None)
        out = evaluate(fixed)
        if out is not None and isinstance(out.plan, Plan) and not out.plan.problems:
            s = _Search(request, evaluate)
            s.consider(f"Use the {visible} GPU{'s' if visible > 1 else ''} this machine has (no --gpus)", fixed,
                       COST_RUNNABLE)
            if out.verdict.status != FITS:
                s.found += [replace(a, cost=a.cost + COST_RUNNABLE, changes=changed_fields(request, a.request))
                            for a in _inference(spec, fixed, out.plan, machine, evaluate)]
            return s.ranked_for_serving(MAX_ALTERNATIVES, out.plan, spec, machine)
    # The request with the plan's precision and engine pinned: an alternative changes one thing.
    base = request.with_changes(precision=plan.precision, engine=plan.engine)
    s = _Search(base, evaluate)
    kind, cc = engines.machine_kind(machine, plan.device)
    on_gpu = plan.device != "cpu" and visible > 0
    all_gpus = engines.usable_gpus(plan.engine, visible, spec) if on_gpu else 0

    def max_context(candidate: Request) -> int | None:
        return largest_fitting(lambda n: s.fits(with_context(candidate, n)), MIN_USEFUL_CONTEXT,
                               min(candidate.context - 1, search_limit(spec, candidate.context)))

    def context_cost(ctx: int) -> float:
        return shorter_cost(ctx, request.context)

    # The llama.cpp GGUF builds (6. below) from the plan's own GGUF type; a 16-bit GGUF file steps to q8_0
    # first; other engines to q4_k_m.
    kv = plan.kv_dtype if plan.kv_dtype in ("q8_0", "q4_0") else "auto"
    start = plan.precision if weight_format(plan.precision).gguf else "q8_0" if plan.engine == "llama.cpp" else "q4_k_m"
    ladder = [g for g in _GGUF_LADDER if g == start or _smaller(spec, g, start)]
    gpu_kind, gpu_cc = engines.machine_kind(machine, "gpu")
    gpu_ok = visible > 0 and request.device != "cpu" and engines.runs_here("llama.cpp", start, gpu_kind, gpu_cc) is None
    gguf_base = base.with_changes(engine="llama.cpp", kv_dtype=kv, gpu_layers=None, transformers_version=None,
                                  attention=None,
                                  gpu_memory_utilization=Request().gpu_memory_utilization,
                                  device="auto" if request.device == "gpu" else request.device)

    def gguf_on_gpus(gguf: str) -> Request:
        return gguf_base.with_changes(precision=gguf, gpus=None if base.gpus is None else visible)

    speed_costs = _engine_chosen(request, plan)
    gguf_ref = evaluate(gguf_on_gpus(ladder[0])) if speed_costs and gpu_ok and ladder else None

    # 1. Lower-precision weights (alone, over all GPUs, then at the context that fits) with the plan's
    #    engine and, where fitcheck chose the engine, with each engine of the table that runs them here.
    tries: list[tuple[str, Request, float, Outcome]] = []
    for p, names in _lower_precision_engines(spec, request, plan, kind, cc).items():
        step = max(_quality(p) - _quality(plan.precision), 0) * COST_PER_QUALITY_STEP
        desc = weight_format(p).description
        for e in names:
            served = "" if e == plan.engine else f", served with {_ENGINE_TITLES.get(e, e)}"
            cost = step + (0 if e == plan.engine else COST_ENGINE_SWITCH)
            cand = _with_engine(base, e, plan).with_changes(precision=p)
            title = f"Quantize the weights to {desc}{served}"
            if p == spec.stored_format:
                needs = f" ({MXFP4_TRANSFORMERS_NEEDS})" if p == "mxfp4" and e == "transformers" else ""
                title = f"Keep the checkpoint's own {desc}{needs}{served}"
            attempt: tuple[str, Request, float] = (title, cand, float(cost))
            out = s.evaluate(cand)
            n_all = engines.usable_gpus(e, visible, spec) if on_gpu else 0
            if not _runs(out) and n_all > plan.gpus:
                cand = cand.with_changes(gpus=n_all)
                attempt = (f"{desc} over {n_all} GPUs{served}", cand, cost + COST_PER_GPU * (n_all - plan.gpus))
                out = s.evaluate(cand)
            if not _runs(out):
                ctx = max_context(cand)
                if not ctx:
                    continue
                cand = with_context(cand, ctx)
                attempt = (f"{desc} with a {ctx:,}-token context{served}", cand, cost + context_cost(ctx))
                out = s.evaluate(cand)
            if out is not None and _runs(out):
                tries.append((*attempt, out))
    rated = _consider_fastest(s, spec, machine, tries, speed_costs,
                              (gguf_ref,) if gguf_ref is not None and _runs(gguf_ref) else ())

    # 1'. SDPA instead of eager attention (no prompt × prompt score matrix), or instead of a kernel this
    #     machine does not run (flash-attention needs CUDA >= 8.0 or ROCm).
    if plan.engine == "transformers" and (plan.attention == "eager"
                                          or engines.ATTENTION_RUNS[plan.attention].problem(kind, cc)):
        s.consider("Use SDPA attention (attn_implementation=\"sdpa\": no prompt² score matrix)",
                   base.with_changes(attention="sdpa"), 1)

    # 1a. A transformers release that computes the prefill's logits for the last position only.
    if plan.engine == "transformers" and plan.logits == "all-fp32":
        s.consider("Upgrade transformers to 4.45 or later (prompt logits for the last position only)",
                   base.with_changes(transformers_version=None), 1)

    # 1b. The same weights served by vLLM (paged KV cache, activations bounded by chunked prefill).
    #     (vLLM loads an MXFP4 checkpoint as stored: for gpt-oss that is 1c below.)
    if plan.engine == "transformers" and on_gpu and engines.runs_here("vllm", plan.precision, kind, cc) is None \
            and plan.precision not in ("int8", "nf4", "fp32") and not plan.dequantize:
        s.consider("Serve with vLLM (paged KV cache, chunked prefill)",
                   base.with_changes(engine="vllm", transformers_version=None, attention=None), COST_ENGINE_SWITCH)

    # 1c. The checkpoint's own format served by vLLM where transformers dequantized it (gpt-oss on an A100:
    #     vLLM's Marlin MXFP4 kernels keep the experts packed).
    stored = spec.stored_format
    if plan.engine == "transformers" and on_gpu and stored and stored != plan.precision \
            and stored in engines.ENGINES["vllm"].precisions and engines.runs_here("vllm", stored, kind, cc) is None \
            and _smaller(spec, stored, plan.precision):
        s.consider(f"Serve the checkpoint's own {stored.upper()} with vLLM",
                   base.with_changes(engine="vllm", precision=stored, transformers_version=None, attention=None),
                   3 + max(_quality(stored) - _quality(plan.precision), 0) * COST_PER_QUALITY_STEP)

    # 2. Quantized KV cache.
    for kv in {"vllm": ("fp8",), "sglang": ("fp8",), "llama.cpp": ("q8_0", "q4_0")}.get(plan.engine, ()):
        if kv != plan.kv_dtype:
            s.consider(f"Quantize the KV cache to {kv}", base.with_changes(kv_dtype=kv), COST_KV[kv])

    # 3. Shorter context, 4. fewer concurrent sequences.
    ctx = max_context(base)
    if ctx:
        s.consider(f"Shorten the context to {ctx:,} tokens", with_context(base, ctx), context_cost(ctx))
    if plan.batch > 1:
        b = largest_fitting(lambda n: s.fits(base.with_changes(batch=n)), 1, plan.batch - 1)
        if b:
            s.consider(f"Serve {b} concurrent sequence{'s' if b > 1 else ''} instead of {plan.batch}",
                       base.with_changes(batch=b), 4 + 20 * (1 - b / plan.batch))

    # 5. More of the machine's GPUs (tensor parallel with vLLM, layer split otherwise).
    if plan.device == "gpu" and all_gpus > plan.gpus:
        s.consider(f"Spread over {all_gpus} GPUs" + (" (tensor parallel)" if plan.engine in ("vllm", "sglang") else ""),
                   base.with_changes(gpus=all_gpus), COST_PER_GPU * (all_gpus - plan.gpus))

    # 5b. More nodes like this one: vLLM, tensor parallel within each node, pipeline parallel across them.
    if on_gpu and _multi_node(machine) and engines.runs_here("vllm", plan.precision, kind, cc) is None \
            and not engines.engine_precision_problem("vllm", plan.precision):
        cand = base.with_changes(engine="vllm", gpus=None, gpu_layers=None, device="auto", transformers_version=None,
                                 attention=None, kv_dtype=base.kv_dtype if base.kv_dtype in ("auto", "fp8") else "auto",
                                 # vLLM loads an MXFP4 checkpoint as stored (1c): say so in the command
                                 precision=spec.stored_format if plan.dequantize else plan.precision)
        _more_nodes(s, cand, plan, "vLLM, tensor parallel within a node × pipeline parallel", 0.0)
        if plan.engine == "sglang" and engines.runs_here("sglang", plan.precision, kind, cc) is None:
            _more_nodes(s, cand.with_changes(engine="sglang"), plan, "SGLang, tensor parallel", 0.0)

    # 5c. MoE: the experts split over every GPU, attention data parallel (more room for the KV cache: the
    #     latent or KV heads are no longer replicated over tensor-parallel ranks).
    ep_engine = plan.engine if plan.engine in engines.EXPERT_PARALLEL_ENGINES else "vllm"
    # (over one GPU of one machine there is nothing to split: only where more GPUs or nodes exist)
    spread = max(plan.nodes, 1) * max(visible, 1) > 1 or _multi_node(machine)
    if on_gpu and spread and spec.is_moe and not plan.expert_parallel \
            and engines.runs_here(ep_engine, plan.precision, kind, cc) is None \
            and not engines.engine_precision_problem(ep_engine, plan.precision):
        ep = base.with_changes(engine=ep_engine, expert_parallel=True, gpus=None, gpu_layers=None, device="auto",
                               transformers_version=None, attention=None,
                               kv_dtype=base.kv_dtype if base.kv_dtype in ("auto", "fp8") else "auto")
        title = f"{'SGLang' if ep_engine == 'sglang' else 'vLLM'} expert parallel, attention data parallel"
        gpus_here = max(plan.nodes, 1) * max(visible, 1)
        out = s.consider(f"{title} over {gpus_here} GPUs", ep, COST_EXPERT_PARALLEL) if gpus_here > 1 else None
        if not _runs(out) and _multi_node(machine):
            _more_nodes(s, ep, plan, title, COST_EXPERT_PARALLEL)

    # 6. llama.cpp GGUF builds: fully on the GPU(s), else the most layers the GPUs hold (partial
    #    offload), else the CPU alone; the lower GGUF types are tried only when the higher fail.
    n_gpus = visible
    for gguf in ladder:
        gguf_step = max(_quality(gguf) - _quality(plan.precision), 0) * COST_PER_QUALITY_STEP
        cand = gguf_base.with_changes(precision=gguf)
        placed = False
        if gpu_ok:
            where = f"{n_gpus} GPUs" if n_gpus > 1 else "the GPU"
            full = gguf_on_gpus(gguf)
            out = evaluate(full)
            # The decode speed it gives up, on the footing of the serving engines' (_consider_fastest).
            slow = _slowdown_cost(_decode(spec, machine, out.plan), _gives_up(out.plan),
                                  [*rated, (_gives_up(out.plan), _decode(spec, machine, out.plan))]) \
                if speed_costs and out is not None and _runs(out) else 0.0
            placed = _runs(s.consider(f"Run a GGUF {gguf} build fully on {where} with llama.cpp", full,
                                      gguf_step + COST_GGUF + slow + COST_PER_GPU * (n_gpus - max(plan.gpus, 1))))
            whole = placed
            if not whole and _multi_node(machine):
                # llama.cpp's RPC backend: the layers over the GPUs of more nodes like this one.
                _more_nodes(s, full.with_changes(gpus=None), plan,
                            f"llama.cpp RPC ({gguf}), layers split", gguf_step + COST_GGUF)
            if not whole and spec.is_moe and "experts" in engines.ENGINES["llama.cpp"].offloads:
                placed = _expert_offload(s, spec, full, evaluate, gguf, gguf_step)
            if not whole:
                # RAM need falls and GPU need rises with -ngl: take the most layers the GPUs hold.
                def holds(k: int, c: Request = full) -> bool:
                    return _gpus_fit(evaluate(c.with_changes(gpu_layers=k)))

                n = largest_fitting(holds, 1, spec.num_layers)
                if n:
                    share = 1 - n / spec.num_layers
                    placed = _runs(s.consider(
                        f"Offload {spec.num_layers - n} of {spec.num_layers} layers to the CPU with llama.cpp ({gguf})",
                        full.with_changes(gpu_layers=n), gguf_step + COST_OFFLOAD + COST_PER_RAM_SHARE * share)) \
                        or placed
        if not placed and (plan.device != "cpu" or plan.precision != gguf or plan.problems):
            placed = _runs(s.consider(f"Run on the CPU with llama.cpp ({gguf})",
                                      cand.with_changes(device="cpu", gpus=None), gguf_step + (45 if visible else 5)))
        if placed:
            break

    # 7. Last resort: vLLM streaming part of the weights from RAM every forward pass (--cpu-offload-gb).
    if on_gpu and not plan.problems and "streamed" in engines.ENGINES[plan.engine].offloads:
        _streamed_offload(s, spec, base, plan, machine, evaluate)
    return s.ranked_for_serving(MAX_ALTERNATIVES, plan, spec, machine)


def _ram_read_share(spec: ModelSpec, plan: AnyPlan) -> float:
    """Share of a decode step's weight bytes read from RAM (llama.cpp --n-cpu-moe): what the ranking
    charges, as the layer share it charges -ngl (whose RAM reads are that share of the layers)."""
    from fitcheck.speed.decode import active_weight_bytes, ram_weight_bytes_per_step

    if not isinstance(plan, Plan):
        return 1.0
    return min(ram_weight_bytes_per_step(spec, plan, plan.batch)
               / max(active_weight_bytes(spec, plan.precision, plan.batch), 1), 1.0)


def _expert_offload(s: _Search, spec: ModelSpec, full: Request, evaluate: Evaluate, gguf: str,
                    gguf_step: float) -> bool:
    """llama.cpp with every layer on the GPU but the routed experts of the first N layers (the fewest
    that let the GPUs hold the rest: llama-server --n-cpu-moe N, or --cpu-moe for all of them)."""
    layers = spec.num_layers

    def holds(n: int) -> bool:
        return _gpus_fit(evaluate(full.with_changes(cpu_moe=n)))

    n = fewest_nodes(holds, 1, layers)  # the smallest count that holds (GPU need falls as n grows)
    if n is None:
        return False
    cand = full.with_changes(cpu_moe="all" if n >= layers else n)
    out = evaluate(cand)
    if out is None:
        return False
    moe = out.plan.cpu_moe if isinstance(out.plan, Plan) else 0
    what = "every layer's" if n >= layers else f"the first {n} layers'"
    title = (f"Keep {what} routed experts in RAM, the rest on the GPU, with llama.cpp ({gguf}, "
             f"{'--cpu-moe' if n >= layers else f'--n-cpu-moe {moe}'})")
    cost = gguf_step + COST_OFFLOAD + COST_PER_RAM_SHARE * _ram_read_share(spec, out.plan)
    return _runs(s.consider(title, cand, cost))


def _streamed_offload(s: _Search, spec: ModelSpec, base: Request, plan: Plan, machine: Machine,
                      evaluate: Evaluate) -> None:
    """vLLM --cpu-offload-gb: the fewest whole GiB per GPU that make it fit; every forward pass moves
    them over PCIe, so it ranks after everything that runs from VRAM (COST_STREAMED + its slowdown)."""
    from fitcheck.speed.decode import estimate_speed

    high = -(-plan_weight_bytes(evaluate, base) // 2**30)  # whole GiB of the weights on one GPU
    if high < 1:
        return
    gib = fewest_nodes(lambda g: _runs(evaluate(base.with_changes(cpu_offload_gb=float(g)))), 1, high)
    if gib is None:
        return
    cand = base.with_changes(cpu_offload_gb=float(gib))
    out = evaluate(cand)
    if out is None or not isinstance(out.plan, Plan):
        return
    speed = estimate_speed(spec, out.plan, machine)
    slowdown = SLOWDOWN_CAP
    if speed.decode is not None:
        streamed = gib * 2**30 / _pcie(machine)
        slowdown = min(streamed / max(1.0 / speed.decode.high - streamed, 1e-9), SLOWDOWN_CAP)
    s.consider(f"Stream {gib} GiB of weights per GPU from RAM every forward pass (vLLM --cpu-offload-gb {gib})",
               cand, COST_STREAMED + COST_PER_SLOWDOWN * slowdown)


def _pcie(machine: Machine) -> float:
    from fitcheck.speed.efficiency import pcie_bytes_per_s

    return pcie_bytes_per_s(machine)


def plan_weight_bytes(evaluate: Evaluate, request: Request) -> int:
    """Weight bytes on one GPU of the request as asked (what --cpu-offload-gb can take away)."""
    out = evaluate(request)
    if out is None:
        return 0
    return max((sum(c.bytes for c in d.components if c.name == "weights") for d in out.estimate.devices
                if d.kind == "gpu"), default=0)


# ---- training ------------------------------------------------------------------------------------
def _training(spec: ModelSpec, request: Request, plan: TrainingPlan, machine: Machine,
              evaluate: Evaluate) -> tuple[Alternative, ...]:
    s = _Search(request, evaluate)
    _training_candidates(s, spec, request, plan, machine, 0.0)
    # Cannot run here (QLoRA's kernels on Apple, ZeRO on the CPU, flash-attention on a T4): the same
    # training with what runs here swapped in, and the candidates from there.
    if plan.problems:
        fixed = _runnable_training(request, plan, machine)
        out = evaluate(fixed) if fixed != request else None
        if out is not None and not out.plan.problems:
            what = ", ".join(f"{k} {'default' if v is None else v}" for k, v in changed_fields(request, fixed))
            s.consider(f"What runs here: {what}", fixed, COST_RUNNABLE)
            if out.verdict.status != FITS:  # it does not fit with headroom: the candidates from there
                before = len(s.found)
                _training_candidates(s, spec, fixed, out.plan, machine, COST_RUNNABLE)  # type: ignore[arg-type]
                # each of them runs with that swap too: the title says so, as its command does
                s.found[before:] = [replace(a, title=f"With {what}: {_lower_first(a.title)}") for a in s.found[before:]]
    return s.ranked_for_training(MAX_TRAINING_ALTERNATIVES)


def _lower_first(title: str) -> str:
    """``title`` to follow a colon: its first word lowercased unless it is an acronym or a name (FSDP, LoRA)."""
    word = title.split(" ", 1)[0]
    return title[:1].lower() + title[1:] if word[1:].islower() else title


def _training_candidates(s: _Search, spec: ModelSpec, base: Request, plan: TrainingPlan, machine: Machine,
                         extra: float) -> None:
    """Each candidate changes one axis (or that axis plus gradient checkpointing, or a smaller
    micro-batch keeping the effective batch).  Keeping the effective batch by gradient accumulation
    is nearly free; a shorter sequence comes last (it changes what is learned).  The training
    defaults depend on the mode and device only, which the changes set explicitly."""
    kind, cc = engines.machine_kind(machine, plan.device)

    def longest_seq(cand: Request) -> int | None:
        """The longest sequence below the plan's at which ``cand`` fits."""
        return largest_fitting(lambda n: s.fits(cand.with_changes(seq_len=n)), MIN_USEFUL_SEQ,
                               min(plan.seq_len - 1, search_limit(spec, plan.seq_len)))

    def consider(title: str, cand: Request, cost: float, with_checkpointing: bool = True) -> None:
        cost += extra
        out = s.consider(title, cand, cost)
        if out is None or _runs(out):
            return
        if with_checkpointing and not grad_checkpointing(cand)[0]:
            consider(title + ", with gradient checkpointing", cand.with_changes(grad_checkpointing=True),
                     cost - extra + COST_CHECKPOINTING, False)
        elif cand.batch > 1 and cand.batch == base.batch:
            # Still too big: the same change at a smaller micro-batch, keeping the effective batch.
            fitting = largest_fitting(lambda n: s.fits(cand.with_changes(batch=n)), 1, cand.batch - 1)
            if fitting:
                b, accum = same_effective_batch(fitting, cand.batch * cand.grad_accum)
                s.consider(f"{title}, micro-batch {b} × accumulation {accum}",
                           cand.with_changes(batch=b, grad_accum=accum), cost + COST_ACCUMULATION)

    # 1. Gradient checkpointing.
    if not plan.grad_checkpointing:
        consider("Turn on gradient checkpointing", base.with_changes(grad_checkpointing=True), COST_CHECKPOINTING,
                 False)

    # 2. A smaller micro-batch, keeping the effective batch with gradient accumulation.
    if plan.batch > 1:
        fitting = largest_fitting(lambda n: s.fits(base.with_changes(batch=n)), 1, plan.batch - 1)
        if fitting:
            b, accum = same_effective_batch(fitting, plan.batch * plan.grad_accum)
            consider(f"Micro-batch {b} with gradient accumulation {accum} (same effective batch)",
                     base.with_changes(batch=b, grad_accum=accum), COST_ACCUMULATION, False)

    # 3. An 8-bit optimizer (bitsandbytes), where its kernels run.
    if plan.optimizer in ("adamw", "sgd") and engines.OPTIMIZER_RUNS["adamw-8bit"].problem(kind, cc) is None:
        consider("Use 8-bit AdamW (bitsandbytes)", base.with_changes(optimizer="adamw-8bit"), COST_8BIT_OPTIMIZER)

    eight_bit = plan.optimizer in ("adamw", "sgd") and engines.OPTIMIZER_RUNS["adamw-8bit"].problem(kind, cc) is None
    if eight_bit:
        consider("Use paged 8-bit AdamW (bitsandbytes)", base.with_changes(optimizer="paged-adamw-8bit"),
                 COST_PAGED_OPTIMIZER)
    pure_bf16 = plan.mode == "full" and plan.master_weights == "fp32" and plan.compute_dtype == "bf16"
    if pure_bf16:
        consider("Pure bf16 weights, no fp32 master copy (--master-weights none)",
                 base.with_changes(master_weights="none"), COST_PURE_BF16)

    # 3b. The cheap steps stacked, in the order a practitioner gives them up (speed first, then a
    # little quality), before anything that changes what is trained (LoRA) or adds PCIe traffic.
    ladder: list[tuple[str, dict[str, Any], float]] = []
    if not plan.grad_checkpointing:
        ladder.append(("gradient checkpointing", {"grad_checkpointing": True}, COST_CHECKPOINTING))
    if eight_bit:
        ladder.append(("8-bit AdamW", {"optimizer": "adamw-8bit"}, COST_8BIT_OPTIMIZER))
    if pure_bf16:
        ladder.append(("pure bf16 weights (--master-weights none)", {"master_weights": "none"}, COST_PURE_BF16))
    stacked: dict[str, Any] = {}
    names: list[str] = []
    stacked_cost = 0.0
    for name, change, step_cost in ladder:
        stacked.update(change)
        names.append(name)
        stacked_cost += step_cost
        if len(names) < 2:
            continue  # one step alone is a candidate above
        title = ", ".join(names[:-1]) + " and " + names[-1]
        consider(title[0].upper() + title[1:], base.with_changes(**stacked), stacked_cost, False)
        if _runs(s.evaluate(base.with_changes(**stacked))):
            break

    # 4. Fewer trainable parameters: full → LoRA → QLoRA; LoRA on fewer modules or a lower rank.
    half = plan.compute_dtype if plan.compute_dtype in ("bf16", "fp16") else "bf16"
    if plan.mode == "full":
        lora = base.with_changes(mode="lora", precision=half, lora_targets="all-linear",
                                 lora_train_embeddings=False, master_weights=None)
        consider(f"LoRA (r={plan.lora_rank}, all linear layers) instead of full fine-tuning", lora, COST_LORA)
        if engines.TRAINING_BASE_RUNS["nf4"].problem(kind, cc) is not None:
            # No QLoRA here (the CPU, Apple): LoRA with checkpointing at the longest sequence that fits is
            # the last step down, as QLoRA's is below where its kernels run.
            lora = lora.with_changes(grad_checkpointing=True)
            if not _runs(s.evaluate(lora)):
                seq = longest_seq(lora)
                if seq:
                    consider(f"LoRA (r={plan.lora_rank}) with gradient checkpointing at a {seq:,}-token sequence",
                             lora.with_changes(seq_len=seq),
                             COST_LORA + COST_CHECKPOINTING + shorter_cost(seq, plan.seq_len), False)
    if plan.mode in ("full", "lora") and engines.TRAINING_BASE_RUNS["nf4"].problem(kind, cc) is None:
        qlora = base.with_changes(mode="qlora", precision="nf4", lora_train_embeddings=False, master_weights=None)
        # The QLoRA recipe checkpoints (peft's prepare_model_for_kbit_training turns it on): where the request
        # did not, QLoRA gives up that speed too, and says so.
        recipe_checkpointing = grad_checkpointing(qlora)[0] and not plan.grad_checkpointing
        ckpt = ", with gradient checkpointing" if recipe_checkpointing else ""
        qlora_cost = (0 if plan.mode == "lora" else COST_LORA) + COST_QLORA \
            + (COST_CHECKPOINTING if recipe_checkpointing else 0)
        consider(f"QLoRA: LoRA on a 4-bit NF4 base (r={plan.lora_rank})"
                 + (", with gradient checkpointing (peft's prepare_model_for_kbit_training turns it on)"
                    if recipe_checkpointing else ""), qlora, qlora_cost)
        best_qlora, best_title = qlora, f"QLoRA (r={plan.lora_rank}){ckpt}"
        if eight_bit and not _runs(s.evaluate(qlora)):
            # QLoRA's own recipe pairs the 4-bit base with a paged 8-bit optimizer (Dettmers et al. 2023).
            best_qlora, best_title = qlora.with_changes(optimizer="adamw-8bit"), best_title + " and 8-bit AdamW" \
                if recipe_checkpointing else best_title + " with 8-bit AdamW"
            qlora_cost += COST_8BIT_OPTIMIZER
            consider(best_title, best_qlora, qlora_cost)
        if not _runs(s.evaluate(best_qlora)):
            # Even the 4-bit base does not hold this sequence: QLoRA at the longest sequence that fits (the
            # shorter sequence costs as in 7. below).
            seq = longest_seq(best_qlora)
            if seq:
                consider(f"{best_title} at a {seq:,}-token sequence", best_qlora.with_changes(seq_len=seq),
                         qlora_cost + shorter_cost(seq, plan.seq_len), False)
    if plan.mode in ("lora", "qlora"):
        if plan.lora_targets != "attention":
            consider("LoRA on the attention projections only", base.with_changes(lora_targets="attention"), 6)
        for r in (8, 4):
            if r < plan.lora_rank:
                consider(f"LoRA rank {r}", base.with_changes(lora_rank=r),
                         3 + (plan.lora_rank - r) / plan.lora_rank * 3)
        if plan.lora_train_embeddings:
            consider("Freeze the embeddings and lm_head (adapters only)",
                     base.with_changes(lora_train_embeddings=False), 4)

    # 5. Shard across the machine's GPUs, 6. offload to RAM (ZeRO-Offload) — where DeepSpeed/FSDP run.
    shards = plan.device == "gpu" and engines.SHARDING_RUNS.problem(kind, cc) is None
    n = len(machine.gpus) if shards else 0
    if n > 1 and (plan.gpus < n or (plan.zero is None and plan.fsdp is None)):
        across = f"{n} GPUs" + (f" × {plan.nodes} nodes" if plan.nodes > 1 else "")
        for zero in (2, 3):
            consider(f"DeepSpeed ZeRO-{zero} across {across}",
                     base.with_changes(gpus=n, zero=zero, fsdp=None, offload="none"), COST_SHARDING + (zero - 2) * 2)
        consider(f"FSDP full-shard across {across}",
                 base.with_changes(gpus=n, fsdp="full-shard", zero=None, offload="none"), COST_SHARDING + 2)
    # 5a. Hybrid sharding replicates the model states on every node: shard them over all the nodes' GPUs.
    if shards and plan.nodes > 1 and plan.fsdp and FSDP_STRATEGIES[plan.fsdp].within_node:
        consider(f"FSDP full-shard over all {plan.world} GPUs of the {plan.nodes} nodes (not replicated per node)",
                 base.with_changes(fsdp="full-shard"), COST_SHARDING)
    # 5b. More nodes like this one, the model states sharded over all their GPUs.
    if shards and _multi_node(machine) and plan.offload == "none":
        sharding = {"zero": plan.zero, "fsdp": None} if plan.zero == 3 else {"zero": None, "fsdp": "full-shard"}
        what = "DeepSpeed ZeRO-3" if plan.zero == 3 else "FSDP full-shard"
        cand = base.with_changes(gpus=None, **sharding)
        # With gradient checkpointing too where the request does not checkpoint: sharding divides the model
        # states, not the activations, so without it more nodes may only hold them by the dozen.  The cheaper
        # (cluster_cost) of the two is offered.
        tries = [(what, cand, extra)]
        if not grad_checkpointing(cand)[0]:
            tries.append((what + " with gradient checkpointing", cand.with_changes(grad_checkpointing=True),
                          extra + COST_CHECKPOINTING))
        best: tuple[float, str, Request] | None = None
        for title, c, cost in tries:
            def runs_on(k: int, c: Request = c) -> bool:
                return _runs(s.evaluate(c.with_changes(nodes=k)))

            nodes = fewest_nodes(runs_on, plan.nodes + 1)
            total = cost + cluster_cost(plan.nodes, nodes) if nodes is not None else None
            if nodes is not None and total is not None and (best is None or total < best[0]):
                best = total, f"{title} over {nodes} nodes", c.with_changes(nodes=nodes)
        if best is not None:
            s.consider(best[1], best[2], best[0])
    if shards and plan.offload == "none":
        zero = max(plan.zero or 2, 2)
        for title, cand, cost in (
                ("Offload the optimizer to the CPU (DeepSpeed ZeRO-Offload)",
                 base.with_changes(zero=zero, fsdp=None, offload="optimizer"), COST_OFFLOAD_OPTIMIZER),
                ("Offload optimizer and parameters to the CPU (ZeRO-3 Offload)",
                 base.with_changes(zero=3, fsdp=None, offload="optimizer+params"), COST_OFFLOAD_PARAMS)):
            consider(title, cand, cost + _pcie_cost(s, spec, cand, machine))
            if cand.offload == "optimizer+params" and _multi_node(machine) and not _runs(s.evaluate(cand)):
                # Each node's RAM holds its own ranks' share of the offloaded states: more nodes, less RAM each.
                _more_nodes(s, cand.with_changes(gpus=None), plan, "ZeRO-3 Offload",
                            extra + cost + _pcie_cost(s, spec, cand, machine))

    # 7. A shorter sequence (last: it changes what is learned); with gradient checkpointing too where that alone
    #    does not hold the asked sequence, as a longer one fits with it than without.
    seq = longest_seq(base)
    if seq:
        consider(f"Shorten the sequence to {seq:,} tokens", base.with_changes(seq_len=seq),
                 shorter_cost(seq, plan.seq_len), False)
    checkpointed = base.with_changes(grad_checkpointing=True)
    if not plan.grad_checkpointing and not _runs(s.evaluate(checkpointed)):
        longer = longest_seq(checkpointed)
        if longer and (seq is None or longer > seq):
            consider(f"Gradient checkpointing at a {longer:,}-token sequence",
                     checkpointed.with_changes(seq_len=longer),
                     COST_CHECKPOINTING + shorter_cost(longer, plan.seq_len), False)


def _runnable_training(base: Request, plan: TrainingPlan, machine: Machine) -> Request:
    """For a plan this machine cannot run: the same training with what does run here swapped in."""
    fixed = base
    if not machine.gpus and (base.device == "gpu" or base.gpus is not None):
        fixed = fixed.with_changes(device="auto", gpus=None)
    elif base.gpus is not None and base.gpus > len(machine.gpus):
        fixed = fixed.with_changes(gpus=len(machine.gpus))
    kind, cc = engines.machine_kind(machine, "cpu" if fixed.device == "cpu" or not machine.gpus else "gpu")
    if engines.OPTIMIZER_RUNS[base.optimizer].problem(kind, cc):
        fixed = fixed.with_changes(optimizer="adamw")
    if engines.ATTENTION_RUNS[base.attention or "sdpa"].problem(kind, cc):
        fixed = fixed.with_changes(attention="sdpa")
    if (base.zero is not None or base.fsdp is not None) and engines.SHARDING_RUNS.problem(kind, cc):
        fixed = fixed.with_changes(zero=None, fsdp=None, offload="none", gpus=None)
    if kind == engines.CPU and base.gpus is not None:
        fixed = fixed.with_changes(gpus=None)
    base_runs = engines.TRAINING_BASE_RUNS.get(plan.precision)
    if base_runs is not None and base_runs.problem(kind, cc):
        fixed = fixed.with_changes(mode="lora", precision="bf16", master_weights=None)
    return fixed


# ---- where: each machine's best precision ---------------------------------------------------------
def _cannot_hold(spec: ModelSpec, precision: str, machine: Machine, device: str) -> bool:
    """True when the weights alone (less the embedding llama.cpp keeps in RAM, with a 5 % margin) exceed
    all the free memory of the devices a plan on ``device`` uses: a candidate skipped without estimating it."""
    from fitcheck.estimate.weights import weight_bytes
    from fitcheck.machine import known

    if device == "cpu" or not machine.gpus:
        free = [machine.memory.available_bytes]
    else:
        free = [g.memory_free_bytes for g in machine.gpus]
    if not all(known(f) and isinstance(f, int) for f in free):
        return False
    wb = weight_bytes(spec, weight_format(precision))
    return 0.95 * (wb.total - wb.embed_bytes) > sum(free)  # type: ignore[arg-type]


def _with_speed_costs(spec: ModelSpec, plan: Plan, machine: Machine, evaluate: Evaluate,
                      candidates: list[tuple[float, str, Request]]) -> list[tuple[float, str, Request]]:
    """The candidates that run, each cost with the decode speed it gives up (_slowdown_costs).  The other
    engines' are checked first; one of the plan's engine is checked only when its cost with the speed it
    gives up to those (from its plan alone: transformers' memory estimate is the slow one) can be the lowest."""
    from fitcheck.errors import FitcheckError
    from fitcheck.plan import resolve

    def holds(c: tuple[float, str, Request]) -> bool:
        return not _cannot_hold(spec, c[2].precision or "", machine, plan.device)

    running: list[tuple[tuple[float, str, Request], Outcome]] = []
    for c in [c for c in candidates if c[2].engine != plan.engine and holds(c)]:
        out = evaluate(c[2])
        if out is not None and _runs(out):
            running.append((c, out))
    rated = [(_gives_up(o.plan), _decode(spec, machine, o.plan)) for _, o in running]
    lowest = min((c[0] + _slowdown_cost(r, g, rated) for (c, _), (g, r) in zip(running, rated, strict=True)),
                 default=None)
    for c in sorted((c for c in candidates if c[2].engine == plan.engine and holds(c)), key=lambda c: c[0]):
        try:
            own = resolve(c[2], spec, machine)
        except FitcheckError:
            continue
        if lowest is not None and c[0] + _slowdown_cost(_decode(spec, machine, own), _gives_up(own), rated) >= lowest:
            continue
        out = evaluate(c[2])
        if out is not None and _runs(out):
            running.append((c, out))
    slow = _slowdown_costs(spec, machine, [o for _, o in running])
    return [(c[0] + extra, c[1], c[2]) for (c, _), extra in zip(running, slow, strict=True)]


def best_precision(spec: ModelSpec, request: Request, plan: Plan, machine: Machine,
                   evaluate: Evaluate) -> Alternative | None:
    """For a request whose precision was left to the machine and does not run at its default: the
    weights format the inference alternatives above would try (the engine's lower precisions, then
    GGUF builds with llama.cpp where no engine was given), nothing else of the request changed (same
    device, context, batch and KV cache, no partial offload), the first in check's order: the same costs as the
    alternatives (quality first), then speed_order (an option too slow to read along after a much faster one).
    Candidates are checked cheapest first, and only until one runs that nothing costlier can rank before; where
    fitcheck chose the engine, the serving engines' and the GGUF builds are checked too (vLLM's AWQ before
    transformers'), all of them, each paying for the decode speed it gives up."""
    base = request.with_changes(precision=plan.precision, engine=plan.engine)
    kind, cc = engines.machine_kind(machine, plan.device)

    def step(p: str) -> float:
        return max(_quality(p) - _quality(plan.precision), 0) * COST_PER_QUALITY_STEP

    candidates: list[tuple[float, str, Request]] = [
        (step(p) + (0 if e == plan.engine else COST_ENGINE_SWITCH), f"{weight_format(p).description} with {e}",
         _with_engine(base, e, plan).with_changes(precision=p))
        for p, names in _lower_precision_engines(spec, request, plan, kind, cc).items() for e in names]
    if request.engine in (None, "llama.cpp"):
        start = plan.precision if weight_format(plan.precision).gguf else "q4_k_m"
        gguf_base = base.with_changes(engine="llama.cpp", transformers_version=None, attention=None,
                                      gpu_memory_utilization=Request().gpu_memory_utilization)
        candidates += [(step(g) + COST_GGUF, f"GGUF {g} with llama.cpp", gguf_base.with_changes(precision=g))
                       for g in _GGUF_LADDER
                       if weight_format(g).linear_bits <= weight_format(start).linear_bits and g != plan.precision]
    if _engine_chosen(request, plan):
        # every engine's candidates, the GGUF builds too, pay for the decode speed they give up, as check's
        # (_consider_fastest against llama.cpp's build on the same GPUs, and each GGUF build's own)
        candidates = _with_speed_costs(spec, plan, machine, evaluate, candidates)
    s = _Search(base, evaluate)
    kept: list[Alternative] = []
    lead: tuple[Alternative, Footing] | None = None   # the cheapest kept, and what the speed order reads of it
    # Cheapest first, until one runs that nothing costlier can rank before; a lead too slow to read along may be
    # put after a much faster one (speed_order), so then every candidate is checked.
    for cost, title, cand in sorted(candidates, key=lambda c: c[0]):
        if lead is not None and cost >= lead[0].cost and not _may_be_overtaken(lead[1]):
            break  # nothing costlier ranks before it
        if _cannot_hold(spec, cand.precision or "", machine, plan.device):
            continue
        found = len(s.found)
        s.consider(title, cand, cost)
        for a in s.found[found:]:
            if isinstance(a.plan, Plan) and a.plan.device == plan.device and a.plan.gpu_layers is None \
                    and a.plan.nodes == plan.nodes and not a.plan.problems:
                kept.append(a)
                if lead is None or _rank(a) < _rank(lead[0]):
                    lead = a, _footing(spec, machine, a)
    if not kept:
        return None
    # check's own order: by cost, then an option too slow to read along after one much faster (speed_order)
    return speed_order(sorted(kept, key=_rank), lambda a: _footing(spec, machine, a))[0]


def _may_be_overtaken(lead: Footing) -> bool:
    """Whether speed_order can put ``lead`` after another option: only one too slow to read along can be."""
    return lead.decode_low is not None and lead.decode_low / max(lead.batch, 1) < READ_ALONG_TOKENS_PER_S
