"""An inference Request resolved against a machine: every choice concrete, every default recorded.

The steps, in order (each a function of :class:`InferenceStep` below):
1. device: the GPU when there is one; --gpu-layers and --cpu-moe mean partial offload;
2. precision: as typed, else the checkpoint's stored format where it runs here, else the machine's best;
3. engine: as typed, else the one the options imply (a KV-cache type, an offload, a GGUF file), else the
   capability table's default for that precision here;
4. GPUs: all of the machine's as the engine spreads over them, unless --gpus;
5. KV cache: the engine's default type, unless --kv-dtype;
6. the engine's own settings (Engine.settings: transformers' logits, attention and sampling by release);
7. nodes and expert parallel: engines that span nodes, engines with an expert-parallel layout;
8. the engine's reservation (Engine.reservation: vLLM's gpu_memory_utilization, SGLang's mem_fraction_static).
Each default is an Assumption naming the flag that changes it.  A request this machine cannot run (kernels,
compute capability, no GPU, fewer GPUs) still resolves, its plan carrying ``problems`` (the verdict: cannot run
here); only a malformed request raises (FitcheckError, exit 2).  Nothing here changes what the user set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fitcheck import engines
from fitcheck.engines import Engine
from fitcheck.errors import FitcheckError
from fitcheck.estimate.context_limit import beyond_maximum, yarn_for
from fitcheck.estimate.formats import derived_note, stored_only_problem, weight_format, weight_format_or_none
from fitcheck.estimate.result import Assumption
from fitcheck.machine import Machine, known
from fitcheck.model.spec import ModelSpec
from fitcheck.plan.plan import DEFAULT_CONTEXT, Plan
from fitcheck.request import Request


@dataclass
class InferenceStep:
    """What resolution has decided so far: the engine hooks read it and add their fields, notes and problems."""

    req: Request
    spec: ModelSpec
    machine: Machine
    notes: list[Assumption] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)   # the Plan's engine-specific fields
    device: str = "gpu"
    kind: str = engines.CPU
    cc: float | None = None
    cpu_moe: int = 0
    hint: str | None = None
    implied: str | None = None
    precision: str = ""
    engine: Engine | None = None
    gpus: int = 0

    def note(self, name: str, value: str, why: str, option: str) -> None:
        self.notes.append(Assumption(name, value, why, option))

    def problem(self, text: str) -> None:
        """A reason this machine cannot run the plan (the first one stands: later ones follow from it)."""
        if not self.problems:
            self.problems.append(text)


def resolve_inference(req: Request, spec: ModelSpec, machine: Machine) -> Plan:
    """Fill every default of an inference ``req`` for ``machine`` and record how each was chosen."""
    validate_request(req, spec)
    s = InferenceStep(req, spec, machine)
    _device(s)
    _precision(s)
    _engine(s)
    _gpus(s)
    _kv(s)
    assert s.engine is not None
    s.note("context", str(req.context), "from --context" if req.context != DEFAULT_CONTEXT else
           "default (not the model's maximum)", "--context")
    s.note("batch", str(req.batch), s.engine.batch_words, "--batch")
    s.engine.settings(s)
    _nodes(s)
    s.engine.reservation(s)
    visible = machine.gpus if s.device != "cpu" else ()
    g = visible[0] if visible else None
    plan = Plan(
        precision=s.precision, engine=s.engine.name, device=s.device, gpus=s.gpus, context=req.context,
        batch=req.batch, prompt_tokens=req.prompt_tokens or req.context, kv_dtype=s.fields.pop("kv_dtype"),
        gpu_layers=req.gpu_layers, gpu_memory_utilization=req.gpu_memory_utilization,
        gpu_total_bytes=g.memory_total_bytes if g is not None and known(g.memory_total_bytes) else None,
        compute_capability=s.cc if s.device != "cpu" else None, unified_memory=bool(g and g.unified_memory),
        assumptions=tuple(s.notes), problems=tuple(s.problems), nodes=req.nodes, cpu_moe=s.cpu_moe,
        cpu_moe_all=bool(s.cpu_moe) and s.cpu_moe >= spec.num_layers, cpu_offload_gb=req.cpu_offload_gb,
        expert_parallel=req.expert_parallel, stored_format=_is_stored_format(spec, s.precision),
        beyond_max_context=beyond_maximum(spec, req.context), yarn=yarn_for(spec, req.context), **s.fields)
    return plan.with_changes(layout=s.engine.layout(plan))


def validate_request(req: Request, spec: ModelSpec | None = None) -> None:
    """Malformed-request checks (FitcheckError, exit 2): the request's own, then the pairs no engine runs on any
    machine (a GGUF type in vLLM, a q8_0 KV cache in transformers, --gpu-layers with vLLM).  With the model's
    ``spec``, a precision the engine refuses is answered with the precisions it takes for that model."""
    req.validate()
    if req.training:
        return
    for option, what, asked in (("--gpu-layers", "layers", req.gpu_layers is not None),
                                ("--cpu-moe", "experts", req.cpu_moe is not None),
                                ("--cpu-offload-gb", "streamed", bool(req.cpu_offload_gb))):
        owner = engines.offload_engine(what)
        if asked and req.engine is not None and what not in engines.get(req.engine).offloads:
            words = {"layers": "(partial offload)", "experts": "(experts in RAM)",
                     "streamed": "(weights streamed from RAM)"}[what]
            raise FitcheckError(f"{option} {words} is a {owner} option", f"add --engine {owner}")
    if req.expert_parallel and req.engine is not None and not engines.get(req.engine).expert_parallel:
        raise FitcheckError(f"--expert-parallel is a {_titles(engines.EXPERT_PARALLEL_ENGINES)} layout, not "
                            f"{req.engine}'s", _add_engine(engines.EXPERT_PARALLEL_ENGINES))
    if req.engine is not None and req.precision is not None:
        problem = engines.engine_precision_problem(req.engine, req.precision,
                                                   spec.stored_formats() if spec is not None else None)
        if problem:
            raise FitcheckError(*problem)
    if req.engine is not None and req.kv_dtype != "auto":
        problem = engines.kv_problem(req.engine, req.kv_dtype)
        if problem:
            raise FitcheckError(*problem)


def _titles(names: tuple[str, ...]) -> str:
    titles = [engines.get(n).title for n in names]
    return " and ".join(titles) if len(titles) < 3 else ", ".join(titles[:-1]) + " and " + titles[-1]


def _add_engine(names: tuple[str, ...]) -> str:
    return "add " + " or ".join(f"--engine {n}" for n in names)


# ---- 1. device ----------------------------------------------------------------------------------
def gpu_problems(machine: Machine, asked: str, gpus: int) -> list[str]:
    visible = len(machine.gpus)
    if not visible:
        status = f" ({machine.gpu_status})" if machine.gpu_status else ""
        return [f"{asked} needs a GPU, but {machine.name} has none{status}"]
    if gpus > visible:
        return [f"--gpus {gpus}, but {machine.name} has {visible} GPU{'s' if visible > 1 else ''}"]
    return []


def _device(s: InferenceStep) -> None:
    req, has_gpu = s.req, bool(s.machine.gpus)
    s.cpu_moe = _cpu_moe_layers(req, s.spec)
    if req.device == "cpu":
        s.device = "cpu"
    elif (req.device == "gpu" or req.gpus or req.gpu_layers is not None or req.cpu_moe is not None
          or req.cpu_offload_gb or has_gpu):
        s.device = "gpu"
    else:
        s.device = "cpu"
    if s.device == "gpu" and not has_gpu:
        asked = ("--device gpu" if req.device == "gpu" else f"--gpus {req.gpus}" if req.gpus
                 else "--gpu-layers" if req.gpu_layers is not None else "--cpu-moe" if req.cpu_moe is not None
                 else "--cpu-offload-gb")
        s.problems += gpu_problems(s.machine, asked, req.gpus or 1)
    if req.gpu_layers is not None or s.cpu_moe:
        s.device = "offload"
    s.note("device", s.device, "from --device" if req.device != "auto" else
           ("a GPU is present" if has_gpu else "no GPU on this machine"), "--device")
    s.kind, s.cc = engines.machine_kind(s.machine, s.device)


def _cpu_moe_layers(req: Request, spec: ModelSpec) -> int:
    """Layers whose routed experts --cpu-moe keeps in RAM: llama.cpp's --n-cpu-moe N overrides the
    tensors ``blk.{i}.ffn_(up|down|gate)_exps`` for i < N (dense layers among them have none), and
    --cpu-moe all of them.  https://github.com/ggml-org/llama.cpp/blob/145b6280d6aa1890e22457143dad0badb3fd6820/
    common/arg.cpp (--cpu-moe, --n-cpu-moe; llm_ffn_exps_block_regex)."""
    if req.cpu_moe is None:
        return 0
    if not spec.is_moe:
        raise FitcheckError(f"--cpu-moe keeps a mixture of experts' routed experts in RAM, and {spec.name} is a "
                            "dense model", "use --gpu-layers for partial offload")
    return spec.num_layers if req.cpu_moe == "all" else min(int(req.cpu_moe), spec.num_layers)


# ---- 2. precision -------------------------------------------------------------------------------
def _precision(s: InferenceStep) -> None:
    req, spec = s.req, s.spec
    # The engine asked for, or implied by the options: a KV-cache type only some engines have, an offload, a file.
    s.implied = engines.implied_engine(req.kv_dtype)
    s.hint = req.engine or s.implied or (
        engines.offload_engine("experts" if s.cpu_moe else "layers") if s.device == "offload"
        else engines.offload_engine("streamed") if req.cpu_offload_gb
        else engines.gguf_engine() if spec.stored_file_type else None)
    hint = engines.get(s.hint) if s.hint else None
    if req.precision:
        s.precision = typed_precision(spec, req.precision)
        s.note("precision", s.precision, typed_precision_note(spec, s.precision, hint), "--precision")
        return
    stored, why_stored = _stored_precision(spec, s.hint, s.kind, s.cc, req.transformers_version)
    if stored:
        s.precision = stored
        s.note("precision", stored, why_stored, "--precision")
        return
    s.precision, why = engines.default_precision(s.machine, s.device, s.hint)
    owner = s.hint or (engines.gguf_engine() if weight_format(s.precision).gguf else None)
    held = engines.get(owner).held_precision(spec, s.precision) if owner else None
    if held is not None:
        s.precision, why = held
    derived = derived_note(weight_format(s.precision), spec.stored_format, hint)
    s.note("precision", s.precision, "; ".join(t for t in (derived, why_stored, why) if t), "--precision")


def _stored_precision(spec: ModelSpec, engine: str | None, kind: str, cc: float | None,
                      transformers_version: str | None = None) -> tuple[str | None, str]:
    """The checkpoint's stored format when it runs here (with ``engine`` or its default), else
    (None, why not)."""
    stored = weight_format_or_none(spec.stored_format) if spec.stored_format else None
    if stored is None:
        return None, ""
    name = stored.name
    what = f"the checkpoint's stored format ({name})"
    if spec.stored_file_type:
        what = f"this file's own type ({spec.stored_file_type}" + (
            f": its exact bytes, under the nearest type fitcheck models, {name})"
            if spec.stored_file_type.lower() not in (name, {"fp16": "f16", "fp32": "f32"}.get(name)) else ")")
    choices = [engine] if engine else engines.engines_for(name)
    if engine and engines.engine_precision_problem(engine, name):
        return None, f"the checkpoint's {name} does not load in {engine}"
    # an engine that loads the stored format only where its kernels run (transformers' MXFP4)
    first = engines.get(choices[0]) if choices else None
    kept = first.keeps_stored(name, kind, cc, transformers_version) if first is not None else None
    if kept is not None:
        return (name, what) if kept[0] else (None, kept[1])
    for e in choices:
        if engines.runs_here(e, name, kind, cc) is None:
            return name, what
    why = engines.runs_here(choices[0], name, kind, cc) if choices else f"no engine loads {name}"
    return None, f"the checkpoint's {name} does not run here ({why})"


def typed_precision(spec: ModelSpec, typed: str) -> str:
    fmt = weight_format(typed)
    problem = stored_only_problem(fmt, spec.stored_formats(), spec.name)
    if problem:
        raise FitcheckError(*problem)
    return fmt.name


def typed_precision_note(spec: ModelSpec, precision: str, engine: Engine | None = None) -> str:
    """'from --precision', and how those weights relate to what the checkpoint or file stores."""
    fmt = weight_format(precision)
    if spec.stored_file_type:
        own = weight_format_or_none(spec.stored_format) if spec.stored_format else None
        if own is None or own.name != fmt.name:
            return (f"from --precision; this file is {spec.stored_file_type}: -p {precision} means a different "
                    f"file (a {precision} GGUF of the model)")
        return "from --precision (this file's own type)"
    note = derived_note(fmt, spec.stored_format, engine)
    return f"from --precision; {note}" if note else "from --precision"


def _is_stored_format(spec: ModelSpec, precision: str) -> bool:
    stored = weight_format_or_none(spec.stored_format) if spec.stored_format else None
    return stored is not None and stored.name == precision


# ---- 3. engine ----------------------------------------------------------------------------------
def _engine(s: InferenceStep) -> None:
    req = s.req
    if req.engine:
        name, why = req.engine, "from --engine"
    elif s.hint and not engines.engine_precision_problem(s.hint, s.precision):
        name = s.hint
        title = engines.get(name).title
        why = (f"--kv-dtype {req.kv_dtype} is a {name} type" if s.implied
               else f"--cpu-offload-gb is {title}'s" if "streamed" in engines.get(name).offloads and req.cpu_offload_gb
               else f"partial offload (--gpu-layers, --cpu-moe) is {title}'s" if s.device == "offload"
               else f"a GGUF file is {title}'s")
    else:
        name = engines.default_engine(s.precision, s.kind, s.cc, s.device, req.nodes)
        why = engines.get(name).default_why(s.precision)
        if req.nodes > 1 and engines.default_engine(s.precision, s.kind, s.cc, s.device) != name:
            why += f"; over --nodes {req.nodes}, an engine that serves across nodes"
    s.note("engine", name, why, "--engine")
    problem = engines.engine_precision_problem(name, s.precision, s.spec.stored_formats())
    if problem:
        raise FitcheckError(*problem)
    s.engine = engine = engines.get(name)
    what = "experts" if s.cpu_moe else "layers"
    if s.device == "offload" and what not in engine.offloads:
        flag = "--cpu-moe (experts in RAM)" if s.cpu_moe else "--gpu-layers (partial offload)"
        raise FitcheckError(f"{flag} is a {engines.offload_engine(what)} option",
                            f"add --engine {engines.offload_engine(what)}")
    if req.cpu_offload_gb and "streamed" not in engine.offloads:
        raise FitcheckError(f"--cpu-offload-gb (weights streamed from RAM) is a {engines.offload_engine('streamed')} "
                            "option", f"add --engine {engines.offload_engine('streamed')}")
    if s.cpu_moe:
        s.note("cpu_moe", str(s.cpu_moe), f"from --cpu-moe: the routed experts of the first {s.cpu_moe} of "
               f"{s.spec.num_layers} layers in RAM (llama-server --n-cpu-moe)", "--cpu-moe")
    if req.cpu_offload_gb:
        s.note("cpu_offload_gb", f"{req.cpu_offload_gb:g}", "from --cpu-offload-gb: GiB of weights per GPU in RAM, "
               "streamed over PCIe every forward pass", "--cpu-offload-gb")
    why_not = engine.runs_model_here(s.spec, s.precision, s.kind, s.cc)
    if why_not:
        s.problem(why_not + engines.here_text(s.kind, s.cc, why_not))


# ---- 4. GPUs, 5. KV cache -----------------------------------------------------------------------
def _gpus(s: InferenceStep) -> None:
    req, visible = s.req, len(s.machine.gpus)
    assert s.engine is not None
    if s.device == "cpu":
        s.gpus = 0
    elif req.gpus:
        s.gpus = req.gpus
        if visible and req.gpus > visible and not s.problems:
            s.problems += gpu_problems(s.machine, f"--gpus {req.gpus}", req.gpus)
        s.note("gpus", str(s.gpus), "from --gpus", "--gpus")
    else:
        s.gpus = max(s.engine.gpus_for(visible, s.spec, req.nodes, req.expert_parallel), 1)
        why = "one GPU" if s.gpus == 1 else (
            f"all {s.gpus} GPUs of this machine" if s.gpus == visible else
            f"{s.gpus} of {visible} GPUs: tensor parallelism needs a power of two dividing the attention heads")
        s.note("gpus", str(s.gpus), why, "--gpus")


def _kv(s: InferenceStep) -> None:
    assert s.engine is not None
    if s.req.kv_dtype == "auto":
        kv = s.engine.default_kv(s.precision, s.kind, s.cc)
        s.note("kv_dtype", kv, "engine default", "--kv-dtype")
    else:
        kv = s.req.kv_dtype
        s.note("kv_dtype", kv, "from --kv-dtype", "--kv-dtype")
    problem = engines.kv_problem(s.engine.name, kv)
    if problem:
        raise FitcheckError(*problem)
    s.fields["kv_dtype"] = kv


# ---- 7. nodes and expert parallel ----------------------------------------------------------------
def _nodes(s: InferenceStep) -> None:
    req = s.req
    assert s.engine is not None
    if req.nodes > 1:
        s.note("nodes", str(req.nodes), "from --nodes", "--nodes")
        if s.device == "cpu":
            s.problem(f"--nodes {req.nodes}: serving across nodes is for GPUs, and {s.machine.name} has none")
        if not s.engine.multi_node:
            spans = [engines.get(n).multi_node_words for n in engines.MULTI_NODE_ENGINES]
            s.problem(f"--nodes {req.nodes}: {s.engine.name} serves from one machine; serving across nodes is "
                      + ", ".join(spans[:-1]) + " or " + spans[-1])
    if req.expert_parallel:
        if not s.engine.expert_parallel:
            raise FitcheckError(f"--expert-parallel is a {_titles(engines.EXPERT_PARALLEL_ENGINES)} layout, not "
                                f"{s.engine.name}'s", _add_engine(engines.EXPERT_PARALLEL_ENGINES))
        if not s.spec.is_moe:
            raise FitcheckError(f"--expert-parallel splits a mixture-of-experts model's experts; {s.spec.name} is "
                                "dense", "drop --expert-parallel")
        s.note("expert_parallel", "on", "from --expert-parallel: experts over "
               f"{s.gpus * req.nodes} GPUs, attention data parallel", "--expert-parallel")
