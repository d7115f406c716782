"""SGLang: `python -m sglang.launch_server`, weights and a KV pool inside mem_fraction_static of the GPU's memory.

Its rows of the capability table, its memory model (tensor parallel over every GPU of every node, or expert
parallel with data-parallel attention), its defaults (mem_fraction_static by TP size, a TP size that divides the
attention heads) and its launch commands.  Where SGLang's own logs give no figure (its CUDA context at init, NCCL's
buffers), vLLM's measurements of the same libraries stand in (fitcheck.engines.vllm.memory), and say so.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fitcheck.engines.capabilities import AWQ, CUDA_ROCM, FP8_MIN_CC, GPTQ, Runs
from fitcheck.engines.checkpoints import hf_checkpoint_known, needs_checkpoint, quantized_repo
from fitcheck.engines.serving import EpParts, ServingEngine
from fitcheck.engines.vllm.memory import VLLM_INIT_ONE_RANK, VLLM_INIT_RANKS, VLLM_NCCL_TP
from fitcheck.estimate.distributed import decode_comm
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.kv_cache import kv_cache_bytes
from fitcheck.estimate.parts import kv_detail
from fitcheck.estimate.result import ACTIVATIONS, KV_CACHE, OVERHEAD, Component, DeviceNeed, Memory
from fitcheck.options import DEFAULTS
from fitcheck.units import GiB, MiB

if TYPE_CHECKING:
    from fitcheck.model.spec import ModelSpec
    from fitcheck.plan import Plan

DEFAULT_GPU_MEMORY_UTILIZATION = DEFAULTS["gpu_memory_utilization"]
# SGLang: CUDA and ROCm builds (docs.sglang.ai, "Install SGLang": NVIDIA and AMD GPUs); its quantization
# methods (python/sglang/srt/server_args.py QUANTIZATION_CHOICES: fp8, awq, gptq, gptq_marlin, awq_marlin;
# docs.sglang.ai/advanced_features/quantization.html) and --kv-cache-dtype fp8_e4m3/fp8_e5m2.
RUNS = Runs(CUDA_ROCM, why="SGLang", verb="needs")
FP8 = Runs(CUDA_ROCM, FP8_MIN_CC, why="FP8 kernels")
# SGLang's --mem-fraction-static default: the share of total GPU memory for weights and the KV pool, by the
# tensor-parallel size (python/sglang/srt/server_args.py, ServerArgs.__post_init__, v0.4.6:
# https://github.com/sgl-project/sglang/blob/v0.4.6/python/sglang/srt/server_args.py — tp >= 16: 0.79,
# >= 8: 0.81, >= 4: 0.85, >= 2: 0.87, else 0.88).  The rest holds activations, CUDA graphs and NCCL buffers.
MEM_FRACTION_STATIC = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))
# Bytes: SGLang's CUDA context and CUDA graphs beside its static share (no SGLang log sizes them: an envelope).
NON_TORCH = 1024 * MiB
# SGLang's multi-node launch: the same command on every node with its --node-rank, --dist-init-addr the first
# node's address (docs.sglang.ai/references/multi_node_deployment/multi_node.html: `--tp 16 --dist-init-addr
# 172.16.4.52:20000 --nnodes 2 --node-rank 0`; its DeepSeek page uses port 5000).
INIT_PORT = 5000


def mem_fraction_static(tp: int) -> float:
    return next(f for size, f in MEM_FRACTION_STATIC if tp >= size)


def static_bytes(total: int, fraction: float, ranks: int) -> int:
    """What SGLang keeps for the weights and the KV pool on one GPU: mem_fraction_static of the memory free when it
    measures it, after the CUDA context and, with several ranks, NCCL's communicators exist.

    ModelRunner.init_torch_distributed returns ``min_per_gpu_memory`` (get_available_gpu_memory after
    initialize_model_parallel), and profile_max_num_token takes ``rest_memory = available_gpu_memory −
    total_gpu_memory × (1 − mem_fraction_static)`` once the weights are loaded, that free memory being its
    ``total_gpu_memory`` (sgl-project/sglang python/sglang/srt/model_executor/model_runner.py): the pool is
    mem_fraction_static × (total − what init holds) − the weights.  Published logs agree: Meta-Llama-3.1-8B at TP 1
    (SGLang's docs, 2025-01-23: 78.81 GiB free at load, 15.09 loaded, mem_fraction_static 0.88) 0.88 × 78.81 − 15.09
    = 54.26 GiB, 444,530 tokens of 128 KiB where it logs 444,500; Qwen3-14B at TP 4 on RTX 4090s (0.80; 23.08 free,
    7.08 loaded) 298,300 where it logs 298,447 (with the logs' own free memory; end to end +0.7 % and −6.4 %).
    What init holds is vLLM's measurement of the same libraries (vllm_outside_reservation's init: 0.5 GiB on one
    rank, the 2.05 GiB envelope with several; those two SGLang logs read 0.38 and 0.91), so the pool errs small
    with several ranks."""
    init = VLLM_INIT_RANKS if ranks > 1 else VLLM_INIT_ONE_RANK
    return int(max(total - init, 0) * fraction)


class Sglang(ServingEngine):
    name = "sglang"
    title = "SGLang"
    runs = RUNS
    precisions = {"fp32": RUNS, "bf16": RUNS, "fp16": RUNS, "fp8": FP8,
                  "gptq-int4": GPTQ, "gptq-int8": GPTQ, "int4": GPTQ, "awq": AWQ}
    kv_dtypes = ("fp16", "bf16", "fp32", "fp8")
    distribution = "sglang"
    lower_precisions = ("fp8", "gptq-int8", "awq", "gptq-int4")
    reservation_holds_activations = False
    ep_dense_mlp_split = True
    reserved_fact = "sglang_static_bytes"
    pool_share = "mem_fraction_static share"
    pool_flag = "--gpu-memory-utilization (SGLang's --mem-fraction-static)"

    multi_node_words = "SGLang's (tensor parallel over all nodes)"
    nodes_words = "tensor parallel"

    def layout(self, plan: Plan) -> str:
        if plan.device != "cpu" and not plan.expert_parallel and plan.world > 1:
            return f"tensor parallel {plan.world}" + (f" over {plan.nodes} nodes" if plan.nodes > 1 else "")
        return super().layout(plan)

    def reservation(self, step: Any) -> None:
        """mem_fraction_static (--gpu-memory-utilization when given, else SGLang's default by TP size); a TP size
        that does not divide the attention heads cannot run."""
        req, nodes = step.req, step.req.nodes
        tp = max(step.gpus, 1) * nodes
        heads = step.spec.num_attention_heads
        if tp > 1 and not req.expert_parallel and heads and heads % tp:
            step.problem(f"SGLang's tensor parallel size {tp} ({nodes} node{'s' if nodes > 1 else ''} × "
                         f"{max(step.gpus, 1)} GPUs) must divide the {heads} attention heads")
        if req.gpu_memory_utilization != DEFAULT_GPU_MEMORY_UTILIZATION:
            fraction, why = req.gpu_memory_utilization, "from --gpu-memory-utilization (SGLang --mem-fraction-static)"
        else:
            fraction, why = mem_fraction_static(tp), f"SGLang's default for tp {tp} (server_args.py)"
        step.note("mem_fraction_static", f"{fraction:g}", why, "--gpu-memory-utilization")
        step.fields["mem_fraction_static"] = fraction

    def read_devices(self, plan: Plan) -> int:
        return 1 if plan.expert_parallel else plan.world  # its tensor parallel spans every node's GPUs

    def decode_comm(self, spec: ModelSpec, plan: Plan, machine: Any) -> Any:
        return decode_comm(spec, plan, machine, tp_over_nodes=True)

    def rope_cache_fp32(self, spec: ModelSpec, plan: Plan) -> bool:
        # "cache needs to be in FP32 for numerical stability" on CUDA; the model dtype elsewhere.  A compute
        # capability marks an NVIDIA GPU.
        return plan.compute_capability is not None

    def gpus_for(self, visible: int, spec: ModelSpec, nodes: int, expert_parallel: bool) -> int:
        """TP spans the nodes: the per-node count whose total divides the attention heads."""
        gpus = super().gpus_for(visible, spec, nodes, expert_parallel)
        if nodes > 1 and not expert_parallel:
            while gpus > 1 and spec.num_attention_heads % (gpus * nodes):
                gpus //= 2
        return gpus

    def ep_parts(self, spec: ModelSpec, plan: Plan, world: int) -> EpParts:
        from fitcheck.engines.vllm import profile as A

        act_c = Component(ACTIVATIONS, A.vllm_profile_bytes(spec, 1, 2, sampler="logits"),
                          f"profiled peak for {A.VLLM_PROFILE_TOKENS} batched tokens per rank and the sampler")
        over_c = Component(OVERHEAD, NON_TORCH + VLLM_NCCL_TP, "CUDA context and CUDA graphs, NCCL and "
                           "all-to-all buffers", counted_in="runtime")
        fraction = plan.mem_fraction_static or 0.88
        static = static_bytes(plan.gpu_total_bytes, fraction, world) if plan.gpu_total_bytes else None
        return EpParts(act_c, over_c, static, None, None)

    def memory(self, spec: ModelSpec, plan: Plan) -> Any:
        from fitcheck.engines import serving

        return serving.expert_parallel(self, spec, plan) if plan.expert_parallel else memory(self, spec, plan)

    def checkpoint_known(self, spec: ModelSpec, plan: Plan) -> bool:
        return hf_checkpoint_known(spec, plan)

    def command(self, model_id: str, plan: Plan, repos: Mapping[str, str], local: bool = False) -> str:
        line, comment = serve_command(model_id, plan, repos, 0)
        if plan.nodes > 1:
            comment += ("  # on node 0 (HEAD_IP); the same on node 1 with --node-rank 1" if plan.nodes == 2 else
                        f"  # on node 0 (HEAD_IP); the same on each other node with --node-rank R "
                        f"(1..{plan.nodes - 1})")
        return line + comment

    def launch_lines(self, model_id: str, plan: Plan, repos: Mapping[str, str]) -> tuple[str, ...]:
        if plan.nodes <= 1:
            return ()
        return tuple(f"node {r}{' (HEAD_IP)' if r == 0 else ''}: {''.join(serve_command(model_id, plan, repos, r))}"
                     for r in range(plan.nodes))


def memory(engine: Sglang, spec: ModelSpec, plan: Plan) -> Any:
    """SGLang with tensor parallelism over every GPU of every node (``--tp N·G --nnodes N``)."""
    from fitcheck.engines import serving
    from fitcheck.engines.vllm import profile as A

    tp = plan.world
    wb = engine.weights(spec, plan.precision)
    kv_total = kv_cache_bytes(spec, tokens=plan.context, sequences=plan.batch, kv_dtype=plan.kv_dtype, engine=engine)
    # MLA: SGLang's MLA backends keep the whole latent on every TP rank; other models split KV heads.
    kv_share = 1.0 if spec.is_mla else max(1.0, tp / max(spec.num_kv_heads, 1)) / tp
    weights_c = serving.tp_weights(spec, plan, wb, tp)
    kv_c = Component(KV_CACHE, int(kv_total * kv_share), kv_detail(spec, plan, engine, kv_share))
    act_c = Component(ACTIVATIONS, A.vllm_profile_bytes(spec, tp, 2, sampler="logits"),
                      f"a chunked-prefill step of {A.VLLM_PROFILE_TOKENS:,} tokens (SGLang's chunked_prefill_size "
                      "on GPUs of 25 GB and more) and the sampler")
    nccl = VLLM_NCCL_TP if tp > 1 else 0
    over_c = Component(OVERHEAD, NON_TORCH + nccl, "CUDA context and CUDA graphs"
                       + (f", NCCL communicators ({nccl / GiB:.2f} GiB, as vLLM logs them)" if nccl else ""),
                       counted_in="runtime")
    fraction = plan.mem_fraction_static or 0.88
    static = static_bytes(plan.gpu_total_bytes, fraction, tp) if plan.gpu_total_bytes else None
    comps, pool = serving.static_pool(engine, weights_c, kv_c, act_c, over_c, static,
                                      rope_c=serving.rope_cache_component(spec, plan, engine), sequences=plan.batch)
    devices = [DeviceNeed(f"gpu{i}", "gpu", tuple(comps)) for i in range(tp)]
    facts: list[tuple[str, float | int | str]] = [("tensor_parallel_size", tp)]
    kv_pool = None
    if static is not None and pool is not None:
        tokens = serving.pool_tokens(pool, kv_c.bytes / max(plan.context * plan.batch, 1))
        kv_pool = serving.pool_of(engine, plan, static, pool, tokens)
        facts += serving.pool_facts(engine, kv_pool)
    notes = [f"SGLang keeps mem_fraction_static {fraction:g} × the GPU memory free after its CUDA context"
             f"{' and NCCL' if tp > 1 else ''} for weights and the KV pool; "
             "activations, CUDA graphs and NCCL use the rest"]
    if tp > 1:
        notes.append(f"tensor parallel over {tp} GPUs" + (f" of {plan.nodes} nodes (--tp {tp} --nnodes {plan.nodes})"
                                                          if plan.nodes > 1 else ""))
    return Memory(devices, facts, notes, kv_pool)


def serve_command(model_id: str, plan: Plan, repos: Mapping[str, str], rank: int) -> tuple[str, str]:
    """`python -m sglang.launch_server ...` (docs.sglang.ai/advanced_features/server_arguments.html)."""
    repo, prequantized = quantized_repo(model_id, plan.precision, repos)
    args = ["python", "-m", "sglang.launch_server", "--model-path", repo, "--context-length", str(plan.context)]
    if plan.batch > 1:
        args += ["--max-running-requests", str(plan.batch)]
    comment = ""
    # docs.sglang.ai, DeepSeek usage: "already in FP8 format, so you should not run it with any quantization
    # arguments like --quantization fp8"; a 16-bit checkpoint is quantized at load with it.
    if plan.precision == "fp8" and not prequantized and not plan.stored_format:
        args += ["--quantization", "fp8"]
    elif weight_format(plan.precision).family in ("gptq", "awq") and not prequantized:
        comment = needs_checkpoint(model_id, plan.precision)
    elif plan.precision in ("fp16", "fp32"):
        args += ["--dtype", {"fp16": "float16", "fp32": "float32"}[plan.precision]]
    if plan.kv_dtype == "fp8":
        args += ["--kv-cache-dtype", "fp8_e4m3"]
    if plan.world > 1:
        args += ["--tp", str(plan.world)]
    if plan.expert_parallel:
        args += ["--dp", str(plan.world), "--enable-dp-attention", "--ep-size", str(plan.world)]
    if plan.nodes > 1:
        args += ["--nnodes", str(plan.nodes), "--node-rank", str(rank), "--dist-init-addr", f"HEAD_IP:{INIT_PORT}"]
    if plan.gpu_memory_utilization != DEFAULT_GPU_MEMORY_UTILIZATION and plan.mem_fraction_static is not None:
        args += ["--mem-fraction-static", f"{plan.mem_fraction_static:g}"]
    if plan.yarn is not None:
        args += ["--json-model-override-args", json.dumps({"rope_scaling": plan.yarn.rope()})]
    return (f"{ALLOW_LONG_ENV} " if plan.beyond_max_context else "") + shlex.join(args), comment


# A --context-length past the config's maximum: SGLang refuses it unless this is set (its derived context length
# ignores a YaRN factor that names original_max_position_embeddings: srt/configs/model_config.py,
# get_context_length and _derive_context_length); the RoPE override itself is --json-model-override-args
# (docs.sglang.ai/advanced_features/server_arguments.html).
ALLOW_LONG_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"


ENGINE = Sglang()
