"""Published llama.cpp load logs (benchmarks/data/llamacpp_load_logs.csv) against the llama.cpp estimate,
buffer by buffer, and the source rules behind it (fitcheck/engines/llama_cpp/buffers.py)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import llamacpp_logs as L  # noqa: E402
from fitcheck.engines import estimate_inference  # noqa: E402
from fitcheck.engines.llama_cpp import buffers as LC  # noqa: E402
from fitcheck.engines.llama_cpp import llama_cpp_devices  # noqa: E402
from fitcheck.model.resolve import resolve_model  # noqa: E402

MIB = 2**20
ROWS = {r["id"]: r for r in L.read_rows()}
COMPARISONS = L.comparisons()
# |error| limits per buffer, in percent (the worst row today in brackets): the KV cache, the model buffers
# and the host buffers follow exact rules; the compute buffer is the graph allocator's layout.
LIMITS = {
    "KV (GPUs)": 0.1,                 # (0.00)
    "KV (host)": 0.1,                 # (0.00)
    "model (GPUs)": 0.5,              # (0.01: tensor alignment)
    "model (host)": 0.5,              # (0.00)
    "compute + output (host)": 0.5,   # (0.07: the host buffers' last 0.01 MiB)
    "compute (first GPU)": 2.0,       # (1.39: gpt-oss-20b on Metal)
    "device total (GPU)": 2.0,        # (1.39)
}


def test_every_row_names_its_source_and_its_settings():
    assert len(ROWS) == len(L.read_rows()) >= 13
    for rid, r in ROWS.items():
        assert r["source"].startswith("https://github.com/"), rid
        gpus = int(r["gpus"])
        for col in ("model_gpu_mib", "kv_gpu_mib", "compute_gpu_mib"):
            assert len(L._mibs(r[col])) in (0, gpus), (rid, col)
        assert r["flash_attn"] in ("", "0", "1"), rid
        assert r["swa_cache"] in ("", "0", "1") and r["embeddings"] in ("", "0", "1"), rid


@pytest.mark.parametrize("component", sorted(LIMITS))
def test_each_buffer_within_its_limit(component):
    comps = [c for c in COMPARISONS if c.component == component]
    assert comps, component
    for c in comps:
        assert abs(c.error_pct) <= LIMITS[component], (c.row, c.estimate_mib, c.log_mib)


def test_the_report_line_is_the_device_totals():
    errs = L.device_total_errors()
    assert len(errs) >= 8 and max(abs(e) for e in errs) <= LIMITS["device total (GPU)"]


def spec(name):
    return resolve_model(name).spec


# ---- the rules, against single logged figures ------------------------------------------------------
def test_no_flash_attention_scores_grow_with_the_context():
    # logdetective #106: Mistral-7B-v0.2, -c 2048 -> 164.00 MiB, -c 32768 -> 2144.00 MiB (scores 512 × n_ctx × 32
    # heads f32 + the f32 mask + four 512 × 4096 activations)
    m = spec("mistralai/Mistral-7B-Instruct-v0.2")
    for n_ctx, logged in ((2048, 164.00), (32768, 2144.00)):
        s = LC.LlamaCppSetup(n_ctx=n_ctx, flash_attn=False)
        assert LC.gpu_compute_bytes(m, s, holds_output=True) / MIB == pytest.approx(logged, abs=0.01)
        with_fa = LC.gpu_compute_bytes(m, replace(s, flash_attn=True), holds_output=True)
        assert with_fa < LC.gpu_compute_bytes(m, s, holds_output=True)


def test_flash_attention_leaves_the_logits():
    # issue #11337: Qwen2.5-32B, -c 32768, q8_0 cache, flash attention: 512 × 152064 f32 logits + 512 × 5120
    q = spec("Qwen/Qwen2.5-32B-Instruct")
    s = LC.LlamaCppSetup(n_ctx=32768, type_k="q8_0", type_v="q8_0")
    assert LC.gpu_compute_bytes(q, s, holds_output=True) / MIB == pytest.approx(307.00, abs=0.01)
    # the host makes the token embeddings and the f32 mask, flash attention or not: 10 + 64 MiB
    assert LC.host_compute_bytes(q, s, cpu_layers=0, output_on_cpu=False, has_gpu=True) / MIB == pytest.approx(74.01, abs=0.02)
    assert LC.kv_bytes(q, s) / MIB == pytest.approx(4352.00, abs=0.01)


def test_the_sliding_window_cache():
    # PR #17609: gpt-oss-20b, -c 4096: "SWA KV cache, size = 768 cells" (128 + 512, padded to 256), 12 layers
    g = spec("openai/gpt-oss-20b")
    s = LC.LlamaCppSetup(n_ctx=4096)
    assert LC.swa_cells(g, s) == 768
    assert LC.swa_cells(g, replace(s, n_ubatch=2048)) == 2304
    assert LC.swa_cells(g, replace(s, n_ctx=512)) == 512   # never more than the whole cache
    # the host: token embeddings (512 × 2880) and both f32 masks (4096 and 768 cells) -- "15.15 MiB"
    assert LC.host_compute_bytes(g, s, cpu_layers=0, output_on_cpu=False, has_gpu=True) / MIB == pytest.approx(15.15, abs=0.05)
    # Mistral-7B-v0.1 declares a window llama.cpp does not use: every layer keeps every cell
    assert LC.swa_cells(spec("mistralai/Mistral-7B-v0.1"), s) == 4096


def test_pipeline_parallelism_keeps_copies_of_the_inputs():
    # PR #6122: Command-R v01 over two GPUs, -c 4096, no flash attention: CUDA0 672.01 MiB, four copies of the
    # f32 mask and of the token embeddings beside the 512 MiB of scores
    c = spec("CohereForAI/c4ai-command-r-v01")
    s = LC.LlamaCppSetup(n_ctx=4096, flash_attn=False, gpus=2)
    assert LC.pipeline_copies(s, c.num_layers) == 4
    assert LC.pipeline_copies(replace(s, gpu_layers=c.num_layers), c.num_layers) == 1  # output on the CPU: off
    assert LC.pipeline_copies(replace(s, gpus=1), c.num_layers) == 1
    one = LC.gpu_compute_bytes(c, s, holds_output=False)
    four = LC.gpu_compute_bytes(c, s, holds_output=False, pipeline_copies=4)
    assert four / MIB == pytest.approx(672.01, abs=0.05) and four - one == 88 * MIB


def test_context_padding_by_release():
    assert LC.cells(LC.LlamaCppSetup(n_ctx=4000)) == 4096
    assert LC.cells(LC.LlamaCppSetup(n_ctx=4000, ctx_pad=LC.CTX_PAD_NO_FA_BEFORE_PR17046)) == 4000
    assert LC.cells(LC.LlamaCppSetup(n_ctx=4001, ctx_pad=32)) == 4032


def test_the_output_buffer_is_one_row_of_logits_per_sequence():
    m = spec("mistralai/Mistral-7B-Instruct-v0.2")
    assert LC.output_buffer_bytes(m, LC.LlamaCppSetup(n_ctx=2048)) / MIB == pytest.approx(0.12, abs=0.005)
    assert LC.output_buffer_bytes(m, LC.LlamaCppSetup(n_ctx=2048, n_seq=4)) == 4 * 32000 * 4


def test_the_cli_path_is_the_scored_path():
    # fitcheck's own plan goes through the same setup: -c context × batch, -np batch, 512-token micro-batch, -fa on
    from fitcheck.plan import resolve_inference
    from fitcheck.profiles import load_profile
    from fitcheck.request import Request

    m = spec("mistralai/Mistral-7B-Instruct-v0.2")
    plan = resolve_inference(Request(engine="llama.cpp", context=8192), m, load_profile("rtx-4090"))
    est = estimate_inference(m, plan)
    assert list(est.devices) == llama_cpp_devices(m, plan, LC.setup_from_plan(plan))
    gpu = est.devices[0]
    assert gpu.component("kv_cache") == 1024 * MIB
    # flash attention: no 512 × 8192 × 32 scores; the output phase (512 × 32000 logits) is not the peak
    assert gpu.component("activations") < 200 * MIB


def test_partial_offload_copies_the_output_matrix_for_the_prompt():
    # -ngl <= n_layer keeps output.weight in RAM; a 512-token micro-batch runs its matmul on the GPU (op offload)
    m = spec("mistralai/Mistral-7B-Instruct-v0.2")
    from fitcheck.plan import resolve_inference
    from fitcheck.profiles import load_profile
    from fitcheck.request import Request

    full = resolve_inference(Request(engine="llama.cpp"), m, load_profile("rtx-4090"))
    part = resolve_inference(Request(engine="llama.cpp", gpu_layers=16), m, load_profile("rtx-4090"))
    gpu_full = estimate_inference(m, full).devices[0].component("activations")
    gpu_part = estimate_inference(m, part).devices[0].component("activations")
    head = 32000 * 4096 * 6.5625 / 8            # the Q6_K output matrix of a Q4_K_M file
    logits = 512 * 32000 * 4 + 512 * 4096 * 4   # the output phase: f32 logits and the normed hidden state
    ffn = 512 * 4096 * 2 + 3 * 512 * 14336 * 4 + 2 * 512 * 4096 * 4  # f16 mask, gate/up/act, two hidden states
    assert gpu_full == pytest.approx(max(ffn, logits), rel=1e-6)  # the FFN phase is the peak with the layers
    assert gpu_part == pytest.approx(head + logits, rel=1e-3)     # the copied head and its logits are


def test_two_masks_and_head_width_activations_without_a_swa_cache():
    # ollama #6902 (September 2024): Gemma-2-27B, 4 x 2048 cells, no flash attention: CUDA0 578.00 MiB = scores
    # 512 x 8192 x 32 heads + two f32 masks (full and sliding, both 8192 wide before the SWA cache) + two
    # 512 x 4608 (n_embd) and two 512 x 4096 (32 heads x 128) activations; KV 2944 MiB: every layer every cell
    g = spec("google/gemma-2-27b-it")
    s = LC.LlamaCppSetup(n_ctx=8192, n_seq=4, flash_attn=False, ctx_pad=32, swa_cache=False, embeddings=True)
    assert LC.gpu_compute_bytes(g, s, holds_output=True) == (512 * 8192 * 32 + 2 * 512 * 8192
                                                             + 2 * 512 * 4608 + 2 * 512 * 4096) * 4
    assert LC.gpu_compute_bytes(g, s, holds_output=True) / MIB == pytest.approx(578.00, abs=0.01)
    assert LC.kv_bytes(g, s) / MIB == pytest.approx(2944.00, abs=0.01)
    assert LC.host_compute_bytes(g, s, cpu_layers=0, output_on_cpu=False, has_gpu=True) / MIB == pytest.approx(41.01, abs=0.02)
    # with the SWA cache (May 2025 on) the sliding layers keep 4 x 4096 + 512 cells, padded to 256
    # a unified cache (-np auto): GGML_PAD(4,096 × 4 + 512, 256); one stream per sequence (-np 4, what fitcheck's
    # commands pass): 4 × GGML_PAD(4,096 + 512, 256)
    assert LC.swa_cells(g, replace(s, n_ctx=32768, swa_cache=True, kv_unified=True)) == 16896
    assert LC.swa_cells(g, replace(s, n_ctx=32768, swa_cache=True)) == 4 * 4608
    assert LC.swa_cells(g, replace(s, swa_cache=True)) == 8192    # never more than the whole cache
    assert LC.kv_bytes(g, replace(s, n_ctx=32768, swa_cache=True)) < LC.kv_bytes(g, replace(s, n_ctx=32768))


def test_ollama_returns_embeddings_beside_the_logits():
    # ollama's runner creates its context with embeddings on (llama.go) and keeps the logits (patch
    # 05-embeddings): 4 x (152064 + 5120) f32 = "CUDA_Host output buffer size = 2.40 MiB" (ollama #9221)
    q = spec("Qwen/Qwen2.5-32B-Instruct")
    s = LC.LlamaCppSetup(n_ctx=8192, n_seq=4, embeddings=True)
    assert LC.output_buffer_bytes(q, s) == 4 * (152064 + 5120) * 4
    assert LC.output_buffer_bytes(q, replace(s, embeddings=False)) == 4 * 152064 * 4


def test_cpu_only_compute_buffer_is_the_attention_phase():
    # ollama #9496: Llama-3.1-8B on the CPU, 32384 cells (4 x 8096, padded to 32 without flash attention),
    # "CPU compute buffer size = 2119.26 MiB": scores 512 x 32384 x 32, the f32 mask, four 512 x 4096 tensors
    m = spec("meta-llama/Llama-3.1-8B-Instruct")
    s = LC.LlamaCppSetup(n_ctx=32384, n_seq=4, flash_attn=False, ctx_pad=32, gpus=0)
    assert LC.cells(s) == 32384
    assert LC.host_compute_bytes(m, s, cpu_layers=m.num_layers, output_on_cpu=True, has_gpu=False) / MIB == \
        pytest.approx(2119.26, abs=0.02)
