"""`fitcheck MODEL` / `fitcheck check MODEL`: exit codes, the JSON contract, bad input."""

import json

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli

# The JSON document's key set is a contract (README and schemas/check.schema.json document it): within
# a schema version keys are only added (with a CHANGELOG entry); removing or renaming one needs a new version.
TOP_KEYS = {"schema", "fitcheck_version", "model", "request", "machine", "estimate", "verdict", "alternatives",
            "speed", "cost", "software", "requirements", "exit_code", "launch", "download",
            "better_layout", "chosen"}
# "download" (fitcheck.render.download): what the plan downloads, where it lands, the free disk there.
DOWNLOAD_KEYS = {"download_bytes", "checkpoint_bytes", "format", "repo", "exact", "basis", "already_at", "place",
                 "download_dir", "disk_free_bytes", "status", "reason", "saves"}
SAVES_KEYS = {"bytes_per_checkpoint", "weights_bytes", "optimizer_bytes", "detail", "output_dir", "disk_free_bytes"}
# "launch": what to run on each node, empty on one machine (tests/test_multi_node.py).
# "software" (fitcheck.render.software): null with --profile; tests/estimate/test_compat.py locks its keys.
# "cost" (fitcheck.render.cost): null for a machine neither owned nor rented; "run" only with --tokens.
COST_KEYS = {"kwh_price_usd", "kwh_price_source", "amortize_years", "hours_per_day", "owned", "usd_per_hour",
             "power_watts", "purchase_usd", "energy_kwh_per_million_tokens", "electricity_usd_per_million_tokens",
             "amortized_usd_per_million_tokens", "usd_per_million_tokens", "run"}
RUN_KEYS = {"tokens", "hours", "usd", "basis", "energy_kwh", "electricity_usd", "amortized_usd"}
MODEL_KEYS = {"query", "id", "source", "note", "architecture", "params_total", "params_active", "generic",
              "stored_format", "stored_file_type"}
REQUEST_KEYS = {"mode", "precision", "context", "batch", "prompt_tokens", "kv_dtype", "engine", "device", "gpus", "nodes",
                "expert_parallel", "layout", "gpu_layers", "cpu_moe", "cpu_offload_gb", "gpu_memory_utilization",
                "headroom_pct"}
ESTIMATE_KEYS = {"devices", "components", "peak_allocated_bytes", "peak_reserved_bytes", "total_bytes", "facts",
                 "assumptions", "notes"}
DEVICE_KEYS = {"device", "kind", "components", "breakdown", "peak_allocated_bytes", "peak_reserved_bytes", "total_bytes"}
VERDICT_KEYS = {"status", "exit_code", "summary", "reasons", "max_context", "max_batch", "devices"}
ALT_KEYS = {"title", "status", "cost", "changes", "total_bytes", "devices", "fitcheck_command", "engine_command",
            "download_bytes", "speed"}
SPEED_KEYS = {"device", "engine", "precision", "batch", "at_context", "decode_tokens_per_s", "per_sequence_tokens_per_s",
              "prefill_tokens_per_s", "bound", "bytes_per_step", "bandwidth_bytes_per_s", "ram_bandwidth_source",
              "assumptions", "unknown", "best_device", "communication", "kv_cache_copies"}
BEST_DEVICE_KEYS = {"choice", "reason", "gpu", "cpu"}


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_json_contract_key_set():
    r = run("qwen-7b", "--profile", "rtx-3060", "--context", "32768", "--strict", "--json")  # the default as it is
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output)
    assert set(doc) == TOP_KEYS and doc["chosen"] is None
    chosen = json.loads(run("qwen-7b", "--profile", "rtx-3060", "--context", "32768", "--json").output)["chosen"]
    assert set(chosen) == {"title", "default"} and set(chosen["default"]) == {"precision", "engine", "total_bytes",
                                                                              "summary"}
    assert doc["schema"] == "fitcheck.check/1"
    assert set(doc["model"]) == MODEL_KEYS
    assert set(doc["request"]) == REQUEST_KEYS
    assert set(doc["estimate"]) == ESTIMATE_KEYS
    assert set(doc["estimate"]["devices"][0]) == DEVICE_KEYS
    assert set(doc["verdict"]) == VERDICT_KEYS
    assert doc["alternatives"] and set(doc["alternatives"][0]) == ALT_KEYS
    assert set(doc["speed"]) == SPEED_KEYS
    assert set(doc["speed"]["best_device"]) == BEST_DEVICE_KEYS
    assert doc["cost"] is None and doc["software"] is None  # does not fit; a profile
    assert set(doc["download"]) == DOWNLOAD_KEYS and doc["download"]["saves"] is None
    assert doc["download"]["disk_free_bytes"] is None and doc["download"]["status"] == "unknown"  # no [disk]
    owned = json.loads(run("qwen-7b", "--profile", "rtx-4090", "--json").output)["cost"]
    assert set(owned) == COST_KEYS and owned["owned"] and owned["run"] is None
    rented = json.loads(run("qwen-7b", "--mode", "lora", "--tokens", "10M", "--profile", "h100-sxm", "--json").output)
    assert set(rented["cost"]) == COST_KEYS and set(rented["cost"]["run"]) == RUN_KEYS
    assert set(rented["download"]["saves"]) == SAVES_KEYS
    dev = doc["estimate"]["devices"][0]
    assert dev["peak_allocated_bytes"] <= dev["peak_reserved_bytes"] <= dev["total_bytes"]
    assert all(isinstance(v, int) for v in dev["components"].values())


def test_fits_exit_0_on_a_big_gpu():
    r = run("qwen-7b", "--profile", "h100-sxm")
    assert r.exit_code == 0, r.output
    assert "FITS" in r.output and "GPU0" in r.output


def test_does_not_fit_exit_1_with_alternatives_and_commands():
    r = run("llama-3.1-70b", "-p", "bf16", "--profile", "rtx-4090")
    assert r.exit_code == 1, r.output
    assert "DOES NOT FIT" in r.output
    assert "What fits instead" in r.output and "fitcheck " in r.output


def test_weights_left_to_fitcheck_are_the_best_that_fit_and_say_so():
    # issue 35 item 2: with --precision and --engine unset, the answer is for the best weights that fit here (as
    # `where` and `models --fits` answer), names them and the default's need; --strict, -p or --engine judge the
    # default as it is, exit 1
    r = run("qwen-7b", "--profile", "rtx-4060-laptop")
    assert r.exit_code == 0 and r.output.startswith("Verdict:  FITS"), r.output
    assert "Chosen:   q4_k_m with llama.cpp, the best that fits: the default, bf16 with transformers" in r.output
    assert "--precision bf16 --engine transformers asks for it" in r.output
    doc = json.loads(run("qwen-7b", "--profile", "rtx-4060-laptop", "--json").output)
    assert (doc["request"]["precision"], doc["request"]["engine"]) == ("q4_k_m", "llama.cpp")
    assert doc["chosen"]["default"]["precision"] == "bf16" and doc["chosen"]["default"]["total_bytes"] > 8 * 2**30
    pinned = json.loads(run("qwen-7b", "-p", "q4_k_m", "--engine", "llama.cpp", "--profile", "rtx-4060-laptop",
                            "--json").output)
    assert pinned["estimate"] == doc["estimate"] and pinned["chosen"] is None   # the same answer, pinned
    for asked in (["--strict"], ["-p", "bf16"], ["--engine", "transformers"]):
        r = run("qwen-7b", "--profile", "rtx-4060-laptop", *asked)
        assert r.exit_code == 1 and "DOES NOT FIT" in r.output and "Chosen:" not in r.output, asked


def test_tight_exits_0_but_1_with_strict():
    # Qwen2.5-7B bf16 on a 24 GB card: some context lands inside the 10 % headroom.
    for context in range(16384, 65537, 1024):
        r = run("qwen-7b", "--profile", "rtx-4090", "--context", str(context), "--json")
        if json.loads(r.output)["verdict"]["status"] == "tight":
            break
    else:
        pytest.fail("no tight context found")
    assert r.exit_code == 0
    strict = run("qwen-7b", "--profile", "rtx-4090", "--context", str(context), "--strict")
    assert strict.exit_code == 1 and "TIGHT" in strict.output


def test_unknown_free_memory_exits_3(tmp_path):
    profile = tmp_path / "m.toml"
    profile.write_text(
        'schema = "fitcheck.machine/1"\nname = "mystery"\nkind = "desktop"\n'
        '[memory]\ntotal_gib = 32\n'
        '[memory.unknown]\navailable_bytes = "not readable"\n'
        '[cpu]\nmodel = "x"\narchitecture = "x86_64"\nlogical_cores = 8\nphysical_cores = 4\n'
    )
    r = run("qwen-7b", "--profile", str(profile), "--device", "cpu")
    assert r.exit_code == 3, r.output
    assert "UNKNOWN" in r.output


@pytest.mark.parametrize("args, needle", [
    (["no-such-model-xyz"], "unknown model"),
    (["qwen-7b", "--context", "0"], "--context"),
    (["qwen-7b", "--precision", "int3"], "--precision"),
    (["qwen-7b", "--profile", "no-such-machine"], "profile"),
    (["qwen-7b", "--profile", "rtx-4090", "--precision", "q4_k_m", "--engine", "vllm"], "GGUF"),
])
def test_bad_input_exit_2_one_line_no_traceback(args, needle):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert needle.lower() in r.output.lower()


def test_check_subcommand_equals_shorthand():
    a = run("check", "qwen-7b", "--profile", "l4", "--json")
    b = run("qwen-7b", "--profile", "l4", "--json")
    assert json.loads(a.output)["estimate"] == json.loads(b.output)["estimate"]


def test_params_gives_a_generic_estimate():
    r = run("my-private-model", "--params", "7b", "--profile", "rtx-4090", "--json")
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.output)
    assert doc["model"]["generic"] is True
    assert 6.5e9 < doc["model"]["params_total"] < 7.5e9


def test_console_script_exit_codes_in_a_real_process():
    import subprocess
    import sys

    def code(*args):
        p = subprocess.run([sys.executable, "-m", "fitcheck", *args], capture_output=True, text=True)
        assert "Traceback" not in p.stderr
        return p.returncode, p.stderr
    assert code("qwen-7b", "--profile", "h100-sxm")[0] == 0
    assert code("llama-3.1-70b", "-p", "bf16", "--profile", "rtx-4090")[0] == 1
    rc, err = code("no-such-model-xyz")
    assert rc == 2 and err.count("\n") == 1 and "no model of that family is in the catalog" in err
