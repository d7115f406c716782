"""A Request resolved against a machine: every choice concrete, every default recorded.

``resolve(request, spec, machine)`` returns a :class:`Plan` (inference) or :class:`TrainingPlan`
(full, lora, qlora).  Defaults come from the capability table (fitcheck.engines): the best
precision and engine this machine runs for this checkpoint, never a pair the table refuses.  Each
default is an `Assumption` naming the flag that changes it.

A request the machine cannot run (kernels missing, compute capability too low, no GPU, fewer GPUs
than asked) still resolves: the plan carries ``problems``, and the verdict is *cannot run here*
with the alternatives that do run.  Only a malformed request raises (FitcheckError, exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass

from fitcheck import engines
from fitcheck.bounded import short_number
from fitcheck.errors import FitcheckError
from fitcheck.estimate.formats import derived_note, stored_only_problem, weight_format, weight_format_or_none
from fitcheck.estimate.generate_step import AUTO_SAMPLING, DEFAULT_SAMPLING, sampling_for
from fitcheck.estimate.lora import parse_targets
from fitcheck.estimate.result import Assumption
from fitcheck.frozen import replaced
from fitcheck.machine import Machine, known
from fitcheck.model.spec import ModelSpec
from fitcheck.options import DEFAULTS
from fitcheck.request import Request

DEFAULT_CONTEXT = DEFAULTS["context"]
DEFAULT_SEQ_LEN = DEFAULTS["seq_len"]
DEFAULT_GPU_MEMORY_UTILIZATION = DEFAULTS["gpu_memory_utilization"]
DEFAULT_LORA_RANK = DEFAULTS["lora_rank"]
DEFAULT_LORA_TARGETS = DEFAULTS["lora_targets"]


@dataclass(frozen=True)
class Plan:
    """A fully resolved inference configuration: every field concrete."""

    precision: str
    engine: str
    device: str                 # 'gpu', 'cpu' or 'offload' (llama.cpp split between GPU and CPU)
    gpus: int                   # GPUs used (0 for CPU)
    context: int
    batch: int
    prompt_tokens: int
    kv_dtype: str               # concrete: fp16, bf16, fp32, fp8, q8_0, q4_0
    gpu_layers: int | None      # llama.cpp layers on the GPU (None: all)
    gpu_memory_utilization: float
    gpu_total_bytes: int | None  # vLLM reserves a fraction of this
    compute_capability: float | None
    unified_memory: bool = False
    assumptions: tuple[Assumption, ...] = ()
    decodes: bool = True        # tokens are generated after the prompt (False: a prefill-only pass)
    # transformers' prefill logits: 'last' position only (>= 4.45, logits_to_keep=1, what generate()
    # asks for), 'all' positions in the compute dtype (logits_to_keep=0), or 'all-fp32': every
    # position upcast in the model's forward (transformers < 4.45: `logits = logits.float()`).
    logits: str = "last"
    transformers_version: str | None = None  # as typed (--transformers-version); None: a current one
    # transformers' attention: 'sdpa'/'flash' never materialise the prompt × prompt scores; 'eager'
    # holds them in the compute dtype plus an fp32 softmax, per layer (see inference._eager_scores).
    attention: str = "sdpa"
    # generate() with the legacy tuple cache: the previous step's cache is still referenced while
    # the new one is concatenated, so two caches are alive at the last decode step.
    legacy_cache: bool = False
    # how generate() picks each token (fitcheck.estimate.generate_step.SAMPLINGS, --sampling, or a
    # 'sample:...' one a generation_config.json asks for; resolve_inference: sampling_mode): its
    # vocabulary-sized tensors per step.  Default 'top-p' (do_sample with temperature, top-k and top-p), the
    # larger of the common cases.
    sampling: str = DEFAULT_SAMPLING
    # generate(min_new_tokens=N): MinLengthLogitsProcessor and MinNewTokensLengthLogitsProcessor run each step
    # (the measurement harness forces its token counts so); no option sets it (the API may).
    min_new_tokens: bool = False
    problems: tuple[str, ...] = ()           # why this machine cannot run it (empty: it can)
    mode: str = "inference"
    nodes: int = 1              # machines; vLLM: pipeline-parallel stages, one per node (gpus is per node)
    # llama.cpp --n-cpu-moe: the first cpu_moe layers keep their routed experts in RAM (device 'offload',
    # every layer's attention, norms, router and shared experts on the GPU); 0: none.
    cpu_moe: int = 0
    cpu_moe_all: bool = False    # --cpu-moe all: every layer's experts (llama-server --cpu-moe)
    cpu_offload_gb: float = 0.0  # vLLM --cpu-offload-gb: GiB of weights per GPU in RAM, streamed every forward
    expert_parallel: bool = False  # MoE: routed experts over all GPUs, attention data parallel (vLLM, SGLang)
    mem_fraction_static: float | None = None  # SGLang: weights + KV pool, a fraction of total GPU memory
    stored_format: bool = False  # the precision is the checkpoint's own (an FP8 checkpoint needs no --quantization)

    @property
    def world(self) -> int:
        """GPUs over all nodes."""
        return max(self.gpus, 1) * max(self.nodes, 1)

    @property
    def layout(self) -> str:
        """How the plan spreads over GPUs and nodes, in words ('tensor parallel 16 over 2 nodes')."""
        if self.device == "cpu":
            return ""
        if self.expert_parallel:
            return f"expert parallel {self.world}, attention data parallel {self.world}"
        if self.engine == "vllm" and self.nodes > 1:
            return f"tensor parallel {self.gpus} × pipeline parallel {self.nodes}"
        if self.engine == "sglang" and self.world > 1:
            return f"tensor parallel {self.world}" + (f" over {self.nodes} nodes" if self.nodes > 1 else "")
        if self.engine == "llama.cpp" and self.nodes > 1:
            return f"llama.cpp RPC: layers split over {self.world} GPUs of {self.nodes} nodes"
        return ""
    dequantize: str = ""        # the stored format transformers is told to dequantize at load ('mxfp4'), else ''

    def with_changes(self, **changes) -> Plan:
        return replaced(self, changes)

    @property
    def training(self) -> bool:
        return False

    @property
    def offload_flag(self) -> str:
        """How a partial-offload plan splits, as llama-server spells it ('' when it does not)."""
        if self.cpu_moe:
            return "--cpu-moe" if self.cpu_moe_all else f"--n-cpu-moe {self.cpu_moe}"
        return f"-ngl {self.gpu_layers}" if self.device == "offload" else ""


@dataclass(frozen=True)
class TrainingPlan:
    """A fully resolved training configuration."""

    mode: str
    precision: str               # base weights format
    compute_dtype: str           # bf16 | fp16 | fp32: activations and 16-bit copies
    seq_len: int
    batch: int
    grad_accum: int
    optimizer: str
    master_weights: str          # fp32 | none
    grad_checkpointing: bool
    attention: str
    lora_rank: int
    lora_targets: str
    lora_dropout: float
    lora_train_embeddings: bool
    gpus: int
    zero: int | None
    fsdp: str | None
    offload: str
    ds_bucket_elements: int | None
    compute_capability: float | None = None
    assumptions: tuple[Assumption, ...] = ()
    device: str = "gpu"          # gpu | cpu: where the step runs (cpu: one process, RAM is the memory)
    problems: tuple[str, ...] = ()
    nodes: int = 1               # machines; gpus is per node
    dequantize: str = ""         # the stored format loaded dequantized (Mxfp4Config(dequantize=True)), else ''
    transformers_version: str | None = None  # as typed (--transformers-version); None: a current one

    @property
    def world(self) -> int:
        """Training processes, one per GPU over all nodes."""
        return self.gpus * self.nodes

    def with_changes(self, **changes) -> TrainingPlan:
        return replaced(self, changes)

    @property
    def training(self) -> bool:
        return True

    @property
    def framework(self) -> str:
        """deepspeed | fsdp | ddp | single (one process, plain PyTorch/Trainer)."""
        if self.zero is not None:
            return "deepspeed"
        if self.fsdp is not None:
            return "fsdp"
        return "ddp" if self.world > 1 else "single"

    @property
    def effective_batch(self) -> int:
        return self.batch * self.grad_accum * self.world

    # The names an inference Plan has, so renderers read any plan alike.
    @property
    def context(self) -> int:
        return self.seq_len

    @property
    def prompt_tokens(self) -> int:
        return self.seq_len

    @property
    def kv_dtype(self) -> str:
        return "none"             # no KV cache in training

    @property
    def engine(self) -> str:
        return {"deepspeed": "deepspeed", "fsdp": "fsdp"}.get(self.framework, "transformers")

    @property
    def gpu_layers(self) -> None:
        return None

    @property
    def gpu_memory_utilization(self) -> None:
        return None

    @property
    def cpu_moe(self) -> int:
        return 0

    @property
    def cpu_moe_all(self) -> bool:
        return False

    @property
    def offload_flag(self) -> str:
        return ""

    @property
    def cpu_offload_gb(self) -> float:
        return 0.0


AnyPlan = Plan | TrainingPlan


def resolve(request: Request, spec: ModelSpec, machine: Machine) -> AnyPlan:
    """The plan for ``request`` on ``machine`` (either mode)."""
    return resolve_training(request, spec, machine) if request.training else resolve_inference(request, spec, machine)


# ---- transformers' prefill logits ------------------------------------------------------------
# transformers 4.45 added `logits_to_keep` (then `num_logits_to_keep`) to generate(): the prefill
# computes logits for the last position only.  Before it, Llama-style models computed them for
# every prompt position and upcast them (`logits = logits.float()` in *ForCausalLM.forward).
LAST_LOGITS_SINCE = (4, 45)
# Remote-code architectures whose forward has no logits_to_keep and keeps the compute dtype
# (Qwen(1) modeling_qwen.py: `lm_logits = self.lm_head(hidden_states)`).
_ALL_LOGITS_ARCHITECTURES = frozenset({"qwen"})
INFERENCE_ATTENTIONS = ("eager", "sdpa", "flash")
# transformers 4.36 made SDPA the default attn_implementation (`_autoset_attn_implementation`,
# torch >= 2.1.1); before it Llama-family models ran LlamaAttention (eager): `attn_weights =
# torch.matmul(query_states, key_states.transpose(2, 3))`, then `softmax(attn_weights, dim=-1,
# dtype=torch.float32).to(query_states.dtype)`.  https://github.com/huggingface/transformers/blob/
# v4.35.2/src/transformers/models/llama/modeling_llama.py (LlamaAttention.forward); measured:
# benchmarks/results/cpu-inference-peaks-2026-12-01.csv (4.35.2 runs eager only).
SDPA_DEFAULT_SINCE = (4, 36)
# Releases whose generate() passed the legacy tuple cache between steps: the model's
# DynamicCache.from_legacy_cache wraps the old tensors, torch.cat builds new ones, and the old tuple
# stays referenced by generate's model_kwargs until the step returns (v4.38.2 generation/utils.py,
# `model_kwargs["past_key_values"] = outputs.past_key_values`; models/llama/modeling_llama.py
# `next_cache = next_decoder_cache.to_legacy_cache() if use_legacy_cache`).  Measured across releases:
# benchmarks/results/cpu-inference-peaks-2026-12-01.csv.
DYNAMIC_CACHE_SINCE = (4, 42)
# Training's loss: transformers 4.46 moved it into loss_utils.ForCausalLMLoss, which upcast the
# logits to fp32 and then shifted them with a contiguous copy (`logits = logits.float()`,
# `shift_logits = logits[..., :-1, :].contiguous()`): at batch > 1 one more fp32 vocabulary-sized
# tensor per token while the model's 16-bit logits are still referenced (at batch 1 the slice is
# contiguous and nothing is copied).  Pull request #35646 (merged
# 2025-01-13, first released in 4.49) dropped the copy; labels are padded and shifted instead.
# https://github.com/huggingface/transformers/pull/35646; measured with the HF Trainer:
# benchmarks/results/cpu-kbit-step-2026-12-01.csv (4.47.1 against 5.24.0).
LOSS_SHIFT_COPY_RELEASES = ((4, 46), (4, 49))  # [first, last + 1)
# transformers 4.38 expands a max_position_embeddings² causal mask per forward for these
# (activations.static_causal_mask_bytes); 4.39 sizes the mask to the sequence again.
STATIC_MASK_RELEASES = frozenset({(4, 38)})
STATIC_MASK_ARCHITECTURES = frozenset({"llama", "gemma"})
# Releases whose rotary embedding precomputes cos/sin tables for every position in every attention
# layer: `self.rotary_emb = Qwen2RotaryEmbedding(head_dim, max_position_embeddings=...)` in each
# attention module, whose __init__ calls `_set_cos_sin_cache(seq_len=max_position_embeddings, ...,
# dtype=torch.get_default_dtype())` and registers cos_cached and sin_cached (Llama: _cos_cached /
# _sin_cached, kept for backward compatibility) — the default dtype being the load's torch_dtype
# (modeling_utils `_set_default_torch_dtype`).  Checked in the released wheels: v4.38.2
# models/qwen2/modeling_qwen2.py Qwen2RotaryEmbedding and Qwen2Attention.__init__; present for qwen2
# in 4.37.2–4.44.2 and gone in 4.45.2 (one Qwen2RotaryEmbedding(config) per model, cos/sin computed
# per forward from position_ids); qwen2_moe 4.41.2–4.44.2, gone in 4.45.2; mistral 4.37.2–4.41.2, gone
# in 4.42.4; llama 4.37.2–4.40.2, gone in 4.41.2.  Per architecture: [first release, first without); the
# releases before those checked kept the same Llama-style rotary module since the model was added.
ROTARY_TABLE_RELEASES = {"qwen2": ((4, 37), (4, 45)), "qwen2_moe": ((4, 40), (4, 45)),
                         "mistral": ((4, 34), (4, 42)), "llama": ((4, 0), (4, 41))}
# Remote-code architectures that keep tuple caches whatever the release (Qwen(1) modeling_qwen.py:
# `present = (key, value)` after `torch.cat((past_key, key), dim=1)`; ChatGLM likewise).
_LEGACY_CACHE_ARCHITECTURES = frozenset({"qwen", "chatglm"})


def parse_transformers_version(text: str) -> tuple[int, int]:
    """(major, minor) of a version such as '4.38.2' or '4.46'; bad input is a FitcheckError."""
    parts = str(text).strip().lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        major = minor = -1
    if not 2 <= major <= 99 or not 0 <= minor <= 999:
        raise FitcheckError(f"--transformers-version must look like 4.46 or 4.38.2, got {short_number(str(text))}")
    return major, minor


def logits_mode(architecture: str, transformers_version: str | None) -> tuple[str, str]:
    """(Plan.logits, why) for transformers' prefill with this architecture and version."""
    if architecture in _ALL_LOGITS_ARCHITECTURES:
        return "all", f"{architecture} remote code computes logits for every prompt position"
    if transformers_version is None:
        return "last", "transformers >= 4.45 assumed: logits for the last prompt position"
    if parse_transformers_version(transformers_version) < LAST_LOGITS_SINCE:
        return "all-fp32", f"transformers {transformers_version}: fp32 logits for every prompt position"
    return "last", f"transformers {transformers_version}: logits for the last prompt position"


def attention_mode(architecture: str, transformers_version: str | None, typed: str | None) -> tuple[str, str]:
    """(Plan.attention, why) for transformers inference."""
    if typed:
        return typed, "from --attention"
    if transformers_version is not None and architecture not in _ALL_LOGITS_ARCHITECTURES \
            and parse_transformers_version(transformers_version) < SDPA_DEFAULT_SINCE:
        return "eager", f"transformers {transformers_version}: eager attention is the default before 4.36"
    return "sdpa", "transformers' default attn_implementation (sdpa)"


def static_mask_mode(architecture: str, transformers_version: str | None) -> bool:
    """Whether the release expands a full max_positions² causal mask in every forward (4.38, Llama/Gemma)."""
    return (transformers_version is not None and architecture in STATIC_MASK_ARCHITECTURES
            and parse_transformers_version(transformers_version) in STATIC_MASK_RELEASES)


def loss_shift_copy_mode(architecture: str, transformers_version: str | None) -> bool:
    """Whether transformers' ForCausalLMLoss makes a shifted fp32 copy of the logits (4.46–4.48)."""
    if transformers_version is None or architecture in _ALL_LOGITS_ARCHITECTURES:
        return False
    first, end = LOSS_SHIFT_COPY_RELEASES
    return first <= parse_transformers_version(transformers_version) < end


def rotary_table_mode(architecture: str, transformers_version: str | None) -> bool:
    """Whether the release keeps per-layer cos/sin tables for every position (ROTARY_TABLE_RELEASES)."""
    if transformers_version is None or architecture not in ROTARY_TABLE_RELEASES:
        return False
    first, end = ROTARY_TABLE_RELEASES[architecture]
    return first <= parse_transformers_version(transformers_version) < end


def legacy_cache_mode(architecture: str, transformers_version: str | None) -> bool:
    """Whether generate() keeps two KV caches alive at a decode step (the legacy tuple cache)."""
    if architecture in _LEGACY_CACHE_ARCHITECTURES:
        return True
    return transformers_version is not None and parse_transformers_version(transformers_version) < DYNAMIC_CACHE_SINCE


# ---- SGLang ------------------------------------------------------------------------------------
# SGLang's --mem-fraction-static default: the share of total GPU memory for weights and the KV pool, by the
# tensor-parallel size (python/sglang/srt/server_args.py, ServerArgs.__post_init__, v0.4.6:
# https://github.com/sgl-project/sglang/blob/v0.4.6/python/sglang/srt/server_args.py — tp >= 16: 0.79,
# >= 8: 0.81, >= 4: 0.85, >= 2: 0.87, else 0.88).  The rest holds activations, CUDA graphs and NCCL buffers.
SGLANG_MEM_FRACTION_STATIC = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))


def sglang_mem_fraction_static(tp: int) -> float:
    return next(f for size, f in SGLANG_MEM_FRACTION_STATIC if tp >= size)


# ---- inference ---------------------------------------------------------------------------------
def _gpu_problems(machine: Machine, asked: str, gpus: int) -> list[str]:
    visible = len(machine.gpus)
    if not visible:
        status = f" ({machine.gpu_status})" if machine.gpu_status else ""
        return [f"{asked} needs a GPU, but {machine.name} has none{status}"]
    if gpus > visible:
        return [f"--gpus {gpus}, but {machine.name} has {visible} GPU{'s' if visible > 1 else ''}"]
    return []


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
    if name == "mxfp4" and choices[0] == "transformers" and kind == engines.CUDA:
        # transformers dequantizes MXFP4 experts to bf16 where its kernels do not run (engines).
        if engines.transformers_keeps_mxfp4(cc, transformers_version):
            return name, what
        return None, ("transformers keeps MXFP4 experts packed with its triton kernels on compute capability "
                      f">= {engines.MXFP4_TRANSFORMERS_DEFAULT_CC:g} (7.5 from 4.56 with the kernels package: "
                      "-p mxfp4 to count that) and dequantizes them elsewhere")
    for e in choices:
        if engines.runs_here(e, name, kind, cc) is None:
            return name, what
    why = engines.runs_here(choices[0], name, kind, cc) if choices else f"no engine loads {name}"
    return None, f"the checkpoint's {name} does not run here ({why})"


def _dequantize(spec: ModelSpec, precision: str) -> str:
    """'mxfp4' when transformers loads an MXFP4 checkpoint as 16/32-bit weights: Mxfp4Config(dequantize=True)
    makes it so on every GPU (where its kernels run it would otherwise keep the experts packed)."""
    return "mxfp4" if spec.stored_format == "mxfp4" and weight_format(precision).family == "float" else ""


def _typed_precision(spec: ModelSpec, typed: str) -> str:
    fmt = weight_format(typed)
    problem = stored_only_problem(fmt, spec.stored_formats(), spec.name)
    if problem:
        raise FitcheckError(*problem)
    return fmt.name


def _typed_precision_note(spec: ModelSpec, precision: str, engine: str | None = None) -> str:
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


def resolve_inference(req: Request, spec: ModelSpec, machine: Machine) -> Plan:
    """Fill every default of an inference ``req`` for ``machine`` and record how each was chosen.

    Order: device, the engine the user named (or that a KV-cache type implies), the precision
    (typed, the checkpoint's where it runs here, else the machine's best), then the engine default
    for that precision, the GPUs (all of the machine's, split as the engine splits), the KV cache.
    """
    req.validate()
    notes: list[Assumption] = []
    has_gpu = bool(machine.gpus)
    problems: list[str] = []

    # Device: auto -> the GPU when there is one; --gpu-layers and --cpu-moe mean llama.cpp partial offload.
    cpu_moe = _cpu_moe_layers(req, spec)
    if req.device == "cpu":
        device = "cpu"
    elif (req.device == "gpu" or req.gpus or req.gpu_layers is not None or req.cpu_moe is not None
          or req.cpu_offload_gb or has_gpu):
        device = "gpu"
    else:
        device = "cpu"
    if device == "gpu" and not has_gpu:
        asked = ("--device gpu" if req.device == "gpu" else f"--gpus {req.gpus}" if req.gpus
                 else "--gpu-layers" if req.gpu_layers is not None else "--cpu-moe" if req.cpu_moe is not None
                 else "--cpu-offload-gb")
        problems += _gpu_problems(machine, asked, req.gpus or 1)
    if req.gpu_layers is not None or cpu_moe:
        device = "offload"
    notes.append(Assumption("device", device, "from --device" if req.device != "auto" else
                            ("a GPU is present" if has_gpu else "no GPU on this machine"), "--device"))
    kind, cc = engines.machine_kind(machine, device)

    # The engine asked for, or implied by a KV-cache type only one engine has.
    implied = {"q8_0": "llama.cpp", "q4_0": "llama.cpp", "fp8": "vllm"}.get(req.kv_dtype)
    hint = req.engine or implied or (engines.offload_engine("experts" if cpu_moe else "layers") if device == "offload"
                                     else engines.offload_engine("streamed") if req.cpu_offload_gb
                                     else "llama.cpp" if spec.stored_file_type else None)

    # Precision: typed, the checkpoint's stored format where it runs here, else the best here.
    if req.precision:
        precision = _typed_precision(spec, req.precision)
        notes.append(Assumption("precision", precision, _typed_precision_note(spec, precision, hint), "--precision"))
    else:
        stored, why_stored = _stored_precision(spec, hint, kind, cc, req.transformers_version)
        if stored:
            precision = stored
            notes.append(Assumption("precision", precision, why_stored, "--precision"))
        else:
            precision, why = engines.default_precision(machine, device, hint)
            derived = derived_note(weight_format(precision), spec.stored_format, hint)
            notes.append(Assumption("precision", precision,
                                    "; ".join(t for t in (derived, why_stored, why) if t), "--precision"))

    if req.engine:
        engine = req.engine
        notes.append(Assumption("engine", engine, "from --engine", "--engine"))
    elif hint and not engines.engine_precision_problem(hint, precision):
        engine = hint
        notes.append(Assumption("engine", engine, f"--kv-dtype {req.kv_dtype} is a {engine} type" if implied
                                else "--cpu-offload-gb is vLLM's" if engine == "vllm" and req.cpu_offload_gb
                                else "partial offload (--gpu-layers, --cpu-moe) is llama.cpp's" if device == "offload"
                                else "a GGUF file is llama.cpp's", "--engine"))
    else:
        engine = engines.default_engine(precision, kind, cc, device)
        why = ("GGUF type or CPU" if engine == "llama.cpp" else "GPU with a non-GGUF precision"
               if engine == "transformers" else f"the engine that runs {precision} here")
        notes.append(Assumption("engine", engine, why, "--engine"))
    problem = engines.engine_precision_problem(engine, precision)
    if problem:
        raise FitcheckError(*problem)
    what = "experts" if cpu_moe else "layers"
    if device == "offload" and what not in engines.ENGINES[engine].offloads:
        flag = "--cpu-moe (experts in RAM)" if cpu_moe else "--gpu-layers (partial offload)"
        raise FitcheckError(f"{flag} is a {engines.offload_engine(what)} option",
                            f"add --engine {engines.offload_engine(what)}")
    if req.cpu_offload_gb and "streamed" not in engines.ENGINES[engine].offloads:
        raise FitcheckError(f"--cpu-offload-gb (weights streamed from RAM) is a {engines.offload_engine('streamed')} "
                            "option", f"add --engine {engines.offload_engine('streamed')}")
    if cpu_moe:
        notes.append(Assumption("cpu_moe", str(cpu_moe), f"from --cpu-moe: the routed experts of the first {cpu_moe} "
                                f"of {spec.num_layers} layers in RAM (llama-server --n-cpu-moe)", "--cpu-moe"))
    if req.cpu_offload_gb:
        notes.append(Assumption("cpu_offload_gb", f"{req.cpu_offload_gb:g}", "from --cpu-offload-gb: GiB of weights "
                                "per GPU in RAM, streamed over PCIe every forward pass", "--cpu-offload-gb"))
    if not problems:
        why_not = engines.runs_here(engine, precision, kind, cc)
        if why_not:
            problems.append(f"{why_not}; here: {engines.KIND_NAMES[kind]}"
                            + (f" (compute capability {cc:g})" if cc is not None and "compute capability" not in why_not
                               else ""))

    # GPUs: all of the machine's (as the engine splits) unless --gpus says otherwise.
    visible = len(machine.gpus)
    if device == "cpu":
        gpus = 0
    elif req.gpus:
        gpus = req.gpus
        if has_gpu and req.gpus > visible and not problems:
            problems += _gpu_problems(machine, f"--gpus {req.gpus}", req.gpus)
        notes.append(Assumption("gpus", str(gpus), "from --gpus", "--gpus"))
    else:
        gpus = max(engines.usable_gpus(engine, visible, spec.num_attention_heads), 1)
        if engine == "sglang" and req.nodes > 1 and not req.expert_parallel:
            # SGLang's TP spans the nodes: the per-node count whose total divides the attention heads
            while gpus > 1 and spec.num_attention_heads % (gpus * req.nodes):
                gpus //= 2
        why = "one GPU" if gpus == 1 else (
            f"all {gpus} GPUs of this machine" if gpus == visible else
            f"{gpus} of {visible} GPUs: tensor parallelism needs a power of two dividing the attention heads")
        notes.append(Assumption("gpus", str(gpus), why, "--gpus"))

    # KV-cache dtype.
    if req.kv_dtype == "auto":
        kv = engines.default_kv(engine, precision, kind, cc)
        notes.append(Assumption("kv_dtype", kv, "engine default", "--kv-dtype"))
    else:
        kv = req.kv_dtype
        notes.append(Assumption("kv_dtype", kv, "from --kv-dtype", "--kv-dtype"))
    problem = engines.kv_problem(engine, kv)
    if problem:
        raise FitcheckError(*problem)

    prompt = req.prompt_tokens or req.context
    notes.append(Assumption("context", str(req.context), "from --context" if req.context != DEFAULT_CONTEXT else
                            "default (not the model's maximum)", "--context"))
    notes.append(Assumption("batch", str(req.batch), "concurrent sequences", "--batch"))
    gpu_total = None
    unified = False
    if device != "cpu" and visible:
        g = machine.gpus[0]
        gpu_total = g.memory_total_bytes if known(g.memory_total_bytes) else None
        unified = g.unified_memory
    logits = "last"
    attention, legacy, sampling = "sdpa", False, DEFAULT_SAMPLING
    if engine == "transformers":
        logits, why = logits_mode(spec.architecture, req.transformers_version)
        notes.append(Assumption("logits", logits, why, "--transformers-version"))
        attention, why = attention_mode(spec.architecture, req.transformers_version, req.attention)
        notes.append(Assumption("attention", attention, why, "--attention"))
        sampling, why = sampling_mode(req.sampling, spec)
        notes.append(Assumption("sampling", sampling, why, "--sampling"))
        legacy = legacy_cache_mode(spec.architecture, req.transformers_version)
        kernel = engines.ATTENTION_RUNS[attention].problem(kind, cc)
        if kernel and not problems:
            problems.append(f"--attention {attention}: {kernel}; here: {engines.KIND_NAMES[kind]}")
    elif req.attention is not None and req.engine is not None:
        raise FitcheckError(f"--attention applies to engine transformers, not {engine}")
    if engine != "transformers" and req.sampling not in (None, AUTO_SAMPLING):
        # kept (an alternative that changes the engine keeps the request's other answers), not modelled
        notes.append(Assumption("sampling", str(req.sampling), f"from --sampling; {engine}'s own sampler buffers are "
                                "not counted (--sampling sets transformers generate()'s tensors)", "--sampling"))
    if req.nodes > 1:
        notes.append(Assumption("nodes", str(req.nodes), "from --nodes", "--nodes"))
        if device == "cpu" and not problems:
            problems.append(f"--nodes {req.nodes}: serving across nodes is for GPUs, and {machine.name} has none")
        if engine not in engines.MULTI_NODE_ENGINES and not problems:
            problems.append(f"--nodes {req.nodes}: {engine} serves from one machine; serving across nodes "
                            "is vLLM's (tensor parallel within a node, pipeline parallel across nodes), SGLang's "
                            "(tensor parallel over all nodes) or llama.cpp's RPC backend")
    if req.expert_parallel:
        if engine not in engines.EXPERT_PARALLEL_ENGINES:
            raise FitcheckError(f"--expert-parallel is a vLLM and SGLang layout, not {engine}'s",
                                "add --engine vllm or --engine sglang")
        if not spec.is_moe:
            raise FitcheckError(f"--expert-parallel splits a mixture-of-experts model's experts; {spec.name} is dense",
                                "drop --expert-parallel")
        notes.append(Assumption("expert_parallel", "on", "from --expert-parallel: experts over "
                                f"{gpus * req.nodes} GPUs, attention data parallel", "--expert-parallel"))
    mem_fraction = None
    if engine == "sglang":
        tp = max(gpus, 1) * req.nodes
        heads = spec.num_attention_heads
        if tp > 1 and not req.expert_parallel and heads and heads % tp and not problems:
            problems.append(f"SGLang's tensor parallel size {tp} ({req.nodes} node{'s' if req.nodes > 1 else ''} × "
                            f"{max(gpus, 1)} GPUs) must divide the {heads} attention heads")
        if req.gpu_memory_utilization != DEFAULT_GPU_MEMORY_UTILIZATION:
            mem_fraction = req.gpu_memory_utilization
            why = "from --gpu-memory-utilization (SGLang --mem-fraction-static)"
        else:
            mem_fraction = sglang_mem_fraction_static(tp)
            why = f"SGLang's default for tp {tp} (server_args.py)"
        notes.append(Assumption("mem_fraction_static", f"{mem_fraction:g}", why, "--gpu-memory-utilization"))
    if engine == "vllm":
        notes.append(Assumption("gpu_memory_utilization", f"{req.gpu_memory_utilization:g}",
                                "vLLM default" if req.gpu_memory_utilization == DEFAULT_GPU_MEMORY_UTILIZATION else
                                "from --gpu-memory-utilization", "--gpu-memory-utilization"))
    return Plan(
        precision=precision, engine=engine, device=device, gpus=gpus, context=req.context,
        batch=req.batch, prompt_tokens=prompt, kv_dtype=kv, gpu_layers=req.gpu_layers,
        gpu_memory_utilization=req.gpu_memory_utilization, gpu_total_bytes=gpu_total,
        compute_capability=cc if device != "cpu" else None, unified_memory=unified, assumptions=tuple(notes),
        logits=logits, transformers_version=req.transformers_version if engine == "transformers" else None,
        attention=attention, legacy_cache=legacy, sampling=sampling, problems=tuple(problems), nodes=req.nodes,
        cpu_moe=cpu_moe, cpu_moe_all=bool(cpu_moe) and cpu_moe >= spec.num_layers, cpu_offload_gb=req.cpu_offload_gb,
        expert_parallel=req.expert_parallel, mem_fraction_static=mem_fraction,
        stored_format=_is_stored_format(spec, precision),
        dequantize=_dequantize(spec, precision) if engine == "transformers" else "",
    )


def sampling_mode(requested: str | None, spec: ModelSpec) -> tuple[str, str]:
    """How transformers' generate() picks each token, and why: --sampling when given; else what the
    checkpoint's generation_config.json makes generate() run (fitcheck.model.generation_config); else
    the default (do_sample with temperature, top-k and top-p, the larger of the common cases)."""
    if requested and requested != AUTO_SAMPLING:
        return requested, "from --sampling"
    g = spec.generation
    default = "generate() with do_sample, temperature, top-k and top-p, the larger of the common cases"
    if g is None:
        return DEFAULT_SAMPLING, f"default (no generation_config.json read): {default}"
    if g.problem:
        return DEFAULT_SAMPLING, f"default ({g.source}: {g.problem}): {default}"
    if g.num_beams and g.num_beams > 1:
        return DEFAULT_SAMPLING, f"default (generation_config.json asks for beam search, not modelled): {default}"
    why = f"from generation_config.json: {g.describe()} ({g.source})"
    if g.unmodelled:
        why += f"; its {', '.join(g.unmodelled)} warper{'s' if len(g.unmodelled) > 1 else ''} not counted"
    return sampling_for(g.sampled, g.warpers(), g.processors()), why


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


def _is_stored_format(spec: ModelSpec, precision: str) -> bool:
    stored = weight_format_or_none(spec.stored_format) if spec.stored_format else None
    return stored is not None and stored.name == precision


# ---- training ----------------------------------------------------------------------------------
CPU_PRECISION_WHY = "CPU training: bf16 assumed"

# The recipe of the library that runs each mode.  QLoRA: peft's prepare_model_for_kbit_training(model,
# use_gradient_checkpointing=True) turns on model.gradient_checkpointing_enable() by default
# (https://github.com/huggingface/peft/blob/v0.13.2/src/peft/utils/other.py, prepare_model_for_kbit_training);
# full and LoRA: transformers' TrainingArguments(gradient_checkpointing=False).
RECIPE_CHECKPOINTING = {"full": (False, "Trainer default (off)"),
                        "lora": (False, "Trainer default (off)"),
                        "qlora": (True, "QLoRA recipe: peft's prepare_model_for_kbit_training enables it")}


def grad_checkpointing(req: Request) -> tuple[bool, str]:
    """(on, why) for a training request: the option when given, else its mode's recipe."""
    if req.grad_checkpointing is not None:
        return req.grad_checkpointing, "from --grad-checkpointing" if req.grad_checkpointing \
            else "from --no-grad-checkpointing"
    return RECIPE_CHECKPOINTING[req.mode]


def _training_problems(req: Request, plan_precision: str, device: str, gpus: int, machine: Machine) -> list[str]:
    """Why this machine cannot run the training request, from the capability table."""
    kind, cc = engines.machine_kind(machine, device)
    where = "this run is on the CPU (--device cpu)" if req.device == "cpu" else (
        f"{machine.name} has no GPU" if kind == engines.CPU else f"here: {engines.KIND_NAMES[kind]}")
    out: list[str] = []
    if device == "gpu" and not machine.gpus:
        return _gpu_problems(machine, "--device gpu" if req.device == "gpu" else f"--gpus {req.gpus}", gpus)
    if device == "gpu" and gpus > len(machine.gpus):
        out += _gpu_problems(machine, f"--gpus {gpus}", gpus)
    if kind == engines.CPU and req.gpus is not None:
        out.append(f"--gpus {req.gpus} needs GPUs, but {where}: CPU training runs one process")
    if req.zero is not None or req.fsdp is not None:
        what = f"--zero {req.zero} (DeepSpeed ZeRO)" if req.zero is not None else f"--fsdp {req.fsdp}"
        problem = engines.SHARDING_RUNS.problem(kind, cc)
        if problem:
            out.append(f"{what}: {problem}, but {where}")
    base = engines.TRAINING_BASE_RUNS.get(plan_precision)
    if base is not None and base.problem(kind, cc):
        what = f"QLoRA's {plan_precision} base" if req.mode == "qlora" else f"a {plan_precision} base"
        out.append(f"{what}: {base.problem(kind, cc)}, but {where}")
    optimizer = engines.OPTIMIZER_RUNS[req.optimizer].problem(kind, cc)
    if optimizer:
        out.append(f"--optimizer {req.optimizer}: {optimizer}, but {where}")
    attention = engines.ATTENTION_RUNS[req.attention or "sdpa"].problem(kind, cc)
    if attention:
        out.append(f"--attention {req.attention}: {attention}, but {where}")
    return out


def resolve_training(req: Request, spec: ModelSpec, machine: Machine) -> TrainingPlan:
    """Fill every default of a training ``req`` for ``machine`` and record how each was chosen.

    The device comes first: on the CPU (no GPU here, or --device cpu) a training run is one process
    in RAM.  With --zero or --fsdp and no --gpus, the run shards over all of the machine's GPUs.
    """
    req.validate()
    has_gpu = bool(machine.gpus)
    if req.device == "cpu":
        device = "cpu"
    else:
        device = "gpu" if (has_gpu or req.device == "gpu" or req.gpus) else "cpu"
    notes: list[Assumption] = [Assumption("mode", req.mode, "from --mode", "--mode")]
    notes.append(Assumption("device", device, "from --device" if req.device != "auto" else
                            ("a GPU is present" if has_gpu else "no GPU on this machine"), "--device"))
    cc = engines.machine_kind(machine, device)[1] if device == "gpu" else None
    if device == "gpu" and has_gpu:
        half, half_why = engines.default_precision(machine, "gpu", "transformers")
    else:
        half, half_why = "bf16", CPU_PRECISION_WHY
    if half not in ("bf16", "fp16"):
        half = "bf16"
    # Training loads a trainable base: transformers dequantizes an MXFP4 (or FP8) checkpoint first
    # (Mxfp4HfQuantizer.is_trainable is False: "consider dequantizing the model first").
    if req.precision:
        precision = _typed_precision(spec, req.precision)
        notes.append(Assumption("precision", precision, _typed_precision_note(spec, precision), "--precision"))
    elif req.mode == "qlora":
        precision = "nf4"
        notes.append(Assumption("precision", precision, "; ".join(t for t in (
            "QLoRA's bitsandbytes NF4 base (Dettmers et al. 2023)",
            derived_note(weight_format(precision), spec.stored_format)) if t), "--precision"))
    else:
        precision = half
        notes.append(Assumption("precision", precision, "; ".join(t for t in (
            derived_note(weight_format(precision), spec.stored_format), half_why) if t), "--precision"))
    compute = precision if precision in ("bf16", "fp16", "fp32") else half
    master = req.master_weights or "fp32"
    notes.append(Assumption("master_weights", master, "from --master-weights" if req.master_weights else
                            ("mixed precision: fp32 master copy" if req.mode == "full"
                             else "trainable adapters kept in fp32 (peft)"), "--master-weights"))
    notes.append(Assumption("optimizer", req.optimizer, "from --optimizer" if req.optimizer != "adamw" else "default",
                            "--optimizer"))
    notes.append(Assumption("seq_len", str(req.seq_len), "from --seq-len" if req.seq_len != DEFAULT_SEQ_LEN
                            else "default", "--seq-len"))
    notes.append(Assumption("batch", str(req.batch), "micro-batch per GPU" if device == "gpu"
                            else "micro-batch of the one CPU process", "--batch"))
    checkpointing, checkpointing_why = grad_checkpointing(req)
    notes.append(Assumption("grad_checkpointing", "on" if checkpointing else "off", checkpointing_why,
                            "--no-grad-checkpointing" if checkpointing else "--grad-checkpointing"))
    attention = req.attention or "sdpa"
    notes.append(Assumption("attention", attention, "transformers default (sdpa)" if req.attention is None
                            else "from --attention", "--attention"))
    if req.mode != "full":
        targets = parse_targets(req.lora_targets)
        notes.append(Assumption("lora", f"r={req.lora_rank}, targets {targets.label}"
                                + (", embeddings trained" if req.lora_train_embeddings else ""),
                                "defaults" if (req.lora_rank, req.lora_targets)
                                == (DEFAULT_LORA_RANK, DEFAULT_LORA_TARGETS) else "from the options",
                                "--lora-rank/--lora-targets"))
    visible = len(machine.gpus)
    sharded = req.zero is not None or req.fsdp is not None
    if device == "cpu":
        gpus = 1  # one process
    elif req.gpus:
        gpus = req.gpus
        notes.append(Assumption("gpus", str(gpus), "from --gpus", "--gpus"))
    elif sharded and visible > 1:
        gpus = visible
        flag = "--zero" if req.zero is not None else "--fsdp"
        notes.append(Assumption("gpus", str(gpus), f"all {visible} GPUs of this machine ({flag} shards over them)",
                                "--gpus"))
    else:
        gpus = 1
        notes.append(Assumption("gpus", "1", "one GPU (add --zero or --fsdp to shard over more)" if visible > 1
                                else "one GPU", "--gpus"))
    if req.zero is not None:
        notes.append(Assumption("sharding", f"DeepSpeed ZeRO-{req.zero}", "from --zero", "--zero"))
    elif req.fsdp is not None:
        notes.append(Assumption("sharding", f"FSDP {req.fsdp}", "from --fsdp", "--fsdp"))
    if req.offload != "none":
        notes.append(Assumption("offload", req.offload, "from --offload", "--offload"))
    if req.nodes > 1:
        notes.append(Assumption("nodes", str(req.nodes), f"from --nodes: {gpus * req.nodes} processes, "
                                f"{gpus} per node", "--nodes"))
    if req.transformers_version is not None:
        notes.append(Assumption("transformers_version", req.transformers_version,
                                "from --transformers-version: the loss "
                                + ("upcasts, then shifts the logits with a contiguous fp32 copy (4.46–4.48; "
                                   "a copy at batch > 1)"
                                   if loss_shift_copy_mode("", req.transformers_version)
                                   else "keeps no shifted copy of the fp32 logits"), "--transformers-version"))
    problems = _training_problems(req, precision, device, gpus, machine)
    return TrainingPlan(
        mode=req.mode, precision=precision, compute_dtype=compute, seq_len=req.seq_len, batch=req.batch,
        grad_accum=req.grad_accum, optimizer=req.optimizer, master_weights=master,
        grad_checkpointing=checkpointing, attention=attention, lora_rank=req.lora_rank,
        lora_targets=parse_targets(req.lora_targets).text if req.mode != "full" else req.lora_targets,
        lora_dropout=req.lora_dropout, lora_train_embeddings=req.lora_train_embeddings, gpus=gpus,
        zero=req.zero, fsdp=req.fsdp, offload=req.offload, ds_bucket_elements=req.ds_bucket_elements,
        compute_capability=cc, assumptions=tuple(notes), device=device, problems=tuple(problems),
        nodes=req.nodes, dequantize=_dequantize(spec, precision), transformers_version=req.transformers_version,
    )
