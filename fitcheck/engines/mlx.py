"""MLX (mlx-lm): Apple Silicon's own engine, `mlx_lm.server` / `mlx_lm.generate`, in unified memory.

What it runs: Apple GPUs (Metal) only; 16/32-bit Hugging Face checkpoints as they are, MLX's affine-quantized
conversions (mlx-community's -8bit/-6bit/-4bit/-3bit repositories, or `mlx_lm.convert -q` of any supported
model) and gpt-oss's MXFP4 experts as stored.  It is the default engine on Apple GPUs: a native Metal engine with
quantized matmuls, where transformers runs through PyTorch's MPS backend.

How it holds memory (mlx-lm at d78bf58, v0.32.0 of 2026-08-22; the sources are pinned below):
- weights: MLX's formats (fitcheck.estimate.formats: bits + 0.5 per weight for the 16-bit scale and bias of every
  64 weights; the embedding and lm_head quantized too);
- KV cache: one ``KVCache`` per layer, grown in steps of 256 tokens (``step = 256``), in the activation dtype;
  ``batch_generate`` keeps the sequences in one left-padded buffer, every sequence as long as the longest
  (fitcheck's batch: every sequence resident); models that build their own cache keep a ``RotatingKVCache`` of
  the window for sliding-window layers (SLIDING_ARCHITECTURES), the others every token;
- growing the cache concatenates the old and a new step's buffers, so one layer's old cache is alive beside the
  new one while the next one is made (``mx.concatenate([self.keys, new_k], axis=2)``; the layers run in turn);
- prefill in chunks of ``prefill_step_size`` (2048) tokens: the activation peak is one chunk's, and only the last
  token's logits are computed (since v0.27.0, ml-explore/mlx-lm#406);
- attention: MLX's fused kernel for head dims 64–128; for head dims 192 and 256 its unfused path makes a chunk's
  scores (mlx/backend/metal/scaled_dot_product_attention.cpp: "Unfused path is faster for following shapes").
Sources: https://github.com/ml-explore/mlx-lm/blob/d78bf58e217c904ec282ed8da9b947491f78c022/mlx_lm/models/cache.py,
.../mlx_lm/generate.py (generate_step, wired_limit), https://github.com/ml-explore/mlx/blob/
846d176227a0ac13d2667e58d2bb68b322109ab0/mlx/backend/metal/scaled_dot_product_attention.cpp.
The GPU's share of unified memory is what Metal recommends (MTLDevice.recommendedMaxWorkingSetSize, the Apple
GPU's memory in fitcheck.probe.apple); mlx-lm wires that much and warns when the weights alone pass 0.9 of it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fitcheck.engines.base import RESIDENT, Engine
from fitcheck.engines.capabilities import METAL, Runs
from fitcheck.estimate.activations import attn_dims
from fitcheck.estimate.kv_cache import SlidingCache, kv_cache_bytes
from fitcheck.estimate.parts import act_bytes, kv_detail, weights_component
from fitcheck.estimate.result import ACTIVATIONS, KV_CACHE, Component, DeviceNeed, Memory
from fitcheck.speed.efficiency import Efficiency

if TYPE_CHECKING:
    from fitcheck.model.spec import ModelSpec
    from fitcheck.plan import Plan

RUNS = Runs(frozenset({METAL}), why="MLX", verb="needs")
MLX_PRECISIONS = ("mlx-8bit", "mlx-6bit", "mlx-4bit", "mlx-3bit")
# KVCache.step and generate_step's prefill_step_size (tokens).
KV_STEP = 256
PREFILL_STEP = 2048
# Head dims MLX's fused attention kernel takes for a prompt chunk (query length > 8); 192 and 256 it routes to the
# unfused path, which makes the scores (the file above: supported_head_dim, then "Unfused path is faster").
FUSED_PREFILL_HEAD_DIMS = frozenset({64, 72, 80, 96, 128})
# Models whose mlx-lm module builds its own cache (make_cache) with a RotatingKVCache(max_size=sliding_window) for
# the sliding-window layers: gemma3_text.py, gpt_oss.py.  gemma2.py has none: every layer keeps every token.
SLIDING_ARCHITECTURES = frozenset({"gemma3", "gemma3_text", "gpt_oss"})
# mlx_lm.server's port (server.py: --port default 8080).
SERVER_PORT = 8080
_BITS = {"mlx-8bit": 8, "mlx-6bit": 6, "mlx-4bit": 4, "mlx-3bit": 3}


class Mlx(Engine):
    name = "mlx"
    title = "MLX"
    runs = RUNS
    precisions = {p: RUNS for p in ("fp32", "bf16", "fp16", "mxfp4", *MLX_PRECISIONS)}
    kv_dtypes = ("fp16", "bf16", "fp32")
    splits = "layers"
    batch = RESIDENT
    distribution = "mlx-lm"
    uses_torch = False
    lower_precisions = MLX_PRECISIONS
    keeps_packed_experts = True
    preferred_on = frozenset({METAL})
    # mlx-lm builds each decode step as one lazy graph and evaluates it asynchronously (mx.async_eval), as llama.cpp
    # builds one ggml graph: no source times MLX's host work per layer, so llama.cpp's range stands in for it.
    host_per_layer = Efficiency("host time per layer (MLX)", 20e-6, 60e-6,
                                "one lazy graph per step, evaluated asynchronously; llama.cpp's per-layer range "
                                "(no published MLX figure)")

    def default_why(self, precision: str) -> str:
        return "Apple GPU: MLX, its native engine (quantized matmuls in Metal)"

    def sliding_cache(self, spec: ModelSpec, *, tokens: int, prompt_tokens: int | None = None,
                      transformers_version: str | None = None, batched_tokens: int | None = None) -> SlidingCache:
        window = spec.sliding_window or 0
        if spec.architecture not in SLIDING_ARCHITECTURES:
            return SlidingCache(tokens, tokens, f"window {window:,}, but mlx-lm caches every token of "
                                                f"{spec.architecture}'s sliding-window layers (no RotatingKVCache)")
        return SlidingCache(tokens, min(tokens, window), f"window {window:,}: mlx-lm's RotatingKVCache keeps the last "
                                                         f"{window:,} tokens")

    def memory(self, spec: ModelSpec, plan: Plan) -> Any:
        return memory(self, spec, plan)

    def command(self, model_id: str, plan: Plan, repos: Mapping[str, str], local: bool = False) -> str:
        return command(model_id, plan, repos)


def cached_tokens(tokens: int) -> int:
    """Cells a KVCache holds for ``tokens`` tokens: whole steps of KV_STEP."""
    return -(-max(tokens, 1) // KV_STEP) * KV_STEP


def prefill_bytes(spec: ModelSpec, plan: Plan, act_b: int) -> tuple[int, str]:
    """One prefill chunk's peak (bytes, words): the feed-forward's gate, up and product and the residual stream per
    token, or the attention's projections; for head dims the fused kernel does not take, the chunk's scores and
    their softmax over the whole cache."""
    chunk = min(plan.prompt_tokens, PREFILL_STEP) * plan.batch
    h = spec.hidden_size
    if spec.is_moe:  # SwitchGLU gathers each token's top-k experts at once (gather_mm)
        ffn = spec.experts_per_token * spec.moe_intermediate_size \
            + (spec.shared_expert_intermediate_size or spec.moe_intermediate_size) * spec.num_shared_experts
        ffn = max(ffn, spec.intermediate_size if spec.num_dense_layers else 0)
    else:
        ffn = spec.intermediate_size
    q, kv = attn_dims(spec)
    forward = chunk * max(3 * ffn + 3 * h, q + 2 * kv + 3 * h) * act_b
    why = f"a prefill chunk of {chunk:,} tokens (prefill_step_size {PREFILL_STEP:,})"
    head_dim = spec.attn_head_dim
    if plan.prompt_tokens > 8 and head_dim not in FUSED_PREFILL_HEAD_DIMS:
        scores = 2 * chunk * spec.num_attention_heads * cached_tokens(plan.prompt_tokens) * act_b
        forward += scores
        why += f"; head dim {head_dim}: MLX's unfused attention holds the chunk's scores and softmax"
    return int(forward), why


def memory(engine: Mlx, spec: ModelSpec, plan: Plan) -> Any:
    """(devices, facts, notes): one device, the Apple GPU's share of unified memory."""
    wb = engine.weights(spec, plan.precision)
    act_b = act_bytes(plan.precision)
    cells = cached_tokens(plan.context)
    kv = kv_cache_bytes(spec, tokens=cells, sequences=plan.batch, kv_dtype=plan.kv_dtype, engine=engine)
    # growing the cache: one layer's old buffers beside the new (the layers are evaluated in turn)
    growth = kv // max(spec.num_layers, 1)
    act, act_why = prefill_bytes(spec, plan, act_b)
    logits = plan.batch * spec.vocab_size * 4  # the last position's logits and log-probabilities (fp32)

    comps = (
        weights_component(spec, plan, wb),
        Component(KV_CACHE, kv, kv_detail(spec, plan, engine, 1.0)
                  + f"; grown in steps of {KV_STEP} tokens ({cells:,} cells per sequence)"),
        Component(KV_CACHE, growth, "one layer's cache copied while it grows by a step "
                                    "(mx.concatenate of the old buffers and the new step's)"),
        Component(ACTIVATIONS, act + logits, f"{act_why}, and the last position's logits"),
    )
    notes = ["MLX keeps weights, KV cache and activations in the GPU's share of unified memory (Metal's "
             "recommended working set); mlx-lm warns when the weights alone pass 0.9 of it"]
    return Memory([DeviceNeed("gpu0", "gpu", comps)], [("kv_cells", cells)], notes)


def repo_for(model_id: str, precision: str, repos: Mapping[str, str]) -> tuple[str, str]:
    """(the repository `mlx_lm` loads, a command that makes it first or ''): the catalog's MLX conversion of this
    precision when one is known; else the checkpoint itself (16/32 bits), or `mlx_lm.convert -q` of it."""
    if precision in repos:
        return repos[precision], ""
    if precision not in _BITS:
        return model_id, ""
    local = model_id.rstrip("/").split("/")[-1] + f"-{_BITS[precision]}bit"
    convert = ["mlx_lm.convert", "--hf-path", model_id, "-q", "--q-bits", str(_BITS[precision]),
               "--q-group-size", "64", "--mlx-path", local]
    return local, shlex.join(convert)


def command(model_id: str, plan: Plan, repos: Mapping[str, str]) -> str:
    """`mlx_lm.server --model REPO` (after `mlx_lm.convert -q` where no conversion is known).  mlx-lm has no
    context-length flag: the cache grows with the request; --decode-concurrency sets how many sequences it decodes
    at once (default 32)."""
    repo, convert = repo_for(model_id, plan.precision, repos)
    args = ["mlx_lm.server", "--model", repo, "--port", str(SERVER_PORT)]
    if plan.batch > 1:
        args += ["--decode-concurrency", str(plan.batch)]
    serve = shlex.join(args)
    return f"{convert} && {serve}" if convert else serve


ENGINE = Mlx()
