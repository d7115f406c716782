"""What the user asks for, and its defaults resolved against a machine (pure: no probing here).

`InferenceRequest` holds exactly what was typed (None = "use the default");
`resolve_inference(...)` turns it into a `Plan` where every choice is concrete and each default
is recorded as an `Assumption` the user can see and change.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fitcheck.bounded import short_number
from fitcheck.errors import FitcheckError
from fitcheck.estimate.formats import KV_DTYPES, weight_format, weight_format_or_none
from fitcheck.estimate.result import Assumption
from fitcheck.machine import GPU, Machine, known
from fitcheck.model.spec import ModelSpec

ENGINES = ("transformers", "vllm", "llama.cpp")
DEVICES = ("auto", "gpu", "cpu")
DEFAULT_CONTEXT = 4096
DEFAULT_HEADROOM = 0.10
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
# Bounds on what a request may ask, so absurd numbers are bad input, not overflows.
MAX_CONTEXT = 2**30        # tokens per sequence (Llama 4 Scout advertises 10M)
MAX_BATCH = 2**20          # concurrent sequences
MAX_GPUS = 4096


@dataclass(frozen=True)
class InferenceRequest:
    """An inference question as typed; None means 'pick the default for this machine'."""

    precision: str | None = None
    context: int = DEFAULT_CONTEXT          # tokens per sequence, prompt plus generated
    batch: int = 1                          # concurrent sequences
    kv_dtype: str = "auto"
    engine: str | None = None
    gpus: int | None = None                 # GPUs to spread over (tensor parallel for vLLM)
    device: str = "auto"                    # auto | gpu | cpu
    gpu_layers: int | None = None           # llama.cpp -ngl: partial offload
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    prompt_tokens: int | None = None        # prefill length (default: the whole context)
    transformers_version: str | None = None  # e.g. "4.38.2": decides the prefill's logits (transformers)
    attention: str | None = None            # transformers: eager | sdpa | flash (None: the release's default)

    def validate(self) -> None:
        if not 1 <= self.context <= MAX_CONTEXT:
            raise FitcheckError(f"--context must be between 1 and {MAX_CONTEXT:,} tokens, "
                                f"got {short_number(self.context)}")
        if not 1 <= self.batch <= MAX_BATCH:
            raise FitcheckError(f"--batch must be between 1 and {MAX_BATCH:,}, got {short_number(self.batch)}")
        if self.gpus is not None and not 1 <= self.gpus <= MAX_GPUS:
            raise FitcheckError(f"--gpus must be between 1 and {MAX_GPUS}, got {short_number(self.gpus)}")
        if self.engine is not None and self.engine not in ENGINES:
            raise FitcheckError(f"unknown engine '{self.engine}'", "choose one of: " + ", ".join(ENGINES))
        if self.device not in DEVICES:
            raise FitcheckError(f"unknown device '{self.device}'", "choose one of: " + ", ".join(DEVICES))
        if self.kv_dtype not in KV_DTYPES:
            raise FitcheckError(f"unknown KV-cache dtype '{self.kv_dtype}'", "choose one of: " + ", ".join(KV_DTYPES))
        if not 0.05 <= self.gpu_memory_utilization <= 1.0:
            raise FitcheckError(f"--gpu-memory-utilization must be between 0.05 and 1, got {self.gpu_memory_utilization}")
        if self.prompt_tokens is not None and not 1 <= self.prompt_tokens <= self.context:
            raise FitcheckError("the prompt must be between 1 token and the context length")
        if self.gpu_layers is not None and not 0 <= self.gpu_layers <= 100_000:
            raise FitcheckError(f"--gpu-layers must be between 0 and the model's layers, "
                                f"got {short_number(self.gpu_layers)}")
        if self.transformers_version is not None:
            parse_transformers_version(self.transformers_version)
        if self.attention is not None and self.attention not in INFERENCE_ATTENTIONS:
            raise FitcheckError(f"unknown attention '{self.attention}'", "choose one of: " + ", ".join(INFERENCE_ATTENTIONS))


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

    def with_changes(self, **changes) -> "Plan":
        return replace(self, **changes)


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
# transformers 4.38 expands a max_position_embeddings² causal mask per forward for these
# (activations.static_causal_mask_bytes); 4.39 sizes the mask to the sequence again.
STATIC_MASK_RELEASES = frozenset({(4, 38)})
STATIC_MASK_ARCHITECTURES = frozenset({"llama", "gemma"})
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


def legacy_cache_mode(architecture: str, transformers_version: str | None) -> bool:
    """Whether generate() keeps two KV caches alive at a decode step (the legacy tuple cache)."""
    if architecture in _LEGACY_CACHE_ARCHITECTURES:
        return True
    return transformers_version is not None and parse_transformers_version(transformers_version) < DYNAMIC_CACHE_SINCE


def _cc(gpu: GPU) -> float | None:
    if known(gpu.compute_capability):
        try:
            return float(gpu.compute_capability)
        except ValueError:
            return None
    return None


def default_precision(machine: Machine, device: str, engine: str | None = None) -> tuple[str, str]:
    """(precision, why): bf16 where supported, fp16 on older GPUs, q4_k_m for llama.cpp/CPU."""
    if engine == "llama.cpp" or ((device == "cpu" or not machine.gpus) and engine is None):
        return "q4_k_m", "CPU inference: the GGUF type llama.cpp users take" if device == "cpu" or not machine.gpus \
            else "the GGUF type llama.cpp users take"
    if device == "cpu" or not machine.gpus:  # transformers on the CPU
        if machine.cpu.features & CPU_BF16_FEATURES:
            return "bf16", "the CPU has bf16 instructions"
        return "fp32", "the CPU has no bf16 instructions"
    gpu = machine.gpus[0]
    if gpu.vendor == "apple":
        return "bf16", "Apple GPUs support bf16"
    cc = _cc(gpu)
    if gpu.vendor == "nvidia" and cc is not None and cc < 8.0:
        return "fp16", f"compute capability {gpu.compute_capability} has no bf16"
    return "bf16", "the GPU supports bf16" if cc is not None or gpu.vendor != "nvidia" else "bf16 assumed (compute capability unknown)"


# CPU feature flags (fitcheck.probe.cpu names) that run bf16 matmuls natively.
CPU_BF16_FEATURES = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
# Formats whose kernels exist only for CUDA (and ROCm): bitsandbytes, GPTQ/AWQ kernels, FP8.
_CUDA_ONLY_FAMILIES = frozenset({"bnb", "gptq", "awq", "fp8"})


def resolve_inference(req: InferenceRequest, spec: ModelSpec, machine: Machine) -> Plan:
    """Fill every default of `req` for `machine` and record how each was chosen.

    Order matters: device, then the engine the user named (so its own default precision
    applies), then the precision, then the engine default for that precision.
    """
    req.validate()
    notes: list[Assumption] = []
    has_gpu = bool(machine.gpus)
    visible = len(machine.gpus)

    # Device: auto -> GPU when there is one (or llama.cpp layer offload when asked), else CPU.
    if req.device == "gpu" and not has_gpu:
        raise FitcheckError(f"--device gpu, but {machine.name} has no GPU", machine.gpu_status or None)
    if req.gpus and not has_gpu:
        raise FitcheckError(f"--gpus {req.gpus}, but {machine.name} has no GPU", machine.gpu_status or None)
    if req.gpus and req.gpus > visible:
        raise FitcheckError(f"--gpus {req.gpus}, but {machine.name} has {visible} GPU{'s' if visible > 1 else ''}",
                            f"use --gpus {visible} or less, or a profile with more GPUs")
    if req.gpu_layers is not None and (not has_gpu or req.device == "cpu"):
        raise FitcheckError("--gpu-layers offloads layers to a GPU, and this run has none",
                            "drop --gpu-layers, or use a machine with a GPU")
    device = "gpu" if (req.device in ("auto", "gpu") and has_gpu) else "cpu"
    if req.gpus and req.device == "cpu":
        raise FitcheckError("--gpus with --device cpu: pick one")
    if req.engine == "vllm" and device != "gpu":
        raise FitcheckError("vLLM needs a GPU", "use --engine llama.cpp for CPU or partial offload")
    if req.gpu_layers is not None and device == "gpu":
        device = "offload"
    notes.append(Assumption("device", device, "from --device" if req.device != "auto" else
                            ("a GPU is present" if has_gpu else "no GPU on this machine"), "--device"))
    vendor = machine.gpus[0].vendor if device != "cpu" else "cpu"
    if req.engine == "vllm" and vendor not in ("nvidia", "amd"):
        raise FitcheckError(f"vLLM needs an NVIDIA or AMD GPU (this one: {vendor})", "use --engine llama.cpp")

    # Precision: what was typed, the checkpoint's stored format, or the default for the engine.
    if req.precision:
        precision = weight_format(req.precision).name
        notes.append(Assumption("precision", precision, "from --precision", "--precision"))
    elif spec.stored_format and weight_format_or_none(spec.stored_format):
        precision = weight_format(spec.stored_format).name
        notes.append(Assumption("precision", precision, "the checkpoint's stored format", "--precision"))
    else:
        precision, why = default_precision(machine, device, req.engine or ("llama.cpp" if device == "offload" else None))
        notes.append(Assumption("precision", precision, why, "--precision"))
    fmt = weight_format(precision)

    # Engine: llama.cpp for GGUF types and CPU-only; transformers otherwise.
    if req.engine:
        engine = req.engine
        notes.append(Assumption("engine", engine, "from --engine", "--engine"))
    else:
        engine = "llama.cpp" if (fmt.gguf or device == "cpu" or device == "offload") else "transformers"
        notes.append(Assumption("engine", engine, "GGUF type or CPU" if engine == "llama.cpp" else "GPU with a non-GGUF precision", "--engine"))
    if fmt.gguf and engine != "llama.cpp":
        raise FitcheckError(f"precision {precision} is a GGUF type: only --engine llama.cpp runs it")
    if engine == "llama.cpp" and not fmt.gguf and fmt.family not in ("float",):
        raise FitcheckError(f"llama.cpp does not load {precision} checkpoints", "use a GGUF type such as q4_k_m")
    if device == "cpu" and engine == "transformers" and fmt.family not in ("float",):
        raise FitcheckError(f"{precision} needs a GPU with transformers", "on CPU use a GGUF type with llama.cpp, or bf16/fp32")
    if device == "offload" and engine != "llama.cpp":
        raise FitcheckError("--gpu-layers (partial offload) is a llama.cpp option", "add --engine llama.cpp")
    if vendor in ("apple", "intel") and fmt.family in _CUDA_ONLY_FAMILIES:
        raise FitcheckError(f"{precision} kernels need CUDA (an NVIDIA GPU); this GPU is {vendor}",
                            "use a GGUF type with llama.cpp, or bf16/fp16")

    cc = _cc(machine.gpus[0]) if has_gpu else None
    if fmt.min_cc and device != "cpu" and (cc is None or cc < fmt.min_cc) and vendor == "nvidia":
        raise FitcheckError(f"{precision} weights need compute capability >= {fmt.min_cc} (this GPU: {machine.gpus[0].compute_capability})")

    # GPUs
    gpus = 0 if device == "cpu" else (req.gpus or 1)
    if device != "cpu":
        notes.append(Assumption("gpus", str(gpus), "from --gpus" if req.gpus else "one GPU", "--gpus"))

    # KV-cache dtype
    kv = req.kv_dtype
    if kv == "auto":
        kv = "fp16" if (engine == "llama.cpp" or precision in ("fp16",)) else ("fp32" if precision == "fp32" else "bf16")
        if engine != "llama.cpp" and precision not in ("fp32", "fp16", "bf16") and device != "cpu":
            kv = "fp16" if cc is not None and cc < 8.0 else "bf16"
        notes.append(Assumption("kv_dtype", kv, "engine default", "--kv-dtype"))
    else:
        notes.append(Assumption("kv_dtype", kv, "from --kv-dtype", "--kv-dtype"))
    if kv in ("q8_0", "q4_0") and engine != "llama.cpp":
        raise FitcheckError(f"KV-cache type {kv} is a llama.cpp type", "use --kv-dtype fp8 with vLLM")
    if kv == "fp8" and engine == "llama.cpp":
        raise FitcheckError("llama.cpp has no fp8 KV cache", "use --kv-dtype q8_0")

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
    attention, legacy = "sdpa", False
    if engine == "transformers":
        logits, why = logits_mode(spec.architecture, req.transformers_version)
        notes.append(Assumption("logits", logits, why, "--transformers-version"))
        attention, why = attention_mode(spec.architecture, req.transformers_version, req.attention)
        if attention == "flash" and (device != "gpu" or vendor != "nvidia"):
            raise FitcheckError("--attention flash (flash-attention 2) runs on NVIDIA GPUs only",
                                "use --attention sdpa")
        notes.append(Assumption("attention", attention, why, "--attention"))
        legacy = legacy_cache_mode(spec.architecture, req.transformers_version)
    elif req.attention is not None and req.engine is not None:
        raise FitcheckError(f"--attention applies to engine transformers, not {engine}")
    if engine == "vllm":
        notes.append(Assumption("gpu_memory_utilization", f"{req.gpu_memory_utilization:g}",
                                "vLLM default" if req.gpu_memory_utilization == DEFAULT_GPU_MEMORY_UTILIZATION else
                                "from --gpu-memory-utilization", "--gpu-memory-utilization"))
    return Plan(
        precision=precision, engine=engine, device=device, gpus=gpus, context=req.context,
        batch=req.batch, prompt_tokens=prompt, kv_dtype=kv, gpu_layers=req.gpu_layers,
        gpu_memory_utilization=req.gpu_memory_utilization, gpu_total_bytes=gpu_total,
        compute_capability=cc, unified_memory=unified, assumptions=tuple(notes), logits=logits,
        transformers_version=req.transformers_version if engine == "transformers" else None,
        attention=attention, legacy_cache=legacy,
    )
