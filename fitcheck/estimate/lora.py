"""LoRA adapters: which matrices a target list selects, and the parameters the adapters add.

peft (tuners/lora/layer.py, `Linear.update_layer`) gives every adapted nn.Linear of shape
d_in → d_out two matrices: lora_A (r × d_in) and lora_B (d_out × r), so r × (d_in + d_out)
trainable parameters per adapted matrix (Hu et al. 2021, "LoRA", section 4).  Counted here from
the model's real matrix shapes (`weights.linear_matrices`), so GQA k/v projections, the MLP's
intermediate size and MoE experts (one nn.Linear per expert) are exact.

Check (peft's `print_trainable_parameters`): Llama-2-7B, r=8, q_proj+v_proj:
32 layers × 2 × 8 × (4096 + 4096) = 4,194,304 trainable params.
"""

from __future__ import annotations

from typing import Any

from fitcheck.errors import FitcheckError
from fitcheck.estimate.lora_targets import LoraTargets, parse_targets
from fitcheck.estimate.optimizers import ParamShape
from fitcheck.estimate.weights import Matrix, linear_matrices
from fitcheck.model.spec import ModelSpec

# Architectures whose checkpoints fuse projections into one nn.Linear (one adapter pair each).
_FUSED_QKV = frozenset({"qwen", "phi3"})          # modeling_qwen.py c_attn; modeling_phi3.py qkv_proj
_FUSED_GATE_UP = frozenset({"phi3"})             # modeling_phi3.py gate_up_proj


def model_matrices(spec: ModelSpec) -> tuple[Matrix, ...]:
    """The nn.Linear modules of `spec` as the checkpoint defines them (fused where it fuses)."""
    mats = list(linear_matrices(spec))
    arch = spec.architecture
    if arch in _FUSED_QKV:
        by = {m.role: m for m in mats}
        q, k, v = by["attn_q"], by["attn_k"], by["attn_v"]
        mats = [m for m in mats if m.role not in ("attn_q", "attn_k", "attn_v")]
        mats.insert(0, Matrix("attn_qkv", q.rows_in, q.cols_out + k.cols_out + v.cols_out, 1, q.layers))
    if arch in _FUSED_GATE_UP:
        by = {m.role: m for m in mats}
        g, u = by["ffn_gate"], by["ffn_up"]
        mats = [m for m in mats if m.role not in ("ffn_gate", "ffn_up")]
        mats.append(Matrix("ffn_gate_up", g.rows_in, g.cols_out + u.cols_out, 1, g.layers))
    return tuple(mats)


def adapted_matrices(spec: ModelSpec, targets: LoraTargets) -> tuple[Matrix, ...]:
    mats = model_matrices(spec)
    if targets.roles is None:
        return mats
    chosen = tuple(m for m in mats if m.role in targets.roles)
    if not chosen:
        raise FitcheckError(f"--lora-targets {targets.text} matches no linear layer of {spec.name}",
                            "use all-linear or attention")
    return chosen


def lora_params(spec: ModelSpec, rank: int, targets: LoraTargets) -> int:
    """Trainable adapter parameters: r × (d_in + d_out) per adapted matrix copy."""
    if rank < 1:
        raise FitcheckError(f"--lora-rank must be at least 1, got {rank}")
    return sum(rank * (m.rows_in + m.cols_out) * m.per_layer * m.layers for m in adapted_matrices(spec, targets))


def adapter_saved_bytes_per_token(spec: ModelSpec, targets: LoraTargets, rank: int, *, adapter_bytes: int,
                                  compute_bytes: int, dropout: float) -> int:
    """Bytes one token leaves saved for backward by the adapter branches of one decoder layer.

    peft's `lora.Linear.forward` (tuners/lora/layer.py; bnb's `Linear4bit`/`Linear8bitLt` the same):

        result = self.base_layer(x)
        x = self._cast_input_dtype(x, lora_A.weight.dtype)
        result = result + lora_B(lora_A(dropout(x))) * scaling
        result = result.to(torch_result_dtype)

    Per adapted module (its own input features `d_in`, rank r):
      - adapters in another dtype than the compute dtype (peft >= 0.12 keeps them in fp32 on a
        16-bit base, `autocast_adapter_dtype=True`): `_cast_input_dtype` makes a new fp32 copy of
        x that lora_A saves (d_in × 4 B), and lora_B saves lora_A's fp32 output (r × 4 B); the
        fp32 lora_B output and the fp32 sum with the 16-bit base output are transient (not saved);
      - adapters in the compute dtype (older peft, DeepSpeed): lora_A saves x itself, already
        counted as the module's input; r is negligible and not counted;
      - `lora_dropout` > 0: lora_A saves the dropped-out copy instead (d_in × adapter bytes) and
        dropout its bool mask (d_in × 1 B).
    Each adapted module casts (and drops out) its own copy, so q/k/v reading the same input keep
    three.  MoE experts see only routed tokens (experts_per_token of num_experts).  The matrix
    shapes come from `model_matrices` (fused where the checkpoint fuses).
    """
    cast = adapter_bytes != compute_bytes
    if not cast and dropout <= 0:
        return 0
    total = 0.0
    for m in adapted_matrices(spec, targets):
        share = m.layers / max(spec.num_layers, 1)
        copies = spec.experts_per_token if (m.role.endswith("_exps") and spec.num_experts) else m.per_layer
        per = 0
        if dropout > 0:
            per += m.rows_in * (adapter_bytes + 1)
        elif cast:
            per += m.rows_in * adapter_bytes
        if cast:
            per += rank * adapter_bytes
        total += per * copies * share
    return int(total)


def trainable_shapes(spec: ModelSpec, plan: Any) -> tuple[ParamShape, ...]:
    """Trainable tensors: every tensor for full fine-tuning, the adapters (and embeddings) for LoRA."""
    if plan.mode == "full":
        shapes = [ParamShape(m.rows_in, m.cols_out, m.per_layer * m.layers) for m in linear_matrices(spec)]
        counted = sum(s.params for s in shapes)
        emb = spec.vocab_size * spec.hidden_size
        shapes.append(ParamShape(spec.vocab_size, spec.hidden_size, 1 if spec.tie_word_embeddings else 2))
        rest = spec.total_params - counted - emb * (1 if spec.tie_word_embeddings else 2)
        if rest > 0:
            shapes.append(ParamShape(rest, 1))  # norms, biases, routers: vectors
        return tuple(shapes)
    targets = parse_targets(plan.lora_targets)
    r = plan.lora_rank
    shapes = []
    for m in adapted_matrices(spec, targets):
        shapes += [ParamShape(r, m.rows_in, m.per_layer * m.layers), ParamShape(m.cols_out, r, m.per_layer * m.layers)]
    return tuple(shapes)
