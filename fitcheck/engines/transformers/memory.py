"""transformers' memory at inference: weights, a KV cache sized to the tokens in flight, the prefill activation
peak, dequantization scratch of quantized kernels; one CUDA context per GPU; with several GPUs
`device_map="auto"` splits layers (each GPU sees its own activation peak).  On the CPU, what glibc's heap keeps.
Pure: a ModelSpec and a Plan in, per-device parts out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from fitcheck.calibration import (
    ALLOCATOR_SLACK,
    ALLOCATOR_SLACK_MIN,
    CPU_HEAP_RETENTION,
    TORCH_CPU_RUNTIME,
    TORCH_CUDA_CONTEXT,
)
from fitcheck.engines.transformers import activations as A
from fitcheck.engines.transformers.releases import rotary_table_mode, static_mask_mode
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.generate_step import CURRENT, StepTensors, min_length_processor, step_tensors
from fitcheck.estimate.kv_cache import kv_cache_bytes
from fitcheck.estimate.parts import act_bytes, kv_detail, weight_load_waste, weights_component
from fitcheck.estimate.result import ACTIVATIONS, KV_CACHE, OVERHEAD, WEIGHTS, Component, DeviceNeed, Memory
from fitcheck.estimate.weights import WeightBytes, largest_matrix_params, linear_matrices, rotary_table_bytes
from fitcheck.model.spec import ModelSpec
from fitcheck.units import GiB, MiB
from fitcheck.versions import parse_transformers_version

if TYPE_CHECKING:
    from fitcheck.engines.transformers import Transformers
    from fitcheck.plan import Plan

# ExLlama v2 kernels (AutoGPTQ 4-bit) keep a temp buffer for inputs up to max_input_length=2048.
EXLLAMA_MAX_INPUT = 2048


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


# ---- transformers ------------------------------------------------------------------------------
def _prefill_logits(spec: ModelSpec, plan: Plan, prefill_tokens: int, act_b: int) -> tuple[int, str]:
    """Bytes of the prefill's logits, and how they were counted (Plan.logits)."""
    if plan.logits == "last":
        return A.logits_bytes(spec, plan.batch), "fp32 logits for the last position"
    if plan.logits == "all-fp32":
        # transformers < 4.45: the model's forward returns fp32 logits for every position; the
        # compute-dtype lm_head output exists while they are made (no copy when that is fp32).
        per = spec.vocab_size * (act_b + (4 if act_b < 4 else 0))
        return prefill_tokens * per, (f"logits for all {prefill_tokens:,} positions, upcast to fp32 "
                                      "(transformers < 4.45)")
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


def memory(engine: Transformers, spec: ModelSpec, plan: Plan) -> Memory:
    wb = engine.weights(spec, plan.precision)
    on_gpu = plan.device == "gpu"
    n = max(plan.gpus, 1) if on_gpu else 1
    act_b = act_bytes(plan.precision)
    prefill_tokens = plan.prompt_tokens * plan.batch
    kv = kv_cache_bytes(spec, tokens=plan.context, sequences=plan.batch, kv_dtype=plan.kv_dtype, engine=engine,
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
                                   engine=engine, prompt_tokens=plan.prompt_tokens,
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
        weights_c = weights_component(spec, plan, wb, share)
        if n > 1:
            weights_c = replace(weights_c, detail=weights_c.detail + f"; {split.describe(i, spec.num_layers)}")
        dev_act = act if split.layers[i] else 0
        comps = [
            weights_c,
            Component(KV_CACHE, int(kv * layer_share),
                      kv_detail(spec, plan, engine, layer_share, prompt_tokens=plan.prompt_tokens,
                                transformers_version=plan.transformers_version)),
            # generate() works on the output where accelerate's hook brings it, the input's GPU (see
            # _output_copy_on_first_gpu): the decoding step's tensors are there when lm_head is elsewhere
            Component(ACTIVATIONS, _prefill_peak(dev_act, dev_logits, plan, mask,
                                                 decoding if dev_logits and head_gpu == input_gpu else None),
                      f"prefill peak over {prefill_tokens:,} tokens: (3 × FFN width + 4 × hidden) × "
                      f"{act_b} B per token" + (f", plus {logits_why}" if dev_logits else "")
                      + (f"; or generate()'s decoding step, if larger: {decoding.step.why} × {plan.batch} seq × "
                         f"{spec.vocab_size:,} "
                         f"({(decoding.bytes(decoding.step.steady) + decoding.penalty_bytes) / MiB:,.1f} MiB)"
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
            comps.append(Component(OVERHEAD, TORCH_CPU_RUNTIME, "torch + transformers resident libraries",
                                   counted_in="runtime"))
            devices.append(DeviceNeed("cpu", "cpu", tuple(comps)))
    notes = []
    if n > 1:
        notes.append(f"transformers splits layers over {n} GPUs (device_map='auto'); each GPU holds its own activation "
                     "peak" + (f", and GPU{input_gpu} the model's output logits that accelerate moves back to the "
                               "input's device" if copy else ""))
    return Memory(devices, [], notes)


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


