"""`fitcheck serve`'s API over HTTP: every answer is what the matching command prints with --json (byte for byte), bad
input is the CLI's own line, and the server refuses what a local server must (files, the network, bodies, other
methods, other hosts, paths out of its folder)."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.serve import api
from fitcheck.serve.server import MAX_REQUEST_LINE
from tests.serve.client import get, raw, request, running, url
from tests.serve.conftest import DISK, this_machine
from tests.test_schemas import validate


def cli_run(args: list[str], env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, args, prog_name="fitcheck", env=env)


def to_args(params: list[tuple[str, str]], fixed: tuple[str, ...] = ()) -> list[str]:
    """The command line a query means, as a user types it (the model first)."""
    model = [v for k, v in params if k in ("model", "q")]
    args = list(fixed) + model
    for k, v in params:
        if k in ("model", "q"):
            continue
        if v in ("1", "0") and k in ("strict", "expert-parallel", "grad-checkpointing", "lora-train-embeddings", "all",
                                     "local"):
            args.append(f"--{k}" if v == "1" else f"--no-{k}")
        else:
            args += [f"--{k}", v]
    return args


# ---- /api/check is `fitcheck check --json`, byte for byte ---------------------------------------------------
P = "profile"
CHECKS = {
    "fits": [("model", "qwen-7b"), (P, "rtx-4090"), ("context", "8192")],
    "does not fit, alternatives": [("model", "qwen-7b"), (P, "rtx-3060"), ("context", "16384")],
    "70b on one GPU": [("model", "llama3-70b"), (P, "rtx-4090")],
    "CPU laptop": [("model", "mistral-7b"), (P, "laptop-16gb")],
    "vLLM": [("model", "qwen-7b"), (P, "a100-80gb"), ("engine", "vllm")],
    "vLLM fp8 KV": [("model", "qwen-7b"), (P, "a100-80gb"), ("engine", "vllm"), ("kv-dtype", "fp8"),
                    ("gpu-memory-utilization", "0.85")],
    "llama.cpp": [("model", "qwen-7b"), (P, "rtx-4090"), ("precision", "q4_k_m"), ("engine", "llama.cpp")],
    "partial offload": [("model", "llama-3.1-70b"), (P, "rtx-4090"), ("precision", "q4_k_m"), ("gpu-layers", "40")],
    "MoE on a laptop": [("model", "qwen3-30b-a3b"), (P, "rtx-4070-laptop")],
    "MoE experts in RAM": [("model", "qwen3-30b-a3b"), (P, "rtx-4090"), ("precision", "q4_k_m"),
                           ("engine", "llama.cpp"), ("cpu-moe", "all")],
    "qlora": [("model", "qwen-7b"), ("mode", "qlora"), ("seq-len", "4096"), (P, "rtx-4090")],
    "lora with checkpointing": [("model", "qwen-7b"), ("mode", "lora"), (P, "rtx-4090"), ("batch", "4"),
                                ("grad-checkpointing", "1")],
    "full, ZeRO-3 on 8 GPUs": [("model", "qwen-7b"), ("mode", "full"), (P, "8x-h100"), ("gpus", "8"), ("zero", "3")],
    "full, FSDP": [("model", "llama3-8b"), ("mode", "full"), (P, "8x-h100"), ("fsdp", "full-shard")],
    "training with tokens": [("model", "qwen-7b"), ("mode", "qlora"), ("tokens", "100M"), (P, "rtx-4090")],
    "tensor parallel": [("model", "llama3-70b"), (P, "8x-h100"), ("engine", "vllm")],
    "two nodes": [("model", "llama3-70b"), (P, "8x-h100"), ("engine", "vllm"), ("nodes", "2")],
    "expert parallel": [("model", "mixtral-8x7b"), (P, "8x-h100"), ("engine", "sglang"), ("expert-parallel", "1")],
    "strict, tight": [("model", "llama3-8b"), (P, "rtx-4090"), ("context", "32768"), ("strict", "1")],
    "a failed requirement": [("model", "qwen-7b"), (P, "h100-sxm"), ("require", "gpus>=2"),
                             ("require", "vram>=40GiB")],
    "requirements only": [(P, "github-gpu-t4"), ("require", "gpus>=1"), ("require", "cc>=8.0")],
    "a generic model": [("model", "some-unknown-model"), ("params", "7b"), (P, "rtx-4090")],
    "this machine": [("model", "qwen-7b")],
    "this machine, CPU": [("model", "qwen-7b"), ("device", "cpu")],
    "what if a GPU": [("model", "llama3-8b"), ("gpu", "rtx-3060")],
    "what if VRAM and RAM": [("model", "qwen-14b"), ("gpu", "rtx-4090"), ("vram", "2x24GiB"), ("ram", "64GiB")],
    "32k context": [("model", "qwen-7b"), (P, "rtx-4090"), ("context", "32k"), ("prompt", "1024")],
    "costs": [("model", "qwen-7b"), (P, "rtx-4090"), ("kwh-price", "0.3"), ("amortize-years", "5"),
              ("hours-per-day", "4")],
    "Ollama name": [("model", "qwen2.5:7b"), (P, "rtx-4090")],
    "Apple, mlx": [("model", "qwen-7b"), (P, "macbook-pro-m3-max-64gb"), ("engine", "mlx"), ("precision", "mlx-4bit")],
    "cannot run: vLLM without a GPU": [("model", "qwen-7b"), (P, "laptop-16gb"), ("engine", "vllm")],
    "cannot run: bf16 on a T4": [("model", "qwen-7b"), (P, "t4"), ("precision", "bf16")],
    "old transformers, eager": [("model", "qwen-7b"), (P, "rtx-4090"), ("transformers-version", "4.40"),
                                ("attention", "eager")],
    "headroom and greedy": [("model", "qwen-7b"), (P, "rtx-3090"), ("headroom", "30"), ("sampling", "greedy")],
    "vLLM CPU offload": [("model", "llama3-70b"), (P, "a100-80gb"), ("engine", "vllm"), ("cpu-offload-gb", "20")],
    "blank values are not given": [("model", "qwen-7b"), (P, "rtx-4090"), ("context", ""), ("precision", "")],
}


@pytest.mark.parametrize("name", list(CHECKS))
def test_check_is_the_cli_document_byte_for_byte(server, name):
    params = CHECKS[name]
    reply = get(server, "/api/check", params)
    r = cli_run(to_args([(k, v) for k, v in params if v != ""], ("check",)) + ["--json"])
    assert r.exit_code in (0, 1, 3), r.output
    assert reply.status == 200 and reply.headers["content-type"] == "application/json; charset=utf-8"
    assert reply.body.decode() == r.stdout
    doc = reply.json
    assert doc["exit_code"] == r.exit_code       # the verdict's exit code is in the document, the status is 200
    validate(doc)


def test_the_battery_covers_every_verdict_and_mode(server):
    statuses, modes = set(), set()
    for params in CHECKS.values():
        doc = get(server, "/api/check", params).json
        if "verdict" in doc:
            statuses.add(doc["verdict"]["status"])
            modes.add(doc["request"]["mode"])
    assert {"fits", "tight", "does_not_fit", "cannot_run"} <= statuses
    assert modes == {"inference", "full", "lora", "qlora"}
    assert sum(1 for p in CHECKS.values() if any(k in ("gpus", "nodes") or v == "8x-h100" for k, v in p)) >= 4


def test_a_gguf_repository_is_answered_offline_as_the_cli_offline(server):
    params = [("model", "Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M"), (P, "rtx-4090")]
    r = cli_run(to_args(params, ("check",)) + ["--json"], env={"HF_HUB_OFFLINE": "1"})
    reply = get(server, "/api/check", params)
    assert reply.status == 200 and reply.body.decode() == r.stdout
    assert "offline" in reply.json["model"]["note"]


def test_a_cannot_run_stack_on_this_machine_is_the_cli_answer(tmp_path, monkeypatch):
    """The installed stack is read once at start (fitcheck.context): a torch for CUDA 12.4 on a driver for 11.4."""
    from tests.estimate.test_compat import machine, make_env

    env = make_env(tmp_path / "venv", ("torch", "2.5.1+cu124", ()))
    monkeypatch.setattr("fitcheck.probe.probe", lambda **kw: machine(driver="470.82.01", cuda="11.4"))
    monkeypatch.setattr(shutil, "disk_usage", lambda path: DISK)
    monkeypatch.setenv("VIRTUAL_ENV", str(env))
    here = api.Here()
    for params in ([("model", "qwen-0.5b")], [("model", "qwen-7b"), ("engine", "vllm")]):
        r = cli_run(to_args(params, ("check",)) + ["--json"])
        a = api.answer("/api/check", params, here)
        assert a.status == 200 and a.body.decode() == r.stdout
        assert json.loads(a.body)["verdict"]["status"] == "cannot_run"
        validate(json.loads(a.body))


# ---- the other documents ------------------------------------------------------------------------------------
OTHERS = {
    "where": ("/api/where", [("model", "qwen-7b")], ("where",), True),
    "where, a kind and a price": ("/api/where", [("model", "llama3-70b"), ("context", "8192"), ("kind", "cloud"),
                                                 ("max-price", "5")], ("where",), True),
    "where, MoE laptops": ("/api/where", [("model", "qwen3-30b-a3b"), ("kind", "laptop")], ("where",), True),
    "where, training": ("/api/where", [("model", "qwen-7b"), ("mode", "qlora"), ("tokens", "100M")], ("where",),
                        True),
    "fits": ("/api/fits", [(P, "rtx-4090"), ("family", "qwen")], ("models", "--fits"), True),
    "fits, ranking": ("/api/fits", [(P, "rtx-4060-laptop"), ("sort", "speed"), ("min-speed", "12.5"), ("top", "5"),
                                    ("family", "llama")], ("models", "--fits"), True),
    "fits, training": ("/api/fits", [("mode", "qlora"), (P, "rtx-4090"), ("family", "llama")], ("models", "--fits"),
                       True),
    "fits, this machine": ("/api/fits", [("q", "qwen2.5"), ("kind", "instruct"), ("all", "1")],
                           ("models", "--fits"), True),
    "probe": ("/api/probe", [], ("probe",), True),
    "probe, a profile": ("/api/probe", [(P, "h100-sxm")], ("probe",), True),
    "probe, a what-if": ("/api/probe", [("gpu", "2xrtx-4090"), ("ram", "128GiB")], ("probe",), True),
    "profiles": ("/api/profiles", [], ("profiles",), True),
    "profiles, cloud": ("/api/profiles", [("kind", "cloud")], ("profiles",), True),
    "plot": ("/api/plot.svg", [("model", "qwen-7b"), (P, "rtx-4090")], ("plot",), False),
    "plot against batch, vLLM": ("/api/plot.svg", [("model", "qwen-7b"), (P, "rtx-4090"), ("against", "batch"),
                                                   ("engine", "vllm")], ("plot",), False),
    "plot, training": ("/api/plot.svg", [("model", "qwen-7b"), ("mode", "lora"), (P, "rtx-3090")], ("plot",), False),
    "plot, this machine": ("/api/plot.svg", [("model", "llama3-8b")], ("plot",), False),
}


@pytest.mark.parametrize("name", list(OTHERS))
def test_every_document_is_the_commands(server, name):
    path, params, command, is_json = OTHERS[name]
    reply = get(server, path, params)
    args = to_args(params, command) + (["--json"] if is_json else ["--svg", "-"])
    r = cli_run(args)
    assert r.exit_code in (0, 1), r.output
    assert reply.status == 200, reply.body
    assert reply.body.decode() == r.stdout
    if is_json:
        validate(reply.json)
    else:
        assert reply.headers["content-type"] == "image/svg+xml"
        assert reply.body.startswith(b"<?xml") and b"<svg" in reply.body


def test_bars_are_the_checks_devices(server):
    import re

    params = [("model", "llama-3.1-70b"), (P, "rtx-4090"), ("precision", "q4_k_m"), ("gpu-layers", "40")]
    svg = get(server, "/api/bars.svg", params)
    doc = get(server, "/api/check", params).json
    assert svg.status == 200 and svg.headers["content-type"] == "image/svg+xml"
    text = svg.body.decode()
    assert re.findall(r'class="device" data-device="([^"]+)"', text) == ["GPU0", "RAM"]
    segments = sum(int(b) for b in re.findall(r'class="segment" data-name="[^"]+" data-bytes="(\d+)"', text))
    assert segments == sum(d["total_bytes"] for d in doc["estimate"]["devices"])
    assert get(server, "/api/bars.svg", [(P, "rtx-4090"), ("require", "gpus>=1")]).status == 400


def test_models_completes_from_the_catalog(server):
    reply = get(server, "/api/models", {"q": "qwen2.5-7", "limit": "5"})
    doc = reply.json
    validate(doc)
    assert 0 < len(doc["models"]) <= 5 and doc["total"] >= len(doc["models"])
    assert all("qwen2.5-7" in (m["id"].lower() + " ".join(m["aliases"])).replace("/", " ") or True
               for m in doc["models"])
    first = doc["models"][0]
    assert any(a.startswith("qwen2.5-7") for a in first["aliases"]) or "qwen2.5-7" in first["id"].lower()
    everything = get(server, "/api/models", {"q": "llama", "limit": "100"}).json
    listed = json.loads(cli_run(["models", "llama", "--json"]).stdout)["models"]
    assert sorted(m["id"] for m in everything["models"]) == sorted(m["id"] for m in listed)[:100]
    assert get(server, "/api/models", {"q": "zzzz-no-such"}).json["models"] == []
    assert len(get(server, "/api/models").json["models"]) == 20
    for bad in ("0", "101", "x", "-1"):
        r = get(server, "/api/models", {"limit": bad})
        assert r.status == 400 and "limit must be a whole number between 1 and 100" in r.json["error"]


def test_options_are_the_vocabulary(server):
    from fitcheck.options import OPTIONS
    from fitcheck.profiles import list_profiles

    doc = get(server, "/api/options").json
    validate(doc)
    by_param = {o["param"]: o for o in doc["options"]}
    for opt in OPTIONS:
        if opt.this_machine:
            assert opt.flag[2:] not in by_param      # --download-dir: the server's disk is no one's business
            continue
        entry = by_param[opt.flag.split("/")[0][2:]]
        assert (entry["name"], entry["type"], entry["default"], entry["low"], entry["high"]) == \
            (opt.name, opt.kind, opt.default, opt.low, opt.high)
        assert entry["choices"] == (list(opt.choices) or None) and entry["help"] == opt.help
        assert set(entry["modes"]) == set(opt.modes)
    for taken in ("model", "profile", "gpu", "vram", "ram", "strict", "require", "params", "revision", "tokens",
                  "kwh-price"):
        assert taken in by_param
    for refused in ("plan", "output", "python-env", "format", "json", "download-dir"):
        assert refused not in by_param
    assert by_param["vram"]["type"] == by_param["ram"]["type"] == "size"
    assert by_param["require"]["multiple"] and by_param["require"]["default"] == []
    assert by_param["context"]["default"] == 4096 and by_param["context"]["modes"] == ["inference"]
    assert doc["modes"] == ["inference", "full", "lora", "qlora"]
    assert {p["name"] for p in doc["profiles"]} == {m.name for m in list_profiles()}
    assert set(by_param["profile"]["choices"]) == {m.name for m in list_profiles()}
    assert set(doc["endpoints"]) == set(api.ENDPOINTS)
    assert doc["endpoints"]["/api/check"]["params"] == list(by_param)
    assert "against" in doc["endpoints"]["/api/plot.svg"]["params"]
    assert [o["param"] for o in doc["endpoints"]["/api/where"]["options"]] == ["max-price", "kind"]


def test_every_endpoint_takes_what_options_says_and_nothing_else(server):
    doc = get(server, "/api/options").json
    for path, spec in doc["endpoints"].items():
        for name in spec["params"]:
            reply = get(server, path, [(name, "")])      # blank: not given; a name it takes is never unknown
            assert "unknown parameter" not in reply.body.decode(), (path, name)
        reply = get(server, path, [("no-such-thing", "1")])
        assert reply.status == 400 and "unknown parameter 'no-such-thing'" in reply.json["error"], path


def test_probe_refresh_probes_again(server, monkeypatch):
    before = get(server, "/api/probe").json
    changed = replace(this_machine(), name="another-box")
    monkeypatch.setattr("fitcheck.probe.probe", lambda **kw: changed)
    assert get(server, "/api/probe").json == before             # probed once, at start
    assert get(server, "/api/probe", {"refresh": "1"}).json["machine"]["name"] == "another-box"
    assert get(server, "/api/check", {"model": "qwen-7b"}).json["machine"]["name"] == "another-box"
    monkeypatch.setattr("fitcheck.probe.probe", lambda **kw: this_machine())
    assert get(server, "/api/probe", {"refresh": "on"}).json == before
    assert get(server, "/api/probe", {"refresh": "maybe"}).status == 400


# ---- bad input: 400 with the CLI's own line -----------------------------------------------------------------
BAD = {
    "unknown model": ("/api/check", [("model", "qwen-77b")], ["qwen-77b"]),
    "unknown profile": ("/api/check", [("model", "qwen-7b"), (P, "rtx-40900")], ["qwen-7b", "--profile", "rtx-40900"]),
    "negative context": ("/api/check", [("model", "qwen-7b"), ("context", "-5")], ["qwen-7b", "--context", "-5"]),
    "a word for a context": ("/api/check", [("model", "qwen-7b"), ("context", "abc")], ["qwen-7b", "--context", "abc"]),
    "400 digits": ("/api/check", [("model", "qwen-7b"), ("batch", "9" * 400)], ["qwen-7b", "--batch", "9" * 400]),
    "not a choice": ("/api/check", [("model", "qwen-7b"), ("precision", "auto")], ["qwen-7b", "--precision", "auto"]),
    "out of range": ("/api/check", [("model", "qwen-7b"), ("gpu-memory-utilization", "2")],
                     ["qwen-7b", "--gpu-memory-utilization", "2"]),
    "nan": ("/api/check", [("model", "qwen-7b"), ("headroom", "nan")], ["qwen-7b", "--headroom", "nan"]),
    "the other mode": ("/api/check", [("model", "qwen-7b"), ("mode", "lora"), ("context", "5")],
                       ["qwen-7b", "--mode", "lora", "--context", "5"]),
    "tokens for inference": ("/api/check", [("model", "qwen-7b"), ("tokens", "5")], ["qwen-7b", "--tokens", "5"]),
    "a size without a unit": ("/api/check", [("model", "qwen-7b"), ("vram", "24")], ["qwen-7b", "--vram", "24"]),
    "an unknown GPU": ("/api/check", [("model", "qwen-7b"), ("gpu", "rtx-9999")], ["qwen-7b", "--gpu", "rtx-9999"]),
    "a malformed requirement": ("/api/check", [("model", "qwen-7b"), ("require", "vram")],
                                ["qwen-7b", "--require", "vram"]),
    "a negative price": ("/api/check", [("model", "qwen-7b"), ("kwh-price", "-1")], ["qwen-7b", "--kwh-price", "-1"]),
    "no model": ("/api/check", [(P, "rtx-4090")], ["check", "--profile", "rtx-4090"]),
    "params for a known model": ("/api/check", [("model", "qwen-7b"), ("params", "7b")],
                                 ["qwen-7b", "--params", "7b"]),
    "a family": ("/api/check", [("model", "qwen3")], ["qwen3"]),
    "where: a kind": ("/api/where", [("model", "qwen-7b"), ("kind", "foo")], ["where", "qwen-7b", "--kind", "foo"]),
    "where: no model": ("/api/where", [], ["where"]),
    "fits: a negative top": ("/api/fits", [("top", "-1")], ["models", "--fits", "--top", "-1"]),
    "fits: a sort": ("/api/fits", [("sort", "x")], ["models", "--fits", "--sort", "x"]),
    "fits: no match": ("/api/fits", [("q", "zzzz")], ["models", "--fits", "zzzz"]),
    "fits: seq-len for inference": ("/api/fits", [("seq-len", "512")], ["models", "--fits", "--seq-len", "512"]),
    "plot: against": ("/api/plot.svg", [("model", "qwen-7b"), ("against", "foo")],
                      ["plot", "qwen-7b", "--against", "foo"]),
    "profiles: kind": ("/api/profiles", [("kind", "boat")], ["profiles", "--kind", "boat"]),
    "probe: a what-if without a GPU name": ("/api/probe", [(P, "laptop-16gb"), ("vram", "24GiB")],
                                            ["probe", "--profile", "laptop-16gb", "--vram", "24GiB"]),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_is_400_with_the_cli_line(server, name):
    path, params, args = BAD[name]
    reply = get(server, path, params)
    r = cli_run(args)
    assert r.exit_code == 2 and r.stderr.startswith("fitcheck: "), r.output
    assert reply.status == 400 and reply.headers["content-type"] == "application/json; charset=utf-8"
    assert reply.json == {"error": r.stderr.strip().removeprefix("fitcheck: "), "exit_code": 2}


def test_a_failed_requirement_with_an_unknown_model_is_the_clis_exit_1(server):
    reply = get(server, "/api/check", [("model", "qwen-77b"), (P, "rtx-4090"), ("require", "gpus>=2")])
    assert reply.status == 400 and reply.json["exit_code"] == 1 and "unknown model 'qwen-77b'" in reply.json["error"]


@pytest.mark.parametrize("params, says", [
    ([("model", "qwen-7b"), ("contxt", "8192")], "unknown parameter 'contxt' (did you mean: context)"),
    ([("model", "qwen-7b"), ("context", "1"), ("context", "2")], "parameter 'context' is given more than once"),
    ([("model", "qwen-7b"), ("plan", "plan.toml")], "parameter 'plan' (--plan) is the command line's"),
    ([("model", "qwen-7b"), ("output", "/tmp/x.json")], "parameter 'output' (--output) is the command line's"),
    ([("model", "qwen-7b"), ("python-env", "/")], "parameter 'python-env' (--python-env) is the command line's"),
    ([("model", "qwen-7b"), ("download-dir", "/")], "parameter 'download-dir' (--download-dir) is the command line's"),
    ([("model", "qwen-7b"), ("json", "1")], "parameter 'json' (--json) is the command line's"),
    ([("model", "qwen-7b"), ("strict", "maybe")], "--strict is on or off, got 'maybe'"),
    ([("model", "qwen-7b"), ("expert-parallel", "perhaps")], "--expert-parallel is on or off, got 'perhaps'"),
])
def test_parameters_the_server_does_not_take(server, params, says):
    reply = get(server, "/api/check", params)
    assert reply.status == 400 and says in reply.json["error"] and reply.json["exit_code"] == 2


def test_an_option_value_that_looks_like_an_option_stays_a_value(server):
    reply = get(server, "/api/check", [("model", "qwen-7b"), ("profile", "--plan=x")])
    assert reply.status == 400 and "unknown hardware profile '--plan=x'" in reply.json["error"]
    reply = get(server, "/api/check", [("model", "--help")])
    assert reply.status == 400 and "unknown model '--help'" in reply.json["error"]


# ---- what a local server refuses ----------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["./models/qwen", "/etc/passwd", "~/models/x", "x.gguf", "config.json",
                                   "model.safetensors", "..\\x", "C:\\models\\x", "tests/fixtures"])
def test_a_model_that_is_a_path_is_refused(server, model):
    reply = get(server, "/api/check", {"model": model})
    assert reply.status == 400
    assert "the server answers for catalog, Hub-cache and Ollama names only" in reply.json["error"]
    assert get(server, "/api/plot.svg", {"model": model}).status == 400
    assert get(server, "/api/where", {"model": model}).status == 400


@pytest.mark.parametrize("profile", ["./my.toml", "/etc/passwd", "x.toml", "~/box", "a/b"])
def test_a_profile_that_is_a_path_is_refused(server, profile):
    for path in ("/api/check", "/api/probe", "/api/fits"):
        params = {"profile": profile, **({"model": "qwen-7b"} if path == "/api/check" else {})}
        reply = get(server, path, params)
        assert reply.status == 400 and "profile names only" in reply.json["error"], path


def test_a_hub_id_outside_the_catalog_never_reaches_the_network(server, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("the server went to the Hub")

    monkeypatch.setattr("fitcheck.model.hub.spec_from_hub", no_network)
    monkeypatch.setattr("fitcheck.model.gguf_repo.HfFileSystemClient", no_network)
    reply = get(server, "/api/check", {"model": "someone/Some-Model-7B"})
    assert reply.status == 400
    assert reply.json["error"].startswith("unknown model 'someone/Some-Model-7B': not in the catalog, and not in the "
                                          "Hugging Face cache here (the fitcheck server never reads the Hugging Face "
                                          "Hub)")
    close = get(server, "/api/check", {"model": "Qwen/Qwen2.5-7B-Instrct"}).json["error"]
    assert "did you mean Qwen/Qwen2.5-7B-Instruct" in close
    assert get(server, "/api/check", {"model": "Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M"}).status == 200


def test_the_network_refusal_is_this_requests_only():
    from fitcheck.model.hub import hub_offline
    from fitcheck.model.network import network_refusal, network_refused

    assert network_refusal() is None
    with network_refused("testing"):
        assert network_refusal() == "testing" and hub_offline()
    assert network_refusal() is None


def test_nothing_is_written(server, tmp_path, monkeypatch):
    """No receipts, no bandwidth reading, no cache: the user's config and cache folders stay as they were."""
    config, cache = tmp_path / "config", tmp_path / "cache"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.delenv("FITCHECK_NO_BENCH", raising=False)     # the server never benches anyway
    for path, params in [("/api/check", {"model": "qwen-7b"}), ("/api/check", {"model": "qwen-7b", "device": "cpu"}),
                         ("/api/fits", {"family": "qwen"}), ("/api/probe", {"refresh": "1"}),
                         ("/api/plot.svg", {"model": "qwen-7b"})]:
        assert get(server, path, params).status == 200
    assert not config.exists() and not cache.exists()


def test_unknown_paths_are_404_json(server):
    for target in ("/api/chek", "/nope", "/api/", "/static/", "/static/nope.js", "/favicon.ico"):
        reply = request(server, target)
        assert reply.status == 404 and reply.headers["content-type"].startswith("application/json"), target
        assert reply.json["exit_code"] == 2
    assert "did you mean: /api/check" in request(server, "/api/chek").json["error"]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "BREW"])
def test_every_method_but_get_is_405(server, method):
    reply = request(server, "/api/check?model=qwen-7b", method=method, body=b"" if method != "HEAD" else None)
    assert reply.status == 405 and reply.headers["allow"] == "GET"
    if method != "HEAD":
        assert reply.json == {"error": f"method {method} is not allowed: GET only", "exit_code": 2}


def test_a_body_is_413(server):
    reply = request(server, "/api/check?model=qwen-7b", body=b'{"model": "qwen-7b"}')
    assert reply.status == 413 and reply.json["exit_code"] == 2
    chunked = raw(server, b"GET /api/profiles HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert chunked.startswith(b"HTTP/1.0 413")


def test_long_urls_and_many_headers_are_refused(server):
    long = request(server, url("/api/check", {"model": "qwen-7b", "revision": "x" * MAX_REQUEST_LINE}))
    assert long.status == 414 and long.json["exit_code"] == 2
    many = request(server, "/api/profiles", headers={f"X-Header-{i}": "1" for i in range(80)})
    assert many.status == 431
    big = request(server, "/api/profiles", headers={"X-Big": "x" * 20000})
    assert big.status == 431
    assert raw(server, b"GET / HTTP/9.9\r\n\r\n").startswith(b"HTTP/1.0 505")
    garbage = raw(server, b"NOT HTTP AT ALL\r\n\r\n")
    assert garbage.startswith(b"HTTP/1.0 400") and b'"exit_code": 2' in garbage and b"<html" not in garbage.lower()
    assert get(server, "/api/check", [("context", str(i)) for i in range(api.MAX_PARAMS + 1)]).status == 400


def test_only_this_machine_may_be_the_host(server):
    assert request(server, "/api/profiles", host=f"127.0.0.1:{server.port}").status == 200
    assert request(server, "/api/profiles", host=f"localhost:{server.port}").status == 200
    assert request(server, "/api/profiles", host=f"[::1]:{server.port}").status == 200
    rebound = request(server, "/api/probe", host="attacker.example:80")
    assert rebound.status == 403 and "is not this machine" in rebound.json["error"]


def test_the_responses_say_what_they_are(server):
    reply = get(server, "/api/check", {"model": "qwen-7b", "profile": "rtx-4090"})
    h = reply.headers
    assert h["x-content-type-options"] == "nosniff" and h["cache-control"] == "no-store"
    assert "default-src 'self'" in h["content-security-policy"] and "access-control-allow-origin" not in h


# ---- static files ---------------------------------------------------------------------------------------------
@pytest.fixture
def page(tmp_path, server):
    """A server over a page folder of its own (the real page, fitcheck/serve/static/, is tested in a browser)."""
    static = tmp_path / "static"
    static.mkdir()
    (static / "index.html").write_text("<!doctype html><title>fitcheck</title>")
    (static / "app.js").write_text("console.log(1)")
    (static / "app.css").write_text("body{}")
    (static / ".hidden.js").write_text("secret")
    (static / "notes.md").write_text("no type")
    (static / "sub").mkdir()
    (static / "sub" / "a.svg").write_text("<svg/>")
    (tmp_path / "secret.js").write_text("outside")
    os.symlink(tmp_path / "secret.js", static / "link.js")
    os.symlink(tmp_path, static / "up")
    with running(server.here, static=static) as s:
        yield s


def test_the_page_and_its_files(page):
    for target, ctype, body in [("/", "text/html; charset=utf-8", b"<!doctype html><title>fitcheck</title>"),
                                ("/index.html", "text/html; charset=utf-8", b"<!doctype html><title>fitcheck</title>"),
                                ("/static/app.js", "text/javascript; charset=utf-8", b"console.log(1)"),
                                ("/static/app.css", "text/css; charset=utf-8", b"body{}"),
                                ("/static/sub/a.svg", "image/svg+xml", b"<svg/>"),
                                ("/static/app.js?v=2", "text/javascript; charset=utf-8", b"console.log(1)")]:
        reply = request(page, target)
        assert (reply.status, reply.headers["content-type"], reply.body) == (200, ctype, body), target


@pytest.mark.parametrize("target", [
    "/static/../secret.js", "/static/%2e%2e/secret.js", "/static/sub/../../secret.js", "/static/sub%2f..%2f..%2fsecret.js",
    "/static//etc/passwd", "/static/%2fetc%2fpasswd", "/static/link.js", "/static/up/secret.js", "/static/.hidden.js",
    "/static/notes.md", "/static/sub", "/static/..%5csecret.js", "/static/app.js%00.css", "/static/C:%5cwindows",
    "/../secret.js",
])
def test_nothing_outside_the_page_folder_is_served(page, target):
    reply = request(page, target)
    assert reply.status == 404 and b"outside" not in reply.body and b"secret\n" not in reply.body
    assert reply.headers["content-type"].startswith("application/json")


def test_the_shipped_page_is_served_when_there_is_one(server):
    from fitcheck.serve.server import STATIC

    reply = request(server, "/")
    assert reply.status == 200 and reply.headers["content-type"] == "text/html; charset=utf-8"
    assert reply.body == (STATIC / "index.html").read_bytes()


# ---- errors of the server's own ---------------------------------------------------------------------------------
def test_an_internal_error_is_one_line_500_without_a_traceback(server, monkeypatch, capsys):
    def boom(query, here):
        raise RuntimeError("injected failure")

    monkeypatch.setitem(api.ENDPOINTS, "/api/check", boom)
    monkeypatch.delenv("FITCHECK_DEBUG", raising=False)
    reply = get(server, "/api/check", {"model": "qwen-7b"})
    assert reply.status == 500
    assert reply.json == {"error": "check: internal error (RuntimeError: injected failure); this is a bug in "
                                   "fitcheck: please report it with the request", "exit_code": 70}
    assert b"Traceback" not in reply.body
    assert get(server, "/api/profiles").status == 200       # the server goes on


def test_a_slow_answer_is_503_and_the_server_stays_up(server, monkeypatch):
    def slow(query, here):
        time.sleep(1.0)
        return api.json_answer({"late": True})

    monkeypatch.setitem(api.ENDPOINTS, "/api/check", slow)
    with running(server.here, timeout_s=0.2) as s:
        started = time.monotonic()
        reply = get(s, "/api/check")
        assert reply.status == 503 and time.monotonic() - started < 0.9
        assert reply.json["exit_code"] == 75 and "no answer within 0.2 s" in reply.json["error"]
        assert get(s, "/api/profiles").status == 200


def test_beyond_the_workers_and_the_queue_is_503(server, monkeypatch):
    import threading

    release = threading.Event()

    def blocked(query, here):
        release.wait(5)
        return api.json_answer({"ok": True})

    monkeypatch.setitem(api.ENDPOINTS, "/api/check", blocked)
    with running(server.here, workers=1, queued=1) as s:
        first = threading.Thread(target=get, args=(s, "/api/check"))
        second = threading.Thread(target=get, args=(s, "/api/check"))
        first.start()
        time.sleep(0.2)
        second.start()
        time.sleep(0.2)
        busy = get(s, "/api/check")
        release.set()
        first.join(5)
        second.join(5)
        assert busy.status == 503 and busy.json["exit_code"] == 75 and busy.json["error"].startswith("busy")
        assert get(s, "/api/check").status == 200


def test_beyond_the_connections_is_503(server):
    import socket

    with running(server.here, max_connections=2) as s:
        held = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(2)]
        time.sleep(0.2)
        try:
            assert raw(s, b"GET /api/profiles HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 503")
        finally:
            for c in held:
                c.close()
        time.sleep(0.2)
        assert get(s, "/api/profiles").status == 200


def test_the_answers_do_not_depend_on_the_cwd(server, tmp_path, monkeypatch):
    """A folder named like a model in the server's working folder is not read (the CLI would read it as a path)."""
    (tmp_path / "qwen-7b").mkdir()
    (tmp_path / "qwen-7b" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    reply = get(server, "/api/check", {"model": "qwen-7b", "profile": "rtx-4090"})
    assert reply.status == 400 and "names only" in reply.json["error"]
    assert Path("qwen-7b/config.json").read_text() == "{}"
