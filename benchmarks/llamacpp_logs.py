"""llama.cpp load logs against fitcheck's llama.cpp estimate, buffer by buffer.

    python -m benchmarks.llamacpp_logs            # per-component summary
    python -m benchmarks.llamacpp_logs --rows     # every comparison

Reads `benchmarks/data/llamacpp_load_logs.csv`: buffers that llama.cpp printed at load in published
logs (GitHub issues and pull requests; each row's `source`), with the settings the log shows.  Each
row is estimated with the same code as `fitcheck MODEL --engine llama.cpp` (`fitcheck.engines.llama_cpp.llama_cpp_devices`)
for that model, file type, context (-c), sequences (-np), micro-batch (-ub), flash attention (-fa), KV
types (-ctk/-ctv), offloaded layers (-ngl) and GPUs -- and, where the release or the runner differs from
today's llama-server, its n_ctx rounding (`ctx_pad`: 32 without flash attention before PR #17046), whether
sliding-window layers had their own cache (`swa_cache` 0 before PR #13194) and whether the context returns
embeddings (`embeddings` 1 under ollama) -- and compared with what the log printed:

- model buffers: the GPUs' sum ("CUDA0 model buffer size" ...), and the host's ("CPU_Mapped") only
  when every layer is offloaded (then it holds token_embd alone; with layers on the CPU it is the
  memory-mapped span of the file from its first to its last CPU tensor, not resident RAM); only rows
  whose file type fitcheck models (a stated or size-inferred Q2_K, Q8_0, BF16 ...);
- KV buffers: the GPUs' sum and the host's;
- compute buffers: the first GPU's (the graph allocator's reservation for the worst-case graph);
- host buffers: "CUDA_Host compute buffer" plus the output (logits) buffer, where both are logged
  and the sequence count is known;
- device totals: per device, the sum of the buffers its log lines show against the estimate of
  the same buffers.

Every buffer is MiB as printed (2^20 bytes, two decimals).  Errors are (estimate − log) / log:
negative = the estimate is short (the out-of-memory direction).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fitcheck.engines import FLOATS, GGUF_TYPES  # noqa: E402
from fitcheck.engines.llama_cpp import llama_cpp_devices
from fitcheck.engines.llama_cpp.buffers import CTX_PAD, LlamaCppSetup
from fitcheck.estimate.result import ACTIVATIONS, KV_CACHE, WEIGHTS  # noqa: E402
from fitcheck.model.resolve import resolve_model  # noqa: E402
from fitcheck.model.spec import ModelSpec  # noqa: E402
from fitcheck.plan import Plan  # noqa: E402

DATA = REPO / "benchmarks" / "data" / "llamacpp_load_logs.csv"
MIB = 2**20
# The placeholder weight format of a row whose file type fitcheck does not model: it decides only the
# model buffers, which such rows do not score.
PLACEHOLDER_TYPE = "q4_k_m"


@dataclass(frozen=True)
class Comparison:
    row: str
    component: str
    estimate_mib: float
    log_mib: float

    @property
    def error_pct(self) -> float:
        return (self.estimate_mib - self.log_mib) / self.log_mib * 100


def read_rows(path: Path = DATA) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _mibs(text: str) -> list[float | None]:
    """A per-device column: '5434.38;13989.53' (an empty entry: that device's line is not in the log)."""
    if not text.strip():
        return []
    return [float(x) if x.strip() else None for x in text.split(";")]


def _int(text: str, default: int | None = None) -> int | None:
    return int(text) if text.strip() else default


def modelled_type(row: dict) -> str | None:
    """The row's GGUF file type when fitcheck models it (the model buffers are scored then)."""
    t = row["file_type"].strip().lower()
    return t if t and t in (*GGUF_TYPES, *FLOATS) else None


def spec_of(row: dict) -> ModelSpec:
    return resolve_model(row["model"]).spec


def setup_of(row: dict) -> LlamaCppSetup:
    n_seq = _int(row["n_seq"], 1) or 1
    gpus = _int(row["gpus"], 1) or 0
    offloaded, total = _int(row["offloaded"]), _int(row["layers_total"])
    return LlamaCppSetup(n_ctx=_int(row["n_ctx"], 4096) or 4096, n_seq=n_seq, n_ubatch=_int(row["n_ubatch"], 512) or 512,
                         flash_attn=row["flash_attn"].strip() == "1", type_k=row["type_k"] or "fp16",
                         type_v=row["type_v"] or "fp16",
                         gpu_layers=None if offloaded is None or offloaded == total else offloaded, gpus=gpus,
                         ctx_pad=_int(row["ctx_pad"], CTX_PAD) or CTX_PAD, swa_cache=row["swa_cache"].strip() != "0",
                         embeddings=row["embeddings"].strip() == "1")


def plan_of(row: dict, setup: LlamaCppSetup) -> Plan:
    precision = modelled_type(row) or PLACEHOLDER_TYPE
    partial = setup.gpu_layers is not None
    device = "cpu" if not setup.gpus else ("offload" if partial else "gpu")
    return Plan(precision=precision, engine="llama.cpp", device=device,
                gpus=setup.gpus, context=setup.n_ctx // setup.n_seq, batch=setup.n_seq, prompt_tokens=setup.n_ubatch,
                kv_dtype=setup.type_k, gpu_layers=setup.gpu_layers, gpu_memory_utilization=0.9, gpu_total_bytes=None,
                compute_capability=None)


def _part(device, name: str) -> float:
    return device.component(name) / MIB


def row_comparisons(row: dict) -> list[Comparison]:
    """Every buffer of `row` the log shows, against the estimate; device totals included."""
    setup = setup_of(row)
    devices = llama_cpp_devices(spec_of(row), plan_of(row, setup), setup)
    gpus = [d for d in devices if d.kind == "gpu"]
    host = next(d for d in devices if d.kind == "cpu")
    rid, out = row["id"], []
    full_offload = setup.gpu_layers is None
    modelled = modelled_type(row) is not None
    known_seq = bool(row["n_seq"].strip())

    model_gpu, kv_gpu, compute_gpu = _mibs(row["model_gpu_mib"]), _mibs(row["kv_gpu_mib"]), _mibs(row["compute_gpu_mib"])
    if modelled and model_gpu and None not in model_gpu:
        out.append(Comparison(rid, "model (GPUs)", sum(_part(d, WEIGHTS) for d in gpus), sum(model_gpu)))
    if modelled and full_offload and row["model_host_mib"].strip():
        out.append(Comparison(rid, "model (host)", _part(host, WEIGHTS), float(row["model_host_mib"])))
    if kv_gpu and None not in kv_gpu:
        out.append(Comparison(rid, "KV (GPUs)", sum(_part(d, KV_CACHE) for d in gpus), sum(kv_gpu)))
    if row["kv_host_mib"].strip():
        out.append(Comparison(rid, "KV (host)", _part(host, KV_CACHE), float(row["kv_host_mib"])))
    if compute_gpu and compute_gpu[0] is not None:
        out.append(Comparison(rid, "compute (first GPU)", _part(gpus[0], ACTIVATIONS), compute_gpu[0]))
    host_bufs = row["compute_host_mib"].strip() and row["output_host_mib"].strip() and known_seq
    if host_bufs:
        out.append(Comparison(rid, "compute + output (host)", _part(host, ACTIVATIONS),
                              float(row["compute_host_mib"]) + float(row["output_host_mib"])))

    # device totals: a single GPU's logged buffers, and the host's, against the same parts of the estimate
    if len(gpus) == 1 and (compute_gpu or kv_gpu or model_gpu):
        est, log = 0.0, 0.0
        for name, logged in ((WEIGHTS, model_gpu if modelled else []), (KV_CACHE, kv_gpu), (ACTIVATIONS, compute_gpu)):
            if logged and logged[0] is not None:
                est, log = est + _part(gpus[0], name), log + logged[0]
        if log:
            out.append(Comparison(rid, "device total (GPU)", est, log))
    return out


def comparisons(path: Path = DATA) -> list[Comparison]:
    return [c for row in read_rows(path) for c in row_comparisons(row)]


def device_total_errors(path: Path = DATA) -> list[float]:
    """The report's line: each device's logged buffers summed, against the estimate of the same buffers."""
    return [c.error_pct for c in comparisons(path) if c.component.startswith("device total")]


def summary(comps: list[Comparison]) -> list[tuple[str, int, float, float]]:
    """(component, rows, median |error| %, worst under-estimate %) per component."""
    out = []
    for name in dict.fromkeys(c.component for c in comps):
        errs = [c.error_pct for c in comps if c.component == name]
        out.append((name, len(errs), statistics.median(abs(e) for e in errs), min(errs)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="print every comparison")
    args = ap.parse_args(argv)
    comps = comparisons()
    if args.rows:
        print(f"{'row':34} {'buffer':24} {'estimate':>10} {'log':>10} {'error':>8}")
        for c in comps:
            print(f"{c.row:34} {c.component:24} {c.estimate_mib:10.2f} {c.log_mib:10.2f} {c.error_pct:+7.2f}%")
        print()
    print("| buffer | rows | median \\|error\\| | worst under-estimate |")
    print("|---|---|---|---|")
    for name, n, med, worst in summary(comps):
        print(f"| {name} | {n} | {med:.2f} % | {worst:+.2f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
