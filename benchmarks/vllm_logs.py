"""vLLM's own startup logs against the vLLM estimate's parts, one command.

    python -m benchmarks.vllm_logs               # every row of benchmarks/data/vllm_startup_logs.csv, per part
    python -m benchmarks.vllm_logs --parse LOG   # a startup log's figures as a CSV row (fill in source and notes)

vLLM measures its own memory at startup and prints it (gpu_worker.determine_available_memory): the weights
("Model loading took X GiB"), the activation peak of its profiling run (the torch allocator's peak increase),
the memory outside PyTorch that the profiling adds (NCCL, kernel images), what the KV cache gets of
gpu_memory_utilization × total memory ("Available KV cache memory") and how many tokens that holds ("GPU KV cache
size: N tokens").  Releases print them in two formats:

- V0 and V1 before v0.10 (INFO): "the current vLLM instance can use total_gpu_memory (79.19GiB) x
  gpu_memory_utilization (0.90) = 71.27GiB" and "model weights take …; non_torch_memory takes …; PyTorch
  activation peak memory takes …; the rest of the memory reserved for KV Cache is …";
- V1 from v0.10 (DEBUG, VLLM_LOGGING_LEVEL=DEBUG): "Memory profiling takes … Total non KV cache memory: …;
  torch peak memory increase: …; non-torch forward increase memory: …; weights memory: …", and the
  worker's init snapshot ("total_memory=…, non_torch_memory=…": CUDA context and NCCL, outside the
  reservation in those releases).

The estimate's claims compared, per row (`score`):

- weights on the GPU that sets the KV cache's size (the last pipeline stage);
- the activation peak: for rows of the release fitcheck models (v0.19.0) the estimate's activations component;
  for older releases :func:`fitcheck.estimate.activations.vllm_profile_bytes` with the row's own
  max_num_batched_tokens, max_num_seqs and that release's sort-based sampler (their profiling differed);
- the non-torch memory inside the reservation (NCCL buffers with tensor parallelism);
- **what vLLM subtracts from its reservation before the KV cache** — weights + activation peak + non-torch
  inside the reservation — the figure README's table pools (`non_kv_errors`);
- the KV cache's capacity in tokens (the estimate's fact ``vllm_kv_pool_tokens``);
- outside the reservation (v0.19.0: the CUDA context and NCCL at init, and the CUDA graphs captured after
  the KV cache): reported, not pooled.

Every row's source is in its `source` column; benchmarks/data/SOURCES.md says where the tables come from.
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "benchmarks" / "data" / "vllm_startup_logs.csv"

FIELDS = ["model", "catalog_model", "precision", "dtype", "kv_cache_dtype", "tensor_parallel", "pipeline_parallel",
          "gpu", "compute_capability", "gpu_total_gib", "gpu_memory_utilization", "max_model_len",
          "max_num_batched_tokens", "max_num_seqs", "enforce_eager", "vllm_version", "log_date", "stage",
          "weights_gib", "activation_peak_gib", "non_torch_gib", "non_kv_gib", "kv_cache_gib", "kv_cache_tokens",
          "max_concurrency", "init_non_torch_gib", "cuda_graph_gib", "source", "notes"]
# The release fitcheck's vLLM estimate follows (fitcheck/estimate/activations.py, inference._vllm).
MODELLED_RELEASE = "0.19.0"


# ---- parsing a log ---------------------------------------------------------------------------------
_PREFIX = re.compile(r"^\((?P<who>[A-Za-z_]+\d*) pid=\d+\)")


def _worker(line: str) -> str:
    m = _PREFIX.match(line)
    return m.group("who") if m else ""


def _search(pattern: str, text: str, default: str = "") -> str:
    m = re.search(pattern, text)
    return m.group(1) if m else default


def parse_log(text: str) -> dict[str, str]:
    """The figures a vLLM startup log prints, as the strings it prints them (GiB, tokens).

    With pipeline parallelism every stage profiles itself: the row keeps the stage whose non-KV memory is the
    largest (the one that sets the KV cache's size, "stage" column)."""
    row: dict[str, str] = {k: "" for k in FIELDS}
    args = _search(r"non-default args: (\{.*\})", text)
    row["model"] = _search(r"'model': '([^']+)'", args) or _search(r"model='([^']+)'", text)
    row["vllm_version"] = _search(r"LLM engine \(v([^)]+)\)", text)
    row["tensor_parallel"] = _search(r"tensor_parallel_size=(\d+)", text, "1")
    row["pipeline_parallel"] = _search(r"pipeline_parallel_size=(\d+)", text, "1")
    row["max_model_len"] = _search(r"max_seq_len=(\d+)", text)
    row["dtype"] = _search(r"dtype=torch\.(\w+)", text)
    row["kv_cache_dtype"] = _search(r"kv_cache_dtype=(\w+)", text)
    quant = _search(r"quantization=([\w-]+)", text)
    row["precision"] = "" if quant in ("", "None") else quant
    row["enforce_eager"] = _search(r"enforce_eager=(\w+)", text)
    row["gpu_memory_utilization"] = (_search(r"'gpu_memory_utilization': ([\d.]+)", args)
                                     or _search(r"gpu_memory_utilization \(([\d.]+)\)", text) or "0.9")
    row["max_num_batched_tokens"] = (_search(r"'max_num_batched_tokens': (\d+)", args)
                                     or _search(r"Defaulting max_num_batched_tokens to (\d+)", text)
                                     or _search(r"max_num_batched_tokens=(\d+)", text))
    row["max_num_seqs"] = (_search(r"'max_num_seqs': (\d+)", args)
                           or _search(r"Defaulting max_num_seqs to (\d+)", text))
    row["log_date"] = _search(r"(?:INFO|DEBUG) (\d\d-\d\d) \d\d:", text)
    lines = text.splitlines()
    # V1 from v0.10 (DEBUG): one profiling line per worker
    profiles = [(line, _worker(line)) for line in lines if "Total non KV cache memory:" in line]
    if profiles:
        def non_kv(item: tuple[str, str]) -> float:
            return float(_search(r"Total non KV cache memory: ([\d.]+)GiB", item[0], "0"))
        line, who = max(profiles, key=non_kv)
        same = len({non_kv(p) for p in profiles}) == 1  # every rank alike: any rank's lines will do
        row["stage"] = "" if same else who
        row["non_kv_gib"] = _search(r"Total non KV cache memory: ([\d.]+)GiB", line)
        row["activation_peak_gib"] = _search(r"torch peak memory increase: ([\d.]+)GiB", line)
        row["non_torch_gib"] = _search(r"non-torch forward increase memory: ([\d.]+)GiB", line)
        row["weights_gib"] = _search(r"weights memory: ([\d.]+)GiB", line)
        snapshot = next((x for x in lines if "worker init memory snapshot" in x), "")
        row["gpu_total_gib"] = _search(r"total_memory=([\d.]+)GiB", snapshot)
        row["init_non_torch_gib"] = _search(r"non_torch_memory=([\d.]+)GiB", snapshot)
        kv = [x for x in lines if "Available KV cache memory:" in x and (same or _worker(x) == who)]
        row["kv_cache_gib"] = _search(r"Available KV cache memory: ([\d.]+) GiB", kv[0]) if kv else ""
        graphs = [x for x in lines if "Graph capturing finished" in x and _worker(x) in (who, "")]
        graphs = graphs or [x for x in lines if "Graph capturing finished" in x]
        row["cuda_graph_gib"] = _search(r"took ([\d.]+) GiB", graphs[0]) if graphs else ""
    else:  # V0 / V1 before v0.10 (INFO)
        row["gpu_total_gib"] = _search(r"total_gpu_memory \(([\d.]+)GiB\)", text)
        row["weights_gib"] = _search(r"model weights take ([\d.]+)GiB", text)
        row["non_torch_gib"] = _search(r"non_torch_memory takes ([\d.]+)GiB", text)
        row["activation_peak_gib"] = _search(r"PyTorch activation peak memory takes ([\d.]+)GiB", text)
        row["kv_cache_gib"] = _search(r"reserved for KV Cache is ([\d.]+)GiB", text)
        row["cuda_graph_gib"] = _search(r"Graph capturing finished in \d+ secs?, took ([\d.]+) GiB", text)
    row["kv_cache_tokens"] = _search(r"GPU KV cache size: ([\d,]+) tokens", text).replace(",", "")
    row["max_concurrency"] = _search(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x", text)
    return row


# ---- scoring a row ---------------------------------------------------------------------------------
class Skip(Exception):
    """A row that cannot be set against the estimate; the message says why."""


@dataclass(frozen=True)
class Part:
    name: str
    predicted: float   # GiB, or tokens for the KV capacity
    logged: float

    @property
    def error_pct(self) -> float:
        return (self.predicted - self.logged) / self.logged * 100 if self.logged else 0.0


@dataclass(frozen=True)
class RowScore:
    label: str
    release: str
    tensor_parallel: int
    parts: tuple[Part, ...]

    def part(self, name: str) -> Part | None:
        return next((p for p in self.parts if p.name == name), None)


def read_rows(path: Path = DATA) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _num(value: str) -> float | None:
    value = (value or "").strip()
    return float(value) if value else None


def _precision(row: dict[str, str]) -> str:
    p = (row.get("precision") or "").strip().lower()
    if p:
        return p
    return {"float32": "fp32", "float16": "fp16"}.get((row.get("dtype") or "").lower(), "bf16")


def modelled(row: dict[str, str]) -> bool:
    """Whether the row comes from the release fitcheck's vLLM estimate follows."""
    return (row.get("vllm_version") or "").startswith(MODELLED_RELEASE)


def score(row: dict[str, str]) -> RowScore:
    """The estimate's parts set against one logged row (GiB; tokens for the KV capacity)."""
    from fitcheck.engines import estimate_inference
    from fitcheck.engines.vllm import profile as VP
    from fitcheck.errors import FitcheckError
    from fitcheck.estimate.result import ACTIVATIONS, OVERHEAD, WEIGHTS
    from fitcheck.model.resolve import resolve_model
    from fitcheck.plan import Plan
    from fitcheck.units import GiB

    name = (row.get("catalog_model") or "").strip()
    if not name:
        raise Skip(f"{row['model']}: no catalog model of the same architecture (catalog_model is empty)")
    try:
        spec = resolve_model(name).spec
    except FitcheckError as exc:
        raise Skip(f"{row['model']}: {exc}") from None
    tp, pp = int(row["tensor_parallel"] or 1), int(row["pipeline_parallel"] or 1)
    context = int(row["max_model_len"])
    total = _num(row["gpu_total_gib"])
    kv = (row.get("kv_cache_dtype") or "auto").lower()
    precision = _precision(row)
    act_kv = {"fp32": "fp32", "fp16": "fp16"}.get(_precision({"dtype": row.get("dtype", "")}), "bf16")
    plan = Plan(precision=precision, engine="vllm", device="gpu", gpus=tp, nodes=pp, context=context, batch=1,
                prompt_tokens=context, kv_dtype="fp8" if kv.startswith("fp8") else act_kv, gpu_layers=None,
                gpu_memory_utilization=float(row["gpu_memory_utilization"]),
                gpu_total_bytes=int(total * GiB) if total else None,
                compute_capability=_num(row.get("compute_capability", "")))
    est = estimate_inference(spec, plan)
    # the GPU that sets the KV cache's size: the last pipeline stage (the sampler runs there)
    dev = est.devices[(pp - 1) * tp] if len(est.devices) >= pp * tp else est.devices[0]
    outside = est.fact("vllm_outside_reservation_bytes", 0) or 0
    weights = dev.component(WEIGHTS) / GiB
    inside_over = (dev.component(OVERHEAD) - outside) / GiB
    if modelled(row):
        act = dev.component(ACTIVATIONS) / GiB
    else:
        tokens, seqs = int(row["max_num_batched_tokens"]), int(row["max_num_seqs"])
        act_b = 4 if precision == "fp32" else 2
        act = VP.vllm_profile_bytes(spec, tp, act_b, sampler="sort", tokens=tokens, seqs=seqs) / GiB
    parts = [Part("weights", weights, float(row["weights_gib"])),
             Part("activation peak", act, float(row["activation_peak_gib"]))]
    if modelled(row):
        parts.append(Part("non-torch inside", inside_over, float(row["non_torch_gib"])))
        non_kv = _num(row["non_kv_gib"])
        parts.append(Part("non-KV inside", weights + act + inside_over, non_kv if non_kv is not None else
                          float(row["weights_gib"]) + float(row["activation_peak_gib"]) + float(row["non_torch_gib"])))
        concurrency = _num(row["max_concurrency"])
        if concurrency:
            # "Maximum concurrency for N tokens per request" × N: the KV cache's capacity in tokens of full-length
            # requests.  For models with sliding-window layers vLLM's "GPU KV cache size: N tokens" counts each
            # layer group's blocks as if every layer kept every token (kv_cache_utils._report_kv_cache_config), so the
            # concurrency is the figure that means the same for every model.
            parts.append(Part("KV tokens", float(est.fact("vllm_max_concurrency", 0)) * context, concurrency * context))
        out_logged = [_num(row["init_non_torch_gib"]), _num(row["cuda_graph_gib"])]
        if all(x is not None for x in out_logged):
            parts.append(Part("outside", outside / GiB, sum(x for x in out_logged if x is not None)))
    label = (f"{row['model']} {precision}{' kv ' + kv if kv.startswith('fp8') else ''} tp{tp}"
             f"{f' pp{pp}' if pp > 1 else ''} {row['gpu']} len {context} v{row['vllm_version']}")
    return RowScore(label, row["vllm_version"], tp, tuple(parts))


def scores(path: Path = DATA) -> tuple[list[RowScore], list[str]]:
    out, skipped = [], []
    for row in read_rows(path):
        try:
            out.append(score(row))
        except Skip as exc:
            skipped.append(str(exc))
    return out, skipped


def errors(name: str, *, modelled_only: bool = True, min_tp: int = 1, path: Path = DATA) -> list[float]:
    """Percent errors of one part over the scored rows (of the modelled release unless ``modelled_only`` is off;
    with ``min_tp``, only rows of that tensor-parallel size or more)."""
    rows, _ = scores(path)
    return [p.error_pct for r in rows if (r.release.startswith(MODELLED_RELEASE) or not modelled_only)
            and r.tensor_parallel >= min_tp for p in r.parts if p.name == name]


def non_kv_errors(path: Path = DATA) -> list[float]:
    """README's pooled line: what vLLM subtracts from gpu_memory_utilization × total before the KV cache."""
    return errors("non-KV inside", path=path)


def kv_token_errors(path: Path = DATA) -> list[float]:
    """The KV cache's capacity, signed so that negative is the risky side: more tokens promised than vLLM holds."""
    return [-e for e in errors("KV tokens", path=path)]


def _summary(name: str, errs: list[float]) -> str:
    if not errs:
        return f"{name}: no rows"
    return (f"{name}: {len(errs)} rows, median |error| {statistics.median(abs(e) for e in errs):.2f} %, "
            f"worst under {min(errs):+.2f} %, worst over {max(errs):+.2f} %")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parse", nargs="+", metavar="LOG", help="print each startup log's figures as a CSV row")
    ap.add_argument("--csv", type=Path, default=DATA)
    args = ap.parse_args(argv)
    if args.parse:
        w = csv.DictWriter(sys.stdout, FIELDS, lineterminator="\n")
        w.writeheader()
        for p in args.parse:
            w.writerow(parse_log(Path(p).read_text(errors="replace")))
        return 0
    rows, skipped = scores(args.csv)
    names = ["weights", "activation peak", "non-torch inside", "non-KV inside", "KV tokens", "outside"]
    print("| row | " + " | ".join(f"{n}: est / log" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for r in rows:
        cells = []
        for n in names:
            p = r.part(n)
            if p is None:
                cells.append("")
            elif n == "KV tokens":
                cells.append(f"{p.predicted:,.0f} / {p.logged:,.0f} ({p.error_pct:+.1f} %)")
            else:
                cells.append(f"{p.predicted:.2f} / {p.logged:.2f} ({p.error_pct:+.1f} %)")
        print(f"| {r.label} | " + " | ".join(cells) + " |")
    print()
    for n in names:
        if n == "non-torch inside":
            print(_summary(f"v{MODELLED_RELEASE} {n} (tp > 1: NCCL)", errors(n, min_tp=2, path=args.csv)))
            continue
        print(_summary(f"v{MODELLED_RELEASE} {n}", errors(n, path=args.csv)))
    for n in ("weights", "activation peak"):
        errs = [p.error_pct for r in rows if not r.release.startswith(MODELLED_RELEASE) for p in r.parts
                if p.name == n]
        print(_summary(f"older releases {n}", errs))
    for s in skipped:
        print(f"skipped: {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
