"""The inference routes, in the order they are tried (cost decides the order they are shown in):

1. quantize: lower-precision weights, with the plan's engine and, where fitcheck chose the engine, with each engine
   of the capability table that runs them here (over all GPUs, or at the context that fits, if they must);
   an attention kernel that holds no score matrix, a release that computes only the last position's logits;
2. serve: the same weights on a pooled serving engine (paged KV cache, chunked prefill), or the checkpoint's own
   stored format there where the plan's engine dequantized it;
3. KV cache: the engine's quantized KV-cache types;
4. shorter context, fewer concurrent sequences;
5. more of the machine's GPUs; more nodes like this one; expert parallel for a mixture of experts;
6. GGUF builds: fully on the GPUs, over nodes (RPC), with experts or layers in RAM, on the CPU alone;
7. weights streamed from RAM every forward pass (the last resort).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from fitcheck import engines
from fitcheck.engines.capabilities import ATTENTION_RUNS, GGUF_TYPES
from fitcheck.engines.checkpoints import holds_gguf
from fitcheck.estimate.context_limit import search_limit
from fitcheck.estimate.formats import KV_DTYPE_BYTES, weight_format
from fitcheck.estimate.verdict import FITS
from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec
from fitcheck.plan import Plan
from fitcheck.request import Request
from fitcheck.search import rank as R
from fitcheck.search.largest import largest_fitting
from fitcheck.search.routes import (
    Alternative,
    Evaluate,
    Outcome,
    Route,
    Search,
    changed_fields,
    fewest_nodes,
    gpus_fit,
    more_nodes,
    multi_node,
    requantizes,
    runs,
    smaller,
    with_context,
)
from fitcheck.speed.decode import active_weight_bytes, estimate_speed, ram_weight_bytes_per_step
from fitcheck.speed.efficiency import pcie_bytes_per_s

GGUF_LADDER = ("q8_0", "q6_k", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k")
# Weights a serving engine takes from the resident engine's plan as they are: its bitsandbytes and fp32 paths give
# nothing a paged KV cache does not already give at those formats.
_NOT_SERVED_AS_IS = ("int8", "nf4", "fp32")
Rated = list[tuple[tuple[int, int, int], Any]]   # (gives_up, decode Rate) of the candidates compared for speed


@dataclass
class Context:
    """What every inference route reads: the request, its plan, the machine, the search that collects."""

    spec: ModelSpec
    request: Request
    plan: Plan
    machine: Machine
    evaluate: Evaluate
    s: Search
    base: Request                 # the request with the plan's precision and engine pinned
    kind: str
    cc: float | None
    visible: int
    on_gpu: bool
    speed_costs: bool             # fitcheck chose the engine: quantized candidates pay for the speed they give up
    ladder: list[str]             # the GGUF types tried, best first
    gpu_ok: bool                  # the GGUF engine runs the ladder's first type on this machine's GPUs
    gguf_base: Request
    gguf_ref: Outcome | None      # the first GGUF build on the GPUs: the speed reference of the quantize route
    rated: Rated = field(default_factory=list)

    def max_context(self, candidate: Request) -> int | None:
        return largest_fitting(lambda n: self.s.fits(with_context(candidate, n)), R.MIN_USEFUL_CONTEXT,
                               min(candidate.context - 1, search_limit(self.spec, candidate.context)))

    def context_cost(self, ctx: int) -> float:
        return R.shorter_cost(ctx, self.request.context)

    def gguf_on_gpus(self, gguf: str) -> Request:
        return self.gguf_base.with_changes(precision=gguf, gpus=None if self.base.gpus is None else self.visible)

    def step(self, precision: str) -> float:
        """What the quality these weights give up costs, against the plan's."""
        return max(R.quality(precision) - R.quality(self.plan.precision), 0) * R.COST_PER_QUALITY_STEP


def inference_alternatives(spec: ModelSpec, request: Request, plan: Plan, machine: Machine,
                           evaluate: Evaluate) -> tuple[Alternative, ...]:
    visible = len(machine.gpus)
    if plan.problems and request.gpus is not None and 0 < visible < request.gpus:
        return _on_the_gpus_here(spec, request, machine, evaluate)
    ctx = _context(spec, request, plan, machine, evaluate)
    for route in ROUTES:
        route.propose(ctx)
    return ctx.s.ranked_for_serving(R.MAX_ALTERNATIVES, plan, spec, machine)


def _on_the_gpus_here(spec: ModelSpec, request: Request, machine: Machine,
                      evaluate: Evaluate) -> tuple[Alternative, ...]:
    """--gpus N on a machine with fewer: the same request on the GPUs it has (--gpus dropped), and where that does
    not fit with headroom the alternatives from there, each changing --gpus too (COST_RUNNABLE, as training's)."""
    visible = len(machine.gpus)
    fixed = request.with_changes(gpus=None)
    out = evaluate(fixed)
    if out is None or not isinstance(out.plan, Plan) or out.plan.problems:
        return ()
    s = Search(request, evaluate, relax=True)
    s.consider(f"Use the {visible} GPU{'s' if visible > 1 else ''} this machine has (no --gpus)", fixed,
               R.COST_RUNNABLE)
    if out.verdict.status != FITS:
        s.found += [replace(a, cost=a.cost + R.COST_RUNNABLE, changes=changed_fields(request, a.request))
                    for a in inference_alternatives(spec, fixed, out.plan, machine, evaluate)]
    return s.ranked_for_serving(R.MAX_ALTERNATIVES, out.plan, spec, machine)


def gguf_default(spec: ModelSpec) -> str:
    """The GGUF type a build starts from: Q4_K_M, or the type the model's GGUF repository holds instead."""
    held = engines.get(engines.gguf_engine()).held_precision(spec, "q4_k_m")
    return held[0] if held else "q4_k_m"


def gguf_ladder(spec: ModelSpec, start: str) -> list[str]:
    """The GGUF types tried from ``start`` down: GGUF_LADDER's and the types the model's GGUF repository holds
    (Gemma 3's Q4_0), largest first, each stored in fewer bytes than ``start``."""
    held = [t for t in GGUF_TYPES if t.upper() in spec.gguf_types and t not in GGUF_LADDER]
    # largest first, then the better quality at the same size (Q4_K_M before Q4_0); no set order
    types = sorted((*GGUF_LADDER, *held),
                   key=lambda t: (-weight_format(t).linear_bits, weight_format(t).quality_loss, t))
    return [g for g in types if g == start or smaller(spec, g, start)]


def _context(spec: ModelSpec, request: Request, plan: Plan, machine: Machine, evaluate: Evaluate) -> Context:
    visible = len(machine.gpus)
    # The request with the plan's precision and engine pinned: an alternative changes one thing.
    base = request.with_changes(precision=plan.precision, engine=plan.engine)
    s = Search(base, evaluate, typed=request, relax=bool(plan.problems))
    kind, cc = engines.machine_kind(machine, plan.device)
    gguf = engines.get(engines.gguf_engine())
    # The GGUF builds from the plan's own GGUF type; a 16-bit GGUF file steps to q8_0 first; other engines to q4_k_m.
    kv = plan.kv_dtype if plan.kv_dtype in gguf.kv_dtypes and KV_DTYPE_BYTES[plan.kv_dtype] < 2 else "auto"
    start = plan.precision if weight_format(plan.precision).gguf else \
        "q8_0" if plan.engine == gguf.name else gguf_default(spec)
    ladder = gguf_ladder(spec, start)
    gpu_kind, gpu_cc = engines.machine_kind(machine, "gpu")
    gpu_ok = visible > 0 and request.device != "cpu" and gguf.runs_here(start, gpu_kind, gpu_cc) is None
    gguf_base = base.with_changes(engine=gguf.name, kv_dtype=kv, gpu_layers=None, transformers_version=None,
                                  attention=None, gpu_memory_utilization=Request().gpu_memory_utilization,
                                  device="auto" if request.device == "gpu" else request.device)
    speed_costs = engine_chosen(request, plan)
    ctx = Context(spec, request, plan, machine, evaluate, s, base, kind, cc, visible,
                  plan.device != "cpu" and visible > 0, speed_costs, ladder, gpu_ok, gguf_base, None)
    ctx.gguf_ref = evaluate(ctx.gguf_on_gpus(ladder[0])) if speed_costs and gpu_ok and ladder else None
    return ctx


def engine_chosen(request: Request, plan: Any) -> bool:
    """The request left the engine to fitcheck (no --engine, nor a transformers-only option: --attention,
    --transformers-version) and runs non-GGUF weights on GPUs: its quantized alternatives may serve with
    another engine, and pay for the decode speed they give up."""
    return request.engine is None and request.transformers_version is None and request.attention is None \
        and plan.device == "gpu" and not weight_format(plan.precision).gguf


def lower_precision_engines(spec: ModelSpec, request: Request, plan: Plan, kind: str,
                            cc: float | None) -> dict[str, list[str]]:
    """The lower-precision weights the quantize route tries, each with the engines that try them: the plan's engine
    (its lower_precisions) and, where fitcheck chose the engine, every other engine of the capability table that
    runs that (non-GGUF) precision here: a practitioner who quantizes to serve on GPUs serves with vLLM (paged KV
    cache, tensor parallel), not transformers' device_map='auto'."""
    names = [plan.engine] + ([e for e in engines.ENGINES if e != plan.engine] if engine_chosen(request, plan) else [])
    found: dict[str, list[str]] = {}
    for e in names:
        for p in engines.get(e).lower_precisions:
            if not smaller(spec, p, plan.precision) or requantizes(spec, p) \
                    or engines.runs_here(e, p, kind, cc) is not None or (e != plan.engine and weight_format(p).gguf):
                continue
            found.setdefault(p, []).append(e)
    return found


def with_engine(base: Request, engine: str, plan: Any) -> Request:
    """``base`` served by ``engine`` (the transformers-only options reset to their defaults)."""
    if engine == plan.engine:
        return base
    return base.with_changes(engine=engine, transformers_version=None, attention=None)


def consider_fastest(s: Search, spec: ModelSpec, machine: Machine, tries: list[tuple[str, Request, float, Outcome]],
                     speed_costs: bool, references: tuple[Outcome, ...] = ()) -> Rated:
    """Offer the candidates that run, each engine's paying for the decode speed it gives up (slowdown_costs) where
    fitcheck chose the engine, against the fastest of them and of ``references`` (the GGUF build on the same GPUs,
    offered later at the same footing); of one precision at one context and batch, only the cheapest (transformers'
    AWQ is not offered beside vLLM's faster AWQ at the same settings).  Returns the candidates rated for speed
    (empty where speed costs nothing)."""
    rated: Rated = [(R.gives_up(o.plan), R.decode_rate(spec, machine, o.plan))
                    for o in [t[3] for t in tries] + list(references)] if speed_costs else []
    extra = [R.slowdown_cost(r, g, rated) for g, r in rated[:len(tries)]] if speed_costs else [0.0] * len(tries)
    best: dict[tuple, tuple[str, Request, float, float]] = {}
    for (title, cand, cost, out), slow in zip(tries, extra, strict=True):
        key = (out.plan.precision, getattr(out.plan, "context", None), getattr(out.plan, "batch", None))
        tight = R.margin_cost(out)
        if key not in best or cost + slow + tight < best[key][2] + best[key][3]:
            best[key] = (title, cand, cost + slow, tight)
    for title, cand, cost, _ in best.values():
        s.consider(title, cand, cost)
    return rated


# ---- 1. quantize ---------------------------------------------------------------------------------------------
def quantize(c: Context) -> None:
    """Lower-precision weights (alone, over all GPUs, then at the context that fits) with the plan's engine and,
    where fitcheck chose the engine, with each engine of the table that runs them here."""

    spec, plan, s = c.spec, c.plan, c.s
    tries: list[tuple[str, Request, float, Outcome]] = []
    for p, names in lower_precision_engines(spec, c.request, plan, c.kind, c.cc).items():
        desc = weight_format(p).description
        for e in names:
            served = "" if e == plan.engine else f", served with {engines.get(e).title}"
            cost = c.step(p) + (0 if e == plan.engine else R.COST_ENGINE_SWITCH)
            cand = with_engine(c.base, e, plan).with_changes(precision=p)
            title = f"Quantize the weights to {desc}{served}"
            if p == spec.stored_format:
                needs = engines.get(e).stored_needs(p)
                needs = f" ({needs})" if needs else ""
                title = f"Keep the checkpoint's own {desc}{needs}{served}"
            attempt: tuple[str, Request, float] = (title, cand, float(cost))
            out = s.evaluate(cand)
            n_all = engines.usable_gpus(e, c.visible, spec) if c.on_gpu else 0
            if not runs(out) and n_all > plan.gpus:
                cand = cand.with_changes(gpus=n_all)
                attempt = (f"{desc} over {n_all} GPUs{served}", cand, cost + R.COST_PER_GPU * (n_all - plan.gpus))
                out = s.evaluate(cand)
            if not runs(out):
                ctx = c.max_context(cand)
                if not ctx:
                    continue
                cand = with_context(cand, ctx)
                attempt = (f"{desc} with a {ctx:,}-token context{served}", cand, cost + c.context_cost(ctx))
                out = s.evaluate(cand)
            if out is not None and runs(out):
                tries.append((*attempt, out))
    c.rated = consider_fastest(s, spec, c.machine, tries, c.speed_costs,
                               (c.gguf_ref,) if c.gguf_ref is not None and runs(c.gguf_ref) else ())


def attention_and_release(c: Context) -> None:
    """SDPA instead of eager attention (no prompt × prompt score matrix), or instead of a kernel this machine does
    not run (flash-attention needs CUDA >= 8.0 or ROCm); a release that computes the prefill's logits for the last
    position only (the plan's logits 'all-fp32': transformers before 4.45)."""
    plan, title = c.plan, engines.get(c.plan.engine).title
    if plan.attention == "eager" or ATTENTION_RUNS[plan.attention].problem(c.kind, c.cc):
        c.s.consider("Use SDPA attention (attn_implementation=\"sdpa\": no prompt² score matrix)",
                     c.base.with_changes(attention="sdpa"), 1)
    if plan.logits == "all-fp32":
        c.s.consider(f"Upgrade {title} to 4.45 or later (prompt logits for the last position only)",
                     c.base.with_changes(transformers_version=None), 1)


# ---- 2. serve with a pooled engine ------------------------------------------------------------------------
def _serving_engine(c: Context, precision: str) -> Any:
    """The first pooled serving engine of the table that runs ``precision`` here, or None."""
    return next((e for e in engines.ENGINES.values()
                 if e.pooled and e.name != c.plan.engine and e.runs_here(precision, c.kind, c.cc) is None), None)


def serve(c: Context) -> None:
    """The same weights served by a pooled engine (paged KV cache, activations bounded by chunked prefill); and the
    checkpoint's own stored format there where the plan's engine dequantized it (gpt-oss on an A100: vLLM's Marlin
    MXFP4 kernels keep the experts packed)."""
    plan, spec = c.plan, c.spec
    own = engines.get(plan.engine)
    if own.pooled or own.loads_gguf_files or not c.on_gpu or weight_format(plan.precision).gguf:
        return
    serving = _serving_engine(c, plan.precision)
    if serving is not None and plan.precision not in _NOT_SERVED_AS_IS and not plan.dequantize:
        c.s.consider(f"Serve with {serving.title} (paged KV cache, chunked prefill)",
                     c.base.with_changes(engine=serving.name, transformers_version=None, attention=None),
                     R.COST_ENGINE_SWITCH)
    stored = spec.stored_format
    if not stored or stored == plan.precision:
        return
    keeps = _serving_engine(c, stored)
    if keeps is not None and stored in keeps.precisions and smaller(spec, stored, plan.precision):
        c.s.consider(f"Serve the checkpoint's own {stored.upper()} with {keeps.title}",
                     c.base.with_changes(engine=keeps.name, precision=stored, transformers_version=None,
                                         attention=None),
                     3 + max(R.quality(stored) - R.quality(plan.precision), 0) * R.COST_PER_QUALITY_STEP)


# ---- 3. KV cache, 4. context and sequences --------------------------------------------------------------
def kv_cache(c: Context) -> None:
    """The engine's quantized KV-cache types (fp8 with the serving engines, q8_0/q4_0 with llama.cpp)."""
    for kv in engines.get(c.plan.engine).kv_dtypes:
        if KV_DTYPE_BYTES[kv] < 2 and kv != c.plan.kv_dtype:
            c.s.consider(f"Quantize the KV cache to {kv}", c.base.with_changes(kv_dtype=kv), R.COST_KV[kv])


def shorter(c: Context) -> None:
    """A shorter context; fewer concurrent sequences."""
    ctx = c.max_context(c.base)
    if ctx:
        c.s.consider(f"Shorten the context to {ctx:,} tokens", with_context(c.base, ctx), c.context_cost(ctx))
    batch = c.plan.batch
    if batch > 1:
        b = largest_fitting(lambda n: c.s.fits(c.base.with_changes(batch=n)), 1, batch - 1)
        if b:
            c.s.consider(f"Serve {b} concurrent sequence{'s' if b > 1 else ''} instead of {batch}",
                         c.base.with_changes(batch=b), 4 + 20 * (1 - b / batch))


# ---- 5. more GPUs, more nodes, expert parallel -------------------------------------------------------------
def more_gpus(c: Context) -> None:
    """More of the machine's GPUs (tensor parallel with a serving engine, layer split otherwise)."""
    plan = c.plan
    engine = engines.get(plan.engine)
    all_gpus = engines.usable_gpus(plan.engine, c.visible, c.spec) if c.on_gpu else 0
    if plan.device == "gpu" and all_gpus > plan.gpus:
        c.s.consider(f"Spread over {all_gpus} GPUs" + (" (tensor parallel)" if engine.splits == "tensor" else ""),
                     c.base.with_changes(gpus=all_gpus), R.COST_PER_GPU * (all_gpus - plan.gpus))


def nodes(c: Context) -> None:
    """More nodes like this one with the first engine that spans nodes with tensor parallelism (vLLM: tensor
    parallel within each node, pipeline parallel across them), and the plan's own such engine (SGLang)."""
    plan = c.plan
    spanning = [e for e in engines.ENGINES.values() if e.multi_node and e.splits == "tensor"]
    if not c.on_gpu or not multi_node(c.machine) or not spanning:
        return
    first = spanning[0]
    if first.runs_here(plan.precision, c.kind, c.cc) is not None \
            or engines.engine_precision_problem(first.name, plan.precision):
        return
    cand = c.base.with_changes(engine=first.name, gpus=None, gpu_layers=None, device="auto",
                               transformers_version=None, attention=None,
                               kv_dtype=c.base.kv_dtype if c.base.kv_dtype in ("auto", "fp8") else "auto",
                               # a serving engine loads an MXFP4 checkpoint as stored: say so in the command
                               precision=c.spec.stored_format if plan.dequantize else plan.precision)
    more_nodes(c.s, cand, plan, f"{first.title}, {first.nodes_words}", 0.0)
    own = engines.get(plan.engine)
    if own in spanning and own is not first and own.runs_here(plan.precision, c.kind, c.cc) is None:
        more_nodes(c.s, cand.with_changes(engine=own.name), plan, f"{own.title}, {own.nodes_words}", 0.0)


def expert_parallel(c: Context) -> None:
    """MoE: the experts split over every GPU, attention data parallel (more room for the KV cache: the latent or KV
    heads are no longer replicated over tensor-parallel ranks); over one GPU of one machine nothing splits."""
    plan, spec = c.plan, c.spec
    own = engines.get(plan.engine)
    ep_engine = own if own.expert_parallel else engines.get(engines.EXPERT_PARALLEL_ENGINES[0])
    if not c.on_gpu or not spec.is_moe or plan.expert_parallel \
            or ep_engine.runs_here(plan.precision, c.kind, c.cc) is not None \
            or engines.engine_precision_problem(ep_engine.name, plan.precision):
        return
    ep = c.base.with_changes(engine=ep_engine.name, expert_parallel=True, gpus=None, gpu_layers=None, device="auto",
                             transformers_version=None, attention=None,
                             kv_dtype=c.base.kv_dtype if c.base.kv_dtype in ("auto", "fp8") else "auto")
    title = f"{ep_engine.title} expert parallel, attention data parallel"
    gpus_here = max(plan.nodes, 1) * max(c.visible, 1)
    out = c.s.consider(f"{title} over {gpus_here} GPUs", ep, R.COST_EXPERT_PARALLEL) if gpus_here > 1 else None
    if not runs(out) and multi_node(c.machine):
        more_nodes(c.s, ep, plan, title, R.COST_EXPERT_PARALLEL)


# ---- 6. GGUF builds -------------------------------------------------------------------------------------
def gguf_builds(c: Context) -> None:
    """GGUF builds: fully on the GPU(s), else over more nodes (RPC), else the routed experts or the layers that do
    not fit in RAM (partial offload), else the CPU alone; the lower GGUF types are tried only when the higher fail."""
    gguf = engines.get(engines.gguf_engine())
    for precision in c.ladder:
        step = c.step(precision)
        placed = _gguf_on_gpus(c, gguf, precision, step) if c.gpu_ok else False
        if not placed and (c.plan.device != "cpu" or c.plan.precision != precision or c.plan.problems):
            placed = runs(c.s.consider(f"Run on the CPU with {gguf.title} ({precision})",
                                       c.gguf_base.with_changes(precision=precision, device="cpu", gpus=None),
                                       step + (45 if c.visible else 5)))
        if placed and holds_gguf(c.spec.gguf_types, precision):
            break  # a build the model's GGUF repository does not hold goes on to one it holds (known_first)


def _gguf_on_gpus(c: Context, gguf: Any, precision: str, step: float) -> bool:
    spec, plan, machine = c.spec, c.plan, c.machine
    where = f"{c.visible} GPUs" if c.visible > 1 else "the GPU"
    full = c.gguf_on_gpus(precision)
    out = c.evaluate(full)
    # The decode speed it gives up, on the footing of the serving engines' (consider_fastest).
    slow = R.slowdown_cost(R.decode_rate(spec, machine, out.plan), R.gives_up(out.plan),
                           [*c.rated, (R.gives_up(out.plan), R.decode_rate(spec, machine, out.plan))]) \
        if c.speed_costs and out is not None and runs(out) else 0.0
    placed = runs(c.s.consider(f"Run a GGUF {precision} build fully on {where} with {gguf.title}", full,
                               step + R.COST_GGUF + slow + R.COST_PER_GPU * (c.visible - max(plan.gpus, 1))))
    if placed:
        return True
    if multi_node(machine):
        # the RPC backend: the layers over the GPUs of more nodes like this one
        more_nodes(c.s, full.with_changes(gpus=None), plan, f"{gguf.title} RPC ({precision}), layers split",
                   step + R.COST_GGUF)
    if spec.is_moe and "experts" in gguf.offloads:
        placed = _expert_offload(c, full, gguf, precision, step)
    # RAM need falls and GPU need rises with -ngl: take the most layers the GPUs hold.
    n = largest_fitting(lambda k: gpus_fit(c.evaluate(full.with_changes(gpu_layers=k))), 1, spec.num_layers)
    if n:
        share = 1 - n / spec.num_layers
        placed = runs(c.s.consider(
            f"Offload {spec.num_layers - n} of {spec.num_layers} layers to the CPU with {gguf.title} ({precision})",
            full.with_changes(gpu_layers=n), step + R.COST_OFFLOAD + R.COST_PER_RAM_SHARE * share)) or placed
    return placed


def ram_read_share(spec: ModelSpec, plan: Any) -> float:
    """Share of a decode step's weight bytes read from RAM (llama.cpp --n-cpu-moe): what the ranking
    charges, as the layer share it charges -ngl (whose RAM reads are that share of the layers)."""
    if not isinstance(plan, Plan):
        return 1.0
    return min(ram_weight_bytes_per_step(spec, plan, plan.batch)
               / max(active_weight_bytes(spec, plan.precision, plan.batch, plan.engine), 1), 1.0)


def _expert_offload(c: Context, full: Request, gguf: Any, precision: str, step: float) -> bool:
    """Every layer on the GPU but the routed experts of the first N layers (the fewest that let the GPUs hold the
    rest: llama-server --n-cpu-moe N, or --cpu-moe for all of them)."""
    layers = c.spec.num_layers
    n = fewest_nodes(lambda k: gpus_fit(c.evaluate(full.with_changes(cpu_moe=k))), 1, layers)
    if n is None:
        return False
    cand = full.with_changes(cpu_moe="all" if n >= layers else n)
    out = c.evaluate(cand)
    if out is None:
        return False
    moe = out.plan.cpu_moe if isinstance(out.plan, Plan) else 0
    what = "every layer's" if n >= layers else f"the first {n} layers'"
    title = (f"Keep {what} routed experts in RAM, the rest on the GPU, with {gguf.title} ({precision}, "
             f"{'--cpu-moe' if n >= layers else f'--n-cpu-moe {moe}'})")
    cost = step + R.COST_OFFLOAD + R.COST_PER_RAM_SHARE * ram_read_share(c.spec, out.plan)
    return runs(c.s.consider(title, cand, cost))


# ---- 7. weights streamed from RAM ------------------------------------------------------------------------
def streamed(c: Context) -> None:
    """The fewest whole GiB per GPU of weights kept in RAM that make it fit (vLLM --cpu-offload-gb); every forward
    pass moves them over PCIe, so it ranks after everything that runs from VRAM (COST_STREAMED + its slowdown)."""
    plan = c.plan
    if not c.on_gpu or plan.problems or "streamed" not in engines.get(plan.engine).offloads:
        return
    high = -(-plan_weight_bytes(c.evaluate, c.base) // 2**30)  # whole GiB of the weights on one GPU
    if high < 1:
        return
    gib = fewest_nodes(lambda g: runs(c.evaluate(c.base.with_changes(cpu_offload_gb=float(g)))), 1, high)
    if gib is None:
        return
    cand = c.base.with_changes(cpu_offload_gb=float(gib))
    out = c.evaluate(cand)
    if out is None or not isinstance(out.plan, Plan):
        return
    speed = estimate_speed(c.spec, out.plan, c.machine)
    slowdown = R.SLOWDOWN_CAP
    if speed.decode is not None:
        moved = gib * 2**30 / pcie_bytes_per_s(c.machine)
        slowdown = min(moved / max(1.0 / speed.decode.high - moved, 1e-9), R.SLOWDOWN_CAP)
    c.s.consider(f"Stream {gib} GiB of weights per GPU from RAM every forward pass "
                 f"({engines.get(plan.engine).title} --cpu-offload-gb {gib})",
                 cand, R.COST_STREAMED + R.COST_PER_SLOWDOWN * slowdown)


def plan_weight_bytes(evaluate: Evaluate, request: Request) -> int:
    """Weight bytes on one GPU of the request as asked (what --cpu-offload-gb can take away)."""
    out = evaluate(request)
    if out is None:
        return 0
    return max((sum(c.bytes for c in d.components if c.name == "weights") for d in out.estimate.devices
                if d.kind == "gpu"), default=0)


ROUTES = (
    Route("quantize", "quality, and the decode speed another engine gives up", quantize),
    Route("attention-and-release", "nothing: another attention kernel or a newer release", attention_and_release),
    Route("serve", "another engine to install and launch", serve),
    Route("kv-cache", "KV-cache precision", kv_cache),
    Route("shorter", "context length, or concurrent sequences", shorter),
    Route("more-gpus", "more of the machine's GPUs", more_gpus),
    Route("nodes", "more machines, and a cluster to run", nodes),
    Route("expert-parallel", "another layout of the same GPUs", expert_parallel),
    Route("gguf", "a GGUF build to download; part of the weights in RAM or the CPU, and their speed", gguf_builds),
    Route("streamed", "the decode speed PCIe allows", streamed),
)
