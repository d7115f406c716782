"""The one capability table's vocabulary: device kinds, where a kernel runs, and the rules every engine shares.

Device kinds: ``cuda`` (NVIDIA, with a compute capability), ``rocm`` (AMD), ``metal`` (Apple),
``xpu`` (Intel GPUs) and ``cpu``.  A :class:`Runs` says on which kinds one thing runs (a weights format,
a KV-cache type, an attention kernel, an optimizer, an engine itself) and the lowest CUDA compute
capability where there is one.  Each engine module (fitcheck.engines.*) lists its own rows built from
the shared ones below; validation, defaults, alternatives and the installed-stack check
(fitcheck.engines.stack) all ask these same rows, so "does X run on Y" has one answer.

Two kinds of answer come out of it:
- a pair no machine runs (a GGUF type in vLLM, a q8_0 KV cache in transformers) is a malformed
  request when the user typed both (exit 2); a default never lands on one;
- a pair this machine cannot run (AWQ on Apple, fp8 below compute capability 8.9, vLLM on a CPU or
  a Pascal GPU) is a verdict, "cannot run here" (exit 1), with the alternatives that do run.
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
            shown = "unknown" if cc is None else f"{cc:.1f}"
            return (f"{self.why or 'its kernels'} {self.verb} compute capability >= {self.min_cc:.1f} "
                    f"(this GPU: {shown})")
        return None


def _kinds_text(kinds: frozenset[str]) -> str:
    names = [KIND_NAMES[k] for k in DEVICE_KINDS if k in kinds]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


# ---- kernels several engines share ----------------------------------------------------------------
# bitsandbytes: CUDA, and ROCm through its multi-backend preview; no Apple Metal backend.  LLM.int8() needs
# compute capability 7.5 (Turing), NF4/FP4 5.0 ("LLM.int8() 7.5+ Turing ... NF4/FP4 quantization 5.0+",
# https://huggingface.co/docs/bitsandbytes/v0.46.0/installation).  The ROCm preview starts with 0.44 (the
# installation guide of v0.44.1 first documents the multi-backend alpha: https://huggingface.co/docs/bitsandbytes/
# v0.44.1/installation); fitcheck.engines.stack checks an installed release against it.
BNB = Runs(CUDA_ROCM, why="bitsandbytes kernels")
BNB_INT8 = Runs(CUDA_ROCM, 7.5, why="bitsandbytes' LLM.int8() kernels")
BITSANDBYTES_ROCM_MIN = (0, 44)
GPTQ = Runs(CUDA_ROCM, why="GPTQ kernels")
AWQ = Runs(CUDA_ROCM, why="AWQ kernels")
# FP8 tensor cores: compute capability 8.9 (Ada) and 9.0 (Hopper) (CUDA C++ Programming Guide, "Compute
# Capabilities"; vLLM's FP8 W8A8, docs.vllm.ai/en/latest/features/quantization/fp8).  The one home of the rule:
# weights, KV cache and the installed-stack check read it here.
FP8_MIN_CC = 8.9
FP8 = Runs(CUDA_ROCM, FP8_MIN_CC, why="FP8 kernels")
ANY = Runs(ALL)
# flash-attention 2: "Ampere, Ada, or Hopper GPUs" or ROCm (Dao-AILab/flash-attention README, "Installation and
# features": FlashAttention 1.x for Turing).
FLASH_ATTENTION_MIN_CC = 8.0
FLASH_ATTENTION = Runs(CUDA_ROCM, FLASH_ATTENTION_MIN_CC, why="flash-attention 2", verb="needs")

# ---- training: optimizers, attention kernels, sharding, base-weight formats -------------------------
OPTIMIZER_RUNS = {"adamw": ANY, "sgd": ANY, "adafactor": ANY,
                  "adamw-8bit": Runs(CUDA_ROCM, why="bitsandbytes' 8-bit optimizers"),
                  "paged-adamw-8bit": Runs(CUDA_ROCM, why="bitsandbytes' 8-bit optimizers")}
ATTENTION_RUNS = {"sdpa": ANY, "eager": ANY, "flash": FLASH_ATTENTION}
# DeepSpeed and FSDP communicate over NCCL (CUDA) or RCCL (ROCm).
SHARDING_RUNS = Runs(CUDA_ROCM, why="DeepSpeed and FSDP (NCCL/RCCL)")
TRAINING_BASE_RUNS = {"bf16": ANY, "fp16": Runs(GPU_KINDS, why="fp16 mixed precision", verb="needs"), "fp32": ANY,
                      "int8": BNB_INT8, "nf4": BNB, "gptq-int4": GPTQ, "int4": GPTQ, "awq": AWQ}


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


def here_text(kind: str, cc: float | None, why_not: str = "") -> str:
    """'; here: an NVIDIA GPU (CUDA) (compute capability 6)' for a problem sentence (the capability named once)."""
    shown = f" (compute capability {cc:g})" if cc is not None and "compute capability" not in why_not else ""
    return f"; here: {KIND_NAMES[kind]}{shown}"


# CPU feature flags (fitcheck.probe.cpu names) that run bf16 matmuls natively.
CPU_BF16_FEATURES = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
# NVIDIA GPUs have bf16 from compute capability 8.0 (Ampere).
BF16_MIN_CC = 8.0


def has_bf16(kind: str, cc: float | None) -> bool:
    """Whether a GPU of this kind computes in bf16 (CUDA below 8.0 does not; an unknown capability is taken as yes)."""
    return not (kind == CUDA and cc is not None and cc < BF16_MIN_CC)


def half_dtype(kind: str, cc: float | None) -> str:
    """The 16-bit compute dtype a GPU has: bf16, else fp16 (a T4 or V100)."""
    return "bf16" if has_bf16(kind, cc) else "fp16"
