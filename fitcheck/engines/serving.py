"""What the serving engines (vLLM, SGLang) share: a reservation taken at start with a KV pool inside it, tensor
parallel weights, the rotary cache every rank builds, and the expert-parallel layout.  Each engine module says
how large its reservation is and what lives inside it (:class:`ServingEngine`); the arithmetic is here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from fitcheck.engines.base import POOLED, Engine
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.kv_cache import kv_cache_bytes
from fitcheck.estimate.parts import act_bytes, kv_detail, stored_weight_total, weights_component
from fitcheck.estimate.result import KV_CACHE, WEIGHTS, Component, DeviceNeed, Memory, Pool
from fitcheck.model import spec as S
from fitcheck.speed.efficiency import GRAPH_KERNEL_LATENCY_S, Efficiency
from fitcheck.units import GiB

if TYPE_CHECKING:
    from fitcheck.estimate.weights import WeightBytes
    from fitcheck.model.spec import ModelSpec
    from fitcheck.plan import Plan


@dataclass(frozen=True)
class EpParts:
    """What one expert-parallel rank holds besides its weights and KV cache (ServingEngine.ep_parts)."""

    activations: Component
    overhead: Component            # inside the reservation (vLLM) or beside it (SGLang)
    reservation: int | None        # the engine's up-front share on one GPU (None: total memory unknown)
    beyond: Component | None       # what the engine keeps beyond its reservation (vLLM), else None
    batched_tokens: int | None     # the chunked-prefill step its sliding-window layers keep room for


class ServingEngine(Engine):
    """A server with a KV pool (vLLM, SGLang): --batch is how many requests it is asked to hold at once."""

    batch = POOLED
    splits = "tensor"
    multi_node = True
    expert_parallel = True
    cuda_graphs = True
    # Whether the activations and non-torch memory live inside the reservation (vLLM) or beside it (SGLang).
    reservation_holds_activations = True
    # Expert parallel: dense MLPs tensor parallel over every GPU (SGLang) or whole on each rank (vLLM).
    ep_dense_mlp_split = False
    reserved_fact = ""             # the fact that carries the reservation's bytes
    pool_share = "reservation"     # what the reservation is called, and the flag that sizes it
    pool_flag = "--gpu-memory-utilization"

    def rope_cache_fp32(self, spec: ModelSpec, plan: Plan) -> bool:
        """Whether the engine builds the rotary cos/sin cache in fp32 (else in the model dtype)."""
        return False

    def ep_parts(self, spec: ModelSpec, plan: Plan, world: int) -> EpParts:
        raise NotImplementedError

    # ---- speed: a decode step replays CUDA graphs, its layers' kernels' latency beside the bytes they read ----
    fp8_gemms = True
    # Host time per layer where no model is given (a CUDA graph replays a whole step): microseconds.
    host_per_layer = Efficiency("host time per layer (CUDA graphs)", 5e-6, 20e-6, "CUDA graphs replay a whole step")

    def host_overhead(self, spec: ModelSpec | None, precision: str) -> Efficiency:
        return graph_layer_latency(spec, precision) if spec is not None else self.host_per_layer

    def serial_host(self, spec: ModelSpec, precision: str, transformers_version: str | None) -> bool:
        return True  # the "host" time is the GPU's own kernel latency, after the bytes' time

    def read_devices(self, plan: Plan) -> int:
        return 1 if plan.expert_parallel else max(plan.gpus, 1)

    def layout_key(self, plan: Any) -> str:
        return "tensor-parallel"

    def layout(self, plan: Any) -> str:
        if plan.device == "cpu" or not plan.expert_parallel:
            return ""
        return f"expert parallel {plan.world}, attention data parallel {plan.world}"


# vLLM and SGLang build each distinct rotary embedding's cos/sin cache at load (ModelSpec.rope_tables) as a
# non-persistent buffer of every GPU's model, whole on every tensor-parallel rank and pipeline stage: vLLM in the
# model dtype (RotaryEmbedding.__init__ ``cache.to(dtype)``, https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/
# model_executor/layers/rotary_embedding/base.py), SGLang in fp32 on CUDA ("cache needs to be in FP32 for numerical
# stability": ``if not _is_cuda: cache = cache.to(dtype)``, sgl-project/sglang python/sglang/srt/layers/
# rotary_embedding.py, and its pull request #29729).  vLLM's log counts it in "model weights take": Llama-4-Scout's
# 10,485,760 positions × 128 dims are 2.50 GiB on each of 4 H100s (logged 53.12 GiB against 50.59 of parameters),
# Gemma 3's two tables (the global one linear-scaled × 8) 0.28–0.56 GiB, Llama-3.1's 0.03 GiB at TP 1, 2 and 4
# alike and 0.06 GiB in fp32 (benchmarks/data/vllm_startup_logs.csv).  vLLM's gpt_oss.py asks get_rope for
# dtype=torch.float32 (https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/model_executor/models/gpt_oss.py).
def rope_cache_component(spec: ModelSpec, plan: Plan, engine: ServingEngine) -> Component | None:
    """The rotary cos/sin cache ``engine`` keeps on every GPU; None: the model has no rotary tables."""
    elements = spec.rope_table_elements()
    if not elements:
        return None
    entry = act_bytes("fp32" if engine.rope_cache_fp32(spec, plan) else plan.precision)
    tables = " and ".join(f"{p:,} positions × {d}" for p, d in spec.rope_tables)
    return Component(WEIGHTS, elements * entry,
                     f"rotary cos/sin cache of {tables} dims in {'fp32' if entry == 4 else '16-bit'}, whole on every "
                     f"GPU ({engine.title} builds it at load; not sharded)")


def mla_replicated_bytes(spec: ModelSpec, precision: str) -> int:
    """MLA's down-projections vLLM and SGLang keep whole on every tensor-parallel rank: ``q_a_proj`` (hidden ×
    q_lora_rank) and ``kv_a_proj_with_mqa`` (hidden × (kv_lora_rank + qk_rope_head_dim)) are ``ReplicatedLinear``
    (vllm/model_executor/models/deepseek_v2.py, DeepseekV2MLAAttention), per layer."""
    if not spec.is_mla:
        return 0
    per_layer = spec.hidden_size * ((spec.q_lora_rank or 0) + spec.kv_lora_rank + spec.qk_rope_head_dim)
    return int(per_layer * spec.num_layers * weight_format(precision).linear_bits / 8)


def tp_weights(spec: ModelSpec, plan: Plan, wb: WeightBytes, tp: int) -> Component:
    """Weights on one tensor-parallel rank: 1/tp of every sharded linear and embedding, MLA's down-projections
    whole (``ReplicatedLinear`` in vLLM's and SGLang's deepseek_v2.py)."""
    weights_c = weights_component(spec, plan, wb, 1.0 / tp)
    replicated = mla_replicated_bytes(spec, plan.precision) if tp > 1 else 0
    if replicated:
        total_w, _ = stored_weight_total(spec, plan.precision, wb.total)
        scale = total_w / wb.total if wb.total else 1.0
        weights_c = replace(weights_c, bytes=int(weights_c.bytes + replicated * scale * (1 - 1 / tp)),
                            detail=weights_c.detail + f"; MLA down-projections replicated on every rank "
                            f"({replicated * scale / GiB:.2f} GiB)")
    return weights_c


def queued_kv(kv_c: Component, pool: int, sequences: int) -> Component:
    """The KV cache a pooled engine holds for ``sequences`` at full length when its KV pool is smaller than all of
    them: as many as the pool holds run at once and the rest wait for blocks (vLLM's and SGLang's schedulers admit
    a request when its blocks are free), so the engine starts and the memory it uses is the pool (issue 35 item 4).
    Unchanged when they all fit; one sequence's when not even one does (the engine then refuses to start)."""
    if sequences <= 1 or kv_c.bytes <= pool:
        return kv_c
    one = kv_c.bytes / sequences
    running = int(pool // one) if one > 0 else 0
    if running < 1:  # what it needs to start: one sequence (vLLM: max_model_len tokens in the pool)
        return replace(kv_c, bytes=int(one), detail=kv_c.detail + f"; one of the {sequences} sequences: the "
                                                                 "engine starts only if the pool holds one")
    return replace(kv_c, bytes=int(running * one),
                   detail=kv_c.detail + f"; the pool holds {running} of the {sequences} sequences at full length at "
                                        "once, the rest queue")


def static_pool(engine: ServingEngine, weights_c: Component, kv_c: Component, act_c: Component,
                over_c: Component, static: int | None,
                rope_c: Component | None = None, sequences: int = 1) -> tuple[list[Component], int | None]:
    """Components of one GPU, with the part of the engine's up-front reservation the KV pool takes beyond
    what this request needs (``kv_pool_spare``); and the pool's size in bytes (None: total memory unknown).
    ``sequences`` more than the pool holds at full length queue (queued_kv).

    vLLM reserves gpu_memory_utilization × total for everything (weights, activations, non-torch, KV pool);
    SGLang reserves mem_fraction_static of the memory free after its init for weights and the KV pool only
    (fitcheck.engines.sglang.static_bytes), activations, CUDA graphs and NCCL living in the remaining share."""
    if static is None:
        return [weights_c, *([rope_c] if rope_c else []), kv_c, act_c, over_c], None
    inside = weights_c.bytes + (rope_c.bytes if rope_c else 0) \
        + (act_c.bytes + over_c.bytes if engine.reservation_holds_activations else 0)
    pool = static - inside
    kv_c = queued_kv(kv_c, pool, sequences)
    comps = [weights_c, *([rope_c] if rope_c else []), kv_c, act_c, over_c]
    spare = pool - kv_c.bytes
    if spare > 0:
        comps.append(Component("kv_pool_spare", spare, f"rest of the reservation, which {engine.title} also gives to "
                               "the KV pool", counted_in="reserved"))
    return comps, max(pool, 0)


def pool_of(engine: ServingEngine, plan: Plan, reserved: int, pool_bytes: int, tokens: int, ranks: int = 0,
            outside: int = 0) -> Pool:
    """The reservation of ``reserved`` bytes per GPU with a KV pool of ``pool_bytes`` holding ``tokens`` tokens
    (over ``ranks`` data-parallel ranks)."""
    return Pool(engine.title, engine.pool_share, engine.pool_flag, engine.reservation_holds_activations, reserved,
                pool_bytes, tokens, round(tokens / plan.context, 2) if plan.context else 0.0, ranks, outside)


def pool_tokens(pool_bytes: int, per_token: float) -> int:
    return int(pool_bytes / per_token) if per_token and pool_bytes > 0 else 0


def pool_facts(engine: ServingEngine, pool: Pool) -> list[tuple[str, Any]]:
    """The pool's lines of the JSON document's facts."""
    prefix = engine.name
    return [(engine.reserved_fact, pool.reserved_bytes), (f"{prefix}_kv_pool_bytes", pool.kv_pool_bytes),
            (f"{prefix}_kv_pool_tokens", pool.kv_pool_tokens), (f"{prefix}_max_concurrency", pool.max_concurrency)]


# ---- expert parallel: experts over all GPUs, attention data parallel ------------------------------------
def expert_parallel(engine: ServingEngine, spec: ModelSpec, plan: Plan) -> Any:
    """MoE with the routed experts split over the expert-parallel group (every GPU of every node) and attention
    data parallel: each GPU a rank of its own with attention weights whole and its own sequences' KV cache.

    vLLM ``--data-parallel-size W --enable-expert-parallel`` (docs.vllm.ai/en/latest/serving/
    data_parallel_deployment.html, expert_parallel_deployment.html): TP 1 per data-parallel rank, so every
    non-expert weight (attention, shared experts, dense MLPs, embeddings) is whole on each GPU and FusedMoE
    holds num_experts / W experts (``ep_size = tp × dp``).  SGLang ``--tp W --dp W --enable-dp-attention
    --ep-size W`` (docs.sglang.ai, DeepSeek usage, "Data Parallelism Attention"): attention TP size tp/dp = 1,
    experts over the EP group, dense MLPs tensor parallel over all W GPUs."""
    world = plan.world
    wb = engine.weights(spec, plan.precision)
    groups = dict(wb.by_group)
    total_w, exact = stored_weight_total(spec, plan.precision, wb.total)
    scale = total_w / wb.total if wb.total else 1.0
    experts = groups.get(S.EXPERTS, 0)
    dense_mlp = groups.get(S.MLP, 0) if engine.ep_dense_mlp_split else 0
    whole = wb.total - experts - dense_mlp
    per_gpu = int((experts / world + dense_mlp / world + whole) * scale)
    fmt = weight_format(plan.precision)
    weights_c = Component(WEIGHTS, per_gpu,
                          f"routed experts 1/{world} each ({experts * scale / world / GiB:.2f} GiB: "
                          f"{spec.num_experts} experts over {world} GPUs); attention, shared experts, norms and "
                          f"embeddings whole on every GPU ({whole * scale / GiB:.2f} GiB)"
                          + (f"; dense MLPs 1/{world} ({dense_mlp * scale / world / GiB:.2f} GiB)" if dense_mlp else "")
                          + f"; {spec.total_params / 1e9:.2f}B params as {fmt.description}"
                          + (f"; {exact}" if exact else ""))
    per_rank = -(-plan.batch // world)  # the sequences the busiest data-parallel rank serves
    parts = engine.ep_parts(spec, plan, world)
    kv = kv_cache_bytes(spec, tokens=plan.context, sequences=per_rank, kv_dtype=plan.kv_dtype, engine=engine,
                        batched_tokens=parts.batched_tokens)
    kv_c = Component(KV_CACHE, kv, kv_detail(spec, plan, engine, 1.0, batched_tokens=parts.batched_tokens)
                     + f"; each data-parallel rank caches only its own sequences ({per_rank} here)")
    comps, pool = static_pool(engine, weights_c, kv_c, parts.activations, parts.overhead, parts.reservation,
                              rope_c=rope_cache_component(spec, plan, engine), sequences=per_rank)
    facts: list[tuple[str, Any]] = [("expert_parallel_size", world), ("data_parallel_size", world)]
    outside = 0
    if parts.beyond is not None:
        comps.insert(comps.index(parts.overhead) + 1, parts.beyond)
        outside = parts.beyond.bytes
        facts.append((f"{engine.name}_outside_reservation_bytes", outside))
    devices = [DeviceNeed(f"gpu{i}", "gpu", tuple(comps)) for i in range(world)]
    kv_pool = None
    if parts.reservation is not None and pool is not None:
        tokens = pool_tokens(pool, kv / max(plan.context * per_rank, 1)) * world
        kv_pool = pool_of(engine, plan, parts.reservation, pool, tokens, world, outside)
        facts += pool_facts(engine, kv_pool)
    notes = [f"{engine.title} expert parallel over {world} GPUs" + (f" of {plan.nodes} nodes" if plan.nodes > 1 else "")
             + f": {spec.num_experts} routed experts, {spec.num_experts / world:g} per GPU; attention data parallel "
             f"({world} ranks, each with its own KV pool)"]
    return Memory(devices, facts, notes, kv_pool)


# ---- decode under CUDA graphs: each layer's kernels (fitcheck.speed.efficiency.GRAPH_KERNEL_LATENCY_S's table) ------
GQA_ATTENTION_KERNELS = 6
QK_NORM_KERNELS = 2
MLA_ATTENTION_KERNELS = 14
DENSE_MLP_KERNELS = 4
MOE_BLOCK_KERNELS = 8
GROUPED_TOPK_EXTRA_KERNELS = 7   # grouped top-k's ~8 torch ops in place of topk_softmax's one
SHARED_EXPERT_KERNELS = 4
_BLOCK_QUANT_PRECISIONS = ("fp8",)


def graph_layer_kernels(spec: ModelSpec, precision: str) -> float:
    """Kernels one decoder layer launches per decode step under CUDA graphs, averaged over a model's MoE and dense
    layers (the table above GRAPH_KERNEL_LATENCY_S)."""
    quant = 1 if precision in _BLOCK_QUANT_PRECISIONS else 0
    if spec.is_mla:
        attention = MLA_ATTENTION_KERNELS + 3 * quant  # fused_qkv_a_proj, q_b_proj, o_proj
    else:
        attention = GQA_ATTENTION_KERNELS + (QK_NORM_KERNELS if spec.qk_norm else 0) + 2 * quant
    moe = MOE_BLOCK_KERNELS + 2 * quant + (GROUPED_TOPK_EXTRA_KERNELS if spec.is_mla else 0)
    if spec.num_shared_experts:
        moe += SHARED_EXPERT_KERNELS + 2 * quant
    dense = DENSE_MLP_KERNELS + 2 * quant
    layers = max(spec.num_layers, 1)
    moe_layers = spec.num_moe_layers
    return attention + (moe_layers * moe + (layers - moe_layers) * dense) / layers


def graph_layer_latency(spec: ModelSpec, precision: str) -> Efficiency:
    """Seconds per decoder layer per decode step under CUDA graphs: its kernels × GRAPH_KERNEL_LATENCY_S."""
    k = graph_layer_kernels(spec, precision)
    e = GRAPH_KERNEL_LATENCY_S
    kind = "MoE" if spec.is_moe else "dense"
    return Efficiency(f"decode kernel latency per layer ({kind}, CUDA graphs, {k:.0f} kernels)",
                      float(f"{k * e.low:.2g}"), float(f"{k * e.high:.2g}"),
                      f"{k:.0f} kernels a layer at {e.low * 1e6:.1f}–{e.high * 1e6:.1f} µs each ({e.why})")


