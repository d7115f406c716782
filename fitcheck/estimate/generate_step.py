"""transformers' `generate()`: the vocabulary-sized tensors of a decoding step.  Pure.

Every decoding step of `generate()` (greedy_search/sample before 4.42, `_sample` after) turns the model's
last-position logits into a token through tensors as large as the vocabulary, per sequence: the model's
logits, generate()'s copy of them, each logits processor's output and working tensors, the sampler's
probabilities -- and, because they are locals of the decoding loop, the previous step's scores and
probabilities until the next step rebinds them.  Counted here in bytes per vocabulary entry per sequence
(multiply by batch × vocab_size), from the source of each release:

- the model's logits at a decoding step: fp32 before 4.46 (`logits = logits.float()` in LlamaForCausalLM
  .forward up to 4.45), the compute dtype from 4.46
  (https://github.com/huggingface/transformers/blob/v4.46.0/src/transformers/models/llama/modeling_llama.py,
  `logits = self.lm_head(hidden_states[:, -num_logits_to_keep:, :])`); while the forward upcasts, the
  16-bit lm_head output exists beside the fp32 one;
- generate()'s copy: none before 4.42 (`next_token_logits = outputs.logits[:, -1, :]`, a view, and no
  `del outputs`: the previous step's logits stay alive through the next forward,
  https://github.com/huggingface/transformers/blob/v4.41.2/src/transformers/generation/utils.py); `.clone()`
  with `del outputs` at the end of the step from 4.42
  (https://github.com/huggingface/transformers/blob/v4.42.4/src/transformers/generation/utils.py, _sample);
  `outputs.logits.clone()[:, -1, :].float()` in 4.45; `.clone().float()` 4.46–4.50 (a compute-dtype clone
  exists while the fp32 one is made); `.to(copy=True, dtype=torch.float32)` from 4.51
  (https://github.com/huggingface/transformers/blob/v4.51.3/src/transformers/generation/utils.py);
- the processors (generation/logits_process.py, the same code from 4.35 to 5.x): TemperatureLogitsWarper
  `scores / self.temperature` (a new fp32 tensor); TopKLogitsWarper a bool mask and `scores.masked_fill(...)`;
  TopPLogitsWarper `torch.sort` (fp32 values and int64 indices), `softmax().cumsum()` (fp32; the softmax
  freed once the cumsum exists), two bool masks and `masked_fill`; MinLength/MinNewTokens `scores.clone()`
  and `torch.where(...)` from 4.40 (in place on the scores before);
- the warpers (temperature, top-k, top-p) ran as a second list before 4.45, after the processors' result
  had replaced the previous step's scores; from 4.45 they are one list with the processors, and the
  previous step's scores stay alive through them
  (https://github.com/huggingface/transformers/blob/v4.45.2/src/transformers/generation/utils.py, _sample);
- sampling: `probs = softmax(next_token_scores)` and `torch.multinomial(probs, 1)`, which on one sample
  draws an exponential tensor of the probabilities' size (ATen's multinomial, n_sample == 1); greedy's
  `argmax` makes one index per sequence.

Measured (the live-tensor peak of `generate` under the profiler, one layer of Llama-3.2-1B's shape, batch
1–16, transformers 4.35, 4.38, 4.44, 5.24): benchmarks/results/cpu-inference-peaks-sampling-2026-12-01.csv
(`python -m benchmarks.measure.inference_peak --explain CASE` lists the tensors alive at a case's peak).
"""

from __future__ import annotations

from dataclasses import dataclass

# What a decoding step does with the logits (Plan.sampling):
# greedy: do_sample=False; sample: do_sample=True with GenerationConfig's defaults (temperature 1.0 and
# top_p 1.0 make no warper, top_k 50 one); top-p: do_sample=True with a temperature and top_p below 1
# beside top_k 50 -- what chat models' generation_config.json sets (Llama 3.x: temperature 0.6, top_p 0.9;
# Qwen2.5 Instruct: 0.7, 0.8, top_k 20).
SAMPLINGS = ("greedy", "sample", "top-p")
DEFAULT_SAMPLING = "top-p"
# --sampling's default: what the checkpoint's generation_config.json makes generate() run, else
# DEFAULT_SAMPLING (fitcheck.plan.sampling_mode).
AUTO_SAMPLING = "auto"
# generate() keyword arguments that run each (what `fitcheck measure` and benchmarks/measure pass).
GENERATE_KWARGS: dict[str, dict[str, object]] = {
    "greedy": {"do_sample": False},
    "sample": {"do_sample": True, "temperature": 1.0, "top_k": 50, "top_p": 1.0},
    "top-p": {"do_sample": True, "temperature": 0.7, "top_k": 50, "top_p": 0.9},
}


@dataclass(frozen=True)
class Processor:
    """A logits processor or warper, in bytes per vocabulary entry per sequence."""

    name: str
    internal: int  # alive beside its input and its output at its own peak
    output: int    # its output (0: it works in place on its input)


TEMPERATURE = Processor("temperature", 0, 4)
TOP_K = Processor("top-k", 1, 4)                  # `scores < topk(...)` bool mask
TOP_P = Processor("top-p", 4 + 8 + 4 + 1 + 1, 4)  # sorted fp32 + int64 indices, cumsum, two bool masks
MIN_LENGTH = Processor("min-length", 4, 4)        # clone, then where() (4.40 and later)
MIN_LENGTH_IN_PLACE = Processor("min-length", 0, 0)
# The first release whose MinLength/MinNewTokens processors clone the scores (4.39: in place).
MIN_LENGTH_CLONES_SINCE = (4, 40)
COPY_SINCE = (4, 42)            # next_token_logits = outputs.logits[:, -1, :].clone(); del outputs
WARPERS_MERGED_SINCE = (4, 45)  # the warpers joined the processors' list (_get_logits_processor)
COMPUTE_DTYPE_LOGITS_SINCE = (4, 46)
COPY_WITHOUT_CLONE_SINCE = (4, 51)  # .to(copy=True, dtype=torch.float32)
CURRENT = (99, 0)  # no --transformers-version: a current release


WARPERS = {"temperature": TEMPERATURE, "top-k": TOP_K, "top-p": TOP_P}
_NAMED = {"greedy": (), "sample": ("top-k",), "top-p": ("temperature", "top-k", "top-p")}
# A sampled step whose warpers are none of the named ones (from a checkpoint's generation_config.json):
# 'sample:' and the warpers, e.g. 'sample:temperature+top-p'; 'sample:none' for do_sample with none.
CUSTOM_PREFIX = "sample:"


def sampling_for(sampled: bool, warpers: tuple[str, ...]) -> str:
    """The sampling (SAMPLINGS or a 'sample:...' one) that runs these warpers (names of WARPERS, in
    generate()'s order), for fitcheck.model.generation_config.GenerationDefaults.warpers()."""
    if not sampled:
        return "greedy"
    named = next((name for name, chain in _NAMED.items() if name != "greedy" and chain == warpers), None)
    return named or CUSTOM_PREFIX + ("+".join(warpers) or "none")


def _custom_samplings() -> tuple[str, ...]:
    """Every 'sample:...' value sampling_for can give that is not a named one (so --sampling takes back
    what an auto default printed): the subsets of WARPERS in generate()'s order."""
    from itertools import combinations

    order = tuple(WARPERS)
    subsets = [c for k in range(len(order) + 1) for c in combinations(order, k)]
    return tuple(dict.fromkeys(s for s in (sampling_for(True, c) for c in subsets) if s.startswith(CUSTOM_PREFIX)))


def _warper_names(sampling: str) -> tuple[str, ...]:
    if sampling.startswith(CUSTOM_PREFIX):
        names = sampling[len(CUSTOM_PREFIX):]
        return () if names == "none" else tuple(names.split("+"))
    return _NAMED[sampling]


def sampling_processors(sampling: str) -> tuple[Processor, ...]:
    """The warpers `generate()` adds for `sampling`, in its order (temperature, top-k, top-p)."""
    return tuple(WARPERS[name] for name in _warper_names(sampling))


def generate_kwargs(sampling: str) -> dict[str, object]:
    """generate() keyword arguments that run `sampling`'s warpers (what `fitcheck measure` passes)."""
    if sampling in GENERATE_KWARGS:
        return dict(GENERATE_KWARGS[sampling])
    names = _warper_names(sampling)
    return {"do_sample": True, "temperature": 0.7 if "temperature" in names else 1.0,
            "top_k": 50 if "top-k" in names else 0, "top_p": 0.9 if "top-p" in names else 1.0}


def min_length_processor(release: tuple[int, int]) -> Processor:
    """MinLengthLogitsProcessor / MinNewTokensLengthLogitsProcessor of this release."""
    return MIN_LENGTH if release >= MIN_LENGTH_CLONES_SINCE else MIN_LENGTH_IN_PLACE


@dataclass(frozen=True)
class StepTensors:
    """Bytes per vocabulary entry per sequence of one decoding step's logits tensors."""

    forward: int     # during a decoding step's forward: the previous step's scores, copy and probabilities,
    #                  and the new logits being made
    steady: int      # the step's peak (its forward included), a step after the first
    first: int       # the first token's step, beyond the prefill's own logits (nothing held from before)
    view_held: int   # before 4.42: beyond the prefill's logits, which the previous step's view keeps alive
    #                  through the first decoding forward (0 from 4.42: `del outputs` and a copy)
    why: str


def step_tensors(release: tuple[int, int] | None, sampling: str, act_bytes: int,
                 processors: tuple[Processor, ...] = ()) -> StepTensors:
    """The vocabulary-sized tensors of a decoding step under transformers `release` ((major, minor);
    None: a current one), for `sampling` (SAMPLINGS) and a model computing in `act_bytes` per element;
    `processors`: logits processors before the warpers (min_new_tokens' MinLength pair, for example)."""
    release = release or CURRENT
    sampled = sampling != "greedy"
    chain = processors + sampling_processors(sampling)
    m = act_bytes if release >= COMPUTE_DTYPE_LOGITS_SINCE else 4
    upcast = act_bytes if m == 4 and act_bytes < 4 else 0  # the lm_head output beside its fp32 upcast
    copy = 4 if release >= COPY_SINCE else 0
    clone = act_bytes if COMPUTE_DTYPE_LOGITS_SINCE <= release < COPY_WITHOUT_CLONE_SINCE and act_bytes < 4 else 0
    # the chain: each processor's own peak over the scores it is given (the copy, already counted, first)
    current = processors_peak = warpers_peak = 0
    for p in processors:
        processors_peak = max(processors_peak, current + p.internal + p.output)
        current = p.output or current
    for p in sampling_processors(sampling):
        warpers_peak = max(warpers_peak, current + p.internal + p.output)
        current = p.output or current
    chain_peak = max(processors_peak, warpers_peak)
    scores = current                      # the chain's result, when it made a tensor of its own
    prev_scores = 4                       # the previous step's scores: its result, copy or (before 4.42) view
    prev_copy = 4 if scores else 0        # its copy (or viewed logits) too, when the chain made new scores
    prev_probs = 4 if sampled else 0
    # before 4.45 the warpers ran after `next_token_scores = logits_processor(...)` had rebound the
    # previous step's scores (`next_token_scores = logits_warper(input_ids, next_token_scores)`)
    warpers_held = prev_scores if release >= WARPERS_MERGED_SINCE else 0
    forward = prev_scores + prev_copy + prev_probs + m + upcast
    copying = prev_scores + prev_copy + prev_probs + m + copy + clone
    processing = m + copy + prev_probs + max(prev_scores + processors_peak, warpers_held + warpers_peak)
    sampler = m + copy + scores + 8 if sampled else 0  # probs and multinomial's draw (the previous probs freed)
    steady = max(forward, copying, processing, sampler)
    first = max(copy + clone, copy + chain_peak, copy + scores + 8 if sampled else 0)
    view_held = 0 if copy else (4 if scores else 0) + m + upcast
    names = ", ".join(p.name for p in chain) or "none"
    why = ("the step's logits" + (", generate()'s fp32 copy" if copy else "") + f", processors ({names})"
           + (", sampling probabilities" if sampled else "") + " and the previous step's scores"
           + (" and probabilities" if sampled else "") + f": {steady} B per vocabulary entry")
    return StepTensors(forward, steady, first, view_held, why)


# The 'sample:...' values --sampling takes besides SAMPLINGS (what an auto default may print).
CUSTOM_SAMPLINGS = _custom_samplings()
