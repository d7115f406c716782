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
  had replaced the previous step's scores (and that result, when a processor made one, stays alive through
  the warpers: `next_token_scores = logits_warper(input_ids, next_token_scores)`); from 4.45 they are one list with the processors, and the
  previous step's scores stay alive through them
  (https://github.com/huggingface/transformers/blob/v4.45.2/src/transformers/generation/utils.py, _sample);
- RepetitionPenaltyLogitsProcessor (generation_config's `repetition_penalty` != 1.0; a processor, so greedy
  runs it too, added before MinLength in `_get_logits_processor`): `torch.gather(scores, 1, input_ids)` (fp32,
  batch × seq_len) and `torch.where(score < 0, score * penalty, score / penalty)` (a bool mask and three fp32
  temporaries of that size), then `scores.scatter_(...)` in place before 4.40
  (https://github.com/huggingface/transformers/blob/v4.39.3/src/transformers/generation/logits_process.py);
  `scores_processed = scores.scatter(...)`, a new batch × vocabulary tensor in the scores' dtype (fp32), from 4.40
  (https://github.com/huggingface/transformers/blob/v4.40.0/src/transformers/generation/logits_process.py);
  from 5.18 `input_ids.clamp(max=vocab_size)` (int64, batch × seq_len) and `torch.nn.functional.pad(scores,
  (0, 1))`, a padded fp32 copy alive beside the scatter's output, which the `[..., :vocab_size]` view keeps
  (https://github.com/huggingface/transformers/blob/v5.18.0/src/transformers/generation/logits_process.py);
- sampling: `probs = softmax(next_token_scores)` and `torch.multinomial(probs, 1)`, which on one sample
  draws an exponential tensor of the probabilities' size (ATen's multinomial, n_sample == 1); greedy's
  `argmax` makes one index per sequence.

Measured (the live-tensor peak of `generate` under the profiler, one layer of Llama-3.2-1B's shape, batch
1–16, transformers 4.35, 4.38, 4.44, 5.24): benchmarks/results/cpu-inference-peaks-sampling-2026-12-01.csv;
the repetition penalty, greedy and with Qwen2.5 Instruct's warpers: cpu-inference-peaks-penalty-2026-12-01.csv
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
# RepetitionPenaltyLogitsProcessor: in place (scatter_) before 4.40, a scatter() output from 4.40, and from 5.18
# the padded copy (internal) beside it
PENALTY = "repetition-penalty"
REPETITION_PENALTY_IN_PLACE = Processor(PENALTY, 0, 0)
REPETITION_PENALTY = Processor(PENALTY, 0, 4)
REPETITION_PENALTY_PADDED = Processor(PENALTY, 4, 4)
PENALTY_OUT_OF_PLACE_SINCE = (4, 40)
PENALTY_PADS_SINCE = (5, 18)
# Its per-position tensors (bytes per context position per sequence) at its own peak, the where(): the gathered
# scores (4), `score < 0` (1), `score * penalty` and `score / penalty` (4 + 4) and where()'s output (4); from 5.18
# the clamped int64 input_ids (8) too.
PENALTY_PER_POSITION = 4 + 1 + 4 + 4 + 4
PENALTY_PER_POSITION_CLAMPED = PENALTY_PER_POSITION + 8
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
# 'sample:' and the warpers, e.g. 'sample:temperature+top-p'; 'sample:none' for do_sample with none.  The
# repetition penalty, a processor that runs before the warpers, is named first ('sample:repetition-penalty+
# temperature+top-k+top-p', Qwen2.5 Instruct's); a greedy step with it is 'greedy:repetition-penalty'.
CUSTOM_PREFIX = "sample:"
GREEDY_PREFIX = "greedy:"
# generate_kwargs' repetition_penalty (what Qwen2.5 Instruct's generation_config.json sets; any value != 1.0
# runs the same tensors)
MEASURED_PENALTY = 1.05


def sampling_for(sampled: bool, warpers: tuple[str, ...], processors: tuple[str, ...] = ()) -> str:
    """The sampling (SAMPLINGS or a 'sample:...'/'greedy:...' one) that runs these warpers (names of
    WARPERS, in generate()'s order) after these processors (PENALTY or none), for
    fitcheck.model.generation_config.GenerationDefaults.warpers() and .processors()."""
    if not sampled:
        return GREEDY_PREFIX + "+".join(processors) if processors else "greedy"
    named = None if processors else next(
        (name for name, chain in _NAMED.items() if name != "greedy" and chain == warpers), None)
    return named or CUSTOM_PREFIX + ("+".join(processors + warpers) or "none")


def _custom_samplings() -> tuple[str, ...]:
    """Every 'sample:...'/'greedy:...' value sampling_for can give that is not a named one (so --sampling
    takes back what an auto default printed): the subsets of WARPERS in generate()'s order, with and without
    the repetition penalty."""
    from itertools import combinations

    order = tuple(WARPERS)
    subsets = [c for k in range(len(order) + 1) for c in combinations(order, k)]
    values = [sampling_for(sampled, c, p) for p in ((), (PENALTY,)) for sampled in (True, False) for c in subsets]
    return tuple(dict.fromkeys(s for s in values if s.startswith((CUSTOM_PREFIX, GREEDY_PREFIX))))


def _names(sampling: str) -> tuple[str, ...]:
    for prefix in (CUSTOM_PREFIX, GREEDY_PREFIX):
        if sampling.startswith(prefix):
            names = sampling[len(prefix):]
            return () if names == "none" else tuple(names.split("+"))
    return _NAMED[sampling]


def _warper_names(sampling: str) -> tuple[str, ...]:
    return tuple(name for name in _names(sampling) if name != PENALTY)


def is_sampled(sampling: str) -> bool:
    """Whether `sampling` runs generate() with do_sample (all but 'greedy' and 'greedy:...')."""
    return sampling != "greedy" and not sampling.startswith(GREEDY_PREFIX)


def penalized(sampling: str) -> bool:
    """Whether `sampling` runs RepetitionPenaltyLogitsProcessor (generation_config's repetition_penalty)."""
    return PENALTY in _names(sampling)


def sampling_processors(sampling: str) -> tuple[Processor, ...]:
    """The warpers `generate()` adds for `sampling`, in its order (temperature, top-k, top-p)."""
    return tuple(WARPERS[name] for name in _warper_names(sampling))


def repetition_penalty_processor(release: tuple[int, int]) -> Processor:
    """RepetitionPenaltyLogitsProcessor of this release (vocabulary-sized tensors)."""
    if release >= PENALTY_PADS_SINCE:
        return REPETITION_PENALTY_PADDED
    return REPETITION_PENALTY if release >= PENALTY_OUT_OF_PLACE_SINCE else REPETITION_PENALTY_IN_PLACE


def generate_kwargs(sampling: str) -> dict[str, object]:
    """generate() keyword arguments that run `sampling`'s warpers (what `fitcheck measure` passes)."""
    if sampling in GENERATE_KWARGS:
        return dict(GENERATE_KWARGS[sampling])
    names = _warper_names(sampling)
    kwargs: dict[str, object] = {"do_sample": False} if not is_sampled(sampling) else {
        "do_sample": True, "temperature": 0.7 if "temperature" in names else 1.0,
        "top_k": 50 if "top-k" in names else 0, "top_p": 0.9 if "top-p" in names else 1.0}
    if penalized(sampling):
        kwargs["repetition_penalty"] = MEASURED_PENALTY
    return kwargs


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
    per_position: int = 0  # the repetition penalty's tensors, bytes per context position per sequence, alive
    #                        inside the processors' phase (counted on top of the step's peak: an upper bound)


def step_tensors(release: tuple[int, int] | None, sampling: str, act_bytes: int,
                 processors: tuple[Processor, ...] = ()) -> StepTensors:
    """The vocabulary-sized tensors of a decoding step under transformers `release` ((major, minor);
    None: a current one), for `sampling` (SAMPLINGS) and a model computing in `act_bytes` per element;
    `processors`: logits processors before the warpers (min_new_tokens' MinLength pair, for example)."""
    release = release or CURRENT
    sampled = is_sampled(sampling)
    # RepetitionPenaltyLogitsProcessor comes before MinLength/MinNewTokens (_get_logits_processor)
    if penalized(sampling):
        processors = (repetition_penalty_processor(release),) + processors
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
    # before 4.45 `next_token_scores` (generate()'s frame) holds the processors' result while the warpers'
    # list runs, so once a warper has made its own tensor that result is alive beside it
    processed, held = current, 0
    for p in sampling_processors(sampling):
        warpers_peak = max(warpers_peak, held + current + p.internal + p.output)
        if p.output:
            current = p.output
            held = processed if release < WARPERS_MERGED_SINCE else 0
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
    per_position = 0 if not penalized(sampling) else (
        PENALTY_PER_POSITION_CLAMPED if release >= PENALTY_PADS_SINCE else PENALTY_PER_POSITION)
    if per_position:
        why += f", plus the repetition penalty's gather: {per_position} B per context position"
    return StepTensors(forward, steady, first, view_held, why, per_position)


# The 'sample:...' and 'greedy:...' values --sampling takes besides SAMPLINGS (what an auto default may print).
CUSTOM_SAMPLINGS = _custom_samplings()
