"""Live-tensor peak of transformers inference on the CPU, across transformers releases.

    python -m benchmarks.measure.inference_peak [--cases PATTERN] [--out FILE]
    VENV/bin/python -m benchmarks.measure.inference_peak --out FILE --append   # another transformers release's venv

Each case builds a random-init Llama-architecture model (the layer shapes of a real model,
fewer layers, full vocabulary) in a fresh process, then runs a prefill (`model(ids)` as
`generate` calls it) or a whole `generate` call under `torch.profiler.profile(profile_memory=True)`.
Walking the allocator's `[memory]` events gives the highest sum of live tensor bytes above the
weights (what `torch.cuda.max_memory_allocated` reads on CUDA for the same program, minus the
weights).  Llama is the architecture every release in the matrix has (4.35 predates Qwen2).

What the cases separate (README, Accuracy): the prompt against the generated tokens (`--prompt`),
the legacy tuple cache of older releases (two caches alive at the last decode step), and eager
attention's score matrix with its fp32 softmax against SDPA.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import fnmatch
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from fitcheck.estimate.generate_step import GENERATE_KWARGS, generate_kwargs

from .fresh_process import emit, write_fresh_rows
from .profiler_peak import live_tensor_peak, live_tensors_at_peak

HARNESS_MAX_POSITIONS = 8192
RESULTS = Path(__file__).resolve().parents[1] / "results"
FIELDS = ("case_id", "model", "layers", "dtype", "attn", "batch", "prompt", "new_tokens", "sampling", "min_new",
          "max_positions", "weight_bytes",
          "peak_above_weights_bytes", "kv_cache_bytes", "op_at_peak", "attn_impl_used", "torch_version",
          "transformers_version", "date")


@dataclass(frozen=True)
class InferenceCase:
    id: str
    model: str          # a benchmarks.measure.models spec name (shape source)
    layers: int
    attn: str           # eager | sdpa
    batch: int
    prompt: int
    new_tokens: int     # 0: one prefill forward
    dtype: str = "fp32"
    # how generate() picks tokens: greedy (do_sample=False), sample (do_sample=True, the generation
    # config's defaults: temperature 1, top_k 50, top_p 1) or sample-top-p (temperature 0.7, top_k 50,
    # top_p 0.9: a chat model's generation_config)
    sampling: str = "greedy"
    # the harness forces new_tokens with min_new_tokens (MinNewTokensLengthLogitsProcessor); without it
    # eos_token_id is None, so no processor of the harness's own runs
    min_new: bool = True
    max_positions: int = 0  # max_position_embeddings; 0: HARNESS_MAX_POSITIONS (4.38's causal mask is its square)


_SMOL = "HuggingFaceTB/SmolLM2-135M"
_LLAMA1B = "meta-llama/Llama-3.2-1B"
CASES: tuple[InferenceCase, ...] = (
    InferenceCase("inf-smol-prefill-1024-sdpa", _SMOL, 6, "sdpa", 1, 1024, 0),
    InferenceCase("inf-smol-prefill-1024-eager", _SMOL, 6, "eager", 1, 1024, 0),
    InferenceCase("inf-smol-prefill-512x4-eager", _SMOL, 6, "eager", 4, 512, 0),
    InferenceCase("inf-smol-gen-16+32x8-sdpa", _SMOL, 6, "sdpa", 8, 16, 32),
    InferenceCase("inf-smol-gen-16+32x8-eager", _SMOL, 6, "eager", 8, 16, 32),
    InferenceCase("inf-smol-gen-512+16-sdpa", _SMOL, 6, "sdpa", 1, 512, 16),
    # SmolLM2-135M at its full depth (30 narrow layers): a per-layer amount would show here (issue 14, item 8)
    InferenceCase("inf-smol30-gen-512+16x4-sdpa", _SMOL, 30, "sdpa", 4, 512, 16),
    # a long prompt then a few tokens at full depth: before 4.42 the prefill's every-position logits stay
    # alive through the first decoding forward, which also holds the prompt's legacy cache twice
    InferenceCase("inf-smol30-gen-1024+4-sdpa", _SMOL, 30, "sdpa", 1, 1024, 4),
    InferenceCase("inf-llama1b-prefill-1024-sdpa", _LLAMA1B, 2, "sdpa", 1, 1024, 0),
    InferenceCase("inf-llama1b-prefill-1024-eager", _LLAMA1B, 2, "eager", 1, 1024, 0),
    InferenceCase("inf-llama1b-gen-1+32x8-sdpa", _LLAMA1B, 2, "sdpa", 8, 1, 32),
) + tuple(
    # generate()'s per-step vocabulary-sized tensors (issue 14): one layer of Llama-3.2-1B (a 128,256-token
    # vocabulary), a 1-token prompt and 8 new tokens, no processor of the harness's own (eos_token_id None),
    # 64 positions (4.38's causal mask stays small): the step's logits, their copy and the sampler are the peak
    InferenceCase(f"inf-step-llama1b-1+8x{batch}-{sampling}" + ("-bf16" if dtype == "bf16" else ""), _LLAMA1B, 1,
                  "eager", batch, 1, 8, dtype=dtype, sampling=sampling, min_new=False, max_positions=64)
    for batch, sampling, dtype in ((1, "greedy", "fp32"), (4, "greedy", "fp32"), (16, "greedy", "fp32"),
                                   (4, "sample", "fp32"), (16, "sample", "fp32"),
                                   (4, "sample-top-p", "fp32"), (16, "sample-top-p", "fp32"),
                                   (16, "sample-top-p", "bf16"), (16, "greedy", "bf16"))
) + tuple(
    # the repetition penalty (generation_config's repetition_penalty, Qwen2.5 Instruct's 1.05): greedy, where its
    # scatter output adds to the step, and with Qwen2.5 Instruct's warpers, where top-p's sort stays the peak
    InferenceCase(f"inf-step-llama1b-1+8x{batch}-{name}", _LLAMA1B, 1, "eager", batch, 1, 8, sampling=sampling,
                  min_new=False, max_positions=64)
    for batch, name, sampling in ((4, "greedy-penalty", "greedy:repetition-penalty"),
                                  (16, "greedy-penalty", "greedy:repetition-penalty"),
                                  (16, "top-p-penalty", "sample:repetition-penalty+temperature+top-k+top-p"))
)


def _config(case: InferenceCase):
    import transformers

    from .models import spec_for

    spec, _ = spec_for(case.model)
    cfg = transformers.LlamaConfig(
        vocab_size=spec.vocab_size, hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
        num_hidden_layers=case.layers, num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_kv_heads, tie_word_embeddings=spec.tie_word_embeddings,
        max_position_embeddings=case.max_positions or HARNESS_MAX_POSITIONS, use_cache=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return cfg


def _cache_bytes(past) -> int:
    """Bytes of K and V in a returned cache: a legacy tuple, a DynamicCache (lists) or its layers (5.x)."""
    if isinstance(past, (tuple, list)):
        tensors = [t for layer in past for t in layer[:2]]
    elif hasattr(past, "layers"):
        tensors = [t for layer in past.layers for t in (layer.keys, layer.values) if t is not None]
    else:
        tensors = list(getattr(past, "key_cache", [])) + list(getattr(past, "value_cache", []))
    return sum(t.numel() * t.element_size() for t in tensors)


SAMPLING = {"greedy": GENERATE_KWARGS["greedy"], "sample": GENERATE_KWARGS["sample"],
            "sample-top-p": GENERATE_KWARGS["top-p"]}


def _generate_kwargs(case: InferenceCase) -> dict:
    new = max(case.new_tokens, 1)
    kwargs = dict(SAMPLING.get(case.sampling) or generate_kwargs(case.sampling), max_new_tokens=new, pad_token_id=0)
    if case.min_new:
        kwargs["min_new_tokens"] = new
    else:
        kwargs["eos_token_id"] = None
    return kwargs


def measure(case_id: str, explain: bool = False) -> dict:
    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile

    case = next(c for c in CASES if c.id == case_id)
    torch.manual_seed(0)
    cfg = _config(case)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[case.dtype]
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    if (major, minor) >= (4, 36):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=case.attn)
    elif case.attn != "eager":
        return {}  # before 4.36 Llama has eager attention only (SDPA arrived in 4.36)
    else:
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    model = model.to(dtype).eval()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    weights += sum(b.numel() * b.element_size() for b in model.buffers())
    ids = torch.randint(3, cfg.vocab_size, (case.batch, case.prompt))
    kv_bytes = [0]

    def run():
        with torch.no_grad():
            # a prefill is generate() making one token: the logits it asks for are the release's own
            out = model.generate(ids, attention_mask=torch.ones_like(ids), return_dict_in_generate=True,
                                 **_generate_kwargs(case))
            kv_bytes[0] = _cache_bytes(getattr(out, "past_key_values", None) or ())  # 4.35 returns none

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=explain) as prof:
        run()
    peak, innermost = live_tensor_peak(prof)
    if explain:
        print(f"{case.id} under transformers {transformers.__version__}: {peak / 2**20:.2f} MiB above the weights")
        for nbytes, op, where in live_tensors_at_peak(prof):
            print(f"{nbytes / 2**20:10.3f} MiB  {op:24s} {where}")
    row = {k: v for k, v in asdict(case).items() if k != "id"}
    row.update(case_id=case.id, weight_bytes=weights, peak_above_weights_bytes=peak, kv_cache_bytes=kv_bytes[0],
               op_at_peak=innermost, attn_impl_used=getattr(cfg, "_attn_implementation", "eager") or "eager",
               torch_version=torch.__version__.split("+")[0], transformers_version=transformers.__version__,
               date=datetime.date.today().isoformat())
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="*", help="glob of case ids")
    today = datetime.date.today().isoformat()
    ap.add_argument("--out", type=Path, default=RESULTS / f"cpu-inference-peaks-{today}.csv")
    ap.add_argument("--append", action="store_true", help="add rows to --out (another transformers release)")
    ap.add_argument("--compare", action="store_true", help="set the estimator against --out's rows and stop")
    ap.add_argument("--explain", metavar="CASE", help="run CASE here and list the tensors alive at its peak")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.explain:
        measure(args.explain, explain=True)
        return 0
    if args.one:
        emit(measure(args.one))
        return 0
    if args.compare:
        print("\n".join(comparison_lines(read_rows(args.out))))
        return 0
    write_fresh_rows(args.out, FIELDS, "benchmarks.measure.inference_peak",
                     [c.id for c in CASES if fnmatch.fnmatch(c.id, args.cases)],
                     lambda row: f"{row['case_id']:36s} tf {row['transformers_version']:8s} peak above weights "
                                 f"{row['peak_above_weights_bytes'] / 2**20:8.1f} MiB "
                                 f"(KV {row['kv_cache_bytes'] / 2**20:6.1f}) at {row['op_at_peak']}",
                     append=args.append)
    print(f"wrote {args.out}")
    return 0


# ---- the estimator against these rows ----------------------------------------------------------
def _flag(text: str | None, default: bool) -> bool:
    return default if text in (None, "") else str(text).lower() in ("true", "1")


def predicted_bytes(row: dict) -> int:
    """The estimator's allocated bytes above the weights for a row, as `--transformers-version`,
    `--attention` and `--prompt` set the plan, with the row's sampling and its own min_new_tokens
    processors (the live-tensor view: no allocator or heap slack)."""
    from fitcheck.engines import estimate_inference
    from fitcheck.engines.transformers.releases import legacy_cache_mode, logits_mode
    from fitcheck.plan import Plan

    from .hf_config import scaled_spec
    from .models import spec_for

    spec, _ = spec_for(row["model"])
    positions = int(row.get("max_positions") or 0) or HARNESS_MAX_POSITIONS
    spec = replace(scaled_spec(spec, int(row["layers"])), max_context=positions)
    version = row["transformers_version"]
    prompt, new, batch = int(row["prompt"]), int(row["new_tokens"]), int(row["batch"])
    precision = row["dtype"]
    plan = Plan(precision=precision, engine="transformers", device="gpu", gpus=1, context=prompt + max(new, 1),
                batch=batch, prompt_tokens=prompt, kv_dtype=precision, gpu_layers=None, gpu_memory_utilization=0.9,
                gpu_total_bytes=None, compute_capability=None, logits=logits_mode(spec.architecture, version)[0],
                transformers_version=version, attention=row["attn"],
                legacy_cache=legacy_cache_mode(spec.architecture, version), decodes=new > 0,
                sampling={"sample-top-p": "top-p"}.get(row.get("sampling") or "greedy", row.get("sampling") or "greedy"),
                min_new_tokens=_flag(row.get("min_new"), True))
    device = estimate_inference(spec, plan).devices[0]
    return device.peak_allocated_bytes - device.component("weights")


def read_rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def comparison_lines(rows: list[dict]) -> list[str]:
    """Per row: predicted vs measured peak above the weights; then median |error| and extremes."""
    import statistics

    lines = [f"{'case':34s} {'transformers':12s} {'pred MiB':>9s} {'meas MiB':>9s} {'error':>7s}"]
    errors = []
    for r in rows:
        predicted, measured = predicted_bytes(r), int(r["peak_above_weights_bytes"])
        err = (predicted - measured) / measured * 100
        errors.append((err, r))
        lines.append(f"{r['case_id']:34s} {r['transformers_version']:12s} {predicted / 2**20:9.1f} "
                     f"{measured / 2**20:9.1f} {err:+6.1f}%")
    if errors:
        worst_under = min(errors, key=lambda e: e[0])
        worst_over = max(errors, key=lambda e: e[0])
        lines.append(f"{len(errors)} rows, median |error| {statistics.median(abs(e) for e, _ in errors):.1f} %, "
                     f"worst under-prediction {worst_under[0]:+.1f} % ({worst_under[1]['case_id']} "
                     f"@{worst_under[1]['transformers_version']}), worst over-prediction {worst_over[0]:+.1f} % "
                     f"({worst_over[1]['case_id']} @{worst_over[1]['transformers_version']})")
    return lines


if __name__ == "__main__":
    sys.exit(main())
