"""What a new user's trial of the CLI found: each test is one finding, failing before its fix."""

import json
import re

from click.testing import CliRunner

from fitcheck.cli import cli


def run(*args, **kwargs):
    return CliRunner().invoke(cli, list(args), **kwargs)


def test_verdict_names_the_fullest_gpu_of_a_layer_split():
    # transformers' layer split puts more layers on GPU1..5 than on GPU0 (embeddings) and GPU7 (lm_head):
    # the headline must name the GPU closest to its limit, not GPU0's smaller need.
    r = run("qwen-7b", "--profile", "8x-h100", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    devices = doc["verdict"]["devices"]
    fullest = max(devices, key=lambda d: d["need_bytes"] / d["free_bytes"])
    assert fullest["device"] != "gpu0"
    assert doc["verdict"]["summary"] == f"Fits: {fullest['reason']}"
    text = run("qwen-7b", "--profile", "8x-h100").output
    line = next(li for li in text.splitlines() if li.startswith("Verdict:"))
    assert re.search(rf"— {fullest['device'].upper()} needs {fullest['need_bytes'] / 2**30:.2f} GiB", line), line


def test_vllm_bf16_below_compute_capability_8_cannot_run_and_is_never_offered():
    # vLLM raises "Bfloat16 is only supported on GPUs with compute capability of at least 8.0" on a T4
    # (7.5): a verdict (exit 1, the reason, what runs), and no alternative may print that command.
    r = run("qwen-7b", "--precision", "bf16", "--engine", "vllm", "--profile", "t4")
    assert r.exit_code == 1, r.output
    assert "CANNOT RUN HERE — bf16 with vllm: vLLM's bf16 kernels need compute capability >= 8.0 (this GPU: 7.5)" \
        in r.output
    assert "KV pool: 0 tokens" not in r.output     # no pool figures for a request that cannot start
    doc = json.loads(run("qwen-7b", "--precision", "bf16", "--profile", "t4", "--json").output)
    assert doc["alternatives"]
    for alt in doc["alternatives"]:
        assert not ("--precision bf16" in alt["fitcheck_command"] and "--engine vllm" in alt["fitcheck_command"]), alt
    # fp16, what vLLM's message says to use instead, still runs there
    assert run("qwen-0.5b", "--precision", "fp16", "--engine", "vllm", "--profile", "t4").exit_code == 0


def test_cannot_run_reason_is_grammatical_for_a_singular_engine():
    r = run("qwen-7b", "--engine", "vllm", "--profile", "macbook-air-m3-16gb")
    assert r.exit_code == 1, r.output
    assert "vLLM needs an NVIDIA GPU (CUDA) or an AMD GPU (ROCm)" in r.output
    assert "KV pool" not in r.output


def test_largest_context_capped_at_the_maximum_says_so_beside_a_longer_request_that_fits():
    # 200,000 tokens is past Qwen2.5-7B's 32,768 (a note says so) but fits an H100: a bare "largest that
    # fits: 32,768" beside FITS at 200,000 contradicted itself.  The search stays capped at the maximum
    # (tests/test_expert_advice.py); the line says why.
    r = run("qwen-7b", "--context", "200000", "--profile", "h100-sxm", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["verdict"]["status"] == "fits"
    assert doc["verdict"]["max_context"] == 32768
    text = run("qwen-7b", "--context", "200000", "--profile", "h100-sxm").output
    assert ("Largest that fits: context 32,768 tokens (the model's maximum; 200,000 as asked fits in memory too) "
            "at batch 1") in text
    assert "beyond the model's maximum of 32,768 tokens" in text
    # a request within the maximum still searches up to the maximum
    doc = json.loads(run("qwen-7b", "--context", "4096", "--profile", "h100-sxm", "--json").output)
    assert doc["verdict"]["max_context"] == 32768


PLAN = """\
[defaults]
profile = "rtx-4090"
context = 8192
optimizer = "adamw-8bit"

[[case]]
name = "chat"
model = "qwen-0.5b"

[[case]]
name = "train"
model = "qwen-0.5b"
mode = "lora"
seq_len = 1024
"""


def test_plan_defaults_apply_only_to_the_cases_whose_mode_they_fit(tmp_path):
    # README's own plan has `context = 8192` in [defaults]: adding a fine-tuning case failed it with
    # "--context applies to inference, not --mode lora" although the case never asked for a context.
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    r = run("check", "--plan", str(plan), "--json")
    assert r.exit_code == 0, r.output
    cases = {c["name"]: c for c in json.loads(r.output)["cases"]}
    assert cases["chat"]["check"]["request"]["context"] == 8192
    train = cases["train"]["check"]["request"]
    assert train["mode"] == "lora" and train["seq_len"] == 1024 and train["optimizer"] == "adamw-8bit"
    # a case's own field of the wrong mode is still malformed (exit 2 for that case, naming it)
    plan.write_text(PLAN.replace('seq_len = 1024', 'seq_len = 1024\ncontext = 2048'))
    r = run("check", "--plan", str(plan))
    assert r.exit_code == 2, r.output
    assert "case 2 (train): --context applies to inference, not --mode lora" in r.output


def test_probe_save_refuses_what_profile_could_not_load(tmp_path, monkeypatch):
    # `probe --save 'my box!'` wrote ./my box! and printed "use it with --profile my box!", which looks the
    # text up as a profile name and fails: exit 2 before writing anything.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FITCHECK_CONFIG_DIR", str(tmp_path / "cfg"))
    r = run("probe", "--profile", "rtx-4090", "--save", "my box!")
    assert r.exit_code == 2, r.output
    assert "--save 'my box!': not a profile name" in r.stderr
    assert list(tmp_path.iterdir()) == []
    # a .toml path with a space is a file: the printed --profile is quoted, and loads it back
    r = run("probe", "--profile", "rtx-4090", "--save", "my box.toml")
    assert r.exit_code == 0, r.output
    assert "use it with --profile 'my box.toml'" in r.stderr
    assert run("qwen-0.5b", "--profile", "my box.toml").exit_code == 0


def test_a_mistyped_hub_id_suggests_the_catalog_id(tmp_path, monkeypatch):
    # `fitcheck Qwen/Qwen2.5-7B-Instrct` (one letter off a catalog id) answered only "not found on the Hub"
    # (or "needs huggingface_hub"), with no suggestion, unlike a mistyped short name.
    import fitcheck.model.hub as hub
    from fitcheck.errors import FitcheckError

    def not_found(repo_id, **_):
        raise FitcheckError(f"{repo_id} not found on the Hugging Face Hub", "check the id (owner/name)")

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(hub, "spec_from_hub", not_found)
    r = run("Qwen/Qwen2.5-7B-Instrct")
    assert r.exit_code == 2, r.output
    # the same family and size only: not the 72B or the 3B (issue 40 item 4)
    assert r.stderr.strip() == ("fitcheck: Qwen/Qwen2.5-7B-Instrct not found on the Hugging Face Hub "
                                "(did you mean Qwen/Qwen2.5-7B-Instruct? check the id (owner/name))"), r.stderr
    # nothing close: the Hub's own line, unchanged
    r = run("Someone/SomethingElse")
    assert r.exit_code == 2
    assert r.stderr.strip() == ("fitcheck: Someone/SomethingElse not found on the Hugging Face Hub "
                                "(check the id (owner/name))")


def test_a_device_or_fifo_as_the_model_is_not_called_missing(tmp_path):
    import os

    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        r = run(path)
        assert r.exit_code == 2, r.output
        assert r.stderr.startswith(f"fitcheck: {path} is not a regular file or folder"), r.stderr
        assert "no such file" not in r.stderr


def test_a_tight_verdict_reads_once_and_its_largest_line_does_not_say_nothing_runs():
    r = run("qwen-7b", "--profile", "rtx-4090-laptop")
    assert r.exit_code == 0, r.output
    verdict = next(li for li in r.output.splitlines() if li.startswith("Verdict:"))
    assert verdict.startswith("Verdict:  TIGHT —") and verdict.endswith("inside the 10% headroom"), verdict
    largest = next(li for li in r.output.splitlines() if li.startswith("Largest that fits:"))
    assert largest == ("Largest that fits: nothing outside the 10% headroom, not even 1 token or 1 sequence "
                       "(the request as asked fits only inside it)")


def test_an_impossible_engine_pair_names_the_engine_that_was_asked_for():
    # `--precision nf4 --engine sglang` said "llama.cpp does not load nf4 checkpoints", and
    # `--kv-dtype fp8 --engine transformers` "llama.cpp has no fp8 KV cache": neither named llama.cpp.
    r = run("qwen-7b", "--precision", "nf4", "--engine", "sglang", "--profile", "rtx-4090")
    assert r.exit_code == 2
    assert r.stderr.strip() == ("fitcheck: sglang does not load nf4 weights (use -p gptq-int4, int4 or awq with "
                                "sglang, or --engine transformers or --engine vllm for nf4)")
    r = run("qwen-7b", "--kv-dtype", "fp8", "--engine", "transformers", "--profile", "rtx-4090")
    assert r.exit_code == 2
    assert r.stderr.strip() == ("fitcheck: transformers has no fp8 KV cache (use --engine vllm or --engine sglang "
                                "(--kv-cache-dtype fp8), or drop --kv-dtype)")
    # each suggested engine does take it
    assert run("qwen-7b", "--precision", "nf4", "--engine", "vllm", "--profile", "rtx-4090").exit_code in (0, 1)
    assert run("qwen-7b", "--kv-dtype", "fp8", "--engine", "sglang", "--profile", "rtx-4090").exit_code in (0, 1)
    # llama.cpp's own wording is kept
    r = run("qwen-7b", "--kv-dtype", "fp8", "--engine", "llama.cpp", "--profile", "rtx-4090")
    assert r.stderr.strip() == "fitcheck: llama.cpp has no fp8 KV cache (use --kv-dtype q8_0)"


def test_interactive_length_errors_name_the_sequence_length_and_the_range():
    # training asks "Sequence length, tokens", and a refused answer said "the context must be a whole number
    # >= 1" — also for 99999999999999999999, a whole number >= 1 that is only too large
    r = run("interactive", input="qwen-0.5b\nlora\n\nabc\n99999999999999999999\n\n\nrtx-4090\nq\n")
    assert r.exit_code == 0, r.output
    assert "the sequence length must be a whole number from 1 to 1,073,741,824, got 'abc'" in r.output
    assert "got '99999999999999999999'" in r.output
    assert "the context must be" not in r.output
    r = run("interactive", input="qwen-0.5b\n\n\n0\n\n\nrtx-4090\nq\n")
    assert "the context must be a whole number from 1 to 1,073,741,824, got '0'" in r.output


def test_where_marks_the_machines_it_fits_only_tightly():
    # `where` listed a TIGHT machine (`fitcheck MODEL --profile NAME` says TIGHT, exit 1 with --strict)
    # exactly like one with room to spare.  (Gemma-2-27B: tight with FP8 on the RTX 5090; Qwen3-30B-A3B's tight
    # row there was LLM.int8, which now ranks after the much faster Q4_K_M build: alternatives.speed_order.)
    doc = json.loads(run("where", "gemma-2-27b", "--kind", "desktop", "--json").output)
    status = {m["name"]: m["status"] for m in doc["machines"]}
    assert "tight" in status.values() and "fits" in status.values()
    text = run("where", "gemma-2-27b", "--kind", "desktop").output
    for name, st in status.items():
        row = next(li for li in text.splitlines() if li.startswith(name + " "))
        assert ("tight" in row) == (st == "tight"), row
    assert "(tight): fits only inside the 10% headroom" in text
    # training tables too
    text = run("where", "qwen-7b", "--mode", "qlora").output
    doc = json.loads(run("where", "qwen-7b", "--mode", "qlora", "--json").output)
    for m in doc["machines"]:
        row = next(li for li in text.splitlines() if li.startswith(m["name"] + " "))
        assert ("(tight)" in row) == (m["status"] == "tight"), row


def test_full_fine_tuning_without_qlora_kernels_offers_lora_at_a_shorter_sequence():
    # On a CPU-only machine (no bitsandbytes, so no QLoRA) full fine-tuning printed "Nothing fits on this
    # machine, even with LoRA, gradient checkpointing or a shorter sequence" while LoRA with checkpointing
    # at a shorter sequence does fit: the printed command must reproduce it.
    args = ("qwen-7b", "--mode", "full", "--profile", "laptop-32gb", "--ram", "24GiB")
    r = run(*args, "--json")
    assert r.exit_code == 1, r.output
    alts = json.loads(r.output)["alternatives"]
    assert alts, "no alternative offered"
    alt = alts[0]
    assert alt["status"] == "fits" and alt["changes"]["mode"] == "lora" and alt["changes"]["grad_checkpointing"]
    assert "Nothing fits" not in run(*args).output
    import shlex
    again = json.loads(run(*shlex.split(alt["fitcheck_command"])[1:], "--json").output)
    assert again["verdict"]["status"] == "fits"
    assert [d["need_bytes"] for d in again["verdict"]["devices"]] == [d["total_bytes"] for d in alt["devices"]]


def test_a_prompt_longer_than_the_context_says_both_numbers_and_is_never_clamped_silently():
    r = run("qwen-7b", "--prompt", "8000", "--context", "4096")
    assert r.exit_code == 2
    assert r.stderr.strip() == ("fitcheck: --prompt 8,000 is longer than --context 4,096 (the context is the prompt "
                                "plus the tokens generated) (--context 8000 or more, or a shorter --prompt)")
    # interactive: `prompt 9000` at context 4096 printed "Changed: prompt auto → 4096"
    r = run("interactive", input="qwen-0.5b\n\n\n\n\nrtx-4090\nprompt 9000\nprompt 3000\ncontext 2000\nq\n")
    assert r.exit_code == 0, r.output
    assert "--prompt 9,000 is longer than --context 4,096" in r.output
    assert "prompt auto → 4096" not in r.output
    assert "Changed: prompt auto → 3000" in r.output
    assert "Changed: context 4096 → 2000; prompt 3000 → 2000" in r.output  # a shorter context takes it down


def test_where_and_the_verdict_line_name_the_same_device():
    # `where` showed the device with the least room in GiB, the verdict line (above) the fullest: a 24 GiB GPU
    # with 3 GiB used and 57.6 GiB of RAM with 25.7 GiB used gave the GPU in one and RAM in the other.
    from fitcheck.estimate.verdict import FITS, DeviceVerdict, Verdict, tightest_device

    gib = 2**30
    gpu = DeviceVerdict("gpu0", "gpu", 3 * gib, 24 * gib, int(21.6 * gib), FITS, "GPU0 needs 3.00 GiB")
    ram = DeviceVerdict("cpu", "cpu", int(25.7 * gib), int(57.6 * gib), int(51.8 * gib), FITS, "RAM needs 25.70 GiB")
    verdict = Verdict(FITS, (gpu, ram), 0.1)
    assert tightest_device(verdict) is ram
    assert verdict.summary() == "Fits: RAM needs 25.70 GiB"


def test_a_plan_case_field_of_the_other_mode_is_refused_even_at_its_default(tmp_path):
    # `context = 4096` (the default) in a lora case ran silently, while `--context 4096 --mode lora` is exit 2
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.replace('seq_len = 1024', 'seq_len = 1024\ncontext = 4096'))
    r = run("check", "--plan", str(plan))
    assert r.exit_code == 2, r.output
    assert "case 2 (train): --context applies to inference, not --mode lora (training uses --seq-len)" in r.output
    assert "FITS" not in r.output    # plans are checked for bad input first: no case ran
    assert run("qwen-0.5b", "--mode", "lora", "--context", "4096", "--profile", "rtx-4090").exit_code == 2


def test_bad_input_under_format_github_is_an_error_annotation_too():
    # the action runs `check --format github`: a mistyped model was only a stderr line in the log
    r = run("qwen-7bb", "--format", "github")
    assert r.exit_code == 2
    assert r.stdout.strip() == ("::error title=fitcheck%3A bad input::unknown model 'qwen-7bb' (did you mean: "
                                "qwen-7b, qwen1.5-7b, qwen2-7b)")
    assert r.stderr.startswith("fitcheck: unknown model 'qwen-7bb'")
    r = run("qwen-7b", "--format=github", "--context", "0")
    assert r.exit_code == 2 and r.stdout.startswith("::error title=fitcheck%3A bad input::")
    assert "Invalid value for '--context'" in r.stdout
    # other formats: stdout stays empty (a JSON consumer never reads a workflow command)
    for fmt in (("--json",), ("--format", "table"), ()):
        r = run("qwen-7bb", *fmt)
        assert r.exit_code == 2 and r.stdout == "", r.stdout


def test_device_advice_never_sends_a_gpu_node_to_the_cpu_for_a_host_bound_engine():
    # transformers at batch 1 is host-bound (~42 tok/s on an H100); the CPU's llama.cpp q4_k_m reads ~47:
    # the same q4_k_m weights on the GPU decode ~10x faster, so the advice is the GPU, like with like.
    r = run("qwen-7b", "--profile", "8x-h100", "--json")
    assert r.exit_code == 0, r.output
    advice = json.loads(r.output)["speed"]["best_device"]
    assert advice["choice"] == "gpu", advice
    assert advice["gpu"]["precision"] == advice["cpu"]["precision"] == "q4_k_m"
    assert advice["gpu"]["decode_tokens_per_s"]["low"] > 2 * advice["cpu"]["decode_tokens_per_s"]["high"]
    # a request the GPU already serves well keeps its own setup in the comparison
    advice = json.loads(run("qwen-7b", "--profile", "rtx-4090", "--json").output)["speed"]["best_device"]
    assert advice["choice"] == "gpu" and advice["gpu"]["precision"] == "bf16"


def test_nothing_fits_names_the_profile_it_answers_for():
    r = run("llama-3.1-405b", "--profile", "laptop-8gb")
    assert r.exit_code == 1, r.output
    assert "Nothing fits on laptop-8gb, even quantized or offloaded" in r.output
    assert "Nothing fits on this machine" not in r.output


def test_software_line_of_a_llama_cpp_request_does_not_ask_for_torch():
    r = run("qwen-7b", "--precision", "q4_k_m", "--device", "cpu", "--python-env", "/nonexistent-env")
    line = next((li for li in r.output.splitlines() if li.startswith("Software:")), "")
    assert "--python-env PATH names another environment" not in line, r.output


def test_a_serving_engine_alternative_is_judged_by_its_reservation_not_a_second_headroom():
    # Qwen3-32B on one L4: vLLM's AWQ was TIGHT because its KV pool's spare was under 10 % of the reservation, a
    # second headroom inside gpu_memory_utilization (vLLM's own margin); it starts and fits, so it ranks by its
    # cost: the quality step and the engine switch (33) before llama.cpp's Q4_K_M build (35), both comfortable
    doc = json.loads(run("qwen-32b", "--profile", "l4", "--strict", "--json").output)   # the default's alternatives
    alts = doc["alternatives"]
    assert doc["verdict"]["status"] == "does_not_fit"
    gguf = next(i for i, a in enumerate(alts) if "--precision q4_k_m" in a["fitcheck_command"])
    awq = next(i for i, a in enumerate(alts) if "--precision awq" in a["fitcheck_command"])
    assert alts[gguf]["status"] == alts[awq]["status"] == "fits"
    assert alts[awq]["cost"] < alts[gguf]["cost"] and awq < gguf, [a["title"] for a in alts]


def test_equal_cost_puts_the_comfortable_fit_first():
    from types import SimpleNamespace

    from fitcheck.search.rank import rank_key as _rank

    tight = SimpleNamespace(cost=35.0, verdict=SimpleNamespace(status="tight"))
    fits = SimpleNamespace(cost=35.0, verdict=SimpleNamespace(status="fits"))
    assert sorted([tight, fits], key=_rank) == [fits, tight]
    cheaper_tight = SimpleNamespace(cost=34.0, verdict=SimpleNamespace(status="tight"))
    assert sorted([fits, cheaper_tight], key=_rank) == [cheaper_tight, fits]


def test_where_offers_the_moe_expert_offload_check_advises():
    # `fitcheck qwen3-30b-a3b --profile rtx-4070-laptop` advises llama.cpp with the first 33 layers' experts in
    # RAM (--n-cpu-moe 33), and `where` listed the machine as "does not fit"; on an RTX 3060 `where` chose a Q2_K
    # build (tight) that check never offers, beside check's Q4_K_M --n-cpu-moe 23.  Each `where` row is now the
    # option check itself advises there, and its command reproduces the row.
    r = CliRunner().invoke(cli, ["where", "qwen3-30b-a3b", "--kind", "laptop", "--json"])
    assert r.exit_code == 0, r.output
    rows = {m["name"]: m for m in json.loads(r.output)["machines"]}
    for name in ("rtx-4070-laptop", "rtx-4060-laptop"):
        row = rows[name]
        check = json.loads(run("qwen3-30b-a3b", "--profile", name, "--strict", "--json").output)
        advised = check["alternatives"][0]
        assert "--cpu-moe 33" in advised["fitcheck_command"]
        chosen = json.loads(run("qwen3-30b-a3b", "--profile", name, "--json").output)   # what check answers
        assert chosen["request"]["cpu_moe"] == 33 and chosen["estimate"] == json.loads(
            run(*advised["fitcheck_command"].split()[1:], "--json").output)["estimate"]
        assert (row["precision"], row["engine"], row["device"], row["cpu_moe"]) == ("q4_k_m", "llama.cpp", "offload", 33)
        again = json.loads(run(*advised["fitcheck_command"].split()[1:], "--json").output)
        gpu = next(d for d in again["verdict"]["devices"] if d["device"] == "gpu0")
        assert row["need_bytes"] == gpu["need_bytes"] and row["status"] == again["verdict"]["status"] == "fits"
    text = CliRunner().invoke(cli, ["where", "qwen3-30b-a3b", "--kind", "desktop", "-v"]).output
    line = next(li for li in text.splitlines() if li.startswith("rtx-3060 "))
    assert "RTX 3060 + CPU" in line and "q4_k_m llama.cpp --n-cpu-moe 23*" in line and "GiB RAM" in line, line
    assert "q2_k" not in line and "(tight)" not in line
    assert "  fitcheck qwen3-30b-a3b --precision q4_k_m --engine llama.cpp --cpu-moe 23 --profile rtx-3060" in text


def test_a_pooled_engine_starts_with_more_sequences_than_its_pool_and_queues_the_rest():
    # issue 35 item 4: `qwen-7b --batch 64 --engine vllm --profile rtx-4090` said DOES NOT FIT while vLLM starts
    # and runs ~30 of the 64 at once; "maximum concurrency 29.9x" stood beside "largest batch 20" (a 10 % headroom
    # inside gpu_memory_utilization).  Now: FITS, the pool runs what it holds, the largest batch is that many.
    for engine, fact in (("vllm", "vllm_max_concurrency"), ("sglang", "sglang_max_concurrency")):
        args = ("qwen-7b", "--batch", "64", "--engine", engine, "--profile", "rtx-4090")
        doc = json.loads(run(*args, "--json").output)
        concurrency = doc["estimate"]["facts"][fact]
        assert doc["verdict"]["status"] == "fits" and doc["exit_code"] == 0, doc["verdict"]
        assert 1 <= concurrency < 64 and doc["verdict"]["max_batch"] == int(concurrency), doc["verdict"]
        text = run(*args).output
        assert f"{int(concurrency)} of the 64 sequences asked run at once, the rest queue" in text, text
        # the KV cache held is the sequences that run: the device's need is the reservation, within what is free
        gpu = doc["estimate"]["devices"][0]
        assert gpu["total_bytes"] <= doc["verdict"]["devices"][0]["free_bytes"]
        # the speed is of those that run
        assert doc["speed"]["batch"] == int(concurrency)
    # CI gates on what runs at once: --require concurrency>=N (exit 1 when fewer), judged with the answer
    gate = run(*args[:4], "vllm", *args[5:], "--require", "concurrency>=64")
    assert gate.exit_code == 1 and "concurrency>=64: FAILED" in gate.output
    assert run(*args[:4], "vllm", *args[5:], "--require", "concurrency>=16").exit_code == 0
    # a pool that cannot hold one sequence at full length: the engine refuses to start
    one = json.loads(run("llama-3.1-8b", "--engine", "vllm", "--context", "131072", "--batch", "4", "--profile",
                         "rtx-4090", "--json").output)
    assert one["verdict"]["status"] == "does_not_fit"


def test_more_gpus_than_the_machine_has_offers_its_own_gpus_first():
    # `--gpus 2` on one RTX 4090 is CANNOT RUN HERE (exit 1), and the only thing offered was a Q4_K_M GGUF build,
    # although the request itself runs on the one GPU (bf16, 15.68 GiB): that comes first now, and its command
    # (no --gpus) reproduces it.
    r = run("qwen-7b", "--gpus", "2", "--profile", "rtx-4090", "--json")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output)
    assert doc["verdict"]["status"] == "cannot_run"
    first = doc["alternatives"][0]
    assert first["title"] == "Use the 1 GPU this machine has (no --gpus)" and first["status"] == "fits"
    assert "--gpus" not in first["fitcheck_command"]
    again = json.loads(run(*first["fitcheck_command"].split()[1:], "--json").output)
    assert again["verdict"]["status"] == "fits" and again["estimate"]["total_bytes"] == first["total_bytes"]
    # where it does not fit on the GPUs there are, the alternatives from there, each without --gpus
    doc = json.loads(run("qwen-72b", "--gpus", "4", "--profile", "2x-rtx-3090", "--json").output)
    assert doc["alternatives"] and all("--gpus" not in a["fitcheck_command"] for a in doc["alternatives"])


def test_a_reservation_too_small_names_only_the_fixes_that_help():
    # Qwen3-30B-A3B in bf16 with vLLM on a 24 GB card said "raise --gpu-memory-utilization or shorten --context":
    # its weights alone are 57 GiB, neither helps.  Each fix is named only where it would make room.
    def verdict(*args):
        return next(li for li in run(*args, "--profile", "rtx-4090").output.splitlines() if li.startswith("Verdict:"))

    for engine in ("vllm", "sglang"):
        line = verdict("qwen3-30b-a3b", "--engine", engine)
        assert "raise --gpu-memory-utilization" not in line and "shorten --context" not in line, line
        assert "more than this GPU can give it: lower-precision weights or more GPUs" in line
    # more sequences than the pool holds queue, so a lower --batch is never the fix: one sequence must fit
    assert "(shorten --context)" in verdict("llama-3.1-8b", "--engine", "vllm", "--context", "131072", "--batch", "4")
    assert "(raise --gpu-memory-utilization)" in verdict("llama-3.1-8b", "--engine", "vllm", "--context", "1310",
                                                         "--batch", "4", "--gpu-memory-utilization", "0.6")
    assert "(raise --gpu-memory-utilization and shorten --context)" in \
        verdict("llama-3.1-8b", "--engine", "vllm", "--context", "131072", "--batch", "4",
                "--gpu-memory-utilization", "0.5")
    assert "lower --batch" not in verdict("llama-3.1-8b", "--engine", "vllm", "--context", "131072", "--batch", "64")


def test_models_fits_answers_for_this_one_machine_never_more_nodes():
    # `fitcheck models --fits --profile l4` listed DeepSeek-R1 (671B) as "q2_k llama.cpp, tight" on one L4:
    # check's best alternative there is llama.cpp's RPC backend over 11 L4 nodes, and the row did not say so.
    doc = json.loads(run("models", "deepseek-r1", "--fits", "--profile", "l4", "--json").output)
    fitting = {m["id"]: m for m in doc["models"]}
    assert "deepseek-ai/DeepSeek-R1" not in fitting and "deepseek-ai/DeepSeek-R1-0528" not in fitting
    assert {m["id"] for m in doc["not_fitting"]} >= {"deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-R1-0528"}
    assert fitting and all("--nodes" not in m["fitcheck_command"] for m in fitting.values())


def test_lora_on_a_cpu_offers_checkpointing_at_the_sequence_that_fits_with_it():
    # LoRA on Qwen2.5-7B on a CPU machine of 24 GiB: "Nothing fits on laptop-16gb, even with LoRA, gradient
    # checkpointing or a shorter sequence", yet checkpointing at a ~900-token sequence fits (and --mode full offered
    # exactly that).  Checkpointing and the shorter sequence together are now an alternative, and reproduce.
    r = run("qwen-7b", "--mode", "lora", "--profile", "laptop-16gb", "--ram", "24GiB", "--json")
    assert r.exit_code == 1, r.output
    alts = json.loads(r.output)["alternatives"]
    first = alts[0]
    assert re.fullmatch(r"Gradient checkpointing at a [\d,]+-token sequence", first["title"]), first["title"]
    assert "--grad-checkpointing" in first["fitcheck_command"] and "--seq-len" in first["fitcheck_command"]
    again = json.loads(run(*first["fitcheck_command"].split()[1:], "--json").output)
    assert again["verdict"]["status"] == first["status"] and again["estimate"]["total_bytes"] == first["total_bytes"]
    assert "Nothing fits" not in run("qwen-7b", "--mode", "lora", "--profile", "laptop-16gb", "--ram", "24GiB").output


def test_training_alternatives_from_what_runs_here_say_what_they_swapped():
    # QLoRA with flash-attention on a T4 (cc 7.5) cannot run; the alternatives are built on sdpa attention, but their
    # titles ("FSDP full-shard over 2 nodes") hid that their commands switch to --attention sdpa.  And where what
    # runs here already fits (LoRA bf16 on a 64 GB Mac instead of QLoRA), "LoRA rank 8" or "Shorten the sequence to
    # 2,047 tokens" on top of it was noise.
    doc = json.loads(run("qwen-7b", "--mode", "qlora", "--attention", "flash", "--profile", "t4", "--json").output)
    assert doc["alternatives"]
    for a in doc["alternatives"]:
        assert "--attention sdpa" in a["fitcheck_command"], a
        assert a["title"].startswith(("What runs here: attention sdpa", "With attention sdpa: ")), a["title"]
    assert any(a["title"].startswith("With attention sdpa: FSDP") for a in doc["alternatives"])  # acronyms kept
    mac = json.loads(run("qwen-7b", "--mode", "qlora", "--profile", "macbook-pro-m3-max-64gb", "--json").output)
    assert [a["title"] for a in mac["alternatives"]] == ["What runs here: mode lora, precision bf16"]
    assert mac["alternatives"][0]["status"] == "fits"


def test_sharding_titles_over_several_nodes_count_the_nodes():
    # "DeepSpeed ZeRO-2 across 8 GPUs — needs 41.91 GiB on each of 16 GPUs" (--nodes 2 of an 8x-h100)
    alts = json.loads(run("qwen-7b", "--mode", "full", "--profile", "8x-h100", "--nodes", "2", "--json").output)[
        "alternatives"]
    titles = [a["title"] for a in alts if a["title"].startswith(("DeepSpeed ZeRO-", "FSDP full-shard across"))]
    assert titles and all(t.endswith("across 8 GPUs × 2 nodes") for t in titles), titles


def test_a_count_typed_as_32k_means_the_same_on_the_command_line_as_at_the_prompt():
    # The interactive prompt and the option vocabulary take "128k" (131,072) and "4,096"; `--context 8k` was refused
    # by click ("'8k' is not a valid integer range").  And "-5" is a whole number out of range, not "not a number".
    doc = json.loads(run("qwen-7b", "--context", "32k", "--batch", "1,024", "--profile", "h100-sxm", "--json").output)
    assert (doc["request"]["context"], doc["request"]["batch"]) == (32768, 1024)
    where = json.loads(CliRunner().invoke(cli, ["where", "qwen-7b", "-c", "8k", "--kind", "cloud", "--json"]).output)
    assert where["request"]["context"] == 8192
    r = run("qwen-7b", "--context", "-5")
    assert r.exit_code == 2 and "--context must be between 1 and 1,073,741,824, got -5" in r.stderr, r.stderr
    r = run("qwen-7b", "--context", "1e9")
    assert r.exit_code == 2 and "--context must be a whole number, got '1e9'" in r.stderr, r.stderr
