"""Weights kept in RAM while the GPU runs the rest: llama.cpp's MoE expert offload (and, for comparison, vLLM's
``--cpu-offload-gb``, fitcheck.engines.vllm.memory.cpu_offload_bytes).  Pure.

llama.cpp ``--n-cpu-moe N`` / ``--cpu-moe`` (common/arg.cpp, pinned below) add tensor-buffer
overrides ``blk.{i}.ffn_(up|down|gate)_exps=CPU`` for the first N blocks (all blocks with
``--cpu-moe``); everything else — attention, norms, router, shared experts, dense FFNs, the output
head and the KV cache of every layer — stays on the GPU with ``-ngl 999``.  Per decode step the
GPU reads its weights from VRAM and the CPU reads, from RAM, the experts the router picked in the
offloaded layers (k of E per token).  For prompt batches of at least
``LLAMA_CPP_OFFLOAD_MIN_BATCH`` tokens the CUDA backend runs the expert matmuls on the GPU anyway,
copying the offloaded expert tensors over PCIe for each micro-batch (ggml-cuda.cu,
``ggml_backend_cuda_device_offload_op``), so prefill is bound by PCIe, not by the CPU.

vLLM ``--cpu-offload-gb X`` (vllm/config/cache.py, pinned below): "a virtual way to increase the
GPU memory size … part of the model is loaded from CPU memory to GPU memory on the fly in each
model forward pass" — X GiB per GPU live in pinned RAM and cross PCIe once per forward pass.

Why it beats ``-ngl`` for a mixture of experts: ``-ngl`` puts whole layers (their attention, KV
cache and every expert) on the CPU, so the CPU reads each offloaded layer's attention and cache as
well; expert offload reads from RAM only the k experts a token picks, and gives the GPU's memory to
the always-active weights.  Published: Qwen3.5-35B-A3B Q4_K_M on a 12 GB RTX 4070 decodes at 12.2
tok/s with Ollama's layer split and 34.6 tok/s with ``-ngl 99 --cpu-moe``
(https://dev.to/kenimo49/rtx-4070-qwen-35b-28x-speedup-from-one-llamacpp-flag-cpu-moe-569o); the
options came with https://github.com/ggml-org/llama.cpp/pull/15077 ("reduce the number until the
model no longer fits on the GPU").  The ranking (fitcheck.search) charges expert offload the
share of a decode step's weight bytes read from RAM, as it charges ``-ngl`` the share of layers on
the CPU (which is the share of bytes those layers read from RAM).

Sources:
https://github.com/ggml-org/llama.cpp/blob/145b6280d6aa1890e22457143dad0badb3fd6820/common/arg.cpp
  (--cpu-moe, --n-cpu-moe);
https://github.com/ggml-org/llama.cpp/blob/f6d77a1ba0ac794e950bd3abb630b904bdcd8fb8/ggml/src/ggml-cuda/ggml-cuda.cu
  (ggml_backend_cuda_device_offload_op: ``min_batch_size = 32``, MUL_MAT_ID counts tokens in ne[2]);
https://github.com/vllm-project/vllm/blob/c1d86421174a87056edc90a41dc9942391509e84/vllm/config/cache.py
  (cpu_offload_gb).
"""

from __future__ import annotations

from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.weights import weight_bytes
from fitcheck.model import spec as S
from fitcheck.model.spec import ModelSpec

# ggml's CUDA backend takes over an op whose weights live in host memory once its batch reaches
# this many tokens (ggml_backend_cuda_device_offload_op; --no-op-offload turns it off).
LLAMA_CPP_OFFLOAD_MIN_BATCH = 32


def offloaded_moe_layers(spec: ModelSpec, cpu_moe: int) -> int:
    """MoE layers among the first ``cpu_moe`` blocks (dense layers come first: DeepSeek's
    first_k_dense_replace; a dense block has no ``ffn_*_exps`` tensor for the override to move)."""
    if not spec.is_moe or cpu_moe <= 0:
        return 0
    return max(0, min(cpu_moe, spec.num_layers) - spec.num_dense_layers)


def expert_bytes(spec: ModelSpec, precision: str) -> int:
    """Bytes of all routed experts (every MoE layer) stored as ``precision``."""
    return dict(weight_bytes(spec, weight_format(precision)).by_group).get(S.EXPERTS, 0)


def offloaded_expert_bytes(spec: ModelSpec, precision: str, cpu_moe: int) -> int:
    """Bytes of routed experts ``--n-cpu-moe cpu_moe`` keeps in RAM (an average layer's share each)."""
    moe = spec.num_moe_layers
    if not moe:
        return 0
    return int(expert_bytes(spec, precision) * offloaded_moe_layers(spec, cpu_moe) / moe)


def one_layer_expert_bytes(spec: ModelSpec, precision: str) -> int:
    """One MoE layer's routed expert tensors: what a prompt micro-batch copies to the GPU at a time."""
    moe = spec.num_moe_layers
    return int(expert_bytes(spec, precision) / moe) if moe else 0
