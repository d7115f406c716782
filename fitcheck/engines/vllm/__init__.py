"""vLLM: `vllm serve`, a KV pool inside a reservation of gpu_memory_utilization × total GPU memory.

Its rows of the capability table, its KV layout (the hybrid KV-cache manager for sliding-window layers), its
memory model (fitcheck.engines.vllm.memory), its profiled activation peak (profile) and the commands that
launch a plan on one node or several (a Ray cluster, or data-parallel ranks for expert parallel).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fitcheck.engines.capabilities import AWQ, BNB, BNB_INT8, CUDA_ROCM, FP8, GPTQ, Runs
from fitcheck.engines.checkpoints import hf_checkpoint_known, needs_checkpoint, quantized_repo
from fitcheck.engines.serving import EpParts, ServingEngine
from fitcheck.estimate.distributed import decode_comm
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.kv_cache import SlidingCache, layer_counts
from fitcheck.estimate.result import ACTIVATIONS, OVERHEAD, Component
from fitcheck.options import DEFAULTS
from fitcheck.speed.efficiency import pcie_bytes_per_s

if TYPE_CHECKING:
    from fitcheck.model.spec import ModelSpec
    from fitcheck.plan import Plan

DEFAULT_GPU_MEMORY_UTILIZATION = DEFAULTS["gpu_memory_utilization"]
# vLLM on CUDA: "compute capability 7.0 or higher" (docs.vllm.ai, "GPU installation, Requirements"); ROCm builds.
VLLM_MIN_CC = 7.0
GPU_SERVING = Runs(CUDA_ROCM, VLLM_MIN_CC, why="vLLM", verb="needs")
# vLLM refuses bf16 below compute capability 8.0 ("Bfloat16 is only supported on GPUs with compute capability
# of at least 8.0 ... use float16 instead": _check_if_gpu_supports_dtype, vllm/worker/worker.py; since v0.8
# CudaPlatform.check_if_supports_dtype, vllm/platforms/cuda.py).
BF16 = Runs(CUDA_ROCM, 8.0, why="vLLM's bf16 kernels")
# vLLM's gpt-oss recipe: H100/H200/B200 and MI300x/MI325x/MI355x, and Ampere (A100) by default with
# the Marlin MXFP4 MoE kernel.  https://github.com/vllm-project/recipes/blob/main/OpenAI/GPT-OSS.md
MXFP4 = Runs(CUDA_ROCM, 8.0, why="vLLM's MXFP4 MoE kernels")
# v0.19.0 turns its hybrid KV-cache manager off for chunked local attention (Llama 4) unless
# VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 ("There is a latency regression when using chunked local
# attention with the hybrid KV cache manager. Disabling it, by default.",
# https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/config/vllm.py): every layer keeps every token.
FULL_CACHE_ARCHITECTURES = frozenset({"llama4"})
_SERVING_QUANTIZED = ("fp8", "gptq-int8", "awq", "gptq-int4")


class Vllm(ServingEngine):
    name = "vllm"
    title = "vLLM"
    runs_installed_package = True
    runs = GPU_SERVING
    precisions = {"fp32": GPU_SERVING, "bf16": BF16, "fp16": GPU_SERVING, "fp8": FP8, "int8": BNB_INT8, "nf4": BNB,
                  "gptq-int4": GPTQ, "gptq-int8": GPTQ, "int4": GPTQ, "awq": AWQ, "mxfp4": MXFP4}
    kv_dtypes = ("fp16", "bf16", "fp32", "fp8")
    offloads = frozenset({"streamed"})
    distribution = "vllm"
    lower_precisions = ("mxfp4", *_SERVING_QUANTIZED)
    keeps_packed_experts = True
    reserved_fact = "vllm_reserved_bytes"

    multi_node_words = "vLLM's (tensor parallel within a node, pipeline parallel across nodes)"
    nodes_words = "tensor parallel within a node × pipeline parallel"

    def layout(self, plan: Plan) -> str:
        if plan.device != "cpu" and not plan.expert_parallel and plan.nodes > 1:
            return f"tensor parallel {plan.gpus} × pipeline parallel {plan.nodes}"
        return super().layout(plan)

    def layout_key(self, plan: Plan) -> str:
        return "tensor-parallel+pipeline-parallel" if plan.nodes > 1 else "tensor-parallel"

    def reservation(self, step: Any) -> None:
        util = step.req.gpu_memory_utilization
        step.note("gpu_memory_utilization", f"{util:g}", "vLLM default" if util == DEFAULT_GPU_MEMORY_UTILIZATION
                  else "from --gpu-memory-utilization", "--gpu-memory-utilization")

    def streamed_bytes(self, plan: Plan) -> int:
        from fitcheck.engines.vllm.memory import cpu_offload_bytes

        return cpu_offload_bytes(plan.cpu_offload_gb) if plan.cpu_offload_gb else 0

    def prefill_copy_seconds(self, spec: ModelSpec, plan: Plan, machine: Any) -> tuple[float, bool]:
        """--cpu-offload-gb: vLLM's chunked prefill runs max_num_batched_tokens per step, the weights streamed once
        per step."""
        if not plan.cpu_offload_gb or not machine.gpus:
            return 0.0, False
        from fitcheck.engines.vllm.profile import vllm_batch_defaults

        chunk = min(plan.prompt_tokens, vllm_batch_defaults(plan.gpu_total_bytes, plan.compute_capability)[0])
        return self.streamed_bytes(plan) / (pcie_bytes_per_s(machine) * chunk), False

    def decode_comm(self, spec: ModelSpec, plan: Plan, machine: Any) -> Any:
        return decode_comm(spec, plan, machine, tp_over_nodes=False)

    def kv_layer_slots(self, spec: ModelSpec) -> tuple[int, int]:
        """(full-attention, sliding-window) layers vLLM v0.19.0's hybrid KV-cache manager allots blocks for.

        With both kinds, it groups the layers of each kind into KV-cache groups of one size (the smaller count,
        or the larger when it is under 1.5 × the smaller) and pads the last group of a kind with empty layers;
        every group's block takes a page in each of the group-size memory pools, so a kind of n layers costs
        ceil(n / size) × size layers' memory (_get_kv_cache_groups_uniform_page_size and
        get_kv_cache_config_from_groups, https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/v1/core/
        kv_cache_utils.py; "Add %d padding layers, may waste at most ... KV cache memory").  Gemma 3 27B: 10 full
        + 52 sliding layers in groups of 10, so 10 + 60 layers' memory."""
        full, sliding = layer_counts(spec)
        if not full or not sliding or spec.architecture in FULL_CACHE_ARCHITECTURES:
            return full, sliding
        size = min(full, sliding)
        if max(full, sliding) < size * 1.5:
            size = max(full, sliding)
        return -(-full // size) * size, -(-sliding // size) * size

    def sliding_cache(self, spec: ModelSpec, *, tokens: int, prompt_tokens: int | None = None,
                      transformers_version: str | None = None, batched_tokens: int | None = None) -> SlidingCache:
        """vLLM's hybrid KV-cache manager frees the blocks that fall outside the window.  v0.19.0 sizes a
        sliding-window layer's blocks per request for the window's last window - 1 tokens plus a whole
        chunked-prefill step: min(window - 1 + max_num_batched_tokens, max_model_len)
        (SlidingWindowSpec.max_memory_usage_bytes, plus one block for a window that starts mid-block,
        https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/v1/kv_cache_interface.py)."""
        window = spec.sliding_window or 0
        if spec.architecture in FULL_CACHE_ARCHITECTURES:
            return SlidingCache(tokens, tokens, f"window {window:,} (chunked local attention), but vLLM v0.19.0 "
                                                "turns its hybrid KV-cache manager off for it by default: every token")
        held = min(tokens, window - 1 + batched_tokens) if batched_tokens else min(tokens, window)
        return SlidingCache(tokens, held,
                            f"window {window:,}" + (f" + a chunked-prefill step of {batched_tokens:,} tokens"
                                                    if batched_tokens else "")
                            + ": vLLM's hybrid KV-cache manager frees the blocks outside it")

    def rope_cache_fp32(self, spec: ModelSpec, plan: Plan) -> bool:
        return spec.architecture == "gpt_oss"  # vLLM's gpt_oss.py: get_rope(..., dtype=torch.float32)

    def ep_parts(self, spec: ModelSpec, plan: Plan, world: int) -> EpParts:
        from fitcheck.engines.vllm import memory as M
        from fitcheck.engines.vllm import profile as A

        batched, seqs = A.vllm_batch_defaults(plan.gpu_total_bytes, plan.compute_capability)
        triton_moe = weight_format(plan.precision).name in ("bf16", "fp16", "fp32")
        act_c = Component(ACTIVATIONS, A.vllm_profile_bytes(spec, 1, 2, tokens=batched, seqs=seqs,
                                                             sms=A.max_sms(plan.compute_capability),
                                                             moe_workspace=triton_moe),
                          f"profiled peak for {batched:,} batched tokens per rank and the sampler")
        # NCCL and all-to-all buffers inside the reservation; the context, NCCL's communicators and the graphs
        # beyond it (memory.vllm_outside_reservation)
        over_c = Component(OVERHEAD, M.VLLM_PROFILE_NON_TORCH + M.VLLM_NCCL_TP, "NCCL and all-to-all buffers, "
                           "kernel images and library handles, inside the reservation", counted_in="runtime")
        outside = M.vllm_outside_reservation(spec, spec.num_layers, world)
        beyond = Component(OVERHEAD, outside, f"CUDA context, NCCL's communicators and the CUDA graphs of "
                           f"{spec.num_layers} layers, beyond vLLM's reservation: the upper envelope of vLLM "
                           "v0.19.0's startup logs", counted_in="runtime")
        static = int(plan.gpu_total_bytes * plan.gpu_memory_utilization) if plan.gpu_total_bytes else None
        return EpParts(act_c, over_c, static, beyond, batched)

    def memory(self, spec: ModelSpec, plan: Plan) -> Any:
        from fitcheck.engines import serving
        from fitcheck.engines.vllm.memory import memory

        return serving.expert_parallel(self, spec, plan) if plan.expert_parallel else memory(self, spec, plan)

    def checkpoint_known(self, spec: ModelSpec, plan: Plan) -> bool:
        return hf_checkpoint_known(spec, plan)

    def command(self, model_id: str, plan: Plan, repos: Mapping[str, str], local: bool = False) -> str:
        serve, comment = serve_command(model_id, plan, repos)
        if plan.expert_parallel and plan.nodes > 1:
            others = plan.nodes - 1
            worker = serve_command(model_id, plan, repos, rank=plan.gpus)[0]
            return (f"{serve}{comment}  # then on the other {others} node{'s' if others > 1 else ''} (node R starts "
                    f"rank R×{plan.gpus}): {worker}")
        if plan.nodes > 1:
            others = plan.nodes - 1
            return (f"{RAY_HEAD} && {serve}{comment}  # first, on the other {others} node"
                    f"{'s' if others > 1 else ''}: {RAY_WORKER}")
        return serve + comment

    def launch_lines(self, model_id: str, plan: Plan, repos: Mapping[str, str]) -> tuple[str, ...]:
        if plan.nodes <= 1:
            return ()
        if plan.expert_parallel:
            return (f"node 0 (HEAD_IP): {serve_command(model_id, plan, repos)[0]}",
                    *(f"node {r}: {serve_command(model_id, plan, repos, rank=r * plan.gpus)[0]}"
                      for r in range(1, plan.nodes)))
        serve, comment = serve_command(model_id, plan, repos)
        return (f"head node (node 0): {RAY_HEAD}",
                (f"node 1: {RAY_WORKER}" if plan.nodes == 2 else f"each of nodes 1..{plan.nodes - 1}: {RAY_WORKER}"),
                f"then on the head node: {serve}{comment}")


# vLLM's multi-node serving: a Ray cluster, then `vllm serve` on the head node
# (docs.vllm.ai/en/stable/serving/distributed_serving.html, "Running vLLM on multiple nodes").
RAY_PORT = 6379
RAY_HEAD = f"ray start --head --port={RAY_PORT}"
RAY_WORKER = f"ray start --address=HEAD_IP:{RAY_PORT}"
# vLLM's data-parallel coordination port in its multi-node DP/EP example (data_parallel_deployment.html).
VLLM_DP_RPC_PORT = 13345


def serve_command(model_id: str, plan: Plan, repos: Mapping[str, str], rank: int = 0) -> tuple[str, str]:
    """(`vllm serve ...`, a trailing comment or ''); ``rank``: the first data-parallel rank of a headless node."""
    repo, prequantized = quantized_repo(model_id, plan.precision, repos)
    args = ["vllm", "serve", repo, "--max-model-len", str(plan.context)]
    if plan.batch > 1:
        args += ["--max-num-seqs", str(plan.batch)]
    fmt = weight_format(plan.precision)
    comment = ""
    if plan.precision == "fp8" and not prequantized and not plan.stored_format:
        args += ["--quantization", "fp8"]  # online dynamic FP8 quantization of a 16-bit checkpoint
    elif fmt.family in ("gptq", "awq") and not prequantized:
        comment = needs_checkpoint(model_id, plan.precision)
    elif plan.precision in ("int8", "nf4"):
        args += ["--quantization", "bitsandbytes"]
    elif plan.precision in ("fp16", "fp32"):
        args += ["--dtype", {"fp16": "float16", "fp32": "float32"}[plan.precision]]
    if plan.kv_dtype == "fp8":
        args += ["--kv-cache-dtype", "fp8"]
    if plan.expert_parallel:
        # docs.vllm.ai/en/latest/serving/data_parallel_deployment.html: one rank per GPU, experts over all ranks
        args += ["--data-parallel-size", str(plan.world), "--enable-expert-parallel"]
        if plan.nodes > 1:
            args += ["--data-parallel-size-local", str(plan.gpus), "--data-parallel-address", "HEAD_IP",
                     "--data-parallel-rpc-port", str(VLLM_DP_RPC_PORT)]
            if rank:
                args.insert(3, "--headless")
                args += ["--data-parallel-start-rank", str(rank)]
    elif plan.gpus > 1:
        args += ["--tensor-parallel-size", str(plan.gpus)]
    if plan.nodes > 1 and not plan.expert_parallel:
        args += ["--pipeline-parallel-size", str(plan.nodes), "--distributed-executor-backend", "ray"]
    if plan.gpu_memory_utilization != DEFAULT_GPU_MEMORY_UTILIZATION:
        args += ["--gpu-memory-utilization", f"{plan.gpu_memory_utilization:g}"]
    if plan.cpu_offload_gb:
        args += ["--cpu-offload-gb", f"{plan.cpu_offload_gb:g}"]
    return long_context_env(plan) + shlex.join(args + long_context_args(plan)), comment


# A --max-model-len past the config's maximum: vLLM refuses to start ("User-specified max_model_len ... is greater
# than the derived max_model_len") unless the RoPE scaling reaches it (YaRN multiplies the derived length by its
# factor) or VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set (vllm/config/model.py, _get_and_verify_max_len, v0.19.0).
# The RoPE override: docs.vllm.ai/en/stable/features/context_extension/ (--rope-scaling is no longer supported).
ALLOW_LONG_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"


def long_context_args(plan: Plan) -> list[str]:
    """--hf-overrides with the publisher's YaRN recipe, for a context past the model's maximum."""
    if plan.yarn is None:
        return []
    return ["--hf-overrides", json.dumps({"rope_parameters": plan.yarn.rope(with_theta=True)})]


def long_context_env(plan: Plan) -> str:
    """The environment prefix that lets vLLM start past the maximum with no RoPE scaling known ('' else)."""
    return f"{ALLOW_LONG_ENV} " if plan.beyond_max_context and plan.yarn is None else ""


ENGINE = Vllm()
