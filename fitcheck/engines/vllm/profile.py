"""vLLM's profiled activation peak: what its profiling run measures before it sizes the KV cache (the forward over
max_num_batched_tokens, then the sampler over max_num_seqs rows), and the batch defaults `vllm serve` picks.
"""

from __future__ import annotations

from fitcheck.estimate.activations import attn_dims, ffn_width_per_token
from fitcheck.model.spec import ModelSpec

# vLLM profiles its activation peak with a dummy batch of max_num_batched_tokens and max_num_seqs sampled
# sequences.  8192 and 256 are what SGLang's estimate reads (its chunked_prefill_size on GPUs of 25 GB and more,
# and the sampled rows it keeps); vLLM's own defaults depend on the GPU (:func:`vllm_batch_defaults`).
VLLM_PROFILE_TOKENS = 8192
VLLM_MAX_NUM_SEQS = 256
# vLLM v0.19.0's defaults for `vllm serve` (EngineArgs.get_batch_defaults, usage context OPENAI_API_SERVER,
# https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/engine/arg_utils.py): a GPU of 70 GiB or more whose name
# does not contain "a100" gets max_num_batched_tokens 8192 and max_num_seqs 1024; any other GPU 2048 and 256.
VLLM_LARGE_GPU_BYTES = 70 * 2**30
VLLM_LARGE_GPU_BATCH = (8192, 1024)   # (max_num_batched_tokens, max_num_seqs)
VLLM_SMALL_GPU_BATCH = (2048, 256)
# Streaming multiprocessors of the largest NVIDIA GPU of each compute capability (NVIDIA's datasheets: V100 80,
# RTX 8000 72, A100 108, A40 84, Jetson AGX Orin 16, L40S 142, H100 SXM/H200 132, B200 148, RTX PRO 6000
# Blackwell 188): vLLM's Triton top-k/top-p keeps one vocabulary-sized fp32 row per SM it runs on
# (:func:`vllm_profile_bytes`), so the largest GPU of a generation bounds that buffer; an unknown one takes the
# largest of all.
MAX_SMS_BY_COMPUTE_CAPABILITY = {7.0: 80, 7.5: 72, 8.0: 108, 8.6: 84, 8.7: 16, 8.9: 142, 9.0: 132, 10.0: 148,
                                 12.0: 188}
# vLLM's sampler falls back from the Triton top-k/top-p kernel to PyTorch's sort below this many rows
# (apply_top_k_top_p: ``if HAS_TRITON and logits.shape[0] >= 8``,
# https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/v1/sample/ops/topk_topp_sampler.py).
VLLM_TRITON_SAMPLER_MIN_ROWS = 8


def vllm_batch_defaults(gpu_total_bytes: int | None, compute_capability: float | None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that `vllm serve` v0.19.0 picks for this GPU (VLLM_LARGE_GPU_BATCH
    or VLLM_SMALL_GPU_BATCH).  vLLM tells the A100 from its name; compute capability 8.0 with 70 GiB or more
    stands for it here (an A800 80GB, also 8.0, gets the larger defaults from vLLM).  An unknown GPU: the larger
    defaults, whose profiled peak is the larger."""
    if gpu_total_bytes is not None and (gpu_total_bytes < VLLM_LARGE_GPU_BYTES or compute_capability == 8.0):
        return VLLM_SMALL_GPU_BATCH
    return VLLM_LARGE_GPU_BATCH


def max_sms(compute_capability: float | None) -> int:
    """The most streaming multiprocessors a GPU of this compute capability has (MAX_SMS_BY_COMPUTE_CAPABILITY)."""
    table = MAX_SMS_BY_COMPUTE_CAPABILITY
    return table.get(compute_capability, max(table.values())) if compute_capability else max(table.values())


def _next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def vllm_moe_workspace_bytes(spec: ModelSpec, tensor_parallel: int, act_bytes: int, tokens: int) -> int:
    """The fused-MoE workspace vLLM v0.19.0 keeps for a batch of ``tokens`` tokens (0 for a dense model).

    The modular MoE kernel takes its buffers from the worker's WorkspaceManager, which keeps the largest it was
    asked for: ``max(workspace13, output) + workspace2`` (FusedMoEModularKernel._allocate_buffers,
    https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/model_executor/layers/fused_moe/modular_kernel.py;
    WorkspaceManager, https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/v1/worker/workspace.py).  TritonExperts,
    the kernel of 16-bit experts on CUDA, asks for workspace13 = M × top-k × max(N/2, K), workspace2 =
    M × top-k × max(N, K) and output = M × K, with N the fused gate_up width of one rank (2 × moe_intermediate /
    tp) and K the hidden size (TritonExperts.workspace_shapes,
    https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/model_executor/layers/fused_moe/fused_moe.py), in the
    activation dtype.  It outlives the forward, so the sampler runs beside it."""
    if not spec.is_moe or not spec.experts_per_token:
        return 0
    n = 2 * (spec.moe_intermediate_size or spec.intermediate_size) // max(tensor_parallel, 1)
    k = spec.hidden_size
    topk = spec.experts_per_token
    ws13 = max(tokens * topk * max(n // 2, k), tokens * k)
    ws2 = tokens * topk * max(n, k)
    return int((ws13 + ws2) * act_bytes)


def vllm_profile_bytes(spec: ModelSpec, tensor_parallel: int, act_bytes: int, *, sampler: str = "vllm",
                       tokens: int = VLLM_PROFILE_TOKENS, seqs: int = VLLM_MAX_NUM_SEQS,
                       sms: int | None = None, moe_workspace: bool = False) -> int:
    """vLLM's profiled activation peak on one GPU: the larger of its profiling run's two phases.

    ``profile_run`` runs ``_dummy_run(max_num_batched_tokens)`` (``tokens``), then, with the batch's hidden states
    still held (``hidden_states, last_hidden_states = self._dummy_run(...)``), ``_dummy_sampler_run`` on the
    last position of each of min(max_num_seqs, tokens) dummy requests (``seqs``).

    The forward: fused gate_up (2I), act output (I), qkv and residual streams per token.

    The sampler (``sampler="vllm"``, v0.19.0,
    https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/v1/worker/gpu_model_runner.py ``_dummy_sampler_run``,
    https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/v1/sample/sampler.py and
    https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/v1/sample/ops/topk_topp_sampler.py): the sampled rows'
    hidden states and their ``torch.rand_like`` copy; the model's logits (``act_bytes`` per vocabulary entry, held by
    ``_dummy_sampler_run``); ``logits.to(torch.float32)`` (4, none when the logits already are fp32); temperature
    in place; top-k and top-p by the Triton kernel for 8 rows or more
    (https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/v1/sample/ops/topk_topp_triton.py
    ``apply_top_k_top_p_triton``: in place, with a cached buffer of min(next_power_of_2(min(SMs, rows)), SMs)
    vocabulary-sized fp32 rows, ``sms``: :func:`max_sms` of the GPU); then ``random_sample``'s probabilities and
    its exponential draw (4 + 4).  Fewer than 8 rows sort as the releases before it did (``sampler="sort"``).

    ``sampler="sort"``: the releases before vLLM's Triton top-k/top-p kernel (pull request #33538, 2026): PyTorch's
    sort for every row (:func:`vllm_sampler_bytes_per_entry`).  ``sampler="logits"``: the forward plus two fp32
    logits-sized tensors, what SGLang's estimate keeps.  ``sampler="none"``: the forward alone (a pipeline stage
    before the last, which does not sample).

    The peak of a dense model does not shrink with tensor parallelism: vLLM's own startup logs for
    meta-llama/Meta-Llama-3-8B on an
    80 GB H100 read "PyTorch activation peak memory 1.26GiB" at -tp 1 and at -tp 2
    (https://github.com/vllm-project/vllm/pull/10511, sanity-check comment of 2024-12-14), and v0.19.0's read
    1.89 GiB for Llama-3.1-8B at -tp 1, 2 and 4 (benchmarks/data/vllm_startup_logs.csv): the logits are gathered
    whole on every rank and every rank samples, so the per-GPU figure is the unsharded one.  `tensor_parallel` is
    kept for the call sites.

    ``moe_workspace``: add the fused-MoE workspace vLLM keeps (:func:`vllm_moe_workspace_bytes`; 16-bit experts),
    held through the sampler; it shrinks with tensor parallelism (the experts' intermediate width is split).
    """
    workspace = vllm_moe_workspace_bytes(spec, tensor_parallel, act_bytes, tokens) if moe_workspace else 0
    h = spec.hidden_size
    ffn = ffn_width_per_token(spec, dispatch_imbalance=1.0)
    q, kv = attn_dims(spec)
    per_token = max(3 * ffn + 3 * h, (q + 2 * kv) + 3 * h) * act_bytes
    forward = tokens * per_token
    if workspace:
        # the forward: the workspace beside the layer's input, residual and norm output
        forward = max(forward, workspace + 3 * tokens * h * act_bytes)
    if sampler == "none":
        return int(forward)
    if sampler == "logits":
        return int(forward + seqs * spec.vocab_size * 2 * 4)
    held = tokens * h * act_bytes
    if sampler == "sort":
        return int(max(forward, held + seqs * spec.vocab_size * vllm_sampler_bytes_per_entry(act_bytes)))
    rows = max(min(seqs, tokens), 1)
    if rows < VLLM_TRITON_SAMPLER_MIN_ROWS:
        return int(max(forward, held + rows * spec.vocab_size * vllm_sampler_bytes_per_entry(act_bytes)))
    n_sms = sms or max_sms(None)
    buffer_rows = min(_next_power_of_2(min(n_sms, rows)), n_sms)
    sampled = (held + 2 * rows * h * act_bytes + rows * spec.vocab_size * vllm_triton_sampler_bytes_per_entry(act_bytes)
               + buffer_rows * spec.vocab_size * 4)
    return int(max(forward, sampled + workspace))


def vllm_triton_sampler_bytes_per_entry(act_bytes: int) -> int:
    """Bytes per vocabulary entry per sampled row at the peak of v0.19.0's sampler (:func:`vllm_profile_bytes`):
    the model's logits, their fp32 copy (none when they are fp32 already), the probabilities and the exponential
    draw: act_bytes + 12 with 16-bit logits, 12 with fp32 ones."""
    return act_bytes + (4 if act_bytes < 4 else 0) + 4 + 4


def vllm_sampler_bytes_per_entry(act_bytes: int) -> int:
    """Bytes per vocabulary entry per sequence at the peak of the sort-based sampler vLLM's profiling run exercised
    before its Triton top-k/top-p kernel (and still does for fewer than 8 rows).

    profile_run runs ``_dummy_sampler_run`` on max_num_seqs rows with temperature 0.5, top_p 0.9 and
    top_k vocab − 1, neither all-greedy nor all-random
    (https://github.com/vllm-project/vllm/blob/4e1790651fc758c06c7a903dd4cd82364ac91b27/vllm/v1/worker/gpu_model_runner.py,
    ``_dummy_sampler_run`` and ``profile_run``), so top-k/top-p's sort is inside the measured peak vLLM
    reserves, not beyond it.  Sampler.forward
    (https://github.com/vllm-project/vllm/blob/3e342658b2e9c85a30a54d19e64e5ad77b8a26a6/vllm/v1/sample/sampler.py)
    keeps the model's logits (compute dtype, `act_bytes`) and makes `logits.to(torch.float32)` (4);
    temperature divides in place; on CUDA TopKTopPSampler runs forward_native (FlashInfer's sampler only
    with VLLM_USE_FLASHINFER_SAMPLER=1), whose apply_top_k_top_p
    (https://github.com/vllm-project/vllm/blob/3babc05a035b42bb9d0ae51b83e102c85e3e5626/vllm/v1/sample/ops/topk_topp_sampler.py)
    sorts: fp32 values (4) and int64 indices (8), and while the sort runs, for 128 or more rows shorter
    than 10^6, ATen's segmented_sort_pairs holds int64 reverse indices (8)
    (https://github.com/pytorch/pytorch/blob/420d374dfeb7a2826c9101260e74d730304d1a73/aten/src/ATen/native/cuda/SortStable.cu)
    and cub's segmented radix sort, whose input may not be overwritten, its third keys and values
    buffers (4 + 8) as temporary storage
    (https://github.com/NVIDIA/cub/blob/36c7b552ecd785b1ef25061752d466957fce9e7c/cub/device/dispatch/dispatch_radix_sort.cuh):
    act_bytes + 36.  After the sort: top-k's and top-p's bool masks, the softmax (the cumsum in place)
    and the scattered result (act_bytes + 26), then the probabilities and random_sample's exponential
    draw (act_bytes + 16).  The opt-in V2 model runner (VLLM_USE_V2_MODEL_RUNNER=1,
    vllm/v1/worker/gpu/model_runner.py) skips top-k/top-p in profiling: not modelled."""
    logits = act_bytes + 4                     # the model's logits and the sampler's fp32 copy
    sort = logits + (4 + 8) + 8 + (4 + 8)      # values, indices; reverse indices; cub's third buffers
    masked = logits + (4 + 8) + 1 + 4 + 1 + 4  # values, indices, top-k mask, softmax, top-p mask, scatter
    draw = logits + 4 + 4 + 4                  # scattered logits, probabilities, exponential draw
    return max(sort, masked, draw)


