"""The engine and capability table: what runs where.  Defaults, validation and alternatives read it.

Device kinds: ``cuda`` (NVIDIA, with a compute capability), ``rocm`` (AMD), ``metal`` (Apple),
``xpu`` (Intel GPUs) and ``cpu``.  Each entry says on which kinds a precision, KV-cache type,
attention kernel or optimizer runs with an engine, and the minimum CUDA compute capability where
there is one.  Two kinds of answer come out of it:

- a pair no machine runs (a GGUF type in vLLM, a q8_0 KV cache in transformers) is a malformed
  request when the user typed both (exit 2); a default never lands on one;
- a pair this machine cannot run (AWQ on Apple, fp8 below compute capability 8.9, vLLM on a CPU)
  is a verdict, "cannot run here" (exit 1), with the alternatives that do run.

Sources: bitsandbytes (CUDA, ROCm since 0.43; no Metal), AutoGPTQ/AutoAWQ and vLLM kernels (CUDA,
ROCm), vLLM's FP8 W8A8 (compute capability 8.9+, docs.vllm.ai/en/latest/features/quantization/fp8),
llama.cpp backends (CPU, CUDA, ROCm/HIP, Metal; SYCL not modelled), flash-attention 2 (Ampere or
newer, or ROCm: github.com/Dao-AILab/flash-attention#installation-and-features), DeepSpeed and FSDP
(NCCL/RCCL: CUDA, ROCm).
"""

from __future__ import annotations

from dataclasses import dataclass

from fitcheck.machine import GPU, Machine, known

CUDA, ROCM, METAL, XPU, CPU = "cuda", "rocm", "metal", "xpu", "cpu"
DEVICE_KINDS = (CUDA, ROCM, METAL, XPU, CPU)
GPU_KINDS = frozenset({CUDA, ROCM, METAL, XPU})
ALL = frozenset(DEVICE_KINDS)
CUDA_ROCM = frozenset({CUDA, ROCM})
KIND_NAMES = {CUDA: "an NVIDIA GPU (CUDA)", ROCM: "an AMD GPU (ROCm)", METAL: "an Apple GPU (Metal)",
              XPU: "an Intel GPU", CPU: "the CPU"}

GGUF_TYPES = ("q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0", "q3_k_m", "q2_k", "mxfp4_moe")
FLOATS = ("fp32", "fp16", "bf16")


@dataclass(frozen=True)
class Runs:
    """Where one thing runs: device kinds and the lowest CUDA compute capability (None: any)."""

    kinds: frozenset[str]
    min_cc: float | None = None
    why: str = ""
    verb: str = "need"  # "needs" when ``why`` is singular ("vLLM needs ...", "AWQ kernels need ...")

    def problem(self, kind: str, cc: float | None) -> str | None:
        if kind not in self.kinds:
            return f"{self.why or 'its kernels'} {self.verb} {_kinds_text(self.kinds)}"
        if kind == CUDA and self.min_cc is not None and (cc is None or cc < self.min_cc):
            shown = "unknown" if cc is None else f"{cc:g}"
            return f"{self.why or 'its kernels'} {self.verb} compute capability >= {self.min_cc:g} (this GPU: {shown})"
        return None


def _kinds_text(kinds: frozenset[str]) -> str:
    names = [KIND_NAMES[k] for k in DEVICE_KINDS if k in kinds]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


_BNB = Runs(CUDA_ROCM, why="bitsandbytes kernels")
_GPTQ = Runs(CUDA_ROCM, why="GPTQ kernels")
_AWQ = Runs(CUDA_ROCM, why="AWQ kernels")
_FP8 = Runs(frozenset({CUDA, ROCM}), 8.9, why="FP8 kernels")
_ANY = Runs(ALL)
_GPU_SERVING = Runs(CUDA_ROCM, why="vLLM", verb="needs")
# vLLM refuses bf16 below compute capability 8.0 ("Bfloat16 is only supported on GPUs with compute capability
# of at least 8.0 ... use float16 instead": _check_if_gpu_supports_dtype, vllm/worker/worker.py; since v0.8
# CudaPlatform.check_if_supports_dtype, vllm/platforms/cuda.py).
_VLLM_BF16 = Runs(CUDA_ROCM, 8.0, why="vLLM's bf16 kernels")
# SGLang: CUDA and ROCm builds (docs.sglang.ai, "Install SGLang": NVIDIA and AMD GPUs); its quantization
# methods (python/sglang/srt/server_args.py QUANTIZATION_CHOICES: fp8, awq, gptq, gptq_marlin, awq_marlin;
# docs.sglang.ai/advanced_features/quantization.html) and --kv-cache-dtype fp8_e4m3/fp8_e5m2.
_SGLANG = Runs(CUDA_ROCM, why="SGLang", verb="needs")
_SGLANG_FP8 = Runs(CUDA_ROCM, 8.9, why="FP8 kernels")
# MXFP4 checkpoints (gpt-oss).  transformers' Mxfp4HfQuantizer.validate_environment keeps the experts
# packed on CUDA compute capability >= 7.5 (or an Intel XPU) with triton >= 3.4 and the kernels
# package, and otherwise dequantizes them to bf16 at load ("we will default to dequantizing the model
# to bf16"); 4.55.0 asked for compute capability >= 9.0 (lowered in 4.56, PR #39940).
# https://github.com/huggingface/transformers/blob/0001b3ee40be23bcac4f361e7684f1391a49a56b/src/transformers/quantizers/quantizer_mxfp4.py
_MXFP4_TRANSFORMERS = Runs(frozenset({CUDA, XPU}), 7.5, why="transformers' MXFP4 kernels (triton >= 3.4, kernels)")
# vLLM's gpt-oss recipe: H100/H200/B200 and MI300x/MI325x/MI355x, and Ampere (A100) by default with
# the Marlin MXFP4 MoE kernel.  https://github.com/vllm-project/recipes/blob/main/OpenAI/GPT-OSS.md
_MXFP4_VLLM = Runs(CUDA_ROCM, 8.0, why="vLLM's MXFP4 MoE kernels")
# Without the version or the kernels package in view, fitcheck takes the dequantized size below the
# compute capability every transformers release with gpt-oss keeps MXFP4 on (4.55: >= 9.0); from
# --transformers-version 4.56 the kernels' own 7.5.
MXFP4_TRANSFORMERS_DEFAULT_CC = 9.0
MXFP4_TRANSFORMERS_NEEDS = "transformers >= 4.56 with triton >= 3.4 and the kernels package"
MXFP4_TRANSFORMERS_LOWER_SINCE = (4, 56)


# llama.cpp reserves its compute graph for a micro-batch of n_ubatch tokens (common/arg.cpp default 512).
LLAMA_CPP_UBATCH = 512


@dataclass(frozen=True)
class Engine:
    name: str
    runs: Runs                                   # the engine itself
    precisions: dict[str, Runs]                  # weights format -> where it runs with this engine
    kv_dtypes: tuple[str, ...]                   # KV-cache types it has (auto resolves to one of them)
    splits: str                                  # how it spreads over GPUs: "layers" | "tensor"
    # How its KV cache stores what the formulas in estimate/kv_cache.py count:
    kv_mla_latent: bool = True                   # MLA's compressed latent (False: K and V expanded per head)
    kv_sliding_extra: int | None = 0             # sliding-window layers keep window + this many cells;
                                                 # None: decided by the release (transformers); what each
                                                 # engine keeps: estimate/kv_cache.sliding_cache
    # Weights it keeps in RAM while the GPU runs the rest: "layers" (llama.cpp -ngl), "experts" (llama.cpp
    # --n-cpu-moe / --cpu-moe, MoE models), "streamed" (vLLM --cpu-offload-gb, over PCIe every forward).
    offloads: frozenset[str] = frozenset()


ENGINES: dict[str, Engine] = {
    "transformers": Engine(
        "transformers", _ANY,
        {"fp32": _ANY, "bf16": _ANY, "fp16": _ANY, "fp8": _FP8, "int8": _BNB, "nf4": _BNB,
         "gptq-int4": _GPTQ, "gptq-int8": _GPTQ, "int4": _GPTQ, "awq": _AWQ, "mxfp4": _MXFP4_TRANSFORMERS},
        ("fp16", "bf16", "fp32"), "layers", kv_mla_latent=False, kv_sliding_extra=None),
    "vllm": Engine(
        "vllm", _GPU_SERVING,
        {"fp32": _GPU_SERVING, "bf16": _VLLM_BF16, "fp16": _GPU_SERVING, "fp8": _FP8, "int8": _BNB, "nf4": _BNB,
         "gptq-int4": _GPTQ, "gptq-int8": _GPTQ, "int4": _GPTQ, "awq": _AWQ, "mxfp4": _MXFP4_VLLM},
        ("fp16", "bf16", "fp32", "fp8"), "tensor", offloads=frozenset({"streamed"})),
    "sglang": Engine(
        "sglang", _SGLANG,
        {"fp32": _SGLANG, "bf16": _SGLANG, "fp16": _SGLANG, "fp8": _SGLANG_FP8,
         "gptq-int4": _GPTQ, "gptq-int8": _GPTQ, "int4": _GPTQ, "awq": _AWQ},
        ("fp16", "bf16", "fp32", "fp8"), "tensor"),
    "llama.cpp": Engine(
        "llama.cpp", Runs(frozenset({CUDA, ROCM, METAL, CPU}), why="llama.cpp's backends"),
        {**{p: Runs(frozenset({CUDA, ROCM, METAL, CPU})) for p in GGUF_TYPES + FLOATS}},
        ("fp16", "q8_0", "q4_0"), "layers",
        # llama-kv-cache-iswa.cpp: size_swa = min(size_base, GGML_PAD(n_swa * n_seq_max + n_ubatch, n_pad))
        kv_sliding_extra=LLAMA_CPP_UBATCH, offloads=frozenset({"layers", "experts"})),
}
ENGINE_ORDER = ("transformers", "vllm", "sglang", "llama.cpp")
# Engines that serve across nodes (--nodes > 1): vLLM (TP within a node × PP across nodes), SGLang (TP over
# all nodes' GPUs: --tp N·G --nnodes N), llama.cpp's RPC backend (layers split over the nodes' devices).
MULTI_NODE_ENGINES = ("vllm", "sglang", "llama.cpp")
# Engines with an expert-parallel MoE layout (vLLM --enable-expert-parallel, SGLang --ep-size).
EXPERT_PARALLEL_ENGINES = ("vllm", "sglang")

# Training: optimizers, attention kernels, sharding, base-weight formats.
OPTIMIZER_RUNS = {"adamw": _ANY, "sgd": _ANY, "adafactor": _ANY,
                  "adamw-8bit": Runs(CUDA_ROCM, why="bitsandbytes' 8-bit optimizers"),
                  "paged-adamw-8bit": Runs(CUDA_ROCM, why="bitsandbytes' 8-bit optimizers")}
ATTENTION_RUNS = {"sdpa": _ANY, "eager": _ANY,
                  "flash": Runs(CUDA_ROCM, 8.0, why="flash-attention 2", verb="needs")}
SHARDING_RUNS = Runs(CUDA_ROCM, why="DeepSpeed and FSDP (NCCL/RCCL)")
TRAINING_BASE_RUNS = {"bf16": _ANY, "fp16": Runs(GPU_KINDS, why="fp16 mixed precision", verb="needs"), "fp32": _ANY,
                      "int8": _BNB, "nf4": _BNB, "gptq-int4": _GPTQ, "int4": _GPTQ, "awq": _AWQ}


@dataclass(frozen=True)
class FsdpStrategy:
    """One `--fsdp` value: PyTorch FSDP's sharding strategy and what it shards over."""

    name: str                  # the --fsdp value
    strategy: str              # torch.distributed.fsdp.ShardingStrategy member, as accelerate's
                               # `fsdp_sharding_strategy` names it (accelerate/utils/constants.py)
    stage: int                 # the ZeRO stage it matches: 2 = gradients and optimizer sharded, 3 = + parameters
    within_node: bool = False  # hybrid: sharded over one node's GPUs, replicated across nodes
    runs: Runs = SHARDING_RUNS


# torch/distributed/fsdp/api.py ShardingStrategy: FULL_SHARD (ZeRO-3), SHARD_GRAD_OP (ZeRO-2), HYBRID_SHARD
# ("FULL_SHARD within a node, and replicates parameters across nodes"), _HYBRID_SHARD_ZERO2 (SHARD_GRAD_OP
# within a node, replicated across nodes).  FSDP2 spells hybrid as fully_shard(mesh=init_device_mesh("cuda",
# (nodes, gpus), mesh_dim_names=("replicate", "shard"))), HSDP.  accelerate accepts the names below
# (FSDP_SHARDING_STRATEGY = [FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2]).
FSDP_STRATEGIES: dict[str, FsdpStrategy] = {s.name: s for s in (
    FsdpStrategy("full-shard", "FULL_SHARD", 3),
    FsdpStrategy("shard-grad-op", "SHARD_GRAD_OP", 2),
    FsdpStrategy("hybrid-shard", "HYBRID_SHARD", 3, within_node=True),
    FsdpStrategy("hybrid-shard-zero2", "HYBRID_SHARD_ZERO2", 2, within_node=True),
)}


def sharding_stage(zero: int | None, fsdp: str | None) -> int:
    """The ZeRO stage a plan's sharding amounts to (0: none, DDP or one process)."""
    if zero is not None:
        return zero
    return FSDP_STRATEGIES[fsdp].stage if fsdp else 0


def shard_degree(zero: int | None, fsdp: str | None, gpus: int, nodes: int) -> int:
    """Over how many processes the sharded model states are split: all of them (ZeRO, FSDP full/grad-op),
    or one node's GPUs (FSDP hybrid: each node holds a full replica, sharded over its GPUs)."""
    if fsdp is not None and FSDP_STRATEGIES[fsdp].within_node:
        return max(gpus, 1)
    return max(gpus, 1) * max(nodes, 1)


# ---- the machine side -------------------------------------------------------------------------
def compute_capability(gpu: GPU) -> float | None:
    if known(gpu.compute_capability):
        try:
            return float(gpu.compute_capability)
        except ValueError:
            return None
    return None


def gpu_kind(gpu: GPU) -> str:
    return {"nvidia": CUDA, "amd": ROCM, "apple": METAL, "intel": XPU}.get(str(gpu.vendor), CUDA)


def machine_kind(machine: Machine, device: str) -> tuple[str, float | None]:
    """(device kind, compute capability) of where a plan with ``device`` runs on ``machine``."""
    if device == "cpu" or not machine.gpus:
        return CPU, None
    gpu = machine.gpus[0]
    return gpu_kind(gpu), compute_capability(gpu) if gpu_kind(gpu) == CUDA else None


# ---- questions the resolver, validation and alternatives ask -----------------------------------
def engine_precision_problem(engine: str, precision: str) -> tuple[str, str] | None:
    """(message, hint) when ``engine`` never loads ``precision`` (on any machine), else None."""
    from fitcheck.estimate.formats import weight_format

    name = weight_format(precision).name
    if name in ENGINES[engine].precisions:
        return None
    if name in GGUF_TYPES:
        return (f"precision {name} is a GGUF type: only --engine llama.cpp runs it",
                "drop --engine, or add --engine llama.cpp")
    if engine == "llama.cpp":
        return f"llama.cpp does not load {name} checkpoints", "use a GGUF type such as q4_k_m, or another --engine"
    others = [e for e in engines_for(name) if e != engine]
    return (f"{engine} does not load {name} weights",
            "use " + " or ".join(f"--engine {e}" for e in others) + f" for {name}, or another --precision" if others
            else "choose another --precision")


def offload_engine(what: str) -> str:
    """The engine that keeps ``what`` (an Engine.offloads entry) in RAM."""
    return next(name for name in ENGINE_ORDER if what in ENGINES[name].offloads)


def kv_problem(engine: str, kv: str) -> tuple[str, str] | None:
    if kv == "auto" or kv in ENGINES[engine].kv_dtypes:
        return None
    if kv in ("q8_0", "q4_0"):
        return (f"KV-cache type {kv} is a llama.cpp type",
                "use --engine llama.cpp, or --kv-dtype fp8 with vLLM or SGLang")
    if kv == "fp8" and engine == "llama.cpp":
        return "llama.cpp has no fp8 KV cache", "use --kv-dtype q8_0"
    if kv == "fp8":
        return (f"{engine} has no fp8 KV cache",
                "use --engine vllm or --engine sglang (--kv-cache-dtype fp8), or drop --kv-dtype")
    return f"{engine} has no {kv} KV cache", "choose one of: " + ", ".join(ENGINES[engine].kv_dtypes)


def runs_here(engine: str, precision: str, kind: str, cc: float | None) -> str | None:
    """Why ``precision`` with ``engine`` cannot run on this device kind, or None when it runs."""
    eng = ENGINES[engine]
    problem = eng.runs.problem(kind, cc)
    if problem:
        return problem
    entry = eng.precisions.get(precision)
    if entry is None:
        return f"{engine} does not load {precision}"
    problem = entry.problem(kind, cc)
    return f"{precision} with {engine}: {problem}" if problem else None


def transformers_keeps_mxfp4(cc: float | None, transformers_version: str | None) -> bool:
    """Whether a default transformers plan counts an MXFP4 checkpoint's experts packed (else dequantized)."""
    if cc is None:
        return False
    if transformers_version is not None:
        from fitcheck.plan import parse_transformers_version

        if parse_transformers_version(transformers_version) >= MXFP4_TRANSFORMERS_LOWER_SINCE:
            return cc >= (_MXFP4_TRANSFORMERS.min_cc or 0)
    return cc >= MXFP4_TRANSFORMERS_DEFAULT_CC


def engines_for(precision: str) -> list[str]:
    """Engines that load ``precision`` somewhere, in preference order (llama.cpp first for GGUF)."""
    order = ("llama.cpp", *ENGINE_ORDER[:2]) if precision in GGUF_TYPES else ENGINE_ORDER
    return [e for e in order if precision in ENGINES[e].precisions]


def default_engine(precision: str, kind: str, cc: float | None, device: str) -> str:
    """The engine a practitioner takes for ``precision`` here: llama.cpp for GGUF types, the CPU and
    partial offload; transformers otherwise; vLLM only when it is the one that runs it.  When none
    runs it here, the first that loads it at all (the verdict then says why it cannot run)."""
    candidates = engines_for(precision)
    if device in ("cpu", "offload") and "llama.cpp" in candidates:
        return "llama.cpp"
    for engine in candidates:
        if runs_here(engine, precision, kind, cc) is None:
            return engine
    return candidates[0]


def runnable_precisions(engine: str, kind: str, cc: float | None) -> list[str]:
    return [p for p in ENGINES[engine].precisions if runs_here(engine, p, kind, cc) is None]


def default_kv(engine: str, precision: str, kind: str, cc: float | None) -> str:
    """The engine's own KV-cache default: llama.cpp f16; otherwise the compute dtype (fp16 on GPUs
    without bf16, fp32 for fp32 weights)."""
    if engine == "llama.cpp":
        return "fp16"
    if precision in ("fp16", "fp32"):
        return precision
    if precision == "bf16":
        return "bf16"
    return "fp16" if (kind == CUDA and cc is not None and cc < 8.0) else "bf16"


# CPU feature flags (fitcheck.probe.cpu names) that run bf16 matmuls natively.
CPU_BF16_FEATURES = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def default_precision(machine: Machine, device: str, engine: str | None = None) -> tuple[str, str]:
    """(precision, why): the best format this machine runs with ``engine`` (or the engine that will
    be chosen): bf16 where supported, fp16 on older GPUs, q4_k_m for llama.cpp and CPU-only machines."""
    kind, cc = machine_kind(machine, device)
    if engine == "llama.cpp" or (kind == CPU and engine is None) or device == "offload":
        return "q4_k_m", ("CPU inference: the GGUF type llama.cpp users take" if kind == CPU
                          else "the GGUF type llama.cpp users take")
    if kind == CPU:  # transformers on the CPU
        if machine.cpu.features & CPU_BF16_FEATURES:
            return "bf16", "the CPU has bf16 instructions"
        return "fp32", "the CPU has no bf16 instructions"
    if kind == METAL:
        return "bf16", "Apple GPUs support bf16"
    if kind == CUDA and cc is not None and cc < 8.0:
        return "fp16", f"compute capability {cc:g} has no bf16"
    if kind == CUDA and cc is None:
        return "bf16", "bf16 assumed (compute capability unknown)"
    return "bf16", "the GPU supports bf16"


def usable_gpus(engine: str, visible: int, attention_heads: int) -> int:
    """GPUs an engine spreads over on a machine with ``visible``: all of them (layer split), or for
    tensor parallelism the largest power of two that divides the attention heads."""
    if visible < 1:
        return 0
    if ENGINES[engine].splits != "tensor":
        return visible
    tp = 1
    while tp * 2 <= visible and attention_heads % (tp * 2) == 0:
        tp *= 2
    return tp
