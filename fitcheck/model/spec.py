"""ModelSpec: every architecture number the estimator needs, and the parameter counts they imply.

Pure data and arithmetic, no I/O.  Built by the catalog, from a config.json, a safetensors or
GGUF header, or from ``--params`` for a generic dense estimate.

Parameter counts come from the architecture, tensor by tensor (:func:`tensor_groups`), so the
estimator can give each group its own storage format: quantized formats keep embeddings, norms,
biases and routers in 16 bits while packing the linear layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fitcheck.model.generation_config import GenerationDefaults

# Kinds of tensor groups.  Linear kinds are what weight quantization packs.
EMBED = "embed"            # token embedding (vocab x hidden)
LM_HEAD = "lm_head"        # output projection (hidden x vocab); absent when tied
ATTN = "attn"              # q/k/v/o projections (incl. MLA down/up projections)
MLP = "mlp"                # dense feed-forward linears
EXPERTS = "experts"        # routed MoE expert linears (all experts)
SHARED_EXPERTS = "shared_experts"
ROUTER = "router"          # MoE gate (hidden x experts)
NORM = "norm"              # RMSNorm/LayerNorm weights (and biases)
BIAS = "bias"              # linear-layer biases
OTHER = "other"            # vision tower, projector, SSM extras, attention sinks: kept 16-bit

LINEAR_KINDS = frozenset({ATTN, MLP, EXPERTS, SHARED_EXPERTS})
MXFP4_STORED = ("mxfp4", "mxfp4_moe")   # stored formats whose routed experts are MXFP4


@dataclass(frozen=True)
class TensorGroup:
    kind: str
    params: int          # total parameters in the group (all layers)
    layers: int = 0      # how many transformer layers it spans (0: not per layer)


@dataclass(frozen=True)
class ModelSpec:
    """Architecture numbers of one model (names follow Hugging Face config.json)."""

    name: str                          # HF id or the name given
    num_layers: int
    hidden_size: int
    intermediate_size: int             # dense MLP width (per gate/up matrix)
    num_attention_heads: int
    num_kv_heads: int
    vocab_size: int
    head_dim: int | None = None        # explicit head_dim when the config gives one
    tie_word_embeddings: bool = False
    architecture: str = ""             # config model_type, e.g. 'qwen2', 'llama', 'deepseek_v3'
    family: str = ""

    # Block shape
    gated_mlp: bool = True             # SwiGLU/GeGLU: gate, up, down (3 matrices); else up, down
    qkv_bias: bool = False             # biases on q, k, v
    attn_out_bias: bool = False        # bias on o_proj
    mlp_bias: bool = False
    norm_has_bias: bool = False        # LayerNorm with bias (2 x hidden) vs RMSNorm (hidden)
    norms_per_layer: int = 2           # Gemma 2/3: 4 (pre/post attention and feed-forward)
    qk_norm: bool = False              # per-head q/k RMSNorm (Qwen3, Gemma 3)
    qk_norm_full_width: bool = False   # q/k norm over the whole q/k projection (OLMo 2, Cohere)
    attention_sinks: bool = False      # gpt-oss: one learned sink per head per layer

    # Mixture of experts (num_experts == 0: dense)
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0  # per shared expert; 0 -> moe_intermediate_size
    num_dense_layers: int = 0          # layers that keep a dense MLP (first_k_dense, interleave)
    router_bias: bool = False
    expert_bias: bool = False          # biases inside expert linears (gpt-oss)

    # Attention variants
    sliding_window: int | None = None
    num_sliding_layers: int = 0        # layers that attend to at most `sliding_window` tokens
    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank > 0 turns it on
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # Linear-attention / SSM layers: constant-size state instead of a KV cache
    num_linear_layers: int = 0
    linear_state_elements: int = 0     # state elements per linear layer per sequence

    max_context: int | None = None
    stored_dtype: str = "bfloat16"     # torch_dtype of the checkpoint
    stored_format: str | None = None   # pre-quantized checkpoint: 'gptq-int4', 'awq', 'fp8', 'mxfp4', 'q4_k_m' ...;
    #                                    a GGUF file's type even when 16/32-bit ('fp16', 'bf16', 'fp32')
    stored_weight_bytes: int | None = None  # exact bytes from a safetensors/GGUF header
    stored_file_type: str = ""         # a GGUF file's own type as llama.cpp names it ('F16', 'Q4_K_M'); else ''
    # Formats of the model's known pre-quantized checkpoints (the catalog's quantized repositories: 'fp8',
    # 'awq', 'gptq-int4' ...), which the printed engine commands load instead of quantizing at load time.
    prequantized: tuple[str, ...] = ()
    # The GGUF file types (llama.cpp's names: 'Q4_K_M', 'Q8_0') the catalog's GGUF repository holds, as recorded
    # from its file list; empty where none is recorded.
    gguf_types: tuple[str, ...] = ()
    # Tensor groups stored in a format of their own whatever the file's type: gpt-oss's experts are MXFP4
    # in its checkpoint and in every GGUF build of it ((EXPERTS, 'mxfp4'),).  See stored_groups().
    group_formats: tuple[tuple[str, str], ...] = ()
    extra_params: int = 0              # parameters outside the text decoder (vision tower, MTP)
    extra_params_note: str = ""
    # Non-persistent buffers the modeling code registers at load, beyond the weights (bytes, on the
    # device of the first layers), and what they are: Qwen(1)'s first remote code (architectures._qwen1).
    load_buffer_bytes: int = 0
    load_buffer_note: str = ""
    # The rotary embeddings' cos/sin tables that vLLM and SGLang build at load (get_rope: one per distinct rotary
    # setting, shared by every layer that uses it): (positions, rotary dims) each; () for models without rotary
    # positions (ALiBi, learned positions) or read from a source that does not say (hf_config._rope_tables).
    rope_tables: tuple[tuple[int, int], ...] = ()
    generic: bool = False              # True for a --params estimate without real architecture
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)  # (field, where from)
    # The checkpoint's generation_config.json (fitcheck.model.generation_config): how transformers'
    # generate() samples by default.  None: not read (no file, a GGUF or generic model, not recorded).
    generation: GenerationDefaults | None = field(default=None, compare=False)

    # ---- stored formats -------------------------------------------------------------------
    def stored_groups(self) -> dict[str, str]:
        """Tensor group -> the format it is stored in, where it differs from the rest (MXFP4 experts)."""
        out = dict(self.group_formats)
        if self.stored_format in MXFP4_STORED and self.is_moe:
            out.setdefault(EXPERTS, "mxfp4")
        return out

    def stored_formats(self) -> frozenset[str]:
        """Every format this checkpoint (or the checkpoint a GGUF build was made from) stores weights in."""
        return frozenset({*([self.stored_format] if self.stored_format else []), *self.stored_groups().values()})

    def as_stored(self, stored_format: str) -> ModelSpec:
        """This model as a build stored in ``stored_format`` (a GGUF type, an Ollama tag): the groups kept
        in their own format stay so."""
        return replace(self, stored_format=stored_format, group_formats=tuple(self.stored_groups().items()))

    # ---- derived shape -------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attn_head_dim(self) -> int:
        """Per-head dimension of q/k/v (explicit head_dim, else hidden / heads)."""
        if self.head_dim:
            return self.head_dim
        return self.hidden_size // self.num_attention_heads

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def num_attention_layers(self) -> int:
        """Layers with a KV cache (all but linear-attention/SSM layers)."""
        return self.num_layers - self.num_linear_layers

    def rope_table_elements(self) -> int:
        """Entries of the rotary cos/sin tables (``rope_tables``): positions × rotary dims, summed."""
        return sum(positions * dims for positions, dims in self.rope_tables)

    @property
    def kv_elements_per_token(self) -> int:
        """KV-cache elements one token adds in one full-attention layer.

        Standard/GQA: 2 x kv_heads x head_dim (K and V).  MLA as engines with latent caching
        store it: kv_lora_rank + qk_rope_head_dim (one compressed latent plus the rope key).
        """
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.attn_head_dim

    @property
    def mla_expanded_kv_elements_per_token(self) -> int:
        """MLA cached the way transformers does: full per-head K (nope+rope) and V."""
        return self.num_attention_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)

    # ---- parameter counts ------------------------------------------------------------------
    def _attention_params_per_layer(self) -> tuple[int, int]:
        """(weight params, bias params) of one attention block."""
        h = self.hidden_size
        heads = self.num_attention_heads
        if self.is_mla:
            qk_head = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank * heads * qk_head
            else:
                q = h * heads * qk_head
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv_b = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
            o = heads * self.v_head_dim * h
            return q + kv_a + kv_b + o, 0
        d = self.attn_head_dim
        q_out = heads * d
        kv_out = self.num_kv_heads * d
        weights = h * q_out + 2 * h * kv_out + q_out * h
        biases = 0
        if self.qkv_bias:
            biases += q_out + 2 * kv_out
        if self.attn_out_bias:
            biases += h
        return weights, biases

    def _mlp_params(self, width: int) -> tuple[int, int]:
        """(weight params, bias params) of one feed-forward of the given width."""
        h = self.hidden_size
        mats = 3 if self.gated_mlp else 2
        weights = mats * h * width
        biases = ((2 if self.gated_mlp else 1) * width + h) if self.mlp_bias else 0
        return weights, biases

    def _norm_params_per_layer(self) -> int:
        h = self.hidden_size
        per_norm = 2 * h if self.norm_has_bias else h
        n = self.norms_per_layer * per_norm
        if self.qk_norm and not self.is_mla:
            if self.qk_norm_full_width:
                n += (self.num_attention_heads + self.num_kv_heads) * self.attn_head_dim
            else:
                n += 2 * self.attn_head_dim
        if self.is_mla:
            n += self.kv_lora_rank + (self.q_lora_rank or 0)
        return n

    def tensor_groups(self) -> tuple[TensorGroup, ...]:
        """The model's parameters grouped by kind, summed over layers."""
        return self._tensor_groups

    @cached_property  # pure over the (frozen) fields; the estimates ask per device and per candidate
    def _tensor_groups(self) -> tuple[TensorGroup, ...]:
        h, L = self.hidden_size, self.num_layers
        groups: list[TensorGroup] = [TensorGroup(EMBED, self.vocab_size * h)]
        if not self.tie_word_embeddings:
            groups.append(TensorGroup(LM_HEAD, self.vocab_size * h))

        attn_w, attn_b = self._attention_params_per_layer()
        groups.append(TensorGroup(ATTN, attn_w * L, L))
        bias = attn_b * L

        dense_layers = self.num_dense_layers if self.is_moe else L
        if dense_layers:
            w, b = self._mlp_params(self.intermediate_size)
            groups.append(TensorGroup(MLP, w * dense_layers, dense_layers))
            bias += b * dense_layers
        if self.is_moe:
            moe_layers = self.num_moe_layers
            ew = (3 if self.gated_mlp else 2) * h * self.moe_intermediate_size
            groups.append(TensorGroup(EXPERTS, ew * self.num_experts * moe_layers, moe_layers))
            if self.expert_bias:
                per_expert_b = (2 if self.gated_mlp else 1) * self.moe_intermediate_size + h
                bias += per_expert_b * self.num_experts * moe_layers
            if self.num_shared_experts:
                width = self.shared_expert_intermediate_size or self.moe_intermediate_size
                sw, _ = self._mlp_params(width)
                groups.append(TensorGroup(SHARED_EXPERTS, sw * self.num_shared_experts * moe_layers, moe_layers))
            router = h * self.num_experts + (self.num_experts if self.router_bias else 0)
            groups.append(TensorGroup(ROUTER, router * moe_layers, moe_layers))

        groups.append(TensorGroup(NORM, self._norm_params_per_layer() * L + (2 * h if self.norm_has_bias else h), L))
        if bias:
            groups.append(TensorGroup(BIAS, bias, L))
        other = self.extra_params
        if self.attention_sinks:
            other += self.num_attention_heads * self.num_attention_layers
        if other:
            groups.append(TensorGroup(OTHER, other))
        return tuple(groups)

    @property
    def total_params(self) -> int:
        return sum(g.params for g in self.tensor_groups())

    @property
    def embedding_params(self) -> int:
        """Input embedding plus an untied output head."""
        return sum(g.params for g in self.tensor_groups() if g.kind in (EMBED, LM_HEAD))

    @property
    def non_embedding_params(self) -> int:
        return self.total_params - self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters used per token: all of a dense model; routed experts count k of E."""
        if not self.is_moe:
            return self.total_params
        groups = {g.kind: g for g in self.tensor_groups()}
        experts = groups[EXPERTS].params
        active_experts = experts * self.experts_per_token // self.num_experts
        return self.total_params - experts + active_experts

    def layer_params(self) -> int:
        """Parameters of the largest transformer layer (for ZeRO-3 and offload buffers)."""
        attn_w, attn_b = self._attention_params_per_layer()
        per = attn_w + attn_b + self._norm_params_per_layer()
        if self.is_moe and self.num_moe_layers:
            ew = (3 if self.gated_mlp else 2) * self.hidden_size * self.moe_intermediate_size
            moe = ew * self.num_experts
            if self.num_shared_experts:
                width = self.shared_expert_intermediate_size or self.moe_intermediate_size
                moe += self._mlp_params(width)[0] * self.num_shared_experts
            dense = self._mlp_params(self.intermediate_size)[0] if self.num_dense_layers else 0
            return per + max(moe, dense)
        return per + sum(self._mlp_params(self.intermediate_size))
