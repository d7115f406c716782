"""vLLM's memory: it reserves gpu_memory_utilization × total GPU memory at start; inside it the weights, the
profiled activation peak, the non-torch memory its profiling adds and a KV pool that takes the rest; the CUDA
context and CUDA graphs come on top.  Tensor parallel splits weights and KV heads; pipeline parallel (one stage
per node) splits layers.  Pure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from fitcheck.calibration import TORCH_CUDA_CONTEXT
from fitcheck.engines import serving
from fitcheck.engines.vllm import profile as A
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.kv_cache import kv_cache_bytes
from fitcheck.estimate.parts import act_bytes, kv_detail, stored_weight_total, weights_component
from fitcheck.estimate.result import ACTIVATIONS, KV_CACHE, OVERHEAD, WEIGHTS, Component, DeviceNeed, Memory
from fitcheck.model.spec import ModelSpec
from fitcheck.units import GiB, MiB

if TYPE_CHECKING:
    from fitcheck.engines.vllm import Vllm
    from fitcheck.estimate.weights import WeightBytes
    from fitcheck.plan import Plan

# vLLM: the CUDA context and the CUDA graphs.  vLLM v0.19.0 keeps them beyond its reservation of
# gpu_memory_utilization × total: the worker takes its memory snapshot after the CUDA context and NCCL exist
# (``init_device``: "Initialize the distributed environment BEFORE taking memory snapshot") and reserves the KV
# cache from ``requested_memory - (weights + torch peak increase + non-torch increase)``, the increases measured
# from that snapshot; it captures CUDA graphs after the KV cache and subtracts their estimate only with
# VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 (off by default)
# (https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/v1/worker/gpu_worker.py, init_device and
# determine_available_memory; https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/envs.py).
# How much vLLM v0.19.0 keeps beyond its reservation.  No source sizes it (the CUDA context, NCCL's communicators
# at init and the CUDA graphs' pool depend on the driver, NCCL and the capture sizes), so it is an upper envelope
# of the published startup logs (benchmarks/data/vllm_startup_logs.csv, 48 v0.19.0 rows on H100s: "init non-torch"
# plus "Graph capturing ... took"), read per piece from the code's structure:
# - before the snapshot: the CUDA context alone on one rank (0.51 GiB logged on every single-rank row), the context
#   with NCCL's communicators and custom all-reduce buffers with several ranks (1.43–2.05 GiB logged, TP 2/4, PP 2/4);
# - the graphs: piecewise CUDA graphs split the model at every attention layer for each capture size, so their
#   pool grows with the decoder layers on the rank: 0.51 GiB (8 layers) to 1.85 GiB (80) for dense models, within
#   0.40 GiB + 18.5 MiB per layer; MoE layers' fused-expert graphs add up to 0.73 GiB more (DeepSeek-V2-Lite 1.57 GiB
#   at 27 layers, gpt-oss-20b 1.55 at 24).  With --enforce-eager there are none.
# tests/benchmarks/test_vllm_startup_logs.py holds every logged row at or under the envelope.
VLLM_INIT_ONE_RANK = TORCH_CUDA_CONTEXT
VLLM_INIT_RANKS = int(2.05 * 1024) * MiB
VLLM_GRAPHS_BASE = int(0.40 * 1024) * MiB
VLLM_GRAPHS_PER_LAYER = int(18.5 * MiB)
VLLM_GRAPHS_MOE = int(0.75 * 1024) * MiB


def vllm_outside_reservation(spec: ModelSpec, layers_on_rank: int, ranks: int) -> int:
    """Bytes vLLM v0.19.0 keeps beyond gpu_memory_utilization × total on one GPU (the envelope above)."""
    init = VLLM_INIT_RANKS if ranks > 1 else VLLM_INIT_ONE_RANK
    graphs = VLLM_GRAPHS_BASE + layers_on_rank * VLLM_GRAPHS_PER_LAYER + (VLLM_GRAPHS_MOE if spec.is_moe else 0)
    return init + graphs


# vLLM with tensor parallelism: the NCCL buffers the profiling run's first large all-reduces allocate are non-torch
# memory inside the reservation on every rank.  vLLM's startup log for Meta-Llama-3-8B on H100s reads
# "non_torch_memory 1.79GiB" at -tp 1 and "3.58GiB" at -tp 2 (https://github.com/vllm-project/vllm/pull/10511,
# comment of 2024-12-14): 1.79 GiB more once ranks talk.  Counted once for any tp > 1; v0.19.0's logs
# (benchmarks/data/vllm_startup_logs.csv, H100 80GB HBM3) read 1.81–1.82 GiB more at -tp 2 and 1.88–1.89 GiB at
# -tp 4 than at -tp 1, a little more with the ranks.
VLLM_NCCL_TP = int(1.79 * 1024) * MiB
# ... and on every rank, what the profiling run's first forward and sampler add outside PyTorch (kernel images the
# first launches load, library handles): vLLM v0.19.0 logs "non-torch forward increase memory" of 0.24-0.27 GiB on
# each of its 35 single-GPU H100 rows (0.46 for Granite; v0.6.4's log on an RTX 3090 in vLLM issue #10517 reads
# "non_torch_memory 0.35GiB"), and 0.07 GiB on the first of 2 or 4 pipeline stages, which do not sample.  No source
# sizes it, so it is the quantity as logged (benchmarks/data/vllm_startup_logs.csv), counted on every rank.
VLLM_PROFILE_NON_TORCH = int(0.25 * 1024) * MiB


# ---- vLLM --------------------------------------------------------------------------------------
def cpu_offload_bytes(cpu_offload_gb: float) -> int:
    """vLLM's --cpu-offload-gb in bytes (GiB, per GPU): that many GiB of weights per GPU live in pinned RAM and
    cross PCIe once per forward pass ("a virtual way to increase the GPU memory size ... part of the model is
    loaded from CPU memory to GPU memory on the fly in each model forward pass",
    https://github.com/vllm-project/vllm/blob/c1d86421174a87056edc90a41dc9942391509e84/vllm/config/cache.py)."""
    return int(cpu_offload_gb * GiB)


def pp_layers(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage as vLLM splits them: an even share, the remainder to the stages before the last
    (vllm/distributed/utils.py get_pp_indices, v0.8: ``partitions[-i] += 1 for i in range(2, remaining + 2)``)."""
    pp = max(min(pp, num_layers), 1)
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def _vllm_penalty_note(spec: ModelSpec) -> str:
    """What fitcheck leaves out of vLLM's figure when the checkpoint's repetition penalty runs ('' when not).

    vLLM applies generation_config.json's repetition_penalty by default (ModelConfig.get_diff_sampling_param,
    --generation-config auto).  Its Sampler applies penalties outside the profiled peak: ``_dummy_sampler_run``
    builds its dummy SamplingMetadata with ``no_penalties=True``
    (https://github.com/vllm-project/vllm/blob/4e1790651fc758c06c7a903dd4cd82364ac91b27/vllm/v1/worker/gpu_model_runner.py),
    and ``Sampler.apply_penalties`` returns the logits untouched then
    (https://github.com/vllm-project/vllm/blob/3e342658b2e9c85a30a54d19e64e5ad77b8a26a6/vllm/v1/sample/sampler.py).
    So the penalties' per-sequence tensors are not in the activation peak vLLM reserves; fitcheck puts no
    figure on them (not measured) and says so."""
    g = spec.generation
    if g is None or g.problem or not g.processors():
        return ""
    return (f"generation_config.json sets repetition_penalty {g.repetition_penalty:g}, which vLLM applies by default "
            "(--generation-config auto); its profiling run samples without penalties (_dummy_sampler_run: "
            "no_penalties=True), so the penalties' vocabulary-sized tensors per running sequence are outside the "
            "activation peak it reserves and not counted here")


def _stage_weights(spec: ModelSpec, plan: Plan, wb: WeightBytes, stage: int, layers: int) -> Component:
    """One GPU's weights in pipeline stage ``stage`` (of ``layers`` layers): 1/tp of its layers, the embeddings on
    the first stage, the lm_head on the last; MLA's down-projections replicated on every tensor-parallel rank."""
    tp, pp = max(plan.gpus, 1), max(plan.nodes, 1)
    total_w, _ = stored_weight_total(spec, plan.precision, wb.total)
    scale = total_w / wb.total if wb.total else 1.0
    replicated = serving.mla_replicated_bytes(spec, plan.precision) if tp > 1 else 0
    if pp == 1:
        weights_c = weights_component(spec, plan, wb, 1.0 / tp)
        if not replicated:
            return weights_c
        return replace(weights_c, bytes=int(weights_c.bytes + replicated * scale * (1 - 1 / tp)),
                       detail=weights_c.detail + f"; MLA down-projections replicated on every rank "
                       f"({replicated * scale / GiB:.2f} GiB)")
    frac = layers / max(spec.num_layers, 1)
    body = max(wb.total - wb.embed_bytes - wb.lm_head_bytes - replicated, 0)
    # A tied lm_head is the embedding: with pp > 1 the last stage holds its own copy (vLLM's PPMissingLayer
    # elsewhere; ParallelLMHead ties to embed_tokens only where both live).
    head = wb.lm_head_bytes or wb.embed_bytes
    own = body * frac + (wb.embed_bytes if stage == 0 else 0) + (head if stage == pp - 1 else 0)
    held = ["embeddings"] if stage == 0 else []
    held += ["lm_head"] if stage == pp - 1 else []
    return Component(WEIGHTS, int((own / tp + replicated * frac) * scale),
                     f"pipeline stage {stage + 1} of {pp}: {layers} of {spec.num_layers} layers"
                     + (f" with {' and '.join(held)}" if held else "")
                     + f", 1/{tp} each (tensor parallel)"
                     + (f"; MLA down-projections replicated ({replicated * frac * scale / GiB:.2f} GiB)"
                        if replicated else "")
                     + f"; {spec.total_params / 1e9:.2f}B params as {weight_format(plan.precision).description}")


def _stage_activations(act_c: Component, act_first: int, received: int, pp: int, batched: int) -> list[Component]:
    """Each pipeline stage's profiled peak: the forward alone before the last stage (which samples), and after the
    first the hidden states and residual each stage receives."""
    if pp == 1:
        return [act_c]
    recv = (f"; the {received / GiB:.2f} GiB of hidden states and residual it receives from the stage before"
            if received else "")
    stage_acts = [act_first, *([act_first + received] * max(pp - 2, 0)), act_c.bytes + received]
    return [Component(ACTIVATIONS, a, f"profiled forward peak for {batched:,} batched tokens (the sampler runs "
                                      f"on the last pipeline stage){recv if i else ''}") if i < pp - 1 else
            Component(ACTIVATIONS, a, act_c.detail + recv)
            for i, a in enumerate(stage_acts)]


def memory(engine: Vllm, spec: ModelSpec, plan: Plan) -> Memory:
    tp = max(plan.gpus, 1)
    pp = max(plan.nodes, 1)
    wb = engine.weights(spec, plan.precision)
    act_b = act_bytes(plan.precision)
    batched, seqs = A.vllm_batch_defaults(plan.gpu_total_bytes, plan.compute_capability)
    kv_total = kv_cache_bytes(spec, tokens=plan.context, sequences=plan.batch, kv_dtype=plan.kv_dtype, engine=engine,
                              batched_tokens=batched)
    if spec.is_mla:
        kv_share = 1.0  # the latent cache is replicated on every tensor-parallel rank
    else:
        kv_share = max(1.0, tp / max(spec.num_kv_heads, 1)) / tp  # KV heads split; replicated when fewer than ranks
    sms = A.max_sms(plan.compute_capability)
    # 16-bit experts run on TritonExperts, whose workspace vLLM keeps (A.vllm_moe_workspace_bytes); other expert
    # formats' kernels (MXFP4, FP8, 4-bit) are not modelled
    triton_moe = weight_format(plan.precision).name in ("bf16", "fp16", "fp32")
    act = A.vllm_profile_bytes(spec, tp, act_b, tokens=batched, seqs=seqs, sms=sms, moe_workspace=triton_moe)
    # the stages before the last run the forward only: profile_run samples on the last pipeline rank
    # (``if get_pp_group().is_last_rank``); every stage after the first keeps the IntermediateTensors it receives,
    # made for max_num_batched_tokens (``make_empty_intermediate_tensors(batch_size=self.max_num_tokens)`` in
    # _dummy_run: hidden_states and residual in decoder models' make_empty_intermediate_tensors_factory)
    # (https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/v1/worker/gpu_model_runner.py)
    act_first = A.vllm_profile_bytes(spec, tp, act_b, tokens=batched, sampler="none", moe_workspace=triton_moe)
    received = 2 * batched * spec.hidden_size * act_b if pp > 1 else 0
    reserved = int(plan.gpu_total_bytes * plan.gpu_memory_utilization) if plan.gpu_total_bytes else None
    non_torch = VLLM_PROFILE_NON_TORCH + (VLLM_NCCL_TP if tp > 1 else 0)
    non_torch_c = Component(OVERHEAD, non_torch, "non-torch memory the profiling run adds inside the reservation: "
                       f"{VLLM_PROFILE_NON_TORCH / GiB:.2f} GiB of kernel images and library handles"
                       + (f", NCCL buffers of tensor parallel {tp} ({VLLM_NCCL_TP / GiB:.2f} GiB, its all-reduces)"
                          if tp > 1 else "") + " (as vLLM v0.19.0 logs them)", counted_in="runtime")
    ranks = tp * pp

    def outside_c(layers: int) -> Component:
        return Component(OVERHEAD, vllm_outside_reservation(spec, layers, ranks),
                         "CUDA context" + (", NCCL's communicators" if ranks > 1 else "") + f" and the CUDA graphs of "
                         f"{layers} layers, beyond vLLM's reservation (its memory snapshot is taken after the context "
                         "exists; the graphs are captured after the KV cache): the upper envelope of vLLM v0.19.0's "
                         "startup logs", counted_in="runtime")
    rows = min(seqs, batched)
    sampler = rows * spec.vocab_size * A.vllm_triton_sampler_bytes_per_entry(act_b)
    act_c = Component(ACTIVATIONS, act, f"profiled peak for {batched:,} batched tokens and {rows:,} sampled sequences "
                                         f"(vLLM's max_num_batched_tokens and max_num_seqs for this GPU; the sampler's "
                                         f"logits, probabilities and top-k/top-p included: {sampler / GiB:.2f} GiB)")
    stage_comps = _stage_activations(act_c, act_first, received, pp, batched)
    stages = pp_layers(spec.num_layers, pp) if pp > 1 else [spec.num_layers]
    rope_c = serving.rope_cache_component(spec, plan, engine)
    devices = []
    facts: list[tuple[str, float | int | str]] = []
    pools: list[int] = []
    first_comps: list[Component] = []
    ram_bytes = 0
    for stage, layers in enumerate(stages):
        frac = layers / max(spec.num_layers, 1)
        weights_c = _stage_weights(spec, plan, wb, stage, layers)
        if plan.cpu_offload_gb:
            off = min(cpu_offload_bytes(plan.cpu_offload_gb), weights_c.bytes)
            ram_bytes += off * tp
            weights_c = replace(weights_c, bytes=weights_c.bytes - off,
                                detail=weights_c.detail + f"; {off / GiB:.2f} GiB of them in RAM (--cpu-offload-gb), "
                                "streamed over PCIe every forward pass")
        kv_c = Component(KV_CACHE, int(kv_total * kv_share * frac),
                         kv_detail(spec, plan, engine, kv_share * frac, batched_tokens=batched))
        stage_act = stage_comps[stage]
        inside = [weights_c, *([rope_c] if rope_c else []), kv_c, stage_act, non_torch_c]
        need = sum(c.bytes for c in inside)
        per_token = kv_c.bytes / max(plan.context * plan.batch, 1)
        if reserved is not None:
            pool = reserved - (need - kv_c.bytes)  # everything inside the reservation but the KV cache
            queued = serving.queued_kv(kv_c, pool, plan.batch)  # more sequences than the pool holds wait
            inside[inside.index(kv_c)] = queued
            need -= kv_c.bytes - queued.bytes
        comps = inside + [outside_c(layers)]
        if reserved is not None:
            spare = reserved - need
            if spare > 0:
                comps.append(Component("kv_pool_spare", spare, "rest of the reservation, which vLLM also gives to "
                                       "the KV pool", counted_in="reserved"))
            pools.append(serving.pool_tokens(pool, per_token))
            if stage == 0 or pools[-1] < min(pools[:-1]):
                first_comps = comps  # the stage whose pool is the smallest
        for i in range(tp):
            devices.append(DeviceNeed(f"gpu{stage * tp + i}", "gpu", tuple(comps)))
    outside = max(vllm_outside_reservation(spec, layers, ranks) for layers in stages)
    facts.append(("vllm_outside_reservation_bytes", outside))
    facts += [("vllm_max_num_batched_tokens", batched), ("vllm_max_num_seqs", seqs)]
    kv_pool = None
    if reserved is not None:
        # Every stage holds the KV of its own layers for every token: the pool is the smallest stage's.
        w = sum(c.bytes for c in first_comps if c.name == WEIGHTS)
        a = next(c for c in first_comps if c.name == ACTIVATIONS).bytes
        kv_pool = serving.pool_of(engine, plan, reserved, max(reserved - w - a - non_torch, 0),
                                  min(pools) if pools else 0, outside=outside)
        facts += serving.pool_facts(engine, kv_pool)
    if pp > 1:
        facts += [("tensor_parallel_size", tp), ("pipeline_parallel_size", pp),
                  ("pipeline_stage_layers", ",".join(str(n) for n in stages))]
    if plan.cpu_offload_gb:
        devices.append(DeviceNeed("cpu", "cpu", (
            Component(WEIGHTS, ram_bytes, f"weights offloaded by --cpu-offload-gb {plan.cpu_offload_gb:g} "
                      "(per GPU), pinned in RAM"),)))
        facts.append(("cpu_offload_bytes", ram_bytes))
    return Memory(devices, facts, _notes(spec, plan, outside, batched, rows, sampler, stages), kv_pool)


def _notes(spec: ModelSpec, plan: Plan, outside: int, batched: int, rows: int, sampler: int,
           stages: list[int]) -> list[str]:
    tp, pp = max(plan.gpus, 1), max(plan.nodes, 1)
    act_b = act_bytes(plan.precision)
    notes = [f"vLLM reserves gpu_memory_utilization {plan.gpu_memory_utilization:g} × total GPU memory at start for "
             f"the weights, the profiled activation peak, the non-torch memory its profiling adds"
             f"{' (NCCL among it)' if tp > 1 else ''} and the KV cache; the CUDA context and CUDA graphs "
             f"({outside / GiB:.2f} GiB here, the most vLLM v0.19.0's published startup logs show for this many "
             f"layers) come on top, in what the reservation leaves free; no second headroom is taken inside it "
             "(it is vLLM's own margin), and more sequences than its KV pool holds at full length queue",
             f"vLLM's profiling run: {batched:,} batched tokens and {rows:,} sampled sequences, the "
             f"max_num_batched_tokens and max_num_seqs `vllm serve` v0.19.0 picks for this GPU; it samples them with "
             f"top-k and top-p, so the sampler ({A.vllm_triton_sampler_bytes_per_entry(act_b)} B per vocabulary entry "
             f"per sequence, {sampler / GiB:.2f} GiB) is inside the activation peak it reserves: any request's "
             f"sampling fits there"]
    penalty = _vllm_penalty_note(spec)
    if penalty:
        notes.append(penalty)
    if tp > 1:
        notes.append(f"tensor parallel over {tp} GPUs" + (" within each node" if pp > 1 else ""))
    if plan.cpu_offload_gb:
        notes.append(f"vLLM --cpu-offload-gb {plan.cpu_offload_gb:g}: that many GiB of weights per GPU stay in RAM "
                     "and cross PCIe in every forward pass (decode is bound by it)")
    if pp > 1:
        notes.append(f"pipeline parallel over {pp} nodes: layers {'+'.join(str(n) for n in stages)} "
                     f"(vLLM's get_pp_indices); each GPU holds 1/{tp} of its stage")
    return notes


