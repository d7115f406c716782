"""`fitcheck measure` for real on the CPU, with tiny configs (skipped when torch/transformers are absent).

Each test runs the command once (a fresh measuring process each: 5-30 s on 2 cores).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from fitcheck.cli import cli  # noqa: E402
from fitcheck.measure import receipts  # noqa: E402

TINY = str(Path(__file__).resolve().parents[1] / "fixtures" / "measure" / "tiny-llama")
MiB = 2**20


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FITCHECK_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")


def _measure(*args: str) -> tuple[int, dict]:
    res = CliRunner().invoke(cli, ["measure", *args, "--json"])
    assert res.exit_code in (0, 1) and res.output, (res.output, res.exception)
    return res.exit_code, json.loads(res.output)


def test_inference_runs_and_reports_baseline_excluded_figures():
    code, doc = _measure(TINY, "-p", "fp32", "--context", "256", "--new-tokens", "8")
    assert code == 0 and doc["schema"] == "fitcheck.measure/1" and doc["status"] == "measured"
    # the full check document is there too
    assert doc["check_schema"] == "fitcheck.check/1"
    for key in ("model", "request", "machine", "estimate", "verdict", "alternatives", "speed"):
        assert key in doc
    m = doc["measured"]
    assert m["peak_bytes"] == m["peak_rss_bytes"] > 0
    assert [p["phase"] for p in m["phases"]] == ["build", "prefill", "generate"]
    assert doc["run"]["prompt_tokens"] == 248 and doc["run"]["new_tokens"] == 8
    # baseline excluded: the weights read as the weights (0.17 GiB), not the 0.3+ GiB of interpreter + torch
    weights = doc["estimate"]["components"]["weights"]
    assert m["baseline_bytes"] > 100 * MiB
    assert 0.9 * weights < m["components"]["weights"] < weights + 40 * MiB
    assert m["components"]["kv_cache"] == doc["comparison"][1]["estimated_bytes"]   # counted == formula
    assert {p["name"] for p in doc["comparison"]} == {"weights", "kv_cache", "peak"}
    assert doc["versions"]["torch"] and doc["measured_verdict"]["status"] == "fits"
    # a receipt was written, and `--receipts` lists it with its error
    (receipt,) = list(receipts.read())
    assert receipt["model"] == doc["model"]["id"] and receipt["measured"]["peak_bytes"] == m["peak_bytes"]
    listing = CliRunner().invoke(cli, ["measure", "--receipts"])
    assert listing.exit_code == 0 and f"{receipt['error_pct']:+.1f} %" in listing.output


def test_out_of_memory_is_exit_1_with_the_measured_verdict():
    code, doc = _measure(TINY, "-p", "fp32", "--context", "256", "--memory-limit", "60MiB")
    assert code == 1 and doc["exit_code"] == 1 and doc["status"] == "out_of_memory"
    assert doc["measured_verdict"]["status"] == "does_not_fit" and "--memory-limit" in doc["reason"]
    assert doc["measured"]["peak_bytes"] > 60 * MiB   # the guard's last reading, above the limit
    # the estimate fits this machine; the alternatives are what fits the 60 MiB the run had
    assert doc["verdict"]["status"] == "fits" and doc["alternatives"]
    runtime = sum(c["bytes"] for c in doc["estimate"]["devices"][0]["breakdown"] if c["counted_in"] == "runtime")
    assert all(a["total_bytes"] - runtime < 60 * MiB for a in doc["alternatives"])
    assert not list(receipts.read())[0]["error_pct"]  # receipted, without an error figure


def test_refused_when_the_estimate_exceeds_the_machine_by_far():
    code, doc = _measure(TINY, "-p", "fp32", "--context", "256", "--batch", "100000")
    assert code == 1 and doc["status"] == "refused" and "--force" in doc["reason"] and doc["run"]["wall_s"] is None


def test_time_limit_is_exit_3():
    res = CliRunner().invoke(cli, ["measure", TINY, "-p", "fp32", "--context", "256", "--time-limit", "1", "--json"])
    assert res.exit_code == 3 and json.loads(res.output)["status"] == "timeout"


# The estimate already covers these CPU cases (benchmarks/results/cpu-2026-11-30.csv): the measured
# peak RSS must be within 10 % of the estimate.  Inference: Qwen2.5-0.5B's real layer shapes, 2 of its
# 24 layers; training: full fine-tuning of the tiny config, long enough that activations dominate.
@pytest.mark.parametrize("args", [
    ("Qwen/Qwen2.5-0.5B", "--layers", "2", "-p", "fp32", "--context", "1024"),
    (TINY, "--mode", "full", "-p", "fp32", "--seq-len", "512", "--batch", "2"),
], ids=["inference-qwen05-L2-fp32", "full-tiny-fp32"])
def test_measured_peak_within_10_percent_of_the_estimate(args):
    code, doc = _measure(*args)
    assert code == 0, doc["reason"]
    (peak,) = [p for p in doc["comparison"] if p["name"] == "peak"]
    assert abs(peak["error_pct"]) <= 10, peak


def test_bitsandbytes_build_path_with_a_fake_bitsandbytes(monkeypatch):
    """The nf4 build (CUDA only in real runs) with a fake bitsandbytes, on the CPU: which layers are
    replaced, that nothing stays on the meta device, and that no 16-bit copy of the whole model is made."""
    import sys
    import types

    import torch

    from fitcheck.measure import workload as W
    from fitcheck.measure.hf_config import spec_to_hf_config
    from fitcheck.measure.job import Job
    from fitcheck.model.resolve import resolve_model

    made: list[int] = []

    class Params4bit:
        def __init__(self, data, requires_grad=False, compress_statistics=True, quant_type="nf4"):
            made.append(data.numel())
            self.packed = data.numel() // 2

        def to(self, device):   # bitsandbytes quantizes on the move to the GPU: 4 bits per weight
            return torch.nn.Parameter(torch.zeros(self.packed, 1, dtype=torch.uint8, device=device),
                                      requires_grad=False)

    class Linear4bit(torch.nn.Module):
        def __init__(self, in_features, out_features, bias=True, compute_dtype=None, compress_statistics=True,
                     quant_type="fp4", device=None):
            super().__init__()
            self.in_features, self.out_features, self.bias = in_features, out_features, None

    for cls in (Params4bit, Linear4bit):
        cls.__module__ = "bitsandbytes.nn.modules"
    fake = types.ModuleType("bitsandbytes")
    fake.nn = types.SimpleNamespace(Params4bit=Params4bit, Linear4bit=Linear4bit)
    monkeypatch.setitem(sys.modules, "bitsandbytes", fake)

    spec = resolve_model(TINY).spec
    job = Job(hf_config=spec_to_hf_config(spec), device="cpu", precision="nf4", mode="inference", batch=1,
              prompt_tokens=8, new_tokens=1)
    model, counted = W.build_model(job, W.make_config(job.hf_config))
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert [type(m).__name__ for m in linears] == ["Linear"]            # only lm_head stays a float Linear
    assert sum(isinstance(m, Linear4bit) for m in model.modules()) == 7 * spec.num_layers
    assert not any(t.is_meta for t in list(model.parameters()) + list(model.buffers()))
    assert max(made) == spec.intermediate_size * spec.hidden_size      # one layer's matrix at a time
    assert model.lm_head.weight.dtype == torch.bfloat16 and float(model.model.norm.weight.detach()[0]) == 1.0


def test_forced_past_its_estimate_it_ends_in_its_own_out_of_memory_under_the_limit():
    """On a machine with 1.2 GiB available, a request the estimate says needs ~4.8 GiB is refused at once; with
    --force it runs under the default limit (available less the headroom) and ends in its own OUT OF MEMORY."""
    from dataclasses import replace

    from fitcheck.measure.document import measure_document
    from fitcheck.measure.run import MeasureOptions, measure_inference
    from fitcheck.probe import probe

    here = probe()
    small = replace(here, memory=replace(here.memory, available_bytes=int(1.2 * 2**30)))
    kwargs = {"machine": small, "precision": "fp32", "context": 256, "batch": 256, "device": "cpu"}
    refused = measure_inference(TINY, **kwargs)
    assert refused.status == "refused" and refused.run is None and "--force" in refused.reason
    forced = measure_inference(TINY, options=MeasureOptions(force=True), **kwargs)
    doc = measure_document(forced)
    assert forced.status == "out_of_memory" and forced.exit_code == 1, forced.reason
    limit = doc["run"]["memory_limit"]
    assert limit["host_bytes"] < 1.2 * 0.9 * 2**30 and "headroom" in limit["source"]
    assert limit["address_space_bytes"] and doc["run"]["forced"]
    assert doc["measured_verdict"]["status"] == "does_not_fit"
