"""What fits instead: re-estimated alternatives, ranked by the quality and speed given up.

Each candidate changes the plan along one or two axes (weights precision, KV-cache precision,
context, concurrent sequences, partial offload, more GPUs, CPU only), is fully re-estimated and
judged against the same machine, and is kept only if it fits.  Cost (lower is better) ranks them:
quality first (precision ranks from formats.py), then speed (offload, CPU), then what the user
gives up of their request (context, batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fitcheck.estimate.commands import attention_typed
from fitcheck.estimate.formats import WEIGHT_FORMATS, weight_format
from fitcheck.estimate.request import Plan
from fitcheck.estimate.result import Assumption, Estimate
from fitcheck.estimate.search import largest_fitting
from fitcheck.estimate.verdict import FITS, TIGHT, Verdict
from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec

Evaluate = Callable[[Plan], tuple[Estimate, Verdict]]

MAX_ALTERNATIVES = 5
MIN_USEFUL_CONTEXT = 512
# Cost weights: a precision step of quality loss costs 10; offloading to CPU is slow (20 + share),
# CPU-only slower (45); giving up context or sequences costs in proportion to what is given up.
COST_PER_QUALITY_STEP = 10
COST_KV = {"fp8": 4, "q8_0": 4, "q4_0": 9}
COST_PER_GPU = 2  # using more of the machine's own GPUs costs little

_GPU_PRECISIONS = {
    "transformers": ("int8", "awq", "gptq-int4", "nf4"),
    "vllm": ("fp8", "gptq-int8", "awq", "gptq-int4"),
}
_VLLM_SERVES = frozenset({"bf16", "fp16", "fp8", "gptq-int8", "gptq-int4", "awq", "int4"})
_GGUF_PRECISIONS = ("q8_0", "q6_k", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k")


@dataclass(frozen=True)
class Alternative:
    title: str
    plan: Plan
    estimate: Estimate
    verdict: Verdict
    cost: float
    changes: tuple[tuple[str, str], ...]


def _quality(precision: str) -> int:
    return weight_format(precision).quality_loss


def _lower_precisions(plan: Plan) -> list[str]:
    """Formats of the plan's engine that store fewer bits per weight than its precision."""
    options = _GGUF_PRECISIONS if plan.engine == "llama.cpp" else _GPU_PRECISIONS[plan.engine]
    current_bits = weight_format(plan.precision).linear_bits
    out = []
    for p in options:
        fmt = WEIGHT_FORMATS[p]
        if fmt.min_cc and (plan.compute_capability is None or plan.compute_capability < fmt.min_cc):
            continue  # e.g. fp8 weights need compute capability 8.9 (Ada, Hopper)
        if fmt.linear_bits < current_bits:
            out.append(p)
    return out


def _usable_gpus(spec: ModelSpec, plan: Plan, machine: Machine) -> int:
    """GPUs a plan can spread over: all of them (layer split), or for vLLM tensor parallel the
    largest power of two that divides the attention heads."""
    n = len(machine.gpus)
    if plan.engine != "vllm":
        return max(n, plan.gpus)
    tp = 1
    while tp * 2 <= n and spec.num_attention_heads % (tp * 2) == 0:
        tp *= 2
    return max(tp, plan.gpus)


def _gpus_fit(verdict: Verdict) -> bool:
    return not verdict.reasons and all(d.status == FITS for d in verdict.devices if d.kind == "gpu")


def find_alternatives(spec: ModelSpec, plan: Plan, machine: Machine, evaluate: Evaluate) -> tuple[Alternative, ...]:
    """The best few re-estimated configurations that fit on `machine`."""
    found: list[Alternative] = []
    seen: set[Plan] = set()

    def consider(title: str, candidate: Plan, cost: float, changes: tuple[tuple[str, str], ...]) -> Verdict:
        key = candidate.with_changes(assumptions=())
        if key in seen:
            return Verdict("duplicate", (), 0)
        seen.add(key)
        est, verdict = evaluate(candidate)
        if verdict.status in (FITS, TIGHT):
            found.append(Alternative(title, candidate, est, verdict, cost + (3 if verdict.status == TIGHT else 0), changes))
        return verdict

    def max_context(candidate: Plan) -> int | None:
        def fits(ctx: int) -> bool:
            return evaluate(candidate.with_changes(context=ctx, prompt_tokens=min(candidate.prompt_tokens, ctx)))[1].status == FITS
        return largest_fitting(fits, MIN_USEFUL_CONTEXT, candidate.context - 1)

    def context_cost(ctx: int) -> float:
        return 10 + 40 * (1 - ctx / plan.context)

    all_gpus = _usable_gpus(spec, plan, machine)

    # 1. Lower-precision weights (alone, on all the machine's GPUs, then with the context that fits).
    for p in _lower_precisions(plan):
        step = (_quality(p) - _quality(plan.precision)) * COST_PER_QUALITY_STEP
        cand = plan.with_changes(precision=p)
        v = consider(f"Quantize the weights to {weight_format(p).description}", cand, step, (("precision", p),))
        if v.status not in (FITS, TIGHT) and all_gpus > plan.gpus:
            cand = cand.with_changes(gpus=all_gpus)
            v = consider(f"{weight_format(p).description} over {all_gpus} GPUs", cand, step + COST_PER_GPU * (all_gpus - plan.gpus),
                         (("precision", p), ("gpus", str(all_gpus))))
        if v.status not in (FITS, TIGHT):
            ctx = max_context(cand)
            if ctx:
                consider(f"{weight_format(p).description} with a {ctx:,}-token context",
                         cand.with_changes(context=ctx, prompt_tokens=min(plan.prompt_tokens, ctx)),
                         step + context_cost(ctx), (("precision", p), ("context", str(ctx))))

    # 1a. A transformers release that computes the prefill's logits for the last position only.
    if plan.engine == "transformers" and plan.logits == "all-fp32":
        upgraded = plan.with_changes(logits="last", transformers_version=None, legacy_cache=False,
                                     attention=plan.attention if attention_typed(plan) else "sdpa")
        consider("Upgrade transformers to 4.45 or later (prompt logits for the last position only)",
                 upgraded, 1, (("transformers_version", ">=4.45"),))
    # 1a'. SDPA instead of eager attention (no prompt × prompt score matrix).
    if plan.engine == "transformers" and plan.attention == "eager":
        consider("Use SDPA attention (attn_implementation=\"sdpa\": no prompt² score matrix)",
                 plan.with_changes(attention="sdpa", assumptions=_typed_attention(plan, "sdpa")), 1,
                 (("attention", "sdpa"),))

    # 1b. The same weights served by vLLM (paged KV cache, activations bounded by chunked prefill).
    if plan.engine == "transformers" and plan.device == "gpu" and plan.precision in _VLLM_SERVES \
            and machine.gpus[0].vendor in ("nvidia", "amd"):
        consider("Serve with vLLM (paged KV cache, chunked prefill)", plan.with_changes(engine="vllm"), 3,
                 (("engine", "vllm"),))

    # 2. Quantized KV cache.
    kv_options = {"vllm": ("fp8",), "llama.cpp": ("q8_0", "q4_0")}.get(plan.engine, ())
    for kv in kv_options:
        if kv != plan.kv_dtype:
            consider(f"Quantize the KV cache to {kv}", plan.with_changes(kv_dtype=kv), COST_KV[kv], (("kv_dtype", kv),))

    # 3. Shorter context, 4. fewer concurrent sequences.
    ctx = max_context(plan)
    if ctx:
        consider(f"Shorten the context to {ctx:,} tokens", plan.with_changes(context=ctx, prompt_tokens=min(plan.prompt_tokens, ctx)),
                 context_cost(ctx), (("context", str(ctx)),))
    if plan.batch > 1:
        def batch_fits(b: int) -> bool:
            return evaluate(plan.with_changes(batch=b))[1].status == FITS
        b = largest_fitting(batch_fits, 1, plan.batch - 1)
        if b:
            consider(f"Serve {b} concurrent sequence{'s' if b > 1 else ''} instead of {plan.batch}",
                     plan.with_changes(batch=b), 4 + 20 * (1 - b / plan.batch), (("batch", str(b)),))

    # 5. More GPUs (tensor parallel with vLLM, layer split otherwise).
    if plan.device == "gpu" and all_gpus > plan.gpus:
        consider(f"Spread over {all_gpus} GPUs" + (" (tensor parallel)" if plan.engine == "vllm" else ""),
                 plan.with_changes(gpus=all_gpus), COST_PER_GPU * (all_gpus - plan.gpus), (("gpus", str(all_gpus)),))

    # 6. llama.cpp GGUF builds: fully on the GPU(s), else the most layers the GPUs hold (partial
    #    offload), else the CPU alone; the lower GGUF types are tried only when the higher fail.
    kv = plan.kv_dtype if plan.kv_dtype in ("q8_0", "q4_0") else "fp16"
    start = plan.precision if weight_format(plan.precision).gguf else "q4_k_m"
    ggufs = [g for g in _GGUF_PRECISIONS if weight_format(g).linear_bits <= weight_format(start).linear_bits]
    gpu_ok = bool(machine.gpus) and plan.device != "cpu" and machine.gpus[0].vendor != "intel"
    for gguf in ggufs:
        gguf_step = max(_quality(gguf) - _quality(plan.precision), 0) * COST_PER_QUALITY_STEP
        base = plan.with_changes(precision=gguf, engine="llama.cpp", kv_dtype=kv, gpu_layers=None)
        placed = False
        if gpu_ok:
            n_gpus = max(len(machine.gpus), 1)
            where = f"{n_gpus} GPUs" if n_gpus > 1 else "the GPU"
            on_gpu = consider(f"Run a GGUF {gguf} build fully on {where} with llama.cpp",
                              base.with_changes(device="gpu", gpus=n_gpus), gguf_step + 5 + COST_PER_GPU * (n_gpus - plan.gpus),
                              (("engine", "llama.cpp"), ("precision", gguf)) + ((("gpus", str(n_gpus)),) if n_gpus > 1 else ()))
            placed = on_gpu.status in (FITS, TIGHT)
            if not placed:
                offload = base.with_changes(device="offload", gpus=n_gpus)
                # RAM need falls and GPU need rises with -ngl: take the most layers the GPUs hold.
                n = largest_fitting(lambda k, o=offload: _gpus_fit(evaluate(o.with_changes(gpu_layers=k))[1]), 1, spec.num_layers)
                if n:
                    share = 1 - n / spec.num_layers
                    v = consider(f"Offload {spec.num_layers - n} of {spec.num_layers} layers to the CPU with llama.cpp ({gguf})",
                                 offload.with_changes(gpu_layers=n), gguf_step + 15 + 30 * share,
                                 (("engine", "llama.cpp"), ("precision", gguf), ("gpu_layers", str(n))))
                    placed = v.status in (FITS, TIGHT)
        if not placed and (plan.device != "cpu" or plan.precision != gguf):
            v = consider(f"Run on the CPU with llama.cpp ({gguf})", base.with_changes(device="cpu", gpus=0),
                         gguf_step + (45 if machine.gpus else 5), (("device", "cpu"), ("engine", "llama.cpp"), ("precision", gguf)))
            placed = v.status in (FITS, TIGHT)
        if placed:
            break
    found.sort(key=lambda a: a.cost)
    return tuple(found[:MAX_ALTERNATIVES])


def _typed_attention(plan: Plan, attention: str) -> tuple:
    """The plan's assumptions with the attention recorded as typed (its command then says --attention)."""
    kept = tuple(a for a in plan.assumptions if a.name != "attention")
    return (*kept, Assumption("attention", attention, "from --attention", "--attention"))
