"""Inference estimate: a resolved Plan and a ModelSpec in, per-device bytes out.  Pure.

Engines differ in what they hold:
- transformers: weights, a KV cache sized to the tokens in flight, the prefill activation peak,
  dequantization scratch of quantized kernels; one CUDA context per GPU; with several GPUs
  `device_map="auto"` splits layers (each GPU sees its own activation peak).
- vLLM: reserves gpu_memory_utilization × total memory up front; inside it weights, the profiled
  activation peak, non-torch memory and a KV pool that takes the rest; tensor parallel splits
  weights and KV heads.
- llama.cpp: weights (mmap), a KV cache of n_ctx = context × sequences cells allocated up front,
  compute and output buffers; -ngl N puts N layers (and their KV) on the GPU, the rest in RAM.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from fitcheck.engines import ENGINES
from fitcheck.estimate import activations as A
from fitcheck.estimate import llama_cpp as LC
from fitcheck.estimate.allocator import load_waste_runs
from fitcheck.estimate.expert_offload import (
    LLAMA_CPP_OFFLOAD_MIN_BATCH,
    cpu_offload_bytes,
    offloaded_expert_bytes,
    offloaded_moe_layers,
    one_layer_expert_bytes,
)
from fitcheck.estimate.formats import weight_format, weight_format_or_none
from fitcheck.estimate.generate_step import CURRENT, StepTensors, min_length_processor, step_tensors
from fitcheck.estimate.kv_cache import LLAMA_CPP_SWA_PAD, kv_cache_bytes
from fitcheck.estimate.result import (
    ACTIVATIONS,
    KV_CACHE,
    OVERHEAD,
    WEIGHTS,
    Component,
    DeviceNeed,
    Estimate,
)
from fitcheck.estimate.weights import (
    WeightBytes,
    engine_format,
    largest_matrix_params,
    linear_matrices,
    rotary_table_bytes,
    weight_bytes,
    weight_tensor_runs,
)
from fitcheck.model import spec as S
from fitcheck.model.spec import ModelSpec
from fitcheck.plan import Plan, parse_transformers_version, rotary_table_mode, static_mask_mode
from fitcheck.units import GiB, MiB

# CUDA context, cuBLAS/cuDNN handles and workspaces of a PyTorch process: not seen by
# torch.cuda.max_memory_allocated (≈0.3–0.6 GiB as usually reported; more on newer GPUs).
TORCH_CUDA_CONTEXT = 512 * MiB
# ggml's CUDA backend: context plus cuBLAS handle, smaller than PyTorch's.
LLAMA_CPP_CUDA_CONTEXT = 320 * MiB
# PyTorch's caching allocator keeps freed blocks of transient tensors; reserved exceeds allocated
# by 5–15 % of what comes and goes.  Weights are allocated once, tensor by tensor:
# what their segments hold beyond them follows from the allocator's rules (allocator.load_waste).
# Replayed generate runs (benchmarks/measure/alloc_trace.py) need 0–42 MiB beyond that.
ALLOCATOR_SLACK = 0.05
ALLOCATOR_SLACK_MIN = 64 * MiB
# vLLM: the CUDA context and the CUDA graphs.  vLLM v0.19.0 keeps them beyond its reservation of
# gpu_memory_utilization × total: the worker takes its memory snapshot after the CUDA context and NCCL exist
# (``init_device``: "Initialize the distributed environment BEFORE taking memory snapshot") and reserves the KV
# cache from ``requested_memory - (weights + torch peak increase + non-torch increase)``, the increases measured
# from that snapshot; it captures CUDA graphs after the KV cache and subtracts their estimate only with
# VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 (off by default)
# (https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/v1/worker/gpu_worker.py, init_device and
# determine_available_memory; https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/envs.py).
VLLM_NON_TORCH = 1024 * MiB  # SGLang's CUDA context and graphs (its reservation is mem_fraction_static's)
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
def rope_cache_component(spec: ModelSpec, plan: Plan) -> Component | None:
    """The rotary cos/sin cache `plan.engine` (vLLM or SGLang) keeps on every GPU; None: the model has no rotary
    tables.  A compute capability marks an NVIDIA GPU, where SGLang keeps the table in fp32."""
    elements = spec.rope_table_elements()
    if not elements:
        return None
    sglang = plan.engine == "sglang"
    fp32 = (sglang and plan.compute_capability is not None) or (not sglang and spec.architecture == "gpt_oss")
    entry = _act_bytes("fp32" if fp32 else plan.precision)
    tables = " and ".join(f"{p:,} positions × {d}" for p, d in spec.rope_tables)
    return Component(WEIGHTS, elements * entry,
                     f"rotary cos/sin cache of {tables} dims in {'fp32' if entry == 4 else '16-bit'}, whole on every "
                     f"GPU ({'SGLang' if sglang else 'vLLM'} builds it at load; not sharded)")


# A CPU process running transformers: the libraries' own resident memory (torch, transformers).
TORCH_CPU_RUNTIME = 600 * MiB
# On the CPU, PyTorch allocates through glibc malloc.  Tensors freed inside a forward pass go back
# to malloc's heap, not to the OS (its dynamic mmap threshold rises to 32 MiB, so most transient
# tensors come from the heap), and resident memory keeps about one more transient working set.
# Measured (benchmarks/measure, Qwen2.5-0.5B and a 2-layer Qwen2.5-7B, 4,096-token prefill): with
# MALLOC_MMAP_THRESHOLD_=65536 the peak matches the live-tensor formula (206 vs 190 MiB, 589 vs
# 572 MiB); with glibc's defaults it is higher by 119 and 129 MiB (see README, Accuracy).
# Generating re-allocates the whole DynamicCache each token (torch.cat per layer), and the freed
# smaller cache cannot hold the larger one: the heap keeps about one more KV cache as well.
CPU_HEAP_RETENTION = 1.0
LLAMA_CPP_CPU_RUNTIME = 100 * MiB
# ExLlama v2 kernels (AutoGPTQ 4-bit) keep a temp buffer for inputs up to max_input_length=2048.
EXLLAMA_MAX_INPUT = 2048


@functools.lru_cache(maxsize=2048)  # every catalog model × the precisions tried stays (`models --fits`)
def weight_load_waste(spec: ModelSpec, precision: str) -> int:
    """Bytes the caching allocator's segments hold beyond a model's weights once loaded."""
    return load_waste_runs(weight_tensor_runs(spec, weight_format(precision)))


def _act_bytes(precision: str) -> int:
    return 4 if precision == "fp32" else 2


def _weights(spec: ModelSpec, precision: str, engine: str = "") -> WeightBytes:
    return weight_bytes(spec, engine_format(spec, weight_format(precision), engine),
                        untie_lm_head=_separate_fp8_head(spec, precision, engine))


def _separate_fp8_head(spec: ModelSpec, precision: str, engine: str) -> bool:
    """transformers holds a tied-embedding model's pre-quantized FP8 checkpoint with lm_head on its own.

    The quantizer leaves lm_head unquantized (`ignore: ["lm_head"]` in llm-compressor's FP8 recipes;
    `modules_to_not_convert` in the fine-grained FP8 configs) and the checkpoint stores it as a bf16
    tensor next to the bf16 embedding (Qwen3-0.6B/1.7B/4B-FP8 carry `lm_head.weight`).  Measured under
    transformers 4.51.3: the Qwen3 speed benchmark's FP8 rows of the three tied models sit one bf16
    vocabulary × hidden matrix (297 / 594 / 742 MiB) above their tied count, within 63 MiB
    (benchmarks/data/qwen3_speed_benchmark.csv; the untied 8B/14B/32B read within 0.7 %).
    vLLM and SGLang keep the tie: their Qwen2/Qwen3/Llama classes point lm_head at embed_tokens when
    the config ties and skip the checkpoint's `lm_head.` tensors
    (https://github.com/vllm-project/vllm/blob/002456df36fc7a63ca4463f335a49d05634ab2ab/vllm/model_executor/models/qwen3.py,
    `Qwen3ForCausalLM.__init__` and `load_weights(skip_prefixes=["lm_head."])`).  A pre-quantized
    checkpoint is what transformers loads: the model's own FP8 files, or the catalog's FP8 repository
    (fitcheck.commands prints it); without one, `FineGrainedFP8Config()` quantizes the 16-bit checkpoint
    at load, leaving lm_head out of the conversion and tied.
    """
    return (precision == "fp8" and engine == "transformers" and spec.tie_word_embeddings
            and (spec.stored_format == "fp8" or "fp8" in spec.prequantized))


def _stored_weight_total(spec: ModelSpec, precision: str, computed: int) -> tuple[int, str]:
    """Exact stored bytes when the checkpoint's own format is what will be loaded."""
    stored = weight_format_or_none(spec.stored_format) if spec.stored_format else None
    if spec.stored_weight_bytes and stored and stored.name == precision:
        return spec.stored_weight_bytes, "exact, from the checkpoint header"
    return computed, ""


def _weights_component(spec: ModelSpec, plan: Plan, wb: WeightBytes, share: float = 1.0) -> Component:
    total, exact = _stored_weight_total(spec, plan.precision, wb.total)
    fmt = weight_format(plan.precision)
    parts = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in wb.by_group if v >= 2**20)
    detail = f"{spec.total_params / 1e9:.2f}B params as {fmt.description}"
    if fmt.family not in ("float", "gguf"):
        detail += "; embeddings, lm_head and norms stay 16-bit"
    if exact:
        detail += f"; {exact}"
    if share != 1.0:
        detail += f"; this device holds {share:.0%}"
    return Component(WEIGHTS, int(total * share), f"{detail} (GiB by group: {parts})")


def _load_transient(spec: ModelSpec, plan: Plan) -> int:
    """Bytes above the weights that exist only while loading.

    AutoAWQ (0.2.x, through transformers) loads checkpoints with tied embeddings with a separate
    fp16 lm_head before tying it; torch.cuda.max_memory_allocated keeps that peak.  Seen in the
    Qwen2.5 speed benchmark: 1-token prompts of the tied 0.5B/1.5B/3B AWQ models read 0.23/0.39/0.51
    GiB above weights + KV cache, the size of their embeddings (0.25/0.43/0.58 GiB); with longer
    prompts the run-time peak exceeds it and it no longer shows.
    """
    if plan.device == "gpu" and weight_format(plan.precision).family == "awq" and spec.tie_word_embeddings:
        return spec.vocab_size * spec.hidden_size * 2
    return 0


def _quant_scratch(spec: ModelSpec, precision: str, prefill_tokens: int) -> tuple[int, str]:
    """Dequantization scratch that quantized kernels allocate (transformers on GPU)."""
    fmt = weight_format(precision)
    largest = largest_matrix_params(spec)
    if precision in ("gptq-int4", "int4"):
        widest = max(max(m.cols_out, m.rows_in) for m in linear_matrices(spec))
        b = largest * 2 + EXLLAMA_MAX_INPUT * widest * 2
        return b, "ExLlama v2 scratch: the largest matrix dequantized to fp16 plus a 2048-token buffer"
    if fmt.family in ("gptq", "awq") or precision == "nf4":
        if fmt.family == "awq" and prefill_tokens < 1024:
            return 0, ""
        return largest * 2, "the largest matrix dequantized to fp16 for prefill matmuls"
    if precision == "int8":
        return largest, "LLM.int8 int8 copy of activations/outliers (≈ largest matrix, 1 B/param)"
    return 0, ""


def estimate_inference(spec: ModelSpec, plan: Plan) -> Estimate:
    """Bytes per device for serving `spec` as `plan` says."""
    if plan.expert_parallel:
        devices, facts, notes = _expert_parallel(spec, plan)
    elif plan.engine == "vllm":
        devices, facts, notes = _vllm(spec, plan)
    elif plan.engine == "sglang":
        devices, facts, notes = _sglang(spec, plan)
    elif plan.engine == "llama.cpp":
        devices, facts, notes = _llama_cpp(spec, plan)
    else:
        devices, facts, notes = _transformers(spec, plan)
    return Estimate(spec.name, "inference", tuple(devices), plan.assumptions, tuple(notes), tuple(facts))


# ---- transformers ------------------------------------------------------------------------------
def _prefill_logits(spec: ModelSpec, plan: Plan, prefill_tokens: int, act_b: int) -> tuple[int, str]:
    """Bytes of the prefill's logits, and how they were counted (Plan.logits)."""
    if plan.logits == "last":
        return A.logits_bytes(spec, plan.batch), "fp32 logits for the last position"
    if plan.logits == "all-fp32":
        # transformers < 4.45: the model's forward returns fp32 logits for every position; the
        # compute-dtype lm_head output exists while they are made (no copy when that is fp32).
        per = spec.vocab_size * (act_b + (4 if act_b < 4 else 0))
        return prefill_tokens * per, f"logits for all {prefill_tokens:,} positions, upcast to fp32 (transformers < 4.45)"
    return prefill_tokens * spec.vocab_size * act_b, f"logits for all {prefill_tokens:,} positions (logits_to_keep=0)"


def decode_step(plan: Plan, act_b: int) -> StepTensors | None:
    """generate()'s vocabulary-sized tensors per decoding step (generate_step.py), None for a prefill-only pass."""
    if not plan.decodes:
        return None
    release = parse_transformers_version(plan.transformers_version) if plan.transformers_version else None
    # min_new_tokens also sets min_length: both processors run (generation/utils.py _prepare_generated_length)
    processors = (min_length_processor(release or CURRENT),) * 2 if plan.min_new_tokens else ()
    return step_tensors(release, plan.sampling, act_b, processors)


@dataclass(frozen=True)
class Decoding:
    """generate()'s decoding-step tensors on the device that makes the logits, in bytes."""

    step: StepTensors
    per_entry: int      # batch × vocab_size: step's figures are bytes per vocabulary entry per sequence
    prefill_logits: int  # the prefill's logits still alive when the first token's step runs
    generates: bool     # steps after the first token's (the context goes beyond the prompt)
    positions: int = 0  # batch × context: step.per_position's figure is bytes per position per sequence

    @staticmethod
    def of(spec: ModelSpec, plan: Plan, act_b: int, logits: int) -> Decoding | None:
        step = decode_step(plan, act_b)
        if step is None:
            return None
        # 'all-fp32' with a 16-bit model: the compute-dtype lm_head output is gone once the forward returns
        kept = logits * 4 // (4 + act_b) if plan.logits == "all-fp32" and act_b < 4 else logits
        return Decoding(step, plan.batch * spec.vocab_size, kept, plan.context > plan.prompt_tokens,
                        plan.batch * plan.context)

    def bytes(self, figure: int) -> int:
        return self.per_entry * figure

    @property
    def penalty_bytes(self) -> int:
        """The repetition penalty's per-position tensors at the longest context (generate_step.py)."""
        return self.positions * self.step.per_position


def _prefill_peak(act: int, logits: int, plan: Plan, mask: tuple[int, int] = (0, 0),
                  decoding: Decoding | None = None) -> int:
    """The transient peak of the prefill and of the decoding steps: the layers' and the lm_head's do not overlap.

    The decoder layers' transients are freed before lm_head runs, so when logits are made for
    every prompt position (Plan.logits 'all'/'all-fp32') the peak is the larger of the two
    (measured: a 1,024-token SmolLM2 prefill under transformers 4.44 peaks at the lm_head's
    output, 203 MiB above the weights, where the sum of both phases is 228 MiB;
    benchmarks/results/cpu-inference-peaks-2026-12-01.csv).  The last position's logits are
    counted on top.  `mask`: (held, made) bytes of transformers 4.38's expanded causal mask
    (activations.static_causal_mask_bytes), held through every forward.

    `decoding`: generate()'s decoding-step tensors (generate_step.py).  They come once the forward that
    made the logits has freed its layers' transients, so the peak is the larger of the prefill's forward
    and a decoding step (measured: SmolLM2's 16-token prompt at batch 8 under 5.24 peaks at a decoding
    step, 12.7 MiB above the weights, below the prefill's activations plus the step's tensors);
    the first token's step adds its tensors to the prefill's logits, and before 4.42 those logits stay
    alive through the next forward.
    """
    peak = max(act, logits) if plan.logits != "last" else act + logits
    held, made = mask
    peak = max(peak + held, made) if held else peak
    if decoding is None:
        return peak
    d, kept = decoding, decoding.prefill_logits
    first = max(peak, kept + d.bytes(d.step.first) + d.penalty_bytes)
    if not d.generates:  # the prompt fills the context: the first token's step only
        return first
    return max(first, held + d.bytes(d.step.forward), d.bytes(d.step.steady) + d.penalty_bytes,
               kept + held + d.bytes(d.step.view_held) if d.step.view_held else 0)


# glibc's dynamic mmap threshold rises to at most 32 MiB (DEFAULT_MMAP_THRESHOLD_MAX, 64-bit):
# larger blocks are mmapped and given back when freed, smaller ones stay in the heap.
GLIBC_MMAP_THRESHOLD_MAX = 32 * MiB


def _heap_kept_scores(spec: ModelSpec, plan: Plan, act_b: int) -> int:
    """The part of eager attention's score tensors small enough for glibc's heap to keep (CPU)."""
    n = plan.batch * spec.num_attention_heads * plan.prompt_tokens ** 2
    sizes = [n * act_b, n * 4] + ([n * act_b] if act_b < 4 else []) + [plan.batch * plan.prompt_tokens ** 2 * act_b]
    return sum(s for s in sizes if s <= GLIBC_MMAP_THRESHOLD_MAX)


def _transformers(spec: ModelSpec, plan: Plan):
    wb = _weights(spec, plan.precision, plan.engine)
    on_gpu = plan.device == "gpu"
    n = max(plan.gpus, 1) if on_gpu else 1
    act_b = _act_bytes(plan.precision)
    prefill_tokens = plan.prompt_tokens * plan.batch
    kv = kv_cache_bytes(spec, tokens=plan.context, sequences=plan.batch, kv_dtype=plan.kv_dtype, engine="transformers",
                        prompt_tokens=plan.prompt_tokens, transformers_version=plan.transformers_version)
    scores = A.eager_score_bytes(spec, batch=plan.batch, prompt=plan.prompt_tokens, act_bytes=act_b) \
        if plan.attention == "eager" else 0
    act = A.transformers_prefill_bytes(spec, prefill_tokens, act_b, score_bytes=scores)
    logits, logits_why = _prefill_logits(spec, plan, prefill_tokens, act_b)
    mask_why, mask = "", (0, 0)
    if plan.transformers_version and static_mask_mode(spec.architecture, plan.transformers_version):
        # the mask is made before the layers run (its peak) and held while they and the logits run
        mask = A.static_causal_mask_bytes(spec, batch=plan.batch, act_bytes=act_b)
        held = mask[0]
        mask_why = (f"; transformers 4.38's {spec.max_context:,}² causal mask expanded per sequence "
                    f"({held / MiB:,.0f} MiB held through the forward)")
    # Legacy tuple cache (Plan.legacy_cache): the last decode step's forward builds a new cache while the
    # old one is referenced, and `model_kwargs` keeps referencing the old one until the step has run its
    # processors and sampler (v4.41.2 generation/utils.py `_sample`: `_update_model_kwargs_for_generation`
    # comes last), so the whole step holds two caches beside its own tensors (StepTensors.forward with the
    # mask during the forward, StepTensors.steady after it; measured under 4.41.2: Llama-3.2-1B's shape at
    # batch 8 peaks in MinNewTokensLengthLogitsProcessor with both caches alive,
    # benchmarks/results/cpu-inference-peaks-releases-2026-12-02.csv); the prefill's transients are gone by
    # then, so what this needs beyond the activation peak is added.
    generates = plan.decodes and plan.context > plan.prompt_tokens
    decoding = Decoding.of(spec, plan, act_b, logits)
    last_forward = max(mask[0] + decoding.bytes(decoding.step.forward),
                       decoding.bytes(decoding.step.steady) + decoding.penalty_bytes) if decoding else 0
    kv_copy = max(kv + last_forward - _prefill_peak(act, logits, plan, mask, decoding), 0) \
        if plan.legacy_cache and generates else 0
    # Before 4.42 the first decoding step's forward runs while the prefill's `outputs` is still bound, so its
    # logits (every prompt position before 4.45) stay alive beside that step's two caches: the prompt's tuple
    # (referenced by `model_kwargs`) and the one torch.cat builds from it (v4.41.2 generation/utils.py `_sample`:
    # `outputs = self(**model_inputs, ...)` rebinds only once the forward returns; 4.42 added `del outputs`).
    # Measured: Qwen1.5-7B-Chat at a 30,720-token prompt (transformers of March 2024) peaks at 62.29 GiB =
    # weights 14.38 + the prefill's fp32 logits 17.39 + two prompt caches 2 × 15.00 + rotary tables 0.50.
    first_forward = kept_logits = step_held = 0
    if plan.legacy_cache and generates and decoding is not None and decoding.step.view_held:
        kv_prompt = kv_cache_bytes(spec, tokens=plan.prompt_tokens, sequences=plan.batch, kv_dtype=plan.kv_dtype,
                                   engine="transformers", prompt_tokens=plan.prompt_tokens,
                                   transformers_version=plan.transformers_version)
        kept_logits = decoding.prefill_logits
        step_held = decoding.bytes(decoding.step.view_held)  # batch × vocabulary, where generate() works
        first_forward = 2 * kv_prompt + mask[0]  # split with the layers, beside the kept logits and step_held
    rotary, rotary_why = rotary_table_bytes(spec, act_b) \
        if rotary_table_mode(spec.architecture, plan.transformers_version) else (0, "")
    scratch, scratch_why = _quant_scratch(spec, plan.precision, prefill_tokens) if on_gpu else (0, "")
    split = device_map_split(spec, wb, n, plan.gpu_total_bytes) if n > 1 else DeviceMapSplit((spec.num_layers,),
                                                                                          (wb.total,), 0, 0)
    head_gpu, input_gpu = split.head_gpu, split.embed_gpu
    # Only the GPU with lm_head makes the logits; the output comes back to the input's GPU (the embedding's:
    # `model.device`, where a script puts the prompt) when that is another one.
    own_act = act if split.layers[input_gpu] else 0  # what the input's GPU's own layers peak at
    copy, copy_why = _output_copy_on_first_gpu(spec, plan, own_act, logits, act_b, mask, input_gpu) \
        if on_gpu and head_gpu != input_gpu else (0, "")
    devices = []
    for i in range(n):
        dev_logits = logits if i == head_gpu else 0
        share = split.weight_bytes[i] / wb.total if wb.total else 1.0 / n  # of the weights
        layer_share = split.layers[i] / max(spec.num_layers, 1)  # of the KV cache and per-layer buffers
        weights_c = _weights_component(spec, plan, wb, share)
        if n > 1:
            weights_c = replace(weights_c, detail=weights_c.detail + f"; {split.describe(i, spec.num_layers)}")
        dev_act = act if split.layers[i] else 0
        comps = [
            weights_c,
            Component(KV_CACHE, int(kv * layer_share), _kv_detail(spec, plan, "transformers", layer_share)),
            # generate() works on the output where accelerate's hook brings it, the input's GPU (see
            # _output_copy_on_first_gpu): the decoding step's tensors are there when lm_head is elsewhere
            Component(ACTIVATIONS, _prefill_peak(dev_act, dev_logits, plan, mask,
                                                 decoding if dev_logits and head_gpu == input_gpu else None),
                      f"prefill peak over {prefill_tokens:,} tokens: (3 × FFN width + 4 × hidden) × "
                      f"{act_b} B per token" + (f", plus {logits_why}" if dev_logits else "")
                      + (f"; or generate()'s decoding step, if larger: {decoding.step.why} × {plan.batch} seq × "
                         f"{spec.vocab_size:,} ({(decoding.bytes(decoding.step.steady) + decoding.penalty_bytes) / MiB:,.1f} MiB)"
                         if decoding and decoding.generates and dev_logits and head_gpu == input_gpu else "")
                      + (f"; eager attention's scores and fp32 softmax ({scores / MiB:,.0f} MiB in one layer)"
                         if scores else "") + mask_why),
        ]
        if rotary:  # buffers of the attention layers: split with them
            comps.append(Component(WEIGHTS, int(rotary * layer_share), rotary_why))
        if spec.load_buffer_bytes:  # per-layer buffers of remote code: split with the layers
            comps.append(Component(WEIGHTS, int(spec.load_buffer_bytes * layer_share), spec.load_buffer_note))
        if kv_copy:
            comps.append(Component(KV_CACHE, int(kv_copy * layer_share),
                                   "the previous step's cache, still referenced while the legacy tuple cache "
                                   "is rebuilt at each decode step (two caches at the last token, beyond the "
                                   "prefill's peak)"))
        if first_forward:
            # the prompt's caches split with the layers; the kept logits where generate() works (the input's GPU)
            here = int(first_forward * layer_share) + (kept_logits + step_held if i == input_gpu else 0)
            transient = sum(c.bytes for c in comps[1:] if c.name != WEIGHTS)  # the rotary tables etc. stay
            first_extra = here - transient - (copy if i == input_gpu else 0)
            if first_extra > 0:
                comps.append(Component(KV_CACHE, first_extra,
                                       "the first decoding step (transformers < 4.42): the prompt's cache twice, "
                                       "the legacy tuple and the one rebuilt from it, beside the prefill's logits "
                                       "that generate() still references"))
        if scratch and split.layers[i]:  # one buffer on each device with quantized layers
            comps.append(Component(ACTIVATIONS, scratch, scratch_why))
        if copy and i == input_gpu:
            comps.append(Component(ACTIVATIONS, copy, copy_why))
        load_extra = _load_transient(spec, plan) - sum(c.bytes for c in comps[1:])
        if load_extra > 0:
            comps.append(Component(ACTIVATIONS, load_extra,
                                   "loading peak: an untied fp16 lm_head copy exists while an AWQ checkpoint with "
                                   "tied embeddings loads (it exceeds the run-time peak here)"))
        allocated = sum(c.bytes for c in comps)
        if on_gpu:
            transient = allocated - comps[0].bytes
            waste = int(weight_load_waste(spec, plan.precision) * share)
            slack = max(int(transient * ALLOCATOR_SLACK), ALLOCATOR_SLACK_MIN) + waste
            comps.append(Component(OVERHEAD, slack, "PyTorch caching-allocator slack: 5 % of transient tensors, and "
                                   f"{waste / MiB:,.0f} MiB its segments hold beyond the weights as they load",
                                   counted_in="reserved"))
            comps.append(Component(OVERHEAD, TORCH_CUDA_CONTEXT, "CUDA context and libraries", counted_in="runtime"))
            devices.append(DeviceNeed(f"gpu{i}", "gpu", tuple(comps)))
        else:
            # Full-vocabulary logits for every position are one allocation far above glibc's
            # mmap threshold (32 MiB at most): unmapped when freed, not kept in the heap.
            retained_logits = logits if plan.logits == "last" else 0
            # So are eager attention's score tensors once one is larger than that threshold.
            retained_act = A.transformers_prefill_bytes(spec, prefill_tokens, act_b,
                                                        score_bytes=_heap_kept_scores(spec, plan, act_b)) \
                if scores else act
            transient = retained_act + retained_logits + (kv if plan.decodes else 0)
            comps.append(Component(OVERHEAD, int(transient * CPU_HEAP_RETENTION),
                                   "glibc heap keeps freed transient tensors resident (one prefill working set"
                                   + (" and one KV cache re-allocated while generating)" if plan.decodes else ")"),
                                   counted_in="reserved"))
            comps.append(Component(OVERHEAD, TORCH_CPU_RUNTIME, "torch + transformers resident libraries", counted_in="runtime"))
            devices.append(DeviceNeed("cpu", "cpu", tuple(comps)))
    notes = []
    if n > 1:
        notes.append(f"transformers splits layers over {n} GPUs (device_map='auto'); each GPU holds its own activation "
                     "peak" + (f", and GPU{input_gpu} the model's output logits that accelerate moves back to the "
                               "input's device" if copy else ""))
    return devices, (), notes


@dataclass(frozen=True)
class DeviceMapSplit:
    """Where `from_pretrained(device_map="auto")` puts a model over several GPUs."""

    layers: tuple[int, ...]        # decoder layers on each GPU
    weight_bytes: tuple[int, ...]  # weight bytes on each GPU
    embed_gpu: int                 # the GPU with the embedding: `model.device`, where the prompt and output are
    head_gpu: int                  # the GPU with lm_head: it makes the logits

    def describe(self, i: int, num_layers: int) -> str:
        first = sum(self.layers[:i])
        held = [f"layers {first}–{first + self.layers[i] - 1} of {num_layers}" if self.layers[i] > 1 else
                f"layer {first} of {num_layers}" if self.layers[i] else "no decoder layer"]
        held += ["the embedding"] if i == self.embed_gpu else []
        held += ["lm_head"] if i == self.head_gpu else []
        return "device_map='auto': " + ", ".join(held)


def device_map_split(spec: ModelSpec, wb: WeightBytes, n: int, gpu_bytes: int | None) -> DeviceMapSplit:
    """The layers and weights each of `n` GPUs gets from transformers' `device_map="auto"`.

    transformers (v4.38.2 modeling_utils.py L3433–3449) caps each GPU with accelerate's
    `get_balanced_memory` and places modules with `infer_auto_device_map`
    (https://github.com/huggingface/accelerate/blob/v0.30.1/src/accelerate/utils/modeling.py):
    - get_balanced_memory (L995–1048): `per_gpu = model_size // num_devices`, plus a buffer of
      `1.25 × max(largest no-split block, mean leaf module)` (a decoder layer), as the cap of every GPU but
      the last, which keeps all its memory "just in case the buffer is not enough";
    - infer_auto_device_map: modules in definition order (embedding, decoder layers, norm, lm_head), each on
      the current GPU while it fits, else on the next; the main device (GPU0) also keeps room for the largest
      module still to place (L1203–1205, `current_max_size - max_layer_size`), recomputed once the largest
      is taken (L1168–1175): from the first step, when `model` itself is split, that is lm_head -- and
      nothing for a tied lm_head, whose weight `compute_module_sizes` counts once, under the embedding
      (`named_parameters` drops duplicates); a tied lm_head goes with its embedding (L1243–1276).
    So GPU0 holds a little less than an even share, the GPUs between a little more, and the last the rest:
    with many GPUs the caps can leave the last GPU empty, and lm_head then sits on an earlier one.
    The layers are taken as equal (the average decoder layer; dense and MoE layers are not told apart).
    """
    L = max(spec.num_layers, 1)
    head = wb.lm_head_bytes  # 0 when tied: it shares the embedding's storage
    layer = max(wb.total - wb.embed_bytes - head, 0) / L
    room = float(gpu_bytes) if gpu_bytes else float("inf")
    caps = [min(wb.total // n + int(1.25 * layer), room)] * (n - 1) + [room]
    caps[0] -= head
    held = [0.0] * n
    layers = [0] * n
    dev = 0

    def place(size: float) -> int:
        nonlocal dev
        while dev < n - 1 and held[dev] + size > caps[dev]:
            dev += 1
        held[dev] += size
        return dev

    embed_gpu = place(wb.embed_bytes)  # with a tied lm_head, which adds nothing
    for _ in range(L):
        layers[place(layer)] += 1
    head_gpu = place(head) if head else embed_gpu
    weights = [int(h) for h in held]
    weights[head_gpu] += wb.total - sum(weights)  # rounding
    return DeviceMapSplit(tuple(layers), tuple(weights), embed_gpu, head_gpu)


def _output_copy_on_first_gpu(spec: ModelSpec, plan: Plan, act: int, logits: int, act_b: int,
                              mask: tuple[int, int], gpu: int = 0) -> tuple[int, str]:
    """What GPU0 (`gpu`: the embedding's) holds beyond its own prefill peak (`act`: its layers' transients)
    because the model's output comes back to it.

    With several GPUs, `from_pretrained(device_map="auto")` dispatches the model with accelerate
    (passing `skip_keys=model._skip_keys_device_placement`, "past_key_values" for Qwen2/Llama:
    https://github.com/huggingface/transformers/blob/v4.38.2/src/transformers/modeling_utils.py#L3549-L3558),
    and accelerate hooks the top-level module with `AlignDevicesHook(execution_device=main_device,
    io_same_device=True, skip_keys=...)`
    (https://github.com/huggingface/accelerate/blob/v0.30.1/src/accelerate/big_modeling.py#L388-L391,
    https://github.com/huggingface/accelerate/blob/v0.30.1/src/accelerate/hooks.py#L637-L644).  Its
    pre_forward records the input's device (GPU0: the benchmark puts the prompt on `model.device`) and its
    post_forward does `send_to_device(output, self.input_device, skip_keys=self.skip_keys)`
    (hooks.py#L315-L317, #L379-L380): the logits, made on the last GPU with lm_head, are copied to GPU0
    (the KV cache, a skipped key, stays where each layer put it).

    That copy is what generate() keeps: `outputs = self(...)`, then `next_token_logits =
    outputs.logits[:, -1, :]` (a view of it), and `outputs` is only rebound by the next step's forward
    (https://github.com/huggingface/transformers/blob/v4.38.2/src/transformers/generation/utils.py#L2696-L2706,
    sample; greedy_search #L2404-L2414 alike).  So GPU0 holds the prompt's logits -- under transformers < 4.45
    fp32 for every position, `logits = logits.float()` in Qwen2ForCausalLM.forward
    (https://github.com/huggingface/transformers/blob/v4.38.2/src/transformers/models/qwen2/modeling_qwen2.py#L1186-L1187)
    -- while the first decode step runs its layers there; its own prefill layers finished before the
    logits existed, so GPU0's peak is the larger of the two.  Returned: the bytes beyond GPU0's prefill peak.
    From 4.45 on the output is the last position only (and generate()'s fp32 copies of it sit on GPU0 too).
    """
    if plan.logits == "all-fp32":
        out = plan.prompt_tokens * plan.batch * spec.vocab_size * 4
    elif plan.logits == "all":
        out = plan.prompt_tokens * plan.batch * spec.vocab_size * act_b
    else:
        # the last position: generate() copies and samples it where the output lands, on GPU0
        decoding = Decoding.of(spec, plan, act_b, logits)
        out = max(logits, decoding.bytes(decoding.step.steady) + decoding.penalty_bytes) \
            if decoding and decoding.generates else logits
    generates = plan.decodes and plan.context > plan.prompt_tokens
    # the first decode step's own transients on GPU0 (one token per sequence) while the copy is held
    step = _prefill_peak(A.transformers_prefill_bytes(spec, plan.batch, act_b), 0, plan, mask) if generates else 0
    beyond = out + step - _prefill_peak(act, 0, plan, mask)
    if beyond <= 0:
        return 0, ""
    what = (f"the prompt's fp32 logits ({out / GiB:.2f} GiB, every position)" if plan.logits == "all-fp32" else
            f"the prompt's logits ({out / GiB:.2f} GiB, every position)" if plan.logits == "all" else
            f"the last position's logits and generate()'s fp32 copies ({out / MiB:,.0f} MiB)")
    return beyond, (f"{what} copied back to GPU{gpu} (the input's) by accelerate's io_same_device hook, held while "
                    f"the first decode step runs; {beyond / GiB:.2f} GiB beyond that GPU's own prefill peak")


# ---- vLLM --------------------------------------------------------------------------------------
def pp_layers(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage as vLLM splits them: an even share, the remainder to the stages before the last
    (vllm/distributed/utils.py get_pp_indices, v0.8: ``partitions[-i] += 1 for i in range(2, remaining + 2)``)."""
    pp = max(min(pp, num_layers), 1)
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def mla_replicated_bytes(spec: ModelSpec, precision: str) -> int:
    """MLA's down-projections vLLM keeps whole on every tensor-parallel rank: ``q_a_proj`` (hidden × q_lora_rank)
    and ``kv_a_proj_with_mqa`` (hidden × (kv_lora_rank + qk_rope_head_dim)) are ``ReplicatedLinear``
    (vllm/model_executor/models/deepseek_v2.py, DeepseekV2MLAAttention), per layer."""
    if not spec.is_mla:
        return 0
    per_layer = spec.hidden_size * ((spec.q_lora_rank or 0) + spec.kv_lora_rank + spec.qk_rope_head_dim)
    return int(per_layer * spec.num_layers * weight_format(precision).linear_bits / 8)


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


def _vllm(spec: ModelSpec, plan: Plan):
    tp = max(plan.gpus, 1)
    pp = max(plan.nodes, 1)
    wb = _weights(spec, plan.precision, plan.engine)
    act_b = _act_bytes(plan.precision)
    batched, seqs = A.vllm_batch_defaults(plan.gpu_total_bytes, plan.compute_capability)
    kv_total = kv_cache_bytes(spec, tokens=plan.context, sequences=plan.batch, kv_dtype=plan.kv_dtype, engine="vllm",
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
    recv = (f"; the {received / GiB:.2f} GiB of hidden states and residual it receives from the stage before"
            if received else "")
    stage_acts = [act_first if pp > 1 else act, *([act_first + received] * max(pp - 2, 0)),
                  *([act + received] if pp > 1 else [])]
    stage_comps = [act_c if pp == 1 else
                   Component(ACTIVATIONS, a, f"profiled forward peak for {batched:,} batched tokens (the sampler runs "
                                             f"on the last pipeline stage){recv if i else ''}") if i < pp - 1 else
                   Component(ACTIVATIONS, a, act_c.detail + recv)
                   for i, a in enumerate(stage_acts)]
    stages = pp_layers(spec.num_layers, pp) if pp > 1 else [spec.num_layers]
    total_w, _ = _stored_weight_total(spec, plan.precision, wb.total)
    scale = total_w / wb.total if wb.total else 1.0
    replicated = mla_replicated_bytes(spec, plan.precision) if tp > 1 else 0
    body = max(wb.total - wb.embed_bytes - wb.lm_head_bytes - replicated, 0)
    # A tied lm_head is the embedding: with pp > 1 the last stage holds its own copy (vLLM's PPMissingLayer
    # elsewhere; ParallelLMHead ties to embed_tokens only where both live).
    head = wb.lm_head_bytes or (wb.embed_bytes if pp > 1 else 0)
    rope_c = rope_cache_component(spec, plan)
    devices = []
    facts: list[tuple[str, float | int | str]] = []
    pools: list[int] = []
    first_comps: list[Component] = []
    ram_bytes = 0
    for stage, layers in enumerate(stages):
        frac = layers / max(spec.num_layers, 1)
        if pp == 1:
            weights_c = _weights_component(spec, plan, wb, 1.0 / tp)
            if replicated:
                weights_c = replace(weights_c, bytes=int(weights_c.bytes + replicated * scale * (1 - 1 / tp)),
                                    detail=weights_c.detail + f"; MLA down-projections replicated on every rank "
                                    f"({replicated * scale / GiB:.2f} GiB)")
        else:
            own = body * frac + (wb.embed_bytes if stage == 0 else 0) + (head if stage == pp - 1 else 0)
            per_gpu = int((own / tp + replicated * frac) * scale)
            held = ["embeddings"] if stage == 0 else []
            held += ["lm_head"] if stage == pp - 1 else []
            weights_c = Component(WEIGHTS, per_gpu,
                                  f"pipeline stage {stage + 1} of {pp}: {layers} of {spec.num_layers} layers"
                                  + (f" with {' and '.join(held)}" if held else "")
                                  + f", 1/{tp} each (tensor parallel)"
                                  + (f"; MLA down-projections replicated ({replicated * frac * scale / GiB:.2f} GiB)"
                                     if replicated else "")
                                  + f"; {spec.total_params / 1e9:.2f}B params as {weight_format(plan.precision).description}")
        if plan.cpu_offload_gb:
            off = min(cpu_offload_bytes(plan.cpu_offload_gb), weights_c.bytes)
            ram_bytes += off * tp
            weights_c = replace(weights_c, bytes=weights_c.bytes - off,
                                detail=weights_c.detail + f"; {off / GiB:.2f} GiB of them in RAM (--cpu-offload-gb), "
                                "streamed over PCIe every forward pass")
        kv_c = Component(KV_CACHE, int(kv_total * kv_share * frac), _kv_detail(spec, plan, "vllm", kv_share * frac))
        stage_act = stage_comps[stage]
        inside = [weights_c, *([rope_c] if rope_c else []), kv_c, stage_act, non_torch_c]
        comps = inside + [outside_c(layers)]
        need = sum(c.bytes for c in inside)
        if reserved is not None:
            pool = reserved - (need - kv_c.bytes)  # everything inside the reservation but the KV cache
            spare = reserved - need
            if spare > 0:
                comps.append(Component("kv_pool_spare", spare, "rest of the reservation, which vLLM also gives to "
                                       "the KV pool", counted_in="reserved"))
            per_token = kv_c.bytes / max(plan.context * plan.batch, 1)
            pools.append(int(pool / per_token) if per_token and pool > 0 else 0)
            if stage == 0 or pools[-1] < min(pools[:-1]):
                first_comps = comps  # the stage whose pool is the smallest
        for i in range(tp):
            devices.append(DeviceNeed(f"gpu{stage * tp + i}", "gpu", tuple(comps)))
    outside = max(vllm_outside_reservation(spec, layers, ranks) for layers in stages)
    facts.append(("vllm_outside_reservation_bytes", outside))
    facts += [("vllm_max_num_batched_tokens", batched), ("vllm_max_num_seqs", seqs)]
    if reserved is not None:
        # Every stage holds the KV of its own layers for every token: the pool is the smallest stage's.
        pool_tokens = min(pools) if pools else 0
        w = sum(c.bytes for c in first_comps if c.name == WEIGHTS)
        a = next(c for c in first_comps if c.name == ACTIVATIONS).bytes
        facts += [("vllm_reserved_bytes", reserved), ("vllm_kv_pool_bytes", max(reserved - w - a - non_torch, 0)),
                  ("vllm_kv_pool_tokens", pool_tokens),
                  ("vllm_max_concurrency", round(pool_tokens / plan.context, 2) if plan.context else 0.0)]
    if pp > 1:
        facts += [("tensor_parallel_size", tp), ("pipeline_parallel_size", pp),
                  ("pipeline_stage_layers", ",".join(str(n) for n in stages))]
    if plan.cpu_offload_gb:
        devices.append(DeviceNeed("cpu", "cpu", (
            Component(WEIGHTS, ram_bytes, f"weights offloaded by --cpu-offload-gb {plan.cpu_offload_gb:g} "
                      "(per GPU), pinned in RAM"),)))
        facts.append(("cpu_offload_bytes", ram_bytes))
    notes = [f"vLLM reserves gpu_memory_utilization {plan.gpu_memory_utilization:g} × total GPU memory at start for "
             f"the weights, the profiled activation peak, the non-torch memory its profiling adds"
             f"{' (NCCL among it)' if tp > 1 else ''} and the KV cache; the CUDA context and CUDA graphs "
             f"({outside / GiB:.2f} GiB here, the most vLLM v0.19.0's published startup logs show for this many "
             f"layers) come on top, in what the reservation leaves free: the headroom applies inside it",
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
    return devices, facts, notes


# ---- SGLang ------------------------------------------------------------------------------------
def sglang_static_bytes(total: int, fraction: float, ranks: int) -> int:
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


def _tp_weights(spec: ModelSpec, plan: Plan, wb: WeightBytes, tp: int) -> Component:
    """Weights on one tensor-parallel rank: 1/tp of every sharded linear and embedding, MLA's down-projections
    whole (``ReplicatedLinear`` in vLLM's and SGLang's deepseek_v2.py)."""
    weights_c = _weights_component(spec, plan, wb, 1.0 / tp)
    replicated = mla_replicated_bytes(spec, plan.precision) if tp > 1 else 0
    if replicated:
        total_w, _ = _stored_weight_total(spec, plan.precision, wb.total)
        scale = total_w / wb.total if wb.total else 1.0
        weights_c = replace(weights_c, bytes=int(weights_c.bytes + replicated * scale * (1 - 1 / tp)),
                            detail=weights_c.detail + f"; MLA down-projections replicated on every rank "
                            f"({replicated * scale / GiB:.2f} GiB)")
    return weights_c


def _static_pool(plan: Plan, engine_name: str, weights_c: Component, kv_c: Component, act_c: Component,
                 over_c: Component, static: int | None, *, vllm: bool,
                 rope_c: Component | None = None) -> tuple[list[Component], int | None]:
    """Components of one GPU, with the part of the engine's up-front reservation the KV pool takes beyond
    what this request needs (``kv_pool_spare``); and the pool's size in bytes (None: total memory unknown).

    vLLM reserves gpu_memory_utilization × total for everything (weights, activations, non-torch, KV pool);
    SGLang reserves mem_fraction_static of the memory free after its init for weights and the KV pool only
    (``sglang_static_bytes``), activations, CUDA graphs and NCCL living in the remaining share."""
    comps = [weights_c, *([rope_c] if rope_c else []), kv_c, act_c, over_c]
    if static is None:
        return comps, None
    inside = weights_c.bytes + (rope_c.bytes if rope_c else 0) + (act_c.bytes + over_c.bytes if vllm else 0)
    pool = static - inside
    spare = pool - kv_c.bytes
    if spare > 0:
        comps.append(Component("kv_pool_spare", spare, f"rest of the reservation, which {engine_name} also gives to "
                               "the KV pool", counted_in="reserved"))
    return comps, max(pool, 0)


def _pool_facts(prefix: str, plan: Plan, static: int, pool: int, per_token: float, ranks: int = 1) -> list:
    tokens = int(pool / per_token) if per_token and pool > 0 else 0
    return [(f"{prefix}_reserved_bytes" if prefix == "vllm" else f"{prefix}_static_bytes", static),
            (f"{prefix}_kv_pool_bytes", pool), (f"{prefix}_kv_pool_tokens", tokens * ranks),
            (f"{prefix}_max_concurrency", round(tokens * ranks / plan.context, 2) if plan.context else 0.0)]


def _sglang(spec: ModelSpec, plan: Plan):
    """SGLang with tensor parallelism over every GPU of every node (``--tp N·G --nnodes N``)."""
    tp = plan.world
    wb = _weights(spec, plan.precision)
    kv_total = kv_cache_bytes(spec, tokens=plan.context, sequences=plan.batch, kv_dtype=plan.kv_dtype,
                              engine="sglang")
    # MLA: SGLang's MLA backends keep the whole latent on every TP rank; other models split KV heads.
    kv_share = 1.0 if spec.is_mla else max(1.0, tp / max(spec.num_kv_heads, 1)) / tp
    weights_c = _tp_weights(spec, plan, wb, tp)
    kv_c = Component(KV_CACHE, int(kv_total * kv_share), _kv_detail(spec, plan, "sglang", kv_share))
    act_c = Component(ACTIVATIONS, A.vllm_profile_bytes(spec, tp, 2, sampler="logits"),
                      f"a chunked-prefill step of {A.VLLM_PROFILE_TOKENS:,} tokens (SGLang's chunked_prefill_size "
                      "on GPUs of 25 GB and more) and the sampler")
    nccl = VLLM_NCCL_TP if tp > 1 else 0
    over_c = Component(OVERHEAD, VLLM_NON_TORCH + nccl, "CUDA context and CUDA graphs"
                       + (f", NCCL communicators ({nccl / GiB:.2f} GiB, as vLLM logs them)" if nccl else ""),
                       counted_in="runtime")
    fraction = plan.mem_fraction_static or 0.88
    static = sglang_static_bytes(plan.gpu_total_bytes, fraction, tp) if plan.gpu_total_bytes else None
    comps, pool = _static_pool(plan, "SGLang", weights_c, kv_c, act_c, over_c, static, vllm=False,
                               rope_c=rope_cache_component(spec, plan))
    devices = [DeviceNeed(f"gpu{i}", "gpu", tuple(comps)) for i in range(tp)]
    facts: list[tuple[str, float | int | str]] = [("tensor_parallel_size", tp)]
    if static is not None and pool is not None:
        facts += _pool_facts("sglang", plan, static, pool, kv_c.bytes / max(plan.context * plan.batch, 1))
    notes = [f"SGLang keeps mem_fraction_static {fraction:g} × the GPU memory free after its CUDA context"
             f"{' and NCCL' if tp > 1 else ''} for weights and the KV pool; "
             "activations, CUDA graphs and NCCL use the rest"]
    if tp > 1:
        notes.append(f"tensor parallel over {tp} GPUs" + (f" of {plan.nodes} nodes (--tp {tp} --nnodes {plan.nodes})"
                                                          if plan.nodes > 1 else ""))
    return devices, facts, notes


# ---- expert parallel (vLLM, SGLang): experts over all GPUs, attention data parallel ------------------
def _expert_parallel(spec: ModelSpec, plan: Plan):
    """MoE with the routed experts split over the expert-parallel group (every GPU of every node) and attention
    data parallel: each GPU a rank of its own with attention weights whole and its own sequences' KV cache.

    vLLM ``--data-parallel-size W --enable-expert-parallel`` (docs.vllm.ai/en/latest/serving/
    data_parallel_deployment.html, expert_parallel_deployment.html): TP 1 per data-parallel rank, so every
    non-expert weight (attention, shared experts, dense MLPs, embeddings) is whole on each GPU and FusedMoE
    holds num_experts / W experts (``ep_size = tp × dp``).  SGLang ``--tp W --dp W --enable-dp-attention
    --ep-size W`` (docs.sglang.ai, DeepSeek usage, "Data Parallelism Attention"): attention TP size tp/dp = 1,
    experts over the EP group, dense MLPs tensor parallel over all W GPUs."""
    world = plan.world
    wb = _weights(spec, plan.precision)
    groups = dict(wb.by_group)
    total_w, exact = _stored_weight_total(spec, plan.precision, wb.total)
    scale = total_w / wb.total if wb.total else 1.0
    experts = groups.get(S.EXPERTS, 0)
    dense_mlp = groups.get(S.MLP, 0) if plan.engine == "sglang" else 0
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
    batched, seqs = A.vllm_batch_defaults(plan.gpu_total_bytes, plan.compute_capability)
    kv = kv_cache_bytes(spec, tokens=plan.context, sequences=per_rank, kv_dtype=plan.kv_dtype, engine=plan.engine,
                        batched_tokens=batched if plan.engine == "vllm" else None)
    kv_c = Component(KV_CACHE, kv, _kv_detail(spec, plan, plan.engine, 1.0)
                     + f"; each data-parallel rank caches only its own sequences ({per_rank} here)")
    vllm = plan.engine == "vllm"
    if vllm:
        triton_moe = weight_format(plan.precision).name in ("bf16", "fp16", "fp32")
        act_c = Component(ACTIVATIONS, A.vllm_profile_bytes(spec, 1, 2, tokens=batched, seqs=seqs,
                                                             sms=A.max_sms(plan.compute_capability),
                                                             moe_workspace=triton_moe),
                          f"profiled peak for {batched:,} batched tokens per rank and the sampler")
        # NCCL and all-to-all buffers inside the reservation; the context, NCCL's communicators and the graphs
        # beyond it (vllm_outside_reservation)
        over_c = Component(OVERHEAD, VLLM_PROFILE_NON_TORCH + VLLM_NCCL_TP, "NCCL and all-to-all buffers, kernel "
                           "images and library handles, inside the reservation", counted_in="runtime")
    else:
        act_c = Component(ACTIVATIONS, A.vllm_profile_bytes(spec, 1, 2, sampler="logits"),
                          f"profiled peak for {A.VLLM_PROFILE_TOKENS} batched tokens per rank and the sampler")
        over_c = Component(OVERHEAD, VLLM_NON_TORCH + VLLM_NCCL_TP, "CUDA context and CUDA graphs, NCCL and "
                           "all-to-all buffers", counted_in="runtime")
    fraction = plan.gpu_memory_utilization if vllm else (plan.mem_fraction_static or 0.88)
    static = None if not plan.gpu_total_bytes else int(plan.gpu_total_bytes * fraction) if vllm \
        else sglang_static_bytes(plan.gpu_total_bytes, fraction, world)
    name = "vLLM" if vllm else "SGLang"
    comps, pool = _static_pool(plan, name, weights_c, kv_c, act_c, over_c, static, vllm=vllm,
                               rope_c=rope_cache_component(spec, plan))
    facts: list[tuple[str, float | int | str]] = [("expert_parallel_size", world), ("data_parallel_size", world)]
    if vllm:
        outside = vllm_outside_reservation(spec, spec.num_layers, world)
        beyond = Component(OVERHEAD, outside, f"CUDA context, NCCL's communicators and the CUDA graphs of "
                           f"{spec.num_layers} layers, beyond vLLM's reservation: the upper envelope of vLLM "
                           "v0.19.0's startup logs", counted_in="runtime")
        comps.insert(comps.index(over_c) + 1, beyond)
        facts.append(("vllm_outside_reservation_bytes", outside))
    devices = [DeviceNeed(f"gpu{i}", "gpu", tuple(comps)) for i in range(world)]
    prefix = "vllm" if vllm else "sglang"
    if static is not None and pool is not None:
        per_token = kv / max(plan.context * per_rank, 1)
        facts += _pool_facts(prefix, plan, static, pool, per_token, ranks=world)
    notes = [f"{name} expert parallel over {world} GPUs" + (f" of {plan.nodes} nodes" if plan.nodes > 1 else "")
             + f": {spec.num_experts} routed experts, {spec.num_experts / world:g} per GPU; attention data parallel "
             f"({world} ranks, each with its own KV pool)"]
    return devices, facts, notes


# ---- llama.cpp ---------------------------------------------------------------------------------
def llama_cpp_devices(spec: ModelSpec, plan: Plan, setup: LC.LlamaCppSetup | None = None) -> list[DeviceNeed]:
    """The llama.cpp estimate's devices for `plan`, with the context settings of `setup` where a load's
    command line sets more than a plan says (-ub, -fa); `benchmarks/llamacpp_logs.py` scores them."""
    return _llama_cpp(spec, plan, setup)[0]


def _llama_cpp(spec: ModelSpec, plan: Plan, setup: LC.LlamaCppSetup | None = None):
    setup = setup or LC.setup_from_plan(plan)
    wb = _weights(spec, plan.precision, plan.engine)
    weights_total, exact = _stored_weight_total(spec, plan.precision, wb.total)
    scale = weights_total / wb.total if wb.total else 1.0
    L = spec.num_layers
    cells = LC.cells(setup)  # n_ctx: -c (shared by the -np parallel sequences), padded by llama.cpp
    if plan.device == "cpu":
        gpu_layers = 0
    elif plan.gpu_layers is None:
        gpu_layers = L + 1
    else:
        gpu_layers = min(plan.gpu_layers, L + 1)
    layers_on_gpu = min(gpu_layers, L)
    head_on_gpu = gpu_layers > L
    # With --rpc the nodes' GPUs are devices of one llama-server: layers split over all of them.
    n_gpu = plan.world if gpu_layers else 0
    layer_w = wb.per_layer_bytes * scale
    head_w = (wb.lm_head_bytes or (wb.embed_bytes if spec.tie_word_embeddings else 0)) * scale
    embed_w = wb.embed_bytes * scale
    kv_all = LC.kv_bytes(spec, setup)
    kv_gpu = LC.kv_bytes(spec, setup, layers=layers_on_gpu) if layers_on_gpu else 0
    t = LC.micro_batch(setup)
    copies = LC.pipeline_copies(replace(setup, gpus=n_gpu), L) if n_gpu else 1
    # The output matrix stays in RAM with -ngl <= n_layer; a micro-batch of >= 32 tokens runs its matmul on
    # the GPU, which holds a copy of it while the matmul runs (op offload, llama_cpp.gpu_compute_bytes).
    out_copy = int(head_w) if n_gpu and not head_on_gpu and t >= LLAMA_CPP_OFFLOAD_MIN_BATCH else 0
    # --n-cpu-moe / --cpu-moe: the routed experts of the first layers stay in RAM (expert_offload.py).
    moe_off = offloaded_moe_layers(spec, plan.cpu_moe) if layers_on_gpu else 0
    experts_ram = int(offloaded_expert_bytes(spec, plan.precision, plan.cpu_moe) * scale) if moe_off else 0
    # The worst-case graph's micro-batch (>= 32 tokens) runs the experts on the GPU: one layer's expert
    # tensors are copied into its compute buffer at a time (ggml-cuda offload_op).
    copied = int(one_layer_expert_bytes(spec, plan.precision) * scale) \
        if moe_off and t >= LLAMA_CPP_OFFLOAD_MIN_BATCH else 0
    fa = "flash attention" if setup.flash_attn else "no flash attention: scores n_ctx × n_tokens × heads in f32"
    devices = []
    if n_gpu:
        for i in range(n_gpu):
            share = 1.0 / n_gpu
            holds_output = head_on_gpu and i == n_gpu - 1
            w = (layer_w * layers_on_gpu - experts_ram) * share + (head_w if holds_output else 0)
            what = (f"{layers_on_gpu} of {L} layers" + (" + output head" if head_on_gpu else "")
                    + (f", less the routed experts of {moe_off} layers (in RAM: --n-cpu-moe {plan.cpu_moe})"
                       if moe_off else ""))
            compute = LC.gpu_compute_bytes(spec, setup, holds_output=holds_output, pipeline_copies=copies,
                                           offloaded_weight=out_copy if i == 0 else 0)
            how = (f"compute buffer for the worst-case graph: {t}-token micro-batch, {cells:,} cells, {fa}"
                   + (", logits of every token" if holds_output else "")
                   + (f"; {copies} copies of its inputs (pipeline parallelism)" if copies > 1 else "")
                   + ("; the output matrix copied from RAM for its matmul" if out_copy and i == 0 else ""))
            comps = [
                Component(WEIGHTS, int(w), what
                          + f" as {weight_format(plan.precision).description}" + (f"; {exact}" if exact else "")),
                Component(KV_CACHE, int(kv_gpu * share), _llama_kv_detail(spec, setup, share * layers_on_gpu / max(L, 1))),
                Component(ACTIVATIONS, compute, how),
                Component(OVERHEAD, LLAMA_CPP_CUDA_CONTEXT, "CUDA context and cuBLAS", counted_in="runtime"),
            ]
            if copied:
                comps.insert(3, Component(ACTIVATIONS, copied, "one layer's routed experts copied from RAM for a "
                                          f"prompt micro-batch (>= {LLAMA_CPP_OFFLOAD_MIN_BATCH} tokens run on the GPU)"))
            devices.append(DeviceNeed(f"gpu{i}", "gpu", tuple(comps)))
    cpu_layers = L - layers_on_gpu
    cpu_w = embed_w + layer_w * cpu_layers + (0 if head_on_gpu or spec.tie_word_embeddings else head_w) + experts_ram
    cpu_what = ("token embedding (kept in RAM by llama.cpp)" if n_gpu else "all weights") \
        + (f" + {cpu_layers} layers" if n_gpu and cpu_layers else "") \
        + (f" + the routed experts of {moe_off} layers ({experts_ram / GiB:.2f} GiB)" if moe_off else "")
    host = LC.host_compute_bytes(spec, setup, cpu_layers=cpu_layers if n_gpu else L, output_on_cpu=not head_on_gpu,
                                 has_gpu=bool(n_gpu))
    output = LC.output_buffer_bytes(spec, setup)
    cpu_comps = [
        Component(WEIGHTS, int(cpu_w), cpu_what + ", memory-mapped"),
        Component(KV_CACHE, int(kv_all - kv_gpu),
                  _llama_kv_detail(spec, setup, cpu_layers / max(L, 1)) if cpu_layers else "none on CPU"),
        Component(ACTIVATIONS, host + output,
                  ("host compute buffer (token embeddings and f32 masks for the GPU" + (", and the CPU's layers"
                   if cpu_layers else "") + ")" if n_gpu else f"compute buffer ({t}-token micro-batch, {fa})")
                  + f" and the output buffer ({max(setup.n_seq, 1)} × {spec.vocab_size:,} f32 logits)"),
        Component(OVERHEAD, LLAMA_CPP_CPU_RUNTIME, "llama.cpp process", counted_in="runtime"),
    ]
    devices.append(DeviceNeed("cpu", "cpu", tuple(cpu_comps)))
    facts: list[tuple[str, float | int | str]] = [("gpu_layers", gpu_layers), ("n_ctx", cells)]
    notes = []
    if moe_off:
        facts += [("cpu_moe_layers", moe_off), ("experts_in_ram_bytes", experts_ram)]
        notes.append(f"llama.cpp --n-cpu-moe {plan.cpu_moe}: the routed experts of {moe_off} of {spec.num_moe_layers} "
                     "MoE layers stay in RAM and run on the CPU while decoding; attention, norms, router, shared "
                     "experts, output head and the whole KV cache stay on the GPU")
    if plan.nodes > 1 and n_gpu:
        facts.append(("rpc_servers", plan.nodes - 1))
        exposes = "s expose their" if plan.nodes > 2 else " exposes its"
        notes.append(f"llama.cpp RPC: {plan.nodes - 1} rpc-server node{exposes} GPUs to llama-server; layers split over the {n_gpu} GPUs in proportion to their memory "
                     "(llama.cpp's default --tensor-split; the nodes' GPUs are alike, so equal shares)")
    if plan.batch > 1:
        notes.append(f"llama.cpp: -c {cells} shared by -np {plan.batch} sequences of {plan.context} tokens")
    return devices, facts, notes


def _llama_kv_detail(spec: ModelSpec, setup: LC.LlamaCppSetup, share: float) -> str:
    """llama.cpp's KV cache in words, from the same rule as its bytes (llama_cpp.kv_bytes)."""
    from fitcheck.estimate.kv_cache import kv_elements_per_token

    n = max(setup.n_seq, 1)
    per = kv_elements_per_token(spec, "llama.cpp")
    how = "MLA latent" if spec.is_mla else f"2 × {spec.num_kv_heads} KV heads × {spec.attn_head_dim}"
    full_t = LC.cells(setup) // n
    sliding = min(spec.num_sliding_layers, spec.num_attention_layers) if spec.sliding_window else 0
    if sliding:
        swa = LC._has_swa_cache(spec)
        full = spec.num_attention_layers - sliding
        parts = [f"{full} full-attention layers × {full_t:,} tokens"] if full else []
        parts.append(f"{sliding} sliding-window layers × {(LC.swa_cells(spec, setup) // n if swa else full_t):,} tokens")
        layers = f"({' + '.join(parts)})" if full else parts[0]
        why = (f"llama.cpp's SWA cache: window {spec.sliding_window:,} × {n} seq + n_ubatch {setup.n_ubatch}, padded to "
               f"{LLAMA_CPP_SWA_PAD}; --swa-full keeps every token" if swa else
               f"window {spec.sliding_window:,}, but llama.cpp runs {spec.architecture} with full attention: every token")
    else:
        layers, why = f"{spec.num_attention_layers} layers × {full_t:,} tokens", ""
    kv = setup.type_k if setup.type_k == setup.type_v else f"{setup.type_k}/{setup.type_v}"
    text = (f"{layers} × {how} = {per} elements/token × {n} seq × {kv}; -c {setup.n_ctx:,} padded to a multiple "
            f"of {setup.ctx_pad} ({LC.cells(setup):,} cells" + (" shared by the sequences)" if n > 1 else ")"))
    if why:
        text += f"; sliding-window layers: {why}"
    if share != 1.0:
        text += f"; this device holds {share:.0%}"
    return text


def _kv_detail(spec: ModelSpec, plan: Plan, engine: str, share: float) -> str:
    """The KV cache's sum in words, from the same rule as its bytes (kv_cache.sliding_cache)."""
    from fitcheck.estimate.kv_cache import kv_elements_per_token, sliding_cache, vllm_layer_slots

    per = kv_elements_per_token(spec, engine)
    how = ("MLA latent" if spec.is_mla and ENGINES[engine].kv_mla_latent else
           "MLA expanded per head" if spec.is_mla else f"2 × {spec.num_kv_heads} KV heads × {spec.attn_head_dim}")
    kept = sliding_cache(spec, engine, tokens=plan.context,
                         prompt_tokens=plan.prompt_tokens if engine == "transformers" else None,
                         transformers_version=plan.transformers_version if engine == "transformers" else None,
                         batched_tokens=A.vllm_batch_defaults(plan.gpu_total_bytes, plan.compute_capability)[0]
                         if engine == "vllm" else None)
    sliding = min(spec.num_sliding_layers, spec.num_attention_layers) if spec.sliding_window else 0
    full = spec.num_attention_layers - sliding
    padded = ""
    if engine == "vllm" and sliding:
        slots = vllm_layer_slots(spec)
        if slots != (full, sliding):
            padded = (f"; vLLM's hybrid KV-cache manager pads the {full} full-attention and {sliding} sliding-window "
                      f"layers to {slots[0]} and {slots[1]} (KV-cache groups of one size)")
        full, sliding = slots
    if sliding:
        parts = [f"{full} full-attention layers × {kept.full_tokens:,} tokens"] if full else []
        parts.append(f"{sliding} sliding-window layers × {kept.sliding_tokens:,} tokens")
        layers = f"({' + '.join(parts)})" if full else parts[0]
    else:
        layers = f"{spec.num_attention_layers} layers × {plan.context:,} tokens"
    text = f"{layers} × {how} = {per} elements/token × {plan.batch} seq × {plan.kv_dtype}"
    if kept.why:
        text += f"; sliding-window layers: {kept.why}"
    text += padded
    if share != 1.0:
        text += f"; this device holds {share:.0%}"
    return text
