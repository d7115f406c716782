"""Training alternatives ranked by what the user gives up: checkpointing and accumulation (speed only), the
8-bit optimizer and pure bf16, LoRA, QLoRA, then more nodes; each title saying what it gives up."""

from __future__ import annotations

import json
import shlex

from click.testing import CliRunner

from fitcheck.alternatives import COST_CHECKPOINTING, COST_QLORA, same_effective_batch
from fitcheck.cli import cli


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def alternatives(*args: str) -> list[dict]:
    r = run(*args, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.output)["alternatives"]


def check_of(command: str) -> dict:
    return json.loads(run(*shlex.split(command)[1:], "--json").output)


def test_qlora_says_and_pays_for_the_checkpointing_its_recipe_turns_on():
    # Llama-3.1-8B LoRA on an RTX 4090: QLoRA (peft's prepare_model_for_kbit_training checkpoints) read "QLoRA:
    # LoRA on a 4-bit NF4 base" and cost the 4-bit base alone, as if it kept LoRA's speed.
    alts = alternatives("llama-3.1-8b", "--mode", "lora", "--profile", "rtx-4090")
    qlora = next(a for a in alts if "--mode qlora" in a["fitcheck_command"])
    assert "gradient checkpointing" in qlora["title"]
    assert qlora["cost"] == COST_QLORA + COST_CHECKPOINTING
    assert check_of(qlora["fitcheck_command"])["request"]["grad_checkpointing"] is True


def test_no_option_gives_up_more_for_nothing():
    # The same machine: 8-bit AdamW, paged 8-bit AdamW, LoRA rank 8 and 4, each with gradient checkpointing and
    # still tight (21.8–22.0 GiB), were listed beside gradient checkpointing alone, tight at 22.2 GiB.
    alts = alternatives("llama-3.1-8b", "--mode", "lora", "--profile", "rtx-4090")
    assert "--grad-checkpointing" in alts[0]["fitcheck_command"] and alts[0]["status"] == "tight"
    flags = [set(shlex.split(a["fitcheck_command"])) for a in alts]
    for a, mine in zip(alts, flags, strict=True):
        for b, theirs in zip(alts, flags, strict=True):
            if a is not b and theirs < mine:
                assert a["status"] == "fits" and b["status"] == "tight", (a["title"], b["title"])


def test_a_smaller_micro_batch_keeps_the_effective_batch_exactly():
    # Llama-3.1-8B LoRA at micro-batch 8 on an A100 40GB: QLoRA at micro-batch 5 × accumulation 2 (10 a step).
    assert same_effective_batch(5, 8) == (4, 2) and same_effective_batch(7, 7) == (7, 1)
    assert same_effective_batch(6, 7) == (1, 7)
    alts = alternatives("llama-3.1-8b", "--mode", "lora", "--batch", "8", "--profile", "a100-40gb")
    accumulated = [check_of(a["fitcheck_command"])["request"] for a in alts if "--grad-accum" in a["fitcheck_command"]]
    assert accumulated and all(r["batch"] * r["grad_accum"] == 8 for r in accumulated)


def test_more_nodes_with_checkpointing_where_that_needs_far_fewer():
    # Qwen2.5-7B full fine-tuning at micro-batch 8 on one H100: FSDP over dozens of nodes (the activations are
    # not sharded) instead of 4 with gradient checkpointing.  (At micro-batch 4 pure bf16 with checkpointing
    # runs on the one GPU, tight, and single-GPU steps fill the list.)
    alts = alternatives("qwen-7b", "--mode", "full", "--batch", "8", "--profile", "h100-sxm")
    fsdp = next(a for a in alts if "--fsdp full-shard" in a["fitcheck_command"] and "--nodes" in a["fitcheck_command"])
    args = shlex.split(fsdp["fitcheck_command"])
    assert int(args[args.index("--nodes") + 1]) <= 4 and "--grad-checkpointing" in args


def test_full_fine_tuning_gives_up_speed_then_precision_then_what_is_trained_then_more_nodes():
    alts = alternatives("qwen-7b", "--mode", "full", "--profile", "a100-80gb")
    commands = [a["fitcheck_command"] for a in alts]
    first = shlex.split(commands[0])
    assert "--mode" in first and first[first.index("--mode") + 1] == "full"
    # pure bf16 alone runs, tight (precision given up, no speed); checkpointing comes with it where more is needed
    assert "--master-weights" in first or "--grad-checkpointing" in first
    order = [next(i for i, c in enumerate(commands) if needle in c)
             for needle in ("--grad-checkpointing", "--mode lora", "--mode qlora", "--nodes")]
    assert order == sorted(order) and order[1] > 0
