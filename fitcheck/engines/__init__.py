"""The engines, one module each, and the questions every stage asks of them.

    from fitcheck import engines
    engines.get("vllm").runs_here("awq", engines.CUDA, 8.9)     # None: it runs
    engines.estimate_inference(spec, plan)                      # the plan's engine's memory model

The registry lists the engines in preference order (transformers first where several run a format, llama.cpp
first for GGUF types and the CPU).  Every answer to "does X run on Y" comes from the engines' rows of the one
capability table (fitcheck.engines.capabilities, each engine's ``runs`` and ``precisions``): validation, plan
defaults, alternatives and the installed-stack check (fitcheck.engines.stack) ask the same rows.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from fitcheck.engines.base import POOLED, RESIDENT, Engine
from fitcheck.engines.capabilities import (
    ATTENTION_RUNS,
    CPU,
    CPU_BF16_FEATURES,
    CUDA,
    FLOATS,
    GGUF_TYPES,
    KIND_NAMES,
    METAL,
    OPTIMIZER_RUNS,
    ROCM,
    SHARDING_RUNS,
    TRAINING_BASE_RUNS,
    XPU,
    Runs,
    half_dtype,
    here_text,
    machine_kind,
)
from fitcheck.engines.llama_cpp import ENGINE as _LLAMA_CPP
from fitcheck.engines.mlx import ENGINE as _MLX
from fitcheck.engines.sglang import ENGINE as _SGLANG
from fitcheck.engines.transformers import ENGINE as _TRANSFORMERS
from fitcheck.engines.vllm import ENGINE as _VLLM
from fitcheck.estimate.formats import stored_only_problem, weight_format
from fitcheck.estimate.result import Estimate

if TYPE_CHECKING:
    from fitcheck.machine import Machine
    from fitcheck.model.spec import ModelSpec
    from fitcheck.plan import Plan

# In preference order: where several engines run a weights format, the first that runs it here is the default.
ENGINES: dict[str, Engine] = {e.name: e for e in (_TRANSFORMERS, _VLLM, _SGLANG, _LLAMA_CPP, _MLX)}
ENGINE_ORDER = tuple(ENGINES)
# Engines that serve across nodes (--nodes > 1) and that have an expert-parallel MoE layout.
MULTI_NODE_ENGINES = tuple(e.name for e in ENGINES.values() if e.multi_node)
EXPERT_PARALLEL_ENGINES = tuple(e.name for e in ENGINES.values() if e.expert_parallel)
# Servers with a KV pool (--batch: requests held at once); the first is the one `where` rents nodes for.
SERVING_ENGINES = tuple(e.name for e in ENGINES.values() if e.batch == POOLED)

__all__ = ["ATTENTION_RUNS", "CPU", "CPU_BF16_FEATURES", "CUDA", "ENGINES", "ENGINE_ORDER", "EXPERT_PARALLEL_ENGINES",
           "FLOATS", "GGUF_TYPES", "KIND_NAMES", "METAL", "MULTI_NODE_ENGINES", "OPTIMIZER_RUNS", "POOLED", "RESIDENT",
           "ROCM", "SERVING_ENGINES", "SHARDING_RUNS", "TRAINING_BASE_RUNS", "XPU", "Engine", "Runs", "default_engine",
           "default_kv", "default_precision", "engine_precision_problem", "engines_for", "estimate_inference", "get",
           "here_text", "kv_problem", "machine_kind", "offload_engine", "precisions_taking", "runnable_precisions",
           "runs_here", "usable_gpus"]


def get(name: str) -> Engine:
    """The engine called ``name`` (KeyError for a name that is none: the vocabulary checks names first)."""
    return ENGINES[name]


def estimate_inference(spec: ModelSpec, plan: Plan) -> Estimate:
    """Bytes per device for serving ``spec`` as ``plan`` says: the plan's engine's memory model."""
    m = ENGINES[plan.engine].memory(spec, plan)
    return Estimate(spec.name, "inference", tuple(m.devices), plan.assumptions, tuple(m.notes), tuple(m.facts),
                    m.pool)


# ---- questions the resolver, validation and alternatives ask -----------------------------------
def runs_here(engine: str, precision: str, kind: str, cc: float | None) -> str | None:
    """Why ``precision`` with ``engine`` cannot run on this device kind, or None when it runs."""
    return ENGINES[engine].runs_here(precision, kind, cc)


def engines_for(precision: str) -> list[str]:
    """Engines that load ``precision`` somewhere, in preference order (those that load GGUF files first for GGUF)."""
    order = sorted(ENGINES.values(), key=lambda e: not e.loads_gguf_files) if precision in GGUF_TYPES \
        else list(ENGINES.values())
    return [e.name for e in order if precision in e.precisions]


def engine_precision_problem(engine: str, precision: str,
                             stored_formats: Collection[str] | None = None) -> tuple[str, str] | None:
    """(message, hint) when ``engine`` never loads ``precision`` (on any machine), else None.

    The hint names what does load: the precisions ``engine`` takes for the model (:func:`precisions_taking`; the
    model stored in ``stored_formats``, None when it is not known yet) and the engines that load ``precision``."""
    name = weight_format(precision).name
    if name in ENGINES[engine].precisions:
        return None
    takes = precisions_taking(engine, name, stored_formats)
    with_it = f"use -p {_or(takes)} with {engine}" if takes else ""
    # a format only a checkpoint stored in it has (mxfp4, mxfp4_moe), and this model has not: no engine for it
    has_it = stored_formats is None or stored_only_problem(weight_format(name), stored_formats, "") is None
    gguf = [e for e in engines_for(name) if ENGINES[e].loads_gguf_files]
    if name in GGUF_TYPES and gguf:
        hint = ", or ".join(t for t in (f"drop --engine or add --engine {gguf[0]}" if has_it else "", with_it) if t)
        return f"precision {name} is a GGUF type: only --engine {gguf[0]} runs it", hint or "choose another --precision"
    what = "checkpoints" if ENGINES[engine].loads_gguf_files else "weights"
    others = [e for e in engines_for(name) if e != engine] if has_it else []
    elsewhere = " or ".join(f"--engine {e}" for e in others) + f" for {name}" if others else ""
    hint = ", or ".join(t for t in (with_it, elsewhere) if t) or "choose another --precision"
    return f"{engine} does not load {name} {what}", hint


def precisions_taking(engine: str, asked: str, stored_formats: Collection[str] | None = None,
                      n: int = 3) -> list[str]:
    """The ``n`` precisions ``engine`` loads that a model stored in ``stored_formats`` has or can get, closest to
    ``asked`` first: the checkpoint's own formats, then those converted from them (an MXFP4 checkpoint's GGUF
    build, mxfp4_moe), then by bits per weight from ``asked``'s, then by quality.  Formats only a checkpoint stored
    in them has (MXFP4) are left out unless the model has them; a model not known yet (``stored_formats`` None) is
    taken as stored in ``asked``."""
    have = {asked} if stored_formats is None else set(stored_formats)
    want = weight_format(asked)
    table = ENGINES[engine].precisions
    order = {p: i for i, p in enumerate(table)}

    def rank(p: str) -> tuple:
        fmt = weight_format(p)
        return (p not in have, not set(fmt.converted_from) & have, round(abs(fmt.linear_bits - want.linear_bits), 6),
                fmt.quality_loss, order[p])

    usable = [p for p in table if stored_only_problem(weight_format(p), have, "") is None]
    return sorted(usable, key=rank)[:n]


def _or(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def offload_engine(what: str) -> str:
    """The engine that keeps ``what`` (an Engine.offloads entry) in RAM."""
    return next(e.name for e in ENGINES.values() if what in e.offloads)


def kv_problem(engine: str, kv: str) -> tuple[str, str] | None:
    """(message, hint) when ``engine`` has no KV-cache type ``kv`` (on any machine), else None."""
    eng = ENGINES[engine]
    if kv == "auto" or kv in eng.kv_dtypes:
        return None
    having = [e.name for e in ENGINES.values() if kv in e.kv_dtypes]
    if having and all(ENGINES[e].loads_gguf_files for e in having):
        return (f"KV-cache type {kv} is a {having[0]} type",
                f"use --engine {having[0]}, or --kv-dtype fp8 with vLLM or SGLang")
    if kv == "fp8" and eng.loads_gguf_files:
        return f"{engine} has no fp8 KV cache", "use --kv-dtype q8_0"
    if having:
        return (f"{engine} has no {kv} KV cache",
                "use " + " or ".join(f"--engine {e}" for e in having) + " (--kv-cache-dtype fp8), or drop --kv-dtype")
    return f"{engine} has no {kv} KV cache", "choose one of: " + ", ".join(eng.kv_dtypes)


def gguf_engine() -> str:
    """The engine that loads GGUF files (a .gguf file, an Ollama blob)."""
    return next(e.name for e in ENGINES.values() if e.loads_gguf_files)


def implied_engine(kv: str) -> str | None:
    """The engine a KV-cache type implies when the default engine has no such cache: the first that has it."""
    if kv == "auto" or kv in ENGINES[ENGINE_ORDER[0]].kv_dtypes:
        return None
    return next((e.name for e in ENGINES.values() if kv in e.kv_dtypes), None)


def default_engine(precision: str, kind: str, cc: float | None, device: str, nodes: int = 1) -> str:
    """The engine a practitioner takes for ``precision`` here: the GGUF engine for GGUF types, the CPU and
    partial offload; the first of the preference order that runs it otherwise.  When none runs it here, the first
    that loads it at all (the verdict then says why it cannot run).  Over several nodes, only the engines that serve
    across nodes (issue 35 item 7: transformers' device_map stays on one machine)."""
    candidates = engines_for(precision)
    if nodes > 1:
        candidates = [e for e in candidates if ENGINES[e].multi_node] or candidates
    if device in ("cpu", "offload"):
        gguf = [e for e in candidates if ENGINES[e].loads_gguf_files]
        if gguf:
            return gguf[0]
    for engine in candidates:
        if runs_here(engine, precision, kind, cc) is None and ENGINES[engine].default_here(kind):
            return engine
    for engine in candidates:
        if runs_here(engine, precision, kind, cc) is None:
            return engine
    return candidates[0]


def runnable_precisions(engine: str, kind: str, cc: float | None) -> list[str]:
    return [p for p in ENGINES[engine].precisions if runs_here(engine, p, kind, cc) is None]


def default_kv(engine: str, precision: str, kind: str, cc: float | None) -> str:
    return ENGINES[engine].default_kv(precision, kind, cc)


def checkpoint_known(spec: ModelSpec, plan: Any) -> bool:
    """Whether ``plan``'s engine command loads a checkpoint that exists (Engine.checkpoint_known); a training plan
    loads the model's own."""
    return bool(getattr(plan, "training", False)) or ENGINES[plan.engine].checkpoint_known(spec, plan)


def usable_gpus(engine: str, visible: int, spec: ModelSpec, nodes: int = 1, expert_parallel: bool = False) -> int:
    """GPUs of one node ``engine`` spreads over by default (Engine.gpus_for)."""
    return ENGINES[engine].gpus_for(visible, spec, nodes, expert_parallel)


def default_precision(machine: Machine, device: str, engine: str | None = None) -> tuple[str, str]:
    """(precision, why): the best format this machine runs with ``engine`` (or the engine that will
    be chosen): bf16 where supported, fp16 on older GPUs, q4_k_m for llama.cpp and CPU-only machines."""
    kind, cc = machine_kind(machine, device)
    if engine is None and (kind == CPU or device == "offload"):
        engine = default_engine(GGUF_TYPES[0], kind, cc, "cpu" if kind == CPU else device)
    own = ENGINES[engine].default_precision(kind, cc, machine.cpu.features) if engine else None
    if own is not None:
        return own
    if kind == CPU:  # a float on the CPU (transformers)
        if machine.cpu.features & CPU_BF16_FEATURES:
            return "bf16", "the CPU has bf16 instructions"
        return "fp32", "the CPU has no bf16 instructions"
    if kind == METAL:
        return "bf16", "Apple GPUs support bf16"
    if half_dtype(kind, cc) == "fp16":
        return "fp16", f"compute capability {cc:g} has no bf16"
    if kind == CUDA and cc is None:
        return "bf16", "bf16 assumed (compute capability unknown)"
    return "bf16", "the GPU supports bf16"
