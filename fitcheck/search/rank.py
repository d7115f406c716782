"""How alternatives are ranked: what each gives up, as costs (lower is better), and the orderings a practitioner reads.

The weights below are policy, not measurements: quality first (precision ranks in fitcheck.estimate.formats), then
speed (offload, CPU, checkpointing; where fitcheck chose the engine, the decode speed a quantized candidate gives up
against the fastest engine that runs it), then what the user gives up of the request (context, batch, sequence
length), and more machines (renting and setting up a cluster costs what 16-bit → 4-bit costs, COST_CLUSTER, then
COST_PER_NODE each).  The inference list is read as a practitioner's advice: one good option per route family
(serving engine, llama.cpp, transformers) before a third of the same family, no more nodes where this machine
already fits at the same quality, and an option too slow to read along after one much faster that gives up at most
a small quality step more (speed_order: the cost's speed term stops growing at SLOWDOWN_CAP).  The training list
leaves out an option that makes another's changes and more without fitting better (gives_up_more_for_nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from fitcheck import engines
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.verdict import FITS, TIGHT
from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec
from fitcheck.options import DEFAULTS
from fitcheck.plan import AnyPlan, Plan
from fitcheck.speed.decode import estimate_speed
from fitcheck.speed.efficiency import CPU_ENOUGH_TOKENS_PER_S

if TYPE_CHECKING:
    from fitcheck.search.routes import Alternative, Outcome

T = TypeVar("T")
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
# A serving engine's reservation lowered below its default to leave room for what it keeps beyond it (the
# pipeline's pool_room: --gpu-memory-utilization 0.82 on an 8 GB card): it starts, with less of its own margin
# and a smaller KV pool, which is what a tight fit gives up (the headroom is not taken inside a reservation).
COST_LOWERED_RESERVATION = COST_TIGHT
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


def margin_cost(out: Any) -> float:
    """COST_TIGHT for an outcome inside the headroom, COST_LOWERED_RESERVATION for one whose engine reservation was
    lowered below its default to fit (a pooled engine is never tight: its reservation is its margin)."""
    if out.verdict.status == TIGHT:
        return COST_TIGHT
    plan = out.plan
    lowered = isinstance(plan, Plan) and plan.engine in engines.SERVING_ENGINES \
        and plan.gpu_memory_utilization < DEFAULTS["gpu_memory_utilization"]
    return COST_LOWERED_RESERVATION if lowered else 0.0


def shorter_cost(got: int, asked: int) -> float:
    """What a shorter context or sequence than the one asked costs."""
    return COST_SHORTER + COST_SHORTER_SPAN * (1 - got / asked)


def cluster_cost(nodes: int, more: int) -> float:
    """What going from ``nodes`` machines to ``more`` costs: COST_PER_NODE each, and COST_CLUSTER when this
    is the step from one machine to a cluster."""
    return COST_PER_NODE * (more - nodes) + (COST_CLUSTER if nodes <= 1 < more else 0)


def gives_up_more_for_nothing(a: Alternative, found: list[Alternative]) -> bool:
    """Whether another alternative makes some of ``a``'s changes and no other, fits at least as well and costs
    no more: ``a`` gives up the rest for nothing (8-bit AdamW or a lower LoRA rank on top of gradient
    checkpointing, still tight, beside gradient checkpointing alone, tight: 0.3 GiB less of the same 22 GiB)."""
    mine = set(a.changes)
    tight = a.verdict.status == TIGHT
    return any(set(b.changes) < mine and (tight or b.verdict.status == FITS) and b.cost <= a.cost
               for b in found if b is not a)


def rank_key(a: Alternative) -> tuple[float, bool]:
    """Cost order (COST_TIGHT already in the cost); at equal cost a comfortable fit before a tight one."""
    return a.cost, a.verdict.status == TIGHT


MAX_PER_ROUTE = 2           # options of one route (differing only in weights format) shown before other routes'
_FORMAT_ONLY = frozenset({"precision", "engine", "transformers_version", "attention", "gpu_memory_utilization"})


def route_of(a: Alternative) -> tuple[Any, ...]:
    """What kind of option ``a`` is: its engine's route and what else it changes than the weights format (and
    the options an engine switch resets), by name: vLLM's AWQ and SGLang's GPTQ-int4 are one kind, and so are
    FP8 and GPTQ-int8 each at the longest context that fits (36,365 and 35,767 tokens); the same weights over
    more GPUs or nodes, offloaded, or with another KV cache type are another."""
    return engines.get(a.plan.engine).route_family, tuple(k for k, _ in a.changes if k not in _FORMAT_ONLY)


def diverse(ranked: list[Alternative]) -> tuple[Alternative, ...]:
    """Cost order, except that an option is put after the other routes' when its kind (_route) already has
    MAX_PER_ROUTE options above it, or one of the same quality (another 4-bit format of the same size: GPTQ-int4
    beside AWQ on one engine adds nothing to read): on one consumer GPU the serving engines' quantized
    variants would otherwise fill every slot and hide llama.cpp's GGUF build."""
    shown: list[Alternative] = []
    later: list[Alternative] = []
    for a in ranked:
        # only another weights format is put after: a shorter context or more GPUs alone is another option
        same = [b for b in shown if route_of(b) == route_of(a) and "precision" in dict(b.changes)] \
            if "precision" in dict(a.changes) else []
        if len(same) >= MAX_PER_ROUTE or any(quality(b.plan.precision) == quality(a.plan.precision) for b in same):
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
# A reader reads ~5–10 tokens/s: below this rate per sequence (speed.efficiency, the rate it calls "fast enough
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


def footing(spec: ModelSpec, machine: Machine, a: Alternative) -> Footing:
    rate = decode_rate(spec, machine, a.plan)
    return Footing(quality(a.plan.precision), COST_KV.get(getattr(a.plan, "kv_dtype", ""), 0),
                   getattr(a.plan, "context", 0), getattr(a.plan, "batch", 0), a.plan.nodes,
                   a.verdict.status == FITS, None if rate is None else rate.low)


def checkpoint_known(spec: ModelSpec, a: Alternative) -> bool:
    """Whether ``a``'s engine command loads a checkpoint that exists (Engine.checkpoint_known); training plans load
    the model's own."""
    return engines.checkpoint_known(spec, a.plan)


def known_first(spec: ModelSpec, ranked: list[Alternative] | tuple[Alternative, ...]) -> list[Alternative]:
    """``ranked`` with every option whose checkpoint fitcheck cannot name (an AWQ build of a model no catalog
    repository quantizes, a GGUF type its GGUF repository does not hold) after every one it can, each group kept
    in order: the first thing a user reads must be a command that runs as printed (issue 35 item 3)."""
    return sorted(ranked, key=lambda a: not checkpoint_known(spec, a))   # stable: each group keeps its order


def needless_nodes(a: Alternative, found: list[Alternative], plan: AnyPlan) -> bool:
    """More nodes than the request's add nothing when an alternative on the request's nodes already fits
    (with headroom), gives up no more (quality, context, batch: _gives_up) than they do and costs no more (weights
    streamed over PCIe every forward pass cost more than a second node)."""
    if a.plan.nodes <= plan.nodes:
        return False
    mine = gives_up(a.plan)
    return any(b.plan.nodes <= plan.nodes and b.verdict.status == FITS and b.cost <= a.cost
               and all(x >= y for x, y in zip(gives_up(b.plan), mine, strict=True)) for b in found)


def quality(precision: str) -> int:
    return weight_format(precision).quality_loss


def decode_rate(spec: ModelSpec, machine: Machine, plan: AnyPlan) -> Any:
    """The plan's decode Rate (tokens/s over the batch), or None when unknown."""
    return estimate_speed(spec, plan, machine).decode if isinstance(plan, Plan) else None


def gives_up(plan: AnyPlan) -> tuple[int, int, int]:
    """What a candidate gives up, each larger is better: (-quality loss, context, batch)."""
    return -quality(plan.precision), getattr(plan, "context", 0), getattr(plan, "batch", 0)


def slowdown_cost(rate: Any, gives_up: tuple[int, int, int], others: list[tuple[tuple[int, int, int], Any]]) -> float:
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


def slowdown_costs(spec: ModelSpec, machine: Machine, outs: list[Outcome]) -> list[float]:
    """What each candidate's decode speed gives up against the fastest of them that gives up no more."""
    rated = [(gives_up(o.plan), decode_rate(spec, machine, o.plan)) for o in outs]
    return [slowdown_cost(r, g, rated) for g, r in rated]


