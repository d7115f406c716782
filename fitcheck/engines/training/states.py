"""The model states of a training step: the base weights, the adapters, gradients, optimizer states and master
weights, sharded over N GPUs (ZeRO / FSDP) or offloaded to RAM, with the buffers that persist through the step.

The rules (each with its source) are fitcheck.engines.training.memory's module docstring; this module holds the
arithmetic of each state and its words, estimate_training puts them on the device beside the activations.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from fitcheck.calibration import TORCH_CPU_RUNTIME
from fitcheck.estimate.formats import WeightFormat, weight_format
from fitcheck.estimate.lora import trainable_shapes
from fitcheck.estimate.lora_targets import parse_targets
from fitcheck.estimate.optimizers import ParamShape, describe, state_bytes, step_temp_bytes
from fitcheck.estimate.result import (
    ADAPTERS,
    GRADIENTS,
    MASTER_WEIGHTS,
    OPTIMIZER,
    OVERHEAD,
    WEIGHTS,
    Component,
    DeviceNeed,
)
from fitcheck.estimate.sharding import shard_degree, sharding_stage
from fitcheck.estimate.weights import largest_matrix_params, weight_bytes
from fitcheck.model.spec import ModelSpec

if TYPE_CHECKING:
    from fitcheck.plan import TrainingPlan

TEMP_BUFFERS = "temp_buffers"
BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# DeepSpeed: `additional_buffer_factor` of its offload RAM estimate (runtime/zero/stage3.py,
# stage_1_and_2.py estimate_*_model_states_mem_needs).
DS_OFFLOAD_BUFFER_FACTOR = 1.5
# DeepSpeed ZeRO-3 `sub_group_size` default (runtime/zero/config.py): fp32 gradients are built
# for one sub-group of parameters at a time during the step.
DS_SUB_GROUP_SIZE = 1_000_000_000


def shard(n: int, sharded: bool, gpus: int) -> int:
    return n // gpus if sharded else n


def embedding_copies(spec: ModelSpec, plan: TrainingPlan) -> ParamShape | None:
    """peft modules_to_save: trainable copies of the embedding and lm_head (the originals stay)."""
    if plan.mode == "full" or not plan.lora_train_embeddings:
        return None
    return ParamShape(spec.vocab_size, spec.hidden_size, 1 if spec.tie_word_embeddings else 2)


def base_format(plan: TrainingPlan) -> WeightFormat:
    fmt = weight_format(plan.precision)
    if fmt.family == "bnb":
        # peft prepare_model_for_kbit_training (utils/other.py) casts every non-quantized 16-bit
        # parameter (embeddings, norms, lm_head) to fp32 for bitsandbytes bases; GPTQ is skipped.
        fmt = replace(fmt, keep_bits=32)
    return fmt


@dataclass(frozen=True)
class ModelStates:
    """One GPU's model states (and their totals, for offload), with what they are in words."""

    shards: int                   # N: the sharding degree (hybrid: one node's GPUs)
    stage: int                    # 0 none, 1 optimizer, 2 + gradients, 3 + weights
    deepspeed: bool
    act_b: int                    # compute dtype bytes
    offload_opt: bool
    offload_params: bool
    fmt: WeightFormat             # the base's format as loaded for training
    base: int                     # the base weights, whole
    base_why: str
    trainable: int                # trainable parameters (adapters, or every weight)
    trainable_all: int            # ... with modules_to_save copies
    emb: ParamShape | None        # modules_to_save copies of the embeddings
    shapes: tuple[ParamShape, ...]
    param_b: int                  # bytes per trainable parameter
    state_b: int                  # bytes per optimizer state element
    master_b: int
    emb_param_b: int
    emb_master_b: int
    adapters_bytes: int           # per GPU
    grad_total: int
    master_total: int
    opt_total: int
    gpu_weights: int
    gpu_grads: int
    gpu_master: int
    gpu_opt: int
    step_temp: int                # optimizer.step()'s temporaries per GPU
    step_why: str


def model_states(spec: ModelSpec, plan: TrainingPlan) -> ModelStates:
    N = shard_degree(plan.zero, plan.fsdp, plan.gpus, plan.nodes)
    ds = plan.zero is not None
    stage = sharding_stage(plan.zero, plan.fsdp)
    act_b = BYTES[plan.compute_dtype]
    fp32_compute = plan.compute_dtype == "fp32"
    master_on = plan.master_weights == "fp32" and not fp32_compute
    offload_opt = plan.offload in ("optimizer", "optimizer+params")
    offload_params = plan.offload == "optimizer+params" or bool(plan.fsdp and offload_opt)

    # ---- base weights (frozen for LoRA) --------------------------------------------------------
    fmt = base_format(plan)
    if plan.mode == "full":
        base = spec.total_params * act_b
        base_why = f"{spec.total_params / 1e9:.2f}B params in {plan.compute_dtype}"
    else:
        base = weight_bytes(spec, fmt).total
        base_why = f"frozen base as {fmt.description}"
        if fmt.family == "bnb":
            base_why += "; embeddings, norms and lm_head upcast to fp32 by prepare_model_for_kbit_training"
        elif fmt.family != "float":
            base_why += "; embeddings, lm_head and norms stay 16-bit"

    # ---- trainable parameters ------------------------------------------------------------------
    shapes = trainable_shapes(spec, plan)
    trainable = sum(s.params for s in shapes)
    emb = embedding_copies(spec, plan)
    # LoRA adapters outside DeepSpeed with an fp32 master are simply fp32 parameters (peft keeps
    # adapters in fp32: LoraModel autocast_adapter_dtype=True); under DeepSpeed they are 16-bit
    # with DeepSpeed's fp32 master copy, like full fine-tuning.
    adapters_fp32 = plan.mode != "full" and master_on and not ds
    param_b = 4 if (fp32_compute or adapters_fp32) else act_b
    master_b = 4 if (master_on and not adapters_fp32) else 0
    state_b = 4 if master_on else param_b
    trainable_all = trainable + (emb.params if emb else 0)
    # modules_to_save copies are 16-bit parameters (deep copies of the base's modules).
    emb_param_b = act_b if emb else 0
    emb_master_b = 4 if (emb and master_on and ds) else 0
    emb_state_b = 4 if (emb and master_on and ds) else act_b
    emb_params = emb.params if emb else 0
    adapters_bytes = 0
    if plan.mode != "full":
        adapters_bytes = shard(trainable * param_b + emb_params * emb_param_b, stage == 3, N)
    grad_total = trainable * param_b + emb_params * emb_param_b
    master_total = trainable * master_b + emb_params * emb_master_b
    opt_total = state_bytes(plan.optimizer, tuple(shapes), state_b) + (
        state_bytes(plan.optimizer, (emb,), emb_state_b) if emb else 0)
    step_temp, step_why = _step_temporaries(plan, shapes, emb, trainable_all, state_b, N, stage, master_on,
                                            offload_opt)
    return ModelStates(
        N, stage, ds, act_b, offload_opt, offload_params, fmt, base, base_why, trainable, trainable_all, emb,
        tuple(shapes), param_b, state_b, master_b, emb_param_b, emb_master_b, adapters_bytes, grad_total,
        master_total, opt_total, 0 if offload_params else shard(base, stage == 3, N),
        0 if offload_opt else shard(grad_total, stage >= 2, N),
        0 if offload_opt else shard(master_total, stage >= 1, N),
        0 if offload_opt else shard(opt_total, stage >= 1, N), step_temp, step_why)


def _step_temporaries(plan: TrainingPlan, shapes: tuple[ParamShape, ...], emb: ParamShape | None,
                      trainable_all: int, state_b: int, N: int, stage: int, master_on: bool,
                      offload_opt: bool) -> tuple[int, str]:
    """optimizer.step()'s temporaries on one GPU, and what they are."""
    ds = plan.zero is not None
    largest_trainable = max((s.rows * s.cols for s in [*shapes, *([emb] if emb else [])]), default=0)
    on_cpu = plan.device == "cpu"
    # DeepSpeed builds FusedAdam / its CPU Adam: no foreach temporaries
    step_temp = 0 if offload_opt else shard(
        step_temp_bytes(plan.optimizer, trainable_all, largest_trainable, state_b, fused=ds, foreach=not on_cpu),
        stage >= 1, N)
    step_why = ("" if not step_temp else "optimizer.step() temporaries (AdamW on the CPU: two of the largest parameter)"
                if on_cpu else "optimizer.step() temporaries (foreach AdamW: one state-sized buffer)")
    if ds and master_on and not offload_opt:
        step_temp += 4 * (min(trainable_all // N, DS_SUB_GROUP_SIZE) if stage == 3 else trainable_all // N)
        step_why = "DeepSpeed fp32 gradients of this GPU's partition built for the step"
    return step_temp, step_why


def state_components(plan: TrainingPlan, st: ModelStates, grads_shown: int, grads_why: str) -> list[Component]:
    """Weights, adapters, gradients (``grads_shown`` of them at the peak), optimizer states and master weights."""
    N, sharded = st.shards, st.stage == 3
    per_gpu = f"; 1/{N} per GPU" if st.stage >= 1 and N > 1 else ""
    offloaded = "; on the CPU (offload)" if st.offload_opt else ""
    comps = [Component(WEIGHTS, st.gpu_weights, st.base_why + (f"; 1/{N} per GPU (sharded)" if sharded and N > 1
                                                               else "")
                       + ("; offloaded to RAM" if st.offload_params else ""))]
    if plan.mode != "full":
        what = (f"LoRA r={plan.lora_rank} on {parse_targets(plan.lora_targets).label}: {st.trainable:,} params × "
                f"{st.param_b} B")
        if st.emb:
            what += f"; trainable copies of embeddings/lm_head {st.emb.params:,} × {st.emb_param_b} B"
        comps.append(Component(ADAPTERS, st.adapters_bytes, what))
    return comps + [
        Component(GRADIENTS, grads_shown, grads_why),
        Component(OPTIMIZER, st.gpu_opt, describe(plan.optimizer, st.state_b) + per_gpu + offloaded),
        Component(MASTER_WEIGHTS, st.gpu_master, ("fp32 copy of the trainable params" if st.master_b or st.emb_master_b
                                                  else "none (trainable params are updated in place)")
                  + per_gpu + offloaded),
    ]


def step_buffers(spec: ModelSpec, plan: TrainingPlan, st: ModelStates) -> list[Component]:
    """The sharding framework's buffers that persist through the step."""
    buffers: list[Component] = []
    act_b = st.act_b
    bucket = plan.ds_bucket_elements or spec.hidden_size ** 2
    if st.deepspeed and st.stage in (1, 2):
        buffers.append(Component(TEMP_BUFFERS, 2 * bucket * act_b,
                                 f"DeepSpeed gradient buckets: 2 × reduce_bucket_size {bucket:,} × {act_b} B "
                                 "(overlap_comm)"))
    if st.deepspeed and st.stage == 3:
        largest_module = max(largest_matrix_params(spec), spec.vocab_size * spec.hidden_size)
        buffers.append(Component(TEMP_BUFFERS, 4 * largest_module + bucket * act_b,
                                 "ZeRO-3 gathered parameters: 4 × largest layer (DeepSpeed estimator) + reduce bucket"))
    if plan.fsdp and st.stage == 3:
        unit = max(spec.layer_params(), spec.vocab_size * spec.hidden_size)
        buffers.append(Component(TEMP_BUFFERS, 3 * unit * act_b,
                                 "FSDP: two gathered units (current + prefetch) and one unit's unsharded gradients"))
    if plan.framework == "ddp":
        # DistributedDataParallel's reducer copies gradients into flat buckets for all-reduce
        # (torch/nn/parallel/distributed.py, gradient_as_bucket_view=False by default).
        buffers.append(Component(TEMP_BUFFERS, st.grad_total, "DDP gradient buckets: a flat copy of the gradients"))
    return buffers


def offload_ram(plan: TrainingPlan, st: ModelStates) -> DeviceNeed:
    """What each node's RAM holds under ZeRO-Offload / FSDP cpu_offload: the CPU copies of its own ranks' shards,
    gpus/N of the model's states (all of them on one node; 1/nodes under ZeRO over several; a full replica per node
    under FSDP hybrid).  DeepSpeed's estimator: cpu_mem = params × 18 × gpus_factor × 1.5 with gpus_factor =
    1/num_nodes (deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs)."""
    N = st.shards
    share = min(plan.gpus, N) / N
    whose = ("all ranks of this machine" if share == 1 and plan.nodes == 1 else
             f"this node's {plan.gpus} ranks' shards ({plan.gpus}/{N} of the model's)" if share < 1 else
             "a full replica on each node (hybrid sharding)")
    cpu = [
        Component(OPTIMIZER, int(st.opt_total * share), describe(plan.optimizer, st.state_b) + ", " + whose),
        Component(MASTER_WEIGHTS, int(st.master_total * share), "fp32 master copy"),
        Component(GRADIENTS, int(st.trainable_all * 4 * share), "fp32 gradients for the CPU optimizer step"),
    ]
    if st.offload_params:
        cpu.append(Component(WEIGHTS, int(st.base * share), "16-bit weights offloaded (ZeRO-3 / FSDP cpu_offload)"))
    factor = DS_OFFLOAD_BUFFER_FACTOR if st.deepspeed else 1.0
    if factor > 1:
        cpu.append(Component(TEMP_BUFFERS, int(sum(c.bytes for c in cpu) * (factor - 1)),
                             "pinned transfer buffers (DeepSpeed additional_buffer_factor 1.5)"))
    cpu.append(Component(OVERHEAD, TORCH_CPU_RUNTIME * plan.gpus,
                         f"{plan.gpus} training process(es){' on each node' if plan.nodes > 1 else ''}: "
                         "torch and libraries", counted_in="runtime"))
    return DeviceNeed("cpu", "cpu", tuple(cpu))
