"""A generic Llama-like dense shape for a model known only by its parameter count (``--params 7b``).

The estimate needs layers, hidden size and key/value heads for the KV cache and activations; when
the user gives only a count, this derives a plausible shape from rules fitted to real dense models
(Llama 2/3, Mistral, Qwen2.5, Yi):

* hidden size: h = cube root of (P x 128 / 12), rounded to a multiple of 256.  A Llama-style layer
  holds about 12 h^2 parameters (attention 4 h^2 + SwiGLU 3 x h x 8h/3) and real models keep
  layers ~ h / 128 (Llama-2-7B 4096/32, 13B 5120/40, Llama-3.2-1B 2048/16, Qwen2.5-14B 5120/48),
  so P ~ 12 h^3 / 128.  7B -> h 4096, 32 layers; 70B -> h 9216, 72 layers (real: 8192, 80).
  From 4096 up h is a multiple of 1024 so the head count divides into 8 key/value groups.
* vocabulary 32,000 (Llama 2 / Mistral), untied, counted in P; small counts narrow h so the
  embeddings stay at most half of P.
* layers: h / 128 (fewer when that would leave an MLP narrower than h).
* heads: h / 128 (head_dim 128); key/value heads 8 (GQA) from 2B parameters up when the head
  count allows, else one per head (MHA), as Llama 3 / Mistral / Qwen do at those sizes.
* intermediate size: whatever makes the total equal P (so the weights are exactly the count).

Every derived number is recorded in ``sources`` as "generic rule", and ``generic=True`` tells
renderers to say the answer is approximate.
"""

from __future__ import annotations

from fitcheck.errors import FitcheckError
from fitcheck.model.spec import ModelSpec

GENERIC_VOCAB = 32000          # Llama 2 / Mistral tokenizer size
GENERIC_HEAD_DIM = 128
GQA_FROM_PARAMS = 2 * 10**9    # models this large use grouped-query attention in practice
MIN_PARAMS, MAX_PARAMS = 10**7, 10**13


def _round_to(value: float, step: int) -> int:
    return max(64, int(round(value / step)) * step)


def _kv_heads_for(heads: int, n_params: int) -> int:
    if n_params < GQA_FROM_PARAMS or heads < 8:
        return heads
    for kv in (8, 4, 2, 1):
        if heads % kv == 0:
            return kv
    return heads


def generic_spec(n_params: int, layers: int | None = None, hidden: int | None = None,
                 kv_heads: int | None = None, name: str = "generic") -> ModelSpec:
    """A Llama-like dense :class:`ModelSpec` with ``total_params`` close to ``n_params``."""
    if isinstance(n_params, bool) or not isinstance(n_params, int) or not MIN_PARAMS <= n_params <= MAX_PARAMS:
        raise FitcheckError(f"--params {n_params!r} is out of range", "give a count such as 7b, 1.5b or 135m")
    for flag, value, upper in (("--layers", layers, 10**4), ("--hidden", hidden, 10**6), ("--kv-heads", kv_heads, 10**4)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper):
            raise FitcheckError(f"{flag} {value!r} is out of range (1..{upper})")
    rule = "generic rule (fitcheck.model.generic)"
    sources: list[tuple[str, str]] = [("total_params", "--params")]

    if hidden is None:
        if layers is None:
            width = (n_params * 128 / 12) ** (1 / 3)
        else:  # fit the width to the given depth instead
            width = (n_params / (12 * layers)) ** 0.5
        # small models: keep the (untied) embeddings to at most half the count
        width = min(width, n_params / (4 * GENERIC_VOCAB))
        # multiples of 1024 from 4096 up keep the head count divisible by 8 (GQA groups)
        hidden = _round_to(width, 1024 if width >= 4096 else 256 if width >= 1024 else 64)
        sources.append(("hidden_size", rule))
    else:
        sources.append(("hidden_size", "--hidden"))
    head_dim = GENERIC_HEAD_DIM if hidden % GENERIC_HEAD_DIM == 0 else 64 if hidden % 64 == 0 else None
    heads = hidden // head_dim if head_dim else max(1, hidden // GENERIC_HEAD_DIM)
    if head_dim is None:
        head_dim = max(1, hidden // heads)
    sources.append(("num_attention_heads", rule))
    if kv_heads is None:
        kv_heads = _kv_heads_for(heads, n_params)
        sources.append(("num_kv_heads", rule))
    else:
        if kv_heads > heads or heads % kv_heads:
            raise FitcheckError(f"--kv-heads {kv_heads} must divide the {heads} attention heads of hidden size {hidden}")
        sources.append(("num_kv_heads", "--kv-heads"))

    embeddings = 2 * GENERIC_VOCAB * hidden
    attn = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    norms = 2 * hidden
    if layers is None:
        layers = max(1, round(hidden / 128))  # depth ~ width / 128, as in real models
        body = n_params - embeddings - hidden
        if body - layers * (attn + norms) < layers * 3 * hidden * hidden:  # too thin: fewer layers
            layers = max(1, int(round(body / (attn + norms + 8 * hidden * hidden))))
        sources.append(("num_layers", rule))
    else:
        sources.append(("num_layers", "--layers"))
    mlp_total = n_params - embeddings - hidden - layers * (attn + norms)
    intermediate = mlp_total // (3 * hidden * layers)
    if intermediate < 1:
        raise FitcheckError(f"--params {n_params:,} is too few for {layers} layers of hidden size {hidden}",
                            "give a larger --params, or fewer --layers / a smaller --hidden")
    sources.append(("intermediate_size", "generic rule: what makes the total equal --params"))
    return ModelSpec(
        name=name, num_layers=layers, hidden_size=hidden, intermediate_size=intermediate,
        num_attention_heads=heads, num_kv_heads=kv_heads, vocab_size=GENERIC_VOCAB,
        head_dim=head_dim, architecture="llama", family="generic", generic=True,
        sources=tuple(sources),
    )
