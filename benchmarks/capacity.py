"""The longest sequence fitcheck says fits vs the longest that fit, for published capacity tables.

    python -m benchmarks.capacity [--csv PATH] [--reserve | --trace]

Reads `benchmarks/data/capacity_reference.csv`: published maximum sequence lengths of QLoRA
fine-tuning (Hugging Face + flash-attention 2, rank 32 on all linear layers, batch 1, gradient
checkpointing; the sources in the rows and in benchmarks/data/SOURCES.md).  For each row it
finds the longest `--seq-len` whose estimate (the whole need: allocated, allocator reserve, CUDA
context) fits in the row's GPU, with the rest of the request as the row says, and reports the
ratio to the published length: above 1 fitcheck would say "fits" where the run ran out of memory.
A row whose published result is OOM checks that fitcheck says it does not fit at 512 tokens.
The transformers release is the one current at the post's date (the posts do not name it); the
optimizer is the posts' notebooks' `adamw_8bit`.

`--reserve` tests the caching allocator as the explanation: for each row with a published length it
replays the estimate's own step tensors at that length (three fixed-length steps; static tensors in
segments of their own, fitcheck/estimate/varying_lengths.py) in "smallest GPU it fits in" mode and
sets the reserve that replay needs beyond its live peak against the estimate's own (the larger of
TRAINING_ALLOCATOR_SLACK's share and TRAINING_STRANDED_BLOCKS of the loss's largest tensor), with the
longest length that fits when the replayed reserve replaces it.

`--trace` does the same with a step built from one decoder layer's allocations recorded on the CPU
(benchmarks/measure/layer_trace.py, the recipe's dtypes, checkpointed forward and backward; the
stored trace under benchmarks/results/qlora-layer-trace-SHAPE-DATE.json) in place of the
estimate's assumed layer tensors; the loss path and the static tensors as above.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CSV = Path(__file__).resolve().parent / "data" / "capacity_reference.csv"
OOM_CHECK_LEN = 512
GiB = 1024**3


@dataclass(frozen=True)
class Capacity:
    label: str
    published: int | None     # None: the run was out of memory
    predicted: int            # the longest fitcheck says fits (0: none)

    @property
    def ratio(self) -> float | None:
        return None if not self.published else self.predicted / self.published

    @property
    def agrees(self) -> bool:
        """An OOM row: fitcheck says it does not fit at OOM_CHECK_LEN either."""
        return self.published is not None or self.predicted < OOM_CHECK_LEN


def _need(spec, request, machine) -> int:
    from fitcheck.pipeline import Evaluator

    out = Evaluator(spec, machine).outcome(request)
    return max(d.total_bytes for d in out.estimate.devices)


def _setup(row: dict):
    from fitcheck.model.resolve import resolve_model
    from fitcheck.profiles import load_profile
    from fitcheck.profiles.overrides import MachineOverrides, apply_overrides
    from fitcheck.request import Request

    spec = resolve_model(row["model"]).spec
    machine = apply_overrides(load_profile("a100-80gb"), MachineOverrides(vram=f"{row['gpu_gib']}GiB"))
    base = Request(mode=row["mode"], precision=row["precision"], batch=int(row["batch"]),
                   lora_rank=int(row["lora_rank"]), lora_targets=row["lora_targets"],
                   grad_checkpointing=row["grad_checkpointing"] == "yes", attention=row["attention"],
                   optimizer=row["optimizer"], transformers_version=row["transformers_version"] or None)
    return spec, machine, base


def _label(row: dict) -> str:
    return f"{row['model'].split('/')[-1]} on {row['gpu']} (transformers {row['transformers_version']})"


def _longest(fits) -> int:
    lo, hi = 0, 1 << 20
    while lo < hi:  # the largest n with fits(n); fits is monotone in n
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def capacity(row: dict) -> Capacity:
    spec, machine, base = _setup(row)
    gpu_bytes = int(float(row["gpu_gib"]) * GiB)

    def fits(n: int) -> bool:
        return _need(spec, base.with_changes(seq_len=n), machine) <= gpu_bytes

    return Capacity(_label(row), int(row["max_seq_len"]) if row["max_seq_len"] else None, _longest(fits))


@dataclass(frozen=True)
class ReserveCheck:
    """At a row's published length: the estimate's reserve against the one the caching allocator,
    replayed over the estimate's own step tensors, needs."""

    label: str
    published: int
    allocated: int          # the estimate's peak allocated bytes
    static: int             # weights, adapters, optimizer states, master weights: allocated once
    estimate_reserve: int   # the estimate's reserve: TRAINING_ALLOCATOR_SLACK of allocated or the stranded block
    step_live: int          # the replayed step tensors' live peak
    replayed_reserve: int   # the smallest room they run in, less that peak
    replayed_pieces: int    # the same with each layer's working set as its tensors (order assumed: _layer_pieces)
    replayed_loaded: int    # the one-block replay after the base loaded as bitsandbytes loads it (_qlora_load)
    peak_at_loss: bool      # the loss path outweighs one recomputed layer (the peak is the loss's backward)
    predicted: int          # fitcheck's longest with the estimate's reserve
    predicted_replayed: int  # ... with the replayed reserve in its place
    predicted_pieces: int   # ... with the replayed reserve of the layer's tensors

    @property
    def ratio(self) -> float:
        return self.predicted / self.published

    @property
    def ratio_replayed(self) -> float:
        return self.predicted_replayed / self.published

    @property
    def ratio_pieces(self) -> float:
        return self.predicted_pieces / self.published


def _layer_pieces(spec, residual_bytes: int) -> tuple[int, ...]:
    """A Llama decoder layer's transient tensors per token, in the order of its forward under the
    QLoRA recipe (modeling_llama.py LlamaDecoderLayer, LlamaRMSNorm on the fp32 residual stream,
    autocast's 16-bit casts before each linear, SwiGLU): an assumption of order for the replay, not a
    measurement; the estimate's layer_work (what it counts) bounds the sum."""
    h, b, r = spec.hidden_size, 2, residual_bytes
    q = spec.num_attention_heads * spec.attn_head_dim
    kv = spec.num_kv_heads * spec.attn_head_dim
    ffn = spec.intermediate_size
    return (h * 4, h * r, h * b,          # input norm: x·rsqrt in fp32, × weight, autocast's cast
            q * b, kv * b, kv * b, q * b,  # q, k, v, attention output
            h * b, h * r,                 # o_proj, residual add
            h * 4, h * r, h * b,          # post-attention norm and cast
            ffn * b, ffn * b, ffn * b, ffn * b,  # gate, up, act(gate), act(gate)·up
            h * b)                        # down_proj


def _qlora_load(spec, rank: int) -> tuple[tuple[bool, object, int], ...]:
    """The static tensors of the QLoRA recipe as they arrive, for the replay's prelude: transformers 4.4x
    loads a bitsandbytes 4-bit base tensor by tensor in the checkpoint's (sorted) key order, and
    `Params4bit._quantize` copies each 16-bit matrix to the GPU and quantizes it there
    (bitsandbytes/functional.py `quantize_4bit`: absmax fp32 per 64-element block, the packed
    uint8 weight; with double quantization the absmax is quantized per 256 blocks,
    `quantize_blockwise`, and freed), then frees the 16-bit copy; peft `prepare_model_for_kbit_training`
    casts the rest (norms, embeddings, lm_head) to fp32, each a new tensor with the 16-bit one
    freed; LoRA adds fp32 A (r × in) and B (out × r) per adapted matrix."""
    h, V = spec.hidden_size, spec.vocab_size
    q, kv = spec.num_attention_heads * spec.attn_head_dim, spec.num_kv_heads * spec.attn_head_dim
    ffn = spec.intermediate_size
    mats = {"mlp.down_proj": (ffn, h), "mlp.gate_proj": (h, ffn), "mlp.up_proj": (h, ffn),
            "self_attn.k_proj": (h, kv), "self_attn.o_proj": (q, h), "self_attn.q_proj": (h, q),
            "self_attn.v_proj": (h, kv)}
    norms = ("input_layernorm", "post_attention_layernorm")
    ev: list[tuple[bool, object, int]] = [(True, "embed16", V * h * 2)]
    for i in sorted(range(spec.num_layers), key=str):       # "layers.0", "layers.1", "layers.10", ...
        for name in sorted((*mats, *norms)):
            k = (i, name)
            if name in norms:
                ev.append((True, (k, "w16"), h * 2))
                continue
            n = mats[name][0] * mats[name][1]
            ev += [(True, (k, "bf16"), n * 2), (True, (k, "absmax"), n // 64 * 4), (True, (k, "packed"), n // 2),
                   (True, (k, "absmax2"), max(n // 64 // 256 * 4, 4)), (True, (k, "qabsmax"), n // 64),
                   (False, (k, "absmax"), 0), (False, (k, "bf16"), 0)]
    ev += [(True, "norm16", h * 2), (True, "head16", V * h * 2)]
    for i in range(spec.num_layers):
        for name in norms:
            ev += [(True, ((i, name), "w32"), h * 4), (False, ((i, name), "w16"), 0)]
    for name in ("embed", "norm", "head"):
        ev += [(True, f"{name}32", (V if name != "norm" else 1) * h * 4), (False, f"{name}16", 0)]
    for i in range(spec.num_layers):
        for name, (rows_in, cols_out) in mats.items():
            ev += [(True, ((i, name), "lora_A"), rank * rows_in * 4), (True, ((i, name), "lora_B"), cols_out * rank * 4)]
    return tuple(ev)


def reserve_check(row: dict, search: bool = True) -> ReserveCheck:
    """`search`: also find the longest lengths (about a minute a row); else those read 0."""
    from dataclasses import replace
    from functools import cache

    from fitcheck.engines.training.memory import estimate_training, step_activations, step_tensors
    from fitcheck.estimate.result import ADAPTERS, MASTER_WEIGHTS, OPTIMIZER, OVERHEAD, WEIGHTS
    from fitcheck.estimate.varying_lengths import needed_capacity, replay_steps
    from fitcheck.plan import resolve_training

    spec, machine, base = _setup(row)
    gpu_bytes = int(float(row["gpu_gib"]) * GiB)
    steps = 3

    @cache
    def parts(n: int):
        plan = resolve_training(base.with_changes(seq_len=n), spec, machine)
        gpu = estimate_training(spec, plan).gpu_devices[0]
        tensors = step_tensors(spec, plan)
        live = replay_steps(tensors, (n,) * steps).peak_allocated
        replayed = needed_capacity(tensors, (n,) * steps) - live
        split = replace(tensors, layer_pieces=_layer_pieces(spec, tensors.layer_input // spec.hidden_size))
        pieces = needed_capacity(split, (n,) * steps) - replay_steps(split, (n,) * steps).peak_allocated
        load = _qlora_load(spec, int(row["lora_rank"]))
        loaded = needed_capacity(tensors, (n,) * steps, prelude=load) - replay_steps(
            tensors, (n,) * steps, prelude=load).peak_allocated
        own = next(c.bytes for c in gpu.components if c.name == OVERHEAD and c.counted_in == "reserved")
        return plan, gpu, own, live, replayed, pieces, loaded

    def fits_with(which: int):
        def fits(n: int) -> bool:
            got = parts(n)
            return got[1].total_bytes - got[2] + got[which] <= gpu_bytes
        return fits

    n = int(row["max_seq_len"])
    plan, gpu, own, live, replayed, pieces, loaded = parts(n)
    acts = step_activations(spec, plan)
    return ReserveCheck(_label(row), n, gpu.peak_allocated_bytes,
                        sum(gpu.component(c) for c in (WEIGHTS, ADAPTERS, OPTIMIZER, MASTER_WEIGHTS)),
                        own, live, replayed, pieces, loaded, acts.logits >= acts.recompute,
                        capacity(row).predicted if search else 0, _longest(fits_with(4)) if search else 0,
                        _longest(fits_with(5)) if search else 0)


@dataclass(frozen=True)
class TraceCheck:
    """At a row's published length: the reserve the caching allocator needs over a step built from a
    recorded QLoRA decoder layer (benchmarks/measure/layer_trace.py) in place of the estimate's own."""

    label: str
    published: int
    trace: str              # the recorded layer trace's file name
    estimate_reserve: int   # the estimate's reserve (its share of allocated or the stranded block)
    step_live: int          # the traced step's live peak
    traced_reserve: int     # the smallest room it runs in, less that peak
    room: int               # what the published run left: the card less the context and the estimate's allocated
    predicted: int          # fitcheck's longest with the estimate's reserve
    predicted_traced: int   # ... with the traced reserve in its place

    @property
    def ratio(self) -> float:
        return self.predicted / self.published

    @property
    def ratio_traced(self) -> float:
        return self.predicted_traced / self.published


RESULTS = Path(__file__).resolve().parent / "results"
TRACE_FIELDS = ("label", "published", "trace", "steps", "estimate_reserve_bytes", "step_live_bytes", "traced_reserve_bytes",
                "room_bytes", "predicted", "predicted_traced", "ratio", "ratio_traced")
TRACE_STEPS = 2      # fixed-length steps replayed (the second starts from the first's cache)


def _trace_shape(spec) -> str | None:
    from benchmarks.measure.layer_trace import SHAPES

    for name, (_, h, ffn, heads, kv, hd, _) in SHAPES.items():
        if (spec.hidden_size, spec.intermediate_size, spec.num_attention_heads, spec.num_kv_heads,
                spec.attn_head_dim) == (h, ffn, heads, kv, hd):
            return name
    return None


def _first_failure(fits, published: int, grain: int = 64) -> int:
    """The longest length below the first that does not fit, scanning up from 90 % of `published` in
    steps of about 2 % of it (a multiple of 128), then to `grain` tokens; every length tried is
    `published` plus a multiple of `grain`: a replayed reserve is not monotone in the length (it can
    fit again past a failure, and lengths whose tensors fill whole 2 MiB segments strand far less),
    and a run padded to one length meets the first failure first."""
    step = max(128, published // 50 // 128 * 128)
    n = published - (published // 10 // step + 1) * step
    if not fits(n):
        return 0
    while fits(n + step):
        n += step
    lo, hi = n, n + step            # lo fits, hi does not
    while hi - lo > grain:
        mid = lo + (hi - lo) // 2 // grain * grain
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def trace_check(row: dict, search: bool = True) -> TraceCheck | None:
    """None: no layer trace is recorded for the row's shape.  `search`: also find the longest length
    with the traced reserve (the length before the first that does not fit, scanning up: the
    replayed reserve is not monotone in the length); else those read 0."""
    from functools import cache

    from benchmarks.measure.layer_trace import LayerTrace, trace_path, traced_reserve
    from fitcheck.engines.training.memory import estimate_training, step_tensors
    from fitcheck.estimate.result import OVERHEAD
    from fitcheck.plan import resolve_training

    spec, machine, base = _setup(row)
    shape = _trace_shape(spec)
    if shape is None:
        return None
    path = trace_path(shape)
    trace = LayerTrace.load(path)
    gpu_bytes = int(float(row["gpu_gib"]) * GiB)

    @cache
    def parts(n: int):
        plan = resolve_training(base.with_changes(seq_len=n), spec, machine)
        gpu = estimate_training(spec, plan).gpu_devices[0]
        live, needed = traced_reserve(trace, step_tensors(spec, plan), n, TRACE_STEPS)
        own = next(c.bytes for c in gpu.components if c.name == OVERHEAD and c.counted_in == "reserved")
        return gpu, own, live, needed - live

    n = int(row["max_seq_len"])
    gpu, own, live, reserve = parts(n)
    context = gpu.total_bytes - gpu.peak_allocated_bytes - own
    predicted = capacity(row).predicted if search else 0
    traced = 0
    if search:
        def fits(m: int) -> bool:
            g, f, _, r = parts(m)
            return g.total_bytes - f + r <= gpu_bytes

        traced = _first_failure(fits, n)
    return TraceCheck(_label(row), n, path.name, own, live, reserve,
                      gpu_bytes - context - gpu.peak_allocated_bytes, predicted, traced)


def read(path: Path = DEFAULT_CSV) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def capacities(path: Path = DEFAULT_CSV) -> list[Capacity]:
    return [capacity(r) for r in read(path)]


def qwen_table_swap() -> list[tuple[str, float, float]]:
    """The Qwen fine-tuning table's single-GPU rows (benchmarks/accuracy.py, Qwen's README): (label, the
    estimate's error with its own reserve, its error with the replayed reserve of its step tensors
    in its place) — the same swap `--reserve` makes for the capacity rows."""
    from benchmarks.accuracy import _QWEN1, DEFAULT_CSV, _measured_gib, training_plan
    from fitcheck.engines.training.memory import estimate_training, step_tensors
    from fitcheck.estimate.result import OVERHEAD
    from fitcheck.estimate.varying_lengths import needed_capacity, replay_steps
    from fitcheck.model.resolve import resolve_model

    out = []
    for r in read(DEFAULT_CSV):
        if "QwenLM/Qwen README" not in (r.get("source") or "") or r["model"] not in _QWEN1:
            continue
        spec, plan = resolve_model(_QWEN1[r["model"]]).spec, training_plan(r)
        if plan.gpus > 1:
            continue
        gpu = estimate_training(spec, plan).gpu_devices[0]
        own = next(c.bytes for c in gpu.components if c.name == OVERHEAD and c.counted_in == "reserved")
        tensors, lengths = step_tensors(spec, plan), (plan.seq_len,) * 3
        replayed = needed_capacity(tensors, lengths, plan.batch) - replay_steps(tensors, lengths, plan.batch).peak_allocated
        measured = _measured_gib(r) * GiB
        out.append((f"{r['model']} {r['mode']} seq={plan.seq_len}", gpu.total_bytes / measured - 1,
                    (gpu.total_bytes - own + replayed) / measured - 1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--reserve", action="store_true",
                    help="the estimate's allocator reserve against the one replayed over the estimate's step tensors")
    ap.add_argument("--out", type=Path, help="with --trace: the CSV to write (default benchmarks/results/qlora-trace-reserve-DATE.csv)")
    ap.add_argument("--trace", action="store_true",
                    help="the reserve of a step built from a recorded QLoRA layer (benchmarks/measure/layer_trace.py)")
    args = ap.parse_args(argv)
    if args.trace:
        out = args.out or RESULTS / f"qlora-trace-reserve-{datetime.date.today().isoformat()}.csv"
        with out.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(TRACE_FIELDS)
            for row in read(args.csv):
                if not row["max_seq_len"] or (t := trace_check(row)) is None:
                    continue
                writer.writerow([t.label, t.published, t.trace, TRACE_STEPS, t.estimate_reserve, t.step_live,
                                 t.traced_reserve, t.room, t.predicted, t.predicted_traced,
                                 f"{t.ratio:.3f}", f"{t.ratio_traced:.3f}"])
                f.flush()
                print(f"{t.label:60s} at {t.published:,}: estimate's reserve {t.estimate_reserve / GiB:.2f} GiB, traced "
                      f"{t.traced_reserve / GiB:.2f} ({t.traced_reserve / t.step_live:.1%} of the traced step's "
                      f"{t.step_live / GiB:.2f} GiB live; {t.trace}); room the published run left {t.room / GiB:.2f}; "
                      f"ratio {t.ratio:.3f}, traced {t.ratio_traced:.3f}")
        print(f"wrote {out}")
        return 0
    if args.reserve:
        for r in (reserve_check(row) for row in read(args.csv) if row["max_seq_len"]):
            print(f"{r.label:60s} at {r.published:,}: allocated {r.allocated / GiB:.2f} GiB "
                  f"({r.static / GiB:.2f} static); estimate's reserve {r.estimate_reserve / GiB:.2f}, replayed "
                  f"{r.replayed_reserve / GiB:.2f} ({r.replayed_reserve / r.step_live:.1%} of the step's "
                  f"{r.step_live / GiB:.2f} GiB live), {r.replayed_pieces / GiB:.2f} with each layer's tensors apart, "
                  f"{r.replayed_loaded / GiB:.2f} after the base loaded; "
                  f"peak at the loss's backward: {'yes' if r.peak_at_loss else 'no'}; ratio {r.ratio:.3f}, "
                  f"replayed {r.ratio_replayed:.3f}, tensors apart {r.ratio_pieces:.3f}")
        swap = qwen_table_swap()
        for name, i in (("the estimate's reserve", 1), ("replayed reserve", 2)):
            errs = [row[i] for row in swap]
            print(f"Qwen fine-tuning table, {len(swap)} single-GPU rows, {name}: median |error| "
                  f"{statistics.median(abs(e) for e in errs):.2%}, worst under-prediction {min(errs):+.2%}, "
                  f"worst over-prediction {max(errs):+.2%}")
        return 0
    rows = capacities(args.csv)
    for c in rows:
        if c.published is None:
            verdict = "agrees" if c.agrees else "DISAGREES"
            print(f"{c.label:60s} published OOM; fitcheck's longest {c.predicted:>7,}: {verdict}")
        else:
            print(f"{c.label:60s} published {c.published:>7,}; fitcheck's longest {c.predicted:>7,}: "
                  f"ratio {c.ratio:.3f}")
    ratios = [c.ratio for c in rows if c.ratio is not None]
    if ratios:
        print(f"largest ratio {max(ratios):.3f}, smallest {min(ratios):.3f} over {len(ratios)} rows; "
              f"OOM rows agreeing: {sum(c.agrees for c in rows if c.published is None)} of "
              f"{sum(c.published is None for c in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
