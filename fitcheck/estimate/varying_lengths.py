"""What `torch.cuda.max_memory_reserved` reads on a GPU with memory to spare when the sequence
length changes from step to step (pure: no torch, no I/O).

The estimate's training reserve (TRAINING_ALLOCATOR_SLACK) is what a run needs beyond its live
tensors: the smallest GPU it fits in.  A GPU with room to spare reads more, because the caching
allocator returns cached segments to the driver only when cudaMalloc fails
(fitcheck/estimate/allocator.py): a step longer than any before it finds no cached block large
enough for its vocabulary-sized tensors and allocates new segments, while the smaller segments of
earlier shapes stay reserved, and shorter steps split the large ones.  Fine-tuning data is like
that: SFT samples vary in length, and a batch of one is one sample.

This module replays one micro-batch after another through the allocator's rules, each with the
tensors a step allocates and frees in the order the code does, sized for that step's length, and
returns how far the replay's peak reserve lies above its live peak.  The tensors:

* forward under gradient checkpointing (torch.utils.checkpoint): each layer's output (the next
  layer's saved input, hidden × residual bytes per token) and its working set, freed when the
  layer ends (no_grad inside the checkpoint); without checkpointing each layer's saved tensors stay;
* the loss path (the sizes and order of fitcheck.estimate.training_activations.logits_bytes_per_token):
  the logits in the compute dtype; under autocast cross_entropy runs in fp32
  (aten/src/ATen/autocast_mode.cpp, cross_entropy_loss in the fp32 list): an fp32 copy, then
  log_softmax's fp32 output, which is saved, and the copy freed when cross_entropy returns; the
  16-bit logits die with the model's output before backward (no backward function saves them);
  backward: nll_loss_backward's full-size gradient, log_softmax_backward's output, the cast back to
  16 bits, the shift's slice_backward (a zero-filled full-size tensor);
* backward through the layers: each one recomputed (its working set), the gradient of its input,
  its saved input freed.

Static tensors (weights, adapters) are allocated once and never freed: they take segments of their
own and do not take part.  Full fine-tuning's gradients and optimizer states take part when
`StepTensors.params` names the trained parameters (:class:`TrainedParams`): each micro-batch's
backward makes every parameter's gradient among the activations, the first micro-batch of an
accumulation window keeps it as `p.grad` and the others add theirs in place and free it,
`zero_grad(set_to_none=True)` frees them all after the optimizer step, and AdamW (foreach) makes
its states at the first step from whatever is cached then and a state-sized temporary per
parameter at every step -- the order a CPU trace of such a loop shows
(benchmarks/measure/grad_trace.py; docs/accuracy.md, "ms-swift's counter, replayed").
"""

from __future__ import annotations

import math
import random
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain

from fitcheck.estimate.allocator import CachingAllocator, smallest_capacity


@dataclass(frozen=True)
class LengthMix:
    """A data set's token lengths as its card states them: mean ± sd, min, max."""

    mean: float
    sd: float
    minimum: int
    maximum: int

    @property
    def log_params(self) -> tuple[float, float]:
        """(mu, sigma) of the log-normal with this mean and sd."""
        sigma2 = math.log1p((self.sd / self.mean) ** 2)
        return math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2)

    def cdf(self, x: float) -> float:
        """The share of lengths at most `x` (the log-normal's; `draw` clamps its tails to [minimum, maximum])."""
        mu, sigma = self.log_params
        return 0.5 * (1 + math.erf((math.log(x) - mu) / (sigma * math.sqrt(2))))

    def draw(self, samples: int, max_length: int, *, delete_longer: bool, seed: int = 0) -> tuple[int, ...]:
        """`samples` lengths in training order: a log-normal with the stated mean and sd, kept within
        [minimum, maximum]; samples longer than `max_length` dropped (`delete_longer`, ms-swift's
        truncation_strategy 'delete') or truncated to it."""
        rng = random.Random(seed)
        mu, sigma = self.log_params
        out = []
        for _ in range(samples):
            n = min(self.maximum, max(self.minimum, int(rng.lognormvariate(mu, sigma))))
            if n > max_length:
                if delete_longer:
                    continue
                n = max_length
            out.append(n)
        return tuple(out)


@dataclass(frozen=True)
class BinnedLengths:
    """A data set's token lengths as a histogram: (low, high, share) bins, lengths uniform within a
    bin -- what a table's time column tells of the lengths when the rows themselves are not at hand
    (benchmarks/swift_lengths.py)."""

    bins: tuple[tuple[float, float, float], ...]

    @property
    def mean(self) -> float:
        return sum(w * (lo + hi) / 2 for lo, hi, w in self.bins) / sum(w for _, _, w in self.bins)

    @property
    def sd(self) -> float:
        second = sum(w * (lo * lo + lo * hi + hi * hi) / 3 for lo, hi, w in self.bins) / sum(w for _, _, w in self.bins)
        return math.sqrt(max(second - self.mean ** 2, 0.0))

    def draw(self, samples: int, max_length: int, *, delete_longer: bool, seed: int = 0) -> tuple[int, ...]:
        """As LengthMix.draw, from the histogram."""
        rng = random.Random(seed)
        total = sum(w for _, _, w in self.bins)
        out = []
        for _ in range(samples):
            u, k = rng.random() * total, 0
            while k < len(self.bins) - 1 and u >= self.bins[k][2]:
                u -= self.bins[k][2]
                k += 1
            lo, hi, _ = self.bins[k]
            n = min(int(hi), int(rng.uniform(lo, hi + 1)))
            if n > max_length:
                if delete_longer:
                    continue
                n = max_length
            out.append(n)
        return tuple(out)


@dataclass(frozen=True)
class TrainedParams:
    """Full fine-tuning's trained parameters, as the replay gives them gradients and AdamW's tensors
    (element counts; one layer's shape repeated over StepTensors.layers).

    The events, each from its source (torch v2.1.1 unless named):

    * backward: a parameter's gradient is made where its module's backward runs -- lm_head's weight
      gradient (MmBackward's mat2 gradient) beside the gradient of the logits, before the gradient of
      its input; a layer's (matrices, then its norms and biases) after its recompute, with its working
      set live; the input embedding's dense gradient (aten/src/ATen/native/cuda/Embedding.cu
      embedding_dense_backward_cuda: a zero-filled vocabulary × hidden tensor) after the first layer's
      backward.  AccumulateGrad (torch/csrc/autograd/functions/accumulate_grad.h accumulateGrad): with
      no `p.grad` yet it steals the new gradient (the first micro-batch of an accumulation window);
      later ones run `variable_grad += new_grad` and the new gradient is freed as the function returns.
    * the optimizer step, every `accumulation` micro-batches (transformers v4.36.2 trainer.py
      _inner_training_loop: `total_batched_samples % gradient_accumulation_steps == 0`, or the last
      micro-batch of an epoch shorter than one window):
      clip_grad_norm_ (torch/nn/utils/clip_grad.py: `torch._foreach_norm(grads)`, one scalar per
      gradient, their `torch.stack`, its `vector_norm`, `max_norm / (total_norm + 1e-6)`, its clamp;
      `_foreach_mul_` in place); then AdamW per parameter group -- the Trainer's two groups
      (trainer.py create_optimizer / get_decay_parameter_names: the weights with decay, then the
      biases and the norms of ALL_LAYERNORM_LAYERS; which group a norm falls in makes no difference
      here, its tensors being small-pool ones) -- torch/optim/adamw.py AdamW._init_group, at the
      first step only: `exp_avg` then `exp_avg_sq` (`torch.zeros_like(p)`) for each parameter in
      turn; _multi_tensor_adamw: `exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)` (one state-sized tensor per
      parameter; lerp_, mul_, addcmul_, div_, add_, addcdiv_ are in place), freed as the list dies
      (last first);
    * `model.zero_grad()` (torch/nn/modules/module.py zero_grad, set_to_none=True) after the step:
      every gradient freed, in model order.
    """

    layer: tuple[int, ...]          # one layer's weight matrices, in the order backward makes their gradients
    layer_vectors: tuple[int, ...]  # its norms' and biases' elements (no weight decay: the second group)
    embedding: int                  # the input embedding
    head: int                       # lm_head's weight; 0 when tied to the embedding
    final_vectors: tuple[int, ...]  # the final norm
    grad_bytes: int                 # a gradient's bytes per element (the parameter's dtype)
    state_bytes: int                # an AdamW state's bytes per element
    accumulation: int               # micro-batches per optimizer step

    def grads(self, layers: int) -> list[tuple[object, int]]:
        """(name, elements) of every trained parameter in model order (the order of
        `model.parameters()`: the embedding, each layer's, the final norm, lm_head)."""
        out: list[tuple[object, int]] = [("emb", self.embedding)]
        for i in range(layers):
            out += [(("v", i, j), n) for j, n in enumerate(self.layer_vectors)]
            out += [(("m", i, j), n) for j, n in reversed(list(enumerate(self.layer)))]
        out += [(("f", j), n) for j, n in enumerate(self.final_vectors)]
        if self.head:
            out.append(("head", self.head))
        return out


@dataclass(frozen=True)
class StepTensors:
    """Per-token sizes (bytes) of one micro-batch's transient tensors."""

    layers: int
    layer_input: int        # hidden × residual bytes: a layer's output, saved as the next one's input
    layer_work: int         # one layer's working set (recomputed under checkpointing)
    outside: int            # final norm and lm_head input
    vocab: int
    compute_bytes: int      # the logits' dtype
    loss_bytes: int         # the cross-entropy's dtype (4: autocast/upcast fp32)
    shift_copy: bool        # a contiguous shifted copy of the logits (batch > 1 with a shifting model)
    checkpointing: bool
    # The working set as separate tensors (per-token bytes, in allocation order, summing to at most
    # layer_work; any remainder is one more tensor); empty: one block.  How a layer's tensors split
    # cached blocks decides what stays stranded beside the checkpointed inputs.
    layer_pieces: tuple[int, ...] = ()
    # The loss's tensors cover the shifted positions only: a causal LM's loss compares position t's logits
    # with token t + 1, so cross_entropy sees `logits[..., :-1, :]` (Qwen(1)'s modeling_qwen.py
    # QWenLMHeadModel.forward), one position fewer per sample than the logits and slice_backward's output.
    shifted_loss: bool = False
    # accelerate's native mixed precision wraps the model's forward in ConvertOutputsToFp32
    # (accelerate v0.25.0 src/accelerate/accelerator.py prepare_model; utils/operations.py convert_to_fp32:
    # every 16-bit tensor of the output becomes `.float()`): the 16-bit logits get an fp32 copy as forward
    # returns, the 16-bit ones are dropped with the old output, and the copy lives in the output until the
    # Trainer's compute_loss returns (before backward).  The HF Trainer (4.36) runs bf16/fp16 through it.
    output_fp32_copy: bool = False
    # Where an autocast loss turns fp32 on CUDA: cross_entropy_loss is not in CUDA autocast's lists
    # (torch 2.1 aten/src/ATen/autocast_mode.cpp; the CPU list has it), and it calls
    # `at::log_softmax(self, class_dim, self.scalar_type())` (aten/src/ATen/native/LossNLL.cpp
    # cross_entropy_loss_symint) -- an explicit dtype, which log_softmax's fp32_set_opt_dtype policy keeps
    # -- so the log-probabilities are 16-bit and nll_loss (fp32 policy) casts *them* to fp32 and saves
    # that copy.  Forward: 16-bit logits, 16-bit log-probs, their fp32 copy; backward: nll_loss's fp32
    # gradient, its cast back, log_softmax_backward in 16 bits.  False: the whole loss in fp32 from an
    # fp32 copy of the logits (CPU autocast, or a model that upcasts its logits).
    upcast_log_probs: bool = False
    # Full fine-tuning: the trained parameters, whose gradients, AdamW states and step temporaries the
    # replay allocates and frees (TrainedParams); None: they are static and take no part.
    params: TrainedParams | None = None
    # Heads of a float attention mask that torch 2.1's memory-efficient SDPA materializes; 0: none.
    # `scaled_dot_product_attention` with an `attn_mask` on CUDA (flash refuses masks; the memory-efficient
    # kernel takes them since 2.1) runs `preprocess_mask` (aten/src/ATen/native/transformers/attention.cpp
    # @v2.1.1): the mask is first expanded to [batch, heads, q_len, k_len] (a view), and when k_len is not a
    # multiple of 16 `pad_bias` pads that expanded view (`at::pad`), which writes a new
    # batch × heads × q_len × roundup16(k_len) tensor; `_scaled_dot_product_efficient_attention` saves its
    # attn_bias for backward.  (torch 2.2 pads the unexpanded mask, then expands.)  Qwen(1) remote code
    # without flash-attention passes such a mask in every layer (modeling_qwen.py QWenAttention.forward from
    # 2023-11: `attention_mask.masked_fill(~causal_mask, min)` into F.scaled_dot_product_attention), in the
    # compute dtype.  Without checkpointing each layer's copy lives until its backward; with checkpointing it
    # is part of the layer's working set, forward and recompute.  A length that is a multiple of 16 -- a
    # fixed-length step at max_length 2,048 -- makes none.
    expanded_mask_heads: int = 0


def _expanded_mask_bytes(t: StepTensors, tokens: int, length: int) -> int:
    """One layer's materialized attention mask for samples of `length` tokens (StepTensors.expanded_mask_heads)."""
    if not t.expanded_mask_heads or not length or length % 16 == 0:
        return 0
    return (tokens // length) * t.expanded_mask_heads * length * (-(-length // 16) * 16) * t.compute_bytes


def _work(t: StepTensors, alloc: bool, k: tuple, i: int, tokens: int) -> Iterator[tuple[bool, object, int]]:
    """Allocate or free layer i's working set: one block, or its pieces."""
    if not t.layer_pieces:
        yield alloc, (k, "w", i), tokens * t.layer_work
        return
    pieces = list(t.layer_pieces)
    if t.layer_work > sum(pieces):
        pieces.append(t.layer_work - sum(pieces))
    for j, size in enumerate(pieces):
        yield alloc, (k, "w", i, j), tokens * size


def _grad(t: StepTensors, k: tuple, name: object, elements: int, first: bool) -> Iterator[tuple[bool, object, int]]:
    """A parameter's gradient made in backward: kept as `p.grad` in the first micro-batch of an
    accumulation window, added in place and freed in the others (TrainedParams)."""
    assert t.params is not None
    if first:
        yield True, ("grad", name), elements * t.params.grad_bytes
    else:
        yield True, (k, "grad", name), elements * t.params.grad_bytes
        yield False, (k, "grad", name), 0


def _events(t: StepTensors, tokens: int, step: int, length: int = 0,
            micro: int = 0) -> Iterator[tuple[bool, object, int]]:
    """(allocate?, id, bytes) of one micro-batch of `tokens` tokens (samples of `length` tokens, padded),
    the `micro`-th of its accumulation window: the layers' forward, the loss and its backward, the layers'
    backward."""
    k = ("s", step)
    mask = _expanded_mask_bytes(t, tokens, length)
    yield from _forward_events(t, k, tokens, mask)
    yield from _loss_events(t, k, tokens, length, micro == 0)
    yield from _backward_events(t, k, tokens, mask, micro == 0)


def _forward_events(t: StepTensors, k: tuple, tokens: int, mask: int) -> Iterator[tuple[bool, object, int]]:
    yield True, (k, "x", 0), tokens * t.layer_input
    for i in range(t.layers):
        yield from _work(t, True, k, i, tokens)
        if mask:
            yield True, (k, "mask", i), mask
        yield True, (k, "x", i + 1), tokens * t.layer_input
        yield from _work(t, False, k, i, tokens)
        if mask and t.checkpointing:
            yield False, (k, "mask", i), 0
        if not t.checkpointing:
            yield True, (k, "keep", i), tokens * t.layer_work


def _loss_events(t: StepTensors, k: tuple, tokens: int, length: int,
                 first: bool) -> Iterator[tuple[bool, object, int]]:
    """The logits, the loss and their backward down to lm_head's input gradient."""
    p = t.params
    v = t.vocab * tokens
    # the loss's positions: one fewer per sample when it is shifted (tokens // length samples)
    vl = t.vocab * (tokens - tokens // length) if t.shifted_loss and length else v
    yield True, (k, "out"), tokens * t.outside
    yield True, (k, "logits"), v * t.compute_bytes
    if t.shift_copy:
        yield True, (k, "shift"), vl * t.compute_bytes
    upcast = t.loss_bytes > t.compute_bytes
    late = upcast and t.upcast_log_probs
    if late:
        yield True, (k, "logp"), vl * t.compute_bytes
        yield True, (k, "logp32"), vl * t.loss_bytes
    else:
        if upcast:
            yield True, (k, "cast"), vl * t.loss_bytes
        yield True, (k, "logp"), vl * t.loss_bytes
        if upcast:
            yield False, (k, "cast"), 0
    if t.shift_copy:
        yield False, (k, "shift"), 0
    if t.output_fp32_copy and t.compute_bytes < 4:
        yield True, (k, "logits32"), v * 4
        yield False, (k, "logits"), 0
        yield False, (k, "logits32"), 0
    else:
        yield False, (k, "logits"), 0
    last = yield from _loss_backward_events(t, k, vl, late, upcast)
    yield True, (k, "g_slice"), v * t.compute_bytes
    yield False, (k, last), 0
    if p and p.head:  # lm_head's weight gradient, then its input's
        if first:
            yield True, ("grad", "head"), p.head * p.grad_bytes
        else:
            yield True, (k, "grad", "head"), p.head * p.grad_bytes
    yield True, (k, "g", t.layers), tokens * t.layer_input
    yield False, (k, "g_slice"), 0
    yield False, (k, "out"), 0
    if p and p.head and not first:
        yield False, (k, "grad", "head"), 0


def _loss_backward_events(t: StepTensors, k: tuple, vl: int, late: bool,
                          upcast: bool) -> Generator[tuple[bool, object, int], None, str]:
    """The loss's backward; returns the id of the gradient it leaves for the logits' slice."""
    if late:
        # NllLossBackward (its saved fp32 input released), ToCopyBackward to the compute dtype,
        # LogSoftmaxBackward in it
        yield True, (k, "g_nll"), vl * t.loss_bytes
        yield False, (k, "logp32"), 0
        yield True, (k, "g_cast"), vl * t.compute_bytes
        yield False, (k, "g_nll"), 0
        yield True, (k, "g_logp"), vl * t.compute_bytes
        yield False, (k, "logp"), 0
        yield False, (k, "g_cast"), 0
        return "g_logp"
    yield True, (k, "g_nll"), vl * t.loss_bytes
    yield True, (k, "g_logp"), vl * t.loss_bytes
    yield False, (k, "g_nll"), 0
    yield False, (k, "logp"), 0
    if not upcast:
        return "g_logp"
    yield True, (k, "g_cast"), vl * t.compute_bytes
    yield False, (k, "g_logp"), 0
    return "g_cast"


def _backward_events(t: StepTensors, k: tuple, tokens: int, mask: int,
                     first: bool) -> Iterator[tuple[bool, object, int]]:
    """The final norm's and every layer's backward (recomputed first under checkpointing), then the embedding's."""
    p, L = t.params, t.layers
    if p:
        for j, n in enumerate(p.final_vectors):
            yield from _grad(t, k, ("f", j), n, first)
    yield False, (k, "x", L), 0
    for i in reversed(range(L)):
        if t.checkpointing:
            yield from _work(t, True, k, i, tokens)
            if mask:
                yield True, (k, "mask", i), mask
        if p:
            for j, n in enumerate(p.layer):
                yield from _grad(t, k, ("m", i, j), n, first)
            for j, n in enumerate(p.layer_vectors):
                yield from _grad(t, k, ("v", i, j), n, first)
        yield True, (k, "g", i), tokens * t.layer_input
        if t.checkpointing:
            yield from _work(t, False, k, i, tokens)
        else:
            yield False, (k, "keep", i), 0
        if mask:
            yield False, (k, "mask", i), 0
        yield False, (k, "g", i + 1), 0
        yield False, (k, "x", i), 0
    if p:  # the embedding's dense gradient, from the gradient of its output
        yield from _grad(t, k, "emb", p.embedding, first)
    yield False, (k, "g", 0), 0


def _optimizer_events(t: StepTensors, window: int) -> Iterator[tuple[bool, object, int]]:
    """(allocate?, id, bytes) of the optimizer step that ends accumulation window `window` (0: the
    first, which makes AdamW's states), then zero_grad (TrainedParams)."""
    p = t.params
    assert p is not None
    params = p.grads(t.layers)
    k = ("opt", window)
    # clip_grad_norm_: a norm per gradient, their stack, the total, max_norm / (total + 1e-6), its clamp
    for name, _ in params:
        yield True, (k, "norm", name), p.grad_bytes
    for what in ("stack", "total", "plus_eps", "coef", "clamped"):
        yield True, (k, what), (len(params) if what == "stack" else 1) * p.grad_bytes
    for what in ("stack", "plus_eps", "coef", "clamped", "total"):
        yield False, (k, what), 0
    for name, _ in params:
        yield False, (k, "norm", name), 0
    # AdamW, group by group: the weights (decay), then the norms and biases
    vectors = {name for name, _ in params if isinstance(name, tuple) and name[0] in ("v", "f")}
    for group in ([x for x in params if x[0] not in vectors], [x for x in params if x[0] in vectors]):
        if window == 0:
            for name, n in group:
                yield True, ("exp_avg", name), n * p.state_bytes
                yield True, ("exp_avg_sq", name), n * p.state_bytes
        for name, n in group:
            yield True, (k, "sqrt", name), n * p.state_bytes
        for name, _ in reversed(group):
            yield False, (k, "sqrt", name), 0
    for name, _ in params:  # zero_grad(set_to_none=True)
        yield False, ("grad", name), 0


@dataclass(frozen=True)
class ReserveReplay:
    peak_allocated: int
    peak_reserved: int
    steps: int
    longest: int

    @property
    def excess(self) -> int:
        """What a roomy GPU's max_memory_reserved reads above the live peak of these tensors."""
        return self.peak_reserved - self.peak_allocated


Prelude = tuple[tuple[bool, object, int], ...]


@lru_cache(maxsize=64)
def replay_steps(tensors: StepTensors, lengths: Sequence[int], batch: int = 1,
                 capacity: int | None = None, prelude: Prelude = ()) -> ReserveReplay:
    """Replay micro-batches of `batch` samples of `lengths` (in order; a batch is padded to its
    longest) through the caching allocator.  `capacity`: the bytes the GPU has for them (its memory
    less the static tensors and the CUDA context); beyond it the allocator gives its wholly free
    cached segments back and retries, as cudaMalloc failing makes it do (OutOfMemory if that fails).
    `prelude`: (allocate?, id, bytes) events replayed first (loading the static tensors; what they
    leave allocated stays, and counts in the peaks and the capacity)."""
    alloc = CachingAllocator(capacity=capacity)
    for is_alloc, ident, nbytes in prelude:
        if is_alloc:
            alloc.malloc(("prelude", ident), max(nbytes, 1))
        else:
            alloc.free(("prelude", ident))
    lengths = tuple(lengths)
    acc = tensors.params.accumulation if tensors.params else 1
    micro_batches = -(-len(lengths) // batch)
    for m, step in enumerate(range(0, len(lengths), batch)):
        longest = max(lengths[step:step + batch])
        events = _events(tensors, batch * longest, step, longest, m % acc)
        if tensors.params and ((m + 1) % acc == 0 or (micro_batches <= acc and m + 1 == micro_batches)):
            events = chain(events, _optimizer_events(tensors, m // acc))
        for is_alloc, ident, nbytes in events:
            if is_alloc:
                alloc.malloc(ident, max(nbytes, 1))
            else:
                alloc.free(ident)
    return ReserveReplay(alloc.peak_allocated, alloc.peak_reserved, -(-len(lengths) // batch),
                         max(lengths, default=0))


def needed_capacity(tensors: StepTensors, lengths: Sequence[int], batch: int = 1, prelude: Prelude = ()) -> int:
    """The smallest GPU room (bytes, a multiple of the allocator's 2 MiB rounding) in which these steps'
    tensors run: the replay at each capacity gives wholly free cached segments back when a segment
    does not fit (:func:`replay_steps`), and only a block split by a live tensor stays stranded.
    Exact over 2 MiB steps (segments are whole multiples of it), as
    benchmarks/measure/caching_allocator.needed_bytes finds it for recorded traces."""
    lengths = tuple(lengths)
    roomy = replay_steps(tensors, lengths, batch, prelude=prelude)
    return smallest_capacity(lambda cap: replay_steps(tensors, lengths, batch, capacity=cap, prelude=prelude),
                             roomy.peak_allocated, roomy.peak_reserved)
