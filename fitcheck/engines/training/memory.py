"""Training estimate: a resolved TrainingPlan and a ModelSpec in, per-GPU (and offload RAM) bytes out.

Model states per trainable parameter (mixed precision, Rajbhandari et al. 2020 "ZeRO", section 3):
a 16-bit weight (2 B), its 16-bit gradient (2 B), an fp32 master copy (4 B) and the optimizer
states (AdamW: 8 B in fp32), the "16 bytes per parameter" of the seed table, each term following
the options (`--master-weights none`: states in the weight dtype, no master; `--optimizer`).
LoRA trains only the adapters (lora.py) and keeps the base frozen (weights only, no gradients).

Sharding (per GPU, N GPUs):
  ZeRO-1: optimizer states and master /N;  ZeRO-2: + gradients /N;  ZeRO-3: + weights /N, plus
  gathered parameters (DeepSpeed's estimator: 4 × largest layer).  FSDP shard-grad-op = ZeRO-2,
  full-shard = ZeRO-3 with two decoder-layer units gathered (current + prefetch) and one unit's
  gradients.  DeepSpeed ZeRO also builds the fp32 gradient of its partition at step time
  (stage_1_and_2.py `single_partition_of_fp32_groups[i].grad`; stage3.py per sub-group of at
  most `sub_group_size` = 1e9 parameters).  For ZeRO-2 this gives 2P + 18P/N per GPU, the figure
  of the ZeRO paper; DeepSpeed's own `estimate_zero2_model_states_mem_needs` says 4P + 16P/N (it
  also counts a full-size gradient), the same at N = 1.
Offload (ZeRO-Offload, Ren et al. 2021): `optimizer` moves master, optimizer states and fp32
gradients to pinned RAM; `optimizer+params` (ZeRO-3) also the 16-bit weights.  RAM needed is
DeepSpeed's estimate: those bytes × 1.5 (`additional_buffer_factor`).

Peak = what persists through the step + the larger of (the forward/backward activations) and
(the optimizer step's temporaries): the step runs after backward has freed the activations.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from fitcheck.calibration import ALLOCATOR_SLACK_MIN, TORCH_CPU_RUNTIME, TORCH_CUDA_CONTEXT
from fitcheck.engines.training.states import (
    BYTES,
    TEMP_BUFFERS,
    base_format,
    embedding_copies,
    model_states,
    offload_ram,
    shard,
    state_components,
    step_buffers,
)
from fitcheck.engines.transformers.releases import loss_shift_copy_mode, rotary_table_mode
from fitcheck.estimate.allocator import MIN_LARGE_ALLOC, round_size, segment_size
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.lora import adapted_matrices, adapter_saved_bytes_per_token, model_matrices
from fitcheck.estimate.lora_targets import parse_targets
from fitcheck.estimate.result import (
    ACTIVATIONS,
    ADAPTERS,
    GRADIENTS,
    LOGITS,
    MASTER_WEIGHTS,
    OPTIMIZER,
    OVERHEAD,
    WEIGHTS,
    Component,
    DeviceNeed,
    Estimate,
)
from fitcheck.estimate.sharding import FSDP_STRATEGIES
from fitcheck.estimate.training_activations import ALL_INPUT_SITES, ActivationBytes, input_sites, training_activations
from fitcheck.estimate.varying_lengths import StepTensors, TrainedParams
from fitcheck.estimate.weights import (
    largest_matrix_params,
    linear_matrices,
    rotary_table_bytes,
)
from fitcheck.model.spec import ModelSpec
from fitcheck.units import GiB

if TYPE_CHECKING:
    from fitcheck.plan import TrainingPlan

# What PyTorch's caching allocator must hold beyond the live tensors of a training step.  Replaying
# recorded steps through its rules (benchmarks/measure/alloc_trace.py, the smallest GPU each run
# fits in, results/allocator-replay-*.csv) gives 2–19 % of the allocated peak: least for LoRA with
# fixed lengths, most for full fine-tuning (foreach AdamW's temporaries split cached blocks).
# On a GPU with memory to spare, max_memory_reserved reads more than this (freed blocks stay cached
# until memory runs short): 11–40 % with fixed lengths, up to 120 % with varying ones.  Not yet
# The QLoRA capacity rows need more where the loss path dominates: see TRAINING_STRANDED_BLOCKS.
TRAINING_ALLOCATOR_SLACK = 0.15
# ... but never less than this many blocks of the step's largest transient tensor, the fp32 logits-sized
# tensor of the loss path (tokens × vocabulary × the loss's bytes, in its 2 MiB-rounded segment), which
# the caching allocator strands at the loss's backward from the second step on.  The mechanism, from the
# allocator's rules (c10/cuda/CUDACachingAllocator.cpp, pinned:
# https://github.com/pytorch/pytorch/blob/v2.4.0/c10/cuda/CUDACachingAllocator.cpp — get_free_block takes
# the smallest cached block that fits and splits it; a request of 10 MiB or more that none fits gets its own
# cudaMalloc'd segment, rounded to kRoundLarge = 2 MiB; when cudaMalloc fails, release_cached_blocks gives
# back only segments that are wholly free, release_available_cached_blocks nothing without
# max_split_size_mb): step 1's loss leaves its vocabulary-sized segments cached and free; in step 2's
# forward, once the small free blocks are used up, the checkpointed layer outputs (live until backward)
# are carved out of one of them, the smallest free block large enough; at the loss's backward the third
# vocabulary-sized request (log_softmax_backward's output) finds that segment partly live, too small for
# it and impossible to give back, so one more segment of that size is needed: the pinned segment's free
# part stays stranded.  Replaying recorded QLoRA layer traces (benchmarks/measure/layer_trace.py;
# `python -m benchmarks.capacity --trace`, benchmarks/results/qlora-trace-reserve-2026-12-01.csv) shows
# exactly that at every row's published length: Llama-3.1-8B at 28,000 tokens strands 13.81 GiB (one
# fp32 logits block: 13.38), the 70B rows 3.25–4.71 (blocks: 3.30–3.58).  Unit: blocks; a count from
# the mechanism, not fitted.
TRAINING_STRANDED_BLOCKS = 1
# On the CPU, PyTorch allocates through glibc malloc, and a decoder layer's forward and backward free
# hidden-wide tensors between tensors that stay alive: glibc's heap keeps those blocks (they are below
# its mmap threshold, at most 32 MiB), so resident memory holds an amount per layer and token that a
# share of the allocated bytes misses where layers, not weights or logits, dominate (SmolLM2-135M: 30
# layers of 576).  Which blocks stay is glibc's placement, so the count is measured, not derived.  Unit: freed blocks of
# tokens × hidden × compute-dtype bytes per decoder layer.  Measured (python -m benchmarks.measure and
# benchmarks.measure.rss_parts; results/cpu-2026-11-30.csv, cpu-2026-12-01.csv, cpu-rss-parts-2026-12-01.csv):
# resident minus live tensors at the step's peak is 4.7–12.2 such blocks per layer over the runs with
# 16 or more layers (10.0–12.2 for LoRA on attention, 8.7–10.0 for bf16 full fine-tuning, 4.7–6.8 with
# checkpointing), and with MALLOC_MMAP_THRESHOLD_=65536 (no heap reuse) the peak falls to the live tensors.
CPU_HEAP_BLOCKS_PER_LAYER = 10
# Architectures whose modeling code computes the loss on logits in the compute dtype and shifts
# them with a contiguous copy (Qwen1 remote code, modeling_qwen.py QWenLMHeadModel.forward).
# transformers' own models (>= 4.46, loss_utils.ForCausalLMLoss) upcast to fp32 and shift labels.
_LOSS_IN_COMPUTE_DTYPE = frozenset({"qwen"})


# Qwen(1) remote code as its repositories have shipped it since 2023-12-07 (Qwen/Qwen-7B and -Chat
# modeling_qwen.py; history mirrored at github.com/zhangningboo/Qwen-7B, modeling_qwen.py @d4efd21):
#   QWenAttention.forward: `query, key, value = mixed_x_layer.split(self.split_size, dim=2)`: v stays a
#     view of c_attn's fused output; q and k get new tensors from apply_rotary_pos_emb.
#   without flash-attention (`use_flash_attn` off, or flash_attn not importable) and torch >= 2
#     (SUPPORT_TORCH2): `attention_mask.expand(-1, -1, query.size(2), -1).masked_fill(~causal_mask,
#     finfo.min)` makes a new batch × 1 × s × s mask in the compute dtype in every layer, passed as
#     `F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask)`.  The fused
#     kernels that take a mask (CUDA memory-efficient since torch 2.1, CPU flash) save it for backward
#     (derivatives.yaml: `_scaled_dot_product_efficient_attention_backward(..., attn_bias, ...)`).
#     The fixed-size `registered_causal_mask` buffer of the Sep–Nov 2023 code is gone ("remove
#     fix-sized causal mask", @f7bc352, 2023-11-14).
#   with flash-attention: `flash_attn_func(q, k, v)` at batch 1; at batch > 1 with an attention mask
#     FlashSelfAttention.unpad_input indexes q, k and v (copies: the view is not kept).
#   Both kernels save v as given (flash_attn_interface.py `maybe_contiguous` copies only a tensor
#   whose last stride is not 1), so the whole fused qkv output stays alive in every layer, not v.
# Measured with saved_tensors_hooks on that code (4-layer bf16 QWen, LoRA on c_attn, torch 2.13 CPU
# SDPA): the saved storages are the fused qkv output (3 × hidden) and a 1 × 1 × s × s bf16 mask per layer.


def remote_code_layer_bytes(spec: ModelSpec, plan: TrainingPlan, act_b: int) -> int:
    """Bytes per token each decoder layer of Qwen(1) remote code keeps beyond `layer_bytes_per_token`:
    the q and k parts of the fused qkv output (kept with the v view) and, without flash-attention,
    the layer's own s × s mask (batch × s² × compute bytes ÷ batch × s tokens = s × compute bytes)."""
    if spec.architecture != "qwen":
        return 0
    q_width = spec.num_attention_heads * spec.attn_head_dim
    kv_width = spec.num_kv_heads * spec.attn_head_dim
    flash = plan.attention == "flash"
    fused = (q_width + kv_width) * act_b if (not flash or plan.batch == 1) else 0
    mask = 0 if flash else plan.seq_len * act_b
    return fused + mask


# accelerate's Accelerator.prepare_model wraps the forward of a model trained with native AMP (the HF
# Trainer with bf16/fp16, no DeepSpeed or FSDP) in `convert_outputs_to_fp32` (accelerate/accelerator.py;
# utils/operations.py convert_to_fp32 turns every fp16/bf16 tensor of the returned output, through
# tuples and dicts, into `.float()` copies).  Qwen(1) remote code returns its cache as a tuple of
# (key, value) tensors for every layer when `use_cache` is on: config.json has `"use_cache": true`
# and QWenModel.forward turns it off only under gradient checkpointing (ms-swift's sft.py likewise sets
# `model.config.use_cache = False` only with gradient checkpointing).  So once the forward returns,
# fp32 copies of every layer's k and v exist next to the fp32 logits, the 16-bit logits (the original
# output is referenced until the conversion returns) and the loss's saved fp32 log-softmax, until the
# training step's compute_loss drops the outputs (before backward).  Measured on the code above: the
# returned past_key_values are fp32, layers × 2 × tokens × hidden × 4 B.
# transformers' own models return a Cache object since 4.36 (`DynamicCache`), which the conversion
# leaves as it is.


def after_forward_bytes(spec: ModelSpec, plan: TrainingPlan, act_b: int, upcast: bool) -> int:
    """Per token: the outputs alive when the forward has returned (beyond the saved activations),
    for Qwen(1) remote code under native AMP with its tuple cache on; 0 where that does not apply."""
    amp = act_b < 4 and plan.zero is None and not plan.fsdp
    if spec.architecture != "qwen" or not amp or plan.grad_checkpointing:
        return 0
    v = spec.vocab_size
    kv_width = spec.num_kv_heads * spec.attn_head_dim
    saved_loss = v * (4 if upcast else act_b)  # the log-softmax output cross_entropy keeps
    return v * act_b + v * 4 + saved_loss + spec.num_layers * 2 * kv_width * 4


def _quant_scratch(spec: ModelSpec, plan: TrainingPlan) -> tuple[int, str]:
    """Dequantized weights that exist while a quantized base runs forward/backward."""
    fmt = weight_format(plan.precision)
    if fmt.family in ("gptq", "awq"):
        # auto-gptq's QuantLinear dequantizes to fp16 and torch.matmul saves that weight for
        # backward: one layer at a time when recomputed under checkpointing, every layer otherwise.
        per_layer = sum(m.rows_in * m.cols_out * m.per_layer * m.layers
                        for m in linear_matrices(spec)) // spec.num_layers
        layers = 1 if plan.grad_checkpointing else spec.num_layers
        return per_layer * 2 * layers, (f"{layers} layer(s) of {fmt.name} weights dequantized to fp16 and saved "
                                        "for backward")
    if fmt.family == "bnb":
        # bitsandbytes MatMul4Bit / MatMul8bitLt dequantize one weight at a time (forward and backward).
        per = 2 if plan.precision == "nf4" else 1
        return largest_matrix_params(spec) * per, "bitsandbytes dequantizes one matrix at a time"
    return 0, ""


def _step_activations(spec: ModelSpec, plan: TrainingPlan, *, act_b: int, param_b: int,
                      lm_head_trains: bool) -> ActivationBytes:
    """The activations and loss-path bytes of one micro-batch of `plan` (estimate_training's own)."""
    ds = plan.zero is not None
    targets = parse_targets(plan.lora_targets) if plan.mode != "full" else None
    # Adapter branches: fp32 input copies when the adapters are fp32 on a 16-bit base (param_b is
    # the adapters' dtype), dropout copies and masks.
    lora_saved = adapter_saved_bytes_per_token(spec, targets, plan.lora_rank, adapter_bytes=param_b,
                                               compute_bytes=act_b,
                                               dropout=plan.lora_dropout) if targets else 0
    # A frozen base keeps no linear inputs; LoRA branches in the compute dtype without dropout
    # read the input tensor itself and keep it (fp32 casts and dropout copies are in lora_saved).
    full = plan.mode == "full"
    if full:
        saved_inputs = ALL_INPUT_SITES
    elif param_b == act_b and plan.lora_dropout <= 0:
        saved_inputs = input_sites(m.role for m in adapted_matrices(spec, parse_targets(plan.lora_targets)))
    else:
        saved_inputs = frozenset()
    # The residual stream keeps the embedding output's dtype: fp32 when prepare_model_for_kbit_training
    # upcast the embeddings (a bitsandbytes base; base_format), whatever autocast does to the linears.
    kbit_fp32 = base_format(plan).keep_bits == 32 and plan.mode != "full"
    resid_b = 4 if kbit_fp32 else act_b
    # Its fp32 lm_head runs under autocast: a 16-bit copy of the weight is made and kept for backward.
    head_cast = kbit_fp32 and act_b < 4
    upcast = (not ds) or spec.architecture not in _LOSS_IN_COMPUTE_DTYPE
    shifts = spec.architecture in _LOSS_IN_COMPUTE_DTYPE
    return training_activations(spec, tokens_per_gpu=plan.batch * plan.seq_len, seq_len=plan.seq_len,
                                attention=plan.attention, act_bytes=act_b, checkpointing=plan.grad_checkpointing,
                                upcast_loss=upcast, shifts_logits=shifts, trainable_base=full,
                                saved_inputs=saved_inputs, lm_head_trains=lm_head_trains,
                                lora_saved_bytes=lora_saved,
                                # batch 1: logits[..., :-1, :] is contiguous already, .contiguous() copies nothing
                                shift_copy_fp32=plan.batch > 1
                                and loss_shift_copy_mode(spec.architecture, plan.transformers_version),
                                residual_bytes=resid_b,
                                head_cast_bytes=spec.vocab_size * spec.hidden_size * act_b if head_cast else 0,
                                remote_layer_bytes=remote_code_layer_bytes(spec, plan, act_b),
                                after_forward_bytes=after_forward_bytes(spec, plan, act_b, upcast))


def cpu_heap_retention(spec: ModelSpec, plan: TrainingPlan, act_b: int, allocated: int) -> tuple[int, str]:
    """Bytes glibc's heap keeps resident beyond the live tensors of a CPU training step, and why.

    The larger of a share of the allocated bytes (TRAINING_ALLOCATOR_SLACK) and the freed hidden-wide
    blocks each decoder layer leaves in the heap (CPU_HEAP_BLOCKS_PER_LAYER × layers × tokens × hidden ×
    compute bytes): the second decides for small, deep models, the first where weights and logits do.
    """
    share = max(int(allocated * TRAINING_ALLOCATOR_SLACK), ALLOCATOR_SLACK_MIN)
    tokens = plan.batch * plan.seq_len
    per_layer = CPU_HEAP_BLOCKS_PER_LAYER * spec.num_layers * tokens * spec.hidden_size * act_b
    if per_layer > share:
        return per_layer, (f"glibc heap: freed blocks stay resident ({CPU_HEAP_BLOCKS_PER_LAYER} hidden-wide blocks "
                           f"per layer: {CPU_HEAP_BLOCKS_PER_LAYER} × {spec.num_layers} layers × {tokens:,} tokens × "
                           f"{spec.hidden_size} × {act_b} B; measured 4.7–12.2 on CPU training runs)")
    return share, (f"glibc heap: freed blocks stay resident ({TRAINING_ALLOCATOR_SLACK:.0%} of allocated; "
                   "measured 4–40 % on 17 CPU training runs)")


def largest_transient_bytes(spec: ModelSpec, plan: TrainingPlan) -> int:
    """The largest tensor one micro-batch allocates and frees: a vocabulary-sized tensor of the loss
    path (tokens × vocabulary × the loss's bytes: fp32 where the loss is upcast, as step_tensors
    says), as the caching allocator holds it (its own segment, rounded to 2 MiB)."""
    t = step_tensors(spec, plan)
    nbytes = plan.batch * plan.seq_len * t.vocab * max(t.loss_bytes, t.compute_bytes)
    return segment_size(round_size(nbytes))


@dataclass(frozen=True)
class OwnSegments:
    """The parameter-shaped tensors of a step's peak that take segments of their own: their bytes and
    what those segments hold beyond them (own_segment_bytes)."""

    tensor_bytes: int = 0
    rounding: int = 0
    sets: str = ""          # which copies of the parameters, for the reserve's explanation
    # Where the optimizer step is the peak: the micro-batch's transients (saved activations, the loss
    # path) that backward freed before it, whose cached blocks the gradients, the states and the step's
    # temporaries are carved from (the segments such a tensor pins stay partly free) ...
    freed_transients: int = 0
    # ... and the segment of the largest trained tensor's step temporary (foreach AdamW's sqrt of it),
    # which a smaller request of the step can split first (own_segment_bytes).
    largest_block: int = 0


def _own_segment_set(tp: TrainedParams, layers: int, nbytes: int) -> tuple[int, int]:
    """(bytes, segment rounding) of one copy of the trained parameters at `nbytes` per element, over
    its tensors of at least MIN_LARGE_ALLOC: each one the caching allocator serves from a segment of
    its own, rounded up to 2 MiB (allocator.segment_size), or from a cached block of that size."""
    tensors = [(n, layers) for n in (*tp.layer, *tp.layer_vectors)] + [
        (n, 1) for n in (tp.embedding, tp.head, *tp.final_vectors)]
    size = waste = 0
    for n, count in tensors:
        b = n * nbytes
        r = round_size(b)
        if n and r >= MIN_LARGE_ALLOC:
            size += b * count
            waste += (segment_size(r) - b) * count
    return size, waste


def own_segment_bytes(tp: TrainedParams | None, layers: int, sets: tuple[tuple[str, int], ...]) -> OwnSegments:
    """The copies of the trained parameters live at the step's peak (`sets`: (name, bytes per element)
    of each: the weights, the gradients, each optimizer state, the master copy, the step's foreach
    temporaries), their tensors of 10 MiB or more and the 2 MiB rounding of their segments.

    Why they are apart from the share (TRAINING_ALLOCATOR_SLACK): a tensor of at least kMinLargeAlloc
    (10 MiB) that no cached block fits gets a cudaMalloc'd segment of its own, its size rounded up to
    kRoundLarge = 2 MiB (c10/cuda/CUDACachingAllocator.cpp, pinned in allocator.py); the same shapes
    recur every step (the gradients made in backward, the step's temporaries), and best fit takes a
    cached block of exactly a parameter's rounded size where one is free.  Where one is not, a request
    takes the smallest larger block and splits it: replaying full fine-tuning steps
    (fitcheck.estimate.varying_lengths with TrainedParams, two optimizer steps and more; docs/accuracy.md,
    "Where the optimizer step's tensors dominate") shows a layer's temporary splitting the segment of
    the embedding's or lm_head's, which that tensor's temporary then needs anew: one such block
    (TRAINING_STRANDED_BLOCKS) is what Qwen-7B's steps need beyond their live peak and their rounding at
    512 tokens (1.2–1.4 GiB), less at 2,048 (0.1–0.4 GiB).  The share, measured on runs whose tensors
    share 20 MiB and 2 MiB segments, is not their physics."""
    if tp is None:
        return OwnSegments()
    size = waste = 0
    for _, nbytes in sets:
        s, w = _own_segment_set(tp, layers, nbytes)
        size += s
        waste += w
    return OwnSegments(size, waste, ", ".join(name for name, _ in sets))


def gpu_allocator_reserve(spec: ModelSpec, plan: TrainingPlan, allocated: int, headroom: int,
                          own: OwnSegments = OwnSegments()) -> tuple[int, str]:
    """Bytes PyTorch's caching allocator needs beyond the live tensors of a GPU training step, and why.

    The larger of a share of the allocated bytes (TRAINING_ALLOCATOR_SLACK) and the stranded blocks of
    the step's largest transient tensor (TRAINING_STRANDED_BLOCKS × largest_transient_bytes), less
    `headroom`: how far the estimate's peak lies above the live tensors at the loss's backward, where
    the block is stranded (0 where that is the peak).  `own`: the parameter-shaped tensors of the peak
    that take segments of their own (own_segment_bytes, full fine-tuning with torch's AdamW on one
    GPU): the share leaves them out, and takes in the transients freed before the step where that is
    the peak; their segments' rounding is added, and the share is at least the stranded blocks of the
    largest trained tensor's temporary there.
    """
    shared = max(int((allocated - own.tensor_bytes + own.freed_transients) * TRAINING_ALLOCATOR_SLACK),
                 ALLOCATOR_SLACK_MIN)
    split = TRAINING_STRANDED_BLOCKS * own.largest_block
    share = max(shared, split) + own.rounding
    block = largest_transient_bytes(spec, plan)
    stranded = TRAINING_STRANDED_BLOCKS * block - headroom
    if stranded > share:
        t = step_tensors(spec, plan)
        return stranded, (f"PyTorch caching-allocator reserve the step needs: {TRAINING_STRANDED_BLOCKS} block of the "
                          f"loss's largest tensor ({plan.batch * plan.seq_len:,} tokens × {spec.vocab_size:,} "
                          "vocabulary "
                          f"× {max(t.loss_bytes, t.compute_bytes)} B = {block / GiB:.2f} GiB), which the next step "
                          "strands in the allocator's cache at the loss's backward; more than "
                          f"{TRAINING_ALLOCATOR_SLACK:.0%} of allocated")
    if own.tensor_bytes:
        rounding = (f"the 2 MiB rounding ({own.rounding / GiB:.2f} GiB) of the {own.tensor_bytes / GiB:.2f} GiB of "
                    f"tensors of 10 MiB or more ({own.sets}), which take segments of their own")
        if split > shared:
            return share, (f"PyTorch caching-allocator reserve the step needs: {TRAINING_STRANDED_BLOCKS} block of the "
                           f"largest parameter's step temporary ({own.largest_block / GiB:.2f} GiB), whose segment a "
                           f"smaller tensor of the step splits, and {rounding}")
        freed = (f" and of the {own.freed_transients / GiB:.2f} GiB of activations and loss freed before the step, "
                 "whose cached blocks the step's tensors are carved from") if own.freed_transients else ""
        return share, (f"PyTorch caching-allocator reserve the step needs: {TRAINING_ALLOCATOR_SLACK:.0%} of the "
                       f"{(allocated - own.tensor_bytes) / GiB:.2f} GiB that share segments{freed}, and {rounding}")
    return share, (f"PyTorch caching-allocator reserve the step needs ({TRAINING_ALLOCATOR_SLACK:.0%} of allocated; "
                   "a roomy GPU's max_memory_reserved reads more, freed blocks staying cached)")


def _own_segments_at_peak(spec: ModelSpec, plan: TrainingPlan, grads: bool, master: bool,
                          step_at_peak: bool, freed: int) -> OwnSegments:
    """own_segment_bytes of the copies of the parameters live at the estimate's peak, where the
    varying-length replay models them (trained_params: full fine-tuning, torch's AdamW, one GPU)."""
    tp = trained_params(spec, plan)
    if tp is None:
        return OwnSegments()
    sets = [("weights", BYTES[plan.compute_dtype])]
    if grads:
        sets.append(("gradients", tp.grad_bytes))
    sets += [("exp_avg", tp.state_bytes), ("exp_avg_sq", tp.state_bytes)]
    if master:
        sets.append(("master weights", 4))
    if step_at_peak:
        sets.append(("the step's foreach temporaries", tp.state_bytes))
    own = own_segment_bytes(tp, spec.num_layers, tuple(sets))
    if not step_at_peak:
        return own
    largest = max((*tp.layer, tp.embedding, tp.head)) * tp.state_bytes
    return replace(own, freed_transients=freed, largest_block=segment_size(round_size(largest)))


def estimate_training(spec: ModelSpec, plan: TrainingPlan) -> Estimate:
    """Bytes per GPU (and RAM under offload) for one training step of `spec` as `plan` says.

    With gradient accumulation the step runs every phase a step of one micro-batch runs (its first micro-batch's
    backward, the optimizer step) and later backwards with the gradients held: its peak is the larger of the two
    estimates, so accumulating never lowers it (the allocator slack of the step phase can outweigh the held
    gradients' backward: full fine-tuning of Qwen2.5-7B at 3,732 tokens read 0.13 % lower with 2 micro-batches)."""
    own = _estimate_training(spec, plan)
    if plan.grad_accum <= 1:
        return own
    single = _estimate_training(spec, plan.with_changes(grad_accum=1))
    if single.total_bytes <= own.total_bytes:
        return own
    return replace(own, devices=single.devices)


def _estimate_training(spec: ModelSpec, plan: TrainingPlan) -> Estimate:
    st = model_states(spec, plan)
    N, act_b, grads_sharded = st.shards, st.act_b, st.stage >= 2

    # ---- activations ---------------------------------------------------------------------------
    full = plan.mode == "full"
    upcast = (not st.deepspeed) or spec.architecture not in _LOSS_IN_COMPUTE_DTYPE
    acts = _step_activations(spec, plan, act_b=act_b, param_b=st.param_b,
                             lm_head_trains=full or st.emb is not None)
    scratch, scratch_why = _quant_scratch(spec, plan) if plan.mode != "full" else (0, "")
    # The loss's tensors die in lm_head's backward, before the first layer is recomputed: the
    # backward peak is the saved tensors plus the larger of the two.
    fwd_bwd = acts.saved + max(acts.recompute, acts.logits) + scratch
    # Without gradient accumulation a plain PyTorch loop (and the Trainer) sets gradients to None
    # after each step (zero_grad(set_to_none=True)): they are created during backward as the
    # activations are freed, so the step's peak is either the loss's backward (no gradients yet)
    # or the optimizer step (gradients, no activations).  DeepSpeed and FSDP keep flat gradient
    # buffers, and accumulation keeps gradients across micro-batches: there they add.
    late_grads = plan.grad_accum == 1 and not st.deepspeed and not plan.fsdp and not st.offload_opt
    grads_at_step = st.gpu_grads + max(st.step_temp, acts.recompute)
    peak_at_step = late_grads and grads_at_step > fwd_bwd
    deferred = late_grads and not peak_at_step  # the peak is the loss's backward, before the gradients
    grads_shown = 0 if deferred else st.gpu_grads
    grads_why = f"{st.trainable_all:,} trainable params × {st.param_b} B" + (
        f"; 1/{N} per GPU" if grads_sharded and N > 1 else "") + ("; on the CPU (offload)" if st.offload_opt else "")
    if deferred:
        grads_why += (f" = {st.gpu_grads / GiB:.2f} GiB, created during backward as activations are freed: "
                      "not yet there at the peak (the loss's backward)")

    # ---- assemble the device --------------------------------------------------------------------
    comps = state_components(plan, st, grads_shown, grads_why) + step_buffers(spec, plan, st)
    if rotary_table_mode(spec.architecture, plan.transformers_version):
        rotary, rotary_why = rotary_table_bytes(spec, act_b)
        comps.append(Component(WEIGHTS, shard(rotary, st.stage == 3, N), rotary_why))
    if spec.load_buffer_bytes:  # non-persistent buffers: every rank holds them whole (FSDP shards parameters)
        comps.append(Component(WEIGHTS, spec.load_buffer_bytes, spec.load_buffer_note))
    logits_why = f"logits over {spec.vocab_size:,} tokens of vocabulary and the loss's copies " + (
        "(fp32 cross-entropy)" if upcast else "(16-bit cross-entropy, as the model's code computes it)")
    if acts.outputs_peak:
        logits_why += ("; its peak is once the forward has returned: accelerate's fp32 copies of the logits and "
                       f"of the (k, v) cache all {spec.num_layers} layers return (use_cache is on without "
                       "checkpointing), with the 16-bit logits and the saved log-softmax")
    step_temp = st.step_temp
    if peak_at_step:
        # The optimizer step is the peak: activations and logits are gone by then.
        comps += [
            Component(ACTIVATIONS, 0, acts.detail + f" = {fwd_bwd / GiB:.2f} GiB with the logits, freed before "
                      "the optimizer step, which is the peak (gradients + step temporaries)"),
            Component(LOGITS, 0, logits_why + "; freed before the peak"),
        ]
        if grads_at_step > st.gpu_grads:
            comps.append(Component(TEMP_BUFFERS, grads_at_step - st.gpu_grads,
                                   st.step_why if step_temp >= acts.recompute
                                   else "the last layer recomputed in backward"))
    else:
        comps += [
            Component(ACTIVATIONS, acts.saved + max(acts.recompute - acts.logits, 0),
                      acts.detail + ("" if acts.recompute <= acts.logits else
                                     "; the recomputed layer outweighs the logits (freed by then)")),
            Component(LOGITS, acts.logits, logits_why),
        ]
        if scratch:
            comps.append(Component(TEMP_BUFFERS, scratch, scratch_why))
        if not late_grads and step_temp > fwd_bwd:
            # The step runs after backward freed the activations: only its excess over them adds.
            comps.append(Component(TEMP_BUFFERS, step_temp - fwd_bwd,
                                   f"{st.step_why} ({step_temp / GiB:.2f} GiB), beyond the activations backward "
                                   "has freed"))
    allocated = sum(c.bytes for c in comps)
    notes = _notes(plan, st.fmt, st.gpu_grads - grads_shown)
    facts = _facts(plan, st.trainable_all, st.gpu_grads)
    if plan.device == "cpu":
        heap, heap_why = cpu_heap_retention(spec, plan, act_b, allocated)
        comps.append(Component(OVERHEAD, heap, heap_why, counted_in="reserved"))
        comps.append(Component(OVERHEAD, TORCH_CPU_RUNTIME, "torch + transformers resident libraries",
                               counted_in="runtime"))
        return Estimate(spec.name, plan.mode, (DeviceNeed("cpu", "cpu", tuple(comps)),), plan.assumptions,
                        tuple(notes), facts)
    # The loss's backward holds the saved tensors, the loss path and the scratch; the peak may lie above it.
    at_peak = grads_at_step if peak_at_step else fwd_bwd + max(step_temp - fwd_bwd if not late_grads else 0, 0)
    # whether optimizer.step()'s temporaries are what the peak holds (the TEMP_BUFFERS components above)
    step_tensors_peak = step_temp > 0 and (step_temp >= acts.recompute if peak_at_step
                                           else not late_grads and step_temp > fwd_bwd)
    own = _own_segments_at_peak(spec, plan, grads_shown > 0, st.gpu_master > 0, step_at_peak=step_tensors_peak,
                                freed=fwd_bwd)
    slack, slack_why = gpu_allocator_reserve(spec, plan, allocated,
                                             headroom=max(at_peak - (acts.saved + acts.logits + scratch), 0), own=own)
    comps.append(Component(OVERHEAD, slack, slack_why, counted_in="reserved"))
    comps.append(Component(OVERHEAD, TORCH_CUDA_CONTEXT, "CUDA context and libraries", counted_in="runtime"))
    devices = [DeviceNeed(f"gpu{i}", "gpu", tuple(comps)) for i in range(plan.world)]
    if st.offload_opt:
        devices.append(offload_ram(plan, st))
        notes.insert(0, "offloaded optimizer steps run on the CPU: expect a much slower step")
    if plan.nodes > 1:
        facts += (("nodes", plan.nodes),)
        if st.offload_opt:
            facts += (("ram_per_node_bytes", devices[-1].total_bytes),)
    return Estimate(spec.name, plan.mode, tuple(devices), plan.assumptions, tuple(notes), facts, nodes=plan.nodes)


def _notes(plan: TrainingPlan, fmt, deferred_gradients: int) -> list[str]:
    notes = []
    if plan.fsdp and FSDP_STRATEGIES[plan.fsdp].within_node:
        twin = "full-shard" if FSDP_STRATEGIES[plan.fsdp].stage == 3 else "shard-grad-op"
        if plan.nodes <= 1:
            notes.append(f"FSDP {plan.fsdp} on one node is {twin}: the shard group is the node, there is no "
                         "replica to all-reduce with")
        else:
            notes.append(f"FSDP {plan.fsdp}: model states sharded over each node's {plan.gpus} GPUs and replicated "
                         f"on all {plan.nodes} nodes (1/{plan.gpus} per GPU, not 1/{plan.world}); only the "
                         "gradients' all-reduce crosses the link between nodes")
    if deferred_gradients:
        notes.append(f"gradients ({deferred_gradients / GiB:.2f} GiB) are created during backward as the activations "
                     "are freed: the peak, the loss's backward, comes before them")
    if plan.grad_accum > 1:
        notes.append(f"gradient accumulation {plan.grad_accum}: effective batch {plan.effective_batch}; "
                     "gradients stay allocated between micro-batches (counted)")
    if plan.optimizer == "paged-adamw-8bit":
        notes.append("paged optimizer states can spill to RAM under pressure (slower, but avoids OOM)")
    if plan.mode == "qlora" and fmt.family in ("gptq", "awq"):
        notes.append(f"QLoRA on a {plan.precision} base: LoRA over a pre-quantized checkpoint (auto-gptq/AutoAWQ)")
    if plan.device == "cpu":
        notes.append("training on the CPU: expect steps many times slower than on a GPU")
    return notes


def _facts(plan: TrainingPlan, trainable: int, gradient_bytes: int) -> tuple:
    # gradient_bytes: per device, also where the breakdown shows none (created after its peak).
    return (("trainable_params", trainable), ("tokens_per_step", plan.effective_batch * plan.seq_len),
            ("effective_batch", plan.effective_batch), ("gradient_bytes", gradient_bytes))


def model_state_bytes(estimate: Estimate, device: str = "gpu0") -> int:
    """Weights + adapters + gradients + optimizer states + master weights on one device.

    Gradients count at full size also where the breakdown shows none at its peak (created later
    in backward): the `gradient_bytes` fact.
    """
    d = next(x for x in estimate.devices if x.device == device)
    grads = d.component(GRADIENTS) or int(estimate.fact("gradient_bytes", 0))
    return grads + sum(d.component(n) for n in (WEIGHTS, ADAPTERS, OPTIMIZER, MASTER_WEIGHTS))


def step_activations(spec: ModelSpec, plan: TrainingPlan) -> ActivationBytes:
    """The activations and loss-path bytes of one micro-batch of `plan`, as estimate_training counts them."""
    act_b = BYTES[plan.compute_dtype]
    ds = plan.zero is not None
    master_on = plan.master_weights == "fp32" and plan.compute_dtype != "fp32"
    adapters_fp32 = plan.mode != "full" and master_on and not ds
    param_b = 4 if (plan.compute_dtype == "fp32" or adapters_fp32) else act_b
    emb = embedding_copies(spec, plan)
    return _step_activations(spec, plan, act_b=act_b, param_b=param_b,
                             lm_head_trains=plan.mode == "full" or emb is not None)


def step_tensors(spec: ModelSpec, plan: TrainingPlan) -> StepTensors:
    """Per-token sizes of the tensors one micro-batch of `plan` allocates and frees (the estimate's
    own activations and loss path), for replaying steps of varying length
    (fitcheck.estimate.varying_lengths)."""
    act_b = BYTES[plan.compute_dtype]
    ds = plan.zero is not None
    acts = step_activations(spec, plan)
    n = plan.batch * plan.seq_len
    rb = 4 if base_format(plan).keep_bits == 32 and plan.mode != "full" else act_b
    h, L = spec.hidden_size, spec.num_layers
    if plan.grad_checkpointing:
        outside = max(acts.saved // n - L * h * rb, 0)
        work = max(acts.recompute // n - 2 * h * rb, 0)
    else:
        outside, work = 0, acts.saved // n // L
    upcast = not ds or spec.architecture not in _LOSS_IN_COMPUTE_DTYPE
    return StepTensors(layers=L, layer_input=h * rb, layer_work=work, outside=outside, vocab=spec.vocab_size,
                       compute_bytes=act_b, loss_bytes=4 if upcast else act_b,
                       shift_copy=plan.batch > 1 and spec.architecture in _LOSS_IN_COMPUTE_DTYPE,
                       checkpointing=plan.grad_checkpointing)


def trained_params(spec: ModelSpec, plan: TrainingPlan) -> TrainedParams | None:
    """Full fine-tuning's parameters as the varying-length replay gives them gradients and AdamW's
    tensors (fitcheck.estimate.varying_lengths.TrainedParams), for one GPU with torch's AdamW (foreach,
    its CUDA default: torch v2.1.1 torch/optim/optimizer.py _default_to_fused_or_foreach); None where
    they stay static (LoRA, whose adapters' gradients are small; DeepSpeed and FSDP, which keep flat
    buffers; other optimizers; layers of different shapes).

    Each layer's weight matrices are the checkpoint's modules (fused where it fuses:
    fitcheck.estimate.lora.model_matrices), in the reverse of their forward order (backward's);
    its vectors are two norms of hidden size and, where the parameter count leaves more, one vector
    for its biases (they all fall in the allocator's small pool, where only their count matters); the
    final norm one vector of hidden size."""
    if (plan.mode != "full" or plan.optimizer != "adamw" or plan.zero is not None or plan.fsdp
            or plan.offload != "none" or plan.gpus != 1 or plan.nodes != 1 or plan.device != "gpu"):
        return None
    L, h = spec.num_layers, spec.hidden_size
    mats = model_matrices(spec)
    if any(m.layers != L for m in mats):
        return None
    layer = tuple(m.rows_in * m.cols_out for m in reversed(mats) for _ in range(m.per_layer))
    emb = spec.vocab_size * h
    head = 0 if spec.tie_word_embeddings else emb
    rest = max(spec.total_params - L * sum(layer) - emb - head - h, 0)  # the layers' norms and biases
    per_layer = rest // L
    vectors = (h, h) + ((per_layer - 2 * h,) if per_layer > 2 * h else ())
    fp32_compute = plan.compute_dtype == "fp32"
    param_b = 4 if fp32_compute else BYTES[plan.compute_dtype]
    state_b = 4 if plan.master_weights == "fp32" and not fp32_compute else param_b
    return TrainedParams(layer=layer, layer_vectors=vectors, embedding=emb, head=head, final_vectors=(h,),
                         grad_bytes=param_b, state_bytes=state_b, accumulation=max(plan.grad_accum, 1))
