"""llama.cpp's buffers, from its source: what a load reserves, device by device.  Pure.

A llama.cpp load prints one line per backend buffer: the model weights per device
("load_tensors: CUDA0 model buffer size"), the KV cache per device ("CUDA0 KV buffer size"), the
host output buffer (logits), and the compute buffers the graph allocator reserves for the
worst-case graph ("CUDA0 compute buffer size", "CUDA_Host compute buffer size").  This module
holds the settings that decide those sizes (:class:`LlamaCppSetup`: the command line's -c, -np,
-ub, -fa, -ctk/-ctv, -ngl) and the sizes of the context's buffers; `fitcheck.engines.llama_cpp.memory` adds the
weights, and `benchmarks/llamacpp_logs.py` checks both against published load logs.

Sources, pinned (the release a rule holds for is said next to it):
- L26 = llama.cpp a5bb8ba4 (January 2026):
  https://github.com/ggml-org/llama.cpp/blob/a5bb8ba4c50257437630c136210396810741bbf7/src/llama-context.cpp
  (sched_reserve, output_reserve), .../src/llama-graph.cpp (build_attn_mha, build_attn_inp_kv, build_ffn),
  .../src/llama-kv-cache-iswa.cpp, .../ggml/src/ggml-alloc.c (ggml_gallocr_alloc_graph_impl),
  .../ggml/src/ggml-backend.cpp (ggml_backend_sched_split_graph, ggml_backend_sched_backend_id_from_cur).
- L24 = llama.cpp 8962422b (October 2024), when llama.cpp was one src/llama.cpp:
  https://github.com/ggml-org/llama.cpp/blob/8962422b1c6f9b8b15f5aeaea42600bcc2d44177/src/llama.cpp
  (llama_kv_cache_get_padding, llama_output_reserve, build_inp_KQ_mask).
Both were read in ollama's vendored copies of those commits (ollama/ollama, llama/llama.cpp and
ml/backend/ggml at ef00199f and 96efd905), where ollama's patches do not touch these lines.
- ollama's llama.cpp runner (LlamaCppSetup.embeddings):
  https://github.com/ollama/ollama/blob/96efd9052f28827eea44282b8f2a5e819ed7277e/llama/llama.go
  (params.embeddings = true) and .../llama/patches/05-embeddings.diff (the logits are kept beside them).
"""

from __future__ import annotations

from dataclasses import dataclass

from fitcheck.estimate.formats import KV_DTYPE_BYTES
from fitcheck.model.spec import ModelSpec

# llama.cpp reserves its compute graph for a micro-batch of n_ubatch tokens (common/arg.cpp default 512).
LLAMA_CPP_UBATCH = 512
# The architectures whose loader sets a SWA pattern (src/llama-model.cpp, load_hparams: set_swa_pattern;
# gguf_spec._SWA_PATTERN, llama4's chunked attention n_swa 8192) keep a window-sized cache for their
# sliding-window layers (llama-kv-cache-iswa.cpp): size_swa = GGML_PAD(min(size_base, n_swa × (unified ?
# n_seq_max : 1) + n_ubatch), 256) cells per stream; --swa-full keeps size_base (every token).  The others
# (Mistral v0.1, StarCoder2) keep every token.
LLAMA_CPP_SWA_ARCHITECTURES = frozenset({"gemma2", "gemma3", "gemma3_text", "gpt_oss", "cohere2", "llama4"})
LLAMA_CPP_SWA_PAD = 256

F32 = 4
# llama-context.cpp (L26): cparams.n_ctx = GGML_PAD(cparams.n_ctx, 256) (llama.cpp PR #17046, November 2025).
# Before it (L24, llama_kv_cache_get_padding): 256 with flash attention, 32 without.
CTX_PAD = 256
CTX_PAD_NO_FA_BEFORE_PR17046 = 32
# ggml-backend.cpp: pipeline parallelism keeps GGML_SCHED_MAX_COPIES copies of every split's inputs
# (sched->n_copies = parallel ? GGML_SCHED_MAX_COPIES : 1; llama.cpp's CMake default 4).  llama-context.cpp
# enables it when the layers and the output layer sit on more than one GPU (--split-mode layer, KV offloaded).
SCHED_MAX_COPIES = 4
# f32 tensors of n_tokens rows live beside the attention scores in the worst-case graph: the residual
# stream and the normed input (its slot stays while Q, K and V are made), n_embd wide, and Q and the
# attention output, n_head × head_dim wide, as ggml-alloc lays them out (llm_build_llama, models/llama.cpp
# L26).  Read off the graph; every logged non-flash-attention compute buffer in
# benchmarks/data/llamacpp_load_logs.csv is the scores, the masks and these four (Mistral-7B at 2048-32768
# cells, Qwen2.5-32B and Gemma-2-27B, whose n_head × head_dim of 4096 differs from its n_embd of 4608,
# exactly; Llama-3-70B 0.4 % under).
ATTN_EMBD_ACTIVATIONS = 2
ATTN_HEAD_ACTIVATIONS = 2
# build_ffn (llama-graph.cpp L26): up and gate, then ggml_swiglu_split's output, all n_tokens × n_ff f32.
# Releases before ggml's GLU op (mid 2025) ran silu and mul in place: two, not three.
FFN_TENSORS = 3


@dataclass(frozen=True)
class LlamaCppSetup:
    """The context settings of one llama.cpp load (llama-server / llama-cli flags)."""

    n_ctx: int                      # -c: KV cells over all sequences, before llama.cpp pads it
    n_seq: int = 1                  # -np: sequences sharing the cells
    n_ubatch: int = LLAMA_CPP_UBATCH  # -ub: the micro-batch the worst-case graph is reserved for
    flash_attn: bool = True         # -fa (auto resolves to on where the backend has the kernel)
    type_k: str = "fp16"            # -ctk
    type_v: str = "fp16"            # -ctv
    gpu_layers: int | None = None   # -ngl: None = every layer and the output layer
    gpus: int = 1                   # devices the layers are split over (--split-mode layer)
    ctx_pad: int = CTX_PAD          # n_ctx rounding of the release (CTX_PAD_NO_FA_BEFORE_PR17046 for older
                                    # releases without flash attention)
    swa_cache: bool = True          # sliding-window layers keep a window-sized cache (llama.cpp PR #13194,
                                    # May 2025; False for older releases and --swa-full)
    embeddings: bool = False        # the context also returns embeddings (ollama's runner: llama.go sets
                                    # params.embeddings = true): the output buffer holds them too
    kv_unified: bool = False        # --kv-unified: one cache stream for all sequences; llama-server turns it on
                                    # only for -np auto, and fitcheck's commands pass -np N (one stream each)


def setup_from_plan(plan) -> LlamaCppSetup:
    """The setup a fitcheck plan asks llama-server for (`-c context×batch -np batch -ngl ...`)."""
    return LlamaCppSetup(n_ctx=plan.context * plan.batch, n_seq=plan.batch, type_k=plan.kv_dtype,
                         type_v=plan.kv_dtype, gpu_layers=plan.gpu_layers, gpus=plan.world if plan.gpus else 0)


def _pad(n: int, to: int) -> int:
    return -(-n // to) * to


def cells(setup: LlamaCppSetup) -> int:
    """KV cells after llama.cpp pads -c (llama-context.cpp: GGML_PAD(n_ctx, 256), see CTX_PAD)."""
    return _pad(max(setup.n_ctx, 1), setup.ctx_pad)


def micro_batch(setup: LlamaCppSetup) -> int:
    """Tokens of the worst-case graph: sched_reserve reserves n_tokens = min(n_ctx, n_ubatch) with every
    token an output (graph_reserve(n_tokens, n_seqs, n_tokens), L26)."""
    return min(setup.n_ubatch, cells(setup))


def _has_swa_cache(spec: ModelSpec) -> bool:
    return bool(spec.sliding_window and spec.num_sliding_layers and spec.architecture in LLAMA_CPP_SWA_ARCHITECTURES)


def swa_cells(spec: ModelSpec, setup: LlamaCppSetup) -> int:
    """Cells of the sliding-window layers' cache (llama-kv-cache-iswa.cpp, L26): GGML_PAD(min(size_base,
    n_swa × (unified ? n_seq : 1) + n_ubatch), 256) per stream, one stream per sequence unless the cache is
    unified; --swa-full keeps size_base.  llama.cpp has this cache since PR #13194 (May 2025); before it every
    layer kept every cell."""
    window = spec.sliding_window
    if not window or not _has_swa_cache(spec) or not setup.swa_cache:
        return cells(setup)
    if setup.kv_unified or setup.n_seq <= 1:
        return min(cells(setup), _pad(window * setup.n_seq + setup.n_ubatch, LLAMA_CPP_SWA_PAD))
    per_stream = -(-cells(setup) // setup.n_seq)
    return setup.n_seq * min(per_stream, _pad(window + setup.n_ubatch, LLAMA_CPP_SWA_PAD))


def _layer_counts(spec: ModelSpec) -> tuple[int, int]:
    """(full-attention, sliding-window) layers as llama.cpp's graph builds them: models with sliding layers
    (LLAMA_CPP_SWA_ARCHITECTURES) build a mask for each kind, also in releases that cache every cell."""
    attn = spec.num_attention_layers
    sliding = min(spec.num_sliding_layers, attn) if _has_swa_cache(spec) else 0
    return attn - sliding, sliding


def kv_bytes(spec: ModelSpec, setup: LlamaCppSetup, layers: float | None = None) -> int:
    """KV (and recurrent state) bytes of `layers` of the model's layers (None: all; the full/sliding mix in
    proportion): cells × (n_embd_k_gqa × size(type_k) + n_embd_v_gqa × size(type_v)) per layer
    (llama-kv-cache.cpp, L26).  MLA models keep the compressed latent (ModelSpec.kv_elements_per_token)."""
    per_token = spec.kv_elements_per_token  # the MLA latent, as llama.cpp caches it
    elem = (KV_DTYPE_BYTES[setup.type_k] + KV_DTYPE_BYTES[setup.type_v]) / 2
    full, sliding = _layer_counts(spec)
    share = 1.0 if layers is None or not spec.num_layers else min(layers, spec.num_layers) / spec.num_layers
    total = (full * cells(setup) + sliding * swa_cells(spec, setup)) * per_token * elem * share
    if spec.num_linear_layers and spec.linear_state_elements:
        total += spec.num_linear_layers * spec.linear_state_elements * F32 * setup.n_seq * share
    return int(total)


def mask_elements(spec: ModelSpec, setup: LlamaCppSetup) -> int:
    """Elements of the attention masks the graph takes as inputs: [n_kv, n_tokens] f32 per kind of
    attention layer (llama-graph.cpp build_attn_inp_kv / _iswa, L26; build_inp_KQ_mask and
    build_inp_KQ_mask_swa, both n_kv wide, in L24's llm_build_gemma2), n_kv the whole cache at reserve."""
    t = micro_batch(setup)
    full, sliding = _layer_counts(spec)
    n = (cells(setup) if full else 0) + (swa_cells(spec, setup) if sliding else 0)
    return n * t


def _ffn_width(spec: ModelSpec) -> int:
    """n_ff one token's FFN holds: the dense width, or top-k × expert width (+ shared experts) for MoE
    (mul_mat_id makes [n_ff_exp, k, n_tokens], llama-graph.cpp build_moe_ffn)."""
    dense = spec.intermediate_size if (not spec.is_moe or spec.num_dense_layers) else 0
    if not spec.is_moe:
        return dense
    routed = spec.experts_per_token * spec.moe_intermediate_size
    shared = (spec.shared_expert_intermediate_size or spec.moe_intermediate_size) * spec.num_shared_experts
    return max(routed + shared, dense)


def phases(spec: ModelSpec, setup: LlamaCppSetup, *, mask_bytes: int) -> dict[str, int]:
    """Live bytes at the peaks of the worst-case graph on a device that runs layers:
    - attention: the scores kq = mul_mat(k, q) [n_kv, n_tokens, n_head] f32 without flash attention
      (build_attn_mha), the masks, ATTN_EMBD_ACTIVATIONS n_tokens × n_embd tensors and
      ATTN_HEAD_ACTIVATIONS n_tokens × (n_head × head_dim) tensors;
    - feed-forward: FFN_TENSORS n_tokens × n_ff tensors, the residual and the normed input, the mask.
    ggml-alloc frees a tensor after its last use (inputs included) and never frees graph outputs."""
    t, h = micro_batch(setup), spec.hidden_size
    q = spec.num_attention_heads * spec.attn_head_dim
    scores = 0 if setup.flash_attn else t * cells(setup) * spec.num_attention_heads * F32
    return {
        "attention": mask_bytes + scores + (ATTN_EMBD_ACTIVATIONS * h + ATTN_HEAD_ACTIVATIONS * q) * t * F32,
        "feed-forward": mask_bytes + FFN_TENSORS * t * _ffn_width(spec) * F32 + 2 * t * h * F32,
    }


def output_phase_bytes(spec: ModelSpec, setup: LlamaCppSetup) -> int:
    """The output layer on its device: logits for every token of the worst-case graph (n_tokens × n_vocab
    f32, a graph output) and the normed hidden state they are made from.  llama.cpp after 001d906a
    (2026) reserves min(n_tokens, n_outputs_max) rows, which llama-server lowers; this counts n_tokens."""
    t = micro_batch(setup)
    return t * spec.vocab_size * F32 + t * spec.hidden_size * F32


def device_mask_bytes(spec: ModelSpec, setup: LlamaCppSetup) -> int:
    """The masks on a GPU: the f32 input copied from the host, cast to f16 with flash attention
    (build_attn_inp_kv: ggml_cast(mask, F16); the f32 copy is freed after the cast)."""
    return mask_elements(spec, setup) * (2 if setup.flash_attn else F32)


def gpu_compute_bytes(spec: ModelSpec, setup: LlamaCppSetup, *, holds_output: bool, pipeline_copies: int = 1,
                      offloaded_weight: int = 0) -> int:
    """A GPU's compute buffer: the largest of its phases.

    `pipeline_copies` > 1 (pipeline parallelism): every split input -- the f32 mask and the n_tokens × n_embd
    hidden state (the token embeddings on the first GPU) -- is kept in that many copies and never freed
    (ggml_backend_sched_split_graph: ggml_set_input + ggml_set_output on each copy).
    `offloaded_weight`: the largest weight in host memory whose matmul the GPU runs for a micro-batch of at
    least 32 tokens (ggml_backend_sched_backend_id_from_cur, "op offload"): the output matrix when the output
    layer stays on the CPU; the copy lives in this buffer while the matmul runs."""
    t, h = micro_batch(setup), spec.hidden_size
    mask = device_mask_bytes(spec, setup)
    peaks = phases(spec, setup, mask_bytes=mask if pipeline_copies == 1 else 0)
    if holds_output:
        peaks["output"] = output_phase_bytes(spec, setup)
    if offloaded_weight:
        peaks["offloaded output"] = offloaded_weight + output_phase_bytes(spec, setup)
    worst = max(peaks.values())
    if pipeline_copies > 1:
        kept = pipeline_copies * (mask_elements(spec, setup) * F32 + t * h * F32)
        worst += kept + (mask if setup.flash_attn else 0)
    return int(worst)


def host_compute_bytes(spec: ModelSpec, setup: LlamaCppSetup, *, cpu_layers: int, output_on_cpu: bool,
                       has_gpu: bool) -> int:
    """The CPU's compute buffer ("CUDA_Host compute buffer" when a GPU runs the layers).

    With a GPU: the graph's inputs the host makes -- token embeddings (get_rows on token_embd, which stays
    on the CPU: n_tokens × n_embd f32) and the masks in f32 (also with flash attention) -- plus, when
    layers run on the CPU, their phases, and the output layer's when it stays there.  Without a GPU: every phase,
    the output layer's included."""
    t, h = micro_batch(setup), spec.hidden_size
    inputs = t * h * F32 + mask_elements(spec, setup) * F32
    if not has_gpu:
        peaks = phases(spec, setup, mask_bytes=mask_elements(spec, setup) * F32)
        peaks["output"] = output_phase_bytes(spec, setup)
        return int(max(peaks.values()))
    peaks = dict(phases(spec, setup, mask_bytes=0)) if cpu_layers else {}
    if output_on_cpu:  # -ngl without the output layer: the host computes the logits
        peaks["output"] = output_phase_bytes(spec, setup)
    return int(max(peaks.values(), default=0) + inputs)


def output_buffer_bytes(spec: ModelSpec, setup: LlamaCppSetup) -> int:
    """The host output buffer: logits of max(n_outputs, n_seq) rows, n_seq at load (output_reserve, L26;
    llama_output_reserve, L24).  Contexts created with embeddings on add n_embd per row (ollama's runner, whose
    patch 05-embeddings keeps the logits too)."""
    return max(setup.n_seq, 1) * (spec.vocab_size + (spec.hidden_size if setup.embeddings else 0)) * F32


def pipeline_copies(setup: LlamaCppSetup, num_layers: int) -> int:
    """GGML_SCHED_MAX_COPIES when llama.cpp turns pipeline parallelism on: more than one GPU holding every
    layer and the output layer (llama-context.cpp: n_devices > 1 && n_gpu_layers > n_layer)."""
    all_on_gpu = setup.gpu_layers is None or setup.gpu_layers > num_layers
    return SCHED_MAX_COPIES if setup.gpus > 1 and all_on_gpu else 1
