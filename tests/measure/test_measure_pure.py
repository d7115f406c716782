"""fitcheck measure without torch: jobs, figures, receipts, meters with fakes, the child protocol, CLI errors."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.errors import FitcheckError
from fitcheck.measure import INSTALL_LINE, job, missing_extra, receipts, require_extra
from fitcheck.measure.child import MARK_DONE, MARK_INFO, MARK_OOM, MARK_PHASE, _is_oom
from fitcheck.measure.figures import compared, estimate_device_entry, measured_figures
from fitcheck.measure.meter import CudaMeter, MpsMeter
from fitcheck.measure.runner import RunResult, parse_line
from fitcheck.pipeline import check as check_api
from fitcheck.profiles import load_profile
from fitcheck.render.check import check_document
from fitcheck.request import Request

TINY = str(Path(__file__).resolve().parents[1] / "fixtures" / "measure" / "tiny-llama")


def _cpu():
    return load_profile("laptop-16gb")


def _gpu():
    return load_profile("rtx-4090")


# ---- jobs ---------------------------------------------------------------------------------------
def test_inference_job_from_the_checks_plan():
    check = check_api(TINY, Request(precision="fp32", context=512, prompt_tokens=496,
                                                   engine="transformers"), _cpu())
    j = job.inference_job(check.spec, check.plan, "cpu", 16, None)
    assert (j.prompt_tokens, j.new_tokens, j.batch, j.dtype, j.mode) == (496, 16, 1, "float32", "inference")
    assert j.hf_config["model_type"] == "llama" and j.hf_config["num_hidden_layers"] == 4
    assert job.Job.from_json(j.to_json()) == j
    # the measured generate() samples as the estimate assumes (its decoding-step tensors)
    assert j.sampling == check.plan.sampling == "top-p"


@pytest.mark.parametrize("request_kwargs, message", [
    ({"precision": "q4_k_m", "engine": "llama.cpp"}, "--engine llama.cpp"),
    ({"precision": "awq", "engine": "transformers"}, "awq weights"),
    ({"precision": "nf4", "engine": "transformers"}, "nf4 weights on cpu"),
])
def test_what_a_transformers_run_cannot_do_is_refused(request_kwargs, message):
    machine = _gpu() if request_kwargs["precision"] == "awq" else _cpu()
    device = "cuda" if machine.gpus else "cpu"
    if request_kwargs["precision"] == "nf4":
        machine, device = _gpu(), "cpu"
    check = check_api(TINY, Request(context=512, **request_kwargs), machine)
    with pytest.raises(FitcheckError, match=message) as err:
        job.inference_job(check.spec, check.plan, device, 16, None)
    assert err.value.exit_code == 2


def test_training_job_and_its_refusals():
    check = check_api(TINY, Request(mode="lora", seq_len=128, lora_targets="attention",
                                                 device="cpu"), _cpu())
    j = job.training_job(check.spec, check.plan, "cpu", 2, None)
    assert j.lora_targets == ["q_proj", "k_proj", "v_proj", "o_proj"] and j.steps == 2 and j.fp32_adapters
    full = check_api(TINY, Request(mode="full", precision="bf16", seq_len=128, device="cpu"), _cpu())
    with pytest.raises(FitcheckError, match="master weights"):
        job.training_job(full.spec, full.plan, "cpu", 2, None)
    gpu = check_api(TINY, Request(mode="lora", seq_len=128, optimizer="adamw-8bit"), _gpu())
    with pytest.raises(FitcheckError, match="adamw-8bit on cpu"):
        job.training_job(gpu.spec, gpu.plan, "cpu", 2, None)
    cuda_job = job.training_job(gpu.spec, gpu.plan, "cuda", 2, None)
    assert cuda_job.optimizer == "adamw-8bit"
    from fitcheck.measure import require_job_libraries

    with pytest.raises(FitcheckError, match="bitsandbytes is needed") as err:
        require_job_libraries(cuda_job, lambda name: None if name == "bitsandbytes" else object())
    assert "pip install 'fitcheck[measure-cuda]'" in err.value.one_line()
    with pytest.raises(FitcheckError, match="needs peft"):
        require_job_libraries(j, lambda name: None)


def test_device_for_machine():
    assert job.device_for(_cpu(), "auto") == "cpu"
    assert job.device_for(_gpu(), "auto") == "cuda"
    assert job.device_for(_gpu(), "cpu") == "cpu"
    assert job.device_for(load_profile("macbook-pro-m3-max-64gb"), "auto") == "mps"
    with pytest.raises(FitcheckError):
        job.device_for(_cpu(), "gpu")


# ---- figures ------------------------------------------------------------------------------------
def _phase(name, peak, steady, **extra):
    return {"phase": name, "start_bytes": 0, "peak_bytes": peak, "steady_bytes": steady, "wall_s": 0.1,
            "counted": extra.pop("counted", {}), **extra}


def test_cpu_figures_take_the_highest_phase_and_the_counted_parts():
    phases = [_phase("build", 100, 90), _phase("prefill", 150, 120, counted={"kv_cache_bytes": 10}),
              _phase("generate", 170, 95)]
    m = measured_figures("cpu", {"baseline_bytes": 400}, phases)
    assert m["peak_rss_bytes"] == m["peak_bytes"] == 170
    assert m["components"] == {"weights": 90, "kv_cache": 10, "gradients": None, "optimizer_states": None}
    assert "peak_allocated_bytes" not in m


def test_cuda_figures_subtract_the_baseline_and_compare_each_counter():
    phases = [_phase("build", 1000, 1000, peak_reserved_bytes=1100 + 2, device_used_peak_bytes=1600),
              _phase("step1", 3000, 1200, peak_reserved_bytes=3500 + 2, device_used_peak_bytes=4100,
                     counted={"grad_bytes": 500, "optimizer_state_bytes": 800})]
    m = measured_figures("cuda", {"baseline_bytes": 512, "baseline_reserved_bytes": 2, "context_bytes": 500}, phases)
    assert (m["peak_allocated_bytes"], m["peak_reserved_bytes"], m["device_used_bytes"], m["peak_bytes"]) == \
        (3000, 3500, 4100, 4100)
    est = {"components": {"weights": 1000, "gradients": 0, "optimizer_states": 800}, "peak_allocated_bytes": 2900,
           "peak_reserved_bytes": 3300, "total_bytes": 4000}
    pairs = {p.name: p for p in compared("cuda", m, est, {"gradient_bytes": 500}, "full")}
    assert pairs["peak_allocated"].estimated_bytes == 2900 and pairs["device_used"].estimated_bytes == 4000
    assert pairs["peak"].measured_bytes == 4100 and pairs["peak"].error_pct == pytest.approx(-2.44, abs=0.01)
    assert pairs["gradients"].estimated_bytes == 500   # from the facts when the peak comes before them


def test_cuda_figures_without_nvml_add_the_context_to_reserved():
    phases = [_phase("build", 1000, 1000, peak_reserved_bytes=1202)]
    m = measured_figures("cuda", {"baseline_bytes": 0, "baseline_reserved_bytes": 2, "context_bytes": 300}, phases)
    assert m["device_used_bytes"] is None and m["peak_bytes"] == 1200 + 300


# ---- meters with fakes --------------------------------------------------------------------------
class _FakeCuda:
    def __init__(self):
        self.allocated, self.reserved, self.peak, self.peak_reserved = 0, 0, 0, 0
        self.total, self.used = 24 * 2**30, 0

    def init(self):
        self.used += 500 * 2**20   # the CUDA context

    def synchronize(self):
        pass

    def memory_allocated(self):
        return self.allocated

    def memory_reserved(self):
        return self.reserved

    def max_memory_allocated(self):
        return self.peak

    def max_memory_reserved(self):
        return self.peak_reserved

    def reset_peak_memory_stats(self):
        self.peak, self.peak_reserved = self.allocated, self.reserved

    def mem_get_info(self):
        return self.total - self.used - self.reserved, self.total

    def alloc(self, n):
        self.allocated += n
        self.reserved += n
        self.peak = max(self.peak, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)


class _FakeTorch:
    def __init__(self):
        self.cuda = _FakeCuda()

    def empty(self, *args, **kwargs):
        self.cuda.alloc(512)
        return object()


def test_cuda_meter_with_a_fake_torch_and_nvml():
    torch = _FakeTorch()
    other_process = 1 * 2**30
    torch.cuda.used = other_process   # the device is shared: NVML and mem_get_info see the other process too
    meter = CudaMeter(torch_module=torch, used_bytes=lambda: torch.cuda.used + torch.cuda.reserved)
    meter.start()
    meter.take_baseline()
    assert meter.used_before_bytes == other_process
    assert meter.context_bytes == 500 * 2**20
    meter.begin("build")
    torch.cuda.alloc(2 * 2**30)
    reading = meter.end()
    meter.stop()
    assert reading.peak_bytes == 2 * 2**30          # the first block (baseline) excluded
    assert reading.device_used_peak_bytes == 500 * 2**20 + 2 * 2**30 + 512   # context included, other process not
    m = measured_figures("cuda", {"baseline_bytes": meter.baseline_bytes,
                                  "baseline_reserved_bytes": meter.baseline_reserved_bytes,
                                  "context_bytes": meter.context_bytes}, [reading.as_dict()])
    assert m["peak_reserved_bytes"] == 2 * 2**30 and m["peak_bytes"] == reading.device_used_peak_bytes


def test_mps_meter_with_a_fake_torch():
    class Mps:
        driver = 100

        def driver_allocated_memory(self):
            return self.driver

        def current_allocated_memory(self):
            return self.driver - 50

        def synchronize(self):
            pass

        def empty_cache(self):
            pass

    class Torch:
        mps = Mps()

    torch = Torch()
    meter = MpsMeter(torch_module=torch)
    meter.take_baseline()
    meter.begin("build")
    torch.mps.driver = 1100
    reading = meter.end()
    assert (reading.peak_bytes, reading.steady_bytes) == (1000, 1000)


# ---- the child's protocol and out-of-memory classification --------------------------------------
def test_protocol_lines_fill_the_run_result():
    r = RunResult(status="error")
    assert parse_line(r, "some library chatter") is None
    assert parse_line(r, f"{MARK_INFO} " + json.dumps({"baseline_bytes": 5})) == MARK_INFO
    assert parse_line(r, f"{MARK_PHASE} " + json.dumps({"phase": "build", "peak_bytes": 1})) == MARK_PHASE
    assert parse_line(r, f"{MARK_OOM} " + json.dumps({"error": "OutOfMemoryError: CUDA out of memory"})) == MARK_OOM
    assert parse_line(r, f"{MARK_DONE} " + json.dumps({"wall_s": 1})) == MARK_DONE
    assert r.info == {"baseline_bytes": 5} and r.phases[0]["phase"] == "build" and "CUDA" in r.error


def test_out_of_memory_classification():
    class OutOfMemoryError(RuntimeError):
        pass

    assert _is_oom(MemoryError()) and _is_oom(OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert _is_oom(RuntimeError("MPS backend out of memory")) and not _is_oom(ValueError("bad shape"))


# ---- receipts -----------------------------------------------------------------------------------
def _receipt(machine, request, **extra):
    return {"date": "2026-12-01T08:00:00Z", "model": "m/x", "request": request, "status": "measured",
            "machine_fingerprint": receipts.fingerprint(machine), "measured": {"peak_bytes": 2**30},
            "estimated": {"peak_bytes": 2**30 + 2**26}, "error_pct": 6.25, **extra}


def test_receipts_append_read_match(tmp_path):
    path = tmp_path / "r.jsonl"
    machine = _cpu()
    request = {"mode": "inference", "precision": "fp32", "context": 512, "prompt_tokens": 496, "headroom_pct": 10}
    receipts.append(_receipt(machine, request), path)
    path.open("a").write("not json\n" + json.dumps({"schema": "other"}) + "\n")
    receipts.append(_receipt(machine, {**request, "context": 1024}), path)
    assert len(list(receipts.read(path))) == 2
    # check's request: the whole context as prompt, another headroom: still this receipt
    found = receipts.matching("m/x", {**request, "prompt_tokens": 512, "headroom_pct": 20}, machine, path)
    assert found["request"]["context"] == 512
    assert receipts.matching("m/x", request, _gpu(), path) is None       # another machine
    assert receipts.matching("m/y", request, machine, path) is None
    assert "on this machine on 2026-12-01: 1.00 GiB peak (estimate 1.06 GiB, +6.2 %" \
        in receipts.receipt_line(found)


def test_fingerprint_ignores_free_memory_but_not_the_gpu():
    m = _gpu()
    g = replace(m.gpus[0], memory_free_bytes=1)
    assert receipts.fingerprint(replace(m, gpus=(g,))) == receipts.fingerprint(m)
    assert receipts.fingerprint(m) != receipts.fingerprint(_cpu())


def test_receipts_path_follows_the_environment(tmp_path):
    assert receipts.receipts_path({"FITCHECK_CACHE_DIR": str(tmp_path)}) == tmp_path / "receipts.jsonl"
    assert receipts.receipts_path({"XDG_CACHE_HOME": "/c"}) == Path("/c/fitcheck/receipts.jsonl")
    assert receipts.receipts_path({}, home="/h") == Path("/h/.cache/fitcheck/receipts.jsonl")


def test_check_mentions_a_matching_receipt(tmp_path, monkeypatch):
    monkeypatch.setenv("FITCHECK_CACHE_DIR", str(tmp_path))
    from fitcheck.probe import probe

    machine = probe()
    result = check_api(TINY, Request(precision="fp32", context=512, engine="transformers"), machine)
    doc = check_document(result)
    receipts.append(_receipt(machine, doc["request"], model=doc["model"]["id"]))
    out = CliRunner().invoke(cli, ["check", TINY, "-p", "fp32", "--context", "512", "--engine", "transformers"])
    assert "Measured on this machine on 2026-12-01: 1.00 GiB peak" in out.output
    other = CliRunner().invoke(cli, ["check", TINY, "-p", "fp32", "--context", "1024", "--engine", "transformers"])
    assert "Measured on" not in other.output


# ---- the CLI's bad input -------------------------------------------------------------------------
def test_missing_extra_is_exit_2_with_the_install_line(monkeypatch):
    assert missing_extra(lambda name: None) == ["torch", "transformers"]
    with pytest.raises(FitcheckError) as err:
        require_extra(lambda name: None)
    assert INSTALL_LINE in err.value.one_line()
    import fitcheck.measure as M

    monkeypatch.setattr(M, "REQUIRED", ("fitcheck_no_such_module",))
    res = CliRunner().invoke(cli, ["measure", TINY, "--context", "64"])
    assert res.exit_code == 2 and "pip install 'fitcheck[measure]'" in res.output


@pytest.mark.parametrize("args, message", [
    (["measure", TINY, "--engine", "vllm"], "runs transformers"),
    (["measure", TINY, "--gpus", "2"], "one device"),
    (["measure", TINY, "--seq-len", "64"], "applies to training"),
    (["measure", TINY, "--mode", "lora", "--new-tokens", "4"], "applies to inference"),
    (["measure", TINY, "--memory-limit", "lots"], "not a size"),
    (["measure"], "missing MODEL"),
    (["measure", "--export", "x.jsonl"], "--export goes with --receipts"),
])
def test_bad_input_is_exit_2(args, message):
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2 and message in res.output


def test_receipts_listing_without_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("FITCHECK_CACHE_DIR", str(tmp_path))
    res = CliRunner().invoke(cli, ["measure", "--receipts"])
    assert res.exit_code == 0 and "No receipts yet" in res.output
    receipts.append(_receipt(_cpu(), {"mode": "inference", "precision": "fp32", "context": 512, "batch": 1}))
    export = tmp_path / "export.jsonl"
    res = CliRunner().invoke(cli, ["measure", "--receipts", "--export", str(export)])
    assert res.exit_code == 0 and "+6.2 %" in res.output and "m/x" in res.output
    assert json.loads(export.read_text().splitlines()[0])["model"] == "m/x"


def test_measure_does_not_import_torch_in_the_cli_process():
    code = ("import sys; from click.testing import CliRunner; from fitcheck.cli import cli; "
            "CliRunner().invoke(cli, ['measure', '--receipts']); CliRunner().invoke(cli, ['measure', '--help']); "
            "print('torch' in sys.modules)")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_benchmark_comparison_reads_exported_receipts(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.measure.compare import receipt_comparisons

    path = tmp_path / "export.jsonl"
    receipts.append(_receipt(_cpu(), {"mode": "inference", "precision": "fp32"}, device="cpu"), path)
    receipts.append(_receipt(_cpu(), {"mode": "full"}, status="out_of_memory"), path)
    (c,) = receipt_comparisons(path)
    assert c.component == "receipt peak (cpu)" and c.measured == 2**30 and c.error_pct == pytest.approx(6.25)


def test_the_action_has_an_opt_in_measure_step(tmp_path):
    import os
    import subprocess

    yaml = pytest.importorskip("yaml")
    action = yaml.safe_load((Path(__file__).resolve().parents[2] / "action.yml").read_text())
    assert action["inputs"]["measure"]["default"] == "false"
    install = next(s for s in action["runs"]["steps"] if s.get("name") == "Install fitcheck")
    assert "[hub,measure]" in install["run"] and install["env"] == {"FITCHECK_MEASURE": "${{ inputs.measure }}"}
    step = next(s for s in action["runs"]["steps"] if s.get("name") == "fitcheck measure")
    assert step["if"] == "inputs.measure == 'true'"
    env = {**os.environ, "FITCHECK_ACTION_PYTHON": sys.executable, "INPUT_MODEL": TINY,
           "INPUT_ARGS": "--engine 'vllm'", "INPUT_MEASURE_OUTPUT": str(tmp_path / "m.json")}
    p = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "fitcheck measure " in p.stdout and "runs transformers" in p.stderr
    p = subprocess.run(["bash", "-e", "-c", step["run"]], env={**env, "INPUT_MODEL": ""}, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "needs the model input" in p.stdout


def _fake_result(status, phases, reason=""):
    from fitcheck.measure.run import MeasureOptions, MeasureResult, _kv_after_prefill

    check = check_api(TINY, Request(precision="fp32", context=256, prompt_tokens=240,
                                                   engine="transformers"), _cpu())
    run = RunResult(status=status, info={"baseline_bytes": 300 * 2**20, "device_name": "CPU", "torch": "2.13"},
                    phases=phases, error=reason, wall_s=3.0)
    from fitcheck.measure.figures import compared as pairs_of

    result = MeasureResult(check=check, device="cpu", status=status, job=job.inference_job(
        check.spec, check.plan, "cpu", 16, None), run=run, reason=reason, options=MeasureOptions(), date="2026-12-01")
    result.measured = measured_figures("cpu", run.info, phases)
    doc = check_document(check)
    if status == "measured":
        result.pairs = pairs_of("cpu", result.measured, estimate_device_entry(doc, "cpu"), doc["estimate"]["facts"],
                                "inference", _kv_after_prefill(check))
    return result


def test_document_contract_and_table():
    from fitcheck.measure.document import measure_document, render_measure

    w = 170 * 2**20
    result = _fake_result("measured", [_phase("build", w, w), _phase("prefill", w + 9 * 2**20, w + 2**20,
                                                                     counted={"kv_cache_bytes": 2 * 2**20}),
                                       _phase("generate", w + 12 * 2**20, w)])
    doc = measure_document(result)
    check_keys = set(check_document(result.check))
    assert set(doc) == check_keys | {"check_schema", "status", "exit_code", "reason", "run", "versions", "measured",
                                     "comparison", "measured_verdict"}
    assert doc["schema"] == "fitcheck.measure/1" and doc["exit_code"] == 0
    assert set(doc["run"]) == {"device", "device_name", "prompt_tokens", "new_tokens", "seq_len", "steps", "layers",
                               "time_limit_s", "memory_limit_bytes", "memory_limit", "forced", "wall_s", "date"}
    assert {"peak_bytes", "peak_rss_bytes", "baseline_bytes", "components", "phases"} <= set(doc["measured"])
    assert set(doc["comparison"][0]) == {"name", "measured_bytes", "estimated_bytes", "error_pct", "what"}
    json.dumps(doc)
    table = render_measure(result, doc)
    assert "Measured: a prefill of 240 tokens, then 16 generated on cpu" in table and "Measured verdict: RAN" in table


def test_a_shallower_run_gets_its_own_receipt_model():
    from dataclasses import replace as dc_replace

    from fitcheck.measure.document import measure_document
    from fitcheck.measure.run import MeasureOptions, receipt_of

    w = 170 * 2**20
    result = _fake_result("measured", [_phase("build", w, w)])
    assert not receipt_of(result, measure_document(result))["model"].endswith("layers)")
    result.options = dc_replace(MeasureOptions(), layers=2)
    assert receipt_of(result, measure_document(result))["model"].endswith(" (2 layers)")


def test_out_of_memory_document_and_table():
    from fitcheck.measure.document import measure_document, render_measure

    result = _fake_result("out_of_memory", [], "resident memory passed the 0.06 GiB limit (--memory-limit)")
    doc = measure_document(result)
    assert doc["exit_code"] == 1 and doc["measured_verdict"]["status"] == "does_not_fit"
    assert "Measured verdict: OUT OF MEMORY" in render_measure(result, doc)


def test_ci_installs_the_cpu_torch_wheel_then_runs_readmes_test_command():
    root = Path(__file__).resolve().parents[2]
    first, last = [ln for ln in (root / ".ci" / "run").read_text().splitlines() if "pip install" in ln]
    assert "'torch==2.13.0+cpu' transformers peft" in first
    readme = (root / "README.md").read_text()
    test_command = readme.split("Run the tests:", 1)[1].split("```sh\n", 1)[1].split("\n", 1)[0]
    assert last == test_command and "torch" not in last


def test_full_fine_tuning_is_measured_as_a_plain_loop(monkeypatch):
    import fitcheck.measure.run as R

    seen = {}

    def fake_measure(check, device, job_for, options, recheck=None):
        seen["job"], seen["check"] = job_for(None), check
        return None

    monkeypatch.setattr(R, "_measure", fake_measure)
    R.measure_training(TINY, Request(mode="full", precision="bf16", seq_len=64, device="cpu"), machine=_cpu())
    assert seen["job"].mode == "full" and not seen["job"].fp32_adapters
    (a,) = [a for a in seen["check"].estimate.assumptions if a.name == "master_weights"]
    assert a.value == "none" and "plain PyTorch loop" in a.why


def test_the_cli_defaults_are_the_apis():
    from fitcheck.cli.measure_cmd import measure
    from fitcheck.measure.run import DEFAULT_TIME_LIMIT_S

    defaults = {p.name: p.default for p in measure.params}
    assert defaults["new_tokens"] == job.DEFAULT_NEW_TOKENS
    assert defaults["steps"] == job.DEFAULT_STEPS
    assert defaults["time_limit"] == DEFAULT_TIME_LIMIT_S


# ---- safety: refusal and the memory limit every run goes under ------------------------------------
def _check_on(available_gib: float, **kwargs):
    machine = _cpu()
    machine = replace(machine, memory=replace(machine.memory, available_bytes=int(available_gib * 2**30)))
    return check_api(TINY, Request(precision="fp32", context=256, prompt_tokens=240, engine="transformers",
                                   **kwargs), machine)


def test_measure_refuses_what_the_estimate_does_not_call_fits_unless_forced():
    from fitcheck.measure.run import MeasureOptions, _refusal, memory_limit

    fits, too_big = _check_on(8.0), _check_on(8.0, batch=100_000)
    assert fits.verdict.status == "fits" and too_big.verdict.status == "does_not_fit"
    limit = memory_limit(too_big, "cpu", MeasureOptions())
    assert _refusal(fits, MeasureOptions(), memory_limit(fits, "cpu", MeasureOptions())) == ""
    reason = _refusal(too_big, MeasureOptions(), limit)
    assert "DOES NOT FIT" in reason and "--force" in reason
    # a --memory-limit does not lift the refusal (it used to): only --force does, and it still runs under the limit
    assert _refusal(too_big, MeasureOptions(memory_limit_bytes=2**20), limit)
    assert _refusal(too_big, MeasureOptions(force=True), limit) == ""
    # a tight fit is refused too: the estimate's error could take it over
    tight = next(c for c in (_check_on(g / 100) for g in range(20, 400)) if c.verdict.status == "tight")
    assert "TIGHT" in _refusal(tight, MeasureOptions(), memory_limit(tight, "cpu", MeasureOptions()))


def test_every_run_has_a_memory_limit_below_what_is_available():
    from fitcheck.measure.run import MeasureOptions, memory_limit

    check = _check_on(8.0)
    runtime = sum(c.bytes for c in check.estimate.cpu_device.components if c.counted_in == "runtime")
    limit = memory_limit(check, "cpu", MeasureOptions())
    assert limit.device_bytes == limit.host_bytes == int(8 * 2**30 * 0.9) - runtime
    assert "headroom" in limit.source
    given = memory_limit(check, "cpu", MeasureOptions(memory_limit_bytes=2**30))
    assert (given.host_bytes, given.source) == (2**30, "--memory-limit")
    capped = memory_limit(check, "cpu", MeasureOptions(memory_limit_bytes=64 * 2**30))
    assert capped.host_bytes == limit.host_bytes and "capped" in capped.source
    # RAM not known: no limit can be set, so the run is refused with a way out
    from fitcheck.machine import Unknown

    unknown = replace(check, machine=replace(check.machine, memory=replace(
        check.machine.memory, available_bytes=Unknown("no /proc/meminfo"))))
    assert memory_limit(unknown, "cpu", MeasureOptions()) is None


def test_the_address_space_limit_stops_one_allocation_past_it(tmp_path):
    """A single allocation far past the limit (which the resident-memory guard cannot see coming) fails in the
    measuring process as a MemoryError: reported as out of memory, the kernel's OOM killer never involved."""
    import subprocess

    if not Path("/proc/self/statm").exists():
        pytest.skip("Linux only")
    code = ("from fitcheck.measure.child import _limit_address_space, _is_oom\n"
            "from fitcheck.measure.job import Job\n"
            "j = Job(hf_config={}, device='cpu', precision='fp32', mode='inference', host_limit_bytes=64 * 2**20)\n"
            "assert _limit_address_space(j)\n"
            "try:\n    bytearray(8 * 2**30)\nexcept MemoryError as e:\n    print('oom', _is_oom(e))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "oom True", out.stderr
    assert _is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 bytes"))
